"""Chaos tier (short runs; benchmarks/chaos_bench.py runs them full size): an audited L2 cluster whose
audit log of the operator's writes is the ground truth. Each scenario asserts: no lost, duplicate or
orphaned child, no stuck job, no status regression, no write by a non-leader, no exit on transient errors,
the launcher never before its dependencies."""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest
import yaml

from localcluster.chaos import scenarios
from localcluster.chaos.harness import ChaosCluster, Report
from reconcile.engine.quantity import parse_quantity
from tests.utils import REPO, record_requests, skip_without_cluster

pytestmark = [pytest.mark.chaos, pytest.mark.l2]


@pytest.fixture(scope="module")
def chaos_cluster(request: pytest.FixtureRequest) -> Iterator[ChaosCluster]:
    skip_without_cluster(request.config)
    cc = ChaosCluster().start()
    try:
        yield cc
    finally:
        record_requests(request.config, cc.cluster.audit_log)
        cc.stop()


def assert_clean(report: Report) -> None:
    print("\n[chaos] " + json.dumps(report.summary()))
    assert report.problems() == {}, json.dumps(report.problems(), indent=1)[:6000]


def test_fault_proxy(chaos_cluster):
    report = scenarios.faulty_proxy(chaos_cluster, jobs=8, rate=0.1)
    assert_clean(report)
    assert sum(report.faults.values()) > 0, "no fault was injected"


def hit_mid_build(report: Report) -> None:
    """Every fault came while some job had fewer children than wanted."""
    assert len(report.building_at_faults) == sum(report.faults.values()), report.building_at_faults
    assert all(n > 0 for n in report.building_at_faults), (
        f"jobs building at each fault: {report.building_at_faults}"
    )


def test_kill9_at_random_moments(chaos_cluster):
    report = scenarios.kill9(chaos_cluster, jobs=10, kills=3)
    assert_clean(report)
    hit_mid_build(report)


def test_leader_sigterm_with_a_backlog(chaos_cluster):
    report = scenarios.sigterm_handover(chaos_cluster, jobs=16)
    assert_clean(report)
    extra = report.extra
    assert extra["handover_s"] is not None, "the standby never took the Lease"
    assert extra["old_leader_writes_after_lease_moved"] == 0
    assert extra["backlog_at_sigterm"] >= 15, "no backlog when SIGTERM came"


def test_leader_black_holed_for_a_minute(chaos_cluster):
    """A write in flight when the partition begins is given up on and reset before the standby may lead,
    so nothing of it arrives when the partition heals."""
    report = scenarios.leader_partition(chaos_cluster, jobs=100, hold=60.0)
    assert_clean(report)
    extra = report.extra
    assert extra["takeover_s"] is not None and extra["takeover_s"] < extra["partition_s"], (
        "the standby did not take the Lease during the partition"
    )
    assert extra.get("requests_dropped_on_reset", 0) >= 1, "the write in flight was not reset"
    assert extra["old_leader_exit_code"] is not None, "the old leader did not step down after the heal"


def test_an_api_server_two_seconds_slower(chaos_cluster):
    """Every request 2 s slower: every job finishes, nothing is created twice, the queue holds at most one
    key per job and the operator stays within its Deployment's memory limit."""
    report = scenarios.slow_apiserver(chaos_cluster, jobs=100, latency=2.0)
    assert_clean(report)
    extra = report.extra
    assert extra["peak_queue_depth"] is not None and extra["peak_queue_depth"] <= 100
    assert 0 < extra["peak_rss_mib"] * 2**20 < deployment_memory_limit()


def deployment_memory_limit() -> int:
    deployment = yaml.safe_load((REPO / "deploy/operator/deployment.yaml").read_text())
    (container,) = deployment["spec"]["template"]["spec"]["containers"]
    return int(parse_quantity(container["resources"]["limits"]["memory"]))


def test_etcd_stopped_for_thirty_seconds(chaos_cluster):
    report = scenarios.etcd_stopped(chaos_cluster, jobs=100, seconds=30.0)
    assert_clean(report)
    hit_mid_build(report)


def test_apiserver_sigkill_and_restart(chaos_cluster):
    report = scenarios.apiserver_restart(chaos_cluster, jobs=6)
    assert_clean(report)
    hit_mid_build(report)


def test_crashing_workers_beside_healthy_jobs(chaos_cluster):
    report = scenarios.crashing_neighbours(chaos_cluster, healthy=10, crashing=10)
    assert_clean(report)
    extra = report.extra
    # 2 workers, the default backoffLimit 6: fewer than 2 + 6 x 2 worker pods per crashing job
    assert 0 < extra["crashing_worker_creates_max"] < 2 + 6 * 2, extra
    # the healthy jobs finish about as fast as without the crashing ones (a shared, noisy machine)
    assert extra["healthy_beside_crashing_s"] <= 1.5 * extra["healthy_alone_s"] + 10, extra
