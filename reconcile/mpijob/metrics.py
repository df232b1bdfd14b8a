"""Prometheus metrics on a registry of our own (nothing leaks in from other libraries' defaults).

Upstream's names are kept so dashboards transfer; the queue, reconcile and API request series are ours.
The standard process_* series (memory, CPU, file descriptors, start time) and python_* ones (GC,
version) are there too, as every Prometheus client exports them (upstream's Go client: process_*, go_*).
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Any

from prometheus_client import (
    CollectorRegistry,
    Counter,
    Gauge,
    GCCollector,
    Histogram,
    PlatformCollector,
    ProcessCollector,
    disable_created_metrics,
    generate_latest,
)
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

from render import conditions as rcond
from render.phases import PHASES, Samples

JOB_STATES = (
    rcond.CREATED,
    rcond.SUSPENDED,
    rcond.RUNNING,
    rcond.RESTARTING,
    rcond.SUCCEEDED,
    rcond.FAILED,
)


class _JobStates(Collector):
    """``mpi_operator_jobs{state}``: the MPIJobs in the caches by state, counted at each scrape (0 on a
    replica that is not leading: its controllers have no caches)."""

    def __init__(self) -> None:
        self.sources: list[Callable[[], Iterable[Mapping[str, Any]]]] = []

    def _family(self) -> GaugeMetricFamily:
        return GaugeMetricFamily(
            "mpi_operator_jobs", "MPIJobs by state (their latest condition)", labels=["state"]
        )

    def describe(self) -> Iterator[GaugeMetricFamily]:
        yield self._family()

    def collect(self) -> Iterator[GaugeMetricFamily]:
        counts = dict.fromkeys(JOB_STATES, 0)
        for source in list(self.sources):
            for job in source():
                status = job.get("status")
                conds = rcond.clean(status.get("conditions") if isinstance(status, Mapping) else None)
                counts[rcond.current_state(conds)] += 1
        family = self._family()
        for state, count in counts.items():
            family.add_metric([state], count)
        yield family


# The `*_created` timestamp series double every counter's output for no use here.
disable_created_metrics()


# Start-ups take from under a second (a warm node) to hours (a queue, an image pull): 0.25 s to 4 h.
STARTUP_BUCKETS = (0.25, 0.5, 1, 2, 5, 10, 20, 30, 60, 120, 300, 600, 1200, 1800, 3600, 7200, 14400)
# Whole jobs run from seconds to days.
DURATION_BUCKETS = (1, 5, 10, 30, 60, 120, 300, 600, 1800, 3600, 7200, 14400, 28800, 86400, 259200)


class Metrics:
    def __init__(self) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        r = self.registry
        ProcessCollector(registry=r)
        PlatformCollector(registry=r)
        GCCollector(registry=r)
        # Registered in this order, which is the order of the exposition.
        self._add_job_families(r)
        self._add_process_families(r)
        self._add_sync_families(r)
        self._add_api_families(r)
        self._add_startup_families(r)
        self._job_states = _JobStates()
        r.register(self._job_states)
        self._job_info_keys: dict[str, tuple[str, str]] = {}
        self._lock = threading.Lock()

    def _add_job_families(self, r: CollectorRegistry) -> None:
        """Upstream's job counters and launcher gauge."""
        self.jobs_created = Counter("mpi_operator_jobs_created", "MPIJobs created", registry=r)
        self.jobs_successful = Counter("mpi_operator_jobs_successful", "MPIJobs that succeeded", registry=r)
        self.jobs_failed = Counter("mpi_operator_jobs_failed", "MPIJobs that failed", registry=r)
        self.job_info = Gauge(
            "mpi_operator_job_info",
            "1 for each MPIJob whose launcher Job exists",
            ["launcher", "namespace"],
            registry=r,
        )

    def _add_process_families(self, r: CollectorRegistry) -> None:
        """This replica: leadership and the work queue."""
        self.is_leader = Gauge("mpi_operator_is_leader", "1 while this replica holds the lease", registry=r)
        self.queue_depth = Gauge(
            "mpi_operator_workqueue_depth", "MPIJob keys waiting in the queue", registry=r
        )

    def _add_sync_families(self, r: CollectorRegistry) -> None:
        self.reconcile_duration = Histogram(
            "mpi_operator_reconcile_duration_seconds",
            "Time spent in one sync of one MPIJob",
            ["result"],
            buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30),
            registry=r,
        )
        self.sync_errors = Counter(
            "mpi_operator_sync_errors",
            "Syncs of one MPIJob that ended in an error (and were retried), by reason",
            ["reason"],
            registry=r,
        )

    def _add_api_families(self, r: CollectorRegistry) -> None:
        """The API client: requests, watch events, retried failures, its rate limit."""
        self.api_requests = Counter(
            "mpi_operator_api_requests",
            "Requests to the Kubernetes API by verb, kind and HTTP status code",
            ["verb", "kind", "code"],
            registry=r,
        )
        self.watch_events = Counter(
            "mpi_operator_watch_events",
            "Watch events received, by kind of object",
            ["kind"],
            registry=r,
        )
        self.watch_event_bytes = Counter(
            "mpi_operator_watch_event_bytes",
            "Bytes of the watch events received (JSON, before decoding), by kind of object",
            ["kind"],
            registry=r,
        )
        self.transient_errors = Counter(
            "mpi_operator_transient_errors",
            "Failed list/watch and start-up requests, retried with back-off, by source and HTTP code",
            ["source", "code"],
            registry=r,
        )
        self.client_rate_limit = Gauge(
            "mpi_operator_client_rate_limit",
            "The API client's limit now in requests per second (0: none; it follows 429s and latency)",
            registry=r,
        )

    def _add_startup_families(self, r: CollectorRegistry) -> None:
        """Start-up phases (render.phases), from the objects' timestamps: one sample per job and phase."""
        self.job_phase = Histogram(
            "mpi_operator_job_phase_seconds",
            "Time an MPIJob spent in one start-up phase, from its objects' timestamps, by phase",
            ["phase"],
            buckets=STARTUP_BUCKETS,
            registry=r,
        )
        self.job_duration = Histogram(
            "mpi_operator_job_duration_seconds",
            "Time from an MPIJob's creation to its completion, by outcome (Succeeded or Failed)",
            ["outcome"],
            buckets=DURATION_BUCKETS,
            registry=r,
        )
        # Every phase and outcome at 0 from the start: rate() and increase() see a series' first samples
        # only against an earlier one, so a child born with its first observation would lose it.
        for phase in PHASES:
            self.job_phase.labels(phase=phase)
        for outcome in (rcond.SUCCEEDED, rcond.FAILED):
            self.job_duration.labels(outcome=outcome)
        self.gate_wait = Histogram(
            "mpi_operator_launcher_gate_wait_seconds",
            "Time the launcher's gate waited until every worker answered over SSH, as the gate reports it",
            buckets=STARTUP_BUCKETS,
            registry=r,
        )

    def set_job_info(self, key: str, launcher: str, namespace: str) -> None:
        with self._lock:
            self._job_info_keys[key] = (launcher, namespace)
        self.job_info.labels(launcher=launcher, namespace=namespace).set(1)

    def remove_job_info(self, key: str) -> None:
        """Drop the series of a job that is gone (upstream never does, so its gauge grows forever)."""
        with self._lock:
            labels = self._job_info_keys.pop(key, None)
        if labels is not None:
            with contextlib.suppress(KeyError):
                self.job_info.remove(*labels)

    def watch_counter(self, kind: str) -> Callable[[int], None]:
        """What an informer calls with each watch event's size: both counters' children bound once."""
        events, size = self.watch_events.labels(kind=kind), self.watch_event_bytes.labels(kind=kind)

        def seen(n: int) -> None:
            events.inc()
            size.inc(n)

        return seen

    def count_jobs_of(self, source: Callable[[], Iterable[Mapping[str, Any]]]) -> None:
        """Count the MPIJobs ``source`` lists (a controller's cache) in ``mpi_operator_jobs``."""
        self._job_states.sources.append(source)

    def observe_phases(self, samples: Samples) -> None:
        for phase, seconds in samples.phases:
            self.job_phase.labels(phase=phase).observe(seconds)
        if samples.duration is not None:
            outcome, seconds = samples.duration
            self.job_duration.labels(outcome=outcome).observe(seconds)
        if samples.gate_wait is not None:
            self.gate_wait.observe(samples.gate_wait)

    def exposition(self) -> bytes:
        return generate_latest(self.registry)

    def api_request_count(
        self, *, exclude_kinds: frozenset[str] = frozenset(), verbs: frozenset[str] | None = None
    ) -> float:
        """Sum of API requests, for tests that assert 'no writes' (skips e.g. the Lease renewals)."""
        total = 0.0
        for metric in self.registry.collect():
            if metric.name != "mpi_operator_api_requests":
                continue
            for sample in metric.samples:
                if not sample.name.endswith("_total"):
                    continue
                if sample.labels["kind"] in exclude_kinds:
                    continue
                if verbs is not None and sample.labels["verb"] not in verbs:
                    continue
                total += sample.value
        return total
