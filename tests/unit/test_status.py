"""status(), events(), next_wakeup() and ttl_expired() on hand-made situations."""

from datetime import timedelta

from render import Config, Event, events, next_wakeup, status, ttl_expired
from render.conditions import set_condition
from tests.unit.render_helpers import NOW, conds, job, launcher, launcher_pod, observed, ts, worker

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


def test_first_status_and_running():
    j = job()
    first = status(j, observed(), CFG)
    assert conds(first)["Created"]["reason"] == "MPIJobCreated"
    assert first["startTime"] == ts()
    assert first["replicaStatuses"] == {"Worker": {}}  # no launcher Job yet; no selector, as upstream
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
    assert conds(st)["Restarting"]["message"] == "1/2 workers are evicted"
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
    assert failed["reason"] == "BackoffLimitExceeded/OOMKilled"
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
    fixed = status(j, observed(), CFG)
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
