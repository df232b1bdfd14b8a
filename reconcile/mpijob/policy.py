"""What the MPI controller hands the generic engine, as data: its field manager and per-kind policy.

DESIGN §3.4 in Kubernetes' own rules for the kinds we render: Pods and the SSH Secret create-only
(labels and annotations may change); the launcher Job takes only ``suspend`` and, while suspended and
not started, the scheduling directives; ConfigMap, Service (knowing its server defaults) and both
PodGroup kinds patched in place; the Workload create-only; creates in dependency order, deletes in the
reverse one.
"""

from __future__ import annotations

from typing import Final

import render
from reconcile.engine.executor import CreateRules
from reconcile.engine.policy import CREATE_ONLY, JOB_POLICY, PATCH, SERVICE_POLICY, Policy
from reconcile.runtime.kube import SCHED_PLUGINS_PODGROUP, VOLCANO_PODGROUP, Resource, resource_for
from render import names

FIELD_MANAGER: Final = "mpijob-operator"

POLICY: Final = Policy(
    field_manager=FIELD_MANAGER,
    kinds={
        ("", "ConfigMap"): PATCH,
        ("", "Service"): SERVICE_POLICY,
        ("scheduling.volcano.sh", "PodGroup"): PATCH,
        ("scheduling.x-k8s.io", "PodGroup"): PATCH,
        # its pod groups are immutable: render leaves an outdated one out, and it comes back as desired
        (names.WORKLOAD_GROUP, "Workload"): CREATE_ONLY,
        ("", "Pod"): CREATE_ONLY,
        ("", "Secret"): CREATE_ONLY,
        ("batch", "Job"): JOB_POLICY,
    },
    order=(
        "ServiceAccount",
        "Role",
        "RoleBinding",
        "Service",
        "ConfigMap",
        "Secret",
        "PodGroup",
        "Workload",
        "Pod",
        "Job",
    ),
)

# A create the API server finds Invalid (422) can never succeed: the job fails with the server's field
# path. The launcher Job comes last and only once every other create succeeded (no launcher while its
# workers cannot exist); the first failed create stops the rest (retried with back-off, as upstream); and
# nothing is created while a foreign object holds a wanted name. The objects the pods refer to (Service,
# ConfigMap, Secret, PodGroup) go out at once, then the first worker, then the other workers at once (a
# bad template fails once), then the launcher: four round trips per job instead of 4 + workers.
CREATE_RULES: Final = CreateRules(
    permanent_codes=frozenset({422}),
    last_kinds=frozenset({"Job"}),
    stop_on_failure=True,
    none_while_conflicts=True,
    concurrency=16,
    together=(
        frozenset(
            {
                "ServiceAccount",
                "Role",
                "RoleBinding",
                "Service",
                "ConfigMap",
                "Secret",
                "PodGroup",
                "Workload",
            }
        ),
    ),
)


# The label every child carries: the child informers watch only these.
CHILD_SELECTOR: Final = f"{names.LABEL_OPERATOR_NAME}={names.OPERATOR_NAME}"


def gang_resource(config: render.Config) -> Resource | None:
    """The kind of the job's gang-scheduling child: a PodGroup, or the Workload of the served version."""
    if config.gang_scheduling == names.KUBERNETES_GANG:
        return resource_for(config.workload_api, "Workload") if config.workload_api else None
    if not config.gang_scheduling:
        return None
    return VOLCANO_PODGROUP if config.gang_scheduling == names.VOLCANO else SCHED_PLUGINS_PODGROUP
