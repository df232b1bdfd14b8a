"""First-job latency: how long a user's MPIJob waits for its children on an idle cluster.

Starts its own L1 cluster (etcd + kube-apiserver) and installs the CRD. Then, with the operator (its
defaults) running as the mpi-operator ServiceAccount on the idle cluster, it submits --jobs MPIJobs with 4
workers one at a time (each a second after the last one's launcher) and measures, from the moment the
create is sent, when watches first show each child: the Service, ConfigMap and Secret, the first and the
last worker, and the launcher Job (the last child); it prints the median and spread of each. Then, --runs
times, it starts the operator afresh and measures the first job after start (until all its children
exist), with the API requests the operator made before it (none should spend the burst the job's creates
need). Prints figures, asserts nothing:

    .venv/bin/python benchmarks/first_job_bench.py --jobs 20 --runs 3
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from kubernetes import client, watch

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from benchmarks.scale_bench import GROUP, PLURAL, VERSION, mpijob  # noqa: E402
from localcluster import ClusterSpec, LocalCluster  # noqa: E402
from localcluster.e2e import SA_USER, apply_base  # noqa: E402
from localcluster.operator import OperatorRunner  # noqa: E402
from render import names  # noqa: E402

NAMESPACE = "first-job"
WORKERS = 4


def children_exist(core: client.CoreV1Api, batch: client.BatchV1Api, name: str) -> bool:
    pods = core.list_namespaced_pod(NAMESPACE, label_selector=f"training.kubeflow.org/job-name={name}").items
    jobs = [j for j in batch.list_namespaced_job(NAMESPACE).items if j.metadata.name == f"{name}-launcher"]
    return len(pods) >= WORKERS and bool(jobs)


class FirstSeen:
    """When watches in the namespace first showed each object, by (kind, name), on the monotonic clock."""

    KINDS = ("Service", "ConfigMap", "Secret", "Pod", "Job")

    def __init__(self, api: client.ApiClient) -> None:
        core, batch = client.CoreV1Api(api), client.BatchV1Api(api)
        self.lists = {
            "Service": core.list_namespaced_service,
            "ConfigMap": core.list_namespaced_config_map,
            "Secret": core.list_namespaced_secret,
            "Pod": core.list_namespaced_pod,
            "Job": batch.list_namespaced_job,
        }
        self.seen: dict[tuple[str, str], float] = {}
        self.lock = threading.Lock()
        self.stopping = threading.Event()
        self.ready = threading.Barrier(len(self.KINDS) + 1)

    def start(self) -> None:
        for kind in self.KINDS:
            threading.Thread(target=self._run, args=(kind,), daemon=True).start()
        self.ready.wait(timeout=30)

    def _run(self, kind: str) -> None:
        listed = self.lists[kind](NAMESPACE)
        rv = listed.metadata.resource_version
        self.ready.wait(timeout=30)
        while not self.stopping.is_set():
            for event in watch.Watch().stream(
                self.lists[kind], NAMESPACE, resource_version=rv, timeout_seconds=5
            ):
                now = time.monotonic()
                obj: Any = event["object"]
                rv = obj.metadata.resource_version
                with self.lock:
                    self.seen.setdefault((kind, obj.metadata.name), now)

    def when(self, kind: str, name: str) -> float | None:
        with self.lock:
            return self.seen.get((kind, name))


def milestones(seen: FirstSeen, name: str, began: float) -> dict[str, float] | None:
    """Seconds from ``began`` until each child of MPIJob ``name`` was first seen; None until all were."""
    times = {
        "Service": seen.when("Service", name),
        "ConfigMap": seen.when("ConfigMap", names.config_name(name)),
        "Secret": seen.when("Secret", names.ssh_secret_name(name)),
        "launcher Job": seen.when("Job", names.launcher_name(name)),
    }
    workers = [seen.when("Pod", names.worker_name(name, i)) for i in range(WORKERS)]
    if any(t is None for t in [*times.values(), *workers]):
        return None
    seen_workers = [t for t in workers if t is not None]
    times["first worker"], times["last worker"] = min(seen_workers), max(seen_workers)
    return {k: v - began for k, v in times.items() if v is not None}


def idle_jobs(cluster: LocalCluster, work: Path, jobs: int) -> None:
    """``jobs`` MPIJobs one at a time through one running operator: each child's median time."""
    api = cluster.api_client()
    custom = client.CustomObjectsApi(api)
    seen = FirstSeen(cluster.api_client())
    seen.start()
    op = OperatorRunner(
        cluster.write_user_kubeconfig(SA_USER), work / "operator-idle.log", f"--namespace={NAMESPACE}"
    )
    samples: list[dict[str, float]] = []
    try:
        op.start()
        time.sleep(2)  # the operator idle: its start-up requests done
        for i in range(jobs):
            name = f"idle-{i:02d}"
            body = mpijob(name, WORKERS)
            body["metadata"]["namespace"] = NAMESPACE
            began = time.monotonic()
            custom.create_namespaced_custom_object(GROUP, VERSION, NAMESPACE, PLURAL, body)
            deadline = began + 30
            while (got := milestones(seen, name, began)) is None and time.monotonic() < deadline:
                time.sleep(0.01)
            if got is None:
                raise RuntimeError(f"{name}: not every child within 30 s:\n{op.log_tail(3000)}")
            samples.append(got)
            time.sleep(1)  # idle again before the next job
    finally:
        seen.stopping.set()
        op.stop()
    order = ["Service", "ConfigMap", "Secret", "first worker", "last worker", "launcher Job"]
    print(f"== {jobs} jobs, one at a time on an idle cluster: from the create sent until first seen (ms)")
    for key in order:
        values = sorted(1000 * s[key] for s in samples)
        print(f"{key:14} median {statistics.median(values):6.1f}   spread {values[0]:6.1f}-{values[-1]:6.1f}")


def requests(op: OperatorRunner) -> dict[tuple[str, str], float]:
    """The operator's API requests so far, by (verb, kind)."""
    out: dict[tuple[str, str], float] = {}
    for (name, labels), value in op.metrics().items():
        if name == "mpi_operator_api_requests_total" and value:
            key = (dict(labels)["verb"], dict(labels)["kind"])
            out[key] = out.get(key, 0) + value
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    parser.add_argument("--runs", type=int, default=3, help="operator starts, each with its first job")
    parser.add_argument("--jobs", type=int, default=20, help="jobs one at a time on the idle cluster")
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="first-job-bench-"))
    cluster = LocalCluster(ClusterSpec(tier="l1"), work_dir=work / "cluster", keep_work_dir=True)
    cluster.start()
    latencies: list[float] = []
    try:
        apply_base(cluster)
        api = cluster.api_client()
        core, batch, custom = client.CoreV1Api(api), client.BatchV1Api(api), client.CustomObjectsApi(api)
        core.create_namespace({"metadata": {"name": NAMESPACE}})
        if args.jobs:
            idle_jobs(cluster, work, args.jobs)
        kubeconfig = cluster.write_user_kubeconfig(SA_USER)
        for run in range(args.runs):
            op = OperatorRunner(kubeconfig, work / f"operator-{run}.log", f"--namespace={NAMESPACE}")
            try:
                op.start()
                before = requests(op)
                name = f"job-{run}"
                began = time.monotonic()
                body = mpijob(name, WORKERS)
                body["metadata"]["namespace"] = NAMESPACE
                custom.create_namespaced_custom_object(GROUP, VERSION, NAMESPACE, PLURAL, body)
                while not children_exist(core, batch, name):
                    time.sleep(0.05)
                latencies.append(time.monotonic() - began)
                startup = sum(before.values())
                watches = sum(v for (verb, _), v in before.items() if verb == "watch")
                print(
                    f"run {run}: children after {latencies[-1]:.3f}s; {startup:.0f} requests before the job "
                    f"({watches:.0f} watches)",
                    flush=True,
                )
            finally:
                op.stop()
        if latencies:
            print(f"first job after start, median of {args.runs}: {statistics.median(latencies):.3f}s")
    finally:
        cluster.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
