"""A fault-injecting HTTPS proxy between the operator and kube-apiserver, on loopback.

It forwards each request as the operator sent it (``TlsProxy``: the audit log still names the operator). A
seeded share of requests is answered by the proxy
instead: 500, 429, 409 (writes only), a connection reset before the request is forwarded, a reset *after*
it was forwarded (the write happened, the client never hears of it), or a delay; every watch is cut after
a random time (``watch_cut``; None: never). ``latency`` seconds are added to every request, watches
included, before it is forwarded: a slow API server. What was injected is counted in ``counts``.
"""

from __future__ import annotations

import asyncio
import json
import logging
import random
from collections import Counter
from pathlib import Path

import aiohttp
from aiohttp import web

from localcluster.chaos.tlsproxy import TlsProxy

# A reset is an exception out of the handler on purpose; aiohttp would log each with its traceback.
logging.getLogger("aiohttp.server").setLevel(logging.CRITICAL)

HOP = {"host", "content-length", "transfer-encoding", "connection", "keep-alive", "upgrade"}
FAULTS = ("500", "429", "409", "reset", "reset-after", "delay")


class FaultProxy(TlsProxy):
    thread_name = "fault-proxy"

    def __init__(
        self,
        upstream: str,
        *,
        rate: float = 0.1,
        watch_cut: tuple[float, float] | None = (1.0, 20.0),
        delay: tuple[float, float] = (0.1, 1.5),
        latency: float = 0.0,
        seed: int = 0,
        **tls: Path,
    ) -> None:
        """``tls``: ``TlsProxy``'s files."""
        super().__init__(**tls)
        self.upstream = upstream.rstrip("/")
        self.rate = rate
        self.watch_cut = watch_cut
        self.delay = delay
        self.latency = latency
        self.rng = random.Random(seed)
        self.counts: Counter[str] = Counter()
        self.enabled = True
        self._runner: web.AppRunner | None = None
        self._session: aiohttp.ClientSession | None = None

    async def _start(self) -> None:
        self._session = aiohttp.ClientSession(
            connector=aiohttp.TCPConnector(ssl=self._client_ctx, limit=0),
            auto_decompress=False,
            # only what the operator asked for: aiohttp's own Accept-Encoding would have the API server
            # gzip a large list, which the operator never asked for and does not read
            skip_auto_headers=("Accept-Encoding",),
            timeout=aiohttp.ClientTimeout(total=None, sock_connect=10),
        )
        app = web.Application(client_max_size=64 * 1024 * 1024)
        app.router.add_route("*", "/{tail:.*}", self._handle)
        # cleanup() waits shutdown_timeout for open handlers; the operator's watches never end by themselves
        # (aiohttp's 60 s default outlasted stop()'s 10 s and failed the scenario at its very end)
        self._runner = web.AppRunner(app, access_log=None, handle_signals=False, shutdown_timeout=2.0)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0, ssl_context=self._server_ctx)
        await site.start()
        self.port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]

    async def _stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
        if self._session is not None:
            await self._session.close()

    # -- one request --------------------------------------------------------------------------------
    def _choose(self, method: str, watch: bool) -> str:
        if not self.enabled or self.rng.random() >= self.rate:
            return ""
        faults = [f for f in FAULTS if f != "409" or method not in ("GET", "HEAD")]
        if watch:
            faults = [f for f in faults if f != "reset-after"]
        return self.rng.choice(faults)

    async def _handle(self, request: web.Request) -> web.StreamResponse:
        body = await request.read()
        watch = request.query.get("watch") in ("1", "true")
        fault = self._choose(request.method, watch)
        if fault:
            self.counts[fault] += 1
        if fault in ("500", "429", "409"):
            code = int(fault)
            reason = {500: "InternalError", 429: "TooManyRequests", 409: "Conflict"}[code]
            status = {
                "kind": "Status",
                "apiVersion": "v1",
                "status": "Failure",
                "message": f"injected by the fault proxy: {code}",
                "reason": reason,
                "code": code,
            }
            headers = {"Retry-After": "1"} if code == 429 else {}
            return web.json_response(status, status=code, headers=headers, dumps=json.dumps)
        if fault == "reset":
            return self._reset(request)
        if self.latency > 0:
            await asyncio.sleep(self.latency)
        if fault == "delay":
            await asyncio.sleep(self.rng.uniform(*self.delay))
        headers = {k: v for k, v in request.headers.items() if k.lower() not in HOP}
        assert self._session is not None
        try:
            upstream = await self._session.request(
                request.method,
                self.upstream + request.rel_url.raw_path_qs,
                headers=headers,
                data=body or None,
            )
        except (aiohttp.ClientError, OSError):
            return self._reset(request)  # the API server is down: the client sees what it would see
        async with upstream:
            if fault == "reset-after":
                await upstream.read()
                return self._reset(request)
            response = web.StreamResponse(
                status=upstream.status,
                headers={k: v for k, v in upstream.headers.items() if k.lower() not in HOP},
            )
            if upstream.headers.get("Content-Length") is not None and not watch:
                response.content_length = int(upstream.headers["Content-Length"])
            await response.prepare(request)
            cut_at = None
            if watch and self.watch_cut is not None:
                cut_at = self._loop.time() + self.rng.uniform(*self.watch_cut)
            try:
                while True:
                    timeout = None if cut_at is None else max(0.0, cut_at - self._loop.time())
                    try:
                        chunk = await asyncio.wait_for(upstream.content.readany(), timeout)
                    except TimeoutError:
                        self.counts["watch-cut"] += 1
                        return self._reset(request)
                    if not chunk:
                        break
                    await response.write(chunk)
                await response.write_eof()
            except (aiohttp.ClientError, ConnectionError, OSError):
                return self._reset(request)
            return response

    @staticmethod
    def _reset(request: web.Request) -> web.StreamResponse:
        transport = request.transport
        if transport is not None:
            transport.abort()
        raise ConnectionResetError("reset by the fault proxy")
