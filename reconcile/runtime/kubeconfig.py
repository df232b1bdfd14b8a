"""Where the API server is and how to prove who we are: an ``Endpoint`` from a kubeconfig or the pod's
ServiceAccount, as client-go's ``clientcmd`` and ``rest.InClusterConfig`` read them.

Hand-written rather than ``kubernetes.config``: importing any part of the ``kubernetes`` package imports
its generated client and every model, about 30 MiB of the operator's memory and a third of a second of
its start, for a loader the operator needs once. What it reads:

- files: ``--kubeconfig``, else each file of ``$KUBECONFIG`` (merged: the first definition of a name wins,
  the first ``current-context`` too), else the ServiceAccount in a pod (``$KUBERNETES_SERVICE_HOST``),
  else ``~/.kube/config``;
- a cluster's ``server``, ``certificate-authority(-data)``, ``insecure-skip-tls-verify``, ``proxy-url``
  (else ``$HTTPS_PROXY``/``$HTTP_PROXY`` unless ``$NO_PROXY`` names the host, a suffix or a CIDR) and
  ``tls-server-name``; a user's ``token``, ``tokenFile``, ``client-certificate(-data)``,
  ``client-key(-data)``, ``username``/``password`` and ``exec`` credential plugins (a token, renewed
  when it expires, or a client certificate); relative paths from the file's own directory.

``auth-provider`` (removed from kubectl in 1.26) is refused with what to use instead.
"""

from __future__ import annotations

import atexit
import base64
import datetime
import ipaddress
import json
import os
import shutil
import subprocess
import tempfile
import threading
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, Protocol
from urllib.request import getproxies

import attrs
import urllib3
import yaml

SERVICE_ACCOUNT = Path("/var/run/secrets/kubernetes.io/serviceaccount")
TOKEN_REREAD_SECONDS = 60.0  # client-go reads a rotated ServiceAccount token again within a minute
EXEC_RENEW_BEFORE = datetime.timedelta(seconds=10)  # an exec token is renewed this long before it expires
EXEC_TIMEOUT_SECONDS = 60.0


class ConfigError(Exception):
    """The kubeconfig or the pod's ServiceAccount cannot be used: the message says which field and why."""


class ApiClientLike(Protocol):
    configuration: Any
    rest_client: Any


@attrs.frozen
class Endpoint:
    """The API server's URL, a pool manager that makes connections to it (TLS, client certificate,
    proxy), and the ``Authorization`` header's value, asked on every request (None: none sent)."""

    host: str
    pool: urllib3.PoolManager
    authorization: Callable[[], str | None]

    @classmethod
    def of(cls, api_client: ApiClientLike) -> Endpoint:
        """The endpoint of a ``kubernetes`` ``ApiClient`` (as tests and tools build them): its host, its
        pool manager and its auth settings, asked on every request so that its refresh hook runs."""
        cfg = api_client.configuration

        def authorization() -> str | None:
            auth = cfg.auth_settings().get("BearerToken")
            return str(auth["value"]) if auth and auth["value"] else None

        return cls(cfg.host, api_client.rest_client.pool_manager, authorization)


def load(kubeconfig: str = "", master: str = "", environ: Mapping[str, str] | None = None) -> Endpoint:
    """The endpoint named by ``kubeconfig`` (a path, or paths joined by ``os.pathsep``), ``$KUBECONFIG``,
    the pod's ServiceAccount or ``~/.kube/config``, in that order; ``master`` overrides its URL."""
    env = os.environ if environ is None else environ
    if not (kubeconfig or env.get("KUBECONFIG")) and env.get("KUBERNETES_SERVICE_HOST"):
        endpoint = in_cluster(env)
    else:
        endpoint = from_kubeconfig(_paths(kubeconfig, env), env)
    return attrs.evolve(endpoint, host=master) if master else endpoint


def context_namespace(kubeconfig: str = "", environ: Mapping[str, str] | None = None) -> str:
    """The current context's namespace ("" when it names none or there is no kubeconfig)."""
    try:
        merged = _merge(_paths(kubeconfig, os.environ if environ is None else environ))
        context = _named(merged, "contexts", merged["current-context"], "context")
    except ConfigError:
        return ""
    return str(context.get("namespace") or "")


def _paths(kubeconfig: str, env: Mapping[str, str]) -> list[Path]:
    """The kubeconfig files to read: ``kubeconfig``, else ``$KUBECONFIG``, else ``~/.kube/config``."""
    paths = kubeconfig or env.get("KUBECONFIG", "")
    if not paths:
        return [Path(env.get("HOME", "~")).expanduser() / ".kube" / "config"]
    return [Path(p) for p in paths.split(os.pathsep) if p]


# -- in a pod ------------------------------------------------------------------------------------------
def in_cluster(
    environ: Mapping[str, str], directory: Path = SERVICE_ACCOUNT, reread: float = TOKEN_REREAD_SECONDS
) -> Endpoint:
    host, port = environ.get("KUBERNETES_SERVICE_HOST", ""), environ.get("KUBERNETES_SERVICE_PORT", "")
    if not host or not port:
        raise ConfigError("in a pod: KUBERNETES_SERVICE_HOST and KUBERNETES_SERVICE_PORT must both be set")
    token, ca = directory / "token", directory / "ca.crt"
    for f in (token, ca):
        if not f.is_file():
            raise ConfigError(f"in a pod: {f} is missing (is a ServiceAccount token mounted?)")
    host = f"[{host}]" if ":" in host else host
    server = f"https://{host}:{port}"
    pool = pool_manager(ca_file=str(ca), proxy=env_proxy(server, environ))
    return Endpoint(server, pool, TokenFile(token, reread))


class TokenFile:
    """A token read from a file, and read again ``reread`` seconds after (the kubelet rotates it)."""

    def __init__(self, path: Path, reread: float = TOKEN_REREAD_SECONDS) -> None:
        self.path, self.reread = path, reread
        self._token, self._read_at = "", -float("inf")
        self._lock = threading.Lock()

    def __call__(self) -> str | None:
        with self._lock:
            if time.monotonic() - self._read_at >= self.reread:
                try:
                    self._token = self.path.read_text().strip()
                    self._read_at = time.monotonic()
                except OSError:
                    if not self._token:
                        raise
        return f"Bearer {self._token}" if self._token else None


# -- a kubeconfig --------------------------------------------------------------------------------------
def from_kubeconfig(paths: list[Path], environ: Mapping[str, str] | None = None) -> Endpoint:
    merged = _merge(paths)
    where = ", ".join(map(str, paths))
    current = merged["current-context"]
    if not current:
        raise ConfigError(f"kubeconfig {where}: no current-context")
    context = _named(merged, "contexts", current, "context")
    cluster = _named(merged, "clusters", context.get("cluster", ""), "cluster")
    user = _named(merged, "users", context.get("user", ""), "user") if context.get("user") else {}
    server = str(cluster.get("server") or "")
    if not server:
        where = f"clusters[{context['cluster']}].cluster.server"
        raise ConfigError(f"kubeconfig {cluster['_file']}: {where} is empty")
    files = _Files(cluster["_file"], user.get("_file", cluster["_file"]))
    user_at = f"users[{context.get('user')}].user"
    if "auth-provider" in user:
        raise ConfigError(
            f"kubeconfig {user['_file']}: {user_at}.auth-provider is not supported (kubectl dropped it in "
            "1.26); use an exec credential plugin (client.authentication.k8s.io)"
        )
    cert_file, key_file = files.pair(user, "client-certificate", "client-key", user_at)
    authorization: Callable[[], str | None] = lambda: None  # noqa: E731
    if user.get("token"):
        token = str(user["token"])
        authorization = lambda: f"Bearer {token}"  # noqa: E731
    elif user.get("tokenFile"):
        authorization = TokenFile(_existing(files.user_path(str(user["tokenFile"])), f"{user_at}.tokenFile"))
    elif user.get("username"):
        basic = urllib3.util.make_headers(basic_auth=f"{user['username']}:{user.get('password', '')}")
        authorization = lambda: basic["authorization"]  # noqa: E731
    elif user.get("exec"):
        plugin = ExecPlugin(user["exec"], f"{user_at}.exec")
        if plugin.client_pair is not None and cert_file is None:
            cert_file, key_file = files.write_pair(*plugin.client_pair)
        authorization = plugin
    cluster_at = f"clusters[{context['cluster']}].cluster"
    pool = pool_manager(
        ca_file=files.cluster_file(cluster, "certificate-authority", cluster_at),
        verify=not cluster.get("insecure-skip-tls-verify", False),
        cert_file=cert_file,
        key_file=key_file,
        proxy=str(cluster.get("proxy-url") or "") or env_proxy(server, environ),
        server_name=str(cluster.get("tls-server-name") or ""),
    )
    return Endpoint(server, pool, authorization)


def _merge(paths: list[Path]) -> dict[str, Any]:
    """The kubeconfig files merged: the first entry of each name wins, and the first current-context."""
    merged: dict[str, Any] = {"current-context": "", "clusters": {}, "users": {}, "contexts": {}}
    found = False
    for path in paths:
        try:
            doc = yaml.safe_load(path.expanduser().read_text()) or {}
        except FileNotFoundError:
            continue  # as kubectl: a listed file that does not exist is skipped
        except (OSError, yaml.YAMLError) as err:
            raise ConfigError(f"kubeconfig {path}: {err}") from None
        if not isinstance(doc, dict):
            raise ConfigError(f"kubeconfig {path}: not a mapping")
        found = True
        merged["current-context"] = merged["current-context"] or str(doc.get("current-context") or "")
        for section, field in (("clusters", "cluster"), ("users", "user"), ("contexts", "context")):
            for i, entry in enumerate(doc.get(section) or []):
                if not isinstance(entry, dict) or not isinstance(entry.get(field) or {}, dict):
                    raise ConfigError(f"kubeconfig {path}: {section}[{i}] is not a mapping with {field}")
                name = str(entry.get("name", ""))
                merged[section].setdefault(name, {**(entry.get(field) or {}), "_file": path})
    if not found:
        raise ConfigError(f"no kubeconfig at {', '.join(map(str, paths))}")
    return merged


def _named(merged: dict[str, Any], section: str, name: str, field: str) -> dict[str, Any]:
    try:
        entry: dict[str, Any] = merged[section][name]
    except KeyError:
        raise ConfigError(f"kubeconfig: no {field} named {name!r} in {section}") from None
    return entry


class _Files:
    """Paths named in a kubeconfig (relative to the file that names them), and data written to files."""

    def __init__(self, cluster_file: Path, user_file: Path) -> None:
        self.cluster_dir, self.user_dir = Path(cluster_file).parent, Path(user_file).parent

    def user_path(self, path: str) -> Path:
        return self.user_dir / Path(path).expanduser()

    def cluster_file(self, cluster: dict[str, Any], key: str, where: str) -> str | None:
        if cluster.get(f"{key}-data"):
            return str(_private_file(_decoded(cluster[f"{key}-data"], f"{where}.{key}-data")))
        if cluster.get(key):
            return str(_existing(self.cluster_dir / Path(str(cluster[key])).expanduser(), f"{where}.{key}"))
        return None

    def pair(self, user: dict[str, Any], cert: str, key: str, where: str) -> tuple[str | None, str | None]:
        files: list[str | None] = []
        for name in (cert, key):
            if user.get(f"{name}-data"):
                files.append(str(_private_file(_decoded(user[f"{name}-data"], f"{where}.{name}-data"))))
            elif user.get(name):
                files.append(str(_existing(self.user_path(str(user[name])), f"{where}.{name}")))
            else:
                files.append(None)
        if (files[0] is None) != (files[1] is None):
            raise ConfigError(f"kubeconfig: {where} has a client certificate or key without the other")
        return files[0], files[1]

    def write_pair(self, cert: bytes, key: bytes) -> tuple[str, str]:
        return str(_private_file(cert)), str(_private_file(key))


def _decoded(data: Any, where: str) -> bytes:
    try:
        return base64.b64decode(str(data), validate=True)
    except ValueError:
        raise ConfigError(f"kubeconfig: {where} is not base64") from None


def _existing(path: Path, where: str) -> Path:
    if not path.is_file():
        raise ConfigError(f"kubeconfig: {where}: no file {path}")
    return path


_PRIVATE: list[Path] = []  # the directory of the files, where there are no memory files


def _private_file(data: bytes) -> Path:
    """``data`` where only this process reads it (the TLS library takes keys and certificates as paths):
    an anonymous memory file, gone with the process however it ends (a kill -9 included); where the
    system has none, a file only this user reads, removed when the process exits."""
    if hasattr(os, "memfd_create"):
        try:
            fd = os.memfd_create("kubeconfig", os.MFD_CLOEXEC)
        except OSError:
            pass
        else:
            with os.fdopen(fd, "wb", closefd=False) as f:  # open for the process's life
                f.write(data)
            return Path(f"/proc/self/fd/{fd}")
    if not _PRIVATE:
        _PRIVATE.append(Path(tempfile.mkdtemp(prefix="kubeconfig-")))
        atexit.register(shutil.rmtree, _PRIVATE[0], True)
    fd, name = tempfile.mkstemp(dir=_PRIVATE[0])
    with os.fdopen(fd, "wb") as f:
        f.write(data)
    return Path(name)


# -- exec credential plugins ---------------------------------------------------------------------------
class ExecPlugin:
    """A client.authentication.k8s.io credential plugin: run at start, and again when its token expires."""

    def __init__(self, spec: Mapping[str, Any], where: str) -> None:
        if not spec.get("command"):
            raise ConfigError(f"kubeconfig: {where}.command is empty")
        self.spec, self.where = spec, where
        self._lock = threading.Lock()
        self._token: str | None = None
        self._expires: datetime.datetime | None = None
        self.client_pair: tuple[bytes, bytes] | None = None
        self._run()

    def __call__(self) -> str | None:
        with self._lock:
            now = datetime.datetime.now(datetime.UTC)
            if self._expires is not None and now >= self._expires - EXEC_RENEW_BEFORE:
                self._run()
            return f"Bearer {self._token}" if self._token else None

    def _run(self) -> None:
        api_version = str(self.spec.get("apiVersion") or "client.authentication.k8s.io/v1")
        env = dict(os.environ)
        for pair in self.spec.get("env") or []:
            env[str(pair["name"])] = str(pair["value"])
        info = {"apiVersion": api_version, "kind": "ExecCredential", "spec": {"interactive": False}}
        env["KUBERNETES_EXEC_INFO"] = json.dumps(info)
        command = [str(self.spec["command"]), *map(str, self.spec.get("args") or [])]
        try:
            done = subprocess.run(
                command, env=env, capture_output=True, text=True, timeout=EXEC_TIMEOUT_SECONDS, check=False
            )
        except (OSError, subprocess.TimeoutExpired) as err:
            hint = self.spec.get("installHint") or ""
            raise ConfigError(f"kubeconfig: {self.where}: {command[0]}: {err}. {hint}".strip()) from None
        if done.returncode != 0:
            said = done.stderr.strip()[-500:]
            raise ConfigError(f"kubeconfig: {self.where}: {command[0]} exited {done.returncode}: {said}")
        try:
            status = json.loads(done.stdout)["status"]
        except (ValueError, KeyError, TypeError):
            said = f"{command[0]} printed no ExecCredential status"
            raise ConfigError(f"kubeconfig: {self.where}: {said}") from None
        self._token = status.get("token") or None
        expires = status.get("expirationTimestamp")
        self._expires = datetime.datetime.fromisoformat(expires.replace("Z", "+00:00")) if expires else None
        if status.get("clientCertificateData") and status.get("clientKeyData"):
            self.client_pair = (status["clientCertificateData"].encode(), status["clientKeyData"].encode())
        if self._token is None and self.client_pair is None:
            said = f"{command[0]} gave neither a token nor a client certificate"
            raise ConfigError(f"kubeconfig: {self.where}: {said}")


# -- connections ---------------------------------------------------------------------------------------
def env_proxy(server: str, environ: Mapping[str, str] | None = None) -> str:
    """The proxy the environment names for ``server`` (``HTTPS_PROXY`` or ``HTTP_PROXY``, either case),
    "" when there is none or ``NO_PROXY`` names its host, a domain it is in, or a CIDR it is in."""
    proxies = {
        k.lower().removesuffix("_proxy"): v
        for k, v in (environ or {}).items()
        if k.lower().endswith("_proxy")
    }
    if environ is None:
        proxies = getproxies()
    url = urllib3.util.parse_url(server)
    proxy = proxies.get(url.scheme or "http", "")
    if not proxy or not url.host:
        return ""
    host = url.host.strip("[]").lower()
    try:
        address: ipaddress.IPv4Address | ipaddress.IPv6Address | None = ipaddress.ip_address(host)
    except ValueError:
        address = None
    for entry in (e.strip().lower() for e in proxies.get("no", "").split(",")):
        if not entry:
            continue
        if entry == "*":
            return ""
        if address is not None and "/" in entry:
            try:
                if address in ipaddress.ip_network(entry, strict=False):
                    return ""
            except ValueError:
                pass
            continue
        name = entry.lstrip(".").rsplit(":", 1)[0] if entry.count(":") == 1 else entry.lstrip(".")
        if host == name or host.endswith("." + name):
            return ""
    return proxy


def pool_manager(
    *,
    ca_file: str | None = None,
    verify: bool = True,
    cert_file: str | None = None,
    key_file: str | None = None,
    proxy: str = "",
    server_name: str = "",
) -> urllib3.PoolManager:
    """A pool manager whose connections verify the server against ``ca_file`` (else the system's CAs)
    unless not ``verify``, present the client certificate, go through ``proxy``, and check the server's
    certificate for ``server_name`` when the URL's host is not the name it carries."""
    tls: dict[str, Any] = {"cert_reqs": "CERT_REQUIRED" if verify else "CERT_NONE"}
    if verify and ca_file:
        tls["ca_certs"] = ca_file
    if cert_file and key_file:
        tls["cert_file"], tls["key_file"] = cert_file, key_file
    if server_name:
        tls["server_hostname"] = server_name
    if not verify:
        urllib3.disable_warnings(urllib3.exceptions.InsecureRequestWarning)
    if proxy:
        auth = urllib3.util.parse_url(proxy).auth
        headers = urllib3.util.make_headers(proxy_basic_auth=auth) if auth else None
        return urllib3.ProxyManager(proxy, proxy_headers=headers, **tls)
    return urllib3.PoolManager(**tls)
