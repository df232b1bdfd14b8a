"""Upstream's e2e assertions on the order within a sync, 50 rounds each, at the default client
limits and at a high QPS: after Created=True the PodGroup exists (both gang schedulers), a job suspended at
creation resumes with an update of the create response, and 50 create-then-update cycles meet no 409.

    .venv/bin/python benchmarks/status_order_bench.py [--rounds 50]

Runs tests/e2e/test_e2e_status_order.py with MPIJOB_STATUS_ORDER_ROUNDS and, for the second pass,
MPIJOB_STATUS_ORDER_FLAGS; prints each pass's pytest summary line.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
PASSES = {"default limits": "", "high QPS": "--kube-api-qps=200 --kube-api-burst=400"}


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--rounds", type=int, default=50)
    args = parser.parse_args()
    failed = 0
    for label, flags in PASSES.items():
        env = {
            **{k: v for k, v in os.environ.items() if k != "MPIJOB_CI"},  # CI refuses these knobs
            "MPIJOB_STATUS_ORDER_ROUNDS": str(args.rounds),
            "MPIJOB_STATUS_ORDER_FLAGS": flags,
        }
        began = time.monotonic()
        proc = subprocess.run(
            [
                sys.executable,
                "-m",
                "pytest",
                "-q",
                "-p",
                "no:cacheprovider",
                "tests/e2e/test_e2e_status_order.py",
            ],
            cwd=REPO,
            env=env,
            capture_output=True,
            text=True,
        )
        summary = (proc.stdout.strip().splitlines() or ["(no output)"])[-1]
        print(
            f"{label} ({flags or 'defaults'}), {args.rounds} rounds: {summary}"
            f" [{time.monotonic() - began:.0f}s]"
        )
        if proc.returncode != 0:
            failed += 1
            print(proc.stdout[-4000:])
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
