"""Computes the expected files of one golden case (shared by the golden and CLI tests)."""

from __future__ import annotations

from pathlib import Path

import attrs

from render import Config, Observed, ValidationError, events, next_wakeup, render, status, ttl_expired
from render.keys import load_ssh_key
from render.parse import load_yaml
from render.timeutil import format_time, parse_time
from render.yamlio import dump, dump_all, load_objects

GOLDEN = Path(__file__).resolve().parents[2] / "golden"
KEY_FILE = GOLDEN / "_key" / "id_ecdsa.pem"
DEFAULT_NOW = "2025-06-01T12:00:00Z"
OUTPUTS = ("children.yaml", "errors.txt", "status.yaml", "lifecycle.yaml")


def cases() -> list[str]:
    return sorted(p.name for p in GOLDEN.iterdir() if p.is_dir() and not p.name.startswith("_"))


def load_case(case: str) -> tuple[object, list[dict], Config, str]:
    d = GOLDEN / case
    mpijob = load_yaml((d / "mpijob.yaml").read_text())
    objects = load_objects((d / "observed.yaml").read_text()) if (d / "observed.yaml").exists() else []
    cfg = (load_yaml((d / "config.yaml").read_text()) if (d / "config.yaml").exists() else None) or {}
    config = Config(
        cluster_domain=cfg.get("cluster_domain", ""),
        gang_scheduling=cfg.get("gang_scheduling", ""),
        workload_api=cfg.get("workload_api", ""),
        force_delete_lost_workers_after=int(cfg.get("force_delete_lost_workers_after", 0)),
    )
    return mpijob, objects, config, str(cfg.get("now", DEFAULT_NOW))


def produce(case: str) -> dict[str, str]:
    """Output file name -> content."""
    mpijob, objects, config, now_text = load_case(case)
    now = parse_time(now_text)
    assert now is not None
    observed = Observed.from_objects(objects, now=now, fresh_ssh_key=load_ssh_key(KEY_FILE.read_text()))
    files: dict[str, str] = {}
    try:
        files["children.yaml"] = dump_all(render(mpijob, observed, config))
    except ValidationError as exc:
        files["errors.txt"] = "".join(line + "\n" for line in exc.lines())
    new = status(mpijob, observed, config)
    files["status.yaml"] = dump(new)
    old = mpijob.get("status") if isinstance(mpijob, dict) else None
    wakeup = next_wakeup(mpijob, new, now, observed, config)
    files["lifecycle.yaml"] = dump(
        {
            "events": [attrs.asdict(e) for e in events(mpijob, old, new, observed)],
            "next_wakeup": format_time(wakeup) if wakeup else None,
            "ttl_expired": ttl_expired(mpijob, new, now),
        }
    )
    return files
