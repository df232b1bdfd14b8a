"""The operator process: flags, client, CRD check, probes, leader election, controller, clean shutdown."""

from __future__ import annotations

import logging
import os
import platform
import signal
import socket
import sys
import threading
import tomllib
import uuid
from importlib import metadata
from pathlib import Path
from typing import NoReturn

from kubernetes import config as kubeconfig
from kubernetes.client import ApiClient, Configuration

import render
from reconcile import flags, logs
from reconcile.controller import Controller
from reconcile.events import EventRecorder
from reconcile.health import DEFAULT_PORT, HealthServer
from reconcile.kube import MPIJOB, ApiError, Kube
from reconcile.leader import LeaderElector
from reconcile.metrics import Metrics
from render.bounds import CLUSTER_DOMAIN_MAX

log = logging.getLogger("mpijob-operator")

API_VERSION = "v2"


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


def api_client(kubeconfig_path: str, master: str) -> ApiClient:
    cfg = Configuration()
    path = kubeconfig_path or os.environ.get("KUBECONFIG", "")
    if path:
        kubeconfig.load_kube_config(config_file=path, client_configuration=cfg)
    elif os.environ.get("KUBERNETES_SERVICE_HOST"):
        kubeconfig.load_incluster_config(client_configuration=cfg)
    else:
        kubeconfig.load_kube_config(client_configuration=cfg)
    if master:
        cfg.host = master
    # enough connections for the workers, the informers' watches and the lease
    cfg.connection_pool_maxsize = 32
    return ApiClient(cfg)


def check_crd(kube: Kube, namespace: str) -> None:
    """Exit 1 with a clear message when the MPIJob CRD is missing (as upstream does at start)."""
    try:
        kube.list(MPIJOB, namespace or None, limit=1)
    except ApiError as err:
        if err.status == 404:
            log.critical(
                "the MPIJob CRD (mpijobs.kubeflow.org, version v2beta1) is not installed; "
                "apply deploy/crd/ first",
                extra={"error": str(err)},
            )
            sys.exit(1)
        raise


class Controllers:
    """One Controller per watched namespace (--namespace a,b): each namespace's informers, queue and
    workers, so Roles in those namespaces are all the operator needs."""

    def __init__(self, controllers: list[Controller]) -> None:
        self.controllers = controllers

    def start(self) -> bool:
        return all(c.start() for c in self.controllers)

    def stop(self) -> None:
        for c in self.controllers:
            c.stop()

    def has_synced(self) -> bool:
        return all(c.has_synced() for c in self.controllers)

    def synced_version(self, key: str) -> str | None:
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
    logs.setup(args.log_format, args.log_level)
    log.info(
        "starting",
        extra={
            "namespace": args.namespace or "(all)",
            "threadiness": args.threadiness,
            "gang_scheduling": args.gang_scheduling,
            "lock_namespace": args.lock_namespace,
        },
    )

    metrics = Metrics()

    def count(verb: str, kind: str, code: str) -> None:
        metrics.api_requests.labels(verb=verb, kind=kind, code=code).inc()

    try:
        client = api_client(args.kubeconfig, args.master)
    except Exception as err:
        log.critical("cannot build the Kubernetes client", extra={"error": str(err)})
        return 1
    kube = Kube(client, qps=args.kube_api_qps, burst=args.kube_api_burst, on_request=count)
    # Leader election gets a client of its own (as client-go's "leader-election" one): a busy controller
    # must never starve the lease renewals of rate-limit tokens and lose the lease.
    lease_kube = Kube(
        api_client(args.kubeconfig, args.master),
        qps=args.kube_api_qps,
        burst=args.kube_api_burst,
        on_request=count,
        user_agent="mpi-operator/leader-election",
    )
    namespaces = namespaces_of(args.namespace)
    if len(args.cluster_domain) > CLUSTER_DOMAIN_MAX:
        # the worker limit of the CRD assumes at most this many characters in every hostfile line
        log.critical("--cluster-domain is too long", extra={"max": CLUSTER_DOMAIN_MAX})
        return 1
    try:
        check_crd(kube, namespaces[0])
    except ApiError as err:
        log.critical("cannot reach the API server", extra={"error": str(err)})
        return 1

    host = socket.gethostname()
    identity = f"{host}_{uuid.uuid4()}"
    recorder = EventRecorder(kube, host=host)
    controller = Controllers(
        [
            Controller(
                kube,
                render.Config(cluster_domain=args.cluster_domain, gang_scheduling=args.gang_scheduling),
                metrics=metrics,
                recorder=recorder,
                namespace=namespace,
                threadiness=args.threadiness,
                queue_qps=args.controller_queue_rate_limit,
                queue_burst=args.controller_queue_burst,
                on_fatal=fatal,
            )
            for namespace in namespaces
        ]
    )
    stop = threading.Event()

    def started() -> None:
        if not controller.start():
            return
        log.info("controller running", extra={"workers": args.threadiness})

    elector = LeaderElector(
        lease_kube,
        args.lock_namespace,
        identity,
        on_started=started,
        on_stopped=lambda: fatal("leader election lost"),
        on_change=lambda leading: metrics.is_leader.set(1 if leading else 0),
    )

    def ready() -> bool:
        return controller.has_synced() if elector.is_leader else True

    port = args.monitoring_port or DEFAULT_PORT
    health = HealthServer(
        args.bind_address,
        port,
        healthy=elector.healthy,
        ready=ready,
        metrics=metrics.exposition if args.monitoring_port else None,
        synced=controller.synced_version if args.monitoring_port else None,
    )
    health.start()

    def on_signal(signum: int, _frame: object) -> None:
        log.info("shutting down", extra={"signal": signal.Signals(signum).name})
        stop.set()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)

    elector.run(stop, before_release=controller.stop)
    health.stop()
    log.info("stopped")
    return 0


if __name__ == "__main__":
    sys.exit(main())
