"""The values ``:gemm-breakdown:`` and ``:gemm-model-breakdown:`` quote, from one set of bars.

Why one module: the layer step's bars (:func:`gemm_bench.report.breakdown_figure.bars`) and the model
step's (:func:`gemm_bench.report.model_step_breakdown.model_bars`) are the same kind of thing, each
drawn with the sentence :func:`~gemm_bench.report.breakdown_figure.largest_change` says beside it; a
role quoting either must say what the page's sentence says, so both record their values here, with
the same words (:func:`~gemm_bench.report.breakdown_figure.changes`). Below :mod:`.values` and
:mod:`.model_step_values`, which both call it; it imports neither.
"""

from __future__ import annotations

from collections.abc import Sequence

from gemm_bench.question.precisions import BASELINE
from gemm_bench.report import breakdown_figure
from gemm_bench.report.breakdown_figure import Bar
from gemm_bench.results.kernel_kinds import PARTS
from gemm_benchmark.records import Value, value_key

#: A result measured before the breakdown, the plan and the energy were part of the method.
NOT_IN_RESULT = "not measured in this result (the next refresh measures it)"
#: What the breakdown roles quote (their last word; the first is the default).
BREAKDOWN_ITEMS: tuple[str, ...] = ("change", "more", "less", *PARTS)


def breakdown_values(out: dict[str, Value], kind: str, mode: str, bars: Sequence[Bar], precision: str, at: str,
                     absent: str) -> None:
    """Record ``kind``'s every item for ``precision`` (a part's ms, the sentence, the part that grew /
    shrank most); ``absent``: the reason when the bars lack this precision or BF16 ("not measured in
    this result ..."); ``at``: what the hover names (recipe, step, GPU)."""
    found = {b.precision: b for b in bars}
    mine, base = found.get(precision), found.get(BASELINE)
    unit = "micro-batch" if kind == "gemm-model-breakdown" else "step"
    for part in PARTS:
        out[value_key(kind, mode, precision, part)] = (
            Value(f"{mine.parts[part]:.2f} ms", f"{mine.parts[part]:.4g} ms of a {mine.step_ms:.4g} ms {unit}: {at}")
            if mine is not None else Value("", f"{at}: breakdown {absent}"))
    # The sentence, and the parts that grew and shrank most (``more``, ``less``): one computation
    # (breakdown_figure.changes), so the figure's sentence and the prose that quotes a part agree.
    why = ("BF16 is the reference" if precision == BASELINE else
           f"breakdown {absent}" if mine is None or base is None else "")
    said, grew, shrank = None, None, None
    if mine is not None and base is not None and not why:
        said, (grew, shrank) = breakdown_figure.largest_change(base, mine), breakdown_figure.changes(base, mine)
    out[value_key(kind, mode, precision, "change")] = (
        Value(said, f"the largest change against BF16's {unit}: {at}") if said
        else Value("", f"{at}: {why or 'no part moved by 0.01 ms'}"))
    for item, moved in (("more", grew), ("less", shrank)):
        out[value_key(kind, mode, precision, item)] = (
            Value(moved.words(), f"{moved.words()} than BF16's {unit}: {at}") if moved is not None
            else Value("", f"{at}: {why or f'no part is {item} than in BF16 by 0.01 ms'}"))
