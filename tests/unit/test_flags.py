"""L0: flag defaults match upstream's."""

from __future__ import annotations

import pytest

from reconcile import flags


def test_flag_defaults_match_upstream(monkeypatch):
    monkeypatch.setenv("KUBEFLOW_NAMESPACE", "kf")
    a = flags.parse([])
    assert (a.threadiness, a.kube_api_qps, a.kube_api_burst) == (2, 5, 10)
    assert (a.controller_queue_rate_limit, a.controller_queue_burst) == (10, 100)
    assert (a.lock_namespace, a.namespace, a.monitoring_port) == ("mpi-operator", "kf", 8080)
    assert flags.parse(["--kubeConfig", "/k"]).kubeconfig == "/k"
    with pytest.raises(SystemExit):
        flags.parse(["--threadiness", "0"])
