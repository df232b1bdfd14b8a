"""Upstream's released operator and ours on the same MPIJobs, step by step; every difference in the
children and the status must be an entry of docs/differences.yaml, and every entry must be observed.

Step ids (the `steps` patterns of the list match them): `inputs/running`, `pending/pending`,
`lifecycle/running`, `lifecycle/succeeded`, `worker-failed/running`, `worker-failed/worker-failed`,
`launcher-retries/failed`, `suspend/suspended`, `suspend/resumed`, `child-deleted/running`,
`child-deleted/recreated`.
"""

from __future__ import annotations

import contextlib
import copy
import os
from collections.abc import Iterator
from typing import Any

import pytest

from localcluster.e2e import HOLD, KNOB
from localcluster.jobs import pi_job
from reconcile.mpijob.kinds import MPIJOB
from reconcile.runtime.kube import CONFIGMAP, POD
from tests.oracle.inputs import all_inputs
from tests.oracle.support import DUMP_ENV, Oracle, has_condition, pods, running

pytestmark = [pytest.mark.oracle, pytest.mark.l2]

WORKERS = 2


def pi(name: str, *, launcher_annotations: dict[str, str] | None = None, **run_policy: Any) -> dict[str, Any]:
    """Upstream's pi example (examples/pi.yaml, the golden case openmpi-pi) with 2 workers, as `name`."""
    return pi_job(name, workers=WORKERS, launcher_annotations=launcher_annotations, run_policy=run_policy)


@contextlib.contextmanager
def submitted(oracle: Oracle, job: dict[str, Any]) -> Iterator[str]:
    """The job created on both sides (the API server must accept it), deleted from both afterwards."""
    refused = oracle.submit(job)
    assert not refused, f"the API server refused {job['metadata']['name']}: {refused}"
    name = str(job["metadata"]["name"])
    try:
        yield name
    finally:
        oracle.cleanup([name])


def test_inputs(oracle: Oracle) -> None:
    """Every input created on both sides (launchers held Running so the children stay): the same objects
    once both settle. An input the API server refuses must be refused on both sides alike."""
    inputs = all_inputs()
    jobs = []
    refusals = {}
    for name, job in inputs.items():
        job = copy.deepcopy(job)
        launcher = (job.get("spec", {}).get("mpiReplicaSpecs") or {}).get("Launcher") or {}
        if isinstance(launcher.get("template"), dict):
            launcher["template"].setdefault("metadata", {}).setdefault("annotations", {}).update(HOLD)
        refused = oracle.submit(job)
        if refused:
            refusals[name] = refused
        else:
            jobs.append(name)
    # Alike: both sides, the same status code (the server lists the schema's errors in no fixed order).
    one_sided = {
        n: r for n, r in refusals.items() if len(r) != 2 or len({m.split(":")[0] for m in r.values()}) != 1
    }
    assert not one_sided, f"refused differently on the two sides: {one_sided}"
    assert len(jobs) >= len(inputs) - 2, f"most inputs must be accepted; refused: {sorted(refusals)}"
    try:
        oracle.step("inputs/running", jobs, timeout=240)
    finally:
        oracle.cleanup(jobs)


def test_pending(oracle: Oracle) -> None:
    """Pods that cannot be scheduled (no node has the label) stay Pending on both sides."""
    job = pi("pending")
    for role in ("Launcher", "Worker"):
        job["spec"]["mpiReplicaSpecs"][role]["template"]["spec"]["nodeSelector"] = {
            "oracle.mpijob.dev/none": "x"
        }
    with submitted(oracle, job) as name:
        oracle.step(
            "pending/pending",
            [name],
            lambda s: len(pods(s, name, "worker")) == WORKERS and bool(pods(s, name, "launcher")),
        )


def test_lifecycle(oracle: Oracle) -> None:
    """All running (launcher held), then the launcher succeeds."""
    with submitted(oracle, pi("life", launcher_annotations=HOLD)) as name:
        oracle.step("lifecycle/running", [name], lambda s: running(s, name, WORKERS))
        assert oracle.patch_pods(name, "launcher", {"metadata": {"annotations": {f"{KNOB}hold": None}}}) == 2
        oracle.step("lifecycle/succeeded", [name], lambda s: has_condition(s, name, "Succeeded"))


def test_worker_failed(oracle: Oracle) -> None:
    """A worker's containers exit 1 while the job runs."""
    with submitted(oracle, pi("wfail", launcher_annotations=HOLD)) as name:
        oracle.step("worker-failed/running", [name], lambda s: running(s, name, WORKERS))
        fail = {"metadata": {"annotations": {f"{KNOB}exit-code": "1"}}}
        assert oracle.patch_pods(name, "worker", fail, names=[f"{name}-worker-0"]) == 2
        oracle.step("worker-failed/worker-failed", [name])


def test_launcher_retries(oracle: Oracle) -> None:
    """Every launcher pod exits 1; backoffLimit 1: one retry, then the job fails."""
    failing = pi("lfail", launcher_annotations={f"{KNOB}exit-code": "1"}, backoffLimit=1)
    with submitted(oracle, failing) as name:
        oracle.step(
            "launcher-retries/failed", [name], lambda s: has_condition(s, name, "Failed"), timeout=120
        )


def test_suspend_resume(oracle: Oracle) -> None:
    """Created suspended, then resumed."""
    with submitted(oracle, pi("susp", launcher_annotations=HOLD, suspend=True)) as name:
        oracle.step("suspend/suspended", [name], lambda s: has_condition(s, name, "Suspended"))
        oracle.patch(MPIJOB, name, {"spec": {"runPolicy": {"suspend": False}}})
        oracle.step("suspend/resumed", [name], lambda s: running(s, name, WORKERS))


def test_child_deleted(oracle: Oracle) -> None:
    """The ConfigMap and a worker pod deleted by hand while the job runs."""
    with submitted(oracle, pi("deleted", launcher_annotations=HOLD)) as name:
        oracle.step("child-deleted/running", [name], lambda s: running(s, name, WORKERS))
        oracle.delete(CONFIGMAP, f"{name}-config")
        oracle.delete(POD, f"{name}-worker-1")
        oracle.step(
            "child-deleted/recreated",
            [name],
            lambda s: ("ConfigMap", f"{name}-config") in s and running(s, name, WORKERS),
        )


def test_no_stale_entries(oracle: Oracle) -> None:
    """Runs last: an entry naming a step that ran, which no difference matched, is stale."""
    assert not os.environ.get(DUMP_ENV), f"{DUMP_ENV} is set: the steps compared nothing against the list"
    stale = oracle.ledger.stale()
    assert not stale, (
        "docs/differences.yaml entries no step observed (stale; remove or fix them):\n"
        + "\n".join(f"  {e.id}: {list(e.kinds)} {list(e.paths)} at {list(e.steps)}" for e in stale)
    )
