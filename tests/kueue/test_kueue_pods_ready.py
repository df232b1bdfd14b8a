"""The Running contract under Kueue's waitForPodsReady (on by default from Kueue v0.19), measured.

Kueue reads an MPIJob's PodsReady from its `Running` condition. So: Running=True must follow the last pod
running closely; a lost worker must take it away at once (Restarting=True, with the reason) and give it
back once the replacement runs, all within Kueue's recovery timeout; and a job that cannot start within
Kueue's timeout is evicted, requeued, admitted again and then runs to the end with no pod of its first
try left behind.

This module runs its own L2 cluster and Kueue (with waitForPodsReady, short timeouts), as the tier's
shared Kueue has it off. Latencies come from the objects' timestamps (whole seconds: the kubelet's, here
kwok's, and the operator's) and, finer, from this test's polling clock (every 50 ms). They are printed and
checked against the contract plus the timestamps' one-second resolution and a one-second margin for a
loaded 2-core machine; docs/metrics-phases.md records measured figures.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from datetime import datetime
from typing import Any

import pytest

from localcluster import ClusterSpec, LocalCluster
from localcluster.e2e import KNOB, condition_is, name_of, phase, running_with_base
from localcluster.kueue import Kueue, KueueSpec
from localcluster.nodes import fake_node
from localcluster.operator import OperatorRunner
from localcluster.wait import wait_for
from reconcile.runtime.kube import EVENT, JOB, POD
from render.phases import pod_running_start
from render.timeutil import parse_time
from tests.kueue.support import (
    KUEUE_API,
    POOL,
    RESOURCE_FLAVOR,
    KueueE2E,
    Timeline,
    queued_job,
    running_kueue,
)
from tests.utils import Versions, operator_for, seconds_between, skip_without_cluster

pytestmark = [pytest.mark.l2, pytest.mark.kueue]

PODS_READY_TIMEOUT = 20  # s: an admitted job not Running by then is evicted
RECOVERY_TIMEOUT = 60  # s: a job whose Running went away must have it back by then
KUEUE_CONFIG = {
    "waitForPodsReady": {
        "timeout": f"{PODS_READY_TIMEOUT}s",
        "recoveryTimeout": f"{RECOVERY_TIMEOUT}s",
        "blockAdmission": False,
        # requeued 1-2 s after an eviction (the default base is 60 s)
        "requeuingStrategy": {"timestamp": "Eviction", "backoffBaseSeconds": 1, "backoffMaxSeconds": 2},
    }
}
# Read from the objects' timestamps (when the test saw it is printed, never asserted): the contract (1 s),
# the timestamps' whole seconds (1 s), a loaded machine (1 s).
BOUND = 3.0
FAST_POLL = 0.05
LATE = "late"  # a flavor whose node does not exist until the test adds it


# -- this module's cluster, Kueue and operator ------------------------------------------------------------
@pytest.fixture(scope="module")
def kueue_cluster(request: pytest.FixtureRequest) -> Iterator[LocalCluster]:
    skip_without_cluster(request.config)
    with running_with_base(LocalCluster(ClusterSpec(tier="l2", nodes=2))) as cluster:
        yield cluster


@pytest.fixture(scope="module")
def kueue(kueue_cluster: LocalCluster) -> Iterator[Kueue]:
    flavors = []
    for name, labels in (("plain", {}), (LATE, {POOL: LATE})):
        flavor = {"apiVersion": KUEUE_API, "kind": "ResourceFlavor", "metadata": {"name": name}}
        flavor["spec"] = {"nodeLabels": labels} if labels else {}
        flavors.append((RESOURCE_FLAVOR, flavor))
    with running_kueue(kueue_cluster, flavors, KueueSpec(config=KUEUE_CONFIG)) as kq:
        yield kq


@pytest.fixture(scope="module")
def operator(
    kueue_cluster: LocalCluster, kueue: Kueue, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[OperatorRunner]:
    yield from operator_for(kueue_cluster, tmp_path_factory)


# -- measuring ------------------------------------------------------------------------------------------
def ltt(obj: dict[str, Any] | None, ctype: str, status: str = "True") -> datetime | None:
    for c in ((obj or {}).get("status") or {}).get("conditions") or []:
        if c.get("type") == ctype and c.get("status") == status:
            return parse_time(c.get("lastTransitionTime"))
    return None


def reason(obj: dict[str, Any] | None, ctype: str) -> str:
    for c in ((obj or {}).get("status") or {}).get("conditions") or []:
        if c.get("type") == ctype:
            return str(c.get("reason") or "")
    return ""


def until(check: Callable[[], Any], what: str, timeout: float, kq: KueueE2E, job: str) -> tuple[Any, float]:
    """(check's first truthy value, the monotonic time it was seen), polling every FAST_POLL."""
    got = wait_for(check, what, timeout, FAST_POLL, describe=lambda: kq.describe(job))
    return got, time.monotonic()


def live_pods(kq: KueueE2E, job: str) -> list[dict[str, Any]]:
    return [p for p in kq.pods(job) if not p["metadata"].get("deletionTimestamp")]


def all_running(kq: KueueE2E, job: str, workers: int) -> list[dict[str, Any]] | None:
    pods = live_pods(kq, job)
    running = [p for p in pods if phase(p) == "Running"]
    launchers = [
        p for p in running if p["metadata"]["labels"].get("training.kubeflow.org/job-role") == "launcher"
    ]
    return running if len(running) == workers + 1 and len(launchers) == 1 else None


def phase_counts(op: OperatorRunner) -> dict[str, float]:
    out = {}
    for (name, labels), value in op.metrics().items():
        if name == "mpi_operator_job_phase_seconds_count":
            out[dict(labels)["phase"]] = value
        elif name == "mpi_operator_job_duration_seconds_count":
            out["duration:" + dict(labels)["outcome"]] = value
    return out


def delta(before: dict[str, float], after: dict[str, float]) -> dict[str, float]:
    return {k: after.get(k, 0) - before.get(k, 0) for k in after if after.get(k, 0) != before.get(k, 0)}


def running_after_pods(
    kq: KueueE2E, tl: Timeline, pods_what: str, pods_mark: str, running_what: str
) -> tuple[dict[str, Any], float, float]:
    """Until every pod of "pi" runs, then until the job is Running=True, each marked on `tl`: the job,
    the seconds from the last pod's start to Running=True (their timestamps), and the seconds between
    seeing the one and the other."""
    pods, pods_seen = until(lambda: all_running(kq, "pi", 2), pods_what, 60, kq, "pi")
    tl.mark(f"{pods_mark} (seen)")
    job, running_seen = until(
        lambda: condition_is(m := kq.get("pi"), "Running") and m, running_what, 30, kq, "pi"
    )
    tl.mark(f"{running_what} (seen)")
    last_pod = max(t for p in pods if (t := pod_running_start(p)) is not None)
    return job, seconds_between(last_pod, ltt(job, "Running")), running_seen - pods_seen


# -- the contract -----------------------------------------------------------------------------------------
def test_running_follows_the_pods_and_a_lost_worker(kq: KueueE2E) -> None:
    kq.queue([("plain", "10")])
    before = phase_counts(kq.operator)
    tl = Timeline()
    kq.submit(queued_job("pi"))
    kq.wait_admitted("pi", "plain")
    tl.mark("admitted")

    # 1. Running=True after the last pod runs.
    job, up, seen = running_after_pods(kq, tl, "every pod Running", "every pod Running", "Running=True")
    figures = [f"Running=True {up:.0f} s after the last pod's start (timestamps), seen {seen:.2f} s later"]
    assert -1 <= up <= BOUND
    wl = kq.wait_workload("pi", "PodsReady", timeout=30)
    kueue_up = seconds_between(ltt(job, "Running"), ltt(wl, "PodsReady"))
    figures.append(f"Workload PodsReady=True {kueue_up:.0f} s after Running=True")

    # 2. A worker is lost (evicted the kubelet's way): Running goes, with a reason, and comes back.
    with Versions(kq.cluster, kq.ns, ("Pod",), listed=True) as pods:
        kq.patch("pi-worker-1", {"metadata": {"annotations": {f"{KNOB}evict": "true"}}}, POD)
        failed = lambda: next((p for p in pods.of("Pod", "pi-worker-1") if phase(p) == "Failed"), None)  # noqa: E731
        lost, lost_seen = until(failed, "pi-worker-1 Failed", 30, kq, "pi")
    tl.mark("worker lost (seen)")
    job, down_seen = until(
        lambda: not condition_is(m := kq.get("pi"), "Running") and m, "Running no longer True", 30, kq, "pi"
    )
    tl.mark("Running no longer True (seen)")
    assert condition_is(job, "Restarting") and reason(job, "Restarting") == "MPIJobEvicted", job["status"]
    # Running is not kept False beside Restarting (upstream's conditions replace each other): Kueue reads
    # "no Running=True" as not ready either way.
    running = [c for c in job["status"]["conditions"] if c["type"] == "Running"]
    assert all(c["status"] != "True" for c in running)
    lost_at = ltt(lost, "DisruptionTarget")
    down = seconds_between(lost_at, ltt(job, "Restarting"))
    seen = down_seen - lost_seen
    figures.append(
        f"Restarting=True {down:.0f} s after the worker failed (timestamps), seen {seen:.2f} s later"
    )
    assert -1 <= down <= BOUND
    wl = kq.wait_for(
        lambda: (w := kq.workload("pi")) and ltt(w, "PodsReady", "False") and w, "PodsReady=False", 30, "pi"
    )
    kueue_down = seconds_between(ltt(job, "Restarting"), ltt(wl, "PodsReady", "False"))
    figures.append(
        f"Workload PodsReady=False ({reason(wl, 'PodsReady')}) {kueue_down:.0f} s after Restarting"
    )

    job, back, seen = running_after_pods(
        kq, tl, "the replacement Running", "replacement Running", "Running=True again"
    )
    figures.append(f"Running=True again {back:.0f} s after the replacement's start, seen {seen:.2f} s later")
    assert -1 <= back <= BOUND
    wl = kq.wait_workload("pi", "PodsReady", timeout=30)
    assert not condition_is(wl, "Evicted"), wl["status"]  # recovered well within the recovery timeout

    kq.release_launcher("pi")
    kq.wait_condition("pi", "Succeeded")
    kq.wait_workload("pi", "Finished")
    print("\n" + "\n".join(figures) + f"\ntimeline:\n{tl}")

    # The restart did not count a second start-up: one sample per phase for this job.
    got = delta(before, phase_counts(kq.operator))
    assert got.get("created") == 1 and got.get("workers_running") == 1 and got.get("launcher_running") == 1, (
        got
    )
    assert got.get("finished") == 1 and got.get("duration:Succeeded") == 1, got
    # The first MPIJobRunning event says the start-up's durations; the one after the recovery does not.
    running = [
        e.get("message", "")
        for e in kq.kube.list(EVENT, kq.ns)["items"]
        if e.get("reason") == "MPIJobRunning"
    ]
    assert any(". All 2 workers were running " in m for m in running), running


def test_a_job_that_cannot_start_is_evicted_requeued_and_then_runs(kq: KueueE2E) -> None:
    kq.queue([(LATE, "10")])
    before = phase_counts(kq.operator)
    tl = Timeline()
    created = kq.submit(queued_job("slow"))
    uid = created["metadata"]["uid"]
    first = kq.wait_admitted("slow", LATE)
    tl.mark("admitted (no node has the flavor's label)")
    kq.wait_for(lambda: len(kq.pods("slow")) == 3, "the first try's pods (Pending)", 30, "slow")
    first_pods = {p["metadata"]["uid"] for p in kq.pods("slow")}
    assert all(phase(p) == "Pending" for p in kq.pods("slow"))

    wl = kq.wait_for(
        lambda: (w := kq.workload("slow")) and condition_is(w, "Evicted") and w,
        "evicted for PodsReady timeout",
        PODS_READY_TIMEOUT + 40,
        "slow",
    )
    tl.mark(f"evicted ({reason(wl, 'Evicted')})")
    assert reason(wl, "Evicted") == "PodsReadyTimeout", wl["status"]
    waited = seconds_between(ltt(first, "Admitted"), ltt(wl, "Evicted"))
    print(f"\nevicted {waited:.0f} s after admission (timeout {PODS_READY_TIMEOUT} s)")
    assert PODS_READY_TIMEOUT <= waited <= PODS_READY_TIMEOUT + 15
    evicted_at = ltt(wl, "Evicted")
    assert evicted_at is not None

    def suspended_by_eviction() -> bool:
        m = kq.get("slow")
        resumed = ltt(m, "Suspended", "False")
        return condition_is(m, "Suspended") or (resumed is not None and resumed >= evicted_at)

    kq.wait_for(suspended_by_eviction, "the MPIJob suspended by the eviction", 30, "slow")
    tl.mark("suspended")
    requeued = kq.wait_for(
        lambda: (
            (w := kq.workload("slow")) and ((w.get("status") or {}).get("requeueState") or {}).get("count")
        ),
        "the Workload requeued (requeueState.count)",
        30,
        "slow",
    )
    assert requeued >= 1
    tl.mark(f"requeued (count {requeued})")

    kq.cluster.add_nodes([fake_node("late-0", labels={POOL: LATE})])
    tl.mark("node late-0 added")

    def admitted_again() -> dict[str, Any] | None:
        w = kq.workload("slow")
        at = ltt(w, "Admitted")
        return w if at is not None and at >= evicted_at else None

    kq.wait_for(admitted_again, "admitted again", 60, "slow")
    tl.mark("admitted again")
    kq.wait_running("slow", timeout=60)
    tl.mark("running")
    kq.release_launcher("slow")
    kq.wait_condition("slow", "Succeeded")
    kq.wait_workload("slow", "Finished")
    tl.mark("Succeeded")
    print(f"timeline:\n{tl}")

    # No pod of the first try is left, and every pod left belongs to the job or its launcher Job.
    launcher = kq.find("slow-launcher", JOB)
    owners = {uid} | ({launcher["metadata"]["uid"]} if launcher else set())
    pods = kq.list(POD)
    assert not [name_of(p) for p in pods if p["metadata"]["uid"] in first_pods]
    for p in pods:
        refs = [r["uid"] for r in p["metadata"].get("ownerReferences") or [] if r.get("controller")]
        assert refs and refs[0] in owners, (name_of(p), refs)

    got = delta(before, phase_counts(kq.operator))
    # The first try never ran: one start-up, measured from the resume after the eviction.
    assert got.get("workers_running") == 1 and got.get("duration:Succeeded") == 1, got
    assert got.get("suspended", 0) >= 1, got
