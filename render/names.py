"""Child names, labels, annotations and constants shared by the children and the status."""

from __future__ import annotations

import json
import re

API_VERSION = "kubeflow.org/v2beta1"
KIND = "MPIJob"

OPERATOR_NAME = "mpi-operator"
LABEL_OPERATOR_NAME = "training.kubeflow.org/operator-name"
LABEL_JOB_NAME = "training.kubeflow.org/job-name"
LABEL_JOB_ROLE = "training.kubeflow.org/job-role"
LABEL_REPLICA_INDEX = "training.kubeflow.org/replica-index"
LABEL_APP = "app"

ROLE_LAUNCHER = "launcher"
ROLE_WORKER = "worker"
LAUNCHER = "Launcher"
WORKER = "Worker"

LAUNCHER_SUFFIX = "-launcher"
WORKER_SUFFIX = "-worker"
CONFIG_SUFFIX = "-config"
SSH_SUFFIX = "-ssh"

CONFIG_VOLUME = "mpi-job-config"
CONFIG_MOUNT_PATH = "/etc/mpi"
HOSTFILE_KEY = "hostfile"
DISCOVER_HOSTS_KEY = "discover_hosts.sh"
WAIT_SCRIPT_KEY = "wait_for_workers.sh"
HOSTFILE_PATH = CONFIG_MOUNT_PATH + "/" + HOSTFILE_KEY
SSH_VOLUME = "ssh-auth"
ROOT_SSH_PATH = "/root/.ssh"
SSH_PRIVATE_KEY = "ssh-privatekey"
SSH_PUBLIC_KEY = "ssh-publickey"
SSH_SECRET_TYPE = "kubernetes.io/ssh-auth"
DEFAULT_CLUSTER_DOMAIN = "cluster.local"

VOLCANO = "volcano"
VOLCANO_API_VERSION = "scheduling.volcano.sh/v1beta1"
VOLCANO_GROUP_ANNOTATION = "scheduling.k8s.io/group-name"
VOLCANO_QUEUE_ANNOTATION = "scheduling.volcano.sh/queue-name"
SCHED_PLUGINS_API_VERSION = "scheduling.x-k8s.io/v1alpha1"
SCHED_PLUGINS_GROUP_LABEL = "scheduling.x-k8s.io/pod-group"
# --gang-scheduling=kubernetes: Kubernetes' own scheduler through the Workload API, in the versions render
# knows, newest first (the operator renders the newest one the API server serves).
KUBERNETES_GANG = "kubernetes"
WORKLOAD_GROUP = "scheduling.k8s.io"
WORKLOAD_API_VERSIONS = tuple(f"{WORKLOAD_GROUP}/{v}" for v in ("v1beta1", "v1alpha2", "v1alpha1"))
# The Workload's one pod group: the workers (the launcher is never a member, so WaitForWorkersReady
# cannot deadlock the gang).
WORKLOAD_POD_GROUP = "workers"

# The launcher's init container that waits for every host over SSH, and the annotation that sets its
# timeout in seconds ("0" turns it off).
WAIT_CONTAINER = "wait-for-workers"
SSH_WAIT_ANNOTATION = "mpijob.dev/ssh-wait-timeout-seconds"
# On a replacement worker: its index's failures before it, so the count survives an operator restart.
WORKER_FAILURES_ANNOTATION = "mpijob.dev/worker-failures"
SSH_WAIT_MAX_SECONDS = 2**31 - 1
WAIT_UNREACHABLE_EXIT = 69  # EX_UNAVAILABLE: the wait timed out

MANAGED_BY_SELF = "kubeflow.org/mpi-operator"
MANAGED_BY_MULTIKUEUE = "kueue.x-k8s.io/multikueue"

DNS1035_LABEL = re.compile(r"^[a-z]([-a-z0-9]*[a-z0-9])?$")
DNS1123_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
DNS1123_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
LABEL_VALUE = re.compile(r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$")
LABEL_NAME = re.compile(r"^([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]$")


def launcher_name(job: str) -> str:
    return job + LAUNCHER_SUFFIX


def worker_name(job: str, index: int) -> str:
    return f"{job}{WORKER_SUFFIX}-{index}"


def config_name(job: str) -> str:
    return job + CONFIG_SUFFIX


def ssh_secret_name(job: str) -> str:
    return job + SSH_SUFFIX


def role_selector(job: str, role: str) -> dict[str, str]:
    return {LABEL_JOB_NAME: job, LABEL_JOB_ROLE: role, LABEL_OPERATOR_NAME: OPERATOR_NAME}


def object_labels(job: str) -> dict[str, str]:
    """Labels of the Service, ConfigMap, Secret, launcher Job and PodGroup.

    Upstream sets only `app`; the job-name and operator-name labels let the controller list children by label.
    """
    return {LABEL_APP: job, LABEL_JOB_NAME: job, LABEL_OPERATOR_NAME: OPERATOR_NAME}


def is_dns1035_label(value: str) -> bool:
    return len(value) <= 63 and DNS1035_LABEL.match(value) is not None


def is_dns1123_label(value: str) -> bool:
    return len(value) <= 63 and DNS1123_LABEL.match(value) is not None


def is_dns1123_subdomain(value: str) -> bool:
    return len(value) <= 253 and DNS1123_SUBDOMAIN.match(value) is not None


def is_label_value(value: str) -> bool:
    return len(value) <= 63 and LABEL_VALUE.match(value) is not None


def is_qualified_name(key: str) -> bool:
    """A label or annotation key: optional DNS subdomain prefix, `/`, and a name of at most 63 characters."""
    prefix, sep, name = key.rpartition("/")
    if sep and not (prefix and is_dns1123_subdomain(prefix)):
        return False
    return 0 < len(name) <= 63 and LABEL_NAME.match(name) is not None


def host_fqdn(host: str, job: str, namespace: str, cluster_domain: str) -> str:
    fqdn = f"{host}.{job}.{namespace}.svc"
    return f"{fqdn}.{cluster_domain}" if cluster_domain else fqdn


_PLAIN_KEY = re.compile(r"^[A-Za-z0-9][-A-Za-z0-9_./]*$")


def path_key(key: object) -> str:
    """A map key inside a field path: as is when plain, else JSON-quoted (no newline can forge a line)."""
    if isinstance(key, str) and len(key) <= 253 and _PLAIN_KEY.match(key):
        return key
    return json.dumps(key if isinstance(key, str) else repr(key))[:300]


MAX_NAMED = 8  # names a status message lists before "and N more"


def listed(items: tuple[str, ...] | list[str], sep: str = ", ") -> str:
    """At most MAX_NAMED items joined by ``sep``, then how many more there are."""
    more = len(items) - MAX_NAMED
    return sep.join(items[:MAX_NAMED]) + (f" and {more} more" if more > 0 else "")
