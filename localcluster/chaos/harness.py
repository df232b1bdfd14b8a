"""The chaos tier's harness: an audited L2 cluster, operators under the mpi-operator ServiceAccount, a
run of MPIJobs, and the invariants checked against the API server's audit log (the ground truth of what
the operator wrote) and the final state.
"""

from __future__ import annotations

import contextlib
import json
import re
import threading
import time
import traceback
from collections import Counter, defaultdict
from collections.abc import Iterator, Mapping
from datetime import datetime
from pathlib import Path
from typing import Any

import attrs
import urllib3

from localcluster import pki
from localcluster.cluster import AUDIT_POLICY, ClusterSpec, LocalCluster
from localcluster.e2e import KNOB, SA_USER, apply_base, create_namespace
from localcluster.jobs import minimal_job
from localcluster.operator import OperatorRunner
from localcluster.rbacuse import WRITE_VERBS, with_usage
from localcluster.wait import wait_for
from reconcile.engine.differ import controller_uid
from reconcile.mpijob.kinds import MPIJOB
from reconcile.runtime.kube import CONFIGMAP, JOB, POD, SECRET, SERVICE, ApiError, Kube

LOCK_NS = "mpi-operator"
# Short lease timings so a killed leader's Lease expires in seconds (defaults: 15 / 5 / 3).
LEASE_FLAGS = (
    "--leader-elect-lease-duration=4",
    "--leader-elect-renew-deadline=2.5",
    "--leader-elect-retry-period=0.5",
)
UA = re.compile(r"^mpi-operator(/leader-election)? \((?P<id>[^)]+)\)")
CHILD_PLURALS = ("pods", "services", "configmaps", "secrets", "jobs")


# An audit-like record made from an object's creationTimestamp (whole seconds), not from the audit log.
WHOLE_SECOND = "wholeSecond"


def ts(text: str) -> float:
    """An audit timestamp (RFC 3339, microseconds) as epoch seconds."""
    return datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()


# -- the cluster ------------------------------------------------------------------------------------------
class ChaosCluster:
    """An L2 cluster with the audit log on, deploy/base-no-operator applied, and kubeconfigs for the
    operator: straight to the API server, or to a fault proxy in between."""

    def __init__(self, nodes: int = 2) -> None:
        self.cluster = LocalCluster(
            ClusterSpec(tier="l2", nodes=nodes, audit=True, audit_policy=with_usage(AUDIT_POLICY))
        )
        self.admin: Kube | None = None

    def start(self) -> ChaosCluster:
        self.cluster.start()
        apply_base(self.cluster)
        self.admin = Kube(self.cluster.api_client(), qps=0)
        self.sa_kubeconfig = self.cluster.write_user_kubeconfig(SA_USER)
        self._proxy_certs()
        return self

    def stop(self) -> None:
        if self.admin is not None:
            self.admin.api_client.close()
        self.cluster.stop()

    @property
    def work_dir(self) -> Path:
        return self.cluster.work_dir

    def _proxy_certs(self) -> None:
        d = self.cluster.pki_dir
        ca = pki.CertificateAuthority.load(d / "ca.crt", d / "ca.key")
        cert, key = ca.issue("fault-proxy", server_names=("127.0.0.1", "localhost"))
        self.proxy_server_cert, self.proxy_server_key = pki._write_pair(d, "fault-proxy", cert, key)
        groups = ("system:serviceaccounts", "system:serviceaccounts:mpi-operator")
        cert, key = ca.issue(SA_USER, groups, client=True)
        self.sa_cert, self.sa_key = pki._write_pair(d, "operator-sa", cert, key)
        self._ca = ca

    def proxy_kubeconfig(self, url: str) -> Path:
        path = self.work_dir / "users" / "operator-via-proxy.kubeconfig"
        return pki.write_kubeconfig(
            path,
            server=url,
            ca_pem=self._ca.cert_pem,
            cert_pem=self.sa_cert.read_bytes(),
            key_pem=self.sa_key.read_bytes(),
            user=SA_USER,
        )

    def proxy_args(self) -> dict[str, Path]:
        d = self.cluster.pki_dir
        return {
            "ca": d / "ca.crt",
            "server_cert": self.proxy_server_cert,
            "server_key": self.proxy_server_key,
            "client_cert": self.sa_cert,
            "client_key": self.sa_key,
        }

    def namespace(self, name: str) -> str:
        assert self.admin is not None
        from kubernetes import client

        return create_namespace(client.CoreV1Api(self.admin.api_client), name)

    def operator(self, name: str, *flags: str, kubeconfig: Path | None = None) -> OperatorRunner:
        return OperatorRunner(
            kubeconfig or self.sa_kubeconfig,
            self.work_dir / "logs" / f"operator-{name}.log",
            *LEASE_FLAGS,
            *flags,
            log_format="json",
        )

    def audit(self, since: float = 0.0) -> list[dict[str, Any]]:
        out = []
        with contextlib.suppress(FileNotFoundError), self.cluster.audit_log.open() as f:
            for line in f:
                try:
                    event = json.loads(line)
                except ValueError:
                    continue  # a line cut by a kill -9 of kube-apiserver
                if event.get("stage") != "ResponseComplete":
                    continue
                if ts(event["requestReceivedTimestamp"]) >= since:
                    out.append(event)
        return out


# -- the jobs -------------------------------------------------------------------------------------------
def mpijob(name: str, workers: int = 2, launcher_delay: str = "2s") -> dict[str, Any]:
    """A minimal Open MPI job whose launcher pod succeeds `launcher_delay` after it starts (kwok)."""
    job = minimal_job(
        name,
        workers,
        image="mpioperator/mpi-pi:openmpi",
        launcher_replicas=1,
        slotsPerWorker=1,
        runPolicy={"cleanPodPolicy": "Running"},
    )
    launcher = job["spec"]["mpiReplicaSpecs"]["Launcher"]["template"]
    launcher["metadata"] = {"annotations": {f"{KNOB}delay": launcher_delay}}
    launcher["spec"]["containers"][0]["command"] = ["mpirun"]
    return job


def wanted_children(name: str, workers: int) -> dict[tuple[str, str], str]:
    """(resource plural, name) -> role, for every child the operator must create for a job."""
    out = {
        ("services", name): "dep",
        ("configmaps", f"{name}-config"): "dep",
        ("secrets", f"{name}-ssh"): "dep",
        ("jobs", f"{name}-launcher"): "launcher",
    }
    out.update({("pods", f"{name}-worker-{i}"): "dep" for i in range(workers)})
    return out


class StatusRecorder:
    """Watches the namespace's MPIJobs and keeps every version's status (to find regressions).

    A lost connection (the API server restarted, a watch cut) starts the watch again and is counted; any
    other error ends the recording and is a problem of the scenario (``problems``), as is a job it never
    saw finish: the regression check holds only for what was recorded."""

    def __init__(self, kube: Kube, namespace: str) -> None:
        self.kube = kube
        self.namespace = namespace
        self.history: dict[str, list[dict[str, Any]]] = defaultdict(list)
        self.errors: list[str] = []
        self.reconnects = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="status-recorder", daemon=True)
        self._rv = ""

    def start(self) -> StatusRecorder:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(20)
        if self._thread.is_alive():
            self.errors.append("the recorder did not stop within 20s")

    def _run(self) -> None:
        try:
            while not self._stop.is_set():
                try:
                    self._watch()
                except (ApiError, OSError, urllib3.exceptions.HTTPError, json.JSONDecodeError):
                    self.reconnects += 1  # a cut line or connection: the watch starts again
                    self._stop.wait(0.5)
        except Exception:
            self.errors.append(traceback.format_exc())

    def _watch(self) -> None:
        query: dict[str, Any] = {"watch": "true", "timeoutSeconds": 5, "allowWatchBookmarks": "true"}
        if self._rv:
            query["resourceVersion"] = self._rv
        for line in self.kube.stream_lines(MPIJOB.path(self.namespace), query, timeout=(5, 15)):
            event = json.loads(line)
            obj = event["object"]
            if event["type"] == "ERROR":
                if obj.get("code") != 410:  # only an expired resourceVersion is expected
                    raise RuntimeError(f"watch error: {obj}")
                self._rv = ""
                return
            self._rv = obj["metadata"]["resourceVersion"]
            if event["type"] in ("ADDED", "MODIFIED"):
                self.history[obj["metadata"]["name"]].append(obj.get("status") or {})
            if self._stop.is_set():
                return

    def saw_finished(self, name: str) -> bool:
        statuses = self.history.get(name) or []
        conds = (statuses[-1].get("conditions") or []) if statuses else []
        return any(c["type"] in ("Succeeded", "Failed") and c["status"] == "True" for c in conds)

    def wait_finished(self, names: list[str], timeout: float = 60.0) -> None:
        """Until the recorder saw every job finish (what the checks compare with), or it failed, or the
        timeout (``problems`` then tells)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline and not self.errors and self._thread.is_alive():
            if all(self.saw_finished(n) for n in names):
                return
            time.sleep(0.2)

    def problems(self, names: list[str]) -> list[str]:
        out = [f"the status recorder failed: {e}" for e in self.errors]
        if not self._thread.is_alive() and not self._stop.is_set() and not self.errors:
            out.append("the status recorder ended early")
        out += [f"{n}: the status recorder never saw it finish" for n in names if not self.saw_finished(n)]
        return out

    def regressions(self) -> list[str]:
        """Succeeded/Failed never revert, completionTime never changes once set, Created never goes back
        to absent or False -- except False with reason FailedCreate while a create is retried (the
        deliberate signal), which must end True again (see ``flaps``)."""
        out = []
        for name, statuses in self.history.items():
            seen: set[str] = set()
            completion = None
            for st in statuses:
                conds = {c["type"]: c for c in st.get("conditions") or []}
                true = {t for t, c in conds.items() if c.get("status") == "True"}
                for sticky in ("Created", "Succeeded", "Failed"):
                    if sticky not in seen or sticky in true:
                        continue
                    if sticky == "Created" and ("Failed" in true or _failed_create(conds)):
                        continue
                    out.append(f"{name}: {sticky} went from True to not True")
                seen |= true & {"Created", "Succeeded", "Failed"}
                if completion and st.get("completionTime") != completion:
                    out.append(f"{name}: completionTime changed {completion} -> {st.get('completionTime')}")
                completion = completion or st.get("completionTime")
            last = {c["type"]: c for c in (statuses[-1].get("conditions") or [])} if statuses else {}
            if _failed_create(last):
                out.append(f"{name}: still Created=False FailedCreate at the end")
        return out

    def flaps(self) -> int:
        """Status versions with Created=False/FailedCreate after Created was True (transient creates)."""
        n = 0
        for statuses in self.history.values():
            created = False
            for st in statuses:
                conds = {c["type"]: c for c in st.get("conditions") or []}
                if created and _failed_create(conds):
                    n += 1
                created = created or (conds.get("Created") or {}).get("status") == "True"
        return n


def _failed_create(conds: dict[str, dict[str, Any]]) -> bool:
    c = conds.get("Created") or {}
    return c.get("status") == "False" and c.get("reason") == "FailedCreate"


def submit(kube: Kube, namespace: str, names: list[str], workers: int = 2) -> dict[str, str]:
    uids = {}
    for name in names:
        obj = kube.create(MPIJOB, namespace, mpijob(name, workers))
        uids[name] = obj["metadata"]["uid"]
    return uids


def succeeded(kube: Kube, namespace: str) -> set[str]:
    try:
        items = kube.list(MPIJOB, namespace)["items"]
    except (ApiError, OSError, Exception):
        return set()
    return {
        o["metadata"]["name"]
        for o in items
        if any(
            c["type"] == "Succeeded" and c["status"] == "True"
            for c in (o.get("status") or {}).get("conditions") or []
        )
    }


def wait_all_succeeded(kube: Kube, namespace: str, names: list[str], timeout: float) -> set[str]:
    """Wait until every job succeeded or the timeout; the jobs that did not (stuck)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if set(names) <= succeeded(kube, namespace):
            return set()
        time.sleep(1)
    return set(names) - succeeded(kube, namespace)


# -- the invariants -------------------------------------------------------------------------------------
@attrs.define
class Report:
    scenario: str
    jobs: int
    faults: dict[str, int] = attrs.field(factory=dict)
    lost: list[str] = attrs.field(factory=list)
    duplicates: list[str] = attrs.field(factory=list)
    orphans: list[str] = attrs.field(factory=list)
    stuck: list[str] = attrs.field(factory=list)
    status_regressions: list[str] = attrs.field(factory=list)
    non_leader_writes: list[str] = attrs.field(factory=list)
    launcher_before_deps: list[str] = attrs.field(factory=list)
    exits: list[str] = attrs.field(factory=list)  # operators that exited on their own
    recorder: list[str] = attrs.field(factory=list)  # the status recorder's errors and blind spots
    # per fault: the jobs with fewer children than wanted at that moment (the fault hit mid-build)
    building_at_faults: list[int] = attrs.field(factory=list)
    operator_writes: int = 0
    extra: dict[str, Any] = attrs.field(factory=dict)

    def problems(self) -> dict[str, list[str]]:
        keys = (
            "lost",
            "duplicates",
            "orphans",
            "stuck",
            "status_regressions",
            "non_leader_writes",
            "launcher_before_deps",
            "exits",
            "recorder",
        )
        return {k: getattr(self, k) for k in keys if getattr(self, k)}

    def summary(self) -> dict[str, Any]:
        counts = {k: len(getattr(self, k)) for k in ("lost", "duplicates", "orphans", "stuck")}
        counts.update(
            status_regressions=len(self.status_regressions),
            non_leader_writes=len(self.non_leader_writes),
            launcher_before_deps=len(self.launcher_before_deps),
            exits=len(self.exits),
            recorder=len(self.recorder),
        )
        if self.building_at_faults:
            counts["jobs_building_at_each_fault"] = self.building_at_faults
        return {
            "scenario": self.scenario,
            "jobs": self.jobs,
            "faults": dict(self.faults),
            **counts,
            "operator_writes": self.operator_writes,
            **self.extra,
        }


def identity_of(event: dict[str, Any]) -> tuple[str, bool] | None:
    """(holder identity, is the lease client) of an operator request, from its user agent."""
    m = UA.match(event.get("userAgent") or "")
    return (m.group("id"), bool(m.group(1))) if m else None


def lease_timeline(events: list[dict[str, Any]]) -> list[tuple[float, str]]:
    """(time, holder) of every successful write of the operator's Lease, in order ("" = released)."""
    out = []
    for e in events:
        ref = e.get("objectRef") or {}
        if (
            ref.get("resource") != "leases"
            or ref.get("namespace") != LOCK_NS
            or e.get("verb") not in WRITE_VERBS
        ):
            continue
        if (e.get("responseStatus") or {}).get("code") not in (200, 201):
            continue
        holder = ((e.get("requestObject") or {}).get("spec") or {}).get("holderIdentity") or ""
        out.append((ts(e["stageTimestamp"]), holder))
    out.sort()
    return out


def holder_at(timeline: list[tuple[float, str]], t: float) -> str:
    holder = ""
    for when, who in timeline:
        if when > t:
            break
        holder = who
    return holder


def operator_writes(events: list[dict[str, Any]], namespace: str) -> list[dict[str, Any]]:
    """The operator's writes (not its Lease's) in ``namespace``, sent to the API server (the log holds its
    reads too)."""
    out = []
    for e in events:
        who = identity_of(e)
        if who is None or who[1] or e.get("verb") not in WRITE_VERBS:
            continue
        if (e.get("objectRef") or {}).get("namespace") != namespace:
            continue
        out.append(e)
    return out


def stored_creates(
    writes: list[dict[str, Any]], live: Mapping[tuple[str, str], Mapping[str, Any]], job_uids: set[str]
) -> tuple[dict[tuple[str, str], list[dict[str, Any]]], dict[str, int]]:
    """Each object the operator's writes created, by (plural, name): the audit records of its creates (201),
    plus the creates the server stored without a 201 on record (counted apart, in the second value).
    ``live`` holds the namespace's objects at the end of the run."""
    creates: dict[tuple[str, str], list[dict[str, Any]]] = defaultdict(list)
    timed_out: dict[tuple[str, str], dict[str, Any]] = {}
    conflicted: set[tuple[str, str]] = set()  # creates answered AlreadyExists
    touched: set[tuple[str, str]] = set()  # objects a later 2xx write of the operator found existing
    for e in writes:
        ref = e["objectRef"]
        name = ref.get("name") or ((e.get("requestObject") or {}).get("metadata") or {}).get("name")
        code = (e.get("responseStatus") or {}).get("code")
        if e["verb"] == "create" and code == 201:
            creates[(ref["resource"], name)].append(e)
        elif e["verb"] == "create" and code == 504:
            # The API server's timeout: the create may have been stored (etcd committed after the
            # deadline). It counts as the create if the object is seen to exist afterwards.
            timed_out.setdefault((ref["resource"], name), e)
        elif e["verb"] == "create" and code == 409:
            conflicted.add((ref["resource"], name))
        elif e["verb"] != "create" and not ref.get("subresource") and code in (200, 201, 202):
            touched.add((ref["resource"], name))
    for key, e in timed_out.items():
        if key not in creates and (key in touched or key in live):
            creates[key].append(e)
    timed_out_stored = sum(1 for k in timed_out if creates.get(k) == [timed_out[k]])
    # A kube-apiserver killed after etcd stored a create but before its ResponseComplete record: the
    # operator's retry met AlreadyExists. The object counts as created, at its creationTimestamp, if it
    # lives and belongs to one of this run's jobs. That stamp has whole seconds: the create was received
    # within the second that follows it (marked, for the order check).
    unlogged = 0
    for key in sorted(conflicted - set(creates)):
        obj = live.get(key) or {}
        if controller_uid(obj) in job_uids:
            stamp = obj["metadata"]["creationTimestamp"]
            record = {"requestReceivedTimestamp": stamp, "stageTimestamp": stamp, WHOLE_SECOND: True}
            creates[key].append(record)
            unlogged += 1
    return creates, {"creates_timed_out_but_stored": timed_out_stored, "creates_stored_unlogged": unlogged}


def launcher_order(
    job: str, wanted: Mapping[tuple[str, str], str], creates: Mapping[tuple[str, str], list[dict[str, Any]]]
) -> tuple[list[str], list[str]]:
    """(children never created, the launcher's create received before a dependency was stored) of one job.
    A launcher create known only to the second counts as received at the end of that second: a dependency
    stored within it may have come first."""
    lost: list[str] = []
    deps_done = []
    launcher_at = None
    for key, role in wanted.items():
        made = creates.get(key)
        if not made:
            lost.append(f"{key[0]}/{key[1]} never created")
            continue
        if role == "launcher":
            received = ts(made[0]["requestReceivedTimestamp"])
            launcher_at = received + 1.0 if made[0].get(WHOLE_SECOND) else received
        else:
            deps_done.append((ts(made[0]["stageTimestamp"]), key))
    early: list[str] = []
    if launcher_at is not None:
        late = [f"{k[0]}/{k[1]}" for t, k in deps_done if t > launcher_at]
        missing = len(deps_done) < len(wanted) - 1
        if late or missing:
            early.append(f"{job}: launcher before {late or 'a missing dependency'}")
    return lost, early


def check(
    cc: ChaosCluster,
    scenario: str,
    namespace: str,
    uids: dict[str, str],
    workers: int,
    since: float,
    stuck: set[str],
    recorder: StatusRecorder,
) -> Report:
    assert cc.admin is not None
    events = cc.audit(since)
    writes = operator_writes(events, namespace)
    timeline = lease_timeline(cc.audit(0))
    report = Report(scenario, len(uids), stuck=sorted(stuck), operator_writes=len(writes))
    recorder.wait_finished(sorted(uids))
    report.recorder = recorder.problems(sorted(uids))
    report.status_regressions = recorder.regressions()
    report.extra["recorder_reconnects"] = recorder.reconnects
    report.extra["created_false_failedcreate_versions"] = recorder.flaps()

    # no write by a non-leader: the Lease's holder when the API server received the write
    for e in writes:
        who = identity_of(e)
        assert who is not None
        holder = holder_at(timeline, ts(e["requestReceivedTimestamp"]))
        if holder != who[0]:
            ref = e["objectRef"]
            what = f"{e['verb']} {ref.get('resource')}/{ref.get('name')}"
            report.non_leader_writes.append(f"{what} by {who[0][-8:]} while {holder[-8:] or 'nobody'} led")

    live = {
        (res.plural, o["metadata"]["name"]): o
        for res in (POD, SERVICE, CONFIGMAP, SECRET, JOB)
        for o in cc.admin.list(res, namespace)["items"]
    }
    creates, stored = stored_creates(writes, live, set(uids.values()))
    report.extra.update(stored)
    for (plural, name), made in creates.items():
        if plural in CHILD_PLURALS and len(made) > 1:
            report.duplicates.append(f"{plural}/{name} created {len(made)} times")

    for job in uids:
        lost, early = launcher_order(job, wanted_children(job, workers), creates)
        report.lost += lost
        report.launcher_before_deps += early

    # orphans: children of no job of ours, and workers left running after their job finished
    job_uids = set(uids.values())
    for res in (POD, SERVICE, CONFIGMAP, SECRET, JOB):
        for o in cc.admin.list(res, namespace)["items"]:
            meta = o["metadata"]
            if res is CONFIGMAP and meta["name"] == "kube-root-ca.crt":
                continue
            refs = [r for r in meta.get("ownerReferences") or [] if r.get("controller")]
            owner = refs[0]["uid"] if refs else ""
            if res is POD and refs and refs[0]["kind"] == "Job":
                continue  # a launcher pod belongs to its Job (the garbage collector's business)
            if owner not in job_uids:
                report.orphans.append(f"{res.plural}/{meta['name']} owned by {owner or 'nobody'}")
            elif res is POD and not meta.get("deletionTimestamp"):
                report.orphans.append(f"pods/{meta['name']}: a worker left after its job finished")
    report.extra["operator_write_codes"] = dict(Counter(str(e["responseStatus"].get("code")) for e in writes))
    return report


def children_created(cc: ChaosCluster, namespace: str, since: float = 0.0) -> int:
    """How many children the operator created in ``namespace`` (201 in the audit log) since ``since``."""
    return sum(
        1
        for e in operator_writes(cc.audit(since), namespace)
        if e["verb"] == "create"
        and e["objectRef"].get("resource") in CHILD_PLURALS
        and (e.get("responseStatus") or {}).get("code") == 201
    )


def wait_children_created(cc: ChaosCluster, namespace: str, n: int, timeout: float = 120) -> None:
    """Until the operator created ``n`` children in ``namespace`` (a fault placed mid-build)."""
    wait_for(lambda: children_created(cc, namespace) >= n, f"{n} children created", timeout)


def jobs_building(cc: ChaosCluster, namespace: str, names: list[str], workers: int) -> int:
    """How many of the jobs have fewer children than wanted right now."""
    assert cc.admin is not None
    present = {
        (res.plural, o["metadata"]["name"])
        for res in (POD, SERVICE, CONFIGMAP, SECRET, JOB)
        for o in cc.admin.list(res, namespace)["items"]
    }
    return sum(1 for name in names if not set(wanted_children(name, workers)) <= present)


@contextlib.contextmanager
def running(*operators: OperatorRunner) -> Iterator[None]:
    try:
        yield
    finally:
        for op in operators:
            op.stop(timeout=10)
