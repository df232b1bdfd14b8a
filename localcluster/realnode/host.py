"""The machine-wide side of the real node: can this host run it, its fixed paths, the one-per-machine
lock, and the clean-up of everything a run (or a crashed run) left: container processes, shims, mounts,
network namespaces, the bridge, cgroups, iptables chains, ip_forward."""

from __future__ import annotations

import contextlib
import fcntl
import ipaddress
import json
import os
import shutil
import signal
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

NODE_NAME = "real-node"
NODE_LABEL = "node.mpijob.dev/real"
BRIDGE = "nodebr0"
# A private /16 of the node's own (10.88.0.1 is what kwok reports for fake nodes).
POD_SUBNET = ipaddress.ip_network("10.89.0.0/16")
BRIDGE_IP = "10.89.0.1"
# Fixed paths: one real node per machine (port 10250, the bridge and /var/log/containers are global).
HOME = Path(os.environ.get("MPIJOB_NODE_HOME", "/var/lib/mpijob-node"))
RUN_DIR = HOME / "run"  # per run, removed on teardown
CONTAINERD_ROOT = HOME / "containerd"  # the image store: kept between runs, like the build caches
STATE = Path("/run/mpijob-node")  # containerd's state and socket
SOCKET = STATE / "containerd.sock"
OWNER_FILE = HOME / "owner.json"
LOCK_FILE = HOME / "lock"
CGROUP_ROOT = "mpijob-node"  # the kubelet's cgroupRoot, in every hierarchy
IPTABLES_CHAIN = "MPIJOB-NODE"
NAT_CHAIN = "MPIJOB-NODE-NAT"
# Pods reach the API at the `kubernetes` Service address (no kube-proxy): DNAT to the node's forwarder.
KUBERNETES_SERVICE_IP = "10.96.0.1"
API_PROXY_PORT = 6443
# What the kubelet's setupKernelTunables wants: served to the kubelet from files in its own mount
# namespace, so it never changes the machine's kernel.panic, panic_on_oops, overcommit settings.
KUBELET_SYSCTLS = {
    "vm/overcommit_memory": "1",
    "vm/panic_on_oom": "0",
    "kernel/panic": "10",
    "kernel/panic_on_oops": "1",
    "kernel/keys/root_maxkeys": "1000000",
    "kernel/keys/root_maxbytes": "25000000",
}
IP_FORWARD = Path("/proc/sys/net/ipv4/ip_forward")
VAR_LOG_CONTAINERS = Path("/var/log/containers")
VAR_LIB_KUBELET = Path("/var/lib/kubelet")


class NodeUnavailable(RuntimeError):
    """This machine cannot run the real node; the message says why (one line)."""


def check_host() -> None:
    """Raise NodeUnavailable with the first reason this machine cannot run a real node."""
    if os.geteuid() != 0:
        raise NodeUnavailable("not root (the kubelet, containerd and the pod network need root)")
    if "overlay" not in Path("/proc/filesystems").read_text():
        raise NodeUnavailable("the kernel has no overlayfs (containerd's snapshotter)")
    probe = subprocess.run(["unshare", "--net", "true"], capture_output=True, check=False)
    if probe.returncode != 0:
        raise NodeUnavailable(f"cannot create network namespaces: {probe.stderr.decode().strip()}")
    for tool in ("containerd", "runc", "ctr", "debootstrap", "iptables", "ip"):
        if shutil.which(tool) is None:
            raise NodeUnavailable(f"{tool} not installed (run deploy/local/node-packages.sh)")
    if not Path("/usr/lib/cni/bridge").exists():
        raise NodeUnavailable("CNI plugins missing (run deploy/local/node-packages.sh)")


def _run(argv: list[str], *, check: bool = False) -> subprocess.CompletedProcess[str]:
    return subprocess.run(argv, capture_output=True, text=True, check=check)


@contextlib.contextmanager
def machine_lock() -> Iterator[None]:
    """Held while a run starts or is torn down, so two callers never race for the node."""
    HOME.mkdir(parents=True, exist_ok=True)
    with LOCK_FILE.open("w") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        yield


def read_owner() -> dict | None:
    try:
        return dict(json.loads(OWNER_FILE.read_text()))
    except (OSError, ValueError):
        return None


def write_owner(owner: dict) -> None:
    OWNER_FILE.write_text(json.dumps(owner, indent=2) + "\n")


# -- set-up ------------------------------------------------------------------------------------
def kube_chains() -> list[str]:
    """(table, chain) pairs of KUBE-*/CNI-* chains present now, as "table:chain"."""
    out = []
    for table in ("filter", "nat", "mangle"):
        listing = _run(["iptables", "-w", "-t", table, "-S"]).stdout
        for line in listing.splitlines():
            parts = line.split()
            if parts[:1] == ["-N"] and parts[1].startswith(("KUBE-", "CNI-")):
                out.append(f"{table}:{parts[1]}")
    return out


def setup_network() -> None:
    if _run(["ip", "link", "show", BRIDGE]).returncode != 0:
        _run(["ip", "link", "add", BRIDGE, "type", "bridge"], check=True)
    _run(["ip", "addr", "replace", f"{BRIDGE_IP}/{POD_SUBNET.prefixlen}", "dev", BRIDGE], check=True)
    _run(["ip", "link", "set", BRIDGE, "up"], check=True)
    # Pods talk to each other and to the host, never past it: drop what they would forward elsewhere.
    _run(["iptables", "-w", "-N", IPTABLES_CHAIN])
    _run(["iptables", "-w", "-F", IPTABLES_CHAIN], check=True)
    _run(["iptables", "-w", "-A", IPTABLES_CHAIN, "-i", BRIDGE, "!", "-o", BRIDGE, "-j", "DROP"], check=True)
    _run(["iptables", "-w", "-A", IPTABLES_CHAIN, "-o", BRIDGE, "!", "-i", BRIDGE, "-j", "DROP"], check=True)
    if _run(["iptables", "-w", "-C", "FORWARD", "-j", IPTABLES_CHAIN]).returncode != 0:
        _run(["iptables", "-w", "-I", "FORWARD", "-j", IPTABLES_CHAIN], check=True)
    nat = ["iptables", "-w", "-t", "nat"]
    _run([*nat, "-N", NAT_CHAIN])
    _run([*nat, "-F", NAT_CHAIN], check=True)
    dnat = ["-i", BRIDGE, "-d", KUBERNETES_SERVICE_IP, "-p", "tcp", "--dport", "443", "-j", "DNAT"]
    _run([*nat, "-A", NAT_CHAIN, *dnat, "--to-destination", f"{BRIDGE_IP}:{API_PROXY_PORT}"], check=True)
    if _run([*nat, "-C", "PREROUTING", "-j", NAT_CHAIN]).returncode != 0:
        _run([*nat, "-I", "PREROUTING", "-j", NAT_CHAIN], check=True)


def _hierarchies() -> list[Path]:
    base = Path("/sys/fs/cgroup")
    if (base / "cgroup.controllers").exists():  # pure cgroup v2
        return [base]
    return [p for p in sorted(base.iterdir()) if p.is_dir() and not p.is_symlink()]


def setup_cgroups() -> None:
    """The kubelet's cgroupRoot must exist in every hierarchy; a new v1 cpuset needs cpus/mems."""
    for hier in _hierarchies():
        path = hier / CGROUP_ROOT
        path.mkdir(exist_ok=True)
        for name in ("cpuset.cpus", "cpuset.mems"):
            if (path / name).exists() and not (path / name).read_text().strip():
                (path / name).write_text((hier / name).read_text())


# -- teardown ------------------------------------------------------------------------------------
def _our_pids() -> set[int]:
    """Processes in the node's cgroups (the containers), and containerd shims serving our socket."""
    pids: set[int] = set()
    for hier in _hierarchies():
        root = hier / CGROUP_ROOT
        if not root.exists():
            continue
        for procs in root.rglob("cgroup.procs"):
            with contextlib.suppress(OSError, ValueError):
                pids.update(int(x) for x in procs.read_text().split())
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            argv = (proc / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if argv and argv[0].endswith(b"containerd-shim-runc-v2") and str(SOCKET).encode() in argv:
            pids.add(int(proc.name))
    pids.discard(os.getpid())
    return pids


def kill_leftovers() -> None:
    for _ in range(3):
        pids = _our_pids()
        if not pids:
            return
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        time.sleep(0.3)


def _unmount_under(*roots: Path) -> None:
    prefixes = tuple(str(r) + "/" for r in roots)
    for _ in range(3):
        points = []
        for line in Path("/proc/self/mountinfo").read_text().splitlines():
            point = line.split()[4].replace("\\040", " ")
            if point.startswith(prefixes) or point in {str(r) for r in roots}:
                points.append(point)
        if not points:
            return
        for point in sorted(points, key=len, reverse=True):
            if _run(["umount", point]).returncode != 0:
                _run(["umount", "-l", point])


def _our_netns() -> list[str]:
    """CNI network namespaces whose pod address lies in the node's subnet."""
    ours = []
    for ns in sorted(Path("/run/netns").glob("cni-*")) if Path("/run/netns").exists() else []:
        addrs = _run(["ip", "-n", ns.name, "-4", "-o", "addr", "show"]).stdout
        for word in addrs.split():
            if "/" in word and word[0].isdigit():
                with contextlib.suppress(ValueError):
                    if ipaddress.ip_interface(word).ip in POD_SUBNET:
                        ours.append(ns.name)
                        break
        else:
            # An empty namespace (sandbox died before CNI ADD) counts as ours if nothing else uses it.
            if not addrs.strip() and not _run(["ip", "netns", "pids", ns.name]).stdout.strip():
                ours.append(ns.name)
    return ours


def _remove_cgroups() -> None:
    for hier in _hierarchies():
        root = hier / CGROUP_ROOT
        if not root.exists():
            continue
        for path in sorted(
            (p for p in root.rglob("*") if p.is_dir()), key=lambda p: len(p.parts), reverse=True
        ):
            with contextlib.suppress(OSError):
                path.rmdir()
        with contextlib.suppress(OSError):
            root.rmdir()


def teardown_host(owner: dict | None) -> list[str]:
    """Remove every trace of a run (after its processes were stopped); returns what could not be removed."""
    kill_leftovers()
    for ns in _our_netns():
        _run(["ip", "netns", "delete", ns])
    _unmount_under(RUN_DIR, STATE, CONTAINERD_ROOT)
    _run(["ip", "link", "delete", BRIDGE])
    while _run(["iptables", "-w", "-D", "FORWARD", "-j", IPTABLES_CHAIN]).returncode == 0:
        pass
    _run(["iptables", "-w", "-F", IPTABLES_CHAIN])
    _run(["iptables", "-w", "-X", IPTABLES_CHAIN])
    while _run(["iptables", "-w", "-t", "nat", "-D", "PREROUTING", "-j", NAT_CHAIN]).returncode == 0:
        pass
    _run(["iptables", "-w", "-t", "nat", "-F", NAT_CHAIN])
    _run(["iptables", "-w", "-t", "nat", "-X", NAT_CHAIN])
    before = set((owner or {}).get("chains_before", []))
    for entry in kube_chains():
        if entry in before:
            continue
        table, chain = entry.split(":", 1)
        _run(["iptables", "-w", "-t", table, "-F", chain])
    for entry in kube_chains():
        if entry not in before:
            table, chain = entry.split(":", 1)
            _run(["iptables", "-w", "-t", table, "-X", chain])
    _remove_cgroups()
    if owner and "ip_forward" in owner:
        IP_FORWARD.write_text(str(owner["ip_forward"]))
    if VAR_LOG_CONTAINERS.is_dir():
        for link in VAR_LOG_CONTAINERS.iterdir():
            if link.is_symlink() and os.readlink(link).startswith(str(RUN_DIR)):
                link.unlink()
        if owner and not owner.get("var_log_containers_existed", True):
            with contextlib.suppress(OSError):
                VAR_LOG_CONTAINERS.rmdir()
    if owner and not owner.get("var_lib_kubelet_existed", True):
        shutil.rmtree(VAR_LIB_KUBELET, ignore_errors=True)
    shutil.rmtree(RUN_DIR, ignore_errors=True)
    shutil.rmtree(STATE, ignore_errors=True)
    OWNER_FILE.unlink(missing_ok=True)
    return leftovers()


def leftovers() -> list[str]:
    """What of a run is still on the machine (empty after a clean teardown)."""
    left = []
    if _our_pids():
        left.append(f"processes {sorted(_our_pids())}")
    if _run(["ip", "link", "show", BRIDGE]).returncode == 0:
        left.append(f"bridge {BRIDGE}")
    for hier in _hierarchies():
        if (hier / CGROUP_ROOT).exists():
            left.append(f"cgroup {hier / CGROUP_ROOT}")
    prefixes = (str(RUN_DIR), str(STATE))
    mounts = [
        line.split()[4]
        for line in Path("/proc/self/mountinfo").read_text().splitlines()
        if line.split()[4].startswith(prefixes)
    ]
    if mounts:
        left.append(f"mounts {mounts}")
    if _run(["iptables", "-w", "-S", IPTABLES_CHAIN]).returncode == 0:
        left.append(f"iptables chain {IPTABLES_CHAIN}")
    if _run(["iptables", "-w", "-t", "nat", "-S", NAT_CHAIN]).returncode == 0:
        left.append(f"iptables nat chain {NAT_CHAIN}")
    for path in (RUN_DIR, STATE):
        if path.exists():
            left.append(str(path))
    return left
