"""The real nodes of a sandbox, run from inside it: CoreDNS, the prepared image store, and per node its
directory, certificates and configuration, its start (a PID namespace of its own under the sandbox's
supervisor), and the fault verbs stop, kill and start."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

from localcluster import pki
from localcluster.images import build as images
from localcluster.pki import KUBELET_CLIENT_USER
from localcluster.processes import Proc, free_port, http_ok, spawn
from localcluster.sandbox import cgroups, namespace
from localcluster.sandbox.layout import (
    BRIDGE,
    BRIDGE_IP,
    BRIDGE_PREFIX,
    KUBERNETES_SERVICE_IP,
    NODE_LABEL,
    NodeAddress,
    Paths,
    node_address,
    node_index,
)
from localcluster.sandbox.node import config, store
from localcluster.sandbox.node.host import KUBELET_SYSCTLS

if TYPE_CHECKING:
    from kubernetes.client import ApiClient


class NodeCluster(Protocol):
    """What the nodes need of the control plane that runs beside them in the sandbox."""

    work_dir: Path
    ports: dict[str, int]

    @property
    def pki_dir(self) -> Path: ...

    @property
    def kubeconfig(self) -> Path: ...

    def api_client(self) -> ApiClient: ...

    def spawn(self, name: str, argv: list[str]) -> Proc: ...

    def wait_for(self, proc: Proc, check: Callable[[], bool], what: str) -> None: ...


def log(msg: str) -> None:
    print(f"real-node: {msg}", file=sys.stderr, flush=True)


def _ns_init(unshare_pid: int) -> int | None:
    """The PID (in our namespace) of the first process of the PID namespace `unshare` made: its only
    child, and PID 1 in its own namespace. None while it does not exist (yet)."""
    try:
        children = Path(f"/proc/{unshare_pid}/task/{unshare_pid}/children").read_text().split()
    except OSError:
        return None
    for child in children:
        with contextlib.suppress(OSError):
            status = Path(f"/proc/{child}/status").read_text()
            nspid = next(line.split()[1:] for line in status.splitlines() if line.startswith("NSpid:"))
            if len(nspid) >= 2 and nspid[-1] == "1":
                return int(child)
    return None


class RealNodes:
    def __init__(
        self,
        cluster: NodeCluster,
        *,
        count: int,
        archives: Mapping[str, Path],
        node_bin: Path,
        cgroup: str,
        node_memory: int,
    ) -> None:
        self.cluster = cluster
        self.addresses = [node_address(i) for i in range(1, count + 1)]
        self.archives = dict(archives)
        self.node_bin = node_bin
        self.cgroup = cgroup
        self.node_memory = node_memory
        self.procs: dict[str, Proc] = {}  # the `unshare` of each running node
        self.lock = threading.Lock()  # one verb at a time
        self.store: Path | None = None
        self.paths = Paths(cluster.work_dir)

    @property
    def run_dir(self) -> Path:
        return Path("/run/mpijob")

    # -- the cluster side ------------------------------------------------------------------------------
    def start(self) -> None:
        began = time.monotonic()
        self.run_dir.mkdir(parents=True, exist_ok=True)
        self._grant_rbac()
        self._start_coredns()
        self.store = store.prepare(self.archives, self.run_dir, self.cluster.work_dir / "logs" / "store.log")
        log(f"image store ready in {time.monotonic() - began:.1f}s")
        for node in self.addresses:
            self.start_node(node.name)
        self.wait_ready([n.name for n in self.addresses])
        log(f"{len(self.addresses)} node(s) Ready in {time.monotonic() - began:.1f}s")

    def _grant_rbac(self) -> None:
        from kubernetes import client

        bindings = {
            # The apiserver runs RBAC without the Node authorizer: nodes get the system:node role.
            "mpijob-node:system-nodes": ("system:node", "Group", "system:nodes"),
            # The apiserver's client certificate may use the kubelet API (logs, exec).
            "mpijob-node:apiserver-kubelet": ("system:kubelet-api-admin", "User", KUBELET_CLIENT_USER),
        }
        with contextlib.closing(self.cluster.api_client()) as api:
            rbac = client.RbacAuthorizationV1Api(api)
            for name, (role, kind, subject) in bindings.items():
                body = {
                    "apiVersion": "rbac.authorization.k8s.io/v1",
                    "kind": "ClusterRoleBinding",
                    "metadata": {"name": name},
                    "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": role},
                    "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": kind, "name": subject}],
                }
                with contextlib.suppress(client.ApiException):
                    rbac.create_cluster_role_binding(body)

    def _start_coredns(self) -> None:
        health, ready = free_port(), free_port()
        self.cluster.ports.update(coredns_health=health, coredns_ready=ready)
        corefile = self.cluster.work_dir / "Corefile"
        corefile.write_text(config.corefile(self.cluster.kubeconfig, health, ready))
        proc = self.cluster.spawn("coredns", [str(self.node_bin / "coredns"), "-conf", str(corefile)])
        self.cluster.wait_for(proc, lambda: http_ok(f"http://127.0.0.1:{ready}/ready"), "CoreDNS /ready")

    def wait_ready(self, names: list[str], timeout: float = 120.0) -> None:
        from kubernetes import client

        from localcluster.nodes import node_ready

        deadline = time.monotonic() + timeout
        with contextlib.closing(self.cluster.api_client()) as api:
            core = client.CoreV1Api(api)
            waiting = set(names)
            while waiting:
                for name in sorted(waiting):
                    if not self.procs[name].alive():
                        raise RuntimeError(f"{name} exited while starting:\n{self._log_tail(name)}")
                    with contextlib.suppress(client.ApiException):
                        if node_ready(api.sanitize_for_serialization(core.read_node(name))):
                            waiting.discard(name)
                if time.monotonic() > deadline:
                    raise RuntimeError(f"not Ready after {timeout:.0f}s: {sorted(waiting)}")
                time.sleep(0.1)

    def _log_tail(self, name: str) -> str:
        logs = self.paths.node_dir(name) / "log"
        return "\n".join(
            f"{f.name}: {line}"
            for f in sorted(logs.glob("*.log"))
            for line in f.read_text(errors="replace").splitlines()[-15:]
        )

    # -- one node ----------------------------------------------------------------------------------------
    def _write_node_dir(self, node: NodeAddress) -> Path:
        """The node's configuration, certificates and disk (kept across its restarts)."""
        d = self.paths.node_dir(node.name)
        etc = d / "etc"
        if (etc / "node.json").exists():
            return d
        for sub in ("etc", "log", "sysctl", "cni-conf"):
            (d / sub).mkdir(parents=True, exist_ok=True)
        p = self.cluster.pki_dir
        ca = pki.CertificateAuthority.load(p / "ca.crt", p / "ca.key")
        user = f"system:node:{node.name}"
        cert, key = ca.issue(user, ("system:nodes",), client=True)
        kubeconfig = pki.write_kubeconfig(
            etc / "kubelet.kubeconfig",
            server=f"https://{KUBERNETES_SERVICE_IP}:443",
            ca_pem=ca.cert_pem,
            cert_pem=cert,
            key_pem=key,
            user=user,
        )
        cert, key = ca.issue(user, server_names=(node.ip, node.name))
        serving_crt, serving_key = pki._write_pair(etc / "pki", "kubelet", cert, key)
        resolv = etc / "resolv.conf"
        resolv.write_text("# pods with dnsPolicy Default get no upstream: nothing leaves the sandbox\n")
        (etc / "kubelet.yaml").write_text(
            config.kubelet_config(
                node,
                ca=p / "ca.crt",
                serving_cert=serving_crt,
                serving_key=serving_key,
                resolv_conf=resolv,
                cgroup_root=f"/{self.cgroup}/{node.name}",
            )
        )
        (d / "cni-conf" / "10-mpijob-node.conflist").write_text(config.cni_conflist(node))
        (etc / "containerd.toml").write_text(
            config.containerd_config(images.PAUSE_IMAGE, cni_conf_dir=d / "cni-conf")
        )
        for key_path, value in KUBELET_SYSCTLS.items():
            (d / "sysctl" / key_path.replace("/", "_")).write_text(value + "\n")
        spec = {
            "name": node.name,
            "ip": node.ip,
            "prefix": BRIDGE_PREFIX,
            "mac": node.mac,
            "gateway": BRIDGE_IP,
            "sysctls": sorted(KUBELET_SYSCTLS),
            "containerd_config": str(etc / "containerd.toml"),
            "kubelet_argv": [
                str(self.node_bin / "kubelet"),
                f"--config={etc / 'kubelet.yaml'}",
                f"--kubeconfig={kubeconfig}",
                f"--hostname-override={node.name}",
                f"--node-ip={node.ip}",
                f"--cert-dir={etc / 'pki'}",
                f"--node-labels={NODE_LABEL}=true",
                "--v=1",
            ],
        }
        (etc / "node.json").write_text(json.dumps(spec, indent=2) + "\n")
        return d

    def start_node(self, name: str) -> str:
        node = node_address(node_index(name))
        if node not in self.addresses:
            raise KeyError(f"no node {name} in this cluster ({', '.join(n.name for n in self.addresses)})")
        running = self.procs.get(name)
        if running is not None and running.alive():
            init = _ns_init(running.pid)
            if init is None:
                return "already starting"
            os.kill(init, signal.SIGUSR2)  # back from `stop`: the kubelet again
            return "kubelet started"
        d = self._write_node_dir(node)
        assert self.store is not None
        store.seed(self.store, d / "containerd")
        relative = f"{self.cgroup}/{name}"
        cgroups.remove(relative)  # a killed node's pod cgroups: a rebooted machine starts with none
        cgroups.create(relative, memory_bytes=self.node_memory)
        script = cgroups.join_script(relative) + ' && exec "$@"'
        argv = [
            "sh", "-c", script, "sh",
            "unshare", "--net", "--mount", "--uts", "--pid", "--fork", "--mount-proc",
            "--propagation", "private", "--kill-child",
            sys.executable, "-m", "localcluster.sandbox.node.init", str(d),
        ]  # fmt: skip
        log_file = d / "log" / "node.log"
        # No death signal tied to the starting thread (a verb's thread ends at once): when the sandbox's
        # PID 1 ends, the kernel ends its nodes anyway.
        proc = spawn(name, argv, log_file, detached=True, append=True, env=namespace.forbid_own())
        self.procs[name] = proc
        deadline = time.monotonic() + 30
        while (init := _ns_init(proc.pid)) is None:
            if not proc.alive() or time.monotonic() > deadline:
                raise RuntimeError(f"{name} did not start:\n{proc.log_tail()}")
            time.sleep(0.01)
        namespace.ip("link", "add", node.veth, "type", "veth", "peer", "name", "eth0", "netns", str(init))
        namespace.ip("link", "set", node.veth, "master", BRIDGE, "up")
        namespace.ip("route", "replace", str(node.pod_subnet), "via", node.ip)
        return "started"

    def stop_node(self, name: str) -> str:
        """The kubelet stops gracefully; containerd and the containers keep running."""
        init = self._init_of(name)
        os.kill(init, signal.SIGUSR1)
        return "kubelet stopping"

    def kill_node(self, name: str) -> str:
        """Power loss: one SIGKILL to the node's PID 1; the kernel ends every other process of it."""
        init = self._init_of(name)
        os.kill(init, signal.SIGKILL)
        proc = self.procs[name]
        with contextlib.suppress(subprocess.TimeoutExpired):
            assert proc.popen is not None
            proc.popen.wait(timeout=10)
        return "killed"

    def _init_of(self, name: str) -> int:
        proc = self.procs.get(name)
        if proc is None or not proc.alive():
            raise LookupError(f"{name} is not running")
        init = _ns_init(proc.pid)
        if init is None:
            raise LookupError(f"{name} has no running init")
        return init

    def status(self) -> list[dict[str, str]]:
        out = []
        for node in self.addresses:
            proc = self.procs.get(node.name)
            if proc is None or not proc.alive():
                state = "down"
            else:
                state_file = self.paths.node_dir(node.name) / "state.json"
                kubelet = "running"
                with contextlib.suppress(OSError, ValueError):
                    kubelet = json.loads(state_file.read_text())["kubelet"]
                state = "up" if kubelet == "running" else "kubelet-stopped"
            out.append({"name": node.name, "state": state, "ip": node.ip, "pods": str(node.pod_subnet)})
        return out

    def verb(self, verb: str, name: str | None) -> object:
        with self.lock:
            if verb == "status":
                return self.status()
            if name is None:
                raise ValueError(f"{verb} needs a node name")
            actions = {"start": self.start_node, "stop": self.stop_node, "kill": self.kill_node}
            if verb not in actions:
                raise ValueError(f"unknown verb {verb!r} (start, stop, kill, status)")
            return actions[verb](name)
