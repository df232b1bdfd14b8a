"""decide.settle: the status after a sync's writes builds on the status the world showed before them."""

from __future__ import annotations

import copy

from reconcile.mpijob.decide import settle
from reconcile.mpijob.memory import JobMemory
from render import Config, status
from render import conditions as cond
from tests.unit.render_helpers import NOW, job, launcher, launcher_pod, observed, owned, worker

CFG = Config()


def test_a_worker_replaced_in_one_sync_still_shows_restarting():
    j = job()
    infra = [owned("Service", "pi"), owned("ConfigMap", "pi-config"), owned("Secret", "pi-ssh")]
    running = [
        *infra,
        launcher(active=1, startTime="2025-06-01T11:00:00Z"),
        launcher_pod("a", "Running", "2025-06-01T11:00:00Z"),
    ]
    j["status"] = status(j, observed(*running, worker(0), worker(1)), CFG)
    assert cond.is_true(j["status"]["conditions"], cond.RUNNING)

    evicted = worker(1, "Failed", reason="Evicted")
    before = status(j, observed(*running, worker(0), evicted), CFG)  # what decide sees
    assert cond.is_true(before["conditions"], cond.RESTARTING)
    # The sync deletes the evicted worker and creates its replacement, which is Pending.
    after = [*running, worker(0), worker(1, "Pending")]
    settled, _ = settle(copy.deepcopy(j), after, JobMemory(), NOW, CFG, before=before)
    conds = cond.clean(settled.new["conditions"])
    assert cond.is_true(conds, cond.RESTARTING) and not cond.is_true(conds, cond.RUNNING)
    assert settled.write  # a condition change: written now
    # Without the status before the writes, the replacement would hide the loss: Running stays True.
    hidden, _ = settle(copy.deepcopy(j), after, JobMemory(), NOW, CFG)
    assert cond.is_true(cond.clean(hidden.new["conditions"]), cond.RUNNING)
    # Once the replacement runs, Running is True again.
    back, _ = settle({**j, "status": settled.new}, [*running, worker(0), worker(1)], JobMemory(), NOW, CFG)
    assert cond.is_true(cond.clean(back.new["conditions"]), cond.RUNNING)
