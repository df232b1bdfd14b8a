"""PID 1 of the sandbox: its own network, mount, UTS and PID namespaces, in the sandbox's cgroup.

Sets up the sandbox's network (a bridge for the nodes, the `kubernetes` Service address on loopback, no
route out), runs the control plane, CoreDNS, the API forwarder and the real nodes as its children, and
answers node verbs on a socket. When this process ends, the kernel ends everything in the sandbox.

Usage: python -m localcluster.sandbox.init WORK_DIR   (WORK_DIR/sandbox.json says the rest)
"""

from __future__ import annotations

import json
import os
import signal
import socketserver
import sys
import threading
import time
import traceback
from pathlib import Path
from typing import Any

from localcluster.sandbox import namespace
from localcluster.sandbox.layout import (
    BRIDGE,
    BRIDGE_IP,
    BRIDGE_MAC,
    BRIDGE_PREFIX,
    KUBERNETES_SERVICE_IP,
    NETWORK,
    Paths,
)


def network() -> None:
    namespace.ip("link", "set", "lo", "up")
    namespace.ip("addr", "add", f"{KUBERNETES_SERVICE_IP}/32", "dev", "lo")
    namespace.ip("link", "add", BRIDGE, "address", BRIDGE_MAC, "type", "bridge")
    namespace.ip("addr", "add", f"{BRIDGE_IP}/{BRIDGE_PREFIX}", "dev", BRIDGE)
    namespace.ip("link", "set", BRIDGE, "up")
    # Any address of the range that no node holds is dropped here, never sent anywhere.
    namespace.ip("route", "add", "blackhole", str(NETWORK))
    namespace.sysctl("net/ipv4/ip_forward", "1")


def serve_verbs(paths: Paths, nodes: Any) -> None:
    class Handler(socketserver.StreamRequestHandler):
        def handle(self) -> None:
            try:
                request = json.loads(self.rfile.readline())
                answer = {"ok": True, "result": nodes.verb(request["verb"], request.get("node"))}
            except Exception as exc:
                answer = {"ok": False, "error": f"{type(exc).__name__}: {exc}"}
            self.wfile.write(json.dumps(answer).encode() + b"\n")

    paths.control_socket.unlink(missing_ok=True)
    server = socketserver.ThreadingUnixStreamServer(str(paths.control_socket), Handler)
    threading.Thread(target=server.serve_forever, name="verbs", daemon=True).start()


def run(work_dir: Path) -> int:
    from localcluster.cluster import ClusterSpec, LocalCluster
    from localcluster.sandbox.node.fleet import RealNodes

    paths = Paths(work_dir)
    spec = json.loads(paths.spec.read_text())
    namespace.guard()
    namespace.seal_mounts()
    network()
    cluster = LocalCluster(
        ClusterSpec(
            tier="real",
            nodes=0,
            startup_timeout=spec["startup_timeout"],
            audit=spec["audit"],
            apiserver_args=tuple(spec["apiserver_args"]),
        ),
        work_dir=work_dir,
        keep_work_dir=True,
        sandboxed=True,
        apiserver_port=spec["port"],
    )
    cluster.start()
    target = f"tcp:127.0.0.1:{spec['port']}"
    cluster.spawn(
        "api-forwarder",
        [
            sys.executable, "-m", "localcluster.sandbox.relay",
            f"unix:{paths.api_socket}={target}",
            f"tcp:{KUBERNETES_SERVICE_IP}:443={target}",
        ],
    )  # fmt: skip
    nodes = RealNodes(
        cluster,
        count=spec["nodes"],
        archives={k: Path(v) for k, v in spec["archives"].items()},
        node_bin=Path(spec["node_bin"]),
        cgroup=spec["cgroup"],
        node_memory=spec["node_memory"],
    )
    nodes.start()
    serve_verbs(paths, nodes)
    paths.ready.write_text(json.dumps({"nodes": nodes.status()}) + "\n")
    while True:
        time.sleep(0.5)
        known = {p.pid for p in cluster.procs} | {p.pid for p in nodes.procs.values()}
        namespace.reap_orphans(known)
        dead = [p.name for p in cluster.procs if not p.alive()]
        if dead:
            print(f"sandbox: {', '.join(dead)} exited; the sandbox ends", file=sys.stderr, flush=True)
            return 1


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print(__doc__, file=sys.stderr)
        return 2
    # Ending is the point: the kernel ends every process of the sandbox with its PID 1.
    signal.signal(signal.SIGTERM, lambda *_: os._exit(0))
    paths = Paths(Path(argv[0]))
    try:
        return run(paths.work_dir)
    except Exception:
        paths.failed.write_text(traceback.format_exc())
        raise


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
