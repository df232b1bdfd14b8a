"""L1: the CRD, RBAC and Deployment of deploy/ against a real kube-apiserver.

Admission (schema + CEL), server-side defaulting, printer columns, the published OpenAPI, the kustomize
install, Pod Security admission and RBAC are all judged by the API server itself, not by our reading.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes import client

from localcluster.jobs import minimal_job
from localcluster.kubectl import kubectl
from localcluster.wait import wait_for
from tests.cluster.support import (
    CRD_NAME,
    GROUP,
    OPERATOR_NS,
    OPERATOR_SA,
    PLURAL,
    VERSION,
    _can,
)
from tests.utils import bind_user, user_client
from tools.crdgen.build import CRD_PATH
from tools.manifests import DEPLOY, REPO

pytestmark = pytest.mark.l1


def create(
    api: client.CustomObjectsApi, ns: str, obj: dict[str, Any], dry_run: bool = False
) -> dict[str, Any]:
    kwargs = {"dry_run": "All"} if dry_run else {}
    return api.create_namespaced_custom_object(GROUP, VERSION, ns, PLURAL, obj, **kwargs)


def rejection(api: client.CustomObjectsApi, ns: str, obj: dict[str, Any]) -> str:
    with pytest.raises(client.ApiException) as info:
        create(api, ns, obj, dry_run=True)
    assert info.value.status == 422, info.value.body
    return json.loads(info.value.body)["message"]


# --------------------------------------------------------------------------------------------- install
def test_crd_installs_cleanly_and_becomes_established(crd_install, api_client):
    assert "Warning" not in crd_install.stderr, crd_install.stderr
    crd = client.ApiextensionsV1Api(api_client).read_custom_resource_definition(CRD_NAME)
    conditions = {c.type: c.status for c in crd.status.conditions}
    assert conditions["Established"] == "True"
    assert conditions["NamesAccepted"] == "True"
    assert crd.status.accepted_names.short_names == ["mpij"]
    assert not crd.status.accepted_names.categories  # `kubectl delete all --all` must leave MPIJobs alone


# ---------------------------------------------------------------------------------------- admission
def _golden_jobs() -> list[Path]:
    return sorted(REPO.glob("golden/*/mpijob.yaml"))


def _expects_validation_error(case: Path) -> bool:
    status = case.parent / "status.yaml"
    return status.exists() and "ValidationError" in status.read_text(encoding="utf-8")


def test_golden_examples_are_accepted(mpijobs, namespace):
    valid = [p for p in _golden_jobs() if not _expects_validation_error(p)]
    assert valid, "golden/*/mpijob.yaml: no valid examples found"
    for path in valid:
        job = yaml.safe_load(path.read_text(encoding="utf-8"))
        job["metadata"].pop("namespace", None)
        try:
            create(mpijobs, namespace, job, dry_run=True)
        except client.ApiException as exc:
            raise AssertionError(f"{path.relative_to(REPO)} rejected: {exc.body}") from exc


def test_golden_invalid_examples_are_rejected_at_admission(mpijobs, namespace):
    invalid = [p for p in _golden_jobs() if _expects_validation_error(p)]
    assert invalid, "golden/: no ValidationError case found"
    for path in invalid:
        job = yaml.safe_load(path.read_text(encoding="utf-8"))
        job["metadata"].pop("namespace", None)
        message = rejection(mpijobs, namespace, job)
        # The controller's field paths say [Launcher] where the API server says Launcher.
        errors = (path.parent / "errors.txt").read_text(encoding="utf-8").splitlines()
        fields = {e.split(":")[0].replace("[", ".").replace("]", "") for e in errors if e}
        assert any(f in message for f in fields), (path, message)


def _set(path: str, value: Any) -> Callable[[dict[str, Any]], None]:
    """Mutation setting a dotted path (creating maps on the way); value DELETE removes it."""

    def mutate(job: dict[str, Any]) -> None:
        *parents, last = path.split(".")
        node = job
        for step in parents:
            node = node.setdefault(step, {})
        if value is DELETE:
            node.pop(last)
        else:
            node[last] = copy.deepcopy(value)

    return mutate


DELETE = object()
L = "spec.mpiReplicaSpecs.Launcher"
W = "spec.mpiReplicaSpecs.Worker"

VALID = {
    "launcher only, as a worker": [_set(W, DELETE), _set("spec.runLauncherAsWorker", True)],
    "54-character name, 10 workers": [_set("metadata.name", "a" * 54), _set(f"{W}.replicas", 10)],
    "45-character name, 2124 workers (its limit)": [
        _set("metadata.name", "a" * 45),
        _set(f"{W}.replicas", 2124),
    ],
    "every enum's other values": [
        _set("spec.mpiImplementation", "MPICH"),
        _set("spec.launcherCreationPolicy", "WaitForWorkersReady"),
        _set("spec.runPolicy", {"cleanPodPolicy": "None", "managedBy": "kueue.x-k8s.io/multikueue"}),
        _set(f"{W}.restartPolicy", "OnFailure"),
        _set(f"{L}.restartPolicy", "Never"),
    ],
    # upstream treats an empty sshAuthMountPath as its default; it was refused at admission here once
    "empty sshAuthMountPath (the default)": [_set("spec.sshAuthMountPath", "")],
    "explicit launcher replicas 1, zero slots, full run policy": [
        _set(f"{L}.replicas", 1),
        _set("spec.slotsPerWorker", 0),
        _set(
            "spec.runPolicy",
            {
                "cleanPodPolicy": "All",
                "ttlSecondsAfterFinished": 0,
                "activeDeadlineSeconds": 3600,
                "backoffLimit": 0,
                "suspend": True,
                "managedBy": "kubeflow.org/mpi-operator",
                "schedulingPolicy": {
                    "minAvailable": 3,
                    "queue": "q",
                    "minResources": {"cpu": "1500m", "nvidia.com/gpu": 2},
                    "priorityClass": "high",
                    "scheduleTimeoutSeconds": 60,
                },
            },
        ),
    ],
}


@pytest.mark.parametrize("mutations", VALID.values(), ids=list(VALID))
def test_valid_variants_are_accepted(mpijobs, namespace, mutations):
    job = minimal_job()
    for mutate in mutations:
        mutate(job)
    create(mpijobs, namespace, job, dry_run=True)


INVALID = {
    "launcher replicas 2": ([_set(f"{L}.replicas", 2)], "Launcher replicas must be 1"),
    "missing launcher": ([_set(L, DELETE)], "a Launcher replica spec is required"),
    "unknown replica type": (
        [_set("spec.mpiReplicaSpecs.Server", minimal_job()["spec"]["mpiReplicaSpecs"]["Worker"])],
        "only the replica types Launcher and Worker are supported",
    ),
    "worker replicas 0": ([_set(f"{W}.replicas", 0)], "Worker replicas must be set and be at least 1"),
    "worker replicas missing": ([_set(f"{W}.replicas", DELETE)], "Worker replicas must be set"),
    "bad mpiImplementation": ([_set("spec.mpiImplementation", "OpenMPI5")], 'Unsupported value: "OpenMPI5"'),
    "bad launcherCreationPolicy": (
        [_set("spec.launcherCreationPolicy", "Later")],
        'spec.launcherCreationPolicy: Unsupported value: "Later"',
    ),
    "bad cleanPodPolicy": ([_set("spec.runPolicy.cleanPodPolicy", "Some")], 'Unsupported value: "Some"'),
    "restartPolicy Always": ([_set(f"{W}.restartPolicy", "Always")], 'Unsupported value: "Always"'),
    "unknown managedBy": ([_set("spec.runPolicy.managedBy", "me")], 'Unsupported value: "me"'),
    "name too long for the last worker": (
        [_set("metadata.name", "a" * 53), _set(f"{W}.replicas", 101)],
        "metadata.name is too long",
    ),
    "55-character name": ([_set("metadata.name", "a" * 55)], "metadata.name is too long"),
    "name not a DNS-1035 label": ([_set("metadata.name", "1-pi")], "must start with a lowercase letter"),
    "dotted name": ([_set("metadata.name", "pi.v2")], "must start with a lowercase letter"),
    "no containers": ([_set(f"{W}.template.spec.containers", [])], "should have at least 1 items"),
    "no template": (
        [_set(f"{L}.template", DELETE)],
        "spec.mpiReplicaSpecs.Launcher.template: Required value",
    ),
    "no replica specs": ([_set("spec.mpiReplicaSpecs", DELETE)], "spec.mpiReplicaSpecs: Required value"),
    "negative slotsPerWorker": ([_set("spec.slotsPerWorker", -1)], "greater than or equal to 0"),
    "negative backoffLimit": ([_set("spec.runPolicy.backoffLimit", -1)], "greater than or equal to 0"),
    "negative ttl": ([_set("spec.runPolicy.ttlSecondsAfterFinished", -5)], "greater than or equal to 0"),
    "negative deadline": ([_set("spec.runPolicy.activeDeadlineSeconds", -5)], "greater than or equal to 0"),
    "bad quantity": (
        [_set(f"{W}.template.spec.containers", [{"name": "w", "resources": {"limits": {"cpu": "lots"}}}])],
        "resources.limits.cpu",
    ),
}


@pytest.mark.parametrize(("mutations", "message"), INVALID.values(), ids=list(INVALID))
def test_invalid_jobs_are_rejected_at_admission(mpijobs, namespace, mutations, message):
    job = minimal_job()
    for mutate in mutations:
        mutate(job)
    assert message in rejection(mpijobs, namespace, job)


def test_name_rule_holds_for_generated_names(mpijobs, namespace):
    job = minimal_job()
    del job["metadata"]["name"]
    job["metadata"]["generateName"] = "pi-"
    created = create(mpijobs, namespace, job, dry_run=True)
    assert created["metadata"]["name"].startswith("pi-")
    job["metadata"]["generateName"] = "a" * 50  # + 5 random characters: too long for a worker name
    assert "metadata.name is too long" in rejection(mpijobs, namespace, job)


# --------------------------------------------------------------------------------------- defaulting
def test_server_applies_defaults_and_prunes_unknown_fields(mpijobs, namespace):
    job = minimal_job()
    job["spec"]["notAField"] = True
    job["spec"]["mpiReplicaSpecs"]["Worker"]["template"]["spec"]["containers"][0]["ports"] = [
        {"containerPort": 2222}
    ]
    spec = create(mpijobs, namespace, job)["spec"]
    assert "notAField" not in spec
    assert spec["slotsPerWorker"] == 1
    assert spec["runLauncherAsWorker"] is False
    assert spec["sshAuthMountPath"] == "/root/.ssh"
    assert spec["launcherCreationPolicy"] == "AtStartup"
    assert spec["mpiImplementation"] == "OpenMPI"
    assert spec["runPolicy"] == {"cleanPodPolicy": "Running", "suspend": False}
    # Kubernetes' own defaults inside the pod template come along with its schema.
    port = spec["mpiReplicaSpecs"]["Worker"]["template"]["spec"]["containers"][0]["ports"][0]
    assert port == {"containerPort": 2222, "protocol": "TCP"}
    # Replica defaults depend on the map key, so they are the controller's job, not the schema's.
    assert "replicas" not in spec["mpiReplicaSpecs"]["Launcher"]


def test_template_metadata_is_kept(mpijobs, namespace):
    job = minimal_job()
    meta = {"labels": {"team": "hpc"}, "annotations": {"a": "b"}, "name": "x", "uid": "dropped"}
    job["spec"]["mpiReplicaSpecs"]["Worker"]["template"]["metadata"] = meta
    stored = create(mpijobs, namespace, job)["spec"]["mpiReplicaSpecs"]["Worker"]["template"]["metadata"]
    assert stored == {"labels": {"team": "hpc"}, "annotations": {"a": "b"}, "name": "x"}


# ------------------------------------------------------------------------------------------ updates
def _patch(api: client.CustomObjectsApi, ns: str, name: str, body: Any) -> dict[str, Any]:
    return api.patch_namespaced_custom_object(GROUP, VERSION, ns, PLURAL, name, body)


def test_managed_by_is_immutable(mpijobs, namespace):
    job = minimal_job("managed")
    job["spec"]["runPolicy"] = {"managedBy": "kueue.x-k8s.io/multikueue"}
    create(mpijobs, namespace, job)
    for change in (
        {"spec": {"runPolicy": {"managedBy": "kubeflow.org/mpi-operator"}}},
        {"spec": {"runPolicy": {"managedBy": None}}},
    ):
        with pytest.raises(client.ApiException) as info:
            _patch(mpijobs, namespace, "managed", change)
        assert info.value.status == 422
        assert "spec.runPolicy.managedBy is immutable" in json.loads(info.value.body)["message"]
    # Every other field stays mutable (Kueue suspends and resumes, users scale).
    patched = _patch(
        mpijobs, namespace, "managed", {"spec": {"runPolicy": {"suspend": True}, "slotsPerWorker": 2}}
    )
    assert patched["spec"]["runPolicy"]["suspend"] is True

    create(mpijobs, namespace, minimal_job("unmanaged"))
    with pytest.raises(client.ApiException) as info:
        _patch(
            mpijobs,
            namespace,
            "unmanaged",
            {"spec": {"runPolicy": {"managedBy": "kueue.x-k8s.io/multikueue"}}},
        )
    assert "immutable" in json.loads(info.value.body)["message"]


def test_status_is_a_subresource_with_conditions_keyed_by_type(mpijobs, namespace):
    create(mpijobs, namespace, minimal_job("st"))
    ignored = _patch(mpijobs, namespace, "st", {"status": {"startTime": "2025-01-01T00:00:00Z"}})
    assert "status" not in ignored or "startTime" not in ignored["status"]

    def status_patch(conditions: list[dict[str, str]]) -> dict[str, Any]:
        body = {
            "status": {
                "conditions": conditions,
                "replicaStatuses": {"Worker": {"active": 2, "selector": "a=b"}},
            }
        }
        return mpijobs.patch_namespaced_custom_object_status(GROUP, VERSION, namespace, PLURAL, "st", body)

    created = {"type": "Created", "status": "True", "reason": "MPIJobCreated"}
    running = {"type": "Running", "status": "True", "reason": "MPIJobRunning"}
    stored = status_patch([created, running])["status"]
    assert [c["type"] for c in stored["conditions"]] == ["Created", "Running"]
    with pytest.raises(client.ApiException) as info:
        status_patch([created, {**created, "status": "False"}])
    assert "Duplicate value" in json.loads(info.value.body)["message"]
    with pytest.raises(client.ApiException) as info:
        status_patch([{"type": "Running", "status": "Maybe"}])
    assert 'Unsupported value: "Maybe"' in json.loads(info.value.body)["message"]


def test_kubectl_get_shows_state_workers_active_and_age(crd_install, mpijobs, namespace, cluster):
    create(mpijobs, namespace, minimal_job("cols", workers=3))
    body = {
        "status": {
            "conditions": [
                {"type": "Created", "status": "True"},
                {"type": "Running", "status": "True"},
            ],
            "replicaStatuses": {"Worker": {"active": 2}},
        }
    }
    mpijobs.patch_namespaced_custom_object_status(GROUP, VERSION, namespace, PLURAL, "cols", body)
    out = kubectl(cluster, "get", "mpij", "-n", namespace, "--no-headers=false").stdout.splitlines()
    assert out[0].split() == ["NAME", "STATE", "WORKERS", "ACTIVE", "AGE"]
    assert out[1].split()[:4] == ["cols", "Running", "3", "2"]
    # Not in the `all` category: `kubectl delete all --all` must not take MPIJobs with it.
    assert "mpijob" not in kubectl(cluster, "get", "all", "-n", namespace).stdout


# ---------------------------------------------------------------------------------- explain/OpenAPI
def test_published_openapi_carries_our_descriptions(crd_install, cluster, api_client):
    generated = yaml.safe_load(CRD_PATH.read_text(encoding="utf-8"))["spec"]["versions"][0]
    want = generated["schema"]["openAPIV3Schema"]["properties"]["spec"]["properties"]["runPolicy"]

    def published() -> dict[str, Any] | None:  # rebuilt asynchronously after a CRD change
        raw = kubectl(cluster, "get", "--raw", f"/openapi/v3/apis/{GROUP}/{VERSION}").stdout
        return json.loads(raw)["components"]["schemas"].get(f"org.kubeflow.{VERSION}.MPIJob")

    mpijob = wait_for(published, "MPIJob in /openapi/v3", 30, 0.5)
    run_policy = mpijob["properties"]["spec"]["properties"]["runPolicy"]
    assert run_policy["description"] == want["description"]
    assert run_policy["properties"]["cleanPodPolicy"]["enum"] == ["All", "Running", "None"]

    explained = kubectl(cluster, "explain", "mpijobs.spec.launcherCreationPolicy").stdout
    assert "WaitForWorkersReady" in explained and "once every worker pod is Ready" in " ".join(
        explained.split()
    )
    explained = kubectl(cluster, "explain", "mpij.spec.mpiReplicaSpecs.template.spec.containers.image").stdout
    assert "Container image name" in explained


# ------------------------------------------------------------------------------ kustomize, PSS, RBAC
@pytest.fixture(scope="module")
def base_installed(l1_cluster, crd_install) -> Any:
    """CRD, namespace and RBAC applied for real (what the local demo and e2e tier install)."""
    out = kubectl(
        l1_cluster, "apply", "--server-side", "--force-conflicts", "-k", str(DEPLOY / "base-no-operator")
    )
    assert "Warning" not in out.stderr, out.stderr
    return l1_cluster


def test_full_install_passes_server_dry_run_and_restricted_pod_security(base_installed):
    out = kubectl(base_installed, "apply", "--server-side", "--dry-run=server", "-k", str(DEPLOY))
    assert "deployment.apps/mpi-operator serverside-applied (server dry run)" in out.stdout
    # The namespace warns (and enforces) "restricted"; a compliant Deployment draws no warning.
    assert "PodSecurity" not in out.stderr, out.stderr

    # The same check notices a violation: the control proves the warning would have shown.
    rendered = kubectl(base_installed, "kustomize", str(DEPLOY)).stdout
    (deployment,) = [d for d in yaml.safe_load_all(rendered) if d and d["kind"] == "Deployment"]
    deployment["spec"]["template"]["spec"]["containers"][0]["securityContext"]["allowPrivilegeEscalation"] = (
        True
    )
    bad = kubectl(
        base_installed,
        "apply",
        "--server-side",
        "--dry-run=server",
        "-f",
        "-",
        stdin=yaml.safe_dump(deployment),
    )
    assert "would violate PodSecurity" in bad.stderr and "allowPrivilegeEscalation" in bad.stderr


OPERATOR_CAN = [
    ("list", "mpijobs", "", "", GROUP),
    ("watch", "mpijobs", "", "", GROUP),
    ("delete", "mpijobs", "team-a", "job", GROUP),
    ("update", "mpijobs/status", "team-a", "job", GROUP),
    ("update", "mpijobs/finalizers", "team-a", "job", GROUP),
    ("create", "pods", "team-a", "", ""),
    ("delete", "pods", "team-a", "job-worker-0", ""),
    ("patch", "secrets", "team-a", "job-ssh", ""),
    ("create", "jobs", "team-a", "", "batch"),
    ("patch", "jobs/status", "team-a", "job-launcher", "batch"),
    ("create", "events", "team-a", "", ""),
    ("create", "podgroups", "team-a", "", "scheduling.volcano.sh"),
    ("watch", "podgroups", "", "", "scheduling.x-k8s.io"),
    ("list", "priorityclasses", "", "", "scheduling.k8s.io"),
    ("list", "nodes", "", "", ""),
    ("watch", "nodes", "", "", ""),
    ("create", "leases", OPERATOR_NS, "", "coordination.k8s.io"),
    ("update", "leases", OPERATOR_NS, "mpi-operator", "coordination.k8s.io"),
    ("watch", "leases", OPERATOR_NS, "mpi-operator", "coordination.k8s.io"),
]
OPERATOR_CANNOT = [
    ("create", "pods/exec", "team-a", "job-worker-0", ""),
    ("create", "mpijobs", "team-a", "", GROUP),
    ("update", "mpijobs", "team-a", "job", GROUP),
    ("update", "pods", "team-a", "job-worker-0", ""),
    ("get", "endpoints", "team-a", "", ""),
    ("get", "nodes", "", "node-1", ""),
    ("patch", "nodes", "", "node-1", ""),
    ("update", "nodes/status", "", "node-1", ""),
    ("get", "customresourcedefinitions", "", CRD_NAME, "apiextensions.k8s.io"),
    ("create", "events", "team-a", "", "events.k8s.io"),
    ("update", "jobs/status", "team-a", "job-launcher", "batch"),
    ("patch", "mpijobs/status", "team-a", "job", GROUP),
    ("list", "customresourcedefinitions", "", "", "apiextensions.k8s.io"),
    ("get", "leases", "team-a", "mpi-operator", "coordination.k8s.io"),
    ("update", "leases", OPERATOR_NS, "someone-else", "coordination.k8s.io"),
    ("delete", "leases", OPERATOR_NS, "mpi-operator", "coordination.k8s.io"),
    ("create", "clusterroles", "", "", "rbac.authorization.k8s.io"),
    ("delete", "jobs", "team-a", "job-launcher", "batch"),
    ("delete", "services", "team-a", "job", ""),
    ("delete", "configmaps", "team-a", "job-config", ""),
]


def test_operator_service_account_has_exactly_what_it_needs(base_installed):
    api = user_client(base_installed, OPERATOR_SA)
    try:
        denied = [c for c in OPERATOR_CAN if not _can(api, *c)]
        allowed = [c for c in OPERATOR_CANNOT if _can(api, *c)]
    finally:
        api.close()
    assert denied == [] and allowed == []


def test_user_roles_grant_edit_and_view(base_installed, namespace, api_client):
    for user, role in (("alice", "kubeflow-mpijobs-edit"), ("bob", "kubeflow-mpijobs-view")):
        bind_user(api_client, namespace, user, role)
    alice, bob = user_client(base_installed, "alice"), user_client(base_installed, "bob")
    try:
        assert _can(alice, "create", "mpijobs", namespace, "", GROUP)
        assert _can(alice, "delete", "mpijobs", namespace, "x", GROUP)
        assert _can(alice, "get", "mpijobs/status", namespace, "x", GROUP)
        assert not _can(alice, "patch", "mpijobs/status", namespace, "x", GROUP)
        assert not _can(alice, "list", "mpijobs", "elsewhere", "", GROUP)
        assert _can(bob, "list", "mpijobs", namespace, "", GROUP)
        assert not _can(bob, "create", "mpijobs", namespace, "", GROUP)
    finally:
        alice.close()
        bob.close()


@pytest.mark.l2
def test_user_roles_aggregate_into_the_builtin_view_edit_admin(l2_cluster):
    # Aggregation is done by kube-controller-manager, hence L2.
    apply = ("apply", "--server-side", "-f", str(DEPLOY / "rbac" / "user-roles.yaml"))
    kubectl(l2_cluster, *apply)
    api = l2_cluster.api_client()
    try:
        rbac = client.RbacAuthorizationV1Api(api)

        def aggregated(role: str) -> bool:
            return any(
                "mpijobs" in (r.resources or []) and GROUP in (r.api_groups or [])
                for r in rbac.read_cluster_role(role).rules or []
            )

        wait_for(lambda: all(aggregated(r) for r in ("view", "edit", "admin")), "mpijobs aggregated", 30, 0.5)
        edit_verbs = {
            v
            for r in rbac.read_cluster_role("edit").rules
            if "mpijobs" in (r.resources or [])
            for v in r.verbs
        }
        assert {"create", "delete", "patch"} <= edit_verbs
        # Re-applying after the aggregation controller filled our admin role's rules must not conflict
        # (an upgrade is the same `kubectl apply --server-side`).
        wait_for(
            lambda: rbac.read_cluster_role("kubeflow-mpijobs-admin").rules, "admin role aggregated", 30, 0.5
        )
        kubectl(l2_cluster, *apply)
    finally:
        api.close()
