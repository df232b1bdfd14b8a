"""Kueue admits, Kubernetes' own scheduler gangs: with `--gang-scheduling=kubernetes`, two jobs whose
quota fits but whose workers do not fit the flavor's nodes together are never partly placed (checked from
every pod event); the second waits whole and runs after the first.

Pool a has 2 nodes of 8 CPUs; a job's 3 workers request 3 CPUs each (2 fit a node), its launcher 0.1.
"""

from __future__ import annotations

import pytest

from localcluster.e2e import conditions
from render.gang import GANG_SCHEDULED, REASON_SCHEDULED
from tests.e2e.support import Placements, wait_unschedulable
from tests.kueue.support import KueueE2E, queued_job

pytestmark = [pytest.mark.l2, pytest.mark.kueue, pytest.mark.gang]


def gang_job(name: str) -> dict:
    job = queued_job(name, workers=3, cpu="3", launcherCreationPolicy="WaitForWorkersReady")
    launcher = job["spec"]["mpiReplicaSpecs"]["Launcher"]["template"]["spec"]["containers"][0]
    launcher["resources"] = {"requests": {"cpu": "100m"}}
    return job


def test_admitted_jobs_are_never_partly_placed(kq: KueueE2E) -> None:
    kq.queue([("pool-a", "20")])  # room in the quota for both jobs, not on the nodes
    with (
        kq.operator.with_flags("--gang-scheduling=kubernetes"),
        Placements(kq.kube, kq.ns, {"a": 3, "b": 3}) as seen,
    ):
        kq.submit(gang_job("a"))
        kq.wait_admitted("a", "pool-a")
        kq.wait_running("a")
        kq.submit(gang_job("b"))
        kq.wait_admitted("b", "pool-a")  # Kueue admits it: the quota has room
        wait_unschedulable(kq, "b", 2)  # the nodes have room for one of its workers
        kq.release_launcher("a")
        kq.wait_condition("a", "Succeeded")
        kq.wait_running("b")
        kq.release_launcher("b")
        kq.wait_condition("b", "Succeeded")
    assert seen.violations == [], "\n".join(seen.violations)
    assert seen.bound_ever == {job: {f"{job}-worker-{i}" for i in range(3)} for job in ("a", "b")}
    gang = conditions(kq.get("b")).get(GANG_SCHEDULED)
    assert gang is not None and (gang["status"], gang["reason"]) == ("True", REASON_SCHEDULED), kq.describe(
        "b"
    )
