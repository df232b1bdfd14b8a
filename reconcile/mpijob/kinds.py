"""The kinds this operator owns or writes beyond Kubernetes' own, added to the runtime's table of kinds
(paths, metric labels) when this package is imported, as a client-go scheme is built by the packages
that own its types."""

from __future__ import annotations

from reconcile.runtime.kube import Resource, register

MPIJOB = Resource("kubeflow.org/v2beta1", "MPIJob", "mpijobs")
VOLCANO_PODGROUP = Resource("scheduling.volcano.sh/v1beta1", "PodGroup", "podgroups")
SCHED_PLUGINS_PODGROUP = Resource("scheduling.x-k8s.io/v1alpha1", "PodGroup", "podgroups")

OWN = (MPIJOB, VOLCANO_PODGROUP, SCHED_PLUGINS_PODGROUP)
register(*OWN)
