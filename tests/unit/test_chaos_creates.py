"""The chaos tier's count of what the operator created, from the audit log and the objects left: a create
whose record the killed API server never wrote still counts once, and only for an object of this run; and
its check that a job's launcher comes after its dependencies."""

from __future__ import annotations

from typing import Any

from localcluster.chaos.harness import launcher_order, stored_creates, wanted_children

UID = "uid-a"


def _create(resource: str, name: str, code: int, at: str = "2026-12-04T21:00:00.500000Z") -> dict[str, Any]:
    return {
        "verb": "create",
        "objectRef": {"resource": resource, "name": name},
        "responseStatus": {"code": code},
        "requestReceivedTimestamp": at,
        "stageTimestamp": at,
    }


def _live(name: str, owner: str = UID, created: str = "2026-12-04T20:59:59Z") -> dict[str, Any]:
    refs = [{"uid": owner, "controller": True, "kind": "MPIJob"}] if owner else []
    return {"metadata": {"name": name, "creationTimestamp": created, "ownerReferences": refs}}


def test_a_create_stored_before_the_server_died_counts_at_its_creation_time() -> None:
    live = {("services", "a"): _live("a")}
    creates, extra = stored_creates([_create("services", "a", 409)], live, {UID})
    assert [e["stageTimestamp"] for e in creates[("services", "a")]] == ["2026-12-04T20:59:59Z"]
    assert extra == {"creates_timed_out_but_stored": 0, "creates_stored_unlogged": 1}


def test_already_exists_for_an_object_of_no_job_of_this_run_is_no_create() -> None:
    live = {("services", "a"): _live("a", owner="someone-else"), ("secrets", "b"): _live("b", owner="")}
    writes = [_create("services", "a", 409), _create("secrets", "b", 409), _create("configmaps", "c", 409)]
    creates, extra = stored_creates(writes, live, {UID})
    assert dict(creates) == {}
    assert extra["creates_stored_unlogged"] == 0


def test_a_logged_create_is_not_counted_again_by_its_retry() -> None:
    live = {("pods", "w0"): _live("w0")}
    creates, extra = stored_creates([_create("pods", "w0", 201), _create("pods", "w0", 409)], live, {UID})
    assert len(creates[("pods", "w0")]) == 1
    assert extra["creates_stored_unlogged"] == 0


def test_a_timed_out_create_counts_if_the_object_exists() -> None:
    live = {("jobs", "l"): _live("l")}
    writes = [_create("jobs", "l", 504), _create("jobs", "gone", 504)]
    creates, extra = stored_creates(writes, live, {UID})
    assert set(creates) == {("jobs", "l")}
    assert extra == {"creates_timed_out_but_stored": 1, "creates_stored_unlogged": 0}


def _made(at: str) -> list[dict[str, Any]]:
    return [{"requestReceivedTimestamp": at, "stageTimestamp": at}]


def test_a_launcher_known_only_to_the_second_may_follow_deps_stored_within_it() -> None:
    wanted = wanted_children("a", 2)
    deps = {key: _made("2026-12-04T21:00:00.300000Z") for key, role in wanted.items() if role == "dep"}
    # the launcher's create, unlogged, after its deps in the same second: its creationTimestamp rounds down
    live = {("jobs", "a-launcher"): _live("a-launcher", created="2026-12-04T21:00:00Z")}
    creates, _ = stored_creates([_create("jobs", "a-launcher", 409)], live, {UID})
    assert launcher_order("a", wanted, {**deps, **creates}) == ([], [])
    # a dependency stored in a later second did come after the launcher
    late = {**deps, ("pods", "a-worker-1"): _made("2026-12-04T21:00:01.200000Z")}
    early = ["a: launcher before ['pods/a-worker-1']"]
    assert launcher_order("a", wanted, {**late, **creates}) == ([], early)


def test_a_launcher_logged_before_a_dependency_was_stored_is_reported() -> None:
    wanted = wanted_children("a", 1)
    made = {key: _made("2026-12-04T21:00:00.300000Z") for key in wanted}
    made[("jobs", "a-launcher")] = _made("2026-12-04T21:00:00.200000Z")
    lost, early = launcher_order("a", wanted, made)
    assert lost == [] and len(early) == 1 and "services/a" in early[0]
    del made[("secrets", "a-ssh")]
    lost, early = launcher_order("a", wanted, made)
    assert lost == ["secrets/a-ssh never created"] and len(early) == 1
