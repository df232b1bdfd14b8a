"""The real tier's budgets: how long N real nodes take to be Ready from nothing, what their processes
hold in memory with one pod each, and what disk a node costs beyond the first.

Starts a sandboxed cluster (`RealCluster`, `--nodes` real nodes, default 3), warm caches assumed (the
images and the prepared image store; a first run imports the store once and says so), puts one sleeping
pod on each node, then prints:

  * nothing -> every node Ready, in seconds (the sandbox, control plane, CoreDNS, forwarder and nodes);
  * per node and summed: RSS of all of its processes (kubelet, containerd, shims, its pod's process),
    read from the node's cgroup;
  * disk: the first node's directory and each further node's, counted with `du` over the prepared store
    and the nodes in one call, so a hard-linked file counts once, where it first appears.

Printed, not asserted; `--repeat` starts the cluster that many times and prints each start. Needs root.

    .venv/bin/python benchmarks/real_nodes.py --nodes 3 --repeat 3
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from localcluster import ClusterSpec  # noqa: E402
from localcluster.images.build import image_names  # noqa: E402
from localcluster.nodes import sleeping_pod  # noqa: E402
from localcluster.sandbox import RealCluster, node_address  # noqa: E402
from localcluster.sandbox.layout import Paths  # noqa: E402
from localcluster.sandbox.node import store  # noqa: E402
from localcluster.sandbox.seal import node_rss_bytes  # noqa: E402
from reconcile.runtime.kube import POD, Kube  # noqa: E402

MiB = 2**20


def disk(cluster: RealCluster, names: list[str]) -> dict[str, int]:
    """Bytes per node directory, hard links counted once (the prepared stores first)."""
    dirs = [store.STORES, *(Paths(cluster.work_dir).node_dir(n) for n in names)]
    out = subprocess.run(["du", "-sb", *map(str, dirs)], capture_output=True, text=True, check=True).stdout
    sizes = [int(line.split()[0]) for line in out.splitlines()]
    return dict(zip(names, sizes[1:], strict=True))


def run_once(nodes: int, measure: bool) -> float:
    names = [node_address(i).name for i in range(1, nodes + 1)]
    began = time.monotonic()
    cluster = RealCluster(ClusterSpec(tier="real", nodes=0, real_nodes=nodes, startup_timeout=180))
    cluster.start()
    took = time.monotonic() - began
    try:
        print(f"{nodes} nodes Ready from nothing in {took:.1f}s", flush=True)
        if not measure:
            return took
        api = cluster.api_client()
        kube = Kube(api, qps=0)
        for name in names:
            kube.create(
                POD, "default", sleeping_pod(f"sleep-{name}", "default", name, image_names()["openmpi"])
            )
        deadline = time.monotonic() + 120
        while any(
            kube.get(POD, "default", f"sleep-{n}").get("status", {}).get("phase") != "Running" for n in names
        ):
            if time.monotonic() > deadline:
                raise SystemExit("the sleeping pods did not run within 120 s")
            time.sleep(0.2)
        time.sleep(2)  # the kubelets' first housekeeping after a pod start settles
        rss = node_rss_bytes(cluster.work_dir, names)
        for name in names:
            print(f"  {name}: RSS {rss[name] / MiB:.0f} MiB (all of its processes, one pod)")
        print(f"  {nodes} nodes together: {sum(rss.values()) / MiB:.0f} MiB")
        sizes = disk(cluster, names)
        for i, name in enumerate(names):
            label = "first node" if i == 0 else "beyond the first"
            print(f"  {name}: disk {sizes[name] / MiB:.1f} MiB ({label})")
        api.close()
    finally:
        cluster.stop()
    return took


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    parser.add_argument("--nodes", type=int, default=3)
    parser.add_argument("--repeat", type=int, default=1, help="cluster starts (the first one also measures)")
    args = parser.parse_args()
    times = [run_once(args.nodes, measure=i == 0) for i in range(args.repeat)]
    each = ", ".join(f"{t:.1f}" for t in times)
    print(f"Ready from nothing: median {statistics.median(times):.1f}s of {len(times)} ({each})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
