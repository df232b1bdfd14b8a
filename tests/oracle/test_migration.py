"""Migration in place between upstream's released operator and ours, both ways, with jobs in flight.

Upstream's binary creates the children of two running jobs; it stops and ours takes over the namespace:
the jobs finish with no child created again and no running rank disturbed. Then the way back: ours stops,
upstream returns and finishes the jobs ours started or adopted, again without creating a child twice.

Its own L2 cluster (kwok nodes), as docs/install.md's migration does it: upstream's ClusterRole for
upstream's process, the mpi-operator ServiceAccount's RBAC for ours. It runs before the tier's session
fixture starts its upstream process (upstream's health port allows one at a time on a host).
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client

from localcluster import ClusterSpec, LocalCluster, upstream
from localcluster.cluster import wait_for_default_service_account
from localcluster.e2e import HOLD, KNOB, condition_is, operator_runner, phase
from localcluster.jobs import pi_job
from localcluster.wait import wait_for
from reconcile.mpijob.kinds import MPIJOB
from reconcile.runtime.kube import CONFIGMAP, JOB, POD, SECRET, SERVICE, Kube
from tests.oracle.support import QUIET, install_both
from tests.utils import Versions

pytestmark = [pytest.mark.oracle, pytest.mark.l2]

NS = "migrating"
CHILD_KINDS = (SERVICE, CONFIGMAP, SECRET, JOB, POD)
TIMEOUT = 90.0


@pytest.fixture
def mig_cluster(tmp_path: Path) -> Iterator[LocalCluster]:
    cluster = LocalCluster(ClusterSpec(tier="l2"), work_dir=tmp_path / "cluster")
    cluster.start()
    try:
        install_both(cluster, tmp_path)
        with contextlib.closing(cluster.api_client()) as api:
            core = client.CoreV1Api(api)
            core.create_namespace({"metadata": {"name": NS}})
            wait_for_default_service_account(core, NS)
        yield cluster
    finally:
        cluster.stop()


def twice(seen: Versions) -> dict[tuple[str, str], set[str]]:
    """(kind, name) of every pod and Job that was more than one object, with their uids."""
    uids: dict[tuple[str, str], set[str]] = {}
    for v in list(seen.versions):
        uids.setdefault((v["kind"], v["metadata"]["name"]), set()).add(v["metadata"]["uid"])
    return {k: u for k, u in uids.items() if len(u) > 1}


def children(kube: Kube, job: str) -> dict[tuple[str, str], dict[str, Any]]:
    """The job's live children by (kind, name)."""
    out = {}
    for res in CHILD_KINDS:
        for obj in kube.list(res, NS)["items"]:
            name = obj["metadata"]["name"]
            if name == job or name.startswith(f"{job}-"):
                out[(res.kind, name)] = obj
    return out


def uids(objs: dict[tuple[str, str], dict[str, Any]]) -> dict[tuple[str, str], str]:
    return {k: o["metadata"]["uid"] for k, o in objs.items()}


def undisturbed(kube: Kube, job: str, before: dict[tuple[str, str], str]) -> None:
    """Every child the job had is the same object, and its pods run on, none terminating."""
    now = children(kube, job)
    assert uids(now) == before, (job, sorted(set(uids(now).items()) ^ set(before.items())))
    for (kind, name), obj in now.items():
        if kind == "Pod":
            assert phase(obj) == "Running", (name, obj["status"])
            assert not obj["metadata"].get("deletionTimestamp"), name


def running(kube: Kube, job: str, workers: int = 2) -> bool:
    pods = [o for (kind, _), o in children(kube, job).items() if kind == "Pod"]
    return (
        condition_is(kube.get(MPIJOB, NS, job), "Running")
        and len(pods) == workers + 1
        and all(phase(p) == "Running" for p in pods)
    )


def succeeded(kube: Kube, job: str) -> bool:
    return condition_is(kube.get(MPIJOB, NS, job), "Succeeded")


def release(kube: Kube, job: str) -> None:
    """Let the held launcher pod succeed (kwok)."""
    for pod in kube.list(POD, NS, labelSelector="training.kubeflow.org/job-role=launcher")["items"]:
        if pod["metadata"]["labels"].get("training.kubeflow.org/job-name") == job:
            kube.patch(POD, NS, pod["metadata"]["name"], {"metadata": {"annotations": {f"{KNOB}hold": None}}})


def settled(kube: Kube, jobs: list[str], quiet: float = QUIET) -> None:
    """Until the jobs and their children stop changing for `quiet` seconds: the operator has synced."""
    state: dict[str, Any] = {"last": None, "since": 0.0}

    def versions() -> dict[tuple[str, str], str]:
        out = {("MPIJob", j): kube.get(MPIJOB, NS, j)["metadata"]["resourceVersion"] for j in jobs}
        for j in jobs:
            out |= {k: o["metadata"]["resourceVersion"] for k, o in children(kube, j).items()}
        return out

    def quiet_now() -> bool:
        now = versions()
        if now != state["last"]:
            state["last"], state["since"] = now, time.monotonic()
            return False
        return time.monotonic() - state["since"] >= quiet

    wait_for(quiet_now, f"{jobs} settled", TIMEOUT, 0.5)


def test_upstream_to_ours_and_back_keeps_jobs_in_flight(mig_cluster: LocalCluster, tmp_path: Path) -> None:
    cluster = mig_cluster
    api = cluster.api_client()
    kube = Kube(api, qps=0)
    up_kubeconfig = cluster.write_user_kubeconfig(upstream.USER)
    theirs = upstream.UpstreamOperator(up_kubeconfig, tmp_path / "upstream.log", NS, "--kube-api-qps=100")
    ours = operator_runner(cluster, tmp_path / "ours.log")
    ours.flags = (f"--namespace={NS}",)
    with Versions(cluster, NS, ("Pod", "Job")) as seen:
        # Upstream's binary creates every child of two running jobs.
        with theirs:
            for name in ("a", "b"):
                kube.create(MPIJOB, NS, pi_job(name, launcher_annotations=HOLD))
            for name in ("a", "b"):
                wait_for(lambda n=name: running(kube, n), f"{name} Running under upstream", TIMEOUT)
            settled(kube, ["a", "b"])
        made_by_upstream = {job: uids(children(kube, job)) for job in ("a", "b")}

        # Ours takes over: nothing is created again, no rank is disturbed; a finishes.
        with ours:
            settled(kube, ["a", "b"])
            for job, before in made_by_upstream.items():
                undisturbed(kube, job, before)
            kube.create(MPIJOB, NS, pi_job("c", launcher_annotations=HOLD))
            wait_for(lambda: running(kube, "c"), "c Running under ours", TIMEOUT)
            release(kube, "a")
            wait_for(lambda: succeeded(kube, "a"), "a Succeeded under ours", TIMEOUT)
            settled(kube, ["a", "b", "c"])
            undisturbed(kube, "b", made_by_upstream["b"])
        in_flight = {job: uids(children(kube, job)) for job in ("b", "c")}

        # The way back: upstream returns and finishes what ours started or adopted.
        with theirs:
            settled(kube, ["b", "c"])
            for job, before in in_flight.items():
                undisturbed(kube, job, before)
            for job in ("b", "c"):
                release(kube, job)
            for job in ("b", "c"):
                wait_for(lambda j=job: succeeded(kube, j), f"{job} Succeeded under upstream", TIMEOUT)
        assert twice(seen) == {}, f"created twice: {twice(seen)}"
    # Every launcher Job is the one the first operator made.
    for job, before in {**made_by_upstream, **in_flight}.items():
        assert kube.get(JOB, NS, f"{job}-launcher")["metadata"]["uid"] == before[("Job", f"{job}-launcher")]
    api.close()
