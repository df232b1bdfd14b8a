"""Command-line flags, named as upstream's mpi-operator where they apply."""

from __future__ import annotations

import argparse
import os

from reconcile.health import DEFAULT_PORT


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="mpijob-operator",
        description="MPIJob (kubeflow.org/v2beta1) operator, a drop-in replacement for mpi-operator v2.",
    )
    p.add_argument(
        "--kubeconfig",
        "--kubeConfig",
        dest="kubeconfig",
        default="",
        help="kubeconfig file; default: $KUBECONFIG, then in-cluster config, then ~/.kube/config",
    )
    p.add_argument("--master", default="", help="API server URL; overrides the kubeconfig's server")
    p.add_argument(
        "--namespace",
        default=os.environ.get("KUBEFLOW_NAMESPACE", ""),
        help="watch only these namespaces, comma-separated (default $KUBEFLOW_NAMESPACE); empty means all "
        "namespaces (a namespace-scoped install needs Roles in these only: deploy/namespaced)",
    )
    p.add_argument("--threadiness", type=int, default=2, help="worker threads that sync MPIJobs")
    p.add_argument("--kube-api-qps", type=float, default=5, help="client-side API requests per second")
    p.add_argument("--kube-api-burst", type=int, default=10, help="client-side API request burst")
    p.add_argument("--controller-queue-rate-limit", type=float, default=10, help="work queue keys per second")
    p.add_argument("--controller-queue-burst", type=int, default=100, help="work queue burst")
    p.add_argument(
        "--gang-scheduling",
        default="",
        help='"volcano", or a scheduler-plugins scheduler name; empty disables gang scheduling',
    )
    p.add_argument("--cluster-domain", default="", help="appended to the FQDNs in the hostfile")
    p.add_argument("--lock-namespace", default="mpi-operator", help="namespace of the leader-election Lease")
    p.add_argument(
        "--monitoring-port",
        type=int,
        default=DEFAULT_PORT,
        help=f"port for /metrics, /healthz, /readyz; 0 turns /metrics off, probes stay on {DEFAULT_PORT}",
    )
    p.add_argument("--bind-address", default="0.0.0.0", help="address the probe and metrics server binds")
    p.add_argument("--version", action="store_true", help="print version information and exit")
    p.add_argument("--log-format", choices=("json", "text"), default="json")
    p.add_argument("--log-level", choices=("debug", "info", "warning", "error"), default="info")
    return p


def parse(argv: list[str] | None = None) -> argparse.Namespace:
    args = parser().parse_args(argv)
    if args.threadiness < 1:
        parser().error("--threadiness must be at least 1")
    if args.kube_api_qps < 0 or args.kube_api_burst < 1:
        parser().error("--kube-api-qps must be >= 0 and --kube-api-burst >= 1")
    if args.controller_queue_rate_limit <= 0 or args.controller_queue_burst < 1:
        parser().error("--controller-queue-rate-limit must be > 0 and --controller-queue-burst >= 1")
    return args
