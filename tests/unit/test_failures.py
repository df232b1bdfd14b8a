"""Failures that must reach the user: a sync that keeps failing, a child the API server refuses
for good (422) or for now (quota, conflicts, 5xx, 429), and a wanted name held by a foreign object."""

from __future__ import annotations

import copy
from datetime import UTC, datetime

import attrs
import pytest

import render
from reconcile.engine.executor import CreateRules, execute
from reconcile.engine.plan import Conflict, Create, ObjectKey, Plan
from reconcile.engine.writer import WriteFailed
from reconcile.mpijob import controller as controller_mod
from reconcile.mpijob.decide import MAX_WAKEUP_SECONDS
from reconcile.mpijob.metrics import Metrics
from reconcile.mpijob.policy import CREATE_RULES, FIELD_MANAGER
from reconcile.runtime.events import EventRecorder
from reconcile.runtime.loop import Result
from render import Config, Observed
from render.observed import CreateFailure
from tests.unit.fakes import FakeKube, RecordingWriter
from tests.unit.render_helpers import BASE, KEY, NOW, created_children

# ------------------------------------------------------------------------------------------- executor
SVC = ObjectKey("", "Service", "ns", "pi")
WORKERS = [ObjectKey("", "Pod", "ns", f"pi-worker-{i}") for i in range(3)]
LAUNCHER = ObjectKey("batch", "Job", "ns", "pi-launcher")


def _body(key: ObjectKey) -> dict:
    return {"kind": key.kind, "metadata": {"name": key.name, "namespace": key.namespace}}


def _plan(*, conflicts: tuple[Conflict, ...] = ()) -> Plan:
    keys = [SVC, *WORKERS, LAUNCHER]
    return Plan(creates=tuple(Create(k, "v1", _body(k)) for k in keys), conflicts=conflicts)


def _dyn(fail: dict[tuple[str, str], WriteFailed]) -> RecordingWriter:
    return RecordingWriter(refuse=lambda r: fail.get((r.verb, r.name)))


def _invalid() -> WriteFailed:
    cause = {
        "reason": "FieldValueInvalid",
        "field": "spec.containers[0].ports[0].containerPort",
        "message": "Invalid value: 70000: must be between 1 and 65535, inclusive",
    }
    message = 'Pod "pi-worker-1" is invalid: spec.containers[0].ports[0].containerPort: Invalid value'
    return WriteFailed(422, message, reason="Invalid", causes=[cause])


def _created(fake: RecordingWriter) -> list[str]:
    return [r.name for r in fake.sent if r.verb == "create"]


def test_an_invalid_child_is_permanent_and_nothing_is_created_after_its_stage():
    fake = _dyn({("create", "pi-worker-1"): _invalid()})
    result = execute(_plan(), fake, FIELD_MANAGER, create_rules=CREATE_RULES)
    # the workers after the first go out together; the launcher, a later stage, never does
    assert sorted(_created(fake)) == ["pi", "pi-worker-0", "pi-worker-1", "pi-worker-2"]
    (failure,) = result.failures
    assert failure.permanent and failure.code == "422"
    assert failure.causes == (
        (
            "spec.containers[0].ports[0].containerPort",
            "Invalid value: 70000: must be between 1 and 65535, inclusive",
        ),
    )
    assert result.skipped == (LAUNCHER,)


def test_the_first_worker_goes_alone_so_a_bad_template_fails_once():
    fake = _dyn({("create", "pi-worker-0"): _invalid()})
    result = execute(_plan(), fake, FIELD_MANAGER, create_rules=CREATE_RULES)
    assert _created(fake) == ["pi", "pi-worker-0"]
    assert len(result.failures) == 1
    assert result.skipped == (WORKERS[1], WORKERS[2], LAUNCHER)


def test_sequential_rules_keep_the_plan_order_and_stop_at_the_first_failure():
    fake = _dyn({("create", "pi-worker-1"): _invalid()})
    rules = attrs.evolve(CREATE_RULES, concurrency=1)
    result = execute(_plan(), fake, FIELD_MANAGER, create_rules=rules)
    assert _created(fake) == ["pi", "pi-worker-0", "pi-worker-1"]
    assert result.skipped == (WORKERS[2], LAUNCHER)


@pytest.mark.parametrize("code", [403, 409, 429, 500, 503])
def test_a_transient_failure_is_not_permanent_and_holds_the_launcher_back(code):
    reason = "Forbidden" if code == 403 else "Conflict"
    exc = WriteFailed(code, "exceeded quota", reason=reason)
    fake = _dyn({("create", "pi-worker-2"): exc})
    result = execute(_plan(), fake, FIELD_MANAGER, create_rules=CREATE_RULES)
    assert "pi-launcher" not in _created(fake)
    assert result.skipped == (LAUNCHER,)
    assert not result.permanent_failures and not result.ok


def test_without_rules_the_engine_creates_everything_it_can():
    fake = _dyn({("create", "pi-worker-1"): _invalid()})
    result = execute(_plan(), fake, FIELD_MANAGER)
    assert _created(fake) == ["pi", "pi-worker-0", "pi-worker-1", "pi-worker-2", "pi-launcher"]
    assert not result.permanent_failures


def test_launcher_waits_for_every_other_create_even_without_stop_on_failure():
    fake = _dyn({("create", "pi-worker-0"): _invalid()})
    rules = CreateRules(last_kinds=frozenset({"Job"}))
    execute(_plan(), fake, FIELD_MANAGER, create_rules=rules)
    assert _created(fake) == ["pi", "pi-worker-0", "pi-worker-1", "pi-worker-2"]


def test_no_create_while_a_wanted_name_is_held():
    fake = _dyn({})
    held = (Conflict(WORKERS[1], "v1", "foreign-uid", ""),)
    result = execute(_plan(conflicts=held), fake, FIELD_MANAGER, create_rules=CREATE_RULES)
    assert _created(fake) == []
    assert len(result.skipped) == 5


def test_a_name_found_taken_stops_the_later_creates():
    exists = WriteFailed(409, "already exists", reason="AlreadyExists")
    fake = _dyn({("create", "pi-worker-0"): exists})
    result = execute(_plan(), fake, FIELD_MANAGER, create_rules=CREATE_RULES)
    assert _created(fake) == ["pi", "pi-worker-0"] and result.replan


# ----------------------------------------------------------------------------------- status and render
def _job() -> dict:
    j = copy.deepcopy(BASE)
    j["status"] = {"conditions": [{"type": "Created", "status": "True", "reason": "MPIJobCreated"}]}
    return j


def _observed(failure: CreateFailure | None, objects=()) -> Observed:
    return Observed.from_objects(objects, now=NOW, fresh_ssh_key=KEY, create_failure=failure)


def _cond(st: dict, ctype: str) -> dict:
    return next(c for c in st["conditions"] if c["type"] == ctype)


def test_a_permanent_refusal_fails_the_job_naming_the_mpijob_field():
    refused = CreateFailure(
        "Pod",
        "pi-worker-1",
        "422",
        "invalid",
        permanent=True,
        causes=(
            (
                "spec.containers[0].ports[0].containerPort",
                "Invalid value: 70000: must be between 1 and 65535",
            ),
        ),
    )
    st = render.status(_job(), _observed(refused), Config())
    failed = _cond(st, "Failed")
    assert failed["status"] == "True" and failed["reason"] == "ValidationError"
    assert failed["message"] == (
        "Found validation errors: spec.mpiReplicaSpecs[Worker].template.spec.containers[0].ports[0]."
        "containerPort: Invalid value: 70000: must be between 1 and 65535 (the API server refused Pod "
        "ns/pi-worker-1)"
    )
    assert "completionTime" in st
    j = _job()
    j["status"] = st
    # finished: no launcher, no workers (a Pending worker is removed by the default cleanPodPolicy)
    kinds = [c["kind"] for c in render.render(j, _observed(None), Config())]
    assert "Job" not in kinds and "Pod" not in kinds
    events = render.events(j, _job()["status"], st)
    assert any(e.type == "Warning" and "containerPort" in e.message for e in events)


def test_launcher_fields_map_to_the_launcher_spec():
    refused = CreateFailure(
        "Job", "pi-launcher", "422", "", True, (("spec.template.spec.containers[0].image", "Required value"),)
    )
    failed = _cond(render.status(_job(), _observed(refused), Config()), "Failed")
    assert (
        "spec.mpiReplicaSpecs[Launcher].template.spec.containers[0].image: Required value"
        in failed["message"]
    )


def test_a_transient_refusal_is_created_false_until_it_clears():
    refused = CreateFailure("Pod", "pi-worker-1", "403", 'pods "pi-worker-1" is forbidden: exceeded quota')
    st = render.status(_job(), _observed(refused), Config())
    created = _cond(st, "Created")
    assert created["status"] == "False" and created["reason"] == "FailedCreate"
    assert "exceeded quota" in created["message"] and "403" in created["message"]
    assert not any(c["type"] == "Failed" for c in st["conditions"])
    j = _job()
    j["status"] = st
    cleared = render.status(j, _observed(None, created_children()), Config())  # the retry created them
    assert _cond(cleared, "Created")["status"] == "True"


def test_a_held_name_before_the_start_renders_no_pod_and_no_launcher():
    foreign = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "pi-worker-1", "namespace": "ns", "uid": "someone-else"},
    }
    children = render.render(_job(), _observed(None, [foreign]), Config())
    kinds = [c["kind"] for c in children]
    assert "Pod" not in kinds and "Job" not in kinds
    st = render.status(_job(), _observed(None, [foreign]), Config())
    assert _cond(st, "Created")["reason"] == "ErrResourceExists"


# ------------------------------------------------------------------------------------ controller loop
def _controller(kube: FakeKube, writer: RecordingWriter) -> controller_mod.Controller:
    return controller_mod.Controller(
        kube,  # type: ignore[arg-type]
        render.Config(),
        metrics=Metrics(),
        recorder=EventRecorder(kube),  # type: ignore[arg-type]
        now=lambda: datetime(2026, 1, 1, tzinfo=UTC),
        writer=writer,
    )


def _put(c: controller_mod.Controller, writer: RecordingWriter, name: str) -> None:
    j = copy.deepcopy(BASE)
    j["metadata"].update(name=name, uid=f"uid-{name}", resourceVersion="1")
    writer.put(j)
    c.mpijobs.store.upsert(copy.deepcopy(j))


def _status_of(writer: RecordingWriter, name: str) -> dict:
    stored = writer.get("MPIJob", "ns", name)
    assert stored is not None
    return dict(stored["status"])


def _errors(c: controller_mod.Controller, reason: str) -> float:
    return c.metrics.registry.get_sample_value("mpi_operator_sync_errors_total", {"reason": reason}) or 0.0


def test_a_sync_that_keeps_failing_is_counted_and_shown_on_the_job_and_others_are_served():
    kube, writer = FakeKube(), RecordingWriter()
    c = _controller(kube, writer)
    _put(c, writer, "bad")
    _put(c, writer, "good")
    served = []

    def sync(key: str) -> Result:
        if key == "ns/bad":
            raise OverflowError("date value out of range")
        served.append(key)
        return Result()

    c.sync = sync  # type: ignore[method-assign]
    for _ in range(3):
        c.process("ns/bad")
        c.process("ns/good")
    assert served == ["ns/good"] * 3
    assert _errors(c, "OverflowError") == 3
    events = [o for (plural, _, _), o in kube.objects.items() if plural == "events"]
    (event,) = events  # aggregated: one Event, counted
    assert event["reason"] == "SyncFailed" and event["type"] == "Warning"
    assert "OverflowError: date value out of range" in event["message"]
    assert event["involvedObject"]["name"] == "bad"
    status = _status_of(writer, "bad")
    (cond,) = [x for x in status["conditions"] if x["type"] == "SyncFailed"]
    assert cond["status"] == "True" and cond["reason"] == "OverflowError"
    assert "date value out of range" in cond["message"]

    c.sync = lambda key: Result()  # type: ignore[method-assign]
    c.process("ns/bad")
    status = _status_of(writer, "bad")
    (cond,) = [x for x in status["conditions"] if x["type"] == "SyncFailed"]
    assert cond["status"] == "False"


def test_a_failed_status_write_still_counts_and_tells():
    kube = FakeKube()
    writer = RecordingWriter(refuse=lambda r: WriteFailed(422, "status invalid", reason="Invalid"))
    c = _controller(kube, writer)
    _put(c, writer, "bad")

    def sync(key: str) -> Result:
        raise WriteFailed(422, "status invalid", reason="Invalid")

    c.sync = sync  # type: ignore[method-assign]
    for _ in range(4):
        c.process("ns/bad")
    assert _errors(c, "ApiError422") == 4
    assert any(plural == "events" for plural, _, _ in kube.objects)
    assert [r.subresource for r in writer.sent] == ["status", "status"]  # the condition, from the third


def test_wakeups_are_capped():
    assert MAX_WAKEUP_SECONDS <= 24 * 3600


def test_answers_go_to_on_done_and_are_not_kept_in_the_result():
    fake = _dyn({})
    seen = []
    result = execute(_plan(), fake, FIELD_MANAGER, on_done=seen.append)
    assert [o.key for o in seen] == [SVC, *WORKERS, LAUNCHER]
    assert all(o.object is not None for o in seen)
    assert [o.key for o in result.done] == [SVC, *WORKERS, LAUNCHER]
    assert all(o.object is None for o in result.done)
