"""The chaos tier's proxies' common part: an asyncio server on a thread of its own (the tests drive it
from their own threads; ``start``/``stop`` bracket its life, or ``with``), which terminates the operator's
TLS with a serving certificate from the cluster's CA and reaches the API server as the operator's
ServiceAccount (its client certificate), so that the audit log still names the operator."""

from __future__ import annotations

import asyncio
import ssl
import threading
from pathlib import Path
from typing import Self


class TlsProxy:
    """A subclass sets ``self.port`` in ``_start`` and closes what it opened in ``_stop``."""

    thread_name = "proxy"

    def __init__(
        self, *, ca: Path, server_cert: Path, server_key: Path, client_cert: Path, client_key: Path
    ) -> None:
        self._server_ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        self._server_ctx.load_cert_chain(str(server_cert), str(server_key))
        self._client_ctx = ssl.create_default_context(cafile=str(ca))
        self._client_ctx.load_cert_chain(str(client_cert), str(client_key))
        self._loop = asyncio.new_event_loop()
        self._thread: threading.Thread | None = None
        self.port = 0

    @property
    def url(self) -> str:
        return f"https://127.0.0.1:{self.port}"

    async def _start(self) -> None:
        raise NotImplementedError

    async def _stop(self) -> None:
        raise NotImplementedError

    def start(self) -> Self:
        ready = threading.Event()

        def run() -> None:
            asyncio.set_event_loop(self._loop)
            self._loop.run_until_complete(self._start())
            ready.set()
            self._loop.run_forever()

        self._thread = threading.Thread(target=run, name=self.thread_name, daemon=True)
        self._thread.start()
        if not ready.wait(10):
            raise RuntimeError(f"{self.thread_name} did not start")
        return self

    def stop(self) -> None:
        if self._thread is None:
            return
        asyncio.run_coroutine_threadsafe(self._stop(), self._loop).result(10)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)
        self._thread = None

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
