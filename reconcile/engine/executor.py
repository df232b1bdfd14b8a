"""execute(plan, writer) -> ExecResult: carry out a Plan through the API server. Thin and generic.

Protocol, one field manager (the caller's) throughout:

* **Creates are POSTs**, not server-side applies. An apply to a name that already exists merges into
  that object and silently takes over one we do not own (the plan may be built from a stale cache);
  a POST fails with ``AlreadyExists`` instead, which is safe and tells the caller to plan again.
  The price: fields set at creation belong to an "Update" entry of our manager, so a later apply that
  leaves such a field out does not remove it (kubernetes#99003). Hence removals:
* **Removals are RFC 6902 JSON patches** (``Patch.removal_patch``), sent before the patch's apply: a
  ``test`` of the resourceVersion the plan saw, then ``remove`` ops. They remove a field whichever of
  our entries owns it, and only in the rare sync that stops rendering something: no extra write on
  creation, none when converged. A failed test (the object moved since the plan: 422 without field
  causes, or 409) sets ``retry`` and skips that object's apply; the next plan sees fresh data.
* **Patches are server-side applies** with ``force=true``. The body holds only fields we render, on the
  paths the kind's policy lets us change (``Plan`` patches), so forcing can only take back those fields
  -- from another writer who changed them, or from our own creation-time "Update" entry, which would
  otherwise conflict with our "Apply" entry. It never claims a field we do not render.
* **Deletes** carry ``preconditions.uid`` (a same-named successor is never hit), background
  propagation, and the plan's grace period if it gives one; 404 means done.

Outcomes for the caller's queue: 409 conflicts, 429, 5xx and connection errors set ``retry`` (requeue
with backoff); ``AlreadyExists`` on create or 404 on patch set ``replan`` (the cache is stale); other
errors (400, 403, 422, unknown kinds) are ``failures``. Every request is counted by (verb, kind, code)
and every outcome worth telling a user becomes event data; the controller records them.

How creates depend on each other is the caller's data (``CreateRules``): which failure codes are
permanent (marked on the ``Failure``, with the server's field causes), which kinds come last and only
after every other create succeeded, whether the first create that does not succeed stops the later ones,
and whether a conflict holds every create back. Creates not sent are listed in ``skipped``. With
``concurrency`` > 1, consecutive creates of kinds in one ``together`` group (and of one kind) go out at
once, up to that many in flight, and the plan's order holds between those stages: a sync of 8 children
waits 4 round trips, not 8 (the first of several same-kind creates goes alone: see _concurrent_stage).
"""

from __future__ import annotations

import logging
import threading
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Final, Literal

import attrs

from reconcile.engine import redact
from reconcile.engine.plan import Conflict, Create, Delete, ObjectKey, Patch, Plan
from reconcile.engine.writer import WriteFailed, Writer, WriteRequest, WriteVerb, delete_options

log = logging.getLogger(__name__)

NORMAL: Final = "Normal"
WARNING: Final = "Warning"
ERR_RESOURCE_EXISTS: Final = "ErrResourceExists"

Verb = Literal["create", "patch", "apply", "delete"]  # patch: a JSON patch of removals
Done = Literal["created", "configured", "deleted", "gone"]


@attrs.frozen
class Request:
    """One API request, for metrics: verb, kind, HTTP code ("error" when no response came back)."""

    verb: Verb
    kind: str
    code: str


@attrs.frozen
class EventData:
    type: str
    reason: str
    message: str
    object: str  # the child, as "Kind namespace/name"


@attrs.frozen
class Outcome:
    """What happened to one plan entry. ``object`` is the server's answer (read your writes), if any."""

    key: ObjectKey
    result: Done
    object: dict[str, Any] | None = attrs.field(default=None, eq=False, repr=False)
    # the answer's uid, kept when ``object`` is handed to ``on_done`` and dropped
    uid: str = attrs.field(default="", eq=False, repr=False)


@attrs.frozen
class Failure:
    key: ObjectKey
    verb: Verb
    code: str
    message: str
    permanent: bool = False  # the caller's CreateRules say a retry cannot heal it
    causes: tuple[tuple[str, str], ...] = ()  # (field, message) from an Invalid answer


@attrs.frozen
class CreateRules:
    """How the plan's creates depend on each other, as data from the caller (which kinds they are and
    what their failures mean is the caller's knowledge, not the engine's)."""

    permanent_codes: frozenset[int] = frozenset()  # HTTP codes of create failures no retry heals
    last_kinds: frozenset[str] = frozenset()  # created only once every other create of the plan succeeded
    stop_on_failure: bool = False  # a create that did not succeed stops the plan's later creates
    none_while_conflicts: bool = False  # no create at all while a wanted name is held by someone else
    concurrency: int = 1  # creates in flight at once within a stage (1: one after the other)
    together: tuple[frozenset[str], ...] = ()  # kinds whose consecutive creates form one stage


@attrs.frozen
class ExecResult:
    done: tuple[Outcome, ...] = ()
    failures: tuple[Failure, ...] = ()
    requests: tuple[Request, ...] = ()
    events: tuple[EventData, ...] = ()
    retry: bool = False  # conflict or transient error: requeue with backoff
    replan: bool = False  # the plan met a world other than the one it was made for
    skipped: tuple[ObjectKey, ...] = ()  # creates not sent, by the CreateRules

    @property
    def permanent_failures(self) -> tuple[Failure, ...]:
        return tuple(f for f in self.failures if f.permanent)

    @property
    def ok(self) -> bool:
        return not (self.failures or self.retry or self.replan)

    def request_counts(self) -> Counter[tuple[str, str, str]]:
        return Counter((r.verb, r.kind, r.code) for r in self.requests)


def execute(
    plan: Plan,
    writer: Writer,
    field_manager: str,
    *,
    dry_run: bool = False,
    owner_description: str = "its owner",
    create_rules: CreateRules = CreateRules(),
    on_done: Callable[[Outcome], None] | None = None,
) -> ExecResult:
    """Run ``plan``: deletes, then creates, then patches; one failure does not stop the others, except
    among creates as ``create_rules`` say. ``on_done`` takes each outcome with the server's answer as it
    comes (e.g. into the caller's cache); the result then keeps outcomes without it, so a plan of
    thousands of objects does not hold thousands of answers at once."""
    if not plan.writes and not plan.conflicts:
        return ExecResult()
    run = _Run(writer, field_manager, dry_run, create_rules.permanent_codes, on_done)
    for delete in plan.deletes:
        run.delete(delete)
    _creates(run, plan, create_rules)
    for patch in plan.patches:
        run.apply(patch)
    for conflict in plan.conflicts:
        run.conflict(conflict, owner_description)
    return ExecResult(
        tuple(run.done),
        tuple(run.failures),
        tuple(run.requests),
        tuple(run.events),
        run.retry,
        run.replan,
        tuple(run.skipped),
    )


def _creates(run: _Run, plan: Plan, rules: CreateRules) -> None:
    blocked = rules.none_while_conflicts and bool(plan.conflicts)
    failed = False
    for stage in _stages(plan.creates, rules):
        todo: list[Create] = []
        for create in stage:
            last = create.key.kind in rules.last_kinds
            if blocked or (failed and (rules.stop_on_failure or last)) or (last and run.skipped):
                run.skipped.append(create.key)
                continue
            todo.append(create)
        if len(todo) > 1:
            failed = _concurrent_stage(run, todo, rules) or failed
        else:
            for create in todo:
                before = len(run.done)
                run.create(create)
                failed = failed or len(run.done) == before
    if run.skipped:
        log.info("%d creates held back: %s", len(run.skipped), ", ".join(map(str, run.skipped[:5])))


def _concurrent_stage(run: _Run, todo: list[Create], rules: CreateRules) -> bool:
    """Send a stage's creates at once; True if one did not succeed. Of several creates of one kind
    (pods from one template) the first goes alone: one that cannot succeed fails once, not once per
    sibling, and with ``stop_on_failure`` the siblings are skipped."""
    kinds = Counter(c.key.kind for c in todo)
    probe = next((c for c in todo if kinds[c.key.kind] > 1), None)
    before = len(run.done)
    if probe is not None:
        run.create(probe)
        if len(run.done) == before and rules.stop_on_failure:
            run.skipped.extend(c.key for c in todo if c is not probe)
            return True
    rest = [c for c in todo if c is not probe]
    # list() waits for every create of the stage (and re-raises what one of them raised)
    list(_pool(rules.concurrency).map(run.create, rest))
    return len(run.done) - before < len(todo)


def _stages(creates: Sequence[Create], rules: CreateRules) -> list[list[Create]]:
    """The plan's creates in order, cut where a kind leaves its ``together`` group; one create per stage
    without concurrency."""
    if rules.concurrency <= 1:
        return [[c] for c in creates]

    def group(kind: str) -> frozenset[str]:
        return next((g for g in rules.together if kind in g), frozenset({kind}))

    stages: list[list[Create]] = []
    for create in creates:
        if stages and group(create.key.kind) == group(stages[-1][0].key.kind):
            stages[-1].append(create)
        else:
            stages.append([create])
    return stages


_POOLS: dict[int, ThreadPoolExecutor] = {}
_POOLS_LOCK = threading.Lock()


def _pool(size: int) -> ThreadPoolExecutor:
    """One pool per size for every plan of the process: threads are made once, not per sync."""
    with _POOLS_LOCK:
        pool = _POOLS.get(size)
        if pool is None:
            pool = _POOLS[size] = ThreadPoolExecutor(size, thread_name_prefix="create")
        return pool


def _retryable(status: int | None) -> bool:
    return status is None or status in (409, 429) or status >= 500


class _Run:
    def __init__(
        self,
        writer: Writer,
        field_manager: str,
        dry_run: bool,
        permanent_codes: frozenset[int] = frozenset(),
        on_done: Callable[[Outcome], None] | None = None,
    ) -> None:
        self.writer = writer
        self.on_done = on_done
        self.permanent_codes = permanent_codes
        self.skipped: list[ObjectKey] = []
        self.field_manager = field_manager
        self.dry_run = dry_run
        self.done: list[Outcome] = []
        self.failures: list[Failure] = []
        self.requests: list[Request] = []
        self.events: list[EventData] = []
        self.retry = False
        self.replan = False

    def _send(
        self, verb: Verb, api_version: str, key: ObjectKey, write: WriteVerb, body: Any
    ) -> tuple[dict[str, Any] | None, WriteFailed | None]:
        """Send one request; returns (answer, None) or (None, what failed)."""
        request = WriteRequest(
            write,
            api_version,
            key.kind,
            key.namespace,
            key.name,
            body,
            field_manager="" if write == "delete" else self.field_manager,
            dry_run=self.dry_run,
        )
        try:
            answer = self.writer.send(request)
        except WriteFailed as exc:
            if redact.is_secret(api_version, key.kind):  # its message goes to logs and events
                exc = _without_values(exc, body)
            if not exc.unknown_kind:
                self.requests.append(Request(verb, key.kind, exc.code))
            return None, exc
        self.requests.append(Request(verb, key.kind, "201" if verb == "create" else "200"))
        return answer, None

    def _finish(self, outcome: Outcome) -> None:
        if self.on_done is not None and outcome.object is not None:
            self.on_done(outcome)
            uid = (outcome.object.get("metadata") or {}).get("uid")
            outcome = Outcome(outcome.key, outcome.result, uid=uid if isinstance(uid, str) else "")
        self.done.append(outcome)

    def _fail(
        self,
        key: ObjectKey,
        verb: Verb,
        code: str,
        message: str,
        *,
        retry: bool,
        permanent: bool = False,
        causes: tuple[tuple[str, str], ...] = (),
    ) -> None:
        self.failures.append(Failure(key, verb, code, message, permanent, causes))
        self.retry = self.retry or retry
        reason = {"create": "FailedCreate", "delete": "FailedDelete"}.get(verb, "FailedUpdate")
        self.events.append(EventData(WARNING, reason, f"{verb} {key}: {message}", str(key)))
        log.warning("%s %s failed (%s): %s", verb, key, code, message)

    def _error(self, key: ObjectKey, verb: Verb, api_version: str, exc: WriteFailed) -> None:
        if exc.unknown_kind:
            # e.g. a custom resource whose CRD is not installed (yet): worth a retry with backoff.
            message = f"{api_version} {key.kind}: {exc.message}"
            self._fail(key, verb, exc.code, message, retry=True)
            return
        permanent = verb == "create" and exc.status in self.permanent_codes
        causes = tuple((str(c.get("field", "")), str(c.get("message", ""))) for c in exc.causes)
        retry = _retryable(exc.status)
        self._fail(key, verb, exc.code, exc.message, retry=retry, permanent=permanent, causes=causes)

    def create(self, entry: Create) -> None:
        answer, exc = self._send("create", entry.api_version, entry.key, "create", entry.body)
        if exc is None:
            self._finish(Outcome(entry.key, "created", answer))
            self.events.append(EventData(NORMAL, "SuccessfulCreate", f"Created {entry.key}", str(entry.key)))
        elif exc.status == 409 and exc.reason == "AlreadyExists":
            # Our cache missed it (or someone else took the name): plan again from fresh data.
            self.replan = True
            log.info("create %s: already exists; re-plan", entry.key)
        else:
            self._error(entry.key, "create", entry.api_version, exc)

    def apply(self, entry: Patch) -> None:
        answer: dict[str, Any] | None = None
        if entry.removal_patch:
            ops = list(entry.removal_patch)
            answer, exc = self._send("patch", entry.api_version, entry.key, "json-patch", ops)
            if exc is not None:
                self._removal_failed(entry, exc)
                return
        if entry.body is None:  # removals only
            self._finish(Outcome(entry.key, "configured", answer))
            return
        answer, exc = self._send("apply", entry.api_version, entry.key, "apply", entry.body)
        if exc is None:
            self._finish(Outcome(entry.key, "configured", answer))
        elif exc.status == 404:
            self.replan = True  # gone since we looked: the next plan creates it
        else:
            self._error(entry.key, "apply", entry.api_version, exc)

    def _removal_failed(self, entry: Patch, exc: WriteFailed) -> None:
        if exc.status == 404:
            self.replan = True
        elif exc.status == 409 or (exc.status == 422 and not exc.causes):
            # The resourceVersion test failed: the object changed since the plan. Plan again, later.
            self.retry = True
            log.info("removals from %s: the object changed since the plan; retry", entry.key)
        else:
            self._error(entry.key, "patch", entry.api_version, exc)

    def delete(self, entry: Delete) -> None:
        options = delete_options(entry.uid, entry.grace_period_seconds)
        answer, exc = self._send("delete", entry.api_version, entry.key, "delete", options)
        if exc is None:
            self._finish(Outcome(entry.key, "deleted", answer))
            # A force delete is not routine: whoever ran the object may not have stopped it.
            key = str(entry.key)
            self.events.append(
                EventData(WARNING, "ForceDeleted", f"Force-deleted {key} (grace period 0)", key)
                if entry.grace_period_seconds == 0
                else EventData(NORMAL, "SuccessfulDelete", f"Deleted {key}", key)
            )
        elif exc.status == 404:
            self._finish(Outcome(entry.key, "gone"))
        else:
            # 409 here is a failed UID precondition: a successor took the name; retry re-plans it.
            self._error(entry.key, "delete", entry.api_version, exc)

    def conflict(self, entry: Conflict, owner_description: str) -> None:
        message = f'Resource "{entry.key.name}" already exists and is not managed by {owner_description}'
        self.events.append(EventData(WARNING, ERR_RESOURCE_EXISTS, message, str(entry.key)))


def _without_values(exc: WriteFailed, body: Any) -> WriteFailed:
    """``exc`` without the Secret values of the request's body: an admission webhook may quote them."""
    causes = [
        {k: redact.hide_in_text(v, body) if isinstance(v, str) else v for k, v in c.items()}
        for c in exc.causes
    ]
    return WriteFailed(
        exc.status,
        redact.hide_in_text(exc.message, body),
        reason=exc.reason,
        causes=causes,
        unknown_kind=exc.unknown_kind,
    )


def returned_objects(result: ExecResult) -> list[Mapping[str, Any]]:
    """The objects the server returned for our writes, to feed back into the caller's cache."""
    return [o.object for o in result.done if o.object is not None]
