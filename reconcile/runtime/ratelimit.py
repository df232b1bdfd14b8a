"""Rate limiters: a token bucket, per-key exponential backoff, and their maximum (client-go's shapes).

The token bucket serves two users: the work queue asks it for a delay (``reserve``), the API client
blocks on it (``wait``) to honour ``--kube-api-qps``/``--kube-api-burst``.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Callable, Hashable

Clock = Callable[[], float]


class TokenBucket:
    """``rate`` tokens per second, at most ``burst`` saved up. Reservations may go into debt."""

    def __init__(self, rate: float, burst: int, clock: Clock = time.monotonic) -> None:
        if rate <= 0 or burst < 1:
            raise ValueError(f"token bucket needs rate > 0 and burst >= 1, got {rate}, {burst}")
        self.rate = float(rate)
        self.burst = int(burst)
        self._clock = clock
        self._tokens = float(burst)
        self._stamp = clock()
        self._lock = threading.Lock()

    def reserve(self) -> float:
        """Take one token now and return how long the caller must wait before using it."""
        with self._lock:
            now = self._clock()
            self._tokens = min(self.burst, self._tokens + (now - self._stamp) * self.rate)
            self._stamp = now
            self._tokens -= 1.0
            if self._tokens >= 0:
                return 0.0
            return -self._tokens / self.rate

    def wait(self, sleep: Callable[[float], None] = time.sleep) -> float:
        delay = self.reserve()
        if delay > 0:
            sleep(delay)
        return delay


class ItemExponentialLimiter:
    """``base * 2**failures``, capped at ``cap``; ``forget`` resets a key."""

    def __init__(self, base: float = 0.005, cap: float = 1000.0) -> None:
        self.base = base
        self.cap = cap
        self._failures: dict[Hashable, int] = {}
        self._lock = threading.Lock()

    def when(self, item: Hashable) -> float:
        with self._lock:
            n = self._failures.get(item, 0)
            self._failures[item] = n + 1
        # 2**n overflows float long after the cap is reached; stop computing early.
        if n > 64:
            return self.cap
        return min(self.cap, self.base * (2**n))

    def num_requeues(self, item: Hashable) -> int:
        with self._lock:
            return self._failures.get(item, 0)

    def forget(self, item: Hashable) -> None:
        with self._lock:
            self._failures.pop(item, None)


class BucketLimiter:
    """The overall limit across keys, as a delay from a shared token bucket."""

    def __init__(self, bucket: TokenBucket) -> None:
        self.bucket = bucket

    def when(self, item: Hashable) -> float:
        return self.bucket.reserve()

    def num_requeues(self, item: Hashable) -> int:
        return 0

    def forget(self, item: Hashable) -> None:
        return None


class MaxOfLimiter:
    """The longest delay of several limiters; every limiter sees every call (so tokens are consumed)."""

    def __init__(self, *limiters: ItemExponentialLimiter | BucketLimiter) -> None:
        self.limiters = limiters

    def when(self, item: Hashable) -> float:
        return max(lim.when(item) for lim in self.limiters)

    def num_requeues(self, item: Hashable) -> int:
        return max(lim.num_requeues(item) for lim in self.limiters)

    def forget(self, item: Hashable) -> None:
        for lim in self.limiters:
            lim.forget(item)

    def when_overall(self) -> float:
        """Only the shared buckets' delay: for event-driven adds, which are not failures of the key."""
        return max((lim.when(None) for lim in self.limiters if isinstance(lim, BucketLimiter)), default=0.0)


def controller_rate_limiter(qps: float = 10, burst: int = 100, clock: Clock = time.monotonic) -> MaxOfLimiter:
    """Upstream's queue limiter: per-key 5 ms → 1000 s, and an overall bucket (#674) unless ``qps`` is 0
    (the operator's default: the API client's adaptive limiter paces the writes themselves, and a shared
    bucket of syncs holds back the launchers of a burst of new jobs)."""
    per_key = ItemExponentialLimiter(0.005, 1000.0)
    if qps <= 0:
        return MaxOfLimiter(per_key)
    return MaxOfLimiter(per_key, BucketLimiter(TokenBucket(qps, burst, clock)))


# -- the API client's limiter ------------------------------------------------------------------------------
RETRY_AFTER_DEFAULT = 1.0  # a 429 without Retry-After: pause this long
RETRY_AFTER_MAX = 30.0  # never trust a Retry-After further than this
MIN_QPS = 1.0  # the slowest a series of 429s can push the client
LATENCY_FLOOR_QPS = 5.0  # rising latency alone never slows the client below upstream's fixed limit
LATENCY_FACTOR = 4.0  # latency this many times the baseline counts as the server struggling
# ...and only if it is at least this many seconds: a server we keep busy answers in 0.1-2 s, and slowing
# down then only slows us (a lower threshold throttles a busy server's only client, with no other client to
# make room for). API Priority and Fairness queues us fairly meanwhile, and its 429s are the signal that
# it has no room.
LATENCY_MIN = 5.0
UNLIMITED_ABOVE = 500.0  # a limit recovered past this many QPS is lifted
ADJUST_EVERY = 1.0  # seconds between two changes of the limit (one burst of 429s is one signal)


class AdaptiveLimiter:
    """The API client's limiter: no client-side limit while the server keeps up, AIMD when it says not.

    * ``ceiling`` (``--kube-api-qps`` > 0) with ``burst``: a token bucket never faster than that, as the
      client-go's limiter is; ``None``: no fixed limit, the server's flow control (API Priority and Fairness)
      is the limit, and its signals are obeyed:
    * a 429 (or a 5xx with ``Retry-After``) pauses every request of this client for ``Retry-After``
      seconds and halves the rate to at most half of what was achieved in the last second;
    * latency above ``LATENCY_FACTOR`` x a slowly rising baseline (and above ``LATENCY_MIN``) multiplies
      the rate by 0.7, never below ``LATENCY_FLOOR_QPS``;
    * each second without such a signal the rate grows by a quarter, whether or not requests were sent
      in it (a client that went quiet after a burst of 429s is not held to their rate when it speaks
      again); past ``UNLIMITED_ABOVE`` (or the ceiling) it is lifted back to the ceiling, or to no limit.

    Not client-go's shape (a fixed bucket, and a 429 retried after Retry-After), because a fixed number
    is either too low for a healthy server or too high for a loaded one.
    """

    def __init__(
        self,
        ceiling: float | None = None,
        burst: int = 10,
        *,
        clock: Clock = time.monotonic,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        if ceiling is not None and (ceiling <= 0 or burst < 1):
            raise ValueError(f"a fixed limit needs qps > 0 and burst >= 1, got {ceiling}, {burst}")
        self.ceiling = ceiling
        self.burst = max(1, int(burst))
        self._clock = clock
        self._sleep = sleep
        self._lock = threading.Lock()
        self.rate: float | None = ceiling  # None: no limit now
        self._tokens = float(self.burst)
        self._stamp = clock()
        self._pause_until = 0.0
        self._changed = -ADJUST_EVERY
        self._done: deque[float] = deque()  # completion times within the last second (achieved rate)
        self._fast: float | None = None  # EWMA of request latency
        self._base: float | None = None  # baseline latency: a minimum that rises slowly
        self._base_stamp = 0.0
        self.throttled = 0  # 429s seen (for the metrics and the benchmark)

    # -- before a request ---------------------------------------------------------------------------
    def reserve(self) -> float:
        """Seconds the caller must wait before sending (taking a token if limited)."""
        with self._lock:
            now = self._clock()
            delay = max(0.0, self._pause_until - now)
            self._increase(now)
            if self.rate is None:
                return delay
            start = now + delay
            self._tokens = min(self.burst, self._tokens + max(0.0, start - self._stamp) * self.rate)
            self._stamp = max(self._stamp, start)
            self._tokens -= 1.0
            if self._tokens >= 0:
                return delay
            return delay + -self._tokens / self.rate

    def wait(self) -> float:
        delay = self.reserve()
        if delay > 0:
            self._sleep(delay)
        return delay

    # -- after a response ---------------------------------------------------------------------------
    def observe(self, latency: float | None, code: int, retry_after: float | None = None) -> None:
        """One answer: its latency (None for a watch, whose answer time says nothing), code, Retry-After."""
        with self._lock:
            now = self._clock()
            done = self._done
            while done and now - done[0] >= 1.0:  # oldest first: amortized O(1) per answer
                done.popleft()
            done.append(now)
            achieved = float(len(self._done))
            if code == 429 or (code >= 500 and retry_after is not None):
                if code == 429:
                    self.throttled += 1
                pause = RETRY_AFTER_DEFAULT if retry_after is None else retry_after
                pause = min(RETRY_AFTER_MAX, max(0.0, pause))
                self._pause_until = max(self._pause_until, now + pause)
                self._decrease(now, achieved, 0.5, MIN_QPS)
                return
            if latency is None:
                return
            self._track_latency(now, latency)
            assert self._fast is not None and self._base is not None
            if self._fast > max(LATENCY_FACTOR * self._base, LATENCY_MIN):
                self._decrease(now, achieved, 0.7, LATENCY_FLOOR_QPS)
            else:
                self._increase(now)

    def _track_latency(self, now: float, latency: float) -> None:
        latency = max(0.0, latency)
        self._fast = latency if self._fast is None else 0.8 * self._fast + 0.2 * latency
        if self._base is None:
            self._base, self._base_stamp = latency, now
            return
        # The baseline doubles in a minute unless a faster answer pulls it down: a lasting change of the
        # server's pace becomes the new normal instead of throttling the client for ever.
        self._base *= 2 ** (max(0.0, now - self._base_stamp) / 60.0)
        self._base_stamp = now
        self._base = max(1e-4, min(self._base, latency))

    def _decrease(self, now: float, achieved: float, factor: float, floor: float) -> None:
        if now - self._changed < ADJUST_EVERY:
            return
        current = achieved if self.rate is None else min(self.rate, achieved)
        new = max(floor, factor * current)
        if self.ceiling is not None:
            new = min(new, self.ceiling)
        if self.rate is None or new < self.rate:
            if self.rate is None:
                self._tokens, self._stamp = 1.0, now
            self.rate = new
            self._changed = now

    def _increase(self, now: float) -> None:
        """A quarter more for each whole second since the last change."""
        if self.rate is None or self.rate == self.ceiling:
            return
        steps = int((now - self._changed) / ADJUST_EVERY)
        if steps < 1:
            return
        new = self.rate * 1.25 ** min(steps, 64)
        limit = self.ceiling if self.ceiling is not None else UNLIMITED_ABOVE
        self.rate = self.ceiling if new >= limit else new
        self._changed += steps * ADJUST_EVERY
        if self.rate is None or self.rate == self.ceiling:
            self._tokens, self._stamp = float(self.burst), max(self._stamp, now)


def retry_after_seconds(value: str | None) -> float | None:
    """A ``Retry-After`` header in seconds (the API server sends whole seconds), None if absent or odd."""
    if not value:
        return None
    try:
        seconds = float(value.strip())
    except ValueError:
        return None
    return seconds if seconds >= 0 else None
