"""The SSH Secret `<job>-ssh` (kubernetes.io/ssh-auth)."""

from __future__ import annotations

import base64
from collections.abc import Mapping
from typing import Any

from render import names
from render.api import MPIJob, SSHKey
from render.children.common import object_meta


def _b64(text: str) -> str:
    return base64.b64encode(text.encode()).decode()


def secret_data(live: Mapping[str, Any] | None, fresh: SSHKey | None) -> dict[str, str] | None:
    """Key material: the live Secret's when we own one (keys are never rotated), else the fresh key."""
    if live is not None:
        data = live.get("data") or {}
        if isinstance(data, Mapping) and all(
            isinstance(data.get(k), str) for k in (names.SSH_PRIVATE_KEY, names.SSH_PUBLIC_KEY)
        ):
            return {k: data[k] for k in (names.SSH_PRIVATE_KEY, names.SSH_PUBLIC_KEY)}
    if fresh is None:
        return None
    public = fresh.public_openssh if fresh.public_openssh.endswith("\n") else fresh.public_openssh + "\n"
    return {names.SSH_PRIVATE_KEY: _b64(fresh.private_pem), names.SSH_PUBLIC_KEY: _b64(public)}


def ssh_secret(job: MPIJob, data: dict[str, str]) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": object_meta(job, names.ssh_secret_name(job.name), names.object_labels(job.name)),
        "type": names.SSH_SECRET_TYPE,
        "data": data,
    }
