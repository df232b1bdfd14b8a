"""python -m localcluster up|down|env|status|node|user|images — see deploy/local/README.md."""

from __future__ import annotations

import argparse
import os
import shlex
import signal
import sys
import tempfile
import time
from pathlib import Path

from localcluster.cluster import STATE_FILE, ClusterSpec, LocalCluster, terminate_on_signals
from localcluster.sandbox import NodeUnavailable, RealCluster, VerbFailed
from localcluster.sandbox.seal import attach, memory_bytes, verb_at


def cluster_class(tier: str) -> type[LocalCluster]:
    return RealCluster if tier == "real" else LocalCluster


def default_state_dir(tier: str) -> Path:
    return Path(tempfile.gettempdir()) / f"mpijob-localcluster-{os.getuid()}" / tier


def _state_dir(args: argparse.Namespace) -> Path:
    return Path(args.state_dir) if args.state_dir else default_state_dir(args.tier)


def _load(args: argparse.Namespace) -> LocalCluster:
    state_dir = _state_dir(args)
    if not (state_dir / STATE_FILE).exists():
        sys.exit(f"no running {args.tier} cluster in {state_dir}")
    return attach(state_dir)


def _print_env(cluster: LocalCluster) -> None:
    print(f"export KUBECONFIG={shlex.quote(str(cluster.kubeconfig))}")
    print(f"export PATH={shlex.quote(str(cluster.bin_dir))}:$PATH")


def cmd_up(args: argparse.Namespace) -> int:
    state_dir = _state_dir(args)
    if (state_dir / STATE_FILE).exists():
        old = cluster_class(args.tier).from_state(state_dir)
        if any(p.alive() for p in old.procs):
            sys.exit(f"a cluster is already running in {state_dir}; run `python -m localcluster down` first")
        old.stop()
    real = args.tier == "real"
    given = args.nodes if args.nodes is not None else (1 if real else 2)
    spec = ClusterSpec(
        tier=args.tier,
        nodes=0 if real else given,
        real_nodes=given,
        startup_timeout=args.timeout,
        audit=args.audit,
    )
    cluster = cluster_class(args.tier)(spec, work_dir=state_dir, detached=args.detach)
    began = time.monotonic()
    with terminate_on_signals():
        try:
            cluster.start()
        except NodeUnavailable as exc:
            sys.exit(f"no real node: {exc}")
        took = time.monotonic() - began
        print(
            f"# {args.tier} ready in {took:.1f}s, control plane RSS {cluster.rss_bytes() / 2**20:.0f} MiB",
            file=sys.stderr,
        )
        print(f"# state dir {state_dir}", file=sys.stderr)
        _print_env(cluster)
        sys.stdout.flush()
        if args.detach:
            return 0
        try:
            while all(p.alive() for p in cluster.procs):
                time.sleep(1)
            dead = [p.name for p in cluster.procs if not p.alive()]
            print(f"# exited unexpectedly: {', '.join(dead)}; stopping", file=sys.stderr)
            return 1
        except KeyboardInterrupt:
            return 0
        finally:
            signal.signal(signal.SIGINT, signal.SIG_IGN)  # a second Ctrl-C must not interrupt the cleanup
            cluster.stop()


def cmd_down(args: argparse.Namespace) -> int:
    cluster = _load(args)
    cluster.stop()
    print(f"# stopped {args.tier} cluster in {_state_dir(args)}", file=sys.stderr)
    return 0


def cmd_env(args: argparse.Namespace) -> int:
    _print_env(_load(args))
    return 0


def cmd_status(args: argparse.Namespace) -> int:
    cluster = _load(args)
    for proc in cluster.procs:
        state = "running" if proc.alive() else "DEAD"
        print(f"{proc.name:26} pid {proc.pid:>7}  {state:8} rss {proc.rss_bytes() / 2**20:7.1f} MiB")
    alive = all(p.alive() for p in cluster.procs)
    if cluster.spec.tier == "real" and alive:
        print(f"{'sandbox (all of it)':26} {'':20} mem {memory_bytes(cluster.work_dir) / 2**20:7.1f} MiB")
        for node in verb_at(cluster.work_dir, "status"):
            print(f"{node['name']:26} {node['state']:16} {node['ip']:>15}  pods {node['pods']}")
    else:
        print(f"{'total':26} {'':20} rss {cluster.rss_bytes() / 2**20:7.1f} MiB")
    return 0 if alive else 1


def cmd_node(args: argparse.Namespace) -> int:
    if args.tier != "real":
        sys.exit("node verbs are for real nodes: --tier real")
    cluster = _load(args)
    try:
        print(f"{args.name}: {verb_at(cluster.work_dir, args.verb, args.name)}")
    except (VerbFailed, OSError) as exc:
        sys.exit(f"node {args.verb} {args.name}: {exc}")
    return 0


def cmd_user(args: argparse.Namespace) -> int:
    cluster = _load(args)
    out = Path(args.out) if args.out else None
    print(cluster.write_user_kubeconfig(args.user, tuple(args.group), out))
    return 0


def cmd_images(args: argparse.Namespace) -> int:
    """Build the real node's images if needed (progress on stderr); one line per implementation."""
    from localcluster.images import build

    build.build_all()
    for impl, name in build.image_names().items():
        print(f"{impl} {name}")
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m localcluster", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)

    def add(name: str, help_text: str, tier: str = "l2") -> argparse.ArgumentParser:
        p = sub.add_parser(name, help=help_text)
        p.add_argument("--tier", choices=("l1", "l2", "real"), default=tier)
        p.add_argument("--state-dir", help="default: $TMPDIR/mpijob-localcluster-$UID/<tier>")
        return p

    up = add("up", "start a cluster (foreground until Ctrl-C, or --detach)")
    up.add_argument("--detach", action="store_true", help="leave it running; stop with `down`")
    up.add_argument("--nodes", type=int, help="l2: kwok fake nodes (default 2); real: real nodes (default 1)")
    up.add_argument("--timeout", type=float, default=120.0, help="seconds per component to become ready")
    up.add_argument(
        "--audit", action="store_true", help="kube-apiserver audit log of ServiceAccount and Lease writes"
    )
    up.set_defaults(func=cmd_up)
    add("down", "stop a cluster started with up").set_defaults(func=cmd_down)
    add("env", "print shell exports (KUBECONFIG, PATH) for a running cluster").set_defaults(func=cmd_env)
    add("status", "show the processes, their memory and the real nodes").set_defaults(func=cmd_status)
    node = add("node", "a real node's fault verbs: stop (the kubelet), kill (power loss), start", "real")
    node.add_argument("verb", choices=("stop", "kill", "start"))
    node.add_argument("name", help="e.g. real-node-2 (see status)")
    node.set_defaults(func=cmd_node)
    user = add("user", "issue a client certificate and write a kubeconfig for a user")
    user.add_argument("--user", required=True, help="e.g. system:serviceaccount:mpi-operator:mpi-operator")
    user.add_argument("--group", action="append", default=[], help="repeatable")
    user.add_argument("--out", help="kubeconfig path (default: in the state dir)")
    user.set_defaults(func=cmd_user)
    images = sub.add_parser("images", help="build the real node's MPI images (cached); print their names")
    images.set_defaults(func=cmd_images)

    args = parser.parse_args(argv)
    return int(args.func(args))


if __name__ == "__main__":
    sys.exit(main())
