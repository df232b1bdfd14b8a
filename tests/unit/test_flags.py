"""Flags: every flag of upstream v0.8.2's binary (read from its source) in every Go form; no abbreviations."""

from __future__ import annotations

import pytest

from reconcile import flags
from tests.upstream_source import upstream_flags

# a value for each flag that is not a plain string, int or bool in Go
SAMPLES = {"v": "3", "stderrthreshold": "WARNING", "alsologtostderrthreshold": "ERROR", "vmodule": "x=2"}
SAMPLES["log_backtrace_at"] = "main.go:10"
EXPECTED = {"v": 3, "stderrthreshold": "WARNING", "alsologtostderrthreshold": "ERROR"}


def dest(name: str) -> str:
    return "kubeconfig" if name == "kubeConfig" else name.replace("-", "_")


def value_forms(name: str, kind: str) -> list[tuple[list[str], object]]:
    if kind == "Bool":
        default = getattr(flags.parse([]), dest(name))
        flipped = "false" if default else "true"
        forms = [
            ([f"-{name}=false"], False),
            ([f"--{name}=true"], True),
            ([f"-{name}={flipped}"], not default),
        ]
        return [*forms, ([f"-{name}"], True), ([f"--{name}"], True)]
    text = SAMPLES.get(name, "7" if kind in ("Int", "Uint64") else "some-value")
    want = EXPECTED.get(name, int(text) if kind in ("Int", "Uint64") else text)
    return [
        ([f"-{name}={text}"], want),
        ([f"-{name}", text], want),
        ([f"--{name}={text}"], want),
        ([f"--{name}", text], want),
    ]


def test_upstream_has_the_flags_we_expect_to_find():
    found = upstream_flags()
    assert {"kubeConfig", "threadiness", "monitoring-port", "lock-namespace", "cluster-domain"} <= set(found)
    assert {"v", "alsologtostderr", "logtostderr", "log_file", "vmodule", "stderrthreshold"} <= set(found)
    assert len(found) >= 28


@pytest.mark.parametrize(("name", "kind"), sorted(upstream_flags().items()))
def test_every_upstream_flag_in_every_go_form(name, kind):
    if name == "version":  # it exits; its parsing is checked here
        assert flags.parse(["-version"]).version and flags.parse(["--version=true"]).version
        return
    for argv, want in value_forms(name, kind):
        got = getattr(flags.parse(argv), dest(name))
        assert got == want, (argv, got)


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
