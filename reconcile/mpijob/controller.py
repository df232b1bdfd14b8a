"""The MPIJob controller: informers feed a work queue; each sync renders, plans and executes one MPIJob.

Shape of kubernetes/sample-controller: event handlers only enqueue ``namespace/name`` keys; ``sync`` reads
everything from the caches, so a sync is level-based and any number of them converge to the same state.
"""

from __future__ import annotations

import copy
import logging
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from datetime import UTC, datetime
from typing import Any

from kubernetes.dynamic import DynamicClient

import render
from reconcile.engine import managedfields
from reconcile.engine.differ import plan
from reconcile.engine.executor import ExecResult, Outcome, execute
from reconcile.engine.plan import Plan
from reconcile.mpijob.cacheform import transform_for
from reconcile.mpijob.metrics import Metrics
from reconcile.mpijob.policy import CREATE_RULES, FIELD_MANAGER, POLICY
from reconcile.mpijob.recreate import Recreates
from reconcile.mpijob.syncstate import (
    condition_true,
    is_managed_externally,
    launcher_resume_needs_start_time_cleared,
    only_counts_changed,
    status_changed,
    worth_writing,
)
from reconcile.runtime import events as ev
from reconcile.runtime.discovery import static_client
from reconcile.runtime.events import EventRecorder
from reconcile.runtime.fence import NotLeader
from reconcile.runtime.informer import Informer, controller_ref, key_of
from reconcile.runtime.kube import (
    CONFIGMAP,
    JOB,
    MERGE_PATCH,
    MPIJOB,
    POD,
    PRIORITY_CLASS,
    SCHED_PLUGINS_PODGROUP,
    SECRET,
    SERVICE,
    VOLCANO_PODGROUP,
    ApiError,
    Kube,
    Resource,
    resource_for,
)
from reconcile.runtime.queue import ShutDown, WorkQueue
from reconcile.runtime.ratelimit import controller_rate_limiter
from render import conditions as rcond
from render import failures, names
from render.errors import one_line
from render.observed import CreateFailure, WorkerFailure
from render.status import MAX_MESSAGE
from render.timeutil import format_time

log = logging.getLogger(__name__)

CHILD_SELECTOR = f"{names.LABEL_OPERATOR_NAME}={names.OPERATOR_NAME}"
# A job whose sync fails this many times in a row gets condition SYNC_FAILED (an event every time).
SYNC_FAILURES_FOR_CONDITION = 3
# A status change in replica counts alone, or a ConfigMap patch alone (the hostfile), waits this long for
# more (pods start one by one), then is written.
STATUS_COALESCE_SECONDS = 1.0
SYNC_FAILED = "SyncFailed"
# A deadline or TTL further away than this is looked at again then (the queue's timer takes no years).
MAX_WAKEUP_SECONDS = 24 * 3600.0


def podgroup_resource(gang_scheduling: str) -> Resource | None:
    if not gang_scheduling:
        return None
    return VOLCANO_PODGROUP if gang_scheduling == names.VOLCANO else SCHED_PLUGINS_PODGROUP


class Controller:
    def __init__(
        self,
        kube: Kube,
        config: render.Config,
        *,
        metrics: Metrics,
        recorder: EventRecorder,
        namespace: str = "",
        threadiness: int = 2,
        queue_qps: float = 10,
        queue_burst: int = 100,
        now: Callable[[], datetime] = lambda: datetime.now(UTC),
        field_manager: str = FIELD_MANAGER,
    ) -> None:
        self.kube = kube
        self.config = config
        self.metrics = metrics
        self.recorder = recorder
        self.namespace = namespace or None
        self.threadiness = threadiness
        self.field_manager = field_manager
        self._now = now
        self.queue = WorkQueue(
            controller_rate_limiter(queue_qps, queue_burst), on_depth=metrics.queue_depth.set
        )

        def informer(res: Resource, selector: str | None = CHILD_SELECTOR) -> Informer:
            ns = self.namespace if res.namespaced else None
            return Informer(
                kube,
                res,
                namespace=ns,
                label_selector=selector,
                on_error=self._list_watch_error,
                transform=transform_for(res.group, res.kind),
            )

        self.mpijobs = informer(MPIJOB, None)
        self.children: dict[Resource, Informer] = {
            res: informer(res) for res in (POD, SERVICE, CONFIGMAP, SECRET, JOB)
        }
        self.podgroup_res = podgroup_resource(config.gang_scheduling)
        if self.podgroup_res is not None:
            self.children[self.podgroup_res] = informer(self.podgroup_res)
            self.priority_classes: Informer | None = informer(PRIORITY_CLASS, None)
        else:
            self.priority_classes = None
        self.mpijobs.add_handler(self._on_mpijob)
        for inf in self.children.values():
            inf.add_handler(self._on_child)
        # The executor's client knows our kinds: no API discovery before a new leader's first write.
        self._client: DynamicClient | None = None
        self._workers: list[threading.Thread] = []
        # key -> when a counts-only status change (a hostfile-only ConfigMap patch) first waited
        self._status_waiting: dict[str, float] = {}
        self._hostfile_waiting: dict[str, float] = {}
        # One fresh SSH key per job until its Secret shows up, so a retried sync renders the same Secret.
        self._fresh_keys: dict[str, render.SSHKey] = {}
        # job uid -> wanted names a create found taken by objects our watches cannot see
        self._taken: dict[str, dict[tuple[Resource, str], bool]] = {}
        # key -> (job uid, the create the API server refused in the job's last sync): status shows it
        self._create_failures: dict[str, tuple[str, CreateFailure]] = {}
        # key -> (job uid, its workers' failures so far): the back-off and the bound; lost on a restart
        self._worker_failures: dict[str, tuple[str, tuple[WorkerFailure, ...]]] = {}
        # creates of children someone else keeps deleting, held with back-off
        self._recreates = Recreates()
        # key -> syncs failed in a row
        self._sync_failures: dict[str, int] = {}
        self._stopped = threading.Event()
        self._started = threading.Event()
        self._synced: dict[str, str] = {}  # key -> resourceVersion the last finished sync read

    # -- informers and handlers ----------------------------------------------------------------------
    def _list_watch_error(self, informer: str, code: str) -> None:
        self.metrics.transient_errors.labels(source=informer, code=code).inc()

    @property
    def informers(self) -> list[Informer]:
        out = [self.mpijobs, *self.children.values()]
        if self.priority_classes is not None:
            out.append(self.priority_classes)
        return out

    def has_synced(self) -> bool:
        return self._started.is_set() and all(inf.has_synced() for inf in self.informers)

    def _on_mpijob(self, event: str, old: dict | None, new: dict | None) -> None:
        obj = new if new is not None else old
        if obj is not None:
            self.queue.add_event(key_of(obj))

    def _on_child(self, event: str, old: dict | None, new: dict | None) -> None:
        for obj in (old, new):
            if obj is None:
                continue
            key = self.owner_key(obj)
            if key is not None:
                self.queue.add_event(key)

    def owner_key(self, obj: Mapping[str, Any]) -> str | None:
        """The MPIJob key of a child; launcher pods are mapped through their Job's controller reference."""
        ref = controller_ref(obj)
        if ref is None:
            return None
        ns = (obj.get("metadata") or {}).get("namespace", "")
        if ref.get("kind") == "Job" and ref.get("apiVersion", "").startswith("batch/"):
            job = self.children[JOB].store.get(f"{ns}/{ref.get('name')}")
            if job is None:
                return None
            ref = controller_ref(job)
            if ref is None:
                return None
        if ref.get("kind") == names.KIND and ref.get("apiVersion") == names.API_VERSION:
            return f"{ns}/{ref.get('name')}"
        return None

    # -- running ------------------------------------------------------------------------------------
    def start(self, sync_timeout: float | None = None) -> bool:
        """Start informers, wait for their caches, then start the workers. Non-blocking after the sync."""
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
        syncs in flight ``timeout`` s, stop the informers. True if every worker finished in time."""
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
        start = time.monotonic()
        result = "success"
        seen = self.mpijobs.store.get(key)
        try:
            self.sync(key)
            self.queue.forget(key)
            if self._sync_failures.pop(key, 0) >= SYNC_FAILURES_FOR_CONDITION:
                self._clear_sync_failed(key)
        except NotLeader as err:
            # The fence refused a write: leadership lapsed (the API server is unreachable) or ended.
            result = "fenced"
            log.info("sync stopped: not leading", extra={"key": key, "error": str(err)})
            if not self._stopped.is_set():
                self.queue.add_rate_limited(key)
        except Exception as err:
            result = "error"
            if isinstance(err, (ApiError, SyncError)):
                log.warning("sync failed, requeued", extra={"key": key, "error": str(err)})
            else:
                log.exception("sync failed, requeued", extra={"key": key})
            self._report_sync_error(key, err)
            if not self._stopped.is_set():
                self.queue.add_rate_limited(key)
        finally:
            self.metrics.reconcile_duration.labels(result=result).observe(time.monotonic() - start)
            if seen is None:
                self._synced.pop(key, None)
                self._status_waiting.pop(key, None)
                self._hostfile_waiting.pop(key, None)
            elif key not in self._status_waiting and key not in self._hostfile_waiting:
                # a sync that held a write back has not finished with this version yet
                self._synced[key] = str(seen["metadata"].get("resourceVersion", ""))

    def synced_version(self, key: str) -> str | None:
        """The resourceVersion of the MPIJob ``key`` that the last finished sync acted on (one that held a
        status or hostfile write back for up to a second does not count until it is written): proof for tests
        that the operator has processed a given event (served at /debug/synced?key=ns/name)."""
        return self._synced.get(key)

    # -- failed syncs, shown on the job --------------------------------------------------------------
    def _report_sync_error(self, key: str, err: Exception) -> None:
        """Count it; tell the job's owner with an event, and a condition once it repeats. A SyncError is
        a retry the job's status and events already explain; a 409 is an ordinary stale write."""
        reason = _error_reason(err)
        self.metrics.sync_errors.labels(reason=reason).inc()
        count = self._sync_failures[key] = self._sync_failures.get(key, 0) + 1
        if isinstance(err, SyncError) or (isinstance(err, ApiError) and err.status == 409):
            return
        obj = self.mpijobs.store.get(key)
        if obj is None:
            return
        message = one_line(f"sync failed, retried with back-off: {reason}: {err}")
        self.recorder.event(obj, ev.WARNING, SYNC_FAILED, message[:MAX_MESSAGE])
        if count >= SYNC_FAILURES_FOR_CONDITION:
            self._set_sync_condition(obj, rcond.TRUE, reason, message)

    def _clear_sync_failed(self, key: str) -> None:
        obj = self.mpijobs.store.get(key)
        if obj is not None:
            self._set_sync_condition(obj, rcond.FALSE, "Synced", "the last sync succeeded")

    def _set_sync_condition(self, obj: dict[str, Any], status: str, reason: str, message: str) -> None:
        old = obj.get("status") or {}
        conds = rcond.clean(old.get("conditions"))
        if status == rcond.FALSE and rcond.find(conds, SYNC_FAILED) is None:
            return
        now = format_time(self._now())
        new = {
            **old,
            "conditions": rcond.set_condition(conds, SYNC_FAILED, status, reason, message[:MAX_MESSAGE], now),
        }
        if not status_changed(old, new):
            return
        try:
            self._write_status(obj, new)
        except Exception as exc:  # the status write may be what fails; the event and the log still tell
            log.warning("condition %s not written", SYNC_FAILED, extra={"error": str(exc)})

    # -- the sync -----------------------------------------------------------------------------------
    def sync(self, key: str) -> None:
        obj = self.mpijobs.store.get(key)
        if obj is None:
            self.metrics.remove_job_info(key)
            self._create_failures.pop(key, None)
            self._worker_failures.pop(key, None)
            self._recreates.forget(key)
            return
        meta = obj.get("metadata") or {}
        if meta.get("deletionTimestamp") or is_managed_externally(obj):
            return
        now = self._now()
        try:
            job = render.parse_mpijob(obj)
        except render.ValidationError:
            self._invalid(obj, now)
            return
        children = self.children_of(job)
        children += self._held_names(job, children)
        observed = self._observe(job, children, now, self._remembered_failure(key, job))
        old_status = obj.get("status") or {}
        known = render.status(job, observed, self.config)  # decides TTL; written only after the children

        if render.ttl_expired(job, known, now):
            log.info("TTL after finish expired, deleting the MPIJob", extra={"key": key})
            try:
                self.kube.delete(MPIJOB, job.namespace, job.name, uid=job.uid)
            except ApiError as err:
                if err.status not in (404, 409):
                    raise
            return

        # Children first, status last (upstream's order): Created=True then means the children exist.
        desired = render.render(job, observed, self.config)
        live = [o for o in children if o.get("kind") != "PriorityClass"]
        live = self._clear_launcher_start_time(desired, live)
        the_plan = plan(desired, live, POLICY, job.uid, field_manager=self.field_manager)
        if self._hostfile_can_wait(key, the_plan):
            the_plan = Plan()  # the sync the queue hands out later writes it
        the_plan, held_for = self._recreates.hold(key, job.uid, the_plan, time.monotonic())
        if held_for is not None:
            log.info("children deleted again wait to be created", extra={"key": key, "seconds": held_for})
            self.queue.add_after(key, held_for + 0.01)
        if the_plan:
            log.info("plan", extra={"key": key, "plan": [str(e) for e in the_plan.entries]})
        result = execute(
            the_plan,
            self._executor_client() if the_plan else self.kube.api_client,
            self.field_manager,
            owner_description="MPIJob",
            create_rules=CREATE_RULES,
            on_done=self._read_back,
        )
        self._after_execute(obj, job, the_plan, result)
        self._recreates.record(key, job.uid, result, time.monotonic())
        failure_changed = self._remember_create_failure(key, job, result, observed.create_failure)

        # The caches now hold what we wrote (and the failure what the server refused): the status comes
        # from the world after the writes, in this sync's one status write.
        if the_plan.writes or failure_changed:
            children = self.children_of(job)
            children += self._held_names(job, children)
            observed = self._observe(job, children, now, self._remembered_failure(key, job))
        new_status = (
            render.status(job, observed, self.config) if the_plan.writes or failure_changed else known
        )
        if worth_writing(old_status, new_status):
            if self._status_can_wait(key, old_status, new_status):
                new_status = old_status  # the sync the queue hands out later writes it
            else:
                obj = self._write_status(obj, new_status)
        else:
            self._status_waiting.pop(key, None)
        self._record(obj, old_status, new_status)

        if self._owned_launcher(job, live) is not None or any(
            o.key.kind == "Job" and o.result == "created" for o in result.done
        ):
            self.metrics.set_job_info(key, names.launcher_name(job.name), job.namespace)
        self._remember_worker_failures(key, job, observed)
        wake = render.next_wakeup(job, new_status, now, observed)
        if wake is not None:
            delay = min(MAX_WAKEUP_SECONDS, max(0.0, (wake - now).total_seconds()) + 0.01)
            self.queue.add_after(key, delay)
        if the_plan.conflicts:
            raise SyncError(f"{key}: wanted names held by others: {[str(c.key) for c in the_plan.conflicts]}")
        if not result.ok:
            raise SyncError(f"{key}: {len(result.failures)} failed writes, retry={result.retry}")

    def _executor_client(self) -> DynamicClient:
        if self._client is None:
            self._client = static_client(self.kube.api_client)
        return self._client

    def children_of(self, job: Any) -> list[dict[str, Any]]:
        """Live children from the caches: ours, launcher pods (through our Job), PriorityClasses."""
        out: list[dict[str, Any]] = []
        seen: set[str] = set()

        def add(objs: Iterable[dict[str, Any]]) -> None:
            for o in objs:
                uid = (o.get("metadata") or {}).get("uid", "")
                if uid not in seen:
                    seen.add(uid)
                    out.append(o)

        for inf in self.children.values():
            add(inf.store.by_index("controller", job.uid))
        for launcher in self.children[JOB].store.by_index("controller", job.uid):
            add(self.children[POD].store.by_index("controller", launcher["metadata"].get("uid", "")))
        if self.priority_classes is not None:
            add(self.priority_classes.store.list())
        return out

    def wanted(self, job: Any) -> list[tuple[Resource, str]]:
        """Every name the job's children may take (render's list); any object holding one must be seen."""
        by_kind = {res.kind: res for res in self.children}
        return [(by_kind[kind], name) for kind, name in render.wanted_names(job, self.config)]

    def _held_names(self, job: Any, children: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """Objects holding wanted names that are not our children: from the caches, or, for objects
        without our labels (invisible to the label-filtered watches), from the names a create of ours
        found taken earlier (re-read on every sync of this job, dropped once gone)."""
        have = {(o.get("kind"), o["metadata"].get("name")) for o in children}
        out: list[dict[str, Any]] = []
        taken = self._taken.get(job.uid, {})
        for res, name in self.wanted(job):
            if (res.kind, name) in have:
                taken.pop((res, name), None)
                continue
            cached = self.children[res].store.get(f"{job.namespace}/{name}")
            if cached is not None:
                taken.pop((res, name), None)
                out.append(cached)
            elif (res, name) in taken:
                found = self._read(res, job.namespace, name)
                if found is None:
                    taken.pop((res, name), None)
                else:
                    out.append(found)
        if not taken:
            self._taken.pop(job.uid, None)
        return out

    def _read(self, res: Resource, namespace: str, name: str) -> dict[str, Any] | None:
        try:
            found = self.kube.get(res, namespace, name)
        except ApiError as err:
            if err.status == 404:
                return None
            raise
        found.setdefault("apiVersion", res.api_version)
        found.setdefault("kind", res.kind)
        return managedfields.slim(found)

    def _remembered_failure(self, key: str, job: Any) -> CreateFailure | None:
        """The create the server refused in an earlier sync of this very job (same uid), if any."""
        remembered = self._create_failures.get(key)
        return remembered[1] if remembered is not None and remembered[0] == job.uid else None

    def _remember_create_failure(
        self, key: str, job: Any, result: ExecResult, before: CreateFailure | None
    ) -> bool:
        """Keep the first create the server refused in this sync for the next status; True if changed."""
        failed = next((f for f in result.failures if f.verb == "create"), None)
        if failed is None:
            self._create_failures.pop(key, None)
            return before is not None
        refused = CreateFailure(
            kind=failed.key.kind,
            name=failed.key.name,
            code=failed.code,
            message=failed.message,
            permanent=failed.permanent,
            causes=failed.causes,
        )
        self._create_failures[key] = (job.uid, refused)
        return refused != before

    def _remember_worker_failures(self, key: str, job: Any, observed: render.Observed) -> None:
        records = failures.count(job, observed)
        if records:
            self._worker_failures[key] = (job.uid, records)
        else:
            self._worker_failures.pop(key, None)

    def _observe(
        self,
        job: Any,
        children: list[dict[str, Any]],
        now: datetime,
        create_failure: CreateFailure | None = None,
    ) -> render.Observed:
        has_secret = any(
            o.get("kind") == "Secret"
            and o["metadata"].get("name") == names.ssh_secret_name(job.name)
            and (controller_ref(o) or {}).get("uid") == job.uid
            for o in children
        )
        if has_secret:
            self._fresh_keys.pop(job.uid, None)
            key = None
        else:
            key = self._fresh_keys.get(job.uid)
            if key is None:
                key = self._fresh_keys[job.uid] = render.generate_ssh_key()
        remembered = self._worker_failures.get(f"{job.namespace}/{job.name}")
        return render.Observed.from_objects(
            children,
            now=now,
            fresh_ssh_key=key,
            create_failure=create_failure,
            worker_failures=remembered[1] if remembered is not None and remembered[0] == job.uid else (),
        )

    def _owned_launcher(self, job: Any, live: list[dict[str, Any]]) -> dict[str, Any] | None:
        for o in live:
            if (
                o.get("kind") == "Job"
                and o["metadata"].get("name") == names.launcher_name(job.name)
                and (controller_ref(o) or {}).get("uid") == job.uid
            ):
                return o
        return None

    def _invalid(self, obj: dict[str, Any], now: datetime) -> None:
        """Failed/ValidationError through render's status, and the Warning event render derives from it."""
        old_status = obj.get("status") or {}
        new_status = render.status(obj, render.Observed.from_objects((), now=now), self.config)
        if status_changed(old_status, new_status):
            obj = self._write_status(obj, new_status)
        self._record(obj, old_status, new_status)

    def _write_status(self, obj: dict[str, Any], status: dict[str, Any]) -> dict[str, Any]:
        body = copy.deepcopy(obj)
        body["status"] = status
        updated = self.kube.replace(MPIJOB, body, subresource="status")
        updated.setdefault("apiVersion", MPIJOB.api_version)
        updated.setdefault("kind", MPIJOB.kind)
        self.mpijobs.observe(updated)
        return updated

    def _status_can_wait(self, key: str, old: dict[str, Any], new: dict[str, Any]) -> bool:
        """Replica counts alone changed: hold the write up to STATUS_COALESCE_SECONDS from the first such
        change (the key is queued for then), so the pods of a job starting one by one cost one write. A
        job's first status waits as long: a client that updates the MPIJob it just created (with the
        create's resourceVersion) must not meet a conflict of ours, as it never did at upstream's 5 QPS."""
        first = not (old or {}).get("conditions") and not condition_true(new, "Failed")  # failures at once
        return self._can_wait(self._status_waiting, key, first or only_counts_changed(old, new))

    def _hostfile_can_wait(self, key: str, the_plan: Plan) -> bool:
        """The plan only rewrites the ConfigMap (its hostfile lists the Running workers, which start one
        by one): held as a counts-only status change is."""
        only_configmap = bool(the_plan.patches) and the_plan.writes == len(the_plan.patches)
        only_configmap = only_configmap and not the_plan.conflicts and not the_plan.waits
        only_configmap = only_configmap and all(p.key.kind == "ConfigMap" for p in the_plan.patches)
        return self._can_wait(self._hostfile_waiting, key, only_configmap)

    def _can_wait(self, waiting: dict[str, float], key: str, holdable: bool) -> bool:
        if not holdable:
            waiting.pop(key, None)
            return False
        now = time.monotonic()
        since = waiting.setdefault(key, now)
        if now - since >= STATUS_COALESCE_SECONDS:
            waiting.pop(key, None)
            return False
        self.queue.add_after(key, since + STATUS_COALESCE_SECONDS - now + 0.01)
        return True

    def _record(self, obj: dict[str, Any], old: dict[str, Any], new: dict[str, Any]) -> None:
        for e in render.events(obj, old, new):
            self.recorder.event(obj, e.type, e.reason, e.message)
        if not condition_true(old, "Created") and condition_true(new, "Created"):
            self.metrics.jobs_created.inc()
        if not condition_true(old, "Succeeded") and condition_true(new, "Succeeded"):
            self.metrics.jobs_successful.inc()
        if (
            not condition_true(old, "Failed")
            and condition_true(new, "Failed")
            and _condition_reason(new, "Failed") != "MPIJobEvicted"
        ):
            self.metrics.jobs_failed.inc()

    def _clear_launcher_start_time(
        self, desired: list[dict[str, Any]], live: list[dict[str, Any]]
    ) -> list[dict[str, Any]]:
        """On resume, clear the suspended launcher Job's startTime first: else its template is immutable."""
        target = launcher_resume_needs_start_time_cleared(desired, live)
        if target is None:
            return live
        meta = target["metadata"]
        log.info("clearing the launcher Job's startTime to resume", extra={"job": meta["name"]})
        updated = self.kube.patch(
            JOB,
            meta["namespace"],
            meta["name"],
            {"status": {"startTime": None}},
            content_type=MERGE_PATCH,
            subresource="status",
        )
        updated.setdefault("apiVersion", JOB.api_version)
        updated.setdefault("kind", JOB.kind)
        self.children[JOB].observe(updated)
        return [updated if o is target else o for o in live]

    def _read_back(self, outcome: Outcome) -> None:
        """A write's answer into the caches at once (the next sync must not plan it again), not held in
        the result until the end of a sync of thousands of objects."""
        if outcome.object is None or outcome.result == "deleted":
            return
        written = dict(outcome.object)
        inf = self._informer_for(written)
        if inf is not None:
            inf.observe(written)

    def _after_execute(self, obj: dict[str, Any], job: Any, the_plan: Plan, result: ExecResult) -> None:
        for outcome in result.done:  # answers that did not go through on_done (none, from execute)
            self._read_back(outcome)
        for conflict in the_plan.conflicts:
            self.recorder.event(
                obj,
                ev.WARNING,
                "ErrResourceExists",
                f'Resource "{conflict.key.name}" of Kind "{conflict.key.kind}" already exists '
                "and is not managed by MPIJob",
            )
        for data in result.events:
            # Upstream emits no events for routine child writes; failures are worth telling.
            if data.type == ev.WARNING and data.reason != "ErrResourceExists":
                self.recorder.event(obj, data.type, data.reason, data.message)
        if result.replan:
            # A create met an existing object: remember the name so the next sync reads who holds it.
            settled = {o.key for o in result.done} | {f.key for f in result.failures}
            for create in the_plan.creates:
                if create.key not in settled:
                    res = resource_for(create.api_version, create.key.kind)
                    self._taken.setdefault(job.uid, {})[(res, create.key.name)] = True

    def _informer_for(self, obj: Mapping[str, Any]) -> Informer | None:
        try:
            res = resource_for(obj)
        except KeyError:
            return None
        return self.children.get(res)


class SyncError(Exception):
    """A sync that did its part but must be retried (e.g. a wanted name is held by someone else)."""


def _error_reason(err: Exception) -> str:
    if isinstance(err, ApiError):
        return f"ApiError{err.status}"
    return type(err).__name__


def _condition_reason(status: Mapping[str, Any], ctype: str) -> str:
    for c in status.get("conditions") or ():
        if c.get("type") == ctype:
            return str(c.get("reason") or "")
    return ""
