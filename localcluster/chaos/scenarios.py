"""The chaos scenarios, each a function of its size and seed returning a ``Report``: tests/chaos runs them
short, benchmarks/chaos_bench.py at full size."""

from __future__ import annotations

import contextlib
import random
import re
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from typing import Any

from localcluster.chaos.blackhole import PartitionProxy
from localcluster.chaos.faultproxy import FaultProxy
from localcluster.chaos.harness import (
    KNOB,
    LOCK_NS,
    ChaosCluster,
    Report,
    StatusRecorder,
    check,
    children_created,
    holder_at,
    identity_of,
    jobs_building,
    lease_timeline,
    mpijob,
    operator_writes,
    running,
    submit,
    ts,
    wait_all_succeeded,
    wait_children_created,
)
from localcluster.operator import OperatorRunner
from localcluster.wait import wait_for
from reconcile.mpijob.kinds import MPIJOB
from reconcile.runtime.kube import POD as POD_RES
from reconcile.runtime.leader import LEASE_DURATION, RENEW_DEADLINE, RETRY_PERIOD

WORKERS = 2
TIMEOUT = 240.0
# The operator's own Lease timings, for the scenarios where the tier's short ones would not do: what the
# client's deadlines are chosen against, and a renewal (a GET and a PUT) on a slow server.
DEFAULT_LEASE = (
    f"--leader-elect-lease-duration={LEASE_DURATION:g}",
    f"--leader-elect-renew-deadline={RENEW_DEADLINE:g}",
    f"--leader-elect-retry-period={RETRY_PERIOD:g}",
)
GRACE_PERIOD = 30.0  # the operator Deployment's terminationGracePeriodSeconds (Kubernetes' default)


def _names(prefix: str, n: int) -> list[str]:
    return [f"{prefix}{i}" for i in range(n)]


def _exited(report: Report, *ops: OperatorRunner) -> None:
    for op in ops:
        if not op.alive():
            report.exits.append(f"{op.log_path.name} exited with {op.returncode()}:\n{op.log_tail(3000)}")


def _wait_standby(op: OperatorRunner, timeout: float = 60.0) -> None:
    """Until ``op`` runs as a standby: its probes answer, it does not lead."""
    wait_for(
        lambda: op.http("/healthz")[0] == 200 and not op.is_leader(),
        "a standby",
        timeout,
        0.2,
        describe=op.log_tail,
        alive=op.alive,
    )


def _leader_and_standby(a: OperatorRunner, b: OperatorRunner) -> None:
    """``a`` leads, then ``b`` runs as its standby."""
    a.start(timeout=120)  # (b has not started yet)
    b.start(wait=False)
    _wait_standby(b)


def _settle(cc: ChaosCluster, namespace: str, timeout: float = 30.0) -> None:
    """Until the finished jobs' workers are gone (cleanPodPolicy Running), or the timeout."""
    assert cc.admin is not None
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        pods = cc.admin.list(POD_RES, namespace, labelSelector="training.kubeflow.org/job-role=worker")[
            "items"
        ]
        if not pods:
            return
        time.sleep(1)


def _finish(
    cc: ChaosCluster,
    scenario: str,
    ns: str,
    uids: dict[str, str],
    since: float,
    recorder: StatusRecorder,
    timeout: float = TIMEOUT,
) -> Report:
    """Until every job succeeded (or ``timeout``: stuck) and the finished jobs' workers are gone, then the
    invariants checked."""
    assert cc.admin is not None
    stuck = wait_all_succeeded(cc.admin, ns, list(uids), timeout)
    _settle(cc, ns)
    return check(cc, scenario, ns, uids, WORKERS, since, stuck, recorder)


def _faults_mid_build(
    cc: ChaosCluster,
    ns: str,
    names: list[str],
    faults: int,
    rng: random.Random,
    fault: Callable[[], object],
) -> list[int]:
    """`faults` times, once the operator has created a random number (`rng`) of children more, `fault()`:
    always mid-build. Each number is drawn within what is left to create, leaving one create for each fault
    still to come, so that a build faster than the faults (a fault takes seconds) still meets them all.
    Returns the jobs building at each fault."""
    total = len(names) * (4 + WORKERS)
    per_fault = max(2, total // (faults + 1))
    building = []
    for i in range(faults):
        created = children_created(cc, ns)
        room = total - created - (faults - i)
        wait_children_created(cc, ns, created + rng.randint(1, max(1, min(per_fault, room))))
        building.append(jobs_building(cc, ns, names, WORKERS))
        fault()
    return building


@contextlib.contextmanager
def _faults_while_building(
    cc: ChaosCluster,
    scenario: str,
    names: tuple[str, str, str],
    jobs: int,
    faults: int,
    seed: int,
    fault: Callable[[OperatorRunner], object],
) -> Iterator[tuple[Report, OperatorRunner]]:
    """One operator builds `jobs` jobs while `fault(operator)` strikes `faults` times mid-build (see
    `_faults_mid_build`); its client paced (10 QPS), so that the build spans seconds and each fault lands
    within it on an idle machine too. `names`: the namespace's, the operator's and the jobs' prefix.
    Yields the checked report while the operator still runs, for what only the caller measures."""
    assert cc.admin is not None
    rng = random.Random(seed)
    namespace, operator, prefix = names
    ns = cc.namespace(f"chaos-{namespace}-{seed}")
    since = time.time()
    recorder = StatusRecorder(cc.admin, ns).start()
    op = cc.operator(operator, "--kube-api-qps=10", "--kube-api-burst=10")
    with running(op):
        op.start(timeout=120)
        jobs_names = _names(prefix, jobs)
        uids = submit(cc.admin, ns, jobs_names, WORKERS)
        building = _faults_mid_build(cc, ns, jobs_names, faults, rng, lambda: fault(op))
        report = _finish(cc, scenario, ns, uids, since, recorder)
        report.building_at_faults = building
        yield report, op
        _exited(report, op)
    recorder.stop()


def faulty_proxy(cc: ChaosCluster, jobs: int = 10, rate: float = 0.1, seed: int = 1) -> Report:
    """One operator behind the fault proxy: a share of its requests fail, every watch is cut."""
    assert cc.admin is not None
    ns = cc.namespace(f"chaos-proxy-{seed}")
    since = time.time()
    with FaultProxy(cc.cluster.server, rate=rate, seed=seed, **cc.proxy_args()) as proxy:
        op = cc.operator("proxy", kubeconfig=cc.proxy_kubeconfig(proxy.url))
        recorder = StatusRecorder(cc.admin, ns).start()
        with running(op):
            op.start(timeout=120)
            names = _names("p", jobs)
            uids = submit(cc.admin, ns, names, WORKERS)
            report = _finish(cc, "fault proxy", ns, uids, since, recorder)
            report.faults = dict(proxy.counts)
            _exited(report, op)
        recorder.stop()
    return report


def kill9(cc: ChaosCluster, jobs: int = 12, kills: int = 3, seed: int = 2) -> Report:
    """kill -9 of the operator at random moments (seeded) while it builds and runs the jobs."""

    def kill_and_start(op: OperatorRunner) -> None:
        op.kill()
        op.start(wait=False)  # a new identity: it waits for the dead one's Lease to expire

    faulted = _faults_while_building(cc, "kill -9", ("kill", "kill9", "k"), jobs, kills, seed, kill_and_start)
    with faulted as (report, _):
        report.faults = {"kill -9": kills}
    return report


def sigterm_handover(cc: ChaosCluster, jobs: int = 16, seed: int = 3) -> Report:
    """Two replicas; SIGTERM to the leader while it has a backlog. Measures the hand-over (SIGTERM until
    the standby's Lease write), the old leader's writes after SIGTERM and after the Lease moved, and the
    new leader's time from its Lease write to its first write."""
    assert cc.admin is not None
    rng = random.Random(seed)
    ns = cc.namespace(f"chaos-term-{seed}")
    since = time.time()
    recorder = StatusRecorder(cc.admin, ns).start()
    # upstream's Lease timings (15 s / 5 s / 3 s; ours are 15 / 10 / 2): the standby polls only every 3 s,
    # so a quick hand-over shows that it watches the Lease and takes it as soon as it is released.
    default_timings = (
        "--leader-elect-lease-duration=15",
        "--leader-elect-renew-deadline=5",
        "--leader-elect-retry-period=3",
    )
    # upstream's client limit, pinned: at the API server's pace (the defaults) the leader would be done
    # before a SIGTERM could find a backlog
    pinned = ("--kube-api-qps=5", "--kube-api-burst=10")
    a = cc.operator("term-a", *default_timings, *pinned)
    b = cc.operator("term-b", *default_timings, *pinned)
    with running(a, b):
        _leader_and_standby(a, b)
        names = _names("t", jobs)
        uids = submit(cc.admin, ns, names, WORKERS)
        # let the leader get going, then SIGTERM while most of the backlog is still queued
        deadline = time.monotonic() + 60
        while len(operator_writes(cc.audit(since), ns)) < 15 and time.monotonic() < deadline:
            time.sleep(0.2)
        time.sleep(rng.uniform(0.0, 1.0))
        sigterm = time.time()
        code = a.stop(timeout=20)
        exited = time.time()
        report = _finish(cc, "leader SIGTERM, two replicas", ns, uids, since, recorder)
        events = cc.audit(since)
        timeline = lease_timeline(cc.audit(0))
        old = holder_at(timeline, sigterm)
        moved = next(((t, who) for t, who in timeline if t > sigterm and who and who != old), None)
        writes = operator_writes(events, ns)
        by_old = [e for e in writes if identity_of(e) and identity_of(e)[0] == old]  # type: ignore[index]
        after_sigterm = [e for e in by_old if ts(e["requestReceivedTimestamp"]) > sigterm]
        report.extra.update(
            backlog_at_sigterm=jobs * (4 + WORKERS)
            - sum(1 for e in by_old if e["verb"] == "create" and e["responseStatus"].get("code") == 201),
            old_leader_exit_code=code,
            old_leader_exit_s=round(exited - sigterm, 3),
            old_leader_writes_after_sigterm=len(after_sigterm),
        )
        if moved is not None:
            new = moved[1]
            first = min(
                (ts(e["requestReceivedTimestamp"]) for e in writes if identity_of(e)[0] == new),  # type: ignore[index]
                default=None,
            )
            report.extra.update(
                handover_s=round(moved[0] - sigterm, 3),
                old_leader_writes_after_lease_moved=sum(
                    1 for e in by_old if ts(e["requestReceivedTimestamp"]) > moved[0]
                ),
                leader_to_first_write_s=None if first is None else round(first - moved[0], 3),
            )
        else:
            report.extra["handover_s"] = None
        report.faults = {"SIGTERM to the leader": 1}
        if code != 0:
            report.exits.append(f"the old leader exited with {code}")
        _exited(report, b)
    recorder.stop()
    return report


def leader_partition(cc: ChaosCluster, jobs: int = 100, hold: float = 60.0, seed: int = 6) -> Report:
    """Two replicas at the default Lease timings; the leader's connections black-holed for ``hold``
    seconds from the moment it sends a pod create (so that a write is in flight when the partition
    begins), then healed, with what was held delivered late. Measures the standby's take-over (from the
    partition to its Lease write), the old leader's writes after the new leader's first write (none may
    land), and the time from the heal to every job Succeeded."""
    assert cc.admin is not None
    rng = random.Random(seed)
    ns = cc.namespace(f"chaos-partition-{seed}")
    since = time.time()
    recorder = StatusRecorder(cc.admin, ns).start()
    # the first leader paced, so that its build is still going when the partition begins; the standby
    # at the defaults, as it would run
    pinned = ("--kube-api-qps=10", "--kube-api-burst=10")
    total = jobs * (4 + WORKERS)
    with PartitionProxy(cc.cluster.server, **cc.proxy_args()) as proxy:
        a = cc.operator("partition-a", *DEFAULT_LEASE, *pinned, kubeconfig=cc.proxy_kubeconfig(proxy.url))
        b = cc.operator("partition-b", *DEFAULT_LEASE)
        with running(a, b):
            _leader_and_standby(a, b)
            names = _names("n", jobs)
            uids = submit(cc.admin, ns, names, WORKERS)
            wait_children_created(cc, ns, rng.randint(total // 10, total // 4))
            pod_create = re.compile(rf"POST /api/v1/namespaces/{ns}/pods[ ?]".encode())
            proxy.partition_at(lambda head: pod_create.match(head) is not None)
            wait_for(lambda: proxy.partitions, "the leader's next pod create", 60)
            a.expect_exit()  # it finds the Lease taken after the heal, and exits to start again
            began = proxy.partitions[0][0]
            time.sleep(max(0.0, began + hold - time.time()))
            proxy.heal()
            healed = time.time()
            stuck = wait_all_succeeded(cc.admin, ns, names, TIMEOUT)
            succeeded_at = time.time()
            # its next renewal after the heal finds the Lease taken (a request may wait out its deadline)
            with contextlib.suppress(AssertionError):
                wait_for(lambda: not a.alive(), "the old leader to step down", 60, 0.5)
            _settle(cc, ns)
            report = check(cc, "leader partition, two replicas", ns, uids, WORKERS, since, stuck, recorder)
            timeline = lease_timeline(cc.audit(0))
            old = holder_at(timeline, began)
            moved = next(((t, who) for t, who in timeline if t > began and who and who != old), None)
            writes = operator_writes(cc.audit(since), ns)
            new_first = (
                None
                if moved is None
                else min(
                    (ts(e["requestReceivedTimestamp"]) for e in writes if identity_of(e)[0] == moved[1]),  # type: ignore[index]
                    default=None,
                )
            )
            landed_late = [
                e
                for e in writes
                if identity_of(e)[0] == old  # type: ignore[index]
                and new_first is not None
                and ts(e["stageTimestamp"]) > new_first
            ]
            for e in landed_late:
                ref = e["objectRef"]
                report.non_leader_writes.append(
                    f"{e['verb']} {ref.get('resource')}/{ref.get('name')} of the old leader landed after"
                    " the new leader's first write"
                )
            report.faults = {"black-hole partition of the leader": 1}
            report.extra.update(
                partition_s=round(healed - began, 1),
                takeover_s=None if moved is None else round(moved[0] - began, 2),
                converged_after_heal_s=round(max(0.0, succeeded_at - healed), 1),
                old_leader_exit_code=a.returncode(),
                **{k.replace(" ", "_"): v for k, v in proxy.counts.items()},
            )
            _exited(report, b)
    recorder.stop()
    return report


class _Sampler:
    """The operator's work queue depth and RSS, once a second, in a thread."""

    def __init__(self, op: OperatorRunner) -> None:
        self.op = op
        self.depth: list[float] = []
        self.rss: list[int] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="sampler", daemon=True)

    def start(self) -> _Sampler:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(10)

    def _run(self) -> None:
        while not self._stop.wait(1.0):
            with contextlib.suppress(OSError, ValueError):
                self.depth.append(self.op.metric("mpi_operator_workqueue_depth"))
                self.rss.append(self.op.proc.rss_bytes() if self.op.proc is not None else 0)


def slow_apiserver(cc: ChaosCluster, jobs: int = 100, latency: float = 2.0, seed: int = 7) -> Report:
    """One operator at its defaults behind a proxy that adds ``latency`` seconds to every request (watches
    included, nothing else injected). Samples its work queue depth and RSS every second; measures the time
    from submission to every job Succeeded."""
    assert cc.admin is not None
    ns = cc.namespace(f"chaos-slow-{seed}")
    since = time.time()
    proxy = FaultProxy(cc.cluster.server, rate=0.0, watch_cut=None, latency=latency, **cc.proxy_args())
    with proxy:
        op = cc.operator("slow", *DEFAULT_LEASE, kubeconfig=cc.proxy_kubeconfig(proxy.url))
        recorder = StatusRecorder(cc.admin, ns).start()
        with running(op):
            op.start(timeout=120)
            sampler = _Sampler(op).start()
            names = _names("s", jobs)
            submitted = time.monotonic()
            uids = submit(cc.admin, ns, names, WORKERS)
            stuck = wait_all_succeeded(cc.admin, ns, names, 4 * TIMEOUT)
            all_succeeded = time.monotonic() - submitted
            _settle(cc, ns)
            sampler.stop()
            report = check(cc, f"API server {latency:g} s slower", ns, uids, WORKERS, since, stuck, recorder)
            report.faults = {f"{latency:g} s added to every request": 1}
            _exited(report, op)
            # Its hand-over (drain, the writes in flight, the Lease's release: a GET and a PUT) takes
            # several round trips: it gets the Deployment's grace period, not the tier's 10 s.
            stopping = time.monotonic()
            code = op.stop(timeout=GRACE_PERIOD)
            if code != 0:
                report.exits.append(f"it exited with {code} after SIGTERM")
            report.extra.update(
                all_succeeded_s=round(all_succeeded, 1),
                peak_queue_depth=max(sampler.depth, default=None),
                peak_rss_mib=round(max(sampler.rss, default=0) / 2**20, 1),
                stop_after_sigterm_s=round(time.monotonic() - stopping, 1),
            )
        recorder.stop()
    return report


def etcd_stopped(cc: ChaosCluster, jobs: int = 100, seconds: float = 30.0, seed: int = 8) -> Report:
    """etcd stopped (SIGSTOP to the PID the cluster recorded) for ``seconds`` while one operator at its
    defaults builds ``jobs`` jobs, then continued: the API server answers errors or hangs meanwhile.
    Measures the time from etcd's return to every job Succeeded."""
    assert cc.admin is not None
    rng = random.Random(seed)
    ns = cc.namespace(f"chaos-etcd-{seed}")
    since = time.time()
    op = cc.operator("etcd", *DEFAULT_LEASE)
    recorder = StatusRecorder(cc.admin, ns).start()
    with running(op):
        op.start(timeout=120)
        names = _names("e", jobs)
        uids = submit(cc.admin, ns, names, WORKERS)
        total = jobs * (4 + WORKERS)
        wait_children_created(cc, ns, rng.randint(total // 20, total // 10))  # early: it builds fast
        building = jobs_building(cc, ns, names, WORKERS)
        with cc.cluster.paused("etcd"):
            time.sleep(seconds)
        back = time.monotonic()
        stuck = wait_all_succeeded(cc.admin, ns, names, TIMEOUT)
        converged = time.monotonic() - back
        _settle(cc, ns)
        report = check(cc, f"etcd stopped {seconds:g} s", ns, uids, WORKERS, since, stuck, recorder)
        report.faults = {f"etcd SIGSTOP for {seconds:g} s": 1}
        report.building_at_faults = [building]
        report.extra.update(
            converged_after_etcd_s=round(converged, 1),
            transient_errors=op.metric("mpi_operator_transient_errors_total") if op.alive() else None,
        )
        _exited(report, op)
    recorder.stop()
    return report


def apiserver_restart(cc: ChaosCluster, jobs: int = 8, restarts: int = 1, seed: int = 4) -> Report:
    """kube-apiserver SIGKILLed and started again (same port, same etcd) while the operator runs."""
    downtime = []

    def restart_apiserver(_: OperatorRunner) -> None:
        downtime.append(round(cc.cluster.restart_apiserver(kill=True), 2))

    scenario = "kube-apiserver SIGKILL + restart"
    names = ("apiserver", "apiserver", "a")
    with _faults_while_building(cc, scenario, names, jobs, restarts, seed, restart_apiserver) as (report, op):
        report.faults = {"kube-apiserver SIGKILL": restarts}
        report.extra["apiserver_down_s"] = downtime
        report.extra["transient_errors"] = (
            op.metric("mpi_operator_transient_errors_total") if op.alive() else None
        )
    return report


CRASH_MESSAGE = "sshd: no hostkeys available -- exiting."


def crashing_job(name: str) -> dict:
    """A job whose workers exit 1 a second after they start (kwok's pod-fail stage), and whose launcher
    waits as its gate would (held: it never finishes on its own)."""
    job = mpijob(name, WORKERS)
    specs = job["spec"]["mpiReplicaSpecs"]
    specs["Worker"]["template"]["metadata"] = {
        "annotations": {f"{KNOB}exit-code": "1", f"{KNOB}message": CRASH_MESSAGE}
    }
    specs["Launcher"]["template"]["metadata"]["annotations"][f"{KNOB}hold"] = "true"
    return job


def _failed_reasons(cc: ChaosCluster, namespace: str) -> dict[str, str]:
    assert cc.admin is not None
    out = {}
    for o in cc.admin.list(MPIJOB, namespace)["items"]:
        for c in (o.get("status") or {}).get("conditions") or []:
            if c["type"] == "Failed" and c["status"] == "True":
                out[o["metadata"]["name"]] = f"{c.get('reason')}: {c.get('message')}"
    return out


def _crashing_figures(
    cc: ChaosCluster, since: float, crash_ns: str, failed: dict[str, str]
) -> dict[str, Any]:
    """From the audit log: the crashing jobs' worker creates (the worst job's, with its deletes), who else
    deleted their pods, and how many held the Lease."""
    creates: dict[str, int] = {}
    for e in operator_writes(cc.audit(since), crash_ns):
        ref = e["objectRef"]
        if e["verb"] == "create" and ref.get("resource") == "pods" and e["responseStatus"].get("code") == 201:
            job = str(ref.get("name") or "").rsplit("-worker-", 1)[0]
            creates[job] = creates.get(job, 0) + 1
    worst = max(creates, key=lambda j: creates[j], default="")
    deletes = sum(
        1
        for e in operator_writes(cc.audit(since), crash_ns)
        if e["verb"] == "delete"
        and str((e.get("objectRef") or {}).get("name") or "").startswith(f"{worst}-worker-")
    )
    others = Counter(
        str(e.get("userAgent") or e.get("user", {}).get("username") or "?").split(" ")[0]
        for e in cc.audit(since)
        if e.get("verb") == "delete"
        and (e.get("objectRef") or {}).get("resource") == "pods"
        and (e.get("objectRef") or {}).get("namespace") == crash_ns
        and "-worker-" in str((e.get("objectRef") or {}).get("name") or "")
        and identity_of(e) is None
    )
    holders = {who for _, who in lease_timeline(cc.audit(0)) if who}
    return {
        "crashing_worst": f"{worst}: {creates.get(worst, 0)} creates, {deletes} deletes, "
        f"{failed.get(worst, 'not failed')[:200]}",
        "lease_holders": len(holders),
        "crashing_pod_deletes_by_others": dict(others),
        "crashing_worker_creates_max": max(creates.values(), default=0),
        "crashing_worker_creates_mean": round(sum(creates.values()) / max(1, len(creates)), 2),
        "crashing_worker_creates_total": sum(creates.values()),
        "crashing_operator_writes": len(operator_writes(cc.audit(since), crash_ns)),
    }


def crashing_neighbours(cc: ChaosCluster, healthy: int = 50, crashing: int = 50, seed: int = 5) -> Report:
    """Healthy jobs alone, then as many again beside jobs whose workers crash at start: the healthy ones
    must finish as fast, every crashing one must end Failed/WorkerBackoffLimitExceeded within its bound
    (fewer than workers + backoffLimit x workers pod creates each), and the invariants hold."""
    assert cc.admin is not None
    alone_ns = cc.namespace(f"chaos-alone-{seed}")
    ns = cc.namespace(f"chaos-beside-{seed}")
    crash_ns = cc.namespace(f"chaos-crashing-{seed}")
    op = cc.operator("crashing")
    with running(op):
        op.start(timeout=120)
        began = time.monotonic()
        alone_names = _names("h", healthy)
        submit(cc.admin, alone_ns, alone_names, WORKERS)
        stuck_alone = wait_all_succeeded(cc.admin, alone_ns, alone_names, TIMEOUT)
        alone_s = time.monotonic() - began
        _settle(cc, alone_ns)

        since = time.time()
        recorder = StatusRecorder(cc.admin, ns).start()
        crash_names = _names("c", crashing)
        crash_began = time.monotonic()
        for name in crash_names:
            cc.admin.create(MPIJOB, crash_ns, crashing_job(name))
        time.sleep(5)  # their crash loops are under way
        began = time.monotonic()
        names = _names("h", healthy)
        uids = submit(cc.admin, ns, names, WORKERS)
        stuck = wait_all_succeeded(cc.admin, ns, names, TIMEOUT)
        beside_s = time.monotonic() - began
        deadline = time.monotonic() + TIMEOUT
        while time.monotonic() < deadline and len(_failed_reasons(cc, crash_ns)) < crashing:
            time.sleep(1)
        crash_done_s = time.monotonic() - crash_began
        _settle(cc, ns)
        time.sleep(2)
        report = check(cc, "crashing neighbours", ns, uids, WORKERS, since, stuck, recorder)
        report.stuck += [f"{alone_ns}/{n} (alone)" for n in sorted(stuck_alone)]
        failed = _failed_reasons(cc, crash_ns)
        for name in crash_names:
            reason = failed.get(name, "not failed")
            if not reason.startswith("WorkerBackoffLimitExceeded: ") or CRASH_MESSAGE not in reason:
                report.stuck.append(f"{crash_ns}/{name}: {reason[:300]}")
        report.extra.update(_crashing_figures(cc, since, crash_ns, failed))
        report.extra.update(
            healthy_alone_s=round(alone_s, 1),
            healthy_beside_crashing_s=round(beside_s, 1),
            crashing_all_failed_s=round(crash_done_s, 1),
        )
        report.faults = {"jobs whose workers crash at start": crashing}
        _exited(report, op)
        recorder.stop()
    return report


__all__ = [
    "LOCK_NS",
    "apiserver_restart",
    "crashing_neighbours",
    "faulty_proxy",
    "kill9",
    "sigterm_handover",
]
