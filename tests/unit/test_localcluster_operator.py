"""L0: the operator runner's parts that need no cluster: /metrics parsing, teardown by PID only while
the PID is still the process we started, the ports handed to the servers it starts."""

from __future__ import annotations

import json
import socket
import sys
from pathlib import Path

from localcluster import processes
from localcluster.operator import OperatorRunner, parse_metrics, stop_recorded
from localcluster.processes import free_port, spawn, start_time
from localcluster.wait import wait_for

METRICS = """\
# HELP mpi_operator_is_leader Is this replica the leader
# TYPE mpi_operator_is_leader gauge
mpi_operator_is_leader 1.0
# TYPE mpi_operator_api_requests_total counter
mpi_operator_api_requests_total{code="201",kind="Pod",verb="create"} 3.0
mpi_operator_api_requests_total{code="200",kind="Lease",verb="update"} 7.0
"""


def test_metrics_are_parsed_by_sample_and_labels() -> None:
    got = parse_metrics(METRICS)
    assert got[("mpi_operator_is_leader", frozenset())] == 1.0
    key = (
        "mpi_operator_api_requests_total",
        frozenset({("code", "201"), ("kind", "Pod"), ("verb", "create")}),
    )
    assert got[key] == 3.0


def sleeper(tmp_path: Path) -> OperatorRunner:
    runner = OperatorRunner(tmp_path / "kubeconfig", tmp_path / "op.log")
    runner.proc = spawn(
        "sleeper", [sys.executable, "-c", "import time; time.sleep(60)"], runner.log_path, detached=True
    )
    return runner


def test_a_recorded_process_is_stopped_by_pid(tmp_path: Path) -> None:
    runner = sleeper(tmp_path)
    state = tmp_path / "operator.pid"
    runner.record(state)
    assert stop_recorded(state) is True
    wait_for(
        lambda: start_time(runner.pid) is None or runner.proc.popen.poll() is not None,
        "sleeper gone",
        10,
        0.05,
    )
    assert not state.exists()


def test_a_recycled_pid_is_never_signalled(tmp_path: Path) -> None:
    runner = sleeper(tmp_path)
    state = tmp_path / "operator.pid"
    runner.record(state)
    recorded = json.loads(state.read_text())
    state.write_text(json.dumps({**recorded, "started": recorded["started"] - 1}))  # another process
    try:
        assert stop_recorded(state) is False
        assert runner.alive() and not state.exists()
    finally:
        runner.stop(timeout=5)
    assert not runner.alive()


def test_free_ports_lie_below_the_ephemeral_range_and_are_never_handed_out_twice() -> None:
    low, _ = processes._ephemeral_range()
    ports = [free_port() for _ in range(50)]
    assert len(set(ports)) == 50
    if low > processes._LISTEN_PORTS_FROM:
        # no outgoing connection's source port can take them before the server binds
        assert all(processes._LISTEN_PORTS_FROM <= p < low for p in ports)
    with socket.socket() as held:  # each is bindable when handed out
        held.bind(("127.0.0.1", ports[-1]))


def _state(pid: int) -> str:
    """The process's state letter from /proc (after the parenthesised command name)."""
    return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]


def test_a_process_is_paused_and_resumed_by_its_recorded_pid(tmp_path: Path) -> None:
    proc = sleeper(tmp_path).proc
    assert proc is not None
    try:
        proc.pause()
        wait_for(lambda: _state(proc.pid) == "T", "stopped", 5, 0.05)
        proc.resume()
        wait_for(lambda: _state(proc.pid) in ("S", "R"), "running again", 5, 0.05)
    finally:
        proc.stop(timeout=5)
    proc.pause()  # gone: nothing is signalled
    assert not proc.alive()
