"""What the MPI controller hands the generic engine, as data: its field manager and per-kind policy.

Kubernetes' own rules for the kinds we render (docs/architecture.md): Pods and the SSH Secret
create-only (labels and annotations may change); the launcher Job takes only ``suspend`` and, while
suspended and not started, the scheduling directives; ConfigMap, Service (knowing its server defaults),
both PodGroup kinds and Kubernetes' Workload and PodGroup patched in place; creates in dependency order,
deletes in the reverse one.
"""

from __future__ import annotations

from typing import Final

import attrs

import render
from reconcile.engine.executor import CreateRules
from reconcile.engine.policy import CREATE_ONLY, JOB_POLICY, PATCH, SERVICE_POLICY, Policy
from reconcile.mpijob.kinds import SCHED_PLUGINS_PODGROUP, VOLCANO_PODGROUP
from reconcile.runtime.kube import CONFIGMAP, JOB, POD, SECRET, SERVICE, Resource, resource_for
from render import names

FIELD_MANAGER: Final = "mpijob-operator"
# The source component of the Events about MPIJobs, and the leader-election Lease's name (upstream's both).
EVENT_COMPONENT: Final = "mpi-job-controller"
LOCK_NAME: Final = "mpi-operator"

# What the pods refer to, created before them (and together, below).
_REFERRED: Final = (
    "ServiceAccount",
    "Role",
    "RoleBinding",
    "Service",
    "ConfigMap",
    "Secret",
    "Workload",
    "PodGroup",
)

POLICY: Final = Policy(
    field_manager=FIELD_MANAGER,
    kinds={
        # Rendered for as long as the job lives and deleted with it by the garbage collector: never
        # deleted by us, so the ClusterRole grants no delete of them (the SSH Secret is: one that lost
        # its key material is replaced).
        ("", "ConfigMap"): attrs.evolve(PATCH, deletes=False),
        ("", "Service"): attrs.evolve(SERVICE_POLICY, deletes=False),
        ("scheduling.volcano.sh", "PodGroup"): PATCH,
        ("scheduling.x-k8s.io", "PodGroup"): PATCH,
        # Kubernetes' gang: patched in place where the version lets minCount change; where it cannot,
        # render leaves an outdated object out and it comes back as desired
        (names.WORKLOAD_GROUP, "Workload"): PATCH,
        (names.WORKLOAD_GROUP, "PodGroup"): PATCH,
        ("", "Pod"): CREATE_ONLY,
        ("", "Secret"): CREATE_ONLY,
        ("batch", "Job"): attrs.evolve(JOB_POLICY, deletes=False),
    },
    order=(*_REFERRED, "Pod", "Job"),
)

# A create the API server finds Invalid (422) can never succeed: the job fails with the server's field
# path. The launcher Job comes last and only once every other create succeeded (no launcher while its
# workers cannot exist); the first failed create stops the rest (retried with back-off, as upstream); and
# nothing is created while a foreign object holds a wanted name. The objects the pods refer to (Service,
# ConfigMap, Secret, the gang's Workload or PodGroup) go out at once, then the first worker, then the other
# workers at once (a bad template fails once), then the launcher: four round trips per job instead of
# 4 + workers.
CREATE_RULES: Final = CreateRules(
    permanent_codes=frozenset({422}),
    last_kinds=frozenset({"Job"}),
    stop_on_failure=True,
    none_while_conflicts=True,
    concurrency=16,
    together=(frozenset(_REFERRED),),
)


# The label every child carries: the child informers watch only these.
CHILD_SELECTOR: Final = f"{names.LABEL_OPERATOR_NAME}={names.OPERATOR_NAME}"


def gang_resources(config: render.Config) -> tuple[Resource, ...]:
    """The kinds of the job's gang-scheduling children: a PodGroup, or those of the served Workload API."""
    if config.gang_scheduling == names.KUBERNETES_GANG:
        return tuple(resource_for(config.workload_api, kind) for kind in render.gang_kinds(config))
    if not config.gang_scheduling:
        return ()
    return (VOLCANO_PODGROUP if config.gang_scheduling == names.VOLCANO else SCHED_PLUGINS_PODGROUP,)


def child_resources(config: render.Config) -> tuple[Resource, ...]:
    """Every kind of child the job may have with this configuration."""
    return (POD, SERVICE, CONFIGMAP, SECRET, JOB, *gang_resources(config))


def reads_priority_classes(config: render.Config) -> bool:
    """A PodGroup's minResources weighs pods by PriorityClass (Volcano, scheduler-plugins); Kubernetes'
    Workload API has no such field."""
    return bool(config.gang_scheduling) and config.gang_scheduling != names.KUBERNETES_GANG
