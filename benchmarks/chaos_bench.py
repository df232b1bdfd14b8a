"""The chaos tier at full size (tests/chaos runs it short): one audited L2 cluster, then

* kill -9 of the operator at random (seeded) moments during a 40-job run, 10 kills;
* a fault proxy answering 10 % of the operator's requests 500/429/409, resetting (before or after
  forwarding), delaying, and cutting every watch within 20 s, 40 jobs;
* SIGTERM to the leader of two replicas with a backlog (30 jobs);
* the leader of two replicas black-holed for 60 s from a pod create, 200 jobs;
* etcd stopped (SIGSTOP) for 30 s during a 200-job run;
* every request 2 s slower, 100 jobs;
* kube-apiserver SIGKILLed and restarted 3 times during a 20-job run;
* 50 healthy jobs alone, then 50 beside 50 jobs whose workers crash at start (their times, and the
  crashing jobs' worker creates and time until all are Failed).

Each prints one JSON line: jobs, faults injected, lost, duplicates, orphans, stuck, status regressions,
writes by a non-leader, launcher-before-dependency cases, exits; for the hand-over also the old leader's
writes after SIGTERM and after the Lease moved, the hand-over time and the new leader's time to its first
write. Exit 1 if any invariant broke.

    .venv/bin/python benchmarks/chaos_bench.py [--seed N] [--quick]
        [--only kill9,proxy,sigterm,partition,etcd,slow,apiserver,crashing]
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from localcluster.chaos import scenarios
from localcluster.chaos.harness import ChaosCluster

FULL = {
    "kill9": lambda cc, seed: scenarios.kill9(cc, jobs=40, kills=10, seed=seed),
    "proxy": lambda cc, seed: scenarios.faulty_proxy(cc, jobs=40, rate=0.1, seed=seed),
    "sigterm": lambda cc, seed: scenarios.sigterm_handover(cc, jobs=30, seed=seed),
    "partition": lambda cc, seed: scenarios.leader_partition(cc, jobs=200, seed=seed),
    "etcd": lambda cc, seed: scenarios.etcd_stopped(cc, jobs=200, seed=seed),
    "slow": lambda cc, seed: scenarios.slow_apiserver(cc, jobs=100, seed=seed),
    "apiserver": lambda cc, seed: scenarios.apiserver_restart(cc, jobs=20, restarts=3, seed=seed),
    "crashing": lambda cc, seed: scenarios.crashing_neighbours(cc, healthy=50, crashing=50, seed=seed),
}
QUICK = {
    "kill9": lambda cc, seed: scenarios.kill9(cc, jobs=10, kills=3, seed=seed),
    "proxy": lambda cc, seed: scenarios.faulty_proxy(cc, jobs=8, rate=0.1, seed=seed),
    "sigterm": lambda cc, seed: scenarios.sigterm_handover(cc, jobs=16, seed=seed),
    "partition": lambda cc, seed: scenarios.leader_partition(cc, jobs=100, seed=seed),
    "etcd": lambda cc, seed: scenarios.etcd_stopped(cc, jobs=100, seed=seed),
    "slow": lambda cc, seed: scenarios.slow_apiserver(cc, jobs=100, seed=seed),
    "apiserver": lambda cc, seed: scenarios.apiserver_restart(cc, jobs=6, seed=seed),
    "crashing": lambda cc, seed: scenarios.crashing_neighbours(cc, healthy=10, crashing=10, seed=seed),
}


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--seed", type=int, default=11)
    p.add_argument("--only", default=",".join(FULL), help="comma-separated scenarios")
    p.add_argument("--quick", action="store_true", help="the sizes tests/chaos uses")
    args = p.parse_args()
    table = QUICK if args.quick else FULL
    cc = ChaosCluster()
    began = time.monotonic()
    cc.start()
    print(json.dumps({"cluster_start_s": round(time.monotonic() - began, 1)}), flush=True)
    bad = False
    try:
        for i, name in enumerate(args.only.split(",")):
            t0 = time.monotonic()
            report = table[name](cc, args.seed + i)
            summary = report.summary()
            summary["wall_s"] = round(time.monotonic() - t0, 1)
            print(json.dumps(summary), flush=True)
            if report.problems():
                bad = True
                print(json.dumps(report.problems(), indent=1)[:8000], file=sys.stderr, flush=True)
    finally:
        cc.stop()
    print(json.dumps({"total_s": round(time.monotonic() - began, 1)}), flush=True)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
