"""Where each recipe's step goes, drawn and said: one stacked bar per recipe beside BF16, and the
sentence that names the largest change.

Why: "FP8 Current is slower" becomes "FP8 Current spends 2.1 ms more in quantization than it saves
in GEMMs" only when the parts are side by side. The bars are the stored breakdowns
(:mod:`gemm_bench.results.breakdown`) of the typed step cells of one result
(:class:`~gemm_bench.results.typed.LayerCell`: a breakdown whose parts do not add up to its step was
dropped at the door, so it is never drawn), one group of one run: the parts of different recipes are
compared only within it. Labels are measured, never cut: the label column
is as wide as the longest recipe name, the legend wraps to the width. Pure: no matplotlib.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence

from gemm_bench.question.precisions import BASELINE, PRECISIONS
from gemm_bench.report.figure_layout import Rect, Scene, Text, text_width, wrap
from gemm_bench.report.figure_spec import WIDE_IN, WIDTH_IN
from gemm_bench.report.figure_svg import to_svg
from gemm_bench.report.figures import _PAGE_ROOT_ATTRS, _PAGE_STYLE
from gemm_bench.results.kernel_kinds import DISPLAY, PARTS
from gemm_bench.results.typed import LayerCell, Result

#: One colour per part (Okabe-Ito order, mid-tones that read on white and near-black); idle grey.
PART_COLORS = {"gemm": "#0072B2", "quantization": "#D55E00", "attention": "#009E73", "elementwise": "#E69F00",
               "optimizer": "#CC79A7", "other": "#F0E442", "idle": "#999999"}
#: What the sentence says a part is, after "spends ... ms more".
PART_WORDS = {"gemm": "in GEMMs", "quantization": "in quantization, casts, amax and transposes",
              "attention": "in attention", "elementwise": "in normalization, activations and elementwise work",
              "optimizer": "in the optimizer", "other": "in other kernels", "idle": "with the GPU idle"}
WIDTH_PT = WIDTH_IN * 72  # the site's phone width: drawn wider, a 390 px phone shrank its labels to 7.6 px
#: The desktop twin's width (figure_spec.WIDE_IN), shown where the page's column is wide enough.
WIDE_PT = WIDE_IN * 72
FONT_PT = 8.4
BAR_PT = 14.0
GAP_PT = 7.0
PAD_PT = 6.0
INK = "currentColor"


@dataclasses.dataclass(frozen=True)
class Bar:
    """One recipe's step: its label and its parts in ms (every part of :data:`PARTS`)."""

    precision: str
    step_ms: float
    parts: Mapping[str, float]
    #: What one bar's milliseconds are of, where not one step ("per micro-batch at G = 8": the model's
    #: step, :mod:`gemm_bench.report.model_step_breakdown`); its sentence opens with it.
    per: str = ""

    @property
    def label(self) -> str:
        return PRECISIONS[self.precision].display


def bars(cells: Sequence[LayerCell], mode: str = "layer-graphed", routing: str = "balanced") -> list[Bar]:
    """The bars of one step mode: each measured cell with a breakdown (``result.layer``, typed at the door:
    a failed or refused step, or a breakdown that did not add up, has none), BF16 first, registry order."""
    found = {c.precision: c.breakdown for c in cells if c.mode == mode and c.measured and c.routing == routing
             and c.breakdown is not None}
    return [Bar(p, found[p].step_ms, found[p].parts_ms) for p in PRECISIONS if p in found]


def refused(result: Result, precision: str, mode: str = "layer-graphed", routing: str = "balanced") -> str | None:
    """Why the door dropped the stored breakdown of ``precision``'s step (its violation's words, e.g. "the
    time breakdown parts add up to 13.53 ms for a step of 13.20 ms (+2.5%; bound 2%) ..."), or None. Why:
    a step without a bar is either measured before breakdowns were, or refused; a role says which."""
    paths = {f"$.layer[{i}].breakdown" for i, c in enumerate(result.layer)
             if (c.mode, c.precision, c.routing) == (mode, precision, routing)}
    return next((v.problem for v in result.violations if v.where in paths), None)


#: The smallest move of a part, in ms, that a sentence names (the stored parts keep 6 decimals; the page
#: shows two).
MIN_CHANGE_MS = 0.01


@dataclasses.dataclass(frozen=True)
class Change:
    """One part's move against BF16's step: ``ms`` above 0 when the recipe spends more there."""

    part: str
    ms: float

    def words(self) -> str:
        """``2.10 ms more in quantization, casts, amax and transposes``: a phrase a sentence continues
        with "than BF16" (what ``:gemm-breakdown:`... more``` and ``... less``` quote)."""
        return f"{abs(self.ms):.2f} ms {'more' if self.ms > 0 else 'less'} {PART_WORDS[self.part]}"


def changes(base: Bar, mine: Bar) -> tuple[Change | None, Change | None]:
    """The part that grew most and the part that shrank most against BF16's step, each None where no
    part moved that way by :data:`MIN_CHANGE_MS`: the one computation behind every sentence of a
    step's breakdown (the figure's and the roles')."""
    delta = {p: mine.parts[p] - base.parts[p] for p in PARTS}
    up = max(delta, key=lambda p: delta[p])
    down = min(delta, key=lambda p: delta[p])
    return (Change(up, delta[up]) if delta[up] >= MIN_CHANGE_MS else None,
            Change(down, delta[down]) if delta[down] <= -MIN_CHANGE_MS else None)


def largest_change(base: Bar, mine: Bar) -> str | None:
    """The sentence: the part that grew most and the one that shrank most against BF16 (:func:`changes`),
    and the step's change; None when nothing moved by :data:`MIN_CHANGE_MS`."""
    up, down = changes(base, mine)
    step = mine.step_ms - base.step_ms
    longer = "longer" if step > 0 else "shorter"
    # "Per micro-batch at G = 8, FP8 Delayed spends ...": a model step's bar is not one step's time.
    who = f"{mine.per[:1].upper()}{mine.per[1:]}, {mine.label}" if mine.per else mine.label
    if up is not None and down is not None:
        return (f"{who} spends {up.words()} than BF16 and {down.words()}: "
                f"its step is {abs(step):.2f} ms {longer}.")
    if up is not None:
        return f"{who} spends {up.words()} than BF16 and saves nowhere."
    if down is not None:
        return (f"{who} saves {-down.ms:.2f} ms {PART_WORDS[down.part]} against BF16: "
                f"its step is {abs(step):.2f} ms {longer}.")
    return None


def sentence(all_bars: Sequence[Bar], precision: str) -> str | None:
    """One sentence per model and GPU: where ``precision``'s step gained or lost against BF16's
    (:func:`largest_change`); None without both bars. The caller names the recipe by the rule the
    plan and the answer follow (:func:`gemm_bench.report.precision_plan.step_recipe`), so the
    sentence under the bars never speaks of another recipe than the words around it."""
    found = {b.precision: b for b in all_bars}
    base, mine = found.get(BASELINE), found.get(precision)
    if base is None or mine is None or precision == BASELINE:
        return None
    return largest_change(base, mine)


def legend(items: Sequence[tuple[str, str]], y: float, width: float) -> tuple[list[Rect | Text], float]:
    """Swatch + name for each (name, colour), wrapped to the width; returns the items and the next free y.
    The step breakdown's and the model step's figures share it."""
    out: list[Rect | Text] = []
    x, line_h = PAD_PT, FONT_PT * 1.6
    for name, color in items:
        w = FONT_PT + 3 + text_width(name, FONT_PT) + 2 * PAD_PT
        if x + w > width and x > PAD_PT:
            x, y = PAD_PT, y + line_h
        out.append(Rect(x, y, FONT_PT, FONT_PT, color))
        out.append(Text(x + FONT_PT + 3, y + FONT_PT * 0.85, name, FONT_PT, INK))
        x += w
    return out, y + line_h


def title(text: str, y: float, width: float) -> tuple[list[Text], float]:
    """A figure's (or a panel's) bold title, wrapped to the width (never cut); returns the lines and the
    next free y."""
    out = []
    for line in wrap(text, FONT_PT, width - 2 * PAD_PT, bold=True):
        y += FONT_PT * 1.3
        out.append(Text(PAD_PT, y, line, FONT_PT, INK, bold=True))
    return out, y + GAP_PT


def parts_drawn(all_bars: Sequence[Bar]) -> list[str]:
    """The parts some bar has time in, in :data:`PARTS` order: what the legend lists. A layer step has
    no optimizer, a dense layer's step no "other" kernels: a legend entry without a bar misleads."""
    return [part for part in PARTS if any(b.parts.get(part, 0.0) > 0 for b in all_bars)]


def scene(all_bars: Sequence[Bar], width: float = WIDTH_PT, *, heading: str = "") -> Scene:
    """Stacked horizontal bars, recipe names at the left (full width), totals at the right, under the
    ``heading`` (what step this is, on which GPU: wrapped, never cut) and the legend of the parts the
    bars hold (wrapped to the width), where a reader meets them before the bars, as the site's other
    figures have it. A part keeps its colour (:data:`PART_COLORS`) whichever parts are listed."""
    if not all_bars:
        raise ValueError("no step with a breakdown to draw")
    label_w = max(text_width(b.label, FONT_PT) for b in all_bars) + PAD_PT
    totals = [f"{b.step_ms:.2f} ms" for b in all_bars]
    total_w = max(text_width(t, FONT_PT) for t in totals) + PAD_PT
    plot_w = width - label_w - total_w - PAD_PT
    if plot_w < 60:
        raise ValueError(f"{width} pt is too narrow for labels of {label_w:.0f} pt")
    scale = plot_w / max(max(b.step_ms, sum(b.parts.values())) for b in all_bars)
    items: list[Rect | Text] = []
    y = PAD_PT
    if heading:
        lines, y = title(heading, 0.0, width)
        items += lines
    drawn = parts_drawn(all_bars)
    keys, y = legend([(DISPLAY[part], PART_COLORS[part]) for part in drawn], y, width)
    items += keys
    y += GAP_PT
    for bar, total in zip(all_bars, totals, strict=True):
        items.append(Text(label_w - PAD_PT, y + BAR_PT * 0.7, bar.label, FONT_PT, INK, anchor="end"))
        x = label_w
        for part in drawn:
            w = bar.parts[part] * scale
            if w > 0:
                items.append(Rect(x, y, w, BAR_PT, PART_COLORS[part]))
                x += w
        items.append(Text(x + PAD_PT / 2, y + BAR_PT * 0.7, total, FONT_PT, INK))
        y += BAR_PT + GAP_PT
    return Scene(width, y + PAD_PT, tuple(items))


def svg(all_bars: Sequence[Bar], width: float = WIDTH_PT, *, heading: str = "") -> str:
    """The figure as SVG whose ink follows the page (light and dark)."""
    return to_svg(scene(all_bars, width, heading=heading), page_style=_PAGE_STYLE,
                  root_attrs=_PAGE_ROOT_ATTRS).decode("utf-8")
