"""The operator's RBAC is exactly the requests its code makes.

The requests are read from the code: every ``kube.<verb>(RESOURCE, ...)`` call in reconcile/ (by AST),
the list and watch of every informer the controller builds (with and without gang scheduling), and the
create, patch and delete the executor sends for every kind of the controller's policy. The ClusterRole
must grant these and nothing else; the leader-election Role the Lease calls.
"""

from __future__ import annotations

import ast
from pathlib import Path
from typing import Any

import render
from reconcile.mpijob import kinds
from reconcile.mpijob.controller import Controller
from reconcile.mpijob.kinds import MPIJOB
from reconcile.mpijob.metrics import Metrics
from reconcile.mpijob.observe import wanted
from reconcile.mpijob.policy import POLICY
from reconcile.runtime import kube
from reconcile.runtime.events import EventRecorder
from render import names
from tests.unit.deploy_files import _grants, _objects, _one
from tests.unit.fakes import NoKube
from tools.manifests import DEPLOY

RECONCILE = Path(__file__).resolve().parents[2] / "reconcile"
VERBS = {
    "get": "get",
    "list": "list",
    "stream_lines": "watch",
    "create": "create",
    "replace": "update",
    "patch": "patch",
    "apply": "patch",
    "delete": "delete",
}
# the runtime's kinds and the operator's own (reconcile/mpijob/kinds.py), by the names the code uses
RESOURCES = {
    name: getattr(module, name)
    for module in (kube, kinds)
    for name in dir(module)
    if isinstance(getattr(module, name), kube.Resource)
}


def _key(res: kube.Resource, subresource: str = "") -> tuple[str, str]:
    return res.group, res.plural + (f"/{subresource}" if subresource else "")


def _controllers() -> list[Controller]:
    return [
        Controller(
            NoKube(),
            render.Config(gang_scheduling=g, workload_api=v),
            metrics=Metrics(),
            recorder=EventRecorder(NoKube()),
            watch_nodes=True,
        )
        for g, v in [
            ("", ""),
            ("volcano", ""),
            ("scheduler-plugins-scheduler", ""),
            *(("kubernetes", v) for v in names.WORKLOAD_API_VERSIONS),
        ]
    ]


# Run by users with their own credentials (mpijob plan), never by the operator's ServiceAccount.
USER_TOOLS = frozenset({"plan_command.py", "cli.py"})


def direct_calls() -> tuple[set[tuple[str, tuple[str, str]]], list[str]]:
    """(verb, (group, resource)) of every Kube call with a resource constant; and where a call's resource
    is a variable (each must be accounted for by the caller of this function)."""
    found: set[tuple[str, tuple[str, str]]] = set()
    variable: list[str] = []
    for path in sorted(RECONCILE.rglob("*.py")):
        if path.name in USER_TOOLS:
            continue
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for fn in ast.walk(tree):
            if not isinstance(fn, ast.FunctionDef):
                continue
            for node in ast.walk(fn):
                if _is_send(node):
                    assert isinstance(node, ast.Call)
                    verb, sub = (
                        node.args[1],
                        next((k.value for k in node.keywords if k.arg == "subresource"), None),
                    )
                    assert isinstance(verb, ast.Constant)
                    where = f"/{sub.value}" if isinstance(sub, ast.Constant) else ""
                    variable.append(f"{path.name}:{fn.name}:{verb.value}{where}")
                    continue
                if not (
                    isinstance(node, ast.Call)
                    and isinstance(node.func, ast.Attribute)
                    and node.func.attr in VERBS
                    and ast.unparse(node.func.value) in ("self.kube", "self._kube", "kube")
                    and node.args
                ):
                    continue
                arg = node.args[0]
                sub = next((k.value for k in node.keywords if k.arg == "subresource"), None)
                subresource = sub.value if isinstance(sub, ast.Constant) else ""
                if isinstance(arg, ast.Name) and arg.id in RESOURCES:
                    found.add((VERBS[node.func.attr], _key(RESOURCES[arg.id], subresource)))
                else:
                    variable.append(f"{path.name}:{fn.name}:{node.func.attr}")
    return found, variable


def _is_send(node: ast.AST) -> bool:
    """A write of an object a sync holds, through the Writer: ``self._write(target, verb, body, ...)``."""
    return (
        isinstance(node, ast.Call)
        and isinstance(node.func, ast.Attribute)
        and ast.unparse(node.func) == "self._write"
        and len(node.args) >= 2
    )


def used() -> dict[tuple[str, str], set[str]]:
    calls, variable = direct_calls()
    # observe.py gets a child holding a wanted name (and, for `mpijob plan` only, lists the child kinds
    # the informers list too); informer.py lists and watches its resource; leader.py watches the Lease.
    # The controller's writes of the objects a sync holds: the MPIJob's status and its deletion after the
    # TTL, and the launcher Job's startTime cleared on resume.
    assert sorted(set(variable)) == [
        "heldwrites.py:clear_start_time:merge-patch/status",
        "heldwrites.py:delete_expired:delete",
        "heldwrites.py:status:update/status",
        "informer.py:_list:list",
        "informer.py:_watch:stream_lines",
        "leader.py:_watch:stream_lines",
        "observe.py:_get:get",
        "observe.py:_list:list",
    ], variable
    out: dict[tuple[str, str], set[str]] = {}
    out.setdefault(_key(MPIJOB, "status"), set()).add("update")
    out.setdefault(_key(MPIJOB), set()).add("delete")
    out.setdefault(_key(kube.JOB, "status"), set()).add("patch")
    for verb, key in calls:
        out.setdefault(key, set()).add(verb)
    # leader.py: a standby watches the Lease (by name) to take it as soon as it is released
    out.setdefault(_key(kube.LEASE), set()).add("watch")
    for c in _controllers():
        for inf in c.informers:
            out.setdefault(_key(inf.resource), set()).update({"list", "watch"})
        for res, _name in wanted(_job(), c.config):
            out.setdefault(_key(res), set()).add("get")
    # the executor: POST creates, PATCH applies and removals, DELETE deletes, for every kind of the policy
    by_kind = {(r.group, r.kind): r for r in RESOURCES.values()}
    for (group, kind), kind_policy in POLICY.kinds.items():
        verbs = {"create", "patch", "delete"} if kind_policy.deletes else {"create", "patch"}
        out.setdefault(_key(by_kind[(group, kind)]), set()).update(verbs)
    return out


def _job() -> Any:
    from tests.unit.render_helpers import BASE

    return render.parse_mpijob(BASE)


def test_every_grant_is_a_request_the_code_makes_and_every_request_is_granted():
    requests = used()
    leases = {("coordination.k8s.io", "leases")}
    operator = {k: v for k, v in requests.items() if k not in leases}
    # not a request: children carry blockOwnerDeletion, which the OwnerReferencesPermissionEnforcement
    # admission plugin allows only to who may update the owner's finalizers
    assert _job().owner_reference()["blockOwnerDeletion"] is True
    operator[("kubeflow.org", "mpijobs/finalizers")] = {"update"}
    role = _one(_objects(DEPLOY), "ClusterRole", "mpi-operator")
    assert _grants(role["rules"]) == operator
    election = _one(_objects(DEPLOY), "Role", "mpi-operator-leader-election")
    assert _grants(election["rules"]) == {k: requests[k] for k in leases}


def test_the_verbs_the_issue_found_unused_are_gone():
    grants = _grants(_one(_objects(DEPLOY), "ClusterRole", "mpi-operator")["rules"])
    assert ("events.k8s.io", "events") not in grants
    assert ("apiextensions.k8s.io", "customresourcedefinitions") not in grants
    assert grants[("batch", "jobs/status")] == {"patch"}
    assert grants[("kubeflow.org", "mpijobs/status")] == {"update"}


def test_the_namespaced_role_is_the_cluster_role_without_cluster_scoped_resources():
    from tools.manifests import load_yaml_documents

    role, binding = load_yaml_documents(DEPLOY / "namespaced" / "watched" / "role" / "role.yaml")
    cluster = _grants(_one(_objects(DEPLOY), "ClusterRole", "mpi-operator")["rules"])
    assert role["kind"] == "Role" and "namespace" not in role["metadata"]
    cluster_scoped = ("priorityclasses", "nodes")
    assert _grants(role["rules"]) == {k: v for k, v in cluster.items() if k[1] not in cluster_scoped}
    assert binding["subjects"] == [
        {"kind": "ServiceAccount", "name": "mpi-operator", "namespace": "mpi-operator"}
    ]


def test_namespace_flag_lists_namespaces():
    from reconcile.main import namespaces_of

    assert namespaces_of("") == [""]
    assert namespaces_of("team-a") == ["team-a"]
    assert namespaces_of("team-a, team-b,") == ["team-a", "team-b"]


def test_one_controller_per_namespace_behind_one_face():
    from reconcile.main import Controllers

    cs = [
        Controller(
            NoKube(), render.Config(), metrics=Metrics(), recorder=EventRecorder(NoKube()), namespace=n
        )
        for n in ("team-a", "team-b")
    ]
    both = Controllers(cs)
    assert [c.namespace for c in both.controllers] == ["team-a", "team-b"]
    assert not both.has_synced()
    cs[1].mpijobs.store.upsert(
        {"kind": "MPIJob", "metadata": {"name": "x", "namespace": "team-b", "resourceVersion": "7"}}
    )
    cs[1].process("team-b/x")  # no spec: the sync fails, and still the version it acted on is kept
    assert both.synced_version("team-b/x") == "7" and both.synced_version("team-a/y") is None
