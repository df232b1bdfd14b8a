"""What a namespace's first process does before it starts anything: refuse to run in the machine's
network namespace, make its mounts private and its kernel settings read-only, and reap orphans."""

from __future__ import annotations

import contextlib
import os
import subprocess
from collections.abc import Mapping
from pathlib import Path

# Network namespaces (inodes, ":"-separated) this process must not change: the machine's, and for a
# node also the sandbox's. Each starter adds its own before it starts the next level.
FORBIDDEN_NETNS_ENV = "MPIJOB_FORBIDDEN_NETNS"


def netns_inode() -> int:
    # /proc/1/ns/net is not readable on every machine: compare with our own namespace instead.
    return os.stat("/proc/self/ns/net").st_ino


class NotSealed(RuntimeError):
    """A network command was about to run in the machine's own network namespace."""


def forbidden() -> list[int]:
    return [int(x) for x in os.environ.get(FORBIDDEN_NETNS_ENV, "").split(":") if x]


def forbid_own() -> dict[str, str]:
    """The environment for a child that must not change this process's network namespace either."""
    return {**os.environ, FORBIDDEN_NETNS_ENV: ":".join(str(i) for i in [*forbidden(), netns_inode()])}


def guard() -> None:
    """Raise NotSealed unless this process's network namespace is none of those its starters forbade
    (the machine's first of all)."""
    if not forbidden():
        raise NotSealed(f"{FORBIDDEN_NETNS_ENV} is not set: refusing to touch an unknown network namespace")
    if netns_inode() in forbidden():
        raise NotSealed("this process is in a network namespace it must not change (its starter's)")


def ip(*args: str) -> None:
    """Run `ip ARGS` here, after the guard; raises with ip's message if it fails."""
    guard()
    done = subprocess.run(["ip", *args], capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"ip {' '.join(args)}: {done.stderr.strip()}")


def sysctl(key: str, value: str) -> None:
    """Set a per-namespace network setting (net.* only; everything else is read-only here)."""
    guard()
    if not key.startswith("net/"):
        raise ValueError(f"only net.* settings belong to a network namespace, not {key}")
    Path("/proc/sys", key).write_text(value)


def _mount(*args: str) -> None:
    subprocess.run(["mount", *args], check=True, capture_output=True, text=True)


def seal_mounts(run_dir: Path | None = None, sysctl_files: Mapping[str, Path] | None = None) -> None:
    """In this (private, fresh-/proc) mount namespace: a tmpfs /run, a read-only sysfs of this network
    namespace with the machine's cgroup mounts kept under it, /proc/sys read-only except net.*, and
    `sysctl_files` (key -> file) bound over their keys so a program may write them without effect."""
    _mount("--make-rprivate", "/")
    _mount("-t", "tmpfs", "-o", "mode=755", "tmpfs", "/run")
    keep = Path("/run/.cgroup")
    keep.mkdir()
    _mount("--rbind", "/sys/fs/cgroup", str(keep))
    _mount("-t", "sysfs", "-o", "ro", "sysfs", "/sys")
    _mount("--move", str(keep), "/sys/fs/cgroup")
    keep.rmdir()
    _mount("--bind", "/proc/sys", "/proc/sys")
    _mount("-o", "remount,bind,ro", "/proc/sys")
    _mount("--bind", "/proc/sys/net", "/proc/sys/net")
    _mount("-o", "remount,bind,rw", "/proc/sys/net")
    for key, file in (sysctl_files or {}).items():
        _mount("--bind", str(file), f"/proc/sys/{key}")
    if run_dir is not None:
        run_dir.mkdir(parents=True, exist_ok=True)


def reap_orphans(known: set[int]) -> None:
    """As PID 1: collect exited processes that were reparented to us (shims, daemons' children), leaving
    the ones we started ourselves (`known`) to their Popen."""
    me = os.getpid()
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) in known:
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        fields = stat[stat.rindex(")") + 2 :].split()
        if fields[0] == "Z" and int(fields[1]) == me:
            with contextlib.suppress(ChildProcessError):
                os.waitpid(int(entry.name), os.WNOHANG)
