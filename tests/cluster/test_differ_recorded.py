"""L1: the differ and executor against a real kube-apiserver.

For every golden case, render's children are created with the executor (after a server-side dry run),
read back, and ``plan(desired, live)`` must be empty: the server's defaulting and canonicalisation never
look like drift. Patches (Pod labels, ConfigMap data, Job suspend and scheduling directives), deletes
with UID preconditions, conflicts and stale-cache creates are exercised against the same server.

``MPIJOB_RECORD_DIFFER=1`` also writes each case's desired and live objects to
``tests/unit/recorded/<case>.json``; ``tests/unit/test_differ_recorded.py`` replays them offline.
"""

from __future__ import annotations

import copy
import json
import os
from pathlib import Path
from typing import Any

import pytest
from kubernetes.dynamic import DynamicClient
from kubernetes.dynamic.exceptions import NotFoundError

from reconcile.engine.differ import plan
from reconcile.engine.executor import ERR_RESOURCE_EXISTS
from reconcile.engine.plan import Delete, ObjectKey, Plan
from reconcile.mpijob.policy import FIELD_MANAGER, POLICY
from tests.cluster.served import (
    by_kind,
    children_of,
    ensure_priority_classes,
    execute_on,
    get,
    plan_now,
    read_back,
    renderable_cases,
)

pytestmark = pytest.mark.l1

RECORDED = Path(__file__).resolve().parents[1] / "unit" / "recorded"
RECORD = os.environ.get("MPIJOB_RECORD_DIFFER", "") not in ("", "0")
RECORDED_NAMESPACE = "recorded"


def record(case: str, namespace: str, owner: str, desired: list[dict], live: list[dict]) -> None:
    live = copy.deepcopy(live)
    for obj in live:
        for entry in obj["metadata"].get("managedFields") or ():
            entry.pop("time", None)  # kept: the differ reads them to find removals; times are only noise
    text = json.dumps(
        {"case": case, "owner_uid": owner, "desired": desired, "live": live}, indent=1, sort_keys=True
    )
    RECORDED.mkdir(exist_ok=True)
    (RECORDED / f"{case}.json").write_text(text.replace(namespace, RECORDED_NAMESPACE) + "\n")


@pytest.mark.parametrize("case", renderable_cases())
def test_render_children_on_the_server_need_no_writes(
    case: str, namespace: str, dyn: DynamicClient, podgroup_crds: None
) -> None:
    desired, owner = children_of(case, namespace)
    ensure_priority_classes(dyn, desired)

    first = plan(desired, [], POLICY, owner)
    assert len(first.creates) == len(desired)
    dry = execute_on(dyn, first, dry_run=True)
    assert dry.ok, dry.failures
    assert all(o.result == "created" for o in dry.done)
    with pytest.raises(NotFoundError):
        get(dyn, desired[0])  # a dry run persists nothing

    done = execute_on(dyn, first)
    assert done.ok, done.failures
    assert {c for (_, _, c) in done.request_counts()} == {"201"}

    live = read_back(dyn, desired)
    again = plan(desired, live, POLICY, owner)
    assert not again, f"server defaulting looks like drift:\n{again}"
    # A converged cluster sees zero writes: executing the empty plan sends nothing.
    assert not execute_on(dyn, again).requests
    # The objects the server returned on create already plan empty too (read your writes).
    assert not plan(desired, [o.object for o in done.done], POLICY, owner)
    if RECORD:
        record(case, namespace, owner, desired, live)


def test_patches_deletes_and_conflicts_on_the_server(namespace: str, dyn: DynamicClient) -> None:
    desired, owner = children_of("openmpi-pi", namespace)
    assert execute_on(dyn, plan(desired, [], POLICY, owner)).ok

    # Pod: labels are patched (server-side apply), spec drift is ignored.
    desired = copy.deepcopy(desired)
    worker = by_kind(desired, "Pod")[0]
    worker["metadata"]["labels"]["extra"] = "yes"
    worker["spec"]["containers"][0]["image"] = "changed:latest"
    cm = by_kind(desired, "ConfigMap")[0]
    key = next(iter(cm["data"]))
    cm["data"][key] += "# changed\n"
    step = plan_now(dyn, desired, owner)
    assert {str(p.key) for p in step.patches} == {str(ObjectKey.of(worker)), str(ObjectKey.of(cm))}, str(step)
    result = execute_on(dyn, step)
    assert result.ok, result.failures
    live = read_back(dyn, desired)
    assert not plan(desired, live, POLICY, owner)
    live_worker = get(dyn, worker)
    assert live_worker["metadata"]["labels"]["extra"] == "yes"
    assert live_worker["spec"]["containers"][0]["image"] != "changed:latest"
    managers = {(m["manager"], m["operation"]) for m in live_worker["metadata"]["managedFields"]}
    assert ("mpijob-operator", "Apply") in managers and ("mpijob-operator", "Update") in managers

    # Delete: a worker no longer desired goes, with its UID as precondition.
    gone = by_kind(desired, "Pod")[-1]
    smaller = [o for o in desired if o is not gone]
    step = plan(smaller, read_back(dyn, desired), POLICY, owner)
    assert [str(d.key) for d in step.deletes] == [str(ObjectKey.of(gone))]
    stale_uid = step.deletes[0].uid
    assert execute_on(dyn, step).ok
    with pytest.raises(NotFoundError):
        get(dyn, gone)
    # ... and a delete whose UID no longer matches is refused (409) and reported as retryable.
    assert execute_on(dyn, plan([gone], [], POLICY, owner)).ok  # a successor with a new UID
    refused = execute_on(dyn, Plan(deletes=(Delete(ObjectKey.of(gone), "v1", stale_uid),)))
    assert refused.retry and [f.code for f in refused.failures] == ["409"]
    assert get(dyn, gone)["metadata"]["uid"] != stale_uid

    # A create planned from a stale cache meets AlreadyExists: re-plan, nothing overwritten.
    stale_create = execute_on(dyn, plan([cm], [], POLICY, owner))
    assert stale_create.replan and not stale_create.failures

    # Conflict: a foreign object with a wanted name is reported and left alone.
    foreign = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": "someone-elses", "namespace": namespace},
        "data": {"x": "1"},
    }
    dyn.resources.get(api_version="v1", kind="ConfigMap").create(body=foreign, namespace=namespace)
    wanted = copy.deepcopy(cm)
    wanted["metadata"]["name"] = "someone-elses"
    step = plan([wanted], [get(dyn, foreign)], POLICY, owner)
    assert len(step.conflicts) == 1 and step.writes == 0
    result = execute_on(dyn, step, owner_description="MPIJob")
    assert [e.reason for e in result.events] == [ERR_RESOURCE_EXISTS] and not result.requests
    assert get(dyn, foreign)["data"] == {"x": "1"}


def test_job_suspend_and_scheduling_directives_on_the_server(namespace: str, dyn: DynamicClient) -> None:
    desired, owner = children_of("suspended", namespace)
    assert execute_on(dyn, plan(desired, [], POLICY, owner)).ok
    job = by_kind(desired, "Job")[0]
    assert get(dyn, job)["spec"]["suspend"] is True

    # While suspended (and never started: L1 has no Job controller), scheduling directives may change.
    job = copy.deepcopy(job)
    tmpl = job["spec"]["template"]
    tmpl["spec"]["nodeSelector"] = {"zone": "b"}
    tmpl["spec"]["tolerations"] = [{"key": "gpu", "operator": "Exists", "effect": "NoSchedule"}]
    tmpl["metadata"].setdefault("annotations", {})["kueue.x-k8s.io/admitted"] = "true"
    step = plan([job], [get(dyn, job)], POLICY, owner)
    assert len(step.patches) == 1, str(step)
    assert execute_on(dyn, step).ok
    assert not plan([job], [get(dyn, job)], POLICY, owner)

    # Resume: only spec.suspend changes.
    job["spec"]["suspend"] = False
    step = plan([job], [get(dyn, job)], POLICY, owner)
    assert [op["path"] for op in step.patches[0].json_patch] == ["/spec/suspend"]
    result = execute_on(dyn, step)
    assert result.ok, result.failures
    assert get(dyn, job)["spec"]["suspend"] is False

    # Running: template drift is ignored; a metadata label is still patched, and the apply keeps the
    # (now immutable) template fields we applied while suspended, so the server accepts it.
    job["spec"]["template"]["spec"]["nodeSelector"] = {"zone": "c"}
    assert not plan([job], [get(dyn, job)], POLICY, owner)
    job["metadata"]["labels"]["phase"] = "running"
    step = plan([job], [get(dyn, job)], POLICY, owner)
    assert [op["path"] for op in step.patches[0].json_patch] == ["/metadata/labels/phase"]
    result = execute_on(dyn, step)
    assert result.ok, result.failures
    live = get(dyn, job)
    assert live["metadata"]["labels"]["phase"] == "running"
    assert live["spec"]["template"]["spec"]["nodeSelector"] == {"zone": "b"}


def set_start_time(dyn: DynamicClient, job: dict[str, Any], value: str | None) -> None:
    """What the Job controller does on start (L1 has none): ``status.startTime`` makes the template
    immutable even while suspended."""
    res = dyn.resources.get(api_version="batch/v1", kind="Job")
    res.status.patch(
        body={"status": {"startTime": value}},
        name=job["metadata"]["name"],
        namespace=job["metadata"]["namespace"],
        content_type="application/merge-patch+json",
    )


def test_evicted_job_is_suspended_without_touching_its_immutable_template(
    namespace: str, dyn: DynamicClient
) -> None:
    """Kueue's eviction: admitted with a nodeSelector and a toleration (applied while suspended), run,
    then suspended with both removed in one patch. The apply that suspends the launcher must keep what
    we applied to the template (immutable now) and must not take the Job controller's labels; the
    re-admission's nodeSelector is applied once the Job may change again."""
    desired, owner = children_of("suspended", namespace)
    assert execute_on(dyn, plan(desired, [], POLICY, owner)).ok
    job = copy.deepcopy(by_kind(desired, "Job")[0])
    tmpl = job["spec"]["template"]["spec"]
    admitted = copy.deepcopy(job)
    admitted["spec"]["suspend"] = False
    admitted["spec"]["template"]["spec"]["nodeSelector"] = {"zone": "b"}
    admitted["spec"]["template"]["spec"]["tolerations"] = [{"key": "gpu", "operator": "Exists"}]
    result = execute_on(dyn, plan([admitted], [get(dyn, job)], POLICY, owner))
    assert result.ok, result.failures
    set_start_time(dyn, job, "2026-01-01T00:00:00Z")

    evicted = copy.deepcopy(job)  # suspend: true, no nodeSelector, no toleration
    assert "nodeSelector" not in tmpl and "tolerations" not in tmpl
    step = plan([evicted], [get(dyn, job)], POLICY, owner)
    assert [op["path"] for op in step.patches[0].json_patch] == ["/spec/suspend"]
    result = execute_on(dyn, step)
    assert result.ok, result.failures  # before the fix: 422 spec.template ... field is immutable
    live = get(dyn, job)
    assert live["spec"]["suspend"] is True
    assert live["spec"]["template"]["spec"]["nodeSelector"] == {"zone": "b"}
    ours = [m for m in live["metadata"]["managedFields"] if m["manager"] == FIELD_MANAGER]
    applied = next(m["fieldsV1"] for m in ours if m["operation"] == "Apply")
    labels = applied["f:spec"]["f:template"]["f:metadata"]["f:labels"]
    job_controller = {
        "controller-uid",
        "job-name",
        "batch.kubernetes.io/controller-uid",
        "batch.kubernetes.io/job-name",
    }
    assert job_controller <= set(live["spec"]["template"]["metadata"]["labels"])
    assert not {f"f:{k}" for k in job_controller} & set(labels), "never owned: we did not render them"
    assert not plan([evicted], [live], POLICY, owner), "converged while the template is immutable"

    # Re-admission elsewhere, after startTime is cleared (the controller's resume path does that).
    set_start_time(dyn, job, None)
    moved = copy.deepcopy(admitted)
    moved["spec"]["template"]["spec"]["nodeSelector"] = {"zone": "c"}
    result = execute_on(dyn, plan([moved], [get(dyn, job)], POLICY, owner))
    assert result.ok, result.failures
    live = get(dyn, job)
    assert live["spec"]["suspend"] is False
    assert live["spec"]["template"]["spec"]["nodeSelector"] == {"zone": "c"}
    assert (
        live["spec"]["template"]["metadata"]["labels"]["batch.kubernetes.io/job-name"]
        == job["metadata"]["name"]
    )
    assert not plan([moved], [live], POLICY, owner)
