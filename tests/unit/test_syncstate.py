"""L0: the sync's small pure decisions: status comparison, managedBy, resume's startTime."""

from __future__ import annotations

from reconcile.mpijob.syncstate import (
    is_managed_externally,
    launcher_resume_needs_start_time_cleared,
    moot_child_event,
    only_counts_changed,
    status_changed,
)


def cond(t, s, reason="r", ts="2026-01-01T00:00:00Z"):
    return {"type": t, "status": s, "reason": reason, "lastTransitionTime": ts, "lastUpdateTime": ts}


def test_status_change_ignores_moved_condition_timestamps_only():
    old = {"conditions": [cond("Created", "True")], "replicaStatuses": {"Worker": {}}}
    moved = {"conditions": [cond("Created", "True", ts="2026-01-02T00:00:00Z")], "replicaStatuses": {}}
    assert not status_changed(old, moved)
    assert status_changed(old, {**old, "conditions": [cond("Created", "True", reason="other")]})
    assert status_changed(old, {**old, "startTime": "2026-01-01T00:00:00Z"})
    assert status_changed(old, {**old, "replicaStatuses": {"Worker": {"active": 1}}})
    assert status_changed({}, {"conditions": [cond("Created", "True")]})


def test_managed_by_other_controller():
    assert is_managed_externally({"spec": {"runPolicy": {"managedBy": "kueue.x-k8s.io/multikueue"}}})
    assert not is_managed_externally({"spec": {"runPolicy": {"managedBy": "kubeflow.org/mpi-operator"}}})
    assert not is_managed_externally({"spec": {}})


def launcher(suspend, start_time=None, owner="u1"):
    job = {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": "pi-launcher", "ownerReferences": [{"uid": owner, "controller": True}]},
        "spec": {"suspend": suspend},
    }
    if start_time:
        job["status"] = {"startTime": start_time}
    return job


def test_resume_clears_start_time_only_when_resuming_a_started_launcher():
    t = "2026-01-01T00:00:00Z"
    live = launcher(True, t)
    assert launcher_resume_needs_start_time_cleared([launcher(False)], [live]) is live
    assert launcher_resume_needs_start_time_cleared([launcher(True)], [live]) is None
    assert launcher_resume_needs_start_time_cleared([launcher(False)], [launcher(True)]) is None
    assert launcher_resume_needs_start_time_cleared([launcher(False)], [launcher(False, t)]) is None
    assert launcher_resume_needs_start_time_cleared([launcher(False)], [launcher(True, t, owner="x")]) is None


RUNNING = {"conditions": [{"type": "Created", "status": "True"}, {"type": "Running", "status": "True"}]}


def test_only_counts_changed_is_a_replica_count_change_on_a_status_with_conditions():
    old = {**RUNNING, "replicaStatuses": {"Worker": {"active": 1}}}
    assert only_counts_changed(old, {**RUNNING, "replicaStatuses": {"Worker": {"active": 3}}})
    assert not only_counts_changed(old, {**RUNNING, "replicaStatuses": {}, "completionTime": "t"})
    done = {"conditions": [*RUNNING["conditions"], {"type": "Succeeded", "status": "True"}]}
    assert not only_counts_changed(old, {**done, "replicaStatuses": {"Worker": {"active": 3}}})
    # the first status is never held back
    assert not only_counts_changed({}, {"replicaStatuses": {"Worker": {"active": 1}}})


def _pod(terminating: bool) -> dict:
    meta: dict = {"name": "pi-worker-0", "namespace": "ns"}
    if terminating:
        meta["deletionTimestamp"] = "2025-06-01T12:00:00Z"
    return {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "status": {"phase": "Running"}}


SUCCEEDED = {"conditions": [{"type": "Succeeded", "status": "True"}]}
RUNNING = {"conditions": [{"type": "Running", "status": "True"}]}


def test_a_finished_jobs_pods_going_away_ask_for_no_sync():
    alive, going = _pod(False), _pod(True)
    assert moot_child_event(SUCCEEDED, alive, going)  # its deletion started
    assert moot_child_event(SUCCEEDED, going, going)  # its grace period ran
    assert moot_child_event(SUCCEEDED, going, None)  # gone
    assert moot_child_event({"conditions": [{"type": "Failed", "status": "True"}]}, going, None)


def test_a_running_jobs_pods_and_other_changes_still_sync():
    alive, going = _pod(False), _pod(True)
    assert not moot_child_event(RUNNING, alive, going)  # a lost worker is replaced
    assert not moot_child_event(RUNNING, going, None)
    assert not moot_child_event(SUCCEEDED, alive, None)  # deleted without a grace period: the sync reads it
    assert not moot_child_event(SUCCEEDED, alive, alive)
    cm = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c", "deletionTimestamp": "x"}}
    assert not moot_child_event(SUCCEEDED, cm, None)
