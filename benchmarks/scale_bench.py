"""Scale benchmark: N MPIJobs x W workers against the operator running as its own process.

Starts its own L2 local cluster (enough kwok nodes for every pod), installs deploy/base-no-operator,
runs `python -m reconcile` with the mpi-operator ServiceAccount's kubeconfig and `--monitoring-port`,
submits the jobs at once and prints:

- the time until every launcher Job exists and until every MPIJob is Succeeded;
- API requests per job from the operator's `mpi_operator_api_requests_total` counter, reads and writes
  separately (leader-election Lease traffic shown apart);
- writes per job against the target: one write per child object created or deleted, plus one status
  write per status transition (a change of the conditions, startTime or completionTime, observed with a
  watch on the MPIJobs);
- the operator's peak RSS (VmHWM) and CPU seconds (utime + stime).

Targets are printed, not asserted. Usage:

    .venv/bin/python benchmarks/scale_bench.py --jobs 20 --workers 4
    .venv/bin/python benchmarks/scale_bench.py               # 200 x 4
"""

from __future__ import annotations

import argparse
import collections
import math
import os
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from kubernetes import client, watch

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from localcluster import ClusterSpec, LocalCluster  # noqa: E402
from localcluster.cluster import wait_for_crds, wait_for_default_service_account  # noqa: E402
from localcluster.operator import OperatorRunner  # noqa: E402

SA_USER = "system:serviceaccount:mpi-operator:mpi-operator"
NAMESPACE = "bench"
GROUP, VERSION, PLURAL = "kubeflow.org", "v2beta1", "mpijobs"
READ_VERBS = {"get", "list", "watch"}
PODS_PER_NODE = 100  # kwok nodes allow 110; keep headroom
RSS_TARGET_MIB = 150


def mpijob(name: str, workers: int) -> dict[str, Any]:
    """Upstream's pi example, root Open MPI; kwok finishes the launcher pod 1 s after it runs."""
    image = "mpioperator/mpi-pi:openmpi"
    return {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "MPIJob",
        "metadata": {"name": name, "namespace": NAMESPACE},
        "spec": {
            "slotsPerWorker": 1,
            "runPolicy": {"cleanPodPolicy": "Running"},
            "mpiReplicaSpecs": {
                "Launcher": {
                    "replicas": 1,
                    "template": {
                        "spec": {
                            "containers": [
                                {
                                    "name": "launcher",
                                    "image": image,
                                    "command": ["mpirun"],
                                    "args": ["--allow-run-as-root", "-n", str(workers), "/home/mpiuser/pi"],
                                }
                            ]
                        }
                    },
                },
                "Worker": {
                    "replicas": workers,
                    "template": {"spec": {"containers": [{"name": "worker", "image": image}]}},
                },
            },
        },
    }


# -- the operator process ---------------------------------------------------------------------------------
def requests(op: OperatorRunner) -> dict[tuple[str, str], float]:
    """(verb, kind) -> API requests the operator sent, summed over response codes."""
    out: dict[tuple[str, str], float] = collections.defaultdict(float)
    for (name, labels), value in op.metrics().items():
        if name == "mpi_operator_api_requests_total":
            lab = dict(labels)
            out[(lab["verb"], lab["kind"])] += value
    return out


def proc_stats(pid: int) -> tuple[int, float]:
    """(VmHWM bytes, utime + stime seconds) of a process."""
    hwm = 0
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            hwm = int(line.split()[1]) * 1024
    stat = Path(f"/proc/{pid}/stat").read_text()
    fields = stat[stat.rindex(")") + 2 :].split()
    ticks = os.sysconf("SC_CLK_TCK")
    return hwm, (int(fields[11]) + int(fields[12])) / ticks


# -- watching status transitions --------------------------------------------------------------------------
def status_signature(status: dict[str, Any]) -> tuple[Any, ...]:
    conds = tuple(sorted((c["type"], c["status"]) for c in status.get("conditions") or []))
    return conds, bool(status.get("startTime")), bool(status.get("completionTime"))


class StatusWatcher(threading.Thread):
    """Counts, per MPIJob, status changes (writes seen) and distinct status signatures (transitions)."""

    def __init__(self, api: client.ApiClient) -> None:
        super().__init__(daemon=True)
        self.custom = client.CustomObjectsApi(api)
        self.stop_event = threading.Event()
        self.last_status: dict[str, Any] = {}
        self.status_writes: collections.Counter[str] = collections.Counter()
        self.transitions: collections.Counter[str] = collections.Counter()
        self.last_sig: dict[str, tuple[Any, ...]] = {}

    def run(self) -> None:
        rv = ""
        while not self.stop_event.is_set():
            w = watch.Watch()
            try:
                for ev in w.stream(
                    self.custom.list_namespaced_custom_object,
                    GROUP,
                    VERSION,
                    NAMESPACE,
                    PLURAL,
                    resource_version=rv or None,
                    timeout_seconds=30,
                ):
                    obj = ev["object"]
                    rv = obj["metadata"]["resourceVersion"]
                    self.observe(obj["metadata"]["name"], obj.get("status") or {})
                    if self.stop_event.is_set():
                        break
            except client.ApiException as err:
                if err.status == 410:  # expired: start over from a fresh list
                    rv = ""
                else:
                    time.sleep(0.5)
            except Exception:  # connection dropped (e.g. the cluster stopping): retry until told to stop
                if self.stop_event.is_set():
                    return
                time.sleep(0.5)
            finally:
                w.stop()

    def observe(self, name: str, status: dict[str, Any]) -> None:
        if status and status != self.last_status.get(name):
            self.status_writes[name] += 1
        self.last_status[name] = status
        sig = status_signature(status)
        if status and sig != self.last_sig.get(name):
            self.transitions[name] += 1
        self.last_sig[name] = sig


# -- the run ----------------------------------------------------------------------------------------------
def kubectl(cluster: LocalCluster, *args: str) -> None:
    subprocess.run(["kubectl", *args], env={**os.environ, **cluster.env()}, check=True, capture_output=True)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    parser.add_argument("--jobs", type=int, default=200)
    parser.add_argument("--workers", type=int, default=4)
    parser.add_argument("--timeout", type=float, default=1800, help="seconds to wait for all jobs")
    parser.add_argument(
        "--operator-arg",
        action="append",
        default=[],
        help="extra operator flag, repeatable (e.g. --operator-arg=--kube-api-qps=50)",
    )
    args = parser.parse_args()
    pods = args.jobs * (args.workers + 1)
    nodes = max(2, math.ceil(pods / PODS_PER_NODE) + 1)
    work = Path(tempfile.mkdtemp(prefix="scale-bench-"))
    print(f"== {args.jobs} MPIJobs x {args.workers} workers = {pods} pods on {nodes} kwok nodes", flush=True)
    print(f"== operator flags: {' '.join(args.operator_arg) or '(defaults)'}; logs in {work}", flush=True)

    cluster = LocalCluster(ClusterSpec(tier="l2", nodes=nodes), work_dir=work / "cluster", keep_work_dir=True)
    cluster.start()
    operator: OperatorRunner | None = None
    watcher: StatusWatcher | None = None
    try:
        kubectl(cluster, "apply", "--server-side", "-k", str(REPO / "deploy" / "base-no-operator"))
        api = cluster.api_client()
        wait_for_crds(api, ["mpijobs.kubeflow.org"])
        core, batch = client.CoreV1Api(api), client.BatchV1Api(api)
        custom = client.CustomObjectsApi(api)
        core.create_namespace({"metadata": {"name": NAMESPACE}})
        wait_for_default_service_account(core, NAMESPACE)

        kubeconfig = cluster.write_user_kubeconfig(SA_USER)
        operator = OperatorRunner(kubeconfig, work / "operator.log", *args.operator_arg, log_format="json")
        operator.start()
        idle = requests(operator)
        watcher = StatusWatcher(cluster.api_client())
        watcher.start()

        began = time.monotonic()
        for i in range(args.jobs):
            custom.create_namespaced_custom_object(
                GROUP, VERSION, NAMESPACE, PLURAL, mpijob(f"job-{i:04d}", args.workers)
            )
        submitted = time.monotonic() - began
        print(f"submitted {args.jobs} MPIJobs in {submitted:.1f}s", flush=True)

        t_launchers = t_done = None
        peak_rss = 0
        last_line = ""
        while time.monotonic() - began < args.timeout:
            if not operator.alive():
                raise RuntimeError(f"operator exited:\n{operator.log_tail(4000)}")
            hwm, _ = proc_stats(operator.pid)
            peak_rss = max(peak_rss, hwm)
            if t_launchers is None:
                jobs = batch.list_namespaced_job(NAMESPACE).items
                launchers = sum(1 for j in jobs if j.metadata.name.endswith("-launcher"))
                if launchers >= args.jobs:
                    t_launchers = time.monotonic() - began
                    print(f"all {args.jobs} launcher Jobs exist after {t_launchers:.1f}s", flush=True)
            items = custom.list_namespaced_custom_object(GROUP, VERSION, NAMESPACE, PLURAL)["items"]
            succeeded = sum(
                1
                for mj in items
                if any(
                    c["type"] == "Succeeded" and c["status"] == "True"
                    for c in (mj.get("status") or {}).get("conditions") or []
                )
            )
            line = f"[{time.monotonic() - began:6.1f}s] succeeded {succeeded}/{args.jobs}"
            if line.split("]")[1] != last_line.split("]")[-1]:
                print(line, flush=True)
                last_line = line
            if succeeded >= args.jobs:
                t_done = time.monotonic() - began
                break
            time.sleep(0.5)
        if t_done is None:
            print(f"TIMEOUT after {args.timeout:.0f}s", flush=True)

        # Let cleanup (worker deletions after success) finish and the writes settle.
        settle_deadline = time.monotonic() + 120
        prev: dict[tuple[str, str], float] = {}
        stable_since = time.monotonic()
        while time.monotonic() < settle_deadline:
            cur = requests(operator)
            workers_left = len(
                core.list_namespaced_pod(
                    NAMESPACE, label_selector="training.kubeflow.org/job-role=worker"
                ).items
            )
            if cur != prev:
                prev, stable_since = cur, time.monotonic()
            if workers_left == 0 and time.monotonic() - stable_since > 5:
                break
            time.sleep(1)
        hwm, cpu = proc_stats(operator.pid)
        peak_rss = max(peak_rss, hwm)
        final = requests(operator)
        report(args, idle, final, watcher, t_launchers, t_done, peak_rss, cpu, batch, core)
        return 0 if t_done is not None else 1
    finally:
        if watcher is not None:
            watcher.stop_event.set()
        if operator is not None:
            operator.stop()
        cluster.stop()


def report(
    args: argparse.Namespace,
    idle: dict[tuple[str, str], float],
    final: dict[tuple[str, str], float],
    watcher: StatusWatcher,
    t_launchers: float | None,
    t_done: float | None,
    peak_rss: int,
    cpu: float,
    batch: client.BatchV1Api,
    core: client.CoreV1Api,
) -> None:
    n = args.jobs
    delta = {k: final.get(k, 0) - idle.get(k, 0) for k in final}
    lease = {k: v for k, v in delta.items() if k[1] == "Lease"}
    work = {k: v for k, v in delta.items() if k[1] != "Lease" and v}
    # API discovery (the executor's DynamicClient) is a one-time cost, not per job.
    discovery = sum(v for (verb, kind), v in work.items() if kind in ("discovery", "other"))
    work = {k: v for k, v in work.items() if k[1] not in ("discovery", "other")}
    reads = sum(v for (verb, _), v in work.items() if verb in READ_VERBS)
    writes = sum(v for (verb, _), v in work.items() if verb not in READ_VERBS)
    event_writes = sum(v for (verb, kind), v in work.items() if verb not in READ_VERBS and kind == "Event")

    # Target: each child created once (Service, ConfigMap, Secret, launcher Job, W workers), each worker
    # deleted once by cleanPodPolicy Running, and one status write per status transition.
    children = 4 + args.workers
    cleanup_deletes = args.workers
    transitions = sum(watcher.transitions.values()) / max(1, len(watcher.transitions))
    target = children + cleanup_deletes + transitions
    object_writes = writes - event_writes

    def fmt(t: float | None) -> str:
        return "n/a" if t is None else f"{t:.1f}s"

    print()
    print(f"== results: {n} MPIJobs x {args.workers} workers")
    print(f"time until every launcher Job exists : {fmt(t_launchers)}")
    print(f"time until every MPIJob Succeeded    : {fmt(t_done)}")
    print(f"API requests per job                 : reads {reads / n:.1f}, writes {writes / n:.1f}")
    print(f"  of the writes, Events              : {event_writes / n:.1f} per job")
    print(f"  API discovery (once, not per job)  : {discovery:.0f} requests")
    print(f"  leader election (not per job)      : {sum(lease.values()):.0f} Lease requests during the run")
    print("  by verb and kind (per job):")
    for (verb, kind), v in sorted(work.items(), key=lambda kv: (kv[0][0] in READ_VERBS, kv[0])):
        print(f"    {verb:>8} {kind:<18} {v / n:7.2f}")
    print(
        f"object writes per job (no Events)    : {object_writes / n:.1f}  target <= {target:.1f} "
        f"= {children} children + {cleanup_deletes} cleanup deletes + {transitions:.1f} status transitions"
    )
    print(
        f"status writes seen per job (watch)   : {sum(watcher.status_writes.values()) / n:.1f} "
        f"(transitions {transitions:.1f})"
    )
    rss_mib = peak_rss / 2**20
    verdict = "ok" if rss_mib <= RSS_TARGET_MIB else "OVER"
    print(f"operator peak RSS (VmHWM)            : {rss_mib:.1f} MiB  ", end="")
    print(f"target <= {RSS_TARGET_MIB} MiB ({verdict})")
    print(f"operator CPU (utime+stime)           : {cpu:.1f}s  ({cpu / n * 1000:.0f} ms per job)")
    left = len(batch.list_namespaced_job(NAMESPACE).items), len(core.list_namespaced_pod(NAMESPACE).items)
    print(f"left in the namespace                : {left[0]} Jobs, {left[1]} pods")


if __name__ == "__main__":
    sys.exit(main())
