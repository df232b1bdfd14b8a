"""python -m localcluster.images operator [--output FILE] [--cache DIR]: the operator's image without
Docker or a registry, as one archive file that is both an OCI image layout and a docker-archive, to load
into a node's containerd or copy to a registry (docs/install.md, "Build the operator image").

The image is the one the real-node tier runs (build.build_operator: Debian's Python 3.11 with the
project's wheel in a venv, uid 65532, entry point mpijob-operator), named as deploy/ names it, so an
imported archive is the Deployment's image as it stands. Needs root, debootstrap, unshare and gcc (the
pods' pause image is built beside it), an x86_64 machine (the image says linux/amd64), a Debian mirror and
PyPI. Builds are cached (build.cache_root()): a second run only copies the archive.
"""

from __future__ import annotations

import argparse
import os
import platform
import shutil
import sys
from pathlib import Path

from localcluster.images import build

TAG = build.OPERATOR_IMAGE.rsplit(":", 1)[1]
DEFAULT_OUTPUT = Path(f"mpijob-operator-{TAG}.tar")
# debootstrap makes the base, unshare the build's mount namespace, gcc the pause image.
TOOLS = ("debootstrap", "unshare", "gcc")


def missing_requirements() -> list[str]:
    """What this machine lacks for the build (empty: nothing), checked before anything is built."""
    missing = []
    if os.geteuid() != 0:
        missing.append("root (debootstrap, mounts and chroot)")
    missing += [f"{tool} on the PATH" for tool in TOOLS if shutil.which(tool) is None]
    if platform.machine() != "x86_64":
        missing.append(f"an x86_64 machine (this one is {platform.machine()}; the image says linux/amd64)")
    return missing


def build_operator_archive(output: Path, cache: Path | None = None) -> str:
    """Build the operator's image (or find it in the cache), copy its archive to output; return the
    manifest digest."""
    archive = build.build_images([build.OPERATOR_IMAGE], cache)[build.OPERATOR_IMAGE]
    output.parent.mkdir(parents=True, exist_ok=True)
    partial = output.with_name(output.name + ".partial")
    shutil.copyfile(archive, partial)
    partial.replace(output)  # never a half-copied archive at the name
    return build.archive_digest(archive)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m localcluster.images", description=__doc__.split("\n\n")[0]
    )
    sub = parser.add_subparsers(dest="image", required=True)
    op = sub.add_parser("operator", help=f"build {build.OPERATOR_IMAGE} as an archive file")
    op.add_argument("-o", "--output", type=Path, default=DEFAULT_OUTPUT, help=f"default: {DEFAULT_OUTPUT}")
    op.add_argument(
        "--cache",
        type=Path,
        help="build cache (default: $MPIJOB_IMAGES_CACHE, else the user's cache dir)",
    )
    args = parser.parse_args(argv)
    if missing := missing_requirements():
        parser.exit(1, f"{parser.prog}: the build needs {'; '.join(missing)}\n")
    digest = build_operator_archive(args.output, args.cache)
    build.log(f"{args.output}: {build.OPERATOR_IMAGE} {digest}")
    print(args.output)
    return 0


if __name__ == "__main__":
    sys.exit(main())
