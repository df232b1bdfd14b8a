"""L0: the chaos tier's fault proxy forwards a request as the operator sent it, plus only the latency it
was given."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from localcluster.chaos.faultproxy import FaultProxy
from reconcile.runtime.kube import POD, Kube, api_client
from tests.unit.loopback import ApiServer, Pki


@pytest.fixture
def pki(tmp_path: Path) -> Pki:
    return Pki(tmp_path)


@pytest.fixture
def upstream(pki: Pki) -> Iterator[ApiServer]:
    server = ApiServer(tls=pki.server_context())
    yield server
    server.close()


def proxy(pki: Pki, upstream: ApiServer, tmp_path: Path, **kwargs: float) -> FaultProxy:
    cert, key = tmp_path / "client.crt", tmp_path / "client.key"
    cert.write_bytes(pki.client_cert)
    key.write_bytes(pki.client_key)
    return FaultProxy(
        upstream.url,
        ca=pki.ca_file,
        server_cert=pki.server_cert,
        server_key=pki.server_key,
        client_cert=cert,
        client_key=key,
        rate=0.0,
        watch_cut=None,
        **kwargs,
    )


def test_no_compression_is_asked_for_that_the_operator_did_not_ask_for(pki, upstream, tmp_path) -> None:
    """The API server gzips a large answer to a request that accepts it; the operator reads plain JSON."""
    with proxy(pki, upstream, tmp_path) as p:
        Kube(api_client(str(pki.kubeconfig(p.url)), "")).get(POD, "ns", "p")
    (seen,) = upstream.seen
    assert "accept-encoding" not in seen["headers"]
    assert seen["client"] == {"commonName": "operator"}


def test_latency_is_added_to_every_request(pki, upstream, tmp_path) -> None:
    with proxy(pki, upstream, tmp_path, latency=0.3) as p:
        kube = Kube(api_client(str(pki.kubeconfig(p.url)), ""))
        began = time.monotonic()
        for _ in range(2):
            kube.get(POD, "ns", "p")
        assert time.monotonic() - began >= 0.6
