"""The side-by-side comparison: alternating runs, medians and spreads, the pace, and a comparison
across invocations labelled as one. Its runs need clusters; the arithmetic is checked here."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from localcluster import comparison


def run(**figures: Any) -> dict[str, Any]:
    base: dict[str, Any] = {
        "t_waited": 70.0,
        "launchers_seen": 10,
        "succeeded_seen": 10,
        "t_launchers": 10.0,
        "t_done": 60.0,
        "t_converged": 61.0,
        "writes_per_job": 18.0,
        "lease_writes": 30,
        "writes": {"create pods": 40, "delete pods": 40},
        "cpu": 8.0,
        "rss_mib": 80.0,
        "machine": "probe loop 50 ms, load average 0.1",
    }
    base.update(figures)
    return base


def result(ours: list[dict[str, Any]], upstream: list[dict[str, Any]], **extra: Any) -> dict[str, Any]:
    return {"jobs": 10, "runs": {"ours": ours, "upstream": upstream}, **extra}


def test_runs_alternate_ours_first() -> None:
    assert comparison.order(3, ours=True, upstream=True) == ["ours", "upstream"] * 3
    assert comparison.order(2, ours=True, upstream=False) == ["ours", "ours"]
    assert comparison.order(1, ours=False, upstream=True) == ["upstream"]


def test_combine_takes_medians_and_spreads() -> None:
    side = comparison.combine([run(cpu=6.0), run(cpu=9.0), run(cpu=7.0)])
    assert side["runs"] == 3
    assert side["cpu"] == 7.0
    assert side["spread"]["cpu"] == (6.0, 9.0)
    assert side["writes"] == {"create pods": 40, "delete pods": 40}
    assert "machine" not in side  # words have no median


def test_combine_of_two_runs_is_their_mean_and_counts_by_kind_take_medians() -> None:
    side = comparison.combine([run(rss_mib=80.0, writes={"create pods": 40}), run(rss_mib=90.0, writes={})])
    assert side["rss_mib"] == 85.0
    assert side["writes"] == {"create pods": 20}


def test_a_run_that_timed_out_makes_the_side_a_lower_bound() -> None:
    short = run(t_done=None, t_converged=None, t_waited=100.0, succeeded_seen=4)
    side = comparison.combine([run(), short])
    assert side["t_done"] is None and side["t_converged"] is None
    assert side["t_waited"] == 100.0
    ours = comparison.combine([run(t_done=50.0)])
    up_shown, ours_shown, ratio = comparison.row("t_done", ours, side)
    assert up_shown.strip() == "> 100.0" and ours_shown.strip() == "50.0"
    assert ratio == "< 0.50"
    # other figures of a side that covers part of the jobs are not compared
    assert comparison.row("cpu", ours, side)[2] == "n/a (timed out)"


def test_table_compares_medians_and_prints_spreads_and_the_pace() -> None:
    ours = [run(cpu=4.0, launchers_over_pace=1.1), run(cpu=5.0, launchers_over_pace=1.3)]
    upstream = [run(cpu=10.0, launchers_over_pace=30.0), run(cpu=10.0, launchers_over_pace=34.0)]
    lines = comparison.table(result(ours, upstream))
    cpu = next(line for line in lines if line.startswith("CPU seconds, submission"))
    assert "0.45" in cpu  # 4.5 / 10.0
    assert "10.0-10.0; 4.0-5.0" in cpu
    pace = next(line for line in lines if "pace" in line)
    assert "upstream 32.00 (30.00-34.00)" in pace and "ours 1.20 (1.10-1.30)" in pace
    assert not any(line.startswith("*") for line in lines)


def test_one_run_shows_no_spread() -> None:
    lines = comparison.table(result([run()], [run()]))
    cpu = next(line for line in lines if line.startswith("CPU seconds, submission"))
    assert cpu.endswith("-; -")


def test_runs_from_another_invocation_are_labelled(tmp_path: Path) -> None:
    saved = tmp_path / "up.json"
    saved.write_text(
        json.dumps(
            {
                "jobs": 10,
                "workers": 4,
                "qps": 0,
                "burst": 0,
                "queue_qps": 0,
                "date": "2026-12-01 10:00 UTC",
                "runs": {"upstream": [run(), run()], "ours": []},
            }
        )
    )
    here = {"jobs": 10, "workers": 4, "qps": 0, "burst": 0, "queue_qps": 0}
    runs, date = comparison.saved_runs(saved, here)
    assert len(runs) == 2 and date == "2026-12-01 10:00 UTC"
    lines = comparison.table(result([run()], runs, upstream_from=str(saved), upstream_date=date))
    assert "upstream*" in lines[0]
    assert any(line.startswith("* upstream's runs are from") and "2026-12-01" in line for line in lines)


def test_a_saved_run_of_another_size_is_refused(tmp_path: Path) -> None:
    saved = tmp_path / "up.json"
    saved.write_text(json.dumps({"jobs": 20, "workers": 4, "qps": 0, "burst": 0, "queue_qps": 0}))
    with pytest.raises(ValueError, match="not a run of the same"):
        comparison.saved_runs(saved, {"jobs": 10, "workers": 4, "qps": 0, "burst": 0, "queue_qps": 0})


def test_a_save_of_one_upstream_run_is_read_as_one_run(tmp_path: Path) -> None:
    saved = tmp_path / "up.json"
    same = {"jobs": 10, "workers": 4, "qps": 0, "burst": 0, "queue_qps": 0}
    saved.write_text(json.dumps({**same, "upstream": run(cpu=3.0)}))
    runs, date = comparison.saved_runs(saved, same)
    assert [r["cpu"] for r in runs] == [3.0] and date == "date unknown"
