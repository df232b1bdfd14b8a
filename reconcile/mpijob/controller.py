"""The MPIJob controller: informers feed a work queue; each sync renders, plans and executes one MPIJob.

Shape of kubernetes/sample-controller: event handlers only enqueue ``namespace/name`` keys; ``sync`` reads
everything from the caches, so a sync is level-based and any number of them converge to the same state.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from datetime import UTC, datetime
from typing import Any

import attrs
from urllib3.exceptions import HTTPError

import render
from reconcile.engine import managedfields
from reconcile.engine.executor import ExecResult, Outcome, execute
from reconcile.engine.plan import Plan
from reconcile.engine.writer import WriteFailed, Writer, WriteRequest, WriteVerb
from reconcile.mpijob.cacheform import transform_for
from reconcile.mpijob.decide import (
    Action,
    Decision,
    StatusDecision,
    decide,
    needs_fresh_key,
    remember,
    settle,
)
from reconcile.mpijob.memory import JobMemory
from reconcile.mpijob.metrics import Metrics
from reconcile.mpijob.policy import (
    CHILD_SELECTOR,
    CREATE_RULES,
    FIELD_MANAGER,
    gang_resources,
    reads_priority_classes,
)
from reconcile.mpijob.syncstate import condition_true, moot_child_event, status_changed
from reconcile.runtime import events as ev
from reconcile.runtime.events import EventRecorder
from reconcile.runtime.fence import NotLeader
from reconcile.runtime.informer import Informer, controller_ref, key_of, node_name_index
from reconcile.runtime.kube import (
    CONFIGMAP,
    JOB,
    MPIJOB,
    NODE,
    POD,
    PRIORITY_CLASS,
    SECRET,
    SERVICE,
    ApiError,
    Kube,
    Resource,
    resource_for,
)
from reconcile.runtime.kubewriter import KubeWriter
from reconcile.runtime.queue import ShutDown, WorkQueue
from reconcile.runtime.ratelimit import controller_rate_limiter
from render import conditions as rcond
from render import names, phases
from render.errors import one_line
from render.status import MAX_MESSAGE
from render.timeutil import format_time

log = logging.getLogger(__name__)

# A job whose sync fails this many times in a row gets condition SYNC_FAILED (an event every time).
SYNC_FAILURES_FOR_CONDITION = 3
SYNC_FAILED = "SyncFailed"
# A key waits this long after the first watch event of a burst before its sync (WorkQueue.add_event).
EVENT_BATCH_SECONDS = 0.1


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
        writer: Writer | None = None,
        event_batch: float = EVENT_BATCH_SECONDS,
        watch_nodes: bool = False,
    ) -> None:
        self.kube = kube
        self.config = config
        self.metrics = metrics
        self.recorder = recorder
        self.namespace = namespace or None
        self.threadiness = threadiness
        self.field_manager = field_manager
        self.event_batch = event_batch
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
                indexers={"node": node_name_index} if res is POD else None,
                on_error=self._list_watch_error,
                transform=transform_for(res.group, res.kind),
                on_event=metrics.watch_counter(res.kind),
            )

        self.mpijobs = informer(MPIJOB, None)
        metrics.count_jobs_of(self.mpijobs.store.list)
        self.children: dict[Resource, Informer] = {
            res: informer(res) for res in (POD, SERVICE, CONFIGMAP, SECRET, JOB)
        }
        self.gang_resources = gang_resources(config)
        for res in self.gang_resources:
            self.children[res] = informer(res)
        if reads_priority_classes(config):
            self.priority_classes: Informer | None = informer(PRIORITY_CLASS, None)
        else:
            self.priority_classes = None
        # Nodes that are not Ready are named on the jobs whose pods they hold (render/nodes.py).
        self.nodes: Informer | None = informer(NODE, None) if watch_nodes else None
        self.mpijobs.add_handler(self._on_mpijob)
        for inf in self.children.values():
            inf.add_handler(self._on_child)
        if self.nodes is not None:
            self.nodes.add_handler(self._on_node)
        # Every write of the controller goes through this one Writer.
        self.writer: Writer = writer if writer is not None else KubeWriter(kube)
        self._workers: list[threading.Thread] = []
        # key -> everything its syncs remember (reconcile.mpijob.memory): the only state between syncs
        self._memory: dict[str, JobMemory] = {}
        self._stopped = threading.Event()
        self._started = threading.Event()

    # -- informers and handlers ----------------------------------------------------------------------
    def _list_watch_error(self, informer: str, code: str) -> None:
        self.metrics.transient_errors.labels(source=informer, code=code).inc()

    @property
    def informers(self) -> list[Informer]:
        out = [self.mpijobs, *self.children.values()]
        out += [inf for inf in (self.priority_classes, self.nodes) if inf is not None]
        return out

    def has_synced(self) -> bool:
        return self._started.is_set() and all(inf.has_synced() for inf in self.informers)

    def _on_mpijob(self, event: str, old: dict | None, new: dict | None) -> None:
        obj = new if new is not None else old
        if obj is not None:
            self.queue.add_event(key_of(obj), self.event_batch)

    def _on_child(self, event: str, old: dict | None, new: dict | None) -> None:
        for obj in (old, new):
            if obj is None:
                continue
            key = self.owner_key(obj)
            if key is not None and not self._moot(key, old, new):
                self.queue.add_event(key, self.event_batch)

    def _on_node(self, event: str, old: dict | None, new: dict | None) -> None:
        """The jobs with pods on the node: its readiness or taints changed, or it is gone."""
        name = str(((new or old) or {}).get("metadata", {}).get("name", ""))
        keys = {self.owner_key(pod) for pod in self.children[POD].store.by_index("node", name)}
        for key in sorted(k for k in keys if k is not None):
            self.queue.add_event(key, self.event_batch)

    def _moot(self, key: str, old: Mapping[str, Any] | None, new: Mapping[str, Any] | None) -> bool:
        job = self.mpijobs.store.get(key)
        return job is not None and moot_child_event(job.get("status") or {}, old, new)

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
            failures = self._memory.get(key, JobMemory()).sync_failures
            self._remember(key, lambda m: attrs.evolve(m, sync_failures=0))
            if failures >= SYNC_FAILURES_FOR_CONDITION:
                self._clear_sync_failed(key)
        except NotLeader as err:
            # The fence refused a write: leadership lapsed (the API server is unreachable) or ended.
            result = "fenced"
            log.info("sync stopped: not leading", extra={"key": key, "error": str(err)})
            if not self._stopped.is_set():
                self.queue.add_rate_limited(key)
        except Exception as err:
            result = "error"
            # expected ones (HTTPError, OSError: the API server is unreachable) without a traceback
            if isinstance(err, (ApiError, WriteFailed, SyncError, HTTPError, OSError)):
                log.warning("sync failed, requeued", extra={"key": key, "error": str(err)})
            else:
                log.exception("sync failed, requeued", extra={"key": key})
            self._report_sync_error(key, err)
            if not self._stopped.is_set():
                self.queue.add_rate_limited(key)
        finally:
            self.metrics.reconcile_duration.labels(result=result).observe(time.monotonic() - start)
            if seen is None:
                self._memory.pop(key, None)
            else:
                mem = self._memory.get(key)
                if mem is not None and mem.status_held_since is None and mem.hostfile_held_since is None:
                    # a sync that held a write back has not finished with this version yet
                    version = str(seen["metadata"].get("resourceVersion", ""))
                    self._memory[key] = attrs.evolve(mem, synced_version=version)

    def _remember(self, key: str, change: Callable[[JobMemory], JobMemory]) -> None:
        self._memory[key] = change(self._memory.get(key, JobMemory()))

    def memory(self, key: str) -> JobMemory | None:
        """What the syncs of ``key`` remember (read-only: a frozen value)."""
        return self._memory.get(key)

    def synced_version(self, key: str) -> str | None:
        """The resourceVersion of the MPIJob ``key`` that the last finished sync acted on (one that held a
        status or hostfile write back for up to a second does not count until it is written): proof for tests
        that the operator has processed a given event (served at /debug/synced?key=ns/name)."""
        mem = self._memory.get(key)
        return mem.synced_version if mem is not None else None

    # -- failed syncs, shown on the job --------------------------------------------------------------
    def _report_sync_error(self, key: str, err: Exception) -> None:
        """Count it; tell the job's owner with an event, and a condition once it repeats. A SyncError is
        a retry the job's status and events already explain; a 409 is an ordinary stale write."""
        reason = _error_reason(err)
        self.metrics.sync_errors.labels(reason=reason).inc()
        self._remember(key, lambda m: attrs.evolve(m, sync_failures=m.sync_failures + 1))
        count = self._memory[key].sync_failures
        if isinstance(err, SyncError) or (isinstance(err, (ApiError, WriteFailed)) and err.status == 409):
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
        conds = rcond.set_condition(conds, SYNC_FAILED, status, reason, message[:MAX_MESSAGE], now)
        # The job's state stays last: `kubectl get mpijobs` reads its State column there.
        new = {**old, "conditions": rcond.state_last(conds)}
        if not status_changed(old, new):
            return
        try:
            self._write_status(obj, new)
        except Exception as exc:  # the status write may be what fails; the event and the log still tell
            log.warning("condition %s not written", SYNC_FAILED, extra={"error": str(exc)})

    # -- the sync: observe -> decide -> execute -> remember -------------------------------------------
    def sync(self, key: str) -> None:
        obj = self.mpijobs.store.get(key)
        if obj is None:
            self.metrics.remove_job_info(key)
            self._memory.pop(key, None)
            return
        now = self._now()
        memory = self._memory.get(key, JobMemory()).for_job(str((obj.get("metadata") or {}).get("uid", "")))
        children, memory = self.observe(obj, memory)
        decision = decide(obj, children, memory, now, self.config, field_manager=self.field_manager)
        self._memory[key] = decision.memory
        if decision.action is Action.IGNORE:
            return
        if decision.action is Action.DELETE_JOB:
            self._delete_expired(key, obj)
            return
        assert decision.status is not None
        if decision.action is Action.INVALID:
            self._finish_status(key, obj, decision.status, [])
            return
        self._execute(key, obj, now, decision, children, memory.status_held_since)

    def observe(self, obj: dict[str, Any], memory: JobMemory) -> tuple[list[dict[str, Any]], JobMemory]:
        """The job's live children from the caches (plus names held by objects our watches cannot see, read
        from the API server) and, for a Secret not created yet, fresh key material."""
        try:
            job, memory = memory.job(obj)
        except render.ValidationError:
            return [], memory
        children = self.children_of(job)
        held, taken = self._held_names(job, children, memory.taken)
        children += held
        memory = attrs.evolve(memory, taken=taken)
        if needs_fresh_key(obj, children, memory):
            memory = attrs.evolve(memory, fresh_ssh_key=render.generate_ssh_key())
        return children, memory

    def _execute(
        self,
        key: str,
        obj: dict[str, Any],
        now: datetime,
        decision: Decision,
        children: list[dict[str, Any]],
        held_since: datetime | None,
    ) -> None:
        the_plan = decision.plan
        if decision.clear_start_time is not None:
            self._clear_launcher_start_time(decision.clear_start_time)
        if the_plan:
            log.info("plan", extra={"key": key, "plan": [str(e) for e in the_plan.entries]})
        result = (
            execute(
                the_plan,
                self.writer,
                self.field_manager,
                owner_description="MPIJob",
                create_rules=CREATE_RULES,
                on_done=self._read_back,
            )
            if the_plan
            else ExecResult()
        )
        self._after_execute(obj, the_plan, result)
        memory = remember(decision.memory, the_plan, result, now)
        self._memory[key] = memory

        status = decision.status
        assert status is not None
        if the_plan.writes or memory.create_failure != decision.memory.create_failure:
            # The caches now hold what we wrote (and the memory what the server refused): the status comes
            # from the world after the writes, in this sync's one status write.
            children, memory = self.observe(obj, memory)
            # The hold is judged once per sync, on this status: as it stood before decide judged its own.
            memory = attrs.evolve(memory, status_held_since=held_since)
            status, memory = settle(obj, children, memory, now, self.config, before=status.new)
            self._memory[key] = memory
        self._finish_status(key, obj, status, children)

        meta = obj["metadata"]
        launcher = self.children[JOB].store.get(
            f"{meta.get('namespace', '')}/{names.launcher_name(meta['name'])}"
        )
        if launcher is not None and (controller_ref(launcher) or {}).get("uid") == meta.get("uid"):
            self.metrics.set_job_info(key, names.launcher_name(meta["name"]), str(meta.get("namespace", "")))
        wakes = [
            w for w in (status.wake_after, decision.hostfile_wake, decision.recreate_wake) if w is not None
        ]
        if wakes:
            self.queue.add_after(key, min(wakes))
        if the_plan.conflicts:
            raise SyncError(f"{key}: wanted names held by others: {[str(c.key) for c in the_plan.conflicts]}")
        if not result.ok:
            raise SyncError(f"{key}: {len(result.failures)} failed writes, retry={result.retry}")

    def _finish_status(
        self, key: str, obj: dict[str, Any], status: StatusDecision, children: list[dict[str, Any]]
    ) -> None:
        if status.write:
            obj = self._write_status(obj, status.new)
        self._record(obj, status.old, status.shown, children)

    def _delete_expired(self, key: str, obj: dict[str, Any]) -> None:
        log.info("TTL after finish expired, deleting the MPIJob", extra={"key": key})
        options = {
            "apiVersion": "v1",
            "kind": "DeleteOptions",
            "propagationPolicy": "Background",
            "preconditions": {"uid": obj["metadata"].get("uid")},
        }
        try:
            self._write(obj, "delete", options)
        except WriteFailed as err:
            if err.status not in (404, 409):
                raise

    def _write(
        self, target: Mapping[str, Any], verb: WriteVerb, body: Any, subresource: str = ""
    ) -> dict[str, Any]:
        """One write of an object the sync holds (the MPIJob, or its launcher Job), through the Writer."""
        meta = target["metadata"]
        request = WriteRequest(
            verb,
            str(target["apiVersion"]),
            str(target["kind"]),
            str(meta.get("namespace", "")),
            str(meta["name"]),
            body,
            subresource=subresource,
        )
        answer = self.writer.send(request) or {}
        answer.setdefault("apiVersion", target["apiVersion"])
        answer.setdefault("kind", target["kind"])
        return answer

    def children_of(self, job: Any) -> list[dict[str, Any]]:
        """Live children from the caches: ours, launcher pods (through our Job), PriorityClasses, and the
        Nodes those pods are bound to."""
        out: list[dict[str, Any]] = []
        seen: set[object] = set()

        def add(objs: Iterable[dict[str, Any]]) -> None:
            for o in objs:
                meta = o.get("metadata") or {}
                identity = meta.get("uid") or (o.get("kind"), meta.get("namespace"), meta.get("name"))
                if identity not in seen:
                    seen.add(identity)
                    out.append(o)

        for inf in self.children.values():
            add(inf.store.by_index("controller", job.uid))
        for launcher in self.children[JOB].store.by_index("controller", job.uid):
            add(self.children[POD].store.by_index("controller", launcher["metadata"].get("uid", "")))
        if self.priority_classes is not None:
            add(self.priority_classes.store.list())
        if self.nodes is not None:
            bound = {node for o in out if o.get("kind") == "Pod" for node in node_name_index(o)}
            add(n for n in map(self.nodes.store.get, sorted(bound)) if n is not None)
        return out

    def wanted(self, job: Any) -> list[tuple[Resource, str]]:
        """Every name the job's children may take (render's list); any object holding one must be seen."""
        by_kind = {res.kind: res for res in self.children}
        return [(by_kind[kind], name) for kind, name in render.wanted_names(job, self.config)]

    def _held_names(
        self, job: Any, children: list[dict[str, Any]], taken: frozenset[tuple[str, str]]
    ) -> tuple[list[dict[str, Any]], frozenset[tuple[str, str]]]:
        """Objects holding wanted names that are not our children: from the caches, or, for objects
        without our labels (invisible to the label-filtered watches), from the names a create of ours
        found taken earlier (read on every sync of this job, forgotten once gone). Returns them and the
        names still to read."""
        have = {(o.get("kind"), o["metadata"].get("name")) for o in children}
        out: list[dict[str, Any]] = []
        still: set[tuple[str, str]] = set()
        for res, name in self.wanted(job):
            if (res.kind, name) in have:
                continue
            cached = self.children[res].store.get(f"{job.namespace}/{name}")
            if cached is not None:
                out.append(cached)
            elif (res.kind, name) in taken:
                found = self._read(res, job.namespace, name)
                if found is not None:
                    out.append(found)
                    still.add((res.kind, name))
        return out, frozenset(still)

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

    def _write_status(self, obj: dict[str, Any], status: dict[str, Any]) -> dict[str, Any]:
        body = {**obj, "status": status}  # serialized as it is sent: no copy of the rest needed
        updated = self._write(obj, "update", body, subresource="status")
        self.mpijobs.observe(updated)
        return updated

    def _record(
        self, obj: dict[str, Any], old: dict[str, Any], new: dict[str, Any], children: list[dict[str, Any]]
    ) -> None:
        """Events and metrics of the transition old -> new, which the job now shows (written, or it had
        it): observed once per transition, so a restarted operator that finds it written counts nothing.
        ``children``: the world the status was computed from (the phases' pod start times)."""
        transition = old.get("conditions") != new.get("conditions")
        observed = render.Observed.from_objects(children, now=self._now()) if transition else None
        job: dict[str, Any] | render.MPIJob = obj
        if observed is not None:
            with contextlib.suppress(render.ValidationError):  # an invalid job has no phases
                job = render.parse_mpijob(obj)
        for e in render.events(job, old, new, observed):
            self.recorder.event(obj, e.type, e.reason, e.message)
        if isinstance(job, render.MPIJob):
            assert observed is not None
            self.metrics.observe_phases(phases.samples(job, old, new, observed))
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

    def _clear_launcher_start_time(self, target: Mapping[str, Any]) -> None:
        """On resume, clear the suspended launcher Job's startTime first: else its template is immutable."""
        meta = target["metadata"]
        log.info("clearing the launcher Job's startTime to resume", extra={"job": meta["name"]})
        updated = self._write(target, "merge-patch", {"status": {"startTime": None}}, subresource="status")
        self.children[JOB].observe(updated)

    def _read_back(self, outcome: Outcome) -> None:
        """A write's answer into the caches at once (the next sync must not plan it again), not held in
        the result until the end of a sync of thousands of objects."""
        if outcome.object is None or outcome.result == "deleted":
            return
        written = dict(outcome.object)
        inf = self._informer_for(written)
        if inf is not None:
            inf.observe(written)

    def _after_execute(self, obj: dict[str, Any], the_plan: Plan, result: ExecResult) -> None:
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

    def _informer_for(self, obj: Mapping[str, Any]) -> Informer | None:
        try:
            res = resource_for(obj)
        except KeyError:
            return None
        return self.children.get(res)


class SyncError(Exception):
    """A sync that did its part but must be retried (e.g. a wanted name is held by someone else)."""


def _error_reason(err: Exception) -> str:
    if isinstance(err, (ApiError, WriteFailed)) and err.status is not None:
        return f"ApiError{err.status}"
    if isinstance(err, WriteFailed) and err.__cause__ is not None:
        return type(err.__cause__).__name__
    return type(err).__name__


def _condition_reason(status: Mapping[str, Any], ctype: str) -> str:
    for c in status.get("conditions") or ():
        if c.get("type") == ctype:
            return str(c.get("reason") or "")
    return ""
