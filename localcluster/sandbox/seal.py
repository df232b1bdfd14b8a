"""The machine's side of the sandbox: its cgroup, the one process that starts it, the relay that brings
the apiserver to the machine's loopback, and node verbs sent to the sandbox's supervisor.

Nothing here writes to the machine's network namespace; the sandbox is a child of this process (it dies
with it unless the cluster is detached) and stopping it is one signal."""

from __future__ import annotations

import hashlib
import json
import socket
import sys
import time
from pathlib import Path
from typing import Any

from localcluster.cluster import LocalCluster
from localcluster.processes import rss_of
from localcluster.sandbox import cgroups, namespace
from localcluster.sandbox.layout import Paths

GiB = 2**30
SANDBOX_MEMORY = 10 * GiB  # the session keeps the rest of the machine's memory
NODE_MEMORY = 3 * GiB
SANDBOX_PIDS = 8192


class VerbFailed(RuntimeError):
    """The sandbox refused or failed a node verb; the message is its answer."""


def cgroup_name(work_dir: Path) -> str:
    return cgroups.PREFIX + hashlib.sha256(str(work_dir.resolve()).encode()).hexdigest()[:12]


class RealCluster(LocalCluster):
    """Tier "real" as the machine holds it: the sandbox (control plane, CoreDNS and the real nodes run
    inside it) and the relay that serves its apiserver on this machine's loopback."""

    def _start_components(self) -> None:
        start(self, self.spec.real_nodes, self.spec.node_images)

    def stop(self, *, keep_logs: bool = False) -> None:
        for proc in reversed(self.procs):  # the relay, then the sandbox: its end ends all of it
            proc.stop()
        self.procs = []
        left = cgroups.remove(cgroup_name(self.work_dir))
        if left:
            print(f"localcluster: could not remove {', '.join(left)}", file=sys.stderr)
        super().stop(keep_logs=keep_logs)


def attach(work_dir: Path) -> LocalCluster:
    """The cluster recorded in a state dir (`up --detach`), as the class that stops it completely."""
    tier = LocalCluster.from_state(work_dir).spec.tier
    return (RealCluster if tier == "real" else LocalCluster).from_state(work_dir)


def start(cluster: LocalCluster, nodes: int, images: tuple[str, ...] | None) -> None:
    """Start the sandbox for `cluster` (tier real) and wait until its nodes are Ready; `cluster.server`
    then answers on the machine's loopback."""
    from localcluster.binaries import find_node_bin_dir
    from localcluster.images import build
    from localcluster.processes import free_port, http_ok
    from localcluster.sandbox.node.host import check_host

    check_host()
    node_bin = find_node_bin_dir()
    archives = build.build_images(images)
    for stale in cgroups.stale():
        cgroups.remove(stale, timeout=1)
    paths = Paths(cluster.work_dir)
    port = free_port()
    cgroup = cgroup_name(cluster.work_dir)
    spec = {
        "port": port,
        "nodes": nodes,
        "archives": {k: str(v) for k, v in archives.items()},
        "node_bin": str(node_bin),
        "cgroup": cgroup,
        "node_memory": NODE_MEMORY,
        "startup_timeout": cluster.spec.startup_timeout,
        "audit": cluster.spec.audit,
        "apiserver_args": list(cluster.spec.apiserver_args),
    }
    paths.spec.write_text(json.dumps(spec, indent=2) + "\n")
    paths.ready.unlink(missing_ok=True)
    paths.failed.unlink(missing_ok=True)
    cgroups.create(cgroup, memory_bytes=SANDBOX_MEMORY, pids=SANDBOX_PIDS)
    # The sandbox refuses any network change in the namespace it was started from (the machine's).
    forbid = f"export {namespace.FORBIDDEN_NETNS_ENV}={namespace.netns_inode()}"
    script = f'{forbid} && {cgroups.join_script(cgroup)} && exec "$@"'
    proc = cluster.spawn(
        "sandbox",
        [
            "sh", "-c", script, "sh",
            "unshare", "--net", "--mount", "--uts", "--pid", "--fork", "--mount-proc",
            "--propagation", "private", "--kill-child",
            sys.executable, "-m", "localcluster.sandbox.init", str(cluster.work_dir),
        ],
    )  # fmt: skip
    cluster.write_state()  # from here on `down` can end it
    deadline = time.monotonic() + cluster.spec.startup_timeout + 300  # + a first image import
    while not paths.ready.exists():
        if paths.failed.exists() or not proc.alive():
            time.sleep(0.2)
            why = paths.failed.read_text() if paths.failed.exists() else ""
            raise RuntimeError(f"the sandbox did not come up:\n{why or proc.log_tail(40)}")
        if time.monotonic() > deadline:
            raise RuntimeError(f"the sandbox did not come up in time:\n{proc.log_tail(40)}")
        time.sleep(0.1)
    cluster.ports["apiserver"] = port
    cluster.server = f"https://127.0.0.1:{port}"
    relay = cluster.spawn(
        "api-relay",
        [sys.executable, "-m", "localcluster.sandbox.relay", f"tcp:127.0.0.1:{port}=unix:{paths.api_socket}"],
    )
    ctx = cluster.admin_ssl()
    cluster.wait_for(
        relay, lambda: http_ok(f"{cluster.server}/readyz", ctx), "the apiserver through the relay"
    )


def verb_at(work_dir: Path, verb: str, node: str | None = None, timeout: float = 60.0) -> Any:
    """Send a node verb (start, stop, kill, status) to the sandbox of `work_dir`; its answer."""
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.settimeout(timeout)
    try:
        sock.connect(str(Paths(work_dir).control_socket))
        sock.sendall(json.dumps({"verb": verb, "node": node}).encode() + b"\n")
        answer = json.loads(sock.makefile("rb").readline())
    finally:
        sock.close()
    if not answer.get("ok"):
        raise VerbFailed(answer.get("error", "no answer"))
    return answer["result"]


def sandbox_pids(work_dir: Path, node: str | None = None) -> set[int]:
    """Machine PIDs of every process of the sandbox (or of one node): from the cgroups we made."""
    relative = cgroup_name(work_dir) + (f"/{node}" if node else "")
    return cgroups.pids(relative)


def memory_bytes(work_dir: Path) -> int:
    """What the whole sandbox holds in memory now (its memory cgroup's usage)."""
    return cgroups.memory_usage(cgroup_name(work_dir))


def node_rss_bytes(work_dir: Path, nodes: list[str]) -> dict[str, int]:
    """RSS of every process of each node (kubelet, containerd, shims, containers), summed per node."""
    return {name: sum(rss_of(pid) for pid in sandbox_pids(work_dir, name)) for name in nodes}
