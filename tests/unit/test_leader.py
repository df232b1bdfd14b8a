"""L0: leader election over a fake API (the Lease kept in memory)."""

from __future__ import annotations

import itertools
import threading
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from reconcile.runtime.kube import ApiError
from reconcile.runtime.leader import LeaderElector
from tests.unit.fakes import Clock, FakeKube

LOCK = "mpi-operator"  # upstream's Lease name, which the operator keeps


def elector(kube, identity, clock):
    start = datetime(2026, 1, 1, tzinfo=UTC)
    return LeaderElector(
        kube,
        "mpi-operator",
        identity,
        name=LOCK,
        clock=clock,
        wall=lambda: start + timedelta(seconds=clock.t),
    )


def fast_elector(kube: FakeKube, **hooks: Any) -> LeaderElector:
    """Candidate "a" in namespace ns on the wall clock, with a lease of one second and no Lease watch."""
    return LeaderElector(
        kube,
        "ns",
        "a",
        name=LOCK,
        lease_duration=1.0,
        renew_deadline=0.5,
        retry_period=0.1,
        watch_lease=False,
        **hooks,
    )


def test_first_candidate_creates_the_lease_and_leads():
    kube, clock = FakeKube(), Clock()
    a = elector(kube, "a", clock)
    assert a.try_acquire_or_renew()
    lease = kube.objects[("leases", "mpi-operator", LOCK)]
    assert lease["spec"]["holderIdentity"] == "a"
    assert lease["spec"]["leaseDurationSeconds"] == 15
    assert lease["spec"]["renewTime"] == "2026-01-01T00:00:00.000000Z"


def test_second_candidate_waits_until_the_lease_expires_unrenewed():
    kube, clock = FakeKube(), Clock()
    a, b = elector(kube, "a", clock), elector(kube, "b", clock)
    assert a.try_acquire_or_renew()
    assert not b.try_acquire_or_renew()
    clock.t = 10
    assert a.try_acquire_or_renew()  # renewal: b observes a changed record
    clock.t = 12
    assert not b.try_acquire_or_renew()
    clock.t = 12 + 14.9  # b first saw the renewed record at t=12, on its own clock
    assert not b.try_acquire_or_renew()
    clock.t = 12 + 15.1
    assert b.try_acquire_or_renew()
    spec = kube.objects[("leases", "mpi-operator", LOCK)]["spec"]
    assert spec["holderIdentity"] == "b"
    assert spec["leaseTransitions"] == 1
    # a lost it: its next attempt sees b's fresh record and fails
    assert not a.try_acquire_or_renew()


def test_conflicting_write_does_not_acquire():
    kube, clock = FakeKube(), Clock()
    a = elector(kube, "a", clock)
    assert a.try_acquire_or_renew()
    kube.fail["update"] = ApiError(409, "Conflict", "{}")
    assert not a.try_acquire_or_renew()


def test_release_lets_a_standby_take_over_at_once():
    kube, clock = FakeKube(), Clock()
    a, b = elector(kube, "a", clock), elector(kube, "b", clock)
    assert a.try_acquire_or_renew()
    a._set_leading(True)
    assert not b.try_acquire_or_renew()
    assert a.release()
    assert not a.is_leader
    assert kube.objects[("leases", "mpi-operator", LOCK)]["spec"]["holderIdentity"] == ""
    assert b.try_acquire_or_renew()


def test_run_exits_via_on_stopped_only_when_another_holds_the_lease():
    kube = FakeKube()
    started, stopped, changes = threading.Event(), threading.Event(), []
    le = fast_elector(kube, on_started=started.set, on_stopped=stopped.set, on_change=changes.append)
    stop = threading.Event()
    t = threading.Thread(target=le.run, args=(stop,))
    t.start()
    assert started.wait(2)
    assert le.is_leader and le.fence.is_open()
    # An unreachable API server: the fence lapses, but leadership is not given up (no exit).
    kube.fail["get"] = ApiError(500, "boom", "{}")
    assert not stopped.wait(1.5)
    assert le.is_leader and not le.fence.is_open()
    # The API server is back and nobody took the lease: renewed, writes resume.
    del kube.fail["get"]
    for _ in range(100):
        if le.fence.is_open():
            break
        threading.Event().wait(0.02)
    assert le.fence.is_open()
    # Someone else holds it now: lost.
    kube.objects[("leases", "ns", LOCK)]["spec"]["holderIdentity"] = "b"
    kube.objects[("leases", "ns", LOCK)]["spec"]["renewTime"] = "2099-01-01T00:00:00.000000Z"
    kube.fail["update"] = ApiError(409, "Conflict", "{}")
    assert stopped.wait(3)
    t.join(2)
    assert changes == [True, False]
    assert not le.fence.is_open()


def test_run_stops_workers_before_releasing_on_shutdown():
    kube = FakeKube()
    order = []
    le = fast_elector(kube)
    stop = threading.Event()
    t = threading.Thread(
        target=le.run,
        args=(stop, lambda timeout: order.append(("stop-workers", le.is_leader, le.fence.is_open()))),
    )
    t.start()
    for _ in range(100):
        if le.is_leader:
            break
        threading.Event().wait(0.02)
    stop.set()
    t.join(3)
    assert order == [("stop-workers", True, True)]
    assert kube.objects[("leases", "ns", LOCK)]["spec"]["holderIdentity"] == ""
    assert not le.fence.is_open()


def test_health_fails_when_leader_stops_renewing():
    kube, clock = FakeKube(), Clock()
    a = elector(kube, "a", clock)
    assert a.try_acquire_or_renew()
    a._set_leading(True)
    clock.t = 30
    assert a.healthy()
    clock.t = 36
    assert not a.healthy()


def test_every_write_let_out_is_over_before_a_standby_may_lead():
    """A write that starts at the fence's last moment still has to be over a margin before the earliest
    moment a standby that saw the same renewal may take the Lease."""
    kube, clock = FakeKube(), Clock()
    a, b = elector(kube, "a", clock), elector(kube, "b", clock)
    clock.t = 2.0
    assert a.try_acquire_or_renew()
    assert not b.try_acquire_or_renew()  # b has seen a's renewal
    clock.t = 11.9  # the fence closes at 2 + 10
    with a.fence.write() as limit:
        assert limit is not None
        over_by = clock.t + limit
    assert over_by == pytest.approx(2.0 + 15 - 1.0)
    clock.t = 16.9
    assert not b.try_acquire_or_renew()
    clock.t = 17.0
    assert b.try_acquire_or_renew()
    assert over_by < clock.t


def test_lease_timings_are_validated():
    with pytest.raises(ValueError):
        LeaderElector(FakeKube(), "ns", "a", name=LOCK, lease_duration=5, renew_deadline=5)


def test_slow_renewals_keep_the_fence_open():
    """Renewals start every retry period from the last one's start: one taking 0.2 s (GET, PUT) on a busy
    server must not close a 0.8 s fence between two of them (started from the last one's end, the next
    ended 0.9 s after the last one began). On a clock that moves only in the elector's waits and its
    calls, so the margin is exact on any machine."""
    clock = Clock()
    renewals: list[tuple[float, bool]] = []  # (clock at each PUT's answer, fence open then)

    class SlowKube(FakeKube):
        def get(self, *args, **kwargs):
            clock.t += 0.1
            return super().get(*args, **kwargs)

        def replace(self, *args, **kwargs):
            clock.t += 0.1  # still before the renewal grants the fence again
            renewals.append((clock.t, le.fence.is_open()))
            if len(renewals) == 6:
                stop.set()
            return super().replace(*args, **kwargs)

    class Waits(threading.Event):
        """The loop's waits: the clock moves by the timeout, nothing sleeps."""

        def wait(self, timeout: float | None = None) -> bool:
            if not self.is_set() and timeout:
                clock.t += timeout
            return self.is_set()

    le = LeaderElector(
        SlowKube(),
        "ns",
        "a",
        name=LOCK,
        lease_duration=2.0,
        renew_deadline=0.8,
        retry_period=0.5,
        watch_lease=False,
        clock=clock,
    )
    stop = Waits()
    le.run(stop)
    renewed = renewals[:6]  # the Lease was created; a 7th PUT releases it on stop
    assert [open_ for _, open_ in renewed] == [True] * 6, renewals
    gaps = [round(b - a, 3) for (a, _), (b, _) in itertools.pairwise(renewed)]
    assert gaps == [0.5] * 5, gaps  # start to start: the retry period, not period plus the calls
