"""render.phases: each start-up phase measured from the objects' timestamps, once per job, driven through
status() the way the controller's syncs see the transitions; and the Metrics it feeds."""

from __future__ import annotations

import copy
from datetime import datetime, timedelta
from typing import Any

from prometheus_client.parser import text_string_to_metric_families

from reconcile.mpijob.metrics import Metrics
from render import Config, Event, Observed, events, status
from render import conditions as cond
from render import names as n
from render import phases as ph
from render.parse import parse_mpijob
from tests.unit.render_helpers import NOW, job, launcher, launcher_pod, owned, worker

CFG = Config()
T0 = NOW - timedelta(hours=1)


def at(seconds: float) -> str:
    return (T0 + timedelta(seconds=seconds)).strftime("%Y-%m-%dT%H:%M:%SZ")


def base_job(**meta: Any) -> dict[str, Any]:
    j = job()
    j["metadata"]["creationTimestamp"] = at(0)
    j["metadata"].update(meta)
    return j


def started(pod: dict[str, Any], when: float | None, *, done: bool = False) -> dict[str, Any]:
    pod = copy.deepcopy(pod)
    if when is not None:
        state = (
            {"terminated": {"exitCode": 0, "startedAt": at(when)}}
            if done
            else {"running": {"startedAt": at(when)}}
        )
        pod["status"]["containerStatuses"] = [{"name": "c", "state": state}]
    return pod


def gate(pod: dict[str, Any], message: str, code: int = 0) -> dict[str, Any]:
    pod = copy.deepcopy(pod)
    term = {"exitCode": code, "message": message}
    pod["status"]["initContainerStatuses"] = [{"name": n.WAIT_CONTAINER, "state": {"terminated": term}}]
    return pod


def infra() -> list[dict[str, Any]]:
    return [
        owned("Service", "pi"),
        owned("ConfigMap", "pi-config"),
        owned("Secret", "pi-ssh"),
    ]


class Life:
    """Syncs of one job: each computes the status from the world at second ``t`` and records what the
    transition reveals, as the controller's _record does."""

    def __init__(self, mpijob: dict[str, Any]) -> None:
        self.mpijob = mpijob
        self.seen: list[ph.Samples] = []
        self.events: list[Event] = []

    def sync(self, t: float, *objects: dict[str, Any]) -> dict[str, Any]:
        obs = Observed.from_objects(objects, now=T0 + timedelta(seconds=t))
        old = self.mpijob.get("status")
        new = status(self.mpijob, obs, CFG)
        self.seen.append(ph.samples(parse_mpijob(self.mpijob), old, new, obs))
        self.events += events(self.mpijob, old, new, obs)
        self.mpijob = {**self.mpijob, "status": new}
        return new

    def phases(self) -> list[tuple[str, float]]:
        return [p for s in self.seen for p in s.phases]

    def durations(self) -> list[tuple[str, float]]:
        return [s.duration for s in self.seen if s.duration is not None]

    def gate_waits(self) -> list[float]:
        return [s.gate_wait for s in self.seen if s.gate_wait is not None]


def run_to_success(life: Life, first_sync: float = 2) -> None:
    """Children at 2 s, workers start at 5 and 7, the gate passes, the launcher starts at 9, done at 20."""
    w0, w1 = worker(0, "Pending"), worker(1, "Pending")
    job = launcher(active=1, startTime=at(first_sync))
    pending = launcher_pod("a", "Pending", at(3))
    life.sync(first_sync, *infra(), w0, w1, job)
    life.sync(6, *infra(), started(worker(0), 5), w1, job, pending)
    life.sync(8, *infra(), started(worker(0), 5), started(worker(1), 7), job, pending)
    pod = gate(started(launcher_pod("a", "Running", at(3)), 9), "2 host(s) reachable over SSH after 1.250s")
    running = (*infra(), started(worker(0), 5), started(worker(1), 7), job, pod)
    life.sync(10, *running)
    life.sync(11, *running)  # nothing new: nothing observed again
    complete = launcher(
        succeeded=1,
        startTime=at(first_sync),
        completionTime=at(20),
        conditions=[{"type": "Complete", "status": "True"}],
    )
    pod_done = gate(
        started(launcher_pod("a", "Succeeded", at(3)), 9, done=True),
        "2 host(s) reachable over SSH after 1.250s",
    )
    life.sync(21, *infra(), started(worker(0), 5), started(worker(1), 7), complete, pod_done)
    life.sync(22, *infra(), complete, pod_done)


def test_each_phase_once_with_the_gaps_the_timestamps_give():
    life = Life(base_job())
    run_to_success(life)
    assert life.phases() == [
        (ph.CREATED, 2.0),
        (ph.WORKERS_RUNNING, 5.0),  # created at 2, last worker at 7
        (ph.LAUNCHER_RUNNING, 2.0),  # launcher's containers at 9
        (ph.FINISHED, 11.0),  # completionTime 20
    ]
    assert life.durations() == [(cond.SUCCEEDED, 20.0)]
    assert life.gate_waits() == [1.25]
    # The consecutive phases add up to the whole duration.
    assert sum(s for _, s in life.phases()) == 20.0


def test_events_say_the_durations_one_event_per_transition():
    life = Life(base_job())
    run_to_success(life)
    said = {e.reason: e.message for e in life.events}
    assert said["MPIJobRunning"] == (
        "MPIJob ns/pi is running. All 2 workers were running 5 s after its children were created;"
        " the launcher 2 s after the last worker (its SSH gate waited 1.2 s)."
    )
    assert said["MPIJobSucceeded"].endswith(
        "completed. It succeeded 20 s after it was submitted; the launcher ran 11 s."
    )
    # Created, Running, Succeeded: one event each.
    assert [e.reason for e in life.events] == ["MPIJobCreated", "MPIJobRunning", "MPIJobSucceeded"]


def test_a_recovery_from_restarting_is_not_a_second_start_up():
    life = Life(base_job())
    job = launcher(active=1, startTime=at(2))
    pod = started(launcher_pod("a", "Running", at(3)), 9)
    up = (*infra(), started(worker(0), 5), started(worker(1), 7), job, pod)
    life.sync(2, *infra(), worker(0, "Pending"), worker(1, "Pending"), job)
    life.sync(10, *up)
    first = life.phases()
    new = life.sync(30, *infra(), started(worker(0), 5), worker(1, "Failed"), job, pod)
    assert cond.is_true(cond.clean(new["conditions"]), cond.RESTARTING)
    new = life.sync(40, *infra(), started(worker(0), 5), started(worker(1), 38), job, pod)
    assert cond.is_true(cond.clean(new["conditions"]), cond.RUNNING)
    assert life.phases() == first
    assert [p for p, _ in first] == [ph.CREATED, ph.WORKERS_RUNNING, ph.LAUNCHER_RUNNING]


def test_a_suspended_job_counts_its_wait_and_starts_from_its_resume():
    j = base_job()
    j["spec"]["runPolicy"] = {"suspend": True}
    life = Life(j)
    susp = launcher(suspend=True)
    life.sync(1, *infra(), susp)
    life.mpijob["spec"] = {**life.mpijob["spec"], "runPolicy": {"suspend": False}}
    job = launcher(active=1, startTime=at(100))
    life.sync(100, *infra(), worker(0, "Pending"), worker(1, "Pending"), job)
    pod = started(launcher_pod("a", "Running", at(101)), 106)
    life.sync(107, *infra(), started(worker(0), 103), started(worker(1), 104), job, pod)
    assert life.phases() == [
        (ph.CREATED, 1.0),
        (ph.SUSPENDED, 99.0),  # suspended at 1, resumed at 100
        (ph.WORKERS_RUNNING, 4.0),  # from the resume, not from creation
        (ph.LAUNCHER_RUNNING, 2.0),
    ]
    assert any("after it resumed;" in e.message for e in life.events)


def test_a_job_that_finishes_before_a_running_status_still_counts_its_start_up():
    life = Life(base_job())
    complete = launcher(
        succeeded=1, completionTime=at(4), conditions=[{"type": "Complete", "status": "True"}]
    )
    pod = started(launcher_pod("a", "Succeeded", at(2)), 3, done=True)
    life.sync(5, *infra(), started(worker(0), 2), started(worker(1), 2), complete, pod)
    assert life.phases() == [
        (ph.CREATED, 5.0),
        (ph.WORKERS_RUNNING, 0.0),  # the pods started before the status said Created: clamped
        (ph.LAUNCHER_RUNNING, 1.0),
        (ph.FINISHED, 1.0),
    ]
    assert life.durations() == [(cond.SUCCEEDED, 4.0)]
    # One event for the one transition, saying the start-up and the whole duration.
    (done,) = [e for e in life.events if e.reason not in ("MPIJobCreated",)]
    assert done.reason == "MPIJobSucceeded"
    assert "All 2 workers were running 0 s after its children were created;" in done.message, done
    assert done.message.endswith("It succeeded 4 s after it was submitted; the launcher ran 1 s."), done


def test_missing_timestamps_leave_the_phase_out():
    life = Life({k: v for k, v in base_job().items()})
    del life.mpijob["metadata"]["creationTimestamp"]
    job = launcher(active=1, startTime=at(2))
    life.sync(2, *infra(), worker(0, "Pending"), worker(1, "Pending"), job)
    # Workers Running but without container statuses; launcher pod without them too.
    life.sync(10, *infra(), worker(0), worker(1), job, launcher_pod("a", "Running", at(3)))
    assert life.phases() == []
    assert cond.is_true(cond.clean(life.mpijob["status"]["conditions"]), cond.RUNNING)


def test_pod_running_start_and_gate_wait():
    pod = worker(0)
    assert ph.pod_running_start(pod) is None
    pod["status"]["containerStatuses"] = [
        {"name": "a", "state": {"running": {"startedAt": at(3)}}},
        {"name": "b", "state": {"terminated": {"startedAt": at(5), "exitCode": 0}}},
    ]
    assert ph.pod_running_start(pod) == T0 + timedelta(seconds=5)
    pod["status"]["containerStatuses"].append({"name": "c", "state": {"waiting": {}}})
    assert ph.pod_running_start(pod) is None  # not every container has started
    ok = gate(worker(0), "3 host(s) reachable over SSH after 12.5s")
    assert ph.gate_wait(ok) == 12.5
    assert ph.gate_wait(gate(worker(0), "workers not reachable over SSH after 300s: a (x)", 69)) is None
    assert ph.gate_wait(gate(worker(0), "", 0)) is None


def _samples(registry_text: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    out = {}
    for fam in text_string_to_metric_families(registry_text):
        for s in fam.samples:
            out[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return out


def test_metrics_get_one_sample_per_phase_and_job():
    m = Metrics()
    life = Life(base_job())
    run_to_success(life)
    for s in life.seen:
        m.observe_phases(s)
    got = _samples(m.exposition().decode())
    for phase, seconds in life.phases():
        assert got[("mpi_operator_job_phase_seconds_count", (("phase", phase),))] == 1
        assert got[("mpi_operator_job_phase_seconds_sum", (("phase", phase),))] == seconds
    assert got[("mpi_operator_job_duration_seconds_count", (("outcome", "Succeeded"),))] == 1
    assert got[("mpi_operator_job_duration_seconds_sum", (("outcome", "Succeeded"),))] == 20
    assert got[("mpi_operator_launcher_gate_wait_seconds_count", ())] == 1
    assert got[("mpi_operator_launcher_gate_wait_seconds_sum", ())] == 1.25


def test_now_is_not_read():
    # The same transition gives the same samples whatever the observed clock says.
    life = Life(base_job())
    run_to_success(life)
    j = parse_mpijob(base_job())
    first = None
    for later in (0, 3600 * 24):
        obs = Observed.from_objects(
            (
                *infra(),
                launcher(
                    succeeded=1, completionTime=at(20), conditions=[{"type": "Complete", "status": "True"}]
                ),
            ),
            now=datetime.fromisoformat("2030-01-01T00:00:00+00:00") + timedelta(seconds=later),
        )
        old = {"conditions": [{"type": "Created", "status": "True", "lastTransitionTime": at(2)}]}
        new = {
            **old,
            "conditions": [*old["conditions"], {"type": "Succeeded", "status": "True"}],
            "completionTime": at(20),
        }
        got = ph.samples(j, old, new, obs)
        assert first is None or got == first
        first = got
    assert first is not None and first.duration == (cond.SUCCEEDED, 20.0)


def test_odd_pods_are_left_out_not_a_crash():
    odd: list[dict[str, Any]] = [
        {**worker(0), "status": ["Running"]},
        {**worker(1), "status": {"phase": "Running", "containerStatuses": {"a": 1}}},
        {**worker(1), "status": {"containerStatuses": [None, {"state": []}]}},
        {
            **launcher_pod("a", "Running", at(1)),
            "status": {"initContainerStatuses": [{"name": n.WAIT_CONTAINER, "state": 3}]},
        },
    ]
    old = {"conditions": [{"type": "Created", "status": "True", "lastTransitionTime": at(1)}]}
    running = {"type": "Running", "status": "True", "reason": "MPIJobRunning"}
    new = {**old, "conditions": [*old["conditions"], running]}
    obs = Observed.from_objects([*infra(), launcher(active=1), *odd], now=NOW)
    got = ph.samples(parse_mpijob(base_job()), old, new, obs)
    assert got.phases == () and got.gate_wait is None
    assert [e.reason for e in events(base_job(), old, new, obs)] == ["MPIJobRunning"]


def test_jobs_by_state_counts_each_cache_at_each_scrape():
    m = Metrics()
    jobs: list[dict[str, Any]] = [{}]
    m.count_jobs_of(lambda: jobs)
    m.count_jobs_of(lambda: [{"status": {"conditions": [{"type": "Suspended", "status": "True"}]}}])
    running = {"type": "Running", "status": "True"}
    jobs.append({"status": {"conditions": [{"type": "Created", "status": "True"}, running]}})
    got = _samples(m.exposition().decode())
    states = {dict(k[1])["state"]: v for k, v in got.items() if k[0] == "mpi_operator_jobs"}
    assert states == {
        "Created": 1,
        "Suspended": 1,
        "Running": 1,
        "Restarting": 0,
        "Succeeded": 0,
        "Failed": 0,
    }
