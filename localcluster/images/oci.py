"""A small image-archive writer: layer tars from directories, and one tar that is both an OCI image
layout and a docker-archive (manifest.json), which `ctr images import` reads. No registry, no daemon.

Layers are uncompressed tars with sorted entries, numeric owners and clamped mtimes, so the same tree
gives the same digest. An overlayfs upper dir can be packed as a layer: its whiteouts (0/0 character
devices) and opaque dirs become the OCI `.wh.` markers.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import stat
import tarfile
from collections.abc import Iterator
from pathlib import Path

import attrs

MEDIA_MANIFEST = "application/vnd.oci.image.manifest.v1+json"
MEDIA_CONFIG = "application/vnd.oci.image.config.v1+json"
MEDIA_LAYER = "application/vnd.oci.image.layer.v1.tar"
# Every entry gets this mtime (2000-01-01): reproducible digests whatever the build time.
EPOCH = 946684800
_OPAQUE_XATTR = "trusted.overlay.opaque"


@attrs.frozen
class Layer:
    path: Path  # the layer tar
    digest: str  # "sha256:<hex>" of the tar (uncompressed, so also its diff id)
    size: int


def _walk(root: Path) -> Iterator[Path]:
    """Every path under root, each dir before its contents, names sorted (a stable order)."""
    for entry in sorted(os.scandir(root), key=lambda e: e.name):
        path = Path(entry.path)
        yield path
        if entry.is_dir(follow_symlinks=False):
            yield from _walk(path)


def _is_whiteout(st: os.stat_result) -> bool:
    return stat.S_ISCHR(st.st_mode) and st.st_rdev == 0


def _is_opaque(path: Path) -> bool:
    try:
        return os.getxattr(path, _OPAQUE_XATTR, follow_symlinks=False) == b"y"
    except OSError:
        return False


def _normalise(info: tarfile.TarInfo) -> tarfile.TarInfo:
    info.mtime = min(int(info.mtime), EPOCH)
    info.uname = info.gname = ""
    return info


def write_layer(root: Path, out: Path, *, overlay_upper: bool = False) -> Layer:
    """Pack the tree under root as a layer tar at out. With overlay_upper, root is an overlayfs upper
    dir and its whiteouts become OCI whiteouts."""
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(out.name + ".partial")
    with tarfile.open(tmp, "w", format=tarfile.PAX_FORMAT) as tar:
        for path in _walk(root):
            arcname = path.relative_to(root).as_posix()
            st = path.lstat()
            if overlay_upper and _is_whiteout(st):
                parent = Path(arcname).parent.as_posix()
                info = tarfile.TarInfo(f".wh.{path.name}" if parent == "." else f"{parent}/.wh.{path.name}")
                info.mtime = EPOCH
                tar.addfile(info)
                continue
            info = tar.gettarinfo(str(path), arcname)
            if info is None:  # sockets: nothing an image needs
                continue
            _normalise(info)
            if info.isreg():
                with path.open("rb") as f:
                    tar.addfile(info, f)
            else:
                tar.addfile(info)
            if overlay_upper and info.isdir() and _is_opaque(path):
                marker = tarfile.TarInfo(f"{arcname}/.wh..wh..opq")
                marker.mtime = EPOCH
                tar.addfile(marker)
    digest, size = _sha256(tmp)
    tmp.rename(out)
    return Layer(path=out, digest=digest, size=size)


def _sha256(path: Path) -> tuple[str, int]:
    h = hashlib.sha256()
    size = 0
    with path.open("rb") as f:
        while chunk := f.read(1 << 20):
            h.update(chunk)
            size += len(chunk)
    return f"sha256:{h.hexdigest()}", size


def _json_blob(obj: object) -> bytes:
    return json.dumps(obj, sort_keys=True, separators=(",", ":")).encode()


@attrs.frozen
class ImageConfig:
    env: tuple[str, ...] = ("PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",)
    entrypoint: tuple[str, ...] = ()
    cmd: tuple[str, ...] = ()
    user: str = ""
    working_dir: str = ""


def write_archive(name: str, layers: list[Layer], config: ImageConfig, out: Path) -> str:
    """Write an image archive named `name` (e.g. localhost/mpi-pi:openmpi) to out; return the manifest
    digest (what containerd reports for the imported image)."""
    config_blob = _config_blob(layers, config)
    config_digest = _digest(config_blob)
    manifest_blob = _manifest_blob(layers, config_digest, len(config_blob))
    manifest_digest = _digest(manifest_blob)
    files = [
        ("oci-layout", _json_blob({"imageLayoutVersion": "1.0.0"})),
        ("index.json", _json_blob(_index(name, manifest_digest, len(manifest_blob)))),
        ("manifest.json", _json_blob(_docker_manifest(name, config_digest, layers))),
        (_blob_path(config_digest), config_blob),
        (_blob_path(manifest_digest), manifest_blob),
    ]
    _write_tar(out, files, layers)
    return manifest_digest


def _digest(blob: bytes) -> str:
    return f"sha256:{hashlib.sha256(blob).hexdigest()}"


def _blob_path(digest: str) -> str:
    return "blobs/sha256/" + digest.removeprefix("sha256:")


def _config_blob(layers: list[Layer], config: ImageConfig) -> bytes:
    """The OCI image config: what the container runs with, and the layers' diff ids."""
    cfg: dict[str, object] = {"Env": list(config.env)}
    if config.entrypoint:
        cfg["Entrypoint"] = list(config.entrypoint)
    if config.cmd:
        cfg["Cmd"] = list(config.cmd)
    if config.user:
        cfg["User"] = config.user
    if config.working_dir:
        cfg["WorkingDir"] = config.working_dir
    return _json_blob(
        {
            "architecture": "amd64",
            "os": "linux",
            "config": cfg,
            "rootfs": {"type": "layers", "diff_ids": [layer.digest for layer in layers]},
            "history": [{"created_by": "localcluster.images"} for _ in layers],
        }
    )


def _manifest_blob(layers: list[Layer], config_digest: str, config_size: int) -> bytes:
    return _json_blob(
        {
            "schemaVersion": 2,
            "mediaType": MEDIA_MANIFEST,
            "config": {"mediaType": MEDIA_CONFIG, "digest": config_digest, "size": config_size},
            "layers": [{"mediaType": MEDIA_LAYER, "digest": la.digest, "size": la.size} for la in layers],
        }
    )


def _index(name: str, manifest_digest: str, manifest_size: int) -> dict[str, object]:
    """The OCI layout's index.json: the one manifest, with the names containerd imports it as."""
    return {
        "schemaVersion": 2,
        "manifests": [
            {
                "mediaType": MEDIA_MANIFEST,
                "digest": manifest_digest,
                "size": manifest_size,
                "annotations": {
                    "io.containerd.image.name": name,
                    "org.opencontainers.image.ref.name": name.rsplit(":", 1)[-1],
                },
            }
        ],
    }


def _docker_manifest(name: str, config_digest: str, layers: list[Layer]) -> list[dict[str, object]]:
    """docker-archive's manifest.json, pointing into the same blobs."""
    return [
        {
            "Config": _blob_path(config_digest),
            "RepoTags": [name],
            "Layers": [_blob_path(la.digest) for la in layers],
        }
    ]


def _write_tar(out: Path, files: list[tuple[str, bytes]], layers: list[Layer]) -> None:
    """The archive: the small files in order, then each distinct layer once; renamed into place when whole."""
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(out.name + ".partial")
    with tarfile.open(tmp, "w", format=tarfile.PAX_FORMAT) as tar:
        for arcname, data in files:
            info = tarfile.TarInfo(arcname)
            info.size, info.mtime, info.mode = len(data), EPOCH, 0o644
            tar.addfile(info, io.BytesIO(data))
        seen = set()
        for layer in layers:
            if layer.digest in seen:
                continue
            seen.add(layer.digest)
            info = tarfile.TarInfo(_blob_path(layer.digest))
            info.size, info.mtime, info.mode = layer.size, EPOCH, 0o644
            with layer.path.open("rb") as f:
                tar.addfile(info, f)
    tmp.rename(out)
