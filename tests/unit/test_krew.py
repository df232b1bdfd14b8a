"""The krew plugin: deploy/krew/mpijob.yaml is a template that tools/krew.py fills with each archive's URI
and sha256; what it writes passes krew's rules and points at archives it built, whose bin runs. The
archives here hold a standard-library zipapp of the CLI (tools/krew.py --zipapp): the release's PEX
needs PyPI and minutes, and the layout, sums and manifest come from the same code either way."""

from __future__ import annotations

import copy
import hashlib
import shutil
import subprocess
import sys
import tarfile
import zipapp
from pathlib import Path
from typing import Any

import pytest
import yaml

from tools import krew

ROOT = Path(__file__).resolve().parents[2]
BASE_URL = "https://downloads.example.org/mpijob-operator/v0.1.0"
HOMEPAGE = "https://mpijob-operator.example.org"


@pytest.fixture(scope="module")
def cli_zipapp(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The CLI's packages as a zipapp (its dependencies come from the test's interpreter)."""
    tmp = tmp_path_factory.mktemp("zipapp")
    src = tmp / "src"
    for package in ("render", "reconcile"):
        shutil.copytree(ROOT / package, src / package, ignore=shutil.ignore_patterns("__pycache__"))
    target = tmp / "kubectl-mpijob.pyz"
    zipapp.create_archive(src, target, interpreter="/usr/bin/env python3", main="reconcile.cli:main")
    return target


@pytest.fixture(scope="module")
def built(cli_zipapp: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("krew")
    return krew.build(out, base_url=BASE_URL, homepage=HOMEPAGE, platforms=None, zipapp=cli_zipapp)


def load(path: Path) -> dict[str, Any]:
    return yaml.safe_load(path.read_text())


def test_the_template_names_the_plugin_and_its_platforms() -> None:
    manifest = load(krew.TEMPLATE)
    assert krew.TEMPLATE.stem == manifest["metadata"]["name"] == "mpijob"
    assert manifest["apiVersion"] == krew.API_VERSION and manifest["kind"] == "Plugin"
    assert sorted(krew.template_platforms(krew.TEMPLATE.read_text())) == sorted(krew.PLATFORMS)
    for p in manifest["spec"]["platforms"]:
        assert set(p["selector"]["matchLabels"]) == {"os", "arch"}
        assert p["bin"] == krew.BIN
    # Unfilled, krew would refuse it: the sums and URLs exist only for a release.
    assert any("sha256" in problem for problem in krew.problems(manifest, "mpijob"))


def test_the_filled_manifest_passes_krews_rules(built: Path) -> None:
    manifest = load(built)
    assert built.name == "mpijob.yaml"
    assert krew.problems(manifest, built.stem) == []
    assert manifest["spec"]["version"] == f"v{krew.project_version()}"
    assert manifest["spec"]["homepage"] == HOMEPAGE


def test_every_platform_points_at_its_archive_with_its_sum(built: Path) -> None:
    platforms = load(built)["spec"]["platforms"]
    assert len(platforms) == len(krew.PLATFORMS)
    for p in platforms:
        labels = p["selector"]["matchLabels"]
        name = krew.archive_name(krew.project_version(), f"{labels['os']}/{labels['arch']}")
        assert p["uri"] == f"{BASE_URL}/{name}"
        archive = built.parent / name
        assert p["sha256"] == hashlib.sha256(archive.read_bytes()).hexdigest()
        with tarfile.open(archive) as tar:
            member = tar.getmember(p["bin"])  # krew runs bin from the unpacked archive's root
            assert member.isfile() and member.mode == 0o755 and member.mtime == krew.EPOCH
            assert member.uid == member.gid == 0


def test_the_archives_bin_runs_as_the_kubectl_plugin(built: Path, tmp_path: Path) -> None:
    (archive,) = built.parent.glob("*_linux_amd64.tar.gz")
    with tarfile.open(archive) as tar:
        tar.extractall(tmp_path, filter="data")
    proc = subprocess.run(
        [sys.executable, str(tmp_path / krew.BIN), "--help"], capture_output=True, text=True, check=True
    )
    assert proc.stdout.startswith("usage: kubectl mpijob {render,plan}")


def test_archives_are_reproducible(cli_zipapp: Path, tmp_path: Path) -> None:
    a = krew.package(cli_zipapp, tmp_path / "a.tar.gz")
    b = krew.package(cli_zipapp, tmp_path / "b.tar.gz")
    assert a == b == hashlib.sha256((tmp_path / "a.tar.gz").read_bytes()).hexdigest()


def test_one_platform_rebuilt_keeps_the_others_sums(built: Path, cli_zipapp: Path, tmp_path: Path) -> None:
    out = tmp_path / "krew"
    shutil.copytree(built.parent, out)
    other = tmp_path / "other.pyz"
    other.write_bytes(cli_zipapp.read_bytes() + b"\n")  # a different executable for one platform
    manifest = load(
        krew.build(out, base_url=BASE_URL, homepage=HOMEPAGE, platforms=["linux/arm64"], zipapp=other)
    )
    sums = {p["uri"].rsplit("/", 1)[1]: p["sha256"] for p in manifest["spec"]["platforms"]}
    before = {p["uri"].rsplit("/", 1)[1]: p["sha256"] for p in load(built)["spec"]["platforms"]}
    changed = {name for name in sums if sums[name] != before[name]}
    assert changed == {krew.archive_name(krew.project_version(), "linux/arm64")}


@pytest.mark.parametrize(
    ("change", "complaint"),
    [
        (lambda m: m["metadata"].update(name="mpi-job"), "metadata.name"),
        (lambda m: m.update(apiVersion="krew.googlecontainertools.github.com/v1alpha1"), "apiVersion"),
        (lambda m: m["spec"].update(version="0.1.0"), "spec.version"),
        (lambda m: m["spec"].update(shortDescription="two\nlines"), "shortDescription"),
        (lambda m: m["spec"]["platforms"][0].pop("selector"), "no selector"),
        (
            lambda m: m["spec"]["platforms"][1]["selector"]["matchLabels"].update(distro="debian"),
            "selector keys",
        ),
        (lambda m: m["spec"]["platforms"][2].update(uri="http://plain.example.org/a.tar.gz"), "https"),
        (lambda m: m["spec"]["platforms"][3].update(sha256="ABC123"), "sha256"),
        (lambda m: m["spec"]["platforms"][0].pop("bin"), "no bin"),
        (lambda m: m["spec"]["platforms"][0].update(files=[]), "files"),
        (lambda m: m["spec"].update(platforms=[]), "platforms is empty"),
    ],
)
def test_krews_rules_catch(built: Path, change: Any, complaint: str) -> None:
    manifest = copy.deepcopy(load(built))
    change(manifest)
    assert any(complaint in problem for problem in krew.problems(manifest, "mpijob")), krew.problems(
        manifest, "mpijob"
    )


def test_build_refuses_a_plain_http_base_url(cli_zipapp: Path, tmp_path: Path) -> None:
    with pytest.raises(SystemExit, match="https"):
        krew.build(
            tmp_path, base_url="http://x.example.org", homepage=HOMEPAGE, platforms=None, zipapp=cli_zipapp
        )
    assert not (tmp_path / "mpijob.yaml").exists()
