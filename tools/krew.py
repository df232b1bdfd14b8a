"""`kubectl mpijob` as a krew plugin: one tar.gz per platform holding the executable `kubectl-mpijob`, and
deploy/krew/mpijob.yaml filled in with the release's version, URIs and sha256 sums.

    python -m tools.krew build --base-url URL --homepage URL [--out DIR] [--platform OS/ARCH ...]
                               [--zipapp FILE]

The executable is a PEX (PyPI's pex, `pip install -e '.[krew]'`): a zipapp of the project's wheel and its
PyPI dependencies for every CPython in PYTHONS. PEX rather than the standard library's zipapp because
the dependencies carry compiled modules (cryptography, cffi, orjson, PyYAML), which cannot be imported
from inside a zip: PEX unpacks them once under ~/.cache/pex, picks the wheels that match the interpreter
it runs on, and builds for other platforms from their wheels. --zipapp packages a given zipapp instead
(no PEX, no network) for every platform. The archives are reproducible: fixed times, owners and order.
"""

from __future__ import annotations

import argparse
import gzip
import hashlib
import io
import re
import subprocess
import sys
import tarfile
import tempfile
import tomllib
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import yaml

REPO = Path(__file__).resolve().parents[1]
TEMPLATE = REPO / "deploy" / "krew" / "mpijob.yaml"
BIN = "kubectl-mpijob"
# krew's os/arch -> the platform the PEX is built for; on Linux, manylinux2014 wheels (glibc 2.17 or later)
PLATFORMS = {
    "linux/amd64": "linux_x86_64",
    "linux/arm64": "linux_aarch64",
    "darwin/amd64": "macosx_11_0_x86_64",
    "darwin/arm64": "macosx_11_0_arm64",
}
# The pip PEX resolves with, pinned (one that PEX lists and PyPI has): PEX's own vendored pip is too old
# to resolve the newer wheel tags of orjson & co.
PEX_PIP = "26.2.1"
PYTHONS = ("3.11", "3.12", "3.13")  # the CPythons a PEX carries wheels for; the project needs >= 3.11
EPOCH = 315532800  # 1980-01-01, zip's first representable time (PEX's own entries carry it too)

# krew's rules for a plugin manifest (what `kubectl krew install --manifest` checks)
API_VERSION = "krew.googlecontainertools.github.com/v1alpha2"
SAFE_NAME = re.compile(r"^[\w-]+$")
SHA256 = re.compile(r"^[a-f0-9]{64}$")
SEMVER = re.compile(r"^v(0|[1-9]\d*)\.(0|[1-9]\d*)\.(0|[1-9]\d*)(-[0-9A-Za-z.-]+)?(\+[0-9A-Za-z.-]+)?$")
SELECTOR_KEYS = {"os", "arch"}


def project_version() -> str:
    with (REPO / "pyproject.toml").open("rb") as f:
        return str(tomllib.load(f)["project"]["version"])


def archive_name(version: str, platform: str) -> str:
    os_name, arch = platform.split("/")
    return f"{BIN}_v{version}_{os_name}_{arch}.tar.gz"


def problems(manifest: dict[str, Any], name: str) -> list[str]:
    """What krew would refuse in a plugin manifest stored as <name>.yaml (empty: nothing)."""
    out = []
    if manifest.get("apiVersion") != API_VERSION:
        out.append(f"apiVersion is {manifest.get('apiVersion')!r}, not {API_VERSION}")
    if manifest.get("kind") != "Plugin":
        out.append(f"kind is {manifest.get('kind')!r}, not Plugin")
    if not SAFE_NAME.match(name):
        out.append(f"the file name {name!r} is no plugin name")
    if manifest.get("metadata", {}).get("name") != name:
        out.append(f"metadata.name is {manifest.get('metadata', {}).get('name')!r}, the file says {name!r}")
    spec = manifest.get("spec", {})
    short = spec.get("shortDescription", "")
    if not short or "\n" in short or "\r" in short:
        out.append("spec.shortDescription must be one non-empty line")
    if not SEMVER.match(str(spec.get("version", ""))):
        out.append(f"spec.version {spec.get('version')!r} is not a semantic version with a leading v")
    if not str(spec.get("homepage", "")).startswith("https://"):
        out.append(f"spec.homepage {spec.get('homepage')!r} is not an https URL")
    platforms = spec.get("platforms") or []
    if not platforms:
        out.append("spec.platforms is empty")
    for i, p in enumerate(platforms):
        where = f"spec.platforms[{i}]"
        labels = (p.get("selector") or {}).get("matchLabels") or {}
        exprs = (p.get("selector") or {}).get("matchExpressions") or []
        if not labels and not exprs:
            out.append(f"{where}: no selector")
        if keys := set(labels) - SELECTOR_KEYS:
            out.append(f"{where}: selector keys {sorted(keys)} (krew knows os and arch)")
        if not str(p.get("uri", "")).startswith("https://"):
            out.append(f"{where}: uri {p.get('uri')!r} is not an https URL")
        if not SHA256.match(str(p.get("sha256", ""))):
            out.append(f"{where}: sha256 {p.get('sha256')!r} is not 64 lower-case hex digits")
        if not p.get("bin"):
            out.append(f"{where}: no bin")
        if "files" in p and (not p["files"] or any(not f.get("from") or not f.get("to") for f in p["files"])):
            out.append(f"{where}: files must be absent, or each with from and to")
    return out


def fill(template: str, *, version: str, homepage: str, base_url: str, sha256: dict[str, str]) -> str:
    """The template's text with the release's values; sha256 maps "os/arch" to the archive's sum."""
    doc = yaml.safe_load(template)
    spec = doc["spec"]
    spec["version"] = spec["version"].format(version=version)
    spec["homepage"] = spec["homepage"].format(homepage=homepage)
    for p in spec["platforms"]:
        labels = p["selector"]["matchLabels"]
        p["uri"] = p["uri"].format(base_url=base_url.rstrip("/"), version=version)
        p["sha256"] = sha256[f"{labels['os']}/{labels['arch']}"]
    return yaml.dump(doc, Dumper=_Dumper, sort_keys=False, width=110)


class _Dumper(yaml.SafeDumper):
    """Multi-line strings (the description) as literal blocks, as in the template."""


def _str(dumper: yaml.SafeDumper, value: str) -> yaml.Node:
    style = "|" if "\n" in value else None
    return dumper.represent_scalar("tag:yaml.org,2002:str", value, style=style)


_Dumper.add_representer(str, _str)


def template_platforms(template: str) -> list[str]:
    doc = yaml.safe_load(template)
    return [
        f"{p['selector']['matchLabels']['os']}/{p['selector']['matchLabels']['arch']}"
        for p in doc["spec"]["platforms"]
    ]


def package(executable: Path, out: Path) -> str:
    """A reproducible tar.gz holding the executable as BIN (mode 0755); returns its sha256."""
    data = executable.read_bytes()
    info = tarfile.TarInfo(BIN)
    info.size, info.mode, info.mtime = len(data), 0o755, EPOCH
    buf = io.BytesIO()
    with gzip.GzipFile(fileobj=buf, mode="wb", mtime=EPOCH) as gz, tarfile.open(fileobj=gz, mode="w") as tar:
        tar.addfile(info, io.BytesIO(data))
    out.write_bytes(buf.getvalue())
    return hashlib.sha256(buf.getvalue()).hexdigest()


def build_pex(wheel: Path, platform_tag: str, out: Path) -> None:
    """A PEX of the project's wheel and its dependencies for one platform and every Python in PYTHONS,
    whose entry point is the kubectl-mpijob console script."""
    # --no-build: wheels only; a dependency built here would run on this machine's platform alone.
    argv = [sys.executable, "-m", "pex", str(wheel), "-c", BIN, "-o", str(out), "--sh-boot", "--no-build"]
    argv += ["--manylinux", "manylinux2014", "--pip-version", PEX_PIP]
    for py in PYTHONS:
        # A full version (X.Y.0, the oldest of the series): dependencies' markers test python_full_version.
        argv += ["--platform", f"{platform_tag}-cp-{py}.0-cp{py.replace('.', '')}"]
    subprocess.run(argv, check=True)


def build(
    out_dir: Path, *, base_url: str, homepage: str, platforms: Iterable[str] | None, zipapp: Path | None
) -> Path:
    """Archives for the platforms (None: the template's) and the filled manifest; returns its path."""
    template = TEMPLATE.read_text()
    wanted = list(platforms or template_platforms(template))
    if unknown := set(wanted) - set(PLATFORMS):
        raise SystemExit(
            f"krew: unknown platform {', '.join(sorted(unknown))} (known: {', '.join(PLATFORMS)})"
        )
    version = project_version()
    out_dir.mkdir(parents=True, exist_ok=True)
    sums: dict[str, str] = {}
    with tempfile.TemporaryDirectory() as tmp:
        wheel = None
        if zipapp is None:
            subprocess.run(
                [sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "-w", tmp, str(REPO)],
                check=True,
                stdout=subprocess.DEVNULL,
            )
            (wheel,) = Path(tmp).glob("*.whl")
        for platform in wanted:
            executable = zipapp
            if wheel is not None:
                executable = Path(tmp) / platform.replace("/", "_") / BIN
                build_pex(wheel, PLATFORMS[platform], executable)
            assert executable is not None
            sums[platform] = package(executable, out_dir / archive_name(version, platform))
            print(f"krew: {out_dir / archive_name(version, platform)} sha256 {sums[platform]}")
    # A platform built elsewhere (another run, another machine) keeps its archive's sum.
    for platform in template_platforms(template):
        archive = out_dir / archive_name(version, platform)
        if platform not in sums and archive.exists():
            sums[platform] = hashlib.sha256(archive.read_bytes()).hexdigest()
    missing = [p for p in template_platforms(template) if p not in sums]
    if missing:
        raise SystemExit(f"krew: no archive for {', '.join(missing)} in {out_dir}; build them too")
    text = fill(template, version=version, homepage=homepage, base_url=base_url, sha256=sums)
    if errors := problems(yaml.safe_load(text), TEMPLATE.stem):
        raise SystemExit("krew: the manifest would be refused: " + "; ".join(errors))
    manifest = out_dir / TEMPLATE.name
    manifest.write_text(text)
    print(f"krew: {manifest}")
    return manifest


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tools.krew", description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    b = sub.add_parser("build", help="build the archives and the filled manifest")
    b.add_argument("--base-url", required=True, help="https URL the release's archives are served under")
    b.add_argument("--homepage", required=True, help="the plugin's https homepage")
    b.add_argument("--out", default="dist/krew", help="output directory (default: dist/krew)")
    b.add_argument("--platform", action="append", choices=sorted(PLATFORMS), help="default: all")
    b.add_argument("--zipapp", type=Path, help="package this zipapp instead of building PEXes")
    args = parser.parse_args(argv)
    build(
        Path(args.out),
        base_url=args.base_url,
        homepage=args.homepage,
        platforms=args.platform,
        zipapp=args.zipapp,
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
