"""L0: ``wire.Connections`` against a loopback server scripted per connection: kept-alive connections are
reused, one the server closed is not, and a write that may have been processed is never sent twice."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Callable, Iterator

import pytest
import urllib3

from localcluster.wait import wait_for
from reconcile.runtime.wire import Connections, WireError
from tests.unit.loopback import read_request

OK = b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 2\r\n\r\n{}"


class Scripted:
    """A loopback server; the n-th connection it accepts is served by ``scripts[n]``."""

    def __init__(self, scripts: list[Callable[[socket.socket], None]]) -> None:
        self.scripts = scripts
        self.requests: list[bytes] = []
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.port = self.sock.getsockname()[1]
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        for script in self.scripts:
            conn, _ = self.sock.accept()
            threading.Thread(target=self._run, args=(script, conn), daemon=True).start()

    def _run(self, script: Callable[[socket.socket], None], conn: socket.socket) -> None:
        with conn:
            script(conn)

    def take(self, conn: socket.socket) -> bytes:
        """One request (head and a Content-Length body), recorded; b"" when the client closed."""
        got = read_request(conn)
        if got is None:
            return b""
        head, body, _ = got
        request = head + b"\r\n\r\n" + body
        self.requests.append(request)
        return request


@pytest.fixture
def make() -> Iterator[Callable[[list[Callable[[socket.socket], None]]], tuple[Scripted, Connections]]]:
    servers: list[Scripted] = []

    def build(scripts: list[Callable[[socket.socket], None]]) -> tuple[Scripted, Connections]:
        server = Scripted(scripts)
        servers.append(server)
        pool = urllib3.HTTPConnectionPool("127.0.0.1", server.port)
        return server, Connections(pool, "/prefix")

    yield build
    for s in servers:
        s.sock.close()


def test_one_connection_serves_request_after_request(make) -> None:
    def keep_answering(conn: socket.socket) -> None:
        while server.take(conn):
            conn.sendall(OK)

    server, wire = make([keep_answering])
    for i in range(3):
        answer = wire.request("POST", f"/p{i}", b'{"a":1}', {"Content-Type": "application/json"}, 5)
        assert (answer.status, answer.reason, answer.data) == (200, "OK", b"{}")
    assert len(server.requests) == 3
    first = server.requests[0]
    assert first.startswith(b"POST /prefix/p0 HTTP/1.1\r\nHost: 127.0.0.1:")
    assert b"\r\nContent-Length: 7\r\n\r\n" in first and first.endswith(b'{"a":1}')


def test_a_chunked_answer_and_its_headers_are_read_whole(make) -> None:
    def chunked(conn: socket.socket) -> None:
        server.take(conn)
        conn.sendall(
            b"HTTP/1.1 429 Too Many Requests\r\nRetry-After: 3\r\nTransfer-Encoding: chunked\r\n\r\n"
            b'3\r\n{"a\r\n4\r\n":1}\r\n0\r\n\r\n'
        )
        server.take(conn)

    server, wire = make([chunked])
    answer = wire.request("GET", "/x", None, {}, 5)
    assert (answer.status, answer.reason, answer.data) == (429, "Too Many Requests", b'{"a":1}')
    assert answer.headers.get("retry-after") == "3" and answer.headers.get("X-None") is None
    assert b"Content-Length" not in server.requests[0]


def test_a_kept_alive_connection_the_server_closed_is_not_used(make) -> None:
    def answer_once_then_close(conn: socket.socket) -> None:
        server.take(conn)
        conn.sendall(OK)  # kept alive as far as the client knows

    server, wire = make([answer_once_then_close, answer_once_then_close])
    wire.request("POST", "/a", b"{}", {}, 5)
    # wait until the server's close has reached the client
    while not wire._idle or not urllib3.util.wait_for_read(wire._idle[-1].sock, timeout=0.05):
        pass
    answer = wire.request("POST", "/b", b"{}", {}, 5)
    assert answer.status == 200 and len(server.requests) == 2


def test_a_write_that_got_no_answer_is_not_sent_again(make) -> None:
    def closes_before_answering(conn: socket.socket) -> None:
        server.take(conn)
        conn.sendall(OK)
        server.take(conn)  # the second request arrives and is dropped unanswered

    server, wire = make([closes_before_answering])
    wire.request("GET", "/a", None, {}, 5)
    with pytest.raises(WireError) as err:
        wire.request("POST", "/b", b"{}", {}, 5)
    assert isinstance(err.value, OSError)  # callers treat it as any transport error
    sent = [r.split(b" ", 2)[:2] for r in server.requests]
    assert sent == [[b"GET", b"/prefix/a"], [b"POST", b"/prefix/b"]]


def test_a_read_that_got_no_answer_is_sent_again_on_a_new_connection(make) -> None:
    def closes_before_answering(conn: socket.socket) -> None:
        server.take(conn)
        conn.sendall(OK)
        server.take(conn)

    def answers(conn: socket.socket) -> None:
        while server.take(conn):
            conn.sendall(OK)

    server, wire = make([closes_before_answering, answers])
    wire.request("GET", "/a", None, {}, 5)
    assert wire.request("GET", "/b", None, {}, 5).status == 200
    assert [r.split(b" ", 2)[1] for r in server.requests] == [b"/prefix/a", b"/prefix/b", b"/prefix/b"]


def test_an_answer_cut_short_is_an_error_and_its_connection_is_dropped(make) -> None:
    def cut(conn: socket.socket) -> None:
        server.take(conn)
        conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\n{}")

    def answers(conn: socket.socket) -> None:
        while server.take(conn):
            conn.sendall(OK)

    server, wire = make([cut, answers])
    with pytest.raises(WireError, match="middle of an answer"):
        wire.request("GET", "/a", None, {}, 5)
    assert wire._idle == []
    assert wire.request("GET", "/b", None, {}, 5).status == 200


def test_a_silent_server_times_out(make) -> None:
    stop = threading.Event()

    def silent(conn: socket.socket) -> None:
        server.take(conn)
        stop.wait(5)

    server, wire = make([silent])
    with pytest.raises(OSError):
        wire.request("GET", "/a", None, {}, 0.2)
    stop.set()
    assert wire._idle == []


def test_a_stream_yields_each_piece_as_it_comes(make) -> None:
    first_read = threading.Event()

    def watch(conn: socket.socket) -> None:
        server.take(conn)
        conn.sendall(b'HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n6\r\n{"a":1\r\n')
        if not first_read.wait(5):  # the rest only once the client has the first piece
            return
        conn.sendall(b"2\r\n}\n\r\n0\r\n\r\n")

    server, wire = make([watch])
    stream = wire.stream("GET", "/w?watch=true", {}, (1, 5))
    assert stream.status == 200
    pieces = []
    for piece in stream.chunks():
        pieces.append(piece)
        first_read.set()
    assert b"".join(pieces) == b'{"a":1}\n' and pieces[0] == b'{"a":1'
    stream.release_conn()
    assert wire._idle == []  # a stream's connection is its own


def test_shutting_a_stream_down_wakes_its_reader(make) -> None:
    def silent_watch(conn: socket.socket) -> None:
        server.take(conn)
        conn.sendall(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n")
        conn.recv(1)  # until the client goes

    server, wire = make([silent_watch])
    stream = wire.stream("GET", "/w", {}, (1, 30))
    threading.Timer(0.2, stream.shutdown).start()
    with pytest.raises(WireError):
        list(stream.chunks())


def test_an_error_answer_on_a_stream_is_read_whole(make) -> None:
    def gone(conn: socket.socket) -> None:
        server.take(conn)
        conn.sendall(b'HTTP/1.1 410 Gone\r\nContent-Length: 13\r\n\r\n{"code":410}\n')

    server, wire = make([gone])
    stream = wire.stream("GET", "/w", {}, (1, 5))
    assert (stream.status, stream.reason, stream.data) == (410, "Gone", b'{"code":410}\n')


def test_a_new_connection_waits_no_longer_than_the_connect_timeout() -> None:
    stop = threading.Event()
    server = Scripted([lambda conn: stop.wait(3600)])  # takes the TCP connection, never answers TLS
    wire = Connections(urllib3.HTTPSConnectionPool("127.0.0.1", server.port))
    # The read timeout outlasts the test's own timeout: only the connect timeout can end the request.
    with pytest.raises((OSError, urllib3.exceptions.HTTPError)):
        wire.request("GET", "/a", None, {}, (0.3, 3600))
    assert not stop.is_set()  # the server still holds the connection: the client gave up by itself
    stop.set()
    server.sock.close()


def test_the_timeout_bounds_the_whole_request_not_each_read(make) -> None:
    """A server that sends one byte of its answer every 0.1 s never lets a read wait 0.4 s; the request
    still ends at its deadline."""
    stop = threading.Event()

    def trickle(conn: socket.socket) -> None:
        server.take(conn)
        for byte in OK[:-1]:
            if stop.wait(0.1):
                return
            conn.sendall(bytes([byte]))

    server, wire = make([trickle])
    began = time.monotonic()
    with pytest.raises(TimeoutError, match=r"within 0\.4 s"):
        wire.request("POST", "/a", b"{}", {}, 0.4)
    assert time.monotonic() - began < 2.0
    stop.set()


def test_a_request_given_up_on_resets_its_connection(make) -> None:
    """Past its deadline the connection is reset, not closed: the peer reads ECONNRESET, not an orderly
    end, so no byte the client sent can still be on its way."""
    seen: list[object] = []

    def silent(conn: socket.socket) -> None:
        server.take(conn)
        conn.settimeout(5)
        try:
            seen.append(conn.recv(1))
        except OSError as err:
            seen.append(type(err))

    server, wire = make([silent])
    with pytest.raises(TimeoutError):
        wire.request("POST", "/a", b"{}", {}, 0.2)
    wait_for(lambda: seen, "the server's read to end", 5)
    assert seen == [ConnectionResetError]
    assert wire._idle == []
