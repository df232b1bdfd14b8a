"""The golden cases' children as the L1 differ tests send them, and reading them back from the server.

Shared by ``test_differ_recorded`` and ``test_differ_removals`` (test modules import no test module).
"""

from __future__ import annotations

import copy
from typing import Any

from kubernetes.dynamic import DynamicClient
from kubernetes.dynamic.exceptions import NotFoundError

from localcluster.cluster import WORKLOAD_API
from reconcile.engine.differ import plan
from reconcile.engine.executor import ExecResult, execute
from reconcile.engine.plan import Plan
from reconcile.kubewriter import KubeWriter
from reconcile.mpijob.policy import FIELD_MANAGER, POLICY
from reconcile.runtime.kube import Kube
from render import Observed, ValidationError, render
from render.keys import load_ssh_key
from render.timeutil import parse_time
from tests.unit.golden_cases import KEY_FILE, cases, load_case


def renderable_cases() -> list[str]:
    """Golden cases with children the local cluster's API server can take: not the invalid one, nor those
    of a Workload API version other than the one it serves (those goldens follow the versions' Go types and
    are checked offline only)."""
    out = []
    for case in cases():
        workload_api = load_case(case)[2].workload_api
        if workload_api and workload_api != WORKLOAD_API:
            continue
        try:
            if desired_for(case, "ns"):
                out.append(case)
        except ValidationError:  # the invalid case renders nothing to create
            continue
    return out


def desired_for(case: str, namespace: str) -> list[dict[str, Any]]:
    mpijob, objects, config, now_text = load_case(case)
    mpijob = copy.deepcopy(mpijob)
    mpijob["metadata"]["namespace"] = namespace
    objects = copy.deepcopy(objects)
    for obj in objects:
        if obj.get("metadata", {}).get("namespace"):
            obj["metadata"]["namespace"] = namespace
    now = parse_time(now_text)
    observed = Observed.from_objects(objects, now=now, fresh_ssh_key=load_ssh_key(KEY_FILE.read_text()))
    return render(mpijob, observed, config)


def ensure_priority_classes(dyn: DynamicClient, desired: list[dict[str, Any]]) -> None:
    """PriorityClasses the children name must exist, or Priority admission rejects the pods."""
    wanted = set()
    for obj in desired:
        spec = obj.get("spec") or {}
        for pod_spec in (spec, (spec.get("template") or {}).get("spec") or {}):
            if pod_spec.get("priorityClassName"):
                wanted.add(pod_spec["priorityClassName"])
    classes = dyn.resources.get(api_version="scheduling.k8s.io/v1", kind="PriorityClass")
    for name in sorted(wanted):
        try:
            classes.get(name=name)
        except NotFoundError:
            classes.create(body={"metadata": {"name": name}, "value": 100})


def owner_of(desired: list[dict[str, Any]]) -> str:
    uids = {
        ref["uid"]
        for obj in desired
        for ref in obj["metadata"].get("ownerReferences", ())
        if ref.get("controller")
    }
    assert len(uids) == 1, uids
    return uids.pop()


def read_back(dyn: DynamicClient, desired: list[dict[str, Any]]) -> list[dict[str, Any]]:
    live = []
    for obj in desired:
        res = dyn.resources.get(api_version=obj["apiVersion"], kind=obj["kind"])
        live.append(res.get(name=obj["metadata"]["name"], namespace=obj["metadata"]["namespace"]).to_dict())
    return live


def get(dyn: DynamicClient, obj: dict[str, Any]) -> dict[str, Any]:
    return read_back(dyn, [obj])[0]


def children_of(case: str, namespace: str) -> tuple[list[dict[str, Any]], str]:
    """The golden case's children in `namespace`, and the UID of the MPIJob that owns them."""
    desired = desired_for(case, namespace)
    return desired, owner_of(desired)


def by_kind(objs: list[dict[str, Any]], kind: str) -> list[dict[str, Any]]:
    return [o for o in objs if o["kind"] == kind]


def plan_now(dyn: DynamicClient, desired: list[dict[str, Any]], owner: str) -> Plan:
    """The operator's plan for `desired` against what the server holds now."""
    return plan(desired, read_back(dyn, desired), POLICY, owner)


def execute_on(dyn: DynamicClient, step: Plan, **options: Any) -> ExecResult:
    """`step` executed as the operator does (its writer and field manager), with the test's client."""
    return execute(step, KubeWriter(Kube(dyn.client, qps=0)), FIELD_MANAGER, **options)
