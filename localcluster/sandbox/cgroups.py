"""The sandbox's cgroups: one directory per hierarchy for the sandbox, one below it per node. Only
directories this module made are removed, and only when no process is left in them."""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator
from pathlib import Path

BASE = Path("/sys/fs/cgroup")
PREFIX = "mpijob-real-"


def hierarchies() -> list[Path]:
    """Every mounted hierarchy (v1: one per controller plus named ones; v2: the one)."""
    if (BASE / "cgroup.controllers").exists():
        return [BASE]
    return [p for p in sorted(BASE.iterdir()) if p.is_dir() and not p.is_symlink()]


def _limit_file(hier: Path, v1: str, v2: str) -> Path | None:
    for name in (v1, v2):
        if (hier / name).exists():
            return hier / name
    return None


def create(relative: str, *, memory_bytes: int | None = None, pids: int | None = None) -> None:
    """mkdir `relative` in every hierarchy (v1 cpuset needs its cpus and mems filled in) and set limits."""
    for hier in hierarchies():
        path = hier / relative
        path.mkdir(parents=True, exist_ok=True)
        for name in ("cpuset.cpus", "cpuset.mems"):
            if (path / name).exists() and not (path / name).read_text().strip():
                (path / name).write_text((path.parent / name).read_text())
        limit = _limit_file(path, "memory.limit_in_bytes", "memory.max")
        if memory_bytes is not None and limit is not None:
            limit.write_text(str(memory_bytes))
        if pids is not None and (f := path / "pids.max").exists():
            f.write_text(str(pids))


def join_script(relative: str) -> str:
    """Shell that moves the shell itself into `relative` in every hierarchy (then it execs the rest)."""
    files = " ".join(f"'{hier / relative / 'cgroup.procs'}'" for hier in hierarchies())
    return f'for f in {files}; do echo $$ > "$f"; done'


def pids(relative: str) -> set[int]:
    """PIDs (as this process's PID namespace numbers them) anywhere under `relative`."""
    found: set[int] = set()
    for hier in hierarchies():
        root = hier / relative
        if not root.is_dir():
            continue
        for procs in root.rglob("cgroup.procs"):
            with contextlib.suppress(OSError, ValueError):
                found.update(int(x) for x in procs.read_text().split())
    return found


def _subtree(root: Path) -> Iterator[Path]:
    dirs = [p for p in root.rglob("*") if p.is_dir()]
    yield from sorted(dirs, key=lambda p: len(p.parts), reverse=True)
    yield root


def remove(relative: str, timeout: float = 10.0) -> list[str]:
    """rmdir `relative` and everything below it, deepest first, in every hierarchy, once no process is
    left in it (a killed process leaves its cgroup a moment later). Returns what stayed."""
    deadline = time.monotonic() + timeout
    while pids(relative) and time.monotonic() < deadline:
        time.sleep(0.05)
    left = []
    for hier in hierarchies():
        root = hier / relative
        if not root.is_dir():
            continue
        for path in _subtree(root):
            while True:
                try:
                    path.rmdir()
                    break
                except FileNotFoundError:
                    break
                except OSError:
                    if time.monotonic() > deadline:
                        left.append(str(path))
                        break
                    time.sleep(0.05)
    return left


def stale() -> list[str]:
    """Sandbox cgroups with no process left (their owner crashed): names relative to each hierarchy."""
    names = set()
    for hier in hierarchies():
        for path in hier.glob(f"{PREFIX}*"):
            if path.is_dir():
                names.add(path.name)
    return sorted(n for n in names if not pids(n))


def memory_usage(relative: str) -> int:
    for hier in hierarchies():
        f = _limit_file(hier / relative, "memory.usage_in_bytes", "memory.current")
        if f is not None:
            with contextlib.suppress(OSError, ValueError):
                return int(f.read_text())
    return 0
