"""L2 end-to-end helpers of the tests alone (the fixtures are in conftest.py; `E2E`, the operator runner
and the readers of conditions and pods, which the benchmarks use too, are in `localcluster.e2e`): a second
kube-scheduler standing in for a gang scheduler, extra labelled kwok nodes, and `Placements`, which
checks from every pod event that no job's workers are partly placed while another job holds workers;
``shipped``, an object of deploy/ as kustomize builds it.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson
import yaml

from localcluster import LocalCluster
from localcluster.e2e import E2E, JOB_NAME_LABEL, ROLE_LABEL
from localcluster.nodes import KWOK_NODE_ANNOTATION
from localcluster.processes import Proc, free_port, spawn
from reconcile.runtime.kube import POD, ApiError, Kube, Resource
from tools.manifests import DEPLOY, build


def shipped(kind: str, name: str) -> dict[str, Any]:
    """The one object of ``kind`` and ``name`` the default install (deploy/) holds."""
    (found,) = [o for o in build(DEPLOY) if (o["kind"], o["metadata"]["name"]) == (kind, name)]
    return found


# -- stand-ins for the cluster's gang schedulers --------------------------------------------------------
@contextlib.contextmanager
def extra_scheduler(
    cluster: LocalCluster, scheduler_names: tuple[str, ...], work_dir: Path
) -> Iterator[Proc]:
    """A second kube-scheduler that serves `scheduler_names` (e.g. "volcano"), the way a gang scheduler
    takes the pods whose schedulerName it owns. It binds pods one by one: it does not model gang
    admission (minMember, minResources); a test keeps pods Pending by not starting it yet."""
    work_dir.mkdir(parents=True, exist_ok=True)
    config = work_dir / "scheduler.yaml"
    config.write_text(
        yaml.safe_dump(
            {
                "apiVersion": "kubescheduler.config.k8s.io/v1",
                "kind": "KubeSchedulerConfiguration",
                "clientConnection": {"kubeconfig": str(cluster.kubeconfig)},
                "leaderElection": {"leaderElect": False},
                "profiles": [{"schedulerName": n} for n in scheduler_names],
            }
        )
    )
    kc = str(cluster.kubeconfig)
    proc = spawn(
        "kube-scheduler-" + "-".join(scheduler_names),
        [
            str(Path(str(cluster.bin_dir)) / "kube-scheduler"),
            f"--config={config}",
            f"--authentication-kubeconfig={kc}",
            f"--authorization-kubeconfig={kc}",
            "--bind-address=127.0.0.1",
            f"--secure-port={free_port()}",
            f"--cert-dir={work_dir}",
        ],
        work_dir / "scheduler.log",
        detached=False,
    )
    try:
        time.sleep(0.5)
        if not proc.alive():
            raise RuntimeError(f"the extra kube-scheduler exited:\n{proc.log_tail()}")
        yield proc
    finally:
        proc.stop()


# -- extra kwok nodes -----------------------------------------------------------------------------------
@contextlib.contextmanager
def labelled_node(
    kube: Kube, name: str, labels: dict[str, str], taints: list[dict[str, str]] | None = None
) -> Iterator[str]:
    """One more kwok fake node carrying `labels` (and `taints`); deleted afterwards."""
    cap = {"cpu": "32", "memory": "256Gi", "pods": "110"}
    body = {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": name,
            "annotations": {KWOK_NODE_ANNOTATION: "fake"},
            "labels": {"type": "kwok", "kubernetes.io/os": "linux", "kubernetes.io/hostname": name, **labels},
        },
        "spec": {"taints": list(taints)} if taints else {},
        "status": {"capacity": cap, "allocatable": dict(cap)},
    }
    node = Resource("v1", "Node", "nodes", namespaced=False)
    kube.create(node, None, body)
    try:
        yield name
    finally:
        with contextlib.suppress(ApiError):
            kube.delete(node, None, name)


# -- gang placement, from every pod event ----------------------------------------------------------
class Placements:
    """Every pod event of a namespace, in the watch's order, and what it shows about the workers'
    placement. A job is partly placed while some but not all of its workers are bound (terminating ones
    do not count); the gang rule is broken when a job is partly placed while another job holds bound
    workers: the partial placement that lets two jobs block each other, which a gang prevents."""

    def __init__(self, kube: Kube, namespace: str, workers: dict[str, int]) -> None:
        self.kube = kube
        self.namespace = namespace
        self.workers = workers  # job -> its worker count
        self.pods: dict[str, dict[str, Any]] = {}  # uid -> pod
        self.bound_ever: dict[str, set[str]] = {job: set() for job in workers}  # job -> worker names
        self.violations: list[str] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._ready = threading.Event()
        self._lock = threading.Lock()

    def __enter__(self) -> Placements:
        self._thread.start()
        assert self._ready.wait(10), "the pod watch did not start"
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(15)

    def _run(self) -> None:
        listed = self.kube.list(POD, self.namespace)
        for pod in listed["items"]:
            self._on(pod, deleted=False)
        rv = listed["metadata"]["resourceVersion"]
        self._ready.set()
        while not self._stop.is_set():
            query = {"watch": "true", "resourceVersion": rv, "timeoutSeconds": 5}
            for line in self.kube.stream_lines(POD.path(self.namespace), query, (5, 15)):
                event = orjson.loads(line)
                pod = event["object"]
                if event["type"] == "ERROR":
                    raise AssertionError(f"pod watch failed: {pod}")
                rv = pod["metadata"]["resourceVersion"]
                if event["type"] != "BOOKMARK":
                    self._on(pod, deleted=event["type"] == "DELETED")

    def _on(self, pod: dict[str, Any], deleted: bool) -> None:
        meta = pod["metadata"]
        labels = meta.get("labels") or {}
        job = labels.get(JOB_NAME_LABEL)
        if labels.get(ROLE_LABEL) != "worker" or job not in self.workers:
            return
        with self._lock:
            self._record(pod, job, deleted)

    def _record(self, pod: dict[str, Any], job: str, deleted: bool) -> None:
        meta = pod["metadata"]
        if deleted:
            self.pods.pop(meta["uid"], None)
        else:
            self.pods[meta["uid"]] = pod
            if pod["spec"].get("nodeName"):
                self.bound_ever[job].add(meta["name"])
        self._check(f"{'DELETED' if deleted else 'event'} {meta['name']}")

    def bound(self, job: str) -> int:
        with self._lock:
            return self._bound(job)

    def _bound(self, job: str) -> int:
        """The job's bound workers that are not terminating (a terminating one is on its way out)."""
        return sum(
            1
            for p in self.pods.values()
            if p["metadata"]["labels"][JOB_NAME_LABEL] == job
            and p["spec"].get("nodeName")
            and not p["metadata"].get("deletionTimestamp")
        )

    def _check(self, what: str) -> None:
        for job, count in self.workers.items():
            bound = self._bound(job)
            if not 0 < bound < count:
                continue
            others = {o: n for o in self.workers if o != job and (n := self._bound(o))}
            if others:
                self.violations.append(
                    f"after {what}: {job} has {bound}/{count} workers bound while {others}"
                )


def wait_unschedulable(e2e: E2E, job: str, count: int) -> None:
    """Until the scheduler has said of `count` of the job's workers that they do not fit now."""

    def said() -> bool:
        n = 0
        for pod in e2e.workers(job):
            for c in (pod.get("status") or {}).get("conditions") or ():
                n += c.get("type") == "PodScheduled" and c.get("reason") == "Unschedulable"
        return n >= count

    e2e.wait_for(said, f"{count} workers of {job} found unschedulable", job=job)
