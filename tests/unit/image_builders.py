"""localcluster.images.build's builders replaced by recorders, for the tests of what asks for images."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from localcluster.images import build

OPERATOR_DIGEST = "sha256:" + "ab" * 32


def record_builders(monkeypatch: pytest.MonkeyPatch, cache: Path) -> dict[str, list[Any]]:
    """Every builder records what it was asked (the operator's writes a stand-in archive and its digest);
    the default cache is `cache`. Returns the calls by builder."""
    calls: dict[str, list[Any]] = {"pause": [], "base": [], "pi": [], "image": [], "operator": []}
    base_layer = object()

    def pause(root: Path) -> Path:
        calls["pause"].append(root)
        return root / "pause.tar"

    def base(root: Path) -> tuple[Path, object]:
        calls["base"].append(root)
        return root / "rootfs", base_layer

    def pi(root: Path, base_dir: Path, flavours: Any = tuple(build.PI_FLAVOURS)) -> Path:
        calls["pi"].append(set(flavours))
        return root / "pi"

    def image(root: Path, impl: str, base_dir: Path, layer: object, pi_dir: Path) -> Path:
        assert layer is base_layer
        calls["image"].append(impl)
        return root / f"{impl}.tar"

    def operator(root: Path, base_dir: Path, layer: object) -> Path:
        assert (base_dir, layer) == (root / "rootfs", base_layer)
        calls["operator"].append(root)
        out = root / "operator-test"
        out.mkdir(parents=True, exist_ok=True)
        (out / "image.tar").write_bytes(b"the operator's archive")
        (out / "digest").write_text(OPERATOR_DIGEST + "\n")
        return out / "image.tar"

    monkeypatch.setattr(build, "build_pause", pause)
    monkeypatch.setattr(build, "build_base", base)
    monkeypatch.setattr(build, "build_pi", pi)
    monkeypatch.setattr(build, "build_image", image)
    monkeypatch.setattr(build, "build_operator", operator)
    monkeypatch.setenv("MPIJOB_IMAGES_CACHE", str(cache))
    return calls
