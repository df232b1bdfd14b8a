"""Nodes: the Node objects kwok manages, the kwok config built from deploy/local/stages, and a pod that
only sleeps on a given node (something to run there)."""

from __future__ import annotations

from pathlib import Path

KWOK_NODE_ANNOTATION = "kwok.x-k8s.io/node"
NODE_PREFIX = "kwok-node-"

# Capacity of one fake node: a typical GPU machine.
DEFAULT_CAPACITY: dict[str, str] = {
    "cpu": "32",
    "memory": "256Gi",
    "pods": "110",
    "ephemeral-storage": "1Ti",
    "nvidia.com/gpu": "8",
}


def node_manifest(index: int, capacity: dict[str, str] | None = None) -> dict:
    return fake_node(f"{NODE_PREFIX}{index}", capacity)


def fake_node(
    name: str,
    capacity: dict[str, str] | None = None,
    *,
    labels: dict[str, str] | None = None,
    taints: list[dict[str, str]] | None = None,
) -> dict:
    """A Node that kwok manages (it carries KWOK_NODE_ANNOTATION); `labels` and `taints` (e.g. a node pool
    for a Kueue ResourceFlavor, or a rack label for topology-aware scheduling) are added as given."""
    cap = dict(capacity or DEFAULT_CAPACITY)
    spec: dict = {"taints": [dict(t) for t in taints]} if taints else {}
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": name,
            "annotations": {KWOK_NODE_ANNOTATION: "fake"},
            "labels": {
                "type": "kwok",
                "kubernetes.io/arch": "amd64",
                "kubernetes.io/os": "linux",
                "kubernetes.io/hostname": name,
                **(labels or {}),
            },
        },
        # No taint unless asked: the operator's pods schedule here without tolerations, as on a real cluster.
        "spec": spec,
        "status": {"capacity": cap, "allocatable": dict(cap)},
    }


# Spelled out: kwok v0.8 does not apply its defaults to a KwokConfiguration read from --config.
_KWOK_CONFIGURATION = """\
apiVersion: config.kwok.x-k8s.io/v1alpha1
kind: KwokConfiguration
options:
  podPlayStageParallelism: 4
  nodePlayStageParallelism: 4
  nodeLeaseParallelism: 4
  podsOnNodeSyncParallelism: 1
  enablePodsOnNodeSyncListPager: true
  enablePodsOnNodeSyncStreamWatch: false
  enableDebuggingHandlers: false
  enableProfilingHandler: false
  enableContentionProfiling: false
"""


def write_kwok_config(path: Path, stages_dir: Path) -> Path:
    """kwok v0.8 needs its stages in --config: a KwokConfiguration followed by every stage file."""
    docs = [_KWOK_CONFIGURATION]
    stage_files = sorted(stages_dir.glob("*.yaml"))
    if not stage_files:
        raise FileNotFoundError(f"no kwok stages in {stages_dir}")
    docs += [f.read_text() for f in stage_files]
    path.write_text("\n---\n".join(doc.strip() + "\n" for doc in docs))
    return path


def sleeping_pod(name: str, namespace: str, node: str, image: str) -> dict:
    """A pod that only sleeps, pinned to `node`, with an image the node already has."""
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {
            "nodeSelector": {"kubernetes.io/hostname": node},
            "terminationGracePeriodSeconds": 0,
            "containers": [
                {
                    "name": "sleep",
                    "image": image,
                    "imagePullPolicy": "Never",
                    "command": ["sleep", "3600"],
                    "resources": {"requests": {"cpu": "50m", "memory": "16Mi"}},
                }
            ],
        },
    }


def node_ready(node: dict) -> bool:
    conditions = (node.get("status") or {}).get("conditions") or []
    return any(c.get("type") == "Ready" and c.get("status") == "True" for c in conditions)
