"""A real node (kubelet + containerd + CoreDNS) for the local cluster's tier "real"."""

from localcluster.realnode.host import NODE_LABEL, NODE_NAME, NodeUnavailable, check_host
from localcluster.realnode.node import NodeBusy, RealNode, node_rss_bytes

__all__ = [
    "NODE_LABEL",
    "NODE_NAME",
    "NodeBusy",
    "NodeUnavailable",
    "RealNode",
    "check_host",
    "node_rss_bytes",
]
