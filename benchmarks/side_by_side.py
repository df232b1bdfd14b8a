"""Side by side: the same N MPIJobs x W workers through upstream's released operator and through ours,
each at its own defaults, each on a fresh L2 cluster (kwok nodes, the API server's audit log on).
`--qps Q` pins both clients to the same rate instead (`--kube-api-qps`, `--kube-api-burst`: the same flags
in both), for sizes where upstream's 5 requests per second would take hours.

For each operator it measures, from the moment the jobs are submitted:
- the time until every launcher Job exists and until every MPIJob is Succeeded (watches);
- its writes per job, from the API server's audit log (every create, update, patch and delete by the
  operator's user; Lease writes for leader election shown apart, Events counted with the writes);
- its CPU seconds (utime + stime) and peak RSS (VmHWM) at the end of the run;
then prints ours/upstream for each (below 1: ours is faster, writes less, uses less).

Upstream runs cluster-wide under its own ClusterRole (localcluster.upstream), ours under the
mpi-operator ServiceAccount's RBAC (deploy/base-no-operator). Usage:

    .venv/bin/python benchmarks/side_by_side.py --jobs 20 --workers 2
    .venv/bin/python benchmarks/side_by_side.py --jobs 200 --workers 4 --save /tmp/side.json
    .venv/bin/python benchmarks/side_by_side.py --jobs 1000 --workers 8 --qps 50
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import json
import math
import signal
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import yaml
from kubernetes import client

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "benchmarks"))

from scale_bench import (  # noqa: E402
    NAMESPACE,
    PACE_USER,
    PODS_PER_NODE,
    SA_USER,
    LauncherWatcher,
    StatusWatcher,
    cpu_probe,
    grant_admin,
    kubectl,
    mpijob,
    proc_stats,
    submit,
    user_client,
)

from localcluster import ClusterSpec, LocalCluster, upstream  # noqa: E402
from localcluster.cluster import wait_for_crds, wait_for_default_service_account  # noqa: E402
from localcluster.operator import OperatorRunner  # noqa: E402

WRITE_VERBS = {"create", "update", "patch", "delete", "deletecollection"}
SUBMIT_THREADS = 16
FIGURES = (
    ("t_launchers", "time until every launcher Job exists (s)"),
    ("t_done", "time until every MPIJob is Succeeded (s)"),
    ("writes_per_job", "writes per job (audit log)"),
    ("cpu", "CPU seconds"),
    ("rss_mib", "peak RSS (MiB)"),
)


def audit_writes(path: Path, user: str) -> collections.Counter[str]:
    """The user's writes in the audit log, by `<verb> <resource>[/<subresource>]` (one line per request)."""
    out: collections.Counter[str] = collections.Counter()
    with path.open() as f:
        for line in f:
            ev = json.loads(line)
            if ev.get("stage") != "ResponseComplete" or ev.get("verb") not in WRITE_VERBS:
                continue
            if (ev.get("user") or {}).get("username") != user:
                continue
            ref = ev.get("objectRef") or {}
            res = ref.get("resource", "?") + (f"/{ref['subresource']}" if ref.get("subresource") else "")
            out[f"{ev['verb']} {res}"] += 1
    return out


def run_one(which: str, args: argparse.Namespace, work: Path) -> dict[str, Any]:
    pods = args.jobs * (args.workers + 1)
    nodes = max(2, math.ceil(pods / PODS_PER_NODE) + 1)
    cluster = LocalCluster(ClusterSpec(tier="l2", nodes=nodes, audit=True), work_dir=work / which)
    pinned = [f"--kube-api-qps={args.qps:g}", f"--kube-api-burst={args.burst}"] if args.qps else []
    print(f"== {which}: fresh cluster with {nodes} kwok nodes; {cpu_probe()}", flush=True)
    cluster.start()
    op: OperatorRunner | upstream.UpstreamOperator | None = None
    watchers: list[StatusWatcher] = []
    try:
        kubectl(cluster, "apply", "--server-side", "-k", str(REPO / "deploy" / "base-no-operator"))
        api = cluster.api_client()
        wait_for_crds(api, ["mpijobs.kubeflow.org"])
        core = client.CoreV1Api(api)
        core.create_namespace({"metadata": {"name": NAMESPACE}})
        wait_for_default_service_account(core, NAMESPACE)
        grant_admin(cluster, PACE_USER)
        if which == "upstream":
            user = upstream.USER
            rbac = work / "upstream-rbac.yaml"
            rbac.write_text(yaml.safe_dump_all(upstream.rbac()))
            kubectl(cluster, "apply", "--server-side", "-f", str(rbac))
            op = upstream.UpstreamOperator(
                cluster.write_user_kubeconfig(user), work / f"{which}.log", "", *pinned
            )
        else:
            user = SA_USER
            op = OperatorRunner(
                cluster.write_user_kubeconfig(user), work / f"{which}.log", *pinned, log_format="json"
            )
        op.start()
        status, launchers = StatusWatcher(cluster.api_client()), LauncherWatcher(cluster.api_client())
        watchers = [status, launchers]
        for w in watchers:
            w.start()
        submitter = user_client(cluster, PACE_USER, SUBMIT_THREADS + 4)
        began = time.monotonic()
        with ThreadPoolExecutor(SUBMIT_THREADS) as pool:
            codes = list(
                pool.map(lambda i: submit(submitter, mpijob(f"job-{i:04d}", args.workers)), range(args.jobs))
            )
        if any(c != 201 for c in codes):
            raise RuntimeError(f"MPIJobs not created: {collections.Counter(codes)}")
        t_launchers = t_done = None
        peak = 0
        while time.monotonic() - began < args.timeout:
            if not op.alive():
                raise RuntimeError(f"{which} operator exited:\n{op.log_tail(4000)}")
            peak = max(peak, proc_stats(op.pid)[0])
            if t_launchers is None and len(launchers.seen) >= args.jobs:
                t_launchers = max(launchers.seen.values()) - began
            if len(status.succeeded) >= args.jobs:
                t_done = max(status.succeeded.values()) - began
                break
            time.sleep(0.5)
        # Let cleanup after success (worker deletions, status writes) finish before counting.
        quiet_since, last = time.monotonic(), -1
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and time.monotonic() - quiet_since < 5:
            now = sum(audit_writes(cluster.audit_log, user).values())
            if now != last:
                last, quiet_since = now, time.monotonic()
            time.sleep(1)
        hwm, cpu = proc_stats(op.pid)
        writes = audit_writes(cluster.audit_log, user)
        leases = sum(n for key, n in writes.items() if key.endswith(" leases"))
        total = sum(writes.values()) - leases
        figures = {
            "t_launchers": t_launchers,
            "t_done": t_done,
            "writes_per_job": total / args.jobs,
            "lease_writes": leases,
            "writes": {k: n for k, n in sorted(writes.items()) if not k.endswith(" leases")},
            "cpu": cpu,
            "rss_mib": max(peak, hwm) / 2**20,
        }
        print(f"   {which}: {json.dumps(figures)}", flush=True)
        return figures
    finally:
        for w in watchers:
            w.stop_event.set()
        if op is not None:
            op.stop()
        cluster.stop()


def ratio(a: float | None, b: float | None) -> str:
    if a is None or b is None:
        return "n/a (timed out)"
    return f"{a / b:.2f}" if b else "n/a"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    parser.add_argument("--jobs", type=int, default=200)
    parser.add_argument("--workers", type=int, default=4)
    parser.add_argument("--timeout", type=float, default=3600, help="seconds to wait for all jobs, per side")
    parser.add_argument("--save", type=Path, help="write the figures as JSON here")
    parser.add_argument(
        "--qps", type=float, default=0, help="pin both operators' client to this many requests per second"
    )
    parser.add_argument(
        "--burst", type=int, default=0, help="their client burst with --qps (default: 2 x qps)"
    )
    args = parser.parse_args()
    if args.qps < 0 or (args.qps and args.burst < 0):
        parser.error("--qps and --burst must not be negative")
    if args.qps and not args.burst:
        args.burst = max(1, int(2 * args.qps))
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    work = Path(tempfile.mkdtemp(prefix="side-by-side-"))
    pinned = (
        f" (clients pinned: --kube-api-qps={args.qps:g} --kube-api-burst={args.burst})" if args.qps else ""
    )
    print(
        f"== {args.jobs} MPIJobs x {args.workers} workers through each operator{pinned}; logs in {work}",
        flush=True,
    )
    result: dict[str, Any] = {
        "jobs": args.jobs,
        "workers": args.workers,
        "qps": args.qps,
        "burst": args.burst,
    }
    for which in ("upstream", "ours"):
        result[which] = run_one(which, args, work)
    up, ours = result["upstream"], result["ours"]
    print(f"\n{'':44} {'upstream':>10} {'ours':>10} {'ours/upstream':>14}")
    for key, label in FIGURES:
        a, b = ours[key], up[key]
        show = [f"{v:10.1f}" if isinstance(v, float) else f"{'-':>10}" for v in (b, a)]
        print(f"{label:44} {show[0]} {show[1]} {ratio(a, b):>14}")
    for which in ("upstream", "ours"):
        print(f"{which} writes: {result[which]['writes']}, and {result[which]['lease_writes']} Lease writes")
    if args.save:
        with contextlib.suppress(OSError):
            args.save.write_text(json.dumps(result, indent=1))
    return 0 if up["t_done"] is not None and ours["t_done"] is not None else 1


if __name__ == "__main__":
    sys.exit(main())
