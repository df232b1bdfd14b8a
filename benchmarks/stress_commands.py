"""Run one of the README's commands N times in a row and report passes, failures and each failure's first
error line (issue: the two commands never fail by chance).

    python benchmarks/stress_commands.py --runs 20 -- scripts/demo
    python benchmarks/stress_commands.py --runs 5 -- scripts/test
    python benchmarks/stress_commands.py --runs 3 --cold -- scripts/demo

--cold runs each time in a fresh clone of this checkout's HEAD with a fresh HOME, so the Go module cache,
the Go build cache, the control-plane and node builds, pip's cache and the venv all start empty: what a
machine that has never seen the project does. Logs stay under --work-dir (printed).
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
# What counts as the line that explains a failure, in order of preference.
_ERROR_PATTERNS = [
    re.compile(r"\berror\b", re.IGNORECASE),
    re.compile(r"^(FAILED|ERROR) "),
    re.compile(r"Traceback|Exception|exit(ed)? (code|status)"),
]


def first_error_line(output: str) -> str:
    lines = [line.strip() for line in output.splitlines() if line.strip()]
    for pattern in _ERROR_PATTERNS:
        for line in lines:
            if pattern.search(line):
                return line[:200]
    return (lines[-1] if lines else "(no output)")[:200]


def run_once(
    index: int, command: list[str], work: Path, cold: bool, timeout: float
) -> tuple[int, float, Path]:
    log = work / f"run-{index:02d}.log"
    env = dict(os.environ)
    cwd = REPO
    if cold:
        run_dir = work / f"cold-{index:02d}"
        home = run_dir / "home"
        home.mkdir(parents=True)
        subprocess.run(["git", "clone", "--quiet", str(REPO), str(run_dir / "src")], check=True)
        cwd = run_dir / "src"
        # Caches that default to places under HOME follow it; the ones the project may point elsewhere
        # are unset so they default under the fresh HOME too.
        env["HOME"] = str(home)
        for var in (
            "XDG_CACHE_HOME",
            "GOPATH",
            "GOMODCACHE",
            "GOCACHE",
            "MPIJOB_K8S_CACHE",
            "MPIJOB_K8S_BIN_DIR",
        ):
            env.pop(var, None)
    began = time.monotonic()
    with log.open("wb") as out:
        try:
            rc = subprocess.run(
                command, cwd=cwd, env=env, stdout=out, stderr=subprocess.STDOUT, timeout=timeout
            )
            code = rc.returncode
        except subprocess.TimeoutExpired:
            code = -1
            out.write(f"\nstress: error: timed out after {timeout:.0f}s\n".encode())
    return code, time.monotonic() - began, log


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--cold", action="store_true", help="fresh clone and fresh HOME for every run")
    parser.add_argument("--timeout", type=float, default=5400.0, help="seconds per run")
    parser.add_argument("--work-dir", type=Path, default=None)
    parser.add_argument("command", nargs=argparse.REMAINDER)
    args = parser.parse_args()
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not command:
        parser.error("give the command after --, e.g. -- scripts/demo")
    work = args.work_dir or Path(tempfile.mkdtemp(prefix="stress-", dir="/var/tmp"))
    work.mkdir(parents=True, exist_ok=True)
    mode = "cold (fresh clone + HOME)" if args.cold else "warm"
    print(f"== {' '.join(command)}: {args.runs} runs, {mode}; logs in {work}", flush=True)
    failures: list[tuple[int, str]] = []
    durations: list[float] = []
    for i in range(1, args.runs + 1):
        code, took, log = run_once(i, command, work, args.cold, args.timeout)
        durations.append(took)
        if code == 0:
            print(f"run {i:2d}: pass  {took:7.1f}s", flush=True)
        else:
            line = first_error_line(log.read_text(errors="replace"))
            failures.append((i, line))
            print(f"run {i:2d}: FAIL  {took:7.1f}s  exit {code}: {line}  ({log})", flush=True)
    passes = args.runs - len(failures)
    durations.sort()
    print(
        f"== {passes}/{args.runs} passed; time min {durations[0]:.1f}s, "
        f"median {durations[len(durations) // 2]:.1f}s, max {durations[-1]:.1f}s",
        flush=True,
    )
    return 0 if not failures else 1


if __name__ == "__main__":
    sys.exit(main())
