"""Addresses, names and paths of the sandbox and its nodes: one private /16, nothing routed out of it.

sandbox   10.77.0.1/24 on its bridge, 10.96.0.1 (the `kubernetes` Service) on loopback,
          blackhole 10.77.0.0/16, 10.77.N.0/24 via node N; no default route
node N    eth0 10.77.0.(10+N)/24, default via 10.77.0.1; pods 10.77.N.0/24 on its cni0
"""

from __future__ import annotations

import ipaddress
from pathlib import Path

import attrs

NETWORK = ipaddress.ip_network("10.77.0.0/16")
BRIDGE = "sbx0"
BRIDGE_IP = "10.77.0.1"
BRIDGE_PREFIX = 24
# A bridge takes the lowest MAC of its ports unless it has its own: a restarted node's new veth would
# change the gateway's MAC under every other node (stale ARP entries cut them off for a minute).
BRIDGE_MAC = "02:77:00:00:00:01"
KUBERNETES_SERVICE_IP = "10.96.0.1"
SERVICE_CIDR = "10.96.0.0/16"
CLUSTER_DOMAIN = "cluster.local"
MAX_NODES = 200
NODE_PREFIX = "real-node"
# Labels every real node carries (placement of tests and examples).
NODE_LABEL = "node.mpijob.dev/real"


@attrs.frozen
class NodeAddress:
    """Everything that makes node `index` (1-based) the same node after a restart."""

    index: int

    @property
    def name(self) -> str:
        return f"{NODE_PREFIX}-{self.index}"

    @property
    def ip(self) -> str:
        return f"10.77.0.{10 + self.index}"

    @property
    def mac(self) -> str:
        return f"02:77:00:00:01:{self.index:02x}"

    @property
    def veth(self) -> str:
        return f"veth-n{self.index}"  # the sandbox's end; the node's end is its eth0

    @property
    def pod_subnet(self) -> ipaddress.IPv4Network:
        return ipaddress.IPv4Network(f"10.77.{self.index}.0/24")

    @property
    def pod_gateway(self) -> str:
        return str(self.pod_subnet.network_address + 1)


def node_address(index: int) -> NodeAddress:
    if not 1 <= index <= MAX_NODES:
        raise ValueError(f"node index {index} outside 1..{MAX_NODES}")
    return NodeAddress(index)


def node_index(name: str) -> int:
    """The index of a node name this layout gives out; ValueError for any other name."""
    prefix, _, number = name.rpartition("-")
    if prefix != NODE_PREFIX or not number.isdigit():
        raise ValueError(f"{name!r} is not a real node's name ({NODE_PREFIX}-N)")
    return node_address(int(number)).index


@attrs.frozen
class Paths:
    """The files of one sandbox, all under its work dir (which the machine and the sandbox both see)."""

    work_dir: Path

    @property
    def spec(self) -> Path:
        return self.work_dir / "sandbox.json"  # what the machine asks the sandbox to run

    @property
    def ready(self) -> Path:
        return self.work_dir / "sandbox-ready.json"  # written by the sandbox once everything is up

    @property
    def failed(self) -> Path:
        return self.work_dir / "sandbox-failed.txt"

    @property
    def api_socket(self) -> Path:
        return self.work_dir / "api.sock"  # the apiserver, relayed through the file system

    @property
    def control_socket(self) -> Path:
        return self.work_dir / "control.sock"  # node verbs

    def node_dir(self, name: str) -> Path:
        return self.work_dir / "nodes" / name
