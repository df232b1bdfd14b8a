"""L4: a node lost or restarted in the middle of a run, and a worker killed for memory, on real nodes.

A lost node (power loss: `node kill`) is named on the MPIJob (condition NodeUnavailable and a Warning
event, with the pods it holds and what unblocks them) soon after it turns NotReady; its worker is not
deleted meanwhile; when the node returns the job recovers by itself and Succeeds. A kubelet restart
(`node stop`, `node start`) costs the job nothing. The controller-manager here marks a node NotReady 10 s
after its last heartbeat (`--node-monitor-grace-period=10s`; 50 s by default in Kubernetes 1.35)."""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator
from typing import Any

import pytest

from localcluster.e2e import condition_is, conditions, name_of, phase
from localcluster.kubectl import kubectl
from localcluster.nodes import node_ready
from localcluster.realnode import NodeE2E, node_job, set_mpirun_args
from localcluster.sandbox import seal
from localcluster.wait import wait_for
from render.names import LABEL_JOB_NAME, LABEL_JOB_ROLE, WORKER_FAILURES_ANNOTATION
from render.nodes import OUT_OF_SERVICE
from tests.node.support import NODES
from tests.utils import Polling

pytestmark = pytest.mark.l4

NAMED_WITHIN = 60.0  # seconds from NotReady to the condition on the MPIJob
RUN_SECONDS = 30  # each rank's run: long enough to lose a node in the middle of it


def sleeping_job(name: str = "pi", workers: int = 2, **kw: Any) -> dict[str, Any]:
    """Open MPI ranks, one worker per node (the launcher anywhere), each sleeping RUN_SECONDS before it
    prints its host. Two workers on three nodes leave a node for a replacement when one is lost."""
    body = node_job("openmpi", name, **kw)
    worker = body["spec"]["mpiReplicaSpecs"]["Worker"]
    worker["replicas"] = workers
    worker["template"]["spec"]["affinity"] = {
        "podAntiAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": [
                {
                    "labelSelector": {"matchLabels": {LABEL_JOB_NAME: name, LABEL_JOB_ROLE: "worker"}},
                    "topologyKey": "kubernetes.io/hostname",
                }
            ]
        }
    }
    set_mpirun_args(body, "-n", str(workers), "sh", "-c", f"sleep {RUN_SECONDS}; hostname")
    return body


def start_running(e2e: NodeE2E, name: str, **kw: Any) -> None:
    """Submit a sleeping job and wait until its ranks run."""
    e2e.submit(sleeping_job(name, **kw))
    e2e.wait_for(lambda: condition_is(e2e.get(name), "Running"), "Running", 180, name)
    time.sleep(3)  # mpirun has started the ranks


def worker_only_node(e2e: NodeE2E, name: str) -> tuple[str, dict[str, Any]]:
    """A node holding a worker of the job and not its launcher, and that worker."""
    launcher_nodes = {(p.get("spec") or {}).get("nodeName") for p in e2e.launcher_pods(name)}
    for pod in e2e.workers(name):
        node = pod["spec"].get("nodeName")
        if node and node not in launcher_nodes:
            return node, pod
    raise AssertionError(f"every worker shares the launcher's node\n{e2e.describe(name)}")


@pytest.fixture
def restore_nodes(node_e2e: NodeE2E) -> Iterator[None]:
    """Every node up and Ready after the test, whatever it did to them."""
    yield
    work = node_e2e.cluster.work_dir
    for state in seal.verb_at(work, "status"):
        if state["state"] != "up":
            seal.verb_at(work, "start", state["name"])
    for name in NODES:  # a deleted node registers again when its kubelet starts (404: not yet)
        body = wait_for(lambda n=name: node_e2e.node(n), f"{name} registered", 60)
        taints = body.get("spec", {}).get("taints") or []
        if any(t.get("key") == OUT_OF_SERVICE for t in taints):
            kubectl(node_e2e.cluster, "taint", "node", name, f"{OUT_OF_SERVICE}-")
        wait_for(lambda n=name: node_ready(node_e2e.node(n)), f"{name} Ready", 60)
        if body.get("spec", {}).get("unschedulable"):
            kubectl(node_e2e.cluster, "uncordon", name)


@pytest.fixture
def running_pi(node_e2e: NodeE2E, restore_nodes: None) -> str:
    """The job "pi" with its ranks running; the nodes restored after the test."""
    start_running(node_e2e, "pi")
    return "pi"


def warning_events(e2e: NodeE2E, name: str, reason: str) -> list[dict[str, Any]]:
    return [e for e in e2e.events(name) if e.get("type") == "Warning" and e.get("reason") == reason]


def lose_a_worker_node(e2e: NodeE2E, name: str) -> tuple[str, dict[str, Any], dict[str, Any], float]:
    """Kill a node holding a worker (not the launcher) of the running job; wait until the job names it.
    The node, its worker, the condition, and the seconds from NotReady to the condition."""
    target, victim = worker_only_node(e2e, name)
    seal.verb_at(e2e.cluster.work_dir, "kill", target)
    wait_for(lambda: not node_ready(e2e.node(target)), f"{target} NotReady", 40)
    not_ready = time.monotonic()

    def named() -> dict[str, Any] | None:
        c = conditions(e2e.get(name)).get("NodeUnavailable")
        return c if c is not None and c["status"] == "True" else None

    c = e2e.wait_for(named, "NodeUnavailable", NAMED_WITHIN, name)
    return target, victim, c, time.monotonic() - not_ready


RECOVERIES = {
    "the node returns": lambda e2e, node: seal.verb_at(e2e.cluster.work_dir, "start", node),
    "the node is deleted": lambda e2e, node: kubectl(e2e.cluster, "delete", "node", node),
    "the node is out of service": lambda e2e, node: kubectl(
        e2e.cluster, "taint", "node", node, f"{OUT_OF_SERVICE}=nodeshutdown:NoExecute"
    ),
}


@pytest.mark.parametrize("recovery", list(RECOVERIES))
def test_a_lost_node_is_named_on_the_job_and_the_job_recovers(
    node_e2e: NodeE2E, running_pi: str, recovery: str
) -> None:
    name = running_pi
    target, victim, c, took = lose_a_worker_node(node_e2e, name)
    assert c["reason"] == "NodeNotReady", c
    assert f"Node {target} is " in c["message"] and name_of(victim) in c["message"], c
    assert f"kubectl delete node {target}" in c["message"], c
    (event,) = warning_events(node_e2e, name, "NodeNotReady")
    assert event["message"] == c["message"]
    assert not condition_is(node_e2e.get(name), "Failed"), node_e2e.describe(name)

    # Not force-deleted: the pod may still run on a node that is only cut off.
    time.sleep(10)
    held = {name_of(p): p for p in node_e2e.workers(name)}[name_of(victim)]
    assert held["metadata"]["uid"] == victim["metadata"]["uid"], held["metadata"]
    assert not held["metadata"].get("deletionTimestamp"), held["metadata"]

    began = time.monotonic()
    RECOVERIES[recovery](node_e2e, target)
    job = node_e2e.wait_finished(name, 240)
    assert condition_is(job, "Succeeded"), node_e2e.describe(name)
    cleared = conditions(job)["NodeUnavailable"]
    assert cleared["status"] == "False", cleared
    print(
        f"\n[l4] {target} lost: named on the MPIJob {took:.1f} s after it turned NotReady; {recovery}:"
        f" Succeeded {time.monotonic() - began:.1f} s later, launcher restarts {node_e2e.restarts(name)}"
    )


def test_a_deadline_that_runs_out_while_a_node_is_lost_names_the_node(
    node_e2e: NodeE2E, restore_nodes: None
) -> None:
    name = "pi"
    start_running(node_e2e, name, run_policy={"activeDeadlineSeconds": 60})
    target, victim, _, _ = lose_a_worker_node(node_e2e, name)
    job = node_e2e.wait_finished(name, 120)
    failed = conditions(job).get("Failed")
    assert failed and failed["status"] == "True", node_e2e.describe(name)
    assert failed["reason"] == "DeadlineExceeded", failed
    assert f"Node {target} is " in failed["message"] and name_of(victim) in failed["message"], failed


def test_a_kubelet_restart_costs_the_job_nothing(node_e2e: NodeE2E, running_pi: str) -> None:
    name = running_pi
    target, _ = worker_only_node(node_e2e, name)
    uids = {name_of(p): p["metadata"]["uid"] for p in node_e2e.pods(name)}
    seal.verb_at(node_e2e.cluster.work_dir, "stop", target)
    wait_for(lambda: not node_ready(node_e2e.node(target)), f"{target} NotReady", 40)
    seal.verb_at(node_e2e.cluster.work_dir, "start", target)
    wait_for(lambda: node_ready(node_e2e.node(target)), f"{target} Ready again", 60)
    job = node_e2e.wait_finished(name, 240)
    assert condition_is(job, "Succeeded"), node_e2e.describe(name)
    assert node_e2e.restarts(name) == 0, node_e2e.describe(name)
    after = {name_of(p): p["metadata"]["uid"] for p in node_e2e.pods(name)}
    assert after == uids, (uids, after)
    assert not condition_is(job, "NodeUnavailable"), conditions(job)
    told = [e["message"] for e in warning_events(node_e2e, name, "NodeNotReady")]
    assert all(target in m for m in told), told


def test_a_worker_killed_for_memory_says_oomkilled_with_its_pod_and_container(node_e2e: NodeE2E) -> None:
    name = "pi"
    body = node_job("openmpi", name, run_policy={"backoffLimit": 1})
    worker = body["spec"]["mpiReplicaSpecs"]["Worker"]["template"]["spec"]["containers"][0]
    # Holds ever more memory (tail keeps a line without an end) until its limit ends it.
    worker.update(command=["sh", "-c", "head -c 1G /dev/zero | tail"], args=[])
    worker["resources"] = {"requests": {"memory": "32Mi"}, "limits": {"memory": "32Mi"}}
    node_e2e.submit(body)
    job = node_e2e.wait_finished(name, 240)
    failed = conditions(job).get("Failed")
    assert failed and failed["status"] == "True", node_e2e.describe(name)
    ended = [p for p in node_e2e.workers(name) if phase(p) == "Failed"]
    assert ended, node_e2e.describe(name)
    container = worker["name"]
    quoted = [f"pod {name_of(p)}: container {container} exited with code 137" for p in ended]
    said = [q for q in quoted if q in failed["message"]]
    assert said, failed
    assert "(OOMKilled)" in failed["message"], failed


class StateLog(Polling):
    """The MPIJob's state (its True Running, Restarting, Succeeded or Failed condition, with reason and
    message) each time it changes, polled in the background: Restarting lasts seconds."""

    def __init__(self, e2e: NodeE2E, name: str) -> None:
        self.seen: list[tuple[str, str, str]] = []
        super().__init__(lambda: self._poll(e2e, name))

    def _poll(self, e2e: NodeE2E, name: str) -> None:
        with contextlib.suppress(Exception):
            self.record(e2e.get(name))

    def record(self, job: dict[str, Any]) -> None:
        for ctype in ("Succeeded", "Failed", "Restarting", "Running"):
            c = conditions(job).get(ctype)
            if c is not None and c["status"] == "True":
                state = (ctype, c.get("reason", ""), c.get("message", ""))
                if not self.seen or self.seen[-1] != state:
                    self.seen.append(state)
                return


def launcher_node(e2e: NodeE2E, name: str) -> str:
    (pod,) = [p for p in e2e.launcher_pods(name) if phase(p) == "Running"]
    return str(pod["spec"]["nodeName"])


DRAINED = {
    "a worker's node": lambda e2e, name: worker_only_node(e2e, name)[0],
    "the launcher's node": launcher_node,
}


@pytest.mark.parametrize("drained", list(DRAINED))
def test_a_drained_node_s_pods_come_back_elsewhere_and_the_job_says_so(
    node_e2e: NodeE2E, running_pi: str, drained: str
) -> None:
    name = running_pi
    target = DRAINED[drained](node_e2e, name)
    held = {name_of(p): p["metadata"]["uid"] for p in node_e2e.pods(name) if p["spec"]["nodeName"] == target}
    began = time.monotonic()
    with StateLog(node_e2e, name) as states:
        kubectl(
            node_e2e.cluster,
            "drain",
            target,
            "--ignore-daemonsets",
            "--delete-emptydir-data",
            "--timeout=120s",
        )
        job = node_e2e.wait_finished(name, 240)
    states.record(job)  # the poll may have stopped before it saw the end
    seen = states.seen
    assert condition_is(job, "Succeeded"), node_e2e.describe(name)
    for pod in node_e2e.pods(name):
        assert pod["metadata"]["uid"] not in held.values(), pod["metadata"]
        assert pod["spec"].get("nodeName") != target, (name_of(pod), pod["spec"].get("nodeName"))
        # an eviction is no worker failure: no replacement carries a failure count
        assert WORKER_FAILURES_ANNOTATION not in (pod["metadata"].get("annotations") or {}), pod["metadata"]
    kinds = [s[0] for s in seen]
    restarting = [s for s in seen if s[0] == "Restarting"]
    assert restarting and restarting[0][1] == "MPIJobEvicted", seen
    assert kinds.index("Running", kinds.index("Restarting")) < kinds.index("Succeeded"), seen
    said = restarting[0][2]
    assert f"from node {target} (EvictionByEvictionAPI, the node is cordoned)" in said, said
    assert any(f"pod {pod} from node" in said for pod in held), (held, said)
    told = [e["message"] for e in warning_events(node_e2e, name, "MPIJobEvicted")]
    assert said in told, told
    limit = 6  # the launcher Job's default backoffLimit
    assert node_e2e.restarts(name) <= limit, node_e2e.describe(name)
    print(
        f"\n[l4] {drained} ({target}) drained: Succeeded {time.monotonic() - began:.1f} s later, launcher"
        f" restarts {node_e2e.restarts(name)}; states {[s[:2] for s in seen]}; said: {said}"
    )


FORCE_AFTER = 5  # seconds NotReady before the flag force-deletes the lost node's workers


def test_with_the_force_flag_a_lost_node_s_worker_is_replaced_elsewhere_while_the_node_is_down(
    node_e2e: NodeE2E, restore_nodes: None
) -> None:
    name = "pi"
    flags = (*node_e2e.operator.flags, f"--force-delete-lost-workers-after={FORCE_AFTER}")
    with node_e2e.operator.with_flags(*flags):
        start_running(node_e2e, name)
        target, victim, c, _ = lose_a_worker_node(node_e2e, name)
        assert "force-deleted 5 s after it stopped being Ready" in c["message"], c
        began = time.monotonic()

        def replaced() -> dict[str, Any] | None:
            pod = {name_of(p): p for p in node_e2e.workers(name)}.get(name_of(victim))
            return pod if pod is not None and pod["metadata"]["uid"] != victim["metadata"]["uid"] else None

        new = node_e2e.wait_for(replaced, f"{name_of(victim)} replaced", 60, name)
        job = node_e2e.wait_finished(name, 240)
        assert condition_is(job, "Succeeded"), node_e2e.describe(name)
        assert not node_ready(node_e2e.node(target)), "the node came back: the test proves nothing"
        assert new["spec"].get("nodeName") != target, new["spec"]
        told = [e["message"] for e in warning_events(node_e2e, name, "ForceDeleted")]
        assert told == [f"Force-deleted Pod {node_e2e.ns}/{name_of(victim)} (grace period 0)"], told
        print(
            f"\n[l4] {target} lost, --force-delete-lost-workers-after={FORCE_AFTER}: Succeeded"
            f" {time.monotonic() - began:.1f} s after the job named the node, with the node still down;"
            f" launcher restarts {node_e2e.restarts(name)}"
        )
