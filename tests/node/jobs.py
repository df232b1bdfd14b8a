"""MPIJobs for the real node: upstream's e2e base job (tests/utils.py `pi_job`) with the local
images, requests that fit the machine (2 CPUs), and readers for the program's own output."""

from __future__ import annotations

import re
from typing import Any

from localcluster.images.build import image_names
from localcluster.sandbox import NODE_LABEL
from tests.utils import pi_job

IMPLS = {"openmpi": "OpenMPI", "openmpi-nonroot": "OpenMPI", "mpich": "MPICH", "intel": "Intel"}
# Launcher and workers together must fit 2 CPUs (the machine's real capacity).
RESOURCES = {"requests": {"cpu": "300m", "memory": "256Mi"}, "limits": {"cpu": "1", "memory": "1Gi"}}
RANK_LINE = re.compile(r"^rank (\d+) of (\d+) on (\S+)$", re.M)
PI_LINE = re.compile(r"^pi is approximately (\d+\.\d+)$", re.M)


def node_job(impl: str, name: str = "pi", **kw: Any) -> dict[str, Any]:
    """pi_job for one implementation key of `localcluster images` (openmpi, openmpi-nonroot, mpich,
    intel), placed on the real node with the locally imported image."""
    root = kw.pop("root", impl != "openmpi-nonroot")
    job = pi_job(name, impl=IMPLS[impl], root=root, **kw)
    image = image_names()[impl]
    on_real_nodes(job)
    for spec in job["spec"]["mpiReplicaSpecs"].values():
        for c in spec["template"]["spec"]["containers"]:
            c.update(image=image, imagePullPolicy="Never", resources=RESOURCES)
    return job


def on_real_nodes(job: dict[str, Any]) -> dict[str, Any]:
    """The job's pods kept off any node that is not a real one."""
    for spec in job["spec"]["mpiReplicaSpecs"].values():
        spec["template"]["spec"]["nodeSelector"] = {NODE_LABEL: "true"}
    return job


def launcher(job: dict[str, Any]) -> dict[str, Any]:
    return job["spec"]["mpiReplicaSpecs"]["Launcher"]["template"]["spec"]["containers"][0]


def set_mpirun_args(job: dict[str, Any], *args: str) -> None:
    """Replace `-n 2 /home/mpiuser/pi` in the launcher's mpirun arguments."""
    c = launcher(job)
    key = "args"
    old = c[key]
    keep = [a for a in old if a in ("mpirun", "--allow-run-as-root")]
    c[key] = [*keep, *args]


def rank_hosts(log: str) -> dict[int, str]:
    """rank -> host, from the `rank R of N on HOST` lines pi prints."""
    return {int(m.group(1)): m.group(3) for m in RANK_LINE.finditer(log)}


def pi_value(log: str) -> float | None:
    m = PI_LINE.search(log)
    return float(m.group(1)) if m else None


def launcher_restarts(pods: list[dict[str, Any]]) -> int:
    """Container restarts of all launcher pods, plus each launcher pod beyond the first."""
    restarts = sum(
        cs.get("restartCount", 0)
        for p in pods
        for cs in (p.get("status") or {}).get("containerStatuses") or []
    )
    return restarts + max(0, len(pods) - 1)
