"""The `mpijob` command, also installed as the kubectl plugin `kubectl-mpijob` (`kubectl mpijob ...`).

  render  print the children and status of an MPIJob manifest, offline (render's pure core)
  plan    print what the operator would do now for a live MPIJob, read-only (its own decide())

`mpijob-render FILE` is `mpijob render FILE`, and `mpijob-render --plan NAME` is `mpijob plan NAME`.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable

USAGE = """usage: {prog} {{render,plan}} ...

MPIJob tools for Kubeflow's kubeflow.org/v2beta1 MPIJobs.

commands:
  render FILE   print the child manifests of an MPIJob (--status: its status); offline, reads no cluster
  plan NAME     print what the operator would do now for a live MPIJob: creates, patches, deletes and the
                status change; reads only (exit 0: nothing to do, 1: writes due, 2: bad input)

Run '{prog} COMMAND --help' for a command's flags, '{prog} --version' for the version.
"""


def _render(argv: list[str], prog: str) -> int:
    from reconcile.mpijob.render_command import main as render_main

    return render_main(argv, prog=prog)


def _plan(argv: list[str], prog: str) -> int:
    from reconcile.mpijob.plan_command import main as plan_main

    return plan_main(argv, prog=prog)


COMMANDS: dict[str, Callable[[list[str], str], int]] = {"render": _render, "plan": _plan}


def _prog() -> str:
    name = os.path.basename(sys.argv[0] or "mpijob")
    return "kubectl mpijob" if name.startswith("kubectl-") else "mpijob"


def main(argv: list[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    prog = _prog()
    if args and args[0] == "--version":
        from reconcile.mpijob.render_command import version
        from render.names import API_VERSION

        sys.stdout.write(f"{prog} {version()} ({API_VERSION})\n")
        return 0
    if not args or args[0] in ("-h", "--help", "help"):
        sys.stdout.write(USAGE.format(prog=prog))
        return 0 if args else 2
    command = COMMANDS.get(args[0])
    if command is None:
        sys.stderr.write(USAGE.format(prog=prog))
        sys.stderr.write(f"{prog}: error: unknown command {args[0]!r} (choose from render, plan)\n")
        return 2
    return command(args[1:], f"{prog} {args[0]}")


def render_main(argv: list[str] | None = None) -> int:
    """`mpijob-render`: `mpijob render`, or with --plan `mpijob plan`."""
    args = list(sys.argv[1:] if argv is None else argv)
    if "--plan" in args:
        return _plan([a for a in args if a != "--plan"], "mpijob-render --plan")
    return _render(args, "mpijob-render")


if __name__ == "__main__":
    sys.exit(main())
