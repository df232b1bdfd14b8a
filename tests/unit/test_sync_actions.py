"""One sync, read as its actions (kubernetes/sample-controller's test shape): for each golden case and each
lifecycle step, ``decide`` runs once and the actions it yields must equal a golden action list; the
controller around it is driven through its public surface with fake clients, and ``mpijob plan`` is shown to
print the plan the sync executes.

The controller's requests for each case, recorded by the Writer fake, are golden too (``requests.yaml``).
`pytest tests/unit/test_sync_actions.py --update-golden` rewrites the action and request lists; review the
diff.
"""

from __future__ import annotations

import contextlib
import copy
from collections import Counter
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import HealthCheck, given, settings

import render
from reconcile.engine.plan import ObjectKey
from reconcile.engine.writer import WriteFailed, WriteRequest
from reconcile.mpijob.controller import Controller, SyncError
from reconcile.mpijob.decide import (
    COALESCE_SECONDS,
    QUIET_SECONDS,
    UNREAD_HOSTS_SECONDS,
    decide,
    settle_status,
)
from reconcile.mpijob.memory import JobMemory
from reconcile.mpijob.metrics import Metrics
from reconcile.mpijob.plan_command import plan_one
from reconcile.runtime.events import EventRecorder
from reconcile.runtime.kube import NODE, resource_for
from render.keys import load_ssh_key
from render.timeutil import parse_time
from render.yamlio import load_objects
from tests import strategies
from tests.unit import golden_cases
from tests.unit.fakes import FakeKube, RecordingWriter

KEY = load_ssh_key(golden_cases.KEY_FILE.read_text())
STEPS_FILE = Path(__file__).with_name("sync_steps.yaml")

# The lifecycle steps, each a golden case (an MPIJob and the world a sync observes).
LIFECYCLE = {
    "new": "openmpi-pi",
    "workers running": "running",
    "launcher succeeded": "launcher-succeeded-cleanup",
    "worker failed": "failed-worker-replaced",
    "suspended": "suspended-while-running",
    "resumed": "resumed",
    "invalid": "invalid",
    "ttl expired": "ttl-expired",
}


def _decide_case(case: str, drop: tuple[str, str] | None = None, converged: bool = False) -> list[str]:
    mpijob, objects, config, now_text = golden_cases.load_case(case)
    now = parse_time(now_text)
    assert now is not None
    if converged:
        objects = converged_world(case)
    if drop is not None:
        objects = [o for o in objects if (o["kind"], o["metadata"]["name"]) != drop]
    uid = str(mpijob.get("metadata", {}).get("uid", ""))
    return decide(mpijob, objects, JobMemory(uid=uid, fresh_ssh_key=KEY), now, config).actions()


def converged_world(case: str) -> list[dict]:
    """The case's world once every child is as render wants it: its golden children, as stored (with a uid),
    carrying the observed objects' status (pod phases, the launcher Job's progress)."""
    _, objects, _, _ = golden_cases.load_case(case)
    seen = {(o["kind"], o["metadata"]["name"]): o for o in objects}
    world = []
    for child in load_objects((golden_cases.GOLDEN / case / "children.yaml").read_text()):
        live = copy.deepcopy(child)
        found = seen.pop((live["kind"], live["metadata"]["name"]), None)
        live["metadata"]["uid"] = (found or {}).get("metadata", {}).get(
            "uid"
        ) or f"uid-{live['metadata']['name']}"
        if found is not None and "status" in found:
            live["status"] = found["status"]
        world.append(live)
    return world + list(seen.values())  # and the launcher's pods, which are not ours to render


def _check(path: Path, got: Any, update: bool) -> None:
    text = yaml.safe_dump(got, sort_keys=False, width=200)
    if update:
        path.write_text(text)
        return
    assert path.exists(), f"{path} is missing; run pytest --update-golden"
    assert yaml.safe_load(path.read_text()) == got, f"{path} drifted; run pytest --update-golden and review"


def test_every_lifecycle_step_is_a_golden_case():
    assert set(LIFECYCLE.values()) <= set(golden_cases.cases())


@pytest.mark.parametrize("case", golden_cases.cases())
def test_one_sync_yields_the_golden_actions(case, update_golden):
    _check(golden_cases.GOLDEN / case / "actions.yaml", _decide_case(case), update_golden)


@pytest.mark.parametrize("case", golden_cases.cases())
def test_one_sync_sends_the_golden_requests(case, update_golden):
    """What the controller really sends for the case's world (sorted: creates of one stage go out at once;
    the order of the stages is the executor's protocol, held by test_executor)."""
    mpijob, objects, config, now_text = golden_cases.load_case(case)
    kube = FakeKube()
    c, writer = _controller(kube, config, now_text)
    key = _load(c, kube, copy.deepcopy(mpijob), copy.deepcopy(objects))
    with contextlib.suppress(SyncError, WriteFailed):
        c.sync(key)
    _check(golden_cases.GOLDEN / case / "requests.yaml", sorted(writer.lines()), update_golden)


def test_derived_steps_yield_the_golden_actions(update_golden):
    steps = {
        "running, converged": _decide_case("running", converged=True),
        # someone deleted a child of a running job: only that child is created again
        "service deleted by hand": _decide_case("running", drop=("Service", "pi"), converged=True),
        "worker pod deleted by hand": _decide_case("running", drop=("Pod", "pi-worker-1"), converged=True),
    }
    _check(STEPS_FILE, steps, update_golden)
    assert not [a for a in steps["running, converged"] if a.split()[0] in ("create", "patch", "delete")]
    assert steps["service deleted by hand"][0] == "create Service default/pi"


# -- holds: one write for pods starting one by one --------------------------------------------------
RUNNING = {"conditions": [{"type": "Running", "status": "True"}], "replicaStatuses": {"Worker": {}}}
MORE = {**RUNNING, "replicaStatuses": {"Worker": {"active": 2}}}


def _job_with(status: dict) -> tuple[render.MPIJob, dict]:
    raw = copy.deepcopy(golden_cases.load_case("running")[0])
    raw["status"] = status
    return render.parse_mpijob(raw), raw


def test_a_counts_only_status_change_is_held_once_then_written():
    now = strategies.NOW
    job, raw = _job_with(RUNNING)
    first, memory = settle_status(job, raw, MORE, JobMemory(), now)
    assert (first.write, first.held) == (False, True)
    assert first.wake_after == pytest.approx(QUIET_SECONDS + 0.01)
    later, memory = settle_status(job, raw, MORE, memory, now + timedelta(seconds=0.5))
    assert later.held and later.wake_after == pytest.approx(QUIET_SECONDS - 0.49)  # the first change's window
    due, memory = settle_status(job, raw, MORE, memory, now + timedelta(seconds=QUIET_SECONDS + 0.1))
    assert (due.write, due.held, memory.status_held_since) == (True, False, None)


def test_a_condition_change_is_never_held_and_a_first_status_is_held_once():
    now = strategies.NOW
    job, raw = _job_with(RUNNING)
    done = {"conditions": [{"type": "Succeeded", "status": "True"}], "replicaStatuses": {}}
    written, _ = settle_status(job, raw, done, JobMemory(), now)
    assert written.write
    fresh, fresh_raw = _job_with({})
    held, memory = settle_status(fresh, fresh_raw, RUNNING, JobMemory(), now)
    assert held.held  # a client's create-then-update meets no conflict of ours
    due, _ = settle_status(fresh, fresh_raw, RUNNING, memory, now + timedelta(seconds=1.1))
    assert due.write


def test_a_host_list_only_plan_is_held_once_but_creates_never_are():
    mpijob, _, config, now_text = golden_cases.load_case("running")
    objects = converged_world("running")
    now = parse_time(now_text)
    assert now is not None
    memory = JobMemory(uid=mpijob["metadata"]["uid"], fresh_ssh_key=KEY)
    cm = next(o for o in objects if o["kind"] == "ConfigMap")
    stale = copy.deepcopy(cm)
    stale["data"]["discover_hosts.sh"] = "#!/bin/sh\n"
    world = [stale if o is cm else o for o in objects]
    first = decide(mpijob, world, memory, now, config)
    assert first.hostfile_held and not first.plan
    assert first.wake_after == pytest.approx(UNREAD_HOSTS_SECONDS + 0.01)
    due = decide(mpijob, world, first.memory, now + timedelta(seconds=UNREAD_HOSTS_SECONDS + 0.1), config)
    assert not due.hostfile_held and [p.key.kind for p in due.plan.patches] == ["ConfigMap"]
    # the hostfile mpirun reads is mended at once
    edited = copy.deepcopy(cm)
    edited["data"]["hostfile"] = "someone-else slots=1\n"
    mended = decide(mpijob, [edited if o is cm else o for o in objects], memory, now, config)
    assert not mended.hostfile_held and [p.key.kind for p in mended.plan.patches] == ["ConfigMap"]
    # a launcher that discovers hosts reads the list as it runs: held only briefly
    elastic = copy.deepcopy(mpijob)
    launcher = elastic["spec"]["mpiReplicaSpecs"]["Launcher"]["template"]["spec"]["containers"][0]
    launcher["command"] = ["horovodrun", "--host-discovery-script", "/etc/mpi/discover_hosts.sh"]
    brief = decide(elastic, world, memory, now, config)
    assert brief.hostfile_held  # a running Job's template is not compared: only the host list differs
    assert brief.wake_after == pytest.approx(COALESCE_SECONDS + 0.01)
    gone = [o for o in world if o["kind"] != "Service"]
    with_create = decide(mpijob, gone, memory, now, config)
    assert not with_create.hostfile_held and with_create.plan.creates


# -- the controller around decide, through its public surface ----------------------------------------
def _controller(
    kube: FakeKube, config: render.Config, now_text: str, writer: RecordingWriter | None = None
) -> tuple[Controller, RecordingWriter]:
    writer = writer or RecordingWriter()
    c = Controller(
        kube,
        config,
        metrics=Metrics(),
        recorder=EventRecorder(kube),
        now=lambda: parse_time(now_text),
        writer=writer,
        watch_nodes=True,
    )
    return c, writer


def _load(c: Controller, kube: FakeKube, mpijob: dict, objects: list[dict]) -> str:
    assert isinstance(c.writer, RecordingWriter)
    for o in [mpijob, *objects]:
        o["metadata"].setdefault("resourceVersion", "1")
        res = NODE if o["kind"] == "Node" else resource_for(o)
        kube.objects[(res.plural, o["metadata"].get("namespace", ""), o["metadata"]["name"])] = o
        c.writer.put(copy.deepcopy(o))
    c.mpijobs.observe(mpijob)
    for o in objects:
        inf = c.nodes if o["kind"] == "Node" else c.children.get(resource_for(o))
        if inf is not None:
            inf.observe(o)
    return f"{mpijob['metadata']['namespace']}/{mpijob['metadata']['name']}"


class StatusWritesFail:
    """Status writes fail with 500 while ``failing`` is set, except the SyncFailed condition's own."""

    failing = True

    def __call__(self, request: WriteRequest) -> WriteFailed | None:
        types = [c.get("type") for c in (request.body.get("status") or {}).get("conditions") or ()]
        if self.failing and request.subresource == "status" and "SyncFailed" not in types:
            return WriteFailed(500, "500 Internal Server Error")
        return None


def _state_column(status: dict) -> str:
    """The CRD's State printer column: `.status.conditions[-1:].type`."""
    conditions = status.get("conditions") or []
    return conditions[-1]["type"] if conditions else ""


def test_a_failing_sync_then_a_recovery_keeps_the_state_column_the_jobs_state():
    mpijob, objects, config, now_text = golden_cases.load_case("running")
    mpijob = copy.deepcopy(mpijob)
    mpijob["status"] = {
        "conditions": [{"type": "Created", "status": "True", "reason": "MPIJobCreated", "message": "created"}]
    }
    kube, fails = FakeKube(), StatusWritesFail()
    c, writer = _controller(kube, config, now_text, RecordingWriter(refuse=fails))
    key = _load(c, kube, mpijob, copy.deepcopy(objects))
    stored = ("MPIJob", mpijob["metadata"]["namespace"], mpijob["metadata"]["name"])
    for _ in range(3):
        c.process(key)
    status = writer.objects[stored]["status"]
    sync_failed = next(x for x in status["conditions"] if x["type"] == "SyncFailed")
    assert (sync_failed["status"], sync_failed["reason"]) == ("True", "ApiError500")
    assert _state_column(status) == "Created"
    assert c.loop.failures(key) == 3

    fails.failing = False
    c.mpijobs.observe(writer.objects[stored])
    c.process(key)
    status = writer.objects[stored]["status"]
    sync_failed = next(x for x in status["conditions"] if x["type"] == "SyncFailed")
    assert sync_failed["status"] == "False"
    assert _state_column(status) == "Running"
    assert c.loop.failures(key) == 0


# -- `mpijob plan` prints the plan the sync executes --------------------------------------------------
@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(strategies.scenarios())
def test_the_plan_command_prints_the_plan_the_sync_executes(scenario):
    job, observed, config = scenario
    job = copy.deepcopy(job)
    job.setdefault("metadata", {}).setdefault("resourceVersion", "1")
    live = [o for o in copy.deepcopy(list(observed.objects)) if isinstance(o, dict) and o.get("metadata")]
    now = observed.now
    kube = FakeKube()
    c, writer = _controller(kube, config, now.isoformat().replace("+00:00", "Z"))
    key = _load(c, kube, job, live)
    meta = job["metadata"]
    report = plan_one(kube, meta["namespace"], meta["name"], config, now)  # GET and LIST, as the command
    with contextlib.suppress(SyncError, WriteFailed):
        c.sync(key)
    sent = Counter(_as_plan_entry(r) for r in writer.sent if r.kind != "MPIJob" and r.verb != "merge-patch")
    printed = report["plan"]
    # the creates wait while a wanted name is held by someone else (CREATE_RULES)
    groups = ("patches", "deletes") if printed["conflicts"] else ("creates", "patches", "deletes")
    assert sent == Counter((e["action"], e["object"]) for g in groups for e in printed[g])


def _as_plan_entry(request: WriteRequest) -> tuple[str, str]:
    """The plan entry a request carries out: a patch is a JSON patch of removals and an apply."""
    action = {"json-patch": "patch", "apply": "patch"}.get(request.verb, request.verb)
    group = request.api_version.rpartition("/")[0]
    return action, str(ObjectKey(group, request.kind, request.namespace, request.name))


def test_a_refused_create_is_reported_once_the_first_status_hold_ends_across_failing_syncs():
    """Each sync that retries the refused create judges the hold once: the sync after the refusal sees it
    (decide judges the world as it found it), and the first status (Created=False, naming the refusal)
    waits its second, then is written, although every one of those syncs fails."""
    mpijob, _, config, now_text = golden_cases.load_case("openmpi-pi")

    def refuse_pods(request: WriteRequest) -> WriteFailed | None:
        if request.verb == "create" and request.kind == "Pod":
            return WriteFailed(403, "no PriorityClass", reason="Forbidden")
        return None

    kube = FakeKube()
    c, writer = _controller(kube, config, now_text, RecordingWriter(refuse=refuse_pods))
    clock = [parse_time(now_text)]
    c._now = lambda: clock[0]  # type: ignore[method-assign]
    key = _load(c, kube, copy.deepcopy(mpijob), [])
    stored = ("MPIJob", mpijob["metadata"]["namespace"], mpijob["metadata"]["name"])
    written = []
    for _ in range(5):
        c.process(key)
        written.append((writer.objects[stored].get("status") or {}).get("conditions"))
        clock[0] += timedelta(seconds=0.6)
    assert written[0] is None  # the refusal is met: the next sync judges it
    assert written[1] is None and written[2] is None  # held: 0 s and 0.6 s into the hold
    assert [(x["type"], x["status"]) for x in written[3]] == [("Created", "False")]
    assert "no PriorityClass" in written[3][0]["message"]
    assert c.loop.failures(key) == 5


def test_a_transition_written_after_writes_records_its_phases_on_the_world_it_was_computed_on():
    """The running case: the sync creates two children and writes Running; the start-up's phase samples
    (workers and launcher running) come from the pods of the world the status was computed on."""
    mpijob, objects, config, now_text = golden_cases.load_case("running")
    kube = FakeKube()
    c, writer = _controller(kube, config, now_text)
    key = _load(c, kube, copy.deepcopy(mpijob), copy.deepcopy(objects))
    c.process(key)
    assert "update MPIJob/status default/pi" in writer.lines()
    phases = {
        dict(labels)["phase"]
        for (name, labels), value in _samples(c).items()
        if name == "mpi_operator_job_phase_seconds_count" and value
    }
    assert {"workers_running", "launcher_running"} <= phases, phases


def _samples(c: Controller) -> dict[tuple[str, frozenset[tuple[str, str]]], float]:
    return {
        (s.name, frozenset(s.labels.items())): s.value
        for family in c.metrics.registry.collect()
        for s in family.samples
    }
