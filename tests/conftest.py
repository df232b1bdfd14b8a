"""Shared fixtures: the local control plane per tier (started lazily, once per session) and a fresh
namespace per test.

- `l1_cluster`: etcd + kube-apiserver (envtest-like, no ServiceAccount admission).
- `l2_cluster`: L1 + kube-controller-manager, kube-scheduler, kwok with fake nodes.
- `cluster`, `api_client`, `namespace`: for the tier the test is marked with (`l2`, else `l1`).

Both are `localcluster.LocalCluster` objects: `.kubeconfig`, `.api_client()`, `.bin_dir`, `.server`,
`.env()`, `.write_user_kubeconfig(user, groups)`. Missing binaries make these fixtures fail, never skip;
only `--skip-cluster` or MPIJOB_SKIP_CLUSTER=1 skips the L1/L2 tests.
"""

from __future__ import annotations

import os
import re
import secrets
import signal
import time
from collections.abc import Iterator

import pytest
from kubernetes.client import ApiClient

from localcluster import ClusterSpec, LocalCluster
from localcluster.cluster import wait_for_default_service_account

TIER_FIXTURES = {"l1_cluster": "l1", "l2_cluster": "l2"}
SKIP_ENV = "MPIJOB_SKIP_CLUSTER"
# Set by .ci/run: CI runs every tier, so a skip request is an error and any skipped test fails the run.
CI_ENV = "MPIJOB_CI"
_ci_skipped: list[str] = []


def _in_ci() -> bool:
    return os.environ.get(CI_ENV, "") not in ("", "0")


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--skip-cluster",
        action="store_true",
        default=False,
        help=f"skip the L1/L2 tests that need the local control plane (or {SKIP_ENV}=1); CI never does",
    )


def _skip_cluster(config: pytest.Config) -> bool:
    return bool(config.getoption("--skip-cluster")) or os.environ.get(SKIP_ENV, "") not in ("", "0")


def pytest_configure(config: pytest.Config) -> None:
    # SIGTERM would kill pytest without teardown; as KeyboardInterrupt the session fixtures stop the
    # control plane. (The processes also die with pytest via PR_SET_PDEATHSIG, but the work dir would stay.)
    if signal.getsignal(signal.SIGTERM) == signal.SIG_DFL:

        def interrupt(signum: int, frame: object) -> None:
            raise KeyboardInterrupt("SIGTERM")

        signal.signal(signal.SIGTERM, interrupt)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if _in_ci() and _skip_cluster(config):
        raise pytest.UsageError(f"{CI_ENV} is set: CI runs every tier; drop --skip-cluster / {SKIP_ENV}")
    skip = pytest.mark.skip(reason=f"--skip-cluster or {SKIP_ENV}=1 given")
    for item in items:
        fixtures = getattr(item, "fixturenames", ())
        # A test that uses a tier's cluster belongs to that tier, for `-m` selection and skipping.
        for fixture, tier in TIER_FIXTURES.items():
            if fixture in fixtures and item.get_closest_marker(tier) is None:
                item.add_marker(getattr(pytest.mark, tier))
        if _skip_cluster(config) and (item.get_closest_marker("l1") or item.get_closest_marker("l2")):
            item.add_marker(skip)


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    if _in_ci() and report.skipped:
        _ci_skipped.append(report.nodeid)


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    if _ci_skipped and exitstatus == pytest.ExitCode.OK:
        print(f"\n{CI_ENV}: {len(_ci_skipped)} test(s) skipped, and CI skips nothing: {_ci_skipped[:5]}")
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


def _session_cluster(request: pytest.FixtureRequest, tier: str) -> Iterator[LocalCluster]:
    if _skip_cluster(request.config):
        pytest.skip(f"--skip-cluster or {SKIP_ENV}=1 given")
    cluster = LocalCluster(ClusterSpec(tier=tier))  # type: ignore[arg-type]
    began = time.monotonic()
    cluster.start()  # raises (test errors) if binaries are missing or a component fails
    print(f"\n[localcluster] {tier} ready in {time.monotonic() - began:.1f}s at {cluster.server}")
    try:
        yield cluster
    finally:
        cluster.stop()


@pytest.fixture(scope="session")
def l1_cluster(request: pytest.FixtureRequest) -> Iterator[LocalCluster]:
    yield from _session_cluster(request, "l1")


@pytest.fixture(scope="session")
def l2_cluster(request: pytest.FixtureRequest) -> Iterator[LocalCluster]:
    yield from _session_cluster(request, "l2")


@pytest.fixture
def cluster(request: pytest.FixtureRequest) -> LocalCluster:
    """The cluster of the test's tier: l2 if marked l2, else l1."""
    tier = "l2" if request.node.get_closest_marker("l2") else "l1"
    return request.getfixturevalue(f"{tier}_cluster")


@pytest.fixture
def api_client(cluster: LocalCluster) -> Iterator[ApiClient]:
    """An admin kubernetes.client.ApiClient for the test's tier, closed afterwards."""
    client = cluster.api_client()
    try:
        yield client
    finally:
        client.close()


@pytest.fixture
def namespace(request: pytest.FixtureRequest, cluster: LocalCluster) -> Iterator[str]:
    """A fresh namespace, deleted after the test (L1 has no namespace controller: it stays Terminating)."""
    from kubernetes import client

    slug = re.sub(r"[^a-z0-9]+", "-", request.node.name.lower()).strip("-")[:40].strip("-")
    name = f"t-{slug}-{secrets.token_hex(3)}"
    api = cluster.api_client()
    core = client.CoreV1Api(api)
    try:
        core.create_namespace({"metadata": {"name": name, "labels": {"mpijob.dev/test": "true"}}})
        if cluster.spec.tier == "l2":
            wait_for_default_service_account(core, name)
        yield name
    finally:
        try:
            core.delete_namespace(name, propagation_policy="Background")
        except client.ApiException as exc:
            if exc.status != 404:
                raise
        finally:
            api.close()
