"""Two operators' runs of the same jobs, compared: each side's runs combined into medians and spreads,
ours over upstream of the medians, and the table `benchmarks/side_by_side.py` prints. A run is the dict of
figures one run measured; a result holds both sides' runs (``result["runs"]["ours"]`` and ``["upstream"]``),
the job count, and where upstream's runs came from when another invocation made them.
"""

from __future__ import annotations

import json
import statistics
from pathlib import Path
from typing import Any

FIGURES = (
    ("t_launchers", "time until every launcher Job exists (s)"),
    ("t_done", "time until every MPIJob is Succeeded (s)"),
    ("t_converged", "time until workers are gone, writes quiet (s)"),
    ("writes_per_job", "writes per job (audit log)"),
    ("cpu", "CPU seconds, submission to convergence"),
    ("cpu_ms_per_job", "CPU ms per job"),
    ("cpu_startup", "CPU seconds to start (not per job)"),
    ("cpu_sys_share", "share of that CPU in the kernel"),
    ("rss_mib", "peak RSS (MiB)"),
    ("workers_left", "workers still Running 60 s after the last write"),
)

# Figures only ours reports, from its /metrics.
OWN_FIGURES = (
    ("syncs_per_job", "syncs per job"),
    ("watch_events_per_job", "watch events per job"),
    ("watch_kib_per_job", "watch KiB per job"),
)


def _shown(key: str, value: Any) -> str:
    if not isinstance(value, (int, float)):
        return f"{'-':>10}"
    return f"{value:10.2f}" if key == "cpu_sys_share" else f"{value:10.1f}"


def ratio(a: float | None, b: float | None) -> str:
    if a is None or b is None:
        return "n/a (timed out)"
    return f"{a / b:.2f}" if b else "n/a"


TIMES = ("t_launchers", "t_done", "t_converged")


def row(key: str, ours: dict[str, Any], up: dict[str, Any]) -> tuple[str, str, str]:
    """(upstream, ours, ratio) as shown. A side that timed out shows its times as "> the time waited"
    (how far it got is printed below the table), the ratio of such a time is an upper bound, and its other
    figures, which cover part of the jobs, are not compared."""
    shown = []
    for side in (up, ours):
        value = side.get(key)
        if value is None and key in TIMES and side.get("t_waited") is not None:
            shown.append(f"{'> ' + format(side['t_waited'], '.1f'):>10}")
        else:
            shown.append(_shown(key, value))
    a, b = ours.get(key), up.get(key)
    if key not in ours or key not in up:  # a figure added since an --upstream-from file was saved
        return shown[0], shown[1], "-"
    if key in TIMES and a is not None and b is None and up.get("t_waited"):
        return shown[0], shown[1], f"< {a / up['t_waited']:.2f}"
    if key not in TIMES and (ours.get("t_done") is None or up.get("t_done") is None):
        return shown[0], shown[1], "n/a (timed out)"
    return shown[0], shown[1], ratio(a, b)


def progress(which: str, figures: dict[str, Any], jobs: int) -> str | None:
    if figures.get("t_done") is not None or figures.get("t_waited") is None:
        return None
    return (
        f"{which} timed out after {figures['t_waited']:.0f} s: {figures['launchers_seen']} of {jobs} launcher"
        f" Jobs, {figures['succeeded_seen']} of {jobs} MPIJobs Succeeded"
    )


def combine(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """One side's runs as one: each figure's median, its spread (lowest, highest) under "spread", and the
    run count. A time that some run did not reach is None, with the shortest wait of those runs (so the
    side shows "> that wait"); counts by write kind are medians per kind."""
    out: dict[str, Any] = {"runs": len(runs), "spread": {}}
    if not runs:
        return out
    keys = {k for r in runs for k in r}
    for key in sorted(keys):
        values = [r.get(key) for r in runs]
        if all(isinstance(v, dict) for v in values):
            kinds = {k for v in values for k in v}
            out[key] = {k: statistics.median(v.get(k, 0) for v in values) for k in sorted(kinds)}
        elif all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in values):
            out[key] = statistics.median(values)
            out["spread"][key] = (min(values), max(values))
        elif key in TIMES and any(v is None for v in values):
            out[key] = None
    short = [r["t_waited"] for r in runs if r.get("t_done") is None and r.get("t_waited") is not None]
    if short:
        out["t_waited"] = min(short)
        out["t_done"] = None
    return out


def spread(side: dict[str, Any], key: str) -> str:
    low_high = side.get("spread", {}).get(key)
    if side.get("runs", 1) < 2 or low_high is None:
        return ""
    low, high = low_high
    fmt = ".2f" if key in ("cpu_sys_share", "launchers_over_pace") else ".1f"
    return f"{low:{fmt}}-{high:{fmt}}"


def order(repeat: int, ours: bool, upstream: bool) -> list[str]:
    """The runs in the order they are made: alternating, ours first."""
    sides = [s for s, on in (("ours", ours), ("upstream", upstream)) if on]
    return [side for _ in range(repeat) for side in sides]


def table(result: dict[str, Any]) -> list[str]:
    """The summary: medians, ours/upstream of the medians, and each side's spread."""
    up, ours = combine(result["runs"]["upstream"]), combine(result["runs"]["ours"])
    head = "upstream*" if result.get("upstream_from") else "upstream"
    lines = [
        f"{'':44} {head:>10} {'ours':>10} {'ours/upstream':>14}   spread: upstream; ours "
        f"({up['runs']} and {ours['runs']} runs)"
    ]
    for key, label in FIGURES:
        b, a, shown = row(key, ours, up)
        lines.append(f"{label:44} {b} {a} {shown:>14}   {spread(up, key) or '-'}; {spread(ours, key) or '-'}")
    for key, label in OWN_FIGURES:
        if key in ours:
            lines.append(f"{label + ' (ours)':44} {'':>10} {ours[key]:10.1f}")
    if "launchers_over_pace" in ours or "launchers_over_pace" in up:
        shown = [
            f"{side['launchers_over_pace']:.2f} ({spread(side, 'launchers_over_pace') or 'one run'})"
            if isinstance(side.get("launchers_over_pace"), (int, float))
            else "n/a"
            for side in (up, ours)
        ]
        lines.append(
            f"every launcher Job exists / the API server's pace: upstream {shown[0]}, ours {shown[1]}"
        )
    for which, side in (("upstream", up), ("ours", ours)):
        line = progress(which, side, result["jobs"])
        if line:
            lines.append(line)
    for which, side in (("upstream", up), ("ours", ours)):
        if "writes" in side:
            writes = {k: round(v, 1) for k, v in side["writes"].items()}
            lines.append(
                f"{which} writes (median per kind): {writes}, and {side['lease_writes']:.0f} Lease writes"
            )
    if result.get("upstream_from"):
        when = result.get("upstream_date", "date unknown")
        lines.append(
            f"* upstream's runs are from {result['upstream_from']} ({when}),"
            " another invocation: this machine's speed moves by a third from day to day, so compare with care"
        )
    return lines


def saved_runs(path: Path, result: dict[str, Any]) -> tuple[list[dict[str, Any]], str]:
    """Upstream's runs in an earlier --save, and when they were made; a run of other sizes or flags is
    refused."""
    earlier = json.loads(path.read_text())
    same = ("jobs", "workers", "qps", "burst", "queue_qps")
    if any(earlier.get(k) != result[k] for k in same):
        raise ValueError(f"--upstream-from {path}: not a run of the same {', '.join(same)}")
    runs = earlier.get("runs", {}).get("upstream") or ([earlier["upstream"]] if "upstream" in earlier else [])
    if not runs:
        raise ValueError(f"--upstream-from {path}: holds no upstream run")
    return runs, str(earlier.get("date", "date unknown"))
