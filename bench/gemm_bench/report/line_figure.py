"""Line figures as standalone SVG text: y against x per series, optional shaded bands, a legend.

A general figure for curves (SQNR against dynamic range, loss against step, ...), drawn the way the
speedup figures are (:mod:`gemm_bench.report.figures`): laid out here in points from DejaVu Sans'
metrics (:mod:`gemm_bench.report.figure_layout`), written by :mod:`gemm_bench.report.figure_svg`,
neither matplotlib nor numpy imported. The same inputs give the same bytes.

Use::

    svg = line_svg([Series("FP8 Block", (1, 10, 100), (28.5, 28.4, 28.6)),
                    Series("FP8 Current", (1, 10, 100), (28.5, 27.0, 9.0), dashed=True)],
                   x_label="R", y_label="SQNR (dB)", log_x=True,
                   bands=[Band(1e4, 1e5, "Reported range (literature, not measured)")])

What a caller can rely on:

* ``theme="page"`` (the default): text, axes and grid are ``currentColor`` and the root takes its
  colour from the page's ``--gemm-figure-ink`` when inlined, else from the reader's
  ``prefers-color-scheme`` (as the speedup figures); ``light`` and ``dark`` use fixed inks. Series
  colours are Okabe-Ito mid-tones that read on both backgrounds, unless a series names its own.
* No label is ever cut: the title, axis labels and legend entries wrap onto more lines and the
  canvas grows to hold them (``height`` is the plotting area's, not the canvas').
* A series' ``None`` values are gaps in its line; a non-finite value, a non-positive value on a
  log axis or mismatched lengths raise :class:`LineFigureError`, never a silently wrong drawing.
* Bands are drawn under the grid and the lines, in the ink at low opacity, and named in the legend
  (a band is context, such as a range a paper reports, not data). An :class:`Area` is a band whose
  ends vary along x (BF16's seed-to-seed range at each evaluation step), drawn the same way, in its
  own colour when it names one.
* A series with ``line=False`` is its markers alone (values measured at a few steps, set beside a
  curve of another quantity).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Sequence
from typing import Literal

from gemm_bench.report.figure_layout import (
    ASCENT,
    DESCENT,
    GRID_ALPHA,
    SPINE_ALPHA,
    Circle,
    Item,
    Polygon,
    Polyline,
    Scene,
    Text,
    axis_ticks,
    text_width,
    wrap,
)
from gemm_bench.report.figure_spec import _INK, FONT_PT, SMALL_PT, WIDE_IN, WIDTH_IN
from gemm_bench.report.figure_svg import PAGE_CLASS, to_svg

Theme = Literal["page", "light", "dark"]

#: Okabe-Ito, in the order series take them when they name no colour.
PALETTE: tuple[str, ...] = ("#0072B2", "#E69F00", "#009E73", "#CC79A7", "#D55E00", "#56B4E9", "#999999",
                            "#F0E442")
WIDTH_PT = WIDTH_IN * 72
HEIGHT_PT = 170.0
#: The desktop twin's canvas width and plot height (a page shows it where the column is wide enough,
#: ``render_block.figure_pair``): the column's width, the plot taller in proportion.
WIDE_PT = WIDE_IN * 72
WIDE_HEIGHT_PT = HEIGHT_PT * 1.5
BAND_ALPHA = 0.14

_PAD = 4.0
_TICK = 7.0
_LINE_WIDTH = 1.5
_MARKER_R = 2.5
_DASH = (4.0, 2.2)
_HANDLE = 18.0
_HANDLE_PAD = 5.0
_COLUMN_GAP = 10.0
_SUPERSCRIPT = str.maketrans("0123456789-", "⁰¹²³⁴⁵⁶⁷⁸⁹⁻")
_PAGE_STYLE = (f'<style type="text/css">@media (prefers-color-scheme: dark) {{ svg.{PAGE_CLASS} '
               f'{{ --gemm-figure-ink-auto: {_INK["dark"]} }} }}</style>')
_PAGE_ROOT_ATTRS = (f'class="{PAGE_CLASS}" style="color: var(--gemm-figure-ink, '
                    f'var(--gemm-figure-ink-auto, {_INK["light"]}))"')


class LineFigureError(ValueError):
    """Inputs a line figure cannot draw truthfully (a NaN, a zero on a log axis, lengths that differ)."""


@dataclasses.dataclass(frozen=True)
class Series:
    """One curve: ``ys[i]`` at ``xs[i]`` (``None``: no value there, a gap in the line).

    ``dashed`` draws the line dashed (a second quantity of the same colour, say); ``color`` a CSS
    colour, else the next of :data:`PALETTE`; ``markers`` a dot at every point; ``line=False``: the
    dots alone, no line between them (``markers`` must then be true)."""

    label: str
    xs: Sequence[float]
    ys: Sequence[float | None]
    dashed: bool = False
    color: str = ""
    markers: bool = True
    line: bool = True


@dataclasses.dataclass(frozen=True)
class Band:
    """A shaded range ``[low, high]`` along ``axis`` (``x``: a vertical strip), named in the legend."""

    low: float
    high: float
    label: str
    axis: Literal["x", "y"] = "x"


@dataclasses.dataclass(frozen=True)
class Area:
    """A shaded range from ``lows[i]`` to ``highs[i]`` at each ``xs[i]``, straight between them, named in
    the legend: a band whose ends vary along x. ``color``: a CSS colour, else the figure's ink."""

    xs: Sequence[float]
    lows: Sequence[float]
    highs: Sequence[float]
    label: str
    color: str = ""


@dataclasses.dataclass(frozen=True)
class _Axis:
    low: float
    high: float
    log: bool

    def fraction(self, value: float) -> float:
        if self.log:
            return (math.log10(value) - math.log10(self.low)) / (math.log10(self.high) - math.log10(self.low))
        return (value - self.low) / (self.high - self.low)


def _check(series: Sequence[Series], bands: Sequence[Band], log_x: bool, log_y: bool,
           areas: Sequence[Area] = ()) -> None:
    for s in series:
        if not (s.line or s.markers):
            raise LineFigureError(f"series {s.label!r} has neither a line nor markers: nothing would show it")
        if len(s.xs) != len(s.ys):
            raise LineFigureError(f"series {s.label!r} has {len(s.xs)} x values and {len(s.ys)} y values")
        for x, y in zip(s.xs, s.ys, strict=True):
            if not math.isfinite(x) or (y is not None and not math.isfinite(y)):
                raise LineFigureError(f"series {s.label!r} holds a non-finite point ({x!r}, {y!r})")
            if (log_x and x <= 0) or (log_y and y is not None and y <= 0):
                raise LineFigureError(f"series {s.label!r} has ({x!r}, {y!r}) on a log axis, which needs > 0")
    for b in bands:
        log = log_x if b.axis == "x" else log_y
        if not (math.isfinite(b.low) and math.isfinite(b.high)) or b.low > b.high or (log and b.low <= 0):
            raise LineFigureError(f"band {b.label!r} has bounds {b.low!r}..{b.high!r}, which it cannot draw")
    for a in areas:
        if not len(a.xs) == len(a.lows) == len(a.highs) or len(a.xs) < 2:
            raise LineFigureError(f"area {a.label!r} needs two or more points, as many lows and highs as x values "
                                  f"(has {len(a.xs)}, {len(a.lows)}, {len(a.highs)})")
        for x, low, high in zip(a.xs, a.lows, a.highs, strict=True):
            if not all(math.isfinite(v) for v in (x, low, high)) or low > high or (log_x and x <= 0) or (
                    log_y and low <= 0):
                raise LineFigureError(f"area {a.label!r} has {low!r}..{high!r} at {x!r}, which it cannot draw")


def _limits(values: Sequence[float], log: bool) -> _Axis:
    """The data range with 5% margins (in log space on a log axis); a single value gets room around it."""
    if not values:
        return _Axis(1.0, 10.0, True) if log else _Axis(0.0, 1.0, False)
    low, high = min(values), max(values)
    if log:
        a, b = math.log10(low), math.log10(high)
        if a == b:
            a, b = a - 0.5, b + 0.5
        margin = (b - a) * 0.05
        return _Axis(10 ** (a - margin), 10 ** (b + margin), True)
    if low == high:
        pad = abs(low) * 0.05 or 0.5
        low, high = low - pad, high + pad
    margin = (high - low) * 0.05
    return _Axis(low - margin, high + margin, False)


#: How far inside the plot, beyond a marker's (or ring's) edge, the highest and lowest points sit: the
#: 5% margin alone left the methodology's 28.5 dB points, ringed three deep, touching the plot's top.
ROOM_PT = 3.0


def _with_room(axis: _Axis, lowest: float, highest: float, room: float) -> _Axis:
    """``axis`` widened (never narrowed) so that ``lowest`` and ``highest`` lie at least ``room`` (a
    fraction of the plot's height, under one half) inside its ends, in log space on a log axis."""
    def t(v: float) -> float:
        return math.log10(v) if axis.log else v

    a, b, lo, hi, f = t(axis.low), t(axis.high), t(lowest), t(highest), room
    top, bottom = (hi - f * a) / (1 - f), (lo - f * b) / (1 - f)  # each end as it must be, the other kept
    if b >= top and a <= bottom:
        pass
    elif a <= (lo - f * max(b, top)) / (1 - f):
        b = max(b, top)
    elif b >= (hi - f * min(a, bottom)) / (1 - f):
        a = min(a, bottom)
    else:  # both ends move: the points sit exactly ``room`` inside each
        span = (hi - lo) / (1 - 2 * f)
        a, b = min(a, lo - f * span), max(b, hi + f * span)
    return _Axis(10 ** a, 10 ** b, True) if axis.log else _Axis(a, b, False)


def y_range(series: Sequence[Series], *, height: float = HEIGHT_PT, log_y: bool = False, bands: Sequence[Band] = (),
            include_y: Sequence[float] = (), areas: Sequence[Area] = ()) -> tuple[float, float]:
    """The y axis' (low, high) as :func:`line_svg` draws it for a plot ``height`` points tall: the data,
    the y bands and ``include_y`` with 5% margins, then widened until the highest and lowest points'
    markers (rings, where a line hides another: :func:`_hidden_under`) sit :data:`ROOM_PT` inside."""
    axis = _y_axis(series, height, log_y, bands, include_y, areas)
    return axis.low, axis.high


def _y_axis(series: Sequence[Series], height: float, log_y: bool, bands: Sequence[Band],
            include_y: Sequence[float], areas: Sequence[Area] = ()) -> _Axis:
    ys = [y for s in series for y in s.ys if y is not None]
    base = _limits([*ys, *(v for b in bands if b.axis == "y" for v in (b.low, b.high)), *include_y,
                    *(v for a in areas for v in (*a.lows, *a.highs))], log_y)
    if not ys:
        return base
    radius = _LINE_WIDTH / 2
    while True:  # rings widen as the scale shrinks lines onto each other: until the widest ring fits
        axis = _to_tick_above(_with_room(base, min(ys), max(ys), min((radius + ROOM_PT) / height, 0.25)),
                              max(ys), height)
        hidden = _hidden_under(series, _canvas_y(axis, height))
        widest = max((_marker_radius(s, hidden) for s in series if s.markers or s.label in hidden),
                     default=_LINE_WIDTH / 2)
        if widest <= radius:
            return axis
        radius = widest


def _to_tick_above(axis: _Axis, highest: float, height: float) -> _Axis:
    """A linear axis whose top tick lies under ``highest`` raised to the next tick when that costs at
    most half a tick's step: the highest points then sit under a labelled gridline, not above the last
    one (28.5 dB under a top tick of 25 read as "on the edge")."""
    if axis.log:
        return axis
    ticks = [v for v, _ in axis_ticks(axis.low, axis.high, height, "y")]
    if len(ticks) < 2 or ticks[-1] >= highest:
        return axis
    step = ticks[-1] - ticks[-2]
    above = ticks[-1] + step
    return _Axis(axis.low, above, False) if above - axis.high <= step / 2 else axis


def _canvas_y(axis: _Axis, height: float) -> Callable[[float], float]:
    """A value's height on the plot, in points up from its bottom, negated (the canvas' y grows down)."""
    return lambda y: -axis.fraction(y) * height


def _decade_text(exponent: int) -> str:
    if -3 <= exponent <= 3:
        return f"{10.0 ** exponent:g}" if exponent < 0 else str(10 ** exponent)
    return "10" + str(exponent).translate(_SUPERSCRIPT)


def log_ticks(low: float, high: float) -> list[tuple[float, str]]:
    """Ticks of a log axis over ``[low, high]``: every decade (every other one past 8 decades); within
    a range of under two decades, also 2 and 5 times each decade."""
    first, last = math.ceil(math.log10(low) - 1e-9), math.floor(math.log10(high) + 1e-9)
    step = 1 if last - first <= 8 else 2
    ticks = [(10.0 ** e, _decade_text(e)) for e in range(first, last + 1, step)]
    if len(ticks) < 2:
        ticks = []
        for e in range(first - 1, last + 1):
            for m in (1, 2, 5):
                value = m * 10.0 ** e
                if low * (1 - 1e-9) <= value <= high * (1 + 1e-9):
                    ticks.append((value, f"{value:g}"))
    return ticks


def _ticks(axis: _Axis, length: float, which: Literal["x", "y"]) -> list[tuple[float, str]]:
    return log_ticks(axis.low, axis.high) if axis.log else axis_ticks(axis.low, axis.high, length, which)


def _block(x: float, top: float, lines: Sequence[str], size: float, ink: str, anchor: Literal["start", "middle", "end"],
           *, bold: bool = False) -> list[Text]:
    pitch = (ASCENT + DESCENT + 0.2) * size
    return [Text(x, top + ASCENT * size + i * pitch, line, size, ink, anchor, bold=bold)
            for i, line in enumerate(lines)]


def _pitch(size: float) -> float:
    return (ASCENT + DESCENT + 0.2) * size


def line_svg(series: Sequence[Series], *, x_label: str, y_label: str, log_x: bool = False, log_y: bool = False,
             title: str = "", bands: Sequence[Band] = (), width: float = WIDTH_PT, height: float = HEIGHT_PT,
             theme: Theme = "page", include_y: Sequence[float] = (), areas: Sequence[Area] = ()) -> str:
    """The figure as an SVG document (text).

    ``width``: the canvas' width in points; ``height``: the plotting area's height in points (the
    title, legend and axis labels are added around it, wrapped, never cut). ``theme``: ``page`` (ink
    follows the page), ``light`` or ``dark`` (fixed inks). ``include_y``: values the y axis spans
    whatever the data (``(0,)`` keeps small differences from filling the whole height). ``areas``:
    shaded ranges that vary along x (:class:`Area`), drawn with the bands."""
    _check(series, bands, log_x, log_y, areas)
    if theme not in ("page", "light", "dark"):
        raise LineFigureError(f"theme {theme!r} is not one of page, light, dark")
    ink = "currentColor" if theme == "page" else _INK[theme]
    colors = []
    next_color = 0
    for s in series:
        if s.color:
            colors.append(s.color)
        else:
            colors.append(PALETTE[next_color % len(PALETTE)])
            next_color += 1

    xs = [x for s in series for x, y in zip(s.xs, s.ys, strict=True) if y is not None]
    ys = [y for s in series for y in s.ys if y is not None]
    x_axis = _limits(xs + [v for b in bands if b.axis == "x" for v in (b.low, b.high)]
                     + [x for a in areas for x in a.xs], log_x)
    if not all(math.isfinite(v) and (v > 0 or not log_y) for v in include_y):
        raise LineFigureError(f"include_y {tuple(include_y)!r} holds a value the y axis cannot show")
    y_axis = _y_axis(series, height, log_y, bands, include_y, areas)

    inner = width - 2 * _PAD
    title_lines = wrap(title, FONT_PT + 1, inner, bold=True) if title else []
    # Below the title, or half a tick label's height from the edge (the top tick's label is centred on it).
    top = _PAD + (len(title_lines) * _pitch(FONT_PT + 1) + 4 if title_lines else ASCENT * SMALL_PT / 2)

    y_ticks = _ticks(y_axis, height, "y")
    tick_width = max((text_width(t, SMALL_PT) for _, t in y_ticks), default=0.0)
    y_lines = wrap(y_label, FONT_PT, height, balanced=True) if y_label else []
    left = _PAD + len(y_lines) * _pitch(FONT_PT) + 2 + tick_width + _TICK
    x_ticks_probe = _ticks(x_axis, width - left - _PAD, "x")
    right = _PAD + max((text_width(t, SMALL_PT) / 2 for _, t in x_ticks_probe[-1:]), default=0.0)
    plot_width = width - left - right
    if plot_width < 60:
        raise LineFigureError(f"a width of {width} pt leaves {plot_width:.0f} pt to plot in")
    x_ticks = _ticks(x_axis, plot_width, "x")
    plot_top, plot_bottom = top, top + height

    def px(x: float) -> float:
        return left + x_axis.fraction(x) * plot_width

    def py(y: float) -> float:
        return plot_bottom - y_axis.fraction(y) * height

    hidden = _hidden_under(series, py)
    items: list[Item] = []
    texts: list[Text] = []
    # Bands first, as wide strokes at low opacity (the scene has no translucent fill), under everything.
    for band in bands:
        if band.axis == "x":
            x0, x1 = max(px(band.low), left), min(px(band.high), left + plot_width)
            if x1 > x0:
                middle = (x0 + x1) / 2
                items.append(Polyline(((middle, plot_bottom), (middle, plot_top)), ink, x1 - x0, alpha=BAND_ALPHA))
        else:
            y0, y1 = min(py(band.low), plot_bottom), max(py(band.high), plot_top)
            if y0 > y1:
                middle = (y0 + y1) / 2
                items.append(Polyline(((left, middle), (left + plot_width, middle)), ink, y0 - y1, alpha=BAND_ALPHA))
    for area in areas:  # an outline of the upper ends left to right, then the lower ends back
        outline = [(px(x), py(h)) for x, h in zip(area.xs, area.highs, strict=True)]
        outline += [(px(x), py(lo)) for x, lo in reversed(list(zip(area.xs, area.lows, strict=True)))]
        items.append(Polygon(tuple(outline), area.color or ink, alpha=BAND_ALPHA))
    items += [Polyline(((left, py(v)), (left + plot_width, py(v))), ink, 0.6, alpha=GRID_ALPHA) for v, _ in y_ticks]
    items += [Polyline(((px(v), plot_bottom), (px(v), plot_top)), ink, 0.6, alpha=GRID_ALPHA) for v, _ in x_ticks]
    for s, color in zip(series, colors, strict=True):
        runs: list[list[tuple[float, float]]] = [[]]
        for x, y in zip(s.xs, s.ys, strict=True):
            if y is None:
                runs.append([])
            else:
                runs[-1].append((px(x), py(y)))
        for run in runs if s.line else ():
            if len(run) > 1:
                items.append(Polyline(tuple(run), color, _LINE_WIDTH, _DASH if s.dashed else ()))
        if s.markers or s.label in hidden:
            items += [_marker(x, y, s, color, hidden) for run in runs for x, y in run]
    items.append(Polyline(((left, plot_bottom), (left, plot_top)), ink, 0.8, alpha=SPINE_ALPHA, cap="square"))
    items.append(Polyline(((left, plot_bottom), (left + plot_width, plot_bottom)), ink, 0.8, alpha=SPINE_ALPHA,
                          cap="square"))
    for v, t in y_ticks:
        texts.append(Text(left - _TICK, py(v) + (ASCENT - DESCENT) * SMALL_PT / 2, t, SMALL_PT, ink, "end"))
    tick_baseline = plot_bottom + _TICK / 2 + ASCENT * SMALL_PT
    for v, t in x_ticks:
        texts.append(Text(px(v), tick_baseline, t, SMALL_PT, ink, "middle"))
    if not ys:
        texts.append(Text(left + plot_width / 2, plot_top + height / 2, "no data", FONT_PT, ink, "middle"))
    # The y label, turned, its lines stacked leftwards from the tick labels.
    for i, line in enumerate(y_lines):
        x = left - _TICK - tick_width - 2 - DESCENT * FONT_PT - (len(y_lines) - 1 - i) * _pitch(FONT_PT)
        texts.append(Text(x, plot_top + height / 2, line, FONT_PT, ink, "middle", rotation=90))
    cursor = tick_baseline + DESCENT * SMALL_PT + 3
    if x_label:
        room = 2 * min(left + plot_width / 2 - _PAD, width - _PAD - (left + plot_width / 2))
        lines = wrap(x_label, FONT_PT, room)
        texts += _block(left + plot_width / 2, cursor, lines, FONT_PT, ink, "middle")
        cursor += len(lines) * _pitch(FONT_PT)
    if title_lines:
        texts += _block(_PAD, _PAD, title_lines, FONT_PT + 1, ink, "start", bold=True)
    legend_items, legend_texts, bottom = _legend(series, colors, bands, ink, cursor + 6, inner, hidden, areas)
    items += legend_items
    texts += legend_texts
    scene = Scene(round(width, 2), round(bottom + _PAD, 2), (*items, *texts))
    if theme == "page":
        return to_svg(scene, page_style=_PAGE_STYLE, root_attrs=_PAGE_ROOT_ATTRS).decode("utf-8")
    return to_svg(scene).decode("utf-8")


#: Two lines whose every point lies within this many points of each other look like one line.
COINCIDE_PT = 1.5
#: How much wider each ring around a hidden line's points is than the marker (or ring) over it.
_RING_STEP = 1.8


def _hidden_under(series: Sequence[Series],
                  py: Callable[[float], float]) -> dict[str, tuple[str, int]]:
    """The series later ones hide: label -> (the label of the topmost line over it, how many lines
    lie over it). A line lies over series ``i`` when it is drawn after it, has a value at each of its
    x, and every such point is within :data:`COINCIDE_PT` of it on the canvas (FP8 Current's
    whole-tensor SQNR under FP8 Block's, say): a reader would see one line where the legend names
    several."""
    points = [{x: py(y) for x, y in zip(s.xs, s.ys, strict=True) if y is not None} for s in series]
    hidden: dict[str, tuple[str, int]] = {}
    for i, mine in enumerate(points):
        over = [j for j in range(i + 1, len(series)) if mine and all(
            x in points[j] and abs(points[j][x] - y) <= COINCIDE_PT for x, y in mine.items())]
        if over:
            hidden[series[i].label] = (series[over[-1]].label, len(over))
    return hidden


def _marker_radius(s: Series, hidden: dict[str, tuple[str, int]]) -> float:
    """A point's dot radius; a hidden line's ring is wider the more lines lie over it."""
    if s.label in hidden:
        return _MARKER_R + _RING_STEP * hidden[s.label][1]
    return _MARKER_R * (0.8 if s.dashed else 1.0)


def _marker(x: float, y: float, s: Series, color: str, hidden: dict[str, tuple[str, int]]) -> Circle:
    """A point's dot; a hidden line's point is a ring, so that every line's points show around the
    dot on top."""
    if s.label in hidden:
        return Circle(x, y, _marker_radius(s, hidden), "none", stroke=color, stroke_width=1.1)
    return Circle(x, y, _marker_radius(s, hidden), color)


def _legend(series: Sequence[Series], colors: Sequence[str], bands: Sequence[Band], ink: str, top: float,
            inner: float, hidden: dict[str, tuple[str, int]],
            areas: Sequence[Area] = ()) -> tuple[list[Item], list[Text], float]:
    """Entries (series, then bands and areas) in two columns when every label fits half the width, else one;
    a label wider than its column wraps; a hidden line's entry has its ring and says which line it
    lies under. Returns the items, texts and the legend's bottom."""
    entries: list[tuple[str, str, bool, bool]] = [
        (f"{s.label} (under {hidden[s.label][0]})" if s.label in hidden else s.label, c, s.dashed, False)
        for s, c in zip(series, colors, strict=True)]
    entries += [(b.label, ink, False, True) for b in bands]
    entries += [(a.label, a.color or ink, False, True) for a in areas]
    if not entries:
        return [], [], top
    half = (inner - _COLUMN_GAP) / 2
    text_room = half - _HANDLE - _HANDLE_PAD
    columns = 2 if len(entries) > 1 and all(text_width(e[0], SMALL_PT) <= text_room for e in entries) else 1
    column_width = half if columns == 2 else inner
    room = column_width - _HANDLE - _HANDLE_PAD
    items: list[Item] = []
    texts: list[Text] = []
    y = top
    for start in range(0, len(entries), columns):
        row = entries[start:start + columns]
        wrapped = [wrap(label, SMALL_PT, room) for label, *_ in row]
        for column, ((_, color, dashed, band), lines) in enumerate(zip(row, wrapped, strict=True)):
            x = _PAD + column * (column_width + _COLUMN_GAP)
            middle = y + ASCENT * SMALL_PT - 0.35 * SMALL_PT
            if band:
                items.append(Polyline(((x, middle), (x + _HANDLE, middle)), color, SMALL_PT, alpha=BAND_ALPHA))
            else:
                entry = series[start + column]
                if entry.line:
                    items.append(Polyline(((x, middle), (x + _HANDLE, middle)), color, _LINE_WIDTH,
                                          _DASH if dashed else ()))
                items.append(_marker(x + _HANDLE / 2, middle, entry, color, hidden))
            texts += _block(x + _HANDLE + _HANDLE_PAD, y, lines, SMALL_PT, ink, "start")
        y += max(len(lines) for lines in wrapped) * _pitch(SMALL_PT) + 2
    return items, texts, y
