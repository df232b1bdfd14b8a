"""Kueue as a process against a local L2 cluster, installed as a real install has it.

deploy/local/build.sh builds Kueue and renders its `config/default` (what `kubectl apply -k` installs) into
`install.yaml`. `Kueue.start()` applies that install with three changes for a process on loopback: the
Deployment, Services and APIServices are left out (the binary runs here, the visibility server is off),
every webhook (admission and CRD conversion) gets `url: https://127.0.0.1:<port>/<path>` with the cluster
CA as `caBundle`, and the serving certificate is issued by the cluster's CA (localcluster's PKI, so Kueue's
internal cert manager is off). Kueue runs under its own ServiceAccount's RBAC, from that install.
"""

from __future__ import annotations

import base64
import contextlib
import copy
import os
import socket
import ssl
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import TYPE_CHECKING, Any

import attrs
import yaml

from localcluster import pki
from localcluster.binaries import built_dir
from localcluster.cluster import wait_for_crds
from localcluster.kubectl import KubectlFailed, kubectl
from localcluster.processes import Proc, free_port

if TYPE_CHECKING:
    from localcluster.cluster import LocalCluster

NAMESPACE = "kueue-system"
SERVICE_ACCOUNT = "kueue-controller-manager"
USER = f"system:serviceaccount:{NAMESPACE}:{SERVICE_ACCOUNT}"
FRAMEWORKS = ("batch/job", "kubeflow.org/mpijob")
METRICS_CERT_DIR = Path("/etc/kueue/metrics/certs")
WEBHOOK_CONFIGS = ("kueue-mutating-webhook-configuration", "kueue-validating-webhook-configuration")
# Parts of a real install a process on loopback does not use.
_LEFT_OUT = {"Deployment", "Service", "APIService", "Secret"}


def find_kueue_dir() -> Path:
    """The finished Kueue build (bin/kueue, install.yaml)."""
    return built_dir("--print-kueue-dir", "Kueue", ("bin/kueue", "install.yaml"))


@attrs.define
class KueueSpec:
    frameworks: tuple[str, ...] = FRAMEWORKS
    # VisibilityOnDemand serves an aggregated API on a fixed port with delegated auth: not needed here.
    feature_gates: dict[str, bool] = attrs.field(factory=lambda: {"VisibilityOnDemand": False})
    # Merged over the Configuration of the real install (e.g. {"waitForPodsReady": {...}}).
    config: dict[str, Any] = attrs.field(factory=dict)
    log_level: int = 2
    startup_timeout: float = 90.0


class Kueue:
    """Kueue's manager as a child process of `cluster` (stopped with it, or by `stop()`, by PID)."""

    def __init__(
        self, cluster: LocalCluster, spec: KueueSpec | None = None, kueue_dir: Path | None = None
    ) -> None:
        self.cluster = cluster
        self.spec = spec or KueueSpec()
        self.kueue_dir = kueue_dir
        self.work_dir = cluster.work_dir / "kueue"
        self.proc: Proc | None = None
        self.ports: dict[str, int] = {}

    @property
    def log(self) -> Path:
        return self.cluster.log_dir / "kueue.log"

    # -- lifecycle ---------------------------------------------------------------------------------------
    def start(self) -> Kueue:
        if self.kueue_dir is None:
            self.kueue_dir = find_kueue_dir()
        self.work_dir.mkdir(parents=True, exist_ok=True)
        self.ports = {"webhook": free_port(), "health": free_port(), "metrics": free_port()}
        docs = [d for d in yaml.safe_load_all((self.kueue_dir / "install.yaml").read_text()) if d]
        cert_dir = self._write_cert("webhook", self.work_dir / "certs")
        etc_upper = self.work_dir / "etc-upper"
        self._write_cert("metrics", etc_upper / METRICS_CERT_DIR.relative_to("/etc"))
        config = self._write_config(manager_config(docs), cert_dir)
        objects = install_objects(docs, self.webhook_base, self._ca_bundle())
        self._apply(objects)
        # Kueue sets up its indexes at start and exits if a CRD is not served yet.
        with contextlib.closing(self.cluster.api_client()) as api:
            crds = [o["metadata"]["name"] for o in objects if o["kind"] == "CustomResourceDefinition"]
            wait_for_crds(api, crds)
        kubeconfig = self.cluster.write_user_kubeconfig(USER)
        gates = ",".join(
            f"{k}={'true' if v else 'false'}" for k, v in sorted(self.spec.feature_gates.items())
        )
        argv = [
            *_with_private_etc(etc_upper, self.work_dir / "etc-work"),
            str(self.kueue_dir / "bin" / "kueue"),
            f"--config={config}",
            f"--kubeconfig={kubeconfig}",
            f"--zap-log-level={self.spec.log_level}",
        ]
        if gates:
            argv.append(f"--feature-gates={gates}")
        self.proc = self.cluster.spawn_component("kueue", argv)
        self._wait_ready()
        return self

    def stop(self) -> None:
        """Stop the process by PID, then remove the admission webhooks: with failurePolicy Fail they would
        reject every MPIJob and Job once nothing serves them. CRDs and queues stay."""
        if self.proc is not None:
            self.cluster.stop_component(self.proc)
            self.proc = None
        with contextlib.suppress(KubectlFailed):
            self._kubectl(
                "delete",
                "--ignore-not-found",
                f"mutatingwebhookconfiguration/{WEBHOOK_CONFIGS[0]}",
                f"validatingwebhookconfiguration/{WEBHOOK_CONFIGS[1]}",
            )

    def alive(self) -> bool:
        return self.proc is not None and self.proc.alive()

    def log_tail(self, lines: int = 40) -> str:
        return self.proc.log_tail(lines) if self.proc else ""

    @property
    def webhook_base(self) -> str:
        return f"https://127.0.0.1:{self.ports['webhook']}"

    # -- pieces ------------------------------------------------------------------------------------------
    def _ca_bundle(self) -> str:
        return base64.b64encode((self.cluster.pki_dir / "ca.crt").read_bytes()).decode()

    def _write_cert(self, name: str, cert_dir: Path) -> Path:
        """tls.crt/tls.key for 127.0.0.1, issued by the cluster's CA (the apiserver trusts it as caBundle)."""
        ca = pki.CertificateAuthority.load(self.cluster.pki_dir / "ca.crt", self.cluster.pki_dir / "ca.key")
        cert, key = ca.issue(f"kueue-{name}", server_names=("127.0.0.1", "localhost"))
        cert_dir.mkdir(parents=True, exist_ok=True)
        (cert_dir / "tls.crt").write_bytes(cert)
        (cert_dir / "tls.key").touch(mode=0o600)
        (cert_dir / "tls.key").write_bytes(key)
        return cert_dir

    def _write_config(self, base: dict[str, Any], cert_dir: Path) -> Path:
        cfg = copy.deepcopy(base)
        cfg["namespace"] = NAMESPACE
        cfg["health"] = {"healthProbeBindAddress": f"127.0.0.1:{self.ports['health']}"}
        cfg["metrics"] = {"bindAddress": f"127.0.0.1:{self.ports['metrics']}"}
        cfg["webhook"] = {"port": self.ports["webhook"], "host": "127.0.0.1", "certDir": str(cert_dir)}
        cfg["leaderElection"] = {"leaderElect": False}
        cfg["internalCertManagement"] = {"enable": False}
        cfg["integrations"] = {"frameworks": list(self.spec.frameworks)}
        cfg.update(copy.deepcopy(self.spec.config))
        path = self.work_dir / "controller_manager_config.yaml"
        path.write_text(yaml.safe_dump(cfg, sort_keys=False))
        return path

    def _apply(self, objects: list[dict[str, Any]]) -> None:
        path = self.work_dir / "install.yaml"
        path.write_text(yaml.safe_dump_all(objects, sort_keys=False))
        self._kubectl(
            "apply", "--server-side", "--force-conflicts", "--field-manager=localcluster", "-f", str(path)
        )

    def _kubectl(self, *args: str) -> str:
        return kubectl(self.cluster, *args).stdout

    def _wait_ready(self) -> None:
        assert self.proc is not None
        ctx = ssl.create_default_context(cafile=str(self.cluster.pki_dir / "ca.crt"))
        ready = f"http://127.0.0.1:{self.ports['health']}/readyz"
        deadline = time.monotonic() + self.spec.startup_timeout
        while time.monotonic() < deadline:
            if not self.proc.alive():
                raise RuntimeError(f"kueue exited during startup:\n{self.proc.log_tail()}")
            # /readyz includes the webhook server; the TLS check proves the apiserver can verify it too.
            if _http_status(ready) == 200 and _tls_ok(self.ports["webhook"], ctx):
                return
            time.sleep(0.2)
        raise RuntimeError(f"kueue not ready after {self.spec.startup_timeout}s:\n{self.proc.log_tail()}")


def _with_private_etc(upper: Path, work: Path) -> list[str]:
    """argv prefix: run the command in its own mount namespace with an overlay on /etc holding `upper`.

    Without internal cert management Kueue reads its metrics certificate from the fixed path
    /etc/kueue/metrics/certs (mounted from a Secret in a real install). The overlay shows it there to the
    Kueue process only; the machine's /etc is never written. Needs root, or a user namespace otherwise.
    """
    work.mkdir(parents=True, exist_ok=True)
    userns = [] if os.geteuid() == 0 else ["--user", "--map-root-user"]
    script = 'mount -t overlay overlay -o "lowerdir=/etc,upperdir=$1,workdir=$2" /etc && shift 2 && exec "$@"'
    return [
        "unshare",
        *userns,
        "--mount",
        "--propagation",
        "private",
        "--",
        "sh",
        "-c",
        script,
        "sh",
        str(upper),
        str(work),
    ]


def manager_config(docs: list[dict[str, Any]]) -> dict[str, Any]:
    """The Configuration of the real install (the manager's ConfigMap)."""
    for doc in docs:
        if doc.get("kind") == "ConfigMap" and "controller_manager_config.yaml" in (doc.get("data") or {}):
            return dict(yaml.safe_load(doc["data"]["controller_manager_config.yaml"]))
    raise ValueError("no kueue manager ConfigMap in install.yaml")


def install_objects(docs: list[dict[str, Any]], webhook_base: str, ca_bundle: str) -> list[dict[str, Any]]:
    """The real install for a process at `webhook_base`: service references become URLs with `caBundle`."""
    out = []
    for doc in docs:
        if doc.get("kind") in _LEFT_OUT or doc.get("kind") == "ConfigMap":
            continue
        doc = copy.deepcopy(doc)
        if doc["kind"] in ("MutatingWebhookConfiguration", "ValidatingWebhookConfiguration"):
            for hook in doc.get("webhooks") or []:
                hook["clientConfig"] = _url_config(hook["clientConfig"], webhook_base, ca_bundle)
        elif doc["kind"] == "CustomResourceDefinition":
            webhook = ((doc["spec"].get("conversion") or {}).get("webhook")) or {}
            if "clientConfig" in webhook:
                webhook["clientConfig"] = _url_config(webhook["clientConfig"], webhook_base, ca_bundle)
        elif doc["kind"] == "RoleBinding" and doc["metadata"].get("namespace") == "kube-system":
            continue  # the visibility server's auth reader: the visibility server is off
        out.append(doc)
    return out


def _url_config(client_config: dict[str, Any], base: str, ca_bundle: str) -> dict[str, Any]:
    path = (client_config.get("service") or {}).get("path", "")
    return {"url": f"{base}{path}", "caBundle": ca_bundle}


def _http_status(url: str) -> int:
    try:
        with urllib.request.urlopen(url, timeout=2) as resp:
            return int(resp.status)
    except urllib.error.HTTPError as err:
        return int(err.code)
    except OSError:
        return 0


def _tls_ok(port: int, ctx: ssl.SSLContext) -> bool:
    try:
        with (
            socket.create_connection(("127.0.0.1", port), timeout=2) as sock,
            ctx.wrap_socket(sock, server_hostname="127.0.0.1"),
        ):
            return True
    except (OSError, ssl.SSLError):
        return False
