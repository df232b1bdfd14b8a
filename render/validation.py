"""Upstream's validation plus every check that would otherwise only fail later at the API server."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from render import bounds, names, quantity
from render.api import MPIJob, MPIJobSpec, ReplicaSpec, RunPolicy, SchedulingPolicy
from render.errors import FieldError, quote
from render.names import path_key

RESTART_POLICIES = ("Never", "OnFailure")
CLEAN_POD_POLICIES = ("All", "None", "Running")
MPI_IMPLEMENTATIONS = ("Intel", "MPICH", "OpenMPI")
LAUNCHER_CREATION_POLICIES = ("AtStartup", "WaitForWorkersReady")
MANAGED_BY = (names.MANAGED_BY_SELF, names.MANAGED_BY_MULTIKUEUE)
MAX_DNS_SEARCHES = 32
_JSON_TYPE = {bool: "boolean", str: "string"}


def _unsupported(value: object, allowed: tuple[str, ...]) -> str:
    return f"Unsupported value: {quote(value)}: supported values: " + ", ".join(f'"{a}"' for a in allowed)


def _array(value: object, path: str, errs: list[FieldError]) -> list[Any]:
    """``value``'s items to check: none when it is absent, or not an array (an error then)."""
    if value is None:
        return []
    if not isinstance(value, list):
        errs.append(FieldError(path, "Invalid value: must be an array"))
        return []
    return value


def _object(value: object, path: str, errs: list[FieldError]) -> Mapping[str, Any]:
    """``value``'s fields to check: none when it is absent, or not an object (an error then)."""
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        errs.append(FieldError(path, "Invalid value: must be an object"))
        return {}
    return value


def too_many_workers(replicas: int, name_len: int) -> str:
    """The message for a worker count above bounds.max_workers (the CRD's rule says the same)."""
    return f"Invalid value: {replicas}: {bounds.worker_limit_message(name_len)}"


def validate(job: MPIJob) -> list[FieldError]:
    """Checks on a defaulted job; returns every error found."""
    errs: list[FieldError] = []
    _validate_metadata(job, errs)
    _validate_replica_specs(job, errs)
    _validate_slots(job.spec, errs)
    _validate_run_policy(job.spec.run_policy, errs)
    _validate_ssh_mount(job.spec, errs)
    _validate_choices(job.spec, errs)
    return errs


def _validate_replica_specs(job: MPIJob, errs: list[FieldError]) -> None:
    specs = job.spec.mpi_replica_specs
    if specs is None:
        errs.append(FieldError("spec.mpiReplicaSpecs", "Required value: must have replica specs"))
        return
    if names.LAUNCHER not in specs:
        errs.append(
            FieldError(
                f"spec.mpiReplicaSpecs[{names.LAUNCHER}]",
                "Required value: must have Launcher replica spec",
            )
        )
    for rtype in (names.LAUNCHER, names.WORKER):
        if rtype in specs:
            _validate_replica(job, rtype, specs[rtype], errs)


def _validate_slots(spec: MPIJobSpec, errs: list[FieldError]) -> None:
    if spec.slots_per_worker is None:
        errs.append(FieldError("spec.slotsPerWorker", "Required value: must have number of slots per worker"))
    elif spec.slots_per_worker < 0:
        errs.append(
            FieldError(
                "spec.slotsPerWorker",
                f"Invalid value: {spec.slots_per_worker}: must be greater than or equal to 0",
            )
        )


def _validate_run_policy(rp: RunPolicy, errs: list[FieldError]) -> None:
    if rp.clean_pod_policy is None:
        errs.append(FieldError("spec.runPolicy.cleanPodPolicy", "Required value: must have clean Pod policy"))
    elif rp.clean_pod_policy not in CLEAN_POD_POLICIES:
        errs.append(
            FieldError("spec.runPolicy.cleanPodPolicy", _unsupported(rp.clean_pod_policy, CLEAN_POD_POLICIES))
        )
    for field, value in (
        ("ttlSecondsAfterFinished", rp.ttl_seconds_after_finished),
        ("activeDeadlineSeconds", rp.active_deadline_seconds),
        ("backoffLimit", rp.backoff_limit),
    ):
        if value is not None and value < 0:
            errs.append(
                FieldError(
                    f"spec.runPolicy.{field}", f"Invalid value: {value}: must be greater than or equal to 0"
                )
            )
    if rp.managed_by not in (None, "") and rp.managed_by not in MANAGED_BY:
        errs.append(FieldError("spec.runPolicy.managedBy", _unsupported(rp.managed_by, MANAGED_BY)))
    if rp.scheduling_policy is not None:
        _validate_scheduling_policy(rp.scheduling_policy, errs)


def _validate_scheduling_policy(sp: SchedulingPolicy, errs: list[FieldError]) -> None:
    base = "spec.runPolicy.schedulingPolicy"
    if sp.min_available is not None and sp.min_available < 0:
        errs.append(FieldError(f"{base}.minAvailable", "must be greater than or equal to 0"))
    if sp.schedule_timeout_seconds is not None and sp.schedule_timeout_seconds < 0:
        errs.append(FieldError(f"{base}.scheduleTimeoutSeconds", "must be greater than or equal to 0"))
    if sp.priority_class and not names.is_dns1123_subdomain(sp.priority_class):
        errs.append(FieldError(f"{base}.priorityClass", "must be a valid DNS-1123 subdomain"))
    if sp.queue and not names.is_label_value(sp.queue):
        errs.append(FieldError(f"{base}.queue", "must be a valid label value"))
    _validate_resource_list(sp.min_resources or {}, f"{base}.minResources", errs)


def _validate_ssh_mount(spec: MPIJobSpec, errs: list[FieldError]) -> None:
    if not spec.ssh_auth_mount_path:
        errs.append(
            FieldError("spec.sshAuthMountPath", "Required value: must have a mount path for SSH credentials")
        )
    elif not spec.ssh_auth_mount_path.startswith("/") or ":" in spec.ssh_auth_mount_path:
        errs.append(FieldError("spec.sshAuthMountPath", "must be an absolute path without ':'"))
    elif spec.ssh_auth_mount_path.rstrip("/") == names.CONFIG_MOUNT_PATH:
        errs.append(
            FieldError("spec.sshAuthMountPath", f"must not be {names.CONFIG_MOUNT_PATH}, the hostfile mount")
        )


def _validate_choices(spec: MPIJobSpec, errs: list[FieldError]) -> None:
    """The spec's enumerations outside the run policy."""
    if spec.mpi_implementation not in MPI_IMPLEMENTATIONS:
        errs.append(
            FieldError("spec.mpiImplementation", _unsupported(spec.mpi_implementation, MPI_IMPLEMENTATIONS))
        )
    if spec.launcher_creation_policy not in LAUNCHER_CREATION_POLICIES:
        errs.append(
            FieldError(
                "spec.launcherCreationPolicy",
                _unsupported(spec.launcher_creation_policy, LAUNCHER_CREATION_POLICIES),
            )
        )


def _validate_metadata(job: MPIJob, errs: list[FieldError]) -> None:
    if not job.name:
        errs.append(FieldError("metadata.name", "Required value: name is required"))
    else:
        # Every child name must be a DNS label: the Service `<job>` is DNS-1035, pods and hostnames DNS-1123.
        workers = max(job.worker_replicas, 1)
        longest = max(names.worker_name(job.name, workers - 1), names.launcher_name(job.name), key=len)
        if not names.is_dns1035_label(job.name):
            errs.append(
                FieldError(
                    "metadata.name",
                    f"Invalid value: {quote(job.name)}: must be a DNS-1035 label (lower case alphanumerics "
                    "or '-', starting with a letter, ending with an alphanumeric)",
                )
            )
        elif len(longest) > 63:
            errs.append(
                FieldError(
                    "metadata.name",
                    f"Invalid value: {quote(job.name)}: will not able to create pod and service with invalid "
                    f"DNS label {quote(longest)}: must be no more than 63 characters",
                )
            )
    wait = job.annotations.get(names.SSH_WAIT_ANNOTATION)
    if wait is not None and not (
        wait.isascii() and wait.isdigit() and int(wait) <= names.SSH_WAIT_MAX_SECONDS
    ):
        errs.append(
            FieldError(
                f"metadata.annotations[{names.SSH_WAIT_ANNOTATION}]",
                f"Invalid value: {quote(wait)}: must be a whole number of seconds from 0 to "
                f"{names.SSH_WAIT_MAX_SECONDS} (0 turns the launcher's wait for the workers off)",
            )
        )
    if not job.namespace:
        errs.append(FieldError("metadata.namespace", "Required value"))
    elif not names.is_dns1123_label(job.namespace):
        errs.append(
            FieldError(
                "metadata.namespace", f"Invalid value: {quote(job.namespace)}: must be a DNS-1123 label"
            )
        )


def _validate_replica(job: MPIJob, rtype: str, spec: ReplicaSpec, errs: list[FieldError]) -> None:
    base = f"spec.mpiReplicaSpecs[{rtype}]"
    if spec.replicas is None:
        errs.append(FieldError(f"{base}.replicas", "Required value: must define number of replicas"))
    elif rtype == names.LAUNCHER and spec.replicas != 1:
        errs.append(FieldError(f"{base}.replicas", f"Invalid value: {spec.replicas}: must be 1"))
    elif rtype == names.WORKER and spec.replicas < 1:
        errs.append(
            FieldError(
                f"{base}.replicas", f"Invalid value: {spec.replicas}: must be greater than or equal to 1"
            )
        )
    elif (
        rtype == names.WORKER
        and job.name
        and spec.replicas > bounds.max_workers(len(job.name))
        # a worker name beyond 63 characters is metadata.name's error already
        and len(names.worker_name(job.name, spec.replicas - 1)) <= bounds.DNS_LABEL_MAX
    ):
        errs.append(FieldError(f"{base}.replicas", too_many_workers(spec.replicas, len(job.name))))
    if spec.restart_policy not in RESTART_POLICIES:
        errs.append(FieldError(f"{base}.restartPolicy", _unsupported(spec.restart_policy, RESTART_POLICIES)))
    _validate_template(job, rtype, spec.template, f"{base}.template", errs)


def _validate_template(
    job: MPIJob, rtype: str, template: Mapping[str, Any], base: str, errs: list[FieldError]
) -> None:
    meta = _object(template.get("metadata"), f"{base}.metadata", errs)
    _validate_string_map(meta.get("labels"), f"{base}.metadata.labels", errs, labels=True)
    _validate_string_map(meta.get("annotations"), f"{base}.metadata.annotations", errs, labels=False)
    pod = template.get("spec")
    if not isinstance(pod, Mapping):
        if pod is not None:
            errs.append(FieldError(f"{base}.spec", "Invalid value: must be an object"))
        errs.append(
            FieldError(f"{base}.spec.containers", "Required value: must define at least one container")
        )
        return
    path = f"{base}.spec"
    _validate_containers(job, rtype, pod.get("containers"), f"{path}.containers", errs)
    _validate_init_containers(rtype, pod.get("initContainers"), f"{path}.initContainers", errs)
    _validate_volumes(rtype, pod.get("volumes"), f"{path}.volumes", errs)
    _validate_pod_field_types(pod, path, errs)
    _validate_dns_config(pod.get("dnsConfig"), f"{path}.dnsConfig", errs)


def _validate_containers(
    job: MPIJob, rtype: str, containers: object, path: str, errs: list[FieldError]
) -> None:
    if containers is not None and not isinstance(containers, list):
        errs.append(FieldError(path, "Invalid value: must be an array"))
    elif not containers:
        errs.append(FieldError(path, "Required value: must define at least one container"))
    else:
        for i, c in enumerate(containers):
            _validate_container(c, f"{path}[{i}]", errs)
        if isinstance(containers[0], Mapping):
            _validate_main_container(job, rtype, containers[0], f"{path}[0]", errs)


def _validate_init_containers(rtype: str, init: object, path: str, errs: list[FieldError]) -> None:
    for i, c in enumerate(_array(init, path, errs)):
        _validate_container(c, f"{path}[{i}]", errs)
        ours = isinstance(c, Mapping) and c.get("name") == names.WAIT_CONTAINER
        if rtype == names.LAUNCHER and ours:
            errs.append(
                FieldError(
                    f"{path}[{i}].name",
                    f"Duplicate value: {quote(names.WAIT_CONTAINER)}: reserved by the operator",
                )
            )


def _validate_volumes(rtype: str, volumes: object, path: str, errs: list[FieldError]) -> None:
    """Volume names, none of them one the operator adds to this replica's pods."""
    ours = {names.SSH_VOLUME, names.CONFIG_VOLUME} if rtype == names.LAUNCHER else {names.SSH_VOLUME}
    for i, v in enumerate(_array(volumes, path, errs)):
        if not isinstance(v, Mapping) or not isinstance(v.get("name"), str):
            errs.append(FieldError(f"{path}[{i}].name", "Required value"))
        elif v["name"] in ours:
            errs.append(
                FieldError(
                    f"{path}[{i}].name",
                    f"Duplicate value: {quote(v['name'])}: reserved by the operator",
                )
            )


def _validate_pod_field_types(pod: Mapping[str, Any], path: str, errs: list[FieldError]) -> None:
    """The pod fields the operator reads or sets, of the type it expects."""
    for key, kind in (
        ("hostNetwork", bool),
        ("priorityClassName", str),
        ("schedulerName", str),
        ("restartPolicy", str),
        ("hostname", str),
        ("subdomain", str),
        ("dnsPolicy", str),
    ):
        value = pod.get(key)
        if value is not None and not isinstance(value, kind):
            errs.append(FieldError(f"{path}.{key}", f"Invalid value: must be a {_JSON_TYPE[kind]}"))


def _validate_dns_config(dns: object, path: str, errs: list[FieldError]) -> None:
    searches = _object(dns, path, errs).get("searches")
    if searches is None:
        return
    if not isinstance(searches, list) or not all(isinstance(s, str) for s in searches):
        errs.append(FieldError(f"{path}.searches", "Invalid value: must be an array of strings"))
    elif len(searches) >= MAX_DNS_SEARCHES:
        errs.append(
            FieldError(
                f"{path}.searches",
                f"Too many: {len(searches)}: must have at most {MAX_DNS_SEARCHES - 1} items "
                "(the operator adds one)",
            )
        )


def _validate_string_map(value: object, path: str, errs: list[FieldError], *, labels: bool) -> None:
    for k, v in _object(value, path, errs).items():
        if not isinstance(k, str) or not names.is_qualified_name(k):
            errs.append(
                FieldError(f"{path}[{path_key(k)}]", f"Invalid value: {quote(k)}: must be a valid label key")
            )
        elif not isinstance(v, str):
            errs.append(FieldError(f"{path}[{k}]", "Invalid value: must be a string"))
        elif labels and not names.is_label_value(v):
            errs.append(FieldError(f"{path}[{k}]", f"Invalid value: {quote(v)}: must be a valid label value"))


def _validate_container(c: object, path: str, errs: list[FieldError]) -> None:
    if not isinstance(c, Mapping):
        errs.append(FieldError(path, "Invalid value: must be an object"))
        return
    name = c.get("name")
    if not isinstance(name, str) or not name:
        errs.append(FieldError(f"{path}.name", "Required value"))
    elif not names.is_dns1123_label(name):
        errs.append(FieldError(f"{path}.name", f"Invalid value: {quote(name)}: must be a DNS-1123 label"))
    for key in ("command", "args"):
        value = c.get(key)
        if value is not None and (not isinstance(value, list) or not all(isinstance(s, str) for s in value)):
            errs.append(FieldError(f"{path}.{key}", "Invalid value: must be an array of strings"))
    for key in ("env", "volumeMounts", "ports"):
        value = c.get(key)
        if value is not None and (
            not isinstance(value, list) or not all(isinstance(e, Mapping) for e in value)
        ):
            errs.append(FieldError(f"{path}.{key}", "Invalid value: must be an array of objects"))
    env = c.get("env")
    if isinstance(env, list):
        for i, e in enumerate(env):
            if isinstance(e, Mapping) and not isinstance(e.get("name"), str):
                errs.append(FieldError(f"{path}.env[{i}].name", "Required value"))
    resources = _object(c.get("resources"), f"{path}.resources", errs)
    for key in ("requests", "limits"):
        _validate_resource_list(resources.get(key), f"{path}.resources.{key}", errs)


def _validate_resource_list(value: object, path: str, errs: list[FieldError]) -> None:
    for k, v in _object(value, path, errs).items():
        if not isinstance(k, str) or not k:
            errs.append(FieldError(f"{path}[{path_key(k)}]", "Invalid value: must be a resource name"))
        elif not quantity.is_valid(v):
            errs.append(
                FieldError(f"{path}[{path_key(k)}]", f"Invalid value: {quote(v)}: must be a quantity")
            )


def _validate_main_container(
    job: MPIJob, rtype: str, c: Mapping[str, Any], path: str, errs: list[FieldError]
) -> None:
    mounts = c.get("volumeMounts")
    if not isinstance(mounts, list):
        return
    taken = {job.spec.ssh_auth_mount_path.rstrip("/")}
    if rtype == names.LAUNCHER:
        taken.add(names.CONFIG_MOUNT_PATH)
    for i, m in enumerate(mounts):
        if not isinstance(m, Mapping):
            continue
        mount_path = m.get("mountPath")
        if not isinstance(mount_path, str) or not mount_path:
            errs.append(FieldError(f"{path}.volumeMounts[{i}].mountPath", "Required value"))
        elif mount_path.rstrip("/") in taken:
            errs.append(
                FieldError(
                    f"{path}.volumeMounts[{i}].mountPath",
                    f"Invalid value: {quote(mount_path)}: must be unique (the operator mounts there)",
                )
            )
