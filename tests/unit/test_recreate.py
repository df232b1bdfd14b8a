"""Children someone else keeps deleting are created again with back-off."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from reconcile.engine.executor import ExecResult, Outcome
from reconcile.engine.plan import Create, ObjectKey, Plan
from reconcile.mpijob.recreate import RESET_SECONDS, hold, record

SVC = ObjectKey("", "Service", "ns", "pi")
POD = ObjectKey("", "Pod", "ns", "pi-worker-0")
T0 = datetime(2026, 1, 1, tzinfo=UTC)


def at(seconds: float) -> datetime:
    return T0 + timedelta(seconds=seconds)


def plan(*keys: ObjectKey) -> Plan:
    return Plan(creates=tuple(Create(k, "v1", {}) for k in keys))


def created(*keys: ObjectKey) -> ExecResult:
    return ExecResult(done=tuple(Outcome(k, "created") for k in keys))


def test_the_first_create_and_the_first_recreate_go_at_once_then_10_s_doubling():
    made: tuple = ()
    assert hold(made, plan(SVC), at(0)) == (plan(SVC), None)
    made = record(made, created(SVC), at(0))  # the first create
    assert hold(made, plan(SVC), at(1)) == (plan(SVC), None)  # deleted: created again at once
    made = record(made, created(SVC), at(1))
    waits = []
    now = 1.0
    for _ in range(7):
        kept, wait = hold(made, plan(SVC, POD), at(now + 0.5))
        assert kept == plan(POD) and wait is not None  # the pod is not held here
        waits.append(round(wait + 0.5))
        now += wait + 0.5
        assert hold(made, plan(SVC), at(now)) == (plan(SVC), None)
        made = record(made, created(SVC), at(now))
    assert waits == [10, 20, 40, 80, 160, 320, 360]


def test_a_quiet_while_or_our_own_delete_starts_afresh():
    made: tuple = ()
    for t in (0.0, 1.0, 2.0):
        made = record(made, created(SVC), at(t))
    assert hold(made, plan(SVC), at(3))[1] is not None
    assert hold(made, plan(SVC), at(2 + RESET_SECONDS))[1] is None
    made = record(made, ExecResult(done=(Outcome(SVC, "deleted"),)), at(4))
    assert made == () and hold(made, plan(SVC), at(4))[1] is None


# -- through decide ---------------------------------------------------------------------------------------
def _running():
    import copy

    from render.keys import load_ssh_key
    from render.timeutil import parse_time
    from tests.unit import golden_cases
    from tests.unit.test_sync_actions import converged_world

    mpijob, _, config, now_text = golden_cases.load_case("running")
    key = load_ssh_key(golden_cases.KEY_FILE.read_text())
    return copy.deepcopy(mpijob), converged_world("running"), config, parse_time(now_text), key


def test_decide_sends_a_service_deleted_again_only_after_its_wait():
    from reconcile.mpijob.decide import decide
    from reconcile.mpijob.memory import JobMemory

    mpijob, world, config, now, key = _running()
    gone = [o for o in world if o["kind"] != "Service"]
    svc = ObjectKey("", "Service", "default", "pi")
    made = record(
        record((), created(svc), now - timedelta(seconds=5)), created(svc), now - timedelta(seconds=2)
    )
    memory = JobMemory(uid=mpijob["metadata"]["uid"], fresh_ssh_key=key, created=made)
    held = decide(mpijob, gone, memory, now, config)
    assert not held.plan.creates and held.recreate_wake == pytest.approx(8.01)
    assert "hold the creates of children deleted again" in held.actions()
    assert "wake after 8.01 s" in held.actions()
    due = decide(mpijob, gone, held.memory, now + timedelta(seconds=8.01), config)
    assert [str(c.key) for c in due.plan.creates] == ["Service default/pi"]


def test_decide_remembers_a_failed_worker_and_wakes_when_its_backoff_ends():
    from reconcile.mpijob.decide import decide
    from reconcile.mpijob.memory import JobMemory

    mpijob, world, config, now, key = _running()
    pod = next(o for o in world if o["metadata"]["name"] == "pi-worker-1")
    pod["status"] = {
        "phase": "Failed",
        "containerStatuses": [
            {
                "name": "mpi-worker",
                "state": {
                    "terminated": {"exitCode": 1, "finishedAt": "2025-06-01T11:59:58Z", "message": "m"}
                },
            }
        ],
    }
    memory = JobMemory(uid=mpijob["metadata"]["uid"], fresh_ssh_key=key)
    d = decide(mpijob, world, memory, now, config)
    assert [(r.index, r.count, r.pod_uid) for r in d.memory.worker_failures] == [
        (1, 1, pod["metadata"]["uid"])
    ]
    assert not d.plan.deletes  # kept through its back-off
    assert d.status is not None and d.status.wake_after == pytest.approx(8.01)  # the back-off's end
    later = decide(mpijob, world, d.memory, now + timedelta(seconds=8.01), config)
    assert [str(e.key) for e in later.plan.deletes] == ["Pod default/pi-worker-1"]
    assert later.memory.worker_failures == d.memory.worker_failures  # the same pod, counted once
