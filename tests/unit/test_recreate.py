"""Children someone else keeps deleting are created again with back-off."""

from __future__ import annotations

from reconcile.engine.executor import ExecResult, Outcome
from reconcile.engine.plan import Create, ObjectKey, Plan
from reconcile.mpijob.recreate import RESET_SECONDS, Recreates

SVC = ObjectKey("", "Service", "ns", "pi")
POD = ObjectKey("", "Pod", "ns", "pi-worker-0")


def plan(*keys: ObjectKey) -> Plan:
    return Plan(creates=tuple(Create(k, "v1", {}) for k in keys))


def created(*keys: ObjectKey) -> ExecResult:
    return ExecResult(done=tuple(Outcome(k, "created") for k in keys))


def test_the_first_create_and_the_first_recreate_go_at_once_then_10_s_doubling():
    r = Recreates()
    t = 100.0
    assert r.hold("ns/pi", "u", plan(SVC), t) == (plan(SVC), None)
    r.record("ns/pi", "u", created(SVC), t)  # the first create
    assert r.hold("ns/pi", "u", plan(SVC), t + 1) == (plan(SVC), None)  # deleted: created again at once
    r.record("ns/pi", "u", created(SVC), t + 1)
    waits = []
    now = t + 1
    for _ in range(7):
        kept, wait = r.hold("ns/pi", "u", plan(SVC, POD), now + 0.5)
        assert kept == plan(POD) and wait is not None  # the pod is not held here
        waits.append(round(wait + 0.5))
        now += wait + 0.5
        assert r.hold("ns/pi", "u", plan(SVC), now) == (plan(SVC), None)
        r.record("ns/pi", "u", created(SVC), now)
    assert waits == [10, 20, 40, 80, 160, 320, 360]


def test_a_quiet_while_or_our_own_delete_starts_afresh_and_jobs_are_apart():
    r = Recreates()
    for t in (0.0, 1.0, 2.0):
        r.record("ns/pi", "u", created(SVC), t)
    assert r.hold("ns/pi", "u", plan(SVC), 3.0)[1] is not None
    assert r.hold("ns/pi", "u", plan(SVC), 2.0 + RESET_SECONDS)[1] is None
    assert r.hold("ns/pi", "other-uid", plan(SVC), 3.0)[1] is None  # a new MPIJob of the same name
    r.record("ns/pi", "u", created(SVC), 3.0)
    r.record("ns/pi", "u", ExecResult(done=(Outcome(SVC, "deleted"),)), 4.0)
    assert r.hold("ns/pi", "u", plan(SVC), 4.0)[1] is None
    r.forget("ns/pi")
    assert r.made == {}
