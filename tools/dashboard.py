"""The Grafana dashboard (deploy/grafana/mpijob-operator.json) drawn without Grafana: every panel's targets
are evaluated with Prometheus' query_range API and drawn with matplotlib in the dashboard's grid layout.

What is approximated, and how:

* Variables are substituted as Grafana would with "All" chosen (`$job`, `$phase` -> their `allValue`),
  `$__interval` is the query step and `$__rate_interval` is Grafana's max(step + scrape interval,
  4 x scrape interval), the scrape interval being the data source's.
* timeseries: one line per series, legend from `legendFormat`; `drawStyle: bars` with `stacking: normal`
  as stacked bars. A point with no neighbour (a short-lived series) is drawn as a dot, as Grafana does.
* heatmap (`format: heatmap`, Prometheus buckets, `calculate: false`): the cumulative `le` series are
  turned into per-bucket counts and drawn as cells, one row per bucket, empty cells left blank.
* A panel whose queries return no finite value says "No data"; a query Prometheus refused says so.

matplotlib is imported by `draw` only (the `docs` extra), so the rest of this module needs nothing.
"""

from __future__ import annotations

import json
import math
import re
import urllib.parse
import urllib.request
from collections.abc import Callable, Iterable, Mapping
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

import attrs

if TYPE_CHECKING:
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure

REPO = Path(__file__).resolve().parents[1]
DASHBOARD = REPO / "deploy" / "grafana" / "mpijob-operator.json"
NO_DATA = "No data"
# Grafana's grid: 24 columns; a row unit is 30 px, a column of a 1800 px wide screen 75 px.
COLUMNS = 24
UNIT_PX = (75, 30)
DPI = 100
LEGEND = re.compile(r"\{\{\s*([A-Za-z_][A-Za-z0-9_]*)\s*\}\}")
# Grafana's classic palette, in its order.
PALETTE = (
    "#7EB26D",
    "#EAB839",
    "#6ED0E0",
    "#EF843C",
    "#E24D42",
    "#1F78C1",
    "#BA43A9",
    "#705DA0",
    "#508642",
    "#CCA300",
    "#447EBC",
    "#C15C17",
)


@attrs.frozen
class Series:
    legend: str
    times: tuple[float, ...]  # Unix seconds
    values: tuple[float, ...]  # NaN where Prometheus had no point or answered NaN

    def has_data(self) -> bool:
        return any(math.isfinite(v) for v in self.values)


@attrs.frozen
class Target:
    ref: str
    expr: str  # as sent: variables substituted
    legend_format: str
    series: tuple[Series, ...] = ()
    error: str = ""


@attrs.frozen
class Window:
    """The time range asked for and Grafana's interval variables for it."""

    start: float
    end: float
    step: float
    scrape_interval: float

    @property
    def rate_interval(self) -> float:
        return max(self.step + self.scrape_interval, 4 * self.scrape_interval)


def panels(dashboard: Mapping[str, Any]) -> list[dict[str, Any]]:
    """Every panel, rows included, with a collapsed row's panels after it."""
    out: list[dict[str, Any]] = []
    for p in dashboard["panels"]:
        out.append(p)
        out += p.get("panels", [])
    return out


def duration(seconds: float) -> str:
    """A PromQL duration of whole seconds."""
    return f"{max(1, round(seconds))}s"


def variables(dashboard: Mapping[str, Any], window: Window) -> dict[str, str]:
    """Each variable as a query has it substituted, with "All" chosen for the multi-value ones."""
    out = {"$__rate_interval": duration(window.rate_interval), "$__interval": duration(window.step)}
    for var in dashboard.get("templating", {}).get("list", []):
        if var.get("includeAll"):
            out["$" + var["name"]] = var.get("allValue") or ".*"
    return out


def substitute(expr: str, values: Mapping[str, str]) -> str:
    for var, value in sorted(values.items(), key=lambda kv: -len(kv[0])):
        expr = expr.replace("${" + var[1:] + "}", value).replace(var, value)
    if "$" in expr:
        raise ValueError(f"a variable with no value: {expr}")
    return expr


def title_of(panel: Mapping[str, Any]) -> str:
    """The title as Grafana shows it with "All" chosen."""
    return re.sub(r"\$\{?(\w+)\}?", "All", str(panel.get("title", "")))


def legend(fmt: str, labels: Mapping[str, str]) -> str:
    """Grafana's legendFormat: `{{label}}` replaced; without a format, the series' label set."""
    if fmt and fmt != "__auto":
        text = LEGEND.sub(lambda m: labels.get(m.group(1), ""), fmt).strip()
        if text:
            return text
    name = labels.get("__name__", "")
    rest = ", ".join(f'{k}="{v}"' for k, v in sorted(labels.items()) if k != "__name__")
    return f"{name}{{{rest}}}" if rest or not name else name


def series_of(answer: Mapping[str, Any], legend_format: str) -> tuple[Series, ...]:
    """The series of one query_range answer (a matrix), sorted by legend."""
    data = answer.get("data") or {}
    if data.get("resultType") != "matrix":
        raise ValueError(f"not a matrix: {data.get('resultType')!r}")
    out = []
    for r in data.get("result") or []:
        points = r.get("values") or []
        out.append(
            Series(
                legend=legend(legend_format, r.get("metric") or {}),
                times=tuple(float(t) for t, _ in points),
                values=tuple(float(v) for _, v in points),  # "NaN", "+Inf" parse as such
            )
        )
    return tuple(sorted(out, key=lambda s: s.legend))


Fetch = Callable[[str, Window], Mapping[str, Any]]


def query_range(url: str) -> Fetch:
    """A fetch function asking the Prometheus at `url` (its HTTP API)."""

    def fetch(expr: str, window: Window) -> Mapping[str, Any]:
        form = urllib.parse.urlencode(
            {"query": expr, "start": window.start, "end": window.end, "step": window.step}
        ).encode()
        req = urllib.request.Request(f"{url.rstrip('/')}/api/v1/query_range", data=form)
        try:
            with urllib.request.urlopen(req, timeout=30) as resp:
                answer: Mapping[str, Any] = json.load(resp)
                return answer
        except urllib.error.HTTPError as err:  # Prometheus explains a bad query in the body
            body: Mapping[str, Any] = json.loads(err.read() or b"{}")
            return body

    return fetch


def evaluate(dashboard: Mapping[str, Any], window: Window, fetch: Fetch) -> dict[int, list[Target]]:
    """Every target of every panel that has targets, by panel id."""
    values = variables(dashboard, window)
    out: dict[int, list[Target]] = {}
    for p in panels(dashboard):
        targets = []
        for t in p.get("targets", []):
            expr = substitute(t["expr"], values)
            fmt = t.get("legendFormat", "")
            answer = fetch(expr, window)
            if answer.get("status") != "success":
                error = str(answer.get("error") or answer.get("status") or "no answer")
                targets.append(Target(t.get("refId", ""), expr, fmt, error=error))
                continue
            targets.append(Target(t.get("refId", ""), expr, fmt, series_of(answer, fmt)))
        if targets:
            out[int(p["id"])] = targets
    return out


def answers_json(data: Mapping[int, list[Target]]) -> dict[str, Any]:
    """What `evaluate` got, in a form `answers_from_json` reads back (to draw again without a run)."""
    return {
        str(pid): [attrs.asdict(t, value_serializer=_nan_as_str) for t in targets]
        for pid, targets in data.items()
    }


def _nan_as_str(_inst: object, _field: object, value: Any) -> Any:
    if isinstance(value, tuple) and value and isinstance(value[0], float):
        return [v if math.isfinite(v) else str(v) for v in value]
    return value


def answers_from_json(raw: Mapping[str, Any]) -> dict[int, list[Target]]:
    out: dict[int, list[Target]] = {}
    for pid, targets in raw.items():
        out[int(pid)] = [
            Target(
                t["ref"],
                t["expr"],
                t["legend_format"],
                tuple(
                    Series(s["legend"], tuple(map(float, s["times"])), tuple(map(float, s["values"])))
                    for s in t["series"]
                ),
                t["error"],
            )
            for t in targets
        ]
    return out


# -- drawing ------------------------------------------------------------------------------------------
@attrs.define
class Drawn:
    """What was drawn for one panel (the unit test reads it)."""

    title: str
    kind: str
    axes: Axes
    series: int  # series drawn (heatmap: bucket rows with a count)
    no_data: bool
    errors: list[str]


def si(value: float) -> str:
    if value == 0 or not math.isfinite(value):
        return "0" if value == 0 else str(value)
    for factor, suffix in ((1e9, " G"), (1e6, " M"), (1e3, " K")):
        if abs(value) >= factor:
            return f"{value / factor:.3g}{suffix}"
    if abs(value) < 0.01:
        return f"{value:.2g}"
    return f"{value:.3g}"


def format_unit(value: float, unit: str) -> str:
    """A tick label in one of the dashboard's units (Grafana's names)."""
    if unit == "s":
        a = abs(value)
        if value == 0:
            return "0 s"
        if a < 1:
            return f"{value * 1000:.3g} ms"
        if a < 120:
            return f"{value:.3g} s"
        if a < 7200:
            return f"{value / 60:.3g} min"
        return f"{value / 3600:.3g} h"
    if unit == "ops":
        return f"{si(value)} ops/s".replace("  ", " ")
    if unit == "reqps":
        return f"{si(value)} req/s".replace("  ", " ")
    if unit == "bytes":  # Grafana's IEC bytes
        for factor, suffix in ((2**30, "GiB"), (2**20, "MiB"), (2**10, "KiB")):
            if abs(value) >= factor:
                return f"{value / factor:.3g} {suffix}"
        return f"{value:.3g} B"
    if unit == "percentunit":
        return f"{value * 100:.3g}%"
    return si(value)


def _panel_box(fig: Figure, grid: Mapping[str, int], rows: int, top: float) -> tuple[float, ...]:
    """(left, bottom, width, height) of a gridPos in figure fractions; `top` is the header's share."""
    body = 1 - top
    left = grid["x"] / COLUMNS
    width = grid["w"] / COLUMNS
    height = grid["h"] / rows * body
    bottom = body - (grid["y"] + grid["h"]) / rows * body
    return left, bottom, width, height


def draw(
    dashboard: Mapping[str, Any],
    data: Mapping[int, list[Target]],
    window: Window,
    out: Path | None,
    heading: str = "",
) -> tuple[Figure, list[Drawn]]:
    """Draw every panel at its gridPos; save a PNG to `out` if given."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.dates as mdates
    import matplotlib.pyplot as plt
    from matplotlib.patches import Rectangle

    all_panels = panels(dashboard)
    rows = max(p["gridPos"]["y"] + p["gridPos"]["h"] for p in all_panels)
    header_px = 60 if heading else 0
    width_px, height_px = COLUMNS * UNIT_PX[0], rows * UNIT_PX[1] + header_px
    fig = plt.figure(figsize=(width_px / DPI, height_px / DPI), dpi=DPI, facecolor="#f4f5f5")
    top = header_px / height_px
    if heading:
        fig.text(0.006, 1 - top / 2, heading, fontsize=10, va="center", ha="left", color="#24292e")
    pad_x, pad_y = 4 / width_px, 4 / height_px  # the gap between panels
    drawn: list[Drawn] = []
    for p in all_panels:
        left, bottom, w, h = _panel_box(fig, p["gridPos"], rows, top)
        title = title_of(p)
        if p["type"] == "row":
            fig.text(left + pad_x, bottom + h / 2, title, fontsize=11, weight="bold", va="center")
            continue
        fig.add_artist(
            Rectangle(
                (left + pad_x, bottom + pad_y),
                w - 2 * pad_x,
                h - 2 * pad_y,
                transform=fig.transFigure,
                facecolor="white",
                edgecolor="#d8d9da",
                linewidth=0.8,
                zorder=0,
            )
        )
        fig.text(left + 3 * pad_x, bottom + h - 5 * pad_y, title, fontsize=9, weight="bold", va="top")
        targets = data.get(int(p["id"]), [])
        # room for the title above, the legend and the time axis below, the value axis on the left
        ax = fig.add_axes(
            (left + w * 0.12, bottom + h * 0.30, w * 0.84, h * 0.55), facecolor="white", zorder=1
        )
        unit = (p.get("fieldConfig", {}).get("defaults") or {}).get("unit", "short")
        errors = [f"{t.ref}: {t.error}" for t in targets if t.error]
        if p["type"] == "heatmap":
            count = _heatmap(ax, fig, p, targets, unit, window)
        else:
            count = _timeseries(ax, p, targets, unit, window)
        no_data = count == 0
        if no_data or errors:
            ax.set_xticks([])
            ax.set_yticks([])
            for spine in ax.spines.values():
                spine.set_visible(False)
            text = "Query error: " + "; ".join(errors) if errors else NO_DATA
            ax.text(
                0.5, 0.5, text, ha="center", va="center", fontsize=11, color="#8e8e8e", transform=ax.transAxes
            )
        else:
            ax.xaxis.set_major_formatter(mdates.DateFormatter("%H:%M:%S", tz=UTC))
            ax.xaxis.set_major_locator(mdates.AutoDateLocator(minticks=3, maxticks=6))
            ax.tick_params(labelsize=7, colors="#464c54")
            for spine in ax.spines.values():
                spine.set_color("#d8d9da")
            ax.grid(True, color="#ececec", linewidth=0.6)
            ax.set_axisbelow(True)
        ax.set_xlim(_num(window.start), _num(window.end))
        drawn.append(Drawn(title, p["type"], ax, count, no_data, errors))
    if out is not None:
        fig.savefig(out, dpi=DPI, facecolor=fig.get_facecolor())
    return fig, drawn


def _num(t: float) -> float:
    """Unix seconds as matplotlib's date number."""
    import matplotlib.dates as mdates

    return float(mdates.date2num(datetime.fromtimestamp(t, UTC)))


def overrides(panel: Mapping[str, Any], ref: str) -> dict[str, Any]:
    """The field properties a panel's overrides set for the target `ref` (`byFrameRefID` matchers)."""
    out: dict[str, Any] = {}
    for o in (panel.get("fieldConfig") or {}).get("overrides") or []:
        matcher = o.get("matcher") or {}
        if matcher.get("id") == "byFrameRefID" and matcher.get("options") == ref:
            out.update({prop["id"]: prop.get("value") for prop in o.get("properties") or []})
    return out


def _timeseries(ax: Axes, panel: Mapping[str, Any], targets: Iterable[Target], unit: str, w: Window) -> int:
    from matplotlib.ticker import FuncFormatter

    custom = (panel.get("fieldConfig", {}).get("defaults") or {}).get("custom") or {}
    bars = custom.get("drawStyle") == "bars"
    stacked = (custom.get("stacking") or {}).get("mode") == "normal"
    fill = float(custom.get("fillOpacity", 0)) / 100
    # (series, its axis: a unit and a side); an override may give a target its own unit on the right
    drawn: list[tuple[Series, str, bool]] = []
    for t in targets:
        props = overrides(panel, t.ref)
        right = props.get("custom.axisPlacement") == "right"
        drawn += [(s, props.get("unit", unit), right) for s in t.series if s.has_data()]
    if not drawn:
        return 0
    axes = {False: ax}
    if any(right for *_, right in drawn):
        box = ax.get_position()  # room for the right axis' labels inside the panel
        ax.set_position((box.x0, box.y0, box.width * 0.9, box.height))
        axes[True] = ax.twinx()
    width = w.step / 86400 * 0.8  # in days, matplotlib's date unit
    base: dict[float, float] = {}
    for i, (s, _, right) in enumerate(drawn):
        on = axes[right]
        color = PALETTE[i % len(PALETTE)]
        xs = [_num(t) for t in s.times]
        if bars:
            ys = [v if math.isfinite(v) else 0.0 for v in s.values]
            bottoms = [base.get(t, 0.0) if stacked else 0.0 for t in s.times]
            on.bar(xs, ys, width=width, bottom=bottoms, color=color, alpha=max(fill, 0.3), label=s.legend)
            if stacked:
                for t, y in zip(s.times, ys, strict=True):
                    base[t] = base.get(t, 0.0) + y
            continue
        on.plot(xs, s.values, color=color, linewidth=1.2, label=s.legend)
        if fill:
            on.fill_between(xs, s.values, color=color, alpha=fill, linewidth=0)
        lonely = [
            (x, v)
            for k, (x, v) in enumerate(zip(xs, s.values, strict=True))
            if math.isfinite(v)
            and (k == 0 or not math.isfinite(s.values[k - 1]))
            and (k == len(xs) - 1 or not math.isfinite(s.values[k + 1]))
        ]
        if lonely:
            on.plot(*zip(*lonely, strict=True), "o", color=color, markersize=3)
    for right, on in axes.items():
        mine = [(s, u) for s, u, r in drawn if r == right]
        if not mine:
            continue
        u = mine[0][1]
        on.yaxis.set_major_formatter(FuncFormatter(lambda v, _pos, u=u: format_unit(v, u)))
        if u == "bytes":  # round numbers of KiB, MiB, GiB, as Grafana's
            on.yaxis.set_major_locator(_binary_locator(on.get_ylim()[1]))
        on.tick_params(labelsize=7, colors="#464c54")
        for spine in on.spines.values():
            spine.set_color("#d8d9da")
        finite = [v for s, _ in mine for v in s.values if math.isfinite(v)]
        if bars and stacked:
            finite.append(max(base.values(), default=0.0))
        if min(finite) >= 0:  # Grafana starts at 0 then; headroom above the highest point
            on.set_ylim(bottom=0.0, top=max(finite) * 1.1 or 1.0)
    handles = [h for on in axes.values() for h in on.get_legend_handles_labels()[0]]
    ax.legend(
        handles=handles,
        loc="upper left",
        bbox_to_anchor=(-0.1, -0.14),
        ncol=min(4, len(drawn)),
        fontsize=6.5,
        frameon=False,
        handlelength=1.2,
        columnspacing=1.0,
    )
    return len(drawn)


def _binary_locator(high: float) -> Any:
    """Ticks at round multiples of the binary prefix that fits `high`."""
    from matplotlib.ticker import MaxNLocator

    scale = 1024 ** max(0, int(math.log(max(high, 1.0), 1024)))

    class Binary(MaxNLocator):
        def tick_values(self, vmin: float, vmax: float) -> Any:
            return super().tick_values(vmin / scale, vmax / scale) * scale

    return Binary(nbins=5)


def _heatmap(
    ax: Axes, fig: Figure, panel: Mapping[str, Any], targets: Iterable[Target], unit: str, w: Window
) -> int:
    import numpy as np

    scheme = ((panel.get("options") or {}).get("color") or {}).get("scheme", "Oranges")
    buckets = [s for t in targets for s in t.series]
    if not any(s.has_data() for s in buckets):
        return 0

    def upper(s: Series) -> float:
        return math.inf if s.legend in ("+Inf", "Inf") else float(s.legend)

    buckets.sort(key=upper)
    times = sorted({t for s in buckets for t in s.times})
    col = {t: i for i, t in enumerate(times)}
    cum = np.full((len(buckets), len(times)), np.nan)
    for r, s in enumerate(buckets):
        for t, v in zip(s.times, s.values, strict=True):
            cum[r, col[t]] = v
    cum = np.nan_to_num(cum)
    counts = np.diff(cum, axis=0, prepend=0.0)  # cumulative le buckets -> per bucket
    counts[counts <= 1e-9] = np.nan  # Grafana leaves empty cells blank
    half = w.step / 2
    edges_x = [_num(t - half) for t in times] + [_num(times[-1] + half)]
    mesh = ax.pcolormesh(
        edges_x,
        np.arange(len(buckets) + 1),
        np.ma.masked_invalid(counts),
        cmap=scheme,
        edgecolors="white",
        linewidth=0.5,
    )
    labels = ["+Inf" if math.isinf(upper(s)) else format_unit(upper(s), unit) for s in buckets]
    every = math.ceil(len(labels) / 9)  # as Grafana thins a crowded axis; +Inf, the top row, kept
    labels = [x if (len(labels) - 1 - k) % every == 0 else "" for k, x in enumerate(labels)]
    ax.set_yticks(np.arange(len(buckets)) + 0.5, labels)
    ax.tick_params(axis="y", labelsize=6)
    bar = fig.colorbar(mesh, ax=ax, fraction=0.03, pad=0.01)
    bar.ax.tick_params(labelsize=6)
    return int(np.count_nonzero(np.nansum(np.nan_to_num(counts), axis=1)))
