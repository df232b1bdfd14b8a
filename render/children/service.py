"""The headless Service `<job>` that gives the launcher and every worker a DNS name."""

from __future__ import annotations

from typing import Any

from render import names
from render.api import MPIJob
from render.children.common import object_meta


def service(job: MPIJob) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": object_meta(job, job.name, names.object_labels(job.name)),
        "spec": {
            "clusterIP": "None",
            "selector": {names.LABEL_JOB_NAME: job.name, names.LABEL_OPERATOR_NAME: names.OPERATOR_NAME},
            # Names exist from the pod's IP on, not from Ready: hydra's proxies (MPICH, Intel) on the
            # workers connect back to the launcher by name while it is not Ready yet (its init container,
            # the gate, waits for that name), and a launcher that is also a worker must resolve itself
            # (#703). Reachability is the gate's job (ssh), not readiness.
            "publishNotReadyAddresses": True,
        },
    }
