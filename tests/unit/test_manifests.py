"""L0 checks of deploy/: the CRD's structure, defaults and rules, RBAC, the Deployment and the kustomizations.

What needs an API server (admission, CEL evaluation, defaulting) is in tests/cluster/test_crd.py.
"""

from __future__ import annotations

import re
import tomllib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from reconcile import flags
from reconcile.mpijob import kinds
from reconcile.runtime import kube
from tests.unit.deploy_files import CRD_FILE, _grants, _objects, _one
from tools.crdgen.k8s_schema import Converter
from tools.manifests import DEPLOY, REPO, kustomization_files, load_yaml_documents

NAMESPACE = "mpi-operator"


# --------------------------------------------------------------------------------------------- loading
def _manifest_files() -> list[Path]:
    # deploy/local is the control plane, deploy/helm a chart of templates (tests/tools/test_helm.py)
    return sorted(
        p for p in DEPLOY.rglob("*.yaml") if p.relative_to(DEPLOY).parts[0] not in ("local", "helm")
    )


@pytest.fixture(scope="module")
def crd() -> dict[str, Any]:
    (doc,) = load_yaml_documents(CRD_FILE)
    return doc


@pytest.fixture(scope="module")
def schema(crd: dict[str, Any]) -> dict[str, Any]:
    (version,) = crd["spec"]["versions"]
    return version["schema"]["openAPIV3Schema"]


def _at(schema: dict[str, Any], path: str) -> dict[str, Any]:
    """Schema node at a dotted path; `*` steps into additionalProperties, `[]` into items."""
    node = schema
    for step in path.split("."):
        if step == "*":
            node = node["additionalProperties"]
        elif step == "[]":
            node = node["items"]
        else:
            node = node["properties"][step]
    return node


def _walk(node: dict[str, Any], path: str = "") -> Iterator[tuple[str, dict[str, Any]]]:
    yield path, node
    for name, child in node.get("properties", {}).items():
        yield from _walk(child, f"{path}.{name}")
    if isinstance(node.get("additionalProperties"), dict):
        yield from _walk(node["additionalProperties"], f"{path}.*")
    if "items" in node:
        yield from _walk(node["items"], f"{path}[]")


# ------------------------------------------------------------------------------------------- all YAML
def test_every_manifest_parses_into_named_objects():
    files = _manifest_files()
    assert len(files) >= 10
    for path in files:
        docs = load_yaml_documents(path)
        assert docs, f"{path} is empty"
        for doc in docs:
            assert doc.get("apiVersion") and doc.get("kind"), path
            if doc["kind"] != "Kustomization":
                assert doc["metadata"]["name"], path


def test_full_install_has_every_manifest_and_base_lacks_only_the_deployment():
    wanted = {
        p
        for p in _manifest_files()
        if p.name != "kustomization.yaml" and p.parent.name in ("crd", "rbac", "operator")
    }
    assert set(kustomization_files(DEPLOY)) == wanted

    full = {(o["kind"], o["metadata"]["name"]) for o in _objects(DEPLOY)}
    base = {(o["kind"], o["metadata"]["name"]) for o in _objects(DEPLOY / "base-no-operator")}
    assert full - base == {("Deployment", "mpi-operator")}
    assert {
        ("CustomResourceDefinition", "mpijobs.kubeflow.org"),
        ("Namespace", NAMESPACE),
        ("ServiceAccount", "mpi-operator"),
        ("ClusterRole", "mpi-operator"),
        ("ClusterRoleBinding", "mpi-operator"),
        ("Role", "mpi-operator-leader-election"),
        ("RoleBinding", "mpi-operator-leader-election"),
        ("ClusterRole", "kubeflow-mpijobs-view"),
        ("ClusterRole", "kubeflow-mpijobs-edit"),
        ("ClusterRole", "kubeflow-mpijobs-admin"),
    } <= base


def test_namespaced_objects_live_in_the_operator_namespace():
    cluster_scoped = {
        "CustomResourceDefinition",
        "Namespace",
        "ClusterRole",
        "ClusterRoleBinding",
        "FlowSchema",
    }
    for obj in _objects(DEPLOY):
        if obj["kind"] in cluster_scoped:
            assert "namespace" not in obj["metadata"], obj["metadata"]["name"]
        else:
            assert obj["metadata"]["namespace"] == NAMESPACE, (obj["kind"], obj["metadata"]["name"])


# ---------------------------------------------------------------------------------------------- CRD
def test_crd_identity(crd):
    spec = crd["spec"]
    assert crd["apiVersion"] == "apiextensions.k8s.io/v1"
    assert crd["metadata"]["name"] == "mpijobs.kubeflow.org"
    assert spec["group"] == "kubeflow.org"
    assert spec["scope"] == "Namespaced"
    assert spec["names"]["kind"] == "MPIJob"
    assert spec["names"]["plural"] == "mpijobs"
    assert spec["names"]["listKind"] == "MPIJobList"
    assert spec["names"]["shortNames"] == ["mpij"]  # our addition; upstream's CRD has none
    # In the `all` category, `kubectl delete all --all` would delete every MPIJob of the namespace.
    assert "categories" not in spec["names"]
    (version,) = spec["versions"]
    assert (version["name"], version["served"], version["storage"]) == ("v2beta1", True, True)
    assert version["subresources"] == {"status": {}}


# Keys of apiextensions.k8s.io/v1 JSONSchemaProps that a structural schema may use.
ALLOWED_SCHEMA_KEYS = {
    "description",
    "type",
    "format",
    "default",
    "enum",
    "minimum",
    "maximum",
    "exclusiveMinimum",
    "exclusiveMaximum",
    "multipleOf",
    "minLength",
    "maxLength",
    "pattern",
    "minItems",
    "maxItems",
    "minProperties",
    "maxProperties",
    "required",
    "items",
    "properties",
    "additionalProperties",
    "anyOf",
    "nullable",
    "x-kubernetes-preserve-unknown-fields",
    "x-kubernetes-int-or-string",
    "x-kubernetes-embedded-resource",
    "x-kubernetes-list-type",
    "x-kubernetes-list-map-keys",
    "x-kubernetes-map-type",
    "x-kubernetes-validations",
}
SCALAR_TYPES = {"string", "integer", "number", "boolean"}


def test_crd_schema_is_structural(schema):
    nodes = list(_walk(schema))
    assert len(nodes) > 1000, "the pod template should be embedded in full"
    for path, node in nodes:
        unknown = set(node) - ALLOWED_SCHEMA_KEYS
        assert not unknown, f"{path}: keys a CRD schema cannot carry: {unknown}"
        if node.get("x-kubernetes-int-or-string"):
            assert "type" not in node, path
            assert node.get("anyOf") == [{"type": "integer"}, {"type": "string"}], path
            continue
        assert "anyOf" not in node, f"{path}: anyOf only for int-or-string"
        if not node.get("x-kubernetes-preserve-unknown-fields"):
            assert node.get("type") in SCALAR_TYPES | {"object", "array"}, f"{path}: no type"
        if node.get("type") == "object":
            assert not ("properties" in node and "additionalProperties" in node), path
        if node.get("type") == "array":
            assert "items" in node, path
        for name in node.get("required", []):
            assert name in node.get("properties", {}), f"{path}: required {name} is not a property"


def test_crd_list_types_are_valid(schema):
    maps = 0
    for path, node in _walk(schema):
        list_type = node.get("x-kubernetes-list-type")
        if list_type is None:
            assert "x-kubernetes-list-map-keys" not in node, path
            continue
        assert node["type"] == "array", path
        assert list_type in ("atomic", "set", "map"), path
        items = node["items"]
        if list_type == "set":
            assert items.get("type") in SCALAR_TYPES, f"{path}: a set needs scalar items"
        if list_type == "map":
            maps += 1
            assert items["type"] == "object", path
            for key in node["x-kubernetes-list-map-keys"]:
                # The API server refuses list-map keys that are neither required nor defaulted.
                assert key in items["properties"], f"{path}: map key {key} missing"
                assert key in items.get("required", []) or "default" in items["properties"][key], (
                    f"{path}: map key {key} neither required nor defaulted"
                )
    assert maps >= 10  # containers, env, ports, volumes, volumeMounts, ..., and our conditions


def _valid_for(node: dict[str, Any], value: object) -> bool:
    if "enum" in node and value not in node["enum"]:
        return False
    kind = node.get("type")
    checks = {
        "string": lambda v: isinstance(v, str),
        "integer": lambda v: isinstance(v, int) and not isinstance(v, bool),
        "boolean": lambda v: isinstance(v, bool),
        "object": lambda v: isinstance(v, dict),
        "array": lambda v: isinstance(v, list),
    }
    return kind is None or checks.get(kind, lambda v: True)(value)


def test_crd_defaults_fit_their_schema(schema):
    defaults = [(path, node) for path, node in _walk(schema) if "default" in node]
    assert defaults
    for path, node in defaults:
        assert _valid_for(node, node["default"]), f"{path}: default {node['default']!r} does not fit"
        if isinstance(node["default"], str) and "pattern" in node:
            assert re.search(node["pattern"], node["default"]), path


def test_template_metadata_is_the_embedded_subset(schema):
    meta = _at(schema, "spec.mpiReplicaSpecs.*.template.metadata")
    assert set(meta["properties"]) == {"annotations", "finalizers", "labels", "name", "namespace"}
    # The same holds for every ObjectMeta inside the template (ephemeral volume claim templates).
    claim_meta = _at(
        schema, "spec.mpiReplicaSpecs.*.template.spec.volumes.[].ephemeral.volumeClaimTemplate.metadata"
    )
    assert set(claim_meta["properties"]) == set(meta["properties"])


def test_template_and_a_container_are_required(schema):
    replica = _at(schema, "spec.mpiReplicaSpecs.*")
    assert replica["required"] == ["template"]
    template = replica["properties"]["template"]
    assert "spec" in template["required"]
    assert "containers" in template["properties"]["spec"]["required"]
    assert template["properties"]["spec"]["properties"]["containers"]["minItems"] == 1


def test_quantities_and_int_or_strings_are_int_or_string(schema):
    limits = _at(schema, "spec.mpiReplicaSpecs.*.template.spec.containers.[].resources.limits.*")
    assert limits["x-kubernetes-int-or-string"] is True
    assert re.match(limits["pattern"], "1500m") and not re.match(limits["pattern"], "1.5 cores")
    port = _at(schema, "spec.mpiReplicaSpecs.*.template.spec.containers.[].livenessProbe.httpGet.port")
    assert port["x-kubernetes-int-or-string"] is True
    min_resources = _at(schema, "spec.runPolicy.schedulingPolicy.minResources.*")
    assert min_resources["x-kubernetes-int-or-string"] is True


def _our_nodes(schema: dict[str, Any]) -> Iterator[tuple[str, dict[str, Any]]]:
    """Our own fields: everything except what is copied from Kubernetes' spec."""
    k8s_subtrees = (".spec.mpiReplicaSpecs.*.template.", ".status.replicaStatuses.*.labelSelector.")
    for path, node in _walk(schema):
        if path.startswith(".metadata") or any(path.startswith(p) for p in k8s_subtrees):
            continue
        if path.endswith("[]") or path.endswith(".*"):
            continue  # items and map values are described by their field
        yield path, node


def test_every_field_of_ours_has_a_description(schema):
    ours = list(_our_nodes(schema))
    assert len(ours) > 30
    for path, node in ours:
        assert len(node.get("description", "")) > 10, f"{path or 'root'} lacks a description"


ENUMS = {
    "spec.mpiImplementation": ["OpenMPI", "Intel", "MPICH"],
    "spec.launcherCreationPolicy": ["AtStartup", "WaitForWorkersReady"],
    "spec.runPolicy.cleanPodPolicy": ["All", "Running", "None"],
    "spec.mpiReplicaSpecs.*.restartPolicy": ["Never", "OnFailure"],
    "spec.runPolicy.managedBy": ["", "kubeflow.org/mpi-operator", "kueue.x-k8s.io/multikueue"],
    "status.conditions.[].status": ["True", "False", "Unknown"],
}
DEFAULTS = {
    "spec.slotsPerWorker": 1,
    "spec.runLauncherAsWorker": False,
    "spec.sshAuthMountPath": "/root/.ssh",
    "spec.launcherCreationPolicy": "AtStartup",
    "spec.mpiImplementation": "OpenMPI",
    "spec.runPolicy": {},
    "spec.runPolicy.suspend": False,
    "spec.runPolicy.cleanPodPolicy": "Running",
}
MINIMUMS = {
    "spec.runPolicy.schedulingPolicy.minAvailable": 0,
    "spec.runPolicy.schedulingPolicy.scheduleTimeoutSeconds": 0,
    "spec.slotsPerWorker": 0,
    "spec.mpiReplicaSpecs.*.replicas": 0,
    "spec.runPolicy.backoffLimit": 0,
    "spec.runPolicy.ttlSecondsAfterFinished": 0,
    "spec.runPolicy.activeDeadlineSeconds": 0,
}


@pytest.mark.parametrize(("path", "values"), ENUMS.items())
def test_enums(schema, path, values):
    assert _at(schema, path)["enum"] == values


@pytest.mark.parametrize(("path", "value"), DEFAULTS.items())
def test_defaults(schema, path, value):
    node = _at(schema, path)
    assert node["default"] == value
    assert type(node["default"]) is type(value)


def test_no_other_defaults_in_our_fields(schema):
    ours = {path.lstrip(".") for path, node in _our_nodes(schema) if "default" in node}
    assert ours == set(DEFAULTS)


@pytest.mark.parametrize(("path", "minimum"), MINIMUMS.items())
def test_minimums(schema, path, minimum):
    assert _at(schema, path)["minimum"] == minimum


def test_int_formats_match_upstream_types(schema):
    assert _at(schema, "spec.runPolicy.activeDeadlineSeconds")["format"] == "int64"
    for path in ("spec.slotsPerWorker", "spec.mpiReplicaSpecs.*.replicas", "spec.runPolicy.backoffLimit"):
        assert _at(schema, path)["format"] == "int32"


def _rules(node: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {r["message"]: r for r in node.get("x-kubernetes-validations", [])}


def test_admission_rules_are_where_they_belong(schema):
    # Only the root may read metadata.name; the cost of those rules is bounded by the name's maxLength.
    root_rules = schema["x-kubernetes-validations"]
    assert len(root_rules) == 2 + 54  # the name's two, and the worker limit for names of 1..54 characters
    assert all("self.metadata.name" in r["rule"] for r in root_rules)
    assert [r["fieldPath"] for r in root_rules] == [".metadata.name"] * 2 + [
        ".spec.mpiReplicaSpecs.Worker.replicas"
    ] * 54
    assert schema["properties"]["metadata"]["properties"]["name"]["maxLength"] == 63

    specs = _at(schema, "spec.mpiReplicaSpecs")
    rules = " | ".join(r["rule"] for r in specs["x-kubernetes-validations"])
    for fragment in ('"Launcher" in self', "== 1", ">= 1", 'k == "Launcher" || k == "Worker"'):
        assert fragment in rules

    (immutable,) = _at(schema, "spec")["x-kubernetes-validations"]
    assert "oldSelf" in immutable["rule"] and "managedBy" in immutable["rule"]
    assert immutable["fieldPath"] == ".runPolicy.managedBy"
    for path, node in _walk(schema):
        for r in node.get("x-kubernetes-validations", []):
            assert "\n" not in r["message"], path


def test_printer_columns_point_into_the_schema(crd, schema):
    (version,) = crd["spec"]["versions"]
    columns = {c["name"]: c for c in version["additionalPrinterColumns"]}
    assert list(columns) == ["State", "Workers", "Active", "Age"]
    assert columns["Age"] == {"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"}
    for column in columns.values():
        path = column["jsonPath"]
        if path.startswith(".metadata"):
            continue
        steps = re.sub(r"\[-1:\]", ".[]", path).strip(".").split(".")
        steps = ["*" if s in ("Worker", "Launcher") else s for s in steps]
        node = _at(schema, ".".join(steps))
        assert node["type"] == column["type"], path


def test_status_schema(schema):
    conditions = _at(schema, "status.conditions")
    assert conditions["x-kubernetes-list-type"] == "map"
    assert conditions["x-kubernetes-list-map-keys"] == ["type"]
    assert set(conditions["items"]["properties"]) == {
        "type",
        "status",
        "reason",
        "message",
        "lastUpdateTime",
        "lastTransitionTime",
    }
    replica = _at(schema, "status.replicaStatuses.*")
    assert set(replica["properties"]) == {"active", "succeeded", "failed", "labelSelector", "selector"}
    for field in ("startTime", "completionTime", "lastReconcileTime"):
        assert _at(schema, f"status.{field}")["format"] == "date-time"


def test_crds_are_deploys():
    assert (
        DEPLOY / "helm" / "mpi-operator" / "crds" / "kubeflow.org_mpijobs.yaml"
    ).read_bytes() == CRD_FILE.read_bytes(), (
        "copy deploy/crd/kubeflow.org_mpijobs.yaml to deploy/helm/mpi-operator/crds/"
    )


# --------------------------------------------------------------------------------- the converter
def _convert(schemas: dict[str, Any], name: str) -> dict[str, Any]:
    return Converter(schemas).named(name)


def test_converter_inlines_refs_and_keeps_field_descriptions():
    ref = "#/components/schemas/"
    schemas = {
        "T": {
            "type": "object",
            "description": "type doc",
            "properties": {
                "port": {
                    "allOf": [{"$ref": ref + "io.k8s.apimachinery.pkg.util.intstr.IntOrString"}],
                    "description": "field doc",
                },
                "proto": {"type": "string", "default": "TCP"},
                "name": {"type": "string", "default": ""},
                "ref": {"type": "string", "default": ""},
                "flag": {"type": "boolean", "default": False},
                "child": {"allOf": [{"$ref": ref + "C"}], "default": {}},
                "list": {
                    "type": "array",
                    "items": {"type": "string"},
                    "x-kubernetes-patch-strategy": "merge",
                    "x-kubernetes-list-type": "set",
                },
            },
            "required": ["name"],
        },
        "C": {"type": "object", "description": "child doc"},
        "io.k8s.apimachinery.pkg.util.intstr.IntOrString": {"oneOf": [{"type": "integer"}]},
    }
    out = _convert(schemas, "T")
    props = out["properties"]
    assert props["port"]["x-kubernetes-int-or-string"] is True
    assert props["port"]["description"] == "field doc"
    assert props["proto"]["default"] == "TCP"
    assert "default" not in props["name"]  # openapi-gen's zero-value default is not a real default
    assert props["ref"]["default"] == ""  # on an optional field it is a +default marker
    assert props["flag"]["default"] is False
    assert props["child"] == {
        "type": "object",
        "description": "child doc",
        "x-kubernetes-preserve-unknown-fields": True,
    }
    assert props["list"] == {"type": "array", "items": {"type": "string"}, "x-kubernetes-list-type": "set"}
    assert out["required"] == ["name"]


def test_converter_refuses_what_it_does_not_know():
    with pytest.raises(ValueError, match="unsupported OpenAPI key 'not'"):
        _convert({"T": {"type": "object", "not": {}}}, "T")
    with pytest.raises(ValueError, match="recursive"):
        _convert({"T": {"type": "object", "properties": {"t": {"$ref": "#/components/schemas/T"}}}}, "T")


ALL_ROLES = [
    ("ClusterRole", "mpi-operator"),
    ("Role", "mpi-operator-leader-election"),
    ("ClusterRole", "kubeflow-mpijobs-edit"),
    ("ClusterRole", "kubeflow-mpijobs-view"),
    ("ClusterRole", "kubeflow-mpijobs-admin"),
]
CRUD = {"get", "list", "watch", "create", "patch", "delete"}
OPERATOR_GRANTS = {
    ("kubeflow.org", "mpijobs"): {"list", "watch", "delete"},
    ("kubeflow.org", "mpijobs/status"): {"update"},
    ("kubeflow.org", "mpijobs/finalizers"): {"update"},
    ("", "pods"): CRUD,
    ("", "services"): CRUD - {"delete"},
    ("", "configmaps"): CRUD - {"delete"},
    ("", "secrets"): CRUD,
    ("batch", "jobs"): CRUD - {"delete"},
    ("batch", "jobs/status"): {"patch"},
    ("", "events"): {"create", "patch"},
    ("scheduling.volcano.sh", "podgroups"): CRUD,
    ("scheduling.x-k8s.io", "podgroups"): CRUD,
    ("scheduling.k8s.io", "workloads"): CRUD,
    ("scheduling.k8s.io", "podgroups"): CRUD,
    ("scheduling.k8s.io", "priorityclasses"): {"list", "watch"},
    ("", "nodes"): {"list", "watch"},
}


def test_no_wildcards_no_exec_no_endpoints():
    objects = _objects(DEPLOY)
    for kind, name in ALL_ROLES:
        for r in _one(objects, kind, name).get("rules", []):
            for field in ("apiGroups", "resources", "verbs", "resourceNames"):
                assert "*" not in r.get(field, []), (name, r)
            assert not {"pods/exec", "pods/attach", "endpoints"} & set(r["resources"]), (name, r)
            if "nodes" in r["resources"]:  # read only: the operator names nodes, never changes them
                assert set(r["verbs"]) <= {"get", "list", "watch"}, (name, r)
            assert not {"escalate", "bind", "impersonate"} & set(r["verbs"]), (name, r)


def test_operator_cluster_role_is_exactly_what_the_operator_uses():
    role = _one(_objects(DEPLOY), "ClusterRole", "mpi-operator")
    assert _grants(role["rules"]) == OPERATOR_GRANTS


def test_operator_may_touch_every_resource_the_controller_knows():
    # the runtime's table of kinds, with the operator's own: the resources it reads or writes; each needs
    # a grant.
    grants = _grants(_one(_objects(DEPLOY), "ClusterRole", "mpi-operator")["rules"])
    leases = _grants(_one(_objects(DEPLOY), "Role", "mpi-operator-leader-election")["rules"])
    for resource in (*kube.KNOWN, *kinds.OWN):
        key = (resource.group, resource.plural)
        assert key in grants or key in leases, f"no RBAC for {resource.kind} ({resource.api_version})"


def test_leases_only_in_the_lock_namespace():
    objects = _objects(DEPLOY)
    role = _one(objects, "Role", "mpi-operator-leader-election")
    assert role["metadata"]["namespace"] == NAMESPACE
    assert _grants(role["rules"]) == {("coordination.k8s.io", "leases"): {"get", "create", "update", "watch"}}
    named = [r for r in role["rules"] if set(r["verbs"]) & {"get", "update", "watch"}]
    assert all(r.get("resourceNames") == ["mpi-operator"] for r in named)
    assert ("coordination.k8s.io", "leases") not in _grants(
        _one(objects, "ClusterRole", "mpi-operator")["rules"]
    )


def test_bindings_give_the_roles_to_the_service_account():
    objects = _objects(DEPLOY)
    sa = _one(objects, "ServiceAccount", "mpi-operator")
    subject = {"kind": "ServiceAccount", "name": "mpi-operator", "namespace": sa["metadata"]["namespace"]}
    crb = _one(objects, "ClusterRoleBinding", "mpi-operator")
    assert crb["roleRef"] == {
        "apiGroup": "rbac.authorization.k8s.io",
        "kind": "ClusterRole",
        "name": "mpi-operator",
    }
    assert crb["subjects"] == [subject]
    rb = _one(objects, "RoleBinding", "mpi-operator-leader-election")
    assert rb["roleRef"]["kind"] == "Role" and rb["roleRef"]["name"] == "mpi-operator-leader-election"
    assert rb["subjects"] == [subject]


def test_user_roles_aggregate_into_view_edit_admin():
    objects = _objects(DEPLOY)
    view = _one(objects, "ClusterRole", "kubeflow-mpijobs-view")
    edit = _one(objects, "ClusterRole", "kubeflow-mpijobs-edit")
    admin = _one(objects, "ClusterRole", "kubeflow-mpijobs-admin")
    k8s = "rbac.authorization.k8s.io/aggregate-to-"
    assert view["metadata"]["labels"][k8s + "view"] == "true"
    assert edit["metadata"]["labels"][k8s + "edit"] == "true"
    assert admin["metadata"]["labels"][k8s + "admin"] == "true"
    assert _grants(view["rules"]) == {
        ("kubeflow.org", "mpijobs"): {"get", "list", "watch"},
        ("kubeflow.org", "mpijobs/status"): {"get", "list", "watch"},
    }
    assert _grants(edit["rules"])[("kubeflow.org", "mpijobs")] >= {"create", "update", "patch", "delete"}
    assert _grants(edit["rules"])[("kubeflow.org", "mpijobs/status")] == {"get"}
    (selector,) = admin["aggregationRule"]["clusterRoleSelectors"]
    assert all(edit["metadata"]["labels"].get(k) == v for k, v in selector["matchLabels"].items())


# --------------------------------------------------------------------------------------- Deployment
@pytest.fixture(scope="module")
def deployment() -> dict[str, Any]:
    return _one(_objects(DEPLOY), "Deployment", "mpi-operator")


def _containers(pod: dict[str, Any]) -> list[dict[str, Any]]:
    return pod.get("containers", []) + pod.get("initContainers", []) + pod.get("ephemeralContainers", [])


def test_namespace_enforces_restricted():
    ns = _one(_objects(DEPLOY), "Namespace", NAMESPACE)
    assert ns["metadata"]["labels"]["pod-security.kubernetes.io/enforce"] == "restricted"


def test_deployment_meets_the_restricted_pod_security_standard(deployment):
    # The "restricted" profile (https://kubernetes.io/docs/concepts/security/pod-security-standards/),
    # checked the way the PodSecurity admission plugin evaluates a pod.
    pod = deployment["spec"]["template"]["spec"]
    pod_sc = pod.get("securityContext", {})
    for flag in ("hostNetwork", "hostPID", "hostIPC", "hostUsers"):
        assert not pod.get(flag) or flag == "hostUsers", flag
    assert pod_sc.get("runAsUser", 1) != 0
    allowed_volumes = {
        "configMap",
        "csi",
        "downwardAPI",
        "emptyDir",
        "ephemeral",
        "persistentVolumeClaim",
        "projected",
        "secret",
    }
    for volume in pod.get("volumes", []):
        assert set(volume) - {"name"} <= allowed_volumes, volume
    for c in _containers(pod):
        sc = c.get("securityContext", {})
        assert sc.get("privileged") is not True, c["name"]
        assert sc.get("allowPrivilegeEscalation") is False, c["name"]
        assert "ALL" in sc.get("capabilities", {}).get("drop", []), c["name"]
        assert set(sc.get("capabilities", {}).get("add", [])) <= {"NET_BIND_SERVICE"}, c["name"]
        assert sc.get("runAsNonRoot", pod_sc.get("runAsNonRoot")) is True, c["name"]
        assert sc.get("runAsUser", pod_sc.get("runAsUser", 1)) != 0, c["name"]
        seccomp = sc.get("seccompProfile", pod_sc.get("seccompProfile", {}))
        assert seccomp.get("type") in ("RuntimeDefault", "Localhost"), c["name"]
        assert not any(p.get("hostPort") for p in c.get("ports", [])), c["name"]
        assert sc.get("readOnlyRootFilesystem") is True, c["name"]  # beyond restricted: our choice


def test_deployment_runs_the_operator_with_valid_flags(deployment):
    spec = deployment["spec"]
    assert spec["replicas"] == 1
    assert spec["selector"]["matchLabels"].items() <= spec["template"]["metadata"]["labels"].items()
    pod = spec["template"]["spec"]
    assert pod["serviceAccountName"] == "mpi-operator"
    assert spec["template"]["metadata"]["annotations"]["sidecar.istio.io/inject"] == "false"
    (container,) = pod["containers"]
    assert "command" not in container  # the image's entrypoint is mpijob-operator
    args = flags.parse(container["args"])  # the operator's own parser accepts them
    assert args.lock_namespace == deployment["metadata"]["namespace"]
    ports = {p["name"]: p["containerPort"] for p in container["ports"]}
    assert ports == {"monitoring": args.monitoring_port}
    assert container["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": "monitoring"}
    assert container["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": "monitoring"}
    resources = container["resources"]
    assert resources["requests"] == {"cpu": "100m", "memory": "128Mi"}
    assert resources["limits"]["memory"] == "256Mi"
    mounts = {m["mountPath"] for m in container.get("volumeMounts", [])}
    assert "/tmp" in mounts  # the only writable path on a read-only root


def test_dockerfile_builds_a_non_root_image_of_the_operator(deployment):
    text = (DEPLOY / "Dockerfile").read_text(encoding="utf-8")
    instructions = [line.split(None, 1) for line in text.splitlines() if line and not line[0].isspace()]
    instructions = [i for i in instructions if i[0].isupper()]
    keywords = [i[0] for i in instructions]
    assert instructions[0] == ["FROM", "python:3.11-slim"]
    assert "RUN" in keywords and any("pip install ." in i[1] for i in instructions if i[0] == "RUN")
    user = [i[1] for i in instructions if i[0] == "USER"][-1]
    uid = user.split(":")[0]
    assert uid.isdigit() and int(uid) != 0
    pod_sc = deployment["spec"]["template"]["spec"]["securityContext"]
    assert int(uid) == pod_sc["runAsUser"]
    entrypoint = [i[1] for i in instructions if i[0] == "ENTRYPOINT"][-1]
    assert entrypoint == '["mpijob-operator"]'
    pyproject = tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))
    entry = pyproject["project"]["scripts"]["mpijob-operator"]
    # The operator's packages are copied in: the entry point's and render (which reconcile imports).
    for package in {entry.split(".")[0], "render"}:
        assert f"COPY {package} ./{package}" in text


def test_deployment_selector_is_upstreams():
    # Immutable: anything else makes `kubectl apply` over an upstream install fail (L2 test_e2e_upgrade).
    (dep,) = [o for o in _objects(DEPLOY) if o["kind"] == "Deployment"]
    assert dep["spec"]["selector"]["matchLabels"] == {
        "app": "mpi-operator",
        "app.kubernetes.io/component": "mpijob",
        "app.kubernetes.io/name": "mpi-operator",
        "kustomize.component": "mpi-operator",
    }
