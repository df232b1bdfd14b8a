"""Nodes that hold a job's pods and are not Ready: what the job's NodeUnavailable condition says.

A pod on a node that stopped reporting keeps its phase (Running) for as long as the node is away: only
the node's kubelet can say it ended. Kubernetes evicts it after the pod's not-ready/unreachable toleration
(300 s by default), and even then the pod stays Terminating until the node returns, is deleted, or gets the
`node.kubernetes.io/out-of-service` taint. A worker has a fixed name, so its replacement waits for that.
Render only reads the Nodes it is given; a node it is not given is not judged (it may be gone already, and
the pod garbage collector then removes its pods).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import attrs

from render.observed import KIND_NODE, JobView, Observed, condition, phase

OUT_OF_SERVICE = "node.kubernetes.io/out-of-service"
MAX_PODS_NAMED = 8


@attrs.frozen
class LostNode:
    """A node that is not Ready, and the job's unfinished pods bound to it."""

    name: str
    status: str  # the Ready condition's status: False or Unknown
    reason: str  # its reason: NodeStatusUnknown (the kubelet stopped reporting), KubeletNotReady, ...
    since: str  # its lastTransitionTime
    pods: tuple[str, ...]
    out_of_service: bool


def _node_of(pod: Mapping[str, Any]) -> str:
    return str((pod.get("spec") or {}).get("nodeName") or "")


def _out_of_service(node: Mapping[str, Any]) -> bool:
    taints = (node.get("spec") or {}).get("taints")
    if not isinstance(taints, list):
        return False
    return any(isinstance(t, Mapping) and t.get("key") == OUT_OF_SERVICE for t in taints)


def lost_nodes(replicas: int, v: JobView, observed: Observed) -> tuple[LostNode, ...]:
    """The nodes in ``observed`` that are not Ready and hold a worker (index < replicas) or a launcher pod
    of the job that has not finished, by node name."""
    held: dict[str, list[str]] = {}
    pods = [p for i, p in sorted(v.workers.items()) if i < replicas] + list(v.launcher_pods)
    for pod in pods:
        bound = _node_of(pod)
        if bound and phase(pod) not in ("Succeeded", "Failed"):
            held.setdefault(bound, []).append(str((pod.get("metadata") or {}).get("name", "")))
    out = []
    for name in sorted(held):
        node = observed.get(KIND_NODE, name)
        ready = condition(node, "Ready") if node is not None else None
        if node is None or ready is None or ready.get("status") == "True":
            continue  # not given, or new (no Ready condition yet), or fine
        out.append(
            LostNode(
                name=name,
                status=str(ready.get("status") or ""),
                reason=str(ready.get("reason") or ""),
                since=str(ready.get("lastTransitionTime") or ""),
                pods=tuple(held[name]),
                out_of_service=_out_of_service(node),
            )
        )
    return tuple(out)


def _pods(names: tuple[str, ...]) -> str:
    shown = ", ".join(names[:MAX_PODS_NAMED])
    more = len(names) - MAX_PODS_NAMED
    return shown + (f" and {more} more" if more > 0 else "")


def describe(lost: tuple[LostNode, ...]) -> str:
    """One sentence per node: which, since when, why, the pods held there and what unblocks them."""
    parts = []
    for n in lost:
        state = "NotReady" if n.status == "False" else "not reporting (Ready Unknown)"
        since = f" since {n.since}" if n.since else ""
        why = f" ({n.reason})" if n.reason else ""
        pods = _pods(n.pods)
        sentence = f"Node {n.name} is {state}{since}{why} and holds pod(s) {pods}."
        if n.out_of_service:
            sentence += f" It is tainted {OUT_OF_SERVICE}: its pods are being deleted, then replaced."
        else:
            sentence += (
                " They are replaced once the node is Ready again, or once it is removed"
                f" (kubectl delete node {n.name}) or, if it is known to be off, tainted"
                f" {OUT_OF_SERVICE}=nodeshutdown:NoExecute."
            )
        parts.append(sentence)
    return " ".join(parts)
