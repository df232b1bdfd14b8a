"""Kueue tier helpers (the fixtures are in conftest.py): the session's nodes, flavors, topology and
priority classes, `queued_job`, readers of Kueue's objects, and `KueueE2E`, the E2E helpers plus the test's
ClusterQueue/LocalQueue and its Workloads.
"""

from __future__ import annotations

import contextlib
import copy
import time
from collections.abc import Iterator
from typing import Any

from localcluster import LocalCluster
from localcluster.e2e import E2E, HOLD, condition_is, name_of, phase
from localcluster.jobs import containers_of, pi_job
from localcluster.kueue import Kueue, KueueSpec
from localcluster.nodes import fake_node
from localcluster.operator import OperatorRunner
from reconcile.runtime.kube import JOB, ApiError, Kube, Resource

KUEUE_API = "kueue.x-k8s.io/v1beta2"
CLUSTER_QUEUE = Resource(KUEUE_API, "ClusterQueue", "clusterqueues", namespaced=False)
LOCAL_QUEUE = Resource(KUEUE_API, "LocalQueue", "localqueues")
RESOURCE_FLAVOR = Resource(KUEUE_API, "ResourceFlavor", "resourceflavors", namespaced=False)
TOPOLOGY = Resource(KUEUE_API, "Topology", "topologies", namespaced=False)
PRIORITY_CLASS = Resource(KUEUE_API, "WorkloadPriorityClass", "workloadpriorityclasses", namespaced=False)
WORKLOAD = Resource(KUEUE_API, "Workload", "workloads")

QUEUE = "queue"
QUEUE_LABEL = "kueue.x-k8s.io/queue-name"
PRIORITY_LABEL = "kueue.x-k8s.io/priority-class"
JOB_UID_LABEL = "kueue.x-k8s.io/job-uid"
POOL = "mpijob.dev/pool"
RACK = "mpijob.dev/rack"
HOSTNAME = "kubernetes.io/hostname"
RACKS = 2
RACK_SIZE = 4
RACK_NODE_CPU = "4"


def pool_taint(pool: str) -> dict[str, str]:
    return {"key": POOL, "value": pool, "effect": "NoSchedule"}


def rack_node(rack: int, index: int) -> str:
    return f"rack-{rack}-{index}"


def kueue_nodes() -> list[dict[str, Any]]:
    small = {"cpu": "8", "memory": "64Gi", "pods": "110"}
    nodes = [
        fake_node(f"pool-{p}-{i}", small, labels={POOL: p}, taints=[pool_taint(p)])
        for p in ("a", "b")
        for i in range(2)
    ]
    rack_cap = {"cpu": RACK_NODE_CPU, "memory": "64Gi", "pods": "110"}
    nodes += [
        fake_node(
            rack_node(r, i), rack_cap, labels={POOL: "tas", RACK: f"rack-{r}"}, taints=[pool_taint("tas")]
        )
        for r in range(RACKS)
        for i in range(RACK_SIZE)
    ]
    return nodes


def _flavor(name: str, pool: str | None = None, topology: str | None = None) -> dict[str, Any]:
    spec: dict[str, Any] = {}
    if pool:
        spec = {
            "nodeLabels": {POOL: pool},
            "nodeTaints": [pool_taint(pool)],
            "tolerations": [{"key": POOL, "operator": "Equal", "value": pool, "effect": "NoSchedule"}],
        }
    if topology:
        spec["topologyName"] = topology
    return {"apiVersion": KUEUE_API, "kind": "ResourceFlavor", "metadata": {"name": name}, "spec": spec}


SESSION_OBJECTS: list[tuple[Resource, dict[str, Any]]] = [
    (RESOURCE_FLAVOR, _flavor("plain")),
    (RESOURCE_FLAVOR, _flavor("pool-a", "a")),
    (RESOURCE_FLAVOR, _flavor("pool-b", "b")),
    (
        TOPOLOGY,
        {
            "apiVersion": KUEUE_API,
            "kind": "Topology",
            "metadata": {"name": "racks"},
            "spec": {"levels": [{"nodeLabel": RACK}, {"nodeLabel": HOSTNAME}]},
        },
    ),
    (RESOURCE_FLAVOR, _flavor("tas", "tas", topology="racks")),
    *[
        (
            PRIORITY_CLASS,
            {"apiVersion": KUEUE_API, "kind": "WorkloadPriorityClass", "metadata": {"name": n}, "value": v},
        )
        for n, v in (("low", 100), ("high", 1000))
    ],
]


@contextlib.contextmanager
def running_kueue(
    cluster: LocalCluster, objects: list[tuple[Resource, dict[str, Any]]], spec: KueueSpec | None = None
) -> Iterator[Kueue]:
    """Kueue started on `cluster` with `objects` (cluster-scoped: flavors, topologies, priority classes)
    created; stopped afterwards."""
    kq = Kueue(cluster, spec).start()
    try:
        with contextlib.closing(cluster.api_client()) as api:
            kube = Kube(api, qps=0)
            for res, body in objects:
                kube.create(res, None, body)
        yield kq
    finally:
        kq.stop()


def queued_job(
    name: str,
    *,
    workers: int = 2,
    cpu: str = "1",
    hold: bool = True,
    priority: str | None = None,
    queue: str = QUEUE,
    launcher_annotations: dict[str, str] | None = None,
    worker_annotations: dict[str, str] | None = None,
    **spec: Any,
) -> dict[str, Any]:
    """The pi job for LocalQueue `queue`, every pod requesting `cpu`, created unsuspended (Kueue's
    webhook suspends it). `hold` keeps the launcher running until `release_launcher`."""
    launcher_ann = {**(HOLD if hold else {}), **(launcher_annotations or {})}
    job = pi_job(
        name, workers=workers, launcher_annotations=launcher_ann, worker_annotations=worker_annotations
    )
    job["metadata"]["labels"] = {QUEUE_LABEL: queue}
    if priority:
        job["metadata"]["labels"][PRIORITY_LABEL] = priority
    for container in containers_of(job):
        container["resources"] = {"requests": {"cpu": cpu}}
    job["spec"].update(spec)
    return job


def suspended(job: dict[str, Any] | None) -> bool:
    return job is not None and bool(((job.get("spec") or {}).get("runPolicy") or {}).get("suspend"))


def active_replicas(job: dict[str, Any]) -> dict[str, int]:
    statuses = (job.get("status") or {}).get("replicaStatuses") or {}
    return {role: int((st or {}).get("active") or 0) for role, st in statuses.items()}


class Timeline:
    """Seconds since the start, per event, for the measured timelines in docs/kueue.md."""

    def __init__(self) -> None:
        self.t0 = time.monotonic()
        self.events: list[tuple[float, str]] = []

    def mark(self, what: str) -> None:
        self.events.append((time.monotonic() - self.t0, what))

    def __str__(self) -> str:
        return "\n".join(f"{t:6.1f}s  {what}" for t, what in self.events)


class KueueE2E(E2E):
    """E2E helpers plus the test's ClusterQueue/LocalQueue and its Workloads."""

    def __init__(
        self, cluster: LocalCluster, kube: Kube, namespace: str, operator: OperatorRunner, kueue: Kueue
    ):
        super().__init__(cluster, kube, namespace, operator)
        self.kueue = kueue
        self.op_offset = operator.log_size()
        self.cq = namespace
        self.queues_made = False

    # queues
    def queue(
        self,
        flavors: list[tuple[str, str]],
        *,
        strategy: str = "BestEffortFIFO",
        preemption: dict[str, Any] | None = None,
    ) -> str:
        """ClusterQueue `<namespace>` with one resource group over cpu: `flavors` as (flavor, quota) in
        order; LocalQueue "queue" pointing at it. Returns the ClusterQueue's name."""
        spec: dict[str, Any] = {
            "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": self.ns}},
            "queueingStrategy": strategy,
            "resourceGroups": [
                {
                    "coveredResources": ["cpu"],
                    "flavors": [
                        {"name": f, "resources": [{"name": "cpu", "nominalQuota": quota}]}
                        for f, quota in flavors
                    ],
                }
            ],
        }
        if preemption:
            spec["preemption"] = preemption
        self.kube.create(
            CLUSTER_QUEUE,
            None,
            {"apiVersion": KUEUE_API, "kind": "ClusterQueue", "metadata": {"name": self.cq}, "spec": spec},
        )
        self.queues_made = True
        self.kube.create(
            LOCAL_QUEUE,
            self.ns,
            {
                "apiVersion": KUEUE_API,
                "kind": "LocalQueue",
                "metadata": {"name": QUEUE, "namespace": self.ns},
                "spec": {"clusterQueue": self.cq},
            },
        )
        self.wait_for(self._queue_active, f"ClusterQueue {self.cq} and LocalQueue {QUEUE} active", timeout=30)
        return self.cq

    def _queue_active(self) -> bool:
        cq = self.kube.get(CLUSTER_QUEUE, None, self.cq)
        lq = self.kube.get(LOCAL_QUEUE, self.ns, QUEUE)
        return condition_is(cq, "Active") and condition_is(lq, "Active")

    def cleanup(self) -> None:
        if self.queues_made:
            with contextlib.suppress(ApiError):
                self.kube.delete(CLUSTER_QUEUE, None, self.cq)

    def usage(self) -> dict[str, float]:
        """cpu reserved in the ClusterQueue, per flavor (status.flavorsReservation)."""
        cq = self.kube.get(CLUSTER_QUEUE, None, self.cq)
        out = {}
        for flavor in (cq.get("status") or {}).get("flavorsReservation") or []:
            for res in flavor.get("resources") or []:
                if res.get("name") == "cpu":
                    out[flavor["name"]] = _cpu(res.get("total", "0"))
        return out

    def used(self) -> float:
        return sum(self.usage().values())

    def wait_quota(self, cpu: float, timeout: float = 30) -> None:
        """Kueue writes the ClusterQueue's status asynchronously, a moment after admitting or finishing."""
        self.wait_for(lambda: self.used() == cpu, f"{cpu} cpu reserved in ClusterQueue {self.cq}", timeout)

    # workloads
    def workload(self, job: str) -> dict[str, Any] | None:
        mj = self.find(job)
        if mj is None:
            return None
        items = self.kube.list(WORKLOAD, self.ns, labelSelector=f"{JOB_UID_LABEL}={mj['metadata']['uid']}")[
            "items"
        ]
        items = [w for w in items if not w["metadata"].get("deletionTimestamp")]
        return items[0] if items else None

    def admitted_flavor(self, job: str) -> str | None:
        """The flavor of the Worker (else the first) pod set, if the job's Workload is admitted."""
        wl = self.workload(job)
        if not condition_is(wl, "Admitted"):
            return None
        assignments = wl["status"]["admission"]["podSetAssignments"]
        chosen = next((a for a in assignments if a["name"] == "Worker"), assignments[0])
        return str(chosen["flavors"]["cpu"])

    def wait_admitted(self, job: str, flavor: str | None = None, timeout: float = 60) -> dict[str, Any]:
        def check() -> dict[str, Any] | None:
            got = self.admitted_flavor(job)
            if got is None or (flavor is not None and got != flavor):
                return None
            return self.workload(job)

        return self.wait_for(
            check, f"Workload of {job} admitted" + (f" on {flavor}" if flavor else ""), timeout, job
        )

    def wait_workload(self, job: str, ctype: str, timeout: float = 60) -> dict[str, Any]:
        return self.wait_for(
            lambda: (wl := self.workload(job)) is not None and condition_is(wl, ctype) and wl,
            f"Workload of {job} {ctype}=True",
            timeout,
            job,
        )

    def set_active(self, job: str, active: bool) -> None:
        wl = self.workload(job)
        assert wl is not None, f"no Workload for {job}"
        self.kube.patch(WORKLOAD, self.ns, name_of(wl), {"spec": {"active": active}})

    # pods
    def nodes_of(self, job: str) -> dict[str, str]:
        """pod name -> node for the job's launcher and workers that are not being deleted."""
        return {
            name_of(p): str(p["spec"].get("nodeName") or "")
            for p in self.pods(job)
            if not p["metadata"].get("deletionTimestamp")
        }

    def running(self, job: str) -> bool:
        """Launcher and every wanted worker Running, and the MPIJob Running=True."""
        mj = self.find(job)
        if mj is None or not condition_is(mj, "Running"):
            return False
        replicas = mj["spec"]["mpiReplicaSpecs"].get("Worker", {}).get("replicas", 0)
        workers = [
            p
            for p in self.workers(job)
            if phase(p) == "Running" and not p["metadata"].get("deletionTimestamp")
        ]
        launchers = [p for p in self.launcher_pods(job) if phase(p) == "Running"]
        return len(workers) == replicas and len(launchers) == 1

    def wait_running(self, job: str, timeout: float = 60) -> dict[str, Any]:
        return self.wait_for(lambda: self.running(job) and self.get(job), f"{job} running", timeout, job)

    def stopped(self, job: str) -> bool:
        """Suspended as Kueue and upstream mean it: no pods, launcher Job suspended, every active 0."""
        mj = self.find(job)
        if not suspended(mj) or self.pods(job):
            return False
        launcher = self.find(f"{job}-launcher", JOB)
        if launcher is not None and not launcher["spec"].get("suspend"):
            return False
        return not any(active_replicas(mj).values())

    def wait_stopped(self, job: str, timeout: float = 60) -> dict[str, Any]:
        return self.wait_for(
            lambda: self.stopped(job) and self.get(job),
            f"{job} suspended with no pods and active 0",
            timeout,
            job,
        )

    def describe_workloads(self) -> str:
        lines = []
        for wl in self.kube.list(WORKLOAD, self.ns)["items"]:
            conds = [
                f"{c['type']}={c['status']}/{c.get('reason', '')}"
                for c in (wl.get("status") or {}).get("conditions") or []
            ]
            lines.append(f"Workload {name_of(wl)} active={wl['spec'].get('active', True)} {conds}")
        with contextlib.suppress(ApiError):
            lines.append(f"ClusterQueue {self.cq} usage={self.usage()}")
        return "\n".join(lines)

    def describe(self, job: str | None = None) -> str:
        return super().describe(job) + "\n" + self.describe_workloads()


def _cpu(quantity: str) -> float:
    q = str(quantity)
    return float(q[:-1]) / 1000 if q.endswith("m") else float(q)


def with_template_annotations(job: dict[str, Any], role: str, annotations: dict[str, str]) -> dict[str, Any]:
    job = copy.deepcopy(job)
    template = job["spec"]["mpiReplicaSpecs"][role]["template"]
    template.setdefault("metadata", {}).setdefault("annotations", {}).update(annotations)
    return job
