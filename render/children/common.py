"""Metadata and pod-spec pieces shared by several children."""

from __future__ import annotations

from typing import Any

from render import names
from render.api import Config, MPIJob
from render.children import workload
from render.jsonutil import clone


def object_meta(job: MPIJob, name: str, labels: dict[str, str] | None = None) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name, "namespace": job.namespace}
    if labels:
        meta["labels"] = labels
    meta["ownerReferences"] = [job.owner_reference()]
    return meta


def search_domain(job: MPIJob, config: Config) -> str:
    """`<job>.<ns>.svc.<domain>`: lets Intel MPI and MPICH resolve short names (upstream hard-codes it)."""
    return f"{job.name}.{job.namespace}.svc.{config.cluster_domain or names.DEFAULT_CLUSTER_DOMAIN}"


def pod_template_parts(template: dict[str, Any]) -> tuple[dict[str, str], dict[str, str], dict[str, Any]]:
    """Copies of the template's labels, annotations and pod spec."""
    meta = template.get("metadata") or {}
    return (
        dict(meta.get("labels") or {}),
        dict(meta.get("annotations") or {}),
        clone(template.get("spec") or {}),
    )


def decorate_pod_spec(job: MPIJob, spec: dict[str, Any], hostname: str, config: Config) -> dict[str, Any]:
    """Hostname, DNS, SSH mount: what both the launcher and the workers need. Returns container[0]."""
    spec["hostname"] = hostname
    spec["subdomain"] = job.name  # matches the headless Service
    if spec.get("hostNetwork"):
        spec["dnsPolicy"] = "ClusterFirstWithHostNet"
    dns = spec.setdefault("dnsConfig", {})
    searches = dns.setdefault("searches", [])
    domain = search_domain(job, config)
    if domain not in searches:
        searches.append(domain)
    container: dict[str, Any] = spec["containers"][0]
    secret: dict[str, Any] = {
        "secretName": names.ssh_secret_name(job.name),
        "items": [
            {"key": names.SSH_PRIVATE_KEY, "path": "id_rsa"},
            {"key": names.SSH_PUBLIC_KEY, "path": "id_rsa.pub"},
            {"key": names.SSH_PUBLIC_KEY, "path": "authorized_keys"},
        ],
    }
    if job.spec.ssh_auth_mount_path == names.ROOT_SSH_PATH:
        secret["defaultMode"] = 0o600  # sshd's StrictModes; non-root images set StrictModes no
    spec.setdefault("volumes", []).append({"name": names.SSH_VOLUME, "secret": secret})
    container.setdefault("volumeMounts", []).append(
        {"name": names.SSH_VOLUME, "mountPath": job.spec.ssh_auth_mount_path}
    )
    return container


def decorate_gang(
    job: MPIJob,
    spec: dict[str, Any],
    labels: dict[str, str],
    annotations: dict[str, str],
    config: Config,
    *,
    worker: bool,
) -> None:
    if not config.gang_scheduling:
        return
    if config.gang_scheduling == names.KUBERNETES_GANG:
        # Kubernetes' own scheduler: only workers join the gang; the launcher schedules as any pod.
        if worker and workload.wanted(job, config):
            field, value = workload.reference(job, config)
            spec[field] = value
        return
    if config.gang_scheduling == names.VOLCANO:
        spec["schedulerName"] = names.VOLCANO
        annotations[names.VOLCANO_GROUP_ANNOTATION] = job.name
    else:
        spec["schedulerName"] = config.gang_scheduling
        labels[names.SCHED_PLUGINS_GROUP_LABEL] = job.name


def env_var(name: str, value: str) -> dict[str, str]:
    # The API server omits an empty value, so we do too.
    return {"name": name, "value": value} if value else {"name": name}
