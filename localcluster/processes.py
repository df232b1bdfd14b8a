"""Child processes of the local control plane: free ports, spawning in own process groups, stopping."""

from __future__ import annotations

import contextlib
import ctypes
import ctypes.util
import os
import random
import signal
import socket
import ssl
import subprocess
import time
import urllib.error
import urllib.request
from pathlib import Path

import attrs

_PR_SET_PDEATHSIG = 1


# Ports handed out by this process: never handed out twice, though each is free until its server binds it.
_handed_out: set[int] = set()
_LISTEN_PORTS_FROM = 10000


def _ephemeral_range() -> tuple[int, int]:
    try:
        low, high = Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()
        return int(low), int(high)
    except (OSError, ValueError):
        return 32768, 60999


def free_port() -> int:
    """A currently free TCP port on 127.0.0.1 for a server started next, picked below the kernel's
    ephemeral range: a port from that range can be taken by any outgoing connection's source port in the
    moment between this check and the server's bind (a control-plane start failed on it)."""
    low, _ = _ephemeral_range()
    candidates = list(range(_LISTEN_PORTS_FROM, low))
    random.shuffle(candidates)
    for port in candidates:
        if port in _handed_out:
            continue
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
            try:
                sock.bind(("127.0.0.1", port))
            except OSError:
                continue
        _handed_out.add(port)
        return port
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:  # no room below it: the kernel picks
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _die_with_parent() -> None:
    # Runs in the child before exec: if the owning Python process dies (even by SIGKILL), the kernel
    # kills the child too, so a crashed test run leaves no control plane behind.
    libc = ctypes.CDLL(ctypes.util.find_library("c"), use_errno=True)
    libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)


def start_time(pid: int) -> int | None:
    """The process start time in clock ticks (field 22 of /proc/<pid>/stat), None if gone."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    # The command name (field 2) may contain spaces; fields after the last ')' are fixed.
    return int(stat[stat.rindex(")") + 2 :].split()[19])


@attrs.define
class Proc:
    """One control-plane process; its pid is also its process group id."""

    name: str
    pid: int
    started: int
    log: Path
    popen: subprocess.Popen[bytes] | None = attrs.field(default=None, repr=False, eq=False)

    def alive(self) -> bool:
        if self.popen is not None:
            return self.popen.poll() is None
        return start_time(self.pid) == self.started and not _is_zombie(self.pid)

    def rss_bytes(self) -> int:
        return rss_of(self.pid) if self.alive() else 0

    def log_tail(self, lines: int = 30) -> str:
        try:
            return "\n".join(self.log.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return ""

    def stop(self, timeout: float = 10.0) -> None:
        """SIGTERM the process group, SIGKILL it after `timeout`; only if it is still our process."""
        if not self.alive():
            self._reap()
            return
        self._signal(signal.SIGTERM)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if not self.alive():
                break
            time.sleep(0.05)
        else:
            self._signal(signal.SIGKILL)
        self._reap()

    def pause(self) -> None:
        """SIGSTOP the process group (a process that stops answering), only if it is still our process."""
        if self.alive():
            self._signal(signal.SIGSTOP)

    def resume(self) -> None:
        """SIGCONT the process group, only if it is still our process."""
        if self.alive():
            self._signal(signal.SIGCONT)

    def _signal(self, sig: signal.Signals) -> None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.pid, sig)

    def _reap(self) -> None:
        if self.popen is not None:
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.popen.wait(timeout=5)


def rss_of(pid: int) -> int:
    """Resident memory of a process in bytes (0 if it is gone)."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 0


def _is_zombie(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return True
    return stat[stat.rindex(")") + 2] == "Z"


def spawn(
    name: str,
    argv: list[str],
    log: Path,
    *,
    detached: bool,
    env: dict[str, str] | None = None,
    cwd: Path | None = None,
    append: bool = False,
) -> Proc:
    """Start argv in a new session (its own process group), output to `log` (appended to if asked).

    Attached processes die with this Python process; detached ones outlive it (stopped via the state dir).
    """
    log.parent.mkdir(parents=True, exist_ok=True)
    with log.open("ab" if append else "wb") as out:
        popen = subprocess.Popen(
            argv,
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            preexec_fn=None if detached else _die_with_parent,
            env=env,
            cwd=cwd,
        )
    started = start_time(popen.pid) or 0
    return Proc(name=name, pid=popen.pid, started=started, log=log, popen=popen)


def http_ok(url: str, ctx: ssl.SSLContext | None = None) -> bool:
    """A readiness probe: the URL answers 200 within 2 s."""
    try:
        with urllib.request.urlopen(url, timeout=2, context=ctx) as resp:
            return bool(resp.status == 200)
    except (urllib.error.URLError, OSError):
        return False
