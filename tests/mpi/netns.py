"""Pods as network namespaces on one test bridge, and cluster DNS as per-pod hosts files.

Every name this module creates carries the run id, so teardown removes exactly what this run made:
its namespaces (after killing the processes inside them, `ip netns pids`), its /etc/netns entries and
its bridge. The bridge has no host address: traffic stays between the run's own namespaces.
"""

from __future__ import annotations

import contextlib
import ipaddress
import os
import random
import shutil
import signal
import subprocess
import time
from pathlib import Path

import attrs


def sh(*argv: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    return subprocess.run(argv, check=check, capture_output=True, text=True)


def _used_prefixes() -> set[str]:
    out = sh("ip", "-4", "-o", "addr", "show").stdout + sh("ip", "-4", "route", "show").stdout
    return {w.rsplit(".", 1)[0] for w in out.split() if w.startswith("10.203.")}


@attrs.define
class PodNet:
    ns: str  # network namespace name
    ip: str
    veth: str  # host end


@attrs.define
class Network:
    run_id: str
    subnet: ipaddress.IPv4Network
    bridge: str
    pods: dict[str, PodNet] = attrs.field(factory=dict)  # key: pod name

    @classmethod
    def create(cls, run_id: str) -> Network:
        used = _used_prefixes()
        free = [x for x in range(1, 255) if f"10.203.{x}" not in used]
        subnet = ipaddress.IPv4Network(f"10.203.{random.choice(free)}.0/24")
        net = cls(run_id=run_id, subnet=subnet, bridge=f"mpib{run_id}")
        sh("ip", "link", "add", net.bridge, "type", "bridge")
        sh("ip", "link", "set", net.bridge, "up")
        return net

    def add_pod(self, pod_name: str) -> PodNet:
        idx = len(self.pods) + 1
        ns, veth = f"mpil3-{self.run_id}-{idx}", f"mv{self.run_id}{idx}"
        ip = str(self.subnet.network_address + 1 + idx)
        sh("ip", "netns", "add", ns)
        self.pods[pod_name] = pn = PodNet(ns=ns, ip=ip, veth=veth)
        sh("ip", "link", "add", veth, "type", "veth", "peer", "name", "eth0", "netns", ns)
        sh("ip", "link", "set", veth, "master", self.bridge, "up")
        for cmd in (
            ("ip", "addr", "add", f"{ip}/{self.subnet.prefixlen}", "dev", "eth0"),
            ("ip", "link", "set", "eth0", "up"),
            ("ip", "link", "set", "lo", "up"),
        ):
            sh("ip", "netns", "exec", ns, *cmd)
        Path(f"/etc/netns/{ns}").mkdir(parents=True, exist_ok=True)
        return pn

    def etc_dir(self, pod_name: str) -> Path:
        return Path(f"/etc/netns/{self.pods[pod_name].ns}")

    def write_dns(self, pod_name: str, hosts: str, resolv: str) -> None:
        # Written in place (same inode): the pod's bind mount of this file sees every update.
        d = self.etc_dir(pod_name)
        for name, text in (("hosts", hosts), ("resolv.conf", resolv)):
            p = d / name
            with open(p, "a+") as f:
                f.seek(0)
                if f.read() != text:
                    f.seek(0)
                    f.truncate()
                    f.write(text)
            os.chmod(p, 0o644)

    def pids(self, pod_name: str) -> list[int]:
        out = sh("ip", "netns", "pids", self.pods[pod_name].ns, check=False).stdout
        return [int(p) for p in out.split()]

    def kill_pod(self, pod_name: str, grace: float = 2.0) -> None:
        """Stop every process in the pod's namespace: all of them were started by this run."""
        for sig in (signal.SIGTERM, signal.SIGKILL):
            for pid in self.pids(pod_name):
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, sig)
            deadline = time.monotonic() + grace
            while self.pids(pod_name) and time.monotonic() < deadline:
                time.sleep(0.05)
            if not self.pids(pod_name):
                return

    def teardown(self) -> list[str]:
        """Remove everything; return what could not be removed (empty when clean)."""
        problems: list[str] = []
        for name, pn in list(self.pods.items()):
            self.kill_pod(name)
            if self.pids(name):
                problems.append(f"processes left in {pn.ns}: {self.pids(name)}")
            sh("ip", "link", "del", pn.veth, check=False)
            r = sh("ip", "netns", "del", pn.ns, check=False)
            if r.returncode:
                problems.append(f"ip netns del {pn.ns}: {r.stderr.strip()}")
            shutil.rmtree(f"/etc/netns/{pn.ns}", ignore_errors=True)
        self.pods.clear()
        r = sh("ip", "link", "del", self.bridge, check=False)
        if r.returncode and "Cannot find device" not in r.stderr:
            problems.append(f"ip link del {self.bridge}: {r.stderr.strip()}")
        return problems


def leftovers(run_id: str) -> list[str]:
    """Anything of this run still on the host (namespaces, /etc/netns entries, links)."""
    found = [n for n in sh("ip", "netns", "list").stdout.split() if n.startswith(f"mpil3-{run_id}-")]
    if Path("/etc/netns").is_dir():
        found += [f"/etc/netns/{p.name}" for p in Path("/etc/netns").glob(f"mpil3-{run_id}-*")]
    links = sh("ip", "-o", "link", "show").stdout
    found += [w for w in links.replace("@", " ").replace(":", " ").split() if run_id in w]
    return found
