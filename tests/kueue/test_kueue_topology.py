"""Topology-aware scheduling on kwok racks (Topology "racks": levels rack, hostname; rack-<r>-0..3 with
4 cpu each and 3 cpu per pod, so one pod per node). Kueue admits the pod sets into one rack, gates our
pods with `kueue.x-k8s.io/topology` (the operator copies the gate from the templates Kueue changed) and
ungates each with its node by rank: the replica index, offset by one for workers when the launcher is a
worker too (`kueue.x-k8s.io/pod-index-offset`, added by Kueue's webhook)."""

from __future__ import annotations

import pytest

from tests.kueue.support import RACK, RACK_SIZE, KueueE2E, queued_job, rack_node, with_template_annotations

pytestmark = [pytest.mark.l2, pytest.mark.kueue]
REQUIRED = "kueue.x-k8s.io/podset-required-topology"
OFFSET = "kueue.x-k8s.io/pod-index-offset"
GATE = "kueue.x-k8s.io/topology"
INDEX = "training.kubeflow.org/replica-index"


def tas_job(run_launcher_as_worker: bool) -> dict:
    job = queued_job("pi", workers=3, cpu="3", runLauncherAsWorker=run_launcher_as_worker)
    for role in ("Launcher", "Worker"):
        job = with_template_annotations(job, role, {REQUIRED: RACK})
    return job


def placed(kq: KueueE2E) -> tuple[str, dict[str, str]]:
    """(launcher's node, worker index -> node), all in one rack."""
    launcher = kq.launcher_pods("pi")
    assert len(launcher) == 1
    workers = {p["metadata"]["labels"][INDEX]: p["spec"]["nodeName"] for p in kq.workers("pi")}
    nodes = [launcher[0]["spec"]["nodeName"], *workers.values()]
    racks = {n.rsplit("-", 1)[0] for n in nodes}
    assert len(racks) == 1 and len(set(nodes)) == len(nodes), nodes
    for pod in kq.pods("pi"):
        assert not pod["spec"].get("schedulingGates"), "Kueue ungated every pod"
    return launcher[0]["spec"]["nodeName"], workers


@pytest.mark.parametrize(
    "run_launcher_as_worker", [False, True], ids=["launcher-apart", "launcher-as-worker"]
)
def test_topology_aware_placement_puts_rank_i_on_the_ith_node_of_a_rack(
    kq: KueueE2E, run_launcher_as_worker: bool
) -> None:
    kq.queue([("tas", "32")])
    created = kq.submit(tas_job(run_launcher_as_worker))
    worker_meta = created["spec"]["mpiReplicaSpecs"]["Worker"]["template"]["metadata"]
    assert (worker_meta["annotations"].get(OFFSET) == "1") == run_launcher_as_worker, worker_meta

    wl = kq.wait_admitted("pi", "tas")
    assert all(a.get("topologyAssignment") for a in wl["status"]["admission"]["podSetAssignments"])
    job = kq.wait_running("pi")
    for role in ("Launcher", "Worker"):
        gates = job["spec"]["mpiReplicaSpecs"][role]["template"]["spec"].get("schedulingGates") or []
        assert {"name": GATE} in gates, role

    launcher_node, workers = placed(kq)
    rack = launcher_node.rsplit("-", 1)[0]
    rack_nodes = [rack_node(int(rack.split("-")[1]), i) for i in range(RACK_SIZE)]
    if run_launcher_as_worker:
        # rank 0 is the launcher, rank r = worker index label r (our labels start at 1 then).
        assert launcher_node == rack_nodes[0]
        assert workers == {str(r): rack_nodes[r] for r in (1, 2, 3)}, workers
    else:
        # Workers in index order on the rack's nodes in order; the launcher, its own pod set, on another.
        rest = [n for n in rack_nodes if n != launcher_node]
        assert workers == {str(i): rest[i] for i in range(3)}, workers

    kq.release_launcher("pi")
    kq.wait_condition("pi", "Succeeded")
    kq.wait_workload("pi", "Finished")
