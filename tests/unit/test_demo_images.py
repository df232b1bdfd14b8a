"""What scripts/demo builds on a fresh machine: the real node's images its example runs (no other MPI
image, no operator image), the control plane and node binaries without Kueue, helm or upstream's source,
and pip without find-links locations that do not exist. No cluster, no build: the builders are replaced
by recorders."""

from __future__ import annotations

import importlib.util
import os
import shutil
import subprocess
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from localcluster import binaries
from localcluster.images import build
from localcluster.sandbox import seal
from localcluster.sandbox.node import host as realnode_host
from tests.unit.image_builders import record_builders

ROOT = Path(__file__).resolve().parents[2]


def load_demo() -> ModuleType:
    spec = importlib.util.spec_from_file_location("mpijob_demo_script", ROOT / "scripts" / "demo.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


OPENMPI = build.RECIPES["openmpi"].name


def test_the_demo_job_runs_one_image() -> None:
    demo = load_demo()
    example = demo.load_example()
    job = demo.on_real_node(example)
    assert demo.job_images(job) == (build.image_names()["openmpi-nonroot"],) == (OPENMPI,)
    # The kwok fallback submits the example as it is written.
    assert demo.job_images(example) != demo.job_images(job)


def test_job_images_include_init_containers() -> None:
    demo = load_demo()
    job = demo.on_real_node(demo.load_example())
    launcher = job["spec"]["mpiReplicaSpecs"]["Launcher"]["template"]["spec"]
    launcher["initContainers"] = [{"name": "wait", "image": "localhost/other:1"}]
    assert demo.job_images(job) == (OPENMPI, "localhost/other:1")


@pytest.fixture
def recorded(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> dict[str, list[Any]]:
    return record_builders(monkeypatch, tmp_path / "images")


def test_build_images_builds_only_the_named_images(recorded: dict[str, list[Any]]) -> None:
    archives = build.build_images([OPENMPI])
    assert set(archives) == {build.PAUSE_IMAGE, OPENMPI}
    assert recorded["image"] == ["openmpi"]
    assert recorded["pi"] == [{"openmpi"}]  # no MPICH in the builder chroot
    assert recorded["operator"] == []


def test_build_all_still_builds_every_image(recorded: dict[str, list[Any]]) -> None:
    archives = build.build_all()
    assert set(archives) == {build.PAUSE_IMAGE, *build.all_images()}
    assert sorted(recorded["image"]) == sorted(build.RECIPES)
    assert recorded["pi"] == [{"openmpi", "mpich"}]
    assert len(recorded["operator"]) == 1


def test_build_images_names_an_unknown_image(recorded: dict[str, list[Any]]) -> None:
    with pytest.raises(ValueError, match="localhost/nope:1"):
        build.build_images(["localhost/nope:1"])
    assert recorded["base"] == []


def test_pi_of_every_flavour_serves_one(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    every = tmp_path / f"pi-{build._pi_key(tuple(build.PI_FLAVOURS))}"
    every.mkdir()
    (every / ".complete").touch()

    def no_build(*args: object) -> None:
        raise AssertionError("built pi although a build of every flavour is cached")

    monkeypatch.setattr(build, "_chroot_build", no_build)
    assert build.build_pi(tmp_path, tmp_path / "rootfs", {"openmpi"}) == every
    assert build._pi_key(("openmpi",)) != build._pi_key(tuple(build.PI_FLAVOURS))


@pytest.fixture
def commands(monkeypatch: pytest.MonkeyPatch) -> tuple[ModuleType, list[list[str]]]:
    """The demo script with subprocess.run recording (and succeeding) and a host fit for a real node."""
    demo = load_demo()
    ran: list[list[str]] = []

    def run(argv: list[str], **kw: object) -> subprocess.CompletedProcess[str]:
        ran.append([Path(argv[0]).name, *argv[1:]])
        return subprocess.CompletedProcess(argv, 0)

    monkeypatch.setattr(demo.os, "geteuid", lambda: 0)
    monkeypatch.setattr(demo.subprocess, "run", run)
    monkeypatch.setattr(demo, "check_host", lambda: None)
    return demo, ran


def test_the_demo_prepares_its_image_only(
    commands: tuple[ModuleType, list[list[str]]], recorded: dict[str, list[Any]]
) -> None:
    demo, ran = commands
    job = demo.on_real_node(demo.load_example())
    assert demo.prepare(job, kwok=False) == ""
    # Go builds of the control plane and the node: no kwok, Kueue, helm or upstream's source (build.sh
    # without a part builds all of them).
    assert sorted(ran) == [["build.sh", "--control-plane"], ["build.sh", "--node"], ["node-packages.sh"]]
    assert recorded["image"] == ["openmpi"] and recorded["operator"] == []
    assert recorded["pi"] == [{"openmpi"}]


def test_an_application_example_runs_as_written_and_builds_its_image_only(
    commands: tuple[ModuleType, list[list[str]]], recorded: dict[str, list[Any]]
) -> None:
    demo, _ = commands
    path = ROOT / "examples" / "lammps-lj.yaml"
    example = demo.load_example(path)
    job = demo.on_real_node(example)
    assert demo.job_images(job) == (build.image_names()["lammps"],)
    for spec, written in zip(
        job["spec"]["mpiReplicaSpecs"].values(), example["spec"]["mpiReplicaSpecs"].values(), strict=True
    ):
        pod, pod_written = spec["template"]["spec"], written["template"]["spec"]
        assert pod["nodeSelector"] == {demo.NODE_LABEL: "true"}
        assert [c["resources"] for c in pod["containers"]] == [
            c["resources"] for c in pod_written["containers"]
        ]
    assert [(o["kind"], o["metadata"]) for o in demo.companions(path)] == [
        ("ConfigMap", {"name": "lammps-lj-input", "namespace": "default"})
    ]
    assert demo.prepare(job, kwok=False) == ""
    assert recorded["image"] == ["lammps"] and recorded["pi"] == []  # no pi program: LAMMPS needs none


def test_an_example_without_exactly_one_mpijob_is_refused(tmp_path: Path) -> None:
    demo = load_demo()
    two = tmp_path / "two.yaml"
    two.write_text(
        (ROOT / "examples" / "pi.yaml").read_text() + "---\n" + (ROOT / "examples" / "pi.yaml").read_text()
    )
    with pytest.raises(demo.DemoError, match="holds 2 MPIJobs"):
        demo.load_example(two)
    with pytest.raises(demo.DemoError, match="cannot read the example"):
        demo.load_example(tmp_path / "missing.yaml")
    (tmp_path / "list.yaml").write_text("- a\n- b\n")
    with pytest.raises(demo.DemoError, match="not a Kubernetes object"):
        demo.load_example(tmp_path / "list.yaml")


def test_the_kwok_demo_builds_the_control_plane_only(
    commands: tuple[ModuleType, list[list[str]]], recorded: dict[str, list[Any]]
) -> None:
    demo, ran = commands
    assert demo.prepare(demo.on_real_node(demo.load_example()), kwok=True) == "--kwok"
    assert ran == [["build.sh", "--control-plane"], ["build.sh", "--kwok"]]
    assert recorded["pause"] == []


def test_a_failed_node_build_falls_back_and_a_failed_control_plane_stops(
    commands: tuple[ModuleType, list[list[str]]],
    recorded: dict[str, list[Any]],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    demo, _ = commands
    job = demo.on_real_node(demo.load_example())
    monkeypatch.setattr(demo, "go_builds", lambda parts: "--node")
    assert "kubelet and CoreDNS" in demo.prepare(job, kwok=False)
    monkeypatch.setattr(demo, "go_builds", lambda parts: "--control-plane")
    with pytest.raises(demo.DemoError, match="control plane"):
        demo.prepare(job, kwok=False)


def test_falling_back_to_fake_nodes_builds_kwok_then(
    commands: tuple[ModuleType, list[list[str]]], monkeypatch: pytest.MonkeyPatch
) -> None:
    demo, ran = commands
    demo.fall_back_to_kwok("the node build failed")
    assert ran == [["build.sh", "--kwok"]]
    monkeypatch.setattr(demo, "go_builds", lambda parts: "--kwok")
    with pytest.raises(demo.DemoError, match="building kwok failed"):
        demo.fall_back_to_kwok("the node build failed")


def test_the_real_node_builds_the_images_it_is_given(monkeypatch: pytest.MonkeyPatch) -> None:
    asked: list[object] = []

    class Stop(Exception):
        pass

    def build_images(names: object = None) -> dict[str, Path]:
        asked.append(names)
        raise Stop

    monkeypatch.setattr(realnode_host, "check_host", lambda: None)
    monkeypatch.setattr(binaries, "find_node_bin_dir", lambda: Path("/nonexistent"))
    monkeypatch.setattr(build, "build_images", build_images)
    for given in ((OPENMPI,), None):
        with pytest.raises(Stop):
            seal.start(object(), 1, given)  # type: ignore[arg-type]
    assert asked == [(OPENMPI,), None]


# -- scripts/setup --demo, in a copy of the repository's layout with recording stubs ---------------------
# Each stub records "<dir>/<name> <args> | <PIP_FIND_LINKS>".
STUB = '#!/bin/sh\nd=$(dirname "$0")\necho "${d##*/}/${0##*/} $* | ${PIP_FIND_LINKS-unset}" >>"$CALLS"\n'


def setup_tree(tmp_path: Path) -> Path:
    tree = tmp_path / "repo"
    for rel in ("scripts/setup", "pyproject.toml"):
        (tree / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(ROOT / rel, tree / rel)
    for rel in (".venv/bin/python", "deploy/local/build.sh", "deploy/helm/build.sh", "tests/mpi/setup.sh"):
        (tree / rel).parent.mkdir(parents=True, exist_ok=True)
        (tree / rel).write_text(STUB)
        (tree / rel).chmod(0o755)
    return tree


def run_setup(tmp_path: Path, find_links: str | None, *args: str) -> list[str]:
    tree = setup_tree(tmp_path)
    env = {k: v for k, v in os.environ.items() if not k.startswith("PIP_")}
    env["CALLS"] = str(tmp_path / "calls")
    if find_links is not None:
        env["PIP_FIND_LINKS"] = find_links
    subprocess.run([str(tree / "scripts" / "setup"), *args], env=env, check=True, capture_output=True)
    return (tmp_path / "calls").read_text().splitlines()


def test_setup_for_the_demo_sets_up_python_only(tmp_path: Path) -> None:
    calls = run_setup(tmp_path, None, "--demo")
    assert calls and all(c.startswith("bin/python -m pip") for c in calls)


def test_setup_without_demo_builds_the_test_tiers(tmp_path: Path) -> None:
    calls = run_setup(tmp_path, None)
    assert [c for c in calls if not c.startswith("bin/python -m pip")] == [
        "local/build.sh  | unset",
        "helm/build.sh  | unset",
        "bin/python -m tests.upstream_source | unset",
    ]


def test_setup_passes_pip_only_find_links_that_exist(tmp_path: Path) -> None:
    wheels = tmp_path / "wheels"
    wheels.mkdir()
    given = (
        f"{tmp_path}/missing {wheels} https://wheels.example/simple file://{tmp_path}/gone file://{wheels}"
    )
    calls = run_setup(tmp_path, given, "--demo")
    pip = [c for c in calls if c.startswith("bin/python -m pip")]
    assert pip and all(
        c.endswith(f"| {wheels} https://wheels.example/simple file://{wheels}") for c in pip
    ), pip


def test_setup_drops_find_links_when_none_exists(tmp_path: Path) -> None:
    calls = run_setup(tmp_path, f"{tmp_path}/missing", "--demo")
    assert [c.split(" | ")[1] for c in calls] == ["unset"] * len(calls)


def test_host_pip_env_keeps_what_exists(tmp_path: Path) -> None:
    env = build.host_pip_env(
        {"PIP_FIND_LINKS": f"{tmp_path}/missing {tmp_path} https://x.example/w", "A": "1"}
    )
    assert env == {"PIP_FIND_LINKS": f"{tmp_path} https://x.example/w", "A": "1"}
    assert build.host_pip_env({"PIP_FIND_LINKS": "/nonexistent/wheels"}) == {}


def test_debootstraps_progress_goes_to_a_file_and_its_errors_into_the_failure(tmp_path: Path) -> None:
    out = tmp_path / "debootstrap.out"
    build._run_quiet(["sh", "-c", "echo 'I: Retrieving InRelease'"], out)
    assert out.read_text() == "I: Retrieving InRelease\n"
    script = "echo 'I: Retrieving'; echo 'W: no mirror'; echo 'E: cannot fetch' >&2; exit 3"
    with pytest.raises(RuntimeError, match=r"sh failed with exit 3: W: no mirror \| E: cannot fetch") as err:
        build._run_quiet(["sh", "-c", script], out)
    assert str(out) in str(err.value)


def test_an_empty_xdg_cache_home_means_the_default(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.delenv("MPIJOB_IMAGES_CACHE", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.setenv("XDG_CACHE_HOME", "")
    assert build.cache_root() == tmp_path / ".cache" / "mpijob-operator" / "images"
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert build.cache_root() == tmp_path / "xdg" / "mpijob-operator" / "images"
