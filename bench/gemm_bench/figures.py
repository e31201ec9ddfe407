"""Speedup figures: a plain-data *spec* built from a Report, drawn by matplotlib into bytes.

Why two steps. A :class:`FigureSpec` holds exactly what a figure shows (titles, categories, the
speedups and their spread, the reference line) and nothing else, so :meth:`FigureSpec.key` (a
hash of that content, of :data:`FIGURE_VERSION` and of the style) names the file: a caller that
keeps figures under their key never draws a figure whose inputs did not change, across rebuilds
and across pages. Drawing (:func:`render`) is the expensive part and happens only for new keys.

Pure: matplotlib and :mod:`gemm_bench` only (no Sphinx, no torch), and matplotlib is imported only
when something is drawn, so importing this module costs nothing to a build that draws nothing.

Theme. One SVG serves Furo's light and dark pages: text, axes, ticks, grid and the reference line
are drawn in ``currentColor`` and the root element sets ``color`` from the CSS variable
``--gemm-figure-ink`` (which the page defines when the SVG is inlined), else from the reader's
``prefers-color-scheme`` (an SVG shown through ``<img>`` sees that, not the page's variables),
else a dark ink. Data colours (Okabe-Ito) are mid-tones that read on both backgrounds. PDF and
PNG (LaTeX and other builders) are drawn with a fixed light-page ink; the README, which GitHub
shows through ``<img>`` in a ``<picture>``, gets fixed ``light`` and ``dark`` variants.

Safety and determinism. Text comes from files (device names, titles, captions), so mathtext and
usetex are off for every figure: a ``$`` is a dollar sign. Text is written as SVG text (smaller,
selectable, searchable), ids use a fixed hash salt and no date is written, so the same spec gives
the same bytes in any process.
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import io
import json
import math
import pickle
import statistics
import sys
import textwrap
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, cast

from gemm_bench import hardware
from gemm_bench.cache import write_atomic
from gemm_bench.devices import device_label
from gemm_bench.precisions import BASELINE, MODE_NAMES, MODES, PRECISIONS
from gemm_bench.report import Report
from gemm_bench.shapes import OP_NAMES, PASS_NAMES, PASSES, GemmShape

if TYPE_CHECKING:
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure

#: Bump when the drawing code changes what a spec looks like: every figure key changes with it.
FIGURE_VERSION = "5"

FORMATS: tuple[str, ...] = ("svg", "pdf", "png")
#: ``page``: SVG whose ink follows the page (``currentColor``); ``light`` / ``dark``: fixed inks.
Theme = Literal["page", "light", "dark"]
#: Kept for the extension's old two-file SVG path until it switches to one ``page`` SVG.
THEMES: tuple[str, ...] = ("light", "dark")

#: Okabe-Ito colours: distinguishable with colour-blindness, and mid-tone enough to read on both a
#: white and a near-black background.
PRECISION_COLORS = {
    "bf16": "#999999",
    "fp8-delayed": "#E69F00",
    "fp8-current": "#56B4E9",
    "fp8-block": "#009E73",
    "mxfp8": "#CC79A7",
    "nvfp4": "#D55E00",
}

#: Fixed inks (GitHub's light/dark foregrounds) and, for ``page``, a sentinel colour that no data
#: colour uses, replaced by ``currentColor`` in the SVG text after drawing.
_INK = {"light": "#1f2328", "dark": "#e6edf3"}
_PAGE_INK = "#010203"
_GRID_ALPHA = 0.22
_SPINE_ALPHA = 0.45

#: Width 3.8 in and no text below 8.4 pt. On a 390 px phone a figure nested in two tab panels gets
#: about 296 px (measured in Chromium: Furo's margins and the panels' padding), so the smallest
#: label renders at 8.4 * (4/3) * 296 / (3.8 * 96) = 9.1 px, above the 9 px floor (the browser test
#: measures it; a unit test checks the SVG against PHONE_WIDTH_PX).
WIDTH_IN = 3.8
FONT_PT = 9.0
SMALL_PT = 8.4
PHONE_WIDTH_PX = 296
MIN_PHONE_PX = 9.0

_RC: dict[str, Any] = {
    "svg.hashsalt": "gemm-benchmark",
    "svg.fonttype": "none",
    "text.parse_math": False,
    "text.usetex": False,
    "font.family": "sans-serif",
    "font.sans-serif": ["DejaVu Sans"],
    "font.size": FONT_PT,
    "axes.titlesize": FONT_PT + 1,
    "axes.labelsize": FONT_PT,
    "xtick.labelsize": FONT_PT,
    "ytick.labelsize": FONT_PT,
    "legend.fontsize": FONT_PT,
    "path.simplify": False,
    "axes.unicode_minus": False,
}

_SAVE_METADATA: dict[str, dict[str, Any]] = {
    "svg": {"Date": None, "Creator": None},
    "pdf": {"CreationDate": None, "ModDate": None, "Creator": None, "Producer": None},
    "png": {"Software": None},
}

#: The root ``<svg>`` of a ``page`` figure: ink from the page when inlined, else from the
#: reader's colour scheme. The class scopes the style so that an inlined SVG styles nothing else.
_PAGE_CLASS = "gemm-figure-svg"
_PAGE_STYLE = (f'<style type="text/css">@media (prefers-color-scheme: dark) {{ svg.{_PAGE_CLASS} '
               f'{{ --gemm-figure-ink-auto: {_INK["dark"]} }} }}</style>')
_PAGE_ROOT_ATTRS = (f'class="{_PAGE_CLASS}" style="color: var(--gemm-figure-ink, '
                    f'var(--gemm-figure-ink-auto, {_INK["light"]}))"')


class FigureError(Exception):
    """A figure that cannot be made from what was given (no result, an unknown format or theme)."""


# ----------------------------------------------------------------------------------------- spec
@dataclasses.dataclass(frozen=True)
class Series:
    """One precision's values across a panel's categories; None where nothing was measured.

    ``low`` and ``high`` bound the spread of each value (see :func:`ratio_spread`); None where the
    stored statistics cannot give one, and then no error bar is drawn.
    """

    precision: str
    label: str
    color: str
    values: tuple[float | None, ...]
    low: tuple[float | None, ...]
    high: tuple[float | None, ...]
    #: ``scatter`` figures: each value's x coordinate (``values`` are the y coordinates).
    x: tuple[float | None, ...] = ()


@dataclasses.dataclass(frozen=True)
class Panel:
    """One axes: categories (bar rows, or sweep points at positions ``x``) and their series."""

    title: str
    categories: tuple[str, ...]
    series: tuple[Series, ...]
    x: tuple[float, ...] = ()


@dataclasses.dataclass(frozen=True)
class FigureSpec:
    """Everything a figure shows, as plain data; equal specs draw equal bytes.

    ``kind`` ``bars``: horizontal bars, one row per category, one bar per series, the first row
    in bold when ``emphasize_first`` (the whole-model total). ``sweep``: one line per series
    against ``Panel.x`` on a log-2 axis. ``scatter``: one labelled point per series value at
    (``Series.x``, value), ``category_label`` naming the x axis. ``reference`` draws a dashed line
    (1.0: as fast as BF16); ``references`` draws dotted lines with a label each (a device's peak).
    ``value_format`` formats the value printed beside each bar.
    """

    kind: Literal["bars", "sweep", "scatter"]
    title: str
    value_label: str
    category_label: str
    panels: tuple[Panel, ...]
    reference: float | None = 1.0
    emphasize_first: bool = False
    note: str = ""
    value_format: str = "{:.2f}×"
    references: tuple[tuple[float, str], ...] = ()

    def key(self) -> str:
        """A stable hash of the content, :data:`FIGURE_VERSION` and the style: the file's name."""
        payload = json.dumps(
            {"version": FIGURE_VERSION, "style": _STYLE_FINGERPRINT, "spec": dataclasses.asdict(self)},
            sort_keys=True, ensure_ascii=False, default=repr,
        )
        return hashlib.sha256(payload.encode("utf-8")).hexdigest()[:20]

    @property
    def is_empty(self) -> bool:
        return not any(panel.series for panel in self.panels)


_STYLE_FINGERPRINT = json.dumps(
    {"rc": _RC, "colors": PRECISION_COLORS, "ink": _INK, "width": WIDTH_IN, "small": SMALL_PT},
    sort_keys=True, default=repr,
)


# --------------------------------------------------------------------------------------- spread
def _finite_positive(value: object) -> float | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    number = float(value)
    return number if math.isfinite(number) and number > 0 else None


def quartiles(stats: dict[str, Any]) -> tuple[float, float] | None:
    """The first and third quartile of one cell's timings, in ms, or None if not derivable.

    From ``samples_ms`` when the file holds at least four valid samples, with the same quartile
    definition the timer used for ``iqr_ms`` (:func:`statistics.quantiles`, ``n=4``, exclusive);
    otherwise ``median_ms -/+ iqr_ms / 2`` (exact for a symmetric distribution, and the only
    reading of the two numbers every result file must hold). Hostile values give None, never an
    exception.
    """
    samples = stats.get("samples_ms")
    if isinstance(samples, list) and len(samples) >= 4:
        # Every figure key is computed from these on every read of a page, so the common case
        # (all floats) skips the per-sample calls; a chained comparison is False for NaN too.
        if all(type(v) is float for v in samples):
            values: list[float | None] = samples if all(0 < v < math.inf for v in samples) else [None]
        else:
            values = [_finite_positive(v) for v in samples]
        if all(v is not None for v in values):
            q1, _, q3 = statistics.quantiles([v for v in values if v is not None], n=4)
            return (q1, q3) if 0 < q1 <= q3 and math.isfinite(q3) else None
    median = _finite_positive(stats.get("median_ms"))
    iqr = stats.get("iqr_ms")
    if median is None or isinstance(iqr, bool) or not isinstance(iqr, (int, float)) or not math.isfinite(iqr):
        return None
    if iqr < 0 or median - iqr / 2 <= 0:
        return None
    return median - iqr / 2, median + iqr / 2


def ratio_spread(base: Sequence[tuple[float, float] | None], mine: Sequence[tuple[float, float] | None],
                 value: float | None) -> tuple[float | None, float | None]:
    """The spread of a speedup ``sum(base ms) / sum(mine ms)``, from the quartiles of both.

    ``low = sum(Q1 of base) / sum(Q3 of mine)`` and ``high = sum(Q3 of base) / sum(Q1 of mine)``:
    the ratio when the baseline runs at its faster quartile and the other precision at its slower
    one, and the reverse. For one GEMM the sums have one term; for the whole model they run over
    the layer's GEMMs (a sum of quartiles, not the quartile of a sum: it widens the bar, never
    narrows it). The interval is widened, if needed, to contain ``value`` (the ratio of medians),
    so a bar never sits outside its own whisker. It says how much the repetitions varied, not a
    confidence interval; None when any cell lacks usable statistics.
    """
    if value is None or not base or len(base) != len(mine) or any(q is None for q in (*base, *mine)):
        return None, None
    b1 = sum(q[0] for q in base if q is not None)
    b3 = sum(q[1] for q in base if q is not None)
    m1 = sum(q[0] for q in mine if q is not None)
    m3 = sum(q[1] for q in mine if q is not None)
    if m1 <= 0 or m3 <= 0:
        return None, None
    low, high = b1 / m3, b3 / m1
    if not (math.isfinite(low) and math.isfinite(high)):
        return None, None
    return min(low, value), max(high, value)


def _finite(value: float | None) -> float | None:
    return value if value is not None and math.isfinite(value) and value > 0 else None


def gemm_point(report: Report, mode: str, precision: str, gemm: GemmShape) -> tuple[float | None, ...]:
    """(speedup, low, high) of one GEMM vs BF16: the Report's value and its quartile spread."""
    value = _finite(report.gemm_speedup(mode, precision, gemm))
    base = quartiles(report.cell(mode, BASELINE, gemm).stats)
    mine = quartiles(report.cell(mode, precision, gemm).stats)
    return (value, *ratio_spread([base], [mine], value))


def total_point(report: Report, mode: str, precision: str) -> tuple[float | None, ...]:
    """(speedup, low, high) of the whole model (sum of the layer's GEMMs) vs BF16."""
    value = _finite(report.total(mode, precision).speedup_vs_bf16)
    base = [quartiles(c.stats) for c in report.cells(mode, BASELINE)]
    mine = [quartiles(c.stats) for c in report.cells(mode, precision)]
    return (value, *ratio_spread(base, mine, value))


# ------------------------------------------------------------------------------------ building
def measured_precisions(report: Report, mode: str) -> list[str]:
    """Non-baseline precisions with every GEMM measured in ``mode``: the ones a figure can plot."""
    return [p for p in report.precisions if p != BASELINE and report.status(mode, p)[0] == "measured"]


def _series(precision: str, points: Sequence[tuple[float | None, ...]]) -> Series:
    return Series(precision, PRECISIONS[precision].display, PRECISION_COLORS[precision],
                  tuple(p[0] for p in points), tuple(p[1] for p in points), tuple(p[2] for p in points))


def _gemm_label(report: Report, gemm: GemmShape) -> str:
    if report.kind == "model":
        return f"{OP_NAMES.get(gemm.op, gemm.op)} · {PASS_NAMES[gemm.pass_]}"
    return gemm.label


def build_spec(report: Report, mode: str, *, title: str = "") -> FigureSpec:
    """The figure of one report and mode, also when nothing beside BF16 was measured (a note)."""
    precisions = measured_precisions(report, mode)
    value_label = f"Speedup vs BF16 ({MODE_NAMES[mode]}; higher is faster)"
    if report.kind == "sweep":
        gemms = sorted(report.gemms, key=lambda g: g.m)
        series = tuple(_series(p, [gemm_point(report, mode, p, g) for g in gemms]) for p in precisions)
        panel = Panel("", tuple(str(g.m) for g in gemms), series, tuple(float(g.m) for g in gemms))
        return FigureSpec("sweep", title, value_label, "Square GEMM size S (S x S x S)", (panel,),
                          note="" if series else "no precision besides BF16 measured")
    gemms = [g for pass_ in PASSES for g in report.gemms if g.pass_ == pass_]
    categories = ("Whole model" if report.kind == "model" else "All shapes",
                  *(_gemm_label(report, g) for g in gemms))
    series = tuple(
        _series(p, [total_point(report, mode, p), *(gemm_point(report, mode, p, g) for g in gemms)])
        for p in precisions
    )
    return FigureSpec("bars", title, value_label, "", (Panel("", categories, series),), emphasize_first=True,
                      note="" if series else "no precision besides BF16 measured")


def _gemm_rows(report: Report) -> list[GemmShape]:
    if report.kind == "sweep":
        return sorted(report.gemms, key=lambda g: g.m)
    return [g for pass_ in PASSES for g in report.gemms if g.pass_ == pass_]


def _all_measured(report: Report, mode: str) -> list[str]:
    """Every precision with every GEMM measured in ``mode``, BF16 included."""
    return [p for p in report.precisions if report.status(mode, p)[0] == "measured"]


def _gemm_panel(report: Report, mode: str, point: Callable[[str, GemmShape], tuple[float | None, ...]]) -> Panel:
    """One bar row per GEMM (no total), one series per precision measured in ``mode`` (BF16
    included) whose ``point(precision, gemm)`` gives a value at least once."""
    gemms = _gemm_rows(report)
    series = []
    for p in _all_measured(report, mode):
        points = [point(p, g) for g in gemms]
        if any(v[0] is not None for v in points):
            series.append(_series(p, points))
    return Panel("", tuple(_gemm_label(report, g) for g in gemms), tuple(series))


def _with_spread(value: float | None, stats: dict[str, Any],
                 of_ms: Callable[[float], float]) -> tuple[float | None, ...]:
    """(value, low, high): the cell's quartile times mapped through ``of_ms`` (a time, or the rate
    it gives), widened to contain ``value``; no bounds when the statistics give none."""
    q = quartiles(stats)
    if value is None or q is None:
        return value, None, None
    a, b = sorted((of_ms(q[0]), of_ms(q[1])))
    return value, min(a, value), max(b, value)


def latency_spec(report: Report, mode: str, *, title: str = "") -> FigureSpec | None:
    """Each GEMM's time per precision, BF16 included, with its interquartile range; None when
    nothing is measured. No total row: one layer's sum would squash every GEMM's bar."""
    def point(p: str, g: GemmShape) -> tuple[float | None, ...]:
        cell = report.cell(mode, p, g)
        return _with_spread(_finite(cell.ms), cell.stats, lambda ms: ms)

    spec = FigureSpec("bars", title, f"Time per GEMM, ms ({MODE_NAMES[mode]}; lower is faster)", "",
                      (_gemm_panel(report, mode, point),), reference=None, value_format="{:.3f}")
    return None if spec.is_empty else spec


def tflops_spec(report: Report, mode: str, *, title: str = "") -> FigureSpec | None:
    """Each GEMM's TFLOP/s per precision, BF16 included, with the device's dense peak of each
    format shown as a labelled line (:mod:`gemm_bench.hardware`); None when nothing is measured."""
    def point(p: str, g: GemmShape) -> tuple[float | None, ...]:
        cell = report.cell(mode, p, g)
        return _with_spread(_finite(cell.tflops), cell.stats, lambda ms: hardware.achieved_tflops(g.flops, ms))

    panel = _gemm_panel(report, mode, point)
    peaks: dict[float, str] = {}
    for series in panel.series:
        peak = hardware.peak_tflops(report.device, series.precision)
        if peak is not None:
            peaks.setdefault(peak, f"{hardware.precision_format(series.precision).upper()} dense peak")
    label = f"TFLOP/s per GEMM ({MODE_NAMES[mode]}; higher is faster)"
    if peaks:
        label += "; dotted: " + ", ".join(f"{name} {value:.0f}" for value, name in sorted(peaks.items()))
    spec = FigureSpec("bars", title, label, "", (panel,), reference=None, value_format="{:.0f}",
                      references=tuple(sorted(peaks.items())))
    return None if spec.is_empty else spec


def roofline_spec(report: Report, mode: str, *, title: str = "") -> FigureSpec | None:
    """Per GEMM and precision, the roofline-predicted time over the measured one: the fraction of
    the roofline's speed reached (1: at the roofline). None when no prediction exists (unknown
    device) or nothing is measured. A prediction is never shown without its measurement."""
    def point(p: str, g: GemmShape) -> tuple[float | None, ...]:
        predicted, measured = report.roofline_ms(mode, p, g), _finite(report.cell(mode, p, g).ms)
        return (_finite(predicted / measured) if predicted and measured else None), None, None

    spec = FigureSpec("bars", title, f"Roofline-predicted / measured time ({MODE_NAMES[mode]}; 100% = at the roofline)",
                      "", (_gemm_panel(report, mode, point),), reference=1.0, value_format="{:.0%}")
    return None if spec.is_empty else spec


def accuracy_spec(report: Report, mode: str, *, distribution: str = "gaussian", title: str = "") -> FigureSpec | None:
    """Speed against accuracy: per precision, the whole-model speedup vs BF16 (y) at its SQNR (x,
    the least accurate GEMM's, in dB). BF16 is the point at 1.0. None unless at least one
    precision besides BF16 has both numbers."""
    series = []
    for p in _all_measured(report, mode):
        speedup = 1.0 if p == BASELINE else _finite(report.total(mode, p).speedup_vs_bf16)
        sqnr = report.sqnr(mode, p, None, distribution)
        if speedup is None or sqnr is None or not math.isfinite(sqnr):
            continue
        series.append(Series(p, PRECISIONS[p].display, PRECISION_COLORS[p], (speedup,), (None,), (None,), (sqnr,)))
    if not any(s.precision != BASELINE for s in series):
        return None
    return FigureSpec("scatter", title, "Whole-model speedup vs BF16",
                      f"SQNR vs FP32, dB, least accurate GEMM ({MODE_NAMES[mode]}; higher is more accurate)",
                      (Panel("", ("",), tuple(series)),), reference=1.0)


#: Figures a directive can show beside the speedup figure (``:show:`` parts), and their builders.
EXTRA_FIGURES: dict[str, Callable[..., FigureSpec | None]] = {
    "latency": latency_spec,
    "tflops": tflops_spec,
    "roofline": roofline_spec,
    "accuracy": accuracy_spec,
}


def spec_for(report: Report, mode: str, *, title: str = "") -> FigureSpec | None:
    """What the directive draws for one (report, mode): speedup vs size for sweeps, bars per GEMM
    and in total otherwise; None when no precision beside BF16 is measured (nothing to compare)."""
    spec = build_spec(report, mode, title=title)
    return None if spec.is_empty else spec


def summary_spec(reports: Sequence[tuple[str, Report]], modes: Sequence[str], *, title: str = "") -> FigureSpec | None:
    """Whole-model speedup per precision, a panel per mode, a bar group per (device label, report).

    A precision appears in a panel when at least one device measured it in that mode; devices
    that did not have no bar there. None when no panel has anything to show.
    """
    panels = []
    for mode in modes:
        measured = {p for _, report in reports for p in measured_precisions(report, mode)}
        order = [p for p in PRECISIONS if p in measured]
        series = tuple(
            _series(p, [total_point(report, mode, p) if p in measured_precisions(report, mode) else (None, None, None)
                        for _, report in reports])
            for p in order
        )
        panels.append(Panel(MODE_NAMES[mode], tuple(label for label, _ in reports), series))
    spec = FigureSpec("bars", title, "Whole-model GEMM speedup vs BF16 (higher is faster)", "", tuple(panels))
    return None if spec.is_empty else spec


# ------------------------------------------------------------------------------------- drawing
@contextmanager
def _style() -> Iterator[None]:
    import matplotlib

    with matplotlib.rc_context(cast(Any, _RC)):
        yield


def _wrap(text: str, font_pt: float) -> str:
    """Wrap a title to the figure's width (about 0.55 em per character in DejaVu Sans)."""
    chars = max(int(WIDTH_IN * 72 / (font_pt * 0.58)), 20)
    return "\n".join(textwrap.wrap(text, chars)) if len(text) > chars else text


def _text_width_pt(texts: Sequence[str], size: float, *, bold: bool = False) -> float:
    """The widest of ``texts`` in points, from the font's metrics (no renderer, no drawing)."""
    return max((_line_width_pt(line, size, bold) for text in texts for line in text.split("\n")), default=0.0)


@functools.lru_cache(maxsize=4096)
def _line_width_pt(line: str, size: float, bold: bool) -> float:
    """One line's width; memoized because the same labels recur in every figure of a build
    (GEMM names, ``0.00``), and each measurement lays the text out with FreeType."""
    from matplotlib.font_manager import FontProperties
    from matplotlib.textpath import text_to_path

    prop = FontProperties(family=["DejaVu Sans"], size=size, weight="bold" if bold else "normal")
    return float(text_to_path.get_text_width_height_descent(line, prop, ismath=False)[0])


_PAD = 4.0  # figure edge, in points
_TICK = 7.0  # tick length plus the label's pad, in points
_LINE = FONT_PT * 1.3  # one line of text, in points
_BAR_PT = 10.8  # one bar's slot (0.8 of a category holds all of a category's bars)
_SWEEP_AXES_PT = 170.0
_PANEL_GAP = 8.0


def draw(spec: FigureSpec, theme: Theme = "light") -> Figure:
    """The matplotlib Figure of ``spec`` with the ink of ``theme`` (``page``: a sentinel colour
    that :func:`render` turns into ``currentColor``).

    Laid out by hand from font metrics rather than by matplotlib's constrained layout, which
    measured at about half of the drawing time: the margins are what the labels need, computed
    before anything is drawn. For the same reason the axes have no matplotlib ticks: grids,
    value labels, category labels and axis labels are a line collection and plain texts placed
    from the same measures (with the bars as one collection per series, drawing and saving the
    site's 15 figures took 0.57x the CPU time of the tick-and-patch version: 1.22 s against 2.15 s; issue 14).
    """
    from matplotlib.figure import Figure

    ink = _PAGE_INK if theme == "page" else _INK[theme]
    with _style():
        width = WIDTH_IN * 72
        title = _wrap(spec.title, FONT_PT + 1) if spec.title else ""
        title_pt = (title.count("\n") + 1) * (FONT_PT + 1) * 1.3 + 2 if title else 0.0
        entries = _legend_entries(spec)
        legend_pt = math.ceil(entries / 3) * FONT_PT * 1.7 + 2 if entries else 0.0
        bars = spec.kind == "bars"
        axes_pt = [(len(p.categories) * max(len(p.series), 1) * _BAR_PT / 0.8 if bars else _SWEEP_AXES_PT)
                   for p in spec.panels]
        panel_title_pt = [(_LINE + 6 if p.title else 0.0) for p in spec.panels]
        xlabel = spec.value_label if bars else spec.category_label
        if _text_width_pt([xlabel], FONT_PT) > width - 2 * _PAD:
            xlabel = _wrap(xlabel, FONT_PT)
        bottom_pt = _PAD + _LINE * (2 + xlabel.count("\n")) + _TICK
        height = _PAD + title_pt + legend_pt + sum(axes_pt) + sum(panel_title_pt) \
            + _PANEL_GAP * (len(spec.panels) - 1) + bottom_pt
        if bars:
            labels = [c for p in spec.panels for c in p.categories]
            left = _PAD + _TICK + _text_width_pt(labels, FONT_PT, bold=spec.emphasize_first)
            right = _PAD + _text_width_pt(["0.00"], FONT_PT) / 2  # a tick label centred on the axes' end
        elif spec.kind == "scatter":
            left = _PAD + _LINE + _TICK + _text_width_pt(["0.00"], FONT_PT)
            right = _PAD + _text_width_pt(["00.0"], FONT_PT) / 2
        else:
            left = _PAD + _LINE + _TICK + _text_width_pt(["0.00"], FONT_PT)
            right = _PAD + _text_width_pt([spec.panels[0].categories[-1] if spec.panels[0].categories else ""],
                                          FONT_PT) / 2
        fig = Figure(figsize=(WIDTH_IN, height / 72))
        fig.patch.set_alpha(0)
        top = height - _PAD - title_pt - (0.0 if title else legend_pt)
        value_max = _value_max(spec)
        axes = []
        for number, (panel, panel_pt, head_pt) in enumerate(zip(spec.panels, axes_pt, panel_title_pt, strict=True)):
            top -= head_pt
            ax = fig.add_axes((left / width, (top - panel_pt) / height, (width - left - right) / width,
                               panel_pt / height))
            top -= panel_pt + _PANEL_GAP
            last = number == len(spec.panels) - 1
            if bars:
                _draw_bars(ax, spec, panel, ink, value_max, number)
                _value_axis(ax, "x", ink, labels=last)
            elif spec.kind == "scatter":
                _draw_scatter(ax, spec, panel, ink)
                _value_axis(ax, "y", ink, labels=True)
                _value_axis(ax, "x", ink, labels=last)
            else:
                _draw_sweep(ax, spec, panel, ink)
                _value_axis(ax, "y", ink, labels=True)
                if last:
                    _labels_below(ax, panel.x, panel.categories, ink)
            _style_axes(ax, ink)
            axes.append(ax)
        # Right-aligned: a long label then extends over the category labels, never off the figure.
        _axis_label(axes[-1], xlabel, ink, "x", loc="right" if bars else "center")
        if not bars:
            _axis_label(axes[-1], spec.value_label, ink, "y", offset=_text_width_pt(["0.00"], FONT_PT))
        if title:
            fig.text(_PAD / width, 1 - _PAD / height, title, ha="left", va="top", fontsize=FONT_PT + 1, color=ink)
        # Above the plot, below it when a title takes the top.
        if title:
            _legend(fig, ink, "lower center", (0.5, _PAD / 2 / height))
        else:
            _legend(fig, ink, "upper center", (0.5, 1 - _PAD / 2 / height))
        if spec.note:
            axes[0].text(0.5, 0.5, spec.note, transform=axes[0].transAxes, ha="center", color=ink)
    return fig


def _legend_entries(spec: FigureSpec) -> int:
    return len({s.precision for panel in spec.panels for s in panel.series})


def _value_max(spec: FigureSpec) -> float:
    values = [v for p in spec.panels for s in p.series for v in (*s.values, *s.high) if v is not None]
    return max([*values, spec.reference or 0.0, *(value for value, _ in spec.references), 1.0])


def _draw_bars(ax: Axes, spec: FigureSpec, panel: Panel, ink: str, right: float, number: int = 0) -> None:
    """Bars, whiskers, value labels and category labels of one panel.

    Cheap artists only: a series' bars are one PolyCollection (not a Rectangle patch per bar,
    each updating the data limits) and the category labels are plain texts beside the axes (not
    ticks, each of which is two tick lines, a grid line and two labels): at about half of the
    drawing time, the ticks were the single largest cost of a figure, and the reader gets the
    same labels. Each label's group keeps the id matplotlib gave category ticks
    (``ytick_<panel>_<row>``), so that checks reading the SVG (tests/test_site_claims.py) find
    the category labels where they always were.
    """
    from matplotlib.collections import PolyCollection
    from matplotlib.transforms import offset_copy

    n = max(len(panel.series), 1)
    height = 0.8 / n
    half = height * 0.9 / 2
    whiskers: list[tuple[float, float, float]] = []
    for j, series in enumerate(panel.series):
        rows = [i for i, v in enumerate(series.values) if v is not None]
        ys = [i + (j - (n - 1) / 2) * height for i in rows]
        values = [series.values[i] or 0.0 for i in rows]
        boxes = [((0.0, y - half), (0.0, y + half), (v, y + half), (v, y - half))
                 for y, v in zip(ys, values, strict=True)]
        ax.add_collection(PolyCollection(boxes, facecolors=series.color, edgecolors="none", linewidths=0,
                                         label=series.label), autolim=False)
        for y, i, value in zip(ys, rows, values, strict=True):
            low, high = series.low[i], series.high[i]
            end = value
            if low is not None and high is not None:
                whiskers.append((y, low, high))
                end = max(end, high)
            ax.text(end + right * 0.015, y, spec.value_format.format(value), va="center", ha="left",
                    fontsize=SMALL_PT, color=ink)
    if whiskers:
        ax.hlines([w[0] for w in whiskers], [w[1] for w in whiskers], [w[2] for w in whiskers],
                  colors=ink, linewidths=0.9)
    if spec.reference is not None:
        ax.axvline(spec.reference, color=ink, linewidth=0.8, linestyle="--")
    for value, _ in spec.references:  # named in the value axis' label (see tflops_spec)
        ax.axvline(value, color=ink, linewidth=0.8, linestyle=":")
    ax.set_yticks([])
    beside = offset_copy(ax.get_yaxis_transform(), fig=cast(Any, ax.figure), x=-_TICK, units="points")
    for i, category in enumerate(panel.categories):
        bold = spec.emphasize_first and i == 0
        ax.text(0, i, category, transform=beside, ha="right", va="center_baseline", color=ink, fontsize=FONT_PT,
                fontweight="bold" if bold else "normal", gid=f"ytick_{number}_{i}")
    ax.set_ylim(len(panel.categories) - 0.5, -0.5)
    ax.set_xlim(0, right * 1.2)
    if spec.value_format.endswith("%}"):  # fractions shown as percentages: the axis says so too
        from matplotlib.ticker import PercentFormatter

        ax.xaxis.set_major_formatter(PercentFormatter(xmax=1.0, decimals=0))
    if panel.title:
        ax.set_title(panel.title, loc="left", fontsize=FONT_PT, color=ink)


def _draw_sweep(ax: Axes, spec: FigureSpec, panel: Panel, ink: str) -> None:
    segments_x: list[float] = []
    segments: list[tuple[float, float]] = []
    colors: list[str] = []
    n = len(panel.series)
    for j, series in enumerate(panel.series):
        # Dodge each series a little along the log axis so that whiskers at one size do not overlap.
        dodge = 2 ** ((j - (n - 1) / 2) * 0.05)
        xs = [x * dodge for x in panel.x]
        points = [(x, v) for x, v in zip(xs, series.values, strict=True) if v is not None]
        ax.plot([x for x, _ in points], [v for _, v in points], marker="o", markersize=4, color=series.color,
                label=series.label)
        for x, low, high in zip(xs, series.low, series.high, strict=True):
            if low is not None and high is not None:
                segments_x.append(x)
                segments.append((low, high))
                colors.append(series.color)
    if segments:
        ax.vlines(segments_x, [s[0] for s in segments], [s[1] for s in segments], colors=colors, linewidths=1.2)
    if spec.reference is not None:
        ax.axhline(spec.reference, color=ink, linewidth=0.8, linestyle="--")
    if panel.x:
        ax.set_xscale("log", base=2)
    if panel.title:
        ax.set_title(panel.title, loc="left", fontsize=FONT_PT, color=ink)


def _draw_scatter(ax: Axes, spec: FigureSpec, panel: Panel, ink: str) -> None:
    """One marker per (series, value), labelled with the series' name, and the reference line."""
    xs: list[float] = []
    ys: list[float] = []
    for series in panel.series:
        for x, y in zip(series.x, series.values, strict=True):
            if x is None or y is None:
                continue
            ax.plot([x], [y], marker="o", markersize=6, linestyle="none", color=series.color, label=series.label)
            ax.annotate(series.label, (x, y), xytext=(5, 3), textcoords="offset points", fontsize=SMALL_PT,
                        color=ink)
            xs.append(x)
            ys.append(y)
    if spec.reference is not None:
        ax.axhline(spec.reference, color=ink, linewidth=0.8, linestyle="--")
        ys.append(spec.reference)
    if xs:
        span = max(max(xs) - min(xs), 1.0)
        ax.set_xlim(min(xs) - 0.1 * span, max(xs) + 0.35 * span)  # room for the labels on the right
        low, high = min(ys), max(ys)
        pad = max(high - low, 0.1) * 0.15
        ax.set_ylim(max(low - pad, 0.0), high + pad)
    if panel.title:
        ax.set_title(panel.title, loc="left", fontsize=FONT_PT, color=ink)


def _style_axes(ax: Axes, ink: str) -> None:
    """Only the artists a reader uses: two spines in the ink colour (grid and labels are drawn
    by :func:`_value_axis` and :func:`_labels_below`)."""
    ax.set_facecolor("none")
    ax.spines[["top", "right"]].set_visible(False)
    for spine in ("left", "bottom"):
        ax.spines[spine].set_color(ink)
        ax.spines[spine].set_alpha(_SPINE_ALPHA)


def _no_ticks(ax: Axes, axis: Literal["x", "y"]) -> None:
    from matplotlib.ticker import NullLocator

    target = ax.xaxis if axis == "x" else ax.yaxis
    target.set_major_locator(NullLocator())
    target.set_minor_locator(NullLocator())


def _value_axis(ax: Axes, axis: Literal["x", "y"], ink: str, *, labels: bool) -> None:
    """The value axis as a grid (one line collection) and plain texts, instead of matplotlib ticks.

    The positions and texts are the ones matplotlib's own locator and formatter would show for
    the final limits; drawing them by hand skips the Tick objects (two tick lines, a grid line and
    two texts each, built anew per axes), which cost more than everything else in a figure.
    """
    from matplotlib.collections import LineCollection
    from matplotlib.transforms import offset_copy

    target = ax.xaxis if axis == "x" else ax.yaxis
    low, high = sorted(target.get_view_interval())
    ax.set_xlim(ax.get_xlim()) if axis == "x" else ax.set_ylim(ax.get_ylim())  # freeze: nothing moves them now
    slack = (high - low) * 1e-9
    locs = [float(v) for v in target.get_major_locator().tick_values(low, high) if low - slack <= v <= high + slack]
    texts = target.get_major_formatter().format_ticks(locs)
    _no_ticks(ax, axis)
    if axis == "x":
        lines = [((v, 0.0), (v, 1.0)) for v in locs]
        transform = ax.get_xaxis_transform()
    else:
        lines = [((0.0, v), (1.0, v)) for v in locs]
        transform = ax.get_yaxis_transform()
    ax.add_collection(LineCollection(lines, colors=ink, alpha=_GRID_ALPHA, linewidths=0.6, transform=transform,
                                     zorder=0.5), autolim=False)
    if not labels:
        return
    if axis == "x":
        _labels_below(ax, locs, texts, ink)
    else:
        beside = offset_copy(transform, fig=cast(Any, ax.figure), x=-_TICK, units="points")
        for value, text in zip(locs, texts, strict=True):
            ax.text(0, value, text, transform=beside, ha="right", va="center_baseline", color=ink, fontsize=FONT_PT)


def _labels_below(ax: Axes, positions: Sequence[float], texts: Sequence[str], ink: str) -> None:
    """Texts centred under the x positions (data coordinates), where tick labels would be."""
    from matplotlib.transforms import offset_copy

    _no_ticks(ax, "x")
    below = offset_copy(ax.get_xaxis_transform(), fig=cast(Any, ax.figure), y=-_TICK, units="points")
    for position, text in zip(positions, texts, strict=True):
        ax.text(position, 0, text, transform=below, ha="center", va="top", color=ink, fontsize=FONT_PT)


def _axis_label(ax: Axes, text: str, ink: str, axis: Literal["x", "y"], *, loc: str = "center",
                offset: float = 0.0) -> None:
    """An axis label placed from the layout's own measures (below the x labels; left of the y
    labels, ``offset`` being their width), since the axes have no ticks to place it from."""
    from matplotlib.transforms import offset_copy

    if axis == "x":
        where = offset_copy(ax.transAxes, fig=cast(Any, ax.figure), y=-(_TICK + _LINE + 2), units="points")
        x = {"right": 1.0, "center": 0.5, "left": 0.0}[loc]
        ax.text(x, 0, text, transform=where, ha=loc, va="top", color=ink, fontsize=FONT_PT)
    else:
        where = offset_copy(ax.transAxes, fig=cast(Any, ax.figure), x=-(_TICK + offset + 2), units="points")
        ax.text(0, 0.5, text, transform=where, rotation=90, ha="right", va="center", color=ink, fontsize=FONT_PT)


def _legend(fig: Figure, ink: str, loc: str, anchor: tuple[float, float]) -> None:
    """One legend outside the plot, where it cannot cover a bar; one entry per precision."""
    handles: dict[str, Any] = {}
    for ax in fig.axes:
        for handle, label in zip(*ax.get_legend_handles_labels(), strict=True):
            handles.setdefault(label, handle)
    if not handles:
        return
    options: dict[str, Any] = {"frameon": False, "loc": loc, "bbox_to_anchor": anchor, "ncols": min(len(handles), 3),
                               "handlelength": 1.2, "columnspacing": 1.0, "borderaxespad": 0, "borderpad": 0}
    legend = fig.legend(list(handles.values()), list(handles), **options)
    for text in legend.get_texts():
        text.set_color(ink)


# ------------------------------------------------------------------------------------- writing
def _check(fmt: str, theme: str | None) -> Theme:
    if fmt not in FORMATS:
        raise FigureError(f"figure format {fmt!r} is not one of {', '.join(FORMATS)}")
    chosen = theme or ("page" if fmt == "svg" else "light")
    if chosen not in ("page", "light", "dark"):
        raise FigureError(f"figure theme {chosen!r} is not one of page, light, dark")
    if chosen == "page" and fmt != "svg":
        raise FigureError(f"theme 'page' (ink from the page's CSS) exists only for SVG, not {fmt!r}")
    return chosen  # type: ignore[return-value]


def _save(fig: Figure, fmt: str) -> bytes:
    buffer = io.BytesIO()
    with _style():
        extra: dict[str, Any] = {} if fmt == "svg" else {"dpi": 150}
        fig.savefig(buffer, format=fmt, metadata=_SAVE_METADATA[fmt], **extra)
    return buffer.getvalue()


def _follow_page(svg: bytes) -> bytes:
    """Turn the sentinel ink into ``currentColor`` and give the root its colour rule."""
    text = svg.decode("utf-8").replace(_PAGE_INK, "currentColor")
    text = text.replace("<svg ", f"<svg {_PAGE_ROOT_ATTRS} ", 1)
    text = text.replace("<defs>", f"<defs>\n  {_PAGE_STYLE}", 1)
    return text.encode("utf-8")


def render(spec: FigureSpec, fmt: str, *, theme: Theme | None = None) -> bytes:
    """``spec`` drawn as ``svg``, ``pdf`` or ``png``.

    The default theme is ``page`` for SVG (one file for light and dark pages) and ``light`` for
    PDF and PNG (LaTeX and other builders print on white). Raises :class:`FigureError` for an
    unknown format or theme.
    """
    chosen = _check(fmt, theme)
    data = _save(draw(spec, chosen), fmt)
    return _follow_page(data) if chosen == "page" else data


def figure_file(spec: FigureSpec, fmt: str, directory: Path, *, stem: str = "gemm") -> Path:
    """``<directory>/<stem>-<spec key>.<fmt>``, drawn only if that file does not exist yet.

    The key covers everything the figure shows and how it is drawn, so an existing file is the
    figure: rebuilds, other pages and parallel readers showing the same numbers reuse it.
    """
    _check(fmt, None)
    path = directory / f"{stem}-{spec.key()}.{fmt}"
    if not path.exists():
        # The spec first: a figure file always has the spec it was drawn from beside it, so a
        # builder that needs another format can draw that from it (:func:`load_spec`).
        _write_atomic(path.with_suffix(".spec"), pickle.dumps(spec))
        _write_atomic(path, render(spec, fmt))
    return path


def load_spec(figure: Path) -> FigureSpec | None:
    """The spec a :func:`figure_file` was drawn from, or None (not ours, or another code version)."""
    try:
        spec = pickle.loads(figure.with_suffix(".spec").read_bytes())
    except (OSError, pickle.UnpicklingError, EOFError, AttributeError, ImportError):
        return None
    return spec if isinstance(spec, FigureSpec) else None


def _write_atomic(path: Path, data: bytes) -> None:
    """A figure file: atomic, readable by others (0644: a web server serves it), not fsynced
    (a build can always draw it again)."""
    write_atomic(path, data, mode=0o644, durable=False)


# ---------------------------------------------------------------------------------- README
README_MODEL = "te-guide-5b"
DEFAULT_README_OUT = Path("docs/_static/readme-speedups.svg")




def readme_spec(cache_dir: Path, *, on_error: Callable[[Exception], None] | None = None) -> FigureSpec:
    """The README figure: the Transformer Engine guide's example layer on every cached device.

    Unreadable cache files are passed to ``on_error`` (default: printed to stderr) and skipped.
    Raises :class:`FigureError` naming the cache directory when no device has a result.
    """
    from gemm_bench.cache import Cache
    from gemm_bench.question import build_question

    question = build_question(model=README_MODEL)
    lookup = Cache(cache_dir).lookup(question.hash)
    for error in lookup.errors:
        (on_error or _print_error)(error)
    documents = sorted(lookup.documents, key=lambda d: str(d["device"]["name"]))
    reports = [(device_label(d["device"]["name"]), Report(d)) for d in documents]
    spec = summary_spec(reports, MODES, title=f"{README_MODEL}: {question.describe()}") if reports else None
    if spec is None:
        raise FigureError(f"no result for {README_MODEL} (question {question.hash}) with a precision "
                          f"beside BF16 in {cache_dir}")
    return spec


def _print_error(error: Exception) -> None:
    print(f"readme-figure: ignoring {error}", file=sys.stderr)


def readme_paths(out: Path) -> tuple[Path, Path]:
    """The light file ``out`` and its dark twin ``<stem>-dark<suffix>`` beside it."""
    return out, out.with_name(f"{out.stem}-dark{out.suffix}")


def write_readme_figure(cache_dir: Path, out: Path = DEFAULT_README_OUT, *,
                        on_error: Callable[[Exception], None] | None = None) -> list[Path]:
    """Write the README's light and dark SVGs (for a ``<picture>``); return the files changed.

    GitHub shows README images through ``<img>``, which cannot see the page's colours, so the
    README gets two fixed-ink variants instead of the site's one ``page`` SVG. A file whose bytes
    would not change is left alone (an empty list: up to date). Raises :class:`FigureError`.
    """
    spec = readme_spec(cache_dir, on_error=on_error)
    changed = []
    themes: tuple[Theme, Theme] = ("light", "dark")
    for path, theme in zip(readme_paths(out), themes, strict=True):
        data = render(spec, "svg", theme=theme)
        if path.exists() and path.read_bytes() == data:
            continue
        _write_atomic(path, data)
        changed.append(path)
    return changed
