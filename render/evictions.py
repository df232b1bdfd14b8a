"""Pods Kubernetes takes away from a job: what the job's Restarting condition (MPIJobEvicted) says.

Kubernetes marks such a pod with the ``DisruptionTarget`` condition before it deletes it; the condition's
reason says who: ``EvictionByEvictionAPI`` (``kubectl drain``, an autoscaler), ``PreemptionByScheduler``,
``DeletionByTaintManager`` (a NoExecute taint, a lost node's after its toleration), ``DeletionByPodGC``,
``TerminationByKubelet``. The kubelet's own eviction for node pressure leaves the pod Failed with reason
``Evicted`` and no deletion. A deleted pod is gone seconds later, so what is said here lives on in the
condition, not in the pod.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import attrs

from render.names import listed
from render.observed import (
    KIND_NODE,
    JobView,
    Observed,
    condition,
    condition_true,
    is_terminating,
    node_name,
    phase,
)

DISRUPTION_TARGET = "DisruptionTarget"
MAX_KUBELET_MESSAGE = 200


@attrs.frozen
class Eviction:
    """A pod of the job being taken away, and where from."""

    pod: str
    launcher: bool
    node: str  # "" when the pod was never bound
    why: str  # DisruptionTarget's reason, or the kubelet's (Evicted) with its message
    cordoned: bool  # the node is marked unschedulable (a drain cordons it first)


def is_evicted(pod: Mapping[str, Any]) -> bool:
    """Being taken away: marked DisruptionTarget, or Failed by the kubelet's eviction."""
    if condition_true(pod, DISRUPTION_TARGET):
        return True
    return phase(pod) == "Failed" and (pod.get("status") or {}).get("reason") == "Evicted"


def is_disrupted(pod: Mapping[str, Any]) -> bool:
    """Deleted by Kubernetes for a reason outside the pod (a drain, preemption, a taint): its end is not
    the workload's failure."""
    return is_terminating(pod) and condition_true(pod, DISRUPTION_TARGET)


def _why(pod: Mapping[str, Any]) -> str:
    reason = (condition(pod, DISRUPTION_TARGET) or {}).get("reason")
    if condition_true(pod, DISRUPTION_TARGET) and reason:
        return str(reason)
    status = pod.get("status") or {}
    reason = str(status.get("reason") or "")
    message = " ".join(str(status.get("message") or "").split())
    if len(message) > MAX_KUBELET_MESSAGE:
        message = message[: MAX_KUBELET_MESSAGE - 3] + "..."
    return f"{reason}: {message}" if reason and message else reason or "evicted"


def _cordoned(observed: Observed, node: str) -> bool:
    body = observed.get(KIND_NODE, node) if node else None
    return body is not None and bool((body.get("spec") or {}).get("unschedulable"))


def evictions(replicas: int, v: JobView, observed: Observed) -> tuple[Eviction, ...]:
    """The job's worker (index < replicas) and launcher pods being taken away, workers first."""
    pods = [(p, False) for i, p in sorted(v.workers.items()) if i < replicas]
    pods += [(p, True) for p in v.launcher_pods]
    out = []
    for pod, launcher in pods:
        if not is_evicted(pod):
            continue
        node = node_name(pod)
        out.append(
            Eviction(
                pod=str((pod.get("metadata") or {}).get("name", "")),
                launcher=launcher,
                node=node,
                why=_why(pod),
                cordoned=_cordoned(observed, node),
            )
        )
    return tuple(out)


def _one(e: Eviction) -> str:
    where = f" from node {e.node}" if e.node else ""
    cordoned = ", the node is cordoned" if e.cordoned else ""
    return f"pod {e.pod}{where} ({e.why}{cordoned})"


def describe(evicted: tuple[Eviction, ...], replicas: int) -> str:
    """Upstream's "k/n workers are evicted", then each pod with its node and why; the launcher too."""
    workers = [e for e in evicted if not e.launcher]
    heads = [f"{len(workers)}/{replicas} workers are evicted"] if workers else []
    if len(workers) < len(evicted):
        heads.append("the launcher is evicted")
    shown = listed([_one(e) for e in evicted], sep="; ")
    return f"{' and '.join(heads)}: {shown}. They are being replaced."
