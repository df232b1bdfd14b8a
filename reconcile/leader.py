"""Leader election on a coordination.k8s.io/v1 Lease, as client-go's leaderelection does it.

Why not ``kubernetes.leaderelection`` (37.x, which has a LeaseLock)? Its LeaseLock builds its own
``CoordinationV1Api()`` from the global default configuration, so it would bypass our throttled,
counted client; its acquire loop cannot be stopped (no context), so SIGTERM cannot end a follower cleanly;
it never releases the lease on shutdown (client-go's ReleaseOnCancel), which makes a rolling update wait a
full lease duration; it has no clock injection for tests; and it does not count leaseTransitions.
This module is that algorithm in ~150 lines against plain Lease dicts.
"""

from __future__ import annotations

import logging
import random
import threading
import time
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

from reconcile.kube import LEASE, ApiError, Kube

log = logging.getLogger(__name__)

LEASE_DURATION = 15.0
RENEW_DEADLINE = 5.0
RETRY_PERIOD = 3.0
# /healthz fails when the leader has not renewed for lease duration + this (client-go's adaptor timeout).
HEALTH_SLACK = 20.0


def micro_time(now: datetime) -> str:
    return now.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


class LeaderElector:
    def __init__(
        self,
        kube: Kube,
        namespace: str,
        identity: str,
        *,
        name: str = "mpi-operator",
        lease_duration: float = LEASE_DURATION,
        renew_deadline: float = RENEW_DEADLINE,
        retry_period: float = RETRY_PERIOD,
        on_started: Callable[[], None] = lambda: None,
        on_stopped: Callable[[], None] = lambda: None,
        on_change: Callable[[bool], None] = lambda leading: None,
        clock: Callable[[], float] = time.monotonic,
        wall: Callable[[], datetime] = lambda: datetime.now(UTC),
    ) -> None:
        if not lease_duration > renew_deadline > retry_period * 1.2 or retry_period <= 0:
            raise ValueError("need lease_duration > renew_deadline > 1.2 * retry_period > 0")
        self.kube = kube
        self.namespace = namespace
        self.name = name
        self.identity = identity
        self.lease_duration = lease_duration
        self.renew_deadline = renew_deadline
        self.retry_period = retry_period
        self._on_started = on_started
        self._on_stopped = on_stopped
        self._on_change = on_change
        self._clock = clock
        self._wall = wall
        self._observed_spec: dict[str, Any] | None = None
        self._observed_at = 0.0
        self._last_renew: float | None = None
        self._leading = False

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

    # -- the loop -----------------------------------------------------------------------------------
    def run(self, stop: threading.Event, before_release: Callable[[], None] = lambda: None) -> None:
        """Block: acquire, call on_started, renew until stop (then release) or loss (then on_stopped).

        On stop, ``before_release`` runs while we still hold the lease (stop the workers there), so no
        write of ours can overlap with the next leader's.
        """
        log.info(
            "waiting for the lease", extra={"lease": f"{self.namespace}/{self.name}", "id": self.identity}
        )
        while not stop.is_set():
            if self.try_acquire_or_renew():
                break
            stop.wait(self.retry_period * random.uniform(1.0, 1.2))
        if stop.is_set():
            return
        log.info("acquired the lease", extra={"lease": f"{self.namespace}/{self.name}", "id": self.identity})
        self._set_leading(True)
        threading.Thread(target=self._on_started, name="leading", daemon=True).start()
        while not stop.wait(self.retry_period):
            if not self._renew(stop):
                if stop.is_set():
                    break
                log.error("lost the lease", extra={"lease": f"{self.namespace}/{self.name}"})
                self._set_leading(False)
                self._on_stopped()
                return
        before_release()
        self.release()

    def _renew(self, stop: threading.Event) -> bool:
        deadline = self._clock() + self.renew_deadline
        while True:
            if self.try_acquire_or_renew():
                return True
            left = deadline - self._clock()
            if left <= 0 or stop.wait(min(self.retry_period / 3, left)):
                return False

    def try_acquire_or_renew(self) -> bool:
        now = self._wall()
        try:
            lease = self.kube.get(LEASE, self.namespace, self.name)
        except ApiError as err:
            if err.status != 404:
                log.warning("cannot read the lease", extra={"error": str(err)})
                return False
            return self._create(now)
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
        self._observed_spec = new_spec
        self._observed_at = self._last_renew = self._clock()
        return True

    def _create(self, now: datetime) -> bool:
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
        self._observed_spec = spec
        self._observed_at = self._last_renew = self._clock()
        return True

    def release(self) -> bool:
        """Give the lease up so a standby takes over at once (client-go's ReleaseOnCancel)."""
        if not self._leading:
            return True
        self._set_leading(False)
        try:
            lease = self.kube.get(LEASE, self.namespace, self.name)
            spec = lease.get("spec") or {}
            if spec.get("holderIdentity") != self.identity:
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
            log.info("released the lease", extra={"lease": f"{self.namespace}/{self.name}"})
            return True
        except Exception as err:
            log.warning("cannot release the lease", extra={"error": str(err)})
            return False
