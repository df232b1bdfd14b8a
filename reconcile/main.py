"""The operator process: flags, client, CRD check, probes, leader election, controller, clean shutdown."""

from __future__ import annotations

import argparse
import logging
import os
import platform
import random
import signal
import socket
import sys
import threading
import time
import tomllib
import uuid
from collections.abc import Callable
from importlib import metadata
from pathlib import Path
from typing import NoReturn, TypeVar

import render
from reconcile import flags
from reconcile.mpijob.controller import Controller
from reconcile.mpijob.kinds import MPIJOB
from reconcile.mpijob.metrics import Metrics
from reconcile.mpijob.policy import EVENT_COMPONENT, LOCK_NAME
from reconcile.mpijob.workloadapi import served_workload_api
from reconcile.runtime import logs, procmem
from reconcile.runtime.events import BackgroundEventRecorder
from reconcile.runtime.fence import Fence
from reconcile.runtime.health import DEFAULT_PORT, HealthServer
from reconcile.runtime.kube import ApiError, Kube, api_client
from reconcile.runtime.leader import LeaderElector
from render import names
from render.bounds import CLUSTER_DOMAIN_MAX

log = logging.getLogger("mpijob-operator")

API_VERSION = "v2"
T = TypeVar("T")


def version_text() -> str:
    try:
        version = metadata.version("mpijob-operator")
    except metadata.PackageNotFoundError:  # running from a checkout
        pyproject = Path(__file__).resolve().parent.parent / "pyproject.toml"
        try:
            version = tomllib.loads(pyproject.read_text())["project"]["version"]
        except (OSError, KeyError, tomllib.TOMLDecodeError):
            version = "unknown"
    return (
        f"API Version: {API_VERSION}\n"
        f"Version: {version}\n"
        f"Git SHA: {os.environ.get('GIT_SHA', 'unknown')}\n"
        f"Python version: {platform.python_version()}\n"
        f"OS/Arch: {sys.platform}/{platform.machine()}"
    )


class StartupError(Exception):
    """A start-up step failed. main() logs it as one line and exits 1; the Deployment's restart back-off
    (CrashLoopBackOff) is the retry, as for upstream, whose start-up errors are fatal too."""

    def __init__(self, message: str, **fields: object) -> None:
        super().__init__(message)
        self.fields = fields


STARTUP_BACKOFF = (0.5, 30.0)


def check_crd(
    kube: Kube,
    namespace: str,
    *,
    on_error: Callable[[str], None] = lambda code: None,
    stop: threading.Event | None = None,
    backoff: tuple[float, float] = STARTUP_BACKOFF,
) -> bool:
    """Wait until MPIJobs can be listed. StartupError (one line, exit 1) only when the CRD is missing (as
    upstream: NotFound); any other error (5xx, 429, 401/403 of an API server still starting, connection
    errors) is retried with back-off and counted. False if ``stop`` was set first."""

    def attempt() -> bool:
        try:
            kube.list(MPIJOB, namespace or None, limit=1)
        except ApiError as err:
            if err.status == 404:
                raise StartupError(
                    "the MPIJob CRD (mpijobs.kubeflow.org, version v2beta1) is not installed; "
                    "apply deploy/crd/ first",
                    error=str(err),
                ) from err
            raise
        return True

    return _retried("cannot list MPIJobs yet, retrying", attempt, on_error, stop, backoff) is not None


def _retried(
    what: str,
    attempt: Callable[[], T],
    on_error: Callable[[str], None],
    stop: threading.Event | None,
    backoff: tuple[float, float],
) -> T | None:
    """``attempt()`` until it answers; errors other than StartupError are retried with back-off and
    counted. None if ``stop`` was set first."""
    failures = 0
    while stop is None or not stop.is_set():
        try:
            return attempt()
        except StartupError:
            raise
        except ApiError as err:
            code, error = str(err.status), str(err)
        except Exception as err:  # connection refused, reset, TLS, timeout
            code, error = "error", _short(err)
        failures += 1
        on_error(code)
        delay = min(backoff[1], backoff[0] * 2 ** (failures - 1)) * random.uniform(1.0, 1.5)
        log.warning(
            what, extra={"code": code, "error": error, "failures": failures, "retry_in": round(delay, 2)}
        )
        if stop is not None:
            stop.wait(delay)
        else:
            time.sleep(delay)
    return None


def _short(err: BaseException) -> str:
    """The innermost reason of a transport error, without urllib3's nesting."""
    while err.__cause__ is not None:
        err = err.__cause__
    reason = getattr(err, "reason", None)
    return str(reason if reason is not None else err)


class Controllers:
    """One Controller per watched namespace (--namespace a,b): each namespace's informers, queue and
    workers, so Roles in those namespaces are all the operator needs."""

    def __init__(self, controllers: list[Controller]) -> None:
        self.controllers = controllers

    def start(self) -> bool:
        return all(c.start() for c in self.controllers)

    def stop(self, timeout: float = 30) -> bool:
        """Every controller stops taking keys at once; their syncs in flight share ``timeout``."""
        threads = [threading.Thread(target=c.stop, args=(timeout,), daemon=True) for c in self.controllers]
        for t in threads:
            t.start()
        deadline = time.monotonic() + timeout
        for t in threads:
            t.join(max(0.0, deadline - time.monotonic()))
        return not any(t.is_alive() for t in threads)

    def has_synced(self) -> bool:
        return all(c.has_synced() for c in self.controllers)

    def synced_version(self, key: str) -> str | None:
        """The MPIJob resourceVersion the last finished sync of ``key`` (ns/name) acted on."""
        return next((v for c in self.controllers if (v := c.synced_version(key)) is not None), None)


def namespaces_of(flag: str) -> list[str]:
    """The --namespace list; [""] (every namespace) when empty."""
    return [n.strip() for n in flag.split(",") if n.strip()] or [""]


def fatal(message: str) -> NoReturn:
    """Exit at once: the state this process relies on (lease, API access) is gone."""
    log.critical(message)
    logging.shutdown()
    os._exit(1)


def main(argv: list[str] | None = None) -> int:
    args = flags.parse(argv)
    if args.version:
        print(version_text())
        return 0
    try:
        logs.setup(args.log_format, args.log_level, file=args.log_file_path, also_stderr=args.alsologtostderr)
    except OSError as err:
        logs.setup(args.log_format, args.log_level)
        log.critical("cannot open the log file", extra={"file": args.log_file_path, "error": str(err)})
        return 1
    procmem.setup()  # before any thread starts
    try:
        return run(args)
    except StartupError as err:
        log.critical(str(err), extra=err.fields)
    except Exception as err:  # anything unforeseen: still one line, the traceback inside it
        log.critical("the operator failed", extra={"error": _short(err)}, exc_info=True)
    logging.shutdown()
    return 1


def run(args: argparse.Namespace) -> int:
    log.info(
        "starting",
        extra={
            "namespace": args.namespace or "(all)",
            "threadiness": args.threadiness,
            "gang_scheduling": args.gang_scheduling,
            "force_delete_lost_workers_after": args.force_delete_lost_workers_after,
            "lock_namespace": args.lock_namespace,
        },
    )
    metrics = Metrics()
    host = socket.gethostname()
    identity = f"{host}_{uuid.uuid4()}"
    # Every write of the controller's client passes the fence: none while we do not hold the Lease.
    fence = Fence()
    kube = _kube(args, metrics, f"mpi-operator ({identity})", fence)
    metrics.client_rate_limit.set_function(lambda: kube.limiter.rate or 0.0)
    # Leader election gets a client of its own (as client-go's "leader-election" one): a busy controller
    # must never starve the lease renewals of rate-limit tokens and lose the lease.
    lease_kube = _kube(args, metrics, f"mpi-operator/leader-election ({identity})", None)
    stop = _stop_on_signals()

    def startup_error(code: str) -> None:
        metrics.transient_errors.labels(source="startup", code=code).inc()

    namespaces = namespaces_of(args.namespace)
    if len(args.cluster_domain) > CLUSTER_DOMAIN_MAX:
        # the worker limit of the CRD assumes at most this many characters in every hostfile line
        raise StartupError("--cluster-domain is too long", max=CLUSTER_DOMAIN_MAX)
    if not check_crd(kube, namespaces[0], on_error=startup_error, stop=stop):
        log.info("stopped")
        return 0
    workload_api = _workload_api(args, kube, startup_error, stop)
    if workload_api is None:
        log.info("stopped")
        return 0
    recorder = BackgroundEventRecorder(kube, component=EVENT_COMPONENT, host=host)
    config = render.Config(
        cluster_domain=args.cluster_domain,
        gang_scheduling=args.gang_scheduling,
        workload_api=workload_api,
        force_delete_lost_workers_after=args.force_delete_lost_workers_after,
    )
    controller = Controllers(
        [_controller(args, kube, config, metrics, recorder, namespace) for namespace in namespaces]
    )

    def started() -> None:
        if controller.start():
            log.info("controller running", extra={"workers": args.threadiness})

    elector = LeaderElector(
        lease_kube,
        args.lock_namespace,
        identity,
        name=LOCK_NAME,
        lease_duration=args.leader_elect_lease_duration,
        renew_deadline=args.leader_elect_renew_deadline,
        retry_period=args.leader_elect_retry_period,
        fence=fence,
        on_started=started,
        on_stopped=lambda: fatal("leader election lost"),
        on_change=lambda leading: metrics.is_leader.set(1 if leading else 0),
    )
    health = _health_server(args, metrics, elector, controller)

    def before_release(timeout: float) -> None:
        started = time.monotonic()
        controller.stop(timeout)
        # the syncs' last events, while the fence still lets them through
        recorder.flush(max(0.0, min(2.0, timeout - (time.monotonic() - started))))

    elector.run(stop, before_release=before_release)
    health.stop()
    log.info("stopped")
    return 0


def _kube(args: argparse.Namespace, metrics: Metrics, user_agent: str, fence: Fence | None) -> Kube:
    """A client of its own, counted in the request metric. The identity in the user agent ties each
    request in the API server's audit log to a Lease holder."""

    def count(verb: str, kind: str, code: str) -> None:
        metrics.api_requests.labels(verb=verb, kind=kind, code=code).inc()

    try:
        client = api_client(args.kubeconfig, args.master)
    except Exception as err:
        raise StartupError("cannot build the Kubernetes client", error=_short(err)) from err
    return Kube(
        client,
        qps=args.kube_api_qps,
        burst=args.kube_api_burst,
        on_request=count,
        user_agent=user_agent,
        fence=fence,
    )


def _stop_on_signals() -> threading.Event:
    """Set by SIGTERM or SIGINT."""
    stop = threading.Event()
    received: list[str] = []

    def on_signal(signum: int, _frame: object) -> None:
        # No logging here: a handler that runs while the main thread writes a log line re-enters the
        # stream (RuntimeError: reentrant call); a thread says it instead.
        received.append(signal.Signals(signum).name)
        stop.set()

    def say_shutting_down() -> None:
        stop.wait()
        log.info("shutting down", extra={"signal": received[0] if received else ""})

    threading.Thread(target=say_shutting_down, name="signals", daemon=True).start()
    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    return stop


def _workload_api(
    args: argparse.Namespace, kube: Kube, startup_error: Callable[[str], None], stop: threading.Event
) -> str | None:
    """The served Workload API version for --gang-scheduling=kubernetes ("" when none is served, or
    without it); None when stopped while asking."""
    if args.gang_scheduling != names.KUBERNETES_GANG:
        return ""
    served = _retried(
        "cannot discover the Workload API yet, retrying",
        lambda: served_workload_api(kube),
        startup_error,
        stop,
        STARTUP_BACKOFF,
    )
    if served:
        log.info("gang scheduling through the Workload API", extra={"api_version": served})
    elif served is not None:
        log.warning(
            "gang scheduling is not possible: the API server serves no Workload API; MPIJobs are "
            "scheduled one pod at a time and say so in their GangScheduled condition",
            extra={"looked_for": ", ".join(names.WORKLOAD_API_VERSIONS)},
        )
    return served


def _controller(
    args: argparse.Namespace,
    kube: Kube,
    config: render.Config,
    metrics: Metrics,
    recorder: BackgroundEventRecorder,
    namespace: str,
) -> Controller:
    return Controller(
        kube,
        config,
        metrics=metrics,
        recorder=recorder,
        namespace=namespace,
        threadiness=args.threadiness,
        queue_qps=args.controller_queue_rate_limit,
        queue_burst=args.controller_queue_burst,
        watch_nodes=args.watch_nodes,
    )


def _health_server(
    args: argparse.Namespace, metrics: Metrics, elector: LeaderElector, controller: Controllers
) -> HealthServer:
    def ready() -> bool:
        return controller.has_synced() if elector.is_leader else True

    port = args.monitoring_port or DEFAULT_PORT
    try:
        health = HealthServer(
            args.bind_address,
            port,
            healthy=elector.healthy,
            ready=ready,
            metrics=metrics.exposition if args.monitoring_port else None,
            synced=controller.synced_version if args.monitoring_port else None,
        )
    except OSError as err:
        raise StartupError(f"cannot listen on {args.bind_address}:{port}", error=str(err)) from err
    health.start()
    return health


if __name__ == "__main__":
    sys.exit(main())
