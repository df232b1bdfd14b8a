"""Launcher restarts per MPIJob at the default launcherCreationPolicy (AtStartup) on the real node, per
MPI implementation: the input of the launcher-readiness issue (16).

Starts its own cluster with the real node (`localcluster --tier real`, no kwok nodes), installs
deploy/base-no-operator, runs the operator as its own process under the mpi-operator ServiceAccount, then
runs `--jobs` pi jobs per implementation one after the other (upstream's e2e base job, 2 workers, one rank
each) and prints, per implementation, the launcher restarts of each job (container restarts + extra
launcher pods) and the submit-to-Succeeded time; finally the node's memory (RSS of kubelet, containerd,
CoreDNS, the shims). Printed, not asserted. Needs root. Usage:

    .venv/bin/python benchmarks/node_restarts.py --jobs 3
    .venv/bin/python benchmarks/node_restarts.py --jobs 3 --policy WaitForWorkersReady
    .venv/bin/python benchmarks/node_restarts.py --jobs 3 --no-gate   # upstream's behaviour: no wait

`--no-gate` sets the `mpijob.dev/ssh-wait-timeout-seconds: "0"` annotation, which turns the launcher's
wait-for-workers init container off: mpirun starts at once, as upstream's does.
"""

from __future__ import annotations

import argparse
import contextlib
import statistics
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from kubernetes import client  # noqa: E402

from localcluster.e2e import condition_is, create_namespace  # noqa: E402
from localcluster.realnode import IMPLS, NodeE2E, node_job, rank_hosts, real_node_operator  # noqa: E402
from localcluster.sandbox.seal import node_rss_bytes  # noqa: E402
from reconcile.runtime.kube import Kube  # noqa: E402


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--jobs", type=int, default=3, help="jobs per implementation")
    parser.add_argument("--impl", action="append", choices=list(IMPLS), help="default: all")
    parser.add_argument("--policy", default="AtStartup", choices=("AtStartup", "WaitForWorkersReady"))
    parser.add_argument("--no-gate", action="store_true", help="turn the launcher's wait-for-workers off")
    args = parser.parse_args()
    impls = args.impl or list(IMPLS)

    results: dict[str, list[tuple[int, float, bool]]] = {}
    rss: dict[str, int] = {}
    with real_node_operator("node-bench-") as (cluster, op, _):
        api = cluster.api_client()
        core = client.CoreV1Api(api)
        for impl in impls:
            for i in range(args.jobs):
                ns = create_namespace(core, f"bench-{impl}-{i}")
                e2e = NodeE2E(cluster, Kube(api, qps=0), ns, op)
                body = node_job(impl)
                if args.policy != "AtStartup":
                    body["spec"]["launcherCreationPolicy"] = args.policy
                if args.no_gate:
                    body["metadata"]["annotations"] = {"mpijob.dev/ssh-wait-timeout-seconds": "0"}
                t0 = time.monotonic()
                e2e.submit(body)
                if not rss:  # the node's memory while the first job's pods run
                    with contextlib.suppress(AssertionError):
                        e2e.wait_for(
                            lambda e=e2e: len(e.workers("pi")) == 2 and e.launcher_pods("pi"), "pods", 30
                        )
                    rss = node_rss_bytes(cluster.work_dir, ["real-node-1"])
                job = e2e.wait_finished("pi", timeout=300)
                took = time.monotonic() - t0
                ok = condition_is(job, "Succeeded")
                restarts = e2e.restarts("pi")
                if ok:  # the program's own output: one rank per worker
                    ok = rank_hosts(e2e.launcher_log("pi")) == {0: "pi-worker-0", 1: "pi-worker-1"}
                results.setdefault(impl, []).append((restarts, took, ok))
                print(
                    f"{impl:16} job {i}: restarts {restarts}  {took:5.1f}s  {'ok' if ok else 'FAILED'}",
                    flush=True,
                )
                if i == 0 and impl == impls[0]:
                    rss = node_rss_bytes(cluster.work_dir, ["real-node-1"])
                core.delete_namespace(ns)
                deadline = time.monotonic() + 60
                while time.monotonic() < deadline and core.list_namespaced_pod(ns).items:
                    time.sleep(0.5)
        api.close()
    gate = "without the gate" if args.no_gate else "with the gate"
    print(f"\nlauncher restarts per job at {args.policy}, {gate} (and submit-to-finished time):")
    for impl, rows in results.items():
        restarts = [r for r, _, _ in rows]
        times = [t for _, t, _ in rows]
        fails = sum(1 for *_, ok in rows if not ok)
        print(
            f"  {impl:16} restarts {restarts} (mean {statistics.mean(restarts):.1f})  "
            f"time median {statistics.median(times):.1f}s max {max(times):.1f}s  failed {fails}/{len(rows)}"
        )
    print("node RSS while a job ran: " + ", ".join(f"{k} {v / 2**20:.0f} MiB" for k, v in rss.items()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
