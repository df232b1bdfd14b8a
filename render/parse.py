"""Dict (or YAML) to the attrs model. Wrong types become FieldErrors with paths, never exceptions."""

from __future__ import annotations

import builtins
from collections.abc import Iterable, Mapping
from typing import Any, TypeVar

import yaml

from render import bounds, names
from render.api import MPIJob, MPIJobSpec, ReplicaSpec, RunPolicy, SchedulingPolicy
from render.defaults import apply_defaults
from render.errors import FieldError, ValidationError, quote
from render.schema import json_type
from render.validation import validate
from render.yamlio import Loader

INT32_MAX = bounds.INT32_MAX
INT64_MAX = bounds.INT64_MAX
# Deeper input is no MPIJob (the pod template's schema is about 15 levels deep); checking first keeps
# every recursive step after it (copies, JSON, YAML) far from Python's recursion limit.
MAX_DEPTH = 64
_T = TypeVar("_T")


class Reader:
    """Typed field access that records an error instead of raising."""

    def __init__(self) -> None:
        self.errors: list[FieldError] = []

    def error(self, path: str, message: str) -> None:
        self.errors.append(FieldError(path, message))

    def _typed(self, obj: Mapping[str, Any], key: str, path: str, kind: type[_T], expected: str) -> _T | None:
        """``obj[key]`` if it is a ``kind``; None if it is absent or (an error, naming ``expected``) not."""
        value = obj.get(key)
        if value is None or isinstance(value, kind):
            return value
        self.error(path, f"Invalid value: {_type_name(value)}: must be {expected}")
        return None

    def map(self, obj: Mapping[str, Any], key: str, path: str) -> Mapping[str, Any] | None:
        # isinstance takes the abstract class; mypy wants a concrete one for type[T]
        return self._typed(obj, key, path, Mapping, "an object")  # type: ignore[type-abstract]

    def str(self, obj: Mapping[str, Any], key: str, path: str) -> str | None:
        return self._typed(obj, key, path, str, "a string")

    # builtins.str: the method above shadows the name in this class's annotations
    def bool(
        self, obj: Mapping[builtins.str, Any], key: builtins.str, path: builtins.str
    ) -> builtins.bool | None:
        return self._typed(obj, key, path, bool, "a boolean")

    def int(
        self,
        obj: Mapping[builtins.str, Any],
        key: builtins.str,
        path: builtins.str,
        maximum: int = INT32_MAX,
        bits: int = 32,
    ) -> int | None:
        """An integer of a `bits`-wide type whose meaning allows at most `maximum`."""
        value = obj.get(key)
        if value is None:
            return None
        if isinstance(value, float) and value.is_integer():
            value = int(value)
        if isinstance(value, bool) or not isinstance(value, int):
            self.error(path, f"Invalid value: {_type_name(value)}: must be an integer")
            return None
        if value < -(2 ** (bits - 1)):
            self.error(path, f"Invalid value: {value}: must fit in {bits} bits")
            return None
        if value > maximum:
            self.error(path, f"Invalid value: {value}: must be less than or equal to {maximum}")
            return None
        return value


_SCALARS = frozenset({str, int, float, bool, type(None)})
_JSON_TYPES = frozenset({"null", "boolean", "number", "string", "array", "object"})


def too_deep(obj: object, limit: int = MAX_DEPTH) -> str | None:
    """The path of the first value nested deeper than `limit`, without recursion; None if none is."""
    # Depths alone first, scalars skipped by their exact type (the Mapping ABC check is slow): every MPIJob
    # read pays this walk. The path only for the rare one too deep.
    stack: list[tuple[object, int]] = [(obj, 0)]
    pop, push = stack.pop, stack.append
    while stack:
        value, depth = pop()
        kind = type(value)
        if kind is dict:
            items: Iterable[object] = value.values()  # type: ignore[attr-defined]
        elif kind is list:
            items = value  # type: ignore[assignment]
        elif kind in _SCALARS:
            continue
        elif isinstance(value, Mapping):
            items = value.values()
        elif isinstance(value, list | tuple):
            items = value
        else:
            continue
        if depth >= limit and items:
            return _deep_path(obj, limit)
        for v in items:
            push((v, depth + 1))
    return None


def _deep_path(obj: object, limit: int) -> str:
    stack: list[tuple[object, str, int]] = [(obj, "", 0)]
    while stack:
        value, path, depth = stack.pop()
        if depth > limit:
            return (path[:120] + "...") if len(path) > 120 else path or "<root>"
        if isinstance(value, Mapping):
            stack += [
                (v, f"{path}.{names.path_key(k)}" if path else names.path_key(k), depth + 1)
                for k, v in value.items()
            ]
        elif isinstance(value, list | tuple):
            stack += [(v, f"{path}[{i}]", depth + 1) for i, v in enumerate(value)]
    raise AssertionError("too_deep found a value deeper than the limit")


def _type_name(value: object) -> str:
    """JSON's name for the value's type, numbers all `number` (YAML-only types, e.g. !!binary, by their
    YAML tag)."""
    if isinstance(value, bytes):
        return "!!binary"
    if isinstance(value, set):
        return "!!set"
    kind = json_type(value)
    if kind == "integer":
        return "number"
    return kind if kind in _JSON_TYPES else "non-JSON value"


def read_mpijob(obj: object) -> tuple[MPIJob | None, list[FieldError]]:
    """The model without defaults, and every type error found on the way."""
    r = Reader()
    if not isinstance(obj, Mapping):
        return None, [FieldError("<root>", f"Invalid value: {_type_name(obj)}: must be an object")]
    deep = too_deep(obj)
    if deep is not None:
        return None, [FieldError(deep, f"Invalid value: nested deeper than {MAX_DEPTH} levels")]
    api_version = obj.get("apiVersion")
    if api_version is not None and api_version != names.API_VERSION:
        r.error(
            "apiVersion",
            f'Unsupported value: {quote(api_version)}: supported values: "{names.API_VERSION}"',
        )
    kind = obj.get("kind")
    if kind is not None and kind != names.KIND:
        r.error("kind", f'Unsupported value: {quote(kind)}: supported values: "{names.KIND}"')
    meta = r.map(obj, "metadata", "metadata") or {}
    name = r.str(meta, "name", "metadata.name") or ""
    namespace = r.str(meta, "namespace", "metadata.namespace") or ""
    uid = r.str(meta, "uid", "metadata.uid") or ""
    labels = _str_map(r, meta, "labels", "metadata.labels")
    annotations = _str_map(r, meta, "annotations", "metadata.annotations")
    status = r.map(obj, "status", "status") or {}
    spec_obj = obj.get("spec")
    if spec_obj is None:
        r.error("spec", "Required value")
        spec_obj = {}
    elif not isinstance(spec_obj, Mapping):
        r.error("spec", f"Invalid value: {_type_name(spec_obj)}: must be an object")
        spec_obj = {}
    spec = _read_spec(r, spec_obj)
    job = MPIJob(
        name=name,
        namespace=namespace,
        uid=uid,
        spec=spec,
        labels=labels,
        annotations=annotations,
        status=dict(status),
        raw=obj if isinstance(obj, dict) else dict(obj),
    )
    return job, r.errors


def _str_map(r: Reader, obj: Mapping[str, Any], key: str, path: str) -> dict[str, str]:
    value = r.map(obj, key, path)
    if value is None:
        return {}
    out: dict[str, str] = {}
    for k, v in value.items():
        if not isinstance(k, str) or not isinstance(v, str):
            r.error(f"{path}[{names.path_key(k)}]", f"Invalid value: {_type_name(v)}: must be a string")
            continue
        out[k] = v
    return out


def _read_spec(r: Reader, spec: Mapping[str, Any]) -> MPIJobSpec:
    specs: dict[str, ReplicaSpec] | None = None
    raw_specs = r.map(spec, "mpiReplicaSpecs", "spec.mpiReplicaSpecs")
    if raw_specs is not None:
        specs = {}
        for rtype, raw in raw_specs.items():
            path = f"spec.mpiReplicaSpecs[{names.path_key(rtype)}]"
            if rtype not in (names.LAUNCHER, names.WORKER):
                r.error(
                    path,
                    f'Unsupported value: {quote(rtype)}: supported values: "Launcher", "Worker"',
                )
                continue
            if raw is None:
                continue
            if not isinstance(raw, Mapping):
                r.error(path, f"Invalid value: {_type_name(raw)}: must be an object")
                continue
            specs[rtype] = _read_replica(r, raw, path)
    run_policy_obj = r.map(spec, "runPolicy", "spec.runPolicy") or {}
    return MPIJobSpec(
        slots_per_worker=r.int(spec, "slotsPerWorker", "spec.slotsPerWorker"),
        run_launcher_as_worker=r.bool(spec, "runLauncherAsWorker", "spec.runLauncherAsWorker"),
        run_policy=_read_run_policy(r, run_policy_obj),
        mpi_replica_specs=specs,
        ssh_auth_mount_path=r.str(spec, "sshAuthMountPath", "spec.sshAuthMountPath") or "",
        launcher_creation_policy=r.str(spec, "launcherCreationPolicy", "spec.launcherCreationPolicy") or "",
        mpi_implementation=r.str(spec, "mpiImplementation", "spec.mpiImplementation") or "",
    )


def _read_replica(r: Reader, raw: Mapping[str, Any], path: str) -> ReplicaSpec:
    template = raw.get("template")
    if template is None:
        template = {}
    elif not isinstance(template, Mapping):
        r.error(f"{path}.template", f"Invalid value: {_type_name(template)}: must be an object")
        template = {}
    return ReplicaSpec(
        replicas=r.int(raw, "replicas", f"{path}.replicas"),
        restart_policy=r.str(raw, "restartPolicy", f"{path}.restartPolicy") or "",
        template=template if isinstance(template, dict) else dict(template),
    )


def _read_run_policy(r: Reader, rp: Mapping[str, Any]) -> RunPolicy:
    p = "spec.runPolicy"
    sp_obj = r.map(rp, "schedulingPolicy", f"{p}.schedulingPolicy")
    sp = None
    if sp_obj is not None:
        sp_path = f"{p}.schedulingPolicy"
        min_res = r.map(sp_obj, "minResources", f"{sp_path}.minResources")
        sp = SchedulingPolicy(
            min_available=r.int(sp_obj, "minAvailable", f"{sp_path}.minAvailable"),
            queue=r.str(sp_obj, "queue", f"{sp_path}.queue") or "",
            min_resources=dict(min_res) if min_res is not None else None,
            priority_class=r.str(sp_obj, "priorityClass", f"{sp_path}.priorityClass") or "",
            schedule_timeout_seconds=r.int(
                sp_obj, "scheduleTimeoutSeconds", f"{sp_path}.scheduleTimeoutSeconds"
            ),
        )
    return RunPolicy(
        clean_pod_policy=r.str(rp, "cleanPodPolicy", f"{p}.cleanPodPolicy"),
        ttl_seconds_after_finished=r.int(rp, "ttlSecondsAfterFinished", f"{p}.ttlSecondsAfterFinished"),
        active_deadline_seconds=r.int(
            rp, "activeDeadlineSeconds", f"{p}.activeDeadlineSeconds", bounds.MAX_DURATION_SECONDS, 64
        ),
        backoff_limit=r.int(rp, "backoffLimit", f"{p}.backoffLimit"),
        scheduling_policy=sp,
        suspend=r.bool(rp, "suspend", f"{p}.suspend"),
        managed_by=r.str(rp, "managedBy", f"{p}.managedBy"),
    )


def load_yaml(text: str) -> object:
    """One YAML document; a syntax error becomes a ValidationError."""
    try:
        return yaml.load(text, Loader=Loader)
    except yaml.YAMLError as exc:
        raise ValidationError([FieldError("<yaml>", str(exc).replace("\n", " "))]) from None
    except RecursionError:
        raise ValidationError([FieldError("<yaml>", f"nested deeper than {MAX_DEPTH} levels")]) from None


def parse_mpijob(obj: object) -> MPIJob:
    """Parse, apply defaults and validate; raises ValidationError listing every problem."""
    if isinstance(obj, MPIJob):
        return obj
    job, errors = read_mpijob(obj)
    if job is None:
        raise ValidationError(errors)
    job = apply_defaults(job)
    # A field with a type error was read as unset; skip what validation says about that stand-in value.
    bad = {e.path for e in errors}
    errors += [e for e in validate(job) if e.path not in bad]
    if errors:
        raise ValidationError(errors)
    return job
