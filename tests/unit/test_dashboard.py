"""The Grafana dashboard (deploy/grafana, and the Helm chart's copy) asks only for what the operator
exports: every query parses as PromQL, names a series of the operator's own registry, and matches and
groups on labels those series have."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import promql_parser
import pytest
from prometheus_client.metrics import MetricWrapperBase

from reconcile.mpijob.metrics import Metrics
from render.phases import PHASES

REPO = Path(__file__).resolve().parents[2]
DASHBOARD = REPO / "deploy" / "grafana" / "mpijob-operator.json"
CHART = REPO / "deploy" / "helm" / "mpi-operator"
# Labels every Prometheus scrape adds to a target's series.
TARGET_LABELS = frozenset({"job", "instance"})
# Grafana's variables, as a query has them substituted.
VARIABLES = {"$__rate_interval": "5m", "$__interval": "1m", "$job": "mpi-operator", "$phase": "created"}


def exported() -> dict[str, frozenset[str]]:
    """Every sample name the operator's registry exports, with its label names (labelled metrics get one
    child each, so they show up as they do once used)."""
    m = Metrics()
    m.count_jobs_of(lambda: [])
    for metric in vars(m).values():
        if isinstance(metric, MetricWrapperBase) and metric._labelnames:
            metric.labels(*["x"] * len(metric._labelnames))
    out: dict[str, set[str]] = {}
    for family in m.registry.collect():
        for sample in family.samples:
            out.setdefault(sample.name, set()).update(sample.labels)
    return {k: frozenset(v) for k, v in out.items()}


def dashboard() -> dict[str, Any]:
    return json.loads(DASHBOARD.read_text())


def panels(d: dict[str, Any]) -> list[dict[str, Any]]:
    out = []
    for p in d["panels"]:
        out.append(p)
        out += p.get("panels", [])
    return out


def queries(d: dict[str, Any]) -> list[tuple[str, str]]:
    return [(p["title"], t["expr"]) for p in panels(d) for t in p.get("targets", [])]


def substitute(expr: str) -> str:
    for var, value in sorted(VARIABLES.items(), key=lambda kv: -len(kv[0])):
        expr = expr.replace(var, value)
    assert "$" not in expr, f"a variable the test does not know: {expr}"
    return expr


def check(expr: str, series: dict[str, frozenset[str]]) -> list[str]:
    """What is wrong with one query: unknown series, unknown labels in matchers and groupings."""
    problems: list[str] = []
    used: set[str] = set()
    groupings: list[tuple[str, list[str]]] = []

    def visit(node: Any) -> None:
        if isinstance(node, promql_parser.VectorSelector):
            name = node.name
            if name is None or name not in series:
                problems.append(f"series {name!r} is not exported")
                return
            used.update(series[name])
            for matcher in node.matchers.matchers:
                if matcher.name not in series[name] | TARGET_LABELS:
                    problems.append(f"{name} has no label {matcher.name!r}")
        elif isinstance(node, promql_parser.AggregateExpr) and node.modifier is not None:
            groupings.append((str(node.op), list(node.modifier.labels)))
        elif isinstance(node, promql_parser.BinaryExpr) and node.modifier is not None:
            matching = node.modifier.matching
            if matching is not None:
                groupings.append(("on/ignoring", list(matching.labels)))

    promql_parser.walk(promql_parser.parse(expr), visit)
    for where, labels in groupings:
        for label in labels:
            if label not in used | TARGET_LABELS:
                problems.append(f"{where} groups on {label!r}, a label none of its series has")
    return problems


def test_the_charts_copy_is_the_dashboard():
    assert (CHART / "dashboards" / DASHBOARD.name).read_bytes() == DASHBOARD.read_bytes()


def test_every_query_names_an_exported_series_with_its_labels():
    series = exported()
    qs = queries(dashboard())
    assert len(qs) >= 15
    wrong = {f"{title}: {expr}": p for title, expr in qs if (p := check(substitute(expr), series))}
    assert not wrong, wrong


def test_the_checker_catches_what_it_should():
    series = exported()
    assert check("sum(rate(mpi_operator_api_request_total[5m]))", series)  # a typo in the name
    assert check('sum(mpi_operator_workqueue_depth{namespace="a"})', series)  # a label it lacks
    assert check("sum by (kind) (mpi_operator_reconcile_duration_seconds_count)", series)  # grouping
    assert check("mpi_operator_job_phase_seconds_sum / on (outcome) mpi_operator_is_leader", series)
    assert not check(
        'sum by (phase, le) (rate(mpi_operator_job_phase_seconds_bucket{phase="x"}[5m]))', series
    )
    with pytest.raises(ValueError):
        promql_parser.parse("sum by (le (rate(x[5m]))")


def test_variables_query_exported_series():
    series = exported()
    for var in dashboard()["templating"]["list"]:
        query = var.get("definition") or ""
        m = re.fullmatch(r"label_values\((\w+), *(\w+)\)", query)
        if var["type"] == "query":
            assert m, query
            assert m.group(1) in series and m.group(2) in series[m.group(1)] | TARGET_LABELS, query
    phases = next(v for v in dashboard()["templating"]["list"] if v["name"] == "phase")["query"].split(",")
    assert phases == list(PHASES)


def test_the_dashboard_shows_what_operators_ask_for():
    text = " ".join(expr for _, expr in queries(dashboard()))
    for series in (
        "mpi_operator_jobs{",  # jobs by state
        "mpi_operator_job_phase_seconds_bucket",  # start-up phases: percentiles and heatmap
        "mpi_operator_job_duration_seconds_bucket",
        "mpi_operator_launcher_gate_wait_seconds_bucket",
        "mpi_operator_api_requests_total",  # API requests
        'code="429"',  # and throttling
        "mpi_operator_client_rate_limit",
        "mpi_operator_reconcile_duration_seconds_bucket",  # sync latency
        "mpi_operator_sync_errors_total",  # and errors
        "mpi_operator_is_leader",
        "mpi_operator_workqueue_depth",
    ):
        assert series in text, series
    d = dashboard()
    ids = [p["id"] for p in panels(d)]
    assert len(ids) == len(set(ids))
    assert any(p["type"] == "heatmap" for p in panels(d))
