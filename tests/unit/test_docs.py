"""The docs: the site builds in strict mode, every command block is run here or marked as not run, and the
pages that list the operator's flags, metrics and reasons list all of them.

Markers (an HTML comment on the line before a fenced block of bash, sh, shell or console):
  <!-- run -->            run the block with bash from the repository root; it must exit 0
  <!-- run: exit N -->    the same, and it must exit N
  <!-- output -->         before the block that follows a run block: exactly what the run prints
  <!-- not run: why -->   not run (it needs a cluster, root or minutes); the reason is required

A `yaml` block of the pages that holds a whole MPIJob (`kind: MPIJob`, `kubeflow.org/v2beta1`, a `spec`
mapping) must pass `mpijob render`; a `text` block after `<!-- rendered: KEY -->` must be exactly the
`data.KEY` of the ConfigMap render makes for the MPIJob block above it (KEY: `hostfile`, ...).
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]
DOCS = REPO / "docs"
README = REPO / "README.md"
COMMAND_LANGS = {"bash", "sh", "shell", "console"}
FENCE = re.compile(r"^(```+|~~~+)\s*([\w+#.-]*)")
MARKER = re.compile(r"^<!--\s*(run(?::\s*exit\s+(\d+))?|output|not run:\s*\S.*?)\s*-->\s*$")


def doc_files() -> list[Path]:
    """Every page, and the README."""
    pages = sorted(DOCS.rglob("*.md"))
    return [*pages, README]


class Block:
    def __init__(self, path: Path, line: int, lang: str, body: str, marker: str | None) -> None:
        self.path, self.line, self.lang, self.body, self.marker = path, line, lang, body, marker
        self.output: Block | None = None

    def __repr__(self) -> str:
        return f"{self.path.relative_to(REPO)}:{self.line}"


def blocks(path: Path) -> list[Block]:
    lines = path.read_text().splitlines()
    out: list[Block] = []
    i = 0
    while i < len(lines):
        m = FENCE.match(lines[i])
        if not m:
            i += 1
            continue
        fence, lang, start = m.group(1), m.group(2), i
        j = i + 1
        while j < len(lines) and not lines[j].startswith(fence):
            j += 1
        prev = lines[start - 1].strip() if start else ""
        mm = MARKER.match(prev)
        marker = mm.group(1) if mm else None
        block = Block(path, start + 1, lang, "\n".join(lines[start + 1 : j]), marker)
        if marker == "output" and out and out[-1].marker and out[-1].marker.startswith("run"):
            out[-1].output = block
        out.append(block)
        i = j + 1
    return out


ALL_BLOCKS = [b for p in doc_files() for b in blocks(p)]
RUN_BLOCKS = [b for b in ALL_BLOCKS if b.marker and b.marker.startswith("run")]


def test_every_block_says_its_language():
    bare = [b for b in ALL_BLOCKS if not b.lang]
    assert not bare, f"fenced blocks without a language (use text for output): {bare}"


def test_every_command_block_is_run_or_marked_not_run():
    unmarked = [
        b
        for b in ALL_BLOCKS
        if b.lang in COMMAND_LANGS and not (b.marker and (b.marker.startswith(("run", "not run"))))
    ]
    assert not unmarked, f"command blocks with neither <!-- run --> nor <!-- not run: why -->: {unmarked}"
    misplaced = [b for b in ALL_BLOCKS if b.marker and b.lang not in COMMAND_LANGS and b.marker != "output"]
    assert not misplaced, f"run markers on blocks that are not commands: {misplaced}"
    orphans = [b for b in ALL_BLOCKS if b.marker == "output" and not any(r.output is b for r in RUN_BLOCKS)]
    assert not orphans, f"<!-- output --> blocks that follow no run block: {orphans}"


def test_some_blocks_run():
    assert len(RUN_BLOCKS) >= 3, RUN_BLOCKS


@pytest.mark.parametrize("block", RUN_BLOCKS, ids=repr)
def test_command_block(block: Block):
    m = MARKER.match(f"<!-- {block.marker} -->")
    assert m is not None
    want = int(m.group(2) or 0)
    bin_dir = str(Path(sys.executable).parent)
    env = {**os.environ, "PATH": f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}"}
    proc = subprocess.run(
        ["bash", "-o", "pipefail", "-c", block.body],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == want, f"{block}: exit {proc.returncode}, wanted {want}\n{proc.stderr[-2000:]}"
    if block.output is not None:
        assert (proc.stdout + proc.stderr).strip() == block.output.body.strip(), f"{block}: output differs"


def test_site_builds_strict(tmp_path: Path):
    proc = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(tmp_path / "site")],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "WARNING" not in proc.stderr, proc.stderr
    for page in ("differences", "troubleshooting", "operations", "install"):
        assert (tmp_path / "site" / page / "index.html").exists(), page


def test_differences_page_holds_every_entry(tmp_path: Path):
    sys.path.insert(0, str(DOCS / "hooks"))
    try:
        import differences  # type: ignore[import-not-found]
    finally:
        sys.path.pop(0)
    entries = differences.load(DOCS / "differences.yaml")
    page = differences.render(entries)
    assert entries
    for e in entries:
        assert f"### {e['id']}\n" in page


def _sources(pattern: str, root: str, skip: frozenset[str] = frozenset()) -> set[str]:
    found: set[str] = set()
    for path in (REPO / root).rglob("*.py"):
        if path.relative_to(REPO).as_posix() not in skip:
            found.update(re.findall(pattern, path.read_text()))
    return found


# `mpijob render`'s flags are docs/cli.md's, not the operator's.
RENDER_COMMAND = frozenset({"reconcile/mpijob/render_command.py"})


def test_operations_lists_every_flag():
    flags = _sources(r"""(?:add_argument|_bool)\((?:\w+, )?\s*"(--[\w-]+)\"""", "reconcile", RENDER_COMMAND)
    flags -= {"--help"}
    assert len(flags) > 20, flags
    page = (DOCS / "operations.md").read_text()
    missing = sorted(f for f in flags if f"`{f}`" not in page and f"`-{f[2:]}`" not in page)
    assert not missing, f"flags the operations page does not describe: {missing}"


def test_operations_lists_every_metric():
    metrics = _sources(r"""(?:Counter|Gauge|Histogram)\(\s*"(mpi_operator_\w+)\"""", "reconcile")
    assert len(metrics) >= 8, metrics
    page = (DOCS / "operations.md").read_text()
    missing = sorted(m for m in metrics if m not in page)
    assert not missing, f"metrics the operations page does not describe: {missing}"


# Reasons outside render/status.py's REASON_* constants; each must still occur in the code.
ENGINE_REASONS = ("SyncFailed", "Synced", "FailedCreate", "FailedUpdate", "FailedDelete", "ErrResourceExists")


def test_troubleshooting_lists_every_reason():
    status = (REPO / "render" / "status.py").read_text()
    reasons = set(re.findall(r'^REASON_\w+ = "(\w+)"', status, re.M))
    assert len(reasons) >= 10, reasons
    code = "\n".join(p.read_text() for p in (REPO / "reconcile").rglob("*.py"))
    gone = [r for r in ENGINE_REASONS if f'"{r}"' not in code]
    assert not gone, f"reasons the code no longer uses: {gone}"
    page = (DOCS / "troubleshooting.md").read_text()
    missing = sorted(r for r in reasons | set(ENGINE_REASONS) if f"`{r}`" not in page)
    assert not missing, f"reasons the troubleshooting page does not explain: {missing}"


def test_readme_size_and_links():
    readme = README
    text = readme.read_text()
    assert len(text.encode()) <= 15 * 1024, f"{readme.name}: {len(text.encode())} bytes"
    targets = re.findall(r"\]\((?!https?://|#)([^)#\s]+)", text)
    assert targets
    missing = [t for t in targets if not (REPO / t).exists()]  # as seen from the repository root
    assert not missing, f"README links to missing files: {missing}"


def test_docs_yaml_is_valid():
    assert isinstance(yaml.safe_load((REPO / "mkdocs.yml").read_text()), dict)


# Paths in upstream's repository that the pages name as such (not files of this one).
UPSTREAM_PATHS = {"deploy/v2beta1/mpi-operator.yaml", "manifests/overlays/standalone"}
TOP_DIRS = ("render/", "reconcile/", "tests/", "deploy/", "benchmarks/", "scripts/", "localcluster/")
TOP_DIRS += ("golden/", "examples/", "tools/", "docs/")


def test_named_repository_paths_exist():
    """A page that names `reconcile/x.py` or `tests/unit/test_y.py::test_z` names something that exists."""
    stale = []
    for path in doc_files():
        for token in re.findall(r"`([^`\s]+)`", path.read_text()):
            name = re.split(r"::|\[|\s", token)[0].rstrip("/.,:")
            if not name.startswith(TOP_DIRS) or any(c in name for c in "*<>{}$|"):
                continue
            if name not in UPSTREAM_PATHS and not (REPO / name).exists():
                stale.append(f"{path.relative_to(REPO)}: {token}")
    assert not stale, f"paths that do not exist: {stale}"


def test_readme_error_example_is_what_the_cli_prints():
    """The README's validation error example is the output docs/cli.md's run block checks."""
    readme = README
    run = [b for b in RUN_BLOCKS if b.path.name == "cli.md" and b.marker == "run: exit 2"]
    assert len(run) == 1 and run[0].output is not None
    example = [b for b in blocks(readme) if b.lang == "text" and "spec.mpiReplicaSpecs" in b.body]
    assert len(example) == 1, example
    assert example[0].body.strip() == run[0].output.body.strip()


def test_kubectl_diff_line_is_the_one_the_cluster_tier_runs():
    from tests.cluster.test_plan_cli import DIFF_ONE_LINER

    line = "JOB=pi NS=default; " + DIFF_ONE_LINER
    assert line in (DOCS / "cli.md").read_text().splitlines()


# -- MPIJob manifests in the pages --------------------------------------------------------------------
RENDERED = re.compile(r"^<!--\s*rendered:\s*(\S+)\s*-->\s*$")
RENDER_KEY = REPO / "golden" / "_key" / "id_ecdsa.pem"


def _mpijob_docs(block: Block) -> list[dict[str, Any]]:
    """The whole MPIJobs of a yaml block (an excerpt such as `spec: ...` is not one)."""
    if block.lang != "yaml":
        return []
    docs = list(yaml.safe_load_all(block.body))
    return [
        d
        for d in docs
        if isinstance(d, dict)
        and d.get("kind") == "MPIJob"
        and d.get("apiVersion") == "kubeflow.org/v2beta1"
        and isinstance(d.get("spec"), dict)
    ]


PAGE_BLOCKS = [b for p in sorted(DOCS.rglob("*.md")) for b in blocks(p)]
MPIJOB_BLOCKS = [b for b in PAGE_BLOCKS if _mpijob_docs(b)]


def _rendered_blocks() -> list[tuple[Block, str, Block | None]]:
    """(text block, its KEY, the MPIJob block above it in the same page)."""
    out = []
    for path in sorted(DOCS.rglob("*.md")):
        lines = path.read_text().splitlines()
        above: Block | None = None
        for b in blocks(path):
            m = RENDERED.match(lines[b.line - 2]) if b.line >= 2 else None
            if m:
                out.append((b, m.group(1), above))
            if _mpijob_docs(b):
                above = b
    return out


def _render(block: Block, tmp_path: Path) -> list[dict[str, Any]]:
    from reconcile.mpijob.render_command import main as render_main

    manifest = tmp_path / "manifest.yaml"
    manifest.write_text(block.body)
    out, err = io.StringIO(), io.StringIO()
    argv = ["-f", str(manifest), "-o", "json", "--now", "2026-01-01T00:00:00Z", "--ssh-key", str(RENDER_KEY)]
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = render_main(argv)
    assert code == 0, f"{block}: mpijob render exits {code}:\n{err.getvalue()}"
    return json.loads(out.getvalue())["items"]


def test_some_pages_show_mpijobs():
    assert len(MPIJOB_BLOCKS) >= 3, MPIJOB_BLOCKS


@pytest.mark.parametrize("block", MPIJOB_BLOCKS, ids=repr)
def test_mpijob_manifest_renders(block: Block, tmp_path: Path):
    children = _render(block, tmp_path)
    assert {c["kind"] for c in children} >= {"Service", "ConfigMap", "Job"}, block


@pytest.mark.parametrize("case", _rendered_blocks(), ids=lambda c: repr(c[0]) if isinstance(c, tuple) else "")
def test_rendered_block_is_what_render_makes(case: tuple[Block, str, Block | None], tmp_path: Path):
    block, key, manifest = case
    assert block.lang == "text", f"{block}: a rendered block is a text block"
    assert manifest is not None, f"{block}: no MPIJob manifest above it in the page"
    (job,) = _mpijob_docs(manifest)
    name = f"{job['metadata']['name']}-config"
    (config,) = [
        c for c in _render(manifest, tmp_path) if c["kind"] == "ConfigMap" and c["metadata"]["name"] == name
    ]
    assert key in config["data"], f"{block}: the ConfigMap has no {key!r}"
    assert block.body.strip() == config["data"][key].strip(), f"{block}: not what render writes as {key}"
