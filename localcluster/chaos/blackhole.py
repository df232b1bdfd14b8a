"""A relay on loopback between one operator and kube-apiserver that can black-hole it, as a network
partition does: nothing refused, nothing closed, every byte held, and what was held delivered when the
partition heals, as TCP's retransmissions would deliver it.

It terminates TLS on both sides (a serving certificate from the cluster's CA towards the operator, the
operator's client certificate towards the API server), so it sees each request's first line and can start
a partition at the moment a chosen request is sent. While partitioned:

* bytes either way are held, in order, per connection;
* a new connection's TCP handshake completes (the kernel answers it) but its TLS handshake waits;
* a connection the operator resets (RST) loses what it sent and was held: a reset discards the bytes its
  sender has not had acknowledged, so TCP would never deliver them; its upstream connection is reset too;
* a connection the operator closes (FIN) keeps what was held: TCP delivers the data before the FIN.

``counts`` tells what happened: requests held, delivered late, dropped on reset.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import ssl
import struct
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path

import attrs

from localcluster.chaos.tlsproxy import TlsProxy

CHUNK = 64 * 1024


@attrs.define(eq=False)
class _Link:
    """One operator connection and its upstream twin."""

    client: asyncio.StreamWriter
    upstream: asyncio.StreamWriter | None = None
    outgoing: asyncio.Queue[bytes | None] = attrs.Factory(asyncio.Queue)  # operator -> API server
    answered: asyncio.Event = attrs.Factory(asyncio.Event)  # the API server sent something
    holding: bool = False  # a request of the operator waits for the partition to heal
    client_eof: bool = False
    reset: bool = False


class PartitionProxy(TlsProxy):
    thread_name = "partition-proxy"

    def __init__(self, upstream: str, **tls: Path) -> None:
        """``tls``: ``TlsProxy``'s files."""
        super().__init__(**tls)
        host, _, port = upstream.removeprefix("https://").rstrip("/").rpartition(":")
        self._upstream = (host.strip("[]"), int(port))
        self.counts: Counter[str] = Counter()
        self._server: asyncio.Server | None = None
        self._links: set[_Link] = set()
        self._healed = asyncio.Event()
        self._trigger: Callable[[bytes], bool] | None = None
        self.partitions: list[tuple[float, float | None]] = []  # (began, healed) on the wall clock

    async def _start(self) -> None:
        self._healed.set()
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", 0, limit=CHUNK)
        self.port = self._server.sockets[0].getsockname()[1]

    async def _stop(self) -> None:
        self._healed.set()
        if self._server is not None:
            self._server.close()
        for link in list(self._links):
            _abort(link.client)
            if link.upstream is not None:
                _abort(link.upstream)

    # -- the fault ----------------------------------------------------------------------------------
    def partition(self) -> None:
        """Black-hole every connection from now on, until ``heal``."""
        self._call(self._partition)

    def partition_at(self, trigger: Callable[[bytes], bool]) -> None:
        """Black-hole every connection from the moment the operator sends a request whose first bytes
        (its request line and headers) ``trigger`` accepts; that request is the first one held."""
        self._call(lambda: setattr(self, "_trigger", trigger))

    def heal(self) -> None:
        """Deliver what was held, in order, and relay again."""
        self._call(self._heal)

    @property
    def partitioned(self) -> bool:
        return not self._healed.is_set()

    def _call(self, fn: Callable[[], None]) -> None:
        async def run() -> None:
            fn()

        asyncio.run_coroutine_threadsafe(run(), self._loop).result(10)

    def _partition(self) -> None:
        if self._healed.is_set():
            self._healed.clear()
            self._trigger = None
            self.partitions.append((time.time(), None))

    def _heal(self) -> None:
        self._trigger = None
        if not self._healed.is_set():
            self.partitions[-1] = (self.partitions[-1][0], time.time())
        self._healed.set()

    # -- relaying -----------------------------------------------------------------------------------
    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        link = _Link(writer)
        self._links.add(link)
        try:
            if not self._healed.is_set():
                # the SYN was answered (by the kernel); the TLS handshake crosses the partition
                self.counts["connections held"] += 1
                await self._healed.wait()
            await writer.start_tls(self._server_ctx)
            up_reader, link.upstream = await asyncio.open_connection(
                *self._upstream, ssl=self._client_ctx, limit=CHUNK
            )
            await asyncio.gather(
                self._read_up(reader, link), self._write_up(link), self._down(up_reader, link)
            )
        except (OSError, ssl.SSLError, asyncio.IncompleteReadError):
            pass
        finally:
            self._links.discard(link)
            _abort(writer)
            _abort(link.upstream)

    async def _read_up(self, reader: asyncio.StreamReader, link: _Link) -> None:
        """What the operator sends, queued for ``_write_up``; its reset or close."""
        while True:
            try:
                data = await reader.read(CHUNK)
            except (ConnectionResetError, ssl.SSLError, OSError):
                data, link.reset = b"", True
            if not data:
                break
            if self._trigger is not None and self._trigger(data):
                self._partition()
            link.outgoing.put_nowait(data)
        if link.reset:
            # A reset discards what its sender had not had acknowledged: nothing held is delivered.
            if link.holding:
                self.counts["requests dropped on reset"] += 1
            while not link.outgoing.empty():
                link.outgoing.get_nowait()
            _abort(link.upstream)
        else:
            link.client_eof = True
        link.outgoing.put_nowait(None)

    async def _write_up(self, link: _Link) -> None:
        """Operator -> API server, in order, each piece only while connected."""
        assert link.upstream is not None
        while (data := await link.outgoing.get()) is not None:
            if not self._healed.is_set():
                link.holding = True
                self.counts["requests held"] += 1
                await self._healed.wait()
                link.holding = False
                if link.reset:
                    return
                self.counts["requests delivered late"] += 1
            link.answered.clear()
            link.upstream.write(data)
            await _drain(link.upstream)
        if not link.reset:
            # Closed by the operator after what it sent: the data goes first, and the close reaches the
            # API server after its answer (the close alone would let it cancel the request).
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(link.answered.wait(), 10)
        _abort(link.upstream)

    async def _down(self, reader: asyncio.StreamReader, link: _Link) -> None:
        """API server -> operator, each piece only while connected."""
        while True:
            try:
                data = await reader.read(CHUNK)
            except (ConnectionResetError, ssl.SSLError, OSError):
                data = b""
            if not data:
                break
            link.answered.set()
            if not self._healed.is_set():
                await self._healed.wait()
            if link.reset or link.client_eof:
                continue  # nobody reads it
            link.client.write(data)
            await _drain(link.client)
        _abort(link.client)


async def _drain(writer: asyncio.StreamWriter) -> None:
    with contextlib.suppress(ConnectionError, OSError):
        await writer.drain()


def _abort(writer: asyncio.StreamWriter | None) -> None:
    """Reset the connection (as its sender's reset, or a relay giving up on it, would)."""
    if writer is None or writer.transport.is_closing():
        return
    sock = writer.get_extra_info("socket")
    if sock is not None:
        with contextlib.suppress(OSError):
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    writer.transport.abort()
