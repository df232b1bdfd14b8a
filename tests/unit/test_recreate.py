"""Children someone else keeps deleting are created again with back-off."""

from __future__ import annotations

import itertools
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


# -- worker pods --------------------------------------------------------------------------------------------
def created_pod(uid: str) -> ExecResult:
    """As the controller gets it: the answer went to on_done, its uid stays."""
    return ExecResult(done=(Outcome(POD, "created", uid=uid),))


def test_a_worker_deleted_before_it_failed_is_created_again_at_once_then_after_10_s():
    made = record((), created_pod("u1"), at(0))
    assert made[0].uid == "u1"
    assert hold(made, plan(POD), at(1)) == (plan(POD), None)  # someone deleted it: at once
    made = record(made, created_pod("u2"), at(1))
    kept, wait = hold(made, plan(POD), at(2))
    assert kept == Plan() and wait == pytest.approx(9)


def test_a_failed_workers_replacement_waits_only_for_its_own_backoff_and_keeps_the_count():
    made = record((), created_pod("u1"), at(0))
    made = record(made, created_pod("u2"), at(12))  # u1 failed at 2, replaced after its 10 s
    # u2 failed at 13: the failure back-off (20 s) holds its replacement, not this one
    assert hold(made, plan(POD), at(14), failed={"u2"}) == (plan(POD), None)
    assert hold(made, plan(POD), at(14))[1] == pytest.approx(8)
    # our delete of the failed pod at the end of its back-off does not start afresh...
    made = record(made, ExecResult(done=(Outcome(POD, "deleted"),)), at(33), failed={"u2"})
    assert [(c.count, c.uid) for c in made] == [(2, "u2")]
    made = record(made, created_pod("u3"), at(33), failed={"u2"})
    # ...so the replacement, deleted by someone else before it fails, waits 20 s after its create
    kept, wait = hold(made, plan(POD), at(34), failed={"u2"})
    assert kept == Plan() and wait == pytest.approx(19)
    # a running worker we delete ourselves (suspend) starts afresh
    made = record(made, ExecResult(done=(Outcome(POD, "deleted"),)), at(40), failed={"u2"})
    assert made == ()


def _crash_loop(replayed_delete_after: float | None) -> tuple[list[float], dict, float]:
    """decide and remember in a loop over a world where every worker fails 1 s after its create (its
    finish in the pod's status) and, with ``replayed_delete_after``, each delete of a worker is replayed
    by name (no uid precondition) that many seconds later, hitting whatever pod holds the name then, and
    such a hit is replayed in turn (kwok's pod-delete stage). Returns the times of the worker creates,
    the final status and the time spent."""
    from reconcile.mpijob.decide import decide, remember
    from reconcile.mpijob.memory import JobMemory
    from render.timeutil import format_time

    mpijob, world, config, t0, key = _running()
    world = [o for o in world if not (o["kind"] == "Pod" and "-worker-" in o["metadata"]["name"])]
    memory = JobMemory(uid=mpijob["metadata"]["uid"], fresh_ssh_key=key)
    creates: list[float] = []
    replays: list[tuple[float, str]] = []
    fails: dict[str, datetime] = {}  # uid -> when the worker fails
    now = t0
    serial = 0
    for _ in range(400):
        for when, name in [r for r in replays if r[0] <= (now - t0).total_seconds()]:
            replays.remove((when, name))
            if any(o["metadata"]["name"] == name for o in world):
                world = [o for o in world if o["metadata"]["name"] != name]
                assert replayed_delete_after is not None
                replays.append((when + replayed_delete_after, name))  # and is replayed in turn
        for pod in world:  # a worker created a second ago has failed
            if fails.get(pod["metadata"]["uid"], now + timedelta(days=1)) <= now:
                del fails[pod["metadata"]["uid"]]
                pod["status"] = {
                    "phase": "Failed",
                    "containerStatuses": [
                        {
                            "name": "mpi-worker",
                            "state": {"terminated": {"exitCode": 1, "finishedAt": format_time(now)}},
                        }
                    ],
                }
        d = decide(mpijob, world, memory, now, config)
        done = []
        for e in d.plan.deletes:
            world = [o for o in world if o["metadata"].get("uid") != e.uid]
            done.append(Outcome(e.key, "deleted"))
            if replayed_delete_after is not None:
                replays.append(((now - t0).total_seconds() + replayed_delete_after, e.key.name))
        for c in d.plan.creates:
            obj = {**c.body, "metadata": {**c.body["metadata"], "uid": f"uid-{serial}"}}
            serial += 1
            if c.key.kind == "Pod":
                creates.append((now - t0).total_seconds())
                obj["status"] = {"phase": "Running"}
                fails[obj["metadata"]["uid"]] = now + timedelta(seconds=1)
            world.append(obj)
            done.append(Outcome(c.key, "created", obj))
        memory = remember(d.memory, d.plan, ExecResult(done=tuple(done)), now)
        assert d.status is not None
        if d.status.write:
            mpijob["status"] = d.status.new
        if "Failed" in {c["type"] for c in mpijob["status"].get("conditions", []) if c["status"] == "True"}:
            break
        if d.plan.creates or d.plan.deletes:
            continue  # the sync their events bring (patches are left unapplied: the hostfile's)
        live = {o["metadata"]["uid"] for o in world}
        moments = [r[0] for r in replays] + [(t - t0).total_seconds() for u, t in fails.items() if u in live]
        if d.wake_after is not None:
            moments.append((now - t0).total_seconds() + d.wake_after)
        moments = [m for m in moments if m > (now - t0).total_seconds()]
        assert moments, d.actions()
        now = t0 + timedelta(seconds=min(moments))
    return creates, mpijob["status"], (now - t0).total_seconds()


def test_a_crash_loop_is_never_held_by_the_recreate_backoff():
    creates, status, _ = _crash_loop(None)
    failed = next(c for c in status["conditions"] if c["type"] == "Failed")
    assert failed["reason"] == "WorkerBackoffLimitExceeded"
    assert len(creates) <= 2 + 6 * 2
    # each index: created, failed 1 s later, replaced 10, 20, 40 s after its failure
    for times in (creates[0::2], creates[1::2]):
        assert [round(b - a) for a, b in itertools.pairwise(times)] == [11, 21, 41], creates


def test_deletes_replayed_by_name_cost_a_create_each_at_a_growing_interval():
    """Each replay hits the replacement we created meanwhile, whose delete is replayed again: created
    again at once, the cascade never ends; held, each further create waits 10 s more (doubling)."""
    creates, status, _ = _crash_loop(0.5)
    failed = next(c for c in status["conditions"] if c["type"] == "Failed")
    assert failed["reason"] == "WorkerBackoffLimitExceeded"
    per_index = [creates[i::2] for i in range(2)]
    for times in per_index:
        gaps = [round(b - a) for a, b in itertools.pairwise(times)]
        assert all(g >= 10 for g in gaps[1:]), times  # only a worker's first re-create goes at once
    assert len(creates) <= 2 + 6 * 2, creates
