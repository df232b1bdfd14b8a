"""L2 end-to-end helpers (the fixtures are in conftest.py): `E2E` (MPIJob helpers in one namespace),
readers of conditions and pods, the operator runner for the mpi-operator ServiceAccount, kubectl, a
second kube-scheduler standing in for a gang scheduler, extra labelled kwok nodes, and `Placements`, which
checks from every pod event that no job's workers are partly placed while another job holds workers.

Launcher pods on kwok succeed after `localcluster.mpijob.dev/delay` (default 1 s); `hold: "true"` keeps one
running until `E2E.release_launcher` removes the annotation from the pod (deploy/local/README.md).
"""

from __future__ import annotations

import contextlib
import copy
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import orjson
import yaml

from localcluster import LocalCluster
from localcluster.nodes import KWOK_NODE_ANNOTATION
from localcluster.operator import OperatorRunner
from localcluster.processes import Proc, free_port, spawn
from reconcile.runtime.kube import (
    CONFIGMAP,
    JOB,
    MPIJOB,
    POD,
    SECRET,
    SERVICE,
    ApiError,
    Kube,
    Resource,
)
from tests.utils import wait_for

REPO = Path(__file__).resolve().parents[2]
SA_USER = "system:serviceaccount:mpi-operator:mpi-operator"
KNOB = "localcluster.mpijob.dev/"
HOLD = {f"{KNOB}hold": "true"}
JOB_NAME_LABEL = "training.kubeflow.org/job-name"
ROLE_LABEL = "training.kubeflow.org/job-role"
POLL = 0.25
TIMEOUT = 60.0


# -- small readers --------------------------------------------------------------------------------------
def conditions(job: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {c["type"]: c for c in (job.get("status") or {}).get("conditions") or []}


def condition_is(job: dict[str, Any], ctype: str, status: str = "True") -> bool:
    c = conditions(job).get(ctype)
    return c is not None and c.get("status") == status


def phase(pod: dict[str, Any]) -> str:
    return str((pod.get("status") or {}).get("phase") or "")


def pod_ready(pod: dict[str, Any]) -> bool:
    return any(
        c.get("type") == "Ready" and c.get("status") == "True"
        for c in (pod.get("status") or {}).get("conditions") or []
    )


def name_of(obj: dict[str, Any]) -> str:
    return str(obj["metadata"]["name"])


def controlled_by(obj: dict[str, Any], uid: str) -> bool:
    return any(
        r.get("controller") and r.get("uid") == uid for r in obj["metadata"].get("ownerReferences") or []
    )


# -- the operator process -------------------------------------------------------------------------------
def operator_runner(cluster: LocalCluster, log_path: Path) -> OperatorRunner:
    """The operator as its own process with a kubeconfig for the mpi-operator ServiceAccount."""
    return OperatorRunner(cluster.write_user_kubeconfig(SA_USER), log_path)


# -- per-test helpers -----------------------------------------------------------------------------------
class E2E:
    """MPIJob helpers in one namespace, with an admin client (the operator alone runs as the SA)."""

    def __init__(self, cluster: LocalCluster, kube: Kube, namespace: str, operator: OperatorRunner) -> None:
        self.cluster = cluster
        self.kube = kube
        self.ns = namespace
        self.operator = operator

    # MPIJobs
    def submit(self, job: dict[str, Any] | str) -> dict[str, Any]:
        body = copy.deepcopy(yaml.safe_load(job) if isinstance(job, str) else job)
        body.setdefault("apiVersion", MPIJOB.api_version)
        body.setdefault("kind", MPIJOB.kind)
        body["metadata"]["namespace"] = self.ns
        return self.kube.create(MPIJOB, self.ns, body)

    def get(self, name: str, res: Resource = MPIJOB) -> dict[str, Any]:
        return self.kube.get(res, self.ns, name)

    def find(self, name: str, res: Resource = MPIJOB) -> dict[str, Any] | None:
        try:
            return self.kube.get(res, self.ns, name)
        except ApiError as err:
            if err.status == 404:
                return None
            raise

    def patch(self, name: str, body: dict[str, Any], res: Resource = MPIJOB) -> dict[str, Any]:
        return self.kube.patch(res, self.ns, name, body)

    def delete(self, name: str, res: Resource = MPIJOB) -> None:
        self.kube.delete(res, self.ns, name)

    # children
    def list(self, res: Resource, selector: str = "") -> list[dict[str, Any]]:
        items = self.kube.list(res, self.ns, labelSelector=selector)["items"]
        return sorted(items, key=name_of)

    def list_pods(self) -> list[dict[str, Any]]:
        return self.list(POD)

    def pods(self, job: str, role: str | None = None) -> list[dict[str, Any]]:
        selector = f"{JOB_NAME_LABEL}={job}" + (f",{ROLE_LABEL}={role}" if role else "")
        return self.list(POD, selector)

    def workers(self, job: str) -> list[dict[str, Any]]:
        return self.pods(job, "worker")

    def launcher_pods(self, job: str) -> list[dict[str, Any]]:
        return self.pods(job, "launcher")

    def config_data(self, job: str) -> dict[str, str]:
        return self.get(f"{job}-config", CONFIGMAP).get("data") or {}

    def release_launcher(self, job: str) -> None:
        """Let held launcher pods finish: kwok's success stage skips pods with the hold annotation."""
        for pod in self.launcher_pods(job):
            if phase(pod) == "Running":
                self.patch(name_of(pod), {"metadata": {"annotations": {f"{KNOB}hold": None}}}, POD)

    # waiting
    def describe(self, job: str | None = None) -> str:
        lines = []
        jobs = [self.find(job)] if job else self.list(MPIJOB)
        for mj in jobs:
            if mj is None:
                lines.append(f"MPIJob {job}: not found")
                continue
            st = mj.get("status") or {}
            lines.append(
                f"MPIJob {name_of(mj)}: startTime={st.get('startTime')} "
                f"completionTime={st.get('completionTime')} replicaStatuses={st.get('replicaStatuses')}"
            )
            for c in st.get("conditions") or []:
                lines.append(f"  {c['type']}={c['status']} {c.get('reason', '')}: {c.get('message', '')}")
        for j in self.list(JOB):
            js = j.get("status") or {}
            conds = [f"{c['type']}={c['status']}/{c.get('reason', '')}" for c in js.get("conditions") or []]
            lines.append(
                f"Job {name_of(j)} suspend={j['spec'].get('suspend')} active={js.get('active')} "
                f"failed={js.get('failed')} succeeded={js.get('succeeded')} {conds}"
            )
        for p in self.list(POD):
            st = p.get("status") or {}
            lines.append(
                f"Pod {name_of(p)} {phase(p)} ready={pod_ready(p)} reason={st.get('reason')} "
                f"node={p['spec'].get('nodeName')} deleting={bool(p['metadata'].get('deletionTimestamp'))}"
            )
        return "\n".join(lines)

    def wait_for(
        self, check: Callable[[], Any], what: str, timeout: float = TIMEOUT, job: str | None = None
    ) -> Any:
        return wait_for(
            check, what, timeout, POLL, describe=lambda: self.describe(job), alive=self.operator.alive
        )

    def wait_condition(
        self, job: str, ctype: str, status: str = "True", timeout: float = TIMEOUT
    ) -> dict[str, Any]:
        def check() -> dict[str, Any] | None:
            mj = self.find(job)
            return mj if mj is not None and condition_is(mj, ctype, status) else None

        return self.wait_for(check, f"MPIJob {job} condition {ctype}={status}", timeout, job)

    def wait_finished(self, job: str, timeout: float = TIMEOUT) -> dict[str, Any]:
        """Upstream's criterion: completionTime set, then Succeeded or Failed."""

        def check() -> dict[str, Any] | None:
            mj = self.find(job)
            if mj is None or not (mj.get("status") or {}).get("completionTime"):
                return None
            return mj if condition_is(mj, "Succeeded") or condition_is(mj, "Failed") else None

        return self.wait_for(check, f"MPIJob {job} finished", timeout, job)

    def wait_gone(self, job: str, timeout: float = TIMEOUT) -> None:
        self.wait_for(lambda: self.find(job) is None, f"MPIJob {job} deleted", timeout, job)

    def children(self, uid: str) -> list[dict[str, Any]]:
        """Everything in the namespace controlled by the MPIJob with this uid, and the launcher pods."""
        out = []
        for res in (POD, SERVICE, CONFIGMAP, SECRET, JOB):
            out += [o | {"kind": res.kind} for o in self.list(res) if controlled_by(o, uid)]
        jobs = {o["metadata"]["uid"] for o in out if o["kind"] == "Job"}
        out += [p | {"kind": "Pod"} for p in self.list(POD) if any(controlled_by(p, j) for j in jobs)]
        return out


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
