"""A picture of the Grafana dashboard (deploy/grafana/mpijob-operator.json) from real data on the real node,
drawn without Grafana: every panel's own queries are evaluated by Prometheus and drawn by tools/dashboard.py.

Starts its own cluster with the real node (`localcluster --tier real`), deploy/base-no-operator and the
operator as its own process (as tests/node does), and a Prometheus (`deploy/local/build.sh --prometheus`,
built here if missing: about 10 minutes once per machine) scraping the operator's /metrics every
`--scrape-interval` seconds. Then it runs real MPIJobs in one namespace:

  wave 1, at once: three Open MPI pi jobs; one whose program exits 3 (Failed, no retries); one whose
          workers' sshd exits at start (Restarting, then Failed at backoffLimit 2); one submitted
          suspended and resumed `--held` seconds later;
  wave 2, after wave 1 has finished: two more pi jobs;

waits `--tail` seconds, asks Prometheus for every panel's targets over the whole run (query_range), and
draws the panels in the dashboard's grid layout into `--out`. Prometheus' answers are kept in
`--answers`; `--redraw` draws again from that file without a run.
Needs root. Usage:

    flock /tmp/l4.lock .venv/bin/python benchmarks/dashboard_picture.py
    .venv/bin/python benchmarks/dashboard_picture.py --redraw --out /tmp/d.png
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import subprocess
import sys
import tempfile
import time
import urllib.parse
import urllib.request
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from kubernetes import client  # noqa: E402

from localcluster.binaries import BUILD_SCRIPT, BinariesMissing, built_dir  # noqa: E402
from localcluster.e2e import E2E, condition_is, create_namespace  # noqa: E402
from localcluster.jobs import containers_of  # noqa: E402
from localcluster.processes import Proc, free_port, http_ok, spawn  # noqa: E402
from localcluster.realnode import node_job, real_node_operator, set_mpirun_args  # noqa: E402
from reconcile.runtime.kube import Kube  # noqa: E402
from tools import dashboard as dash  # noqa: E402

NAMESPACE = "dashboard"
# Small requests: wave 1's 18 pods fit the node's 2 CPUs at once.
SMALL = {"requests": {"cpu": "50m", "memory": "64Mi"}, "limits": {"cpu": "1", "memory": "1Gi"}}
JOB_TIMEOUT = 300.0
# Grafana's $__interval: the range over the panel's width in pixels (an 8-column panel: about 600).
PANEL_POINTS = 600


def prometheus_binary() -> Path:
    try:
        return (
            built_dir("--print-prometheus-dir", "Prometheus", ("bin/prometheus",), "--prometheus")
            / "bin"
            / ("prometheus")
        )
    except BinariesMissing:
        print("building Prometheus from the Go module proxy (once per machine, about 10 min)", flush=True)
        subprocess.run([str(BUILD_SCRIPT), "--prometheus"], check=True, stdout=subprocess.DEVNULL)
        return built_dir("--print-prometheus-dir", "Prometheus", ("bin/prometheus",)) / "bin" / "prometheus"


def start_prometheus(binary: Path, work: Path, target: str, scrape_interval: float) -> tuple[Proc, str]:
    config = work / "prometheus.yml"
    interval = f"{scrape_interval:g}s"
    config.write_text(
        json.dumps(  # YAML is a superset of JSON
            {
                "global": {"scrape_interval": interval, "evaluation_interval": interval},
                "scrape_configs": [{"job_name": "mpi-operator", "static_configs": [{"targets": [target]}]}],
            }
        )
    )
    port = free_port()
    proc = spawn(
        "prometheus",
        [
            str(binary),
            f"--config.file={config}",
            f"--storage.tsdb.path={work / 'tsdb'}",
            f"--web.listen-address=127.0.0.1:{port}",
        ],
        work / "prometheus.log",
        detached=False,
        cwd=work,
    )
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 60
    while not http_ok(f"{url}/-/ready"):
        if not proc.alive() or time.monotonic() > deadline:
            raise RuntimeError(f"Prometheus did not start:\n{proc.log_tail()}")
        time.sleep(0.5)
    return proc, url


def instant(url: str, expr: str) -> list[dict[str, Any]]:
    with urllib.request.urlopen(f"{url}/api/v1/query?query={urllib.parse.quote(expr)}", timeout=10) as resp:
        return list(json.load(resp)["data"]["result"])


def small(body: dict[str, Any]) -> dict[str, Any]:
    for c in containers_of(body):
        c["resources"] = SMALL
    return body


def wave_one() -> dict[str, dict[str, Any]]:
    jobs = {name: small(node_job("openmpi", name=name)) for name in ("pi-1", "pi-2", "pi-3")}
    exits = small(node_job("openmpi-nonroot", name="exit-3", run_policy={"backoffLimit": 0}))
    exits["spec"]["mpiReplicaSpecs"]["Launcher"]["restartPolicy"] = "Never"
    set_mpirun_args(exits, "-n", "2", "/home/mpiuser/pi", "3")  # pi's exit code
    crash = small(node_job("openmpi", name="crashing-workers", run_policy={"backoffLimit": 2}))
    worker = crash["spec"]["mpiReplicaSpecs"]["Worker"]["template"]["spec"]["containers"][0]
    worker["command"] = ["/usr/sbin/sshd", "-De", "-o", "HostKey=/nonexistent"]  # exits at start
    worker.pop("args", None)
    held = small(node_job("openmpi", name="held", run_policy={"suspend": True}))
    return {**jobs, "exit-3": exits, "crashing-workers": crash, "held": held}


def run_jobs(e2e: E2E, held_seconds: float) -> list[str]:
    """Both waves; one line per job: name, outcome, submit-to-finished seconds."""
    lines = []

    def finish(names: list[str], began: float) -> None:
        # all at once: the example's ttlSecondsAfterFinished deletes a finished job a minute later
        waiting = set(names)
        while waiting:
            if time.monotonic() - began > JOB_TIMEOUT:
                raise TimeoutError(f"not finished after {JOB_TIMEOUT:.0f} s: {sorted(waiting)}")
            for name in sorted(waiting):
                job = e2e.find(name)
                if job is None:
                    raise RuntimeError(f"MPIJob {name} is gone before it was seen finished")
                if not (job.get("status") or {}).get("completionTime"):
                    continue
                outcome = next((c for c in ("Succeeded", "Failed") if condition_is(job, c)), None)
                if outcome is None:
                    continue
                waiting.discard(name)
                lines.append(f"{name}: {outcome}, seen {time.monotonic() - began:.0f} s after its wave began")
                print(f"  {lines[-1]}", flush=True)
            time.sleep(1)

    first = wave_one()
    began = time.monotonic()
    for body in first.values():
        e2e.submit(body)
    print(f"wave 1 submitted: {', '.join(first)}", flush=True)
    time.sleep(max(0.0, held_seconds - (time.monotonic() - began)))
    e2e.patch("held", {"spec": {"runPolicy": {"suspend": False}}})
    print(f"held resumed after {time.monotonic() - began:.0f} s", flush=True)
    finish(list(first), began)
    time.sleep(15)
    second = {name: small(node_job("openmpi", name=name)) for name in ("pi-4", "pi-5")}
    began = time.monotonic()
    for body in second.values():
        e2e.submit(body)
    print(f"wave 2 submitted: {', '.join(second)}", flush=True)
    finish(list(second), began)
    return lines


def window_for(start: float, end: float, scrape_interval: float) -> dash.Window:
    step = max(scrape_interval, math.ceil((end - start) / PANEL_POINTS))
    start = math.floor(start / step) * step
    return dash.Window(
        start=start, end=math.ceil(end / step) * step, step=step, scrape_interval=scrape_interval
    )


def prometheus_version(binary: Path) -> str:
    out = subprocess.run([str(binary), "--version"], capture_output=True, text=True, check=False).stdout
    words = out.split()
    return words[2] if len(words) > 2 else "?"


def record(args: argparse.Namespace) -> dict[str, Any]:
    """The run; returns what `draw` needs (also written to --answers)."""
    binary = prometheus_binary()
    version = prometheus_version(binary)
    with real_node_operator("dashboard-picture-") as (cluster, op, work):
        prom: Proc | None = None
        try:
            prom, url = start_prometheus(binary, work, f"127.0.0.1:{op.port}", args.scrape_interval)
            start = time.time()
            deadline = time.monotonic() + 60
            while not [r for r in instant(url, "up") if r["value"][1] == "1"]:
                if time.monotonic() > deadline:
                    raise RuntimeError(f"Prometheus never scraped the operator:\n{prom.log_tail()}")
                time.sleep(1)
            print(
                f"Prometheus {version} scrapes the operator every {args.scrape_interval:g} s ({url})",
                flush=True,
            )
            time.sleep(args.lead)
            with contextlib.closing(cluster.api_client()) as api:
                create_namespace(client.CoreV1Api(api), NAMESPACE)
                lines = run_jobs(E2E(cluster, Kube(api, qps=0), NAMESPACE, op), args.held)
            time.sleep(args.tail)
            window = window_for(start, time.time(), args.scrape_interval)
            data = dash.evaluate(json.loads(dash.DASHBOARD.read_text()), window, dash.query_range(url))
            op.check()
        finally:
            if prom is not None:
                prom.stop()
    when = datetime.fromtimestamp(window.start, UTC).strftime("%Y-%m-%d %H:%M")
    return {
        "window": {k: getattr(window, k) for k in ("start", "end", "step", "scrape_interval")},
        "heading": (
            "deploy/grafana/mpijob-operator.json drawn by benchmarks/dashboard_picture.py (matplotlib) "
            f"from the panels' own queries against Prometheus (Go module {version}), not by Grafana.\n"
            f"Real node, {when} UTC: "
            f"{len(lines)} MPIJobs ({sum('Succeeded' in x for x in lines)} succeeded, "
            f"{sum('Failed' in x for x in lines)} failed, one held suspended {args.held:g} s); scrape every "
            f"{window.scrape_interval:g} s, step {window.step:g} s, $__rate_interval "
            f"{window.rate_interval:g} s, $job and $phase: All."
        ),
        "jobs": lines,
        "answers": dash.answers_json(data),
    }


def draw(saved: dict[str, Any], out: Path) -> None:
    window = dash.Window(**saved["window"])
    data = dash.answers_from_json(saved["answers"])
    _, drawn = dash.draw(json.loads(dash.DASHBOARD.read_text()), data, window, out, heading=saved["heading"])
    print(f"wrote {out}")
    for x in drawn:
        status = "NO DATA" if x.no_data else f"{x.series} series"
        print(f"  {x.title}: {status}{' errors: ' + '; '.join(x.errors) if x.errors else ''}")


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--out", type=Path, default=REPO / "docs" / "images" / "dashboard.png")
    parser.add_argument("--scrape-interval", type=float, default=5.0, help="seconds (default 5)")
    parser.add_argument("--lead", type=float, default=20.0, help="seconds scraped before the first job")
    parser.add_argument("--held", type=float, default=20.0, help="seconds the suspended job is held")
    parser.add_argument("--tail", type=float, default=40.0, help="seconds scraped after the last job")
    parser.add_argument(
        "--answers", type=Path, default=Path(tempfile.gettempdir()) / "dashboard-picture.json"
    )
    parser.add_argument("--redraw", action="store_true", help="draw from --answers; no run")
    args = parser.parse_args()
    if args.redraw:
        saved = json.loads(args.answers.read_text())
    else:
        began = time.monotonic()
        saved = record(args)
        print(f"run took {time.monotonic() - began:.0f} s", flush=True)
        args.answers.write_text(json.dumps(saved))
        print(f"answers kept in {args.answers}", flush=True)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    draw(saved, args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
