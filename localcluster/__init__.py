"""A local Kubernetes control plane for tests: etcd and kube-apiserver (L1), plus kube-controller-manager,
kube-scheduler and kwok fake nodes (L2), from binaries built by deploy/local/build.sh."""

from localcluster.binaries import BinariesMissing, find_bin_dir
from localcluster.cluster import ClusterSpec, LocalCluster, StartupError, terminate_on_signals
from localcluster.nodes import DEFAULT_CAPACITY, NODE_PREFIX

__all__ = [
    "DEFAULT_CAPACITY",
    "NODE_PREFIX",
    "BinariesMissing",
    "ClusterSpec",
    "LocalCluster",
    "StartupError",
    "find_bin_dir",
    "terminate_on_signals",
]
