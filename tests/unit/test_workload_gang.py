"""--gang-scheduling=kubernetes: the Workload, the workers' references and the GangScheduled condition."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest

from reconcile.mpijob.workloadapi import served_workload_api
from reconcile.runtime.kube import ApiError
from render import Config, events, next_wakeup, render, status
from render.gang import GANG_SCHEDULED, REASON_SCHEDULED, REASON_UNAVAILABLE, REASON_UNSCHEDULABLE
from tests.unit.golden_cases import GOLDEN
from tests.unit.render_helpers import NOW, by_kind, job, launcher, observed, owner, run_cli, ts, worker

V1ALPHA1 = "scheduling.k8s.io/v1alpha1"
GANG = Config(gang_scheduling="kubernetes", workload_api=V1ALPHA1)
NO_API = Config(gang_scheduling="kubernetes")


def live_workload(min_count: int, created: str = ts(600), uid: str | None = None) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": "pi", "namespace": "ns", "creationTimestamp": created}
    meta["ownerReferences"] = owner() if uid is None else owner(uid=uid)
    return {
        "apiVersion": V1ALPHA1,
        "kind": "Workload",
        "metadata": meta,
        "spec": {"podGroups": [{"name": "workers", "policy": {"gang": {"minCount": min_count}}}]},
    }


def gang_worker(i: int, phase: str = "Running", node: str = "n1", **status: Any) -> dict[str, Any]:
    pod = worker(i, phase, **status)
    pod["metadata"]["creationTimestamp"] = ts(300)
    pod["spec"] = {"workloadRef": {"name": "pi", "podGroup": "workers"}}
    if node:
        pod["spec"]["nodeName"] = node
    return pod


def unschedulable(i: int, message: str) -> dict[str, Any]:
    c = {"type": "PodScheduled", "status": "False", "reason": "Unschedulable", "message": message}
    return gang_worker(i, "Pending", node="", conditions=[c])


def gang_condition(st: dict[str, Any]) -> dict[str, Any] | None:
    return next((c for c in st.get("conditions") or () if c["type"] == GANG_SCHEDULED), None)


def min_count(children: list[dict[str, Any]]) -> int:
    (wl,) = by_kind(children, "Workload")
    (group,) = wl["spec"]["podGroups"]
    assert group["name"] == "workers"
    return int(group["policy"]["gang"]["minCount"])


@pytest.mark.parametrize(
    ("workers", "min_available", "expected"),
    [(2, None, 2), (4, 3, 3), (4, 5, 4), (4, 9, 4), (3, 1, 1)],
)
def test_min_count_is_min_available_within_the_workers(workers, min_available, expected):
    j = job()
    j["spec"]["mpiReplicaSpecs"]["Worker"]["replicas"] = workers
    if min_available is not None:
        j["spec"]["runPolicy"] = {"schedulingPolicy": {"minAvailable": min_available}}
    assert min_count(render(j, observed(), GANG)) == expected


@pytest.mark.parametrize("policy", ["AtStartup", "WaitForWorkersReady"])
def test_only_workers_point_at_the_workload(policy):
    children = render(job(launcherCreationPolicy=policy), observed(gang_worker(0), gang_worker(1)), GANG)
    workers = by_kind(children, "Pod")
    assert [p["spec"]["workloadRef"] for p in workers] == [{"name": "pi", "podGroup": "workers"}] * 2
    assert all("schedulerName" not in p["spec"] for p in workers)
    for launcher_job in by_kind(children, "Job"):
        assert "workloadRef" not in launcher_job["spec"]["template"]["spec"]
    (wl,) = by_kind(children, "Workload")
    assert wl["metadata"]["ownerReferences"][0]["uid"] == job()["metadata"]["uid"]
    assert wl["spec"]["controllerRef"] == {"apiGroup": "kubeflow.org", "kind": "MPIJob", "name": "pi"}


def test_no_workers_no_workload_and_no_api_no_reference():
    j = job(runLauncherAsWorker=True)
    del j["spec"]["mpiReplicaSpecs"]["Worker"]
    assert by_kind(render(j, observed(), GANG), "Workload") == []
    children = render(job(), observed(), NO_API)
    assert by_kind(children, "Workload") == []
    assert all("workloadRef" not in p["spec"] for p in by_kind(children, "Pod"))


def test_an_outdated_workload_is_left_out_then_comes_back():
    pods = (gang_worker(0), gang_worker(1))
    assert by_kind(render(job(), observed(live_workload(4), *pods), GANG), "Workload") == []
    assert min_count(render(job(), observed(*pods), GANG)) == 2
    assert min_count(render(job(), observed(live_workload(2), *pods), GANG)) == 2
    # someone else's Workload under the name is not ours to replace: it is rendered (a conflict)
    assert min_count(render(job(), observed(live_workload(4, uid="other"), *pods), GANG)) == 2


def test_suspended_or_finished_job_has_no_workload():
    assert by_kind(render(job(runPolicy={"suspend": True}), observed(), GANG), "Workload") == []
    j = job()
    j["status"] = {"conditions": [{"type": "Succeeded", "status": "True", "reason": "MPIJobSucceeded"}]}
    assert by_kind(render(j, observed(live_workload(2)), GANG), "Workload") == []


def test_no_condition_when_the_gang_is_placed_at_once():
    st = status(job(), observed(live_workload(2), gang_worker(0), gang_worker(1), launcher()), GANG)
    assert gang_condition(st) is None


def test_unschedulable_gang_says_the_schedulers_words_then_placed():
    j = job()
    j["spec"]["mpiReplicaSpecs"]["Worker"]["replicas"] = 3
    why = "0/2 nodes are available: 2 Insufficient cpu."
    world = observed(live_workload(3), gang_worker(0, "Pending", node=""), unschedulable(1, why), launcher())
    st = status(j, world, GANG)
    c = gang_condition(st)
    assert c is not None and (c["status"], c["reason"]) == ("False", REASON_UNSCHEDULABLE)
    assert "pod pi-worker-1: " + why in c["message"] and "at least 3 of 3 workers" in c["message"]
    assert [(e.type, e.reason) for e in events(j, {}, st)][:1] == [("Warning", REASON_UNSCHEDULABLE)]

    j["status"] = st
    placed = observed(live_workload(3), gang_worker(0), gang_worker(1), gang_worker(2), launcher())
    after = status(j, placed, GANG)
    c = gang_condition(after)
    assert c is not None and (c["status"], c["reason"]) == ("True", REASON_SCHEDULED)
    assert ("Normal", REASON_SCHEDULED) in [(e.type, e.reason) for e in events(j, st, after)]


def test_no_workload_api_is_said_on_the_job():
    st = status(job(), observed(worker(0), worker(1), launcher()), NO_API)
    c = gang_condition(st)
    assert c is not None and (c["status"], c["reason"]) == ("False", REASON_UNAVAILABLE)
    assert "serves no Workload API" in c["message"]
    assert [e.type for e in events(job(), {}, st) if e.reason == REASON_UNAVAILABLE] == ["Warning"]


def test_a_dropped_reference_is_said_on_the_job():
    dropped = gang_worker(1)
    del dropped["spec"]["workloadRef"]
    st = status(job(), observed(live_workload(2), gang_worker(0), dropped, launcher()), GANG)
    c = gang_condition(st)
    assert c is not None and c["reason"] == REASON_UNAVAILABLE
    assert "dropped spec.workloadRef from pod pi-worker-1" in c["message"]
    # a worker created before the Workload (gang scheduling turned on later) proves nothing
    older = live_workload(2, created=ts(100))
    assert gang_condition(status(job(), observed(older, gang_worker(0), dropped, launcher()), GANG)) is None


class FakeKube:
    def __init__(self, answer: dict[str, Any] | ApiError) -> None:
        self.answer = answer

    def request(self, method: str, path: str) -> dict[str, Any]:
        assert (method, path) == ("GET", "/apis/scheduling.k8s.io")
        if isinstance(self.answer, ApiError):
            raise self.answer
        return self.answer


def group(*versions: str) -> dict[str, Any]:
    return {"kind": "APIGroup", "versions": [{"groupVersion": f"scheduling.k8s.io/{v}"} for v in versions]}


def test_discovery_picks_a_served_version_render_knows():
    assert served_workload_api(FakeKube(group("v1", "v1alpha1"))) == V1ALPHA1  # type: ignore[arg-type]
    assert served_workload_api(FakeKube(group("v1"))) == ""  # type: ignore[arg-type]
    assert served_workload_api(FakeKube(ApiError(404, "Not Found", ""))) == ""  # type: ignore[arg-type]
    with pytest.raises(ApiError):
        served_workload_api(FakeKube(ApiError(503, "Unavailable", "")))  # type: ignore[arg-type]


def test_render_cli_renders_the_workload_of_the_version_given():
    manifest = str(GOLDEN / "workload-gang" / "mpijob.yaml")
    code, out, _ = run_cli([manifest, "--gang-scheduling", "kubernetes"])  # the newest version render knows
    assert code == 0 and "apiVersion: scheduling.k8s.io/v1beta1\nkind: PodGroup" in out, out
    code, out, _ = run_cli([manifest, "--gang-scheduling", "kubernetes", "--workload-api", V1ALPHA1])
    assert code == 0 and f"apiVersion: {V1ALPHA1}\nkind: Workload" in out and "workloadRef" in out
    code, out, _ = run_cli([manifest, "--gang-scheduling", "kubernetes", "--workload-api", ""])
    assert code == 0 and "kind: Workload" not in out and "workloadRef" not in out
    code, _, err = run_cli(
        [manifest, "--gang-scheduling", "kubernetes", "--workload-api", "scheduling.k8s.io/v9"]
    )
    assert code == 2 and "--workload-api: Unsupported value" in err


V1ALPHA2 = "scheduling.k8s.io/v1alpha2"
V1BETA1 = "scheduling.k8s.io/v1beta1"


def live_pod_group(version: str, min_count: int, **status: Any) -> dict[str, Any]:
    return {
        "apiVersion": version,
        "kind": "PodGroup",
        "metadata": {"name": "pi", "namespace": "ns", "ownerReferences": owner()},
        "spec": {"schedulingPolicy": {"gang": {"minCount": min_count}}},
        "status": status,
    }


def live_template_workload(version: str, min_count: int) -> dict[str, Any]:
    policy = {"gang": {"minCount": min_count}}
    return {
        "apiVersion": version,
        "kind": "Workload",
        "metadata": {
            "name": "pi",
            "namespace": "ns",
            "ownerReferences": owner(),
            "creationTimestamp": ts(600),
        },
        "spec": {"podGroupTemplates": [{"name": "workers", "schedulingPolicy": policy}]},
    }


@pytest.mark.parametrize("version", [V1ALPHA2, V1BETA1])
def test_newer_versions_add_a_pod_group_the_workers_name(version):
    config = Config(gang_scheduling="kubernetes", workload_api=version)
    children = render(job(), observed(), config)
    assert [c["kind"] for c in children if c["apiVersion"] == version] == ["Workload", "PodGroup"]
    (pg,) = by_kind(children, "PodGroup")
    assert pg["spec"]["schedulingPolicy"] == {"gang": {"minCount": 2}}
    template_ref = {"workloadName": "pi", "podGroupTemplateName": "workers"}
    expected_ref = (
        {"podGroupTemplateRef": {"workload": template_ref}}
        if version == V1ALPHA2
        else {"workloadRef": {"workloadName": "pi", "templateName": "workers"}}
    )
    assert {k: v for k, v in pg["spec"].items() if k != "schedulingPolicy"} == expected_ref
    for pod in by_kind(children, "Pod"):
        assert pod["spec"]["schedulingGroup"] == {"podGroupName": "pi"} and "workloadRef" not in pod["spec"]


def test_v1alpha2_replaces_an_outdated_gang_and_v1beta1_patches_it():
    pods = (gang_worker(0), gang_worker(1))
    for version, kept in ((V1ALPHA2, []), (V1BETA1, ["Workload", "PodGroup"])):
        config = Config(gang_scheduling="kubernetes", workload_api=version)
        world = observed(live_template_workload(version, 4), live_pod_group(version, 4), *pods)
        children = render(job(), world, config)
        assert [c["kind"] for c in children if c["apiVersion"] == version] == kept, version
        current = observed(live_template_workload(version, 2), live_pod_group(version, 2), *pods)
        assert len([c for c in render(job(), current, config) if c["apiVersion"] == version]) == 2


def test_the_pod_groups_own_words_come_first():
    config = Config(gang_scheduling="kubernetes", workload_api=V1BETA1)
    said = {"type": "PodGroupInitiallyScheduled", "status": "False", "reason": "Unschedulable"}
    said["message"] = "0/2 nodes are available for the gang: 2 Insufficient cpu."
    pending = [gang_worker(i, "Pending", node="") for i in range(2)]
    for p in pending:
        p["spec"] = {"schedulingGroup": {"podGroupName": "pi"}}
    world = observed(
        live_template_workload(V1BETA1, 2), live_pod_group(V1BETA1, 2, conditions=[said]), *pending
    )
    c = gang_condition(status(job(), world, config))
    assert c is not None and c["reason"] == REASON_UNSCHEDULABLE
    assert c["message"].endswith("PodGroup pi: 0/2 nodes are available for the gang: 2 Insufficient cpu.")
    # a worker without its schedulingGroup: dropped by the API server
    pending[1]["spec"] = {}
    c = gang_condition(status(job(), observed(live_template_workload(V1BETA1, 2), *pending), config))
    assert c is not None and c["reason"] == REASON_UNAVAILABLE and "spec.schedulingGroup" in c["message"]


def test_where_the_scheduler_is_silent_the_operator_speaks_after_a_while():
    j = job()
    j["spec"]["mpiReplicaSpecs"]["Worker"]["replicas"] = 3
    waiting = [gang_worker(i, "Pending", node="") for i in range(2)]  # the third could not be created
    for p in waiting:
        p["metadata"]["creationTimestamp"] = ts(5)
    world = observed(live_workload(3), *waiting, launcher())
    st = status(j, world, GANG)
    assert gang_condition(st) is None  # a job being created says nothing
    assert next_wakeup(j, st, NOW, world, GANG) == NOW + timedelta(seconds=5)
    later = observed(live_workload(3), *waiting, launcher(), now=NOW + timedelta(seconds=5))
    c = gang_condition(status(j, later, GANG))
    assert c is not None and (c["status"], c["reason"]) == ("False", REASON_UNSCHEDULABLE)
    assert c["message"].endswith(
        "only 2 of the 3 workers the gang needs exist, and the scheduler holds them until the rest do"
    )

    three = [*waiting, gang_worker(2, "Pending", node="")]
    three[2]["metadata"]["creationTimestamp"] = ts(5)
    no_workload = observed(*three, launcher(), now=NOW + timedelta(seconds=5))
    c = gang_condition(status(j, no_workload, GANG))
    assert c is not None and "Workload pi does not exist, and the scheduler holds the workers" in c["message"]
    # with every object and worker there, waiting without a word is the scheduler's business
    quiet = observed(live_workload(3), *three, now=NOW + timedelta(seconds=60))
    assert gang_condition(status(j, quiet, GANG)) is None
    assert next_wakeup(j, st, NOW, observed(live_workload(3), *three), GANG) is None
