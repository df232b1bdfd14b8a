"""A new user's install path: the operator run without an image, its image built (with Docker or with
`python -m localcluster.images operator`), the install pointed at that image (kustomize's `images:`, the
chart's image values) and the release workflow that publishes it.

No image is built here: the builders of localcluster.images.build are replaced by recorders, and the
ones that would run debootstrap, mounts or chroot by traps."""

from __future__ import annotations

import re
import shlex
import tomllib
from pathlib import Path
from typing import Any

import pytest
import yaml

from localcluster.images import __main__ as image_cli
from localcluster.images import build
from reconcile import flags
from tests.unit.image_builders import OPERATOR_DIGEST, record_builders
from tools import krew
from tools.manifests import DEPLOY, REPO, load_yaml_documents
from tools.manifests import build as kustomize_build

README = REPO / "README.md"
INSTALL = REPO / "docs" / "install.md"
DOCKERFILE = DEPLOY / "Dockerfile"
CHART = DEPLOY / "helm" / "mpi-operator"
WORKFLOW = REPO / ".github" / "workflows" / "release.yml"
PLACEHOLDER_IMAGE = "REGISTRY/mpijob-operator"


def project_version() -> str:
    with (REPO / "pyproject.toml").open("rb") as f:
        return str(tomllib.load(f)["project"]["version"])


def deployment_image(objects: list[dict[str, Any]]) -> str:
    (dep,) = [o for o in objects if o["kind"] == "Deployment"]
    (container,) = dep["spec"]["template"]["spec"]["containers"]
    return str(container["image"])


def normalised(image: str) -> str:
    """An image reference as containerd names it (a bare name is on docker.io/library)."""
    name = image.rsplit(":", 1)[0]
    first = name.split("/")[0]
    if "/" not in name:
        return f"docker.io/library/{image}"
    if "." not in first and ":" not in first and first != "localhost":
        return f"docker.io/{image}"
    return image


def fenced_blocks(path: Path, lang: str) -> list[str]:
    return re.findall(rf"^```{lang}\n(.*?)^```", path.read_text(), re.S | re.M)


def command_lines(path: Path) -> list[str]:
    """The lines of the page's bash blocks, continuation lines joined, comments dropped."""
    out = []
    for block in fenced_blocks(path, "bash"):
        for line in block.replace("\\\n", " ").splitlines():
            line = line.split(" #", 1)[0].strip()
            if line and not line.startswith("#"):
                out.append(line)
    return out


def with_image(root: Path | str, image: dict[str, str], tmp_path: Path) -> list[dict[str, Any]]:
    """What `kubectl kustomize` prints for an overlay of root with one `images:` entry."""
    overlay = tmp_path / "overlay"
    overlay.mkdir(exist_ok=True)
    kust = {"apiVersion": "kustomize.config.k8s.io/v1beta1", "kind": "Kustomization"}
    kust |= {"resources": [str(root)], "images": [image]}
    (overlay / "kustomization.yaml").write_text(yaml.safe_dump(kust))
    return kustomize_build(overlay)


# ------------------------------------------------------------------------------- the image's name
def test_one_image_name_everywhere():
    """deploy/, the chart's defaults, the daemonless build and the version name the same image, so an
    archive imported into the nodes is what the Deployment runs, and a release's tag is the image's."""
    image = deployment_image(kustomize_build(DEPLOY))
    values = yaml.safe_load((CHART / "values.yaml").read_text())
    chart = yaml.safe_load((CHART / "Chart.yaml").read_text())
    assert image == f"mpijob-operator:{project_version()}"
    assert f"{values['image']['repository']}:{values['image']['tag']}" == image
    assert chart["appVersion"] == project_version()
    assert normalised(build.OPERATOR_IMAGE) == normalised(image)
    assert image_cli.DEFAULT_OUTPUT.name == f"mpijob-operator-{project_version()}.tar"


def _kustomizations() -> dict[Path, dict[str, Any]]:
    out = {}
    for path in sorted(DEPLOY.rglob("kustomization.yaml")):
        if path.relative_to(DEPLOY).parts[0] not in ("local", "helm"):
            (out[path.parent],) = load_yaml_documents(path)
    return out


def _reaches(root: Path, target: Path, kusts: dict[Path, dict[str, Any]]) -> bool:
    if root == target:
        return True
    return any(
        (root / r).resolve() in kusts and _reaches((root / r).resolve(), target, kusts)
        for r in kusts[root].get("resources", [])
    )


def test_every_kustomization_with_the_deployment_can_set_its_image():
    """docs/install.md: each kustomization that installs the Deployment has an `images:` entry named as
    the Deployment's image, which `kustomize edit set image mpijob-operator=...` replaces."""
    kusts = _kustomizations()
    name = deployment_image(kustomize_build(DEPLOY / "operator")).split(":")[0]
    with_deployment = {
        p for p in kusts if p != DEPLOY / "operator" and _reaches(p, DEPLOY / "operator", kusts)
    }
    assert {DEPLOY, DEPLOY / "overlays" / "kubeflow", DEPLOY / "namespaced"} <= with_deployment
    for path in with_deployment:
        names = [i["name"] for i in kusts[path].get("images", [])]
        assert names == [name], f"{path.relative_to(REPO)}: images {names}, the Deployment runs {name}"
    assert DEPLOY / "base-no-operator" not in with_deployment


# ---------------------------------------------------------------------------- pointing at an image
def _documented_set_image() -> list[tuple[str, str, str]]:
    found = []
    for page in (README, INSTALL):
        for line in command_lines(page):
            if m := re.search(r"kustomize edit set image (\S+)=(\S+):(\S+?)\)?$", line):
                found.append((m[1], m[2], m[3]))
    return found


def test_the_documented_set_image_replaces_the_deployments_image(tmp_path: Path):
    documented = _documented_set_image()
    assert len(documented) >= 2, documented  # the README's and the install page's
    for name, new_name, new_tag in documented:
        objects = with_image(DEPLOY, {"name": name, "newName": new_name, "newTag": new_tag}, tmp_path)
        assert deployment_image(objects) == f"{PLACEHOLDER_IMAGE}:{new_tag}"


def test_a_wrong_image_name_would_be_caught(tmp_path: Path):
    """The check above fails for a name the Deployment does not use: kustomize leaves the image as is."""
    objects = with_image(DEPLOY, {"name": "mpi-operator", "newName": PLACEHOLDER_IMAGE}, tmp_path)
    assert deployment_image(objects) == deployment_image(kustomize_build(DEPLOY))


def test_the_documented_overlay_points_deploy_at_the_image(tmp_path: Path):
    (overlay,) = [yaml.safe_load(b) for b in fenced_blocks(INSTALL, "yaml") if "images:" in b]
    assert overlay["resources"][0].endswith("/deploy")
    (image,) = overlay["images"]
    objects = with_image(DEPLOY, image, tmp_path)
    assert deployment_image(objects) == f"{PLACEHOLDER_IMAGE}:{project_version()}"


def _dotted(values: dict[str, Any], key: str) -> object:
    node: Any = values
    for step in key.split("."):
        assert isinstance(node, dict) and step in node, f"values.yaml has no {key}"
        node = node[step]
    return node


def test_the_documented_helm_values_set_the_image():
    values = yaml.safe_load((CHART / "values.yaml").read_text())
    template = (CHART / "templates" / "deployment.yaml").read_text()
    assert 'image: "{{ .Values.image.repository }}:{{ .Values.image.tag }}"' in template
    for page in (README, INSTALL):
        sets = dict(
            s.split("=", 1)
            for line in command_lines(page)
            if line.startswith("helm install")
            for s in re.findall(r"--set(?:-string)? (\S+)", line)
        )
        assert sets == {"image.repository": PLACEHOLDER_IMAGE, "image.tag": project_version()}, page.name
        for key in sets:
            assert isinstance(_dotted(values, key), str)


# ---------------------------------------------------------------------------------- the README
def test_the_readme_starts_with_try_it_then_installs_without_an_image():
    text = README.read_text()
    sections = re.findall(r"^## (.+)$", text, re.M)
    assert sections[:2] == ["Try it", "Install"], sections
    assert "scripts/demo" in fenced_blocks(README, "bash")[0]
    install = text.split("\n## Install\n", 1)[1].split("\n## ", 1)[0]
    first = re.search(r"^```bash\n(.*?)^```", install, re.S | re.M)
    assert first is not None
    lines = [line.split(" #", 1)[0].strip() for line in first[1].splitlines()]
    assert lines[0] == "kubectl apply --server-side -k deploy/base-no-operator"
    assert (DEPLOY / "base-no-operator" / "kustomization.yaml").is_file()
    assert not any(d["kind"] == "Deployment" for d in kustomize_build(DEPLOY / "base-no-operator"))
    assert "pip install ." in lines


@pytest.mark.parametrize("page", [README, INSTALL], ids=lambda p: p.name)
def test_the_documented_operator_commands_take_their_flags(page: Path):
    runs = [line for line in command_lines(page) if line.startswith("mpijob-operator ")]
    assert runs, f"{page.name} shows no way to run the operator without an image"
    for line in runs:
        args = flags.parse(shlex.split(line)[1:])
        assert args.kubeconfig == "~/.kube/config"


# ------------------------------------------------------------------ python -m localcluster.images
@pytest.fixture
def recorded(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> dict[str, list[Any]]:
    """build_images' builders replaced by recorders (the operator's writes a stand-in archive); the
    steps that run debootstrap, mount or chroot replaced by traps, and the machine made fit for it."""
    calls = record_builders(monkeypatch, tmp_path / "default-cache")

    def trap(*args: object, **kw: object) -> None:
        raise AssertionError(f"a real build step ran: {args}")

    for step in ("_run", "_run_quiet", "_chroot_build"):
        monkeypatch.setattr(build, step, trap)
    monkeypatch.setattr(image_cli, "missing_requirements", list)
    return calls


def test_the_entry_point_writes_the_operators_archive(
    recorded: dict[str, list[Any]], tmp_path: Path, capsys: pytest.CaptureFixture[str]
):
    out = tmp_path / "out" / "operator.tar"
    assert image_cli.main(["operator", "--output", str(out), "--cache", str(tmp_path / "cache")]) == 0
    assert recorded["operator"] == [tmp_path / "cache"]
    assert recorded["pi"] == recorded["image"] == []  # the operator's image alone
    assert out.read_bytes() == b"the operator's archive"
    assert not out.with_name(out.name + ".partial").exists()
    printed = capsys.readouterr()
    assert printed.out == f"{out}\n"
    assert build.OPERATOR_IMAGE in printed.err and OPERATOR_DIGEST in printed.err


def test_the_entry_point_defaults_to_the_shared_cache_and_a_named_file(
    recorded: dict[str, list[Any]], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
):
    monkeypatch.chdir(tmp_path)
    assert image_cli.main(["operator"]) == 0
    assert recorded["operator"] == [tmp_path / "default-cache"]
    assert (tmp_path / f"mpijob-operator-{project_version()}.tar").read_bytes() == b"the operator's archive"


def test_the_entry_point_says_what_the_machine_lacks_before_building(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
):
    # The real requirement check, against a machine that lacks everything.
    monkeypatch.setattr(build, "build_images", lambda *a: pytest.fail("built without its requirements"))
    monkeypatch.setattr(image_cli.os, "geteuid", lambda: 1000)
    monkeypatch.setattr(image_cli.shutil, "which", lambda tool: None)
    monkeypatch.setattr(image_cli.platform, "machine", lambda: "aarch64")
    with pytest.raises(SystemExit) as exc:
        image_cli.main(["operator"])
    assert exc.value.code == 1
    err = capsys.readouterr().err
    for needed in ("root", "debootstrap", "unshare", "gcc", "x86_64", "aarch64"):
        assert needed in err


def test_a_fit_machine_lacks_nothing(monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setattr(image_cli.os, "geteuid", lambda: 0)
    monkeypatch.setattr(image_cli.shutil, "which", lambda tool: f"/usr/bin/{tool}")
    monkeypatch.setattr(image_cli.platform, "machine", lambda: "x86_64")
    assert image_cli.missing_requirements() == []


def test_the_entry_point_refuses_an_unknown_image(recorded: dict[str, list[Any]]):
    with pytest.raises(SystemExit) as exc:
        image_cli.main(["pi"])
    assert exc.value.code == 2
    assert recorded["operator"] == []


def _documented_image_builds() -> list[tuple[str, list[str]]]:
    found = []
    for path in (README, INSTALL, DOCKERFILE):
        for m in re.finditer(r"python -m localcluster\.images((?: [^\s`#]+)*)", path.read_text()):
            found.append((path.name, shlex.split(m[1])))
    return found


def test_every_documented_image_build_command_parses(monkeypatch: pytest.MonkeyPatch):
    documented = _documented_image_builds()
    assert {name for name, _ in documented} == {"README.md", "install.md", "Dockerfile"}
    asked: list[tuple[Path, Path | None]] = []
    monkeypatch.setattr(image_cli, "missing_requirements", list)
    monkeypatch.setattr(image_cli, "build_operator_archive", lambda out, cache: asked.append((out, cache)))
    for name, argv in documented:
        assert image_cli.main(argv) == 0, name
    assert all(cache is None for _, cache in asked)
    # The archive the pages load or copy is the one the documented build writes.
    written = {str(out) for out, _ in asked}
    assert written == {str(image_cli.DEFAULT_OUTPUT)}
    for line in command_lines(INSTALL):
        if line.startswith(("skopeo", "ctr", "kind load")):
            assert str(image_cli.DEFAULT_OUTPUT) in line, line


# ---------------------------------------------------------------------------- the release workflow
@pytest.fixture(scope="module")
def workflow() -> dict[str, Any]:
    doc = yaml.safe_load(WORKFLOW.read_text())
    assert isinstance(doc, dict)
    return doc


def _steps(workflow: dict[str, Any]) -> list[dict[str, Any]]:
    (job,) = workflow["jobs"].values()
    return list(job["steps"])


def _run_of(workflow: dict[str, Any], needle: str) -> str:
    (run,) = [s["run"] for s in _steps(workflow) if needle in s.get("run", "")]
    return str(run)


def test_the_release_runs_on_a_version_tag(workflow: dict[str, Any]):
    on = workflow.get("on", workflow.get(True))  # YAML 1.1 reads a bare `on` as true
    assert on == {"push": {"tags": ["v*"]}}
    assert workflow["permissions"]["contents"] == "write"
    check = _run_of(workflow, "pyproject.toml")
    assert '"$TAG" != "v$version"' in check


def test_the_release_builds_the_dockerfile_and_pushes_to_the_configured_registry(workflow: dict[str, Any]):
    (job,) = workflow["jobs"].values()
    assert job["env"]["REGISTRY"] == "${{ vars.REGISTRY }}"
    run = _run_of(workflow, "docker build")
    argv = shlex.split(run.splitlines()[0])
    assert argv[:3] == ["docker", "build", "-f"]
    assert (REPO / argv[3]).resolve() == DOCKERFILE
    assert argv[-1] == "."  # the Dockerfile copies from the repository root
    built = argv[argv.index("-t") + 1]
    assert built == "$IMAGE:$VERSION"
    assert f'docker push "{built}"' in run
    assert 'echo "IMAGE=$REGISTRY/mpijob-operator"' in _run_of(workflow, "pyproject.toml")
    login = _run_of(workflow, "docker login")
    assert '"${REGISTRY%%/*}"' in login and "--password-stdin" in login


def test_the_releases_install_manifest_runs_the_pushed_image(workflow: dict[str, Any], tmp_path: Path):
    run = _run_of(workflow, "kubectl kustomize")
    (heredoc,) = re.findall(r"cat >(\S+)/kustomization\.yaml <<EOF\n(.*?)\nEOF", run, re.S)
    where, body = heredoc
    assert f"kubectl kustomize {where} " in run
    kust = yaml.safe_load(body.replace("$IMAGE", PLACEHOLDER_IMAGE).replace("$VERSION", "9.9.9"))
    (resource,) = kust["resources"]
    assert (REPO / where / resource).resolve() == DEPLOY
    (image,) = kust["images"]
    objects = with_image(DEPLOY, image, tmp_path)
    assert deployment_image(objects) == f"{PLACEHOLDER_IMAGE}:9.9.9"


def test_the_release_builds_the_krew_archives_where_it_uploads_them(
    workflow: dict[str, Any], monkeypatch: pytest.MonkeyPatch
):
    run = _run_of(workflow, "tools.krew")
    command = run.replace("\\\n", " ").splitlines()[-1].strip()
    argv = shlex.split(command)
    assert argv[:4] == ["python", "-m", "tools.krew", "build"]
    asked: list[dict[str, Any]] = []
    monkeypatch.setattr(krew, "build", lambda out, **kw: asked.append({"out": out, **kw}))
    assert krew.main(argv[3:]) == 0
    (kw,) = asked
    assert kw["base_url"] == "$GITHUB_SERVER_URL/$GITHUB_REPOSITORY/releases/download/$TAG"
    assert kw["homepage"] == "$GITHUB_SERVER_URL/$GITHUB_REPOSITORY"
    assert kw["platforms"] is None  # every platform the krew manifest lists
    publish = shlex.split(_run_of(workflow, "gh release create"))
    assert f"{kw['out']}/*" in publish
    assert "dist/release/*" in publish


def test_the_release_names_only_files_that_exist(workflow: dict[str, Any]):
    text = "\n".join(str(s.get("run", "")) for s in _steps(workflow))
    named = set(re.findall(r"(?<![\w/.$-])((?:deploy|tools|docs)/[\w./-]+|pyproject\.toml)", text))
    assert {"deploy/Dockerfile", "deploy/crd/kubeflow.org_mpijobs.yaml", "pyproject.toml"} <= named
    missing = sorted(p for p in named if not (REPO / p).exists())
    assert not missing, f"the release workflow names files that do not exist: {missing}"
    header = WORKFLOW.read_text().split("\nname:", 1)[0]
    for page in re.findall(r"docs/[\w.-]+\.md", header):
        assert (REPO / page).is_file(), page
