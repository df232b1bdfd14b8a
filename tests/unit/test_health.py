"""L0: the probes, /metrics and /debug/synced on the health server."""

from __future__ import annotations

import urllib.request

from reconcile.mpijob.metrics import Metrics
from reconcile.runtime.health import HealthServer


def test_health_server_probes_and_metrics():
    state = {"healthy": True, "ready": False}
    m = Metrics()
    synced = {"ns/pi": "42"}
    srv = HealthServer(
        "127.0.0.1",
        0,
        healthy=lambda: state["healthy"],
        ready=lambda: state["ready"],
        metrics=m.exposition,
        synced=synced.get,
    )
    srv.start()
    try:

        def code(path):
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{srv.port}{path}", timeout=5) as r:
                    return r.status, r.read()
            except urllib.error.HTTPError as e:
                return e.code, b""

        assert code("/healthz")[0] == 200
        assert code("/readyz")[0] == 503
        state["ready"] = True
        assert code("/readyz")[0] == 200
        status, body = code("/metrics")
        assert status == 200 and b"mpi_operator_jobs_created_total" in body
        assert code("/nope")[0] == 404
        assert code("/debug/synced?key=ns/pi") == (200, b"42\n")
        assert code("/debug/synced?key=ns/other")[0] == 404
    finally:
        srv.stop()
