"""The work queue and rate limiters: client-go semantics, with a fake clock where time matters."""

from __future__ import annotations

import threading
import time

import pytest

from reconcile.runtime.queue import ShutDown, WorkQueue
from reconcile.runtime.ratelimit import (
    BucketLimiter,
    ItemExponentialLimiter,
    MaxOfLimiter,
    TokenBucket,
    controller_rate_limiter,
)


class FakeClock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


def limited_queue() -> tuple[WorkQueue, FakeClock]:
    """A queue with the controller's rate limiter (10/s, burst 100) on a fake clock."""
    clock = FakeClock()
    return WorkQueue(limiter=controller_rate_limiter(10, 100, clock), clock=clock), clock


def drain(q: WorkQueue) -> list:
    out = []
    while True:
        try:
            out.append(q.get(timeout=0))
        except TimeoutError:
            return out


def test_add_dedupes_while_queued():
    q = WorkQueue()
    q.add("a")
    q.add("b")
    q.add("a")
    assert len(q) == 2
    assert drain(q) == ["a", "b"]


def test_key_being_processed_is_not_handed_out_again_until_done():
    q = WorkQueue()
    q.add("a")
    assert q.get(timeout=0) == "a"
    q.add("a")  # re-added while processing: parked
    assert len(q) == 0
    with pytest.raises(TimeoutError):
        q.get(timeout=0)
    q.done("a")
    assert q.get(timeout=0) == "a"
    q.done("a")
    with pytest.raises(TimeoutError):
        q.get(timeout=0)


def test_done_without_readd_does_not_requeue():
    q = WorkQueue()
    q.add("a")
    q.get(timeout=0)
    q.done("a")
    assert len(q) == 0


def test_no_key_processed_by_two_workers_at_once():
    q = WorkQueue()
    active: dict[str, int] = {}
    overlap = []
    processed = []
    lock = threading.Lock()

    def worker():
        while True:
            try:
                key = q.get()
            except ShutDown:
                return
            with lock:
                active[key] = active.get(key, 0) + 1
                if active[key] > 1:
                    overlap.append(key)
            time.sleep(0.001)
            with lock:
                active[key] -= 1
                processed.append(key)
            q.done(key)

    threads = [threading.Thread(target=worker) for _ in range(4)]
    for t in threads:
        t.start()
    for i in range(400):
        q.add(f"k{i % 3}")
        if i % 50 == 0:
            time.sleep(0.002)
    time.sleep(0.1)
    q.shutdown()
    for t in threads:
        t.join(5)
    assert overlap == []
    assert {"k0", "k1", "k2"} <= set(processed)


def test_add_after_wakes_at_the_moment_and_earlier_wins():
    clock = FakeClock()
    q = WorkQueue(clock=clock)
    q.add_after("ttl", 30)
    q.add_after("ttl", 10)  # earlier replaces later
    q.add_after("ttl", 20)  # later is ignored
    assert q.waiting() == {"ttl": clock.now + 10}
    clock.advance(9.9)
    assert drain(q) == []
    clock.advance(0.2)
    assert drain(q) == ["ttl"]
    assert q.waiting() == {}


def test_add_after_zero_is_immediate():
    q = WorkQueue()
    q.add_after("a", 0)
    assert drain(q) == ["a"]


def test_blocking_get_wakes_for_delayed_key():
    q = WorkQueue()
    q.add_after("a", 0.05)
    start = time.monotonic()
    assert q.get() == "a"  # no timeout: only the key's own moment can wake it
    assert time.monotonic() - start >= 0.04  # never before its delay


def test_shutdown_unblocks_getters_and_refuses_adds():
    q = WorkQueue()
    errors = []

    def getter():
        try:
            q.get()
        except ShutDown:
            errors.append("shutdown")

    t = threading.Thread(target=getter)
    t.start()
    time.sleep(0.02)
    q.shutdown()
    t.join(2)
    assert errors == ["shutdown"]
    q.add("a")
    assert len(q) == 0


def test_item_exponential_backoff_5ms_to_1000s_and_forget():
    lim = ItemExponentialLimiter(0.005, 1000)
    delays = [lim.when("a") for _ in range(20)]
    assert delays[:4] == [0.005, 0.01, 0.02, 0.04]
    assert delays[-1] == 1000
    assert max(delays) == 1000
    assert lim.num_requeues("a") == 20
    assert lim.when("b") == 0.005  # per key
    lim.forget("a")
    assert lim.num_requeues("a") == 0
    assert lim.when("a") == 0.005
    for _ in range(2000):
        lim.when("c")
    assert lim.when("c") == 1000


def test_token_bucket_burst_then_rate():
    clock = FakeClock()
    bucket = TokenBucket(10, 100, clock)
    assert all(bucket.reserve() == 0 for _ in range(100))
    assert bucket.reserve() == pytest.approx(0.1)
    assert bucket.reserve() == pytest.approx(0.2)
    clock.advance(1.0)  # 10 tokens back, 2 were owed
    assert bucket.reserve() == 0
    for _ in range(7):
        bucket.reserve()
    assert bucket.reserve() == pytest.approx(0.1)


def test_token_bucket_never_saves_more_than_burst():
    clock = FakeClock()
    bucket = TokenBucket(5, 10, clock)
    clock.advance(3600)
    assert [bucket.reserve() for _ in range(10)] == [0] * 10
    assert bucket.reserve() > 0


def test_token_bucket_rejects_bad_config():
    with pytest.raises(ValueError):
        TokenBucket(0, 1)
    with pytest.raises(ValueError):
        TokenBucket(1, 0)


def test_max_of_limiter_uses_longest_delay():
    clock = FakeClock()
    lim = MaxOfLimiter(ItemExponentialLimiter(0.005, 1000), BucketLimiter(TokenBucket(1, 1, clock)))
    assert lim.when("a") == 0.005  # bucket has its one token
    assert lim.when("b") == pytest.approx(1.0)  # bucket in debt: 1 s beats 5 ms
    assert lim.num_requeues("a") == 1
    lim.forget("a")
    assert lim.num_requeues("a") == 0


def test_add_rate_limited_backs_off_per_key_and_forget_resets():
    q, clock = limited_queue()
    for _ in range(5):
        q.add_rate_limited("a")
        clock.advance(10)
        assert drain(q) == ["a"]
        q.done("a")
    assert q.num_requeues("a") == 5
    q.add_rate_limited("a")
    assert q.waiting()["a"] == pytest.approx(clock.now + 0.005 * 2**5)
    q.forget("a")
    assert q.num_requeues("a") == 0


def test_overall_bucket_limits_many_keys():
    q, clock = limited_queue()
    for i in range(110):
        q.add_rate_limited(f"k{i}")
    waits = sorted(q.waiting().values())
    # the first 100 only carry the 5 ms per-key delay; the rest are spread at 10/s
    assert waits[99] == pytest.approx(clock.now + 0.005)
    assert waits[100] == pytest.approx(clock.now + 0.1)
    assert waits[109] == pytest.approx(clock.now + 1.0)


def test_depth_callback_tracks_queue_length():
    depths = []
    q = WorkQueue(on_depth=depths.append)
    q.add("a")
    q.add("b")
    q.get(timeout=0)
    assert depths == [1, 2, 1]


def test_events_for_a_queued_key_take_no_tokens_and_no_backoff():
    q, clock = limited_queue()
    for _ in range(1000):  # a burst of watch events for one job
        q.add_event("a")
    assert drain(q) == ["a"]
    assert q.num_requeues("a") == 0
    # the burst took one token, not 1000: 99 other keys still go at once
    for i in range(99):
        q.add_event(f"k{i}")
    assert len(drain(q)) == 99
    q.add_event("late")
    assert q.waiting()["late"] == pytest.approx(clock.now + 0.1)


def test_events_for_keys_in_flight_or_delayed_pay_once():
    # At scale, events for keys being processed or waiting on a bucket delay must not each take a token:
    # the bucket would run hundreds of seconds into debt (docs/design-notes.md).
    q, clock = limited_queue()
    for i in range(100):  # use up the burst: key k{i} is handed out and being processed
        q.add_event(f"k{i}")
        assert q.get(timeout=0) == f"k{i}"
    for _ in range(50):  # many events per in-flight key
        for i in range(100):
            q.add_event(f"k{i}")
    for i in range(100):
        q.done(f"k{i}")
    # One token per key, not 50: the last key waits 100 tokens at 10/s, not 5000.
    assert max(q.waiting().values()) == pytest.approx(clock.now + 10.0)
    # A new key's delay grows by one token only.
    q.add_event("new")
    assert q.waiting()["new"] == pytest.approx(clock.now + 10.1)


def test_event_while_processing_requeues_after_done():
    q = WorkQueue()
    q.add_event("a")
    assert q.get(timeout=0) == "a"
    q.add_event("a")
    q.add_event("a")
    q.done("a")
    assert drain(q) == ["a"]


def test_event_beats_a_distant_wakeup():
    clock = FakeClock()
    q = WorkQueue(clock=clock)
    q.add_after("a", 3600)  # TTL wakeup
    q.add_event("a")
    assert drain(q) == ["a"]
