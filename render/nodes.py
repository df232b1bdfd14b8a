"""Nodes that hold a job's pods and are not Ready: what the job's NodeUnavailable condition says.

A pod on a node that stopped reporting keeps its phase (Running) for as long as the node is away: only
the node's kubelet can say it ended. Kubernetes evicts it after the pod's not-ready/unreachable toleration
(300 s by default), and even then the pod stays Terminating until the node returns, is deleted, or gets the
`node.kubernetes.io/out-of-service` taint. A worker has a fixed name, so its replacement waits for that.
Render only reads the Nodes it is given; a node it is not given is not judged (it may be gone already, and
the pod garbage collector then removes its pods).

With ``Config.force_delete_lost_workers_after`` the job's worker pods on such a node are force-deleted
(grace period 0) once the node has not been Ready that long, so their replacements start elsewhere without
waiting for the node. It is off by default: a node that stopped reporting may still run its pods, cut off
from the API server but not from the other workers, and a second copy of a rank would then run beside the
first.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from typing import Any

import attrs

from render import conditions as cond
from render import failures
from render.api import Config, MPIJob
from render.names import listed
from render.observed import KIND_NODE, JobView, Observed, condition, is_terminating, node_name, phase
from render.timeutil import add_seconds, parse_time

OUT_OF_SERVICE = "node.kubernetes.io/out-of-service"


@attrs.frozen
class LostNode:
    """A node that is not Ready, and the job's unfinished pods bound to it."""

    name: str
    status: str  # the Ready condition's status: False or Unknown
    reason: str  # its reason: NodeStatusUnknown (the kubelet stopped reporting), KubeletNotReady, ...
    since: str  # its lastTransitionTime
    pods: tuple[str, ...]
    out_of_service: bool


def _not_ready(observed: Observed, name: str) -> tuple[Mapping[str, Any], Mapping[str, Any]] | None:
    """(the Node, its Ready condition) when ``observed`` holds the node and it is not Ready; None when it
    is not given, new (no Ready condition yet), or fine."""
    node = observed.get(KIND_NODE, name) if name else None
    ready = condition(node, "Ready") if node is not None else None
    if node is None or ready is None or ready.get("status") == "True":
        return None
    return node, ready


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
        bound = node_name(pod)
        if bound and phase(pod) not in ("Succeeded", "Failed"):
            held.setdefault(bound, []).append(str((pod.get("metadata") or {}).get("name", "")))
    out = []
    for name in sorted(held):
        found = _not_ready(observed, name)
        if found is None:
            continue
        node, ready = found
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


def describe(lost: tuple[LostNode, ...], force_after: int = 0) -> str:
    """One sentence per node: which, since when, why, the pods held there and what unblocks them;
    ``force_after``: Config.force_delete_lost_workers_after."""
    parts = []
    for n in lost:
        state = "NotReady" if n.status == "False" else "not reporting (Ready Unknown)"
        since = f" since {n.since}" if n.since else ""
        why = f" ({n.reason})" if n.reason else ""
        pods = listed(n.pods)
        sentence = f"Node {n.name} is {state}{since}{why} and holds pod(s) {pods}."
        if n.out_of_service:
            sentence += f" It is tainted {OUT_OF_SERVICE}: its pods are being deleted, then replaced."
        elif force_after > 0:
            sentence += (
                f" Its worker pods are force-deleted {force_after} s after it stopped being Ready"
                " (--force-delete-lost-workers-after), then replaced elsewhere."
            )
        else:
            sentence += (
                " They are replaced once the node is Ready again, or once it is removed"
                f" (kubectl delete node {n.name}) or, if it is known to be off, tainted"
                f" {OUT_OF_SERVICE}=nodeshutdown:NoExecute."
            )
        parts.append(sentence)
    return " ".join(parts)


def _lost_since(observed: Observed, name: str) -> datetime | None:
    """When the node stopped being Ready, if it is in ``observed`` and not Ready."""
    found = _not_ready(observed, name)
    return parse_time(found[1].get("lastTransitionTime")) if found is not None else None


def _force_moments(
    job: MPIJob, status: Mapping[str, Any], observed: Observed, config: Config
) -> list[tuple[datetime, dict[str, Any]]]:
    """(when, pod) for each worker pod of the job the flag force-deletes: on a node not Ready, while the
    job runs or once the pod is being deleted anyway (a finished job's pods that cleanPodPolicy keeps
    stay)."""
    after = config.force_delete_lost_workers_after
    if after <= 0:
        return []
    finished = cond.is_finished(cond.clean(status.get("conditions")))
    out = []
    for pod in failures.worker_pods(job, observed).values():
        if finished and not is_terminating(pod):
            continue
        since = _lost_since(observed, node_name(pod))
        if since is not None:
            out.append((add_seconds(since, after), pod))
    return out


def force_deletions(
    job: MPIJob, status: Mapping[str, Any], observed: Observed, config: Config
) -> tuple[dict[str, Any], ...]:
    """The worker pods to force-delete now (Config.force_delete_lost_workers_after)."""
    return tuple(pod for when, pod in _force_moments(job, status, observed, config) if when <= observed.now)


def next_force_deletion(
    job: MPIJob, status: Mapping[str, Any], observed: Observed, config: Config
) -> datetime | None:
    """The earliest moment a worker pod is due to be force-deleted, if one is due later."""
    later = [when for when, _ in _force_moments(job, status, observed, config) if when > observed.now]
    return min(later) if later else None
