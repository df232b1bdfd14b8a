"""The real node's configuration files: containerd, the CNI network, the kubelet, CoreDNS."""

from __future__ import annotations

import json
from pathlib import Path

from localcluster.realnode.host import (
    BRIDGE,
    BRIDGE_IP,
    CGROUP_ROOT,
    CONTAINERD_ROOT,
    POD_SUBNET,
    RUN_DIR,
    SOCKET,
    STATE,
)

CNI_CONF_DIR = RUN_DIR / "cni"
KUBELET_ROOT = RUN_DIR / "kubelet"
POD_LOGS = RUN_DIR / "pod-logs"
CLUSTER_DOMAIN = "cluster.local"
SERVICE_CIDR = "10.96.0.0/16"  # localcluster.cluster.SERVICE_CIDR


def containerd_config(sandbox_image: str) -> str:
    # restrict_oom_score_adj: this machine drops CAP_SYS_RESOURCE from the bounding set, so the CRI's
    # oom_score_adj=-998 for the sandbox would fail ("can't get final child's PID from pipe").
    return f"""\
version = 2
root = "{CONTAINERD_ROOT}"
state = "{STATE / "containerd"}"
disabled_plugins = [
  "io.containerd.internal.v1.opt",
  "io.containerd.snapshotter.v1.aufs",
  "io.containerd.snapshotter.v1.btrfs",
  "io.containerd.snapshotter.v1.devmapper",
  "io.containerd.snapshotter.v1.zfs",
  "io.containerd.tracing.processor.v1.otlp",
]

[grpc]
  address = "{SOCKET}"

[ttrpc]
  address = "{SOCKET}.ttrpc"

[metrics]
  address = ""

[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "{sandbox_image}"
  restrict_oom_score_adj = true
  # Pod network namespaces under our state dir, not the machine's /run/netns (others bind-mount it).
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
    conf_dir = "{CNI_CONF_DIR}"
"""


def cni_conflist() -> str:
    net = {
        "cniVersion": "1.0.0",
        "name": "mpijob-node",
        "plugins": [
            {
                "type": "bridge",
                "bridge": BRIDGE,
                "isGateway": True,
                "ipMasq": False,  # nothing is routed past the host
                "hairpinMode": True,
                "ipam": {
                    "type": "host-local",
                    "ranges": [[{"subnet": str(POD_SUBNET), "gateway": BRIDGE_IP}]],
                    # Only the Service range is routed (to the host, which DNATs the API's address).
                    "routes": [{"dst": SERVICE_CIDR}],
                    "dataDir": str(RUN_DIR / "cni-ipam"),
                },
            }
        ],
    }
    return json.dumps(net, indent=2) + "\n"


def kubelet_config(*, ca: Path, serving_cert: Path, serving_key: Path, resolv_conf: Path) -> str:
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
        "address": BRIDGE_IP,
        "port": 10250,
        "readOnlyPort": 0,
        "healthzBindAddress": "127.0.0.1",
        "healthzPort": 10248,
        "cgroupDriver": "cgroupfs",
        "cgroupRoot": f"/{CGROUP_ROOT}",
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
        "nodeStatusUpdateFrequency": "5s",
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
