"""Render time per MPIJob for 1, 8, 64 and 512 workers (median of many runs).

Usage: .venv/bin/python benchmarks/render_bench.py [--runs N]
Each run is render() + status() of a running job whose workers all exist and are Ready, the steady state
the controller sees on every resync.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from datetime import UTC, datetime
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from localcluster.jobs import containers_of, minimal_job
from render import Config, Observed, SSHKey, render, status

UID = "11111111-2222-4333-8444-555555555555"
KEY = SSHKey(
    "-----BEGIN EC PRIVATE KEY-----\nX\n-----END EC PRIVATE KEY-----\n", "ecdsa-sha2-nistp521 AAAA\n"
)
NOW = datetime(2025, 6, 1, 12, 0, tzinfo=UTC)


def job(workers: int) -> dict:
    body = minimal_job(
        "bench",
        workers,
        image="mpioperator/mpi-pi:openmpi",
        containers=("mpi", "mpi"),
        launcher_replicas=1,
        namespace="default",
        uid=UID,
        slotsPerWorker=1,
        runPolicy={"cleanPodPolicy": "Running"},
    )
    for container in containers_of(body):
        container.update(
            command=["mpirun"],
            args=["-n", str(workers), "/home/mpiuser/pi"],
            resources={"limits": {"cpu": "1", "memory": "1Gi"}},
            env=[{"name": "A", "value": "1"}],
        )
    return body


def observed(workers: int) -> Observed:
    owner = [
        {
            "apiVersion": "kubeflow.org/v2beta1",
            "kind": "MPIJob",
            "name": "bench",
            "uid": UID,
            "controller": True,
        }
    ]
    pods = [
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": f"bench-worker-{i}", "namespace": "default", "ownerReferences": owner},
            "status": {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]},
        }
        for i in range(workers)
    ]
    launcher = {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": "bench-launcher", "namespace": "default", "uid": "j", "ownerReferences": owner},
        "spec": {"suspend": False},
        "status": {},
    }
    return Observed.from_objects([*pods, launcher], now=NOW, fresh_ssh_key=KEY)


def measure(workers: int, runs: int) -> tuple[float, int]:
    j, obs, cfg = job(workers), observed(workers), Config()
    j["status"] = status(j, obs, cfg)
    samples = []
    count = 0
    for _ in range(runs):
        t0 = time.perf_counter()
        children = render(j, obs, cfg)
        status(j, obs, cfg)
        samples.append(time.perf_counter() - t0)
        count = len(children)
    return statistics.median(samples), count


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--runs", type=int, default=0, help="runs per size (default: scaled to the size)")
    args = p.parse_args()
    print(f"{'workers':>8} {'children':>9} {'median ms':>10} {'us/worker':>10}")
    for workers in (1, 8, 64, 512):
        runs = args.runs or max(20, 4000 // workers)
        median, count = measure(workers, runs)
        print(f"{workers:>8} {count:>9} {median * 1e3:>10.3f} {median * 1e6 / workers:>10.1f}")


if __name__ == "__main__":
    main()
