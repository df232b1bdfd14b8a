"""Rate limiters: a token bucket, per-key exponential backoff, and their maximum (client-go's shapes).

The token bucket serves two users: the work queue asks it for a delay (``reserve``), the API client
blocks on it (``wait``) to honour ``--kube-api-qps``/``--kube-api-burst``.
"""

from __future__ import annotations

import threading
import time
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
    """Upstream's queue limiter: per-key 5 ms → 1000 s, and an overall bucket (#674)."""
    return MaxOfLimiter(ItemExponentialLimiter(0.005, 1000.0), BucketLimiter(TokenBucket(qps, burst, clock)))
