"""decide.finish: the status a sync ends with is decide's verdict on the world its writes leave, built on
the status the world showed before them."""

from __future__ import annotations

import copy

import attrs

from reconcile.engine.executor import ExecResult
from reconcile.engine.plan import Create, ObjectKey, Plan
from reconcile.mpijob.decide import decide, finish
from reconcile.mpijob.memory import JobMemory
from render import Config, status
from render import conditions as cond
from tests.unit.render_helpers import KEY, NOW, job, launcher, launcher_pod, observed, owned, worker

CFG = Config()


def _running() -> tuple[dict, list[dict]]:
    j = job()
    infra = [owned("Service", "pi"), owned("ConfigMap", "pi-config"), owned("Secret", "pi-ssh")]
    running = [
        *infra,
        launcher(active=1, startTime="2025-06-01T11:00:00Z"),
        launcher_pod("a", "Running", "2025-06-01T11:00:00Z"),
    ]
    j["status"] = status(j, observed(*running, worker(0), worker(1)), CFG)
    assert cond.is_true(j["status"]["conditions"], cond.RUNNING)
    return j, running


def test_a_worker_replaced_in_one_sync_still_shows_restarting():
    j, running = _running()
    world = [*running, worker(0), worker(1, "Failed", reason="Evicted")]
    memory = JobMemory(uid=j["metadata"]["uid"], fresh_ssh_key=KEY)
    decision = decide(copy.deepcopy(j), world, memory, NOW, CFG)
    assert decision.status is not None and decision.status.write
    assert cond.is_true(decision.status.new["conditions"], cond.RESTARTING)
    # The sync creates the replacement; the server answers with it Pending.
    replacement = worker(1, "Pending")
    decision = attrs.evolve(
        decision, plan=Plan(creates=(Create(ObjectKey.of(replacement), "v1", replacement),))
    )
    settled, _ = finish(j, decision, world, ExecResult(), [replacement], NOW, CFG)
    conds = cond.clean(settled.new["conditions"])
    assert cond.is_true(conds, cond.RESTARTING) and not cond.is_true(conds, cond.RUNNING)
    assert settled.write  # decide's verdict: a condition change, written now
    # Once the replacement runs, the next sync's decide shows Running again.
    again = decide({**j, "status": settled.new}, [*running, worker(0), worker(1)], memory, NOW, CFG)
    assert again.status is not None and cond.is_true(cond.clean(again.status.new["conditions"]), cond.RUNNING)


def test_a_change_only_the_writes_made_is_the_next_syncs_to_judge():
    j = job()
    memory = JobMemory(uid=j["metadata"]["uid"], fresh_ssh_key=KEY)
    decision = decide(copy.deepcopy(j), [], memory, NOW, CFG)
    assert decision.status is not None and not decision.status.write and not decision.status.held
    created = [dict(c.body) for c in decision.plan.creates]
    settled, _ = finish(j, decision, [], ExecResult(), created, NOW, CFG)
    assert cond.is_true(cond.clean(settled.new["conditions"]), cond.CREATED)  # the world after the writes
    assert not settled.write and settled.shown == {}  # ... but decide saw no status to write
    assert settled.wake_after is not None and settled.wake_after < 0.1  # the next sync, at once


def test_a_sync_without_writes_ends_with_decides_status():
    j, running = _running()
    world = [*running, worker(0), worker(1)]
    decision = decide(copy.deepcopy(j), world, JobMemory(uid=j["metadata"]["uid"]), NOW, CFG)
    decision = attrs.evolve(decision, plan=Plan())
    settled, _ = finish(j, decision, world, ExecResult(), [], NOW, CFG)
    assert settled is decision.status
