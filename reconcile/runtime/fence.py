"""The write fence: no write leaves this process unless it holds the Lease right now.

The leader elector ``grant``s the fence after each successful renewal, until the moment it started that
renewal plus the renew deadline; a standby cannot take the Lease before that moment plus the lease duration
(it must see the record unchanged for a full lease duration on its own clock), so every write the fence
lets through starts at least ``lease_duration - renew_deadline`` before anyone else may lead. A write
must also be over by then: ``write`` gives it the seconds left until the ``land_by`` of the last grant,
and the client gives up on it (resetting its connection, so nothing of it arrives later) when they pass.
``revoke`` closes the fence for good and waits for the writes already in flight, so a Lease released
after it returned can have no write of ours behind it. The check sits in the client's request layer
(``Kube``), under every write of the controller, the executor and the event recorder alike.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable, Iterator


class NotLeader(Exception):
    """A write refused locally: this process does not hold the Lease (lapsed, lost or released)."""


class Fence:
    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._until = float("-inf")
        self._land_by: float | None = None
        self._revoked = False
        self._in_flight = 0
        self._cond = threading.Condition()

    def grant(self, until: float, land_by: float | None = None) -> None:
        """Writes may start until ``until`` (clock units), and must be over by ``land_by`` (None: no
        bound); never after ``revoke``."""
        with self._cond:
            if not self._revoked:
                self._until = max(self._until, until)
                if land_by is not None:
                    self._land_by = max(self._land_by or land_by, land_by)

    def is_open(self) -> bool:
        with self._cond:
            return not self._revoked and self._clock() < self._until

    @property
    def in_flight(self) -> int:
        with self._cond:
            return self._in_flight

    def revoke(self, wait: float) -> bool:
        """Refuse every later write; wait up to ``wait`` s for those in flight. True if none is left."""
        deadline = self._clock() + wait
        with self._cond:
            self._revoked = True
            self._until = float("-inf")
            while self._in_flight:
                left = deadline - self._clock()
                if left <= 0:
                    return False
                self._cond.wait(left)
            return True

    @contextlib.contextmanager
    def write(self, what: str = "write") -> Iterator[float | None]:
        """Hold the fence open for one request, which gets the seconds it may take (None: no bound);
        raise NotLeader without sending if it is closed."""
        with self._cond:
            now = self._clock()
            if self._revoked or now >= self._until:
                raise NotLeader(f"{what} refused: this replica does not hold the leader Lease")
            left = None if self._land_by is None else self._land_by - now
            if left is not None and left <= 0:
                raise NotLeader(f"{what} refused: no time left for it before another replica may lead")
            self._in_flight += 1
        try:
            yield left
        finally:
            with self._cond:
                self._in_flight -= 1
                self._cond.notify_all()
