"""Start-up failures: each is one structured log line and a non-zero exit, never a traceback; but what
heals by itself (the API server unreachable or still starting: 403, 5xx) is retried, not fatal.

The operator process runs against nothing (connection refused) or a tiny fake API server on loopback that
answers the start-up check; for what does not heal, the Deployment's restart back-off is the retry.
"""

from __future__ import annotations

import json
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from localcluster.processes import free_port

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


def retrying(args: list[str], until: str, then: object = None, timeout: float = 30) -> tuple[int, list[str]]:
    """Run the operator until its log shows `until` (after at least two start-up retries), call `then`,
    wait for `until` again if `then` is given, SIGTERM it; its exit code and lines."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "reconcile", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        cwd=REPO,
        env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(REPO)},
    )
    lines: list[str] = []
    assert proc.stdout is not None
    try:
        deadline = time.monotonic() + timeout
        retries = 0
        while time.monotonic() < deadline:
            line = proc.stdout.readline()
            if not line:
                break
            lines.append(line.rstrip("\n"))
            retries += "cannot list MPIJobs yet" in line
            if retries >= 2 and callable(then):
                then()
                then = None
            if until in line and retries >= 2 and then is None:
                break
        proc.send_signal(signal.SIGTERM)
        rest, _ = proc.communicate(timeout=20)
        lines += [x for x in rest.splitlines() if x.strip()]
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    return proc.returncode, lines


def test_unreachable_api_server_is_retried_not_fatal(tmp_path):
    # A restarting API server refuses connections for a while: retried with back-off, never an exit.
    args = ["--kubeconfig", str(kubeconfig(tmp_path, f"https://127.0.0.1:{free_port()}"))]
    args += ["--monitoring-port", str(free_port())]
    code, lines = retrying(args, "cannot list MPIJobs yet")
    records = [json.loads(line) for line in lines]
    assert code == 0, lines
    assert not [r for r in records if r["level"] in ("critical", "error")], lines
    warnings = [r for r in records if r["msg"] == "cannot list MPIJobs yet, retrying"]
    assert len(warnings) >= 2 and warnings[0]["code"] == "error"
    assert "refused" in warnings[0]["error"]


def test_missing_kubeconfig(tmp_path):
    code, lines = run("--kubeconfig", str(tmp_path / "nope"))
    assert code == 1 and one_failure_line(lines)["msg"] == "cannot build the Kubernetes client"


def test_crd_missing(tmp_path, fake_api):
    server, answer = fake_api
    answer["status"] = 404
    code, lines = run("--kubeconfig", str(kubeconfig(tmp_path, server)))
    assert code == 1 and "CRD" in one_failure_line(lines)["msg"]


def test_forbidden_is_retried_until_the_api_server_allows_it(tmp_path, fake_api):
    # kube-apiserver answers 403 for a second after a start, until its RBAC cache has synced.
    server, answer = fake_api
    answer["status"] = 403
    args = ["--kubeconfig", str(kubeconfig(tmp_path, server)), "--monitoring-port", str(free_port())]
    code, lines = retrying(args, "waiting for the lease", then=lambda: answer.update(status=200))
    records = [json.loads(line) for line in lines]
    assert code == 0, lines
    assert [r["code"] for r in records if r["msg"] == "cannot list MPIJobs yet, retrying"][:2] == ["403"] * 2
    assert any(r["msg"] == "waiting for the lease" for r in records), lines


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
    from reconcile.mpijob.metrics import Metrics

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
