"""Kueue's eviction without Kueue, end to end: a job admitted on a flavor with a nodeSelector and a
toleration (merged into its templates in the same patch that unsuspends it) runs, then is suspended
with both removed in one patch, as Kueue does on preemption or a pods-ready timeout.

Before the engine's fix the apply that suspends the launcher Job asked server-side apply to remove the
nodeSelector and toleration from its (immutable) template: 422 on every retry, the launcher kept running
and Kueue never got its quota back.
"""

from __future__ import annotations

import re

import pytest

from localcluster.e2e import E2E, HOLD, name_of, phase, pod_ready
from localcluster.jobs import pi_job
from reconcile.runtime.kube import JOB
from tests.e2e.support import labelled_node

pytestmark = pytest.mark.l2

FLAVOR = "mpijob.dev/e2e-flavor"
# Bounded: the operator sees the patch within a watch event, the Job controller deletes pods at once.
SETTLE = 30.0
# What the executor logs for a rejected write: "apply Job.batch ns/pi-launcher failed (422): ...".
REJECTED = re.compile(r"failed \(422\)|field is immutable|Unprocessable")


def flavor(value: str | None) -> dict:
    """Kueue's admission (value) or eviction (None) of both templates, as one merge patch's body."""
    toleration = [{"key": FLAVOR, "operator": "Equal", "value": value, "effect": "NoSchedule"}]
    template = {
        "spec": {
            "nodeSelector": {FLAVOR: value} if value else None,
            "tolerations": toleration if value else None,
        }
    }
    return {
        "spec": {
            "runPolicy": {"suspend": value is None},
            "mpiReplicaSpecs": {"Launcher": {"template": template}, "Worker": {"template": template}},
        }
    }


def running_on(e2e: E2E, node: str) -> bool:
    pods = [*e2e.workers("pi"), *e2e.launcher_pods("pi")]
    return (
        len(pods) == 3
        and all(p["spec"].get("nodeName") == node and phase(p) == "Running" for p in pods)
        and all(pod_ready(p) for p in e2e.workers("pi"))
    )


def test_eviction_suspends_everything_and_readmission_moves_the_job(e2e: E2E) -> None:
    log_from = e2e.operator.log_size()
    taint = [{"key": FLAVOR, "value": "a", "effect": "NoSchedule"}]
    taint_b = [{"key": FLAVOR, "value": "b", "effect": "NoSchedule"}]
    with (
        labelled_node(e2e.kube, f"a-{e2e.ns}"[:63], {FLAVOR: "a"}, taint) as node_a,
        labelled_node(e2e.kube, f"b-{e2e.ns}"[:63], {FLAVOR: "b"}, taint_b) as node_b,
    ):
        e2e.submit(pi_job(root=True, launcher_annotations=HOLD, run_policy={"suspend": True}))
        e2e.wait_condition("pi", "Suspended")

        e2e.patch("pi", flavor("a"))  # admitted on flavor a
        e2e.wait_for(lambda: running_on(e2e, node_a), f"launcher and workers running on {node_a}", job="pi")
        e2e.wait_condition("pi", "Running")

        e2e.patch("pi", flavor(None))  # evicted: suspend, directives removed, in one patch
        e2e.wait_for(
            lambda: (e2e.find("pi-launcher", JOB) or {}).get("spec", {}).get("suspend") is True,
            "launcher Job suspended",
            SETTLE,
            "pi",
        )
        e2e.wait_for(
            lambda: not e2e.launcher_pods("pi") and not e2e.workers("pi"),
            "launcher pods and workers gone",
            SETTLE,
            "pi",
        )

        def all_inactive() -> bool:
            replicas = (e2e.get("pi").get("status") or {}).get("replicaStatuses") or {}
            return bool(replicas) and all(r.get("active", 0) == 0 for r in replicas.values())

        e2e.wait_for(all_inactive, "every replicaStatuses[*].active == 0", SETTLE, "pi")
        e2e.wait_condition("pi", "Suspended", timeout=SETTLE)
        log = e2e.operator.log_since(log_from, limit=10**7)
        assert not REJECTED.search(log), log[-4000:]

        e2e.patch("pi", flavor("b"))  # re-admitted on flavor b
        e2e.wait_for(lambda: running_on(e2e, node_b), f"launcher and workers running on {node_b}", job="pi")
        launcher = e2e.get("pi-launcher", JOB)
        assert launcher["spec"]["template"]["spec"]["nodeSelector"] == {FLAVOR: "b"}
        assert [name_of(p) for p in e2e.workers("pi")] == ["pi-worker-0", "pi-worker-1"]
        log = e2e.operator.log_since(log_from, limit=10**7)
        assert not REJECTED.search(log), log[-4000:]
