"""Secret, ConfigMap and emptyDir volumes laid out on disk the way the kubelet does.

Kubelet's layout for Secret/ConfigMap volumes: a tmpfs root with mode 1777, a timestamped directory holding
the real files, a `..data` symlink to it and one symlink per item (`id_rsa -> ..data/id_rsa`). Files are
owned by root; their mode is the item's `mode`, else the volume's `defaultMode`, else 0644. With a pod
`fsGroup`, files get that group and group read (`| 0440`). The staging directory is bind-mounted read-only
at the mount path inside the pod.
"""

from __future__ import annotations

import base64
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

DEFAULT_MODE = 0o644


class Unsupported(NotImplementedError):
    """A pod spec uses something this harness does not emulate: fail loudly, never guess."""


def _source_data(volume: Mapping[str, Any], objects: Mapping[tuple[str, str], dict]) -> tuple[dict, dict]:
    """(data as bytes by key, the volume source) for a secret or configMap volume."""
    if "secret" in volume:
        src = volume["secret"]
        obj = objects.get(("Secret", src["secretName"]))
        data = {k: base64.b64decode(v) for k, v in ((obj or {}).get("data") or {}).items()}
        data.update({k: v.encode() for k, v in ((obj or {}).get("stringData") or {}).items()})
    elif "configMap" in volume:
        src = volume["configMap"]
        obj = objects.get(("ConfigMap", src["name"]))
        data = {k: v.encode() for k, v in ((obj or {}).get("data") or {}).items()}
        data.update({k: base64.b64decode(v) for k, v in ((obj or {}).get("binaryData") or {}).items()})
    else:
        raise Unsupported(f"volume {volume.get('name')!r}: only secret, configMap and emptyDir are emulated")
    if obj is None and not src.get("optional"):
        raise LookupError(f"volume {volume['name']!r}: its source object does not exist")
    return data, src


def lay_out(
    volume: Mapping[str, Any], objects: Mapping[tuple[str, str], dict], dest: Path, fs_group: int | None
) -> Path:
    """Materialise one volume under dest; returns the directory to mount."""
    dest.mkdir(parents=True)
    if "emptyDir" in volume:
        os.chmod(dest, 0o777)
        return dest
    data, src = _source_data(volume, objects)
    default_mode = src.get("defaultMode", DEFAULT_MODE)
    items = src.get("items")
    if items is None:
        items = [{"key": k, "path": k} for k in sorted(data)]
    payload = dest / "..2000_01_01_00_00_00.000000001"
    payload.mkdir()
    os.chmod(payload, 0o755)
    for item in items:
        if item["key"] not in data:
            if src.get("optional"):
                continue
            raise LookupError(f"volume {volume['name']!r}: key {item['key']!r} not in its source")
        rel = Path(item["path"])
        if rel.is_absolute() or ".." in rel.parts:
            raise ValueError(f"volume {volume['name']!r}: bad item path {item['path']!r}")
        f = payload / rel
        f.parent.mkdir(parents=True, exist_ok=True)
        f.write_bytes(data[item["key"]])
        mode = item.get("mode", default_mode)
        if fs_group is not None:
            os.chown(f, 0, fs_group)
            mode |= 0o440
        os.chmod(f, mode)
        top = rel.parts[0]
        if not (dest / top).is_symlink():
            (dest / top).symlink_to(Path("..data") / top)
    (dest / "..data").symlink_to(payload.name)
    os.chmod(dest, 0o1777)
    return dest
