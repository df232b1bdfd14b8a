"""Preemption by priority on a flavor with node labels and a taint: the high-priority job evicts the
running low one (Kueue suspends it and removes the nodeSelector and tolerations it had injected, in one
patch); the operator suspends the launcher Job, deletes every pod and reports every `active` 0, so Kueue
releases the quota, admits the high job, and re-admits the low one once the high one finished."""

from __future__ import annotations

import pytest

from localcluster.e2e import condition_is
from tests.kueue.support import POOL, KueueE2E, Timeline, queued_job, suspended

pytestmark = [pytest.mark.l2, pytest.mark.kueue]


def test_higher_priority_preempts_a_running_job_on_a_flavor_with_node_labels(kq: KueueE2E) -> None:
    kq.queue([("pool-a", "3")], preemption={"withinClusterQueue": "LowerPriority"})
    tl = Timeline()
    kq.submit(queued_job("low", priority="low"))
    kq.wait_admitted("low", "pool-a")
    kq.wait_running("low")
    tl.mark("low admitted on pool-a and Running")
    first_pods = {p["metadata"]["uid"] for p in kq.pods("low")}

    tl = Timeline()  # the measured timeline starts when the high-priority job arrives
    kq.submit(queued_job("high", priority="high"))
    tl.mark("high submitted")
    kq.wait_workload("low", "Evicted", timeout=30)
    tl.mark("low's Workload Evicted (Preempted)")
    kq.wait_for(lambda: suspended(kq.get("low")), "low suspended by Kueue", timeout=30)
    tl.mark("low suspended by Kueue, nodeSelector and tolerations removed")
    stopped = kq.wait_stopped("low", timeout=30)
    tl.mark("low stopped: launcher Job suspended, pods gone, replicaStatuses active 0")
    assert not stopped["spec"]["mpiReplicaSpecs"]["Worker"]["template"]["spec"].get("nodeSelector")
    kq.wait_admitted("high", "pool-a", timeout=30)
    tl.mark("quota released, high admitted on pool-a")
    kq.wait_running("high")
    tl.mark("high Running")
    assert all(n.startswith("pool-a-") for n in kq.nodes_of("high").values())
    assert suspended(kq.get("low")) and not kq.pods("low")
    assert not condition_is(kq.workload("low"), "QuotaReserved")

    kq.release_launcher("high")
    kq.wait_condition("high", "Succeeded")
    tl.mark("high Succeeded")
    kq.wait_admitted("low", "pool-a", timeout=30)
    tl.mark("low re-admitted on pool-a")
    job = kq.wait_running("low")
    tl.mark("low Running again")
    assert job["spec"]["mpiReplicaSpecs"]["Worker"]["template"]["spec"]["nodeSelector"] == {POOL: "a"}
    again = kq.pods("low")
    assert not first_pods & {p["metadata"]["uid"] for p in again}, "low's pods are new ones"
    assert all(n.startswith("pool-a-") for n in kq.nodes_of("low").values())

    kq.release_launcher("low")
    kq.wait_condition("low", "Succeeded")
    kq.wait_workload("low", "Finished")
    tl.mark("low Succeeded, Workload Finished")
    kq.wait_for(lambda: kq.used() == 0, "quota released", timeout=30)
    assert "failed (422)" not in kq.operator.log_since(kq.op_offset)  # the executor's line for a 422
    print(f"\npreemption timeline (pool-a, quota for one job):\n{tl}")
