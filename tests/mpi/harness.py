"""L3 harness: runs render's output for one MPIJob the way a node and the cluster would, without containers.

It plays the API server (rendered objects become live objects with uid and status), the kubelet (starts each
pod's first container, runs readiness probes, restarts the launcher as its Job allows), cluster DNS (a pod's
record `<hostname>.<subdomain>.<ns>.svc.<domain>` exists once the pod is Ready, or at once with
`publishNotReadyAddresses`; each pod resolves names through its search list) and the Job controller (the
launcher Job's pod, its restarts within backoffLimit, Complete/Failed). Everything it knows about the job it
takes from `render.render` output: the harness never builds MPI env vars, hostfiles or mounts itself.

Known simplifications: every restart of the launcher reuses its pod (restartPolicy OnFailure semantics, also
for Never); the restart back-off is a parameter (Kubernetes uses 10 s doubling, tests may shorten it).
"""

from __future__ import annotations

import copy
import re
import secrets
import shutil
import subprocess
import time
from collections.abc import Callable, Mapping
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import attrs

from tests.mpi.images import IMAGES, Image, build_layer
from tests.mpi.netns import Network, leftovers, sh
from tests.mpi.pods import PodRuntime

WORK_ROOT = Path("/var/tmp/mpijob-l3")  # not /tmp: pods get a private /tmp
RANK_LINE = re.compile(r"^RANK (\d+) SIZE (\d+) HOST (\S+)$", re.M)


def _ts() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


@attrs.define
class Attempt:
    started: float
    ended: float | None = None
    rc: int | None = None
    stdout: str = ""
    stderr: str = ""


@attrs.define
class PodState:
    rt: PodRuntime
    start_at: float
    proc: subprocess.Popen[bytes] | None = None
    attempts: list[Attempt] = attrs.field(factory=list)
    ready: bool = False
    ready_since: float | None = None
    next_probe: float = 0.0
    phase: str = "Pending"


@attrs.define
class RunResult:
    job: str
    succeeded: bool
    attempts: list[Attempt]
    timeline: list[tuple[float, str]]
    hostfile: str
    worker_logs: dict[str, str]

    def ranks(self, attempt: int = -1) -> dict[int, str]:
        """rank -> hostname, from the probe's own output in the given launcher attempt."""
        out = self.attempts[attempt].stdout if self.attempts else ""
        return {int(m.group(1)): m.group(3) for m in RANK_LINE.finditer(out)}

    def table(self, attempt: int = -1) -> str:
        rows = [f"  rank {r} -> {h}" for r, h in sorted(self.ranks(attempt).items())]
        return "\n".join([f"{self.job}: rank -> host", *rows]) if rows else f"{self.job}: no rank output"

    def describe(self) -> str:
        lines = [f"== {self.job}: {'Succeeded' if self.succeeded else 'Failed'}", "timeline:"]
        lines += [f"  +{t:6.2f}s {what}" for t, what in self.timeline]
        for i, a in enumerate(self.attempts):
            lines.append(f"launcher attempt {i}: rc={a.rc}")
            lines += [f"  out| {ln}" for ln in a.stdout.splitlines()[-20:]]
            lines += [f"  err| {ln}" for ln in a.stderr.splitlines()[-20:]]
        return "\n".join(lines)


def _now() -> datetime:
    return datetime.now(UTC)


class Cluster:
    """One MPIJob on a fake node. Use as a context manager: teardown always runs."""

    def __init__(
        self,
        mpijob: dict[str, Any],
        *,
        config: Any = None,
        images: Mapping[str, Image] = IMAGES,
        start_delays: Mapping[str, float] | None = None,
        restart_backoff: float = 10.0,
        tamper: Callable[[dict[str, Any]], None] | None = None,
        render_fn: Callable[..., list[dict[str, Any]]] | None = None,
    ) -> None:
        import render  # the real render package; tests may not pass another one in CI

        self.render = render
        self.render_fn = render_fn or render.render
        self.config = config if config is not None else render.Config()
        self.mpijob = mpijob
        meta = mpijob.setdefault("metadata", {})
        meta.setdefault("namespace", "default")
        meta.setdefault("uid", f"uid-{secrets.token_hex(6)}")
        meta.setdefault("creationTimestamp", _ts())
        self.job, self.ns = meta["name"], meta["namespace"]
        self.images = images
        self.start_delays = dict(start_delays or {})
        self.restart_backoff = restart_backoff
        self.tamper = tamper
        self.run_id = secrets.token_hex(3)
        self.dir = WORK_ROOT / self.run_id
        self.net: Network | None = None
        self.live: dict[tuple[str, str], dict[str, Any]] = {}
        self.pods: dict[str, PodState] = {}
        self.layers: dict[str, Path] = {}
        self.timeline: list[tuple[float, str]] = []
        self.t0 = time.monotonic()
        self.ssh_key = render.generate_ssh_key()

    # -- lifecycle -------------------------------------------------------------------------------------
    def __enter__(self) -> Cluster:
        self.dir.mkdir(parents=True)
        self.net = Network.create(self.run_id)
        return self

    def __exit__(self, *exc: object) -> None:
        problems = self.teardown()
        if problems and exc[0] is None:
            raise RuntimeError(f"teardown left: {problems}")

    def teardown(self) -> list[str]:
        problems: list[str] = []
        if self.net is not None:
            problems += self.net.teardown()
        for st in self.pods.values():
            if st.proc is not None and st.proc.poll() is None:
                st.proc.kill()
            if st.proc is not None:
                st.proc.wait(timeout=10)
        shutil.rmtree(self.dir, ignore_errors=True)
        problems += leftovers(self.run_id)
        if self.dir.exists():
            problems.append(f"{self.dir} not removed")
        return problems

    def log(self, what: str) -> None:
        self.timeline.append((time.monotonic() - self.t0, what))

    # -- the API server ----------------------------------------------------------------------------------
    def _observed(self) -> Any:
        return self.render.Observed.from_objects(
            list(self.live.values()), now=_now(), fresh_ssh_key=self.ssh_key
        )

    def _apply(self, obj: dict[str, Any]) -> None:
        obj = copy.deepcopy(obj)
        if self.tamper is not None:
            self.tamper(obj)  # on every apply, so updates keep the test's change too
        key = (obj["kind"], obj["metadata"]["name"])
        if key in self.live:
            if obj["kind"] not in ("Pod", "Job", "Secret"):
                cur = self.live[key]
                for field in ("data", "spec"):
                    if field in obj:
                        cur[field] = obj[field]
            return
        obj["metadata"] = {
            **obj["metadata"],
            "uid": f"uid-{secrets.token_hex(6)}",
            "creationTimestamp": _ts(),
        }
        self.live[key] = obj
        self.log(f"created {obj['kind']} {key[1]}")
        if obj["kind"] == "Pod":
            self._admit(obj)
        elif obj["kind"] == "Job":
            if obj["spec"].get("suspend"):
                return
            self._admit(self._launcher_pod(obj))

    def _launcher_pod(self, job: dict[str, Any]) -> dict[str, Any]:
        tmpl = job["spec"]["template"]
        name = f"{job['metadata']['name']}-{secrets.token_hex(3)[:5]}"
        labels = {
            **(tmpl["metadata"].get("labels") or {}),
            "batch.kubernetes.io/job-name": job["metadata"]["name"],
        }
        pod = {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {
                "name": name,
                "namespace": self.ns,
                "labels": labels,
                "uid": f"uid-{secrets.token_hex(6)}",
                "ownerReferences": [
                    {
                        "apiVersion": "batch/v1",
                        "kind": "Job",
                        "name": job["metadata"]["name"],
                        "uid": job["metadata"]["uid"],
                        "controller": True,
                    }
                ],
            },
            "spec": tmpl["spec"],
        }
        self.live[("Pod", name)] = pod
        return pod

    # -- the kubelet -----------------------------------------------------------------------------------
    def _admit(self, pod: dict[str, Any]) -> None:
        assert self.net is not None
        c = pod["spec"]["containers"][0]
        image = self.images.get(c.get("image", ""))
        if image is None:
            raise LookupError(f"pod {pod['metadata']['name']}: no L3 image profile {c.get('image')!r}")
        if image.ref not in self.layers:
            self.layers[image.ref] = build_layer(
                image, self.dir / "layers" / re.sub(r"[^A-Za-z0-9.-]", "_", image.ref)
            )
        name = pod["metadata"]["name"]
        pn = self.net.add_pod(name)
        pod["status"] = {"phase": "Pending", "podIP": pn.ip, "conditions": []}
        rt = PodRuntime(
            pod=pod,
            image=image,
            layer=self.layers[image.ref],
            dir=self.dir / "pods" / name,
            ns=pn.ns,
            ip=pn.ip,
        )
        rt.dir.mkdir(parents=True)
        delay = self.start_delays.get(rt.hostname, 0.0)
        self.pods[name] = PodState(rt=rt, start_at=time.monotonic() + delay)
        self._write_dns()

    def _start(self, st: PodState) -> None:
        n = len(st.attempts)
        st.proc = st.rt.start(self.live, n)
        st.attempts.append(Attempt(started=time.monotonic() - self.t0))
        st.phase = "Running"
        st.next_probe = 0.0
        self.log(f"started container of {st.rt.name} (attempt {n})")

    @staticmethod
    def _probe_of(st: PodState) -> dict[str, Any] | None:
        return st.rt.pod["spec"]["containers"][0].get("readinessProbe")

    def _check_ready(self, st: PodState) -> bool:
        probe = self._probe_of(st)
        if probe is None:
            return True
        now = time.monotonic()
        started = self.t0 + st.attempts[-1].started
        if now < started + float(probe.get("initialDelaySeconds", 0)) or now < st.next_probe:
            return st.ready
        st.next_probe = now + float(probe.get("periodSeconds", 10))
        if "tcpSocket" not in probe:
            raise NotImplementedError("only tcpSocket readiness probes are emulated")
        port = probe["tcpSocket"]["port"]
        if not isinstance(port, int):
            raise NotImplementedError("named probe ports are not emulated")
        r = sh(
            "ip", "netns", "exec", st.rt.ns, "bash", "-c", f"exec 3<>/dev/tcp/{st.rt.ip}/{port}", check=False
        )
        return r.returncode == 0

    def _finish_attempt(self, st: PodState, rc: int) -> None:
        a = st.attempts[-1]
        a.ended, a.rc = time.monotonic() - self.t0, rc
        a.stdout = (st.rt.dir / f"stdout.{len(st.attempts) - 1}").read_text(errors="replace")
        a.stderr = (st.rt.dir / f"stderr.{len(st.attempts) - 1}").read_text(errors="replace")
        st.proc = None
        self.log(f"container of {st.rt.name} exited rc={rc}")

    def _is_launcher(self, st: PodState) -> bool:
        labels = st.rt.pod["metadata"].get("labels") or {}
        return "batch.kubernetes.io/job-name" in labels

    def _kubelet_tick(self) -> None:
        now = time.monotonic()
        for st in self.pods.values():
            if st.phase in ("Succeeded", "Failed"):
                continue
            if st.proc is None and now >= st.start_at:
                self._start(st)
            if st.proc is not None and (rc := st.proc.poll()) is not None:
                self._finish_attempt(st, rc)
                restart = st.rt.pod["spec"].get("restartPolicy", "Always")
                if rc == 0 and restart != "Always":
                    st.phase = "Succeeded"
                elif restart == "Never" or (
                    self._is_launcher(st) and len(st.attempts) > self._backoff_limit()
                ):
                    st.phase = "Failed"
                else:
                    # CrashLoopBackOff: the pod stays Running, the container comes back after a back-off.
                    st.start_at = now + self.restart_backoff * 2 ** (len(st.attempts) - 1)
                    self.log(f"{st.rt.name}: back-off {st.start_at - now:.1f}s before restart")
            ready = st.proc is not None and self._check_ready(st)
            if ready != st.ready:
                st.ready = ready
                self.log(f"{st.rt.name} Ready={ready}")
            self._write_status(st)
        self._write_dns()
        self._job_status()

    def _backoff_limit(self) -> int:
        job = self.live.get(("Job", f"{self.job}-launcher"))
        return int((job or {}).get("spec", {}).get("backoffLimit", 6))

    def _write_status(self, st: PodState) -> None:
        status = st.rt.pod["status"]
        status["phase"] = st.phase
        status["conditions"] = [
            {"type": "Ready", "status": "True" if st.ready else "False", "lastTransitionTime": _ts()},
            {"type": "ContainersReady", "status": "True" if st.ready else "False"},
        ]

    def _job_status(self) -> None:
        job = self.live.get(("Job", f"{self.job}-launcher"))
        if job is None:
            return
        launchers = [st for st in self.pods.values() if self._is_launcher(st)]
        status: dict[str, Any] = {"active": sum(st.phase in ("Pending", "Running") for st in launchers)}
        if any(st.phase == "Succeeded" for st in launchers):
            status.update(succeeded=1, completionTime=_ts())
            status["conditions"] = [{"type": "Complete", "status": "True", "lastTransitionTime": _ts()}]
        elif any(st.phase == "Failed" for st in launchers):
            status["failed"] = 1
            status["conditions"] = [
                {
                    "type": "Failed",
                    "status": "True",
                    "reason": "BackoffLimitExceeded",
                    "message": "Job has reached the specified backoff limit",
                    "lastTransitionTime": _ts(),
                }
            ]
        job["status"] = status

    # -- cluster DNS -----------------------------------------------------------------------------------
    def _domain(self) -> str:
        return getattr(self.config, "cluster_domain", "") or "cluster.local"

    def _records(self) -> dict[str, str]:
        """fqdn -> ip, as the headless Service's endpoints publish them."""
        out: dict[str, str] = {}
        for (kind, _), svc in self.live.items():
            if kind != "Service":
                continue
            sel = svc["spec"].get("selector") or {}
            not_ready = bool(svc["spec"].get("publishNotReadyAddresses"))
            for st in self.pods.values():
                pod = st.rt.pod
                labels = pod["metadata"].get("labels") or {}
                if not sel or any(labels.get(k) != v for k, v in sel.items()):
                    continue
                if pod["spec"].get("subdomain") != svc["metadata"]["name"] or not pod["spec"].get("hostname"):
                    continue
                if st.phase in ("Succeeded", "Failed") or not (st.ready or not_ready):
                    continue
                fqdn = f"{pod['spec']['hostname']}.{pod['spec']['subdomain']}.{self.ns}.svc.{self._domain()}"
                out[fqdn] = st.rt.ip
        return out

    def _searches(self, pod: dict[str, Any]) -> list[str]:
        d, spec = self._domain(), pod["spec"]
        base = (
            [f"{self.ns}.svc.{d}", f"svc.{d}", d] if spec.get("dnsPolicy", "ClusterFirst") != "None" else []
        )
        extra = list((spec.get("dnsConfig") or {}).get("searches") or [])
        return base + [s for s in extra if s not in base]

    def _write_dns(self) -> None:
        assert self.net is not None
        records = self._records()
        for name, st in self.pods.items():
            pod, searches = st.rt.pod, self._searches(st.rt.pod)
            lines = ["127.0.0.1\tlocalhost", "::1\tlocalhost ip6-localhost ip6-loopback"]
            own = st.rt.hostname
            if pod["spec"].get("subdomain"):
                own = f"{st.rt.hostname}.{pod['spec']['subdomain']}.{self.ns}.svc.{self._domain()}\t{own}"
            lines.append(f"{st.rt.ip}\t{own}")  # the kubelet's own-pod entry
            for fqdn, ip in sorted(records.items()):
                names = [fqdn] + [fqdn[: -len(s) - 1] for s in searches if fqdn.endswith("." + s)]
                lines.append(f"{ip}\t" + " ".join(dict.fromkeys(names)))
            resolv = f"search {' '.join(searches)}\nnameserver 127.0.0.1\noptions ndots:5\n"
            self.net.write_dns(name, "\n".join(lines) + "\n", resolv)

    # -- the run ---------------------------------------------------------------------------------------
    def launcher_state(self) -> PodState | None:
        return next((st for st in self.pods.values() if self._is_launcher(st)), None)

    def run(self, timeout: float = 120.0) -> RunResult:
        deadline = time.monotonic() + timeout
        while True:
            desired = self.render_fn(self.mpijob, self._observed(), self.config)
            for obj in desired:
                self._apply(obj)
            self._kubelet_tick()
            st = self.launcher_state()
            if st is not None and st.phase in ("Succeeded", "Failed"):
                break
            if time.monotonic() > deadline:
                self.log("harness timeout")
                if st is not None and st.proc is not None:
                    self.net.kill_pod(st.rt.name)  # type: ignore[union-attr]
                    self._finish_attempt(st, st.proc.wait(timeout=10) if st.proc else -1)
                break
            time.sleep(0.1)
        cm = self.live.get(("ConfigMap", f"{self.job}-config"), {})
        logs = {}
        for name, ws in self.pods.items():
            if not self._is_launcher(ws):
                logs[name] = "".join(
                    p.read_text(errors="replace") for p in sorted(ws.rt.dir.glob("std*")) if p.is_file()
                )
        return RunResult(
            job=self.job,
            succeeded=st is not None and st.phase == "Succeeded",
            attempts=st.attempts if st is not None else [],
            timeline=list(self.timeline),
            hostfile=(cm.get("data") or {}).get("hostfile", ""),
            worker_logs=logs,
        )
