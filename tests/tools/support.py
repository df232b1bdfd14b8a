"""Tools tier helpers (the fixtures are in conftest.py): the YAML documents a command prints."""

from __future__ import annotations

import subprocess
from typing import Any

import yaml

Objects = list[dict[str, Any]]


def documents(argv: list[str]) -> Objects:
    """The YAML documents a command prints; it must succeed."""
    out = subprocess.run(argv, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    return [d for d in yaml.safe_load_all(out.stdout) if d]
