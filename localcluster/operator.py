"""The operator as its users start it, for the demo, every test tier and the benchmarks: one runner.

``OperatorRunner`` runs ``python -m reconcile`` with a kubeconfig and flags, in its own process group
(on ``processes.spawn``), waits until it leads with synced caches (``/readyz`` and the leader gauge),
parses its ``/metrics``, keeps its log and stops it by PID -- only while the PID is still the process it
started (``processes.Proc`` checks the start time), so a recycled PID is never signalled.

``problems()`` says what went wrong since it was last asked: an exit nobody asked for, a non-zero code
after SIGTERM, a traceback or a critical line in the log. The test suite asks it after every test for
every runner started (``started_runners()``), so a crash fails the test during which it happened.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

from prometheus_client.parser import text_string_to_metric_families

from localcluster.processes import Proc, free_port, spawn, start_time

REPO = Path(__file__).resolve().parents[1]
POLL = 0.2

Sample = tuple[str, frozenset[tuple[str, str]]]

# A crash or a fatal line, in the text format (level letter C) or the JSON one.
FATAL_LINE = re.compile(
    r'Traceback \(most recent call last\)|^\d\d:\d\d:\d\d\.\d+ C |"level":\s*"critical"', re.MULTILINE
)
_started: list[OperatorRunner] = []


def started_runners() -> list[OperatorRunner]:
    """Every runner started in this process and not yet forgotten (``forget_runner``), oldest first."""
    return list(_started)


def forget_runner(runner: OperatorRunner) -> None:
    with contextlib.suppress(ValueError):
        _started.remove(runner)


class OperatorExited(RuntimeError):
    """The operator process ended while we waited for it."""


class OperatorFailed(AssertionError):
    """The operator exited when nobody asked it to, or its log shows a crash."""


def parse_metrics(text: str) -> dict[Sample, float]:
    """Prometheus text exposition -> {(sample name, labels): value}."""
    out: dict[Sample, float] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            out[(sample.name, frozenset(sample.labels.items()))] = float(sample.value)
    return out


class OperatorRunner:
    """One operator process. ``flags`` are its command-line flags beyond kubeconfig and monitoring.

    ``detached``: the process outlives this Python process (the demo's ``--keep``); else it dies with it.
    """

    def __init__(
        self,
        kubeconfig: Path,
        log_path: Path,
        *flags: str,
        log_format: str = "text",
        detached: bool = False,
        repo: Path = REPO,
    ) -> None:
        self.kubeconfig = Path(kubeconfig)
        self.log_path = Path(log_path)
        self.flags = tuple(flags)
        self.log_format = log_format
        self.detached = detached
        self.repo = repo
        self.port = 0
        self.proc: Proc | None = None
        self._asked_to_exit = False  # stop(), kill() or expect_exit(): this exit is no failure
        self._graceful = False  # stop() sent SIGTERM to a live process: it must exit 0
        self._exit_reported = False  # problems() or OperatorExited already told about this exit
        self._may_log_fatal = False  # expect_exit(): a critical line may come with the exit
        self._scanned = 0  # the log up to here was checked for fatal lines
        self._pending: list[str] = []  # problems of an earlier process of this runner, not yet told

    # -- starting ---------------------------------------------------------------------------------------
    def argv(self) -> list[str]:
        return [
            sys.executable,
            "-m",
            "reconcile",
            f"--kubeconfig={self.kubeconfig}",
            f"--monitoring-port={self.port}",
            "--bind-address=127.0.0.1",  # probes and /metrics on loopback only
            f"--log-format={self.log_format}",
            *self.flags,
        ]

    def start(self, *, wait: bool = True, timeout: float = 60.0) -> OperatorRunner:
        if self.alive():
            raise RuntimeError(f"operator already running (pid {self.pid})")
        self.port = free_port()  # never a fixed port another run may hold
        env = self.process_env()
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        if self.proc is not None:  # a restart: what the last process did is still to be told
            self._pending = self.problems()
        else:
            self._scanned = self.log_size()
        self._asked_to_exit = self._graceful = self._exit_reported = self._may_log_fatal = False
        if self not in _started:
            _started.append(self)
        with self.log_path.open("ab") as log:
            log.write(f"\n=== starting operator: {' '.join(self.argv()[2:])}\n".encode())
        self.proc = spawn(
            "operator",
            self.argv(),
            self.log_path,
            detached=self.detached,
            env=env,
            cwd=self.repo,
            append=True,
        )
        if wait:
            self.wait_ready(timeout)
        return self

    def process_env(self) -> dict[str, str]:
        """The process environment (a subclass may add to it; ``self.port`` is set by then)."""
        env = {**os.environ, "PYTHONPATH": str(self.repo)}
        env.pop("KUBECONFIG", None)  # only the kubeconfig we pass
        return env

    def restart(self, *flags: str, wait: bool = True) -> OperatorRunner:
        """Stop, then start with ``flags`` instead of the current ones."""
        self.stop()
        self.flags = tuple(flags)
        return self.start(wait=wait)

    @contextlib.contextmanager
    def with_flags(self, *flags: str) -> Iterator[OperatorRunner]:
        """Run with other flags inside the block, with the previous ones again afterwards."""
        previous = self.flags
        self.restart(*flags)
        try:
            yield self
        finally:
            self.restart(*previous)

    def __enter__(self) -> OperatorRunner:
        return self if self.alive() else self.start()

    def __exit__(self, exc_type: object, *exc: object) -> None:
        self.stop()
        if exc_type is None:
            self.check()

    # -- state ------------------------------------------------------------------------------------------
    @property
    def pid(self) -> int:
        return self.proc.pid if self.proc is not None else 0

    def alive(self) -> bool:
        return self.proc is not None and self.proc.alive()

    def returncode(self) -> int | None:
        popen = self.proc.popen if self.proc is not None else None
        return popen.poll() if popen is not None else None

    def http(self, path: str, timeout: float = 5.0) -> tuple[int, str]:
        """(HTTP status, body) of a monitoring endpoint; (0, "") if nothing answered."""
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.port}{path}", timeout=timeout) as resp:
                return resp.status, resp.read().decode()
        except urllib.error.HTTPError as err:
            return err.code, ""
        except OSError:
            return 0, ""

    def metrics(self) -> dict[Sample, float]:
        code, body = self.http("/metrics")
        if code != 200:
            gone = "" if self.alive() else f" (the operator exited with code {self.returncode()})"
            raise RuntimeError(f"/metrics answered {code}{gone}")
        return parse_metrics(body)

    def metric(self, name: str, **labels: str) -> float:
        """The sum of the samples called ``name`` whose labels include ``labels``."""
        want = set(labels.items())
        return sum(v for (n, ls), v in self.metrics().items() if n == name and want <= ls)

    def is_leader(self) -> bool:
        code, body = self.http("/metrics")
        return code == 200 and any(
            n == "mpi_operator_is_leader" and v == 1 for (n, _), v in parse_metrics(body).items()
        )

    def ready(self) -> bool:
        return self.http("/readyz")[0] == 200 and self.is_leader()

    def wait_ready(self, timeout: float = 60.0) -> OperatorRunner:
        """Until it leads with synced caches; raises if it exits first or takes longer than ``timeout``."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if not self.alive():
                self._exit_reported = True  # the caller is told here, with the log
                self._scan_log()
                raise OperatorExited(
                    f"the operator exited with code {self.returncode()} during start-up:\n{self.log_tail()}"
                )
            if self.ready():
                return self
            time.sleep(POLL)
        raise TimeoutError(f"the operator did not lead and sync within {timeout:.0f}s:\n{self.log_tail()}")

    # -- its log ----------------------------------------------------------------------------------------
    def log_size(self) -> int:
        try:
            return self.log_path.stat().st_size
        except OSError:
            return 0

    def log_since(self, offset: int, limit: int = 40_000) -> str:
        try:
            with self.log_path.open("rb") as f:
                f.seek(offset)
                text = f.read().decode(errors="replace")
        except OSError:
            return ""
        return text if len(text) <= limit else "...\n" + text[-limit:]

    def log_tail(self, limit: int = 8000) -> str:
        return self.log_since(max(0, self.log_size() - limit), limit)

    # -- what went wrong --------------------------------------------------------------------------------
    def expect_exit(self) -> None:
        """The process is about to end on its own or by someone else's signal (a test that kills it by PID
        or makes it give up): neither the exit, its code nor a critical line in its log is a failure."""
        self._asked_to_exit = True
        self._may_log_fatal = True

    def problems(self) -> list[str]:
        """What went wrong since the last call: an exit nobody asked for, a non-zero code after SIGTERM,
        fatal log lines. Each is told once."""
        out, self._pending = self._pending, []
        fatal = self._scan_log()
        if fatal and not self._may_log_fatal:
            out.append("its log has fatal lines:\n" + "\n".join(fatal[:20]))
        if self.proc is not None and not self.alive() and not self._exit_reported:
            self._exit_reported = True
            code = self.returncode()
            if not self._asked_to_exit:
                out.append(f"it exited with code {code} while nobody asked it to (pid {self.pid})")
            elif self._graceful and code != 0:
                out.append(f"it exited with code {code} after SIGTERM (0 expected)")
        return out

    def check(self) -> None:
        """Raise ``OperatorFailed`` with the log's tail if ``problems()`` has any."""
        if found := self.problems():
            raise OperatorFailed(
                f"operator {self.log_path.name}: "
                + "; ".join(found)
                + f"\n--- its log's tail ---\n{self.log_tail()}"
            )

    def _scan_log(self) -> list[str]:
        size = self.log_size()
        if size <= self._scanned:
            return []
        text = self.log_since(self._scanned, limit=size)
        self._scanned = size
        return [line[:2000] for line in text.splitlines() if FATAL_LINE.search(line)]

    # -- stopping ---------------------------------------------------------------------------------------
    def stop(self, timeout: float = 30.0) -> int | None:
        """SIGTERM its process group, SIGKILL after ``timeout``; the exit code if we saw it. A process
        that was running must then exit 0 (``problems()``); with ``timeout=0`` it is killed at once."""
        if self.proc is not None:
            if self.alive():
                self._asked_to_exit = True
                self._graceful = timeout > 0
            self.proc.stop(timeout)
        return self.returncode()

    def kill(self) -> None:
        """SIGKILL at once (a crash, for tests): an expected exit."""
        self.stop(timeout=0)

    # -- a detached operator, found again by a later process (the demo's --down) -------------------------
    def record(self, path: Path) -> None:
        """Write what ``stop_recorded`` needs to stop this process later: its PID and start time."""
        assert self.proc is not None
        path.write_text(
            json.dumps({"pid": self.proc.pid, "started": self.proc.started, "log": str(self.log_path)})
        )


def stop_recorded(path: Path, timeout: float = 10.0) -> bool:
    """Stop the operator ``record`` wrote to ``path``, if that PID is still the same process (its start
    time matches); remove the file. True if a process was stopped."""
    try:
        state = json.loads(path.read_text())
        proc = Proc("operator", int(state["pid"]), int(state["started"]), Path(state.get("log", os.devnull)))
    except (OSError, ValueError, KeyError, TypeError):
        path.unlink(missing_ok=True)
        return False
    running = start_time(proc.pid) == proc.started and proc.alive()
    if running:
        proc.stop(timeout)
    path.unlink(missing_ok=True)
    return running
