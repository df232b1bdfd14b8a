"""status(), events(), next_wakeup() and ttl_expired() on hand-made situations."""

from datetime import timedelta

import pytest
import yaml

from render import Config, Event, events, next_wakeup, status, ttl_expired
from render.conditions import is_finished, set_condition
from render.timeutil import format_time, parse_time
from tests.unit.golden_cases import GOLDEN, cases
from tests.unit.render_helpers import (
    NOW,
    conds,
    created_children,
    job,
    launcher,
    launcher_pod,
    observed,
    owned,
    ts,
    worker,
)

CFG = Config()


def test_set_condition_semantics():
    c = set_condition([], "Running", "True", "MPIJobRunning", "running", "t1")
    assert set_condition(c, "Running", "True", "MPIJobRunning", "other message", "t2") is c  # no-op
    c2 = set_condition(c, "Running", "True", "OtherReason", "m", "t2")
    assert c2[0]["lastTransitionTime"] == "t1" and c2[0]["lastUpdateTime"] == "t2"
    c3 = set_condition(c2, "Restarting", "True", "MPIJobRestarting", "m", "t3")
    assert [x["type"] for x in c3] == ["Restarting"]  # Running and Restarting replace each other
    c4 = set_condition(c, "Succeeded", "True", "MPIJobSucceeded", "m", "t4")
    assert [(x["type"], x["status"]) for x in c4] == [("Running", "False"), ("Succeeded", "True")]
    assert (c4[0]["lastTransitionTime"], c4[0]["lastUpdateTime"]) == ("t1", "t1")  # as upstream


def _dashboard_run_time(st: dict) -> timedelta:
    """What a dashboard computes: the finish condition's transition minus Running's."""
    c = conds(st)
    end = c["Succeeded"] if c.get("Succeeded", {}).get("status") == "True" else c["Failed"]
    return parse_time(end["lastTransitionTime"]) - parse_time(c["Running"]["lastTransitionTime"])


def test_run_time_from_conditions_is_start_of_running_to_finish():
    j = job()
    j["status"] = status(j, observed(now=NOW), CFG)
    started = NOW + timedelta(minutes=2)
    running = observed(worker(0), worker(1), launcher(), launcher_pod("a", "Running", ts()), now=started)
    j["status"] = status(j, running, CFG)
    finished = NOW + timedelta(minutes=9, seconds=30)
    done = launcher(conditions=[{"type": "Complete", "status": "True"}], completionTime=format_time(finished))
    ended = observed(worker(0), worker(1), done, launcher_pod("a", "Succeeded", ts()), now=finished)
    j["status"] = status(j, ended, CFG)
    assert _dashboard_run_time(j["status"]) == timedelta(minutes=7, seconds=30)
    assert conds(j["status"])["Running"]["status"] == "False"
    # A failure keeps it the same way.
    k = job()
    k["status"] = status(k, observed(now=NOW), CFG)
    k["status"] = status(k, running, CFG)
    failed_job = launcher(conditions=[{"type": "Failed", "status": "True", "reason": "BackoffLimitExceeded"}])
    k["status"] = status(k, observed(worker(0), worker(1), failed_job, now=finished), CFG)
    assert _dashboard_run_time(k["status"]) == timedelta(minutes=7, seconds=30)


def test_created_only_once_every_child_of_the_creation_exists():
    """Upstream writes status after creating the children, so its Created=True means they exist."""
    j = job()
    assert "Created" not in conds(status(j, observed(), CFG))
    children = created_children()
    for missing in range(len(children)):
        partial = children[:missing] + children[missing + 1 :]
        assert "Created" not in conds(status(j, observed(*partial), CFG)), children[missing]["metadata"]
    assert conds(status(j, observed(*children), CFG))["Created"]["status"] == "True"
    # Suspended: no workers yet, the launcher Job suspended. WaitForWorkersReady: no launcher yet.
    suspended = job(runPolicy={"suspend": True})
    assert "Created" in conds(status(suspended, observed(*children[:3], launcher(suspend=True)), CFG))
    assert "Created" not in conds(status(suspended, observed(*children[:3]), CFG))
    waiting = job(launcherCreationPolicy="WaitForWorkersReady")
    assert "Created" in conds(status(waiting, observed(*children[:-1]), CFG))
    gang = Config(gang_scheduling="volcano")
    assert "Created" not in conds(status(j, observed(*children), gang))
    podgroup = owned("PodGroup", "pi", "scheduling.volcano.sh/v1beta1")
    assert "Created" in conds(status(j, observed(*children, podgroup), gang))


def test_first_status_and_running():
    j = job()
    first = status(j, observed(*created_children()), CFG)
    assert conds(first)["Created"]["reason"] == "MPIJobCreated"
    assert first["startTime"] == ts()
    # The status follows the children just created: the launcher Job exists, no pods yet; no selector.
    assert first["replicaStatuses"] == {"Launcher": {}, "Worker": {}}
    j["status"] = first
    later = NOW + timedelta(minutes=1)
    obs = observed(worker(0), worker(1), launcher(), launcher_pod("a", "Running", ts()), now=later)
    st = status(j, obs, CFG)
    assert conds(st)["Running"]["status"] == "True"
    assert st["startTime"] == first["startTime"]
    assert st["replicaStatuses"]["Worker"]["active"] == 2
    assert st["replicaStatuses"]["Launcher"]["active"] == 1
    assert events(j, first, st) == [Event("Normal", "MPIJobRunning", "MPIJob ns/pi is running.")]
    j["status"] = st
    assert status(j, obs, CFG) == st and events(j, st, st) == []


def test_suspend_and_resume_reset_start_time():
    j = job(runPolicy={"suspend": True})
    st = status(j, observed(), CFG)
    assert "startTime" not in st
    assert conds(st)["Suspended"]["status"] == "True"
    assert conds(st)["Running"]["reason"] == "MPIJobSuspended"
    j["status"] = {**st, "startTime": ts(3600)}
    j["spec"]["runPolicy"]["suspend"] = False
    resumed = status(j, observed(), CFG)
    assert (
        conds(resumed)["Suspended"] | {"status": "False", "reason": "MPIJobResumed"}
        == conds(resumed)["Suspended"]
    )
    assert resumed["startTime"] == ts()
    assert [e.reason for e in events(j, j["status"], resumed)] == ["MPIJobResumed"]


def test_worker_failure_restarting_then_running_again():
    j = job()
    j["status"] = status(
        j, observed(worker(0), worker(1), launcher(), launcher_pod("a", "Running", ts())), CFG
    )
    assert conds(j["status"])["Running"]["status"] == "True"
    failed = status(
        j, observed(worker(0), worker(1, "Failed"), launcher(), launcher_pod("a", "Running", ts())), CFG
    )
    assert conds(failed)["Restarting"]["reason"] == "MPIJobRestarting"
    assert "Running" not in conds(failed)
    j["status"] = failed
    pending = status(
        j, observed(worker(0), worker(1, "Pending"), launcher(), launcher_pod("a", "Running", ts())), CFG
    )
    assert pending["conditions"] == failed["conditions"]  # still restarting while the replacement starts
    back = status(j, observed(worker(0), worker(1), launcher(), launcher_pod("a", "Running", ts())), CFG)
    assert conds(back)["Running"]["status"] == "True" and "Restarting" not in conds(back)


def test_eviction_is_reported_and_not_terminal():
    j = job()
    evicted = worker(0, "Failed", reason="Evicted")
    st = status(j, observed(evicted, worker(1), launcher()), CFG)
    assert conds(st)["Restarting"]["reason"] == "MPIJobEvicted"
    message = "1/2 workers are evicted: pod pi-worker-0 (Evicted). They are being replaced."
    assert conds(st)["Restarting"]["message"] == message
    assert "Failed" not in conds(st) and "completionTime" not in st


def test_launcher_failure_rolls_up_newest_pod():
    failed_cond = {
        "type": "Failed",
        "status": "True",
        "reason": "BackoffLimitExceeded",
        "message": "Job failed",
    }
    old = launcher_pod(
        "old", "Failed", ts(600), containerStatuses=[{"name": "l", "state": {"terminated": {"exitCode": 1}}}]
    )
    new = launcher_pod(
        "new",
        "Failed",
        ts(60),
        containerStatuses=[{"name": "l", "state": {"terminated": {"exitCode": 137, "reason": "OOMKilled"}}}],
    )
    st = status(job(), observed(launcher(conditions=[failed_cond], failed=2), old, new), CFG)
    failed = conds(st)["Failed"]
    assert failed["reason"] == "BackoffLimitExceeded"  # upstream's reason; the detail is in the message
    assert failed["message"] == "Job failed: pod pi-launcher-new container l exited with code 137 (OOMKilled)"
    assert st["completionTime"] == ts()
    assert conds(st)["Running"]["status"] == "False"  # #787: a finished job always shows Running
    assert st["replicaStatuses"]["Launcher"]["failed"] == 2


def test_succeeded_uses_job_completion_time_and_is_terminal():
    j = job()
    done = launcher(conditions=[{"type": "Complete", "status": "True"}], completionTime=ts(30))
    st = status(j, observed(done), CFG)
    assert conds(st)["Succeeded"]["status"] == "True" and st["completionTime"] == ts(30)
    j["status"] = st
    # a later failure signal does not change a finished job
    assert conds(status(j, observed(done, worker(0, "Failed", reason="Evicted")), CFG)) == conds(st)


def test_deadline_counts_from_start_time_and_ttl():
    j = job(runPolicy={"activeDeadlineSeconds": 600, "ttlSecondsAfterFinished": 60})
    j["status"] = status(j, observed(), CFG)
    assert next_wakeup(j, j["status"], NOW) == NOW + timedelta(seconds=600)
    before = status(j, observed(now=NOW + timedelta(seconds=599)), CFG)
    assert "Failed" not in conds(before)
    after = status(j, observed(now=NOW + timedelta(seconds=600)), CFG)
    assert conds(after)["Failed"]["reason"] == "DeadlineExceeded"
    assert after["completionTime"] == (NOW + timedelta(seconds=600)).strftime("%Y-%m-%dT%H:%M:%SZ")
    done = NOW + timedelta(seconds=600)
    assert next_wakeup(j, after, done) == done + timedelta(seconds=60)
    assert not ttl_expired(j, after, done + timedelta(seconds=59))
    assert ttl_expired(j, after, done + timedelta(seconds=60))
    assert not ttl_expired(job(), after, done + timedelta(days=1))  # no TTL set


def test_conflict_sets_created_false_then_true():
    j = job()
    foreign = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "pi-config", "namespace": "ns"}}
    st = status(j, observed(foreign), CFG)
    created = conds(st)["Created"]
    assert (created["status"], created["reason"]) == ("False", "ErrResourceExists")
    assert (
        created["message"]
        == 'Resource "pi-config" of Kind "ConfigMap" already exists and is not managed by MPIJob'
    )
    assert events(j, {}, st)[0] == Event("Warning", "ErrResourceExists", created["message"])
    j["status"] = st
    fixed = status(j, observed(*created_children()), CFG)
    assert conds(fixed)["Created"]["status"] == "True"


def test_invalid_spec_fails_with_paths():
    j = job()
    j["spec"]["mpiReplicaSpecs"]["Worker"]["replicas"] = -1
    st = status(j, observed(), CFG)
    failed = conds(st)["Failed"]
    assert failed["reason"] == "ValidationError"
    assert "spec.mpiReplicaSpecs[Worker].replicas" in failed["message"]
    assert st["completionTime"] == ts()


def test_managed_by_other_controller_leaves_status_alone():
    j = job(runPolicy={"managedBy": "kueue.x-k8s.io/multikueue"})
    j["status"] = {"conditions": [{"type": "Created", "status": "True", "reason": "Remote"}]}
    assert status(j, observed(worker(0)), CFG) == j["status"]
    assert next_wakeup(j, j["status"], NOW) is None


def test_restarting_only_after_a_real_restart_and_never_on_a_finished_job():
    j = job()
    running = [worker(0), worker(1), launcher(failed=1)]
    j["status"] = status(j, observed(*running, launcher_pod("a", "Running", ts(120))), CFG)
    failed_pod = launcher_pod("a", "Failed", ts(120))
    # The pod failed and the Job made no new one: nothing restarted.
    st = status(j, observed(*running, failed_pod), CFG)
    assert "Restarting" not in conds(st) and conds(st)["Running"]["status"] == "True"
    # The Job made a new pod: a real restart.
    st = status(j, observed(*running, failed_pod, launcher_pod("b", "Pending", ts(60))), CFG)
    assert conds(st)["Restarting"]["status"] == "True"
    assert st["conditions"][-1]["type"] == "Restarting"
    j["status"] = st
    gone = launcher(
        conditions=[{"type": "Failed", "status": "True", "reason": "BackoffLimitExceeded"}], failed=2
    )
    st = status(j, observed(worker(0), worker(1), gone, failed_pod, launcher_pod("b", "Failed", ts(60))), CFG)
    assert conds(st)["Restarting"]["status"] == "False"
    assert conds(st)["Failed"]["reason"] == "BackoffLimitExceeded"
    assert st["conditions"][-1]["type"] == "Failed"
    # A finished status written by an older version with Restarting still True is corrected.
    legacy = job()
    legacy["status"] = {
        **st,
        "conditions": [*st["conditions"][:-1], {**conds(st)["Restarting"], "status": "True"}],
    }
    legacy["status"]["conditions"].append(conds(st)["Failed"])
    fixed = status(legacy, observed(), CFG)
    assert conds(fixed)["Restarting"]["status"] == "False" and fixed["conditions"][-1]["type"] == "Failed"


# The state each golden case shows in `kubectl get mpijobs` (`.status.conditions[-1:].type`), by state.
CASES_BY_STATE: dict[str | None, tuple[str, ...]] = {
    # No condition: nothing observed yet (Created waits for the children), or managed by MultiKueue.
    None: (
        "cluster-domain",
        "gang-wait-for-workers",
        "horovod-tensorflow-mnist",
        "host-network",
        "intel-pi",
        "lammps-lj",
        "managed-by-multikueue",
        "mpi4py-bench",
        "mpich-pi",
        "openmpi-pi",
        "scheduler-plugins",
        "tensorflow-benchmarks-gpu",
        "volcano",
        "workload-gang",
        "workload-gang-v1alpha2",
        "workload-gang-v1beta1",
    ),
    "Created": (
        "conflict",
        "resumed",
        "wait-for-workers-holding",
        "wait-for-workers-releasing",
        "wait-for-workers-resumed",
        "workload-unschedulable",
    ),
    "Running": (
        "launcher-pod-failed-not-retried",
        "lost-node-force-delete",
        "run-launcher-as-worker",
        "running",
        "scale-down",
        "scale-up",
        "workload-scale-down",
        "workload-scale-down-v1beta1",
        "workload-unavailable",
    ),
    "Restarting": (
        "drained-worker",
        "evicted-worker",
        "failed-worker-backoff",
        "failed-worker-replaced",
        "launcher-retrying",
    ),
    "Suspended": ("suspended", "suspended-while-running"),
    "Succeeded": ("launcher-succeeded-cleanup", "ttl-expired"),
    "Failed": (
        "deadline-exceeded",
        "invalid",
        "launcher-failed-after-restart",
        "launcher-failed-oomkilled",
        "worker-backoff-limit-exceeded",
        "workers-unreachable",
    ),
}
GOLDEN_STATE = {case: state for state, names in CASES_BY_STATE.items() for case in names}


def test_every_golden_case_has_an_expected_state():
    assert sorted(GOLDEN_STATE) == cases()
    assert sum(map(len, CASES_BY_STATE.values())) == len(GOLDEN_STATE), "a case under two states"


@pytest.mark.parametrize(("case", "state"), sorted(GOLDEN_STATE.items()))
def test_state_column_reads_the_current_state(case, state):
    st = yaml.safe_load((GOLDEN / case / "status.yaml").read_text()) or {}
    c = st.get("conditions") or []
    assert (c[-1]["type"] if c else None) == state
    if c:
        assert c[-1]["status"] == "True" or c[-1]["type"] == "Created"
        assert not (conds(st).get("Restarting", {}).get("status") == "True" and is_finished(c))


def test_replica_statuses_follow_upstream_in_every_state():
    """Upstream's counting: Launcher only once its Job exists (then kept as last seen), Worker always, `{}`
    while suspended or once the launcher Job finished, workers past `replicas` not counted, never a
    `selector` (Kueue's MultiKueue e2e compares `{active: 0, succeeded: 1}`-style maps exactly)."""
    j = job()
    running = launcher(active=1)
    pods = [worker(0), worker(1), worker(2), launcher_pod("a", "Running", ts())]
    st = status(j, observed(running, *pods), CFG)
    assert st["replicaStatuses"] == {"Launcher": {"active": 1}, "Worker": {"active": 2}}

    j["status"] = st
    gone = status(j, observed(*pods[:2]), CFG)  # launcher Job deleted: its entry stays as last seen
    assert gone["replicaStatuses"] == {"Launcher": {"active": 1}, "Worker": {"active": 2}}

    complete = launcher(succeeded=1, conditions=[{"type": "Complete", "status": "True"}])
    done = launcher_pod("a", "Succeeded", ts())
    st = status(j, observed(complete, worker(0), worker(1), done), CFG)
    assert st["replicaStatuses"] == {"Launcher": {"succeeded": 1}, "Worker": {}}

    failed = launcher(failed=2, conditions=[{"type": "Failed", "status": "True"}])
    st = status(job(), observed(failed, worker(0), launcher_pod("b", "Running", ts())), CFG)
    assert st["replicaStatuses"] == {"Launcher": {"failed": 2}, "Worker": {}}

    suspended = job(runPolicy={"suspend": True})
    st = status(suspended, observed(launcher(suspend=True), worker(0)), CFG)
    assert st["replicaStatuses"] == {"Launcher": {}, "Worker": {}}


def test_a_launcher_pod_that_ended_stays_active_until_its_job_counts_the_end():
    """Between a launcher pod's end and the Job controller taking it in, the Job still shows it active: the
    count stays, so the gap costs no status write of its own."""
    j = job()
    pods = [worker(0), worker(1), worker(2)]
    running = status(j, observed(launcher(active=1), *pods, launcher_pod("a", "Running", ts())), CFG)
    j["status"] = running
    for end in ("Succeeded", "Failed"):
        ended = status(j, observed(launcher(active=1), *pods, launcher_pod("a", end, ts())), CFG)
        assert ended == running
    # The Job counted the failure and made a new pod, still Pending: nothing of the launcher runs.
    retry = [launcher_pod("a", "Failed", ts(60)), launcher_pod("b", "Pending", ts())]
    st = status(j, observed(launcher(active=1, failed=1), *pods, *retry), CFG)
    assert st["replicaStatuses"]["Launcher"] == {"failed": 1}
    # The Job no longer shows the pod active (e.g. it is being suspended): neither does the count.
    st = status(j, observed(launcher(), *pods, launcher_pod("a", "Succeeded", ts())), CFG)
    assert "active" not in st["replicaStatuses"]["Launcher"]


def test_a_job_that_ran_before_its_created_status_was_written_still_reads_created():
    """Found by the chaos tier: a create refused once (Created=False/FailedCreate), the retry created the
    rest, the launcher ran and finished and the workers were cleaned up before a status write got
    through: Created must not stay False on a finished job."""
    j = job()
    j["status"] = {
        "conditions": [{"type": "Created", "status": "False", "reason": "FailedCreate", "message": "m"}]
    }
    done = launcher(conditions=[{"type": "Complete", "status": "True"}], succeeded=1, completionTime=ts())
    st = status(j, observed(*created_children()[:3], done, launcher_pod("a", "Succeeded", ts())), CFG)
    assert conds(st)["Created"]["status"] == "True"
    assert conds(st)["Succeeded"]["status"] == "True"
