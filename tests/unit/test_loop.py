"""The generic loop: what a reconcile returns or raises decides the key's fate; the failures in a row are
the loop's record, handed to the reconciler and reported through its hooks."""

from __future__ import annotations

import pytest

from reconcile.runtime.fence import NotLeader
from reconcile.runtime.loop import Loop, Result
from reconcile.runtime.ratelimit import controller_rate_limiter


class Script:
    """A reconciler that answers each reconcile from a list, and records the loop's calls."""

    def __init__(self, *answers: Result | Exception) -> None:
        self.answers = list(answers)
        self.calls: list[tuple[str, str, int]] = []

    def reconcile(self, key: str, failures: int) -> Result:
        self.calls.append(("reconcile", key, failures))
        answer = self.answers.pop(0)
        if isinstance(answer, Exception):
            raise answer
        return answer

    def failed(self, key: str, err: Exception, failures: int) -> None:
        self.calls.append(("failed", str(err), failures))

    def recovered(self, key: str, failures: int) -> None:
        self.calls.append(("recovered", key, failures))


def loop_of(script: Script) -> tuple[Loop, list[str]]:
    outcomes: list[str] = []
    loop = Loop(
        script,
        controller_rate_limiter(0, 0),
        on_result=lambda outcome, _seconds: outcomes.append(outcome),
        expected=(ValueError,),
    )
    return loop, outcomes


def test_failures_in_a_row_are_counted_reported_and_forgotten_on_success():
    script = Script(ValueError("boom"), Result(error=ValueError("held")), Result())
    loop, outcomes = loop_of(script)
    for _ in range(3):
        loop.process("ns/a")
    assert script.calls == [
        ("reconcile", "ns/a", 0),
        ("failed", "boom", 1),
        ("reconcile", "ns/a", 1),
        ("failed", "held", 2),
        ("reconcile", "ns/a", 2),
        ("recovered", "ns/a", 2),
    ]
    assert outcomes == ["error", "error", "success"]
    assert loop.failures("ns/a") == 0


def test_a_failure_is_retried_with_back_off_and_a_wake_up_is_kept_beside_it():
    loop, _ = loop_of(Script(Result(requeue_after=3600, error=ValueError("conflict"))))
    loop.process("ns/a")
    assert loop.queue.get(timeout=1) == "ns/a"  # the back-off retry comes first
    loop.queue.done("ns/a")
    assert loop.failures("ns/a") == 1


def test_a_fenced_reconcile_is_retried_quietly_without_counting():
    script = Script(NotLeader("lease lost"))
    loop, outcomes = loop_of(script)
    loop.process("ns/a")
    assert outcomes == ["fenced"] and loop.failures("ns/a") == 0
    assert [c[0] for c in script.calls] == ["reconcile"]


@pytest.mark.parametrize("wait", [None, 0.0])
def test_a_success_forgets_the_back_off_and_schedules_the_wake_up(wait):
    loop, _ = loop_of(Script(Result(requeue_after=wait)))
    loop.process("ns/a")
    if wait is None:
        assert len(loop.queue) == 0
    else:
        assert loop.queue.get(timeout=1) == "ns/a"


class Handlers:
    """An informer as the loop sees it: the handlers it is given."""

    def __init__(self) -> None:
        self.handlers: list = []

    def add_handler(self, handler) -> None:
        self.handlers.append(handler)

    def deliver(self, event, old, new) -> None:
        for handler in self.handlers:
            handler(event, old, new)


@pytest.mark.parametrize("new_at_once", [True, False])
def test_a_new_object_is_synced_at_once_and_the_rest_of_a_burst_waits(new_at_once):
    loop = Loop(Script(), controller_rate_limiter(0, 0), event_batch=30.0)
    informer = Handlers()
    loop.watch(informer, lambda old, new: [(new or old)["name"]], new_at_once=new_at_once)  # type: ignore[arg-type]
    informer.deliver("ADDED", None, {"name": "new"})
    informer.deliver("MODIFIED", {"name": "changed"}, {"name": "changed"})
    informer.deliver("DELETED", {"name": "gone"}, None)
    assert set(loop.queue.waiting()) == ({"changed", "gone"} if new_at_once else {"new", "changed", "gone"})
    if new_at_once:
        assert loop.queue.get(timeout=1) == "new"
    else:
        with pytest.raises(TimeoutError):
            loop.queue.get(timeout=0.05)
