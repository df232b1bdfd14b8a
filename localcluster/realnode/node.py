"""One real Kubernetes node beside the local control plane: containerd + runc + CNI bridge, CoreDNS, and
a kubelet that registers as `real-node`. Started by LocalCluster for tier "real"; one per machine."""

from __future__ import annotations

import contextlib
import subprocess
import sys
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

from localcluster import pki
from localcluster.binaries import find_node_bin_dir
from localcluster.images import build as images
from localcluster.processes import Proc, free_port, http_ok, start_time
from localcluster.realnode import config, host
from localcluster.realnode.host import BRIDGE_IP, NODE_LABEL, NODE_NAME, NodeUnavailable

if TYPE_CHECKING:
    from kubernetes.client import ApiClient

NODE_PROCS = ("containerd", "coredns", "kubelet", "apiserver-proxy")
KUBELET_CLIENT_USER = "kube-apiserver-kubelet-client"


class NodeCluster(Protocol):
    """What the node needs of the cluster that starts it (LocalCluster has it; the cluster imports us)."""

    work_dir: Path
    server: str
    ports: dict[str, int]
    procs: list[Proc]

    @property
    def pki_dir(self) -> Path: ...

    @property
    def kubeconfig(self) -> Path: ...

    def api_client(self) -> ApiClient: ...

    def spawn(self, name: str, argv: list[str]) -> Proc: ...

    def proc(self, name: str) -> Proc: ...

    def wait_for(self, proc: Proc, check: Callable[[], bool], what: str) -> None: ...


class NodeBusy(NodeUnavailable):
    """Another run's real node is up on this machine."""


def log(msg: str) -> None:
    print(f"real-node: {msg}", file=sys.stderr, flush=True)


def apiserver_pki(ca: pki.CertificateAuthority, pki_dir: Path) -> list[str]:
    """The apiserver's side of the kubelet API: a client certificate, and the CA of the kubelet's cert."""
    cert, key = ca.issue(KUBELET_CLIENT_USER, client=True)
    crt, k = pki._write_pair(pki_dir, "apiserver-kubelet-client", cert, key)
    return [
        f"--kubelet-client-certificate={crt}",
        f"--kubelet-client-key={k}",
        f"--kubelet-certificate-authority={pki_dir / 'ca.crt'}",
    ]


def _alive(entry: dict) -> bool:
    return bool(start_time(int(entry["pid"])) == entry["started"])


def _owner_procs_alive(owner: dict) -> list[dict]:
    return [p for p in owner.get("procs", []) if _alive(p)]


def _ctr(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["ctr", "--address", str(host.SOCKET), "--namespace", "k8s.io", *args],
        capture_output=True,
        text=True,
        check=False,
        timeout=120,
    )


def _remove_containers() -> None:
    """Every task and container of the node's containerd (all were made by this node's kubelet)."""
    if not host.SOCKET.exists():
        return
    for task in _ctr("tasks", "ls", "-q").stdout.split():
        _ctr("tasks", "kill", "-s", "SIGKILL", task)
    time.sleep(0.2)
    for task in _ctr("tasks", "ls", "-q").stdout.split():
        _ctr("tasks", "delete", "-f", task)
    for container in _ctr("containers", "ls", "-q").stdout.split():
        _ctr("containers", "delete", container)


def _stop_entries(entries: list[dict]) -> None:
    for entry in entries:
        Proc(
            name=entry["name"], pid=int(entry["pid"]), started=entry["started"], log=Path("/dev/null")
        ).stop()


class RealNode:
    def __init__(self, cluster: NodeCluster, images: Iterable[str] | None = None) -> None:
        self.cluster = cluster
        self.images = None if images is None else tuple(images)  # None: every image
        self.node_bin: Path | None = None

    # -- start ------------------------------------------------------------------------------------
    def start(self) -> None:
        host.check_host()
        self.node_bin = find_node_bin_dir()
        began = time.monotonic()
        archives = images.build_images(self.images)
        with host.machine_lock():
            owner = host.read_owner()
            if owner and (alive := _owner_procs_alive(owner)):
                pids = ", ".join(f"{p['name']} {p['pid']}" for p in alive)
                raise NodeBusy(
                    f"a real node is already running on this machine ({pids}; state dir "
                    f"{owner.get('state_dir')}); stop it with `python -m localcluster down --tier real "
                    f"--state-dir {owner.get('state_dir')}`"
                )
            if owner or host.leftovers():
                log("removing what a previous run left behind")
                self._teardown(owner)
            owner = {
                "state_dir": str(self.cluster.work_dir),
                "ip_forward": host.IP_FORWARD.read_text().strip(),
                "chains_before": host.kube_chains(),
                "var_log_containers_existed": host.VAR_LOG_CONTAINERS.exists(),
                "var_lib_kubelet_existed": host.VAR_LIB_KUBELET.exists(),
                "procs": [],
            }
            host.write_owner(owner)
            for d in (host.RUN_DIR, host.STATE, config.CNI_CONF_DIR, config.KUBELET_ROOT, config.POD_LOGS):
                d.mkdir(parents=True, exist_ok=True)
            host.setup_network()
            host.setup_cgroups()
            self._start_containerd(owner)
            self._import_images(archives)
            self._grant_rbac()
            self._start_coredns(owner)
            self._start_api_proxy(owner)
            self._start_kubelet(owner)
        self._wait_node_ready()
        log(f"{NODE_NAME} Ready in {time.monotonic() - began:.1f}s")

    def _record(self, owner: dict, proc: Proc) -> None:
        owner["procs"].append({"name": proc.name, "pid": proc.pid, "started": proc.started})
        host.write_owner(owner)

    def _start_containerd(self, owner: dict) -> None:
        cfg = host.RUN_DIR / "containerd.toml"
        cfg.write_text(config.containerd_config(images.PAUSE_IMAGE))
        (config.CNI_CONF_DIR / "10-mpijob-node.conflist").write_text(config.cni_conflist())
        proc = self.cluster.spawn("containerd", ["containerd", "--config", str(cfg)])
        self._record(owner, proc)
        self.cluster.wait_for(
            proc, lambda: host.SOCKET.exists() and _ctr("version").returncode == 0, "containerd socket"
        )
        # Containers of a crashed run may still be in the (kept) store.
        _remove_containers()

    def _import_images(self, archives: dict[str, Path]) -> None:
        listed = _ctr("images", "ls").stdout.splitlines()[1:]
        have = {line.split()[0]: line.split()[2] for line in listed if len(line.split()) > 2}
        for name, archive in archives.items():
            if have.get(name) == images.archive_digest(archive):
                continue
            t = time.monotonic()
            proc = _ctr("images", "import", str(archive))
            if proc.returncode != 0:
                raise RuntimeError(f"ctr images import {archive} failed: {proc.stderr.strip()}")
            log(f"imported {name} in {time.monotonic() - t:.1f}s")

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

    def _start_coredns(self, owner: dict) -> None:
        assert self.node_bin is not None
        health, ready = free_port(), free_port()
        self.cluster.ports.update(coredns_health=health, coredns_ready=ready)
        corefile = host.RUN_DIR / "Corefile"
        corefile.write_text(config.corefile(self.cluster.kubeconfig, health, ready))
        proc = self.cluster.spawn("coredns", [str(self.node_bin / "coredns"), "-conf", str(corefile)])
        self._record(owner, proc)
        self.cluster.wait_for(proc, lambda: http_ok(f"http://127.0.0.1:{ready}/ready"), "CoreDNS /ready")

    def _start_api_proxy(self, owner: dict) -> None:
        target = self.cluster.server.removeprefix("https://")
        listen = f"{BRIDGE_IP}:{host.API_PROXY_PORT}"
        argv = [sys.executable, "-m", "localcluster.realnode.apiproxy", listen, target]
        proc = self.cluster.spawn("apiserver-proxy", argv)
        self._record(owner, proc)

    def _start_kubelet(self, owner: dict) -> None:
        assert self.node_bin is not None
        p = self.cluster.pki_dir
        ca = pki.CertificateAuthority.load(p / "ca.crt", p / "ca.key")
        cert, key = ca.issue(f"system:node:{NODE_NAME}", ("system:nodes",), client=True)
        node_kc = pki.write_kubeconfig(
            host.RUN_DIR / "kubelet.kubeconfig",
            server=self.cluster.server,
            ca_pem=ca.cert_pem,
            cert_pem=cert,
            key_pem=key,
            user=f"system:node:{NODE_NAME}",
        )
        cert, key = ca.issue(f"system:node:{NODE_NAME}", server_names=(BRIDGE_IP, NODE_NAME))
        serving_crt, serving_key = pki._write_pair(host.RUN_DIR / "kubelet-pki", "kubelet", cert, key)
        resolv = host.RUN_DIR / "resolv.conf"
        resolv.write_text("# pods with dnsPolicy Default get no upstream: nothing leaves the machine\n")
        kcfg = host.RUN_DIR / "kubelet.yaml"
        kcfg.write_text(
            config.kubelet_config(
                ca=p / "ca.crt", serving_cert=serving_crt, serving_key=serving_key, resolv_conf=resolv
            )
        )
        # The kubelet gets its own mount namespace, where the kernel tunables it insists on are files
        # (so the machine's kernel.panic & co stay as they are); its root dir is a shared mount, so the
        # volumes it mounts there reach containerd in the host's namespace.
        root = str(config.KUBELET_ROOT)
        subprocess.run(["mount", "--bind", root, root], check=True)
        subprocess.run(["mount", "--make-rshared", root], check=True)
        sysctl_dir = host.RUN_DIR / "sysctl"
        sysctl_dir.mkdir(exist_ok=True)
        binds = []
        for key_path, value in host.KUBELET_SYSCTLS.items():
            f = sysctl_dir / key_path.replace("/", "_")
            f.write_text(value + "\n")
            binds.append(f'mount --bind "{f}" /proc/sys/{key_path}')
        wrapper = "set -e\nmount --make-rprivate /proc\n" + "\n".join(binds) + '\nexec "$@"\n'
        argv = [
            "unshare",
            "--mount",
            "--propagation",
            "unchanged",
            "sh",
            "-c",
            wrapper,
            "kubelet",
            str(self.node_bin / "kubelet"),
            f"--config={kcfg}",
            f"--kubeconfig={node_kc}",
            f"--hostname-override={NODE_NAME}",
            f"--node-ip={BRIDGE_IP}",
            f"--root-dir={root}",
            f"--cert-dir={host.RUN_DIR / 'kubelet-pki'}",
            f"--node-labels={NODE_LABEL}=true",
            "--v=1",
        ]
        proc = self.cluster.spawn("kubelet", argv)
        self._record(owner, proc)

    def _wait_node_ready(self) -> None:
        from kubernetes import client

        from localcluster.nodes import node_ready

        with contextlib.closing(self.cluster.api_client()) as api:
            core = client.CoreV1Api(api)

            def ready() -> bool:
                try:
                    node = core.read_node(NODE_NAME)
                except client.ApiException:
                    return False
                return node_ready(api.sanitize_for_serialization(node))

            self.cluster.wait_for(self.cluster.proc("kubelet"), ready, f"node {NODE_NAME} Ready")

    # -- stop ------------------------------------------------------------------------------------
    def stop(self) -> list[str]:
        """Stop the node's processes (kubelet first, containers, then containerd) and remove every trace.
        Returns what could not be removed (empty when clean)."""
        with host.machine_lock():
            owner = host.read_owner()
            if owner and owner.get("state_dir") != str(self.cluster.work_dir):
                # Someone else's node: leave it alone (ours is already gone).
                return []
            return self._teardown(owner)

    def _teardown(self, owner: dict | None) -> list[str]:
        by_name = {p.name: p for p in self.cluster.procs if p.name in NODE_PROCS}
        entries = list((owner or {}).get("procs", []))
        for name in ("kubelet", "coredns", "apiserver-proxy"):
            if name in by_name:
                by_name[name].stop()
            _stop_entries([e for e in entries if e["name"] == name])
        _remove_containers()
        if "containerd" in by_name:
            by_name["containerd"].stop()
        _stop_entries([e for e in entries if e["name"] == "containerd"])
        self.cluster.procs = [p for p in self.cluster.procs if p.name not in NODE_PROCS]
        left = host.teardown_host(owner)
        if left:
            log(f"could not remove: {'; '.join(left)}")
        return left


def node_rss_bytes(cluster: NodeCluster) -> dict[str, int]:
    """RSS of the node's processes (and the shims, summed as "shims")."""
    out = {p.name: p.rss_bytes() for p in cluster.procs if p.name in NODE_PROCS}
    shims = 0
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        with contextlib.suppress(OSError):
            argv = (proc / "cmdline").read_bytes().split(b"\0")
            if argv[0].endswith(b"containerd-shim-runc-v2") and str(host.SOCKET).encode() in argv:
                for line in (proc / "status").read_text().splitlines():
                    if line.startswith("VmRSS:"):
                        shims += int(line.split()[1]) * 1024
    out["shims"] = shims
    return out


__all__ = ["NodeBusy", "NodeUnavailable", "RealNode", "apiserver_pki", "node_rss_bytes"]
