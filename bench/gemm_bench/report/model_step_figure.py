"""The model's step per recipe, drawn: tokens per second per GPU (at the question's G and at
G = 1) beside the peak memory of one rank's step, stacked by what it is made of, against the GPU's
memory.

Why: the answer a reader plans with is two numbers per recipe, throughput and memory, and what G
does to the first. Both panels come from one :class:`~gemm_bench.report.model_step.ModelStep` (one
result, one run). Labels are measured, never cut: the label column is as wide as the longest recipe
name, values sit beside their bars, legends wrap to the width; drawn at the site's phone width and
at its desktop width (:func:`svg`'s ``width``), as :mod:`gemm_bench.report.breakdown_figure` is.
Pure: no matplotlib.
"""

from __future__ import annotations

from gemm_bench.question.precisions import PRECISIONS
from gemm_bench.question.vocabulary import MODEL_STEP
from gemm_bench.report.breakdown_figure import BAR_PT, FONT_PT, GAP_PT, INK, PAD_PT, WIDE_PT, WIDTH_PT
from gemm_bench.report.breakdown_figure import legend as _legend
from gemm_bench.report.breakdown_figure import title as _title
from gemm_bench.report.figure_layout import Polyline, Rect, Scene, Text, text_width
from gemm_bench.report.figure_svg import to_svg
from gemm_bench.report.figures import _PAGE_ROOT_ATTRS, _PAGE_STYLE
from gemm_bench.report.model_step import GIB, ModelStep

__all__ = ["MEMORY_PARTS", "WIDE_PT", "WIDTH_PT", "scene", "svg"]

#: The memory breakdown's parts (``MemoryBreakdown`` fields), their names and colours (Okabe-Ito
#: mid-tones that read on white and near-black, as the step breakdown's).
MEMORY_PARTS: tuple[tuple[str, str, str], ...] = (
    ("weights", "Weights", "#0072B2"), ("fp8_weights", "FP8 weight copies", "#D55E00"),
    ("activations", "Activations", "#009E73"), ("gradients", "Gradients", "#E69F00"),
    ("optimizer_state", "Optimizer state", "#CC79A7"), ("transient", "Transient", "#999999"))
#: The question's G and G = 1.
G_COLORS = ("#0072B2", "#56B4E9")
THIN_PT = BAR_PT * 0.6


def scene(summary: ModelStep, device: str, width: float = WIDTH_PT) -> Scene:
    """Two panels, one recipe per row in registry order (BF16 first): tokens/s per GPU at the
    question's G and at G = 1 (with the composed spread of each as a whisker), then the peak memory
    of one rank's step by part, with the GPU's memory marked."""
    recipes = [p for p in PRECISIONS if summary.row(p) is not None or p in summary.memory]
    if not recipes:
        raise ValueError("no recipe with a model step to draw")
    labels = {p: PRECISIONS[p].display for p in recipes}
    label_w = max(text_width(t, FONT_PT) for t in labels.values()) + 2 * PAD_PT  # a margin at the left too
    g_values = sorted(summary.rows, reverse=True)  # the question's G first, then 1
    tokens = {(p, g): r for g in g_values for p in recipes if (r := summary.row(p, g)) is not None}
    value_texts = [f"{r.tokens_per_s:,.0f}" for r in tokens.values()]
    memory_texts = [f"{m.peak / GIB:.1f} GiB" for m in summary.memory.values()]
    value_w = max(text_width(t, FONT_PT) for t in [*value_texts, *memory_texts, "0"]) + PAD_PT
    plot_w = width - label_w - value_w - PAD_PT
    if plot_w < 60:
        raise ValueError(f"{width} pt is too narrow for labels of {label_w:.0f} pt")
    items: list[Rect | Text | Polyline] = []
    y = 0.0
    # -------------------------------------------------------------- tokens per second
    title, y = _title(f"Tokens per second per GPU, {MODEL_STEP} on the {device}", y, width)
    items += title
    legend, y = _legend([(f"G = {g}" + (" (the question's)" if g == summary.microbatches and len(g_values) > 1
                                        else ""), G_COLORS[i % 2]) for i, g in enumerate(g_values)], y, width)
    items += legend
    y += GAP_PT / 2
    if tokens:
        scale = plot_w / max(max(r.tokens_per_s * r.ms_per_microbatch / r.ms_low, r.tokens_per_s)
                             for r in tokens.values())
        for p in recipes:
            rows = [(i, tokens[(p, g)]) for i, g in enumerate(g_values) if (p, g) in tokens]
            height = BAR_PT + THIN_PT * (len(rows) - 1) + 2 * (len(rows) - 1)
            items.append(Text(label_w - PAD_PT, y + BAR_PT * 0.7, labels[p], FONT_PT, INK, anchor="end"))
            if not rows:
                items.append(Text(label_w, y + BAR_PT * 0.7, "not measured", FONT_PT, INK))
            bar_y = y
            for i, r in rows:
                h = BAR_PT if i == 0 else THIN_PT
                w = r.tokens_per_s * scale
                items.append(Rect(label_w, bar_y, w, h, G_COLORS[i % 2]))
                low, high = (r.tokens_per_s * r.ms_per_microbatch / r.ms_high * scale,
                             r.tokens_per_s * r.ms_per_microbatch / r.ms_low * scale)
                if high - low >= 1:  # a whisker one can see: the composed spread
                    items.append(Polyline(((label_w + low, bar_y + h / 2), (label_w + high, bar_y + h / 2)), INK, 0.8))
                end = max(w, high)
                items.append(Text(label_w + end + PAD_PT / 2, bar_y + h * 0.5 + FONT_PT * 0.35,
                                  f"{r.tokens_per_s:,.0f}", FONT_PT, INK))
                bar_y += h + 2
            y += max(height, BAR_PT) + GAP_PT
    # ------------------------------------------------------------------- memory
    y += GAP_PT
    capacity = summary.capacity_bytes / GIB
    title, y = _title(f"Peak memory of {MODEL_STEP} (one rank), GiB (the {device} run could allocate "
                      f"{capacity:.1f})", y, width)
    items += title
    legend, y = _legend([(name, color) for field, name, color in MEMORY_PARTS
                         if any(getattr(m, field) for m in summary.memory.values())], y, width)
    items += legend
    y += GAP_PT / 2
    top = y
    peaks = [m.peak / GIB for m in summary.memory.values()]
    scale = plot_w / max([*peaks, capacity, 1e-9])
    for p in recipes:
        m = summary.memory.get(p)
        items.append(Text(label_w - PAD_PT, y + BAR_PT * 0.7, labels[p], FONT_PT, INK, anchor="end"))
        if m is None:
            items.append(Text(label_w, y + BAR_PT * 0.7, "not measured", FONT_PT, INK))
        else:
            x = label_w
            for field, _, color in MEMORY_PARTS:
                w = getattr(m, field) / GIB * scale
                if w > 0:
                    items.append(Rect(x, y, w, BAR_PT, color))
                    x += w
            items.append(Text(x + PAD_PT / 2, y + BAR_PT * 0.7, f"{m.peak / GIB:.1f} GiB", FONT_PT, INK))
        y += BAR_PT + GAP_PT
    cap_x = label_w + capacity * scale
    items.append(Polyline(((cap_x, top - GAP_PT / 2), (cap_x, y - GAP_PT / 2)), INK, 1.0, dash=(3.0, 2.0)))
    mark = f"{device}: {capacity:.1f}"
    at_right = cap_x + text_width(mark, FONT_PT) + PAD_PT > width  # the label ends at the line
    items.append(Text(cap_x + (-PAD_PT / 2 if at_right else PAD_PT / 2), y + FONT_PT * 0.4, mark,
                      FONT_PT, INK, anchor="end" if at_right else "start"))
    y += FONT_PT * 1.2
    return Scene(width, y + PAD_PT, tuple(items))


def svg(summary: ModelStep, device: str, width: float = WIDTH_PT) -> str:
    """The figure as SVG whose ink follows the page (light and dark)."""
    return to_svg(scene(summary, device, width), page_style=_PAGE_STYLE, root_attrs=_PAGE_ROOT_ATTRS).decode("utf-8")
