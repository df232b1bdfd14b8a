"""Shared fixtures: the local control plane per tier (started lazily, once per session) and a fresh
namespace per test.

- `l1_cluster`: etcd + kube-apiserver (envtest-like, no ServiceAccount admission).
- `l2_cluster`: L1 + kube-controller-manager, kube-scheduler, kwok with fake nodes.
- `cluster`, `api_client`, `namespace`: for the tier the test is marked with (`l2`, else `l1`).

Both are `localcluster.LocalCluster` objects: `.kubeconfig`, `.api_client()`, `.bin_dir`, `.server`,
`.env()`, `.write_user_kubeconfig(user, groups)`. Missing binaries make these fixtures fail, never skip;
only `--skip-cluster` or MPIJOB_SKIP_CLUSTER=1 skips the L1/L2 tests and the tools tier (tests/tools).

Every operator a test starts (`localcluster.operator.OperatorRunner`, session ones included) is checked
right after the test and after its teardown: an exit nobody asked for, a non-zero code after SIGTERM or a
traceback / critical line in its log fails that test. A test that kills one by PID says so first
(`op.expect_exit()`).

The unit tier runs first, before any cluster is up. Under MPIJOB_CI=1: a skip (at run or collection time)
fails the run, the knobs in NARROWING_ENV are refused, and Hypothesis runs the `ci` profile with the
fixed seed HYPOTHESIS_SEED (printed in the header).
"""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Iterator
from typing import Any

import hypothesis
import pytest
from kubernetes.client import ApiClient

from localcluster import ClusterSpec, LocalCluster
from localcluster.e2e import create_namespace
from localcluster.operator import OperatorFailed, forget_runner, started_runners
from localcluster.rbacuse import USAGE_POLICY
from tests.utils import (
    CI_ENV,
    HYPOTHESIS_SEED,
    LAST,
    NARROWING_ENV,
    SKIP_ENV,
    SKIP_REASON,
    TEST_NAMESPACE_LABELS,
    TEST_STARTS,
    audit_now,
    in_ci,
    namespace_name,
    skip_cluster,
    skip_without_cluster,
)

TIER_FIXTURES = {"l1_cluster": "l1", "l2_cluster": "l2"}
# The e2e tier's cluster: its audit log holds the requests of the operator's ServiceAccount (the e2e
# operator runs under it), and children's blockOwnerDeletion is checked as on clusters that enforce it.
L2_EXTRAS: dict[str, Any] = {
    "audit": True,
    "audit_policy": USAGE_POLICY,
    "apiserver_args": ("--enable-admission-plugins=OwnerReferencesPermissionEnforcement",),
}
_ci_skipped: list[str] = []
hypothesis.settings.register_profile("ci", database=None, print_blob=True)

if in_ci():  # loaded at import, before any test module builds its settings
    hypothesis.settings.load_profile("ci")


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--skip-cluster",
        action="store_true",
        default=False,
        help=f"skip the tests needing the Go-built tools or a local cluster (or {SKIP_ENV}=1); CI never does",
    )


@pytest.hookimpl(tryfirst=True)  # before Hypothesis' plugin reads its seed option
def pytest_configure(config: pytest.Config) -> None:
    if in_ci():
        narrowing = [name for name in NARROWING_ENV if name in os.environ]
        if narrowing:
            raise pytest.UsageError(
                f"{CI_ENV} is set: CI runs every test in full; unset {' '.join(narrowing)}"
            )
        if config.getoption("hypothesis_seed", None) is None:
            config.option.hypothesis_seed = str(HYPOTHESIS_SEED)
    # SIGTERM would kill pytest without teardown; as KeyboardInterrupt the session fixtures stop the
    # control plane. (The processes also die with pytest via PR_SET_PDEATHSIG, but the work dir would stay.)
    if signal.getsignal(signal.SIGTERM) == signal.SIG_DFL:

        def interrupt(signum: int, frame: object) -> None:
            raise KeyboardInterrupt("SIGTERM")

        signal.signal(signal.SIGTERM, interrupt)


def pytest_report_header(config: pytest.Config) -> str | None:
    if not in_ci():
        return None
    seed = config.getoption("hypothesis_seed", None)
    return f"{CI_ENV}: hypothesis profile {hypothesis.settings.get_current_profile_name()!r}, seed {seed}"


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    _mark_tiers(config, items)
    # The unit tier first, alone on the machine: the session clusters start lazily, after it.
    unit = config.rootpath / "tests" / "unit"
    items.sort(key=lambda item: not item.path.is_relative_to(unit))
    # A check of the whole run last, after every cluster tier.
    items.sort(key=lambda item: bool(getattr(getattr(item, "function", None), LAST, False)))


def _mark_tiers(config: pytest.Config, items: list[pytest.Item]) -> None:
    if in_ci() and skip_cluster(config):
        raise pytest.UsageError(f"{CI_ENV} is set: CI runs every tier; drop --skip-cluster / {SKIP_ENV}")
    skip = pytest.mark.skip(reason=SKIP_REASON)
    for item in items:
        fixtures = getattr(item, "fixturenames", ())
        # A test that uses a tier's cluster belongs to that tier, for `-m` selection and skipping.
        for fixture, tier in TIER_FIXTURES.items():
            if fixture in fixtures and item.get_closest_marker(tier) is None:
                item.add_marker(getattr(pytest.mark, tier))
        if skip_cluster(config) and any(item.get_closest_marker(m) for m in ("tools", "l1", "l2")):
            item.add_marker(skip)


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    if in_ci() and report.skipped:
        _ci_skipped.append(report.nodeid)


def pytest_collectreport(report: pytest.CollectReport) -> None:
    # a module-level importorskip / skip(allow_module_level=True) skips a whole file at collection
    if in_ci() and report.skipped:
        _ci_skipped.append(report.nodeid or "<collection>")
    elif in_ci() and report.failed:  # pytest fails the run for it too; named here with the skips
        _ci_skipped.append(f"{report.nodeid or '<collection>'} (a collection error)")


# -- every operator a test started ---------------------------------------------------------------------
def _operator_problems() -> str:
    found = []
    for op in started_runners():
        try:
            op.check()
        except OperatorFailed as err:
            found.append(str(err))
        if not op.alive():
            forget_runner(op)
    return "\n\n".join(found)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item: pytest.Item) -> Iterator[None]:
    __tracebackhide__ = True
    result = yield  # a failed test raises here: its own failure is the report, the teardown check follows
    if found := _operator_problems():
        raise OperatorFailed(found)
    return result


@pytest.fixture(autouse=True)
def _test_started(request: pytest.FixtureRequest) -> None:
    request.config.stash.setdefault(TEST_STARTS, []).append((audit_now(), request.node.nodeid))


@pytest.fixture(autouse=True)
def _operators_checked() -> Iterator[None]:
    """After the test's own fixtures are torn down (autouse: set up first, torn down last)."""
    yield
    if found := _operator_problems():
        pytest.fail(found, pytrace=False)


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    if _ci_skipped and exitstatus in (pytest.ExitCode.OK, pytest.ExitCode.NO_TESTS_COLLECTED):
        print(f"\n{CI_ENV}: {len(_ci_skipped)} test(s) skipped, and CI skips nothing: {_ci_skipped[:5]}")
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


def _session_cluster(request: pytest.FixtureRequest, tier: str) -> Iterator[LocalCluster]:
    skip_without_cluster(request.config)
    cluster = LocalCluster(ClusterSpec(tier=tier, **(L2_EXTRAS if tier == "l2" else {})))  # type: ignore[arg-type]
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

    name = namespace_name(request.node.name)
    api = cluster.api_client()
    core = client.CoreV1Api(api)
    try:
        create_namespace(core, name, TEST_NAMESPACE_LABELS, pods=cluster.spec.tier == "l2")
        yield name
    finally:
        try:
            core.delete_namespace(name, propagation_policy="Background")
        except client.ApiException as exc:
            if exc.status != 404:
                raise
        finally:
            api.close()
