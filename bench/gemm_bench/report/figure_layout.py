"""Figure layout: a :class:`~gemm_bench.report.figure_spec.FigureSpec` as a *scene* of plain primitives.

A scene is what both back ends draw: the SVG writer (:mod:`gemm_bench.report.figure_svg`, the HTML
build's figures) and matplotlib (:mod:`gemm_bench.report.figure_mpl`, PDF and PNG for other builders).
Coordinates are points (1/72 in) from the canvas' top-left corner, y pointing down; a text's
``(x, y)`` is its anchor on the baseline. Everything is placed here, from DejaVu Sans' metrics
(:mod:`gemm_bench.report.dejavu_metrics`) and ports of matplotlib's tick locator and formatters, so a
back end only paints: the layout needs neither matplotlib nor numpy.

The geometry is the one the matplotlib drawing code had (sizes, margins, fonts, tick choice),
laid out by hand: margins from the labels' widths, bars in fixed slots, the value axis as a grid
and plain texts, a legend of one entry per precision above the plot (under the title when there is
one: a tall figure's legend is seen before its bars). The same spec lays out at any width (the
site draws 3.8 in for phones and 7 in for desktops): labels keep their size, the plot takes the rest.

Nothing a reader needs is cut off: a category label too long for its share of the width wraps
(after a " · " first, else at spaces; only a single word wider than that share is shortened, its
text kept as the label's tooltip), a value label never sits across a reference line, and a value
that is missing gets a marker saying so, its reason as a tooltip.
"""

from __future__ import annotations

import dataclasses
import functools
import math
from collections.abc import Sequence
from typing import Literal

from gemm_bench.report import dejavu_metrics as _font
from gemm_bench.report.figure_spec import FONT_PT, SMALL_PT, WIDTH_IN, FigureSpec, Panel, missing_mark

TITLE_PT = FONT_PT + 1

GRID_ALPHA = 0.22
SPINE_ALPHA = 0.45

_PAD = 4.0  # figure edge, in points
_TICK = 7.0  # tick length plus the label's pad, in points
_LINE = FONT_PT * 1.3  # one line of text, in points
_BAR_PT = 10.8  # one bar's slot (0.8 of a category holds all of a category's bars)
_LABEL_SHARE = 0.45  # of the width, at most, for a bar figure's category labels
_LABEL_GAP = 2.0  # between two categories' wrapped labels, in points
_REFERENCE_GAP = 2.0  # between a reference line and a value label moved off it, in points
_MISSING_R = 2.5  # a missing value's hollow marker: radius, in points
_REFERENCE_STROKE = 0.8  # a reference line's width, in points
_SWEEP_AXES_PT = 170.0
_PANEL_GAP = 8.0
_TITLE_PAD = 6.0  # a panel title's baseline above its axes (matplotlib's axes.titlepad)
#: Legend geometry in ems of its font (matplotlib's handlelength 1.2, handletextpad 0.8,
#: columnspacing 1.0, labelspacing 0.5, handleheight 0.7).
_HANDLE_EM, _HANDLE_PAD_EM, _COLUMN_GAP_EM, _ROW_GAP_EM, _HANDLE_HEIGHT_EM = 1.2, 0.8, 1.0, 0.5, 0.7
_LEGEND_COLUMNS = 3
#: Line widths and marker radii (matplotlib's defaults for the artists the figures used: a marker's
#: radius is half its size plus half its 1 pt edge).
_LINE_WIDTH = 1.5
_SWEEP_MARKER_R = (4 + 1) / 2
_SCATTER_MARKER_R = (6 + 1) / 2
#: matplotlib's "--" and ":" patterns at a 0.8 pt line (3.7, 1.6 and 1, 1.65 times the width).
_DASHED = (2.96, 1.28)
_DOTTED = (0.8, 1.32)
#: A text's measure when a character is not in the table: the widest glyph's (never too narrow).
_FALLBACK = {weight: max(widths.values()) for weight, widths in _font.ADVANCES.items()}
#: Ascent, descent and line gap of DejaVu Sans, in ems (its OS/2 typographic metrics, which
#: matplotlib uses for a line's box).
ASCENT = _font.ASCENT / _font.UNITS_PER_EM
DESCENT = _font.DESCENT / _font.UNITS_PER_EM
LINE_GAP = _font.LINE_GAP / _font.UNITS_PER_EM


# ------------------------------------------------------------------------------------ primitives
Anchor = Literal["start", "middle", "end"]


@dataclasses.dataclass(frozen=True)
class Rect:
    """A filled rectangle without an outline."""

    x: float
    y: float
    width: float
    height: float
    fill: str


@dataclasses.dataclass(frozen=True)
class Polygon:
    """A filled closed shape through ``points``, without an outline, at ``alpha`` opacity: a shaded
    range whose ends vary (a line figure's :class:`~gemm_bench.report.line_figure.Area`)."""

    points: tuple[tuple[float, float], ...]
    fill: str
    alpha: float = 1.0


@dataclasses.dataclass(frozen=True)
class Polyline:
    """A stroked open line through ``points``; ``dash``: on/off lengths in points, () for solid;
    ``cap`` ``square`` extends each end by half the width (matplotlib's ``projecting``)."""

    points: tuple[tuple[float, float], ...]
    stroke: str
    width: float
    dash: tuple[float, ...] = ()
    alpha: float = 1.0
    cap: Literal["butt", "square"] = "butt"


@dataclasses.dataclass(frozen=True)
class Circle:
    """A circle (a marker): filled with ``fill`` ("none": hollow), outlined when ``stroke`` is set;
    ``title``: a tooltip (an SVG ``<title>``)."""

    x: float
    y: float
    radius: float
    fill: str
    stroke: str = ""
    stroke_width: float = 0.0
    title: str = ""


@dataclasses.dataclass(frozen=True)
class Text:
    """One line of text anchored at ``(x, y)`` on its baseline; ``rotation`` 90 reads bottom to
    top, turning about the anchor; ``group``: an id for a group holding this text and the texts
    of that id right after it (a wrapped label's lines); ``title``: a tooltip (an SVG
    ``<title>``), of its group when it has one (the first title among the group's texts)."""

    x: float
    y: float
    text: str
    size: float
    fill: str
    anchor: Anchor = "start"
    bold: bool = False
    rotation: Literal[0, 90] = 0
    group: str = ""
    title: str = ""

    def box(self) -> tuple[float, float, float, float]:
        """``(x0, y0, x1, y1)``: the line's box (advance width, ascent to descent) on the canvas."""
        width = text_width(self.text, self.size, bold=self.bold)
        start = {"start": 0.0, "middle": -width / 2, "end": -width}[self.anchor]
        ascent, descent = ASCENT * self.size, DESCENT * self.size
        if self.rotation == 90:  # along the text is up the page; the glyphs' tops face left
            return self.x - ascent, self.y - start - width, self.x + descent, self.y - start
        return self.x + start, self.y - ascent, self.x + start + width, self.y + descent


Item = Rect | Polygon | Polyline | Circle | Text


@dataclasses.dataclass(frozen=True)
class Scene:
    """A canvas ``width`` x ``height`` points and what is painted on it, in order."""

    width: float
    height: float
    items: tuple[Item, ...]


# --------------------------------------------------------------------------------------- metrics
@functools.lru_cache(maxsize=4096)
def text_width(line: str, size: float, *, bold: bool = False) -> float:
    """One line's advance width in points (no kerning: pairs like "AV" measure a little wide)."""
    weight = "bold" if bold else "normal"
    widths, fallback = _font.ADVANCES[weight], _FALLBACK[weight]
    return sum(widths.get(ord(char), fallback) for char in line) * size / _font.UNITS_PER_EM


def wrap(text: str, size: float, width: float, *, bold: bool = False, balanced: bool = False) -> list[str]:
    """``text`` in lines no wider than ``width`` points, broken at spaces (a word wider than a
    line is broken between characters); ``balanced``: as many lines, as even as they can be."""
    lines = _greedy(text, size, width, bold)
    if balanced and len(lines) > 1:
        low, high = 0.0, width  # the narrowest width that still gives as many lines
        for _ in range(24):
            middle = (low + high) / 2
            low, high = (low, middle) if len(_greedy(text, size, middle, bold)) <= len(lines) else (middle, high)
        lines = _greedy(text, size, high, bold)
    return lines


def _title_lines(title: str, width: float) -> list[str]:
    """A panel's title in lines of at most ``width`` points: whole if it fits, else broken before
    its bracketed note first, then at spaces."""
    if not title or text_width(title, FONT_PT) <= width:
        return [title] if title else []
    name, bracket, note = title.partition(" (")
    return [line for part in (name, bracket.strip() + note) if part for line in wrap(part, FONT_PT, width)]


def _greedy(text: str, size: float, width: float, bold: bool) -> list[str]:
    lines: list[str] = []
    current = ""
    for word in text.split():
        candidate = f"{current} {word}" if current else word
        if text_width(candidate, size, bold=bold) <= width:
            current = candidate
            continue
        if current:
            lines.append(current)
        current = ""
        for char in word:  # the word alone: as much of it per line as fits
            if current and text_width(current + char, size, bold=bold) > width:
                lines.append(current)
                current = ""
            current += char
    if current or not lines:
        lines.append(current)
    return lines


def _fit(text: str, size: float, width: float, *, bold: bool = False) -> str:
    """``text`` cut to ``width`` points with an ellipsis (a single word of a hostile name only:
    see :func:`label_lines`)."""
    if text_width(text, size, bold=bold) <= width:
        return text
    while text and text_width(text + "…", size, bold=bold) > width:
        text = text[:-1]
    return text + "…"


@dataclasses.dataclass(frozen=True)
class _Label:
    """A bar figure's category label as drawn: its lines, bold or not, and a tooltip holding the
    whole text when a line had to be shortened ("" otherwise)."""

    lines: tuple[str, ...]
    bold: bool
    title: str = ""


def label_lines(text: str, size: float, width: float, *, bold: bool = False) -> tuple[list[str], bool]:
    """A category label in lines no wider than ``width`` points, and whether a line was shortened.

    One line when it fits. Else broken after each " · " (between a model and its device) where
    the pieces fit, and within a piece at spaces. Only a single word wider than ``width`` is cut
    (with an ellipsis): then the second value is True, and the caller keeps the whole text elsewhere.
    """
    if text_width(text, size, bold=bold) <= width:
        return [text], False

    def fits(line: str) -> bool:
        return text_width(line, size, bold=bold) <= width

    parts = text.split(" · ")
    pieces = [piece for piece in (f"{part} ·".strip() for part in parts[:-1]) if piece != "·"] + [parts[-1]]
    lines: list[str] = []
    current = ""
    shortened = False
    units = pieces[::-1]  # a stack: whole pieces, a piece too wide for a line of its own as its words
    while units:
        unit = units.pop()
        candidate = f"{current} {unit}" if current else unit
        if fits(candidate):
            current = candidate
        elif current:  # on a new line
            lines.append(current)
            current = ""
            units.append(unit)
        elif len(unit.split()) > 1:
            units += unit.split()[::-1]
        else:  # a single word wider than a line
            lines.append(_fit(unit, size, width, bold=bold))
            shortened = True
    if current or not lines:
        lines.append(current)
    return lines, shortened


def _category_labels(panel: Panel, spec: FigureSpec, width: float) -> list[_Label]:
    labels = []
    for i, category in enumerate(panel.categories):
        bold = spec.emphasize_first and i == 0
        lines, shortened = label_lines(category, FONT_PT, width, bold=bold)
        labels.append(_Label(tuple(lines), bold, category if shortened else ""))
    return labels


def _category_pt(panel: Panel, labels: Sequence[_Label]) -> float:
    """The height of one category's row, in points: its bars' slots, or its label's lines when
    they need more (a wrapped label never reaches into the next row)."""
    bars = max(len(panel.series), 1) * _BAR_PT / 0.8
    lines = max((len(label.lines) for label in labels), default=1)
    if lines == 1:
        return bars
    return max(bars, (lines - 1) * _line_pitch(FONT_PT) + (ASCENT + DESCENT) * FONT_PT + _LABEL_GAP)


def _rows_pt(panel: Panel, labels: Sequence[_Label]) -> float:
    """A bar panel's height: a row per category."""
    row = _category_pt(panel, labels)
    if row == max(len(panel.series), 1) * _BAR_PT / 0.8:  # as it always was, to the last bit
        return len(panel.categories) * max(len(panel.series), 1) * _BAR_PT / 0.8
    return len(panel.categories) * row


def _first_baseline(top: float, size: float, lines: int) -> float:
    """The first baseline of a block of ``lines`` whose box starts at ``top`` (matplotlib's
    layout: a single line's box is ascent + descent; several lines add the line gap)."""
    return top + (ASCENT + (LINE_GAP / 2 if lines > 1 else 0.0)) * size


def _line_pitch(size: float) -> float:
    return (ASCENT + DESCENT + LINE_GAP) * size


def _center_baseline(y: float, size: float) -> float:
    """The baseline that puts the middle of the ascent at ``y`` (matplotlib's center_baseline)."""
    return y + ASCENT * size / 2


def _center(y: float, size: float) -> float:
    """The baseline that centres a line's box on ``y`` (matplotlib's va="center")."""
    return y + (ASCENT - DESCENT) * size / 2


def _block(x: float, top: float, lines: Sequence[str], size: float, ink: str, anchor: Anchor) -> list[Text]:
    baseline = _first_baseline(top, size, len(lines))
    return [Text(x, baseline + i * _line_pitch(size), line, size, ink, anchor) for i, line in enumerate(lines)]


# ----------------------------------------------------------------------------------------- ticks
#: matplotlib's AutoLocator steps, extended one decade down and one step up (its "staircase").
_STEPS = (1.0, 2.0, 2.5, 5.0, 10.0)
_STAIRCASE = (*(0.1 * s for s in _STEPS[:-1]), *_STEPS, 10 * _STEPS[1])


def _nonsingular(vmin: float, vmax: float, expander: float, tiny: float) -> tuple[float, float]:
    """matplotlib.transforms.nonsingular: widen an empty or vanishing range."""
    if not (math.isfinite(vmin) and math.isfinite(vmax)):
        return -expander, expander
    vmin, vmax = sorted((float(vmin), float(vmax)))
    largest = max(abs(vmin), abs(vmax))
    if largest < (1e6 / tiny) * 2.2250738585072014e-308:
        return -expander, expander
    if vmax - vmin <= largest * tiny:
        if vmax == 0 and vmin == 0:
            return -expander, expander
        return vmin - expander * abs(vmin), vmax + expander * abs(vmax)
    return vmin, vmax


def _close_to(fraction: float, edge: float, step: float, offset: float) -> bool:
    if offset > 0:
        tolerance = min(0.4999, max(1e-10, 10 ** (math.log10(offset / step) - 12)))
    else:
        tolerance = 1e-10
    return abs(fraction - edge) < tolerance


def tick_values(vmin: float, vmax: float, nbins: int) -> list[float]:
    """The tick positions matplotlib's ``MaxNLocator(nbins, steps=[1, 2, 2.5, 5, 10])`` (its
    AutoLocator) gives for ``[vmin, vmax]``, including the ticks just outside the range."""
    vmin, vmax = _nonsingular(vmin, vmax, 1e-13, 1e-14)
    span = abs(vmax - vmin)
    mean = (vmax + vmin) / 2
    offset = 0.0 if abs(mean) / span < 100 else math.copysign(10 ** (math.log10(abs(mean)) // 1), mean)
    scale = 10 ** (math.log10(span / nbins) // 1)
    low_end, high_end = vmin - offset, vmax - offset
    steps = [s * scale for s in _STAIRCASE]
    raw_step = (high_end - low_end) / nbins
    first_large = next((i for i, s in enumerate(steps) if s >= raw_step), len(steps) - 1)
    ticks: list[float] = []
    for step in reversed(steps[:first_large + 1]):
        best = (low_end // step) * step
        d, m = divmod(low_end - best, step)
        low = d + 1 if _close_to(m / step, 1, step, abs(offset)) else d
        d, m = divmod(high_end - best, step)
        high = d if _close_to(m / step, 0, step, abs(offset)) else d + 1
        ticks = [(low + k) * step + best for k in range(int(high - low) + 1)]
        if sum(low_end <= t <= high_end for t in ticks) >= 2:
            break
    return [t + offset for t in ticks]


def tick_texts(locs: Sequence[float], vmin: float, vmax: float, *, percent: bool = False) -> list[str]:
    """The texts of ``locs``: matplotlib's ``PercentFormatter(xmax=1, decimals=0)`` when
    ``percent``, else its ``ScalarFormatter`` without offset or scientific notation (which these
    figures' ranges never need: for them the default formatter writes the same texts)."""
    if percent:
        return [f"{100.0 * x:0.0f}%" for x in locs]
    values = [*locs, vmin, vmax] if len(locs) < 2 else list(locs)
    loc_range = max(values) - min(values) if values else 0.0
    if loc_range == 0:
        loc_range = max((abs(v) for v in values), default=0.0)
    if loc_range == 0:
        loc_range = 1
    oom = math.floor(math.log10(loc_range))
    sigfigs = max(0, 3 - oom)
    thresh = 1e-3 * 10 ** oom
    while sigfigs >= 0:
        scale = 10.0 ** sigfigs
        if max((abs(v - round(v * scale) / scale) for v in locs), default=0.0) < thresh:
            sigfigs -= 1
        else:
            break
    sigfigs += 1
    return [f"%1.{sigfigs}f" % (0 if abs(x) < 1e-8 else x) for x in locs]


def axis_ticks(low: float, high: float, length_pt: float, axis: Literal["x", "y"],
               *, percent: bool = False) -> list[tuple[float, str]]:
    """(value, text) of the ticks inside ``[low, high]`` on an axis ``length_pt`` long: as many as
    matplotlib allows there (one per 3 label heights across, 2 up; at most 9 intervals)."""
    nbins = max(1, min(math.floor(length_pt / (FONT_PT * (3 if axis == "x" else 2))), 9))
    slack = (high - low) * 1e-9
    locs = [v for v in tick_values(low, high, nbins) if low - slack <= v <= high + slack]
    return list(zip(locs, tick_texts(locs, low, high, percent=percent), strict=True))


# ---------------------------------------------------------------------------------------- layout
@dataclasses.dataclass(frozen=True)
class _Axes:
    """One panel's plotting box on the canvas and its data limits."""

    left: float
    top: float
    width: float
    height: float
    xlim: tuple[float, float]
    ylim: tuple[float, float]
    xlog: bool = False
    yflip: bool = False  # bars: category 0 at the top

    @property
    def right(self) -> float:
        return self.left + self.width

    @property
    def bottom(self) -> float:
        return self.top + self.height

    def px(self, x: float) -> float:
        low, high = self.xlim
        if self.xlog:
            x, low, high = math.log2(x), math.log2(low), math.log2(high)
        return self.left + (x - low) / (high - low) * self.width

    def py(self, y: float) -> float:
        low, high = self.ylim
        fraction = (y - low) / (high - low)
        return self.top + (fraction if self.yflip else 1 - fraction) * self.height


def _legend_entries(spec: FigureSpec) -> list[tuple[str, str]]:
    """(label, colour) per precision, in the order the panels first show them."""
    entries: dict[str, str] = {}
    for panel in spec.panels:
        for series in panel.series:
            if spec.kind != "scatter" or any(x is not None and v is not None
                                             for x, v in zip(series.x, series.values, strict=True)):
                entries.setdefault(series.label, series.color)
    return list(entries.items())


def _value_max(spec: FigureSpec) -> float:
    values = [v for p in spec.panels for s in p.series for v in (*s.values, *s.high) if v is not None]
    return max([*values, spec.reference or 0.0, *(value for value, _ in spec.references), 1.0])


def _padded(low: float, high: float, *, log: bool = False) -> tuple[float, float]:
    """matplotlib's autoscaling: a degenerate range widened, then 5% margins (in log space for a
    log axis)."""
    if log:
        a, b = math.log2(low), math.log2(high)
        if a == b:
            a, b = a - 1, b + 1
        margin = (b - a) * 0.05
        return 2 ** (a - margin), 2 ** (b + margin)
    low, high = _nonsingular(low, high, 0.05, 1e-15)
    margin = (high - low) * 0.05
    return low - margin, high + margin


def layout(spec: FigureSpec, ink: str, *, width_in: float = WIDTH_IN) -> Scene:
    """The scene of ``spec`` with text, axes and reference lines in ``ink`` (a CSS colour:
    ``currentColor`` for an SVG that follows the page), ``width_in`` inches wide."""
    width = width_in * 72
    title = wrap(spec.title, TITLE_PT, width - 2 * _PAD) if spec.title else []
    title_pt = len(title) * TITLE_PT * 1.3 + 2 if title else 0.0
    entries = _legend_entries(spec)
    legend_pt = math.ceil(len(entries) / _LEGEND_COLUMNS) * FONT_PT * 1.7 + 2 if entries else 0.0
    bars = spec.kind == "bars"
    # A category label takes at most 45% of the width; a longer one wraps onto more lines.
    categories = [_category_labels(p, spec, width * _LABEL_SHARE) for p in spec.panels] if bars else []
    axes_pt = [(_rows_pt(p, categories[number]) if bars else _SWEEP_AXES_PT) for number, p in enumerate(spec.panels)]
    zero_width = text_width("0.00", FONT_PT)
    if bars:
        left = _PAD + _TICK + max((text_width(line, FONT_PT, bold=label.bold)
                                   for labels in categories for label in labels for line in label.lines), default=0.0)
        right = _PAD + zero_width / 2  # a tick label centred on the axes' end
    elif spec.kind == "scatter":
        left = _PAD + _LINE + _TICK + zero_width
        right = _PAD + text_width("00.0", FONT_PT) / 2
    else:
        rightmost = spec.panels[0].categories[-1] if spec.panels[0].categories else ""
        left = _PAD + _LINE + _TICK + zero_width
        right = _PAD + text_width(rightmost, FONT_PT) / 2
    # A panel's title starts over its plot and wraps at the figure's right edge, its note in
    # brackets on a line of its own first ("Pre-quantized (FP8 Delayed: same as FP8 Current)" is
    # longer than a phone's plot).
    heads = [_title_lines(p.title, width - left - _PAD) for p in spec.panels]
    head_pt = [(_LINE + 6 + (len(lines) - 1) * _line_pitch(FONT_PT) if lines else 0.0) for lines in heads]
    # The value axis' label of a sweep or scatter, turned, centred on the last panel: wrapped
    # when longer than that panel and the free space beside it (the legend's band, the margin below).
    ylabel: list[str] = []
    if not bars and spec.value_label:
        above = legend_pt if (entries and len(spec.panels) == 1) else head_pt[-1]
        free = axes_pt[-1] + 2 * min(above, _LINE * 2 + _TICK)
        ylabel = [spec.value_label] if text_width(spec.value_label, FONT_PT) <= free \
            else wrap(spec.value_label, FONT_PT, axes_pt[-1], balanced=True)
        left += (len(ylabel) - 1) * _line_pitch(FONT_PT)
    # The value axis' label (bars) or the category axis' (sweep, scatter) under the last panel:
    # right-aligned for bars (a long label then extends over the category labels), else centred.
    xlabel_text = spec.value_label if bars else spec.category_label
    xlabel_anchor: Anchor = "end" if bars else "middle"
    middle = left + (width - left - right) / 2
    room = width - right - _PAD if bars else 2 * min(middle - _PAD, width - _PAD - middle)
    xlabel = wrap(xlabel_text, FONT_PT, room) if xlabel_text else []
    bottom_pt = _PAD + _LINE * (1 + max(len(xlabel), 1)) + _TICK
    height = _PAD + title_pt + legend_pt + sum(axes_pt) + sum(head_pt) + _PANEL_GAP * (len(spec.panels) - 1) \
        + bottom_pt

    items: list[Item] = []
    texts: list[Text] = []
    top = _PAD + title_pt + legend_pt
    value_max = _value_max(spec)
    boxes: list[_Axes] = []
    for number, (panel, panel_pt, head) in enumerate(zip(spec.panels, axes_pt, head_pt, strict=True)):
        top += head
        last = number == len(spec.panels) - 1
        plot_width = width - left - right
        if bars:
            box = _Axes(left, top, plot_width, panel_pt, (0.0, value_max * 1.2),
                        (-0.5, len(panel.categories) - 0.5), yflip=True)
            _bars(items, texts, box, spec, panel, categories[number], ink, value_max, number, labels=last)
        elif spec.kind == "scatter":
            box = _scatter(items, texts, left, top, plot_width, panel_pt, spec, panel, ink, labels=last)
        else:
            box = _sweep(items, texts, left, top, plot_width, panel_pt, spec, panel, ink, labels=last)
        items += _spines(box, ink)
        lines = heads[number]
        texts += [Text(box.left, box.top - _TITLE_PAD - (len(lines) - 1 - i) * _line_pitch(FONT_PT), line, FONT_PT,
                       ink) for i, line in enumerate(lines)]
        boxes.append(box)
        top += panel_pt + _PANEL_GAP
    final = boxes[-1]
    if xlabel:
        x = final.right if bars else final.left + final.width / 2
        texts += _block(x, final.bottom + _TICK + _LINE + 2, xlabel, FONT_PT, ink, xlabel_anchor)
    if ylabel:
        # Turned a quarter: the block's right edge (its last line's descent) ends beside the tick labels.
        edge = final.left - (_TICK + zero_width + 2)
        pitch = _line_pitch(FONT_PT)
        for i, line in enumerate(ylabel):
            x = edge - DESCENT * FONT_PT - (len(ylabel) - 1 - i) * pitch
            texts.append(Text(x, final.top + final.height / 2, line, FONT_PT, ink, "middle", rotation=90))
    if title:
        texts += _block(_PAD, _PAD, title, TITLE_PT, ink, "start")
    if entries:
        items_, texts_ = _legend(entries, spec.kind, width, _PAD / 2 + title_pt, ink)
        items += items_
        texts += texts_
    if spec.note:
        first = boxes[0]
        texts.append(Text(first.left + first.width / 2, first.top + first.height / 2, spec.note, FONT_PT, ink,
                          "middle"))
    return Scene(round(width, 2), round(height, 2), (*items, *texts))


def _spines(box: _Axes, ink: str) -> list[Item]:
    """The left and bottom edges of the plot (the other two are not drawn)."""
    return [Polyline(((box.left, box.bottom), (box.left, box.top)), ink, 0.8, alpha=SPINE_ALPHA, cap="square"),
            Polyline(((box.left, box.bottom), (box.right, box.bottom)), ink, 0.8, alpha=SPINE_ALPHA, cap="square")]


def _grid(box: _Axes, axis: Literal["x", "y"], ticks: Sequence[tuple[float, str]], ink: str) -> list[Item]:
    if axis == "x":
        return [Polyline(((box.px(v), box.bottom), (box.px(v), box.top)), ink, 0.6, alpha=GRID_ALPHA)
                for v, _ in ticks]
    return [Polyline(((box.left, box.py(v)), (box.right, box.py(v))), ink, 0.6, alpha=GRID_ALPHA) for v, _ in ticks]


def _labels_below(box: _Axes, positions: Sequence[float], labels: Sequence[str], ink: str) -> list[Text]:
    """Texts centred under x positions (data coordinates), where tick labels would be."""
    baseline = _first_baseline(box.bottom + _TICK, FONT_PT, 1)
    return [Text(box.px(x), baseline, label, FONT_PT, ink, "middle")
            for x, label in zip(positions, labels, strict=True)]


def _labels_beside(box: _Axes, ticks: Sequence[tuple[float, str]], ink: str) -> list[Text]:
    return [Text(box.left - _TICK, _center_baseline(box.py(v), FONT_PT), text, FONT_PT, ink, "end")
            for v, text in ticks]


def _reference(box: _Axes, value: float, ink: str, dash: tuple[float, ...], *, vertical: bool) -> Polyline:
    if vertical:
        return Polyline(((box.px(value), box.bottom), (box.px(value), box.top)), ink, _REFERENCE_STROKE, dash)
    return Polyline(((box.left, box.py(value)), (box.right, box.py(value))), ink, _REFERENCE_STROKE, dash)


def _bars(items: list[Item], texts: list[Text], box: _Axes, spec: FigureSpec, panel: Panel,
          categories: Sequence[_Label], ink: str, value_max: float, number: int, *, labels: bool) -> None:
    """Grid, bars, whiskers, value labels, missing-value markers, reference lines and category
    labels of one panel.

    Each category label's lines sit in one group ``ytick_<panel>_<row>`` (the id matplotlib gave
    category ticks), where checks reading the SVG (tests/test_site_claims.py) find them, centred
    on the row's bars. A value label that would lie across a reference line starts just right of
    it. A missing value (None) gets a hollow marker in its series' colour at the axis and a short
    text (``n/a``, ``failed``), both with the reason (:attr:`Series.missing`) as their tooltip.
    """
    ticks = axis_ticks(*box.xlim, box.width, "x", percent=spec.value_format.endswith("%}"))
    items += _grid(box, "x", ticks, ink)
    n = max(len(panel.series), 1)
    # A category's row is taller than its bars' slots when its label needs more lines: the bars
    # keep their size, centred in the row.
    stretch = _category_pt(panel, categories) / (n * _BAR_PT / 0.8)
    slot = 0.8 / n / stretch
    half = slot * 0.9 / 2
    references = sorted(box.px(v) for v in (*([] if spec.reference is None else [spec.reference]),
                                             *(value for value, _ in spec.references)))
    whiskers: list[Item] = []
    markers: list[Item] = []
    for j, series in enumerate(panel.series):
        for i, value in enumerate(series.values):
            y = i + (j - (n - 1) / 2) * slot
            if value is None:
                reason = series.missing_reason(i)
                mark = missing_mark(reason)
                markers.append(Circle(box.left + 2 + _MISSING_R, box.py(y), _MISSING_R, "none", stroke=series.color,
                                      stroke_width=1.0, title=reason))
                x = _off_lines(box.left + 4 + 2 * _MISSING_R, text_width(mark, SMALL_PT), references)
                texts.append(Text(x, _center(box.py(y), SMALL_PT), mark, SMALL_PT, ink, title=reason))
                continue
            top, bottom = box.py(y - half), box.py(y + half)
            items.append(Rect(box.left, top, box.px(value) - box.left, bottom - top, series.color))
            low, high = series.low[i], series.high[i]
            end = value
            if low is not None and high is not None:
                whiskers.append(Polyline(((box.px(low), box.py(y)), (box.px(high), box.py(y))), ink, 0.9))
                end = max(end, high)
            text = spec.value_format.format(value) + (f" {series.mark(i)}" if series.mark(i) else "")
            x = _off_lines(box.px(end + value_max * 0.015), text_width(text, SMALL_PT), references)
            texts.append(Text(x, _center(box.py(y), SMALL_PT), text, SMALL_PT, ink))
    items += whiskers
    items += markers
    if spec.reference is not None:
        items.append(_reference(box, spec.reference, ink, _DASHED, vertical=True))
    for value, _ in spec.references:  # named in the value axis' label (see tflops_spec)
        items.append(_reference(box, value, ink, _DOTTED, vertical=True))
    pitch = _line_pitch(FONT_PT)
    for i, label in enumerate(categories):
        first = _center_baseline(box.py(i), FONT_PT) - (len(label.lines) - 1) / 2 * pitch
        for k, line in enumerate(label.lines):
            texts.append(Text(box.left - _TICK, first + k * pitch, line, FONT_PT, ink, "end", bold=label.bold,
                              group=f"ytick_{number}_{i}", title=label.title if k == 0 else ""))
    if labels:
        texts += _labels_below(box, [v for v, _ in ticks], [t for _, t in ticks], ink)


def _off_lines(x: float, width: float, lines: Sequence[float]) -> float:
    """Where a text ``width`` points wide that would start at ``x`` starts so that no vertical line
    at ``lines`` (ascending, in points) crosses it (its stroke included): just right of a line it
    would lie across."""
    for line in lines:
        if x - _REFERENCE_STROKE / 2 < line < x + width + _REFERENCE_STROKE / 2:
            x = line + _REFERENCE_GAP
    return x


def _sweep(items: list[Item], texts: list[Text], left: float, top: float, width: float, height: float,
           spec: FigureSpec, panel: Panel, ink: str, *, labels: bool) -> _Axes:
    """One line with markers per series against size (log 2), whiskers, reference, labels."""
    n = len(panel.series)
    # Dodge each series a little along the log axis so that whiskers at one size do not overlap.
    dodged = [[x * 2 ** ((j - (n - 1) / 2) * 0.05) for x in panel.x] for j in range(n)]
    xs = [x for j, s in enumerate(panel.series) for x, v in zip(dodged[j], s.values, strict=True) if v is not None]
    ys = [v for s in panel.series for v in s.values if v is not None]
    for j, series in enumerate(panel.series):
        for x, low, high in zip(dodged[j], series.low, series.high, strict=True):
            if low is not None and high is not None:
                xs.append(x)
                ys += [low, high]
    if spec.reference is not None:
        ys.append(spec.reference)
    log = bool(panel.x) and all(x > 0 for x in panel.x)
    if xs:
        xlim = _padded(min(xs), max(xs), log=log)
    elif panel.x:
        xlim = _padded(min(panel.x), max(panel.x), log=log)
    else:
        xlim = (0.0, 1.0)
    ylim = _padded(min(ys), max(ys)) if ys else (0.0, 1.0)
    if not panel.series:  # nothing drawn: an axis from 0 that shows the reference line
        ylim = (0.0, max(ys, default=1.0) * 1.05)
    box = _Axes(left, top, width, height, xlim, ylim, xlog=log)
    ticks = axis_ticks(*ylim, height, "y")
    items += _grid(box, "y", ticks, ink)
    whiskers: list[Item] = []
    for j, series in enumerate(panel.series):
        points = [(box.px(x), box.py(v)) for x, v in zip(dodged[j], series.values, strict=True) if v is not None]
        if len(points) > 1:
            items.append(Polyline(tuple(points), series.color, _LINE_WIDTH, cap="square"))
        items += [Circle(x, y, _SWEEP_MARKER_R, series.color) for x, y in points]
        for x, low, high in zip(dodged[j], series.low, series.high, strict=True):
            if low is not None and high is not None:
                whiskers.append(Polyline(((box.px(x), box.py(low)), (box.px(x), box.py(high))), series.color, 1.2))
    items += whiskers
    if spec.reference is not None:
        items.append(_reference(box, spec.reference, ink, _DASHED, vertical=False))
    texts += _labels_beside(box, ticks, ink)
    if labels:
        texts += _labels_below(box, panel.x, panel.categories, ink)
    return box


def _scatter(items: list[Item], texts: list[Text], left: float, top: float, width: float, height: float,
             spec: FigureSpec, panel: Panel, ink: str, *, labels: bool) -> _Axes:
    """One marker per (series, value) at (x, value), labelled with the series' name."""
    points = [(x, y, s) for s in panel.series for x, y in zip(s.x, s.values, strict=True)
              if x is not None and y is not None]
    xs = [x for x, _, _ in points]
    ys = [y for _, y, _ in points] + ([spec.reference] if spec.reference is not None else [])
    if xs:
        span = max(max(xs) - min(xs), 1.0)
        xlim = (min(xs) - 0.1 * span, max(xs) + 0.35 * span)  # room for the labels on the right
        low, high = min(ys), max(ys)
        pad = max(high - low, 0.1) * 0.15
        ylim = (max(low - pad, 0.0), high + pad)
    else:
        xlim, ylim = (0.0, 1.0), (0.0, max(ys, default=1.0) * 1.05)
    box = _Axes(left, top, width, height, xlim, ylim)
    yticks = axis_ticks(*ylim, height, "y")
    xticks = axis_ticks(*xlim, width, "x")
    items += _grid(box, "y", yticks, ink) + _grid(box, "x", xticks, ink)
    for x, y, series in points:
        items.append(Circle(box.px(x), box.py(y), _SCATTER_MARKER_R, series.color))
        texts.append(Text(box.px(x) + 5, box.py(y) - 3, series.label, SMALL_PT, ink))
    if spec.reference is not None:
        items.append(_reference(box, spec.reference, ink, _DASHED, vertical=False))
    texts += _labels_beside(box, yticks, ink)
    if labels:
        texts += _labels_below(box, [v for v, _ in xticks], [t for _, t in xticks], ink)
    return box


def _legend(entries: Sequence[tuple[str, str]], kind: str, width: float, top: float,
            ink: str) -> tuple[list[Item], list[Text]]:
    """One entry per precision in up to three columns, filled row by row, centred, its top at ``top``
    (2 pt under the canvas' top, or under the title)."""
    size = FONT_PT
    handle, handle_pad = _HANDLE_EM * size, _HANDLE_PAD_EM * size
    columns = min(len(entries), _LEGEND_COLUMNS)
    column_width = [max(handle + handle_pad + text_width(label, size) for label, _ in entries[c::columns])
                    for c in range(columns)]
    total = sum(column_width) + _COLUMN_GAP_EM * size * (columns - 1)
    row_pitch = (ASCENT + DESCENT + _ROW_GAP_EM) * size
    items: list[Item] = []
    texts: list[Text] = []
    for k, (label, color) in enumerate(entries):
        row, column = divmod(k, columns)
        x = (width - total) / 2 + sum(column_width[:column]) + _COLUMN_GAP_EM * size * column
        baseline = top + row * row_pitch + ASCENT * size
        handle_height = _HANDLE_HEIGHT_EM * size
        if kind == "bars":
            items.append(Rect(x, baseline - handle_height, handle, handle_height, color))
        else:
            middle = baseline - handle_height / 2
            if kind == "sweep":
                items.append(Polyline(((x, middle), (x + handle, middle)), color, _LINE_WIDTH, cap="square"))
            items.append(Circle(x + handle / 2, middle, _SWEEP_MARKER_R if kind == "sweep" else _SCATTER_MARKER_R,
                                color))
        texts.append(Text(x + handle + handle_pad, baseline, label, size, ink))
    return items, texts
