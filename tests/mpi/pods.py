"""One pod's first container, run as the kubelet and a container runtime would, without containers.

From the rendered pod spec: the user (`runAsUser`/`runAsGroup`/`fsGroup`, else the image's USER), the
environment (image ENV, then HOSTNAME and HOME, then the container's `env` with `$(VAR)` expansion), the
argv (command/args over the image's entrypoint), the working directory and the volume mounts. The process
runs in the pod's network namespace (`ip netns exec`), in a private mount and UTS namespace (`unshare`)
where it gets the pod's hostname, the image layer over /etc, /home and /root (overlayfs, per-pod upper
directory), the pod's hosts and resolv.conf, a private /tmp and /dev/shm, and its volumes.
"""

from __future__ import annotations

import re
import shlex
import subprocess
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import attrs

from tests.mpi.images import LAYERED_DIRS, Image
from tests.mpi.volumes import Unsupported, lay_out

_VAR_REF = re.compile(r"\$\$|\$\(([A-Za-z_][A-Za-z0-9_.-]*)\)")


def expand(text: str, env: Mapping[str, str]) -> str:
    """Kubernetes `$(VAR)` expansion: unknown references stay as written, `$$` escapes a `$`."""

    def sub(m: re.Match[str]) -> str:
        if m.group(0) == "$$":
            return "$"
        return env.get(m.group(1), m.group(0))

    return _VAR_REF.sub(sub, text)


def _field_ref(path: str, pod: Mapping[str, Any], pod_ip: str) -> str:
    meta = pod["metadata"]
    values = {
        "metadata.name": meta["name"],
        "metadata.namespace": meta.get("namespace", "default"),
        "status.podIP": pod_ip,
        "spec.nodeName": "l3-node",
        "spec.serviceAccountName": pod["spec"].get("serviceAccountName", "default"),
    }
    if path.startswith("metadata.labels['"):
        return (meta.get("labels") or {}).get(path[len("metadata.labels['") : -2], "")
    if path not in values:
        raise Unsupported(f"env fieldRef {path!r} is not emulated")
    return values[path]


@attrs.frozen
class Process:
    uid: int
    gid: int
    groups: tuple[int, ...]
    env: dict[str, str]
    argv: list[str]
    workdir: str


def resolve(pod: Mapping[str, Any], image: Image, hostname: str, pod_ip: str) -> Process:
    spec = pod["spec"]
    c = spec["containers"][0]
    psc, csc = spec.get("securityContext") or {}, c.get("securityContext") or {}
    uid = csc.get("runAsUser", psc.get("runAsUser", image.uid))
    gid = csc.get("runAsGroup", psc.get("runAsGroup", uid if uid == image.uid else 0))
    groups = [g for g in (psc.get("fsGroup"),) if g is not None] + list(psc.get("supplementalGroups") or [])
    home = "/root" if uid == 0 else (image.home if uid == image.uid else "/")
    env = dict(image.env())
    env["HOSTNAME"] = hostname
    env["HOME"] = home
    for e in c.get("env") or []:
        if "value" in e or "valueFrom" not in e:
            env[e["name"]] = expand(e.get("value", ""), env)
        elif "fieldRef" in e["valueFrom"]:
            env[e["name"]] = _field_ref(e["valueFrom"]["fieldRef"]["fieldPath"], pod, pod_ip)
        else:
            raise Unsupported(f"env {e['name']}: valueFrom {sorted(e['valueFrom'])} is not emulated")
    if c.get("envFrom"):
        raise Unsupported("envFrom is not emulated")
    command, args = c.get("command"), c.get("args")
    if command:
        argv = list(command) + list(args or [])
    elif args:
        argv = list(args)  # the L3 images have no ENTRYPOINT
    else:
        raise Unsupported(f"container {c['name']!r} has neither command nor args, and the image no CMD")
    argv = [expand(a, env) for a in argv]
    return Process(
        uid=uid, gid=gid, groups=tuple(groups), env=env, argv=argv, workdir=c.get("workingDir", "/")
    )


def _layered_root(path: str) -> str | None:
    return next((d for d in LAYERED_DIRS if path == d or path.startswith(d + "/")), None)


@attrs.define
class PodRuntime:
    """Files of one pod on the host, under workdir/<pod name>."""

    pod: dict
    image: Image
    layer: Path
    dir: Path
    ns: str
    ip: str

    @property
    def name(self) -> str:
        return self.pod["metadata"]["name"]

    @property
    def hostname(self) -> str:
        return self.pod["spec"].get("hostname") or self.name

    def script(self, objects: Mapping[tuple[str, str], dict], proc: Process) -> str:
        """The shell script run as root inside the pod's namespaces; it ends by exec'ing the container."""
        spec, c = self.pod["spec"], self.pod["spec"]["containers"][0]
        lines = ["set -eu", f"hostname {shlex.quote(self.hostname)}"]
        for d in LAYERED_DIRS:
            upper, work = self.dir / "upper" / d.strip("/"), self.dir / "work" / d.strip("/")
            upper.mkdir(parents=True)
            work.mkdir(parents=True)
            st = Path(d).stat()
            upper.chmod(st.st_mode & 0o7777)
            lower = f"{self.layer / d.strip('/')}:{d}" if (self.layer / d.strip("/")).is_dir() else d
            if (self.layer / d.strip("/")).is_dir():
                st = (self.layer / d.strip("/")).stat()
                upper.chmod(st.st_mode & 0o7777)
            lines.append(f"mount -t overlay overlay -o lowerdir={lower},upperdir={upper},workdir={work} {d}")
        etc = Path("/etc/netns") / self.ns
        lines += [
            f"mount --bind {etc / 'hosts'} /etc/hosts",
            f"mount --bind {etc / 'resolv.conf'} /etc/resolv.conf",
            "mount -t tmpfs -o mode=1777 tmpfs /tmp",
            "mount -t tmpfs -o mode=1777 tmpfs /dev/shm",
        ]
        volumes = {v["name"]: v for v in spec.get("volumes") or []}
        fs_group = (spec.get("securityContext") or {}).get("fsGroup")
        for i, m in enumerate(c.get("volumeMounts") or []):
            if m.get("subPath"):
                raise Unsupported("volumeMounts[].subPath is not emulated")
            path = m["mountPath"]
            if not Path(path).exists() and _layered_root(path) is None:
                raise Unsupported(
                    f"mount path {path} does not exist on the host and is outside {LAYERED_DIRS}"
                )
            vol = volumes[m["name"]]
            staged = lay_out(vol, objects, self.dir / "volumes" / f"{i}-{m['name']}", fs_group)
            ro = m.get("readOnly") or "secret" in vol or "configMap" in vol
            lines += [f"mkdir -p {shlex.quote(path)}", f"mount --bind {staged} {shlex.quote(path)}"]
            if ro:
                lines.append(f"mount -o remount,bind,ro {shlex.quote(path)}")
        groups = ",".join(map(str, proc.groups)) if proc.groups else ""
        priv = ["setpriv", f"--reuid={proc.uid}", f"--regid={proc.gid}"]
        priv += [f"--groups={groups}"] if groups else ["--clear-groups"]
        env = [f"{k}={v}" for k, v in proc.env.items()]
        lines += [
            f"cd {shlex.quote(proc.workdir)}",
            "exec " + shlex.join([*priv, "--", "env", "-i", *env, *proc.argv]),
        ]
        return "\n".join(lines) + "\n"

    def start(self, objects: Mapping[tuple[str, str], dict], attempt: int) -> subprocess.Popen[bytes]:
        proc = resolve(self.pod, self.image, self.hostname, self.ip)
        if attempt == 0:
            script = self.script(objects, proc)
            (self.dir / "start.sh").write_text(script)
        out = open(self.dir / f"stdout.{attempt}", "wb")  # noqa: SIM115 (owned by the Popen)
        err = open(self.dir / f"stderr.{attempt}", "wb")  # noqa: SIM115
        argv = ["ip", "netns", "exec", self.ns, "unshare", "--mount", "--uts", "--propagation", "private"]
        argv += ["/bin/sh", str(self.dir / "start.sh")]
        return subprocess.Popen(
            argv, stdout=out, stderr=err, stdin=subprocess.DEVNULL, start_new_session=True
        )
