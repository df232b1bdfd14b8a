"""The operator wheel holds what the operator runs (render, reconcile) and nothing else, built the ways the
image builds build it: from the repository root (localcluster/images/build.py) and from the files
deploy/Dockerfile copies into its context."""

from __future__ import annotations

import configparser
import importlib
import re
import shutil
import subprocess
import sys
import tomllib
import zipfile
from pathlib import Path

import pytest

from localcluster.images import build as images

REPO = Path(__file__).resolve().parents[2]
PACKAGES = {"render", "reconcile"}


def build_wheel(source: Path, out: Path) -> Path:
    # The backend itself (installed by the test extra), so no isolated build env is fetched: offline.
    out.mkdir(parents=True, exist_ok=True)
    proc = subprocess.run(
        [
            sys.executable,
            "-c",
            "import sys; from hatchling.build import build_wheel; build_wheel(sys.argv[1])",
            out,
        ],
        cwd=source,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr
    (wheel,) = out.glob("*.whl")
    return wheel


@pytest.fixture(scope="module")
def repo_wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_wheel(REPO, tmp_path_factory.mktemp("wheel"))


def _names(wheel: Path) -> list[str]:
    with zipfile.ZipFile(wheel) as zf:
        return zf.namelist()


def test_the_wheel_holds_render_and_reconcile_only(repo_wheel: Path) -> None:
    names = _names(repo_wheel)
    tops = {n.split("/", 1)[0] for n in names}
    (dist_info,) = {t for t in tops if t.endswith(".dist-info")}
    assert tops - {dist_info} == PACKAGES
    assert not [n for n in names if "__pycache__" in n or n.endswith(".pyc")]


def test_the_wheel_has_every_module_of_its_packages(repo_wheel: Path) -> None:
    tracked = subprocess.run(
        ["git", "ls-files", *sorted(PACKAGES)], cwd=REPO, capture_output=True, text=True, check=True
    ).stdout.split()
    assert len(tracked) > 50
    assert set(tracked) <= set(_names(repo_wheel))


def test_the_console_scripts_point_into_the_wheel(repo_wheel: Path) -> None:
    names = set(_names(repo_wheel))
    (entry_points,) = [n for n in names if n.endswith(".dist-info/entry_points.txt")]
    with zipfile.ZipFile(repo_wheel) as zf:
        parser = configparser.ConfigParser()
        parser.read_string(zf.read(entry_points).decode())
    scripts = dict(parser["console_scripts"])
    with (REPO / "pyproject.toml").open("rb") as f:
        assert scripts == tomllib.load(f)["project"]["scripts"]
    assert "mpijob-operator" in scripts
    for target in scripts.values():
        module, _, attr = target.partition(":")
        assert f"{module.replace('.', '/')}.py" in names, target
        assert callable(getattr(importlib.import_module(module), attr)), target


def test_the_image_builds_hash_what_the_wheel_is_built_from() -> None:
    assert images.OPERATOR_SOURCES[0] == "pyproject.toml"
    assert set(images.OPERATOR_SOURCES[1:]) == PACKAGES


def test_the_dockerfile_context_builds_the_same_wheel(repo_wheel: Path, tmp_path: Path) -> None:
    """deploy/Dockerfile copies a few paths and runs `pip install .`: those paths alone build this wheel."""
    dockerfile = (REPO / "deploy" / "Dockerfile").read_text()
    copies = re.findall(r"^COPY\s+(.+?)\s+(\S+)$", dockerfile, flags=re.MULTILINE)
    assert copies, "no COPY line in deploy/Dockerfile"
    ctx = tmp_path / "ctx"
    ctx.mkdir()
    for sources, dest in copies:
        for src in sources.split():
            target = ctx / (dest if dest not in ("./", ".") else src)
            if (REPO / src).is_dir():
                shutil.copytree(REPO / src, target)  # bytecode too, as a checkout's context has it
            else:
                shutil.copy(REPO / src, target)
    assert {p.name for p in ctx.iterdir()} == {"pyproject.toml", "README.md", *PACKAGES}
    docker_wheel = build_wheel(ctx, tmp_path / "out")
    assert sorted(_names(docker_wheel)) == sorted(_names(repo_wheel))
