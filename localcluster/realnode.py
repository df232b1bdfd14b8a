"""MPIJobs on the real nodes (`localcluster --tier real`), for the L4 tests and the node benchmarks:
upstream's e2e base job (`localcluster.jobs.pi_job`) with the locally imported images and requests that
fit the machine (2 CPUs), readers of the program's own output, and `NodeE2E`, the E2E helpers plus what
only a real node has: logs, events and restarts."""

from __future__ import annotations

import contextlib
import re
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from localcluster.cluster import ClusterSpec
from localcluster.e2e import E2E, apply_base, name_of, newest, operator_runner
from localcluster.images.build import image_names
from localcluster.jobs import containers_of, pi_job
from localcluster.kubectl import kubectl
from localcluster.operator import OperatorRunner
from localcluster.sandbox import RealCluster
from localcluster.sandbox.layout import NODE_LABEL
from reconcile.runtime.kube import EVENT, NODE

IMPLS = {"openmpi": "OpenMPI", "openmpi-nonroot": "OpenMPI", "mpich": "MPICH", "intel": "Intel"}
# Launcher and workers together must fit 2 CPUs (the machine's real capacity).
RESOURCES = {"requests": {"cpu": "300m", "memory": "256Mi"}, "limits": {"cpu": "1", "memory": "1Gi"}}
RANK_LINE = re.compile(r"^rank (\d+) of (\d+) on (\S+)$", re.M)
PI_LINE = re.compile(r"^pi is approximately (\d+\.\d+)$", re.M)
JOB_TIMEOUT = 240.0


@contextlib.contextmanager
def real_node_operator(work_prefix: str) -> Iterator[tuple[RealCluster, OperatorRunner, Path]]:
    """A cluster with one real node and no kwok nodes (`localcluster --tier real`), deploy/base-no-operator
    applied and the operator running as its own process; a fresh work directory (`work_prefix`) for its
    log and the caller's files. Both stopped afterwards."""
    began = time.monotonic()
    cluster = RealCluster(ClusterSpec(tier="real", nodes=0, startup_timeout=180))
    cluster.start()
    print(f"cluster with the real node up in {time.monotonic() - began:.1f} s", flush=True)
    work = Path(tempfile.mkdtemp(prefix=work_prefix))
    op = operator_runner(cluster, work / "operator.log")
    try:
        apply_base(cluster)
        op.start()
        yield cluster, op, work
    finally:
        op.stop()
        cluster.stop()


def node_job(impl: str, name: str = "pi", **kw: Any) -> dict[str, Any]:
    """pi_job for one implementation key of `localcluster images` (openmpi, openmpi-nonroot, mpich,
    intel), placed on the real node with the locally imported image."""
    root = kw.pop("root", impl != "openmpi-nonroot")
    job = pi_job(name, impl=IMPLS[impl], root=root, **kw)
    image = image_names()[impl]
    on_real_nodes(job)
    for c in containers_of(job):
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


class NodeE2E(E2E):
    """E2E helpers plus what only a real node has: logs and processes."""

    def launcher_log(self, job: str, container: str | None = None) -> str:
        """The newest launcher pod's log (of `container`, else its main one)."""
        pods = self.launcher_pods(job)
        assert pods, f"no launcher pod of {job}\n{self.describe(job)}"
        which = ("-c", container) if container else ()
        return kubectl(self.cluster, "logs", "-n", self.ns, name_of(newest(pods)), *which).stdout

    def gate_log(self, job: str) -> str:
        """The newest launcher pod's wait-for-workers log."""
        return self.launcher_log(job, "wait-for-workers")

    def events(self, job: str) -> list[dict[str, Any]]:
        """Events about the MPIJob `job`."""
        return [
            e
            for e in self.kube.list(EVENT, self.ns)["items"]
            if (e.get("involvedObject") or {}).get("kind") == "MPIJob"
            and (e.get("involvedObject") or {}).get("name") == job
        ]

    def node(self, name: str) -> dict[str, Any]:
        return self.kube.get(NODE, None, name)

    def restarts(self, job: str) -> int:
        return launcher_restarts(self.launcher_pods(job))

    def run(self, body: dict[str, Any], timeout: float = JOB_TIMEOUT) -> tuple[dict[str, Any], str]:
        """Submit, wait until finished, return (MPIJob, the launcher's log)."""
        name = body["metadata"]["name"]
        self.submit(body)
        job = self.wait_finished(name, timeout)
        print(f"[l4] {name}: launcher restarts {self.restarts(name)}")
        return job, self.launcher_log(name)
