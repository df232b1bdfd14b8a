"""Every hypothesis strategy of the test suites: valid MPIJobs and observed cluster states, render's
scenarios and junk, generic objects for the differ, live objects with managedFields for apply bodies."""

from __future__ import annotations

import base64
import copy
from datetime import UTC, datetime, timedelta
from typing import Any

from hypothesis import strategies as st

from localcluster.jobs import minimal_job
from reconcile.engine.semantics import is_zero
from render import Config, Observed, SSHKey, names
from render import status as render_status

NOW = datetime(2025, 6, 1, 12, 0, tzinfo=UTC)
JOB_UID = "0d1f7c3a-1111-4222-8333-444455556666"
LAUNCHER_JOB_UID = "0d1f7c3a-1111-4222-8333-77778888aaaa"
# A syntactically valid stand-in; render copies key material, it never parses it.
TEST_KEY = SSHKey(
    private_pem="-----BEGIN EC PRIVATE KEY-----\nTESTONLY\n-----END EC PRIVATE KEY-----\n",
    public_openssh="ecdsa-sha2-nistp521 AAAATESTONLY\n",
)

dns_label = st.from_regex(r"\A[a-z]([a-z0-9-]{0,14}[a-z0-9])?\Z")
label_value = st.from_regex(r"\A[A-Za-z0-9]([A-Za-z0-9._-]{0,10}[A-Za-z0-9])?\Z")
label_key = st.one_of(dns_label, st.builds(lambda p, n: f"{p}.example.com/{n}", dns_label, dns_label))
quantities = st.sampled_from(["1", "2", "500m", "250m", "1Gi", "512Mi", "1G", "100M", "0.5", "3"])


def _ts(seconds_before: int) -> str:
    return (NOW - timedelta(seconds=seconds_before)).strftime("%Y-%m-%dT%H:%M:%SZ")


@st.composite
def containers(draw: st.DrawFn, role: str) -> list[dict[str, Any]]:
    c: dict[str, Any] = {"name": f"mpi-{role}", "image": draw(st.sampled_from(["img:1", "mpi/pi:openmpi"]))}
    if draw(st.booleans()):
        c["command"] = draw(
            st.lists(st.sampled_from(["mpirun", "/usr/sbin/sshd", "-De", "python"]), max_size=3)
        )
    if draw(st.booleans()):
        c["args"] = draw(st.lists(st.sampled_from(["-n", "2", "/home/mpiuser/pi"]), max_size=3))
    if draw(st.booleans()):
        c["env"] = [{"name": "FOO", "value": draw(st.sampled_from(["1", "bar"]))}]
    if draw(st.booleans()):
        res: dict[str, Any] = {}
        for part in ("requests", "limits"):
            if draw(st.booleans()):
                res[part] = draw(
                    st.dictionaries(
                        st.sampled_from(["cpu", "memory", "nvidia.com/gpu"]), quantities, max_size=3
                    )
                )
        c["resources"] = res
    if draw(st.booleans()):
        c["volumeMounts"] = [{"name": "data", "mountPath": "/data"}]
    out = [c]
    if draw(st.integers(0, 4)) == 0:
        out.append({"name": "sidecar", "image": "busybox"})
    return out


@st.composite
def templates(draw: st.DrawFn, role: str) -> dict[str, Any]:
    spec: dict[str, Any] = {"containers": draw(containers(role))}
    if draw(st.booleans()):
        spec["hostNetwork"] = draw(st.booleans())
    if draw(st.integers(0, 3)) == 0:
        spec["dnsConfig"] = {"searches": ["example.org"]}
    if draw(st.integers(0, 3)) == 0:
        spec["priorityClassName"] = draw(st.sampled_from(["high", "low"]))
    if draw(st.integers(0, 3)) == 0:
        spec["volumes"] = [{"name": "data", "emptyDir": {}}]
    if draw(st.integers(0, 3)) == 0:
        spec["nodeSelector"] = {"pool": "mpi"}
    template: dict[str, Any] = {"spec": spec}
    if draw(st.booleans()):
        template["metadata"] = {
            "labels": draw(st.dictionaries(label_key, label_value, max_size=2)),
            "annotations": draw(st.dictionaries(label_key, st.text(max_size=5), max_size=2)),
        }
    return template


@st.composite
def mpijobs(draw: st.DrawFn, max_workers: int = 12) -> dict[str, Any]:
    """A valid `kubeflow.org/v2beta1` MPIJob dict (no status)."""
    name = draw(dns_label)
    launcher_as_worker = draw(st.booleans())
    specs: dict[str, Any] = {"Launcher": {"replicas": 1, "template": draw(templates("launcher"))}}
    if draw(st.booleans()):
        specs["Launcher"]["restartPolicy"] = draw(st.sampled_from(["OnFailure", "Never"]))
    if not launcher_as_worker or draw(st.booleans()):
        specs["Worker"] = {
            "replicas": draw(st.integers(1, max_workers)),
            "template": draw(templates("worker")),
        }
        if draw(st.booleans()):
            specs["Worker"]["restartPolicy"] = draw(st.sampled_from(["OnFailure", "Never"]))
    run_policy: dict[str, Any] = {}
    for key, strat in (
        ("cleanPodPolicy", st.sampled_from(["All", "Running", "None"])),
        ("ttlSecondsAfterFinished", st.integers(0, 3600)),
        ("activeDeadlineSeconds", st.integers(0, 3600)),
        ("backoffLimit", st.integers(0, 6)),
        ("suspend", st.booleans()),
        ("managedBy", st.sampled_from(["kubeflow.org/mpi-operator", "kueue.x-k8s.io/multikueue"])),
    ):
        if draw(st.integers(0, 2)) == 0:
            run_policy[key] = draw(strat)
    if draw(st.integers(0, 3)) == 0:
        sp: dict[str, Any] = {}
        if draw(st.booleans()):
            sp["minAvailable"] = draw(st.integers(0, 5))
        if draw(st.booleans()):
            sp["queue"] = "research"
        if draw(st.booleans()):
            sp["minResources"] = {"cpu": draw(quantities)}
        if draw(st.booleans()):
            sp["scheduleTimeoutSeconds"] = draw(st.integers(0, 600))
        run_policy["schedulingPolicy"] = sp
    spec: dict[str, Any] = {}
    if run_policy:
        spec["runPolicy"] = run_policy
    if launcher_as_worker:
        spec["runLauncherAsWorker"] = True
    for key, strat in (
        ("slotsPerWorker", st.integers(0, 8)),
        ("sshAuthMountPath", st.sampled_from(["/root/.ssh", "/home/mpiuser/.ssh"])),
        ("mpiImplementation", st.sampled_from(["OpenMPI", "Intel", "MPICH"])),
        ("launcherCreationPolicy", st.sampled_from(["AtStartup", "WaitForWorkersReady"])),
    ):
        if draw(st.booleans()):
            spec[key] = draw(strat)
    job = minimal_job(name, None, namespace=draw(st.sampled_from(["default", "team-a"])), uid=JOB_UID, **spec)
    job["spec"]["mpiReplicaSpecs"] = specs
    return job


configs = st.builds(
    Config,
    cluster_domain=st.sampled_from(["", "cluster.local", "corp.example"]),
    gang_scheduling=st.sampled_from(["", "volcano", "scheduler-plugins-scheduler", "kubernetes"]),
    workload_api=st.sampled_from(["", *names.WORKLOAD_API_VERSIONS]),
)


def _owner(
    name: str, uid: str, kind: str = "MPIJob", api: str = "kubeflow.org/v2beta1"
) -> list[dict[str, Any]]:
    return [
        {
            "apiVersion": api,
            "kind": kind,
            "name": name,
            "uid": uid,
            "controller": True,
            "blockOwnerDeletion": True,
        }
    ]


@st.composite
def pod_status(draw: st.DrawFn) -> dict[str, Any]:
    phase = draw(st.sampled_from(["Pending", "Running", "Running", "Succeeded", "Failed", "Unknown"]))
    status: dict[str, Any] = {"phase": phase}
    if phase == "Running":
        status["conditions"] = [{"type": "Ready", "status": draw(st.sampled_from(["True", "False"]))}]
    if phase == "Failed":
        if draw(st.booleans()):
            status["reason"] = "Evicted"
        else:
            code = draw(st.sampled_from([1, 137, 255]))
            reason = "OOMKilled" if code == 137 else "Error"
            status["containerStatuses"] = [
                {"name": "mpi", "state": {"terminated": {"exitCode": code, "reason": reason}}}
            ]
    return status


@st.composite
def observed_objects(draw: st.DrawFn, job: dict[str, Any]) -> list[dict[str, Any]]:
    """Live children of `job` in a random state: worker pods in any phase (some beyond the replica count),
    a launcher Job that is absent, active, suspended, complete or failed, launcher pods, the SSH Secret, and
    sometimes a foreign object holding a wanted name."""
    name, ns = job["metadata"]["name"], job["metadata"]["namespace"]
    uid = job["metadata"]["uid"]
    workers = (job["spec"]["mpiReplicaSpecs"].get("Worker") or {}).get("replicas", 0)
    objs: list[dict[str, Any]] = []
    for i in sorted(draw(st.sets(st.integers(0, workers + 2), max_size=workers + 3))):
        objs.append(
            {
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": {
                    "name": f"{name}-worker-{i}",
                    "namespace": ns,
                    "uid": f"pod-{i}",
                    "labels": {
                        "training.kubeflow.org/job-name": name,
                        "training.kubeflow.org/job-role": "worker",
                    },
                    "ownerReferences": _owner(name, uid),
                },
                "status": draw(pod_status()),
            }
        )
    state = draw(st.sampled_from(["absent", "active", "suspended", "complete", "failed"]))
    if state != "absent":
        jstatus: dict[str, Any] = {"failed": draw(st.integers(0, 3))}
        if state == "complete":
            jstatus["conditions"] = [{"type": "Complete", "status": "True"}]
            jstatus["completionTime"] = _ts(30)
        elif state == "failed":
            jstatus["conditions"] = [
                {"type": "Failed", "status": "True", "reason": "BackoffLimitExceeded", "message": "backoff"}
            ]
        objs.append(
            {
                "apiVersion": "batch/v1",
                "kind": "Job",
                "metadata": {
                    "name": f"{name}-launcher",
                    "namespace": ns,
                    "uid": LAUNCHER_JOB_UID,
                    "ownerReferences": _owner(name, uid),
                },
                "spec": {"suspend": state == "suspended"},
                "status": jstatus,
            }
        )
        for k in range(draw(st.integers(0, 3))):
            objs.append(
                {
                    "apiVersion": "v1",
                    "kind": "Pod",
                    "metadata": {
                        "name": f"{name}-launcher-{k}abcd",
                        "namespace": ns,
                        "creationTimestamp": _ts(300 - k),
                        "ownerReferences": _owner(f"{name}-launcher", LAUNCHER_JOB_UID, "Job", "batch/v1"),
                    },
                    "status": draw(pod_status()),
                }
            )
    if draw(st.booleans()):
        objs.append(
            {
                "apiVersion": "v1",
                "kind": "Secret",
                "type": "kubernetes.io/ssh-auth",
                "metadata": {"name": f"{name}-ssh", "namespace": ns, "ownerReferences": _owner(name, uid)},
                "data": {
                    "ssh-privatekey": base64.b64encode(b"live-private").decode(),
                    "ssh-publickey": base64.b64encode(b"live-public\n").decode(),
                },
            }
        )
    if draw(st.integers(0, 5)) == 0:
        objs.append(
            {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": f"{name}-config", "namespace": ns}}
        )
    if draw(st.integers(0, 3)) == 0:
        objs.append(
            {
                "apiVersion": "scheduling.k8s.io/v1",
                "kind": "PriorityClass",
                "metadata": {"name": "high"},
                "value": 1000,
            }
        )
    return objs


@st.composite
def times(draw: st.DrawFn) -> datetime:
    return NOW + timedelta(seconds=draw(st.integers(0, 7200)))


# -- the engine's apply bodies: a live object, what our manager applied to it before, a desired one ----

OWNER_UID = "1c2d3e4f-0000-4000-8000-00000000beef"
APPLY_MANAGER = "test-controller"
# (dotted path, how Kubernetes merges it): "map" keys owned one by one, "atomic" owned whole,
# "gates"/"containers" list-maps keyed by name.
APPLY_FIELDS: dict[str, str] = {
    "metadata.labels": "map",
    "metadata.annotations": "map",
    "spec.suspend": "atomic",
    "spec.template.metadata.labels": "map",
    "spec.template.metadata.annotations": "map",
    "spec.template.spec.nodeSelector": "atomic",
    "spec.template.spec.tolerations": "atomic",
    "spec.template.spec.schedulingGates": "gates",
    "spec.template.spec.containers": "containers",
}
TEMPLATE_DIRECTIVES = tuple(
    p for p in APPLY_FIELDS if p.startswith("spec.template.") and "containers" not in p
)
_KEYS = ("a", "b", "c", "controller-uid", "job-name")
_GATES = ("g1", "g2", "g3")
_VALUES = st.sampled_from(["x", "y", "zone-1", "zone-2"])


def _value(draw: st.DrawFn, how: str, path: str) -> Any:
    """A non-empty value (the server stores no empty map or list: absent stands for those)."""
    if path == "spec.suspend":
        return draw(st.booleans())
    if how == "map" or path.endswith("nodeSelector"):
        return draw(st.dictionaries(st.sampled_from(_KEYS), _VALUES, min_size=1, max_size=4))
    if path.endswith("tolerations"):
        item = st.fixed_dictionaries(
            {"key": st.sampled_from(["k1", "k2"]), "operator": st.just("Exists"), "effect": _VALUES}
        )
        return draw(st.lists(item, min_size=1, max_size=2))
    if how == "gates":
        return [{"name": g} for g in sorted(draw(st.sets(st.sampled_from(_GATES), min_size=1)))]
    return [{"name": "main", "image": draw(st.sampled_from(["img:1", "img:2"]))}]


def _object(draw: st.DrawFn, api_version: str, kind: str) -> dict[str, Any]:
    obj: dict[str, Any] = {
        "apiVersion": api_version,
        "kind": kind,
        "metadata": {
            "name": "thing",
            "namespace": "ns",
            "ownerReferences": [
                {
                    "apiVersion": "example.com/v1",
                    "kind": "Owner",
                    "name": "o",
                    "uid": OWNER_UID,
                    "controller": True,
                }
            ],
        },
    }
    for path, how in APPLY_FIELDS.items():
        if path == "spec.suspend" or draw(st.integers(0, 3)) > 0:
            _set(obj, path, _value(draw, how, path))
    return obj


def _set(obj: dict[str, Any], dotted: str, value: Any) -> None:
    *parents, last = dotted.split(".")
    for part in parents:
        obj = obj.setdefault(part, {})
    obj[last] = value


def _selection(draw: st.DrawFn, how: str) -> Any:
    """Which parts of one field a manager owns: a set of map keys / item names, or whole (bool)."""
    if how == "map":
        return draw(st.sets(st.sampled_from(_KEYS)))
    if how == "gates":
        return draw(st.sets(st.sampled_from(_GATES)))
    if how == "containers":
        return draw(st.sets(st.just("main")))
    return draw(st.booleans())


def fields_v1(selection: dict[str, Any]) -> dict[str, Any]:
    """The fieldsV1 tree of a selection (``APPLY_FIELDS`` path -> owned keys / names / whole)."""
    tree: dict[str, Any] = {}
    for path, owned in selection.items():
        how = APPLY_FIELDS[path]
        if how == "map":
            leaf: dict[str, Any] | None = {".": {}, **{f"f:{k}": {} for k in owned}} if owned else None
        elif how in ("gates", "containers"):
            item = {".": {}, "f:name": {}, **({"f:image": {}} if how == "containers" else {})}
            leaf = {".": {}, **{f'k:{{"name":"{n}"}}': dict(item) for n in owned}} if owned else None
        else:
            leaf = {} if owned else None
        if leaf is None:
            continue
        node = tree
        *parents, last = path.split(".")
        for part in parents:
            node = node.setdefault(f"f:{part}", {})
        node[f"f:{last}"] = leaf
    return tree


@st.composite
def apply_cases(draw: st.DrawFn) -> dict[str, Any]:
    """A live object (suspended or not, started or not) with managedFields: what our manager applied
    before (``applied``: path -> owned keys), what its create set, what another manager owns; and a
    desired object. ``policy``: the real Job rule, or a random split of the template directives into
    always-mutable and mutable-while-suspended."""
    from reconcile.engine.policy import JOB_POLICY, METADATA_PATHS, KindPolicy, MutableWhen, PathIs

    if draw(st.booleans()):
        api_version, kind, kind_policy = "batch/v1", "Job", JOB_POLICY
    else:
        always = draw(st.sets(st.sampled_from(TEMPLATE_DIRECTIVES)))
        rule = MutableWhen(
            when=(PathIs("spec.suspend", True), PathIs("status.startTime", absent=True)),
            paths=tuple(p for p in TEMPLATE_DIRECTIVES if p not in always),
            or_desired=draw(st.booleans()),
        )
        api_version, kind = "example.com/v1", "Thing"
        kind_policy = KindPolicy("create-only", (*METADATA_PATHS, "spec.suspend", *sorted(always)), (rule,))
    live = _object(draw, api_version, kind)
    live["metadata"].update(uid="live-uid", resourceVersion="42")
    if draw(st.booleans()):
        live["status"] = {"startTime": "2025-06-01T11:00:00Z"}
    applied = {p: _selection(draw, how) for p, how in APPLY_FIELDS.items()}
    created = {p: _selection(draw, how) for p, how in APPLY_FIELDS.items()}
    theirs = {p: _selection(draw, how) for p, how in APPLY_FIELDS.items() if draw(st.integers(0, 3)) == 0}
    live["metadata"]["managedFields"] = [
        {
            "manager": APPLY_MANAGER,
            "operation": "Update",
            "fieldsType": "FieldsV1",
            "fieldsV1": fields_v1(created),
        },
        {
            "manager": APPLY_MANAGER,
            "operation": "Apply",
            "fieldsType": "FieldsV1",
            "fieldsV1": fields_v1(applied),
        },
        {"manager": "kueue", "operation": "Update", "fieldsType": "FieldsV1", "fieldsV1": fields_v1(theirs)},
    ]
    desired = _object(draw, api_version, kind)
    return {"live": live, "desired": desired, "policy": kind_policy, "applied": applied}


# -- render: scenarios, mutations and junk -------------------------------------------------------------


@st.composite
def scenarios(draw: st.DrawFn) -> tuple[dict[str, Any], Observed, Config]:
    """A job with an old status (from an earlier observation), the observed world now, and a config."""
    job = draw(mpijobs())
    config = draw(configs)
    earlier = Observed.from_objects(draw(observed_objects(job)), now=NOW, fresh_ssh_key=TEST_KEY)
    job["status"] = render_status(job, earlier, config)
    if draw(st.booleans()):  # the user may flip suspend between observations
        job["spec"].setdefault("runPolicy", {})["suspend"] = draw(st.booleans())
    observed = Observed.from_objects(
        draw(observed_objects(job)),
        now=draw(times()),
        fresh_ssh_key=draw(st.sampled_from([TEST_KEY, None])),
    )
    return job, observed, config


MUTATIONS = st.sampled_from(
    [
        ("spec", "slotsPerWorker"),
        ("spec", "runPolicy"),
        ("spec", "mpiReplicaSpecs"),
        ("spec", "mpiImplementation"),
        ("spec", "launcherCreationPolicy"),
        ("spec", "sshAuthMountPath"),
        ("spec", "runLauncherAsWorker"),
        ("spec",),
        ("metadata", "name"),
        ("metadata",),
        ("spec", "mpiReplicaSpecs", "Launcher"),
        ("spec", "mpiReplicaSpecs", "Launcher", "replicas"),
        ("spec", "mpiReplicaSpecs", "Launcher", "template"),
        ("spec", "mpiReplicaSpecs", "Launcher", "template", "spec"),
        ("spec", "mpiReplicaSpecs", "Launcher", "template", "spec", "containers"),
        ("spec", "mpiReplicaSpecs", "Launcher", "template", "spec", "containers", 0),
        ("spec", "mpiReplicaSpecs", "Launcher", "template", "spec", "containers", 0, "env"),
        ("spec", "mpiReplicaSpecs", "Launcher", "template", "spec", "containers", 0, "command"),
        ("spec", "mpiReplicaSpecs", "Launcher", "template", "spec", "containers", 0, "resources"),
        ("spec", "mpiReplicaSpecs", "Launcher", "template", "spec", "dnsConfig"),
        ("spec", "mpiReplicaSpecs", "Launcher", "template", "spec", "volumes"),
        ("spec", "mpiReplicaSpecs", "Launcher", "template", "metadata"),
        ("spec", "mpiReplicaSpecs", "Worker", "replicas"),
        ("spec", "mpiReplicaSpecs", "Worker", "template", "spec", "containers", 0, "volumeMounts"),
        ("spec", "runPolicy", "schedulingPolicy"),
        ("spec", "runPolicy", "backoffLimit"),
        ("spec", "runPolicy", "cleanPodPolicy"),
    ]
)
JUNK = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(2**40), 2**40),
    st.floats(allow_nan=True),
    st.text(max_size=70),
    st.lists(
        st.one_of(st.integers(), st.text(max_size=3), st.dictionaries(st.text(max_size=3), st.integers())),
        max_size=3,
    ),
    st.dictionaries(
        st.text(max_size=5), st.one_of(st.integers(), st.text(max_size=5), st.none()), max_size=3
    ),
)


# -- the differ on generic objects --------------------------------------------------------------------

GENERIC_OWNER = "0f0f0f0f-0000-4000-8000-000000000001"
KEYS = st.sampled_from(["alpha", "beta", "gamma", "delta", "mode", "size", "flag"])
NAMES = st.from_regex(r"[a-z][a-z0-9]{0,6}", fullmatch=True)
SCALARS = st.one_of(
    st.text(max_size=8),
    st.integers(-5, 10**6),
    st.booleans(),
    st.floats(-1e6, 1e6, allow_nan=False, allow_infinity=False),
)
# Equivalent quantity spellings: (rendered, as the server stores it).
QUANTITIES = st.integers(0, 64_000).flatmap(
    lambda m: st.sampled_from(
        [(f"{m}m", f"{m // 1000}" if m % 1000 == 0 else f"{m}m")]
        + ([(m // 1000, f"{m // 1000}"), (f"{m // 1000}", f"{m // 1000}")] if m % 1000 == 0 else [])
        + ([(m / 1000, f"{m}m")] if m % 1000 else [])
    )
)

TREE = st.recursive(
    SCALARS | st.lists(st.text(max_size=4), max_size=3),
    lambda inner: st.dictionaries(KEYS, inner, max_size=4),
    max_leaves=12,
)


@st.composite
def stored_containers(draw: st.DrawFn) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """Containers as rendered and as the server would store them (quantities canonicalised)."""
    names = draw(st.lists(NAMES, min_size=1, max_size=3, unique=True))
    want, live = [], []
    for name in names:
        env_names = draw(st.lists(NAMES, max_size=3, unique=True))
        env = [{"name": n, "value": draw(st.text(max_size=5))} for n in env_names]
        cpu, cpu_live = draw(QUANTITIES)
        ports = draw(st.lists(st.integers(1, 65535), max_size=2, unique=True))
        want.append(
            {
                "name": name,
                "image": draw(NAMES),
                "env": env,
                "ports": [{"containerPort": p} for p in ports],
                "resources": {"limits": {"cpu": cpu}},
            }
        )
        live.append(
            {
                "name": name,
                "image": want[-1]["image"],
                "env": copy.deepcopy(env),
                "ports": [{"containerPort": p, "protocol": "TCP"} for p in ports],
                "resources": {"limits": {"cpu": cpu_live}},
            }
        )
    return want, live


@st.composite
def rendered_and_stored(draw: st.DrawFn, kind: str = "Thing") -> tuple[dict[str, Any], dict[str, Any]]:
    """A generic owned object and the same object as the API server returns it (before defaulting)."""
    spec = draw(st.dictionaries(KEYS, TREE, max_size=4))
    want_containers, live_containers = draw(stored_containers())
    labels = draw(st.dictionaries(NAMES, NAMES, max_size=3))
    meta = {
        "name": draw(NAMES),
        "namespace": "ns",
        "labels": labels,
        "ownerReferences": [
            {"apiVersion": "x/v1", "kind": "Owner", "name": "o", "uid": GENERIC_OWNER, "controller": True}
        ],
    }
    api_version = "v1" if kind == "Pod" else "example.com/v1"
    want = {
        "apiVersion": api_version,
        "kind": kind,
        "metadata": meta,
        "spec": {**spec, "containers": want_containers},
    }
    live = copy.deepcopy(want)
    live["spec"]["containers"] = live_containers
    live["metadata"].update(uid="live-uid", resourceVersion="1", creationTimestamp="2026-01-01T00:00:00Z")
    return want, live


def drop_zero_values(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: drop_zero_values(v) for k, v in value.items() if not is_zero(v)}
    if isinstance(value, list):
        return [drop_zero_values(v) for v in value]
    return value


def server_defaulted(live: dict[str, Any], data: st.DataObject) -> dict[str, Any]:
    """Extra fields in any map, list-map items reordered and added, zero values dropped, status added."""

    def walk(node: Any, path: tuple[str, ...]) -> Any:
        if isinstance(node, dict):
            out = {k: walk(v, (*path, k)) for k, v in node.items()}
            if data.draw(st.booleans(), label=f"extra at {path}"):
                out["zzDefaulted"] = data.draw(SCALARS | TREE)
            return out
        if isinstance(node, list) and path[-1:] in (("containers",), ("env",)):
            items = [walk(v, path) for v in node]
            if path[-1] == "env" and data.draw(st.booleans()):
                items.append({"name": "INJECTED-BY-WEBHOOK", "value": "1"})
            return data.draw(st.permutations(items), label=f"order of {path}")
        return node

    out = walk(drop_zero_values(live), ())
    out["status"] = {"phase": "Running"}
    return out


# ------------------------------------------------------------------------------- plain JSON documents
# Leaves that look like a null to a byte search, next to real nulls and the other JSON types.
_json_leaves = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(2**63), 2**63 - 1),
    st.floats(allow_nan=False, allow_infinity=False),
    st.text(max_size=8),
    st.sampled_from(["null", ":null", '{"a":null}', "/dev/null", "nullable"]),
)
json_documents = st.dictionaries(
    st.text(max_size=6),
    st.recursive(
        _json_leaves,
        lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=6), inner, max_size=4),
        max_leaves=25,
    ),
    max_size=6,
)


# ------------------------------------------------------------------------------- hostile input (fuzz)
def _deep(depth: int, leaf: Any) -> Any:
    out = leaf
    for i in range(depth):
        out = {"a": out} if i % 2 else [out]
    return out


# Values no field wants: wrong types, numbers beyond every bound, non-finite floats, forged lines,
# nesting beyond any schema.
junk = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(2**70), 2**70),
    st.sampled_from([2**31 - 1, 2**31, 2**63, -(2**63) - 1, 300000000000, 9223372036, 9223372037]),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=20),
    st.sampled_from(
        ["a\nb: c", "\u2028", "\x00", "9999-12-31T23:59:59Z", "9999-12-31T23:59:59-05:00", "1e400"]
    ),
    st.sampled_from(["NaN", "Infinity", "-1", "70000", "A=B", "1Ei", "0.5m"]),
    st.lists(st.one_of(st.integers(), st.text(max_size=3), st.none()), max_size=3),
    st.dictionaries(
        st.text(max_size=4), st.one_of(st.integers(), st.text(max_size=4), st.none()), max_size=3
    ),
    st.integers(60, 600).map(lambda d: _deep(d, 1)),
)


def _paths(node: Any, prefix: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    """Every path into a JSON-like tree (dict keys and list indexes), the root's children first."""
    out: list[tuple[Any, ...]] = []
    if isinstance(node, dict):
        for k, v in node.items():
            out.append((*prefix, k))
            out += _paths(v, (*prefix, k))
    elif isinstance(node, list):
        for i, v in enumerate(node):
            out.append((*prefix, i))
            out += _paths(v, (*prefix, i))
    return out


@st.composite
def mutated(draw: st.DrawFn, obj: Any, max_mutations: int = 3) -> Any:
    """`obj` with up to `max_mutations` changes at any level: a value replaced by junk, a key removed, or
    a key added (known field names too, so unknown and known fields both get junk)."""
    import copy

    obj = copy.deepcopy(obj)
    for _ in range(draw(st.integers(1, max_mutations))):
        paths = _paths(obj)
        if not paths:
            return draw(junk)
        path = draw(st.sampled_from(paths))
        parent = obj
        for step in path[:-1]:
            parent = parent[step]
        op = draw(st.sampled_from(["replace", "replace", "delete", "add"]))
        if op == "replace":
            parent[path[-1]] = draw(junk)
        elif op == "delete" and isinstance(parent, dict):
            del parent[path[-1]]
        elif op == "add" and isinstance(parent[path[-1]], dict):
            key = draw(st.one_of(st.sampled_from(FIELD_NAMES), st.text(max_size=8)))
            parent[path[-1]][key] = draw(junk)
    return obj


FIELD_NAMES = [
    "replicas", "slotsPerWorker", "activeDeadlineSeconds", "ttlSecondsAfterFinished", "backoffLimit",
    "minAvailable", "scheduleTimeoutSeconds", "minResources", "resources", "limits", "requests", "cpu",
    "containers", "initContainers", "volumes", "volumeMounts", "env", "ports", "labels", "annotations",
    "name", "namespace", "uid", "metadata", "spec", "status", "conditions", "startTime", "completionTime",
    "template", "Launcher", "Worker", "runPolicy", "schedulingPolicy", "dnsConfig", "searches", "suspend",
]  # fmt: skip


@st.composite
def hostile_statuses(draw: st.DrawFn) -> dict[str, Any]:
    """A status as anyone with write access to it could leave it: far-away times, junk conditions."""
    moment = st.sampled_from(
        [
            "2025-06-01T11:00:00Z",
            "9999-12-31T23:59:59Z",
            "0001-01-01T00:00:00Z",
            "bad",
            "9999-12-31T23:59:59-05:00",
        ]
    )
    st_: dict[str, Any] = {}
    if draw(st.booleans()):
        st_["startTime"] = draw(moment)
    if draw(st.booleans()):
        st_["completionTime"] = draw(moment)
    ctypes = st.sampled_from(["Created", "Running", "Restarting", "Succeeded", "Failed", "Suspended", "X"])
    st_["conditions"] = draw(
        st.lists(
            st.fixed_dictionaries(
                {"type": ctypes, "status": st.sampled_from(["True", "False", "Unknown"])},
                optional={"reason": st.text(max_size=5), "lastTransitionTime": moment},
            ),
            max_size=4,
        )
    )
    return st_


@st.composite
def fuzz_cases(draw: st.DrawFn) -> tuple[Any, list[Any]]:
    """(MPIJob, observed objects): valid, valid with a hostile status or large numbers, or mutated at any
    level (the job, its status, or the observed objects)."""
    job = draw(mpijobs())
    observed = draw(observed_objects(job))
    kind = draw(st.sampled_from(["valid", "status", "bounds", "job", "job", "job", "observed"]))
    if kind == "status":
        job["status"] = draw(hostile_statuses())
        job["spec"].setdefault("runPolicy", {})["activeDeadlineSeconds"] = draw(
            st.sampled_from([0, 10, 9223372036])
        )
        job["spec"]["runPolicy"]["ttlSecondsAfterFinished"] = draw(st.sampled_from([0, 100, 2**31 - 1]))
    elif kind == "bounds":
        worker = job["spec"]["mpiReplicaSpecs"].get("Worker")
        if worker is not None:
            worker["replicas"] = draw(st.sampled_from([100, 2965, 3300, 30000, 2**31 - 1]))
        job["metadata"]["name"] = draw(st.sampled_from(["abcdefghij", "a" * 45, "a" * 54, "a" * 60]))
    elif kind == "job":
        job = draw(mutated(job))
    elif kind == "observed":
        observed = draw(mutated(observed)) if observed else draw(junk)
        if not isinstance(observed, list):
            observed = [observed]
    return job, observed
