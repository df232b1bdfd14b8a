"""Side by side: the same N MPIJobs x W workers through upstream's released operator and through ours,
each at its own defaults, each on a fresh L2 cluster (kwok nodes, the API server's audit log on).
`--qps Q` pins both clients to the same rate instead (`--kube-api-qps`, `--kube-api-burst`: the same flags
in both), for sizes where upstream's 5 requests per second would take hours, and `--queue-qps Q` their work
queues (`--controller-queue-rate-limit`; upstream's 10 keys per second, one slot per watch event, holds
1,000 x 8 up for an hour).

For each operator it measures, from the moment the jobs are submitted:
- the time until every launcher Job exists and until every MPIJob is Succeeded (watches), and until it
  converged: no Pending or Running worker left (the jobs' cleanPodPolicy is Running) and no write for 5 s,
  or no write for 60 s with workers left (their number is shown);
- at convergence, its writes per job from the API server's audit log (every create, update, patch and
  delete by the operator's user; Lease writes for leader election shown apart, Events counted with the
  writes), its CPU seconds (utime + stime) since the jobs were submitted (per job too; what it spent
  starting, until ready, apart) and peak RSS (VmHWM);
then prints ours/upstream for each (below 1: ours is faster, writes less, uses less). A side still short of
its jobs at `--timeout` shows its times as "> the time waited" and how many launchers and Succeeded it
reached: ours/upstream of such a time is an upper bound, and the figures per job are not compared.

Upstream runs cluster-wide under its own ClusterRole (localcluster.upstream), ours under the
mpi-operator ServiceAccount's RBAC (deploy/base-no-operator). Usage:

    .venv/bin/python benchmarks/side_by_side.py --jobs 20 --workers 2 --repeat 1
    .venv/bin/python benchmarks/side_by_side.py --jobs 200 --workers 4 --save /tmp/side.json
    .venv/bin/python benchmarks/side_by_side.py --jobs 1000 --workers 8 --qps 100 --queue-qps 1000

Both run in one invocation, alternating (ours, upstream, ours, upstream, ... `--repeat N` of each), each on
a fresh cluster; the table shows each side's median and its spread (lowest to highest), and ours/upstream
of the medians. This machine's speed moves by a third from day to day, so only such runs compare.
`--upstream-from FILE` takes upstream's runs from an earlier `--save` instead; the table then says that it
compares across invocations and when the other runs were made.

After each operator's run the operator is stopped and a plain client creates the same objects on the same
cluster (scale_bench's pace: no client-side limit, as many concurrent requests as the submitter): the
time until every launcher Job exists (the last child) over that pace is printed for each side, as how far
each is from the API server's own limit (`--no-pace` skips it).
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import json
import math
import os
import signal
import subprocess
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
    LauncherWatcher,
    StatusWatcher,
    cpu_probe,
    cpu_split,
    grant_admin,
    mpijob,
    proc_stats,
    run_pace,
    start_profiler,
    submit,
    user_client,
)

from localcluster import ClusterSpec, LocalCluster, upstream  # noqa: E402
from localcluster.cluster import wait_for_default_service_account  # noqa: E402
from localcluster.comparison import combine, order, progress, saved_runs, table  # noqa: E402
from localcluster.e2e import SA_USER, apply_base  # noqa: E402
from localcluster.kubectl import kubectl  # noqa: E402
from localcluster.operator import OperatorRunner  # noqa: E402
from localcluster.rbacuse import WRITE_VERBS  # noqa: E402
from render import names  # noqa: E402

SUBMIT_THREADS = 16
QUIET_SECONDS = 5.0
# Quiet this long while workers of finished jobs still run: counted, not awaited (upstream's per-key back-off
# can hold the cleanup sync of a job that saw many events for up to 1000 s).
LEFT_SECONDS = 60.0


def live_workers(core: client.CoreV1Api) -> int:
    """Pending or Running worker pods not yet deleted: the jobs' cleanPodPolicy is Running, so each goes
    once its job ends (a worker that kwok ended on its own is not the operator's to delete)."""
    selector = f"{names.LABEL_JOB_ROLE}={names.ROLE_WORKER}"
    pods = core.list_namespaced_pod(NAMESPACE, label_selector=selector).items
    return sum(
        1
        for p in pods
        if p.metadata.deletion_timestamp is None and (p.status.phase or "Pending") in ("Pending", "Running")
    )


class AuditTail:
    """The user's writes in the audit log, by `<verb> <resource>[/<subresource>]` (one line per request);
    each read parses only the lines written since the last (the log grows by hundreds of MB at 1,000 x 8)."""

    def __init__(self, path: Path, user: str) -> None:
        self.path, self.user = path, user
        self.offset = 0
        self.counts: collections.Counter[str] = collections.Counter()

    def read(self) -> collections.Counter[str]:
        user = self.user.encode()
        with self.path.open("rb") as f:
            f.seek(self.offset)
            for line in f:
                if not line.endswith(b"\n"):
                    break  # a line still being written: read it next time
                self.offset += len(line)
                if user not in line:
                    continue
                ev = json.loads(line)
                if ev.get("stage") != "ResponseComplete" or ev.get("verb") not in WRITE_VERBS:
                    continue
                if (ev.get("user") or {}).get("username") != self.user:
                    continue
                ref = ev.get("objectRef") or {}
                res = ref.get("resource", "?") + (f"/{ref['subresource']}" if ref.get("subresource") else "")
                self.counts[f"{ev['verb']} {res}"] += 1
        return collections.Counter(self.counts)


def run_one(which: str, args: argparse.Namespace, work: Path) -> dict[str, Any]:
    """One operator's run on a fresh cluster in ``work``: its figures, and the pace after it."""
    pods = args.jobs * (args.workers + 1)
    # room for the pace client's copies of the pods too
    nodes = max(2, (1 + args.pace) * math.ceil(pods / PODS_PER_NODE) + 1)
    spec = ClusterSpec(tier="l2", nodes=nodes, audit=True)
    cluster = LocalCluster(spec, work_dir=work, keep_work_dir=args.keep)
    probe = cpu_probe()
    print(f"== {which} ({work.name}): fresh cluster with {nodes} kwok nodes; {probe}", flush=True)
    cluster.start()
    op: OperatorRunner | upstream.UpstreamOperator | None = None
    profiler: subprocess.Popen[bytes] | None = None
    watchers: list[StatusWatcher] = []
    try:
        apply_base(cluster)
        api = cluster.api_client()
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
                cluster.write_user_kubeconfig(user), work.with_suffix(".log"), "", *args.pinned
            )
        else:
            user = SA_USER
            op = OperatorRunner(
                cluster.write_user_kubeconfig(user), work.with_suffix(".log"), *args.pinned, log_format="json"
            )
        op.start()
        if which == "ours" and args.profile:
            profiler = start_profiler(op.pid, str(args.profile))
        status, launchers = StatusWatcher(cluster.api_client()), LauncherWatcher(cluster.api_client())
        watchers = [status, launchers]
        for w in watchers:
            w.start()
        submitter = user_client(cluster, PACE_USER, SUBMIT_THREADS + 4)
        cpu_ready = proc_stats(op.pid)[1]
        sys_ready = cpu_split(op.pid)[1]
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
        # Converged: every worker deleted (cleanPodPolicy: Running) and no write but the Lease's for
        # QUIET_SECONDS, or LEFT_SECONDS without a write while workers are left. Only then are the writes and
        # the CPU counted: a slow operator's cleanup goes on long after the last job Succeeded, and all of it
        # is the job's cost.
        t_converged = None
        left = 0
        quiet_since, last = time.monotonic(), -1
        audit = AuditTail(cluster.audit_log, user)
        while t_done is not None and time.monotonic() - began < args.timeout:
            now = sum(n for key, n in audit.read().items() if not key.endswith(" leases"))
            if now != last:
                last, quiet_since = now, time.monotonic()
            elif time.monotonic() - quiet_since >= QUIET_SECONDS:
                left = live_workers(core)
                if not left or time.monotonic() - quiet_since >= LEFT_SECONDS:
                    t_converged = quiet_since - began
                    break
            time.sleep(1)
        hwm, cpu = proc_stats(op.pid)
        cpu_sys = cpu_split(op.pid)[1] - sys_ready
        own: dict[str, Any] = {}  # what only ours counts of itself
        if isinstance(op, OperatorRunner):
            for (name, labels), v in op.metrics().items():
                if name in ("mpi_operator_watch_events_total", "mpi_operator_watch_event_bytes_total"):
                    by_kind = own.setdefault(name.removeprefix("mpi_operator_").removesuffix("_total"), {})
                    by_kind[dict(labels).get("kind", "")] = v
                if name == "mpi_operator_reconcile_duration_seconds_count":
                    own["syncs_per_job"] = own.get("syncs_per_job", 0.0) + v / args.jobs
                elif name == "mpi_operator_watch_events_total":
                    own["watch_events_per_job"] = own.get("watch_events_per_job", 0.0) + v / args.jobs
                elif name == "mpi_operator_watch_event_bytes_total":
                    own["watch_kib_per_job"] = own.get("watch_kib_per_job", 0.0) + v / 1024 / args.jobs
        writes = audit.read()
        leases = sum(n for key, n in writes.items() if key.endswith(" leases"))
        total = sum(writes.values()) - leases
        figures = {
            "machine": probe,
            "t_waited": time.monotonic() - began,
            "launchers_seen": len(launchers.seen),
            "succeeded_seen": len(status.succeeded),
            "t_launchers": t_launchers,
            "t_done": t_done,
            "t_converged": t_converged,
            "writes_per_job": total / args.jobs,
            "lease_writes": leases,
            "writes": {k: n for k, n in sorted(writes.items()) if not k.endswith(" leases")},
            "cpu": cpu - cpu_ready,
            "cpu_ms_per_job": 1000 * (cpu - cpu_ready) / args.jobs,
            "cpu_startup": cpu_ready,
            "cpu_sys_share": cpu_sys / (cpu - cpu_ready) if cpu > cpu_ready else 0.0,
            "rss_mib": max(peak, hwm) / 2**20,
            "workers_left": left,
        }
        figures.update(own)
        op.stop()
        if args.pace:
            figures["pace"] = run_pace(cluster, args, "pace")
            if t_launchers is not None:
                figures["launchers_over_pace"] = t_launchers / figures["pace"]
        print(f"   {which}: {json.dumps(figures)}", flush=True)
        return figures
    finally:
        for w in watchers:
            w.stop_event.set()
        if op is not None:
            op.stop()
        if profiler is not None:
            profiler.wait(timeout=60)
        cluster.stop()


def git_commit() -> str:
    with contextlib.suppress(OSError, subprocess.CalledProcessError):
        return subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"], cwd=REPO, capture_output=True, text=True, check=True
        ).stdout.strip()
    return "unknown"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    parser.add_argument("--jobs", type=int, default=200)
    parser.add_argument("--workers", type=int, default=4)
    parser.add_argument(
        "--repeat", type=int, default=2, help="runs of each operator, alternating (default 2)"
    )
    parser.add_argument("--timeout", type=float, default=3600, help="seconds to wait for all jobs, per run")
    parser.add_argument("--save", type=Path, help="write every run's figures and the medians as JSON here")
    parser.add_argument("--no-pace", dest="pace", action="store_false", help="skip the API server's pace")
    parser.add_argument(
        "--qps", type=float, default=0, help="pin both operators' client to this many requests per second"
    )
    parser.add_argument(
        "--burst", type=int, default=0, help="their client burst with --qps (default: 2 x qps)"
    )
    parser.add_argument(
        "--queue-qps",
        type=float,
        default=0,
        help="pin both operators' work queue to this many keys per second (--controller-queue-rate-limit; "
        "upstream's default 10 reserves a slot for every watch event, so 1,000 x 8 waits an hour for it)",
    )
    parser.add_argument(
        "--upstream-from",
        type=Path,
        help="take upstream's runs from an earlier --save of the same size and flags instead of running it "
        "(another invocation: the table says so); only ours runs",
    )
    parser.add_argument(
        "--upstream-only",
        action="store_true",
        help="run upstream's side alone (to --save for a later --upstream-from)",
    )
    parser.add_argument(
        "--keep", action="store_true", help="keep each cluster's directory (its logs and audit log)"
    )
    parser.add_argument(
        "--profile",
        type=Path,
        help="write py-spy's samples of our operator's threads holding the GIL here (raw; needs py-spy; the "
        "last run of ours)",
    )
    args = parser.parse_args()
    if args.repeat < 1:
        parser.error("--repeat must be at least 1")
    if args.qps < 0 or (args.qps and args.burst < 0):
        parser.error("--qps and --burst must not be negative")
    if args.qps and not args.burst:
        args.burst = max(1, int(2 * args.qps))
    if args.queue_qps < 0:
        parser.error("--queue-qps must not be negative")
    if args.upstream_only and args.upstream_from is not None:
        parser.error("--upstream-only runs upstream: not with --upstream-from")
    args.pace_threads = SUBMIT_THREADS  # the pace client as concurrent as the submitter
    # The same flags for both operators (upstream's names, which ours shares).
    args.pinned = [f"--kube-api-qps={args.qps:g}", f"--kube-api-burst={args.burst}"] if args.qps else []
    if args.queue_qps:
        queue_burst = max(100, int(args.queue_qps))
        args.pinned += [
            f"--controller-queue-rate-limit={args.queue_qps:g}",
            f"--controller-queue-burst={queue_burst}",
        ]
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    work = Path(tempfile.mkdtemp(prefix="side-by-side-"))
    result: dict[str, Any] = {
        "jobs": args.jobs,
        "workers": args.workers,
        "qps": args.qps,
        "burst": args.burst,
        "queue_qps": args.queue_qps,
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "commit": git_commit(),
        "load_before": os.getloadavg()[0],
        "runs": {"ours": [], "upstream": []},
    }
    if args.upstream_from is not None:
        try:
            result["runs"]["upstream"], result["upstream_date"] = saved_runs(args.upstream_from, result)
        except ValueError as e:
            parser.error(str(e))
        result["upstream_from"] = str(args.upstream_from)
    runs = order(args.repeat, ours=not args.upstream_only, upstream=args.upstream_from is None)
    pinned = f" (both pinned: {' '.join(args.pinned)})" if args.pinned else ""
    print(
        f"== {args.jobs} MPIJobs x {args.workers} workers, runs in this order: {', '.join(runs)}{pinned}; "
        f"at {result['commit']}, load average {result['load_before']:.1f}; logs in {work}",
        flush=True,
    )

    def save() -> None:
        if args.save:
            with contextlib.suppress(OSError):
                args.save.write_text(json.dumps(result, indent=1))

    profile = args.profile
    for i, which in enumerate(runs):
        # py-spy samples only the last run of ours
        args.profile = profile if which == "ours" and which not in runs[i + 1 :] else None
        result["runs"][which].append(run_one(which, args, work / f"{i + 1}-{which}"))
        save()  # a run cut short keeps the runs made
    result["ours"], result["upstream"] = combine(result["runs"]["ours"]), combine(result["runs"]["upstream"])
    save()
    if args.upstream_only:
        line = progress("upstream", result["upstream"], args.jobs)
        if line:
            print(line)
        return 0 if result["upstream"].get("t_done") is not None else 1
    print()
    for line in table(result):
        print(line)
    converged = [r.get("t_converged") for side in result["runs"].values() for r in side]
    return 0 if all(t is not None for t in converged) else 1


if __name__ == "__main__":
    sys.exit(main())
