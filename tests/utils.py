"""Helpers shared by the test tiers (no fixtures: those are in the tiers' conftest.py files).

* ``kubectl``: the one way to run kubectl against a local cluster (a failure raises ``KubectlFailed``);
* ``wait_for``: the one poll-until-true loop; ``Versions``: every version a watch sees, where a poll
  would miss one;
* ``Polling``: the one background poll (a step every 0.2 s while a block runs);
* ``pi_job``: the pi MPIJob as users run it, derived from ``examples/pi.yaml``; ``minimal_job``: the
  smallest valid MPIJob, for checks of the API and the differ (every other builder starts from one of them);
* ``PODGROUP_CRDS``: the one source of the PodGroup CRDs (``tests/crds/``);
* ``api_writes``: the operator's API writes (its ``/metrics``), for "no writes" assertions.
"""

from __future__ import annotations

import copy
import subprocess
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import yaml

from localcluster.operator import OperatorRunner
from render.timeutil import parse_time

REPO = Path(__file__).resolve().parents[1]
EXAMPLES = REPO / "examples"
CRDS_DIR = Path(__file__).resolve().parent / "crds"
PODGROUP_CRD_FILES = sorted(CRDS_DIR.glob("*-podgroup.yaml"))
WRITE_VERBS = frozenset({"create", "update", "patch", "delete", "deletecollection"})


class KubectlFailed(AssertionError):
    def __init__(self, args: tuple[str, ...], proc: subprocess.CompletedProcess[str]) -> None:
        super().__init__(f"kubectl {' '.join(args)} exited {proc.returncode}:\n{proc.stdout}\n{proc.stderr}")
        self.proc = proc


def kubectl(
    cluster: Any, *args: str, stdin: str | None = None, kubeconfig: Path | None = None
) -> subprocess.CompletedProcess[str]:
    """The cluster's Go-built kubectl, as admin unless `kubeconfig` is given. A non-zero exit raises
    KubectlFailed; read `.stdout` (and `.stderr` for warnings) of what it returns."""
    env = cluster.env()
    if kubeconfig is not None:
        env["KUBECONFIG"] = str(kubeconfig)
    argv = [str(cluster.bin_dir / "kubectl"), *args]
    proc = subprocess.run(argv, input=stdin, capture_output=True, text=True, env=env, timeout=180)
    if proc.returncode != 0:
        raise KubectlFailed(args, proc)
    return proc


# A finalizer of the tests' own: it keeps a deleted object readable, so a test reads when it was deleted
# from its deletionTimestamp instead of from how busy the machine was when it looked.
TEST_FINALIZER = "mpijob.dev/test-keep"


def seconds_between(start: Any, end: Any) -> float:
    """Seconds from one object timestamp (text or datetime) to another."""
    a, b = parse_time(start), parse_time(end)
    assert a is not None and b is not None, (start, end)
    return (b - a).total_seconds()


# The kubernetes client's list call of each kind Versions watches.
_WATCHED = {"Pod": ("CoreV1Api", "list_namespaced_pod"), "Job": ("BatchV1Api", "list_namespaced_job")}


class Versions:
    """Every version of a namespace's objects of `kinds` ("Pod", "Job"), from one watch per kind in a
    thread: what polls would miss (a pod failed and replaced, a child deleted and created again, between
    two reads). `listed`: entering waits for each watch's initial list (the namespace has such objects)."""

    def __init__(self, cluster: Any, namespace: str, kinds: tuple[str, ...] = ("Pod",), listed: bool = False):
        from kubernetes import client, watch

        self.versions: list[dict[str, Any]] = []
        self.errors: list[BaseException] = []
        self._api = cluster.api_client()
        self._listed = listed
        self._stopping = False
        self._watches: list[tuple[str, Any, Callable[..., Any], threading.Event]] = []
        for kind in kinds:
            api_class, method = _WATCHED[kind]
            list_fn = getattr(getattr(client, api_class)(self._api), method)
            self._watches.append((kind, watch.Watch(), list_fn, threading.Event()))
        self._namespace = namespace

    def _run(self, kind: str, w: Any, list_fn: Callable[..., Any], seen: threading.Event) -> None:
        try:
            for event in w.stream(list_fn, self._namespace, _request_timeout=900):
                self.versions.append({**self._api.sanitize_for_serialization(event["object"]), "kind": kind})
                seen.set()
        except Exception as exc:
            if not self._stopping:
                self.errors.append(exc)

    def of(self, kind: str, name: str) -> list[dict[str, Any]]:
        return [v for v in list(self.versions) if v["kind"] == kind and v["metadata"]["name"] == name]

    def __enter__(self) -> Versions:
        for args in self._watches:
            threading.Thread(target=self._run, args=args, daemon=True).start()
        for kind, _, _, seen in self._watches if self._listed else ():
            assert seen.wait(30), f"the {kind} watch sent nothing in 30 s"
        return self

    def __exit__(self, *exc: object) -> None:
        self._stopping = True
        for _, w, _, _ in self._watches:
            w.stop()
        self._api.close()
        if exc[0] is None:
            assert not self.errors, f"a watch failed: {self.errors}"


def wait_for(
    check: Callable[[], Any],
    what: str,
    timeout: float = 30.0,
    interval: float = 0.1,
    *,
    describe: Callable[[], str] | None = None,
    alive: Callable[[], bool] | None = None,
    ignore: Callable[[BaseException], bool] | None = None,
) -> Any:
    """Poll ``check`` until it returns something true (returned) or ``timeout`` passes (AssertionError
    with the last value and ``describe()``). ``alive``: fail at once when it turns false (the operator
    died); ``ignore``: exceptions of ``check`` to treat as "not yet" (default: a 404, not there yet)."""
    ignore = ignore or not_found
    deadline = time.monotonic() + timeout
    last: Any = None
    while True:
        try:
            last = check()
        except Exception as exc:
            if not ignore(exc):
                raise
            last = exc
        else:
            if last:
                return last
        if time.monotonic() > deadline:
            break
        if alive is not None and not alive():
            raise AssertionError(f"the operator died while waiting for {what}")
        time.sleep(interval)
    detail = f"\n{describe()}" if describe is not None else ""
    raise AssertionError(f"timed out after {timeout:.0f}s waiting for {what}; last: {last!r}{detail}")


class Polling:
    """Calls ``step`` every ``interval`` seconds in a thread while the ``with`` block runs: for what
    lasts too briefly to be caught between a test's own steps. ``step`` handles its own errors."""

    def __init__(self, step: Callable[[], None], interval: float = 0.2) -> None:
        self._step = step
        self._interval = interval
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while True:
            self._step()
            if self._stop.wait(self._interval):
                return

    def __enter__(self) -> Polling:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(5)


def not_found(exc: BaseException) -> bool:
    """An API error 404 (``reconcile.runtime.kube.ApiError`` or the official client's ``ApiException``)."""
    return getattr(exc, "status", None) == 404


def podgroup_crds() -> list[dict[str, Any]]:
    """Minimal stand-ins for the PodGroup CRDs of Volcano and scheduler-plugins."""
    return [yaml.safe_load(f.read_text()) for f in PODGROUP_CRD_FILES]


def example(name: str) -> list[dict[str, Any]]:
    """The objects of examples/<name>.yaml, in their order."""
    return [d for d in yaml.safe_load_all((EXAMPLES / f"{name}.yaml").read_text()) if d]


def example_pi() -> dict[str, Any]:
    (job,) = example("pi")
    return job


IMAGES = {
    "OpenMPI": "mpioperator/mpi-pi:openmpi",
    "Intel": "mpioperator/mpi-pi:intel",
    "MPICH": "mpioperator/mpi-pi:mpich",
}
SSHD = ["/usr/sbin/sshd", "-De"]


def minimal_job(
    name: str = "pi",
    workers: int | None = 2,
    *,
    image: str = "mpi:latest",
    containers: tuple[str, str] = ("launcher", "worker"),
    launcher_replicas: int | None = None,
    namespace: str | None = None,
    uid: str | None = None,
    **spec: Any,
) -> dict[str, Any]:
    """The smallest valid MPIJob: one container per role with only a name and an image (no Worker spec
    when `workers` is None); `spec` keys set as given."""

    def replica(container: str) -> dict[str, Any]:
        return {"template": {"spec": {"containers": [{"name": container, "image": image}]}}}

    launcher = replica(containers[0])
    if launcher_replicas is not None:
        launcher = {"replicas": launcher_replicas, **launcher}
    specs: dict[str, Any] = {"Launcher": launcher}
    if workers is not None:
        specs["Worker"] = {"replicas": workers, **replica(containers[1])}
    meta: dict[str, Any] = {"name": name}
    meta |= {"namespace": namespace} if namespace is not None else {}
    meta |= {"uid": uid} if uid is not None else {}
    return {
        "apiVersion": "kubeflow.org/v2beta1",
        "kind": "MPIJob",
        "metadata": meta,
        "spec": {**spec, "mpiReplicaSpecs": specs},
    }


def pi_job(
    name: str = "pi",
    *,
    impl: str = "OpenMPI",
    root: bool = False,
    workers: int | None = 2,
    resources: bool = True,
    launcher_annotations: dict[str, str] | None = None,
    worker_annotations: dict[str, str] | None = None,
    run_policy: dict[str, Any] | None = None,
    **spec: Any,
) -> dict[str, Any]:
    """``examples/pi.yaml`` (Open MPI, non-root: uid 1000, the SSH key at /home/mpiuser/.ssh, 2 workers,
    limits of 1 CPU and 1Gi), changed as asked:

    * ``root``: upstream's e2e base job: no securityContext or sshAuthMountPath, ``--allow-run-as-root``,
      Open MPI workers without a command (the operator defaults it to ``sshd -De``);
    * ``impl`` Intel or MPICH: their image, the image entrypoint for the launcher (``args``) and the
      workers (sshd as ``args``), and a TCP readiness probe on :2222, as upstream's examples do;
    * ``workers`` (None: no Worker spec), ``resources=False`` (no limits), pod-template annotations,
      ``run_policy`` merged into the example's, other ``spec`` keys set.
    """
    job = copy.deepcopy(example_pi())
    job["metadata"]["name"] = name
    body = job["spec"]
    specs = body["mpiReplicaSpecs"]
    launcher = specs["Launcher"]["template"]["spec"]["containers"][0]
    worker = specs["Worker"]["template"]["spec"]["containers"][0]
    sshd_args = worker["args"]  # -De -f /home/mpiuser/.sshd_config
    for container in (launcher, worker):
        container["image"] = IMAGES[impl]
        if root:
            container.pop("securityContext", None)
        if not resources:
            container.pop("resources", None)
    if root:
        body.pop("sshAuthMountPath", None)
        sshd_args = ["-De"]
    if impl == "OpenMPI":
        if root:
            launcher["args"] = ["--allow-run-as-root", *launcher["args"]]
            del worker["command"], worker["args"]
    else:
        body["mpiImplementation"] = impl
        launcher["args"] = [*launcher.pop("command"), *launcher["args"]]
        worker["args"] = [*worker.pop("command"), *sshd_args]
        worker["readinessProbe"] = {"tcpSocket": {"port": 2222}, "initialDelaySeconds": 2}
    for role, notes in (("Launcher", launcher_annotations), ("Worker", worker_annotations)):
        if notes:
            specs[role]["template"].setdefault("metadata", {})["annotations"] = dict(notes)
    if workers is None:
        del specs["Worker"]
    else:
        specs["Worker"]["replicas"] = workers
    body["runPolicy"].update(run_policy or {})
    body.update(spec)
    return job


def api_writes(op: OperatorRunner) -> float:
    """The operator's API writes (events included), without its Lease renewals."""
    return sum(
        value
        for (name, labels), value in op.metrics().items()
        if name == "mpi_operator_api_requests_total"
        and dict(labels).get("verb") in WRITE_VERBS
        and dict(labels).get("kind") != "Lease"
    )


def controller_uid(obj: dict[str, Any]) -> str | None:
    for ref in obj["metadata"].get("ownerReferences") or []:
        if ref.get("controller"):
            return str(ref["uid"])
    return None


NUDGE = "test.mpijob.dev/nudge"


def processed_after_nudge(
    kube: Any, op: OperatorRunner, namespace: str, name: str, timeout: float | None = None
) -> None:
    """Timing-free "nothing happened": give the MPIJob a later event (an annotation nobody reads) and wait
    until the operator has finished a sync of that version or a newer one (``/debug/synced``). Whatever
    the operator would do about the earlier state, it has done by then; no sleeping. A sync holding a
    write back has not finished: the default timeout covers the longest hold."""
    from reconcile.mpijob.decide import UNREAD_HOSTS_SECONDS
    from reconcile.runtime.kube import MPIJOB

    if timeout is None:
        timeout = UNREAD_HOSTS_SECONDS + 30

    patched = kube.patch(MPIJOB, namespace, name, {"metadata": {"annotations": {NUDGE: str(time.time_ns())}}})
    wanted = int(patched["metadata"]["resourceVersion"])

    def synced() -> bool:
        code, body = op.http(f"/debug/synced?key={namespace}/{name}")
        return code == 200 and int(body.strip() or 0) >= wanted

    wait_for(
        synced, f"the operator to process MPIJob {namespace}/{name} at resourceVersion {wanted}", timeout
    )


def has_condition(obj: dict[str, Any], ctype: str, status: str = "True", reason: str | None = None) -> bool:
    """Whether ``obj``'s status has condition ``ctype`` with ``status`` (and ``reason``, if given)."""
    for c in (obj.get("status") or {}).get("conditions") or []:
        if c.get("type") == ctype:
            return c.get("status") == status and (reason is None or c.get("reason") == reason)
    return False
