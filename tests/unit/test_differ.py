"""L0: the generic differ, rule by rule (reconcile/engine/differ.py, semantics*.py, policy.py, plan.py)."""

from __future__ import annotations

import copy
import json
from typing import Any

import pytest

from reconcile.engine.differ import controller_uid, plan
from reconcile.engine.plan import Conflict, Create, Delete, ObjectKey, Plan, Wait
from reconcile.engine.policy import KindPolicy, MutableWhen, PathIs, Policy
from reconcile.engine.semantics import holds, is_zero, mask, scalar_equal, strict_equal
from reconcile.engine.semantics_lists import list_type
from reconcile.mpijob.policy import FIELD_MANAGER, POLICY

OWNER = "11111111-1111-1111-1111-111111111111"
OTHER = "22222222-2222-2222-2222-222222222222"
NS = "ns"


def owner_ref(uid: str = OWNER, controller: bool = True) -> dict[str, Any]:
    return {
        "apiVersion": "kubeflow.org/v2beta1",
        "kind": "MPIJob",
        "name": "pi",
        "uid": uid,
        "controller": controller,
        "blockOwnerDeletion": True,
    }


def obj(api_version: str, kind: str, name: str, **fields: Any) -> dict[str, Any]:
    out: dict[str, Any] = {
        "apiVersion": api_version,
        "kind": kind,
        "metadata": {"name": name, "namespace": NS, "ownerReferences": [owner_ref()]},
    }
    out.update(fields)
    return out


def as_live(desired: dict[str, Any], uid: str = "uid-live", **meta: Any) -> dict[str, Any]:
    """What the API server returns for ``desired``: server metadata added."""
    live = copy.deepcopy(desired)
    live["metadata"].update(
        {"uid": uid, "resourceVersion": "7", "creationTimestamp": "2026-01-01T00:00:00Z", **meta}
    )
    return live


def configmap(name: str = "pi-config", **data: str) -> dict[str, Any]:
    return obj("v1", "ConfigMap", name, data=data or {"hostfile": "pi-worker-0 slots=1\n"})


def service() -> dict[str, Any]:
    return obj(
        "v1",
        "Service",
        "pi",
        spec={
            "clusterIP": "None",
            "selector": {"training.kubeflow.org/job-name": "pi"},
            "ports": [{"name": "ssh", "port": 22, "targetPort": 22}],
        },
    )


def pod(name: str = "pi-worker-0") -> dict[str, Any]:
    out = obj(
        "v1",
        "Pod",
        name,
        spec={
            "hostname": name,
            "subdomain": "pi",
            "containers": [
                {
                    "name": "worker",
                    "image": "mpi:1",
                    "command": ["/usr/sbin/sshd", "-De"],
                    "env": [{"name": "A", "value": "1"}, {"name": "B", "value": "2"}],
                    "ports": [{"containerPort": 22}],
                    "resources": {"limits": {"cpu": "1000m", "memory": "1Gi"}, "requests": {"cpu": 0.5}},
                    "volumeMounts": [{"name": "ssh", "mountPath": "/root/.ssh"}],
                }
            ],
            "volumes": [{"name": "ssh", "secret": {"secretName": "pi-ssh", "defaultMode": 0o600}}],
        },
    )
    out["metadata"]["labels"] = {
        "training.kubeflow.org/job-name": "pi",
        "training.kubeflow.org/job-role": "worker",
    }
    return out


def job(suspend: bool = False) -> dict[str, Any]:
    return obj(
        "batch/v1",
        "Job",
        "pi-launcher",
        spec={
            "suspend": suspend,
            "backoffLimit": 6,
            "template": {
                "metadata": {"labels": {"role": "launcher"}},
                "spec": {
                    "restartPolicy": "OnFailure",
                    "nodeSelector": {"zone": "a"},
                    "containers": [{"name": "launcher", "image": "mpi:1"}],
                },
            },
        },
    )


def server_defaulted_pod(desired: dict[str, Any]) -> dict[str, Any]:
    """A Pod as the API server stores it: defaults, canonical quantities, extra labels/volumes, status."""
    live = as_live(desired)
    live["metadata"]["labels"]["pod-template-hash"] = "abc"
    live["metadata"]["annotations"] = {"kubectl.kubernetes.io/default-container": "worker"}
    spec = live["spec"]
    spec.update(
        restartPolicy="Always",
        dnsPolicy="ClusterFirst",
        schedulerName="default-scheduler",
        terminationGracePeriodSeconds=30,
        securityContext={},
        enableServiceLinks=True,
        preemptionPolicy="PreemptLowerPriority",
        priority=0,
        tolerations=[{"key": "node.kubernetes.io/not-ready", "operator": "Exists", "effect": "NoExecute"}],
    )
    c = spec["containers"][0]
    c.update(
        imagePullPolicy="IfNotPresent",
        terminationMessagePath="/dev/termination-log",
        terminationMessagePolicy="File",
    )
    c["env"] = list(reversed(c["env"]))
    c["ports"] = [{"containerPort": 22, "protocol": "TCP"}]
    c["resources"] = {"limits": {"cpu": "1", "memory": "1073741824"}, "requests": {"cpu": "500m"}}
    c["volumeMounts"].append({"name": "kube-api-access", "mountPath": "/var/run/secrets/kubernetes.io"})
    spec["volumes"][0]["secret"]["defaultMode"] = 384
    spec["volumes"].append({"name": "kube-api-access", "projected": {"sources": []}})
    live["status"] = {"phase": "Pending", "conditions": [{"type": "PodScheduled", "status": "True"}]}
    return live


def only(plan_: Plan) -> Any:
    assert len(plan_) == 1, str(plan_)
    return plan_.entries[0]


# --- identity, ownership, creates, deletes, conflicts -------------------------------------------------


def test_missing_objects_are_created_in_kind_order_preserving_render_order() -> None:
    desired = [job(), pod("pi-worker-1"), configmap(), pod("pi-worker-0"), service()]
    result = plan(desired, [], POLICY, OWNER)
    assert [str(c.key) for c in result.creates] == [
        f"Service {NS}/pi",
        f"ConfigMap {NS}/pi-config",
        f"Pod {NS}/pi-worker-1",
        f"Pod {NS}/pi-worker-0",
        f"Job.batch {NS}/pi-launcher",
    ]
    assert not result.patches and not result.deletes and not result.conflicts
    create = result.creates[0]
    assert isinstance(create, Create) and create.api_version == "v1" and create.body == service()


def test_identity_is_group_kind_namespace_name_not_version() -> None:
    desired = obj("scheduling.x-k8s.io/v1alpha1", "PodGroup", "pi", spec={"minMember": 2})
    live = as_live(obj("scheduling.x-k8s.io/v1beta1", "PodGroup", "pi", spec={"minMember": 2}))
    assert not plan([desired], [live], POLICY, OWNER)
    other_group = as_live(obj("scheduling.volcano.sh/v1beta1", "PodGroup", "pi", spec={"minMember": 2}))
    result = plan([desired], [other_group], POLICY, OWNER)
    assert len(result.creates) == 1 and len(result.deletes) == 1
    assert ObjectKey.of(desired) == ObjectKey("scheduling.x-k8s.io", "PodGroup", NS, "pi")


def test_owned_objects_no_longer_desired_are_deleted_with_their_uid() -> None:
    keep, gone = pod("pi-worker-0"), pod("pi-worker-1")
    live = [as_live(keep, "uid-0"), as_live(gone, "uid-1"), as_live(configmap(), "uid-cm")]
    result = plan([keep], live, Policy(field_manager=FIELD_MANAGER, order=("ConfigMap", "Pod")), OWNER)
    assert result.deletes == (
        Delete(ObjectKey("", "Pod", NS, "pi-worker-1"), "v1", "uid-1"),
        Delete(ObjectKey("", "ConfigMap", NS, "pi-config"), "v1", "uid-cm"),
    ), "pods before the ConfigMap: deletes run in reverse create order"
    assert not result.creates and not result.patches


def test_kinds_left_to_the_garbage_collector_are_never_deleted() -> None:
    live = [
        as_live(configmap(), "uid-cm"),
        as_live(service(), "uid-svc"),
        as_live(pod("pi-worker-0"), "uid-0"),
    ]
    result = plan([], live, POLICY, OWNER)
    assert [d.key.kind for d in result.deletes] == ["Pod"], result.deletes


def test_objects_we_do_not_control_are_never_deleted() -> None:
    launcher_pod = as_live(obj("v1", "Pod", "pi-launcher-x"), "uid-lp")
    launcher_pod["metadata"]["ownerReferences"] = [
        {"apiVersion": "batch/v1", "kind": "Job", "name": "pi-launcher", "uid": "job-uid", "controller": True}
    ]
    non_controller = as_live(obj("v1", "Pod", "pi-worker-9"), "uid-9")
    non_controller["metadata"]["ownerReferences"] = [owner_ref(controller=False)]
    unowned = as_live(configmap("stray"), "uid-s")
    del unowned["metadata"]["ownerReferences"]
    assert not plan([], [launcher_pod, non_controller, unowned], POLICY, OWNER)


@pytest.mark.parametrize(
    "refs",
    [
        [],  # e.g. created by a user
        [owner_ref(OTHER)],  # another MPIJob, or an earlier one with the same name
        [owner_ref(controller=False)],  # ours, but not as controller
    ],
    ids=["no-owner", "other-controller", "not-controller"],
)
def test_wanted_name_held_by_foreign_object_is_a_conflict_and_untouched(refs: list[dict[str, Any]]) -> None:
    desired = configmap(hostfile="new\n")
    live = as_live(configmap(hostfile="old\n"), "uid-foreign")
    live["metadata"]["ownerReferences"] = refs
    result = plan([desired], [live], POLICY, OWNER)
    conflict = only(result)
    assert isinstance(conflict, Conflict)
    assert conflict.holder_uid == "uid-foreign"
    assert conflict.controller_uid == controller_uid(live)
    assert result.writes == 0
    assert bool(result), "a conflict must not look like a converged plan"


def test_objects_being_deleted_are_waited_for_not_patched_or_deleted_again() -> None:
    desired = configmap(hostfile="new\n")
    dying = as_live(configmap(hostfile="old\n"), "uid-old", deletionTimestamp="2026-01-01T00:00:01Z")
    assert plan([desired], [dying], POLICY, OWNER) == Plan(
        waits=(Wait(ObjectKey("", "ConfigMap", NS, "pi-config"), "uid-old"),)
    )
    assert not plan([], [dying], POLICY, OWNER)


def test_plan_needs_an_owner_and_unique_desired_objects() -> None:
    with pytest.raises(ValueError, match="owner_uid"):
        plan([], [], POLICY, "")
    with pytest.raises(ValueError, match="twice"):
        plan([configmap(), configmap()], [], POLICY, OWNER)


# --- zero writes when live holds what we render ---------------------------------------------------------


def test_converged_objects_with_server_defaults_produce_no_plan() -> None:
    desired = [service(), configmap(), pod(), job()]
    live = [as_live(service()), as_live(configmap()), server_defaulted_pod(pod()), as_live(job())]
    live[0]["spec"].update(
        clusterIPs=["None"],
        type="ClusterIP",
        sessionAffinity="None",
        ipFamilies=["IPv4"],
        internalTrafficPolicy="Cluster",
    )
    live[0]["spec"]["ports"][0]["protocol"] = "TCP"
    live[3]["spec"]["selector"] = {"matchLabels": {"batch.kubernetes.io/controller-uid": "x"}}
    live[3]["spec"]["template"]["metadata"]["labels"]["batch.kubernetes.io/controller-uid"] = "x"
    result = plan(desired, live, POLICY, OWNER)
    assert not result, str(result)
    assert str(result) == "plan: no changes"


@pytest.mark.parametrize(
    ("desired", "live", "path"),
    [
        ("1000m", "1", ("resources", "limits", "cpu")),
        (1, "1", ("resources", "limits", "cpu")),
        ("1Gi", "1073741824", ("resources", "requests", "memory")),
        (0.5, "500m", ("resources", "requests", "cpu")),
        ("0.1", "100m", ("overhead", "cpu")),
        ("1k", "1000", ("emptyDir", "sizeLimit")),
        (420, 420.0, ("secret", "defaultMode")),
        (0o644, 420, ("configMap", "defaultMode")),
    ],
)
def test_equal_values_in_kubernetes_semantics(desired: Any, live: Any, path: tuple[str, ...]) -> None:
    assert scalar_equal(desired, live, path)


@pytest.mark.parametrize(
    ("desired", "live", "path"),
    [
        ("1Gi", "1G", ("resources", "limits", "memory")),
        ("1", "1000", ("env", "value")),  # not a quantity path: strings compare as strings
        (8080, "8080", ("ports", "targetPort")),  # int-or-string keeps its JSON type
        (True, 1, ("spec", "suspend")),
        (1, True, ("spec", "parallelism")),
        ("true", True, ("metadata", "annotations", "a")),
    ],
)
def test_unequal_values_in_kubernetes_semantics(desired: Any, live: Any, path: tuple[str, ...]) -> None:
    assert not scalar_equal(desired, live, path)


def test_zero_values_equal_absent_fields_but_not_other_values() -> None:
    desired = {"spec": {"suspend": False, "replicas": 0, "note": "", "args": [], "ctx": {}, "x": None}}
    assert holds(desired, {"spec": {}})
    assert holds(desired, {})
    assert not holds(desired, {"spec": {"suspend": True}})
    assert not holds({"spec": {"replicas": 0}}, {"spec": {"replicas": 2}})
    assert is_zero({"a": {"b": False}}) and not is_zero({"a": 1})


def test_label_and_annotation_maps_are_subsets() -> None:
    desired = configmap()
    desired["metadata"]["labels"] = {"app": "pi"}
    live = as_live(desired)
    live["metadata"]["labels"]["added-by-someone"] = "x"
    assert not plan([desired], [live], POLICY, OWNER)
    live["metadata"]["labels"]["app"] = "other"
    assert plan([desired], [live], POLICY, OWNER).patches


def test_list_maps_compare_by_key_in_any_order() -> None:
    assert list_type(("spec", "containers")).keys == ("name",)
    assert list_type(("spec", "containers", "ports")).keys == ("containerPort", "protocol")
    assert list_type(("spec", "ports")).keys == ("port", "protocol")
    assert list_type(("spec", "template", "spec", "containers", "volumeMounts")).keys == ("mountPath",)
    assert list_type(("status", "conditions")).keys == ("type",)
    assert list_type(("spec", "tolerations")).kind == "atomic"
    want = {"status": {"conditions": [{"type": "A", "status": "True"}, {"type": "B", "status": "False"}]}}
    live = {
        "status": {
            "conditions": [{"type": "B", "status": "False", "reason": "x"}, {"type": "A", "status": "True"}]
        }
    }
    assert holds(want, live)
    live["status"]["conditions"][1]["status"] = "False"
    assert not holds(want, live)


def test_udp_port_is_a_different_item_than_the_tcp_default() -> None:
    want = {"spec": {"ports": [{"port": 53, "protocol": "UDP"}]}}
    assert not holds(want, {"spec": {"ports": [{"port": 53, "protocol": "TCP"}]}})
    assert holds({"spec": {"ports": [{"port": 53}]}}, {"spec": {"ports": [{"port": 53, "protocol": "TCP"}]}})


def test_atomic_lists_are_compared_whole_and_in_order() -> None:
    tol = [{"key": "a", "operator": "Exists"}, {"key": "b", "operator": "Exists"}]
    want = {"spec": {"tolerations": tol}}
    assert holds(want, {"spec": {"tolerations": copy.deepcopy(tol)}})
    assert not holds(want, {"spec": {"tolerations": list(reversed(tol))}})
    assert not holds(want, {"spec": {"tolerations": [*tol, {"key": "c", "operator": "Exists"}]}})
    assert not holds({"command": ["a", "b"]}, {"command": ["a", "b", "c"]})


def test_sets_compare_as_sets() -> None:
    assert holds({"metadata": {"finalizers": ["a", "b"]}}, {"metadata": {"finalizers": ["b", "x", "a"]}})
    assert not holds({"metadata": {"finalizers": ["a", "b"]}}, {"metadata": {"finalizers": ["b"]}})


def test_strict_equal_tells_bool_from_int() -> None:
    assert {"a": True} == {"a": 1}  # why strict_equal exists
    assert not strict_equal({"a": True}, {"a": 1})
    assert strict_equal({"a": [1, {"b": "c"}]}, {"a": [1, {"b": "c"}]})


def test_mask_shows_live_through_the_desired_shape() -> None:
    want = {"a": {"cpu": "1"}, "containers": [{"name": "x", "v": 1}], "c": "keep"}
    live = {"a": {"cpu": "1", "extra": 1}, "containers": [{"name": "y"}, {"name": "x", "v": 2}], "z": 0}
    assert mask(want, live) == {"a": {"cpu": "1"}, "containers": [{"name": "x", "v": 2}]}
    # an unknown list is atomic: a different length shows live whole
    assert mask({"b": [{"name": "x"}]}, {"b": [{"name": "y"}, {"name": "x"}]}) == {
        "b": [{"name": "y"}, {"name": "x"}]
    }


def test_secret_string_data_is_compared_as_base64_data() -> None:
    desired = obj("v1", "Secret", "pi-ssh", type="Opaque", stringData={"k": "v"})
    live = as_live(obj("v1", "Secret", "pi-ssh", type="Opaque", data={"k": "dg=="}))
    policy = Policy(field_manager=FIELD_MANAGER, kinds={("", "Secret"): KindPolicy("patch")})
    assert not plan([desired], [live], policy, OWNER)
    live["data"]["k"] = "dzI="
    assert plan([desired], [live], policy, OWNER).patches[0].json_patch == (
        {"op": "replace", "path": "/data/k", "value": "dg=="},
    )


# --- patches ------------------------------------------------------------------------------------------


def test_patch_mode_kind_is_applied_whole_with_a_json_patch_description() -> None:
    desired = configmap(hostfile="pi-worker-0 slots=2\n")
    live = as_live(configmap(hostfile="pi-worker-0 slots=1\n"), "uid-cm")
    patch = only(plan([desired], [live], POLICY, OWNER))
    assert patch.uid == "uid-cm"
    assert patch.body == desired
    assert patch.json_patch == (
        {"op": "replace", "path": "/data/hostfile", "value": "pi-worker-0 slots=2\n"},
    )
    assert str(patch) == f"patch ConfigMap {NS}/pi-config: replace /data/hostfile"


def test_deleting_a_rendered_field_on_the_server_yields_a_patch() -> None:
    live = as_live(service())
    del live["spec"]["selector"]
    patch = only(plan([service()], [live], POLICY, OWNER))
    assert patch.json_patch == (
        {"op": "add", "path": "/spec/selector", "value": {"training.kubeflow.org/job-name": "pi"}},
    )


def test_int_or_string_type_change_is_drift() -> None:
    live = as_live(service())
    live["spec"]["ports"][0]["targetPort"] = "22"
    patch = only(plan([service()], [live], POLICY, OWNER))
    assert patch.json_patch == ({"op": "replace", "path": "/spec/ports/0/targetPort", "value": 22},)


def test_create_only_pod_ignores_spec_drift_and_patches_only_labels_and_annotations() -> None:
    desired = pod()
    live = server_defaulted_pod(pod())
    live["spec"]["containers"][0]["image"] = "mpi:0"  # immutable drift: never recreate
    assert not plan([desired], [live], POLICY, OWNER)

    desired["metadata"]["labels"]["extra"] = "yes"
    desired["metadata"]["annotations"] = {"note": "n"}
    patch = only(plan([desired], [live], POLICY, OWNER))
    assert patch.paths == ("metadata.labels", "metadata.annotations")
    assert patch.body == {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": "pi-worker-0",
            "namespace": NS,
            "labels": desired["metadata"]["labels"],
            "annotations": {"note": "n"},
        },
    }
    assert {op["path"] for op in patch.json_patch} == {"/metadata/labels/extra", "/metadata/annotations/note"}


def test_create_only_secret_ignores_data_drift() -> None:
    desired = obj("v1", "Secret", "pi-ssh", type="kubernetes.io/ssh-auth", data={"ssh-privatekey": "bmV3"})
    live = as_live(
        obj("v1", "Secret", "pi-ssh", type="kubernetes.io/ssh-auth", data={"ssh-privatekey": "b2xk"})
    )
    assert not plan([desired], [live], POLICY, OWNER)


def test_running_job_accepts_only_suspend() -> None:
    live = as_live(job(suspend=False))
    live["status"] = {"startTime": "2026-01-01T00:00:00Z", "active": 1}
    desired = job(suspend=False)
    desired["spec"]["backoffLimit"] = 1
    desired["spec"]["template"]["spec"]["nodeSelector"] = {"zone": "b"}
    assert not plan([desired], [live], POLICY, OWNER), "immutable template drift is ignored"

    desired["spec"]["suspend"] = True
    patch = only(plan([desired], [live], POLICY, OWNER))
    assert patch.json_patch == ({"op": "replace", "path": "/spec/suspend", "value": True},)
    # Live has no managedFields of ours: no field of the immutable template is ours to keep.
    assert patch.body["spec"] == {"suspend": True}


def evicted_launcher() -> tuple[dict[str, Any], dict[str, Any]]:
    """Kueue's eviction of a job it admitted with a nodeSelector and a toleration: the launcher Job got
    both through our apply while suspended, then ran; now desired is suspended and has neither."""
    live = as_live(job(suspend=False))
    template = live["spec"]["template"]
    template["spec"]["tolerations"] = [{"key": "gpu", "operator": "Exists"}]
    # The Job controller's labels, set by the API server on create: owned by no manager.
    template["metadata"]["labels"].update({"controller-uid": "uid-live", "job-name": "pi-launcher"})
    live["status"] = {"startTime": "2026-01-01T00:00:00Z", "active": 1}
    live["metadata"]["managedFields"] = [
        {
            "manager": FIELD_MANAGER,
            "operation": "Update",
            "fieldsType": "FieldsV1",
            "fieldsV1": {"f:spec": {"f:suspend": {}, "f:backoffLimit": {}}},
        },
        {
            "manager": FIELD_MANAGER,
            "operation": "Apply",
            "fieldsType": "FieldsV1",
            "fieldsV1": {
                "f:spec": {
                    "f:suspend": {},
                    "f:template": {
                        "f:metadata": {"f:labels": {".": {}, "f:role": {}}},
                        "f:spec": {"f:nodeSelector": {}, "f:tolerations": {}},
                    },
                }
            },
        },
    ]
    desired = job(suspend=True)
    del desired["spec"]["template"]["spec"]["nodeSelector"]
    return desired, live


def test_suspending_an_evicted_job_keeps_what_we_applied_to_its_immutable_template() -> None:
    """Leaving out the nodeSelector and toleration we applied would ask server-side apply to remove
    them from a template that is immutable now: the server rejects the whole apply (422), the launcher
    is never suspended and Kueue's ClusterQueue deadlocks. They are sent again, as live has them, and
    nothing else of the template: the Job controller's labels are not ours to own."""
    desired, live = evicted_launcher()
    patch = only(plan([desired], [live], POLICY, OWNER))
    assert patch.json_patch == ({"op": "replace", "path": "/spec/suspend", "value": True},)
    assert patch.body["spec"] == {
        "suspend": True,
        "template": {
            "metadata": {"labels": {"role": "launcher"}},
            "spec": {"nodeSelector": {"zone": "a"}, "tolerations": [{"key": "gpu", "operator": "Exists"}]},
        },
    }
    assert patch.removal_patch == ()


def test_suspended_unstarted_job_accepts_scheduling_directives() -> None:
    live = as_live(job(suspend=True))
    desired = job(suspend=False)
    desired["spec"]["template"]["spec"]["nodeSelector"] = {"zone": "b"}
    desired["spec"]["template"]["spec"]["tolerations"] = [{"key": "gpu", "operator": "Exists"}]
    desired["spec"]["template"]["spec"]["schedulingGates"] = [{"name": "wait"}]
    desired["spec"]["template"]["metadata"]["annotations"] = {"kueue": "admitted"}
    desired["spec"]["template"]["spec"]["containers"][0]["image"] = "mpi:2"  # never mutable
    patch = only(plan([desired], [live], POLICY, OWNER))
    assert {op["path"] for op in patch.json_patch} == {
        "/spec/suspend",
        "/spec/template/spec/nodeSelector/zone",
        "/spec/template/spec/tolerations",
        "/spec/template/spec/schedulingGates",
        "/spec/template/metadata/annotations",
    }
    template = patch.body["spec"]["template"]
    assert template["spec"]["nodeSelector"] == {"zone": "b"}
    assert "containers" not in template["spec"]


def test_suspended_but_started_job_keeps_its_template() -> None:
    live = as_live(job(suspend=True))
    live["status"] = {"startTime": "2026-01-01T00:00:00Z"}
    desired = job(suspend=True)
    desired["spec"]["template"]["spec"]["nodeSelector"] = {"zone": "b"}
    assert not plan([desired], [live], POLICY, OWNER)


def test_conditional_rule_is_generic_and_can_follow_the_desired_state() -> None:
    rule = MutableWhen(when=(PathIs("spec.paused", True),), paths=("spec.size",), or_desired=True)
    policy = Policy(
        field_manager=FIELD_MANAGER,
        kinds={("example.com", "Thing"): KindPolicy("create-only", ("spec.paused",), (rule,))},
    )
    desired = obj("example.com/v1", "Thing", "t", spec={"paused": True, "size": 3, "color": "red"})
    live = as_live(obj("example.com/v1", "Thing", "t", spec={"paused": False, "size": 2, "color": "blue"}))
    patch = only(plan([desired], [live], policy, OWNER))
    assert {op["path"] for op in patch.json_patch} == {"/spec/paused", "/spec/size"}
    live_only = attrs_evolve_rule(rule, or_desired=False)
    policy2 = Policy(
        field_manager=FIELD_MANAGER,
        kinds={("example.com", "Thing"): KindPolicy("create-only", ("spec.paused",), (live_only,))},
    )
    patch2 = only(plan([desired], [live], policy2, OWNER))
    assert {op["path"] for op in patch2.json_patch} == {"/spec/paused"}


def attrs_evolve_rule(rule: MutableWhen, **changes: Any) -> MutableWhen:
    import attrs

    return attrs.evolve(rule, **changes)


def test_unknown_policy_mode_is_rejected() -> None:
    with pytest.raises(ValueError, match="mode"):
        KindPolicy("recreate")  # type: ignore[arg-type]


# --- the Plan as data -----------------------------------------------------------------------------------


def test_plan_is_printable_serialisable_and_comparable() -> None:
    live = [as_live(configmap(hostfile="old\n"), "uid-cm"), as_live(pod("pi-worker-3"), "uid-3")]
    foreign = as_live(service(), "uid-svc")
    foreign["metadata"]["ownerReferences"] = []
    desired = [configmap(), service(), pod()]
    one = plan(desired, [*live, foreign], POLICY, OWNER)
    two = plan(copy.deepcopy(desired), copy.deepcopy([*live, foreign]), POLICY, OWNER)
    assert one == two
    assert one != Plan()
    assert not Plan() and len(Plan()) == 0
    data = json.loads(json.dumps(one.to_dict()))
    assert [e["action"] for key in ("creates", "patches", "deletes", "conflicts") for e in data[key]] == [
        "create",
        "patch",
        "delete",
        "conflict",
    ]
    assert data["deletes"][0]["uid"] == "uid-3"
    assert str(one).splitlines() == [
        "plan:",
        f"  create Pod {NS}/pi-worker-0",
        f"  patch ConfigMap {NS}/pi-config: replace /data/hostfile",
        f"  delete Pod {NS}/pi-worker-3 (uid uid-3)",
        f"  conflict Service {NS}/pi: held by uid uid-svc (no controller)",
    ]
