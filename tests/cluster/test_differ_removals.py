"""L1: fields we rendered before and render no longer are removed from the live objects.

Each case: children created through the executor (a POST: our create-time ``Update`` managedFields
entry owns the field) or patched (server-side apply: the ``Apply`` entry owns it), desired changed to
drop the field, plan -> a patch with a removal, execute, read back -> gone, plan again -> empty.
"""

from __future__ import annotations

import copy
from collections import Counter
from typing import Any

import pytest
from kubernetes.dynamic import DynamicClient

from reconcile.engine.differ import plan
from reconcile.engine.plan import ObjectKey, Plan
from reconcile.mpijob.policy import POLICY
from tests.cluster.served import (
    by_kind,
    children_of,
    desired_for,
    ensure_priority_classes,
    execute_on,
    get,
    owner_of,
    plan_now,
)

pytestmark = pytest.mark.l1


def create_all(dyn: DynamicClient, desired: list[dict[str, Any]], owner: str) -> None:
    ensure_priority_classes(dyn, desired)
    result = execute_on(dyn, plan(desired, [], POLICY, owner))
    assert result.ok, result.failures


def run(dyn: DynamicClient, step: Plan) -> Counter[tuple[str, str, str]]:
    result = execute_on(dyn, step)
    assert result.ok, (result.failures, result.retry, result.replan)
    return result.request_counts()


def managers(obj: dict[str, Any]) -> set[tuple[str, str]]:
    return {(m["manager"], m["operation"]) for m in obj["metadata"]["managedFields"]}


@pytest.mark.usefixtures("podgroup_crds")
@pytest.mark.parametrize("case", ["volcano", "scheduler-plugins"])
def test_podgroup_min_resources_no_longer_rendered_is_removed(
    case: str, namespace: str, dyn: DynamicClient
) -> None:
    desired, owner = children_of(case, namespace)
    create_all(dyn, desired, owner)
    pg = by_kind(desired, "PodGroup")[0]
    min_resources = pg["spec"].pop("minResources")  # the user removed schedulingPolicy.minResources

    # Owned by our create (Update entry): only a removal patch, one request.
    step = plan_now(dyn, desired, owner)
    assert [str(p) for p in step.patches] == [f"patch {ObjectKey.of(pg)}: remove /spec/minResources"]
    assert step.patches[0].body is None and step.writes == 1
    assert run(dyn, step) == Counter({("patch", "PodGroup", "200"): 1})
    assert "minResources" not in get(dyn, pg)["spec"]
    assert not plan_now(dyn, desired, owner)

    # Rendered again: applied (Apply entry); removed again: the removal patch takes it from there too.
    pg["spec"]["minResources"] = min_resources
    step = plan_now(dyn, desired, owner)
    assert step.patches[0].body is not None and not step.patches[0].removal_patch
    assert run(dyn, step) == Counter({("apply", "PodGroup", "200"): 1})
    assert ("mpijob-operator", "Apply") in managers(get(dyn, pg))
    del pg["spec"]["minResources"]
    assert run(dyn, plan_now(dyn, desired, owner)) == Counter({("patch", "PodGroup", "200"): 1})
    assert "minResources" not in get(dyn, pg)["spec"]
    assert not plan_now(dyn, desired, owner)


def test_worker_template_label_and_annotation_no_longer_rendered_leave_the_pods(
    namespace: str, dyn: DynamicClient
) -> None:
    desired, owner = children_of("openmpi-pi", namespace)
    pods = by_kind(desired, "Pod")
    for pod in pods:  # as if the worker template carried them
        pod["metadata"]["labels"]["team"] = "a"
        pod["metadata"]["labels"]["example.com/tier"] = "gold"
        pod["metadata"].setdefault("annotations", {})["example.com/note"] = "x"
    create_all(dyn, desired, owner)

    for pod in pods:
        del pod["metadata"]["labels"]["example.com/tier"]
        del pod["metadata"]["annotations"]["example.com/note"]
    step = plan_now(dyn, desired, owner)
    assert {p.key.name for p in step.patches} == {p["metadata"]["name"] for p in pods}, str(step)
    for patch in step.patches:
        assert [op["path"] for op in patch.json_patch] == [
            "/metadata/labels/example.com~1tier",
            "/metadata/annotations/example.com~1note",
        ]
    assert run(dyn, step) == Counter({("patch", "Pod", "200"): len(pods)})
    for pod in pods:
        live = get(dyn, pod)
        assert "example.com/tier" not in live["metadata"]["labels"]
        assert live["metadata"]["labels"]["team"] == "a"
        assert "example.com/note" not in (live["metadata"].get("annotations") or {})
    assert not plan_now(dyn, desired, owner)

    # A label changed and another dropped in one sync: the removal patch, then the apply.
    pods[0]["metadata"]["labels"]["team"] = "b"
    pods[0]["metadata"]["labels"].pop("training.kubeflow.org/replica-index")
    step = plan_now(dyn, desired, owner)
    assert run(dyn, step) == Counter({("patch", "Pod", "200"): 1, ("apply", "Pod", "200"): 1})
    live = get(dyn, pods[0])
    assert live["metadata"]["labels"]["team"] == "b"
    assert "training.kubeflow.org/replica-index" not in live["metadata"]["labels"]
    assert not plan_now(dyn, desired, owner)


def test_scheduling_directives_no_longer_rendered_leave_a_suspended_job(
    namespace: str, dyn: DynamicClient
) -> None:
    desired, owner = children_of("suspended", namespace)
    job = by_kind(desired, "Job")[0]
    tmpl = job["spec"]["template"]
    # Kueue injected these into the MPIJob's launcher template on admission; render copies them.
    tmpl["spec"]["nodeSelector"] = {"zone": "a", "cloud.example.com/flavor": "spot"}
    tmpl["spec"]["tolerations"] = [{"key": "spot", "operator": "Exists", "effect": "NoSchedule"}]
    create_all(dyn, desired, owner)
    assert get(dyn, job)["spec"]["suspend"] is True

    # Kueue took them back (suspended again): a nodeSelector key and all tolerations go.
    del tmpl["spec"]["nodeSelector"]["cloud.example.com/flavor"]
    del tmpl["spec"]["tolerations"]
    step = plan_now(dyn, desired, owner)
    assert [str(p) for p in step.patches] == [
        f"patch {ObjectKey.of(job)}: remove /spec/template/spec/tolerations, "
        "remove /spec/template/spec/nodeSelector/cloud.example.com~1flavor"
    ]
    assert run(dyn, step) == Counter({("patch", "Job", "200"): 1})
    live = get(dyn, job)["spec"]["template"]["spec"]
    assert live["nodeSelector"] == {"zone": "a"} and "tolerations" not in live
    assert not plan_now(dyn, desired, owner)

    # Admitted again with other directives (applied), then one toleration and the nodeSelector dropped.
    tmpl["spec"]["nodeSelector"] = {"zone": "b", "cloud.example.com/flavor": "on-demand"}
    tmpl["spec"]["tolerations"] = [
        {"key": "spot", "operator": "Exists", "effect": "NoSchedule"},
        {"key": "gpu", "operator": "Exists", "effect": "NoSchedule"},
    ]
    assert run(dyn, plan_now(dyn, desired, owner)) == Counter({("apply", "Job", "200"): 1})
    del tmpl["spec"]["nodeSelector"]
    tmpl["spec"]["tolerations"] = tmpl["spec"]["tolerations"][1:]
    step = plan_now(dyn, desired, owner)
    # The atomic tolerations list is replaced by the apply; the nodeSelector goes by the removal.
    assert [op["op"] for op in step.patches[0].removal_patch] == ["test", "remove"]
    assert run(dyn, step) == Counter({("patch", "Job", "200"): 1, ("apply", "Job", "200"): 1})
    live = get(dyn, job)["spec"]["template"]["spec"]
    assert "nodeSelector" not in live
    assert live["tolerations"] == [{"key": "gpu", "operator": "Exists", "effect": "NoSchedule"}]
    assert not plan_now(dyn, desired, owner)

    # A key another manager owns too stays when we stop rendering it, as server-side apply would.
    tmpl["spec"]["nodeSelector"] = {"zone": "c"}
    assert run(dyn, plan_now(dyn, desired, owner)) == Counter({("apply", "Job", "200"): 1})
    jobs = dyn.resources.get(api_version="batch/v1", kind="Job")
    jobs.server_side_apply(
        body={
            "apiVersion": "batch/v1",
            "kind": "Job",
            "metadata": {"name": job["metadata"]["name"], "namespace": namespace},
            "spec": {"template": {"spec": {"nodeSelector": {"zone": "c"}}}},
        },
        name=job["metadata"]["name"],
        namespace=namespace,
        field_manager="kueue",
    )
    del tmpl["spec"]["nodeSelector"]
    assert not plan_now(dyn, desired, owner)
    assert get(dyn, job)["spec"]["template"]["spec"]["nodeSelector"] == {"zone": "c"}

    # Resumed: the template is immutable, so a label no longer rendered there is left alone.
    job["spec"]["suspend"] = False
    assert run(dyn, plan_now(dyn, desired, owner)) == Counter({("apply", "Job", "200"): 1})
    del tmpl["metadata"]["labels"]["training.kubeflow.org/job-role"]
    assert not plan_now(dyn, desired, owner)


def test_configmap_key_no_longer_rendered_is_removed_and_a_race_retries(
    namespace: str, dyn: DynamicClient
) -> None:
    desired, owner = children_of("openmpi-pi", namespace)
    cm = by_kind(desired, "ConfigMap")[0]
    cm["data"]["old-key"] = "1"
    create_all(dyn, desired, owner)
    del cm["data"]["old-key"]

    # Someone writes the object between our plan and our write: the resourceVersion test fails.
    step = plan_now(dyn, desired, owner)
    assert [str(p) for p in step.patches] == [f"patch {ObjectKey.of(cm)}: remove /data/old-key"]
    configmaps = dyn.resources.get(api_version="v1", kind="ConfigMap")
    configmaps.patch(
        name=cm["metadata"]["name"],
        namespace=namespace,
        body={"metadata": {"annotations": {"touched": "yes"}}},
        content_type="application/merge-patch+json",
    )
    raced = execute_on(dyn, step)
    assert raced.retry and not raced.failures and not raced.events
    assert raced.request_counts() == Counter({("patch", "ConfigMap", "422"): 1})
    assert "old-key" in get(dyn, cm)["data"]

    # Planned again from fresh data, it goes through.
    assert run(dyn, plan_now(dyn, desired, owner)) == Counter({("patch", "ConfigMap", "200"): 1})
    assert "old-key" not in get(dyn, cm)["data"]
    assert get(dyn, cm)["metadata"]["annotations"] == {"touched": "yes"}  # not ours: untouched
    assert not plan_now(dyn, desired, owner)


def test_dry_run_removal_persists_nothing(namespace: str, dyn: DynamicClient) -> None:
    desired = copy.deepcopy(desired_for("openmpi-pi", namespace))
    owner = owner_of(desired)
    create_all(dyn, desired, owner)
    cm = by_kind(desired, "ConfigMap")[0]
    key = sorted(cm["data"])[0]
    del cm["data"][key]
    result = execute_on(dyn, plan_now(dyn, desired, owner), dry_run=True)
    assert result.ok and key not in result.done[0].object["data"]
    assert key in get(dyn, cm)["data"]
