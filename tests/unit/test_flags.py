"""Flags in Go's forms, no abbreviations, klog's flags, defaults (upstream's own flag list: tests/tools)."""

from __future__ import annotations

import pytest

from reconcile import flags


def test_go_values():
    assert flags.parse(["-threadiness=0x10"]).threadiness == 16
    assert flags.parse(["-threadiness=010"]).threadiness == 8  # Go: a leading 0 is octal
    assert flags.parse(["-kube-api-qps=7"]).kube_api_qps == 7
    assert flags.parse(["-master", "-weird"]).master == "-weird"  # Go takes the next argument as is
    with pytest.raises(SystemExit):
        flags.parse(["-alsologtostderr=yes"])
    with pytest.raises(SystemExit):
        flags.parse(["-threadiness=two"])


@pytest.mark.parametrize("argv", [["--vers"], ["--thread=3"], ["-kube-api=1"], ["--lock=x"], ["---v=1"]])
def test_no_prefix_abbreviations(argv):
    with pytest.raises(SystemExit):
        flags.parse(argv)


def test_v_is_verbosity_not_version():
    a = flags.parse(["--v=2"])
    assert (a.v, a.version, a.log_level) == (2, False, "info")


def test_klog_flags_map_to_our_logging(tmp_path):
    assert flags.parse(["-v=4"]).log_level == "debug"
    assert flags.parse(["-v=4", "--log-level=warning"]).log_level == "warning"  # ours wins
    assert flags.parse(["-alsologtostderr"]).log_file_path == ""  # klog's default: stderr only
    assert flags.parse(["-log_file", "/x.log"]).log_file_path == ""  # no effect with -logtostderr (true)
    a = flags.parse(["-logtostderr=false", f"-log_dir={tmp_path}", "-alsologtostderr"])
    assert a.log_file_path == str(tmp_path / "mpijob-operator.log") and a.alsologtostderr
    assert flags.parse(["-logtostderr=false", "-log_file=/y.log"]).log_file_path == "/y.log"


def test_our_own_flags_take_go_forms_too(monkeypatch):
    monkeypatch.setenv("MPIJOB_OPERATOR_MONITORING_PORT", "9100")
    assert flags.parse([]).monitoring_port == 9100
    assert flags.parse(["-monitoring-port=0"]).monitoring_port == 0
    assert flags.parse(["-log-format=text", "-kubeconfig", "/k"]).kubeconfig == "/k"
    with pytest.raises(SystemExit):
        flags.parse(["-monitoring-port=70000"])


def test_log_file_with_and_without_stderr(tmp_path, capsys):
    import json
    import logging

    from reconcile.runtime import logs

    root = logging.getLogger()
    saved = (root.handlers[:], root.level)
    try:
        path = tmp_path / "op.log"
        logs.setup("json", "info", file=str(path), also_stderr=True)
        logging.getLogger("t").info("hello")
        logs.setup("json", "info", file=str(path))
        logging.getLogger("t").info("file only")
        for h in root.handlers:
            h.flush()
        lines = [json.loads(line)["msg"] for line in path.read_text().splitlines()]
        assert lines == ["hello", "file only"]
    finally:
        for h in root.handlers:
            h.close()
        root.handlers[:], root.level = saved


def test_flag_defaults_match_upstream(monkeypatch):
    monkeypatch.setenv("KUBEFLOW_NAMESPACE", "kf")
    a = flags.parse([])
    # deliberate differences: no fixed client-side QPS and no overall queue bucket (the
    # adaptive API limiter paces the writes), 8 sync threads; upstream's bursts stay for pins
    assert (a.threadiness, a.kube_api_qps, a.kube_api_burst) == (4, 0, 10)
    assert (a.controller_queue_rate_limit, a.controller_queue_burst) == (0, 100)
    pinned = flags.parse(["--kube-api-qps=5", "-threadiness=2", "--controller-queue-rate-limit=10"])
    assert (pinned.kube_api_qps, pinned.threadiness, pinned.controller_queue_rate_limit) == (5, 2, 10)
    assert (a.lock_namespace, a.namespace, a.monitoring_port) == ("mpi-operator", "kf", 8080)
    assert flags.parse(["--kubeConfig", "/k"]).kubeconfig == "/k"
    with pytest.raises(SystemExit):
        flags.parse(["--threadiness", "0"])


def test_force_delete_lost_workers_after():
    assert flags.parse([]).force_delete_lost_workers_after == 0
    assert flags.parse(["-force-delete-lost-workers-after=120"]).force_delete_lost_workers_after == 120
    flag = "--force-delete-lost-workers-after"
    for argv in ([f"{flag}=-1"], [f"{flag}=5", "--watch-nodes=false"]):
        with pytest.raises(SystemExit):
            flags.parse(argv)
