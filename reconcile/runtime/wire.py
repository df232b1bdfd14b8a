"""HTTP/1.1 requests to the API server on kept-alive connections, and watches.

Through urllib3 and ``http.client`` most of a request's CPU was Python: ``http.client`` parses each
answer's headers with the ``email`` package, and urllib3 adds its pool and retry bookkeeping. Here a
request is one ``sendall`` and the answer is parsed by httptools (llhttp, in C); what that saves per job
is measured in docs/performance.md.

The connections are urllib3's, made by the pool the kubernetes client's pool manager holds for the API
server, so TLS, client certificates, the server's certificate check and proxies are exactly the kubernetes
client's: an HTTPS server behind a proxy is reached through a CONNECT tunnel (as urllib3 sets it up), a
plain-HTTP one by sending each request to the proxy with the whole URL (the proxy forwards it), and a SOCKS
proxy is dialled by urllib3's SOCKS connections. A watch's answer is read as it comes (``stream``) on a
connection of its own, in pieces of up to 64 KiB: urllib3 read a chunked stream chunk by chunk in Python.

Kept-alive connections wait on one stack, which the operator's threads (workers, informers, leader
election) share: taking one from it and putting one back happen under a lock.

A kept-alive connection the server has closed is found before it is used (it reads as readable). A
request that finds one closed anyway is sent again on a new connection if it could not have been
processed (the send failed) or is a read; a write that was sent and got no answer fails as a connection
error, which callers treat as any other (the next sync sees what the server did), as Go's net/http does.

A request's timeout is one deadline for the whole exchange, not a limit per read: a server that trickles
its answer cannot hold a caller past it. A request that fails or runs past it has its connection reset
(``SO_LINGER`` 0), not closed: a close leaves the bytes not yet acknowledged to the kernel, which goes on
sending them, so across a network that holds packets a write given up on could still arrive later (and a
leader's fenced write land after a standby took over). A reset discards them.
"""

from __future__ import annotations

import contextlib
import socket
import struct
import threading
import time
from collections.abc import Iterator, Mapping
from typing import Any

import httptools
import urllib3
from urllib3.util import Url, parse_url, wait_for_read
from urllib3.util.proxy import connection_requires_http_tunnel

RECV_BYTES = 64 * 1024  # above one TLS record (16 KiB), below malloc's mmap threshold
_REPLAYABLE = frozenset({"GET", "HEAD", "OPTIONS"})
_LINGER_NONE = struct.pack("ii", 1, 0)  # on, 0 s: close() sends RST and drops the unsent bytes


class WireError(ConnectionError):
    """The request got no whole answer: the connection closed, timed out or carried something not HTTP."""


class _Headers:
    """The answer's headers, looked up rarely (Retry-After on a 429), so kept as the parser gave them."""

    __slots__ = ("_pairs",)

    def __init__(self, pairs: list[tuple[bytes, bytes]]) -> None:
        self._pairs = pairs

    def get(self, name: str, default: str | None = None) -> str | None:
        want = name.lower().encode("ascii")
        found = default
        for key, value in self._pairs:
            if key.lower() == want:
                found = value.decode("latin-1")
        return found


class Answer:
    """An answer read whole, with the parts of urllib3's response the callers use."""

    __slots__ = ("data", "headers", "reason", "status")

    def __init__(self, status: int, reason: str, headers: list[tuple[bytes, bytes]], data: bytes) -> None:
        self.status = status
        self.reason = reason
        self.headers = _Headers(headers)
        self.data = data

    def read(self) -> bytes:
        return self.data

    def release_conn(self) -> None:
        """Nothing to give back: the connection went back to the stack when the answer was read."""


class _Reading:
    """httptools' callbacks for one answer."""

    __slots__ = ("chunks", "done", "headers", "headers_done", "keep_alive", "parser", "reason", "status")
    parser: Any

    def __init__(self) -> None:
        self.status = 0
        self.reason = b""
        self.headers: list[tuple[bytes, bytes]] = []
        self.headers_done = False
        self.chunks: list[bytes] = []
        self.done = False
        self.keep_alive = False
        self.parser = httptools.HttpResponseParser(self)

    def feed(self, data: bytes) -> None:
        try:
            self.parser.feed_data(data)
        except httptools.HttpParserError as err:
            raise WireError(f"not an HTTP answer: {err}") from None

    def on_status(self, reason: bytes) -> None:
        self.reason += reason

    def on_header(self, name: bytes, value: bytes) -> None:
        self.headers.append((name, value))

    def on_headers_complete(self) -> None:
        self.status = self.parser.get_status_code()
        self.headers_done = True

    def on_body(self, body: bytes) -> None:
        self.chunks.append(body)

    def on_message_complete(self) -> None:
        # asked here: the parser forgets it once the message is over
        self.keep_alive = self.parser.should_keep_alive()
        self.done = True
        self.parser = None  # no cycle with the parser, which holds these callbacks


def server_url(url: str) -> Url:
    """``url`` parsed if it names an http(s) server (without a scheme: http, as urllib3 reads it), else
    ``ValueError``."""
    parsed = parse_url(url)
    scheme = parsed.scheme or "http"
    if scheme not in ("http", "https") or not parsed.host:
        raise ValueError(f"the API server's URL is not http(s)://host[:port][/path]: {url!r}")
    return parsed._replace(scheme=scheme)


def _host_header(pool: urllib3.HTTPConnectionPool) -> str:
    host = str(pool.host)
    if ":" in host and not host.startswith("["):
        host = f"[{host}]"
    default = 443 if pool.scheme == "https" else 80
    return host if pool.port in (None, default) else f"{host}:{pool.port}"


class Connections:
    """A stack of kept-alive connections to one server; ``request`` takes one, sends, reads the whole
    answer, and puts it back; ``stream`` keeps its connection for the answer it reads as it comes."""

    def __init__(
        self,
        pool: urllib3.HTTPConnectionPool,
        prefix: str = "",
        *,
        host: str | None = None,
        headers: Mapping[str, str] | None = None,
        tunnel: bool = False,
    ) -> None:
        """``pool`` makes the connections (its TLS settings and proxy); ``prefix`` goes before every
        target; ``host`` is the Host header (else the pool's server); ``headers`` go with every request;
        ``tunnel``: each new connection first opens a CONNECT tunnel through the pool's proxy."""
        self._pool = pool
        self._prefix = prefix
        self._host = host or _host_header(pool)
        self._headers = [f"{k}: {v}" for k, v in (headers or {}).items()]
        self._tunnel = tunnel
        self._idle: list[Any] = []
        self._lock = threading.Lock()

    @classmethod
    def to(cls, manager: urllib3.PoolManager, url: str) -> Connections:
        """Connections to the server at ``url`` (its path a prefix of every target), made with the
        settings of ``manager``: TLS, client certificate and proxy."""
        parsed = server_url(url)
        pool = manager.connection_from_url(url)
        prefix = (parsed.path or "").rstrip("/")
        proxy = pool.proxy
        if proxy is None:
            return cls(pool, prefix)
        if connection_requires_http_tunnel(proxy, pool.proxy_config, parsed.scheme):
            return cls(pool, prefix, tunnel=True)
        # The pool is the proxy's: each request names the whole URL, and the proxy forwards it.
        origin = f"{parsed.scheme}://{parsed.netloc}"
        return cls(pool, origin + prefix, host=parsed.netloc, headers=pool.proxy_headers)

    def _take(self, connect_timeout: float | None) -> tuple[Any, bool]:
        """A connection and whether it served a request before; a new one waits at most
        ``connect_timeout`` for its TCP and TLS handshakes (and its proxy's tunnel)."""
        while True:
            with self._lock:
                if not self._idle:
                    break
                conn = self._idle.pop()
            if conn.sock is not None and not wait_for_read(conn.sock, timeout=0.0):
                return conn, True  # (a closed one reads as readable: EOF)
            conn.close()
        conn = self._pool._new_conn()  # the pool's TLS settings; urllib3 has no public constructor for it
        conn.timeout = connect_timeout
        if self._tunnel:
            self._pool._prepare_proxy(conn)  # CONNECT, then TLS with the server through the tunnel
        else:
            conn.connect()
        return conn, False

    def _put(self, conn: Any) -> None:
        with self._lock:
            self._idle.append(conn)

    def request(
        self,
        method: str,
        target: str,
        body: bytes | None,
        headers: Mapping[str, str],
        timeout: float | tuple[float, float] | None,
    ) -> Answer:
        """The whole answer. ``target``: the path (without the server's prefix) and query. ``timeout``:
        the seconds the whole request may take, or (for a new connection's handshakes, for everything)."""
        conn, reading = self._send(method, target, body, headers, timeout, until_headers=False)
        answer = Answer(
            reading.status,
            reading.reason.decode("latin-1"),
            reading.headers,
            b"".join(reading.chunks),
        )
        if reading.keep_alive:
            self._put(conn)
        else:
            conn.close()
        return answer

    def stream(
        self,
        method: str,
        target: str,
        headers: Mapping[str, str],
        timeout: float | tuple[float, float] | None,
    ) -> Stream:
        """The answer's status and headers; its body read as it comes (a watch). The connection is the
        stream's alone, and closed with it. ``timeout``: (for a new connection's handshakes, for the
        status and headers and then for each read of the body)."""
        conn, reading = self._send(method, target, None, headers, timeout, until_headers=True)
        conn.sock.settimeout(timeout[1] if isinstance(timeout, tuple) else timeout)  # now per read
        return Stream(conn, reading)

    def _send(
        self,
        method: str,
        target: str,
        body: bytes | None,
        headers: Mapping[str, str],
        timeout: float | tuple[float, float] | None,
        *,
        until_headers: bool,
    ) -> tuple[Any, _Reading]:
        lines = [f"{method} {self._prefix}{target} HTTP/1.1", f"Host: {self._host}", *self._headers]
        lines += [f"{k}: {v}" for k, v in headers.items()]
        if body is not None or method in ("POST", "PUT", "PATCH"):
            lines.append(f"Content-Length: {len(body or b'')}")
        message = ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1") + (body or b"")
        connect_timeout, total = timeout if isinstance(timeout, tuple) else (timeout, timeout)
        deadline = None if total is None else time.monotonic() + total
        while True:
            conn, reused = self._take(_within(connect_timeout, deadline))
            try:
                return conn, _exchange(conn, message, deadline, until_headers)
            except _ClosedUnanswered as closed:
                reset(conn)
                if not reused or (closed.sent and method not in _REPLAYABLE):
                    raise WireError("the server closed the connection before answering") from None
            except TimeoutError:
                reset(conn)
                raise TimeoutError(f"no answer within {total} s; the connection was reset") from None
            except BaseException:
                reset(conn)
                raise

    def close(self) -> None:
        """Close the idle connections (streams close their own)."""
        with self._lock:
            idle, self._idle = self._idle, []
        for conn in idle:
            conn.close()


def _within(timeout: float | None, deadline: float | None) -> float | None:
    """``timeout``, cut to what is left before ``deadline`` (monotonic); TimeoutError if nothing is."""
    if deadline is None:
        return timeout
    left = deadline - time.monotonic()
    if left <= 0:
        raise TimeoutError("the request's deadline passed")
    return left if timeout is None else min(timeout, left)


def reset(conn: Any) -> None:
    """Close ``conn`` with a TCP reset: whatever of ours the peer has not acknowledged is dropped."""
    sock = conn.sock
    if sock is not None:
        with contextlib.suppress(OSError):  # already closed under us: nothing left to send
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, _LINGER_NONE)
    conn.close()


def _exchange(conn: Any, message: bytes, deadline: float | None, until_headers: bool) -> _Reading:
    """Send ``message`` and read the answer, whole or up to the end of its headers, by ``deadline``."""
    sock = conn.sock
    sock.settimeout(_within(None, deadline))
    try:
        sock.sendall(message)
    except TimeoutError:
        raise
    except OSError:
        raise _ClosedUnanswered(sent=False) from None
    reading = _Reading()
    got = False
    while not (reading.headers_done if until_headers else reading.done):
        if deadline is not None:
            sock.settimeout(_within(None, deadline))
        data = sock.recv(RECV_BYTES)
        if not data:
            if not got:
                raise _ClosedUnanswered(sent=True)
            raise WireError("the server closed the connection in the middle of an answer")
        got = True
        reading.feed(data)
    return reading


class Stream:
    """An answer read as it comes, with the parts of urllib3's streaming response the callers use."""

    def __init__(self, conn: Any, reading: _Reading) -> None:
        self._conn = conn
        self._reading = reading
        self.status = reading.status
        self.reason = reading.reason.decode("latin-1")
        self.headers = _Headers(reading.headers)

    def chunks(self) -> Iterator[bytes]:
        """The body's pieces as they arrive, until the answer ends."""
        reading, sock = self._reading, self._conn.sock
        while True:
            if reading.chunks:
                pieces, reading.chunks = reading.chunks, []
                yield from pieces
            if reading.done:
                return
            data = sock.recv(RECV_BYTES)
            if not data:
                raise WireError("the server closed the connection in the middle of an answer")
            reading.feed(data)

    @property
    def data(self) -> bytes:
        """The rest of the body, read whole (an error's Status)."""
        try:
            return b"".join(self.chunks())
        finally:
            self.release_conn()

    def shutdown(self) -> None:
        """Wake a reader blocked on this stream in another thread (it then reads the end)."""
        sock = self._conn.sock
        if sock is not None:
            sock.shutdown(socket.SHUT_RDWR)

    def release_conn(self) -> None:
        self._conn.close()


class _ClosedUnanswered(Exception):
    """The connection failed before any byte of the answer came; ``sent``: after the whole request went."""

    def __init__(self, *, sent: bool) -> None:
        super().__init__()
        self.sent = sent
