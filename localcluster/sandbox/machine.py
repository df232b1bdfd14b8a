"""A record of what the machine's own namespaces look like, to prove that a run changed none of it:
network (links, addresses, routes, rules, iptables, forwarding), resolv.conf, the kernel settings the
kubelet wants, the mount table, and the processes a test run stands on."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

from localcluster.processes import start_time
from localcluster.sandbox.node.host import KUBELET_SYSCTLS

PARENTS = "runner's parents"


def _out(*argv: str) -> str:
    done = subprocess.run(argv, capture_output=True, text=True, check=False)
    return done.stdout if done.returncode == 0 else f"<{argv[0]} failed: {done.stderr.strip()}>"


def _iptables() -> str:
    """Every table's chains and rules (counters left out: they move on their own)."""
    return "\n".join(_out("iptables", "-w", "-t", t, "-S") for t in ("filter", "nat", "mangle", "raw"))


def _mounts() -> str:
    lines = []
    for line in Path("/proc/self/mountinfo").read_text().splitlines():
        fields = line.split()
        sep = fields.index("-")
        lines.append(f"{fields[4]} {fields[sep + 1]} {fields[sep + 2]}")  # point, type, source
    return "\n".join(sorted(lines))


def _ancestors() -> list[tuple[int, int | None]]:
    """This process's parents up to PID 1, each with its start time (a recycled PID differs)."""
    chain = []
    pid = os.getppid()
    while pid > 1:
        chain.append((pid, start_time(pid)))
        try:
            stat = Path(f"/proc/{pid}/stat").read_text()
        except OSError:
            break
        pid = int(stat[stat.rindex(")") + 2 :].split()[1])
    return chain


def snapshot() -> dict[str, str]:
    """What must be the same before and after a run of the real tier."""
    record = {
        "links": _out("ip", "-o", "link", "show"),
        "addresses": _out("ip", "-o", "addr", "show"),
        "routes": _out("ip", "route", "show", "table", "all"),
        "routes6": _out("ip", "-6", "route", "show", "table", "all"),
        "rules": _out("ip", "rule", "show"),
        "iptables": _iptables(),
        "ip_forward": Path("/proc/sys/net/ipv4/ip_forward").read_text(),
        "resolv.conf": Path("/etc/resolv.conf").read_text(),
        "mounts": _mounts(),
        PARENTS: " ".join(f"{pid}@{started}" for pid, started in _ancestors()),
    }
    for key in KUBELET_SYSCTLS:
        record[f"sysctl {key}"] = Path("/proc/sys", key).read_text()
    return record


def differences(before: dict[str, str], after: dict[str, str]) -> list[str]:
    """One line per changed part, with what was added and removed; and the runner's parents recorded
    before that are no longer alive (a process may be re-parented meanwhile, but not end)."""
    out = []
    gone = []
    for entry in before.get(PARENTS, "").split():
        pid, started = entry.split("@")
        if str(start_time(int(pid))) != started:
            gone.append(entry)
    if gone:
        out.append(f"{PARENTS}: gone {gone}")
    for key in sorted((set(before) | set(after)) - {PARENTS}):
        old, new = before.get(key, "").splitlines(), after.get(key, "").splitlines()
        if old == new:
            continue
        added = [line for line in new if line not in old]
        removed = [line for line in old if line not in new]
        out.append(f"{key}: added {added} removed {removed}")
    return out
