"""Flavors with node labels and a taint: Kueue injects the flavor's nodeSelector and tolerations at
admission and our pods land on the flavor's nodes; a deactivated job stops (pods gone, active 0, quota
released) and, re-activated while its first flavor is taken, is re-admitted on the next one and runs there.
"""

from __future__ import annotations

import pytest

from localcluster.e2e import condition_is
from reconcile.runtime.kube import JOB
from tests.kueue.support import POOL, KueueE2E, queued_job, suspended

pytestmark = [pytest.mark.l2, pytest.mark.kueue]


def toleration(pool: str) -> dict[str, str]:
    return {"key": POOL, "operator": "Equal", "value": pool, "effect": "NoSchedule"}


def assert_on_pool(kq: KueueE2E, job: str, pool: str) -> None:
    nodes = kq.nodes_of(job)
    assert len(nodes) == 3, nodes
    assert all(n.startswith(f"pool-{pool}-") for n in nodes.values()), nodes
    launcher = kq.get(f"{job}-launcher", JOB)["spec"]["template"]["spec"]
    assert launcher["nodeSelector"] == {POOL: pool}, launcher.get("nodeSelector")
    assert toleration(pool) in launcher["tolerations"]


def test_flavor_with_node_labels_and_taint_places_every_pod_on_its_nodes(kq: KueueE2E) -> None:
    kq.queue([("pool-a", "10")])
    kq.submit(queued_job("pi"))
    kq.wait_admitted("pi", "pool-a")
    job = kq.wait_running("pi")
    for role in ("Launcher", "Worker"):
        tmpl = job["spec"]["mpiReplicaSpecs"][role]["template"]["spec"]
        assert tmpl["nodeSelector"] == {POOL: "a"}, role
        assert toleration("a") in tmpl["tolerations"], role
    assert_on_pool(kq, "pi", "a")
    for pod in kq.pods("pi"):
        assert pod["spec"]["nodeSelector"] == {POOL: "a"}
        assert toleration("a") in pod["spec"]["tolerations"]

    kq.release_launcher("pi")
    kq.wait_condition("pi", "Succeeded")
    kq.wait_workload("pi", "Finished")
    kq.wait_for(lambda: kq.used() == 0, "quota released", timeout=30)


def test_deactivated_job_stops_then_is_readmitted_on_another_flavor(kq: KueueE2E) -> None:
    kq.queue([("pool-a", "3"), ("pool-b", "3")])
    kq.submit(queued_job("first"))
    kq.wait_admitted("first", "pool-a")
    kq.wait_running("first")
    assert_on_pool(kq, "first", "a")

    kq.set_active("first", False)
    stopped = kq.wait_stopped("first", timeout=30)
    # Kueue restored the templates it had changed: no nodeSelector, no toleration of pool a.
    for role in ("Launcher", "Worker"):
        tmpl = stopped["spec"]["mpiReplicaSpecs"][role]["template"]["spec"]
        assert not tmpl.get("nodeSelector"), role
        assert toleration("a") not in (tmpl.get("tolerations") or []), role
    assert condition_is(stopped, "Suspended")
    kq.wait_for(lambda: kq.usage().get("pool-a", 0) == 0, "pool-a quota released", timeout=30)
    assert not condition_is(kq.workload("first"), "QuotaReserved")

    kq.submit(queued_job("second"))
    kq.wait_admitted("second", "pool-a")
    kq.wait_running("second")
    assert_on_pool(kq, "second", "a")
    assert suspended(kq.get("first")) and not kq.pods("first")

    kq.set_active("first", True)
    kq.wait_admitted("first", "pool-b")
    resumed = kq.wait_running("first")
    assert not condition_is(resumed, "Suspended")
    assert_on_pool(kq, "first", "b")

    for name in ("first", "second"):
        kq.release_launcher(name)
        kq.wait_condition(name, "Succeeded")
        kq.wait_workload(name, "Finished")
    kq.wait_for(lambda: kq.used() == 0, "quota released", timeout=30)
    assert "failed (422)" not in kq.operator.log_since(kq.op_offset)  # the executor's line for a 422
