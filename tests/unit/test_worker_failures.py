"""Failed workers: back-off per index, counting each failed pod once, the bound, the evidence."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import attrs
import pytest

from render import Config, next_wakeup, render, status
from render import failures as f
from render.observed import Observed
from render.timeutil import format_time
from tests.unit.render_helpers import (
    NOW,
    by_kind,
    conds,
    created_children,
    job,
    launcher,
    names_of,
    observed,
    ts,
)

CFG = Config()


def failed(
    i: int, uid: str, finished: float = 1, ran: float = 1, code: int = 1, message: str = "", **st: Any
):
    """Worker i, Failed `finished` seconds before NOW after running `ran` seconds."""
    term: dict[str, Any] = {
        "exitCode": code,
        "reason": "Error",
        "startedAt": ts(finished + ran),
        "finishedAt": ts(finished),
    }
    if message:
        term["message"] = message
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": f"pi-worker-{i}",
            "namespace": "ns",
            "uid": uid,
            "ownerReferences": [
                {"apiVersion": "kubeflow.org/v2beta1", "kind": "MPIJob", "name": "pi", "controller": True}
                | {"uid": "aaaaaaaa-bbbb-4ccc-8ddd-eeeeeeeeeeee"}
            ],
        },
        "status": {
            "phase": "Failed",
            "containerStatuses": [{"name": "w", "state": {"terminated": term}}],
            **st,
        },
    }


def running(i: int, since: float) -> dict[str, Any]:
    pod = failed(i, f"run-{i}")
    pod["status"] = {
        "phase": "Running",
        "conditions": [{"type": "Ready", "status": "True"}],
        "containerStatuses": [{"name": "w", "state": {"running": {"startedAt": ts(since)}}}],
    }
    return pod


def parsed(**spec: Any):
    from render.parse import parse_mpijob

    return parse_mpijob(job(**spec))


def with_memory(obs: Observed, j) -> Observed:
    """The next sync's Observed: the same world, with what the controller remembered from this one."""
    return attrs.evolve(obs, worker_failures=f.count(j, obs))


def test_backoff_doubles_from_10_seconds_to_a_6_minute_cap():
    assert [f.backoff_seconds(n) for n in range(1, 10)] == [10, 20, 40, 80, 160, 320, 360, 360, 360]
    assert f.backoff_seconds(10**9) == 360


def test_each_failed_pod_is_counted_once_and_a_new_pod_counts_up():
    j = parsed()
    obs = observed(failed(1, "a"))
    first = f.count(j, obs)
    assert [(r.index, r.count, r.pod_uid) for r in first] == [(1, 1, "a")]
    again = with_memory(obs, j)
    assert f.count(j, again) == first  # idempotent: the same pod is not counted twice
    replaced = attrs.evolve(observed(failed(1, "b")), worker_failures=first)
    assert [(r.count, r.pod_uid) for r in f.count(j, replaced)] == [(2, "b")]
    # a replacement pod that is not (yet) failed keeps the count
    pending = attrs.evolve(observed(created_children()[3]), worker_failures=first)
    assert f.count(j, pending) == first


def test_the_count_starts_afresh_after_a_healthy_run():
    j = parsed()
    memory = f.count(j, observed(failed(0, "a")))
    memory = f.count(j, attrs.evolve(observed(failed(0, "b")), worker_failures=memory))
    assert memory[0].count == 2
    # a pod that ran ten minutes before it failed: a first failure again
    long_run = attrs.evolve(observed(failed(0, "c", ran=600)), worker_failures=memory)
    assert f.count(j, long_run)[0].count == 1
    # a pod running for ten minutes: the record is dropped
    assert f.count(j, attrs.evolve(observed(running(0, 600)), worker_failures=memory)) == ()
    assert f.count(j, attrs.evolve(observed(running(0, 599)), worker_failures=memory)) == memory


def test_scaled_away_indexes_are_forgotten():
    j = parsed()
    memory = f.count(j, observed(failed(1, "a")))
    j1 = parsed(
        mpiReplicaSpecs={
            **job()["spec"]["mpiReplicaSpecs"],
            "Worker": {**job()["spec"]["mpiReplicaSpecs"]["Worker"], "replicas": 1},
        }
    )
    assert f.count(j1, attrs.evolve(observed(), worker_failures=memory)) == ()


def test_a_snapshot_counts_once_per_job_shape():
    """render, status and decide all ask for the count: one snapshot answers it once per job shape, a
    snapshot with other failures on record (evolve) counts afresh."""
    j = parsed()
    obs = observed(failed(1, "a"))
    first = f.count(j, obs)
    assert f.count(j, obs) is first
    one = parsed(
        mpiReplicaSpecs={
            **job()["spec"]["mpiReplicaSpecs"],
            "Worker": {**job()["spec"]["mpiReplicaSpecs"]["Worker"], "replicas": 1},
        }
    )
    assert f.count(one, obs) == ()  # index 1 is beyond one worker: another question, another answer
    later = attrs.evolve(obs, worker_failures=first)
    assert f.count(j, later) == first and f.count(j, later) is not first


def test_a_failed_worker_is_kept_during_its_backoff_and_replaced_after():
    j = job()
    world = [*created_children()[:3], created_children()[3], failed(1, "a", finished=5), launcher()]
    kept = render(j, observed(*world), CFG)
    assert names_of(kept, "Pod") == ["pi-worker-0", "pi-worker-1"]
    assert next_wakeup(j, status(j, observed(*world), CFG), NOW, observed(*world)) == NOW + timedelta(
        seconds=5
    )
    later = observed(*world, now=NOW + timedelta(seconds=5))
    assert names_of(render(j, later, CFG), "Pod") == ["pi-worker-0"]  # deleted, created next round
    assert next_wakeup(j, status(j, later, CFG), later.now, later) is None


def test_the_backoff_grows_with_the_remembered_count():
    j = job()
    pj = parsed()
    memory = ()
    for n, uid in enumerate("abc", start=1):
        obs = attrs.evolve(observed(failed(0, uid, finished=1)), worker_failures=memory)
        memory = f.count(pj, obs)
        assert memory[0].count == n
    obs = attrs.evolve(observed(failed(0, "c", finished=1), launcher()), worker_failures=memory)
    wake = next_wakeup(j, status(j, obs, CFG), NOW, obs)
    assert wake == NOW + timedelta(seconds=40 - 1)
    assert "pi-worker-0" in names_of(
        render(j, attrs.evolve(obs, now=NOW + timedelta(seconds=38)), CFG), "Pod"
    )
    assert "pi-worker-0" not in names_of(render(j, attrs.evolve(obs, now=wake), CFG), "Pod")


def test_without_a_finish_time_the_failure_is_dated_when_first_seen():
    pj = parsed()
    pod = failed(0, "a")
    del pod["status"]["containerStatuses"][0]["state"]["terminated"]["finishedAt"]
    [record] = f.count(pj, observed(pod))
    assert record.failed_at == NOW
    # remembered: later syncs keep that date, so the back-off ends
    later = attrs.evolve(observed(pod, now=NOW + timedelta(seconds=30)), worker_failures=(record,))
    assert f.count(pj, later) == (record,)
    assert not f.in_backoff(record, later.now)


def test_past_the_bound_the_job_fails_quoting_the_pod_and_stops_the_launcher():
    j = job(runPolicy={"backoffLimit": 2})
    pj = parsed(runPolicy={"backoffLimit": 2})
    message = "Generating keys\nsshd: no hostkeys available -- exiting.\n"
    memory = f.count(pj, observed(failed(0, "a0", finished=9), failed(1, "a1", finished=5)))
    obs = attrs.evolve(
        observed(failed(0, "b0", message=message), failed(1, "a1", finished=5), launcher()),
        worker_failures=memory,
    )
    st = status(j, obs, CFG)
    c = conds(st)["Failed"]
    assert (c["status"], c["reason"]) == ("True", "WorkerBackoffLimitExceeded")
    assert c["message"] == (
        "MPIJob ns/pi has failed: worker pods failed 3 times, more than backoffLimit 2 allows; the last: pod"
        " pi-worker-0: container w exited with code 1 (Error): Generating keys | sshd: no hostkeys available"
        " -- exiting."
    )
    j["status"] = st
    kids = render(j, obs, CFG)
    assert names_of(kids, "Pod") == ["pi-worker-0", "pi-worker-1"]  # the evidence stays
    [lj] = by_kind(kids, "Job")
    assert lj["spec"]["suspend"] is True  # its gate does not wait out its timeout
    assert next_wakeup(j, st, NOW, obs) is None
    # at the bound, not past it: restarting
    two = attrs.evolve(observed(failed(0, "a0"), failed(1, "a1"), launcher()), worker_failures=())
    assert conds(status(job(runPolicy={"backoffLimit": 2}), two, CFG))["Restarting"]["status"] == "True"


def test_the_default_bound_is_six():
    pj = parsed()
    memory: tuple = ()
    for uid in range(7):
        obs = attrs.evolve(observed(failed(0, f"p{uid}"), launcher()), worker_failures=memory)
        st = status(job(), obs, CFG)
        memory = f.count(pj, obs)
        assert ("Failed" in conds(st)) == (uid == 6), uid
    assert "more than the default backoffLimit 6 allows" in conds(st)["Failed"]["message"]


def test_backoff_limit_zero_fails_at_the_first_failure():
    j = job(runPolicy={"backoffLimit": 0})
    st = status(j, observed(failed(0, "a"), launcher()), CFG)
    assert conds(st)["Failed"]["reason"] == "WorkerBackoffLimitExceeded"


def test_evictions_count_too_and_the_evidence_is_the_pods_own():
    pj = parsed(runPolicy={"backoffLimit": 0})
    pod = failed(1, "e", reason="Evicted")
    pod["status"]["message"] = "The node was low on resource: memory."
    pod["status"]["containerStatuses"] = []
    [record] = f.count(pj, observed(pod))
    assert f.describe(record.evidence) == "pod pi-worker-1: Evicted: The node was low on resource: memory."
    st = status(job(runPolicy={"backoffLimit": 0}), observed(pod, launcher()), CFG)
    assert "Evicted: The node was low on resource: memory." in conds(st)["Failed"]["message"]


def test_a_long_log_tail_is_cut_from_the_front():
    pod = failed(0, "a", message="x" * 5000 + "\nthe real error")
    e = f.evidence(pod)
    assert len(e.message) == f.MAX_EVIDENCE and e.message.endswith("| the real error")


def test_a_crash_loop_ends_within_the_bound():
    """The controller's loop, simulated: sync (render, count, remember), the kubelet fails every new
    worker a second after it starts, time moves to the next wakeup. Creates are counted."""
    j = job(runPolicy={"backoffLimit": 2})
    pj = parsed(runPolicy={"backoffLimit": 2})
    pods: dict[str, dict] = {}
    memory: tuple = ()
    now = NOW
    creates = 0
    serial = 0
    for _ in range(50):
        obs = Observed.from_objects([*pods.values(), launcher()], now=now, worker_failures=memory)
        j["status"] = status(j, obs, CFG)
        memory = f.count(pj, obs)
        if "Failed" in conds(j["status"]):
            break
        wanted = {p["metadata"]["name"] for p in by_kind(render(j, obs, CFG), "Pod")}
        for name in list(pods):
            if name not in wanted:
                del pods[name]
        for name in sorted(wanted - set(pods)):
            serial += 1
            creates += 1
            pod = failed(int(name[-1]), f"u{serial}")
            term = pod["status"]["containerStatuses"][0]["state"]["terminated"]
            term["startedAt"], term["finishedAt"] = format_time(now), format_time(now + timedelta(seconds=1))
            pods[name] = pod
        wake = next_wakeup(j, j["status"], now, obs)
        now = wake if wake is not None and not pods.keys() - wanted else now + timedelta(seconds=2)
    c = conds(j["status"])["Failed"]
    assert c["reason"] == "WorkerBackoffLimitExceeded"
    assert creates < 2 + 2 * 2, creates
    assert (now - NOW).total_seconds() < 60


@pytest.mark.parametrize("limit", [0, 1, 3])
def test_restarting_names_the_failure_while_in_backoff(limit):
    j = job(runPolicy={"backoffLimit": limit + 1})
    st = status(j, observed(failed(1, "a", message="boom"), launcher()), CFG)
    msg = conds(st)["Restarting"]["message"]
    assert "pi-worker-1" in msg and "exited with code 1 (Error): boom" in msg
    assert f"(1 of {limit + 1} failures allowed)" in msg


def pulling(i: int, reason: str, message: str = "") -> dict[str, Any]:
    pod = running(i, 1)
    waiting = {"reason": reason, **({"message": message} if message else {})}
    pod["status"] = {"phase": "Pending", "containerStatuses": [{"name": "w", "state": {"waiting": waiting}}]}
    return pod


def test_an_image_that_cannot_be_pulled_is_said_once_and_cleared():
    j = job()
    msg = 'Back-off pulling image "nope:latest"'
    st = status(j, observed(running(0, 5), pulling(1, "ErrImagePull", "not found"), launcher()), CFG)
    c = conds(st)["Running"]
    assert (c["status"], c["reason"]) == ("False", "ImagePullBackOff")
    assert c["message"] == (
        "MPIJob ns/pi is waiting: pod pi-worker-1: container w cannot get its image (ErrImagePull): not found"
    )
    j["status"] = st
    # the kubelet alternates its reasons while it retries: the status stays as it is (no write)
    assert status(j, observed(running(0, 5), pulling(1, "ImagePullBackOff", msg), launcher()), CFG) == st
    # pulled, still starting: no longer said; not Running yet
    started = status(j, observed(running(0, 5), pulling(1, "ContainerCreating"), launcher()), CFG)
    assert "Running" not in conds(started)


def test_a_replacement_carries_the_count_so_a_restarted_operator_goes_on_from_it():
    j = job()
    pj = parsed()
    memory = f.count(pj, observed(failed(1, "a")))
    memory = f.count(pj, attrs.evolve(observed(failed(1, "b")), worker_failures=memory))
    # pod b's back-off is over and it is gone: its replacement is created with the count
    after = attrs.evolve(observed(launcher(), now=NOW + timedelta(seconds=30)), worker_failures=memory)
    [replacement] = [
        p for p in by_kind(render(j, after, CFG), "Pod") if p["metadata"]["name"] == "pi-worker-1"
    ]
    assert replacement["metadata"]["annotations"] == {"mpijob.dev/worker-failures": "2"}
    assert "annotations" not in by_kind(render(j, after, CFG), "Pod")[0]["metadata"]  # worker 0: none
    # it fails; a new operator (no memory) counts it as the third failure of its index
    pod = failed(1, "c")
    pod["metadata"]["annotations"] = replacement["metadata"]["annotations"]
    [record] = f.count(pj, observed(pod))
    assert (record.count, record.pod_uid) == (3, "c")
    assert f.backoff_seconds(record.count) == 40


def test_a_live_workers_count_annotation_is_rendered_as_it_is():
    """Metadata of pods is patched: rendering anything else than the live value would be a write."""
    j = job()
    pj = parsed()
    memory = f.count(pj, observed(failed(1, "a")))
    live = running(1, 5)
    live["metadata"]["annotations"] = {"mpijob.dev/worker-failures": "1"}
    obs = attrs.evolve(observed(running(0, 5), live, launcher()), worker_failures=memory)
    pods = {p["metadata"]["name"]: p for p in by_kind(render(j, obs, CFG), "Pod")}
    assert pods["pi-worker-1"]["metadata"]["annotations"] == {"mpijob.dev/worker-failures": "1"}
    assert "annotations" not in pods["pi-worker-0"]["metadata"]
    # and after the end, on a kept pod
    j["status"] = status(job(runPolicy={"backoffLimit": 0}), observed(failed(0, "z"), launcher()), CFG)
    gone = failed(1, "y")
    gone["metadata"]["annotations"] = {"mpijob.dev/worker-failures": "1"}
    kept = by_kind(render(j, observed(failed(0, "z"), gone, launcher()), CFG), "Pod")
    assert [p["metadata"].get("annotations") for p in kept] == [None, {"mpijob.dev/worker-failures": "1"}]


def test_a_failed_worker_deleted_by_someone_else_is_replaced_only_after_its_backoff():
    j = job()
    pj = parsed()
    memory = f.count(pj, observed(failed(1, "a", finished=3)))
    gone = attrs.evolve(observed(running(0, 5), launcher()), worker_failures=memory)
    assert names_of(render(j, gone, CFG), "Pod") == ["pi-worker-0"]  # not created again yet
    assert next_wakeup(j, status(j, gone, CFG), NOW, gone) == NOW + timedelta(seconds=7)
    due = attrs.evolve(gone, now=NOW + timedelta(seconds=7))
    assert names_of(render(j, due, CFG), "Pod") == ["pi-worker-0", "pi-worker-1"]
