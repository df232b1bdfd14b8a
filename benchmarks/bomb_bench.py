"""Worker-count bomb: the largest admissible MPIJob beside a normal one, with the
operator in a memory cgroup of the Deployment's limit.

Starts its own L1 cluster (etcd + kube-apiserver, no nodes: pods stay Pending, which is the whole memory
cost for the operator), installs deploy/base-no-operator, puts `python -m reconcile` (the mpi-operator
ServiceAccount's kubeconfig) into a cgroup-v1 memory cgroup limited to the Deployment's
`resources.limits.memory`, submits the biggest job the CRD admits for a 10-character name
(render.bounds.max_workers(10) workers), waits a moment, then submits a 2-worker job in another namespace,
and prints:

- how long until every worker pod of the big job and its launcher Job exist (its sync within the limit);
- how long the 2-worker job takes to get all its children (launcher Job included) and Created=True;
- the cgroup's peak memory, its limit, failcnt and OOM kills, and whether the operator is still alive.

Needs root and a writable cgroup-v1 memory hierarchy at /sys/fs/cgroup/memory. Usage:

    .venv/bin/python benchmarks/bomb_bench.py [--workers N] [--operator-arg=--kube-api-qps=50]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import yaml
from kubernetes import client

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from benchmarks.scale_bench import proc_stats  # noqa: E402
from localcluster import ClusterSpec, LocalCluster  # noqa: E402
from localcluster.e2e import SA_USER, apply_base  # noqa: E402
from localcluster.jobs import minimal_job  # noqa: E402
from localcluster.operator import OperatorRunner  # noqa: E402
from render import bounds  # noqa: E402
from render.quantity import parse as parse_quantity  # noqa: E402

CGROUP_ROOT = Path("/sys/fs/cgroup/memory")
GROUP, VERSION, PLURAL = "kubeflow.org", "v2beta1", "mpijobs"
BIG_NAME = "bombjob-10"  # 10 characters
SMALL_NAME = "small"


def deployment_memory_limit() -> int:
    with (REPO / "deploy" / "operator" / "deployment.yaml").open(encoding="utf-8") as f:
        dep = yaml.safe_load(f)
    limit = dep["spec"]["template"]["spec"]["containers"][0]["resources"]["limits"]["memory"]
    value, _ = parse_quantity(limit)
    return int(value)


def mpijob(name: str, workers: int) -> dict[str, Any]:
    return minimal_job(name, workers, image="mpioperator/mpi-pi:openmpi", launcher_replicas=1)


class MemoryCgroup:
    def __init__(self, limit: int) -> None:
        self.path = CGROUP_ROOT / f"mpijob-bomb-{os.getpid()}"
        self.path.mkdir()
        (self.path / "memory.limit_in_bytes").write_text(str(limit))
        with contextlib.suppress(OSError):  # no swap accounting on some kernels: then swap is not counted
            (self.path / "memory.memsw.limit_in_bytes").write_text(str(limit))

    def add(self, pid: int) -> None:
        (self.path / "cgroup.procs").write_text(str(pid))

    def read(self, name: str) -> str:
        return (self.path / name).read_text().strip()

    def stats(self) -> dict[str, Any]:
        oom = dict(line.split() for line in self.read("memory.oom_control").splitlines())
        stat = dict(line.split() for line in self.read("memory.stat").splitlines())
        return {
            "rss_mib": round(int(stat["total_rss"]) / 2**20, 1),
            "page_cache_mib": round(int(stat["total_cache"]) / 2**20, 1),
            "limit_mib": int(self.read("memory.limit_in_bytes")) / 2**20,
            "peak_mib": round(int(self.read("memory.max_usage_in_bytes")) / 2**20, 1),
            "now_mib": round(int(self.read("memory.usage_in_bytes")) / 2**20, 1),
            "failcnt": int(self.read("memory.failcnt")),
            "oom_kills": int(oom.get("oom_kill", 0)),
        }

    def remove(self) -> None:
        with contextlib.suppress(OSError):
            self.path.rmdir()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    parser.add_argument("--workers", type=int, default=bounds.max_workers(len(BIG_NAME)))
    parser.add_argument("--timeout", type=float, default=1200)
    parser.add_argument("--operator-arg", action="append", default=[], help="extra operator flag, repeatable")
    args = parser.parse_args()
    limit = deployment_memory_limit()
    work = Path(tempfile.mkdtemp(prefix="bomb-bench-"))
    print(f"== {BIG_NAME}: {args.workers} workers; operator memory limit {limit / 2**20:.0f} MiB", flush=True)
    print(f"== operator flags: {' '.join(args.operator_arg) or '(defaults)'}; logs in {work}", flush=True)
    cluster = LocalCluster(ClusterSpec(tier="l1"), work_dir=work / "cluster", keep_work_dir=True)
    cluster.start()
    operator: OperatorRunner | None = None
    cgroup: MemoryCgroup | None = None
    result: dict[str, Any] = {"workers": args.workers, "operator_flags": args.operator_arg}
    try:
        apply_base(cluster)
        api = cluster.api_client()
        core, batch, custom = client.CoreV1Api(api), client.BatchV1Api(api), client.CustomObjectsApi(api)
        for ns in ("bomb", "other"):
            core.create_namespace({"metadata": {"name": ns}})

        cgroup = MemoryCgroup(limit)
        kubeconfig = cluster.write_user_kubeconfig(SA_USER)
        operator = OperatorRunner(kubeconfig, work / "operator.log", *args.operator_arg, log_format="json")
        operator.start(wait=False)
        cgroup.add(operator.pid)  # before it has imported much: the whole process is inside
        operator.wait_ready()
        result["idle_mib"] = cgroup.stats()["now_mib"]

        t0 = time.monotonic()
        custom.create_namespaced_custom_object(GROUP, VERSION, "bomb", PLURAL, mpijob(BIG_NAME, args.workers))
        time.sleep(5)  # the big sync is under way
        t_small = time.monotonic()
        custom.create_namespaced_custom_object(GROUP, VERSION, "other", PLURAL, mpijob(SMALL_NAME, 2))

        small_done = big_pods_done = big_launcher = None
        deadline = t0 + args.timeout
        while time.monotonic() < deadline and operator.alive():
            now = time.monotonic()
            if small_done is None:
                mj = custom.get_namespaced_custom_object(GROUP, VERSION, "other", PLURAL, SMALL_NAME)
                created = any(
                    c["type"] == "Created" and c["status"] == "True"
                    for c in (mj.get("status") or {}).get("conditions") or []
                )
                pods = core.list_namespaced_pod("other").items
                jobs = batch.list_namespaced_job("other").items
                if created and len(pods) == 2 and len(jobs) == 1:
                    small_done = now - t_small
                    print(f"   2-worker job served in {small_done:.1f} s", flush=True)
            if big_pods_done is None:
                raw = core.list_namespaced_pod("bomb", limit=10000, _preload_content=False).data
                if len(json.loads(raw)["items"]) >= args.workers:
                    big_pods_done = now - t0
                    print(f"   {args.workers} worker pods exist after {big_pods_done:.1f} s", flush=True)
            if big_pods_done is not None and big_launcher is None and batch.list_namespaced_job("bomb").items:
                big_launcher = now - t0
                print(f"   big launcher Job exists after {big_launcher:.1f} s", flush=True)
            if small_done is not None and big_launcher is not None:
                break
            time.sleep(1)
        time.sleep(5)  # a few more syncs at the converged size
        hwm = proc_stats(operator.pid)[0] if operator.alive() else 0
        result.update(
            process_peak_rss_mib=round(hwm / 2**20, 1),
            small_job_served_s=None if small_done is None else round(small_done, 1),
            big_job_pods_s=None if big_pods_done is None else round(big_pods_done, 1),
            big_job_launcher_s=None if big_launcher is None else round(big_launcher, 1),
            operator_alive=operator.alive(),
            **cgroup.stats(),
        )
    finally:
        if operator is not None:
            operator.stop()
        cluster.stop()
        if cgroup is not None:
            time.sleep(0.5)
            cgroup.remove()
    print(json.dumps(result, indent=1))
    ok = result.get("operator_alive") and result.get("oom_kills") == 0 and result.get("small_job_served_s")
    return 0 if ok and result["small_job_served_s"] <= 10 else 1


if __name__ == "__main__":
    sys.exit(main())
