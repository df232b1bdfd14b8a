"""Every flag of upstream v0.8.2's binary (read from its released source) in every Go form."""

from __future__ import annotations

import pytest

from reconcile import flags

pytestmark = pytest.mark.tools

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


def test_upstream_has_the_flags_we_expect_to_find(upstream_flag_kinds):
    found = upstream_flag_kinds
    assert {"kubeConfig", "threadiness", "monitoring-port", "lock-namespace", "cluster-domain"} <= set(found)
    assert {"v", "alsologtostderr", "logtostderr", "log_file", "vmodule", "stderrthreshold"} <= set(found)
    assert len(found) >= 28


def test_every_upstream_flag_in_every_go_form(upstream_flag_kinds):
    assert flags.parse(["-version"]).version and flags.parse(["--version=true"]).version  # it exits
    wrong = [
        (argv, got, want)
        for name, kind in sorted(upstream_flag_kinds.items())
        if name != "version"
        for argv, want in value_forms(name, kind)
        if (got := getattr(flags.parse(argv), dest(name))) != want
    ]
    assert not wrong, wrong
