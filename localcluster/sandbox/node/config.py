"""A real node's configuration files: containerd, the CNI network, the kubelet; and CoreDNS's."""

from __future__ import annotations

import json
from pathlib import Path

from localcluster.sandbox.layout import (
    BRIDGE_IP,
    CLUSTER_DOMAIN,
    NETWORK,
    SERVICE_CIDR,
    NodeAddress,
)

# Inside a node's own mount namespace: the usual paths, private to the node (see nodeinit).
CONTAINERD_ROOT = Path("/var/lib/containerd")
CONTAINERD_STATE = Path("/run/containerd")
SOCKET = CONTAINERD_STATE / "containerd.sock"
KUBELET_ROOT = Path("/var/lib/kubelet")
CNI_STATE = Path("/var/lib/cni")
POD_LOGS = Path("/var/log/pods")
CNI_BRIDGE = "cni0"


def containerd_config(
    sandbox_image: str, *, cni_conf_dir: Path, root: Path = CONTAINERD_ROOT, state: Path = CONTAINERD_STATE
) -> str:
    # restrict_oom_score_adj: this machine drops CAP_SYS_RESOURCE from the bounding set, so the CRI's
    # oom_score_adj=-998 for the sandbox would fail ("can't get final child's PID from pipe").
    return f"""\
version = 2
root = "{root}"
state = "{state}"
disabled_plugins = [
  "io.containerd.internal.v1.opt",
  "io.containerd.snapshotter.v1.aufs",
  "io.containerd.snapshotter.v1.btrfs",
  "io.containerd.snapshotter.v1.devmapper",
  "io.containerd.snapshotter.v1.zfs",
  "io.containerd.tracing.processor.v1.otlp",
]

[grpc]
  address = "{state / "containerd.sock"}"

[ttrpc]
  address = "{state / "containerd.sock"}.ttrpc"

[metrics]
  address = ""

[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "{sandbox_image}"
  restrict_oom_score_adj = true
  netns_mounts_under_state_dir = true
  enable_selinux = false
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "overlayfs"
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        SystemdCgroup = false
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "/usr/lib/cni"
    conf_dir = "{cni_conf_dir}"
"""


def cni_conflist(node: NodeAddress) -> str:
    net = {
        "cniVersion": "1.0.0",
        "name": "mpijob-node",
        "plugins": [
            {
                "type": "bridge",
                "bridge": CNI_BRIDGE,
                "isGateway": True,
                "ipMasq": False,  # pods keep their addresses across nodes: routes, no NAT
                "hairpinMode": True,
                "ipam": {
                    "type": "host-local",
                    "ranges": [[{"subnet": str(node.pod_subnet), "gateway": node.pod_gateway}]],
                    # Other nodes' pods, CoreDNS and the `kubernetes` Service; nothing else exists.
                    "routes": [{"dst": str(NETWORK)}, {"dst": SERVICE_CIDR}],
                    "dataDir": str(CNI_STATE / "networks"),
                },
            },
            {"type": "loopback"},
        ],
    }
    return json.dumps(net, indent=2) + "\n"


def kubelet_config(
    node: NodeAddress,
    *,
    ca: Path,
    serving_cert: Path,
    serving_key: Path,
    resolv_conf: Path,
    cgroup_root: str,
) -> str:
    cfg = {
        "apiVersion": "kubelet.config.k8s.io/v1beta1",
        "kind": "KubeletConfiguration",
        # The apiserver comes with its client certificate; nothing anonymous.
        "authentication": {
            "anonymous": {"enabled": False},
            "webhook": {"enabled": True},
            "x509": {"clientCAFile": str(ca)},
        },
        "authorization": {"mode": "Webhook"},
        "tlsCertFile": str(serving_cert),
        "tlsPrivateKeyFile": str(serving_key),
        "address": node.ip,
        "port": 10250,
        "readOnlyPort": 0,
        "healthzBindAddress": "127.0.0.1",
        "healthzPort": 10248,
        "cgroupDriver": "cgroupfs",
        "cgroupRoot": cgroup_root,  # the node's own cgroup: its pods count against its memory
        "failCgroupV1": False,  # this kind of machine has cgroup v1 hierarchies
        "failSwapOn": False,
        "containerRuntimeEndpoint": f"unix://{SOCKET}",
        "clusterDomain": CLUSTER_DOMAIN,
        "clusterDNS": [BRIDGE_IP],
        "resolvConf": str(resolv_conf),
        "makeIPTablesUtilChains": False,
        "podLogsDir": str(POD_LOGS),
        "imageGCHighThresholdPercent": 100,
        "imageGCLowThresholdPercent": 99,
        "evictionHard": {"memory.available": "100Mi", "nodefs.available": "1%", "imagefs.available": "1%"},
        "serializeImagePulls": False,
        "registerNode": True,
        "syncFrequency": "10s",
        "fileCheckFrequency": "10s",
        # A lost node shows as NotReady within seconds (the controller-manager's grace is 10 s).
        "nodeStatusUpdateFrequency": "2s",
        "nodeLeaseDurationSeconds": 8,
    }
    return json.dumps(cfg, indent=2) + "\n"


def corefile(kubeconfig: Path, health_port: int, ready_port: int) -> str:
    # Only the cluster zone is answered; every other name gets an error, nothing is forwarded. Negative
    # answers are not cached: a worker's name must resolve as soon as its pod is there.
    return f"""\
{CLUSTER_DOMAIN}:53 {{
    bind {BRIDGE_IP}
    errors
    health 127.0.0.1:{health_port}
    ready 127.0.0.1:{ready_port}
    kubernetes {CLUSTER_DOMAIN} {{
        kubeconfig {kubeconfig}
        pods insecure
    }}
    cache 30 {{
        disable denial
    }}
}}
.:53 {{
    bind {BRIDGE_IP}
    errors
}}
"""
