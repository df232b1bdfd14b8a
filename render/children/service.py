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
            # The launcher must resolve itself before it is Ready when it is also a worker (#703).
            "publishNotReadyAddresses": job.run_launcher_as_worker,
        },
    }
