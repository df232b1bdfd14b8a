"""Admission and quota: Kueue's webhook suspends the MPIJob created unsuspended, admission runs it to
Succeeded with the Workload Finished and the quota released; three jobs with quota for one run one at a
time, in order, the waiting ones with no pods."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from localcluster.e2e import condition_is
from tests.kueue.support import KueueE2E, active_replicas, queued_job, suspended

pytestmark = [pytest.mark.l2, pytest.mark.kueue]


def test_admission_runs_the_job_to_succeeded_and_finishes_the_workload(kq: KueueE2E) -> None:
    kq.queue([("plain", "10")])
    created = kq.submit(queued_job("pi"))
    # Created unsuspended: Kueue's mutating webhook (url: on loopback, our caBundle) suspended it.
    assert suspended(created), created["spec"]["runPolicy"]

    wl = kq.wait_admitted("pi", "plain")
    assert [ps["count"] for ps in wl["spec"]["podSets"]] == [1, 2]
    job = kq.wait_running("pi")
    assert not suspended(job)
    assert active_replicas(job) == {"Launcher": 1, "Worker": 2}
    kq.wait_quota(3)

    kq.release_launcher("pi")
    done = kq.wait_condition("pi", "Succeeded")
    assert done["status"]["replicaStatuses"]["Launcher"] == {"succeeded": 1}
    wl = kq.wait_workload("pi", "Finished")
    finished = next(c for c in wl["status"]["conditions"] if c["type"] == "Finished")
    assert finished["reason"] == "Succeeded", finished
    kq.wait_for(lambda: kq.used() == 0, "quota released after the job finished", timeout=30)
    kq.wait_for(lambda: not kq.workers("pi"), "workers gone (cleanPodPolicy Running)", timeout=30)


def test_quota_for_one_runs_three_jobs_one_at_a_time_in_order(kq: KueueE2E) -> None:
    kq.queue([("plain", "3")], strategy="StrictFIFO")
    names = ["first", "second", "third"]
    for name in names:
        created = datetime.fromisoformat(kq.submit(queued_job(name))["metadata"]["creationTimestamp"])
        # creation timestamps have whole seconds: the next job's comes from a later one (same clock)
        kq.wait_for(lambda c=created: datetime.now(UTC) >= c + timedelta(seconds=1), "the next second", 5)

    for i, name in enumerate(names):
        kq.wait_admitted(name, "plain")
        kq.wait_running(name)
        for waiting in names[i + 1 :]:
            assert not condition_is(kq.workload(waiting), "QuotaReserved"), waiting
            assert suspended(kq.get(waiting)), waiting
            assert kq.pods(waiting) == [], f"{waiting} has pods while it waits"
        kq.wait_quota(3)
        kq.release_launcher(name)
        kq.wait_condition(name, "Succeeded")
        kq.wait_workload(name, "Finished")
    kq.wait_for(lambda: kq.used() == 0, "quota released after the last job", timeout=30)
