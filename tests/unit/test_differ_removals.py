"""L0: removals found from managedFields (engine/managedfields.py, semantics_removals.py, rule 5).

The fieldsV1 samples are what kube-apiserver v1.35 recorded for objects created by the executor.
"""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest

from reconcile.engine.differ import plan
from reconcile.engine.managedfields import Step, encode, merge, owned_by, parse_step
from reconcile.engine.policy import Policy
from reconcile.engine.semantics_removals import find_removals
from reconcile.mpijob.policy import FIELD_MANAGER, POLICY
from reconcile.runtime.informer import slim

RECORDED = Path(__file__).resolve().parent / "recorded"
OWNER = "11111111-1111-1111-1111-111111111111"


def entry(
    fields: dict[str, Any], operation: str = "Update", manager: str = FIELD_MANAGER, **extra: Any
) -> dict:
    return {"manager": manager, "operation": operation, "fieldsType": "FieldsV1", "fieldsV1": fields, **extra}


def owned(obj: dict[str, Any], *entries: dict[str, Any]) -> dict[str, Any]:
    out = copy.deepcopy(obj)
    out["metadata"]["managedFields"] = list(entries)
    return out


def paths(removals: Any) -> list[str]:
    return [r.path for r in removals]


# --- decoding -------------------------------------------------------------------------------------


def test_steps_decode_every_kind_of_key() -> None:
    assert parse_step("f:metadata") == Step("f", "metadata")
    assert parse_step("f:example.com/a:b") == Step("f", "example.com/a:b")  # only the first colon splits
    assert parse_step('k:{"containerPort":80,"protocol":"TCP"}') == Step(
        "k", {"containerPort": 80, "protocol": "TCP"}
    )
    assert parse_step('v:"foregroundDeletion"') == Step("v", "foregroundDeletion")
    assert parse_step("i:3") == Step("i", 3)
    for bad in (".", "x:1", "metadata", 'k:"name"', "i:x"):
        with pytest.raises(ValueError):
            parse_step(bad)


def test_steps_find_their_item_in_live_lists() -> None:
    ports = [{"containerPort": 22}, {"containerPort": 80, "protocol": "UDP"}, {"containerPort": 80}]
    # The key field's server default (protocol TCP) applies to items that omit it.
    assert parse_step('k:{"containerPort":80,"protocol":"TCP"}').find(ports) == ({"containerPort": 80}, 2)
    assert parse_step('k:{"containerPort":"80","protocol":"TCP"}').find(ports) is None  # types matter
    assert parse_step('v:"b"').find(["a", "b"]) == ("b", 1)
    assert parse_step("i:1").find(["a", "b"]) == ("b", 1)
    assert parse_step("f:a").find({"a": None}) == (None, "a")
    assert parse_step("f:a").find(["a"]) is None and parse_step('v:"a"').find({"a": 1}) is None


def test_owned_by_merges_our_operations_and_leaves_out_subresources_and_others() -> None:
    obj = owned(
        {"metadata": {}},
        entry({"f:metadata": {"f:labels": {"f:a": {}}}}),
        entry({"f:metadata": {"f:labels": {"f:b": {}}}, "f:spec": {"f:x": {}}}, "Apply"),
        entry({"f:status": {"f:phase": {}}}, subresource="status"),
        entry({"f:metadata": {"f:labels": {"f:c": {}}}}, manager="kueue"),
    )
    assert owned_by(obj, FIELD_MANAGER) == {
        "f:metadata": {"f:labels": {"f:a": {}, "f:b": {}}},
        "f:spec": {"f:x": {}},
    }
    assert owned_by(obj, FIELD_MANAGER, others=True) == {"f:metadata": {"f:labels": {"f:c": {}}}}
    assert owned_by({"metadata": {}}, FIELD_MANAGER) == {}
    assert [e["manager"] for e in slim(obj)["metadata"]["managedFields"]] == [FIELD_MANAGER] * 2 + ["kueue"]


def test_merge_is_a_union() -> None:
    assert merge([{"f:a": {"f:b": {}}}, {"f:a": {"f:c": {}}, "f:d": {}}]) == {
        "f:a": {"f:b": {}, "f:c": {}},
        "f:d": {},
    }


def test_encode_matches_what_the_server_records_for_granular_fields() -> None:
    rec = json.loads((RECORDED / "volcano.json").read_text())
    cm_want, cm_live = (
        next(o for o in objs if o["kind"] == "ConfigMap") for objs in (rec["desired"], rec["live"])
    )
    server = cm_live["metadata"]["managedFields"][0]["fieldsV1"]
    mine = encode(cm_want)
    assert mine["f:data"] == server["f:data"]
    assert mine["f:metadata"]["f:labels"] == server["f:metadata"]["f:labels"]
    assert set(mine["f:metadata"]["f:ownerReferences"]) == set(server["f:metadata"]["f:ownerReferences"])
    assert "f:name" not in mine["f:metadata"] and "f:kind" not in mine


# --- the walk ---------------------------------------------------------------------------------------


POD_FIELDS = {  # recorded: a worker pod created by POST (decode-time defaults included)
    "f:metadata": {
        "f:annotations": {".": {}, "f:scheduling.k8s.io/group-name": {}},
        "f:labels": {".": {}, "f:role": {}, "f:team": {}},
    },
    "f:spec": {
        "f:containers": {
            'k:{"name":"w"}': {
                ".": {},
                "f:env": {".": {}, 'k:{"name":"A"}': {".": {}, "f:name": {}, "f:value": {}}},
                "f:image": {},
                "f:terminationMessagePath": {},
            }
        },
        "f:dnsPolicy": {},
        "f:enableServiceLinks": {},
        "f:nodeSelector": {},
    },
}


def pod(**labels: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "p", "namespace": "ns", "labels": labels, "resourceVersion": "42"},
        "spec": {
            "containers": [
                {
                    "name": "w",
                    "image": "i",
                    "env": [{"name": "A", "value": "1"}],
                    "terminationMessagePath": "/t",
                }
            ],
            "dnsPolicy": "ClusterFirst",
            "enableServiceLinks": True,
            "nodeSelector": {"zone": "a", "disk": "ssd"},
        },
    }


def test_fields_we_own_and_desired_lacks_are_found_inside_the_scopes_only() -> None:
    live = pod(role="w", team="a")
    want = pod(role="w")
    del want["spec"]["dnsPolicy"]
    assert paths(find_removals(want, live, POD_FIELDS, {}, ["metadata.labels"])) == ["/metadata/labels/team"]
    found = find_removals(want, live, POD_FIELDS, {}, ["metadata.labels", "spec"])
    assert paths(found) == ["/spec/dnsPolicy", "/metadata/labels/team"]


def test_list_map_items_and_their_fields() -> None:
    live = pod()
    live["spec"]["containers"][0]["env"].insert(0, {"name": "Z", "value": "9"})  # not ours
    want = pod()
    want["spec"]["containers"][0]["env"] = []
    got = find_removals(want, live, POD_FIELDS, {}, ["spec.containers"])
    assert paths(got) == ["/spec/containers/0/env/1"]  # live's index of item A
    want["spec"]["containers"] = []
    assert paths(find_removals(want, live, POD_FIELDS, {}, ["spec.containers"])) == ["/spec/containers/0"]


def test_several_items_of_one_list_are_removed_last_first() -> None:
    fields = {"f:metadata": {"f:finalizers": {".": {}, 'v:"a"': {}, 'v:"b"': {}, 'v:"c"': {}}}}
    live = {"metadata": {"finalizers": ["a", "b", "x", "c"]}}
    want = {"metadata": {"finalizers": ["b"]}}
    got = find_removals(want, live, fields, {}, ["metadata.finalizers"])
    assert paths(got) == ["/metadata/finalizers/3", "/metadata/finalizers/0"]
    items = [{"k": "a"}, {"k": "b"}, {"k": "c"}]
    assert paths(find_removals({"l": []}, {"l": items}, {"f:l": {"i:0": {}, "i:2": {}}}, {}, ["l"])) == [
        "/l/2",
        "/l/0",
    ]


def test_a_scope_below_a_missing_field_is_walked_into_never_removed_whole() -> None:
    live = pod(role="w", team="a")
    want = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"}}
    assert paths(find_removals(want, live, POD_FIELDS, {}, ["metadata.labels"])) == ["/metadata/labels"]
    # metadata itself is above the scope: never removed, though desired lacks labels' siblings too
    got = find_removals(want, live, POD_FIELDS, {}, ["metadata.labels.team"])
    assert paths(got) == ["/metadata/labels/team"]


def test_server_defaults_and_structural_zeros_are_not_removals() -> None:
    fields = {"f:spec": {"f:type": {}, "f:suspend": {}, "f:securityContext": {}, "f:backoffLimit": {}}}
    live = {"spec": {"type": "ClusterIP", "suspend": False, "securityContext": {}, "backoffLimit": 0}}
    defaults = {"spec.type": "ClusterIP"}
    assert paths(find_removals({"spec": {}}, live, fields, {}, ["spec"], defaults)) == ["/spec/backoffLimit"]
    live["spec"]["type"] = "NodePort"  # not the default: ours to take back
    assert "/spec/type" in paths(find_removals({"spec": {}}, live, fields, {}, ["spec"], defaults))


def test_fields_another_manager_owns_too_stay() -> None:
    live = pod(role="w", team="a")
    want = pod()
    others = {"f:metadata": {"f:labels": {"f:team": {}}}}
    assert paths(find_removals(want, live, POD_FIELDS, others, ["metadata.labels"])) == [
        "/metadata/labels/role"
    ]
    # They own something below a node desired lacks: only our parts below it go.
    del want["metadata"]["labels"]
    assert paths(find_removals(want, live, POD_FIELDS, others, ["metadata.labels"])) == [
        "/metadata/labels/role"
    ]
    # They own an atomic map whole: it stays.
    want = pod()
    want["spec"]["nodeSelector"] = {"zone": "a"}
    assert not find_removals(
        want, live, POD_FIELDS, {"f:spec": {"f:nodeSelector": {}}}, ["spec.nodeSelector"]
    )


def test_keys_of_an_atomic_map_we_own_whole_are_removed() -> None:
    live, want = pod(), pod()
    want["spec"]["nodeSelector"] = {"zone": "a"}
    got = find_removals(want, live, POD_FIELDS, {}, ["spec.nodeSelector"])
    assert paths(got) == ["/spec/nodeSelector/disk"] and got[0].value == "ssd"


def test_fields_already_gone_from_live_are_not_removed_again() -> None:
    live = pod()
    del live["spec"]["nodeSelector"]
    live["metadata"]["labels"] = {}
    assert not find_removals(pod(), live, POD_FIELDS, {}, ["metadata", "spec"])


def test_pointer_tokens_are_escaped() -> None:
    fields = {"f:metadata": {"f:labels": {"f:a/b~c": {}}}}
    live = {"metadata": {"labels": {"a/b~c": "1"}}}
    want = {"metadata": {"labels": {"x": "1"}}}
    assert paths(find_removals(want, live, fields, {}, ["metadata.labels"])) == ["/metadata/labels/a~1b~0c"]


# --- plan ----------------------------------------------------------------------------------------


def owner_ref() -> dict[str, Any]:
    return {
        "apiVersion": "kubeflow.org/v2beta1",
        "kind": "MPIJob",
        "name": "pi",
        "uid": OWNER,
        "controller": True,
    }


def child(kind: str, api_version: str = "v1", **fields: Any) -> dict[str, Any]:
    meta = {"name": "c", "namespace": "ns", "labels": {"app": "pi"}, "ownerReferences": [owner_ref()]}
    return {"apiVersion": api_version, "kind": kind, "metadata": meta, **fields}


def server_copy(want: dict[str, Any], fields: dict[str, Any] | None = None, **extra_entries: Any) -> dict:
    """``want`` as created by our POST: server metadata and our Update entry."""
    live = copy.deepcopy(want)
    live["metadata"].update({"uid": "uid-c", "resourceVersion": "7"})
    live["metadata"]["managedFields"] = [entry(fields if fields is not None else encode(want))]
    return live


def test_podgroup_min_resources_no_longer_rendered_is_a_removal_only_patch() -> None:
    before = child(
        "PodGroup", "scheduling.volcano.sh/v1beta1", spec={"minMember": 3, "minResources": {"cpu": "3"}}
    )
    live = server_copy(before)
    after = copy.deepcopy(before)
    del after["spec"]["minResources"]
    result = plan([after], [live], POLICY, OWNER)
    (patch,) = result.patches
    assert patch.body is None
    assert patch.removal_patch == (
        {"op": "test", "path": "/metadata/resourceVersion", "value": "7"},
        {"op": "remove", "path": "/spec/minResources"},
    )
    assert str(result) == "plan:\n  patch PodGroup.scheduling.volcano.sh ns/c: remove /spec/minResources"
    assert patch.to_dict()["removalPatch"] == list(patch.removal_patch)
    assert not plan([before], [live], POLICY, OWNER)


def test_drift_and_removal_in_one_object_make_both_parts() -> None:
    before = child("ConfigMap", data={"a": "1", "b": "2"})
    live = server_copy(before)
    after = child("ConfigMap", data={"a": "changed"})
    (patch,) = plan([after], [live], POLICY, OWNER).patches
    assert patch.body is not None and patch.body["data"] == {"a": "changed"}
    assert [op["path"] for op in patch.json_patch] == ["/data/a", "/data/b"]
    assert [op["op"] for op in patch.removal_patch] == ["test", "remove"]


def test_service_defaults_owned_by_our_create_are_not_removals() -> None:
    want = child("Service", spec={"clusterIP": "None", "selector": {"app": "pi"}})
    live = server_copy(want)
    live["spec"].update({"type": "ClusterIP", "sessionAffinity": "None", "internalTrafficPolicy": "Cluster"})
    fields = copy.deepcopy(live["metadata"]["managedFields"][0]["fieldsV1"])
    fields["f:spec"].update({"f:type": {}, "f:sessionAffinity": {}, "f:internalTrafficPolicy": {}})
    fields["f:spec"]["f:selector"] = {}  # atomic: the server records it whole
    live["metadata"]["managedFields"][0]["fieldsV1"] = fields
    assert not plan([want], [live], POLICY, OWNER)
    # Without the kind's defaults they would look like removals, forever.
    assert len(plan([want], [live], Policy(field_manager=FIELD_MANAGER), OWNER).patches) == 1
    # The selector is an atomic map: a key no longer rendered goes.
    live["spec"]["selector"]["old"] = "x"
    (patch,) = plan([want], [live], POLICY, OWNER).patches
    assert [op["path"] for op in patch.json_patch] == ["/spec/selector/old"]


def test_create_only_kinds_remove_only_labels_and_annotations() -> None:
    want = child("Pod", spec={"containers": [{"name": "w", "image": "i"}], "hostname": "h"})
    live = server_copy(want)
    live["metadata"]["labels"]["old"] = "x"
    live["metadata"]["managedFields"] = [entry(encode(live))]
    after = copy.deepcopy(want)
    del after["spec"]["hostname"]  # immutable: never removed
    (patch,) = plan([after], [live], POLICY, OWNER).patches
    assert [op["path"] for op in patch.json_patch] == ["/metadata/labels/old"] and patch.body is None


def test_suspended_job_template_directives_are_removable_running_ones_are_not() -> None:
    tmpl = {"metadata": {"labels": {"r": "l"}}, "spec": {"nodeSelector": {"z": "a"}, "containers": []}}
    want = child("Job", "batch/v1", spec={"suspend": True, "template": tmpl})
    live = server_copy(want)
    after = copy.deepcopy(want)
    del after["spec"]["template"]["spec"]["nodeSelector"]
    (patch,) = plan([after], [live], POLICY, OWNER).patches
    assert [op["path"] for op in patch.json_patch] == ["/spec/template/spec/nodeSelector"]
    live["spec"]["suspend"] = False
    after["spec"]["suspend"] = False
    assert not plan([after], [live], POLICY, OWNER)


def test_objects_without_managed_fields_or_resource_version() -> None:
    want = child("ConfigMap", data={"a": "1"})
    live = server_copy(child("ConfigMap", data={"a": "1", "b": "2"}))
    del live["metadata"]["managedFields"]  # a cache that dropped them: nothing to go by
    assert not plan([want], [live], POLICY, OWNER)
    live["metadata"]["managedFields"] = [entry(encode(live), manager="someone-else")]
    assert not plan([want], [live], POLICY, OWNER)
    live["metadata"]["managedFields"] = [entry(encode(live))]
    del live["metadata"]["resourceVersion"]
    (patch,) = plan([want], [live], POLICY, OWNER).patches
    assert patch.removal_patch == ({"op": "remove", "path": "/data/b"},)
    assert not plan([want], [live], POLICY, OWNER, field_manager="someone-else")
