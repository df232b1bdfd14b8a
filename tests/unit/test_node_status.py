"""status() and events() when a node holding the job's pods is not Ready (render/nodes.py)."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from reconcile.mpijob.cacheform import cache_form
from render import Config, events, status
from tests.unit.render_helpers import NOW, conds, job, launcher, launcher_pod, observed, ts, worker

CFG = Config()


def node(name: str, ready: str = "True", reason: str = "", since: str = "", taints: Any = ()) -> dict:
    ready_cond = {"type": "Ready", "status": ready, "reason": reason, "lastTransitionTime": since or ts(20)}
    body: dict[str, Any] = {"apiVersion": "v1", "kind": "Node", "metadata": {"name": name}}
    body["status"] = {"conditions": [{"type": "MemoryPressure", "status": "False"}, ready_cond]}
    if taints:
        body["spec"] = {"taints": list(taints)}
    return body


def on(pod: dict, node_name: str) -> dict:
    pod.setdefault("spec", {})["nodeName"] = node_name
    return pod


def running(*nodes: dict, lost_worker: dict | None = None) -> list[dict]:
    """A running job: worker 0 and the launcher on node-a, worker 1 on node-b."""
    w1 = lost_worker if lost_worker is not None else on(worker(1), "node-b")
    return [
        on(worker(0), "node-a"),
        w1,
        launcher(active=1),
        on(launcher_pod("x", "Running", ts(60)), "node-a"),
        *nodes,
    ]


def started() -> dict:
    j = job()
    j["status"] = status(j, observed(*running(node("node-a"), node("node-b"))), CFG)
    assert conds(j["status"])["Running"]["status"] == "True"
    return j


LOST = node("node-b", "Unknown", "NodeStatusUnknown", since=ts(15))


def test_a_pod_on_a_node_that_stopped_reporting_names_the_node_the_pod_and_the_way_out():
    j = started()
    st = status(j, observed(*running(node("node-a"), LOST)), CFG)
    c = conds(st)["NodeUnavailable"]
    assert (c["status"], c["reason"]) == ("True", "NodeNotReady")
    assert c["message"] == (
        f"MPIJob ns/pi is held up: Node node-b is not reporting (Ready Unknown) since {ts(15)}"
        " (NodeStatusUnknown) and holds pod(s) pi-worker-1. They are replaced once the node is Ready again,"
        " or once it is removed (kubectl delete node node-b) or, if it is known to be off, tainted"
        " node.kubernetes.io/out-of-service=nodeshutdown:NoExecute."
    )
    assert st["conditions"][-1]["type"] == "Running"  # not a state: the state column is unchanged
    (e,) = events(j, j["status"], st)
    assert (e.type, e.reason, e.message) == ("Warning", "NodeNotReady", c["message"])


def test_the_condition_clears_when_the_node_is_ready_again_or_the_pod_moved():
    j = started()
    j["status"] = status(j, observed(*running(node("node-a"), LOST)), CFG)
    for world in (
        running(node("node-a"), node("node-b")),
        running(node("node-a"), LOST, lost_worker=on(worker(1), "node-c")),
    ):
        st = status(j, observed(*world, now=NOW + timedelta(seconds=30)), CFG)
        c = conds(st)["NodeUnavailable"]
        assert (c["status"], c["reason"]) == ("False", "NodesReady"), c
        (e,) = events(j, j["status"], st)
        assert (e.type, e.reason) == ("Normal", "NodesReady")


def test_only_unfinished_pods_on_nodes_given_and_not_ready_count():
    j = started()
    quiet = [
        running(node("node-a")),  # node-b not given: not judged
        running(node("node-a"), node("node-b", "True")),
        running(node("node-a"), LOST, lost_worker=on(worker(1, "Failed"), "node-b")),
        running(node("node-a"), node("node-b", "Unknown"), lost_worker=on(worker(1), "")),  # unbound
    ]
    for world in quiet:
        assert "NodeUnavailable" not in conds(status(j, observed(*world), CFG)), world


def test_the_launcher_pod_and_several_nodes_are_named():
    j = started()
    lost_a = node("node-a", "False", "KubeletNotReady", since=ts(40))
    c = conds(status(j, observed(*running(lost_a, LOST)), CFG))["NodeUnavailable"]
    assert "Node node-a is NotReady since" in c["message"] and "(KubeletNotReady)" in c["message"]
    assert "holds pod(s) pi-worker-0, pi-launcher-x." in c["message"]
    assert "Node node-b is not reporting" in c["message"]


def test_an_out_of_service_taint_is_said():
    j = started()
    taint = {"key": "node.kubernetes.io/out-of-service", "value": "nodeshutdown", "effect": "NoExecute"}
    tainted = node("node-b", "Unknown", "NodeStatusUnknown", taints=[taint])
    c = conds(status(j, observed(*running(node("node-a"), tainted)), CFG))["NodeUnavailable"]
    assert c["reason"] == "NodeOutOfService"
    assert "tainted node.kubernetes.io/out-of-service: its pods are being deleted" in c["message"]


def test_odd_node_bodies_from_a_file_do_not_break_status():
    j = started()
    for odd in ({"taints": 7}, {"taints": ["x", None]}):
        lost = {**LOST, "spec": odd}
        assert conds(status(j, observed(*running(node("node-a"), lost)), CFG))["NodeUnavailable"][
            "reason"
        ] == ("NodeNotReady")


def test_a_deadline_that_runs_out_while_a_node_is_lost_names_the_node():
    j = job(runPolicy={"activeDeadlineSeconds": 60})
    j["status"] = status(j, observed(*running(node("node-a"), node("node-b"))), CFG)
    j["status"] = status(j, observed(*running(node("node-a"), LOST)), CFG)
    late = NOW + timedelta(seconds=61)
    st = status(j, observed(*running(node("node-a"), LOST), now=late), CFG)
    failed = conds(st)["Failed"]
    assert failed["reason"] == "DeadlineExceeded"
    assert failed["message"].startswith("MPIJob ns/pi was active longer than specified deadline. Node node-b")
    assert "holds pod(s) pi-worker-1" in failed["message"]
    c = conds(st)["NodeUnavailable"]
    assert (c["status"], c["reason"]) == ("False", "MPIJobFinished")
    assert st["conditions"][-1]["type"] == "Failed"


def test_a_success_while_a_node_was_not_ready_leaves_no_condition_true():
    j = started()
    j["status"] = status(j, observed(*running(node("node-a"), LOST)), CFG)
    done = launcher(conditions=[{"type": "Complete", "status": "True"}], completionTime=ts())
    world = [on(worker(0), "node-a"), on(worker(1), "node-b"), done, node("node-a"), LOST]
    st = status(j, observed(*world), CFG)
    assert conds(st)["Succeeded"]["status"] == "True"
    assert conds(st)["NodeUnavailable"]["status"] == "False"


def test_a_launcher_failure_after_a_worker_was_killed_for_memory_says_so():
    oom = {"terminated": {"exitCode": 137, "reason": "OOMKilled", "finishedAt": ts(5), "startedAt": ts(50)}}
    failed_worker = worker(1, "Failed", containerStatuses=[{"name": "worker", "state": oom}])
    failed_job = launcher(conditions=[{"type": "Failed", "status": "True", "reason": "BackoffLimitExceeded"}])
    st = status(job(), observed(worker(0), failed_worker, failed_job), CFG)
    failed = conds(st)["Failed"]
    assert failed["reason"] == "BackoffLimitExceeded"
    assert failed["message"].endswith(
        "the last worker failure: pod pi-worker-1: container worker exited with code 137 (OOMKilled)"
    ), failed


def test_the_cache_keeps_the_pods_node():
    pod = on(worker(0), "node-a")
    pod["spec"]["containers"] = [{"name": "worker", "image": "x"}]
    assert cache_form(pod, "v1", "Pod")["spec"] == {"nodeName": "node-a"}


# -- --force-delete-lost-workers-after ------------------------------------------------------------------
FORCE = Config(force_delete_lost_workers_after=60)


def lost_since(seconds_ago: int) -> dict:
    return node("node-b", "Unknown", "NodeStatusUnknown", since=ts(seconds_ago))


def test_force_deletion_is_off_by_default_and_due_once_the_node_has_been_lost_that_long():
    from render import next_wakeup, parse_mpijob
    from render.nodes import force_deletions, next_force_deletion

    j = started()
    parsed = parse_mpijob(j)
    young = observed(*running(node("node-a"), lost_since(15)))
    old = observed(*running(node("node-a"), lost_since(90)))
    assert force_deletions(parsed, j["status"], old, CFG) == ()
    assert next_force_deletion(parsed, j["status"], old, CFG) is None
    assert force_deletions(parsed, j["status"], young, FORCE) == ()
    assert next_force_deletion(parsed, j["status"], young, FORCE) == NOW + timedelta(seconds=45)
    assert next_wakeup(j, j["status"], NOW, young, FORCE) == NOW + timedelta(seconds=45)
    (pod,) = force_deletions(parsed, j["status"], old, FORCE)
    assert pod["metadata"]["name"] == "pi-worker-1"  # the launcher's pod is the launcher Job's
    # a finished job's pods that cleanPodPolicy keeps stay; the ones being deleted go
    done = {**j["status"], "conditions": [{"type": "Succeeded", "status": "True"}]}
    assert force_deletions(parsed, done, old, FORCE) == ()
    going = on(worker(1), "node-b")
    going["metadata"]["deletionTimestamp"] = ts(5)
    gone = observed(*running(node("node-a"), lost_since(90), lost_worker=going))
    assert [p["metadata"]["name"] for p in force_deletions(parsed, done, gone, FORCE)] == ["pi-worker-1"]


def test_the_condition_says_when_the_workers_are_force_deleted():
    j = started()
    st = status(j, observed(*running(node("node-a"), lost_since(15))), FORCE)
    assert conds(st)["NodeUnavailable"]["message"].endswith(
        " Its worker pods are force-deleted 60 s after it stopped being Ready"
        " (--force-delete-lost-workers-after), then replaced elsewhere."
    )
