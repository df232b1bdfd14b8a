"""L2 end-to-end fixtures: the session's local cluster with `deploy/base-no-operator` installed, the
operator as its own process under the mpi-operator ServiceAccount's RBAC (never admin), and helpers to
submit MPIJobs and wait for them.

- `operator` (session): the running operator; `operator.restart("--gang-scheduling=volcano")` restarts it
  with other flags, `with operator.flags(...)` restores the default flags afterwards. Its log since the
  start of a failed test is attached to the test report.
- `e2e` (per test): `submit`, `wait_condition`, `wait_for`, `pods`, `describe` ... in a fresh namespace.
- `pi_job(...)`: upstream's e2e base job (`pi`, 2 workers) for Open MPI, Intel or MPICH, root or not.

Launcher pods on kwok succeed after `localcluster.mpijob.dev/delay` (default 1 s); `hold: "true"` keeps one
running until `E2E.release_launcher` removes the annotation from the pod (deploy/local/README.md).
"""

from __future__ import annotations

import contextlib
import copy
import os
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from localcluster import LocalCluster
from localcluster.cluster import wait_for_crds
from localcluster.nodes import KWOK_NODE_ANNOTATION
from localcluster.processes import Proc, free_port, spawn
from reconcile.kube import (
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

REPO = Path(__file__).resolve().parents[2]
CRDS_DIR = Path(__file__).resolve().parent / "crds"
SA_USER = "system:serviceaccount:mpi-operator:mpi-operator"
KNOB = "localcluster.mpijob.dev/"
HOLD = {f"{KNOB}hold": "true"}
JOB_NAME_LABEL = "training.kubeflow.org/job-name"
ROLE_LABEL = "training.kubeflow.org/job-role"
POLL = 0.25
TIMEOUT = 60.0


# -- MPIJob manifests -----------------------------------------------------------------------------------
IMAGES = {
    "OpenMPI": "mpioperator/mpi-pi:openmpi",
    "Intel": "mpioperator/mpi-pi:intel",
    "MPICH": "mpioperator/mpi-pi:mpich",
}


def pi_job(
    name: str = "pi",
    *,
    impl: str = "OpenMPI",
    workers: int | None = 2,
    root: bool = True,
    launcher_annotations: dict[str, str] | None = None,
    worker_annotations: dict[str, str] | None = None,
    run_policy: dict[str, Any] | None = None,
    **spec: Any,
) -> dict[str, Any]:
    """Upstream's e2e base job: `mpirun -n 2 /home/mpiuser/pi` on `workers` sshd workers.

    Root Open MPI workers get no command (the operator defaults it to `sshd -De`); non-root jobs mount the
    SSH key at /home/mpiuser/.ssh and run as uid 1000; Intel and MPICH use the image entrypoint and a
    TCP readiness probe on :2222, as upstream's examples do. `workers=None` leaves the Worker spec out.
    """
    image = IMAGES[impl]
    security: dict[str, Any] = {} if root else {"runAsUser": 1000}
    if impl == "OpenMPI":
        mpirun = ["-n", "2", "/home/mpiuser/pi"]
        if root:
            mpirun = ["--allow-run-as-root", *mpirun]
        launcher_container: dict[str, Any] = {"command": ["mpirun"], "args": mpirun}
    else:
        launcher_container = {"args": ["mpirun", "-n", "2", "/home/mpiuser/pi"]}
    launcher_container.update(name="launcher", image=image)
    if security:
        launcher_container["securityContext"] = dict(security)

    worker_container: dict[str, Any] = {"name": "worker", "image": image}
    sshd = ["/usr/sbin/sshd", "-De"]
    if not root:
        sshd += ["-f", "/home/mpiuser/.sshd_config"]
    if impl != "OpenMPI":
        worker_container["args"] = sshd
        worker_container["readinessProbe"] = {"tcpSocket": {"port": 2222}, "initialDelaySeconds": 2}
    elif not root:
        worker_container["command"] = sshd
    if not root:
        worker_container["securityContext"] = {
            **security,
            "capabilities": {"add": ["NET_BIND_SERVICE"]},
        }

    def template(container: dict[str, Any], annotations: dict[str, str] | None) -> dict[str, Any]:
        tmpl: dict[str, Any] = {"spec": {"containers": [container]}}
        if annotations:
            tmpl["metadata"] = {"annotations": dict(annotations)}
        return tmpl

    replica_specs: dict[str, Any] = {
        "Launcher": {
            "replicas": 1,
            "restartPolicy": "OnFailure",
            "template": template(launcher_container, launcher_annotations),
        }
    }
    if workers is not None:
        replica_specs["Worker"] = {
            "replicas": workers,
            "template": template(worker_container, worker_annotations),
        }
    body: dict[str, Any] = {
        "slotsPerWorker": 1,
        "mpiImplementation": impl,
        "runPolicy": {"cleanPodPolicy": "Running", **(run_policy or {})},
        "mpiReplicaSpecs": replica_specs,
    }
    if not root:
        body["sshAuthMountPath"] = "/home/mpiuser/.ssh"
    body.update(spec)
    return {"apiVersion": "kubeflow.org/v2beta1", "kind": "MPIJob", "metadata": {"name": name}, "spec": body}


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
class OperatorProcess:
    """`python -m reconcile` with a kubeconfig for the mpi-operator ServiceAccount; we own its PID."""

    def __init__(self, cluster: LocalCluster, log_path: Path) -> None:
        self.cluster = cluster
        self.kubeconfig = cluster.write_user_kubeconfig(SA_USER)
        self.log_path = log_path
        self.port = 0
        self.flags_now: tuple[str, ...] = ()
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self, *flags: str) -> OperatorProcess:
        self.port = free_port()  # probes and /metrics; never the fixed 8080 other runs may hold
        argv = [
            sys.executable,
            "-m",
            "reconcile",
            f"--kubeconfig={self.kubeconfig}",
            f"--monitoring-port={self.port}",
            "--bind-address=127.0.0.1",
            "--log-format=text",
            *flags,
        ]
        env = {**os.environ, "PYTHONPATH": str(REPO)}
        env.pop("KUBECONFIG", None)
        with self.log_path.open("ab") as log:
            log.write(f"\n=== e2e: starting operator: {' '.join(argv[2:])}\n".encode())
            log.flush()
            self.proc = subprocess.Popen(
                argv, stdout=log, stderr=subprocess.STDOUT, cwd=REPO, env=env, start_new_session=True
            )
        self.flags_now = flags
        self.wait_ready()
        return self

    def stop(self, timeout: float = 20) -> None:
        proc, self.proc = self.proc, None
        if proc is None or proc.poll() is not None:
            return
        # Its own session: the group id is our child's pid.
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()

    def restart(self, *flags: str) -> OperatorProcess:
        self.stop()
        return self.start(*flags)

    @contextlib.contextmanager
    def flags(self, *flags: str) -> Iterator[OperatorProcess]:
        """Run with other flags inside the block, with the previous ones again afterwards."""
        previous = self.flags_now
        self.restart(*flags)
        try:
            yield self
        finally:
            self.restart(*previous)

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def http(self, path: str) -> tuple[int, str]:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.port}{path}", timeout=5) as resp:
                return resp.status, resp.read().decode()
        except urllib.error.HTTPError as err:
            return err.code, ""
        except OSError:
            return 0, ""

    def metric(self, name: str) -> float:
        code, body = self.http("/metrics")
        if code != 200:
            return float("nan")
        total = 0.0
        for line in body.splitlines():
            if line.startswith(name + " ") or line.startswith(name + "{"):
                total += float(line.rsplit(" ", 1)[1])
        return total

    def wait_ready(self, timeout: float = 60) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if not self.alive():
                raise RuntimeError(f"the operator exited during startup:\n{self.log_tail()}")
            if self.http("/readyz")[0] == 200 and self.metric("mpi_operator_is_leader") == 1:
                return
            time.sleep(POLL)
        raise RuntimeError(f"the operator did not lead and sync within {timeout}s:\n{self.log_tail()}")

    def log_size(self) -> int:
        try:
            return self.log_path.stat().st_size
        except OSError:
            return 0

    def log_since(self, offset: int, limit: int = 40_000) -> str:
        with self.log_path.open("rb") as f:
            f.seek(offset)
            text = f.read().decode(errors="replace")
        return text if len(text) <= limit else "...\n" + text[-limit:]

    def log_tail(self, limit: int = 8000) -> str:
        return self.log_since(max(0, self.log_size() - limit), limit)


def kubectl(cluster: LocalCluster, *args: str) -> str:
    out = subprocess.run(
        ["kubectl", *args], env={**os.environ, **cluster.env()}, capture_output=True, text=True, timeout=120
    )
    if out.returncode != 0:
        raise RuntimeError(f"kubectl {' '.join(args)} failed:\n{out.stdout}\n{out.stderr}")
    return out.stdout


@pytest.fixture(scope="session")
def e2e_cluster(l2_cluster: LocalCluster) -> LocalCluster:
    """The session's L2 cluster with the CRD, namespace and RBAC of deploy/base-no-operator applied."""
    kubectl(l2_cluster, "apply", "--server-side", "-k", str(REPO / "deploy" / "base-no-operator"))
    with l2_cluster.api_client() as api:
        wait_for_crds(api, ["mpijobs.kubeflow.org"])
    return l2_cluster


@pytest.fixture(scope="session")
def podgroup_crds(e2e_cluster: LocalCluster) -> None:
    """Minimal PodGroup CRDs of scheduler-plugins and Volcano (tests/e2e/crds/)."""
    kubectl(e2e_cluster, "apply", "--server-side", "-f", str(CRDS_DIR))
    with e2e_cluster.api_client() as api:
        wait_for_crds(api, ["podgroups.scheduling.x-k8s.io", "podgroups.scheduling.volcano.sh"])


@pytest.fixture(scope="session")
def operator(
    e2e_cluster: LocalCluster, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[OperatorProcess]:
    op = OperatorProcess(e2e_cluster, tmp_path_factory.mktemp("operator") / "operator.log")
    op.start()
    try:
        yield op
    finally:
        op.stop()


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Iterator[None]:
    outcome = yield
    report = outcome.get_result()
    op: OperatorProcess | None = getattr(item, "_e2e_operator", None)
    if op is not None and report.failed:
        offset = getattr(item, "_e2e_log_offset", 0)
        report.sections.append(("operator log since the test began", op.log_since(offset)))


@pytest.fixture(autouse=True)
def _attach_operator_log(request: pytest.FixtureRequest) -> None:
    if "operator" in request.fixturenames:
        op = request.getfixturevalue("operator")
        request.node._e2e_operator = op
        request.node._e2e_log_offset = op.log_size()


# -- per-test helpers -----------------------------------------------------------------------------------
class E2E:
    """MPIJob helpers in one namespace, with an admin client (the operator alone runs as the SA)."""

    def __init__(self, cluster: LocalCluster, kube: Kube, namespace: str, operator: OperatorProcess) -> None:
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
        deadline = time.monotonic() + timeout
        last: Any = None
        while True:
            last = check()
            if last:
                return last
            if time.monotonic() > deadline:
                break
            if not self.operator.alive():
                raise AssertionError(f"the operator died while waiting for {what}")
            time.sleep(POLL)
        raise AssertionError(
            f"timed out after {timeout:.0f}s waiting for {what} (last: {last!r})\n{self.describe(job)}"
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


@pytest.fixture
def kube(e2e_cluster: LocalCluster) -> Iterator[Kube]:
    api = e2e_cluster.api_client()
    try:
        yield Kube(api, qps=0)
    finally:
        api.close()


@pytest.fixture
def e2e(e2e_cluster: LocalCluster, kube: Kube, namespace: str, operator: OperatorProcess) -> E2E:
    if not operator.alive():  # a crashed operator would fail every later test: start it again
        operator.start(*operator.flags_now)
    return E2E(e2e_cluster, kube, namespace, operator)


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
def labelled_node(kube: Kube, name: str, labels: dict[str, str]) -> Iterator[str]:
    """One more kwok fake node carrying `labels`; deleted afterwards."""
    cap = {"cpu": "32", "memory": "256Gi", "pods": "110"}
    body = {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": name,
            "annotations": {KWOK_NODE_ANNOTATION: "fake"},
            "labels": {"type": "kwok", "kubernetes.io/os": "linux", "kubernetes.io/hostname": name, **labels},
        },
        "spec": {},
        "status": {"capacity": cap, "allocatable": dict(cap)},
    }
    node = Resource("v1", "Node", "nodes", namespaced=False)
    kube.create(node, None, body)
    try:
        yield name
    finally:
        with contextlib.suppress(ApiError):
            kube.delete(node, None, name)
