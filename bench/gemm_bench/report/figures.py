"""Speedup figures: a plain-data *spec* built from a Report, laid out, then written as SVG, PDF or PNG.

Why a spec. A :class:`~gemm_bench.report.figure_spec.FigureSpec` holds exactly what a figure
shows (titles, categories, the speedups and their spread, the reference line) and nothing else, so
:meth:`FigureSpec.key` (a hash of that content, of
:data:`~gemm_bench.report.figure_spec.FIGURE_VERSION` and of the style) names the file: a caller that
keeps figures under their key never draws a figure whose inputs did not change, across rebuilds
and across pages. Drawing (:func:`render`) happens only for new keys.

One layout, two back ends. :func:`scene` lays a spec out in pure Python
(:mod:`gemm_bench.report.figure_layout`: primitives in points, text measured from a committed table of
DejaVu Sans metrics, ticks from a port of matplotlib's locator and formatters). SVG, what the HTML
build shows, is written from that scene as text (:mod:`gemm_bench.report.figure_svg`); PDF and PNG (LaTeX
and other builders) are painted from the same scene by matplotlib (:mod:`gemm_bench.report.figure_mpl`),
imported only then. So a docs build that writes HTML imports neither matplotlib nor numpy.

Pure: :mod:`gemm_bench` only (no Sphinx, no torch; matplotlib only for PDF and PNG), so importing
this module costs nothing to a build that draws nothing.

Theme. One SVG serves Furo's light and dark pages: text, axes, ticks, grid and the reference line
are drawn in ``currentColor`` and the root element sets ``color`` from the CSS variable
``--gemm-figure-ink`` (which the page defines when the SVG is inlined), else from the reader's
``prefers-color-scheme`` (an SVG shown through ``<img>`` sees that, not the page's variables),
else a dark ink. Data colours (Okabe-Ito) are mid-tones that read on both backgrounds. PDF and
PNG are drawn with a fixed light-page ink; the README, which GitHub shows through ``<img>`` in a
``<picture>``, gets fixed ``light`` and ``dark`` SVG variants.

Safety and determinism. Text comes from files (device names, titles, captions), so it is never
markup: the SVG escapes it, and matplotlib draws it with mathtext and usetex off (a ``$`` is a
dollar sign). Text is written as SVG text (smaller, selectable, searchable); no id but the
category labels' groups, no date: the same spec gives the same bytes in any process.
"""

from __future__ import annotations

import dataclasses
import json
import math
import re
import statistics
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, Literal

from gemm_bench.question import hardware
from gemm_bench.question.devices import device_label
from gemm_bench.question.precisions import BASELINE, MODE_NAMES, MODES, PRECISIONS, SAME_AS
from gemm_bench.question.shapes import OP_NAMES, PASS_NAMES, PASSES, GemmShape
from gemm_bench.question.vocabulary import ALL_GEMMS
from gemm_bench.report.figure_layout import Scene, layout
from gemm_bench.report.figure_spec import (
    _INK,
    PRECISION_COLORS,
    WIDE_IN,
    WIDTH_IN,
    FigureError,
    FigureSpec,
    Panel,
    Series,
)
from gemm_bench.report.figure_spec import MIN_PHONE_PX as MIN_PHONE_PX  # the phone-width rule, for callers
from gemm_bench.report.figure_spec import PHONE_WIDTH_PX as PHONE_WIDTH_PX
from gemm_bench.report.figure_spec import WIDE_MIN_PX as WIDE_MIN_PX  # where a page shows the wide twin
from gemm_bench.report.figure_spec import WIDTHS as WIDTHS
from gemm_bench.report.figure_svg import PAGE_CLASS, to_svg
from gemm_bench.report.report import Report
from gemm_bench.results import cross_check
from gemm_bench.results.cache import write_atomic
from gemm_bench.results.typed import Result, parse

FORMATS: tuple[str, ...] = ("svg", "pdf", "png")
#: ``page``: SVG whose ink follows the page (``currentColor``); ``light`` / ``dark``: fixed inks.
Theme = Literal["page", "light", "dark"]

#: The root ``<svg>`` of a ``page`` figure: ink from the page when inlined, else from the
#: reader's colour scheme. The class scopes the style so that an inlined SVG styles nothing else.
_PAGE_STYLE = (f'<style type="text/css">@media (prefers-color-scheme: dark) {{ svg.{PAGE_CLASS} '
               f'{{ --gemm-figure-ink-auto: {_INK["dark"]} }} }}</style>')
_PAGE_ROOT_ATTRS = (f'class="{PAGE_CLASS}" style="color: var(--gemm-figure-ink, '
                    f'var(--gemm-figure-ink-auto, {_INK["light"]}))"')


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


def _series(precision: str, points: Sequence[tuple[float | None, ...]], why: Callable[[str, int], str]) -> Series:
    """One precision's (value, low, high) points; ``why(precision, i)``, asked only where value
    ``i`` is None, says why it is (:attr:`Series.missing`)."""
    return Series(precision, PRECISIONS[precision].display, PRECISION_COLORS[precision],
                  tuple(p[0] for p in points), tuple(p[1] for p in points), tuple(p[2] for p in points),
                  missing=tuple(why(precision, i) if p[0] is None else "" for i, p in enumerate(points)))


def status_reason(status: str, reason: str) -> str:
    """A status and its reason as a figure's tooltip says them: ``unsupported: …``, ``failed: …``;
    a cell the result does not hold is ``not measured``."""
    head = "not measured" if status == "missing" else status
    if not reason or reason == head:
        return head
    return reason if status == "missing" and reason.startswith(head) else f"{head}: {reason}"


def _cell_reason(report: Report, mode: str, precision: str, gemm: GemmShape, otherwise: str) -> str:
    """Why a figure has no value for a cell: its status and reason, or ``otherwise`` (it was measured)."""
    cell = report.cell(mode, precision, gemm)
    return otherwise if cell.status == "measured" else status_reason(cell.status, cell.reason)


def total_reason(report: Report, mode: str, precision: str) -> str:
    """Why a figure has no whole-model speedup of ``precision`` (its :func:`total_point` is None); a
    failed BF16 baseline reads failed too (its mark says "failed", never "n/a")."""
    total = report.total(mode, precision)
    if total.status != "measured":
        return status_reason(total.status, total.reason)
    base = report.total(mode, BASELINE)
    if base.status == "failed":
        return status_reason("failed", f"BF16: {base.reason}")
    return total.speedup_reason or "no finite speedup vs BF16"


def gemm_reason(report: Report, mode: str, precision: str, gemm: GemmShape) -> str:
    """Why a figure has no speedup of ``precision`` for ``gemm`` (its :func:`gemm_point` is None)."""
    base = report.cell(mode, BASELINE, gemm)
    otherwise = (status_reason("failed", f"BF16: {base.reason}") if base.status == "failed"
                 else report.gemm_speedup_reason(mode, precision, gemm) or "no finite speedup vs BF16")
    return _cell_reason(report, mode, precision, gemm, otherwise)


def _gemm_label(report: Report, gemm: GemmShape) -> str:
    if report.kind == "model":
        return f"{OP_NAMES.get(gemm.op, gemm.op)} · {PASS_NAMES[gemm.pass_]}"
    return gemm.label


#: The mark on a figure's category whose speedup rests on a time the cross-check flags (the table's).
FLAG_MARK = "†"


def _flag_marks(report: Report, mode: str, precisions: Sequence[str],
                rows: Sequence[Sequence[GemmShape] | None]) -> tuple[list[str], list[float]]:
    """Per category (its GEMMs; None: all of them), :data:`FLAG_MARK` where a shown speedup rests on a
    flagged time ("" else), and the ratios of the flagged times."""
    marks, ratios = [], []
    for gemms in rows:
        chosen = report.gemms if gemms is None else gemms
        cells = [report.cell(mode, p, g) for p in {BASELINE, *precisions} for g in chosen]
        flagged = [c.cross_check.ratio for c in cells if c.cross_check is not None and c.cross_check.flag]
        marks.append(f" {FLAG_MARK}" if flagged else "")
        ratios += flagged
    return marks, ratios


def _flag_footnote(ratios: Sequence[float]) -> str:
    """What :data:`FLAG_MARK` means, for the value label, with the highest ratio flagged ("" for none)."""
    if not ratios:
        return ""
    return (f"; {FLAG_MARK}: rests on a time up to {max(ratios):.2f}× its profiled kernel time "
            f"(cross-check bound {cross_check.REGION_MAX:g})")


def build_spec(report: Report, mode: str, *, title: str = "") -> FigureSpec:
    """The figure of one report and mode, also when nothing beside BF16 was measured (a note).
    A category whose speedup rests on a time the cross-check flags carries :data:`FLAG_MARK`,
    explained (with the ratio) in the value label."""
    precisions = measured_precisions(report, mode)
    value_label = f"Speedup vs BF16 ({MODE_NAMES[mode]}; higher is faster)"
    if report.kind == "sweep":
        gemms = sorted(report.gemms, key=lambda g: g.m)
        series = tuple(_series(p, [gemm_point(report, mode, p, g) for g in gemms],
                               lambda p, i: gemm_reason(report, mode, p, gemms[i])) for p in precisions)
        marks, ratios = _flag_marks(report, mode, precisions if series else [], [[g] for g in gemms])
        panel = Panel("", tuple(f"{g.m}{mark}" for g, mark in zip(gemms, marks, strict=True)), series,
                      tuple(float(g.m) for g in gemms))
        return FigureSpec("sweep", title, value_label + _flag_footnote(ratios), "Square GEMM size S (S x S x S)",
                          (panel,), note="" if series else "no precision besides BF16 measured")
    gemms = [g for pass_ in PASSES for g in report.gemms if g.pass_ == pass_]
    marks, ratios = _flag_marks(report, mode, precisions, [None, *([g] for g in gemms)])
    value_label += _flag_footnote(ratios)
    categories = tuple(label + mark for label, mark in zip(
        (ALL_GEMMS if report.kind == "model" else "All shapes", *(_gemm_label(report, g) for g in gemms)),
        marks, strict=True))
    series = tuple(
        _series(p, [total_point(report, mode, p), *(gemm_point(report, mode, p, g) for g in gemms)],
                lambda p, i: total_reason(report, mode, p) if i == 0 else gemm_reason(report, mode, p, gemms[i - 1]))
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


def _gemm_panel(report: Report, mode: str, point: Callable[[str, GemmShape], tuple[float | None, ...]],
                why: Callable[[str, GemmShape], str]) -> Panel:
    """One bar row per GEMM (no total), one series per precision measured in ``mode`` (BF16
    included) whose ``point(precision, gemm)`` gives a value at least once; ``why(precision,
    gemm)`` says why it gives none."""
    gemms = _gemm_rows(report)
    series = []
    for p in _all_measured(report, mode):
        points = [point(p, g) for g in gemms]
        if any(v[0] is not None for v in points):
            series.append(_series(p, points, lambda p, i: why(p, gemms[i])))
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


def _timed(report: Report, mode: str) -> Callable[[str, GemmShape], str]:
    """Why a cell has no time (or rate) to draw."""
    return lambda p, g: _cell_reason(report, mode, p, g, "no finite time")


def latency_spec(report: Report, mode: str, *, title: str = "") -> FigureSpec | None:
    """Each GEMM's time per precision, BF16 included, with its interquartile range; None when
    nothing is measured. No total row: one layer's sum would squash every GEMM's bar."""
    def point(p: str, g: GemmShape) -> tuple[float | None, ...]:
        cell = report.cell(mode, p, g)
        return _with_spread(_finite(cell.ms), cell.stats, lambda ms: ms)

    spec = FigureSpec("bars", title, f"Time per GEMM, ms ({MODE_NAMES[mode]}; lower is faster)", "",
                      (_gemm_panel(report, mode, point, _timed(report, mode)),), reference=None, value_format="{:.3f}")
    return None if spec.is_empty else spec


def tflops_spec(report: Report, mode: str, *, title: str = "") -> FigureSpec | None:
    """Each GEMM's TFLOP/s per precision, BF16 included, with the device's dense peak of each
    format shown as a labelled line (:mod:`gemm_bench.question.hardware`); None when nothing is measured."""
    def point(p: str, g: GemmShape) -> tuple[float | None, ...]:
        cell = report.cell(mode, p, g)
        return _with_spread(_finite(cell.tflops), cell.stats, lambda ms: hardware.achieved_tflops(g.flops, ms))

    panel = _gemm_panel(report, mode, point, _timed(report, mode))
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

    def why(p: str, g: GemmShape) -> str:
        return _cell_reason(report, mode, p, g, report.roofline_reason(mode, p, g) or "no roofline prediction")

    spec = FigureSpec("bars", title, f"Roofline-predicted / measured time ({MODE_NAMES[mode]}; 100% = at the roofline)",
                      "", (_gemm_panel(report, mode, point, why),), reference=1.0, value_format="{:.0%}")
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


def _total_reasons(reports: Sequence[tuple[str, Report]], mode: str) -> Callable[[str, int], str]:
    """Why report ``i`` has no whole-model speedup of a precision in ``mode``."""
    return lambda p, i: total_reason(reports[i][1], mode, p)


def summary_spec(reports: Sequence[tuple[str, Report]], modes: Sequence[str], *, title: str = "") -> FigureSpec | None:
    """Whole-model speedup per precision, a panel per mode, a bar group per (device label, report).

    A precision appears in a panel when at least one device measured it in that mode; devices
    that did not have a marker there saying why (unsupported, failed, not measured). None when no
    panel has anything to show.
    """
    panels = []
    ratios: list[float] = []
    shown = {p for mode in modes for _, report in reports for p in measured_precisions(report, mode)}
    for mode in modes:
        measured = {p for _, report in reports for p in measured_precisions(report, mode)}
        order = [p for p in PRECISIONS if p in measured]
        series = tuple(
            _series(p, [total_point(report, mode, p) if p in measured_precisions(report, mode) else (None, None, None)
                        for _, report in reports],
                    _total_reasons(reports, mode))
            for p in order
        )
        flagged = [_flag_marks(report, mode, measured_precisions(report, mode), [None]) for _, report in reports]
        ratios += [r for _, found in flagged for r in found]
        absent = [p for p in PRECISIONS if p in shown - measured]
        panels.append(Panel(MODE_NAMES[mode] + _absent_note(reports, absent, mode),
                            tuple(label + marks[0] for (label, _), (marks, _) in zip(reports, flagged, strict=True)),
                            series))
    spec = FigureSpec("bars", title, "Whole-model GEMM speedup vs BF16 (higher is faster)" + _flag_footnote(ratios),
                      "", tuple(panels))
    return None if spec.is_empty else spec


def _absent_note(reports: Sequence[tuple[str, Report]], absent: Sequence[str], mode: str) -> str:
    """What a panel's title adds for the legend's precisions it draws no bars of (the legend is one
    for the whole figure, at its top): " (FP8 Delayed: same as FP8 Current)" where the precision has
    no form of its own in ``mode`` (:data:`~gemm_bench.question.precisions.SAME_AS`), else its status
    on the devices ("failed", "unsupported", "not measured"). Issue 35: the pre-quantized panel,
    under a legend naming FP8 Delayed, had no Delayed bars and no word why."""
    said = []
    for p in absent:
        if (p, mode) in SAME_AS:
            said.append(f"{PRECISIONS[p].display}: same as {PRECISIONS[SAME_AS[p, mode]].display}")
            continue
        words = dict.fromkeys(status_reason(report.status(mode, p)[0], "") for _, report in reports)
        said.append(f"{PRECISIONS[p].display}: {' or '.join(words)}")
    return f" ({'; '.join(said)})" if said else ""


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


def scene(spec: FigureSpec, theme: Theme = "light", *, width: float = WIDTH_IN) -> Scene:
    """The laid-out figure of ``spec`` with the ink of ``theme`` (``page``: ``currentColor``),
    ``width`` inches wide."""
    return layout(spec, "currentColor" if theme == "page" else _INK[theme], width_in=width)


def render(spec: FigureSpec, fmt: str, *, theme: Theme | None = None, width: float = WIDTH_IN) -> bytes:
    """``spec`` drawn as ``svg``, ``pdf`` or ``png``.

    The default theme is ``page`` for SVG (one file for light and dark pages) and ``light`` for
    PDF and PNG (LaTeX and other builders print on white). SVG is written without matplotlib;
    PDF and PNG are painted by it from the same layout. ``width``: in inches (the phone's
    :data:`WIDTH_IN` unless told). Raises :class:`FigureError` for an unknown format or theme.
    """
    chosen = _check(fmt, theme)
    laid_out = scene(spec, chosen, width=width)
    if fmt == "svg":
        if chosen == "page":
            return to_svg(laid_out, page_style=_PAGE_STYLE, root_attrs=_PAGE_ROOT_ATTRS)
        return to_svg(laid_out)
    from gemm_bench.report import figure_mpl

    return figure_mpl.render(laid_out, fmt)


def figure_file(spec: FigureSpec, fmt: str, directory: Path, *, stem: str = "gemm") -> Path:
    """``<directory>/<stem>-<spec key>.<fmt>``, drawn only if that file does not exist yet.

    The key covers everything the figure shows and how it is drawn, so an existing file is the
    figure: rebuilds, other pages and parallel readers showing the same numbers reuse it. An SVG
    (:data:`WIDTH_IN` wide, for phones) gets its :data:`WIDE_IN` twin beside it (:func:`wide_twin`),
    which an HTML page shows where its column is wide enough.
    """
    _check(fmt, None)
    path = directory / f"{stem}-{spec.key()}.{fmt}"
    if not path.exists():
        # The spec first: a figure file always has the spec it was drawn from beside it, so a
        # builder that needs another format can draw that from it (:func:`load_spec`).
        _write_atomic(path.with_suffix(".spec"), spec_to_json(spec).encode("utf-8"))
        if fmt == "svg":  # the desktop twin before the figure: a figure that exists has its twin
            _write_atomic(wide_twin(path), render(spec, fmt, width=WIDE_IN))
        _write_atomic(path, render(spec, fmt))
    elif load_spec(path) != spec:  # drawn by an older build (a pickled spec): the JSON spec beside it
        _write_atomic(path.with_suffix(".spec"), spec_to_json(spec).encode("utf-8"))
    return path


def wide_twin(figure: Path) -> Path:
    """The desktop twin of an SVG :func:`figure_file`: ``<stem>-wide-<key>.svg`` beside it (a name
    that the figure's ``<stem>-<key>.*`` image URI does not match, so Sphinx never takes it for a
    candidate of the image)."""
    stem, _, key = figure.stem.rpartition("-")
    return figure.with_name(f"{stem}-wide-{key}{figure.suffix}")


# ------------------------------------------------------------------------------- spec files
# A spec file is plain JSON, read back field by field into the dataclasses: never a pickle,
# because an image with a ``.spec`` beside it can come from anywhere a page can put files (the
# source tree included), and unpickling runs whatever the file says. Read back, a spec must hash
# to the key in its figure's file name, so a spec beside any other image is refused.

#: The formats the figure code writes values with (``{:.2f}×``, ``{:.0%}``, ...): a spec file
#: with another format string is refused (``str.format`` of a foreign string can pad to any size).
_VALUE_FORMAT = re.compile(r"\{:\.\d[f%]\}×?")
_COLOR = re.compile(r"#[0-9A-Fa-f]{6}")
#: Larger than any spec the figure code writes (a sweep of hundreds of sizes is tens of kB).
MAX_SPEC_BYTES = 4 << 20


def spec_to_json(spec: FigureSpec) -> str:
    """The spec file's text: the dataclasses as JSON objects, read back by :func:`spec_from_json`."""
    return json.dumps(dataclasses.asdict(spec), sort_keys=True, ensure_ascii=False)


class _NotASpec(Exception):
    """Raised inside :func:`spec_from_json` where a value is not what the figure code writes."""


def _json_text(value: Any) -> str:
    if not isinstance(value, str):
        raise _NotASpec
    return value


def _json_number(value: Any, *, optional: bool = False) -> float | None:
    if value is None and optional:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise _NotASpec
    return float(value)


def _json_numbers(value: Any, *, optional: bool = True) -> tuple[float | None, ...]:
    if not isinstance(value, list):
        raise _NotASpec
    return tuple(_json_number(v, optional=optional) for v in value)


def _json_fields(value: Any, cls: type) -> dict[str, Any]:
    names = {f.name for f in dataclasses.fields(cls)}
    if not isinstance(value, dict) or set(value) != names:
        raise _NotASpec
    return value


def _json_series(value: Any) -> Series:
    data = _json_fields(value, Series)
    color = _json_text(data["color"])
    if not _COLOR.fullmatch(color):
        raise _NotASpec
    values, missing, marks = _json_numbers(data["values"]), data["missing"], data["marks"]
    if any(not isinstance(found, list) or len(found) not in (0, len(values)) for found in (missing, marks)):
        raise _NotASpec
    return Series(_json_text(data["precision"]), _json_text(data["label"]), color, values,
                  _json_numbers(data["low"]), _json_numbers(data["high"]), _json_numbers(data["x"]),
                  tuple(_json_text(reason) for reason in missing), tuple(_json_text(mark) for mark in marks))


def _json_panel(value: Any) -> Panel:
    data = _json_fields(value, Panel)
    if not isinstance(data["categories"], list) or not isinstance(data["series"], list):
        raise _NotASpec
    x = _json_numbers(data["x"], optional=False)
    return Panel(_json_text(data["title"]), tuple(_json_text(c) for c in data["categories"]),
                 tuple(_json_series(s) for s in data["series"]), tuple(v for v in x if v is not None))


def spec_from_json(value: Any) -> FigureSpec | None:
    """A :class:`FigureSpec` from parsed spec-file JSON, or None where anything in it is not what
    :func:`spec_to_json` writes (a field missing or extra, a type, a colour, a format string)."""
    try:
        data = _json_fields(value, FigureSpec)
        kind = _json_text(data["kind"])
        value_format = _json_text(data["value_format"])
        if kind not in ("bars", "sweep", "scatter") or not _VALUE_FORMAT.fullmatch(value_format):
            raise _NotASpec
        if not isinstance(data["emphasize_first"], bool) or not isinstance(data["panels"], list):
            raise _NotASpec
        references = data["references"]
        if not isinstance(references, list) or not all(isinstance(r, list) and len(r) == 2 for r in references):
            raise _NotASpec
        return FigureSpec(
            kind, _json_text(data["title"]), _json_text(data["value_label"]), _json_text(data["category_label"]),  # type: ignore[arg-type]
            tuple(_json_panel(p) for p in data["panels"]), reference=_json_number(data["reference"], optional=True),
            emphasize_first=data["emphasize_first"], note=_json_text(data["note"]), value_format=value_format,
            references=tuple((float(_json_number(v) or 0.0), _json_text(label)) for v, label in references),
        )
    except _NotASpec:
        return None


def load_spec(figure: Path) -> FigureSpec | None:
    """The spec a :func:`figure_file` was drawn from, or None: no spec file, not a regular file,
    not a JSON spec (an older build's pickle too: never unpickled), or a spec whose key is not the
    one in ``figure``'s name."""
    path = figure.with_suffix(".spec")
    try:
        if path.is_symlink() or not path.is_file() or path.stat().st_size > MAX_SPEC_BYTES:
            return None
        spec = spec_from_json(json.loads(path.read_text(encoding="utf-8")))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError, RecursionError):
        return None
    if spec is None or figure.stem.rsplit("-", 1)[-1] != spec.key():
        return None
    return spec


def _write_atomic(path: Path, data: bytes) -> None:
    """A figure file: atomic, readable by others (0644: a web server serves it), not fsynced
    (a build can always draw it again)."""
    write_atomic(path, data, mode=0o644, durable=False)


# ---------------------------------------------------------------------------------- README
README_MODEL = "te-guide-5b"
DEFAULT_README_OUT = Path("docs/_static/readme-speedups.svg")




def readme_documents(cache_dir: Path, *, on_error: Callable[[Exception], None] | None = None,
                     ) -> tuple[list[Result], list[tuple[str, str]]]:
    """The README question's current results, typed, by device name; and (device, why) of each skipped
    stale one. What the README figure draws and what its caption says come from this one list.

    Unreadable cache files and stale results (another method version) are passed to ``on_error``
    (default: printed to stderr).
    """
    from gemm_bench.question.question import build_question
    from gemm_bench.results.cache import Cache, is_stale

    question = build_question(model=README_MODEL)
    lookup = Cache(cache_dir).lookup(question.hash)
    for error in lookup.errors:
        (on_error or _print_error)(error)
    fresh, skipped = [], []
    for doc in lookup.documents:
        result, why = parse(doc), is_stale(doc)
        if why is None:
            fresh.append(result)
        else:  # never draw another method's numbers beside the current one's
            skipped.append((result.device.name, why))
            (on_error or _print_error)(FigureError(f"skipping the result on {result.device.name}: {why}"))
    return sorted(fresh, key=lambda r: r.device.name), sorted(skipped)


def readme_spec(cache_dir: Path, *, on_error: Callable[[Exception], None] | None = None) -> FigureSpec:
    """The README figure: the Transformer Engine guide's example layer on every cached device
    with a current result (:func:`readme_documents`).

    Raises :class:`FigureError` naming the cache directory when no device has a result.
    """
    from gemm_bench.question.question import build_question

    question = build_question(model=README_MODEL)
    results, _ = readme_documents(cache_dir, on_error=on_error)
    reports = [(device_label(r.device.name), Report(r)) for r in results]
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
    would not change is left alone (an empty list: up to date). Raises :class:`FigureError`, also
    when a destination exists and is not a regular file (a device, a FIFO: never read, never
    replaced).
    """
    paths = readme_paths(out)
    for path in paths:
        if path.exists() and not path.is_file():
            raise FigureError(f"{path} is not a regular file: the README figure is written only to a file")
    spec = readme_spec(cache_dir, on_error=on_error)
    changed = []
    themes: tuple[Theme, Theme] = ("light", "dark")
    for path, theme in zip(paths, themes, strict=True):
        data = render(spec, "svg", theme=theme)
        if _holds(path, data):
            continue
        _write_atomic(path, data)
        changed.append(path)
    return changed


def _holds(path: Path, data: bytes) -> bool:
    """Whether the regular file ``path`` holds exactly ``data``; reads at most ``len(data) + 1``
    bytes, and nothing at all from anything but a regular file (a device can be endless)."""
    try:
        if not path.is_file() or path.stat().st_size != len(data):
            return False
        with path.open("rb") as file:
            return file.read(len(data) + 1) == data
    except OSError:
        return False
