"""The live world as render sees it, indexed for the lookups render and status make."""

from __future__ import annotations

from collections.abc import Callable, Hashable, Iterable, Mapping
from datetime import datetime
from typing import Any, TypeVar

import attrs

from render import names
from render.api import SSHKey
from render.errors import FieldError

KIND_POD = "Pod"
KIND_JOB = "Job"
KIND_SECRET = "Secret"
KIND_CONFIGMAP = "ConfigMap"
KIND_SERVICE = "Service"
KIND_PODGROUP = "PodGroup"
KIND_WORKLOAD = "Workload"
KIND_PRIORITYCLASS = "PriorityClass"
KIND_NODE = "Node"

T = TypeVar("T")


def _key(obj: Mapping[str, Any]) -> tuple[str, str]:
    meta = obj.get("metadata") or {}
    return str(obj.get("kind", "")), str(meta.get("name", ""))


@attrs.frozen
class CreateFailure:
    """A child the API server refused to create in the last sync (the controller remembers it)."""

    kind: str
    name: str
    code: str  # HTTP status code, "error" without an answer
    message: str  # the server's message
    permanent: bool = False  # Invalid: no retry can heal it
    causes: tuple[tuple[str, str], ...] = ()  # (field of the child, message) from the server


@attrs.frozen
class FailureEvidence:
    """What a failed pod said: its failed container, exit code, reason and termination message."""

    pod: str
    container: str = ""
    exit_code: int | None = None
    reason: str = ""
    message: str = ""


@attrs.frozen
class WorkerFailure:
    """The failures of one worker index so far (the controller remembers them; render/failures.py)."""

    index: int
    count: int
    pod_uid: str  # the last failed pod counted
    failed_at: datetime  # its container's finishedAt (the API's clock)
    evidence: FailureEvidence


@attrs.frozen
class Observed:
    """`now` is the only clock; `objects` are live children (and PriorityClasses, and the Nodes their pods
    are bound to); no I/O happens here."""

    now: datetime
    objects: tuple[dict[str, Any], ...] = ()
    fresh_ssh_key: SSHKey | None = None
    create_failure: CreateFailure | None = None
    worker_failures: tuple[WorkerFailure, ...] = ()
    _by_name: dict[tuple[str, str], dict[str, Any]] = attrs.field(
        init=False, eq=False, repr=False, factory=dict
    )
    _memo: dict[Hashable, Any] = attrs.field(init=False, eq=False, repr=False, factory=dict)

    def __attrs_post_init__(self) -> None:
        index: dict[tuple[str, str], dict[str, Any]] = {}
        for obj in self.objects:
            if isinstance(obj, Mapping):
                index.setdefault(_key(obj), obj)
        object.__setattr__(self, "_by_name", index)

    @classmethod
    def from_objects(
        cls,
        objects: Iterable[Mapping[str, Any]],
        *,
        now: datetime,
        fresh_ssh_key: SSHKey | None = None,
        create_failure: CreateFailure | None = None,
        worker_failures: Iterable[WorkerFailure] = (),
    ) -> Observed:
        return cls(
            now=now,
            objects=tuple(dict(o) for o in objects),
            fresh_ssh_key=fresh_ssh_key,
            create_failure=create_failure,
            worker_failures=tuple(worker_failures),
        )

    def get(self, kind: str, name: str) -> dict[str, Any] | None:
        return self._by_name.get((kind, name))

    def of_kind(self, kind: str) -> list[dict[str, Any]]:
        return [
            o for o in self.objects if (type(o) is dict or isinstance(o, Mapping)) and o.get("kind") == kind
        ]

    def memo(self, key: Hashable, compute: Callable[[], T]) -> T:
        """``compute()`` once per ``key`` for this snapshot. For pure questions of the snapshot only
        (objects, clock and memory never change in it), which render and status ask several times a
        sync; the answer is shared, so callers must not modify it."""
        try:
            return self._memo[key]  # type: ignore[no-any-return]
        except KeyError:
            value = self._memo[key] = compute()
            return value


# Where render reads objects in a live object: a dict is "an object, with these fields checked", a list
# of one dict "an array of such objects".
_TERMINATED: dict[str, Any] = {"terminated": {}}
_SHAPE: dict[str, Any] = {
    "metadata": {"labels": {}, "annotations": {}, "ownerReferences": [{}]},
    "spec": {"template": {"metadata": {}}},
    "status": {"conditions": [{}], "containerStatuses": [{"state": _TERMINATED, "lastState": _TERMINATED}]},
    "data": {},
}


def _shape_errors(
    value: Mapping[str, Any], shape: dict[str, Any], where: str, errors: list[FieldError]
) -> None:
    for key, inner in shape.items():
        child = value.get(key)
        if child is None:
            continue
        path = f"{where}.{key}"
        if isinstance(inner, list):
            if not isinstance(child, list):
                errors.append(FieldError(path, "Invalid value: must be an array"))
                continue
            for j, entry in enumerate(child):
                if isinstance(entry, Mapping):
                    _shape_errors(entry, inner[0], f"{path}[{j}]", errors)
                else:
                    errors.append(FieldError(f"{path}[{j}]", "Invalid value: must be an object"))
        elif isinstance(child, Mapping):
            _shape_errors(child, inner, path, errors)
        else:
            errors.append(FieldError(path, "Invalid value: must be an object"))


def check_objects(objects: Iterable[object], path: str = "") -> list[FieldError]:
    """Shape errors of live objects from an untrusted source (the API server's are well formed): each
    must be an object, and every field render reads as an object or an array of objects must be one."""
    errors: list[FieldError] = []
    for i, obj in enumerate(objects):
        if isinstance(obj, Mapping):
            _shape_errors(obj, _SHAPE, f"{path}[{i}]", errors)
        else:
            errors.append(FieldError(f"{path}[{i}]", "Invalid value: must be an object"))
    return errors


def controller_uid(obj: Mapping[str, Any]) -> str | None:
    for ref in (obj.get("metadata") or {}).get("ownerReferences") or ():
        if (type(ref) is dict or isinstance(ref, Mapping)) and ref.get("controller"):
            return ref.get("uid")
    return None


def is_controlled_by(obj: Mapping[str, Any], uid: str) -> bool:
    return controller_uid(obj) == uid


def labels_of(obj: Mapping[str, Any]) -> Mapping[str, Any]:
    return (obj.get("metadata") or {}).get("labels") or {}


def phase(pod: Mapping[str, Any]) -> str:
    return str((pod.get("status") or {}).get("phase") or "")


def condition(obj: Mapping[str, Any], ctype: str) -> Mapping[str, Any] | None:
    for c in (obj.get("status") or {}).get("conditions") or ():
        if isinstance(c, Mapping) and c.get("type") == ctype:
            return c
    return None


def condition_true(obj: Mapping[str, Any], ctype: str) -> bool:
    c = condition(obj, ctype)
    return c is not None and c.get("status") == "True"


def is_pod_ready(pod: Mapping[str, Any]) -> bool:
    return phase(pod) == "Running" and condition_true(pod, "Ready")


def node_name(pod: Mapping[str, Any]) -> str:
    """The node a pod is bound to, "" before it is scheduled."""
    return str((pod.get("spec") or {}).get("nodeName") or "")


def is_terminating(obj: Mapping[str, Any]) -> bool:
    return bool((obj.get("metadata") or {}).get("deletionTimestamp"))


@attrs.frozen
class JobView:
    """What render and status need to know about the live children of one MPIJob."""

    launcher: dict[str, Any] | None  # the launcher Job, if it is ours
    launcher_pods: list[dict[str, Any]]
    workers: dict[int, dict[str, Any]]  # our worker pods by index (taken from the name)
    ssh_secret: dict[str, Any] | None  # the SSH Secret, if it is ours
    conflicts: list[tuple[str, str]]  # (kind, name) wanted names held by objects we do not control


def view(observed: Observed, job: Any, wanted: list[tuple[str, str]]) -> JobView:
    """Classify the observed objects for `job` (an MPIJob model); read-only, shared by the callers."""
    key = ("view", job.namespace, job.name, job.uid, tuple(wanted))
    return observed.memo(key, lambda: _view(observed, job, wanted))


def _view(observed: Observed, job: Any, wanted: list[tuple[str, str]]) -> JobView:
    uid = job.uid
    conflicts = []
    for kind, name in wanted:
        obj = observed.get(kind, name)
        if obj is not None and _same_namespace(obj, job.namespace) and not is_controlled_by(obj, uid):
            conflicts.append((kind, name))
    launcher = observed.get(KIND_JOB, names.launcher_name(job.name))
    if launcher is not None and not (
        _same_namespace(launcher, job.namespace) and is_controlled_by(launcher, uid)
    ):
        launcher = None
    secret = observed.get(KIND_SECRET, names.ssh_secret_name(job.name))
    if secret is not None and not (_same_namespace(secret, job.namespace) and is_controlled_by(secret, uid)):
        secret = None
    launcher_uid = (launcher or {}).get("metadata", {}).get("uid")
    prefix = names.worker_name(job.name, 0)[:-1]
    workers: dict[int, dict[str, Any]] = {}
    launcher_pods: list[dict[str, Any]] = []
    for pod in observed.of_kind(KIND_POD):
        if not _same_namespace(pod, job.namespace):
            continue
        owner = controller_uid(pod)
        if owner == uid:
            name = str((pod.get("metadata") or {}).get("name", ""))
            suffix = name[len(prefix) :] if name.startswith(prefix) else ""
            if suffix.isdigit() and str(int(suffix)) == suffix:
                workers[int(suffix)] = pod
        elif launcher is not None and owner is not None and owner == launcher_uid:
            launcher_pods.append(pod)
        elif launcher is not None and launcher_uid is None:
            lbl = labels_of(pod)
            if (
                lbl.get(names.LABEL_JOB_NAME) == job.name
                and lbl.get(names.LABEL_JOB_ROLE) == names.ROLE_LAUNCHER
            ):
                launcher_pods.append(pod)
    return JobView(launcher, launcher_pods, workers, secret, conflicts)


def _same_namespace(obj: Mapping[str, Any], namespace: str) -> bool:
    ns = (obj.get("metadata") or {}).get("namespace")
    return not ns or ns == namespace
