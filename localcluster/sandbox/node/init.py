"""PID 1 of one real node: its own network, mount, UTS and PID namespaces, in its own cgroup.

Sets the node's mounts (containerd and the kubelet at their usual paths, private to the node; the
kubelet's kernel tunables as files) and its network (eth0, handed over by the sandbox), then runs
containerd and the kubelet. Signals: USR1 stops the kubelet (containers keep running), USR2 starts it
again, TERM ends the node. When this process ends, the kernel ends every process of the node.

Usage: python -m localcluster.sandbox.node.init NODE_DIR   (NODE_DIR/etc/node.json says the rest)
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from localcluster.sandbox import namespace
from localcluster.sandbox.node.config import SOCKET

# The node's disk: survives a kill, like a real node's; /run is its tmpfs and goes with it.
PERSISTENT = {"kubelet": "/var/lib/kubelet", "containerd": "/var/lib/containerd", "cni": "/var/lib/cni"}


class Node:
    def __init__(self, node_dir: Path) -> None:
        self.dir = node_dir
        self.cfg: dict[str, Any] = json.loads((node_dir / "etc" / "node.json").read_text())
        self.logs = node_dir / "log"
        self.containerd: subprocess.Popen[bytes] | None = None
        self.kubelet: subprocess.Popen[bytes] | None = None
        self.kubelet_wanted = True
        self.pending: list[str] = []  # what signals asked for, done by the main loop

    # -- set-up --------------------------------------------------------------------------------------
    def mounts(self) -> None:
        sysctl_files = {key: self.dir / "sysctl" / key.replace("/", "_") for key in self.cfg["sysctls"]}
        namespace.seal_mounts(sysctl_files=sysctl_files)
        # /var/lib as a tmpfs with only the node's own directories in it: nothing of the machine's.
        subprocess.run(["mount", "-t", "tmpfs", "-o", "mode=755", "tmpfs", "/var/lib"], check=True)
        for name, target in PERSISTENT.items():
            (self.dir / name).mkdir(exist_ok=True)
            Path(target).mkdir(parents=True, exist_ok=True)
            subprocess.run(["mount", "--bind", str(self.dir / name), target], check=True)
        subprocess.run(["mount", "--bind", str(self.logs), "/var/log"], check=True)

    def network(self) -> None:
        deadline = time.monotonic() + 30
        while subprocess.run(["ip", "link", "show", "eth0"], capture_output=True).returncode != 0:
            if time.monotonic() > deadline:
                raise RuntimeError("the sandbox did not hand over eth0 within 30 s")
            time.sleep(0.02)
        namespace.ip("link", "set", "lo", "up")
        namespace.ip("link", "set", "eth0", "address", self.cfg["mac"])
        namespace.ip("addr", "add", f"{self.cfg['ip']}/{self.cfg['prefix']}", "dev", "eth0")
        namespace.ip("link", "set", "eth0", "up")
        namespace.ip("route", "add", "default", "via", self.cfg["gateway"])
        namespace.sysctl("net/ipv4/ip_forward", "1")

    # -- processes -----------------------------------------------------------------------------------
    def _spawn(self, name: str, argv: list[str]) -> subprocess.Popen[bytes]:
        with (self.logs / f"{name}.log").open("ab") as out:
            return subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT)

    def start_containerd(self) -> None:
        self.containerd = self._spawn("containerd", ["containerd", "--config", self.cfg["containerd_config"]])
        deadline = time.monotonic() + 60
        while not SOCKET.exists():
            if self.containerd.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"containerd did not start; see {self.logs / 'containerd.log'}")
            time.sleep(0.05)

    def start_kubelet(self) -> None:
        self.kubelet_wanted = True
        if self.kubelet is None or self.kubelet.poll() is not None:
            self.kubelet = self._spawn("kubelet", self.cfg["kubelet_argv"])
        self._write_state()

    def stop_kubelet(self) -> None:
        self.kubelet_wanted = False
        if self.kubelet is not None and self.kubelet.poll() is None:
            self.kubelet.terminate()
            try:
                self.kubelet.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.kubelet.kill()
                self.kubelet.wait()
        self._write_state()

    def _write_state(self) -> None:
        state = {"kubelet": "running" if self.kubelet_wanted else "stopped"}
        (self.dir / "state.json").write_text(json.dumps(state) + "\n")

    def run(self) -> int:
        for sig, verb in ((signal.SIGUSR1, "stop"), (signal.SIGUSR2, "start"), (signal.SIGTERM, "end")):
            signal.signal(sig, lambda *_, verb=verb: self.pending.append(verb))
        self.mounts()
        self.network()
        self.start_containerd()
        self.start_kubelet()
        while True:
            time.sleep(0.1)
            while self.pending:
                verb = self.pending.pop(0)
                if verb == "end":
                    self.stop_kubelet()
                    return 0
                self.stop_kubelet() if verb == "stop" else self.start_kubelet()
            known = {p.pid for p in (self.containerd, self.kubelet) if p is not None}
            namespace.reap_orphans(known)
            assert self.containerd is not None
            if self.containerd.poll() is not None:
                print("containerd exited: the node goes down", file=sys.stderr, flush=True)
                return 1
            if self.kubelet_wanted and self.kubelet is not None and self.kubelet.poll() is not None:
                print(
                    f"kubelet exited ({self.kubelet.returncode}): restarting it", file=sys.stderr, flush=True
                )
                time.sleep(1)
                self.start_kubelet()


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print(__doc__, file=sys.stderr)
        return 2
    return Node(Path(argv[0])).run()


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
