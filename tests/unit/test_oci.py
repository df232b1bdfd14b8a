"""The image-archive writer: reproducible layers, overlayfs whiteouts as OCI whiteouts, and an archive
that is both an OCI layout and a docker-archive."""

from __future__ import annotations

import json
import os
import stat
import tarfile
from pathlib import Path

import pytest

from localcluster.images import oci


def tree(root: Path) -> Path:
    (root / "etc").mkdir(parents=True)
    (root / "etc" / "hostname").write_text("x\n")
    (root / "bin").mkdir()
    (root / "bin" / "tool").write_text("#!/bin/sh\n")
    (root / "bin" / "tool").chmod(0o755)
    os.link(root / "bin" / "tool", root / "bin" / "tool2")
    (root / "bin" / "sh").symlink_to("tool")
    return root


def test_layer_is_reproducible_and_ordered(tmp_path: Path) -> None:
    a = oci.write_layer(tree(tmp_path / "a"), tmp_path / "a.tar")
    os.utime(tmp_path / "a" / "etc" / "hostname", (1, 2_000_000_000))
    b = oci.write_layer(tree(tmp_path / "b"), tmp_path / "b.tar")
    assert a.digest == b.digest and a.size == b.size
    with tarfile.open(a.path) as tar:
        names = tar.getnames()
        assert names == ["bin", "bin/sh", "bin/tool", "bin/tool2", "etc", "etc/hostname"]
        assert tar.getmember("bin/tool2").islnk()
        assert tar.getmember("bin/sh").issym()
        assert tar.getmember("bin/tool").mode & 0o777 == 0o755
        assert all(m.mtime <= oci.EPOCH and m.uname == "" for m in tar.getmembers())


@pytest.mark.skipif(os.geteuid() != 0, reason="whiteouts are 0/0 character devices: mknod needs root")
def test_overlay_upper_whiteouts_become_oci_markers(tmp_path: Path) -> None:
    upper = tmp_path / "upper"
    (upper / "etc" / "gone").parent.mkdir(parents=True)
    os.mknod(upper / "etc" / "gone", stat.S_IFCHR | 0o000, os.makedev(0, 0))
    (upper / "opt").mkdir()
    os.setxattr(upper / "opt", "trusted.overlay.opaque", b"y")
    (upper / "opt" / "new").write_text("n")
    layer = oci.write_layer(upper, tmp_path / "l.tar", overlay_upper=True)
    with tarfile.open(layer.path) as tar:
        names = tar.getnames()
    assert "etc/.wh.gone" in names and "etc/gone" not in names
    assert "opt/.wh..wh..opq" in names and "opt/new" in names


def test_archive_is_oci_layout_and_docker_archive(tmp_path: Path) -> None:
    layer = oci.write_layer(tree(tmp_path / "t"), tmp_path / "l.tar")
    cfg = oci.ImageConfig(env=("PATH=/bin",), entrypoint=("/bin/sh",), working_dir="/")
    digest = oci.write_archive("localhost/x:1", [layer], cfg, tmp_path / "img.tar")
    with tarfile.open(tmp_path / "img.tar") as tar:

        def read(name: str) -> object:
            f = tar.extractfile(name)
            assert f is not None
            return json.loads(f.read())

        index = read("index.json")
        assert index["manifests"][0]["digest"] == digest
        assert index["manifests"][0]["annotations"]["io.containerd.image.name"] == "localhost/x:1"
        manifest = read("blobs/sha256/" + digest.removeprefix("sha256:"))
        assert [la["digest"] for la in manifest["layers"]] == [layer.digest]
        config = read("blobs/sha256/" + manifest["config"]["digest"].removeprefix("sha256:"))
        assert config["rootfs"]["diff_ids"] == [layer.digest]
        assert config["config"]["Entrypoint"] == ["/bin/sh"]
        (docker,) = read("manifest.json")
        assert docker["RepoTags"] == ["localhost/x:1"]
        assert docker["Layers"] == ["blobs/sha256/" + layer.digest.removeprefix("sha256:")]
        assert tar.getmember(docker["Layers"][0]).size == layer.size
