"""The chaos tier's status recorder fails its scenario when it recorded nothing it could check: a broken
recorder, or a job it never saw finish, is a problem, never a clean pass."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

from localcluster.chaos.harness import StatusRecorder


class _Kube:
    def __init__(self, lines: list[dict[str, Any]] | None = None, fail: Exception | None = None) -> None:
        self.lines = lines or []
        self.fail = fail

    def stream_lines(self, path: str, query: dict[str, Any], timeout: Any) -> Iterator[bytes]:
        if self.fail is not None:
            raise self.fail
        for event in self.lines:
            yield json.dumps(event).encode()


def _event(name: str, conditions: list[dict[str, str]]) -> dict[str, Any]:
    meta = {"name": name, "resourceVersion": "1"}
    return {"type": "MODIFIED", "object": {"metadata": meta, "status": {"conditions": conditions}}}


def _record(kube: _Kube, names: list[str]) -> list[str]:
    rec = StatusRecorder(kube, "ns").start()  # type: ignore[arg-type]
    rec.wait_finished(names, timeout=2)
    rec.stop()
    return rec.problems(names)


def test_a_broken_recorder_is_a_problem_of_the_scenario() -> None:
    problems = _record(_Kube(fail=KeyError("boom")), ["a"])
    assert any(p.startswith("the status recorder failed:") and "KeyError" in p for p in problems), problems


def test_a_job_the_recorder_never_saw_finish_is_a_problem() -> None:
    running = _event("a", [{"type": "Running", "status": "True"}])
    assert _record(_Kube([running]), ["a"]) == ["a: the status recorder never saw it finish"]


def test_a_recording_of_every_job_finishing_has_no_problem() -> None:
    done = _event("a", [{"type": "Succeeded", "status": "True"}])
    assert _record(_Kube([done]), ["a"]) == []
