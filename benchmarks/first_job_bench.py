"""First-job latency: how long the first MPIJob after the operator starts waits for its children.

Starts its own L1 cluster (etcd + kube-apiserver), installs the CRD, then --runs times: starts the
operator (its default client limits) as the mpi-operator ServiceAccount, waits until it is leader and ready,
submits one MPIJob with 4 workers and measures the time until all its children exist (Service, ConfigMap,
Secret, launcher Job, 4 worker pods). Also prints the API requests the operator made before the job (none
should spend the burst the job's creates need). Prints figures, asserts nothing:

    .venv/bin/python benchmarks/first_job_bench.py --runs 3
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

from kubernetes import client

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from benchmarks.scale_bench import GROUP, PLURAL, VERSION, mpijob  # noqa: E402
from localcluster import ClusterSpec, LocalCluster  # noqa: E402
from localcluster.e2e import SA_USER, apply_base  # noqa: E402
from localcluster.operator import OperatorRunner  # noqa: E402

NAMESPACE = "first-job"
WORKERS = 4


def children_exist(core: client.CoreV1Api, batch: client.BatchV1Api, name: str) -> bool:
    pods = core.list_namespaced_pod(NAMESPACE, label_selector=f"training.kubeflow.org/job-name={name}").items
    jobs = [j for j in batch.list_namespaced_job(NAMESPACE).items if j.metadata.name == f"{name}-launcher"]
    return len(pods) >= WORKERS and bool(jobs)


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
    parser.add_argument("--runs", type=int, default=3)
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
        print(f"first-job latency, median of {args.runs}: {statistics.median(latencies):.3f}s")
    finally:
        cluster.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
