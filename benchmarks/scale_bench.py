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
- the operator's peak RSS (VmHWM) and CPU seconds (utime + stime), and the memory one cached object of
  each kind costs (the operator's cache form of the objects listed at the peak, measured with tracemalloc);
- the API server's own pace for the same writes: before and after the operator's run (``--pace-once``:
  before only), on the same cluster, a plain client (no client-side limit, ``--pace-threads`` concurrent
  requests, a ServiceAccount user like the operator, so the same API Priority and Fairness level) creates
  the same MPIJobs and children in the namespace ``pace``; the operator's time until every child exists
  is printed as a ratio to the mean of the two (the machine's speed drifts during a run);
- a CPU probe and the load average before and after; with ``--profile FILE``, py-spy's samples of the
  operator threads holding the GIL;
- with ``--load N``: N threads of a second ServiceAccount client load the API server during the operator's
  run (cluster-wide pod lists, ConfigMap creates and deletes), by default on an API server with a small
  ``--max-requests-inflight`` so that the load saturates it; the 429s each client got are printed, and
  the operator's limiter's behaviour (its rate limit over time, from its metrics).

Targets are printed, not asserted. Usage:

    .venv/bin/python benchmarks/scale_bench.py --jobs 20 --workers 4
    .venv/bin/python benchmarks/scale_bench.py               # 200 x 4, the defaults
    .venv/bin/python benchmarks/scale_bench.py --operator-arg=--kube-api-qps=50 \\
        --operator-arg=--kube-api-burst=100
    .venv/bin/python benchmarks/scale_bench.py --load 48     # a competing client on a loaded server
    .venv/bin/python benchmarks/scale_bench.py --save /tmp/200.json
    .venv/bin/python benchmarks/scale_bench.py --jobs 1000 --workers 8 --compare /tmp/200.json
"""

from __future__ import annotations

import argparse
import collections
import datetime
import json
import math
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
import tracemalloc
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from kubernetes import client, config, watch

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

import render  # noqa: E402
from localcluster import ClusterSpec, LocalCluster  # noqa: E402
from localcluster.cluster import wait_for_default_service_account  # noqa: E402
from localcluster.e2e import SA_USER, apply_base  # noqa: E402
from localcluster.jobs import minimal_job  # noqa: E402
from localcluster.kubectl import kubectl  # noqa: E402
from localcluster.operator import OperatorRunner  # noqa: E402
from reconcile.mpijob.cacheform import cache_form  # noqa: E402
from reconcile.mpijob.kinds import MPIJOB  # noqa: E402
from reconcile.runtime import kube as k  # noqa: E402

NAMESPACE = "bench"
GROUP, VERSION, PLURAL = "kubeflow.org", "v2beta1", "mpijobs"
READ_VERBS = {"get", "list", "watch"}
PODS_PER_NODE = 100  # kwok nodes allow 110; keep headroom
RSS_TARGET_MIB = 91  # upstream v0.8.2's peak at 200 x 4
RATIO_TARGET = 1.3
PACE_USER = "system:serviceaccount:pace:pacer"
OPERATOR_LABEL = "training.kubeflow.org/operator-name"
LOAD_NS, LOAD_USER = "load", "system:serviceaccount:load:loader"
# a loaded API server: 30 seats in all, so that a Python load client saturates APF's levels
LOADED_APISERVER = ("--max-requests-inflight=20", "--max-mutating-requests-inflight=10")
CACHED_KINDS = (k.POD, k.JOB, k.SERVICE, k.CONFIGMAP, k.SECRET, MPIJOB)


def mpijob(name: str, workers: int, namespace: str = NAMESPACE) -> dict[str, Any]:
    """Upstream's pi example, root Open MPI; kwok finishes the launcher pod 1 s after it runs."""
    job = minimal_job(
        name,
        workers,
        image="mpioperator/mpi-pi:openmpi",
        launcher_replicas=1,
        namespace=namespace,
        slotsPerWorker=1,
        runPolicy={"cleanPodPolicy": "Running"},
    )
    launcher = job["spec"]["mpiReplicaSpecs"]["Launcher"]["template"]["spec"]["containers"][0]
    launcher.update(command=["mpirun"], args=["--allow-run-as-root", "-n", str(workers), "/home/mpiuser/pi"])
    return job


# -- plain clients: the API server's pace, and the competing load ------------------------------------------
def user_client(cluster: LocalCluster, user: str, pool: int) -> client.ApiClient:
    cfg = client.Configuration()
    config.load_kube_config(config_file=str(cluster.write_user_kubeconfig(user)), client_configuration=cfg)
    cfg.connection_pool_maxsize = pool
    return client.ApiClient(cfg)


def raw(
    api: client.ApiClient, method: str, path: str, body: Any = None, query: Any = ()
) -> tuple[int, bytes]:
    """One request, no client-side limit, no retry: (code, body)."""
    headers = {"Accept": "application/json", "Content-Type": "application/json"}
    req = api.param_serialize(method, path, query_params=list(query), header_params=headers, body=body)
    try:
        resp = api.call_api(*req, _request_timeout=120)
    except Exception:
        return 0, b""
    return resp.status, resp.read() or b""


def submit(api: client.ApiClient, obj: dict[str, Any]) -> int:
    """Create an MPIJob as a user would: a 429 (a loaded server) is retried after its Retry-After."""
    path = MPIJOB.path(obj["metadata"]["namespace"])
    for _ in range(60):
        req = api.param_serialize(
            "POST",
            path,
            header_params={"Accept": "application/json", "Content-Type": "application/json"},
            body=obj,
        )
        try:
            resp = api.call_api(*req, _request_timeout=120)
        except Exception:
            time.sleep(1)
            continue
        resp.read()
        if resp.status != 429:
            return resp.status
        time.sleep(float(resp.headers.get("Retry-After") or 1))
    return 429


def pace_objects(jobs: int, workers: int, namespace: str) -> list[dict[str, Any]]:
    """The MPIJobs and the children the operator creates for them (render's), in ``namespace``: the
    MPIJobs with ``runPolicy.managedBy`` MultiKueue (the operator leaves them alone); the children without
    ownerReferences (their owners' UIDs are made up: the garbage collector would delete them) and without
    the operator-name label (the operator's label-selected caches never see them)."""
    observed = render.Observed.from_objects(
        (), now=datetime.datetime.now(datetime.UTC), fresh_ssh_key=render.generate_ssh_key()
    )
    out: list[dict[str, Any]] = []
    for i in range(jobs):
        owner = mpijob(f"job-{i:04d}", workers, namespace)
        owner["metadata"]["uid"] = f"pace-{i}"
        job = mpijob(f"job-{i:04d}", workers, namespace)
        job["spec"]["runPolicy"]["managedBy"] = "kueue.x-k8s.io/multikueue"
        out.append(job)
        for child in render.render(owner, observed, render.Config()):
            child["metadata"].pop("ownerReferences", None)
            child["metadata"].get("labels", {}).pop(OPERATOR_LABEL, None)
            out.append(child)
    return out


def run_pace(cluster: LocalCluster, args: argparse.Namespace, namespace: str) -> float:
    kubectl(cluster, "create", "namespace", namespace)
    objects = pace_objects(args.jobs, args.workers, namespace)
    pacer = user_client(cluster, PACE_USER, args.pace_threads + 4)
    pace, codes = measure_pace(pacer, objects, args.pace_threads)
    print(
        f"pace ({namespace}): {len(objects)} creates by {args.pace_threads} threads in {pace:.1f}s "
        f"({len(objects) / pace:.0f}/s), codes {codes}",
        flush=True,
    )
    # The scheduler and kwok take a while to place and start those pods: wait, so that work does not
    # load the server during the operator's run.
    core = client.CoreV1Api(pacer)
    began = time.monotonic()
    while time.monotonic() - began < 600:
        pending = core.list_namespaced_pod(namespace, field_selector="status.phase=Pending", limit=1)
        if not pending.items:
            break
        time.sleep(2)
    print(f"pace ({namespace}): its pods started after {time.monotonic() - began:.0f}s more", flush=True)
    time.sleep(5)
    return pace


def measure_pace(api: client.ApiClient, objects: list[dict[str, Any]], threads: int) -> tuple[float, dict]:
    """Seconds for ``threads`` concurrent requests to create ``objects``; answer codes counted."""

    def create(obj: dict[str, Any]) -> int:
        return raw(api, "POST", k.resource_for(obj).path(obj["metadata"]["namespace"]), obj)[0]

    began = time.monotonic()
    with ThreadPoolExecutor(threads) as pool:
        codes = collections.Counter(pool.map(create, objects))
    return time.monotonic() - began, dict(codes)


class Load:
    """``threads`` threads of a second client, each in a loop: list pods cluster-wide (a page of 500),
    create a ConfigMap, delete it. Answer codes counted."""

    def __init__(self, api: client.ApiClient, threads: int) -> None:
        self.api, self.threads = api, threads
        self.stop_event = threading.Event()
        self.codes: collections.Counter[int] = collections.Counter()
        self._lock = threading.Lock()
        self._pool: list[threading.Thread] = []

    def start(self) -> None:
        for i in range(self.threads):
            t = threading.Thread(target=self._run, args=(i,), daemon=True)
            t.start()
            self._pool.append(t)

    def _run(self, i: int) -> None:
        n = 0
        cm_path = k.CONFIGMAP.path(LOAD_NS)
        while not self.stop_event.is_set():
            n += 1
            name = f"load-{i}-{n}"
            body = {
                "apiVersion": "v1",
                "kind": "ConfigMap",
                "metadata": {"name": name},
                "data": {"x": "y" * 512},
            }
            got = [
                raw(self.api, "GET", k.POD.path(), query=[("limit", 500)])[0],
                raw(self.api, "POST", cm_path, body)[0],
                raw(self.api, "DELETE", k.CONFIGMAP.path(LOAD_NS, name))[0],
            ]
            with self._lock:
                self.codes.update(got)

    def stop(self) -> None:
        self.stop_event.set()
        for t in self._pool:
            t.join(130)


def grant_admin(cluster: LocalCluster, *users: str) -> None:
    for user in users:
        name = user.replace(":", "-")
        kubectl(
            cluster, "create", "clusterrolebinding", name, "--clusterrole=cluster-admin", f"--user={user}"
        )


# -- memory per cached object -----------------------------------------------------------------------------
def cache_cost(api: client.ApiClient) -> dict[str, tuple[int, float, float]]:
    """kind -> (objects, bytes of JSON per object, bytes per object in the operator's cache form), from the
    objects in the benchmark's namespace now."""
    out: dict[str, tuple[int, float, float]] = {}
    for res in CACHED_KINDS:
        code, data = raw(api, "GET", res.path(NAMESPACE))
        if code != 200:
            continue
        blobs = [json.dumps(item).encode() for item in json.loads(data).get("items") or []]
        if not blobs:
            continue
        tracemalloc.start()
        before = tracemalloc.get_traced_memory()[0]
        cached = [cache_form(json.loads(b), res.api_version, res.kind) for b in blobs]
        used = tracemalloc.get_traced_memory()[0] - before
        tracemalloc.stop()
        del cached
        out[res.kind] = (len(blobs), sum(map(len, blobs)) / len(blobs), used / len(blobs))
    return out


# -- the operator process ---------------------------------------------------------------------------------
def requests(op: OperatorRunner) -> dict[tuple[str, str], float]:
    """(verb, kind) -> API requests the operator sent, summed over response codes; a write the fence
    refused (leadership lapsed: never sent) is not one."""
    out: dict[tuple[str, str], float] = collections.defaultdict(float)
    for (name, labels), value in op.metrics().items():
        if name == "mpi_operator_api_requests_total":
            lab = dict(labels)
            if lab.get("code") != "fenced":
                out[(lab["verb"], lab["kind"])] += value
    return out


def cpu_probe() -> str:
    """The machine's speed now: a fixed pure-Python loop (best of 3) and the load average. Paces measured
    on this shared 2-core machine moved by 2x between runs; this says how busy it was."""
    best = math.inf
    for _ in range(3):
        began = time.perf_counter()
        total = 0
        for i in range(1_000_000):
            total += i * i
        best = min(best, time.perf_counter() - began)
    return f"probe loop {best * 1000:.0f} ms, load average {os.getloadavg()[0]:.1f}"


def proc_stats(pid: int) -> tuple[int, float]:
    """(VmHWM bytes, utime + stime seconds) of a process."""
    hwm = 0
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            hwm = int(line.split()[1]) * 1024
    return hwm, sum(cpu_split(pid))


def cpu_split(pid: int) -> tuple[float, float]:
    """(user, system) CPU seconds of a process, all its threads."""
    stat = Path(f"/proc/{pid}/stat").read_text()
    fields = stat[stat.rindex(")") + 2 :].split()
    ticks = os.sysconf("SC_CLK_TCK")
    return int(fields[11]) / ticks, int(fields[12]) / ticks


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
        self.succeeded: dict[str, float] = {}  # name -> monotonic time the watch first showed Succeeded

    def stream(self, w: watch.Watch, rv: str) -> Any:
        return w.stream(
            self.custom.list_namespaced_custom_object,
            GROUP,
            VERSION,
            NAMESPACE,
            PLURAL,
            resource_version=rv or None,
            timeout_seconds=30,
        )

    def run(self) -> None:
        rv = ""
        while not self.stop_event.is_set():
            w = watch.Watch()
            try:
                for ev in self.stream(w, rv):
                    obj = ev["object"]
                    if isinstance(obj, dict):
                        rv = obj["metadata"]["resourceVersion"]
                        self.observe(obj["metadata"]["name"], obj.get("status") or {})
                    else:  # a typed client's model (Jobs)
                        rv = obj.metadata.resource_version
                        self.observe(obj.metadata.name, {})
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
        if ("Succeeded", "True") in sig[0]:
            self.succeeded.setdefault(name, time.monotonic())


class LauncherWatcher(StatusWatcher):
    """When the watch first showed each launcher Job (progress from watches: polling lists every half
    second loaded the server during the operator's run, and not during the pace client's)."""

    def __init__(self, api: client.ApiClient) -> None:
        super().__init__(api)
        self.batch = client.BatchV1Api(api)
        self.seen: dict[str, float] = {}

    def stream(self, w: watch.Watch, rv: str) -> Any:
        return w.stream(
            self.batch.list_namespaced_job, NAMESPACE, resource_version=rv or None, timeout_seconds=30
        )

    def observe(self, name: str, status: dict[str, Any]) -> None:
        if name.endswith("-launcher"):
            self.seen.setdefault(name, time.monotonic())


# -- the run ----------------------------------------------------------------------------------------------
def operator_samples(op: OperatorRunner) -> tuple[float, float]:
    """(429 answers so far, the client's rate limit now; 0: none) from the operator's metrics."""
    throttled = limit = 0.0
    for (name, labels), value in op.metrics().items():
        if name == "mpi_operator_api_requests_total" and dict(labels).get("code") == "429":
            throttled += value
        elif name == "mpi_operator_client_rate_limit":
            limit = value
    return throttled, limit


def start_profiler(pid: int, output: str) -> subprocess.Popen[bytes]:
    """py-spy's on-CPU samples of the process's threads holding the GIL, in its raw format (one folded stack
    per line) until the process exits."""
    return subprocess.Popen(
        [
            str(Path(sys.executable).parent / "py-spy"),
            "record",
            "--pid",
            str(pid),
            "--rate",
            "50",
            "--format",
            "raw",
            "--output",
            output,
            "--nonblocking",
            "--gil",
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    parser.add_argument("--jobs", type=int, default=200)
    parser.add_argument("--workers", type=int, default=4)
    parser.add_argument("--timeout", type=float, default=3600, help="seconds to wait for all jobs")
    parser.add_argument(
        "--operator-arg",
        action="append",
        default=[],
        help="extra operator flag, repeatable (e.g. --operator-arg=--kube-api-qps=50)",
    )
    parser.add_argument("--pace-threads", type=int, default=16, help="concurrent requests of the pace client")
    parser.add_argument("--no-pace", action="store_true", help="skip the API server's pace")
    parser.add_argument(
        "--pace-once",
        action="store_true",
        help="measure the pace only before the operator's run (by default also after it: the ratio is to "
        "their mean, as the machine's speed drifts)",
    )
    parser.add_argument("--load", type=int, default=0, help="threads of a competing client during the run")
    parser.add_argument(
        "--apiserver-arg",
        action="append",
        default=None,
        help=f"extra kube-apiserver flag, repeatable (with --load default: {' '.join(LOADED_APISERVER)})",
    )
    parser.add_argument("--save", type=Path, help="write the figures as JSON here")
    parser.add_argument("--compare", type=Path, help="print growth against a --save'd run")
    parser.add_argument(
        "--profile",
        help="write py-spy's samples of the operator threads holding the GIL here (raw format; needs py-spy)",
    )
    args = parser.parse_args()
    # SIGTERM too stops the cluster and the operator (the finally below)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    pods = args.jobs * (args.workers + 1)
    # room for the pace client's copies of the pods too (they stay: deleting them would load the server)
    copies = 1 + (not args.no_pace) + (not args.no_pace and not args.pace_once)
    nodes = max(2, copies * math.ceil(pods / PODS_PER_NODE) + 1)
    apiserver_args = tuple(args.apiserver_arg if args.apiserver_arg is not None else ())
    if args.load and args.apiserver_arg is None:
        apiserver_args = LOADED_APISERVER
    work = Path(tempfile.mkdtemp(prefix="scale-bench-"))
    print(f"== {args.jobs} MPIJobs x {args.workers} workers = {pods} pods on {nodes} kwok nodes", flush=True)
    print(f"== operator flags: {' '.join(args.operator_arg) or '(defaults)'}; logs in {work}", flush=True)
    if apiserver_args:
        print(f"== kube-apiserver flags: {' '.join(apiserver_args)}", flush=True)
    if args.load:
        print(f"== competing load: {args.load} threads (pod lists, ConfigMap creates/deletes)", flush=True)

    spec = ClusterSpec(tier="l2", nodes=nodes, apiserver_args=apiserver_args)
    cluster = LocalCluster(spec, work_dir=work / "cluster", keep_work_dir=True)
    print(f"== machine before: {cpu_probe()}", flush=True)
    cluster.start()
    operator: OperatorRunner | None = None
    watcher: StatusWatcher | None = None
    load: Load | None = None
    figures: dict[str, Any] = {"jobs": args.jobs, "workers": args.workers, "operator_args": args.operator_arg}
    try:
        apply_base(cluster)
        api = cluster.api_client()
        core, batch = client.CoreV1Api(api), client.BatchV1Api(api)
        for ns in (NAMESPACE, LOAD_NS):
            core.create_namespace({"metadata": {"name": ns}})
        wait_for_default_service_account(core, NAMESPACE)
        grant_admin(cluster, PACE_USER, LOAD_USER)
        paces: list[float] = []
        if not args.no_pace:
            paces.append(run_pace(cluster, args, "pace-before"))

        kubeconfig = cluster.write_user_kubeconfig(SA_USER)
        operator = OperatorRunner(kubeconfig, work / "operator.log", *args.operator_arg, log_format="json")
        operator.start()
        profiler = start_profiler(operator.pid, args.profile) if args.profile else None
        idle = requests(operator)
        watcher = StatusWatcher(cluster.api_client())
        watcher.start()
        launchers = LauncherWatcher(cluster.api_client())
        launchers.start()
        if args.load:
            load = Load(user_client(cluster, LOAD_USER, args.load + 4), args.load)
            load.start()
            time.sleep(5)  # the server is loaded before the jobs come
            print(f"load running: {sum(load.codes.values())} requests in 5 s, codes {dict(load.codes)}")

        # submitted as the pace client creates: the same concurrency, so the ratio compares like with like
        submitter = user_client(cluster, PACE_USER, args.pace_threads + 4)
        began = time.monotonic()
        with ThreadPoolExecutor(args.pace_threads) as pool:
            bad = [
                code
                for code in pool.map(
                    lambda i: submit(submitter, mpijob(f"job-{i:04d}", args.workers)), range(args.jobs)
                )
                if code != 201
            ]
        if bad:
            raise RuntimeError(f"{len(bad)} MPIJobs not created: {collections.Counter(bad)}")
        submitted = time.monotonic() - began
        print(f"submitted {args.jobs} MPIJobs in {submitted:.1f}s", flush=True)

        t_launchers = t_done = None
        peak_rss = 0
        last_line = ""
        costs: dict[str, tuple[int, float, float]] = {}
        limits: list[tuple[float, float, float]] = []  # (t, 429s so far, limit)
        next_scrape = 0.0
        while time.monotonic() - began < args.timeout:
            if not operator.alive():
                raise RuntimeError(f"operator exited:\n{operator.log_tail(4000)}")
            hwm, _ = proc_stats(operator.pid)
            peak_rss = max(peak_rss, hwm)
            now = time.monotonic() - began
            if now >= next_scrape:  # a scrape costs the operator CPU (~50 ms; a Prometheus: every 15-30 s)
                next_scrape = now + (2 if args.load else 10)
                throttled, limit = operator_samples(operator)
                if not limits or limits[-1][1:] != (throttled, limit):
                    limits.append((now, throttled, limit))
            if t_launchers is None and len(launchers.seen) >= args.jobs:
                t_launchers = max(launchers.seen.values()) - began
                print(f"all {args.jobs} launcher Jobs exist after {t_launchers:.1f}s", flush=True)
                costs = cache_cost(api)  # the most objects are cached now
            succeeded = len(watcher.succeeded)
            line = f"[{now:6.1f}s] succeeded {succeeded}/{args.jobs}"
            if args.load:
                line += f"; operator 429s {throttled:.0f}, limit {limit:.0f} qps (0: none)"
            if line.split("]")[1] != last_line.split("]")[-1]:
                print(line, flush=True)
                last_line = line
            if succeeded >= args.jobs:
                t_done = max(watcher.succeeded.values()) - began
                break
            time.sleep(0.5)
        if t_done is None:
            print(f"TIMEOUT after {args.timeout:.0f}s", flush=True)
        load_codes: dict[int, int] = {}
        if load is not None:
            load.stop()
            load_codes = dict(load.codes)

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
        codes = operator_codes(operator)
        syncs = sum(
            v
            for (name, _), v in operator.metrics().items()
            if name == "mpi_operator_reconcile_duration_seconds_count"
        )
        operator.stop()
        operator = None
        if profiler is not None:
            profiler.wait(timeout=60)

        print(f"== machine after the operator's run: {cpu_probe()}", flush=True)
        if not args.no_pace and not args.pace_once:
            paces.append(run_pace(cluster, args, "pace-after"))
        pace = sum(paces) / len(paces) if paces else None
        figures.update(
            t_launchers=t_launchers,
            t_done=t_done,
            pace=pace,
            paces=paces,
            rss_mib=peak_rss / 2**20,
            cpu=cpu,
            codes=codes,
            syncs=syncs,
            load_codes={str(c): n for c, n in load_codes.items()},
            cache={kind: list(v) for kind, v in costs.items()},
        )
        report(args, idle, final, watcher, figures, limits, batch, core)
        if args.save:
            args.save.write_text(json.dumps(figures, indent=1))
        if args.compare:
            growth(json.loads(args.compare.read_text()), figures)
        return 0 if t_done is not None else 1
    finally:
        if load is not None:
            load.stop()
        if watcher is not None:
            watcher.stop_event.set()
        if operator is not None:
            operator.stop()
        cluster.stop()


def operator_codes(op: OperatorRunner) -> dict[str, float]:
    out: dict[str, float] = collections.defaultdict(float)
    for (name, labels), value in op.metrics().items():
        if name == "mpi_operator_api_requests_total":
            out[dict(labels)["code"]] += value
    return dict(out)


# Why a write above the target is there, by (verb, kind).
WHY = {
    ("patch", "ConfigMap"): "discover_hosts.sh lists the Running workers: rewritten once they run "
    "(held up to 1 s if the launcher discovers hosts, else 60 s, so workers starting one by one cost one "
    "write)",
    ("update", "MPIJob/status"): "replicaStatuses changes between transitions (workers starting one by one; "
    "held up to 10 s for the next transition), or a transition seen in two writes",
    ("create", "Event"): "Events (upstream records the same ones)",
    ("patch", "Event"): "Event series (repeats counted on the Event)",
}


def report(
    args: argparse.Namespace,
    idle: dict[tuple[str, str], float],
    final: dict[tuple[str, str], float],
    watcher: StatusWatcher,
    figures: dict[str, Any],
    limits: list[tuple[float, float, float]],
    batch: client.BatchV1Api,
    core: client.CoreV1Api,
) -> None:
    n = args.jobs
    t_launchers, t_done, pace = figures["t_launchers"], figures["t_done"], figures["pace"]
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
    figures["writes_per_job"] = object_writes / n

    def fmt(t: float | None) -> str:
        return "n/a" if t is None else f"{t:.1f}s"

    print()
    print(f"== results: {n} MPIJobs x {args.workers} workers; operator flags: {' '.join(args.operator_arg)}")
    print(f"time until every launcher Job exists : {fmt(t_launchers)}")
    print(f"time until every MPIJob Succeeded    : {fmt(t_done)}")
    if pace:
        print(
            f"API server's pace, same creates      : {pace:.1f}s (mean of "
            + " and ".join(f"{p:.1f}s" for p in figures["paces"])
            + f"; {args.pace_threads} concurrent, no limit)"
        )
        if t_launchers is not None:
            ratio = t_launchers / pace
            figures["ratio"] = ratio
            verdict = "ok" if ratio <= RATIO_TARGET else "OVER"
            print(f"ratio (every child exists / pace)    : {ratio:.2f}  target <= {RATIO_TARGET} ({verdict})")
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
    above = excess(work, n, children, cleanup_deletes, transitions)
    for what, v in above:
        print(f"  above the target: {v:5.2f} per job  {what}")
    print(
        f"status writes seen per job (watch)   : {sum(watcher.status_writes.values()) / n:.1f} "
        f"(transitions {transitions:.1f})"
    )
    codes = figures["codes"]
    throttled = codes.get("429", 0)
    print(
        "operator's answers by code           : "
        + ", ".join(f"{c}: {v:.0f}" for c, v in sorted(codes.items()))
    )
    print(f"operator's 429s                      : {throttled:.0f} ({throttled / n:.2f} per job)")
    if codes.get("fenced"):
        print(
            f"writes the fence held back           : {codes['fenced']:.0f} (leadership lapsed: the Lease "
            "was not renewed in time; not sent, not counted above)"
        )
    if figures["load_codes"]:
        lc = figures["load_codes"]
        total = sum(lc.values())
        print(f"competing client's answers           : {total} requests, {lc.get('429', 0)} 429s, codes {lc}")
    if throttled or figures["load_codes"] or any(lim for _, _, lim in limits):
        series = ", ".join(f"{t:.0f}s: {lim:.0f}" for t, _, lim in limits[:40])
        print(f"operator's limit over time (qps, 0: none): {series}")
    rss_mib = figures["rss_mib"]
    verdict = "ok" if rss_mib <= RSS_TARGET_MIB else "OVER"
    print(
        f"operator peak RSS (VmHWM)            : {rss_mib:.1f} MiB  "
        f"target <= {RSS_TARGET_MIB} MiB ({verdict})"
    )
    cpu = figures["cpu"]
    print(f"operator CPU (utime+stime)           : {cpu:.1f}s  ({cpu / n * 1000:.0f} ms per job)")
    syncs = figures.get("syncs")
    if syncs:
        print(
            f"syncs per job                        : {syncs / n:.1f} "
            f"({cpu / syncs * 1000:.1f} ms of CPU per sync)"
        )
    if figures["cache"]:
        print("memory per cached object (cache form, tracemalloc; JSON size for scale):")
        total = 0.0
        for kind, (count, json_size, mem) in figures["cache"].items():
            total += count * mem
            print(
                f"    {kind:<10} {count:6d} objects  {mem / 1024:6.1f} KiB each  "
                f"(JSON {json_size / 1024:5.1f} KiB)"
            )
        print(f"    all        {total / 2**20:6.1f} MiB at the peak")
    left = len(batch.list_namespaced_job(NAMESPACE).items), len(core.list_namespaced_pod(NAMESPACE).items)
    print(f"left in the namespace                : {left[0]} Jobs, {left[1]} pods")


def excess(
    work: dict[tuple[str, str], float], n: int, children: int, deletes: int, transitions: float
) -> list[tuple[str, float]]:
    """Writes per job above one per child, one delete per cleaned-up worker and one status write per
    transition, by verb and kind, with the reason where known."""
    out: list[tuple[str, float]] = []
    creates = sum(v for (verb, kind), v in work.items() if verb == "create" and kind != "Event") / n
    if creates > children + 0.005:
        out.append(("creates beyond one per child (a child created again)", creates - children))
    dels = sum(v for (verb, kind), v in work.items() if verb == "delete" and kind != "Event") / n
    if dels > deletes + 0.005:
        out.append(("deletes beyond the workers' cleanup", dels - deletes))
    for (verb, kind), v in sorted(work.items()):
        if verb in READ_VERBS or verb in ("create", "delete") or kind == "Event":
            continue
        per = v / n
        if kind == "MPIJob/status":
            per -= transitions
        if per > 0.005:
            out.append((f"{verb} {kind}: {WHY.get((verb, kind), 'a change of a live child')}", per))
    return out


def growth(before: dict[str, Any], after: dict[str, Any]) -> None:
    def ratio(key: str, per_job: bool = False) -> str:
        a, b = before.get(key), after.get(key)
        if not a or not b:
            return "n/a"
        if per_job:
            a, b = a / before["jobs"], b / after["jobs"]
        return f"{a:.1f} -> {b:.1f} (x{b / a:.2f})"

    print()
    print(f"== growth from {before['jobs']}x{before['workers']} to {after['jobs']}x{after['workers']}:")
    print(f"  jobs                    x{after['jobs'] / before['jobs']:.1f}")
    print(f"  every child exists (s)  {ratio('t_launchers')}")
    print(f"  all Succeeded (s)       {ratio('t_done')}")
    print(f"  API server's pace (s)   {ratio('pace')}")
    print(f"  ratio to the pace       {ratio('ratio')}")
    print(f"  peak RSS (MiB)          {ratio('rss_mib')}")
    print(f"  CPU per job (s)         {ratio('cpu', per_job=True)}")


if __name__ == "__main__":
    sys.exit(main())
