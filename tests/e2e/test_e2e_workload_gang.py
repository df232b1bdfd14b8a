"""Gang tier: `--gang-scheduling=kubernetes` with the real kube-scheduler enforcing the Workload API (its
GenericWorkload and GangScheduling gates are on in every local cluster).

The jobs' workers run on two kwok nodes of 2 CPUs kept for this module (tainted, selected by label); a
worker requests 1 CPU, so a gang of 3 needs more than half of the 4 CPUs. Placements are checked from
every pod event of a watch (`Placements`), not from the end state.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import pytest

from localcluster import LocalCluster
from localcluster.e2e import E2E, HOLD, condition_is, conditions
from localcluster.jobs import pi_job
from localcluster.nodes import fake_node
from localcluster.operator import OperatorRunner
from reconcile.runtime.kube import NODE, WORKLOAD_V1ALPHA1, ApiError, Kube, Resource
from render.gang import GANG_SCHEDULED, REASON_UNSCHEDULABLE
from tests.e2e.support import Placements, wait_unschedulable

pytestmark = [pytest.mark.l2, pytest.mark.gang]

POOL = "mpijob.dev/pool"
GANG_POOL = "gang"
NODES = ("gang-0", "gang-1")
RESOURCE_QUOTA = Resource("v1", "ResourceQuota", "resourcequotas")
WORKLOAD = WORKLOAD_V1ALPHA1  # the local cluster's Kubernetes minor serves this version


@pytest.fixture(scope="module")
def gang_nodes(e2e_cluster: LocalCluster) -> Iterator[tuple[str, ...]]:
    taint = {"key": POOL, "value": GANG_POOL, "effect": "NoSchedule"}
    cap = {"cpu": "2", "memory": "8Gi", "pods": "110"}
    e2e_cluster.add_nodes([fake_node(n, cap, labels={POOL: GANG_POOL}, taints=[taint]) for n in NODES])
    try:
        yield NODES
    finally:
        with e2e_cluster.api_client() as api:
            kube = Kube(api, qps=0)
            for name in NODES:
                with contextlib.suppress(ApiError):
                    kube.delete(NODE, None, name)


@pytest.fixture
def gang_operator(operator: OperatorRunner) -> Iterator[OperatorRunner]:
    with operator.with_flags("--gang-scheduling=kubernetes") as op:
        yield op


def gang_job(name: str, workers: int, min_available: int | None = None) -> dict[str, Any]:
    """The pi job whose workers (1 CPU each) go to the gang nodes; the launcher, created once they are
    Ready, runs elsewhere and is held until the test releases it."""
    run_policy = {"schedulingPolicy": {"minAvailable": min_available}} if min_available else None
    job = pi_job(
        name,
        root=True,
        resources=False,
        workers=workers,
        launcher_annotations=dict(HOLD),
        run_policy=run_policy,
        launcherCreationPolicy="WaitForWorkersReady",
    )
    spec = job["spec"]["mpiReplicaSpecs"]["Worker"]["template"]["spec"]
    spec["containers"][0]["resources"] = {"requests": {"cpu": "1"}, "limits": {"cpu": "1"}}
    spec["nodeSelector"] = {POOL: GANG_POOL}
    spec["tolerations"] = [{"key": POOL, "operator": "Equal", "value": GANG_POOL, "effect": "NoSchedule"}]
    return job


def run_pair(e2e: E2E) -> Placements:
    """Job a takes 3 of the 4 CPUs and holds them; b (3 workers too) comes while a runs, then a ends."""
    with Placements(e2e.kube, e2e.ns, {"a": 3, "b": 3}) as seen:
        e2e.submit(gang_job("a", 3))
        e2e.wait_condition("a", "Running")
        e2e.submit(gang_job("b", 3))
        wait_unschedulable(e2e, "b", 2)  # 1 CPU left: at most one of b's workers fits
        e2e.release_launcher("a")
        assert condition_is(e2e.wait_finished("a"), "Succeeded"), e2e.describe("a")
        e2e.wait_condition("b", "Running")
        e2e.release_launcher("b")
        assert condition_is(e2e.wait_finished("b"), "Succeeded"), e2e.describe("b")
    assert seen.bound_ever == {
        "a": {f"a-worker-{i}" for i in range(3)},
        "b": {f"b-worker-{i}" for i in range(3)},
    }
    return seen


def test_gang_never_partly_placed(
    e2e: E2E, gang_nodes: tuple[str, ...], gang_operator: OperatorRunner
) -> None:
    seen = run_pair(e2e)
    assert seen.violations == [], "\n".join(seen.violations)
    workload = e2e.find("b", WORKLOAD)
    assert workload is None  # cleaned up with the workers after b finished
    b = e2e.get("b")
    gang = conditions(b).get(GANG_SCHEDULED)
    # b waited for room: the scheduler's words were on the job, then it was placed whole
    assert gang is not None and (gang["status"], gang["reason"]) == ("True", "GangScheduled"), e2e.describe(
        "b"
    )


def test_without_gang_scheduling_the_pair_is_partly_placed(e2e: E2E, gang_nodes: tuple[str, ...]) -> None:
    """The same pair with gang scheduling off: b gets one worker while a holds the rest (the scenario
    bites, so the gang test above can fail)."""
    seen = run_pair(e2e)
    assert any(v.startswith("after event b-worker") for v in seen.violations), seen.violations
    assert e2e.find("a", WORKLOAD) is None and GANG_SCHEDULED not in conditions(e2e.get("b"))


def test_min_available_lets_part_of_the_gang_start(
    e2e: E2E, gang_nodes: tuple[str, ...], gang_operator: OperatorRunner
) -> None:
    """5 workers, minAvailable 3, 4 CPUs: the gang's quorum is met, 4 workers are placed, the fifth waits."""
    with Placements(e2e.kube, e2e.ns, {"m": 5}) as seen:
        e2e.submit(gang_job("m", 5, min_available=3))
        workload = e2e.wait_for(lambda: e2e.find("m", WORKLOAD), "Workload m", job="m")
        assert workload["spec"]["podGroups"] == [{"name": "workers", "policy": {"gang": {"minCount": 3}}}]
        wait_unschedulable(e2e, "m", 1)
        e2e.wait_for(lambda: seen.bound("m") == 4, "4 of m's workers bound", job="m")
        e2e.delete("m")
        e2e.wait_gone("m")


def test_gang_larger_than_the_cluster_binds_nothing_and_says_why(
    e2e: E2E, gang_nodes: tuple[str, ...], gang_operator: OperatorRunner
) -> None:
    with Placements(e2e.kube, e2e.ns, {"big": 5}) as seen:
        e2e.submit(gang_job("big", 5))
        job = e2e.wait_condition("big", GANG_SCHEDULED, "False", timeout=90)
        gang = conditions(job)[GANG_SCHEDULED]
        assert gang["reason"] == REASON_UNSCHEDULABLE, gang
        assert "at least 5 of 5 workers" in gang["message"] and "Insufficient cpu" in gang["message"], gang
        assert seen.bound_ever == {"big": set()}
        e2e.delete("big")
        e2e.wait_gone("big")
    assert seen.bound_ever == {"big": set()}


def test_where_the_scheduler_is_silent_the_job_says_why(
    e2e: E2E, gang_nodes: tuple[str, ...], gang_operator: OperatorRunner
) -> None:
    """A quota lets 2 of 3 workers exist: the scheduler holds them without a word (fewer pods than
    minCount), so the operator says it; once the quota goes, the third comes and the gang runs."""
    quota = {"apiVersion": "v1", "kind": "ResourceQuota", "metadata": {"name": "pods"}}
    quota["spec"] = {"hard": {"pods": "2"}}
    e2e.kube.create(RESOURCE_QUOTA, e2e.ns, quota)
    with Placements(e2e.kube, e2e.ns, {"q": 3}) as seen:
        e2e.submit(gang_job("q", 3))
        job = e2e.wait_condition("q", GANG_SCHEDULED, "False", timeout=90)
        gang = conditions(job)[GANG_SCHEDULED]
        assert gang["reason"] == REASON_UNSCHEDULABLE, gang
        assert "only 2 of the 3 workers the gang needs exist" in gang["message"], gang
        assert seen.bound_ever == {"q": set()}
        e2e.kube.delete(RESOURCE_QUOTA, e2e.ns, "pods")
        e2e.wait_condition("q", "Running", timeout=120)
        e2e.release_launcher("q")
        assert condition_is(e2e.wait_finished("q"), "Succeeded"), e2e.describe("q")
    assert seen.violations == [] and seen.bound_ever == {"q": {f"q-worker-{i}" for i in range(3)}}
    assert conditions(e2e.get("q"))[GANG_SCHEDULED]["reason"] == "GangScheduled"
