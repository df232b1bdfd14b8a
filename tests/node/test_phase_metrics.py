"""L4: the start-up phase histograms from real jobs on the real node. After each job, /metrics has gained
exactly one sample per phase (and one duration, one gate wait), and their sums agree within 1 s with the
phases this test computes itself from the MPIJob's conditions and the pods' container start times."""

from __future__ import annotations

import re
from datetime import datetime
from typing import Any

import pytest

from localcluster.e2e import condition_is, name_of
from localcluster.operator import OperatorRunner
from localcluster.realnode import NodeE2E, node_job
from render.timeutil import parse_time
from tests.utils import Polling

pytestmark = pytest.mark.l4

HISTOGRAMS = (
    "mpi_operator_job_phase_seconds",
    "mpi_operator_job_duration_seconds",
    "mpi_operator_launcher_gate_wait_seconds",
)
GATE = re.compile(r"reachable over SSH after ([0-9.]+)s")


def histograms(op: OperatorRunner) -> dict[tuple[str, str], tuple[float, float]]:
    """(metric, its phase/outcome label or "") -> (count, sum)."""
    out: dict[tuple[str, str], list[float]] = {}
    for (name, labels), value in op.metrics().items():
        for base in HISTOGRAMS:
            if name in (f"{base}_count", f"{base}_sum"):
                lab = dict(labels)
                key = (base, lab.get("phase") or lab.get("outcome") or "")
                pair = out.setdefault(key, [0.0, 0.0])
                pair[0 if name.endswith("_count") else 1] = value
    return {k: (v[0], v[1]) for k, v in out.items()}


class PodRecorder(Polling):
    """Every pod of the namespace as last seen, kept after the pod is deleted (cleanPodPolicy)."""

    def __init__(self, e2e: NodeE2E) -> None:
        self.e2e = e2e
        self.seen: dict[str, dict[str, Any]] = {}
        super().__init__(self._record)

    def _record(self) -> None:
        for pod in self.e2e.list_pods():
            self.seen[name_of(pod)] = pod


def started(pod: dict[str, Any]) -> datetime:
    times = []
    for cs in pod["status"].get("containerStatuses") or []:
        state = cs.get("state") or {}
        s = state.get("running") or state.get("terminated") or {}
        times.append(parse_time(s.get("startedAt")))
    assert times and all(t is not None for t in times), pod["status"]
    return max(t for t in times if t is not None)


def ltt(job: dict[str, Any], ctype: str) -> datetime:
    c = next(c for c in job["status"]["conditions"] if c["type"] == ctype)
    t = parse_time(c["lastTransitionTime"])
    assert t is not None
    return t


def expected(job: dict[str, Any], pods: dict[str, dict[str, Any]]) -> dict[tuple[str, str], float]:
    """The phases from the objects, computed here independently of render.phases."""
    name = job["metadata"]["name"]
    workers = [p for n, p in pods.items() if n.startswith(f"{name}-worker-")]
    launchers = [p for n, p in pods.items() if n.startswith(f"{name}-launcher-")]
    assert len(workers) == 2 and len(launchers) == 1, sorted(pods)
    submitted = parse_time(job["metadata"]["creationTimestamp"])
    created = ltt(job, "Created")
    workers_at = max(started(p) for p in workers)
    launcher_at = started(launchers[0])
    done = parse_time(job["status"]["completionTime"])
    assert submitted and done

    def gap(a: datetime, b: datetime) -> float:
        return max(0.0, (b - a).total_seconds())

    (gate_cs,) = [
        c for c in launchers[0]["status"]["initContainerStatuses"] if c["name"] == "wait-for-workers"
    ]
    m = GATE.search(gate_cs["state"]["terminated"].get("message") or "")
    assert m, gate_cs  # the gate wrote its wait to its termination message on the real kubelet
    return {
        ("mpi_operator_job_phase_seconds", "created"): gap(submitted, created),
        ("mpi_operator_job_phase_seconds", "workers_running"): gap(created, workers_at),
        ("mpi_operator_job_phase_seconds", "launcher_running"): gap(workers_at, launcher_at),
        ("mpi_operator_job_phase_seconds", "finished"): gap(launcher_at, done),
        ("mpi_operator_job_duration_seconds", "Succeeded"): gap(submitted, done),
        ("mpi_operator_launcher_gate_wait_seconds", ""): float(m.group(1)),
    }


def test_phase_histograms_match_the_objects(node_e2e: NodeE2E) -> None:
    op = node_e2e.operator
    for i in range(2):
        name = f"ph{i}"
        before = histograms(op)
        with PodRecorder(node_e2e) as pods:
            job, _ = node_e2e.run(node_job("openmpi", name=name))
            # the finishing sync observes right after its status write: wait for that sample
            key = ("mpi_operator_job_duration_seconds", "Succeeded")
            done_before = before.get(key, (0.0, 0.0))[0]
            node_e2e.wait_for(
                lambda k=key, n=done_before: histograms(op).get(k, (0.0, 0.0))[0] > n,
                "the duration observed",
                10,
            )
        assert condition_is(job, "Succeeded"), node_e2e.describe(name)
        want = expected(job, pods.seen)
        after = histograms(op)
        figures = []
        for key, seconds in want.items():
            count0, sum0 = before.get(key, (0.0, 0.0))
            count1, sum1 = after.get(key, (0.0, 0.0))
            assert count1 - count0 == 1, (key, before.get(key), after.get(key))
            got = sum1 - sum0
            figures.append(f"{key[0]}{{{key[1]}}}: {got:.3f} s (objects: {seconds:.3f} s)")
            assert abs(got - seconds) <= 1.0, (key, got, seconds)
        # phases no job passed (suspended) did not move
        assert after.get(("mpi_operator_job_phase_seconds", "suspended")) == before.get(
            ("mpi_operator_job_phase_seconds", "suspended")
        )
        print(f"\n[l4] {name}:\n  " + "\n  ".join(figures))
        # Events are sent off the sync's path: wait for the last one rather than read a snapshot.
        node_e2e.wait_for(
            lambda job=name: any(e["reason"] == "MPIJobSucceeded" for e in node_e2e.events(job)),
            "the MPIJobSucceeded event",
            30,
            name,
        )
        events = {e["reason"]: e["message"] for e in node_e2e.events(name)}
        print(f"  events: {[events.get(r) for r in ('MPIJobRunning', 'MPIJobSucceeded')]}")
        # The start-up's durations ride in the Running event, or in the Succeeded one when the job finished
        # before a Running status was written.
        started = events.get("MPIJobRunning") or events.get("MPIJobSucceeded", "")
        assert "workers were running " in started, events
        assert " It succeeded " in events.get("MPIJobSucceeded", ""), events
