"""/healthz, /readyz and /metrics on one small HTTP server.

Decision: ``--monitoring-port`` (default 8080) serves all three. ``--monitoring-port=0`` turns /metrics off
but the probes stay on 8080, because upstream's health server is always on :8080 and the Deployment's probes
point there. /healthz fails when the leader stopped renewing its lease (the process is wedged); /readyz is
ready when this replica is a standby, or when it leads and every informer cache has synced.
``/debug/synced?key=<namespace>/<name>`` (with /metrics) answers the resourceVersion of that object the
last finished sync acted on: tests use it to know the operator processed an event, instead of sleeping.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, urlsplit

from prometheus_client import CONTENT_TYPE_LATEST

log = logging.getLogger(__name__)

DEFAULT_PORT = 8080


class HealthServer:
    def __init__(
        self,
        bind_address: str,
        port: int,
        *,
        healthy: Callable[[], bool],
        ready: Callable[[], bool],
        metrics: Callable[[], bytes] | None,
        synced: Callable[[str], str | None] | None = None,
    ) -> None:
        self._healthy = healthy
        self._synced = synced
        self._ready = ready
        self._metrics = metrics
        server = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                path = self.path.split("?", 1)[0]
                if path == "/healthz":
                    self._probe(server._healthy())
                elif path == "/readyz":
                    self._probe(server._ready())
                elif path == "/metrics" and server._metrics is not None:
                    self._send(200, server._metrics(), CONTENT_TYPE_LATEST)
                elif path == "/debug/synced" and server._synced is not None:
                    key = parse_qs(urlsplit(self.path).query).get("key", [""])[0]
                    version = server._synced(key)
                    if version is None:
                        self._send(404, b"not synced\n", "text/plain")
                    else:
                        self._send(200, version.encode() + b"\n", "text/plain")
                else:
                    self._send(404, b"not found\n", "text/plain")

            def _probe(self, ok: bool) -> None:
                self._send(200 if ok else 503, b"ok\n" if ok else b"not ok\n", "text/plain")

            def _send(self, code: int, body: bytes, ctype: str) -> None:
                self.send_response(code)
                self.send_header("Content-Type", ctype)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, format: str, *args: object) -> None:  # probes every few seconds: quiet
                return

        self.httpd = ThreadingHTTPServer((bind_address, port), Handler)
        self.httpd.daemon_threads = True
        self._thread: threading.Thread | None = None

    @property
    def port(self) -> int:
        return int(self.httpd.server_address[1])

    def start(self) -> None:
        self._thread = threading.Thread(target=self.httpd.serve_forever, name="health", daemon=True)
        self._thread.start()
        log.info("serving probes", extra={"port": self.port, "metrics": self._metrics is not None})

    def stop(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()
