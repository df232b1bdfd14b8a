"""A rate-limited, delaying work queue with client-go's guarantees.

* a key waits in the queue at most once (``dirty`` set);
* a key being processed is never handed to a second worker: re-adds while it is processed are parked in
  ``dirty`` and queued again by ``done`` (``processing`` set);
* ``add_after`` wakes a key at an exact moment (TTL, deadline) without polling; an earlier wakeup replaces
  a later one for the same key;
* ``add_rate_limited`` delays by the limiter (per-key exponential and an overall token bucket).
"""

from __future__ import annotations

import heapq
import itertools
import threading
import time
from collections import deque
from collections.abc import Callable, Hashable

from reconcile.runtime.ratelimit import Clock, MaxOfLimiter, controller_rate_limiter


class ShutDown(Exception):
    """Raised by ``get`` once the queue is shut down and drained of ready keys."""


class WorkQueue:
    def __init__(
        self,
        limiter: MaxOfLimiter | None = None,
        clock: Clock = time.monotonic,
        on_depth: Callable[[int], None] | None = None,
    ) -> None:
        self._limiter = limiter if limiter is not None else controller_rate_limiter(clock=clock)
        self._clock = clock
        self._on_depth = on_depth
        self._queue: deque[Hashable] = deque()
        self._dirty: set[Hashable] = set()
        self._processing: set[Hashable] = set()
        # Delayed keys: heap of (ready_at, seq, key) plus the earliest ready time per key.
        self._waiting: list[tuple[float, int, Hashable]] = []
        self._ready_at: dict[Hashable, float] = {}
        self._seq = itertools.count()
        self._cond = threading.Condition()
        self._shutting_down = False
        # Keys with an event-driven add already paid for and not yet handed to a worker.
        self._event_pending: set[Hashable] = set()

    # -- plain queue -------------------------------------------------------------------------------
    def add(self, key: Hashable) -> None:
        with self._cond:
            self._add_locked(key)

    def _add_locked(self, key: Hashable) -> None:
        if self._shutting_down or key in self._dirty:
            return
        self._dirty.add(key)
        if key in self._processing:
            return
        self._queue.append(key)
        self._depth_changed()
        self._cond.notify()

    def get(self, timeout: float | None = None) -> Hashable:
        """Block until a key is ready; mark it processing. Raises ShutDown, or TimeoutError on timeout."""
        deadline = None if timeout is None else self._clock() + timeout
        with self._cond:
            while True:
                self._promote_ready_locked()
                if self._queue:
                    key = self._queue.popleft()
                    self._processing.add(key)
                    self._dirty.discard(key)
                    self._event_pending.discard(key)
                    self._depth_changed()
                    return key
                if self._shutting_down:
                    raise ShutDown
                wait = self._next_wait_locked()
                if deadline is not None:
                    left = deadline - self._clock()
                    if left <= 0:
                        raise TimeoutError
                    wait = left if wait is None else min(wait, left)
                self._cond.wait(None if wait is None else min(wait, threading.TIMEOUT_MAX))

    def done(self, key: Hashable) -> None:
        with self._cond:
            self._processing.discard(key)
            if key in self._dirty:
                self._queue.append(key)
                self._depth_changed()
                self._cond.notify()

    def __len__(self) -> int:
        with self._cond:
            return len(self._queue)

    def shutdown(self, *, drop: bool = False) -> None:
        """No more adds. ``get`` hands out what is queued until it is empty, or, with ``drop``, nothing
        more at all (a leader stepping down must not start another sync)."""
        with self._cond:
            self._shutting_down = True
            if drop:
                self._queue.clear()
                self._dirty.clear()
                self._waiting.clear()
                self._ready_at.clear()
                self._event_pending.clear()
                self._depth_changed()
            self._cond.notify_all()

    @property
    def shutting_down(self) -> bool:
        return self._shutting_down

    # -- delays ------------------------------------------------------------------------------------
    def add_after(self, key: Hashable, delay: float) -> None:
        with self._cond:
            if self._shutting_down:
                return
            if delay <= 0:
                self._add_locked(key)
                return
            ready_at = self._clock() + delay
            current = self._ready_at.get(key)
            if current is not None and current <= ready_at:
                return
            self._ready_at[key] = ready_at
            heapq.heappush(self._waiting, (ready_at, next(self._seq), key))
            self._cond.notify_all()

    def waiting(self) -> dict[Hashable, float]:
        """Delayed keys and when they become ready (clock units); for tests and debugging."""
        with self._cond:
            return dict(self._ready_at)

    def _promote_ready_locked(self) -> None:
        now = self._clock()
        while self._waiting and self._waiting[0][0] <= now:
            ready_at, _, key = heapq.heappop(self._waiting)
            # A superseded (later) entry for a key that got an earlier wakeup: skip it.
            if self._ready_at.get(key) != ready_at:
                continue
            del self._ready_at[key]
            self._add_locked(key)

    def _next_wait_locked(self) -> float | None:
        while self._waiting:
            ready_at, _, key = self._waiting[0]
            if self._ready_at.get(key) != ready_at:
                heapq.heappop(self._waiting)
                continue
            return max(0.0, ready_at - self._clock())
        return None

    # -- rate limiting -----------------------------------------------------------------------------
    def add_rate_limited(self, key: Hashable) -> None:
        """A retry after a failure: per-key exponential backoff and the overall bucket."""
        self.add_after(key, self._limiter.when(key))

    def add_event(self, key: Hashable, batch: float = 0.0) -> None:
        """A watch event for ``key``: the overall bucket only, and nothing at all when the key will be
        synced anyway: queued, parked behind its own processing, or waiting on an earlier event's bucket
        delay. Only the first event since the key was last handed out pays a token. (client-go's
        AddRateLimited on every event lets a burst of events -- thousands of pod updates at scale -- run the
        bucket minutes into debt and grow every key's backoff.) With ``batch``, the key waits at least that
        long after the first event, so the events of a burst (pods starting together, the echoes of one
        sync's writes) are handled by one sync."""
        with self._cond:
            if self._shutting_down or key in self._dirty or key in self._event_pending:
                return
            self._event_pending.add(key)
        self.add_after(key, max(batch, self._limiter.when_overall()))

    def forget(self, key: Hashable) -> None:
        self._limiter.forget(key)

    def num_requeues(self, key: Hashable) -> int:
        return self._limiter.num_requeues(key)

    def _depth_changed(self) -> None:
        if self._on_depth is not None:
            self._on_depth(len(self._queue))
