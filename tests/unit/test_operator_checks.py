"""L0: every operator a test starts is checked after the test. An exit nobody asked for, a non-zero code
after SIGTERM or a traceback / critical line in the log fails the test that owned the process."""

from __future__ import annotations

import os
import signal
import sys
import textwrap
from pathlib import Path

import pytest

from localcluster.operator import OperatorFailed, OperatorRunner, forget_runner
from localcluster.wait import wait_for
from tests.unit.test_ci_guard import run_pytest

# Stands in for the operator: exits 0 on SIGTERM, prints what it is told to, then waits.
FAKE = """
import signal, sys, time
signal.signal(signal.SIGTERM, lambda *_: sys.exit(int(sys.argv[2])))
print(sys.argv[1], flush=True)
while True:
    time.sleep(1)
"""


class FakeOperator(OperatorRunner):
    def __init__(self, log_path: Path, say: str = "started", term_code: int = 0) -> None:
        super().__init__(log_path.parent / "kubeconfig", log_path)
        self.say = say
        self.term_code = term_code

    def argv(self) -> list[str]:
        return [sys.executable, "-c", FAKE, self.say, str(self.term_code)]

    def wait_logged(self, text: str) -> None:
        """Until the process printed ``text`` as a line (the runner's header line has it too)."""
        wait_for(lambda: text in self.log_tail().splitlines(), repr(text), 20, 0.05, describe=self.log_tail)


@pytest.fixture
def fake(tmp_path: Path):
    made: list[FakeOperator] = []

    def make(**kw: object) -> FakeOperator:
        op = FakeOperator(tmp_path / f"op{len(made)}.log", **kw)  # type: ignore[arg-type]
        made.append(op)
        op.start(wait=False)
        op.wait_logged(op.say)
        return op

    yield make
    for op in made:  # these are this test's own subjects: the suite's check must not see them
        op.stop(timeout=5)
        forget_runner(op)


def test_a_graceful_stop_is_no_problem(fake) -> None:
    op = fake()
    assert op.stop(timeout=10) == 0
    assert op.problems() == []


def test_an_exit_nobody_asked_for_is_told_once_with_its_code(fake) -> None:
    op = fake()
    os.kill(op.pid, signal.SIGKILL)
    op.proc.popen.wait(10)
    with pytest.raises(OperatorFailed, match="exited with code -9 while nobody asked"):
        op.check()
    assert op.problems() == []  # told once: the next test may start it again


def test_a_declared_exit_is_no_problem(fake) -> None:
    op = fake()
    op.expect_exit()
    os.kill(op.pid, signal.SIGKILL)
    op.proc.popen.wait(10)
    assert op.problems() == []


def test_kill_is_an_exit_asked_for(fake) -> None:
    op = fake()
    op.kill()
    assert op.problems() == []


def test_a_non_zero_code_after_sigterm_is_a_problem(fake) -> None:
    op = fake(term_code=3)
    assert op.stop(timeout=10) == 3
    assert op.problems() == ["it exited with code 3 after SIGTERM (0 expected)"]


@pytest.mark.parametrize(
    "line",
    [
        "Traceback (most recent call last):",
        "12:00:01.234 C mpijob-operator: the operator failed",
        '{"ts":"x","level":"critical","msg":"lost the lease"}',
    ],
)
def test_a_fatal_log_line_is_a_problem_even_while_it_runs(fake, line: str) -> None:
    op = fake(say=line)
    found = op.problems()
    assert len(found) == 1 and line in found[0]
    assert op.alive() and op.problems() == []  # the same line is told once


def test_a_quiet_log_is_no_problem(fake) -> None:
    op = fake(say='{"level":"info","msg":"controller running; critical path"}')
    assert op.problems() == []


def test_a_problem_of_a_process_restarted_since_is_still_told(fake) -> None:
    op = fake()
    os.kill(op.pid, signal.SIGKILL)
    op.proc.popen.wait(10)
    op.start(wait=False)
    found = op.problems()
    assert len(found) == 1 and "nobody asked" in found[0]
    op.kill()
    assert op.problems() == []


SUITE_TEST = """
import os, signal, sys, time
sys.path.insert(0, {here!r})
from test_operator_checks import FakeOperator

op = None

def test_one(tmp_path):
    global op
    op = FakeOperator(tmp_path / "op.log")
    op.start(wait=False)
    op.wait_logged("started")
    {during}

def test_two():
    pass
"""


@pytest.mark.parametrize(
    ("during", "failed"),
    [
        ("os.kill(op.pid, signal.SIGKILL); op.proc.popen.wait(10)", True),  # after the test's last wait
        ("op.expect_exit(); os.kill(op.pid, signal.SIGKILL); op.proc.popen.wait(10)", False),
        ("op.kill()", False),
        ("", False),  # still running after the test: stays checked, no failure
    ],
)
def test_the_suite_fails_the_test_during_which_its_operator_died(
    tmp_path: Path, during: str, failed: bool
) -> None:
    (tmp_path / "test_op.py").write_text(
        textwrap.dedent(SUITE_TEST).format(here=str(Path(__file__).parent), during=during)
    )
    proc = run_pytest(tmp_path, "-rA", "test_op.py")
    if failed:
        assert proc.returncode == 1, proc.stdout
        assert "FAILED test_op.py::test_one - localcluster.operator.OperatorFailed" in proc.stdout
        assert "exited with code -9 while nobody asked" in proc.stdout
        assert "PASSED test_op.py::test_two" in proc.stdout
    else:
        assert proc.returncode == 0, proc.stdout
