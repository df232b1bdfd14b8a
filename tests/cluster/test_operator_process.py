"""L1: the operator process under crashes and with a standby replica.

* SIGKILL in the middle of reconciling several jobs, then a restart: the cluster converges to exactly the
  wanted children (no duplicates, no leftovers) and then sees no more writes.
* Two replicas with leader election: only the leader writes; on SIGTERM the leader releases the lease and
  the standby takes over within a few seconds.
"""

from __future__ import annotations

from typing import Any

import pytest

from localcluster.jobs import pi_job
from localcluster.wait import wait_for
from reconcile.mpijob.kinds import MPIJOB
from reconcile.runtime.kube import CONFIGMAP, JOB, LEASE, POD, SECRET, SERVICE, Kube
from tests.utils import api_writes, controller_uid, processed_after_nudge

JOBS = 6
WORKERS = 3


def children_by_kind(kube: Kube, ns: str) -> dict[str, list[dict[str, Any]]]:
    return {res.kind: kube.list(res, ns)["items"] for res in (SERVICE, CONFIGMAP, SECRET, POD, JOB)}


def converged(kube: Kube, ns: str, jobs: dict[str, str]) -> bool:
    """Every job has exactly its children, each controlled by it; nothing else exists."""
    got = children_by_kind(kube, ns)
    want: dict[str, set[tuple[str, str]]] = {k: set() for k in got}
    for name, uid in jobs.items():
        want["Service"].add((name, uid))
        want["ConfigMap"].add((f"{name}-config", uid))
        want["Secret"].add((f"{name}-ssh", uid))
        want["Job"].add((f"{name}-launcher", uid))
        want["Pod"] |= {(f"{name}-worker-{i}", uid) for i in range(WORKERS)}
    for kind, items in got.items():
        have = {(o["metadata"]["name"], controller_uid(o)) for o in items}
        if kind == "ConfigMap":
            have = {h for h in have if h[0] != "kube-root-ca.crt"}
        if have != want[kind]:
            return False
    return True


@pytest.mark.l1
def test_sigkill_mid_reconcile_then_restart_converges(kube, namespace, start_operator):
    # A slow client (2 requests/s) so the kill lands while the jobs are half built.
    first = start_operator("--kube-api-qps", "2", "--kube-api-burst", "2")
    jobs = {}
    for i in range(JOBS):
        obj = kube.create(MPIJOB, namespace, pi_job(f"job{i}", workers=WORKERS))
        jobs[f"job{i}"] = obj["metadata"]["uid"]
    total = JOBS * (4 + WORKERS)
    wait_for(lambda: api_writes(first) >= 5, "some writes", timeout=120)
    writes = api_writes(first)
    first.kill()
    assert 0 < writes < total, f"kill did not land mid-reconcile: {writes} of {total} writes"
    assert not converged(kube, namespace, jobs)

    second = start_operator()
    wait_for(lambda: converged(kube, namespace, jobs), "exact children after restart", timeout=90)
    for name in jobs:
        wait_for(
            lambda name=name: any(
                c["type"] == "Created" and c["status"] == "True"
                for c in (kube.get(MPIJOB, namespace, name).get("status") or {}).get("conditions") or []
            ),
            f"{name} Created",
        )
    for name in jobs:  # whatever convergence still causes is done once each job's later event is
        processed_after_nudge(kube, second, namespace, name)
    before = api_writes(second)
    for name in jobs:
        processed_after_nudge(kube, second, namespace, name)
    assert api_writes(second) == before, "writes after convergence"
    assert converged(kube, namespace, jobs)


@pytest.mark.l1
def test_two_replicas_only_the_leader_writes(kube, namespace, start_operator):
    a = start_operator(wait=False)
    b = start_operator(wait=False)
    wait_for(
        lambda: a.alive() and b.alive() and a.http("/healthz")[0] == b.http("/healthz")[0] == 200, "probes"
    )
    wait_for(lambda: a.alive() and b.alive() and (a.is_leader() or b.is_leader()), "a leader", timeout=40)
    leader, standby = (a, b) if a.is_leader() else (b, a)
    assert not standby.is_leader()
    assert standby.http("/readyz")[0] == 200  # a standby is ready (it serves nothing but could take over)
    lease = kube.get(LEASE, namespace, "mpi-operator")
    assert lease["spec"]["holderIdentity"].split("_")[0]  # <hostname>_<uuid>

    uid = kube.create(MPIJOB, namespace, pi_job("one", workers=WORKERS))["metadata"]["uid"]
    wait_for(lambda: converged(kube, namespace, {"one": uid}), "job one built")
    assert api_writes(leader) > 0
    assert api_writes(standby) == 0, "the standby wrote"

    # SIGTERM: the leader stops its workers, releases the lease, exits 0; the standby takes over at once.
    old_holder = kube.get(LEASE, namespace, "mpi-operator")["spec"]["holderIdentity"]
    assert leader.stop() == 0
    # released: free or already the standby's, long before the old holder's 15 s would have run out
    holder = kube.get(LEASE, namespace, "mpi-operator")["spec"].get("holderIdentity") or ""
    assert holder != old_holder, "the lease was not released"
    wait_for(standby.is_leader, "standby takes over", timeout=20)
    uid2 = kube.create(MPIJOB, namespace, pi_job("two", workers=WORKERS))["metadata"]["uid"]
    wait_for(lambda: converged(kube, namespace, {"one": uid, "two": uid2}), "job two built by the new leader")
    assert api_writes(standby) > 0
