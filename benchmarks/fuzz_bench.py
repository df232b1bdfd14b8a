"""The full fuzz run: tests/unit/test_fuzz.py with 10,000 generated MPIJobs (the default test
run generates 1,000).

Usage: .venv/bin/python benchmarks/fuzz_bench.py [--examples N]
Prints how many cases ran, how many the library found invalid, how many the CLI rejected (exit 2) and by
which first field, and the time taken. Exits non-zero if the test fails.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--examples", type=int, default=10_000)
    args = p.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        counts = Path(tmp) / "counts.json"
        env = {
            **{k: v for k, v in os.environ.items() if k != "MPIJOB_CI"},  # not CI's fixed seed: explores anew
            "MPIJOB_FUZZ_EXAMPLES": str(args.examples),
            "MPIJOB_FUZZ_COUNT_FILE": str(counts),
        }
        start = time.monotonic()
        proc = subprocess.run(
            [sys.executable, "-m", "pytest", "tests/unit/test_fuzz.py", "-q", "-p", "no:cacheprovider"],
            cwd=REPO,
            env=env,
            check=False,
        )
        elapsed = time.monotonic() - start
        seen = json.loads(counts.read_text()) if counts.exists() else {}
    print(json.dumps({"examples": args.examples, "seconds": round(elapsed, 1), **seen}, indent=1))
    return proc.returncode


if __name__ == "__main__":
    sys.exit(main())
