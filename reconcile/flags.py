"""Command-line flags: upstream mpi-operator v0.8.2's, parsed the way Go's `flag` package parses them.

Every flag accepts `-flag=v`, `-flag v`, `--flag=v` and `--flag v` (booleans: `-flag`, `-flag=false`), so
upstream's Deployment args (`-alsologtostderr`, `-kubeConfig=...`, `-v=4`) work unchanged. Prefixes are not
abbreviations: `--v=2` is klog's verbosity, never `--version`. klog's flags are accepted; `-v` and the
file flags map to our logging, the others change nothing here (see README, Flags).
"""

from __future__ import annotations

import argparse
import logging
import os
import re
import sys
from collections.abc import Callable
from typing import NoReturn

from reconcile.runtime import logs
from reconcile.runtime.health import DEFAULT_PORT
from reconcile.runtime.leader import LEASE_DURATION, RENEW_DEADLINE, RETRY_PERIOD

_TRUE = {"1", "t", "T", "true", "TRUE", "True"}
_FALSE = {"0", "f", "F", "false", "FALSE", "False"}


def go_bool(text: str) -> bool:
    """strconv.ParseBool."""
    if text in _TRUE:
        return True
    if text in _FALSE:
        return False
    raise argparse.ArgumentTypeError(f"invalid boolean value {text!r}")


def go_int(text: str) -> int:
    """strconv.ParseInt(text, 0, 64): decimal, 0x/0o/0b, a leading 0 for octal, underscores."""
    try:
        if re.fullmatch(r"[+-]?0[0-7_]+", text):
            return int(text.replace("_", ""), 8)
        return int(text, 0)
    except ValueError:
        raise argparse.ArgumentTypeError(f"invalid integer value {text!r}") from None


def go_float(text: str) -> float:
    try:
        return float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"invalid number {text!r}") from None


def _severity(text: str) -> str:
    """klog's severity flags take a name or its number."""
    names = ("INFO", "WARNING", "ERROR", "FATAL")
    if text.upper() in names:
        return text.upper()
    if text in ("0", "1", "2", "3"):
        return names[int(text)]
    raise argparse.ArgumentTypeError(f"invalid severity {text!r}: one of INFO, WARNING, ERROR, FATAL")


def _env_int(name: str, default: int) -> int:
    value = os.environ.get(name, "")
    return go_int(value) if value else default


class FlagError(Exception):
    pass


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        raise FlagError(message)


def parser() -> argparse.ArgumentParser:
    p = _Parser(
        prog="mpijob-operator",
        description="MPIJob (kubeflow.org/v2beta1) operator, a drop-in replacement for mpi-operator v2.",
        allow_abbrev=False,
    )
    # In this order: --help lists the flags as they are added.
    _add_cluster_flags(p)
    _add_throughput_flags(p)
    _add_job_flags(p)
    _add_leader_election_flags(p)
    _add_server_flags(p)
    _add_process_flags(p)
    _add_klog_flags(p)
    return p


def _add_cluster_flags(p: argparse.ArgumentParser) -> None:
    """Which API server, and which of its namespaces."""
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


def _add_throughput_flags(p: argparse.ArgumentParser) -> None:
    """Workers, the API client's limits and the work queue's."""
    p.add_argument(
        "--threadiness",
        type=go_int,
        default=4,
        help="worker threads that sync MPIJobs (upstream: 2)",
    )
    p.add_argument(
        "--kube-api-qps",
        type=go_float,
        default=0,
        help="client-side API requests per second; 0: no fixed limit, the client follows the API server's "
        "429s (Retry-After) and latency",
    )
    p.add_argument(
        "--kube-api-burst",
        type=go_int,
        default=10,
        help="client-side API request burst (with --kube-api-qps > 0)",
    )
    p.add_argument(
        "--controller-queue-rate-limit",
        type=go_float,
        default=0,
        help="work queue keys per second across keys (upstream: 10); 0: none, the API client's limiter "
        "paces the writes; per-key back-off always applies",
    )
    p.add_argument("--controller-queue-burst", type=go_int, default=100, help="work queue burst")


def _add_job_flags(p: argparse.ArgumentParser) -> None:
    """What the operator makes of each MPIJob: gang scheduling, host names, lost nodes."""
    p.add_argument(
        "--gang-scheduling",
        default="",
        help='"kubernetes" (the Workload API of Kubernetes\' own scheduler), "volcano", or a '
        "scheduler-plugins scheduler name; empty disables gang scheduling",
    )
    p.add_argument("--cluster-domain", default="", help="appended to the FQDNs in the hostfile")
    _bool(
        p,
        "--watch-nodes",
        "watch Nodes (list, watch) to name a node that is not Ready on the jobs whose pods it holds"
        " (default true; false for an install without a ClusterRole)",
        default=True,
    )
    p.add_argument(
        "--force-delete-lost-workers-after",
        type=go_int,
        default=0,
        metavar="SECONDS",
        help="force-delete a job's worker pods on a node that has not been Ready this long, so they are"
        " replaced elsewhere without waiting for the node; 0 (default): never. Risk: a node that only lost"
        " the API server may still run them, and a second copy of a rank would run beside the first"
        " (docs/troubleshooting.md). Needs --watch-nodes",
    )


def _add_leader_election_flags(p: argparse.ArgumentParser) -> None:
    p.add_argument("--lock-namespace", default="mpi-operator", help="namespace of the leader-election Lease")
    # client-go's leader-election flag names (kube-controller-manager's), with its defaults
    p.add_argument(
        "--leader-elect-lease-duration",
        type=go_int,
        default=int(LEASE_DURATION),
        help="seconds a standby waits on an unrenewed Lease before taking it",
    )
    p.add_argument(
        "--leader-elect-renew-deadline",
        type=float,
        default=RENEW_DEADLINE,
        help="seconds the leader may fail to renew before it stops writing (until it renews again)",
    )
    p.add_argument(
        "--leader-elect-retry-period", type=float, default=RETRY_PERIOD, help="seconds between Lease attempts"
    )


def _add_server_flags(p: argparse.ArgumentParser) -> None:
    """The probe and metrics server."""
    p.add_argument(
        "--monitoring-port",
        type=go_int,
        default=_env_int("MPIJOB_OPERATOR_MONITORING_PORT", DEFAULT_PORT),
        help=f"port for /metrics, /healthz, /readyz (default $MPIJOB_OPERATOR_MONITORING_PORT or "
        f"{DEFAULT_PORT}); 0 turns /metrics off, the probes then stay on {DEFAULT_PORT}",
    )
    p.add_argument(
        "--bind-address",
        default=os.environ.get("MPIJOB_OPERATOR_BIND_ADDRESS", "0.0.0.0"),
        help="address the probe and metrics server binds (default $MPIJOB_OPERATOR_BIND_ADDRESS or 0.0.0.0)",
    )


def _add_process_flags(p: argparse.ArgumentParser) -> None:
    """The version, and our own logging."""
    _bool(p, "--version", "print version information and exit")
    p.add_argument("--log-format", choices=("json", "text"), default="json")
    p.add_argument(
        "--log-level",
        choices=("debug", "info", "warning", "error"),
        default=None,
        help="default info, or debug with klog's -v of 4 or more",
    )


def _add_klog_flags(p: argparse.ArgumentParser) -> None:
    k = p.add_argument_group("klog flags (upstream's logging; accepted so its manifests run unchanged)")
    k.add_argument("--v", type=go_int, default=0, help="verbosity: 4 or more logs at debug level")
    _bool(k, "--logtostderr", "log to stderr, not to files (default true)", default=True)
    _bool(k, "--alsologtostderr", "with log files, log to stderr as well")
    k.add_argument("--log_file", default="", help="with -logtostderr=false, log to this file")
    k.add_argument("--log_dir", default="", help="with -logtostderr=false, log to mpijob-operator.log here")
    k.add_argument("--log_file_max_size", type=go_int, default=1800, help="accepted, no effect")
    k.add_argument("--stderrthreshold", type=_severity, default="INFO", help="accepted, no effect")
    k.add_argument("--alsologtostderrthreshold", type=_severity, default="INFO", help="accepted, no effect")
    k.add_argument("--vmodule", default="", help="accepted, no effect")
    k.add_argument("--log_backtrace_at", default="", help="accepted, no effect")
    for name in (
        "--legacy_stderr_threshold_behavior",
        "--add_dir_header",
        "--skip_headers",
        "--one_output",
        "--skip_log_headers",
    ):
        _bool(k, name, "accepted, no effect", default=name == "--legacy_stderr_threshold_behavior")


def _bool(group: argparse._ActionsContainer, name: str, help_text: str, default: bool = False) -> None:
    # The value always comes as `--name=<bool>`: go_args() turns a bare `-name` into `--name=true`.
    group.add_argument(name, type=go_bool, default=default, metavar="BOOL", help=help_text)


def _kinds(p: argparse.ArgumentParser) -> tuple[dict[str, str], set[str]]:
    """Flag name (without dashes) -> its canonical `--option`, and the names that are booleans."""
    canonical: dict[str, str] = {}
    booleans: set[str] = set()
    for action in p._actions:
        for opt in action.option_strings:
            if opt.startswith("--"):
                canonical[opt[2:]] = opt
                if action.type is go_bool:
                    booleans.add(opt[2:])
    canonical["h"] = canonical["help"] = "--help"
    return canonical, booleans


def go_args(argv: list[str], p: argparse.ArgumentParser) -> list[str]:
    """Go's flag syntax to argparse's: one or two dashes, `=` or the next argument for values, a bare
    boolean means true. Unknown flags and stray arguments are left for argparse to reject."""
    canonical, booleans = _kinds(p)
    out: list[str] = []
    i = 0
    while i < len(argv):
        arg = argv[i]
        i += 1
        if arg == "--":
            out += argv[i - 1 :]
            break
        if not arg.startswith("-") or arg == "-":
            out.append(arg)
            continue
        name, eq, value = arg.lstrip("-").partition("=")
        if len(arg) - len(arg.lstrip("-")) > 2 or name not in canonical:
            out.append(arg)
            continue
        option = canonical[name]
        if option == "--help":
            out.append(option)
        elif eq:
            out.append(f"{option}={value}")
        elif name in booleans:
            out.append(f"{option}=true")
        elif i < len(argv):
            out.append(f"{option}={argv[i]}")  # as Go: the next argument is the value, even "-x"
            i += 1
        else:
            out.append(option)  # argparse reports the missing value
    return out


def parse(argv: list[str] | None = None) -> argparse.Namespace:
    p = parser()
    raw = go_args(list(sys.argv[1:] if argv is None else argv), p)
    try:
        args = p.parse_args(raw)
        _check(p, args)
    except FlagError as err:
        # One log line in the chosen format (JSON unless text was asked for), exit 2 as Go's flag package.
        record = logging.LogRecord(
            "mpijob-operator", logging.CRITICAL, __file__, 0, "invalid flags", None, None
        )
        record.error, record.help = str(err), "mpijob-operator -h"
        text = "--log-format=text" in raw
        sys.stderr.write((logs.TextFormatter() if text else logs.JSONFormatter()).format(record) + "\n")
        raise SystemExit(2) from None
    return args


def _check(p: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    checks: list[tuple[Callable[[argparse.Namespace], bool], str]] = [
        (lambda a: a.threadiness >= 1, "--threadiness must be at least 1"),
        (
            lambda a: a.kube_api_qps >= 0 and a.kube_api_burst >= 1,
            "--kube-api-qps must be >= 0 and --kube-api-burst >= 1",
        ),
        (
            lambda a: a.controller_queue_rate_limit >= 0 and a.controller_queue_burst >= 1,
            "--controller-queue-rate-limit must be >= 0 and --controller-queue-burst >= 1",
        ),
        (lambda a: 0 <= a.monitoring_port <= 65535, "--monitoring-port must be within 0-65535"),
        (
            lambda a: a.force_delete_lost_workers_after >= 0,
            "--force-delete-lost-workers-after must be >= 0 (0: never)",
        ),
        (
            lambda a: a.force_delete_lost_workers_after == 0 or a.watch_nodes,
            "--force-delete-lost-workers-after needs --watch-nodes=true (it reads when a node stopped"
            " being Ready)",
        ),
        (
            lambda a: (
                a.leader_elect_lease_duration
                > a.leader_elect_renew_deadline
                > 1.2 * a.leader_elect_retry_period
                > 0
            ),
            "need --leader-elect-lease-duration > --leader-elect-renew-deadline > "
            "1.2 * --leader-elect-retry-period > 0",
        ),
    ]
    for ok, message in checks:
        if not ok(args):
            p.error(message)
    if args.log_level is None:
        args.log_level = "debug" if args.v >= 4 else "info"
    args.log_file_path = ""
    if not args.logtostderr:
        args.log_file_path = args.log_file or (
            os.path.join(args.log_dir, "mpijob-operator.log") if args.log_dir else ""
        )
