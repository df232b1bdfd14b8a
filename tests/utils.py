"""Helpers shared by the test tiers (no fixtures: those are in the tiers' conftest.py files; what the
benchmarks use too lives in `localcluster`: `kubectl`, `wait_for`, the MPIJob builders, `E2E`).

* the skip and CI switches: ``skip_cluster``, ``skip_without_cluster``, ``SKIP_ENV``, ``CI_ENV``,
  ``NARROWING_ENV``, ``HYPOTHESIS_SEED``;
* what the fixtures are made of: ``namespace_name``, ``operator_for``, ``running_again``;
* ``Versions``: every version a watch sees, where a poll would miss one; ``Polling``: the one background
  poll (a step every 0.2 s while a block runs); ``seconds_between`` object timestamps;
* ``podgroup_crds``: the one source of the PodGroup CRDs (``tests/crds/``);
* ``api_writes``: the operator's API writes (its ``/metrics``), for "no writes" assertions;
  ``processed_after_nudge``: timing-free "nothing happened";
* ``RESTRICTED``, ``PRIVILEGED_POD``, ``assert_own_token_only``: the operator's own pod;
* ``user_client``, ``bind_user``: a client of a user, and a ClusterRole granted to one in a namespace;
* ``runs_last``, ``record_requests``, ``session_requests``: the operator ServiceAccount's requests over
  the whole run, each with the test it came in (the check that the shipped RBAC is all used).
* ``key_forms``, ``leaked``: a private key in every form it could leak in, and which of them a text holds;
  ``secret_refs``: every Secret a pod spec refers to.
"""

from __future__ import annotations

import base64
import bisect
import functools
import os
import re
import secrets
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from localcluster.cluster import LocalCluster
from localcluster.e2e import operator_runner
from localcluster.operator import OperatorRunner
from localcluster.rbacuse import WRITE_VERBS, Request, read_log
from localcluster.wait import wait_for
from reconcile.runtime.kube import Resource
from render.timeutil import parse_time

REPO = Path(__file__).resolve().parents[1]
CRDS_DIR = Path(__file__).resolve().parent / "crds"
PODGROUP_CRD_FILES = sorted(CRDS_DIR.glob("*-podgroup.yaml"))

SKIP_ENV = "MPIJOB_SKIP_CLUSTER"
# Set by .ci/run: CI runs every tier, so a skip request is an error and any skipped test fails the run.
CI_ENV = "MPIJOB_CI"
# Environment knobs that make a test do less (fewer rounds or examples, other flags, record instead of
# compare): for benchmarks and local runs only, refused under CI.
NARROWING_ENV = (
    "MPIJOB_STATUS_ORDER_ROUNDS",
    "MPIJOB_STATUS_ORDER_FLAGS",
    "MPIJOB_FUZZ_EXAMPLES",
    "MPIJOB_FUZZ_COUNT_FILE",
    "MPIJOB_RECORD_DIFFER",
    "RENDER_EXAMPLES",
)
# CI's Hypothesis seed: a failure there reproduces with --hypothesis-seed=<this>. Local runs explore freshly.
HYPOTHESIS_SEED = 20261203
SKIP_REASON = f"--skip-cluster or {SKIP_ENV}=1 given"


def in_ci() -> bool:
    return os.environ.get(CI_ENV, "") not in ("", "0")


def skip_cluster(config: pytest.Config) -> bool:
    """Whether the run skips the tiers that need the Go-built tools or a cluster."""
    return bool(config.getoption("--skip-cluster")) or os.environ.get(SKIP_ENV, "") not in ("", "0")


def skip_without_cluster(config: pytest.Config) -> None:
    """Skip the calling fixture's tests when the run skips the cluster tiers."""
    if skip_cluster(config):
        pytest.skip(SKIP_REASON)


TEST_NAMESPACE_LABELS = {"mpijob.dev/test": "true"}


def namespace_name(test_name: str, prefix: str = "t") -> str:
    """A fresh namespace's name for a test: its name as a DNS label, and a random suffix."""
    slug = re.sub(r"[^a-z0-9]+", "-", test_name.lower()).strip("-")[:40].strip("-")
    return f"{prefix}-{slug}-{secrets.token_hex(3)}"


# A finalizer of the tests' own: it keeps a deleted object readable, so a test reads when it was deleted
# from its deletionTimestamp instead of from how busy the machine was when it looked.
TEST_FINALIZER = "mpijob.dev/test-keep"


def seconds_between(start: Any, end: Any) -> float:
    """Seconds from one object timestamp (text or datetime) to another."""
    a, b = parse_time(start), parse_time(end)
    assert a is not None and b is not None, (start, end)
    return (b - a).total_seconds()


# The kubernetes client's list call of each kind Versions watches by name.
_WATCHED = {
    "Pod": ("CoreV1Api", "list_namespaced_pod"),
    "Job": ("BatchV1Api", "list_namespaced_job"),
    "Service": ("CoreV1Api", "list_namespaced_service"),
    "ConfigMap": ("CoreV1Api", "list_namespaced_config_map"),
    "Secret": ("CoreV1Api", "list_namespaced_secret"),
    "Event": ("CoreV1Api", "list_namespaced_event"),
}


class Versions:
    """Every version of a namespace's objects of `kinds` (the names in _WATCHED, "Pod", "Job" ..., or a
    custom resource's ``Resource``), from one watch per kind in a thread: what polls would miss (a pod
    failed and replaced, a child deleted and created again, between two reads; a deletion shows as a
    version with a new resourceVersion). `listed`: entering waits for each watch's initial list (the
    namespace has such objects)."""

    def __init__(
        self, cluster: Any, namespace: str, kinds: tuple[str | Resource, ...] = ("Pod",), listed: bool = False
    ):
        from kubernetes import client, watch

        self.versions: list[dict[str, Any]] = []
        self.errors: list[BaseException] = []
        self._api = cluster.api_client()
        self._listed = listed
        self._stopping = False
        self._watches: list[tuple[str, Any, Callable[..., Any], threading.Event]] = []
        for kind in kinds:
            if isinstance(kind, Resource):
                custom = client.CustomObjectsApi(self._api).list_namespaced_custom_object
                version = kind.api_version.rpartition("/")[2]
                list_fn: Callable[..., Any] = functools.partial(
                    custom, kind.group, version, plural=kind.plural
                )
                self._watches.append((kind.kind, watch.Watch(), list_fn, threading.Event()))
                continue
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


def podgroup_crds() -> list[dict[str, Any]]:
    """Minimal stand-ins for the PodGroup CRDs of Volcano and scheduler-plugins."""
    return [yaml.safe_load(f.read_text()) for f in PODGROUP_CRD_FILES]


def operator_for(
    cluster: LocalCluster, tmp_path_factory: pytest.TempPathFactory, name: str = "operator"
) -> Iterator[OperatorRunner]:
    """A fixture's operator (`localcluster.e2e.operator_runner`), its log in a fresh directory `name`;
    stopped when the fixture ends."""
    with operator_runner(cluster, tmp_path_factory.mktemp(name) / "operator.log") as op:
        yield op


def running_again(op: OperatorRunner) -> OperatorRunner:
    """A session's operator for the next test: started again if it died (its death failed the test
    during which it died, tests/conftest.py)."""
    if not op.alive():
        op.check()  # raises if that was not told yet
        op.start()
    return op


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
    from reconcile.mpijob.kinds import MPIJOB

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


# -- the operator's requests over the run -------------------------------------------------------------
TEST_STARTS = pytest.StashKey[list[tuple[str, str]]]()  # (UTC start as audit logs write it, test id)
REQUESTS = pytest.StashKey[list[Request]]()  # from the audit logs of clusters already stopped
LAST = "_runs_last"


def runs_last(fn: Callable[..., Any]) -> Callable[..., Any]:
    """Mark a test to run after every other test of the session (tests/conftest.py orders it)."""
    setattr(fn, LAST, True)
    return fn


def audit_now() -> str:
    """Now, formatted as the audit log's requestReceivedTimestamp (so the two sort as text)."""
    from datetime import UTC, datetime

    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def record_requests(config: pytest.Config, audit_log: Path) -> None:
    """Keep the operator's requests of a cluster about to stop, for the end-of-run check."""
    config.stash.setdefault(REQUESTS, []).extend(read_log(audit_log))


def session_requests(config: pytest.Config, *live_logs: Path) -> list[tuple[str, Request]]:
    """Every recorded request (and those of ``live_logs``), with the id of the test that was running."""
    starts = sorted(config.stash.get(TEST_STARTS, []))
    records = [*config.stash.get(REQUESTS, [])]
    for path in live_logs:
        records += read_log(path)
    out = []
    for r in records:
        i = bisect.bisect_right(starts, (r.at, "\uffff")) - 1
        out.append((starts[i][1] if i >= 0 else "", r))
    return out


# -- the operator's own pod ---------------------------------------------------------------------------
RESTRICTED = {
    "pod-security.kubernetes.io/enforce": "restricted",
    "pod-security.kubernetes.io/enforce-version": "latest",
}
PRIVILEGED_POD = {"containers": [{"name": "c", "image": "x", "securityContext": {"privileged": True}}]}
# What the ServiceAccount admission plugin mounts: the account's own token, the cluster CA, the namespace.
TOKEN_SOURCES = frozenset({"serviceAccountToken", "configMap", "downwardAPI"})


def assert_own_token_only(pod: dict[str, Any], account: str = "mpi-operator") -> None:
    """No credential in the pod beyond its own ServiceAccount's token: no Secret volume or variable, no
    host path, one projected token of ``account``."""
    spec = pod["spec"]
    assert spec.get("serviceAccountName") == account, spec.get("serviceAccountName")
    tokens = []
    for volume in spec.get("volumes") or []:
        kinds = set(volume) - {"name"}
        assert kinds in ({"emptyDir"}, {"projected"}), volume
        if "projected" in volume:
            sources = {k for source in volume["projected"]["sources"] for k in source}
            assert sources <= TOKEN_SOURCES, volume
            tokens.append(volume["name"])
    assert len(tokens) <= 1, tokens
    for c in [*(spec.get("initContainers") or []), *spec["containers"]]:
        assert not c.get("envFrom"), c["envFrom"]
        assert all("valueFrom" not in e or "fieldRef" in e["valueFrom"] for e in c.get("env") or []), c["env"]


# A PEM line shorter than this could occur in any text by chance.
MIN_KEY_LINE = 16


def key_forms(private_pem: str) -> dict[str, str]:
    """A private key as a Secret's data holds it (base64), as PEM, and each PEM line of 16 characters or
    more, by a name for assertion messages (which must not print the key): a leak in any form shows as one
    of them."""
    lines = [
        line for line in private_pem.splitlines() if len(line) >= MIN_KEY_LINE and "PRIVATE KEY" not in line
    ]
    assert len(lines) >= 3, "a key without a body: the search would mean nothing"
    forms = {"base64": base64.b64encode(private_pem.encode()).decode(), "PEM": private_pem}
    return forms | {f"PEM line {i}": line for i, line in enumerate(lines, 1)}


def leaked(text: str, forms: dict[str, str]) -> list[str]:
    """The names of the ``key_forms`` that occur in ``text``, also where JSON escaped its newlines."""
    unescaped = text.replace("\\n", "\n")
    return [name for name, form in forms.items() if form in text or form in unescaped]


def secret_refs(pod_spec: dict[str, Any]) -> set[str]:
    """The name of every Secret a pod spec refers to: volumes (projected too), env and envFrom of every
    container, image pull secrets."""
    names = set()
    for volume in pod_spec.get("volumes") or []:
        if "secret" in volume:
            names.add(volume["secret"].get("secretName"))
        for source in (volume.get("projected") or {}).get("sources") or []:
            if "secret" in source:
                names.add(source["secret"].get("name"))
    for key in ("initContainers", "containers", "ephemeralContainers"):
        for container in pod_spec.get(key) or []:
            for env in container.get("env") or []:
                ref = (env.get("valueFrom") or {}).get("secretKeyRef")
                if ref:
                    names.add(ref.get("name"))
            for source in container.get("envFrom") or []:
                if "secretRef" in source:
                    names.add(source["secretRef"].get("name"))
    names.update(s.get("name") for s in pod_spec.get("imagePullSecrets") or [])
    return names


# -- users ---------------------------------------------------------------------------------------------
def user_client(cluster: LocalCluster, user: str, groups: tuple[str, ...] = ()) -> Any:
    """A kubernetes ApiClient authenticated as ``user`` (a client certificate the cluster's CA signs)."""
    from kubernetes import config

    return config.new_client_from_config(config_file=str(cluster.write_user_kubeconfig(user, groups)))


def bind_user(api_client: Any, namespace: str, user: str, cluster_role: str) -> None:
    """Grant ``cluster_role`` to ``user`` in ``namespace`` alone (a RoleBinding named after the user)."""
    from kubernetes import client

    client.RbacAuthorizationV1Api(api_client).create_namespaced_role_binding(
        namespace,
        {
            "metadata": {"name": user},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": cluster_role},
            "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": user}],
        },
    )
