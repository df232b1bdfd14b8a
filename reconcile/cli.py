"""The `mpijob-render` command: render's pure CLI, and with `--plan` the read-only plan of a live MPIJob
(which needs the API client and the differ, so it lives here and not in `render/`)."""

from __future__ import annotations

import sys


def main(argv: list[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if "--plan" in args:
        from reconcile.mpijob.plan_command import main as plan_main

        return plan_main([a for a in args if a != "--plan"])
    from render.cli import main as render_main

    return render_main(args)


if __name__ == "__main__":
    sys.exit(main())
