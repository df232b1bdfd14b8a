"""L4: several real nodes. MPI ranks on distinct nodes, and the fault verbs (`node stop`, `node kill`,
`node start`) ending exactly what they should: the kubelet, or every process of one node and nothing
else (the machine itself is checked by the session's machine_unchanged fixture)."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from localcluster import LocalCluster
from localcluster.e2e import condition_is, name_of
from localcluster.images.build import image_names
from localcluster.nodes import node_ready, sleeping_pod
from localcluster.processes import start_time
from localcluster.realnode import NodeE2E, node_job, pi_value, rank_hosts, set_mpirun_args
from localcluster.sandbox import RealCluster, cgroups, seal
from localcluster.wait import wait_for
from reconcile.runtime.kube import POD
from render.names import LABEL_JOB_ROLE
from tests.node.support import NODES, REAL_NODES, processes_named

pytestmark = pytest.mark.l4

SETTLED = 3.0  # seconds: processes younger than this may be short-lived helpers (probes, mounts)


def _ticks_per_second() -> int:
    return os.sysconf("SC_CLK_TCK")


def _uptime_ticks() -> float:
    return float(Path("/proc/uptime").read_text().split()[0]) * _ticks_per_second()


def settled_processes(cluster: LocalCluster) -> dict[str, set[tuple[int, int]]]:
    """(pid, start time) of every process of each node and of the rest of the sandbox that has run for
    a few seconds, as the machine sees them (from the cgroups the tier made)."""
    now = _uptime_ticks()

    def settled(pids: set[int]) -> set[tuple[int, int]]:
        out = set()
        for pid in pids:
            started = start_time(pid)
            if started is not None and now - started > SETTLED * _ticks_per_second():
                out.add((pid, started))
        return out

    groups = {name: settled(seal.sandbox_pids(cluster.work_dir, name)) for name in NODES}
    in_nodes = set().union(*groups.values())
    groups["control plane"] = settled(seal.sandbox_pids(cluster.work_dir)) - in_nodes
    return groups


def alive(entry: tuple[int, int]) -> bool:
    return start_time(entry[0]) == entry[1]


def internal_ip(body: dict[str, Any]) -> str:
    return next(a["address"] for a in body["status"]["addresses"] if a["type"] == "InternalIP")


def sleeper(e2e: NodeE2E, name: str, node_name: str) -> dict[str, Any]:
    """A pod that only sleeps, on `node_name`, Running."""
    e2e.kube.create(POD, e2e.ns, sleeping_pod(name, e2e.ns, node_name, image_names()["openmpi"]))

    def running() -> dict[str, Any] | None:
        pod = e2e.kube.get(POD, e2e.ns, name)
        return pod if pod.get("status", {}).get("phase") == "Running" else None

    return dict(wait_for(running, f"pod {name} Running on {node_name}", 60))


def test_nodes_are_ready_with_their_own_addresses(node_e2e: NodeE2E) -> None:
    bodies = [node_e2e.node(name) for name in NODES]
    assert all(node_ready(b) for b in bodies)
    assert [internal_ip(b) for b in bodies] == [f"10.77.0.{10 + i}" for i in range(1, REAL_NODES + 1)]
    assert all(b["metadata"]["labels"].get("node.mpijob.dev/real") == "true" for b in bodies)
    states = seal.verb_at(node_e2e.cluster.work_dir, "status")
    assert [(s["name"], s["state"]) for s in states] == [(n, "up") for n in NODES]


def one_worker_per_node(impl: str) -> dict[str, Any]:
    """pi with a worker on each real node (cleanPodPolicy None: the workers stay, to show where they ran)."""
    body = node_job(impl, workers=REAL_NODES, run_policy={"cleanPodPolicy": "None"})
    worker = body["spec"]["mpiReplicaSpecs"]["Worker"]["template"]["spec"]
    worker["affinity"] = {
        "podAntiAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": [
                {
                    "labelSelector": {"matchLabels": {LABEL_JOB_ROLE: "worker"}},
                    "topologyKey": "kubernetes.io/hostname",
                }
            ]
        }
    }
    set_mpirun_args(body, "-n", str(REAL_NODES), "/home/mpiuser/pi")
    return body


def assert_one_rank_per_node(node_e2e: NodeE2E, job: dict[str, Any], log: str) -> None:
    assert condition_is(job, "Succeeded"), node_e2e.describe("pi")
    # Each rank's own report of where it ran, and the pods' nodes: one rank per node.
    assert rank_hosts(log) == {i: f"pi-worker-{i}" for i in range(REAL_NODES)}, log
    value = pi_value(log)
    assert value is not None and abs(value - 3.14159) < 0.01, log
    placed = {name_of(p): p["spec"]["nodeName"] for p in node_e2e.workers("pi")}
    assert sorted(placed.values()) == NODES, placed


@pytest.mark.parametrize("impl", ["openmpi", "mpich", "intel"])
def test_ranks_run_on_distinct_nodes(node_e2e: NodeE2E, impl: str) -> None:
    job, log = node_e2e.run(one_worker_per_node(impl))
    assert_one_rank_per_node(node_e2e, job, log)


@pytest.mark.gang
def test_pi_runs_under_a_gang_on_the_real_nodes(node_e2e: NodeE2E) -> None:
    """--gang-scheduling=kubernetes: the real kube-scheduler places the workers as one gang through the
    Workload API (every worker carries the reference), and the ranks run across the nodes."""
    with node_e2e.operator.with_flags("--gang-scheduling=kubernetes"):
        job, log = node_e2e.run(one_worker_per_node("openmpi"))
    assert_one_rank_per_node(node_e2e, job, log)
    refs = [p["spec"].get("workloadRef") for p in node_e2e.workers("pi")]
    assert refs == [{"name": "pi", "podGroup": "workers"}] * REAL_NODES, refs
    assert "GangScheduled" not in {c["type"] for c in job["status"]["conditions"]}  # placed at once


def test_node_kill_ends_that_node_only_and_it_comes_back(node_e2e: NodeE2E) -> None:
    cluster, target = node_e2e.cluster, NODES[-1]
    sleeper(node_e2e, "victim", target)
    address = internal_ip(node_e2e.node(target))
    before = settled_processes(cluster)
    assert len(before[target]) >= 4, before  # supervisor, containerd, kubelet, shim, the pod's processes
    began = time.monotonic()
    seal.verb_at(cluster.work_dir, "kill", target)
    wait_for(lambda: not any(alive(e) for e in before[target]), f"every process of {target} gone", 10)
    took = time.monotonic() - began
    hit = {group: sorted(e for e in entries if not alive(e)) for group, entries in before.items()}
    del hit[target]
    assert not any(hit.values()), f"the kill of {target} reached processes outside it: {hit}"
    assert not seal.sandbox_pids(cluster.work_dir, target)
    assert {s["name"]: s["state"] for s in seal.verb_at(cluster.work_dir, "status")}[target] == "down"
    wait_for(lambda: not node_ready(node_e2e.node(target)), f"{target} NotReady", 40)
    seal.verb_at(cluster.work_dir, "start", target)
    wait_for(lambda: node_ready(node_e2e.node(target)), f"{target} Ready again", 60)
    assert internal_ip(node_e2e.node(target)) == address
    print(f"[l4] {target} killed: all of its processes gone {took:.2f}s after the verb")


def test_node_stop_keeps_its_containers_running(node_e2e: NodeE2E) -> None:
    cluster, target = node_e2e.cluster, NODES[1]
    sleeper(node_e2e, "survivor", target)

    def processes(comm: str) -> set[tuple[int, int]]:
        return {(pid, start_time(pid) or 0) for pid in processes_named(cluster, comm, target)}

    sleeps, kubelets = processes("sleep"), processes("kubelet")
    assert sleeps and kubelets

    def verb(name: str) -> str:
        argv = [
            sys.executable,
            "-m",
            "localcluster",
            "node",
            name,
            target,
            "--state-dir",
            str(cluster.work_dir),
        ]
        done = subprocess.run(argv, capture_output=True, text=True, check=False, timeout=60)
        assert done.returncode == 0, done.stderr
        return done.stdout

    verb("stop")
    wait_for(lambda: not any(alive(e) for e in kubelets), "the kubelet gone", 30)
    assert {s["name"]: s["state"] for s in seal.verb_at(cluster.work_dir, "status")}[
        target
    ] == "kubelet-stopped"
    wait_for(lambda: not node_ready(node_e2e.node(target)), f"{target} NotReady", 40)
    assert all(alive(e) for e in sleeps), "the container ended with the kubelet"
    verb("start")
    wait_for(lambda: node_ready(node_e2e.node(target)), f"{target} Ready again", 60)
    pod = node_e2e.kube.get(POD, node_e2e.ns, "survivor")
    assert pod["status"]["containerStatuses"][0]["restartCount"] == 0, pod["status"]
    assert all(alive(e) for e in sleeps), "the container ended"


OWNER = """
import sys, time
from pathlib import Path
from localcluster import ClusterSpec
from localcluster.sandbox import RealCluster
cluster = RealCluster(ClusterSpec(tier="real", real_nodes=1, startup_timeout=180), work_dir=Path(sys.argv[1]))
cluster.start()
print("up", flush=True)
time.sleep(600)
"""


def test_the_sandbox_ends_with_its_owner(machine_unchanged: None, tmp_path: Path) -> None:
    """A test run that dies (SIGKILL: no teardown runs) leaves no process of its cluster behind."""
    work = tmp_path / "owned"
    owner = subprocess.Popen([sys.executable, "-c", OWNER, str(work)], stdout=subprocess.PIPE, text=True)
    try:
        assert owner.stdout is not None
        assert owner.stdout.readline().strip() == "up", "the owner's cluster did not start"
        assert len(seal.sandbox_pids(work)) > 5
        owner.kill()
        owner.wait()
        wait_for(lambda: not seal.sandbox_pids(work), "every process of the owner's sandbox gone", 15)
    finally:
        owner.kill()
        owner.wait()
        RealCluster(work_dir=work).stop()  # its cgroups and files: by then nothing of it runs
    assert not any(cgroups.hierarchies()[0].glob(seal.cgroup_name(work)))
