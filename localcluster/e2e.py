"""MPIJobs driven end to end on a local cluster, as the tests and the benchmarks do: deploy/base-no-operator
applied, the operator as its own process under the mpi-operator ServiceAccount, `E2E` (MPIJob helpers in
one namespace) and readers of conditions and pods.

Launcher pods on kwok succeed after `localcluster.mpijob.dev/delay` (default 1 s); `hold: "true"` keeps one
running until `E2E.release_launcher` removes the annotation from the pod (deploy/local/README.md).
"""

from __future__ import annotations

import contextlib
import copy
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import yaml

from localcluster.cluster import LocalCluster, wait_for_crds, wait_for_default_service_account
from localcluster.kubectl import kubectl
from localcluster.operator import OperatorRunner
from localcluster.wait import wait_for
from reconcile.mpijob.kinds import MPIJOB
from reconcile.runtime.kube import CONFIGMAP, JOB, POD, SECRET, SERVICE, ApiError, Kube, Resource

REPO = Path(__file__).resolve().parents[1]
SA_USER = "system:serviceaccount:mpi-operator:mpi-operator"
MPIJOB_CRD = "mpijobs.kubeflow.org"
KNOB = "localcluster.mpijob.dev/"
HOLD = {f"{KNOB}hold": "true"}
JOB_NAME_LABEL = "training.kubeflow.org/job-name"
ROLE_LABEL = "training.kubeflow.org/job-role"
POLL = 0.25
TIMEOUT = 60.0


# -- small readers --------------------------------------------------------------------------------------
def conditions(job: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {c["type"]: c for c in (job.get("status") or {}).get("conditions") or []}


def condition_is(
    obj: dict[str, Any] | None, ctype: str, status: str = "True", reason: str | None = None
) -> bool:
    """Whether `obj` (None: not there) has condition `ctype` with `status` (and `reason`, if given)."""
    c = conditions(obj).get(ctype) if obj is not None else None
    return c is not None and c.get("status") == status and (reason is None or c.get("reason") == reason)


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


def newest(objects: list[dict[str, Any]]) -> dict[str, Any]:
    """The object created last (the launcher pod a restart made)."""
    return max(objects, key=lambda o: o["metadata"]["creationTimestamp"])


# -- the cluster and the operator process ---------------------------------------------------------------
def apply_base(cluster: LocalCluster) -> None:
    """deploy/base-no-operator applied (the CRD, the operator's namespace and RBAC), and the CRD served."""
    kubectl(cluster, "apply", "--server-side", "-k", str(REPO / "deploy" / "base-no-operator"))
    with contextlib.closing(cluster.api_client()) as api:
        wait_for_crds(api, [MPIJOB_CRD])


@contextlib.contextmanager
def running_with_base(cluster: LocalCluster) -> Iterator[LocalCluster]:
    """`cluster` started with deploy/base-no-operator applied (`apply_base`); stopped afterwards."""
    cluster.start()
    try:
        apply_base(cluster)
        yield cluster
    finally:
        cluster.stop()


def create_namespace(core: Any, name: str, labels: dict[str, str] | None = None, pods: bool = True) -> str:
    """A new namespace (a `kubernetes.client.CoreV1Api` makes it); `pods`: wait until pods can be created
    in it (its default ServiceAccount exists: never on L1, which has no controllers)."""
    core.create_namespace({"metadata": {"name": name, **({"labels": labels} if labels else {})}})
    if pods:
        wait_for_default_service_account(core, name)
    return name


def operator_runner(cluster: LocalCluster, log_path: Path) -> OperatorRunner:
    """The operator as its own process with a kubeconfig for the mpi-operator ServiceAccount."""
    return OperatorRunner(cluster.write_user_kubeconfig(SA_USER), log_path)


# -- per-namespace helpers ------------------------------------------------------------------------------
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
