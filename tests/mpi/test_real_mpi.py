"""L3: real sshd and mpirun in network namespaces, driven only by render's output.

Every scenario asserts which host each rank ran on, from the MPI program's own output (tests/mpi/mpi_hosts.c),
and which MPI library it loaded.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

import pytest

from tests.mpi.harness import RunResult
from tests.mpi.jobs import mpijob, sshd_argv

pytestmark = [pytest.mark.l3, pytest.mark.timeout(240)]

LIBRARY = {"OpenMPI": "Open MPI v5.", "MPICH": "MPICH Version:", "Intel": "Intel(R) MPI Library"}
# Kubernetes restarts a crashed container after 10 s, doubling; 2 s keeps the retry scenarios short.
FAST_BACKOFF = 2.0


def library(result: RunResult, attempt: int = -1) -> str:
    lines = [ln for ln in result.attempts[attempt].stdout.splitlines() if ln.startswith("LIBRARY ")]
    return lines[0].removeprefix("LIBRARY ") if lines else ""


def assert_two_by_two(result: RunResult, job: str, impl: str) -> None:
    assert result.succeeded, result.describe()
    ranks = result.ranks()
    assert sorted(ranks) == [0, 1, 2, 3], result.describe()
    # slotsPerWorker=2: two ranks on each worker, none on the launcher.
    assert Counter(ranks.values()) == {f"{job}-worker-0": 2, f"{job}-worker-1": 2}, result.table()
    assert library(result).startswith(LIBRARY[impl]), library(result)
    assert "ALLREDUCE 4" in result.attempts[-1].stdout


@pytest.mark.parametrize(
    ("image", "impl"),
    [
        ("l3/openmpi:root", "OpenMPI"),
        ("l3/openmpi:nonroot", "OpenMPI"),
        ("l3/mpich:nonroot", "MPICH"),
    ],
    # Intel MPI (the same impi-rt as L4's image) moved to tests/node: test_two_slots_per_worker[intel].
    ids=["openmpi5-root", "openmpi5-nonroot", "mpich-nonroot"],
)
def test_two_workers_two_slots(run_job: Any, image: str, impl: str) -> None:
    job = mpijob("pi", image, impl=impl)
    result = run_job(job)
    assert_two_by_two(result, "pi", impl)
    assert len(result.attempts) == 1
    sep = " slots=" if impl == "OpenMPI" else ":"
    assert result.hostfile == f"pi-worker-0.pi.l3.svc{sep}2\npi-worker-1.pi.l3.svc{sep}2\n"


LAW_IMAGES = [("l3/openmpi:nonroot", "OpenMPI"), ("l3/mpich:nonroot", "MPICH"), ("l3/intel:nonroot", "Intel")]
LAW_IDS = ["openmpi5", "mpich", "intel"]


# Intel MPI (the same impi-rt as L4's image) moved to tests/node: test_run_launcher_as_worker[intel].
@pytest.mark.parametrize(("image", "impl"), LAW_IMAGES[:2], ids=LAW_IDS[:2])
def test_run_launcher_as_worker(run_job: Any, image: str, impl: str) -> None:
    """The launcher is the first host of the hostfile: ranks 0-1 run on it (no ssh to itself, it runs
    no sshd), ranks 2-3 on the one worker."""
    job = mpijob("law", image, impl=impl, workers=1, launcher_as_worker=True)
    result = run_job(job)
    assert result.hostfile.splitlines()[0].split()[0].split(":")[0] == "law-launcher"
    assert result.succeeded, result.describe()
    assert result.ranks() == {0: "law-launcher", 1: "law-launcher", 2: "law-worker-0", 3: "law-worker-0"}
    assert library(result).startswith(LIBRARY[impl]), library(result)


def _upstream_launcher_fqdn(obj: dict[str, Any]) -> None:
    """Put back upstream's hostfile text for the launcher line: its FQDN instead of the bare hostname."""
    if obj["kind"] == "ConfigMap" and "hostfile" in obj.get("data", {}):
        lines = obj["data"]["hostfile"].splitlines(keepends=True)
        lines[0] = lines[0].replace("law-launcher", "law-launcher.law.l3.svc", 1)
        obj["data"]["hostfile"] = "".join(lines)


@pytest.mark.parametrize(
    ("image", "impl", "works"),
    [
        ("l3/openmpi:nonroot", "OpenMPI", False),
        ("l3/mpich:nonroot", "MPICH", True),
        ("l3/intel:nonroot", "Intel", False),
    ],
    ids=LAW_IDS,
)
def test_run_launcher_as_worker_with_upstream_fqdn_line(
    run_job: Any, image: str, impl: str, works: bool
) -> None:
    """Why render writes the launcher's own line bare (docs/design-notes.md): with upstream's FQDN line,
    Open MPI 5 and Intel MPI do not recognise the launcher as local and ssh to it, where no sshd runs."""
    job = mpijob("law", image, impl=impl, workers=1, launcher_as_worker=True)
    result = run_job(job, tamper=_upstream_launcher_fqdn)
    assert result.hostfile.startswith("law-launcher.law.l3.svc")
    assert result.succeeded is works, result.describe()
    if not works:
        out = result.attempts[0].stdout + result.attempts[0].stderr
        assert "law-launcher.law.l3.svc" in out and not result.ranks(), out


def _event_time(result: RunResult, text: str) -> float:
    return next(t for t, what in result.timeline if text in what)


def test_wait_for_workers_ready_holds_launcher(run_job: Any) -> None:
    """worker-1 starts 4 s late; render returns no launcher Job until both workers are Ready."""
    job = mpijob("wfr", "l3/openmpi:nonroot", policy="WaitForWorkersReady", readiness_port=2222)
    result = run_job(job, start_delays={"wfr-worker-1": 4.0}, restart_backoff=FAST_BACKOFF)
    ready = _event_time(result, "wfr-worker-1 Ready=True")
    created = _event_time(result, "created Job wfr-launcher")
    assert created >= ready >= 4.0, result.describe()
    assert len(result.attempts) == 1, result.describe()
    assert_two_by_two(result, "wfr", "OpenMPI")


@pytest.mark.parametrize(
    ("image", "impl"),
    [("l3/openmpi:nonroot", "OpenMPI"), ("l3/mpich:nonroot", "MPICH"), ("l3/intel:nonroot", "Intel")],
    ids=["openmpi5", "mpich", "intel"],
)
def test_default_policy_late_sshd_retried_by_connection_attempts(run_job: Any, image: str, impl: str) -> None:
    """Worker pods are Ready (no probe) and in DNS at once, but the workers' sshd listens 3 s later:
    ssh's `ConnectionAttempts=10` (from the rendered launcher env) rides it out in the first attempt.
    MPICH: docs/design-notes.md."""
    late = ["/bin/sh", "-c", "sleep 3; exec " + " ".join(sshd_argv(image))]
    job = mpijob("lsd", image, impl=impl, worker_command=late)
    result = run_job(job)
    assert len(result.attempts) == 1, result.describe()
    a = result.attempts[0]
    assert a.rc == 0 and a.ended is not None and a.ended - a.started >= 2.5, result.describe()
    assert_two_by_two(result, "lsd", impl)


def _upstream_hydra_env(obj: dict[str, Any]) -> None:
    """Only upstream's MPICH variable name for the ssh arguments, HYDRA_LAUNCH_EXTRA_ARGS."""
    if obj["kind"] != "Job":
        return
    for c in obj["spec"]["template"]["spec"]["containers"]:
        env = [e for e in c.get("env", []) if e["name"] != "HYDRA_LAUNCHER_EXTRA_ARGS"]
        assert any(e["name"] == "HYDRA_LAUNCH_EXTRA_ARGS" for e in env)
        c["env"] = env


def test_mpich_ignores_upstream_hydra_launch_extra_args(run_job: Any) -> None:
    """docs/design-notes.md: MPICH's hydra reads HYDRA_LAUNCHER_EXTRA_ARGS; with upstream's
    HYDRA_LAUNCH_EXTRA_ARGS alone, ssh gets no ConnectionAttempts and a late sshd fails the launch at once."""
    late = ["/bin/sh", "-c", "sleep 3; exec " + " ".join(sshd_argv("l3/mpich:nonroot"))]
    job = mpijob("lsd", "l3/mpich:nonroot", impl="MPICH", worker_command=late)
    result = run_job(job, tamper=_upstream_hydra_env)
    a = result.attempts[0]
    assert not result.succeeded and a.ended is not None and a.ended - a.started < 2.5, result.describe()
    assert "port 2222: Connection refused" in a.stderr, a.stderr


def _upstream_service(obj: dict) -> None:
    """Upstream's Service: names only for Ready pods (ours publishes them from the pod's IP on)."""
    if obj["kind"] == "Service":
        obj["spec"]["publishNotReadyAddresses"] = False


def test_default_policy_late_worker_pod_fails_then_job_retries(run_job: Any) -> None:
    """worker-1's container starts 5 s late. With upstream's Service it is not Ready and has no DNS record
    when the launcher (AtStartup) runs: what the user sees is the resolver error, then the launcher Job's
    retry succeeds. (This harness runs no init containers, so the launcher's gate is not in play; on the
    real node it holds mpirun until the hosts answer, tests/node.)"""
    job = mpijob("lwp", "l3/openmpi:nonroot", backoff_limit=6)
    result = run_job(
        job, start_delays={"lwp-worker-1": 5.0}, restart_backoff=FAST_BACKOFF, tamper=_upstream_service
    )
    first = result.attempts[0]
    print("first attempt, as `kubectl logs` shows it:\n" + first.stdout + first.stderr)
    assert first.rc != 0
    assert "Could not resolve hostname lwp-worker-1.lwp.l3.svc" in first.stderr, first.stderr
    assert len(result.attempts) >= 2
    assert_two_by_two(result, "lwp", "OpenMPI")


def test_late_worker_pod_has_its_name_at_once_with_our_service(run_job: Any) -> None:
    """The same late worker with our Service: its name exists from its IP on, so ssh's ConnectionAttempts
    bridge the late sshd and the first attempt succeeds."""
    job = mpijob("lwn", "l3/openmpi:nonroot", backoff_limit=6)
    result = run_job(job, start_delays={"lwn-worker-1": 5.0}, restart_backoff=FAST_BACKOFF)
    assert result.attempts[0].rc == 0, result.describe()
    assert_two_by_two(result, "lwn", "OpenMPI")


def _without_prte(obj: dict[str, Any]) -> None:
    """Filter the rendered launcher env as an operator emitting only upstream's ORTE names would."""
    if obj["kind"] != "Job":
        return
    for c in obj["spec"]["template"]["spec"]["containers"]:
        c["env"] = [e for e in c.get("env", []) if not e["name"].startswith("PRTE_MCA_")]


def test_openmpi5_without_prte_variables_runs_on_launcher_only(run_job: Any) -> None:
    """Upstream #842: with only the OMPI_MCA_orte_* variables Open MPI 5 ignores the hostfile.
    `mpirun -n 4` has no slots on the launcher alone, and `mpirun -n 2` silently runs both ranks there."""
    job = mpijob("noprte", "l3/openmpi:nonroot")
    result = run_job(job, tamper=_without_prte)
    assert not result.succeeded, result.describe()
    assert "not enough slots" in result.attempts[0].stdout + result.attempts[0].stderr, result.describe()
    assert not result.ranks()

    job = mpijob("noprte2", "l3/openmpi:nonroot", ranks=2)
    result = run_job(job, tamper=_without_prte)
    assert result.succeeded, result.describe()
    assert result.ranks() == {0: "noprte2-launcher", 1: "noprte2-launcher"}, result.table()


def test_openmpi5_with_prte_variables_two_ranks_go_to_workers(run_job: Any) -> None:
    """The control for the test above: the same 2-rank job with render's env uses the workers."""
    job = mpijob("prte2", "l3/openmpi:nonroot", ranks=2)
    result = run_job(job)
    assert result.succeeded, result.describe()
    assert set(result.ranks().values()) <= {"prte2-worker-0", "prte2-worker-1"}, result.table()
