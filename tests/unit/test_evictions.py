"""status(), the failure count and the cache when Kubernetes takes a job's pods away (render/evictions.py):
a drain's eviction, preemption, a taint."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from reconcile.mpijob.cacheform import cache_form
from render import Config, events, failures, parse_mpijob, render, status
from tests.unit.render_helpers import NOW, conds, job, launcher, launcher_pod, names_of, observed, ts, worker
from tests.unit.test_node_status import node, on

CFG = Config()


def evicted(pod: dict, reason: str = "EvictionByEvictionAPI") -> dict:
    """The pod as the Eviction API leaves it: marked DisruptionTarget, being deleted, then Failed."""
    pod["metadata"]["deletionTimestamp"] = ts(5)
    pod["status"] = {
        "phase": "Failed",
        "conditions": [{"type": "DisruptionTarget", "status": "True", "reason": reason}],
    }
    return pod


def cordoned(name: str) -> dict:
    body = node(name)
    body["spec"] = {"unschedulable": True}
    return body


def world(*extra: dict, w1: dict | None = None, launcher_on: str = "node-a") -> list[dict[str, Any]]:
    return [
        on(worker(0), "node-a"),
        w1 if w1 is not None else on(worker(1), "node-b"),
        launcher(active=1),
        on(launcher_pod("x", "Running", ts(60)), launcher_on),
        node("node-a"),
        *extra,
    ]


def started() -> dict:
    j = job()
    j["status"] = status(j, observed(*world(node("node-b"))), CFG)
    assert conds(j["status"])["Running"]["status"] == "True"
    return j


def test_a_drained_worker_names_its_pod_its_node_and_that_the_node_is_cordoned():
    j = started()
    st = status(j, observed(*world(cordoned("node-b"), w1=evicted(on(worker(1), "node-b")))), CFG)
    c = conds(st)["Restarting"]
    assert (c["status"], c["reason"]) == ("True", "MPIJobEvicted")
    assert c["message"] == (
        "1/2 workers are evicted: pod pi-worker-1 from node node-b (EvictionByEvictionAPI, the node is"
        " cordoned). They are being replaced."
    )
    (e,) = events(j, j["status"], st)
    assert (e.type, e.reason, e.message) == ("Warning", "MPIJobEvicted", c["message"])


def test_an_evicted_launcher_is_said_too():
    j = started()
    pod = evicted(on(launcher_pod("x", "Running", ts(60)), "node-a"), "PreemptionByScheduler")
    objs = [o for o in world(node("node-b")) if o["metadata"]["name"] != "pi-launcher-x"] + [pod]
    st = status(j, observed(*objs), CFG)
    assert conds(st)["Restarting"]["message"] == (
        "the launcher is evicted: pod pi-launcher-x from node node-a (PreemptionByScheduler)."
        " They are being replaced."
    )


def test_the_eviction_stays_the_cause_while_the_launcher_restarts_for_it():
    j = started()
    j["status"] = status(j, observed(*world(cordoned("node-b"), w1=evicted(on(worker(1), "node-b")))), CFG)
    said = conds(j["status"])["Restarting"]
    # The worker is gone and replaced elsewhere (Pending); mpirun lost its rank: the Job retries it.
    later = [
        on(worker(0), "node-a"),
        on(worker(1, "Pending"), "node-c"),
        launcher(active=1, failed=1),
        on(launcher_pod("x", "Failed", ts(60)), "node-a"),
        on(launcher_pod("y", "Pending", ts(1)), "node-a"),
    ]
    st = status(j, observed(*later, now=NOW + timedelta(seconds=5)), CFG)
    assert conds(st)["Restarting"] == said
    assert events(j, j["status"], st) == []


def test_a_disrupted_worker_is_not_a_failure_and_its_replacement_is_not_held_back():
    j = job()
    gone = evicted(on(worker(1), "node-b"))
    obs = observed(on(worker(0), "node-a"), gone, launcher(active=1))
    assert failures.count(parse_mpijob(j), obs) == ()
    # the kubelet's own eviction (Failed, reason Evicted, not deleted) still counts, as any failure
    kubelet = worker(1, "Failed", reason="Evicted")
    (record,) = failures.count(parse_mpijob(j), observed(worker(0), kubelet, launcher(active=1)))
    assert record.count == 1
    # once the evicted pod is gone its replacement is created at once
    children = render(j, observed(on(worker(0), "node-a"), launcher(active=1)), CFG)
    assert "pi-worker-1" in names_of(children, "Pod")


def test_the_cache_keeps_who_takes_a_pod_away_and_whether_a_node_is_cordoned():
    pod = evicted(on(worker(1), "node-b"))
    pod["status"]["conditions"][0]["message"] = "Eviction API: evicting"
    kept = cache_form(pod, "v1", "Pod")
    assert kept["status"]["conditions"] == [
        {"type": "DisruptionTarget", "status": "True", "reason": "EvictionByEvictionAPI"}
    ]
    body = cordoned("node-b")
    body["status"]["nodeInfo"] = {"kubeletVersion": "v1.35.0"}
    assert cache_form(body, "v1", "Node")["spec"] == {"unschedulable": True}
