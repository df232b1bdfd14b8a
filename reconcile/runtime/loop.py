"""The generic controller loop: informers feed a work queue, workers hand each key to a reconciler.

Shape of client-go's controllers (and kopf's split of queueing from processing): event handlers only map
an event to keys and enqueue them; a worker takes a key (never two workers the same key at once), calls
``Reconciler.reconcile`` and, from what it returns or raises, forgets the key, requeues it after the wait
asked for, or requeues it with back-off. The loop keeps the one per-key record a loop needs, the number
of failed reconciles in a row, and hands it to the reconciler; it knows no kind and writes nothing.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterable
from typing import Any, Protocol

import attrs

from reconcile.runtime.fence import NotLeader
from reconcile.runtime.informer import Informer
from reconcile.runtime.queue import ShutDown, WorkQueue
from reconcile.runtime.ratelimit import MaxOfLimiter

log = logging.getLogger(__name__)

# old, new -> the keys to reconcile (an event's type is implied: old None is an add, new None a delete)
KeyMapper = Callable[[dict[str, Any] | None, dict[str, Any] | None], Iterable[str]]


@attrs.frozen
class Result:
    requeue_after: float | None = None  # seconds until the key must be reconciled again by time alone
    # a reconcile that did its part but must be tried again with back-off, and why
    error: Exception | None = None


class Reconciler(Protocol):
    def reconcile(self, key: str, failures: int) -> Result:
        """Bring ``key`` to its wanted state; ``failures``: reconciles of it failed in a row before this
        one. Raising, or a result with an error, requeues the key with back-off (``NotLeader``
        quietly)."""

    def failed(self, key: str, err: Exception, failures: int) -> None:
        """Tell the object's owner that a reconcile failed (``failures`` in a row, this one included)."""

    def recovered(self, key: str, failures: int) -> None:
        """A reconcile succeeded after ``failures`` failed ones."""


class Loop:
    def __init__(
        self,
        reconciler: Reconciler,
        rate_limiter: MaxOfLimiter,
        *,
        threadiness: int = 2,
        event_batch: float = 0.0,
        on_depth: Callable[[int], None] | None = None,
        on_result: Callable[[str, float], None] | None = None,
        expected: tuple[type[BaseException], ...] = (),
    ) -> None:
        """``event_batch``: a key waits this long after the first event of a burst. ``on_result``: each
        reconcile's outcome (success, error, fenced) and duration. ``expected``: errors logged without a
        traceback (the API server unreachable or refusing)."""
        self.reconciler = reconciler
        self.queue = WorkQueue(rate_limiter, on_depth=on_depth)
        self.threadiness = threadiness
        self.event_batch = event_batch
        self.informers: list[Informer] = []
        self._on_result = on_result
        self._expected = expected
        self._failures: dict[str, int] = {}
        self._workers: list[threading.Thread] = []
        self._stopped = threading.Event()
        self._started = threading.Event()

    def watch(self, informer: Informer, keys: KeyMapper, *, new_at_once: bool = False) -> None:
        """Reconcile the keys ``keys`` maps each event of ``informer`` to. ``new_at_once``: an object the
        cache did not hold is synced without waiting for the rest of a burst (a new primary object has
        none: its children's events come after its first sync)."""
        if informer not in self.informers:
            self.informers.append(informer)

        def handler(event: str, old: dict[str, Any] | None, new: dict[str, Any] | None) -> None:
            batch = 0.0 if new_at_once and old is None and new is not None else self.event_batch
            for key in keys(old, new):
                self.queue.add_event(key, batch)

        informer.add_handler(handler)

    def cache(self, informer: Informer) -> None:
        """An informer whose cache the reconciler reads but whose events wake nothing."""
        if informer not in self.informers:
            self.informers.append(informer)

    def failures(self, key: str) -> int:
        return self._failures.get(key, 0)

    def has_synced(self) -> bool:
        return self._started.is_set() and all(inf.has_synced() for inf in self.informers)

    def start(self, sync_timeout: float | None = None) -> bool:
        """Start the informers, wait for their caches, then start the workers. Non-blocking after that."""
        for inf in self.informers:
            inf.start()
        self._started.set()
        deadline = None if sync_timeout is None else time.monotonic() + sync_timeout
        for inf in self.informers:
            while not inf.wait_synced(0.5):
                if self._stopped.is_set():
                    return False
                if deadline is not None and time.monotonic() > deadline:
                    return False
        log.info("caches synced", extra={"informers": [i.name for i in self.informers]})
        for i in range(self.threadiness):
            t = threading.Thread(target=self._worker, name=f"worker-{i}", daemon=True)
            t.start()
            self._workers.append(t)
        return True

    def stop(self, timeout: float = 30) -> bool:
        """Hand no key out any more (queued ones are dropped: the next leader lists them again), give the
        reconciles in flight ``timeout`` s, stop the informers. True if every worker finished in time."""
        self._stopped.set()
        self.queue.shutdown(drop=True)
        deadline = time.monotonic() + timeout
        for t in self._workers:
            t.join(max(0.0, deadline - time.monotonic()))
        for inf in self.informers:
            inf.stop()
        return not any(t.is_alive() for t in self._workers)

    def _worker(self) -> None:
        while True:
            try:
                key = self.queue.get()
            except ShutDown:
                return
            try:
                self.process(str(key))
            finally:
                self.queue.done(key)

    def process(self, key: str) -> None:
        """One reconcile of ``key`` and what follows from it for the queue and the failure record."""
        start = time.monotonic()
        outcome = "success"
        failures = self._failures.get(key, 0)
        try:
            result = self.reconciler.reconcile(key, failures)
        except NotLeader as err:
            # The fence refused a write: leadership lapsed (the API server is unreachable) or ended.
            outcome = "fenced"
            log.info("sync stopped: not leading", extra={"key": key, "error": str(err)})
            self.queue.add_rate_limited(key)  # a stopped loop's queue takes no key
        except Exception as err:
            outcome = "error"
            self._failed(key, err, failures)
        else:
            if result.requeue_after is not None:
                self.queue.add_after(key, result.requeue_after)
            if result.error is not None:
                outcome = "error"
                self._failed(key, result.error, failures)
            else:
                self.queue.forget(key)
                self._failures.pop(key, None)
                if failures:
                    self.reconciler.recovered(key, failures)
        finally:
            if self._on_result is not None:
                self._on_result(outcome, time.monotonic() - start)

    def _failed(self, key: str, err: Exception, failures: int) -> None:
        if isinstance(err, self._expected):
            log.warning("sync failed, requeued", extra={"key": key, "error": str(err)})
        else:
            log.exception("sync failed, requeued", extra={"key": key}, exc_info=err)
        self._failures[key] = failures + 1
        self.reconciler.failed(key, err, failures + 1)
        self.queue.add_rate_limited(key)

    def forget(self, key: str) -> None:
        """The key's object is gone: nothing of it is kept."""
        self._failures.pop(key, None)
