"""L0: the chaos tier's fault proxy forwards a request as the operator sent it, plus only the latency it
was given."""

from __future__ import annotations

import time

from localcluster.chaos.faultproxy import FaultProxy
from reconcile.runtime.kube import POD, Kube, api_client
from tests.unit.loopback import ApiServer, Pki


def proxy(pki: Pki, upstream: ApiServer, latency: float = 0.0) -> FaultProxy:
    return FaultProxy(upstream.url, rate=0.0, watch_cut=None, latency=latency, **pki.proxy_args())


def test_no_compression_is_asked_for_that_the_operator_did_not_ask_for(pki, tls_server) -> None:
    """The API server gzips a large answer to a request that accepts it; the operator reads plain JSON."""
    with proxy(pki, tls_server) as p:
        Kube(api_client(str(pki.kubeconfig(p.url)), "")).get(POD, "ns", "p")
    (seen,) = tls_server.seen
    assert "accept-encoding" not in seen["headers"]
    assert seen["client"] == {"commonName": "operator"}


def test_latency_is_added_to_every_request(pki, tls_server) -> None:
    with proxy(pki, tls_server, latency=0.3) as p:
        kube = Kube(api_client(str(pki.kubeconfig(p.url)), ""))
        began = time.monotonic()
        for _ in range(2):
            kube.get(POD, "ns", "p")
        assert time.monotonic() - began >= 0.6
