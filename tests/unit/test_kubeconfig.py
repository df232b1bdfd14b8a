"""The operator's own kubeconfig and ServiceAccount loader: what it finds, what it sends, and a clear error
naming the field when it cannot."""

from __future__ import annotations

import base64
import datetime
import json
import os
import re
import shutil
import stat
import sys
import tempfile
from pathlib import Path
from typing import Any

import pytest
import yaml

from reconcile.runtime import kubeconfig
from reconcile.runtime.kube import POD, Kube, api_client
from reconcile.runtime.kubeconfig import ConfigError, context_namespace, in_cluster, load
from tests.unit.loopback import ApiServer, ConnectProxy, Pki


def write(
    path: Path, *, user: dict[str, Any] | None = None, server: str = "https://k8s.test:6443", **extra: Any
) -> Path:
    doc: dict[str, Any] = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "c", "cluster": {"server": server, **extra.pop("cluster", {})}}],
        "users": [{"name": "u", "user": user or {}}],
        "contexts": [{"name": "x", "context": {"cluster": "c", "user": "u", **extra.pop("context", {})}}],
        "current-context": "x",
        **extra,
    }
    path.write_text(yaml.safe_dump(doc))
    return path


def test_a_token_is_sent_as_a_bearer(tmp_path: Path) -> None:
    endpoint = load(str(write(tmp_path / "k", user={"token": "abc"})), environ={})
    assert endpoint.host == "https://k8s.test:6443"
    assert endpoint.authorization() == "Bearer abc"


def test_a_token_file_is_read_relative_to_the_kubeconfig(tmp_path: Path) -> None:
    (tmp_path / "tok").write_text("from-file\n")
    endpoint = load(str(write(tmp_path / "k", user={"tokenFile": "tok"})), environ={})
    assert endpoint.authorization() == "Bearer from-file"


def test_basic_auth(tmp_path: Path) -> None:
    endpoint = load(str(write(tmp_path / "k", user={"username": "a", "password": "b"})), environ={})
    assert endpoint.authorization() == "Basic " + base64.b64encode(b"a:b").decode()


def test_master_overrides_the_server(tmp_path: Path) -> None:
    endpoint = load(str(write(tmp_path / "k")), master="http://127.0.0.1:8080", environ={})
    assert endpoint.host == "http://127.0.0.1:8080"


def test_kubeconfig_files_merge_the_first_name_wins(tmp_path: Path) -> None:
    first = write(tmp_path / "a", user={"token": "first"}, server="https://first:6443")
    second = write(tmp_path / "b", user={"token": "second"}, server="https://second:6443")
    missing = tmp_path / "missing"
    endpoint = load(os.pathsep.join(map(str, (missing, first, second))), environ={})
    assert endpoint.host == "https://first:6443" and endpoint.authorization() == "Bearer first"
    # $KUBECONFIG too, when no path is given
    assert load(environ={"KUBECONFIG": f"{second}{os.pathsep}{first}"}).host == "https://second:6443"


def test_the_current_context_s_namespace(tmp_path: Path) -> None:
    path = write(tmp_path / "k", context={"namespace": "team-a"})
    assert context_namespace(str(path)) == "team-a"
    assert context_namespace(str(tmp_path / "none")) == ""


@pytest.mark.parametrize(
    ("user", "cluster", "extra", "says"),
    [
        (
            {"client-certificate": "nope.crt", "client-key": "nope.key"},
            {},
            {},
            "users[u].user.client-certificate",
        ),
        ({"client-certificate-data": "bm90"}, {}, {}, "a client certificate or key without the other"),
        (
            {},
            {"certificate-authority-data": "!!"},
            {},
            "clusters[c].cluster.certificate-authority-data is not base64",
        ),
        ({}, {"certificate-authority": "ca.crt"}, {}, "clusters[c].cluster.certificate-authority: no file"),
        ({"auth-provider": {"name": "gcp"}}, {}, {}, "exec credential plugin"),
        ({"tokenFile": "gone"}, {}, {}, "users[u].user.tokenFile: no file"),
        ({}, {}, {"current-context": "other"}, "no context named 'other'"),
        ({}, {}, {"current-context": ""}, "no current-context"),
    ],
)
def test_a_field_that_cannot_be_used_is_named(
    tmp_path: Path, user: dict[str, Any], cluster: dict[str, Any], extra: dict[str, Any], says: str
) -> None:
    path = write(tmp_path / "k", user=user, cluster=cluster, **extra)
    with pytest.raises(ConfigError, match=re.escape(says)):
        load(str(path), environ={})


def test_no_kubeconfig_at_all_says_where_it_looked(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="no kubeconfig at"):
        load(environ={"HOME": str(tmp_path)})


def plugin(tmp_path: Path, status: dict[str, Any], exit_code: int = 0) -> dict[str, Any]:
    """An exec plugin that records each run and prints ``status``."""
    script = tmp_path / "plugin.py"
    script.write_text(
        "import json, os, sys\n"
        f"open({str(tmp_path / 'runs')!r}, 'a').write(os.environ['KUBERNETES_EXEC_INFO'] + '\\n')\n"
        f"print(json.dumps({{'kind': 'ExecCredential', 'status': {status!r}}}))\n"
        f"sys.stderr.write('denied'); sys.exit({exit_code})\n"
    )
    return {"apiVersion": "client.authentication.k8s.io/v1", "command": sys.executable, "args": [str(script)]}


def runs(tmp_path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in (tmp_path / "runs").read_text().splitlines()]


def test_an_exec_plugin_s_token_is_used_until_it_expires(tmp_path: Path) -> None:
    later = (datetime.datetime.now(datetime.UTC) + datetime.timedelta(hours=1)).isoformat()
    endpoint = load(
        str(
            write(
                tmp_path / "k", user={"exec": plugin(tmp_path, {"token": "t1", "expirationTimestamp": later})}
            )
        ),
        environ={},
    )
    assert endpoint.authorization() == "Bearer t1" and endpoint.authorization() == "Bearer t1"
    assert len(runs(tmp_path)) == 1
    assert runs(tmp_path)[0]["spec"] == {"interactive": False}


def test_an_expired_exec_token_is_asked_for_again(tmp_path: Path) -> None:
    past = (datetime.datetime.now(datetime.UTC) - datetime.timedelta(minutes=1)).isoformat()
    endpoint = load(
        str(
            write(
                tmp_path / "k", user={"exec": plugin(tmp_path, {"token": "t", "expirationTimestamp": past})}
            )
        ),
        environ={},
    )
    endpoint.authorization()
    endpoint.authorization()
    assert len(runs(tmp_path)) == 3


def test_a_failing_exec_plugin_says_what_it_said(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"users\[u\]\.user\.exec: .* exited 3: denied"):
        load(
            str(write(tmp_path / "k", user={"exec": plugin(tmp_path, {"token": "t"}, exit_code=3)})),
            environ={},
        )


def test_a_missing_exec_plugin_gives_its_install_hint(tmp_path: Path) -> None:
    spec = {
        "command": str(tmp_path / "no-such-plugin"),
        "installHint": "install it with your package manager",
    }
    with pytest.raises(ConfigError, match="install it with your package manager"):
        load(str(write(tmp_path / "k", user={"exec": spec})), environ={})


# -- against a loopback API server ----------------------------------------------------------------------
def test_an_exec_plugin_s_client_certificate_is_presented(
    tmp_path: Path, pki: Pki, tls_server: ApiServer
) -> None:
    status = {"clientCertificateData": pki.client_cert.decode(), "clientKeyData": pki.client_key.decode()}
    ca = base64.b64encode(pki.ca.cert_pem).decode()
    path = write(
        tmp_path / "k",
        user={"exec": plugin(tmp_path, status)},
        server=tls_server.url,
        cluster={"certificate-authority-data": ca},
    )
    Kube(api_client(str(path), "")).get(POD, "ns", "p")
    assert tls_server.seen[0]["client"] == {"commonName": "operator"}


def test_key_material_is_held_in_memory_and_leaves_no_file(tmp_path: Path, pki: Pki) -> None:
    """A process killed with -9 runs no exit handler: a key written to a file would stay behind."""
    before = set(Path(tempfile.gettempdir()).glob("kubeconfig-*"))
    endpoint = load(str(pki.kubeconfig("https://127.0.0.1:1")), environ={})
    tls = endpoint.pool.connection_pool_kw
    for key, want in (("cert_file", pki.client_cert), ("key_file", pki.client_key)):
        assert tls[key].startswith("/proc/self/fd/")
        assert Path(tls[key]).read_bytes() == want
    assert set(Path(tempfile.gettempdir()).glob("kubeconfig-*")) == before


def test_without_memory_files_key_material_is_written_only_for_this_user(
    tmp_path: Path, pki: Pki, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delattr(os, "memfd_create")
    monkeypatch.setattr(kubeconfig, "_PRIVATE", [])
    endpoint = load(str(pki.kubeconfig("https://127.0.0.1:1")), environ={})
    (private,) = kubeconfig._PRIVATE
    assert Path(endpoint.pool.connection_pool_kw["key_file"]).parent == private
    for f in private.iterdir():
        assert stat.S_IMODE(f.stat().st_mode) == 0o600
    shutil.rmtree(private)


def test_tls_server_name_checks_the_certificate_for_that_name(
    tmp_path: Path, pki: Pki, tls_server: ApiServer
) -> None:
    # the serving certificate is for 127.0.0.1 only: another name is refused, the right one accepted
    wrong = pki.kubeconfig(tls_server.url, **{"tls-server-name": "apiserver.example"})
    with pytest.raises(Exception, match=r"(?i)certificate|hostname"):
        Kube(api_client(str(wrong), "")).get(POD, "ns", "p")
    right = pki.kubeconfig(tls_server.url, **{"tls-server-name": "127.0.0.1"})
    Kube(api_client(str(right), "")).get(POD, "ns", "p")
    assert len(tls_server.seen) == 1


def test_in_a_pod_the_service_account_token_is_read_again(tmp_path: Path, pki: Pki) -> None:
    server = ApiServer(tls=pki.server_context(require_client_cert=False))
    try:
        (tmp_path / "token").write_text("one")
        (tmp_path / "ca.crt").write_bytes(pki.ca.cert_pem)
        env = {"KUBERNETES_SERVICE_HOST": "127.0.0.1", "KUBERNETES_SERVICE_PORT": str(server.port)}
        kube = Kube(in_cluster(env, tmp_path, reread=0))  # a rotated token is read at once
        kube.get(POD, "ns", "p")
        (tmp_path / "token").write_text("two")
        kube.get(POD, "ns", "p")
        assert [s["headers"]["authorization"] for s in server.seen] == ["Bearer one", "Bearer two"]
    finally:
        server.close()


def test_in_a_pod_without_a_token(tmp_path: Path) -> None:
    env = {"KUBERNETES_SERVICE_HOST": "10.0.0.1", "KUBERNETES_SERVICE_PORT": "443"}
    with pytest.raises(ConfigError, match="is a ServiceAccount token mounted"):
        in_cluster(env, tmp_path)


def test_an_ipv6_service_host_is_bracketed(tmp_path: Path, pki: Pki) -> None:
    (tmp_path / "token").write_text("t")
    (tmp_path / "ca.crt").write_bytes(pki.ca.cert_pem)
    env = {"KUBERNETES_SERVICE_HOST": "fd00::1", "KUBERNETES_SERVICE_PORT": "443"}
    assert in_cluster(env, tmp_path).host == "https://[fd00::1]:443"


# -- proxies from the environment ------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("server", "no_proxy", "through"),
    [
        ("https://k8s.test:6443", "", True),
        ("https://k8s.test:6443", "k8s.test", False),
        ("https://api.k8s.test:6443", ".k8s.test", False),
        ("https://api.k8s.test:6443", "other.test,k8s.test:6443", False),
        ("https://10.96.0.1:443", "10.96.0.0/12", False),
        ("https://[fd00::1]:443", "fd00::/8", False),
        ("https://10.97.0.1:443", "10.96.0.0/16", True),
        ("https://k8s.test:6443", "*", False),
        ("https://notk8s.test:6443", "k8s.test", True),
    ],
)
def test_the_environment_s_proxy_unless_no_proxy_names_the_server(
    server: str, no_proxy: str, through: bool
) -> None:
    env = {"HTTPS_PROXY": "http://proxy.test:3128", "NO_PROXY": no_proxy}
    assert kubeconfig.env_proxy(server, env) == ("http://proxy.test:3128" if through else "")


def test_the_lower_case_proxy_variable_wins_and_plain_http_takes_http_proxy() -> None:
    env = {"HTTPS_PROXY": "http://upper:1", "https_proxy": "http://lower:1", "HTTP_PROXY": "http://plain:1"}
    assert kubeconfig.env_proxy("https://k8s.test", env) == "http://lower:1"
    assert kubeconfig.env_proxy("http://k8s.test", env) == "http://plain:1"


def test_a_kubeconfig_s_proxy_url_wins_over_the_environment(
    tmp_path: Path, pki: Pki, tls_server: ApiServer
) -> None:
    proxy = ConnectProxy()
    try:
        path = pki.kubeconfig(tls_server.url)
        Kube(load(str(path), environ={"HTTPS_PROXY": proxy.url})).get(POD, "ns", "p")
        assert len(proxy.connects) == 1  # the environment's proxy, tunnelled
        proxy.connects.clear()
        Kube(load(str(path), environ={"HTTPS_PROXY": proxy.url, "NO_PROXY": "127.0.0.1"})).get(POD, "ns", "p")
        assert proxy.connects == []
        assert len(tls_server.seen) == 2
    finally:
        proxy.close()
