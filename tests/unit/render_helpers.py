"""Small builders for hand-written render/status tests."""

from __future__ import annotations

import copy
import io
import sys
from datetime import UTC, datetime, timedelta
from typing import Any

from localcluster.jobs import minimal_job
from reconcile.mpijob.render_command import main as cli_main
from render import Observed, SSHKey

UID = "aaaaaaaa-bbbb-4ccc-8ddd-eeeeeeeeeeee"
JOB_UID = "aaaaaaaa-bbbb-4ccc-8ddd-000000000001"
NOW = datetime(2025, 6, 1, 12, 0, tzinfo=UTC)
KEY = SSHKey(
    "-----BEGIN EC PRIVATE KEY-----\nT\n-----END EC PRIVATE KEY-----\n", "ecdsa-sha2-nistp521 AAAAT\n"
)

BASE: dict[str, Any] = minimal_job(
    namespace="ns", uid=UID, image="i", containers=("l", "w"), launcher_replicas=1
)


def job(**spec: Any) -> dict[str, Any]:
    j = copy.deepcopy(BASE)
    for key, value in spec.items():
        j["spec"][key] = value
    return j


def ts(seconds_before: float = 0) -> str:
    return (NOW - timedelta(seconds=seconds_before)).strftime("%Y-%m-%dT%H:%M:%SZ")


def owner(name: str = "pi", uid: str = UID, kind: str = "MPIJob", api: str = "kubeflow.org/v2beta1") -> list:
    return [{"apiVersion": api, "kind": kind, "name": name, "uid": uid, "controller": True}]


def worker(i: int, phase: str = "Running", ready: bool = True, **status: Any) -> dict[str, Any]:
    st: dict[str, Any] = {"phase": phase, **status}
    if phase == "Running":
        st["conditions"] = [{"type": "Ready", "status": "True" if ready else "False"}]
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": f"pi-worker-{i}", "namespace": "ns", "ownerReferences": owner()},
        "status": st,
    }


def launcher(suspend: bool = False, **status: Any) -> dict[str, Any]:
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": "pi-launcher", "namespace": "ns", "uid": JOB_UID, "ownerReferences": owner()},
        "spec": {"suspend": suspend},
        "status": status,
    }


def launcher_pod(suffix: str, phase: str, created: str, **status: Any) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": f"pi-launcher-{suffix}",
            "namespace": "ns",
            "creationTimestamp": created,
            "ownerReferences": owner("pi-launcher", JOB_UID, "Job", "batch/v1"),
        },
        "status": {"phase": phase, **status},
    }


def observed(*objects: dict[str, Any], now: datetime = NOW, key: SSHKey | None = KEY) -> Observed:
    return Observed.from_objects(list(objects), now=now, fresh_ssh_key=key)


def by_kind(children: list[dict[str, Any]], kind: str) -> list[dict[str, Any]]:
    return [c for c in children if c["kind"] == kind]


def names_of(children: list[dict[str, Any]], kind: str) -> list[str]:
    return [c["metadata"]["name"] for c in by_kind(children, kind)]


def conds(status: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {c["type"]: c for c in status.get("conditions", [])}


def owned(kind: str, name: str, api: str = "v1") -> dict[str, Any]:
    return {
        "apiVersion": api,
        "kind": kind,
        "metadata": {"name": name, "namespace": "ns", "ownerReferences": owner()},
    }


def created_children(workers: int = 2) -> list[dict[str, Any]]:
    """What the first sync creates for ``job()``: Service, ConfigMap, Secret, workers, launcher Job."""
    return [
        owned("Service", "pi"),
        owned("ConfigMap", "pi-config"),
        owned("Secret", "pi-ssh"),
        *(worker(i, "Pending") for i in range(workers)),
        launcher(),
    ]


def run_cli(args, stdin=""):
    out, err = io.StringIO(), io.StringIO()
    old = sys.stdout, sys.stderr, sys.stdin
    sys.stdout, sys.stderr, sys.stdin = out, err, io.StringIO(stdin)
    try:
        code = cli_main(args)
    finally:
        sys.stdout, sys.stderr, sys.stdin = old
    return code, out.getvalue(), err.getvalue()
