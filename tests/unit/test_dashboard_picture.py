"""tools/dashboard.py, the drawing half of benchmarks/dashboard_picture.py, on the real dashboard JSON with
canned query_range answers: every panel is drawn at its place, and a panel whose queries return nothing
says "No data" rather than staying blank."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pytest

from tools import dashboard as dash

START = 1_800_000_000.0
WINDOW = dash.Window(start=START, end=START + 300, step=5, scrape_interval=5)
EMPTY = {"status": "success", "data": {"resultType": "matrix", "result": []}}
# Panels whose every query is answered with no series.
SILENT = {"Throttling: 429s and the client's limit", "Sync errors by reason"}


def matrix(*series: tuple[dict[str, str], list[float]]) -> dict[str, Any]:
    return {
        "status": "success",
        "data": {
            "resultType": "matrix",
            "result": [
                {
                    "metric": labels,
                    "values": [[START + 5 * i, str(v)] for i, v in enumerate(values)],
                }
                for labels, values in series
            ],
        },
    }


def canned(expr: str, window: dash.Window) -> dict[str, Any]:
    """An answer shaped like Prometheus' for each query of the dashboard."""
    assert window == WINDOW
    if 'code="429"' in expr or "client_rate_limit" in expr or "sync_errors" in expr:
        return EMPTY
    if "increase(mpi_operator_job_phase_seconds_bucket" in expr:  # the heatmap: cumulative buckets
        return matrix(
            ({"le": "1.0"}, [0, 1, 1, 0]),
            ({"le": "5.0"}, [0, 2, 3, 0]),
            ({"le": "+Inf"}, [0, 2, 3, 1]),
        )
    if "by (state)" in expr:
        return matrix(({"state": "Running"}, [0, 1, 2, 1]), ({"state": "Succeeded"}, [0, 0, 1, 3]))
    if "histogram_quantile" in expr:  # NaN where no job finished in the window
        return matrix(({"phase": "created", "outcome": "Succeeded"}, [math.nan, 1.5, math.nan, math.nan]))
    return matrix(({"verb": "GET", "code": "200", "instance": "127.0.0.1:1"}, [1, 2, 3, 2]))


@pytest.fixture(scope="module")
def picture(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list[dash.Drawn], dict]:
    d = json.loads(dash.DASHBOARD.read_text())
    data = dash.evaluate(d, WINDOW, canned)
    out = tmp_path_factory.mktemp("dash") / "dashboard.png"
    fig, drawn = dash.draw(d, data, WINDOW, out, heading="canned answers")
    return out, drawn, {"dashboard": d, "data": data, "fig": fig}


def test_every_panel_is_drawn_at_its_grid_position(picture):
    out, drawn, ctx = picture
    d = ctx["dashboard"]
    want = [p for p in dash.panels(d) if p["type"] != "row"]
    assert [x.title for x in drawn] == [dash.title_of(p) for p in want]
    assert len(drawn) >= 15
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    fig = ctx["fig"]
    width = fig.get_size_inches()[0] * fig.dpi
    assert width == dash.COLUMNS * dash.UNIT_PX[0]
    for p, x in zip(want, drawn, strict=True):
        box = x.axes.get_position()
        grid = p["gridPos"]
        # the plot lies inside its grid cell's columns
        assert grid["x"] / 24 <= box.x0 < box.x1 <= (grid["x"] + grid["w"]) / 24, (x.title, box)
    # panels side by side in the layout sit side by side in the picture
    by_title = {x.title: x.axes.get_position() for x in drawn}
    a, b = by_title["MPIJobs by state"], by_title["Jobs created and finished"]
    assert a.x1 < b.x0 and abs(a.y0 - b.y0) < 1e-6
    assert by_title["Leader"].y1 < by_title["MPIJobs by state"].y0


def test_panels_with_data_draw_it_and_silent_ones_say_no_data(picture):
    _, drawn, _ = picture
    for x in drawn:
        texts = [t.get_text() for t in x.axes.texts]
        if x.title in SILENT:
            assert x.no_data and x.series == 0, x.title
            assert texts == [dash.NO_DATA], x.title
        else:
            assert not x.no_data and x.series > 0, x.title
            assert dash.NO_DATA not in texts, x.title
            assert x.axes.lines or x.axes.patches or x.axes.collections, x.title


def test_the_heatmap_counts_per_bucket_and_legends_follow_the_format(picture):
    _, drawn, _ = picture
    heat = next(x for x in drawn if x.kind == "heatmap")
    assert heat.title == "Start-up phase heatmap (All)"
    (mesh,) = heat.axes.collections
    counts = mesh.get_array()
    # cumulative (1, 2, 2) at the second step -> 1 in le=1 and 1 in le=5; (0, 0, 1) at the last -> +Inf
    assert counts[0, 1] == 1 and counts[1, 1] == 1 and counts[2, 3] == 1
    assert counts.mask[0, 0] and counts.mask[2, 1]  # empty cells stay blank
    assert [t.get_text() for t in heat.axes.get_yticklabels()] == ["1 s", "5 s", "+Inf"]
    state = next(x for x in drawn if x.title == "MPIJobs by state")
    assert [t.get_text() for t in state.axes.get_legend().get_texts()] == ["Running", "Succeeded"]
    api = next(x for x in drawn if x.title == "API requests by verb and code")
    assert [t.get_text() for t in api.axes.get_legend().get_texts()] == ["GET 200"]


def test_an_override_puts_a_target_on_its_own_axis_with_its_unit(picture):
    _, drawn, _ = picture
    mem = next(x for x in drawn if x.title == "Memory and CPU")
    (twin,) = [a for a in mem.axes.get_shared_x_axes().get_siblings(mem.axes) if a is not mem.axes]
    assert mem.axes.yaxis.get_major_formatter()(3 * 2**20, 0) == "3 MiB"  # the panel's unit, bytes
    assert twin.yaxis.get_major_formatter()(0.5, 0) == "50%"  # target B's override: percentunit
    assert len(mem.axes.lines) == 1 and len(twin.lines) == 1
    legend = [t.get_text() for t in mem.axes.get_legend().get_texts()]
    assert legend == ["RSS 127.0.0.1:1", "CPU 127.0.0.1:1"]


def test_queries_are_sent_with_grafanas_variables():
    d = json.loads(dash.DASHBOARD.read_text())
    sent: list[str] = []
    dash.evaluate(d, WINDOW, lambda expr, w: sent.append(expr) or EMPTY)
    assert len(sent) == sum(len(p.get("targets", [])) for p in dash.panels(d))
    assert all("$" not in e for e in sent)
    # rate interval: max(step + scrape, 4 x scrape) = 20 s; "All" is each variable's allValue
    assert 'rate(mpi_operator_jobs_created_total{job=~".+"}[20s])' in " ".join(sent)
    assert 'phase=~".+"' in " ".join(sent)


def test_a_refused_query_says_so():
    d = {"panels": [{"id": 1, "type": "timeseries", "title": "t", "gridPos": {"x": 0, "y": 0, "w": 8, "h": 8},
                     "targets": [{"refId": "A", "expr": "up"}]}]}  # fmt: skip
    data = dash.evaluate(d, WINDOW, lambda e, w: {"status": "error", "error": "parse error"})
    _, (x,) = dash.draw(d, data, WINDOW, None)
    assert x.errors == ["A: parse error"]
    assert [t.get_text() for t in x.axes.texts] == ["Query error: A: parse error"]


def test_answers_survive_a_round_trip_through_json():
    d = json.loads(dash.DASHBOARD.read_text())
    data = dash.evaluate(d, WINDOW, canned)
    again = dash.answers_from_json(json.loads(json.dumps(dash.answers_json(data))))
    assert again.keys() == data.keys()
    for pid, targets in data.items():
        for a, b in zip(targets, again[pid], strict=True):
            assert (a.expr, a.legend_format, a.error) == (b.expr, b.legend_format, b.error)
            assert [s.legend for s in a.series] == [s.legend for s in b.series]
            for sa, sb in zip(a.series, b.series, strict=True):
                assert sa.times == sb.times
                assert [v if math.isfinite(v) else None for v in sa.values] == [
                    v if math.isfinite(v) else None for v in sb.values
                ]
