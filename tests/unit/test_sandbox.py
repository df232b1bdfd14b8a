"""The sandbox's pure parts: the address plan, the relay's routes and bytes, the machine record's
differences, and the network guard's refusal to work in a namespace it must not change."""

from __future__ import annotations

import asyncio
import contextlib
import os
import socket
import threading
from pathlib import Path

import pytest

from localcluster.sandbox import layout, machine, namespace, relay


def test_node_addresses_are_stable_and_distinct() -> None:
    nodes = [layout.node_address(i) for i in range(1, 4)]
    assert [n.name for n in nodes] == ["real-node-1", "real-node-2", "real-node-3"]
    assert [n.ip for n in nodes] == ["10.77.0.11", "10.77.0.12", "10.77.0.13"]
    assert [str(n.pod_subnet) for n in nodes] == ["10.77.1.0/24", "10.77.2.0/24", "10.77.3.0/24"]
    assert len({n.mac for n in nodes}) == 3 and layout.BRIDGE_MAC not in {n.mac for n in nodes}
    assert all(n.pod_subnet.subnet_of(layout.NETWORK) for n in nodes)
    assert layout.node_address(2) == layout.node_address(2)
    assert layout.node_index("real-node-12") == 12


@pytest.mark.parametrize("name", ["real-node", "node-1", "real-node-x", "real-node-0", "real-node-201"])
def test_other_names_are_not_nodes(name: str) -> None:
    with pytest.raises(ValueError):
        layout.node_index(name)


def test_relay_routes_are_checked() -> None:
    assert relay.parse_route("tcp:127.0.0.1:6443=unix:/x/api.sock") == (
        "tcp:127.0.0.1:6443",
        "unix:/x/api.sock",
    )
    for bad in ("tcp:127.0.0.1:1", "udp:1:2=tcp:1:2", "tcp:1:2=", "=unix:/a"):
        with pytest.raises(ValueError, match="LISTEN=TARGET"):
            relay.parse_route(bad)


def test_relay_carries_bytes_both_ways_through_a_socket_file(tmp_path: Path) -> None:
    """TCP -> unix socket -> TCP, as the machine reaches the sandbox's apiserver."""
    echo = socket.create_server(("127.0.0.1", 0))
    echo_port = echo.getsockname()[1]

    def serve_echo() -> None:
        conn, _ = echo.accept()
        with conn:
            while data := conn.recv(65536):
                conn.sendall(data[::-1])

    threading.Thread(target=serve_echo, daemon=True).start()
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        front_port = probe.getsockname()[1]
    sock = tmp_path / "api.sock"
    routes = [(f"unix:{sock}", f"tcp:127.0.0.1:{echo_port}"), (f"tcp:127.0.0.1:{front_port}", f"unix:{sock}")]
    loop = asyncio.new_event_loop()
    task = loop.create_task(relay.serve(routes))

    def run() -> None:
        with contextlib.suppress(asyncio.CancelledError):
            loop.run_until_complete(task)
        rest = asyncio.all_tasks(loop)  # the connections' handlers
        for pending in rest:
            pending.cancel()
        loop.run_until_complete(asyncio.gather(*rest, return_exceptions=True))
        loop.close()

    runner = threading.Thread(target=run, daemon=True)
    runner.start()
    try:
        for _ in range(100):
            try:
                client = socket.create_connection(("127.0.0.1", front_port), timeout=5)
                break
            except OSError:
                threading.Event().wait(0.05)
        with client:
            client.sendall(b"hello apiserver")
            assert client.recv(100) == b"revresipa olleh"
    finally:
        loop.call_soon_threadsafe(task.cancel)
        runner.join(timeout=5)
        echo.close()


def test_differences_name_what_changed() -> None:
    before = machine.snapshot()
    assert machine.differences(before, machine.snapshot()) == []
    after = dict(before, routes=before["routes"] + "blackhole 10.77.250.0/24\n")
    before = dict(before)
    before[machine.PARENTS] += " 999999999@1"  # a parent that has ended since
    assert machine.differences(before, after) == [
        f"{machine.PARENTS}: gone ['999999999@1']",
        "routes: added ['blackhole 10.77.250.0/24'] removed []",
    ]


def test_the_record_covers_what_a_node_could_change() -> None:
    record = machine.snapshot()
    for key in ("links", "addresses", "routes", "rules", "iptables", "ip_forward", "resolv.conf", "mounts"):
        assert key in record
    assert "sysctl kernel/panic" in record and "runner's parents" in record


def test_the_guard_refuses_an_unknown_or_forbidden_namespace(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(namespace.FORBIDDEN_NETNS_ENV, raising=False)
    with pytest.raises(namespace.NotSealed, match="not set"):
        namespace.ip("link", "show")
    monkeypatch.setenv(namespace.FORBIDDEN_NETNS_ENV, f"1:{namespace.netns_inode()}")
    # Read-only commands: were the guard broken, nothing of the machine would change.
    with pytest.raises(namespace.NotSealed, match="must not change"):
        namespace.ip("link", "show")
    child = namespace.forbid_own()[namespace.FORBIDDEN_NETNS_ENV]
    assert child.split(":")[-1] == str(namespace.netns_inode())


def test_only_network_settings_belong_to_a_namespace(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(namespace.FORBIDDEN_NETNS_ENV, str(os.stat("/proc/self/ns/net").st_ino + 1))
    with pytest.raises(ValueError, match="only net"):
        namespace.sysctl("kernel/panic", "10")
