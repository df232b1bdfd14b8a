"""The local control plane itself: L1 serves the API and CRDs; L2 runs Jobs, GC, scheduling and the kwok
pod lifecycle (Running/Ready, success, failure with exit code, eviction, deletion)."""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

import pytest
from kubernetes import client

from localcluster import NODE_PREFIX, LocalCluster
from localcluster.e2e import SA_USER
from localcluster.wait import wait_for

T = TypeVar("T")
ANN = "localcluster.mpijob.dev/"


def fetch_until(fetch: Callable[[], T], done: Callable[[T], bool], what: str, timeout: float = 60) -> T:
    """`fetch()` once `done` holds for it (the one poll, `localcluster.wait.wait_for`)."""
    # a one-item tuple: the value may be falsy (an empty list once a pod is gone)
    return wait_for(lambda: next(((v,) for v in [fetch()] if done(v)), None), what, timeout, 0.2)[0]


def pod_body(name: str, annotations: dict[str, str] | None = None, **spec: object) -> dict:
    return {
        "metadata": {"name": name, "annotations": annotations or {}},
        "spec": {"containers": [{"name": "main", "image": "busybox"}], **spec},
    }


def job_body(name: str, annotations: dict[str, str] | None = None, backoff_limit: int = 0) -> dict:
    return {
        "metadata": {"name": name},
        "spec": {
            "backoffLimit": backoff_limit,
            "template": {
                "metadata": {"annotations": annotations or {}},
                "spec": {"restartPolicy": "Never", "containers": [{"name": "launcher", "image": "mpi"}]},
            },
        },
    }


def job_condition(job: client.V1Job, kind: str) -> bool:
    return any(c.type == kind and c.status == "True" for c in (job.status.conditions or []))


def job_reaches(batch: client.BatchV1Api, namespace: str, name: str, kind: str) -> client.V1Job:
    """The Job once its `kind` condition is True."""
    return fetch_until(
        lambda: batch.read_namespaced_job(name, namespace), lambda j: job_condition(j, kind), f"Job {kind}"
    )


def pod_reaches(core: client.CoreV1Api, namespace: str, name: str, phase: str) -> client.V1Pod:
    """The pod once it is in `phase`."""
    return fetch_until(
        lambda: core.read_namespaced_pod(name, namespace), lambda p: p.status.phase == phase, f"pod {phase}"
    )


def pods_of_job(core: client.CoreV1Api, namespace: str, job: str) -> list[client.V1Pod]:
    return core.list_namespaced_pod(namespace, label_selector=f"job-name={job}").items


def _launcher_finished(api_client, namespace: str) -> None:
    """Start an unmarked Job and wait until it completes: its pod's exit delay has passed."""
    core, batch = client.CoreV1Api(api_client), client.BatchV1Api(api_client)
    batch.create_namespaced_job(namespace, job_body("reference"))
    job_reaches(batch, namespace, "reference", "Complete")
    [pod] = pods_of_job(core, namespace, "reference")
    assert pod.status.phase == "Succeeded"


# ---- L1 -------------------------------------------------------------------------------------------------


@pytest.mark.l1
def test_l1_apiserver_serves_pinned_version(l1_cluster: LocalCluster, api_client):
    version = client.VersionApi(api_client).get_code()
    assert version.git_version == "v1.35.4"
    assert l1_cluster.kubeconfig.exists()
    assert (l1_cluster.bin_dir / "kubectl").exists()


@pytest.mark.l1
def test_l1_has_no_controllers_or_nodes(l1_cluster: LocalCluster, api_client, namespace):
    core, batch = client.CoreV1Api(api_client), client.BatchV1Api(api_client)
    assert core.list_node().items == []
    # Envtest-like: only etcd and the API server run, so nothing can create pods for a Job (tests move
    # status by hand) -- shown by what runs, not by waiting for nothing to happen.
    assert sorted(p.name for p in l1_cluster.procs) == ["etcd", "kube-apiserver"]
    batch.create_namespaced_job(namespace, job_body("idle"))
    assert pods_of_job(core, namespace, "idle") == []
    assert batch.read_namespaced_job("idle", namespace).status.start_time is None


@pytest.mark.l1
def test_l1_crd_can_be_created_and_used(api_client, namespace):
    ext = client.ApiextensionsV1Api(api_client)
    crd = {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": "widgets.test.mpijob.dev"},
        "spec": {
            "group": "test.mpijob.dev",
            "scope": "Namespaced",
            "names": {"plural": "widgets", "singular": "widget", "kind": "Widget", "listKind": "WidgetList"},
            "versions": [
                {
                    "name": "v1",
                    "served": True,
                    "storage": True,
                    "schema": {
                        "openAPIV3Schema": {
                            "type": "object",
                            "properties": {
                                "spec": {
                                    "type": "object",
                                    "properties": {"size": {"type": "integer", "minimum": 1}},
                                }
                            },
                        }
                    },
                }
            ],
        },
    }
    ext.create_custom_resource_definition(crd)
    try:
        fetch_until(
            lambda: ext.read_custom_resource_definition("widgets.test.mpijob.dev"),
            lambda c: any(x.type == "Established" and x.status == "True" for x in c.status.conditions or []),
            "CRD Established",
        )
        custom = client.CustomObjectsApi(api_client)
        body = {
            "apiVersion": "test.mpijob.dev/v1",
            "kind": "Widget",
            "metadata": {"name": "w"},
            "spec": {"size": 3},
        }
        # Discovery of a fresh CRD can lag a moment behind Established.
        fetch_until(
            lambda: _try_create(custom, namespace, body), lambda ok: ok, "Widget create accepted", timeout=20
        )
        got = custom.get_namespaced_custom_object("test.mpijob.dev", "v1", namespace, "widgets", "w")
        assert got["spec"] == {"size": 3}
        bad = {**body, "metadata": {"name": "bad"}, "spec": {"size": 0}}
        with pytest.raises(client.ApiException) as err:
            custom.create_namespaced_custom_object("test.mpijob.dev", "v1", namespace, "widgets", bad)
        assert err.value.status == 422  # schema validation is enforced
    finally:
        ext.delete_custom_resource_definition("widgets.test.mpijob.dev")


def _goes_through(call: Callable[[], object], refused: int) -> bool:
    """Whether `call` succeeds; False while the server answers `refused` (not served yet, forbidden)."""
    try:
        call()
    except client.ApiException as exc:
        if exc.status == refused:
            return False
        raise
    return True


def _try_create(custom: client.CustomObjectsApi, namespace: str, body: dict) -> bool:
    create = custom.create_namespaced_custom_object
    return _goes_through(lambda: create("test.mpijob.dev", "v1", namespace, "widgets", body), 404)


@pytest.mark.l1
def test_l1_operator_identity_is_bound_by_rbac(l1_cluster: LocalCluster, api_client, namespace):
    """A kubeconfig for the operator's ServiceAccount user gets exactly what RBAC grants it."""
    user = SA_USER
    path = l1_cluster.write_user_kubeconfig(user)
    from kubernetes import config

    as_operator = config.new_client_from_config(config_file=str(path))
    try:
        core = client.CoreV1Api(as_operator)
        with pytest.raises(client.ApiException) as err:
            core.list_namespaced_config_map(namespace)
        assert err.value.status == 403
        assert user in err.value.body
        rbac = client.RbacAuthorizationV1Api(api_client)
        rbac.create_namespaced_role(
            namespace,
            {
                "metadata": {"name": "cm-reader"},
                "rules": [{"apiGroups": [""], "resources": ["configmaps"], "verbs": ["list"]}],
            },
        )
        rbac.create_namespaced_role_binding(
            namespace,
            {
                "metadata": {"name": "cm-reader"},
                "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "cm-reader"},
                "subjects": [{"kind": "ServiceAccount", "name": "mpi-operator", "namespace": "mpi-operator"}],
            },
        )
        fetch_until(
            lambda: _can_list(core, namespace), lambda ok: ok, "RoleBinding to take effect", timeout=10
        )
    finally:
        as_operator.close()


def _can_list(core: client.CoreV1Api, namespace: str) -> bool:
    return _goes_through(lambda: core.list_namespaced_config_map(namespace), 403)


# ---- L2 -------------------------------------------------------------------------------------------------


@pytest.mark.l2
def test_l2_nodes_have_realistic_capacity(api_client):
    nodes = client.CoreV1Api(api_client).list_node().items
    assert len(nodes) >= 1
    for node in nodes:
        assert node.metadata.name.startswith(NODE_PREFIX)
        assert node.status.allocatable["nvidia.com/gpu"] == "8"
        assert node.status.capacity["cpu"] == "32"
        assert any(c.type == "Ready" and c.status == "True" for c in node.status.conditions)


@pytest.mark.l2
def test_l2_pod_is_scheduled_running_and_ready(api_client, namespace):
    core = client.CoreV1Api(api_client)
    body = pod_body("worker-0")
    body["spec"]["containers"][0]["resources"] = {"limits": {"nvidia.com/gpu": "2", "cpu": "4"}}
    core.create_namespaced_pod(namespace, body)
    pod = fetch_until(
        lambda: core.read_namespaced_pod("worker-0", namespace),
        lambda p: (
            p.status.phase == "Running"
            and any(c.type == "Ready" and c.status == "True" for c in p.status.conditions or [])
        ),
        "pod Running and Ready",
    )
    assert pod.spec.node_name.startswith(NODE_PREFIX)
    assert pod.status.pod_ip
    assert pod.status.container_statuses[0].state.running is not None
    # Not owned by a Job: it keeps running (like an sshd worker) after a launcher started after it has
    # run its exit delay and finished.
    _launcher_finished(api_client, namespace)
    assert core.read_namespaced_pod("worker-0", namespace).status.phase == "Running"


@pytest.mark.l2
def test_l2_unschedulable_pod_stays_pending(api_client, namespace):
    core = client.CoreV1Api(api_client)
    body = pod_body("too-big")
    body["spec"]["containers"][0]["resources"] = {"limits": {"nvidia.com/gpu": "9"}}
    core.create_namespaced_pod(namespace, body)
    pod = fetch_until(
        lambda: core.read_namespaced_pod("too-big", namespace),
        lambda p: any(c.type == "PodScheduled" and c.status == "False" for c in p.status.conditions or []),
        "scheduler to report the pod unschedulable",
    )
    assert pod.status.phase == "Pending"
    assert pod.spec.node_name is None


@pytest.mark.l2
def test_l2_job_completes(api_client, namespace):
    core, batch = client.CoreV1Api(api_client), client.BatchV1Api(api_client)
    batch.create_namespaced_job(namespace, job_body("launcher"))
    job = job_reaches(batch, namespace, "launcher", "Complete")
    assert job.status.succeeded == 1
    [pod] = pods_of_job(core, namespace, "launcher")
    assert pod.status.phase == "Succeeded"
    assert pod.status.container_statuses[0].state.terminated.exit_code == 0


@pytest.mark.l2
def test_l2_marked_job_pod_fails_with_exit_code(api_client, namespace):
    core, batch = client.CoreV1Api(api_client), client.BatchV1Api(api_client)
    batch.create_namespaced_job(
        namespace, job_body("oom", annotations={f"{ANN}exit-code": "137", f"{ANN}reason": "OOMKilled"})
    )
    job = job_reaches(batch, namespace, "oom", "Failed")
    assert job.status.failed == 1
    [pod] = pods_of_job(core, namespace, "oom")
    assert pod.status.phase == "Failed"
    terminated = pod.status.container_statuses[0].state.terminated
    assert (terminated.exit_code, terminated.reason) == (137, "OOMKilled")


@pytest.mark.l2
def test_l2_held_job_pod_keeps_running(api_client, namespace):
    core, batch = client.CoreV1Api(api_client), client.BatchV1Api(api_client)
    batch.create_namespaced_job(namespace, job_body("held", annotations={f"{ANN}hold": "true"}))
    fetch_until(
        lambda: pods_of_job(core, namespace, "held"),
        lambda pods: len(pods) == 1 and pods[0].status.phase == "Running",
        "held launcher pod Running",
    )
    _launcher_finished(api_client, namespace)  # an unheld one, started after it, has finished
    [pod] = pods_of_job(core, namespace, "held")
    assert pod.status.phase == "Running"
    assert not job_condition(batch.read_namespaced_job("held", namespace), "Complete")


@pytest.mark.l2
def test_l2_eviction(api_client, namespace):
    core = client.CoreV1Api(api_client)
    core.create_namespaced_pod(namespace, pod_body("worker-1"))
    pod_reaches(core, namespace, "worker-1", "Running")
    core.patch_namespaced_pod("worker-1", namespace, {"metadata": {"annotations": {f"{ANN}evict": "true"}}})
    pod = pod_reaches(core, namespace, "worker-1", "Failed")  # evicted
    assert pod.status.reason == "Evicted"
    assert any(c.type == "DisruptionTarget" and c.status == "True" for c in pod.status.conditions)


@pytest.mark.l2
def test_l2_deleted_pod_goes_away(api_client, namespace):
    core = client.CoreV1Api(api_client)
    core.create_namespaced_pod(namespace, pod_body("worker-2"))
    pod_reaches(core, namespace, "worker-2", "Running")
    core.delete_namespaced_pod("worker-2", namespace)
    fetch_until(
        lambda: [p.metadata.name for p in core.list_namespaced_pod(namespace).items],
        lambda names: "worker-2" not in names,
        "pod removed",
    )


@pytest.mark.l2
def test_l2_garbage_collector_removes_dependents(api_client, namespace):
    core, batch = client.CoreV1Api(api_client), client.BatchV1Api(api_client)
    owner = core.create_namespaced_config_map(namespace, {"metadata": {"name": "owner"}})
    ref = {"apiVersion": "v1", "kind": "ConfigMap", "name": "owner", "uid": owner.metadata.uid}
    core.create_namespaced_config_map(
        namespace, {"metadata": {"name": "dependent", "ownerReferences": [ref]}}
    )
    # A Job whose pod keeps running: deleting the Job must take the pod along.
    batch.create_namespaced_job(namespace, job_body("held", annotations={f"{ANN}hold": "true"}))
    fetch_until(lambda: pods_of_job(core, namespace, "held"), lambda pods: len(pods) == 1, "Job pod created")

    core.delete_namespaced_config_map("owner", namespace)
    batch.delete_namespaced_job("held", namespace, propagation_policy="Background")
    fetch_until(
        lambda: [c.metadata.name for c in core.list_namespaced_config_map(namespace).items],
        lambda names: "dependent" not in names,
        "dependent ConfigMap collected",
    )
    fetch_until(lambda: pods_of_job(core, namespace, "held"), lambda pods: pods == [], "Job pods collected")
