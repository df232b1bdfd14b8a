"""L0 properties of the differ on generic objects (strategies in tests/strategies.py; nothing MPI in them).

* a plan against its own output (live == desired, plus server metadata) is empty;
* a plan against live objects the server has defaulted and canonicalised is empty;
* removing any non-zero field we render from live yields a patch;
* with our managedFields on live, a plan against our own output is still empty, and dropping any
  rendered field from desired yields a removal that, applied, converges (an empty plan);
* create-only kinds never get a patch body outside their mutable paths;
* render's children (tests/strategies.py MPIJobs) planned against their stored form are empty.
"""

from __future__ import annotations

import copy
import math
from typing import Any

import jsonpatch
from hypothesis import given, settings
from hypothesis import strategies as st

from reconcile.engine.differ import plan
from reconcile.engine.managedfields import encode
from reconcile.engine.policy import METADATA_PATHS, KindPolicy, Policy
from reconcile.engine.semantics import drop_nulls, is_zero, normalise_desired, strict_equal
from reconcile.mpijob.policy import FIELD_MANAGER, POLICY
from render import Config, Observed, render
from tests import strategies


@settings(max_examples=150, deadline=None)
@given(strategies.rendered_and_stored())
def test_plan_against_its_own_output_is_empty(pair: tuple[dict[str, Any], dict[str, Any]]) -> None:
    want, live = pair
    result = plan([want], [live], POLICY, strategies.GENERIC_OWNER)
    assert not result, str(result)


@settings(max_examples=150, deadline=None)
@given(strategies.rendered_and_stored(), st.data())
def test_plan_against_server_defaulted_objects_is_empty(
    pair: tuple[dict[str, Any], dict[str, Any]], data: st.DataObject
) -> None:
    want, live = pair
    result = plan([want], [strategies.server_defaulted(live, data)], POLICY, strategies.GENERIC_OWNER)
    assert not result, str(result)


def rendered_leaves(node: Any, path: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    """Paths of non-zero leaves (and non-empty lists) under ``spec`` and ``metadata.labels``."""
    if isinstance(node, dict):
        return [p for k, v in node.items() for p in rendered_leaves(v, (*path, k))]
    if isinstance(node, list) and node and isinstance(node[0], dict):
        return [p for i, v in enumerate(node) for p in rendered_leaves(v, (*path, i))]
    return [] if is_zero(node) else [path]


def remove(obj: dict[str, Any], path: tuple[Any, ...]) -> None:
    node: Any = obj
    for part in path[:-1]:
        node = node[part]
    del node[path[-1]]


@settings(max_examples=150, deadline=None)
@given(strategies.rendered_and_stored(), st.data())
def test_removing_a_rendered_field_from_live_yields_a_patch(
    pair: tuple[dict[str, Any], dict[str, Any]], data: st.DataObject
) -> None:
    want, live = pair
    candidates = [("spec", *p) for p in rendered_leaves(want["spec"])]
    candidates += [("metadata", "labels", k) for k in want["metadata"]["labels"]]
    path = data.draw(st.sampled_from(candidates), label="removed")
    # Live keeps its own spelling of the object; remove the same field there (list items by position
    # in the rendered order: live containers are in the same order before any shuffling).
    remove(live, path)
    result = plan([want], [live], POLICY, strategies.GENERIC_OWNER)
    assert len(result.patches) == 1 and not result.creates and not result.deletes, str(result)
    assert result.patches[0].json_patch, "the patch describes the drift"


def with_our_fields(live: dict[str, Any], fields_of: dict[str, Any]) -> dict[str, Any]:
    out = copy.deepcopy(live)
    out["metadata"]["managedFields"] = [
        {
            "manager": FIELD_MANAGER,
            "operation": "Apply",
            "fieldsType": "FieldsV1",
            "fieldsV1": encode(fields_of),
        }
    ]
    return out


@settings(max_examples=150, deadline=None)
@given(strategies.rendered_and_stored(), st.data())
def test_our_managed_fields_on_our_own_output_plan_empty(
    pair: tuple[dict[str, Any], dict[str, Any]], data: st.DataObject
) -> None:
    want, live = pair
    live = with_our_fields(live, want)
    assert not plan([want], [live], POLICY, strategies.GENERIC_OWNER)
    assert not plan([want], [strategies.server_defaulted(live, data)], POLICY, strategies.GENERIC_OWNER)


@settings(max_examples=200, deadline=None)
@given(strategies.rendered_and_stored(), st.data())
def test_a_field_no_longer_rendered_is_removed_and_the_plan_converges(
    pair: tuple[dict[str, Any], dict[str, Any]], data: st.DataObject
) -> None:
    want, live = pair
    live = with_our_fields(live, want)
    candidates = [
        ("spec", *p) for p in rendered_leaves(want["spec"]) if p[-1] not in ("name", "containerPort")
    ]
    candidates += [("metadata", "labels", k) for k in want["metadata"]["labels"]]
    path = data.draw(st.sampled_from(candidates), label="no longer rendered")
    after = copy.deepcopy(want)
    remove(after, path)
    result = plan([after], [live], POLICY, strategies.GENERIC_OWNER)
    assert len(result.patches) == 1 and not result.creates and not result.deletes, str(result)
    (patch,) = result.patches
    assert patch.body is None, "a subset compare cannot see a removal: only the removal patch"
    assert patch.removal_patch[0] == {"op": "test", "path": "/metadata/resourceVersion", "value": "1"}
    assert len(patch.removal_patch) == 2
    new_live = jsonpatch.apply_patch(live, list(patch.removal_patch))
    assert new_live != live
    assert not plan([after], [new_live], POLICY, strategies.GENERIC_OWNER), "converged after the removal"


CREATE_ONLY = Policy(
    field_manager=FIELD_MANAGER, kinds={("", "Pod"): KindPolicy("create-only", METADATA_PATHS)}
)


@settings(max_examples=100, deadline=None)
@given(strategies.rendered_and_stored("Pod"), strategies.rendered_and_stored("Pod"))
def test_create_only_patches_stay_inside_the_mutable_paths(
    first: tuple[dict[str, Any], dict[str, Any]], second: tuple[dict[str, Any], dict[str, Any]]
) -> None:
    want, _ = first
    _, other_live = second
    other_live["metadata"]["name"] = want["metadata"]["name"]
    result = plan([want], [other_live], CREATE_ONLY, strategies.GENERIC_OWNER)
    assert not result.creates and not result.deletes
    for patch in result.patches:
        assert set(patch.body) == {"apiVersion", "kind", "metadata"}
        assert set(patch.body["metadata"]) <= {"name", "namespace", "labels", "annotations"}
        assert all(op["path"].startswith("/metadata/") for op in patch.json_patch)
    has_drift = any(
        other_live["metadata"]["labels"].get(k) != v for k, v in want["metadata"]["labels"].items()
    )
    assert bool(result.patches) == has_drift


def stored(obj: dict[str, Any], n: int) -> dict[str, Any]:
    """``obj`` as the server returns it: server metadata, zero values dropped, status."""
    live = strategies.drop_zero_values(copy.deepcopy(obj))
    live["metadata"].update(
        uid=f"uid-{n}", resourceVersion=str(n + 1), creationTimestamp="2025-06-01T12:00:00Z"
    )
    live["status"] = {}
    return live


@settings(max_examples=60, deadline=None)
@given(strategies.mpijobs())
def test_render_output_planned_against_itself_is_empty(mpijob: dict[str, Any]) -> None:
    """With render's published strategies: every child is ours, and its own stored form plans empty,
    under the default policy and with every rendered field compared."""
    observed = Observed.from_objects([], now=strategies.NOW, fresh_ssh_key=strategies.TEST_KEY)
    desired = render(mpijob, observed, Config())
    first = plan(desired, [], POLICY, strategies.JOB_UID)
    assert len(first.creates) == len(desired) and not first.conflicts
    live = [stored(obj, n) for n, obj in enumerate(desired)]
    assert not plan(desired, live, POLICY, strategies.JOB_UID)
    assert not plan(desired, live, Policy(field_manager=FIELD_MANAGER), strategies.JOB_UID)
    owned = [with_our_fields(obj, want) for obj, want in zip(live, desired, strict=True)]
    assert not plan(desired, owned, POLICY, strategies.JOB_UID)
    assert not plan(desired, owned, Policy(field_manager=FIELD_MANAGER), strategies.JOB_UID)
    assert not plan(desired, live, POLICY, "another-owner").writes, "someone else's objects: no writes"


# -- apply bodies: what we render, plus live's value of our own applied fields where immutable now ----


def _mutable_now(case: dict[str, Any]) -> set[str]:
    """The policy's paths mutable in live's current state (the API server judges the old object)."""
    kind_policy, live, want = case["policy"], case["live"], case["desired"]

    def suspended_unstarted(obj: dict[str, Any]) -> bool:
        return (obj.get("spec") or {}).get("suspend") is True and not (obj.get("status") or {}).get(
            "startTime"
        )

    paths = set(kind_policy.mutable_paths)
    for rule in kind_policy.conditional:
        if suspended_unstarted(live) or (rule.or_desired and suspended_unstarted(want)):
            paths.update(rule.paths)
    return paths


def _at(obj: Any, dotted: str) -> Any:
    for part in dotted.split("."):
        if not isinstance(obj, dict) or part not in obj:
            return None
        obj = obj[part]
    return obj


def _ours_of_live(how: str, live_value: Any, owned: Any) -> Any:
    """What of live's value at one field our earlier applies own (None: nothing)."""
    if live_value is None or not owned:
        return None
    if how == "map":
        kept = {k: v for k, v in live_value.items() if k in owned}
        return kept or None
    if how in ("gates", "containers"):
        kept = [item for item in live_value if item["name"] in owned]
        return kept or None
    return live_value


def _strip(body: dict[str, Any]) -> Any:
    """The body less every field of the model and the identity: must leave nothing behind."""
    rest = copy.deepcopy(body)
    for dotted in (*strategies.APPLY_FIELDS, "metadata.name", "metadata.namespace"):
        *parents, last = dotted.split(".")
        node = rest
        for part in parents:
            node = node.get(part) if isinstance(node, dict) else None
        if isinstance(node, dict):
            node.pop(last, None)
    rest.pop("apiVersion")
    rest.pop("kind")

    def prune(v: Any) -> Any:
        return (
            {k: p for k, p in ((k, prune(x)) for k, x in v.items()) if p != {}} if isinstance(v, dict) else v
        )

    return prune(rest)


@settings(max_examples=400, deadline=None)
@given(strategies.apply_cases())
def test_an_apply_body_is_what_we_render_plus_our_own_fields_where_immutable(case: dict[str, Any]) -> None:
    """For any live object and desired one: on the paths mutable now the body is what we render; on
    every other path it carries exactly live's value of the fields our earlier applies own -- never a
    key we did not render (the Job controller's template labels), never a removal of a field the
    server will not let us change (server-side apply removes an applied field left out)."""
    live, want = case["live"], case["desired"]
    policy = Policy(
        field_manager=strategies.APPLY_MANAGER,
        kinds={(live["apiVersion"].rpartition("/")[0], live["kind"]): case["policy"]},
    )
    result = plan([want], [live], policy, strategies.OWNER_UID)
    assert not result.creates and not result.deletes and not result.conflicts
    mutable = _mutable_now(case)
    for patch in result.patches:
        for op in patch.removal_patch:
            if op["op"] == "remove":
                fields = ".".join(t for t in op["path"].strip("/").split("/") if not t.isdigit())
                assert any(fields == p or fields.startswith(p + ".") for p in mutable), op
        if patch.body is None:
            continue
        body = patch.body
        for path, how in strategies.APPLY_FIELDS.items():
            got = _at(body, path)
            if path in mutable:
                assert got == _at(want, path), f"{path}: the body holds what we render"
            else:
                expected = _ours_of_live(how, _at(live, path), case["applied"][path])
                assert got == expected, f"{path} (immutable now): live's value of our applied fields only"
        assert _strip(body) == {}, "nothing outside the policy's fields"


@settings(max_examples=100, deadline=None)
@given(strategies.rendered_and_stored(), st.data())
def test_a_converged_memo_changes_no_plan(
    pair: tuple[dict[str, Any], dict[str, Any]], data: st.DataObject
) -> None:
    """Plan.converged given back skips only comparisons whose answer it already knows: the plan is the
    same with and without it, and a live object at a new resourceVersion is compared again."""
    want, live = pair
    live = copy.deepcopy(live)
    live["metadata"]["resourceVersion"] = "7"
    first = plan([want], [live], POLICY, strategies.GENERIC_OWNER)
    assert first.converged  # it holds what we render: remembered
    assert plan([want], [live], POLICY, strategies.GENERIC_OWNER, converged=first.converged) == first
    changed = copy.deepcopy(live)
    changed["metadata"]["resourceVersion"] = "8"
    path = data.draw(st.sampled_from(rendered_leaves(want.get("spec") or {}, ("spec",)) or [("metadata",)]))
    if path != ("metadata",):
        remove(changed, path)
    fresh = plan([want], [changed], POLICY, strategies.GENERIC_OWNER)
    assert plan([want], [changed], POLICY, strategies.GENERIC_OWNER, converged=first.converged) == fresh


@settings(max_examples=300, deadline=None)
@given(strategies.json_documents)
def test_normalising_drops_exactly_the_null_map_values(doc: dict[str, Any]) -> None:
    """The copy through orjson and the walk agree on every JSON document (types kept: 1 is not 1.0 or
    True), and neither touches the input."""
    before = copy.deepcopy(doc)
    out = normalise_desired(doc)
    assert strict_equal(out, drop_nulls(doc)), out
    assert strict_equal(doc, before)
    out["added"] = 1
    assert "added" not in doc or "added" in before


def test_normalising_walks_what_is_not_plain_json() -> None:
    """A value orjson refuses or would change (a datetime, an integer beyond 64 bits, a str subclass) is
    copied by the walk, nulls dropped all the same."""
    from datetime import UTC, datetime

    class Name(str):
        pass

    moment = datetime(2025, 6, 1, tzinfo=UTC)
    doc = {"a": moment, "b": 2**70, "c": Name("x"), "d": None, "e": {"f": None, "g": [None, 1]}}
    out = normalise_desired(doc)
    assert out == {"a": moment, "b": 2**70, "c": "x", "e": {"g": [None, 1]}}
    assert type(out["c"]) is Name
    # orjson writes a NaN as null: it stays a NaN, in a list as in a map
    out = normalise_desired({"x": [float("nan")], "y": float("inf"), "z": "/dev/null"})
    assert math.isnan(out["x"][0]) and out["y"] == float("inf") and out["z"] == "/dev/null"
