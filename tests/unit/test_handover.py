"""Leader hand-over under load, offline: the fence in the client's request layer, the queue that stops
handing out keys at once, and the elector that drains briefly while renewing, then releases."""

from __future__ import annotations

import threading
import time

import pytest

from localcluster.wait import wait_for
from reconcile.runtime.fence import Fence, NotLeader
from reconcile.runtime.kube import POD, Kube
from reconcile.runtime.leader import LeaderElector
from reconcile.runtime.queue import ShutDown, WorkQueue
from tests.unit.fakes import Clock, FakeKube
from tests.unit.loopback import ApiServer, client

LOCK = "mpi-operator"  # upstream's Lease name, which the operator keeps


def test_fence_opens_until_the_granted_time_and_never_after_revoke():
    clock = Clock()
    fence = Fence(clock)
    assert not fence.is_open()
    fence.grant(5.0)
    assert fence.is_open()
    clock.t = 5.0
    assert not fence.is_open()  # lapsed: the last renewal is too old
    fence.grant(10.0)
    assert fence.is_open()
    assert fence.revoke(0)
    fence.grant(100.0)
    assert not fence.is_open()
    with pytest.raises(NotLeader), fence.write():
        pass


def test_a_write_gets_the_time_left_before_a_standby_may_lead():
    clock = Clock()
    fence = Fence(clock)
    fence.grant(10.0, land_by=14.0)
    clock.t = 3.0
    with fence.write() as limit:
        assert limit == 11.0
    fence.grant(9.0, land_by=12.0)  # an older renewal's grant moves nothing back
    clock.t = 9.5
    with fence.write() as limit:
        assert limit == 4.5
    fence = Fence(clock)
    fence.grant(20.0, land_by=9.5)
    with pytest.raises(NotLeader, match="no time left"), fence.write():
        pass


def test_a_fenced_write_gives_up_when_its_time_is_up(server: ApiServer):
    """The server takes 3 s; the fence leaves the write 0.3 s: it fails by then, not at the 30 s timeout."""
    fence = Fence()
    now = time.monotonic()
    fence.grant(now + 60, land_by=now + 0.3)
    server.delay = 3.0
    kube = Kube(client(server.url), qps=0, fence=fence)
    began = time.monotonic()
    with pytest.raises(TimeoutError):
        kube.request("POST", "/api/v1/namespaces/ns/pods", body={})
    assert time.monotonic() - began < 1.5
    assert fence.in_flight == 0


def test_revoke_waits_for_the_write_in_flight():
    fence = Fence()
    fence.grant(time.monotonic() + 60)
    entered, release = threading.Event(), threading.Event()

    def writer():
        with fence.write():
            entered.set()
            release.wait(5)

    t = threading.Thread(target=writer)
    t.start()
    assert entered.wait(2)
    assert not fence.revoke(0.1)  # still in flight
    threading.Timer(0.2, release.set).start()
    assert fence.revoke(2)
    t.join(2)


def test_kube_never_sends_a_write_the_fence_refuses(server: ApiServer):
    counted: list = []
    fence = Fence()
    kube = Kube(client(server.url), qps=0, fence=fence, on_request=lambda *a: counted.append(a))
    kube.request("GET", "/api/v1/namespaces/ns/pods")  # reads need no lease
    for method in ("POST", "PUT", "PATCH", "DELETE"):
        with pytest.raises(NotLeader):
            kube.request(method, "/api/v1/namespaces/ns/pods/p", body={})
    assert [s["method"] for s in server.seen] == ["GET"]
    assert counted.count(("create", "Pod", "fenced")) == 1
    fence.grant(time.monotonic() + 60)
    kube.request("POST", "/api/v1/namespaces/ns/pods", body={})
    assert [s["method"] for s in server.seen] == ["GET", "POST"]


def test_queue_shutdown_with_drop_hands_out_nothing_more():
    q = WorkQueue()
    for i in range(20):
        q.add(f"ns/job{i}")
    q.add_after("ns/later", 0.01)
    assert q.get(timeout=1) == "ns/job0"
    q.shutdown(drop=True)
    with pytest.raises(ShutDown):
        q.get(timeout=1)
    q.add("ns/job0")
    q.done("ns/job0")
    with pytest.raises(ShutDown):
        q.get(timeout=1)
    assert len(q) == 0


def test_sigterm_with_a_backlog_no_write_after_the_release(server: ApiServer):
    """20 keys queued, two workers each writing 5 times per key (50 ms a write): on stop the elector
    drains for a bound shorter than the renew deadline while renewing, closes the fence, then releases.
    Nothing is sent after the release; the hand-over takes about the drain bound, not the backlog."""
    lease_kube = FakeKube()
    fence = Fence()
    server.delay = 0.05
    kube = Kube(client(server.url), qps=0, fence=fence)
    queue = WorkQueue()
    for i in range(20):
        queue.add(f"ns/job{i}")
    refused: list = []

    def worker():
        while True:
            try:
                key = queue.get()
            except ShutDown:
                return
            try:
                for n in range(5):
                    kube.create(POD, "ns", {"metadata": {"name": f"{key}-{n}"}})
            except NotLeader:
                refused.append(key)
            finally:
                queue.done(key)

    workers = [threading.Thread(target=worker, daemon=True) for _ in range(2)]

    def stop_workers(timeout: float) -> None:
        queue.shutdown(drop=True)
        for w in workers:
            w.join(timeout)

    le = LeaderElector(
        lease_kube,
        "ns",
        "a",
        name=LOCK,
        lease_duration=3,
        renew_deadline=2.0,
        retry_period=0.4,
        drain_timeout=0.2,
        fence=fence,
        on_started=lambda: [w.start() for w in workers],
        watch_lease=False,
    )
    stop = threading.Event()
    t = threading.Thread(target=le.run, args=(stop, stop_workers))
    t.start()
    wait_for(lambda: server.seen, "a write sent", 30, 0.01)
    time.sleep(0.3)
    sigterm = time.monotonic()
    stop.set()
    t.join(5)
    assert not t.is_alive()
    spec = lease_kube.objects[("leases", "ns", LOCK)]["spec"]
    assert spec["holderIdentity"] == ""
    released = le.stepped_down_at
    assert released is not None
    after = [s for s in server.seen if s["at"] > released]
    assert after == [], f"{len(after)} writes after the release"
    # bounded by the drain, far below the backlog's 20 x 5 x 50 ms / 2 = 2.5 s
    assert released - sigterm < 1.0
    sent = len(server.seen)
    assert sent < 100, "the backlog was drained instead of dropped"


# -- start-up: only NotFound is fatal --------------------------------------------------------------
class StartupKube:
    def __init__(self, answers: list) -> None:
        self.answers = answers

    def list(self, res, namespace=None, **query):
        answer = self.answers.pop(0)
        if isinstance(answer, BaseException):
            raise answer
        return answer


def test_startup_crd_check_retries_transient_errors():
    from reconcile.main import check_crd
    from reconcile.runtime.kube import ApiError

    codes: list = []
    kube = StartupKube(
        [
            ApiError(500, "Internal", "{}"),
            ApiError(403, "Forbidden", "{}"),  # RBAC cache of a restarting API server not synced yet
            ApiError(429, "TooManyRequests", "{}"),
            ConnectionRefusedError("refused"),
            {"items": []},
        ]
    )
    assert check_crd(kube, "", on_error=codes.append, backoff=(0.001, 0.002))  # type: ignore[arg-type]
    assert codes == ["500", "403", "429", "error"]


def test_startup_crd_check_exits_on_not_found_only():
    from reconcile.main import StartupError, check_crd
    from reconcile.runtime.kube import ApiError

    kube = StartupKube([ApiError(503, "Unavailable", "{}"), ApiError(404, "NotFound", "{}")])
    with pytest.raises(StartupError, match="CRD"):  # main() logs it as one line and exits 1
        check_crd(kube, "", backoff=(0.001, 0.002))  # type: ignore[arg-type]


def test_startup_crd_check_ends_on_stop():
    from reconcile.main import check_crd
    from reconcile.runtime.kube import ApiError

    stop = threading.Event()
    stop.set()
    assert not check_crd(StartupKube([ApiError(500, "x", "{}")] * 3), "", stop=stop)  # type: ignore[arg-type]
