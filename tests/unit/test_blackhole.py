"""L0: the chaos tier's partition proxy on loopback, between a TLS client and a TLS server that records
what reaches it: held bytes are delivered when the partition heals, dropped when their sender resets,
kept when it closes; a partition can start at a chosen request."""

from __future__ import annotations

import socket
import ssl
import struct
import threading
import time
from collections.abc import Iterator

import pytest

from localcluster.chaos.blackhole import PartitionProxy
from localcluster.wait import wait_for
from tests.unit.loopback import Pki


class Recorder:
    """A TLS server that records each connection's bytes and answers each piece with ``ok``."""

    def __init__(self, ctx: ssl.SSLContext) -> None:
        self.ctx = ctx
        self.received: list[bytes] = []
        self.ended: list[str] = []  # how each connection ended: "eof" (TLS closed in order) or an error
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.port = self.sock.getsockname()[1]
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            threading.Thread(target=self._serve, args=(conn,), daemon=True).start()

    def _serve(self, conn: socket.socket) -> None:
        try:
            tls = self.ctx.wrap_socket(conn, server_side=True, suppress_ragged_eofs=False)
        except (OSError, ssl.SSLError):
            return
        with tls:
            while True:
                try:
                    data = tls.recv(65536)
                except (ssl.SSLError, OSError) as err:
                    self.ended.append(type(err).__name__)
                    return
                if not data:
                    self.ended.append("eof")
                    return
                self.received.append(data)
                tls.sendall(b"ok")


@pytest.fixture
def upstream(pki: Pki) -> Iterator[Recorder]:
    server = Recorder(pki.server_context())
    yield server
    server.sock.close()


@pytest.fixture
def proxy(pki: Pki, upstream: Recorder) -> Iterator[PartitionProxy]:
    with PartitionProxy(f"https://127.0.0.1:{upstream.port}", **pki.proxy_args()) as p:
        yield p


def connect(pki: Pki, proxy: PartitionProxy, timeout: float = 5.0) -> ssl.SSLSocket:
    ctx = ssl.create_default_context(cafile=str(pki.ca_file))
    sock = socket.create_connection(("127.0.0.1", proxy.port), timeout=timeout)
    return ctx.wrap_socket(sock, server_hostname="127.0.0.1")


def reset(sock: ssl.SSLSocket) -> None:
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    sock.close()


def test_bytes_cross_while_connected(pki, proxy, upstream) -> None:
    with connect(pki, proxy) as sock:
        sock.sendall(b"GET /a")
        assert sock.recv(10) == b"ok"
    assert upstream.received == [b"GET /a"]


def test_held_bytes_arrive_when_the_partition_heals(pki, proxy, upstream) -> None:
    with connect(pki, proxy) as sock:
        sock.sendall(b"GET /warm")
        assert sock.recv(10) == b"ok"
        proxy.partition()
        sock.sendall(b"POST /late")
        sock.settimeout(0.5)
        with pytest.raises(TimeoutError):
            sock.recv(10)  # neither the request nor an answer crosses
        assert upstream.received == [b"GET /warm"]
        proxy.heal()
        sock.settimeout(5)
        assert sock.recv(10) == b"ok"
    assert upstream.received == [b"GET /warm", b"POST /late"]
    assert proxy.counts["requests held"] == 1 and proxy.counts["requests delivered late"] == 1


def held(pki: Pki, proxy: PartitionProxy, request: bytes) -> ssl.SSLSocket:
    """A connection that served one request, then sent ``request`` into a partition."""
    sock = connect(pki, proxy)
    sock.sendall(b"GET /warm")
    assert sock.recv(10) == b"ok"
    proxy.partition()
    sock.sendall(request)
    wait_for(lambda: proxy.counts["requests held"] == 1, "the request held", 5)
    return sock


def test_a_reset_drops_what_was_held(pki, proxy, upstream) -> None:
    reset(held(pki, proxy, b"POST /never"))
    wait_for(lambda: upstream.ended, "the upstream connection to end", 5)
    proxy.heal()
    time.sleep(0.3)
    assert upstream.received == [b"GET /warm"]
    assert upstream.ended != ["eof"]  # cut, not closed in order
    assert proxy.counts["requests dropped on reset"] == 1


def test_a_close_keeps_what_was_held(pki, proxy, upstream) -> None:
    held(pki, proxy, b"POST /late").close()  # an orderly close: TCP still delivers the data ahead of the FIN
    time.sleep(0.3)
    proxy.heal()
    wait_for(lambda: len(upstream.received) == 2, "the held request", 5)
    assert upstream.received == [b"GET /warm", b"POST /late"]


def test_a_partition_starts_at_the_chosen_request(pki, proxy, upstream) -> None:
    proxy.partition_at(lambda head: head.startswith(b"POST /api/v1/namespaces/x/pods "))
    with connect(pki, proxy) as sock:
        sock.sendall(b"POST /api/v1/namespaces/x/services HTTP/1.1")
        assert sock.recv(10) == b"ok"
        assert not proxy.partitioned
        sock.sendall(b"POST /api/v1/namespaces/x/pods HTTP/1.1")
        wait_for(lambda: proxy.partitioned, "the partition", 5)
        time.sleep(0.3)
        assert len(upstream.received) == 1
        proxy.heal()
        sock.settimeout(5)
        assert sock.recv(10) == b"ok"
    assert len(upstream.received) == 2


def test_a_new_connection_waits_for_the_heal(pki, proxy, upstream) -> None:
    proxy.partition()
    with pytest.raises((TimeoutError, ssl.SSLError, OSError)):
        connect(pki, proxy, timeout=0.5)  # TCP connects; the TLS handshake gets no answer
    assert proxy.counts["connections held"] == 1
    proxy.heal()
    with connect(pki, proxy) as sock:
        sock.sendall(b"GET /b")
        assert sock.recv(10) == b"ok"
