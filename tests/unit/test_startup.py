"""Start-up failures: each is one structured log line and a non-zero exit, never a traceback.

The operator process runs against nothing (connection refused) or a tiny fake API server on loopback that
answers the start-up check; the Deployment's restart back-off is the retry (README, Operating it).
"""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


def kubeconfig(tmp_path: Path, server: str) -> Path:
    path = tmp_path / "kubeconfig"
    path.write_text(
        json.dumps(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "clusters": [{"name": "c", "cluster": {"server": server}}],
                "users": [{"name": "u", "user": {"token": "t"}}],
                "contexts": [{"name": "x", "context": {"cluster": "c", "user": "u"}}],
                "current-context": "x",
            }
        )
    )
    return path


def run(*args: str, env: dict[str, str] | None = None) -> tuple[int, list[str]]:
    proc = subprocess.run(
        [sys.executable, "-m", "reconcile", *args],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=REPO,
        env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(REPO), **(env or {})},
    )
    return proc.returncode, [line for line in (proc.stdout + proc.stderr).splitlines() if line.strip()]


def one_failure_line(lines: list[str]) -> dict:
    records = [json.loads(line) for line in lines]  # every line is JSON
    failures = [r for r in records if r["level"] in ("critical", "error")]
    assert len(failures) == 1, lines
    assert not any("Traceback" in line for line in lines), lines
    return failures[0]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture
def fake_api() -> Iterator[tuple[str, dict[str, int]]]:
    """Answers the MPIJob list with the status in `answer["status"]` (404: the CRD is missing)."""
    answer = {"status": 200}

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            code = answer["status"] if "/mpijobs" in self.path else 404
            body = json.dumps(
                {"kind": "MPIJobList", "items": []}
                if code == 200
                else {
                    "kind": "Status",
                    "status": "Failure",
                    "code": code,
                    "message": "the server could not find it",
                }
            ).encode()
            self.send_response(code)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: object) -> None:
            pass

    srv = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{srv.server_address[1]}", answer
    finally:
        srv.shutdown()
        srv.server_close()


def test_unreachable_api_server(tmp_path):
    code, lines = run("--kubeconfig", str(kubeconfig(tmp_path, f"https://127.0.0.1:{free_port()}")))
    failure = one_failure_line(lines)
    assert code == 1 and failure["msg"] == "cannot reach the API server"
    assert "refused" in failure["error"]


def test_missing_kubeconfig(tmp_path):
    code, lines = run("--kubeconfig", str(tmp_path / "nope"))
    assert code == 1 and one_failure_line(lines)["msg"] == "cannot build the Kubernetes client"


def test_crd_missing(tmp_path, fake_api):
    server, answer = fake_api
    answer["status"] = 404
    code, lines = run("--kubeconfig", str(kubeconfig(tmp_path, server)))
    assert code == 1 and "CRD" in one_failure_line(lines)["msg"]


def test_forbidden(tmp_path, fake_api):
    server, answer = fake_api
    answer["status"] = 403
    code, lines = run("--kubeconfig", str(kubeconfig(tmp_path, server)))
    failure = one_failure_line(lines)
    assert code == 1 and failure["status"] == 403


def test_port_in_use(tmp_path, fake_api):
    server, _ = fake_api
    with socket.socket() as held:
        held.bind(("127.0.0.1", 0))
        held.listen()
        port = held.getsockname()[1]
        code, lines = run(
            "--kubeconfig",
            str(kubeconfig(tmp_path, server)),
            f"-monitoring-port={port}",
            "-bind-address=127.0.0.1",
        )
    failure = one_failure_line(lines)
    assert code == 1 and failure["msg"] == f"cannot listen on 127.0.0.1:{port}"


@pytest.mark.parametrize("argv", [["--bogus"], ["-threadiness=0"], ["-v=x"], ["-kube-api-qps"]])
def test_bad_flags(argv):
    code, lines = run(*argv)
    assert code == 2 and one_failure_line(lines)["msg"] == "invalid flags"


def test_bad_flags_in_text_format():
    code, lines = run("-log-format=text", "--bogus")
    assert code == 2 and len(lines) == 1 and "invalid flags" in lines[0]


def test_process_metrics_beside_ours():
    from reconcile.metrics import Metrics

    text = Metrics().exposition().decode()
    for name in (
        "process_resident_memory_bytes",
        "process_cpu_seconds_total",
        "process_open_fds",
        "process_start_time_seconds",
        "python_gc_objects_collected_total",
        "mpi_operator_jobs_created_total",
    ):
        assert f"\n{name}" in text, name
