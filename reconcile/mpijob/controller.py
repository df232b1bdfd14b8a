"""The MPIJob reconciler: observe -> decide -> execute -> remember, driven by the generic loop.

Shape of kubernetes/sample-controller: event handlers only map an event to ``namespace/name`` keys
(reconcile.runtime.loop queues them); a sync reads everything from the caches, so it is level-based and
any number of them converge to the same state.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from datetime import UTC, datetime
from typing import Any

from urllib3.exceptions import HTTPError

import render
from reconcile.engine.executor import ExecResult, Outcome, execute
from reconcile.engine.writer import WriteFailed, Writer
from reconcile.kubewriter import KubeWriter
from reconcile.mpijob import observe as obs
from reconcile.mpijob import report
from reconcile.mpijob.cacheform import transform_for
from reconcile.mpijob.decide import Action, Decision, StatusDecision, after, decide, finish
from reconcile.mpijob.heldwrites import HeldWrites
from reconcile.mpijob.keys import JobKeys
from reconcile.mpijob.kinds import MPIJOB
from reconcile.mpijob.memory import JobMemory
from reconcile.mpijob.metrics import Metrics
from reconcile.mpijob.policy import (
    CHILD_SELECTOR,
    CREATE_RULES,
    FIELD_MANAGER,
    child_resources,
    gang_resources,
    reads_priority_classes,
)
from reconcile.mpijob.report import SyncError
from reconcile.runtime import events as ev
from reconcile.runtime.events import EventRecorder
from reconcile.runtime.informer import Informer, controller_ref, key_of, node_name_index
from reconcile.runtime.kube import JOB, NODE, POD, PRIORITY_CLASS, ApiError, Kube, Resource, resource_for
from reconcile.runtime.loop import Loop, Result
from reconcile.runtime.ratelimit import controller_rate_limiter
from render import names

log = logging.getLogger(__name__)

# A key waits this long after the first watch event of a burst before its sync (WorkQueue.add_event).
EVENT_BATCH_SECONDS = 0.1
# Failed syncs whose cause the log line names well enough without a traceback.
EXPECTED_ERRORS = (ApiError, WriteFailed, SyncError, HTTPError, OSError)


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
        self.field_manager = field_manager
        self._now = now
        # Every write of the controller goes through this one Writer.
        self.writer: Writer = writer if writer is not None else KubeWriter(kube)
        self.loop = Loop(
            self,
            controller_rate_limiter(queue_qps, queue_burst),
            threadiness=threadiness,
            event_batch=event_batch,
            on_depth=metrics.queue_depth.set,
            on_result=lambda result, seconds: metrics.reconcile_duration.labels(result=result).observe(
                seconds
            ),
            expected=EXPECTED_ERRORS,
        )
        self.queue = self.loop.queue
        self.mpijobs = self._informer(MPIJOB, None)
        metrics.count_jobs_of(self.mpijobs.store.list)
        self.children = {res: self._informer(res) for res in child_resources(config)}
        self.gang_resources = gang_resources(config)
        self.priority_classes = (
            self._informer(PRIORITY_CLASS, None) if reads_priority_classes(config) else None
        )
        # Nodes that are not Ready are named on the jobs whose pods they hold (render/nodes.py).
        self.nodes = self._informer(NODE, None) if watch_nodes else None
        self.loop.watch(
            self.mpijobs,
            lambda old, new: [key_of(o) for o in (new or old,) if o is not None],
            new_at_once=True,
        )
        self.keys = JobKeys(self.mpijobs.store, self.children[JOB].store, self.children[POD].store)
        for inf in self.children.values():
            self.loop.watch(inf, self.keys.of_child)
        if self.priority_classes is not None:
            self.loop.cache(self.priority_classes)
        if self.nodes is not None:
            self.loop.watch(self.nodes, self.keys.of_node)
        self.reader = obs.CacheReader(kube, self.children, self.priority_classes, self.nodes)
        self.held = HeldWrites(self.writer, self.mpijobs, self.children[JOB])
        # key -> everything its syncs remember (reconcile.mpijob.memory): the only state between syncs
        self._memory: dict[str, JobMemory] = {}
        self._synced: dict[str, str] = {}

    def _informer(self, res: Resource, selector: str | None = CHILD_SELECTOR) -> Informer:
        return Informer(
            self.kube,
            res,
            namespace=self.namespace if res.namespaced else None,
            label_selector=selector,
            indexers={"node": node_name_index} if res is POD else None,
            on_error=lambda informer, code: self.metrics.transient_errors.labels(
                source=informer, code=code
            ).inc(),
            transform=transform_for(res.group, res.kind),
            on_event=self.metrics.watch_counter(res.kind),
        )

    @property
    def informers(self) -> list[Informer]:
        return self.loop.informers

    # -- the loop's side ----------------------------------------------------------------------------------
    def start(self, sync_timeout: float | None = None) -> bool:
        return self.loop.start(sync_timeout)

    def stop(self, timeout: float = 30) -> bool:
        return self.loop.stop(timeout)

    def has_synced(self) -> bool:
        return self.loop.has_synced()

    def process(self, key: str) -> None:
        self.loop.process(key)

    def reconcile(self, key: str, failures: int) -> Result:
        seen = self.mpijobs.store.get(key)
        try:
            return self.sync(key)
        finally:
            if seen is None:
                self._memory.pop(key, None)
                self._synced.pop(key, None)
                self.loop.forget(key)
            else:
                mem = self._memory.get(key)
                if mem is None or (mem.status_held_since is None and mem.hostfile_held_since is None):
                    # a sync that held a write back has not finished with this version yet
                    self._synced[key] = str(seen["metadata"].get("resourceVersion", ""))

    def failed(self, key: str, err: Exception, failures: int) -> None:
        self.metrics.sync_errors.labels(reason=report.error_reason(err)).inc()
        obj = self.mpijobs.store.get(key)
        if obj is not None:
            self._write_condition(obj, report.sync_failed(self.recorder, obj, err, failures, self._now()))

    def recovered(self, key: str, failures: int) -> None:
        obj = self.mpijobs.store.get(key)
        if obj is not None:
            self._write_condition(obj, report.sync_recovered(obj, failures, self._now()))

    def _write_condition(self, obj: dict[str, Any], status: dict[str, Any] | None) -> None:
        if status is None:
            return
        try:
            self.held.status(obj, status)
        except Exception as exc:  # the status write may be what fails; the event and the log still tell
            log.warning("condition %s not written", report.SYNC_FAILED, extra={"error": str(exc)})

    def memory(self, key: str) -> JobMemory | None:
        """What the syncs of ``key`` remember (read-only: a frozen value)."""
        return self._memory.get(key)

    def synced_version(self, key: str) -> str | None:
        """The resourceVersion of the MPIJob ``key`` that the last finished sync acted on (one that held a
        status or hostfile write back for up to a second does not count until it is written): proof for tests
        that the operator has processed a given event (served at /debug/synced?key=ns/name)."""
        return self._synced.get(key)

    # -- the sync: observe -> decide -> execute -> remember -------------------------------------------
    def sync(self, key: str) -> Result:
        obj = self.mpijobs.store.get(key)
        if obj is None:
            self.metrics.remove_job_info(key)
            self._memory.pop(key, None)
            return Result()
        now = self._now()
        memory = self._memory.get(key, JobMemory()).for_job(str((obj.get("metadata") or {}).get("uid", "")))
        children, memory = self.observe(obj, memory)
        decision = decide(obj, children, memory, now, self.config, field_manager=self.field_manager)
        self._memory[key] = decision.memory
        if decision.action is Action.IGNORE:
            return Result()
        if decision.action is Action.DELETE_JOB:
            self.held.delete_expired(key, obj)
            return Result()
        assert decision.status is not None
        if decision.action is Action.INVALID:
            self._finish_status(obj, decision.status, [])
            return Result()
        return self._execute(key, obj, now, decision, children)

    def observe(self, obj: dict[str, Any], memory: JobMemory) -> tuple[list[dict[str, Any]], JobMemory]:
        return obs.observe(obj, memory, self.reader, self.config)

    def _execute(
        self, key: str, obj: dict[str, Any], now: datetime, decision: Decision, children: list
    ) -> Result:
        the_plan = decision.plan
        if decision.clear_start_time is not None:
            self.held.clear_start_time(decision.clear_start_time)
        answers: list[dict[str, Any]] = []
        result = ExecResult()
        if the_plan:
            log.info("plan", extra={"key": key, "plan": [str(e) for e in the_plan.entries]})
            result = execute(
                the_plan,
                self.writer,
                self.field_manager,
                owner_description="MPIJob",
                create_rules=CREATE_RULES,
                on_done=lambda outcome: self._read_back(outcome, answers),
            )
        self._tell(obj, decision, result)
        status, self._memory[key] = finish(obj, decision, children, result, answers, now, self.config)
        # the transition's events and phase samples read the world the status was computed on
        self._finish_status(obj, status, after(children, answers))
        self._job_info(key, obj)
        wakes = [
            w
            for w in (status.wake_after, decision.hostfile_wake, decision.recreate_wake, decision.held_wake)
            if w is not None
        ]
        error = None
        if the_plan.conflicts:
            error = SyncError(
                f"{key}: wanted names held by others: {[str(c.key) for c in the_plan.conflicts]}"
            )
        elif not result.ok:
            error = SyncError(f"{key}: {len(result.failures)} failed writes, retry={result.retry}")
        return Result(min(wakes) if wakes else None, error)

    def _job_info(self, key: str, obj: dict[str, Any]) -> None:
        meta = obj["metadata"]
        namespace, launcher_name = str(meta.get("namespace", "")), names.launcher_name(meta["name"])
        launcher = self.children[JOB].store.get(f"{namespace}/{launcher_name}")
        if launcher is not None and (controller_ref(launcher) or {}).get("uid") == meta.get("uid"):
            self.metrics.set_job_info(key, launcher_name, namespace)

    def _finish_status(
        self, obj: dict[str, Any], status: StatusDecision, children: Sequence[Mapping[str, Any]]
    ) -> None:
        if status.write:
            obj = self.held.status(obj, status.new)
        report.record_transition(
            self.recorder, self.metrics, obj, status.old, status.shown, children, self._now()
        )

    def _tell(self, obj: dict[str, Any], decision: Decision, result: ExecResult) -> None:
        for conflict in decision.plan.conflicts:
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

    def _read_back(self, outcome: Outcome, answers: list[dict[str, Any]]) -> None:
        """A write's answer into the caches at once (the next sync must not plan it again), and into this
        sync's ``answers`` (the world ``finish`` judges the status on)."""
        if outcome.object is None or outcome.result == "deleted":
            return
        written = dict(outcome.object)
        answers.append(written)
        try:
            inf = self.children.get(resource_for(written))
        except KeyError:
            return
        if inf is not None:
            inf.observe(written)
