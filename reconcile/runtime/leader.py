"""Leader election on a coordination.k8s.io/v1 Lease, as client-go's leaderelection does it.

Why not ``kubernetes.leaderelection`` (37.x, which has a LeaseLock)? Its LeaseLock builds its own
``CoordinationV1Api()`` from the global default configuration, so it would bypass our throttled,
counted client; its acquire loop cannot be stopped (no context), so SIGTERM cannot end a follower cleanly;
it never releases the lease on shutdown (client-go's ReleaseOnCancel), which makes a rolling update wait a
full lease duration; it has no clock injection for tests; and it does not count leaseTransitions.
This module is that algorithm against plain Lease dicts, with three changes for hand-over under load:

* a ``Fence`` (``reconcile.runtime.fence``) in the controller's client lets a write out only while the last
  renewal is younger than the renew deadline, so no write of ours can follow a lapse, a loss or a release;
* on stop the controller gets ``drain_timeout`` (shorter than the renew deadline) to finish its syncs while
  we keep renewing; then the fence closes, in-flight writes end, and only then is the Lease released;
* a renewal that fails because the API server is unreachable is not "lost": the fence lapses by itself and
  we keep trying; leadership is lost (and the process exits) only when another holder is seen. A standby
  watches the Lease and tries at once when it is released, instead of waiting for its next poll.
"""

from __future__ import annotations

import logging
import random
import threading
import time
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

import attrs
import orjson

from reconcile.runtime.fence import Fence
from reconcile.runtime.kube import LEASE, ApiError, Kube

log = logging.getLogger(__name__)

# controller-runtime's and kube-controller-manager's defaults (upstream's 5 s deadline and 3 s retry closed
# the fence whenever a renewal took over 2 s, as on an API server that 200 jobs keep busy)
LEASE_DURATION = 15.0
RENEW_DEADLINE = 10.0
RETRY_PERIOD = 2.0
# On stop, the syncs in flight get this long (while we renew) before they are cut off by the fence.
DRAIN_TIMEOUT = 1.0
# Writes in flight when the fence closes get this long to come back before we release the Lease; if they do
# not, the Lease is left to expire (safe: nobody leads before it does).
IN_FLIGHT_TIMEOUT = 2.0
# A write must be over this long before the earliest moment a standby may take the Lease: the server's
# time to store a request that reached it just before the client gave up, and clocks that run at
# slightly different rates. Capped at half the gap between the lease duration and the renew deadline.
LANDING_MARGIN = 1.0
# /healthz fails when the leader has not renewed for lease duration + this (client-go's adaptor timeout).
HEALTH_SLACK = 20.0


def micro_time(now: datetime) -> str:
    return now.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


@attrs.define(eq=False)
class LeaderElector:
    kube: Kube
    namespace: str
    identity: str
    name: str = attrs.field(kw_only=True)
    lease_duration: float = attrs.field(default=LEASE_DURATION, kw_only=True)
    renew_deadline: float = attrs.field(default=RENEW_DEADLINE, kw_only=True)
    retry_period: float = attrs.field(default=RETRY_PERIOD, kw_only=True)
    drain_timeout: float = attrs.field(
        default=attrs.Factory(lambda self: min(DRAIN_TIMEOUT, self.renew_deadline / 2), takes_self=True),
        kw_only=True,
    )
    _clock: Callable[[], float] = attrs.field(default=time.monotonic, kw_only=True)
    fence: Fence = attrs.field(
        default=attrs.Factory(lambda self: Fence(self._clock), takes_self=True), kw_only=True
    )
    _on_started: Callable[[], None] = attrs.field(default=lambda: None, kw_only=True)
    _on_stopped: Callable[[], None] = attrs.field(default=lambda: None, kw_only=True)
    _on_change: Callable[[bool], None] = attrs.field(default=lambda leading: None, kw_only=True)
    _wall: Callable[[], datetime] = attrs.field(default=lambda: datetime.now(UTC), kw_only=True)
    _watch_lease: bool = attrs.field(default=True, kw_only=True)
    # what the loop has seen and done
    _observed_spec: dict[str, Any] | None = attrs.field(default=None, init=False)
    _observed_at: float = attrs.field(default=0.0, init=False)
    _last_renew: float | None = attrs.field(default=None, init=False)
    _attempt_began: float = attrs.field(default=0.0, init=False)
    _leading: bool = attrs.field(default=False, init=False)
    _wake: threading.Event = attrs.field(factory=threading.Event, init=False)
    stepped_down_at: float | None = attrs.field(default=None, init=False)  # the Lease released (clock time)

    def __attrs_post_init__(self) -> None:
        if not self.lease_duration > self.renew_deadline > self.retry_period * 1.2 or self.retry_period <= 0:
            raise ValueError("need lease_duration > renew_deadline > 1.2 * retry_period > 0")
        if self.lease_duration != int(self.lease_duration):
            raise ValueError("the lease duration is whole seconds (leaseDurationSeconds)")
        if not 0 <= self.drain_timeout < self.renew_deadline:
            raise ValueError("need 0 <= drain_timeout < renew_deadline")

    # -- state --------------------------------------------------------------------------------------
    @property
    def is_leader(self) -> bool:
        return self._leading

    @property
    def observed_holder(self) -> str:
        return (self._observed_spec or {}).get("holderIdentity") or ""

    def healthy(self) -> bool:
        """False when we lead but have not renewed for too long (the process is wedged)."""
        if not self._leading or self._last_renew is None:
            return True
        return self._clock() - self._last_renew <= self.lease_duration + HEALTH_SLACK

    def _set_leading(self, leading: bool) -> None:
        if leading != self._leading:
            self._leading = leading
            self._on_change(leading)

    def _held_by_other(self) -> bool:
        return self.observed_holder not in ("", self.identity)

    # -- the loop -----------------------------------------------------------------------------------
    def run(
        self, stop: threading.Event, before_release: Callable[[float], None] = lambda timeout: None
    ) -> None:
        """Block: acquire, call on_started, renew until stop (then hand over) or loss (then on_stopped).

        On stop, ``before_release(timeout)`` runs while we still hold and renew the lease: it must stop
        taking work at once and return within ``timeout`` (stop the workers there). Then the fence closes,
        and the Lease is released once no write of ours is in flight.
        """
        lease = f"{self.namespace}/{self.name}"
        log.info("waiting for the lease", extra={"lease": lease, "id": self.identity})
        watcher = None
        if self._watch_lease:
            watcher = threading.Thread(target=self._watch, args=(stop,), name="lease-watch", daemon=True)
            watcher.start()
        while not stop.is_set():
            self._wake.clear()
            if self.try_acquire_or_renew():
                break
            self._follow_wait(stop, self.retry_period * random.uniform(1.0, 1.2))
        if stop.is_set():
            return
        log.info("acquired the lease", extra={"lease": lease, "id": self.identity})
        self._set_leading(True)
        threading.Thread(target=self._on_started, name="leading", daemon=True).start()
        lapsed = False
        # Renewals start every retry period counted from the start of the last one, not from its end: a
        # renewal that took 1.2 s (GET and PUT on a busy server) then started the next one late, and the
        # fence (open until a renewal's start plus the renew deadline) closed between the two.
        while not stop.wait(max(0.0, self._attempt_began + self.retry_period - self._clock())):
            if self._renew(stop):
                if lapsed:
                    log.info("lease renewed again; writes resume", extra={"lease": lease})
                    lapsed = False
                continue
            if stop.is_set():
                break
            if self._held_by_other():
                self.fence.revoke(0)
                log.error("lost the lease", extra={"lease": lease, "holder": self.observed_holder})
                self._set_leading(False)
                self._on_stopped()
                return
            if not lapsed:
                # Nobody else holds it (as far as we can see): the fence keeps us from writing until we
                # renew again; exiting would turn every API server restart into a crash.
                log.warning(
                    "cannot renew the lease; writes are fenced until it is renewed", extra={"lease": lease}
                )
                lapsed = True
        self._hand_over(before_release)

    def _follow_wait(self, stop: threading.Event, timeout: float) -> None:
        """Sleep until the next try, a release seen by the watch, or stop."""
        deadline = self._clock() + timeout
        while not stop.is_set() and not self._wake.is_set():
            left = deadline - self._clock()
            if left <= 0:
                return
            self._wake.wait(min(left, 0.2))

    def _hand_over(self, before_release: Callable[[float], None]) -> None:
        began = self._clock()
        drain = threading.Thread(target=before_release, args=(self.drain_timeout,), name="drain", daemon=True)
        drain.start()
        deadline = began + self.drain_timeout
        next_renew = (self._last_renew or began) + self.retry_period
        while drain.is_alive():
            now = self._clock()
            if now >= deadline:
                break
            if now >= next_renew:
                self.try_acquire_or_renew()  # one attempt: the drain ends before the renew deadline
                next_renew = self._clock() + self.retry_period
                continue
            drain.join(min(deadline, next_renew) - now)
        clean = self.fence.revoke(IN_FLIGHT_TIMEOUT)
        log.info(
            "stopped writing",
            extra={
                "drained": not drain.is_alive(),
                "seconds": round(self._clock() - began, 3),
                "in_flight": self.fence.in_flight,
            },
        )
        if clean:
            self.release()
        else:
            log.warning("writes still in flight; the lease is left to expire instead of being released")
            self._set_leading(False)

    def _renew(self, stop: threading.Event) -> bool:
        deadline = self._clock() + self.renew_deadline
        while True:
            if self.try_acquire_or_renew():
                return True
            if self._held_by_other():
                return False
            left = deadline - self._clock()
            if left <= 0 or stop.wait(min(self.retry_period / 3, left)):
                return False

    def _watch(self, stop: threading.Event) -> None:
        """While we follow: wake the acquire loop as soon as the Lease is released (holder empty)."""
        failures = 0
        query = {"watch": "true", "fieldSelector": f"metadata.name={self.name}", "timeoutSeconds": 300}
        while not stop.is_set() and not self._leading:
            try:
                for line in self.kube.stream_lines(LEASE.path(self.namespace), query, timeout=(10, 330)):
                    failures = 0
                    if stop.is_set() or self._leading:
                        return
                    event = orjson.loads(line)
                    spec = (event.get("object") or {}).get("spec") or {}
                    if event.get("type") in ("ADDED", "MODIFIED", "DELETED") and (
                        event.get("type") == "DELETED" or not spec.get("holderIdentity")
                    ):
                        self._wake.set()
            except Exception as err:
                failures += 1
                log.debug("lease watch failed", extra={"error": repr(err)})
            # polling still works meanwhile; back off so a broken watch costs little
            stop.wait(min(30.0, 0.5 * 2 ** min(failures, 6)))

    def try_acquire_or_renew(self) -> bool:
        began = self._attempt_began = self._clock()
        now = self._wall()
        try:
            lease = self.kube.get(LEASE, self.namespace, self.name)
        except ApiError as err:
            if err.status != 404:
                log.warning("cannot read the lease", extra={"error": str(err)})
                return False
            return self._create(now, began)
        except Exception as err:
            log.warning("cannot read the lease", extra={"error": str(err)})
            return False
        spec = lease.get("spec") or {}
        if spec != self._observed_spec:
            self._observed_spec = spec
            self._observed_at = self._clock()
        holder = spec.get("holderIdentity") or ""
        duration = spec.get("leaseDurationSeconds") or self.lease_duration
        if holder and holder != self.identity and self._observed_at + duration > self._clock():
            return False
        new_spec = {
            "holderIdentity": self.identity,
            "leaseDurationSeconds": int(self.lease_duration),
            "acquireTime": spec.get("acquireTime") if holder == self.identity else micro_time(now),
            "renewTime": micro_time(now),
            "leaseTransitions": int(spec.get("leaseTransitions") or 0)
            + (0 if holder == self.identity else 1),
        }
        if not new_spec["acquireTime"]:
            new_spec["acquireTime"] = micro_time(now)
        body = {**lease, "spec": new_spec}
        try:
            self.kube.replace(LEASE, body)
        except Exception as err:
            # 409 Conflict: someone else wrote first; retry later like everybody else.
            log.info("lease update failed", extra={"error": str(err)})
            return False
        self._renewed(new_spec, began)
        return True

    def _renewed(self, spec: dict[str, Any], began: float) -> None:
        self._observed_spec = spec
        self._observed_at = self._last_renew = self._clock()
        # Counted from before the GET: nobody can take over earlier than began + lease_duration.
        margin = min(LANDING_MARGIN, (self.lease_duration - self.renew_deadline) / 2)
        self.fence.grant(began + self.renew_deadline, began + self.lease_duration - margin)

    def _create(self, now: datetime, began: float) -> bool:
        spec = {
            "holderIdentity": self.identity,
            "leaseDurationSeconds": int(self.lease_duration),
            "acquireTime": micro_time(now),
            "renewTime": micro_time(now),
            "leaseTransitions": 0,
        }
        body = {
            "apiVersion": LEASE.api_version,
            "kind": "Lease",
            "metadata": {"name": self.name, "namespace": self.namespace},
            "spec": spec,
        }
        try:
            self.kube.create(LEASE, self.namespace, body)
        except Exception as err:
            log.info("lease create failed", extra={"error": str(err)})
            return False
        self._renewed(spec, began)
        return True

    def release(self) -> bool:
        """Give the lease up so a standby takes over at once (client-go's ReleaseOnCancel).

        The fence closes first (and waits for writes in flight), so nothing of ours follows the release.
        """
        if not self._leading:
            return True
        self._set_leading(False)
        if not self.fence.revoke(IN_FLIGHT_TIMEOUT):
            log.warning("writes still in flight; the lease is left to expire instead of being released")
            return False
        try:
            lease = self.kube.get(LEASE, self.namespace, self.name)
            spec = lease.get("spec") or {}
            holder = spec.get("holderIdentity")
            if holder != self.identity:
                log.warning("lease not released: held by another", extra={"holder": holder})
                return True
            now = micro_time(self._wall())
            spec = {
                **spec,
                "holderIdentity": "",
                "leaseDurationSeconds": 1,
                "renewTime": now,
                "acquireTime": now,
            }
            self.kube.replace(LEASE, {**lease, "spec": spec})
            self.stepped_down_at = self._clock()
            log.info("released the lease", extra={"lease": f"{self.namespace}/{self.name}"})
            return True
        except Exception as err:
            log.warning("cannot release the lease", extra={"error": str(err)})
            return False
