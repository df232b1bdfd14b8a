"""Which Workload API version the API server serves (--gang-scheduling=kubernetes).

Discovered by group-version, never by server version: feature gates and --runtime-config decide it.
"""

from __future__ import annotations

from reconcile.runtime.kube import ApiError, Kube
from render import names


def served_workload_api(kube: Kube) -> str:
    """The newest version of names.WORKLOAD_API_VERSIONS the API server serves, "" if none."""
    try:
        group = kube.request("GET", f"/apis/{names.WORKLOAD_GROUP}")
    except ApiError as err:
        if err.status == 404:
            return ""
        raise
    served = {v.get("groupVersion") for v in group.get("versions") or () if isinstance(v, dict)}
    return next((gv for gv in names.WORKLOAD_API_VERSIONS if gv in served), "")
