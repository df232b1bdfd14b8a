"""The offline tier: only the Python environment. A unit test that starts a Go-built tool, Go itself or a
build script fails (the tools tier, tests/tools, is where those belong); `--update-golden` is refused
under CI, where a snapshot may only be compared."""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.unit.loopback import ApiServer, Pki
from tests.utils import CI_ENV

# What scripts/setup builds or fetches from the Go module proxy, by the name it is started by.
NOT_OFFLINE = frozenset({"go", "helm", "kubectl", "kube-apiserver", "etcd", "kwok", "build.sh"})
_guarded = False


def _refuse_go_tools(event: str, args: tuple[object, ...]) -> None:
    if not _guarded or event != "subprocess.Popen":
        return
    executable, argv = args[0], args[1]
    first = argv[0] if isinstance(argv, list | tuple) and argv else argv
    for name in (executable, first):
        if isinstance(name, str | bytes | os.PathLike) and Path(os.fsdecode(name)).name in NOT_OFFLINE:
            raise RuntimeError(f"the offline tier runs no {os.fsdecode(name)}: such tests go in tests/tools")


sys.addaudithook(_refuse_go_tools)


@pytest.fixture(autouse=True)
def _offline() -> Iterator[None]:
    global _guarded
    _guarded = True
    try:
        yield
    finally:
        _guarded = False


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--update-golden",
        action="store_true",
        default=False,
        help="rewrite the expected files under golden/ from the current render output (refused under CI)",
    )


def pytest_configure(config: pytest.Config) -> None:
    if config.getoption("--update-golden") and os.environ.get(CI_ENV, "") not in ("", "0"):
        raise pytest.UsageError(f"{CI_ENV} is set: CI compares the goldens, it never rewrites them")


@pytest.fixture
def update_golden(request: pytest.FixtureRequest) -> bool:
    return bool(request.config.getoption("--update-golden"))


@pytest.fixture
def server() -> Iterator[ApiServer]:
    """A loopback API server that records each request as it arrives (a module may define its own)."""
    s = ApiServer()
    yield s
    s.close()


@pytest.fixture
def pki(tmp_path: Path) -> Pki:
    return Pki(tmp_path)


@pytest.fixture
def tls_server(pki: Pki) -> Iterator[ApiServer]:
    s = ApiServer(tls=pki.server_context())
    yield s
    s.close()
