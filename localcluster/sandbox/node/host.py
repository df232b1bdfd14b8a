"""Can this machine run real nodes, and the one directory they keep on it between runs (the prepared
image stores). Everything else of a node lives in the sandbox and goes with it."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

HOME = Path(os.environ.get("MPIJOB_NODE_HOME", "/var/lib/mpijob-node"))
# What the kubelet's setupKernelTunables wants for the whole machine (with them an oops would panic this
# VM): served to it as files in its node's mount namespace, where /proc/sys is read-only besides.
KUBELET_SYSCTLS = {
    "vm/overcommit_memory": "1",
    "vm/panic_on_oom": "0",
    "kernel/panic": "10",
    "kernel/panic_on_oops": "1",
    "kernel/keys/root_maxkeys": "1000000",
    "kernel/keys/root_maxbytes": "25000000",
}


class NodeUnavailable(RuntimeError):
    """This machine cannot run real nodes; the message says why (one line)."""


def check_host() -> None:
    """Raise NodeUnavailable with the first reason this machine cannot run real nodes."""
    if os.geteuid() != 0:
        raise NodeUnavailable("not root (namespaces, cgroups, the kubelet and containerd need root)")
    if "overlay" not in Path("/proc/filesystems").read_text():
        raise NodeUnavailable("the kernel has no overlayfs (containerd's snapshotter)")
    probe = subprocess.run(
        ["unshare", "--net", "--mount", "--uts", "--pid", "--fork", "--mount-proc", "true"],
        capture_output=True,
        check=False,
    )
    if probe.returncode != 0:
        raise NodeUnavailable(f"cannot create namespaces: {probe.stderr.decode().strip()}")
    for tool in ("containerd", "runc", "ctr", "debootstrap", "ip", "unshare"):
        if shutil.which(tool) is None:
            raise NodeUnavailable(f"{tool} not installed (run deploy/local/node-packages.sh)")
    if not Path("/usr/lib/cni/bridge").exists():
        raise NodeUnavailable("CNI plugins missing (run deploy/local/node-packages.sh)")
