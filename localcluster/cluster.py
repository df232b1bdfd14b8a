"""Start and stop a local control plane: L1 (etcd + kube-apiserver) or L2 (+ controller-manager,
scheduler, kwok with fake nodes)."""

from __future__ import annotations

import atexit
import contextlib
import json
import os
import shutil
import signal
import ssl
import tempfile
import time
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

import attrs

from localcluster import pki
from localcluster.binaries import STAGES_DIR, find_bin_dir, find_kwok_bin
from localcluster.nodes import DEFAULT_CAPACITY, node_manifest, node_ready, write_kwok_config
from localcluster.processes import Proc, free_port, http_ok, spawn

if TYPE_CHECKING:
    from kubernetes.client import ApiClient

Tier = Literal["l1", "l2", "real"]  # real: L2 with real nodes (kubelet + containerd), all in a sandbox
STATE_FILE = "state.json"
# Written nowhere because of --endpoint-reconciler-type=none, but the apiserver needs a non-loopback
# address and must not depend on the machine having a default route (TEST-NET-3 documentation address).
ADVERTISE_ADDRESS = "203.0.113.1"
SERVICE_CIDR = "10.96.0.0/16"
POD_CIDR = "10.244.0.0/16"
# Kubernetes' own gang scheduling (the Workload API, alpha in 1.35): on in every local cluster, so
# --gang-scheduling=kubernetes meets a real kube-scheduler that enforces it.
WORKLOAD_API = "scheduling.k8s.io/v1alpha1"
WORKLOAD_GATES = "--feature-gates=GenericWorkload=true,GangScheduling=true"
WORKLOAD_RUNTIME_CONFIG = f"--runtime-config={WORKLOAD_API}=true"


AUDIT_POLICY = """\
apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: [RequestReceived]
rules:
  - level: RequestResponse
    resources: [{group: coordination.k8s.io, resources: [leases]}]
    verbs: [create, update, patch]
  - level: Request
    userGroups: [system:serviceaccounts]
    verbs: [create]
  - level: Metadata
    userGroups: [system:serviceaccounts]
    verbs: [update, patch, delete, deletecollection]
  - level: Metadata
    resources: [{group: "", resources: [pods]}]
    verbs: [delete, deletecollection]
  - level: None
"""


class StartupError(RuntimeError):
    """A component did not become ready; the message carries the tail of its log."""


@attrs.define
class ClusterSpec:
    tier: Tier = "l1"
    nodes: int = 2  # kwok fake nodes (L2 only)
    node_capacity: dict[str, str] = attrs.field(factory=lambda: dict(DEFAULT_CAPACITY))
    startup_timeout: float = 120.0
    # kube-apiserver audit log (JSON lines, logs/audit.log): the writes of ServiceAccounts (creates with
    # their body, other writes as metadata), pod deletes by anyone (metadata) and every Lease write with
    # its body (who holds it, when)
    audit: bool = False
    audit_policy: str = AUDIT_POLICY  # or rbacuse's, which also hold the operator's reads
    # extra kube-apiserver flags (benchmarks: e.g. a small --max-requests-inflight to load it)
    apiserver_args: tuple[str, ...] = ()
    # the images the real nodes get (tier "real"; None: every image localcluster.images builds)
    node_images: tuple[str, ...] | None = None
    real_nodes: int = 1  # tier "real"


_live: set[LocalCluster] = set()


@atexit.register
def _stop_all() -> None:
    for cluster in list(_live):
        cluster.stop()


class LocalCluster:
    """One control plane. Use as a context manager, or start()/stop(); `detached` processes outlive us."""

    def __init__(
        self,
        spec: ClusterSpec | None = None,
        *,
        work_dir: Path | None = None,
        bin_dir: Path | None = None,
        detached: bool = False,
        keep_work_dir: bool = False,
        sandboxed: bool = False,
        apiserver_port: int | None = None,
    ) -> None:
        self.spec = spec or ClusterSpec()
        self.work_dir = work_dir or Path(tempfile.mkdtemp(prefix=f"mpijob-{self.spec.tier}-"))
        self.bin_dir = bin_dir
        self.detached = detached
        self.keep_work_dir = keep_work_dir
        # Tier "real": the control plane of localcluster.sandbox.RealCluster, run inside its sandbox.
        self.sandboxed = sandboxed
        self.apiserver_port = apiserver_port
        self.procs: list[Proc] = []
        self.server = ""
        self.ports: dict[str, int] = {}
        self._apiserver_argv: list[str] = []
        self.kubelet_client_flags: list[str] = []

    def __hash__(self) -> int:
        return id(self)

    # -- paths -------------------------------------------------------------------------------------------
    @property
    def pki_dir(self) -> Path:
        return self.work_dir / "pki"

    @property
    def kubeconfig(self) -> Path:
        return self.work_dir / "admin.kubeconfig"

    @property
    def state_file(self) -> Path:
        # Inside the sandbox the PIDs are the sandbox's own: never in the file the machine's `down` reads.
        return self.work_dir / ("sandbox-state.json" if self.sandboxed else STATE_FILE)

    @property
    def log_dir(self) -> Path:
        return self.work_dir / "logs"

    @property
    def audit_log(self) -> Path:
        return self.log_dir / "audit.log"

    # -- lifecycle ---------------------------------------------------------------------------------------
    def __enter__(self) -> LocalCluster:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def start(self) -> LocalCluster:
        if self.bin_dir is None:
            self.bin_dir = find_bin_dir()
        self.work_dir.mkdir(parents=True, exist_ok=True)
        if not self.detached:
            _live.add(self)
        try:
            self._start_components()
            self.write_state()
        except BaseException:
            self.stop(keep_logs=True)
            raise
        return self

    def _start_components(self) -> None:
        if self.spec.tier == "real" and not self.sandboxed:
            raise StartupError("tier real runs in its sandbox: use localcluster.sandbox.RealCluster")
        self._write_pki()
        self._start_etcd()
        self._start_apiserver()
        if self.spec.tier in ("l2", "real"):
            self._start_controllers()
            # Tests add fake nodes to an L2 cluster at will; a real node's cluster has none unless asked.
            if self.spec.tier == "l2" or self.spec.nodes:
                self._start_kwok()
            self._wait_for_default_service_account()

    def stop(self, *, keep_logs: bool = False) -> None:
        """Stop every process (reverse start order) and remove the work dir (only the logs stay if asked)."""
        for proc in reversed(self.procs):
            proc.stop()
        self.procs = []
        _live.discard(self)
        if keep_logs or self.keep_work_dir:
            shutil.rmtree(self.work_dir / "etcd-data", ignore_errors=True)
            self.state_file.unlink(missing_ok=True)
        else:
            shutil.rmtree(self.work_dir, ignore_errors=True)

    # -- state dir (detached clusters) -------------------------------------------------------------------
    def write_state(self) -> Path:
        state = {
            "tier": self.spec.tier,
            "server": self.server,
            "kubeconfig": str(self.kubeconfig),
            "bin_dir": str(self.bin_dir),
            "ports": self.ports,
            "procs": [
                {"name": p.name, "pid": p.pid, "started": p.started, "log": str(p.log)} for p in self.procs
            ],
        }
        self.state_file.write_text(json.dumps(state, indent=2) + "\n")
        return self.state_file

    @classmethod
    def from_state(cls, work_dir: Path) -> LocalCluster:
        state = json.loads((work_dir / STATE_FILE).read_text())
        cluster = cls(ClusterSpec(tier=state["tier"]), work_dir=work_dir, bin_dir=Path(state["bin_dir"]))
        cluster.server = state["server"]
        cluster.ports = state["ports"]
        cluster.procs = [
            Proc(name=p["name"], pid=p["pid"], started=p["started"], log=Path(p["log"]))
            for p in state["procs"]
        ]
        return cluster

    # -- client side -------------------------------------------------------------------------------------
    def env(self) -> dict[str, str]:
        """Environment for kubectl and clients: KUBECONFIG and the bin dir first in PATH."""
        return {"KUBECONFIG": str(self.kubeconfig), "PATH": f"{self.bin_dir}{os.pathsep}{os.environ['PATH']}"}

    def api_client(self) -> ApiClient:
        """A new kubernetes.client.ApiClient as admin (close it when done)."""
        from kubernetes import config

        return config.new_client_from_config(config_file=str(self.kubeconfig))

    def write_user_kubeconfig(
        self, user: str, groups: tuple[str, ...] = (), path: Path | None = None
    ) -> Path:
        """Issue a client certificate for `user`/`groups` and write a kubeconfig for it.

        For "system:serviceaccount:<ns>:<name>" the ServiceAccount groups are added, so RBAC bindings to
        that ServiceAccount apply exactly as for a token of the real ServiceAccount.
        """
        all_groups = list(groups)
        if user.startswith("system:serviceaccount:"):
            namespace = user.split(":")[2]
            all_groups += ["system:serviceaccounts", f"system:serviceaccounts:{namespace}"]
        ca = pki.CertificateAuthority.load(self.pki_dir / "ca.crt", self.pki_dir / "ca.key")
        cert, key = ca.issue(user, tuple(dict.fromkeys(all_groups)), client=True)
        safe = user.replace(":", "_")
        path = path or self.work_dir / "users" / f"{safe}.kubeconfig"
        return pki.write_kubeconfig(
            path, server=self.server, ca_pem=ca.cert_pem, cert_pem=cert, key_pem=key, user=user
        )

    def rss_bytes(self) -> int:
        return sum(p.rss_bytes() for p in self.procs)

    # -- extra components and nodes on a running cluster ---------------------------------------------------
    def spawn_component(self, name: str, argv: list[str]) -> Proc:
        """Start one more process with the cluster's (e.g. Kueue): logged to logs/<name>.log, stopped by
        `stop()` (first, being the newest) and recorded in the state file for `down`."""
        proc = self.spawn(name, argv)
        if self.detached:
            self.write_state()
        return proc

    def stop_component(self, proc: Proc) -> None:
        """Stop a process started by spawn_component, by its PID, before the cluster stops."""
        proc.stop()
        self.procs = [p for p in self.procs if p is not proc]
        if self.detached:
            self.write_state()

    def add_nodes(self, bodies: list[dict[str, Any]], timeout: float = 60.0) -> list[str]:
        """Create more kwok nodes (localcluster.nodes.fake_node) and wait until they are Ready (L2)."""
        from kubernetes import client

        with contextlib.closing(self.api_client()) as api:
            core = client.CoreV1Api(api)
            names = []
            for body in bodies:
                core.create_node(body)
                names.append(body["metadata"]["name"])
            deadline = time.monotonic() + timeout
            while True:
                ready = {
                    n.metadata.name
                    for n in core.list_node().items
                    if node_ready(api.sanitize_for_serialization(n))
                }
                if set(names) <= ready:
                    return names
                if time.monotonic() > deadline:
                    raise StartupError(f"nodes not Ready after {timeout:.0f}s: {sorted(set(names) - ready)}")
                time.sleep(0.1)

    # -- components --------------------------------------------------------------------------------------
    def _bin(self, name: str) -> str:
        assert self.bin_dir is not None
        return str(self.bin_dir / name)

    def spawn(self, name: str, argv: list[str]) -> Proc:
        """Start a process logged to logs/<name>.log and stopped with the cluster."""
        proc = spawn(name, argv, self.log_dir / f"{name}.log", detached=self.detached)
        self.procs.append(proc)
        return proc

    def _write_pki(self) -> None:
        ca = pki.CertificateAuthority.create()
        ca.write(self.pki_dir)
        names = (
            "127.0.0.1",
            "localhost",
            "10.96.0.1",
            "kubernetes",
            "kubernetes.default",
            "kubernetes.default.svc",
        )
        cert, key = ca.issue("kube-apiserver", server_names=names)
        pki._write_pair(self.pki_dir, "apiserver", cert, key)
        pki.write_service_account_keys(self.pki_dir)
        if self.spec.tier == "real":
            self.kubelet_client_flags = pki.kubelet_client_flags(ca, self.pki_dir)
        cert, key = ca.issue("admin", ("system:masters",), client=True)
        pki._write_pair(self.pki_dir, "admin", cert, key)
        self.ports["apiserver"] = self.apiserver_port or free_port()
        self.server = f"https://127.0.0.1:{self.ports['apiserver']}"
        pki.write_kubeconfig(
            self.kubeconfig, server=self.server, ca_pem=ca.cert_pem, cert_pem=cert, key_pem=key, user="admin"
        )

    def _start_etcd(self) -> None:
        client, peer = free_port(), free_port()
        self.ports.update(etcd=client, etcd_peer=peer)
        client_url, peer_url = f"http://127.0.0.1:{client}", f"http://127.0.0.1:{peer}"
        proc = self.spawn(
            "etcd",
            [
                self._bin("etcd"),
                "--name=localcluster",
                f"--data-dir={self.work_dir / 'etcd-data'}",
                f"--listen-client-urls={client_url}",
                f"--advertise-client-urls={client_url}",
                f"--listen-peer-urls={peer_url}",
                f"--initial-advertise-peer-urls={peer_url}",
                f"--initial-cluster=localcluster={peer_url}",
                "--unsafe-no-fsync=true",  # test data only; much faster on slow disks
                "--quota-backend-bytes=2147483648",
                "--log-level=warn",
            ],
        )
        self.wait_for(proc, lambda: http_ok(f"{client_url}/health"), "etcd /health")

    def _start_apiserver(self) -> None:
        p = self.pki_dir
        argv = [
            self._bin("kube-apiserver"),
            f"--etcd-servers=http://127.0.0.1:{self.ports['etcd']}",
            "--bind-address=127.0.0.1",
            f"--secure-port={self.ports['apiserver']}",
            f"--advertise-address={ADVERTISE_ADDRESS}",
            "--endpoint-reconciler-type=none",
            f"--cert-dir={p}",
            f"--tls-cert-file={p / 'apiserver.crt'}",
            f"--tls-private-key-file={p / 'apiserver.key'}",
            f"--client-ca-file={p / 'ca.crt'}",
            "--service-account-issuer=https://kubernetes.default.svc.cluster.local",
            f"--service-account-key-file={p / 'sa.pub'}",
            f"--service-account-signing-key-file={p / 'sa.key'}",
            f"--service-cluster-ip-range={SERVICE_CIDR}",
            "--authorization-mode=RBAC",
            "--allow-privileged=true",
            "--profiling=false",
            # kubectl logs/exec reach a kubelet by its node IP, not by a hostname the machine cannot resolve.
            "--kubelet-preferred-address-types=InternalIP",
            WORKLOAD_GATES,
            WORKLOAD_RUNTIME_CONFIG,
            *self.kubelet_client_flags,
        ]
        if self.spec.tier == "l1":
            # No controller-manager creates the "default" ServiceAccount (as in envtest).
            argv.append("--disable-admission-plugins=ServiceAccount")
        if self.spec.audit:
            policy = self.work_dir / "audit-policy.yaml"
            policy.write_text(self.spec.audit_policy)
            self.log_dir.mkdir(parents=True, exist_ok=True)
            argv += [
                f"--audit-policy-file={policy}",
                f"--audit-log-path={self.audit_log}",
                "--audit-log-format=json",
                "--audit-log-mode=blocking",  # each event on disk before the answer: ground truth
                "--audit-log-maxsize=0",
            ]
        argv += self.spec.apiserver_args
        self._apiserver_argv = argv
        proc = self.spawn("kube-apiserver", argv)
        ctx = self.admin_ssl()
        self.wait_for(proc, lambda: http_ok(f"{self.server}/readyz", ctx), "kube-apiserver /readyz")

    @contextlib.contextmanager
    def paused(self, name: str) -> Iterator[Proc]:
        """The cluster's process ``name`` stopped (SIGSTOP to the PID recorded when it was started) inside
        the block, and continued (SIGCONT) when it ends, however it ends."""
        proc = self.proc(name)
        proc.pause()
        try:
            yield proc
        finally:
            proc.resume()

    def restart_apiserver(self, *, kill: bool = True, down: float = 0.0) -> float:
        """SIGKILL (or SIGTERM) kube-apiserver, wait ``down`` s, start it again on the same port and etcd;
        returns the seconds from the kill until it is ready again."""
        old = self.proc("kube-apiserver")
        began = time.monotonic()
        if kill:
            old.stop(timeout=0)
        else:
            old.stop()
        time.sleep(down)
        proc = spawn("kube-apiserver", self._apiserver_argv, old.log, detached=self.detached, append=True)
        self.procs[self.procs.index(old)] = proc
        ctx = self.admin_ssl()
        self.wait_for(proc, lambda: http_ok(f"{self.server}/readyz", ctx), "kube-apiserver /readyz")
        if self.detached:
            self.write_state()
        return time.monotonic() - began

    def _start_controllers(self) -> None:
        kc, p = str(self.kubeconfig), self.pki_dir
        common = [
            f"--kubeconfig={kc}",
            f"--authentication-kubeconfig={kc}",
            f"--authorization-kubeconfig={kc}",
            "--bind-address=127.0.0.1",
            "--leader-elect=false",
        ]
        self.ports.update(controller_manager=free_port(), scheduler=free_port())
        (self.work_dir / "kcm").mkdir(exist_ok=True)
        (self.work_dir / "scheduler").mkdir(exist_ok=True)
        kcm = self.spawn(
            "kube-controller-manager",
            [
                self._bin("kube-controller-manager"),
                *common,
                f"--secure-port={self.ports['controller_manager']}",
                f"--cert-dir={self.work_dir / 'kcm'}",
                f"--service-account-private-key-file={p / 'sa.key'}",
                f"--root-ca-file={p / 'ca.crt'}",
                f"--cluster-signing-cert-file={p / 'ca.crt'}",
                f"--cluster-signing-key-file={p / 'ca.key'}",
                f"--service-cluster-ip-range={SERVICE_CIDR}",
                "--use-service-account-credentials=false",
                # A lost real node shows as NotReady 10 s after its last heartbeat, not 40 s.
                *(
                    ["--node-monitor-period=1s", "--node-monitor-grace-period=10s"]
                    if self.spec.tier == "real"
                    else []
                ),
            ],
        )
        sched = self.spawn(
            "kube-scheduler",
            [
                self._bin("kube-scheduler"),
                *common,
                f"--secure-port={self.ports['scheduler']}",
                f"--cert-dir={self.work_dir / 'scheduler'}",
                WORKLOAD_GATES,
            ],
        )
        insecure = ssl.create_default_context()
        insecure.check_hostname = False
        insecure.verify_mode = ssl.CERT_NONE  # self-signed serving certs of the components themselves
        self.wait_for(
            kcm,
            lambda: http_ok(f"https://127.0.0.1:{self.ports['controller_manager']}/healthz", insecure),
            "kube-controller-manager /healthz",
        )
        self.wait_for(
            sched,
            lambda: http_ok(f"https://127.0.0.1:{self.ports['scheduler']}/healthz", insecure),
            "kube-scheduler /healthz",
        )

    def _start_kwok(self) -> None:
        from kubernetes import client

        config = write_kwok_config(self.work_dir / "kwok.yaml", STAGES_DIR)
        kwok = self.spawn(
            "kwok",
            [
                str(find_kwok_bin()),
                f"--kubeconfig={self.kubeconfig}",
                f"--config={config}",
                "--manage-all-nodes=false",
                "--manage-nodes-with-annotation-selector=kwok.x-k8s.io/node=fake",
                "--node-lease-duration-seconds=40",
                f"--cidr={POD_CIDR}",
                "--node-ip=10.88.0.1",
            ],
        )
        with contextlib.closing(self.api_client()) as api:
            core = client.CoreV1Api(api)
            names = []
            for i in range(self.spec.nodes):
                body = node_manifest(i, self.spec.node_capacity)
                core.create_node(body)
                names.append(body["metadata"]["name"])

            def nodes_ready() -> bool:
                ready = {
                    n.metadata.name
                    for n in core.list_node().items
                    if node_ready(api.sanitize_for_serialization(n))
                }
                return set(names) <= ready

            self.wait_for(kwok, nodes_ready, f"{len(names)} kwok nodes Ready")

    def _wait_for_default_service_account(self) -> None:
        """The controller-manager's ServiceAccount controller works: pods can be created."""
        from kubernetes import client

        with contextlib.closing(self.api_client()) as api:
            core = client.CoreV1Api(api)
            self.wait_for(
                self.proc("kube-controller-manager"),
                lambda: has_default_service_account(core, "default"),
                "ServiceAccount default/default",
            )

    # -- helpers -----------------------------------------------------------------------------------------
    def proc(self, name: str) -> Proc:
        """The process started under `name`."""
        return next(p for p in self.procs if p.name == name)

    def admin_ssl(self) -> ssl.SSLContext:
        ctx = ssl.create_default_context(cafile=str(self.pki_dir / "ca.crt"))
        ctx.load_cert_chain(str(self.pki_dir / "admin.crt"), str(self.pki_dir / "admin.key"))
        return ctx

    def wait_for(self, proc: Proc, check: Callable[[], bool], what: str) -> None:
        """Poll `check` until it holds; StartupError if `proc` exits or the startup timeout passes."""
        deadline = time.monotonic() + self.spec.startup_timeout
        while time.monotonic() < deadline:
            if not proc.alive():
                raise StartupError(f"{proc.name} exited while waiting for {what}:\n{proc.log_tail()}")
            if check():
                return
            time.sleep(0.1)
        raise StartupError(
            f"timed out after {self.spec.startup_timeout}s waiting for {what}:\n{proc.log_tail()}"
        )


def has_default_service_account(core: Any, namespace: str) -> bool:
    """Pods are rejected until the ServiceAccount controller has created "default" in their namespace."""
    from kubernetes import client

    try:
        core.read_namespaced_service_account("default", namespace)
    except client.ApiException:
        return False
    return True


def wait_for_default_service_account(core: Any, namespace: str, timeout: float = 30.0) -> None:
    """Block until pods can be created in a new namespace (L2 only: L1 has no controllers)."""
    deadline = time.monotonic() + timeout
    while not has_default_service_account(core, namespace):
        if time.monotonic() > deadline:
            raise TimeoutError(f"no ServiceAccount {namespace}/default after {timeout:.0f}s")
        time.sleep(0.1)


def crd_served(api: ApiClient, name: str) -> bool:
    """Established=True and the resource listed by discovery (which lags a moment behind Established).
    A CRD fresh from an apply has no status at all yet: that is "not yet", not an error."""
    from kubernetes import client

    try:
        crd = client.ApiextensionsV1Api(api).read_custom_resource_definition(name)
    except client.ApiException as err:
        if err.status == 404:
            return False
        raise
    conditions = (crd.status.conditions if crd.status else None) or []
    if not any(c.type == "Established" and c.status == "True" for c in conditions):
        return False
    version = next((v.name for v in crd.spec.versions if v.served), None)
    if version is None:
        return False
    try:
        served = client.CustomObjectsApi(api).get_api_resources(crd.spec.group, version)
    except client.ApiException as err:
        if err.status == 404:
            return False
        raise
    return any(r.name == crd.spec.names.plural for r in (served.resources if served else None) or [])


def wait_for_crds(api: ApiClient, names: Iterable[str], timeout: float = 60.0) -> None:
    """Block until every named CRD can be used (replaces `kubectl wait --for=condition=Established`,
    which fails at once on a CRD that has no status yet)."""
    deadline = time.monotonic() + timeout
    for name in names:
        while not crd_served(api, name):
            if time.monotonic() > deadline:
                raise TimeoutError(f"CRD {name} not Established and served after {timeout:.0f}s")
            time.sleep(0.1)


@contextlib.contextmanager
def terminate_on_signals() -> Iterator[None]:
    """Turn SIGTERM/SIGHUP into KeyboardInterrupt so `finally`/teardown code runs (default would just die)."""

    def handler(signum: int, frame: object) -> None:
        raise KeyboardInterrupt(f"signal {signum}")

    previous = {}
    for sig in (signal.SIGTERM, signal.SIGHUP):
        if signal.getsignal(sig) in (signal.SIG_DFL, None):
            previous[sig] = signal.signal(sig, handler)
    try:
        yield
    finally:
        for sig, old in previous.items():
            signal.signal(sig, old)
