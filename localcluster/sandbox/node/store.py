"""One containerd image store per set of images, prepared once per machine, and seeded into each node
by hard links: an extra node costs megabytes and a fraction of a second, not an import."""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import shutil
import subprocess
import time
from collections.abc import Iterator, Mapping
from pathlib import Path

from localcluster.images import build as images
from localcluster.sandbox.node import config
from localcluster.sandbox.node.host import HOME

STORES = HOME / "stores"
# containerd rewrites these in place: each node gets its own copy, the rest is shared read-only.
BOLT_DATABASES = (
    Path("io.containerd.metadata.v1.bolt/meta.db"),
    Path("io.containerd.snapshotter.v1.overlayfs/metadata.db"),
)


def _key(archives: Mapping[str, Path]) -> str:
    version = subprocess.run(["containerd", "--version"], capture_output=True, text=True).stdout
    parts = [version.strip(), *(f"{n}={images.archive_digest(a)}" for n, a in sorted(archives.items()))]
    return hashlib.sha256("\n".join(parts).encode()).hexdigest()[:16]


@contextlib.contextmanager
def _locked() -> Iterator[None]:
    STORES.mkdir(parents=True, exist_ok=True)
    with (STORES / "lock").open("w") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        yield


def _ctr(socket: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["ctr", "--address", str(socket), "--namespace", "k8s.io", *args],
        capture_output=True,
        text=True,
        check=False,
        timeout=300,
    )


def _import(root: Path, archives: Mapping[str, Path], run_dir: Path, log: Path) -> None:
    """Import into a containerd of our own at `root` (its state and socket under `run_dir`), then stop it."""
    state = run_dir / "store-containerd"
    cfg = run_dir / "store-containerd.toml"
    cfg.write_text(config.containerd_config(images.PAUSE_IMAGE, cni_conf_dir=run_dir, root=root, state=state))
    socket = state / "containerd.sock"
    with log.open("ab") as out:
        proc = subprocess.Popen(["containerd", "--config", str(cfg)], stdout=out, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 60
        while not (socket.exists() and _ctr(socket, "version").returncode == 0):
            if proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"containerd for the image store did not start; see {log}")
            time.sleep(0.1)
        for name, archive in archives.items():
            done = _ctr(socket, "images", "import", str(archive))
            if done.returncode != 0:
                raise RuntimeError(f"ctr images import {archive} ({name}): {done.stderr.strip()}")
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def prepare(archives: Mapping[str, Path], run_dir: Path, log: Path) -> Path:
    """The containerd root holding exactly these images, imported now if this machine has none yet.
    Stores of other image sets are removed (only the newest is kept)."""
    key = _key(archives)
    store = STORES / key
    with _locked():
        if (store / "complete").exists():
            return store / "root"
        for old in STORES.iterdir():
            if old.is_dir() and old.name != key:
                shutil.rmtree(old, ignore_errors=True)
        shutil.rmtree(store, ignore_errors=True)
        began = time.monotonic()
        _import(store / "root", archives, run_dir, log)
        (store / "complete").write_text(f"{time.monotonic() - began:.1f}s\n")
    return store / "root"


def seed(store_root: Path, dest: Path) -> None:
    """Make `dest` a containerd root with the store's images: hard links (a copy across file systems),
    with real copies of the databases containerd writes in place."""
    if dest.exists() and any(dest.iterdir()):
        return  # a node that comes back keeps its disk
    dest.mkdir(parents=True, exist_ok=True)
    with _locked():  # the store is not replaced meanwhile
        linked = subprocess.run(
            ["cp", "-al", f"{store_root}/.", str(dest)], capture_output=True, text=True, check=False
        )
        if linked.returncode != 0:
            shutil.rmtree(dest)
            dest.mkdir(parents=True)
            subprocess.run(["cp", "-a", f"{store_root}/.", str(dest)], check=True)
            return
        for db in BOLT_DATABASES:
            target = dest / db
            target.unlink()
            shutil.copy2(store_root / db, target)
