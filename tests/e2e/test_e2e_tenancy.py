"""Tenancy, with the operator under the shipped RBAC (cluster-wide writes on its child kinds):

* no takeover: an object someone else made with a child's name (no ownerReferences, or controlled by
  another object) is never written, adopted or deleted, not even when the MPIJob is deleted; the job says
  which object holds it and goes on once the user deletes that object;
* no reach across namespaces: a user who may create MPIJobs in namespace A alone cannot make the operator
  create, change or delete anything in namespace B, whatever the job's templates and run policy name.
"""

from __future__ import annotations

import base64
import copy
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client

from localcluster import LocalCluster
from localcluster.e2e import (
    E2E,
    HOLD,
    JOB_NAME_LABEL,
    ROLE_LABEL,
    condition_is,
    conditions,
    controlled_by,
    create_namespace,
)
from localcluster.jobs import pi_job
from localcluster.operator import OperatorRunner
from localcluster.wait import wait_for
from reconcile.mpijob.kinds import MPIJOB, SCHED_PLUGINS_PODGROUP, VOLCANO_PODGROUP
from reconcile.mpijob.policy import FIELD_MANAGER
from reconcile.runtime.kube import (
    CONFIGMAP,
    EVENT,
    JOB,
    POD,
    SECRET,
    SERVICE,
    WORKLOAD_V1ALPHA1,
    ApiError,
    Kube,
    Resource,
)
from render import names
from tests.e2e.support import extra_scheduler
from tests.utils import (
    TEST_NAMESPACE_LABELS,
    Versions,
    bind_user,
    namespace_name,
    processed_after_nudge,
    user_client,
)

pytestmark = pytest.mark.l2

GANG = "scheduler-plugins-scheduler"  # a scheduler name nothing serves: the jobs' pods stay Pending
OWNER = "owner"  # the ConfigMap that controls the foreign objects of the "controlled" case


def _container() -> dict[str, Any]:
    return {"name": "c", "image": "someone-elses:latest"}


def _pod_spec() -> dict[str, Any]:
    # a scheduler nobody runs: no controller writes to the pod, so its resourceVersion stays put
    return {"schedulerName": "nobody", "containers": [_container()]}


# What someone else may have made under a child's name: kind -> (resource, name for job "pi", body).
# Each stays unwritten by any controller of the cluster (the Job is managed by nobody, the pod scheduled
# by nobody), so a changed resourceVersion can only be the operator's doing.
FOREIGN: dict[str, tuple[Resource, str, dict[str, Any]]] = {
    "ConfigMap": (CONFIGMAP, "pi-config", {"data": {"hostfile": "not yours"}}),
    "Secret": (SECRET, "pi-ssh", {"type": "Opaque", "data": {"key": base64.b64encode(b"mine").decode()}}),
    "Service": (SERVICE, "pi", {"spec": {"clusterIP": "None", "selector": {"app": "someone-else"}}}),
    "Job": (
        JOB,
        "pi-launcher",
        {
            "spec": {
                "suspend": True,
                "managedBy": "example.com/someone-else",
                "template": {"spec": {"restartPolicy": "Never", **_pod_spec()}},
            }
        },
    ),
    "Pod": (POD, "pi-worker-0", {"spec": _pod_spec()}),
    "PodGroup": (SCHED_PLUGINS_PODGROUP, "pi", {"spec": {"minMember": 7}}),
}


@pytest.fixture(scope="class")
def gang_operator(
    operator: OperatorRunner, podgroup_crds: None, e2e_cluster: LocalCluster
) -> Iterator[OperatorRunner]:
    """The operator with a PodGroup among each job's children, for the whole class (one restart)."""
    _wait_for_gc_of_podgroups(e2e_cluster)
    with operator.with_flags(f"--gang-scheduling={GANG}"):
        yield operator


def _wait_for_gc_of_podgroups(cluster: LocalCluster) -> None:
    """Until the garbage collector deletes PodGroups whose owner is gone: it takes up a new CRD at its
    next resync, pausing all collection meanwhile, which would otherwise stall a test for half a minute."""
    api = cluster.api_client()
    kube = Kube(api, qps=0)
    try:
        name = namespace_name("gc-probe")
        owner = kube.create(
            CONFIGMAP, "default", {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name}}
        )
        ref = {"apiVersion": "v1", "kind": "ConfigMap", "name": name, "uid": owner["metadata"]["uid"]}
        probe = {"apiVersion": SCHED_PLUGINS_PODGROUP.api_version, "kind": "PodGroup"}
        kube.create(
            SCHED_PLUGINS_PODGROUP, "default", {**probe, "metadata": {"name": name, "ownerReferences": [ref]}}
        )
        kube.delete(CONFIGMAP, "default", name)

        def collected() -> bool:
            try:
                kube.get(SCHED_PLUGINS_PODGROUP, "default", name)
            except ApiError as err:
                return err.status == 404
            return False

        wait_for(collected, "the garbage collector to delete a PodGroup whose owner is gone", timeout=120)
    finally:
        api.close()


def _foreign_body(kind: str, owner: dict[str, Any] | None) -> tuple[Resource, str, dict[str, Any]]:
    res, name, body = FOREIGN[kind]
    body = copy.deepcopy(body)
    meta: dict[str, Any] = {"name": name}
    if owner is not None:
        # controlled by another object, and labelled as the operator labels its children: the
        # operator's label-filtered watches see this one (the unowned one it finds by name)
        meta["labels"] = {
            names.LABEL_OPERATOR_NAME: names.OPERATOR_NAME,
            JOB_NAME_LABEL: "pi",
            ROLE_LABEL: "worker",
        }
        meta["ownerReferences"] = [
            {
                "apiVersion": "v1",
                "kind": "ConfigMap",
                "name": OWNER,
                "uid": owner["metadata"]["uid"],
                "controller": True,
            }
        ]
    return res, name, {"apiVersion": res.api_version, "kind": res.kind, "metadata": meta, **body}


def _exists_event(e2e: E2E, uid: str, kind: str, name: str) -> bool:
    """A Warning ErrResourceExists event on the MPIJob that names the object by kind and name."""
    events = e2e.kube.list(EVENT, e2e.ns, fieldSelector=f"involvedObject.uid={uid}")["items"]
    return any(
        ev.get("type") == "Warning"
        and ev.get("reason") == "ErrResourceExists"
        and f'"{name}"' in (ev.get("message") or "")
        and f'"{kind}"' in (ev.get("message") or "")
        for ev in events
    )


def _held(e2e: E2E, kind: str, name: str) -> dict[str, Any]:
    """Submit job "pi"; wait until its status and an event name the object holding `name`."""
    uid = e2e.submit(pi_job("pi", workers=1))["metadata"]["uid"]

    def said() -> dict[str, Any] | None:
        job = e2e.find("pi")
        if job is None or not condition_is(job, "Created", "False", "ErrResourceExists"):
            return None
        text = conditions(job)["Created"]["message"]
        return job if f'"{name}"' in text and f'"{kind}"' in text else None

    job = e2e.wait_for(said, f"Created=False naming {kind} {name}", job="pi")
    e2e.wait_for(lambda: _exists_event(e2e, uid, kind, name), f"a Warning event naming {kind} {name}")
    # a sync of a later version of the job has finished: whatever it would do to the object, it has done
    processed_after_nudge(e2e.kube, e2e.operator, e2e.ns, "pi")
    return job


def _assert_untouched(e2e: E2E, res: Resource, before: dict[str, Any], job_uid: str) -> None:
    now = e2e.find(before["metadata"]["name"], res)
    assert now is not None, f"{res.kind} {before['metadata']['name']} was deleted"
    meta = now["metadata"]
    assert not any(r.get("uid") == job_uid for r in meta.get("ownerReferences") or []), meta
    managers = {m.get("manager") for m in meta.get("managedFields") or []}
    assert FIELD_MANAGER not in managers, managers
    assert meta["uid"] == before["metadata"]["uid"], "deleted and made again"
    assert meta["resourceVersion"] == before["metadata"]["resourceVersion"], (before, now)
    assert now == before


@pytest.mark.usefixtures("gang_operator")
class TestNoTakeover:
    @pytest.mark.parametrize("holder", ["unowned", "controlled"])
    @pytest.mark.parametrize("kind", list(FOREIGN))
    def test_an_object_holding_a_child_name_is_never_taken_over(
        self, e2e: E2E, kind: str, holder: str
    ) -> None:
        owner = None
        if holder == "controlled":
            owner = e2e.kube.create(
                CONFIGMAP, e2e.ns, {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": OWNER}}
            )
        res, name, body = _foreign_body(kind, owner)
        before = e2e.kube.create(res, e2e.ns, body)

        # held: the job waits, naming the object; the object is as it was
        job = _held(e2e, kind, name)
        _assert_untouched(e2e, res, before, job["metadata"]["uid"])
        for child in e2e.children(job["metadata"]["uid"]):
            assert child["kind"] != "Pod", f"a pod runs for a job that cannot: {child['metadata']['name']}"

        # the MPIJob deleted: its own children go with it, the object stays as it was
        e2e.delete("pi")
        e2e.wait_gone("pi")
        e2e.wait_for(lambda: not e2e.children(job["metadata"]["uid"]), "the deleted job's children gone")
        _assert_untouched(e2e, res, before, job["metadata"]["uid"])

        # submitted again and held again; once the user deletes the object, the job goes on
        job = _held(e2e, kind, name)
        _assert_untouched(e2e, res, before, job["metadata"]["uid"])
        e2e.delete(name, res)
        uid = job["metadata"]["uid"]
        e2e.wait_condition("pi", "Created", timeout=90)
        e2e.wait_for(
            lambda: (o := e2e.find(name, res)) is not None and controlled_by(o, uid),
            f"{kind} {name} made by the job",
            job="pi",
        )


# The gang objects of the other back-ends, each held by someone else's object (unowned: found by name).
OTHER_GANGS = [
    pytest.param(
        "--gang-scheduling=volcano", VOLCANO_PODGROUP, {"spec": {"minMember": 7}}, id="Volcano-PodGroup"
    ),
    pytest.param(
        "--gang-scheduling=kubernetes",
        WORKLOAD_V1ALPHA1,  # the local cluster's Kubernetes minor serves this version
        {"spec": {"podGroups": [{"name": "theirs", "policy": {"gang": {"minCount": 7}}}]}},
        id="Workload",
    ),
]


@pytest.mark.parametrize(("flag", "res", "body"), OTHER_GANGS)
def test_a_gang_object_held_by_someone_else_is_left_alone(
    e2e: E2E, podgroup_crds: None, flag: str, res: Resource, body: dict[str, Any]
) -> None:
    with e2e.operator.with_flags(flag):
        before = e2e.kube.create(
            res, e2e.ns, {"apiVersion": res.api_version, "kind": res.kind, "metadata": {"name": "pi"}, **body}
        )
        job = _held(e2e, res.kind, "pi")
        _assert_untouched(e2e, res, before, job["metadata"]["uid"])
        e2e.delete("pi", res)
        uid = job["metadata"]["uid"]
        e2e.wait_condition("pi", "Created", timeout=90)
        e2e.wait_for(
            lambda: (o := e2e.find("pi", res)) is not None and controlled_by(o, uid),
            f"{res.kind} pi made by the job",
            job="pi",
        )


# -- no reach across namespaces -----------------------------------------------------------------------
USER = "tenant-a"
TWIN = "twin"  # a job name in A whose children's names are taken in B by B's own MPIJob
# The kinds the operator may write, watched in B.
WRITTEN = ("Pod", "Service", "ConfigMap", "Secret", "Job", "Event", VOLCANO_PODGROUP, MPIJOB)
B_READ: dict[str, Resource] = {
    "Pod": POD,
    "Service": SERVICE,
    "ConfigMap": CONFIGMAP,
    "Secret": SECRET,
    "Job": JOB,
    "Event": EVENT,
    "PodGroup": VOLCANO_PODGROUP,
    "MPIJob": MPIJOB,
}


def _templates(job: dict[str, Any]) -> list[dict[str, Any]]:
    return [spec["template"] for spec in job["spec"]["mpiReplicaSpecs"].values()]


def _in_templates(**meta: Any) -> Callable[[dict[str, Any], str, dict[str, Any]], None]:
    def change(job: dict[str, Any], b: str, victim: dict[str, Any]) -> None:
        for template in _templates(job):
            template.setdefault("metadata", {}).update(copy.deepcopy(meta))

    return change


def _namespace_b(job: dict[str, Any], b: str, victim: dict[str, Any]) -> None:
    for template in _templates(job):
        template.setdefault("metadata", {}).update(namespace=b, name=f"{TWIN}-worker-0")


def _owners_in_b(job: dict[str, Any], b: str, victim: dict[str, Any]) -> None:
    ref = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "name": victim["metadata"]["name"],
        "uid": victim["metadata"]["uid"],
        "controller": True,
        "blockOwnerDeletion": True,
    }
    for template in _templates(job):
        template.setdefault("metadata", {}).update(ownerReferences=[ref], namespace=b)


def _scheduling_in_b(job: dict[str, Any], b: str, victim: dict[str, Any]) -> None:
    job["metadata"]["annotations"] = {names.VOLCANO_QUEUE_ANNOTATION: b}
    job["spec"]["runPolicy"]["schedulingPolicy"] = {"queue": b, "priorityClass": b}
    for template in _templates(job):
        # the pod-group references of both gang schedulers, naming B's PodGroup
        template.setdefault("metadata", {}).update(
            labels={"scheduling.x-k8s.io/pod-group": TWIN, JOB_NAME_LABEL: TWIN},
            annotations={names.VOLCANO_GROUP_ANNOTATION: TWIN},
        )


def _twin(job: dict[str, Any], b: str, victim: dict[str, Any]) -> None:
    # finished, the job is deleted at once by name: A's, never B's of the same name; its launcher held
    # until the test has looked at its children
    job["spec"]["runPolicy"]["ttlSecondsAfterFinished"] = 0
    job["spec"]["mpiReplicaSpecs"]["Launcher"]["template"].setdefault("metadata", {})["annotations"] = HOLD


# name -> how the hostile job differs from pi_job(name)
HOSTILE: dict[str, Callable[[dict[str, Any], str, dict[str, Any]], None]] = {
    "in-b": _namespace_b,
    "owned-in-b": _owners_in_b,
    "queue-in-b": _scheduling_in_b,
    TWIN: _twin,
    "finalized": _in_templates(finalizers=["example.com/keep"], namespace="kube-system"),
}


def _twin_in_b(kube: Kube, b: str) -> None:
    """B's own MPIJob `twin`, left to another controller, and children of it with the names A's `twin`
    wants, labelled as the operator labels its children: its watches see them, so a mix-up of the two
    namespaces would show."""
    mj = pi_job(TWIN, workers=1, run_policy={"managedBy": "kueue.x-k8s.io/multikueue"})
    mj = kube.create(MPIJOB, b, mj)
    ref = {
        "apiVersion": MPIJOB.api_version,
        "kind": "MPIJob",
        "name": TWIN,
        "uid": mj["metadata"]["uid"],
        "controller": True,
        "blockOwnerDeletion": True,
    }
    bodies = {
        "ConfigMap": (f"{TWIN}-config", {"data": {"hostfile": "B's"}}),
        "Secret": (f"{TWIN}-ssh", {"type": "Opaque", "data": {"key": base64.b64encode(b"B's").decode()}}),
        "Service": (TWIN, {"spec": {"clusterIP": "None", "selector": {JOB_NAME_LABEL: TWIN}}}),
        "Job": (f"{TWIN}-launcher", FOREIGN["Job"][2]),
        "Pod": (f"{TWIN}-worker-0", {"spec": _pod_spec()}),
        "PodGroup": (TWIN, {"spec": {"minMember": 2}}),
    }
    for kind, (name, body) in bodies.items():
        res = B_READ[kind]
        meta = {
            "name": name,
            "labels": {names.LABEL_OPERATOR_NAME: names.OPERATOR_NAME, JOB_NAME_LABEL: TWIN},
            "ownerReferences": [ref],
        }
        kube.create(res, b, {"apiVersion": res.api_version, "kind": res.kind, "metadata": meta, **body})


def _snapshot(kube: Kube, b: str) -> dict[tuple[str, str], str]:
    """(kind, name) -> resourceVersion of every object in B of a kind the operator may write."""
    out = {}
    for kind, res in B_READ.items():
        for obj in kube.list(res, b)["items"]:
            out[(kind, obj["metadata"]["name"])] = obj["metadata"]["resourceVersion"]
    return out


@pytest.fixture
def namespace_b(e2e: E2E) -> Iterator[str]:
    core = client.CoreV1Api(e2e.cluster.api_client())
    name = create_namespace(core, namespace_name("tenancy-b"), TEST_NAMESPACE_LABELS)
    try:
        # the root CA ConfigMap lands on its own after the namespace: there before the first snapshot
        e2e.wait_for(lambda: e2e.kube.get(CONFIGMAP, name, "kube-root-ca.crt"), "kube-root-ca.crt in B")
        yield name
    finally:
        core.delete_namespace(name, propagation_policy="Background")
        core.api_client.close()


@pytest.fixture
def tenant(e2e: E2E, e2e_cluster: LocalCluster) -> Iterator[Kube]:
    """A user who may edit MPIJobs in A (the e2e namespace) alone: the shipped role, bound in A."""
    bind_user(e2e.kube.api_client, e2e.ns, USER, "kubeflow-mpijobs-edit")
    api = user_client(e2e_cluster, USER)
    try:
        yield Kube(api, qps=0)
    finally:
        api.close()


def test_a_tenant_cannot_make_the_operator_touch_another_namespace(
    e2e: E2E, tenant: Kube, namespace_b: str, podgroup_crds: None, tmp_path: Path
) -> None:
    b = namespace_b
    _twin_in_b(e2e.kube, b)
    victim = e2e.kube.create(
        CONFIGMAP, b, {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "victim"}}
    )
    # the tenant's rights are as meant: MPIJobs in A, nothing in B
    with pytest.raises(ApiError) as denied:
        tenant.create(MPIJOB, b, pi_job("probe"))
    assert denied.value.status == 403, denied.value
    # volcano: the PodGroup, its queue and priority class are rendered too; a stand-in binds the pods
    with (
        e2e.operator.with_flags("--gang-scheduling=volcano"),
        extra_scheduler(e2e.cluster, ("volcano",), tmp_path / "scheduler"),
    ):
        before = _snapshot(e2e.kube, b)
        with Versions(e2e.cluster, b, WRITTEN) as seen:
            try:
                _run_in_a(e2e, tenant, b, victim)
            finally:
                # B is checked even when a job did not run in A: a write in B is the worse failure
                after = _snapshot(e2e.kube, b)
                versions = list(seen.versions)
                assert after == before, "objects in B changed"
                # each watch listed B's objects (it ran); no version of any object in B is new
                seen_keys = {(v["kind"], v["metadata"]["name"]) for v in versions}
                assert {k for k in before if k[0] != "Event"} <= seen_keys, (before, seen_keys)
                changed = [
                    (v["kind"], v["metadata"]["name"], v["metadata"]["resourceVersion"])
                    for v in versions
                    if before.get((v["kind"], v["metadata"]["name"])) != v["metadata"]["resourceVersion"]
                ]
                assert not changed, f"versions in B seen by a watch: {changed}"


def _run_in_a(e2e: E2E, tenant: Kube, b: str, victim: dict[str, Any]) -> None:
    """The tenant's hostile jobs, each run in A: every child there and controlled by it, then done."""
    uids = {}
    for name, change in HOSTILE.items():
        job = pi_job(name, workers=1)
        change(job, b, victim)
        job["metadata"]["namespace"] = e2e.ns
        uids[name] = tenant.create(MPIJOB, e2e.ns, job)["metadata"]["uid"]
    for name in HOSTILE:
        e2e.wait_condition(name, "Created")
        kids = e2e.children(uids[name])
        assert {k["kind"] for k in kids} >= {"Pod", "Service", "ConfigMap", "Secret", "Job"}, kids
        for kid in kids:
            assert kid["metadata"]["namespace"] == e2e.ns, kid["metadata"]
        if name == TWIN:
            e2e.wait_condition(name, "Running")
            e2e.release_launcher(name)
            e2e.wait_gone(name)  # deleted by its TTL, by name, in A
        else:
            e2e.wait_condition(name, "Succeeded")
            processed_after_nudge(e2e.kube, e2e.operator, e2e.ns, name)
