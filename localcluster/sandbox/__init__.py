"""The real tier's sandbox: the control plane, CoreDNS, the API forwarder and every real node live in
namespaces of their own inside one memory cgroup, so that nothing a node does reaches the machine."""

from localcluster.sandbox.layout import NODE_LABEL, node_address
from localcluster.sandbox.node.host import NodeUnavailable, check_host
from localcluster.sandbox.seal import RealCluster, VerbFailed

__all__ = ["NODE_LABEL", "NodeUnavailable", "RealCluster", "VerbFailed", "check_host", "node_address"]
