"""L0: metrics: request counts by kind and verb, the per-job info series."""

from __future__ import annotations

from prometheus_client.parser import text_string_to_metric_families

from reconcile.mpijob.metrics import Metrics
from render.phases import PHASES


def test_api_request_count_excludes_kinds():
    m = Metrics()
    m.api_requests.labels(verb="update", kind="Lease", code="200").inc(5)
    m.api_requests.labels(verb="patch", kind="Pod", code="200").inc(2)
    m.api_requests.labels(verb="list", kind="Pod", code="200").inc(1)
    assert m.api_request_count() == 8
    assert m.api_request_count(exclude_kinds=frozenset({"Lease"})) == 3
    assert m.api_request_count(exclude_kinds=frozenset({"Lease"}), verbs=frozenset({"patch"})) == 2


def test_job_info_series_is_removed_when_the_job_goes():
    m = Metrics()
    m.set_job_info("ns/pi", "pi-launcher", "ns")
    assert b'mpi_operator_job_info{launcher="pi-launcher",namespace="ns"} 1.0' in m.exposition()
    m.remove_job_info("ns/pi")
    m.remove_job_info("ns/pi")
    assert b"pi-launcher" not in m.exposition()


def test_phases_and_outcomes_are_exported_at_zero_before_any_job():
    # Prometheus' rate() needs a sample before a series' first increase: one born with its first
    # observation would not show that job at all.
    counts = {
        (s.name, tuple(s.labels.items())): s.value
        for fam in text_string_to_metric_families(Metrics().exposition().decode())
        for s in fam.samples
        if s.name.endswith("_count")
    }
    for phase in PHASES:
        assert counts[("mpi_operator_job_phase_seconds_count", (("phase", phase),))] == 0
    for outcome in ("Succeeded", "Failed"):
        assert counts[("mpi_operator_job_duration_seconds_count", (("outcome", outcome),))] == 0
