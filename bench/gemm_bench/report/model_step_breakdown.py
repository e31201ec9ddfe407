"""Where the model's step goes (issue 33): per recipe, the composed step per micro-batch split
into the kinds of kernel and idle time, from its measured parts' breakdowns.

Why: the layer step's bars say where one layer's time goes; a reader trains a model, whose step also
holds the embedding, the output layer and loss, and the optimizer, none of which a recipe speeds up,
and at G micro-batches per optimizer step the layers run on weights quantized once. Where the
model's step loses or gains is the question the answer's recipe is chosen on
(:mod:`gemm_bench.report.fastest`), so its bars are drawn from the same numbers.

How, exactly: each measured part stores its own breakdown
(:func:`gemm_bench.results.breakdown.breakdown_block`, whose parts add up to that part's time). The
model step is composed by :func:`gemm_bench.question.model_step.step_ms`::

    step(G) = G (embedding + head) + L (first + (G - 1) cached) + optimizer(rank's parameters)

a sum with positive weights, so the same sum over each kind of kernel gives parts that add up to the
composed step. The optimizer's time is the line through its two measured sizes
(:class:`~gemm_bench.question.model_step.OptimizerLine`), evaluated at the rank's parameter count; its
parts are that time in the proportions of the larger measured size (the line extrapolated per kind
could turn a small kind negative far beyond the sizes measured). The bars are per micro-batch (the
step over G), the unit of the model step's table.

Pure: reads a checked result's typed model step (:class:`~gemm_bench.results.typed.ModelStepBlock`: a part
the door refused is failed there, and a part's breakdown that did not add up was dropped, so neither is
drawn) and the report's composed rows.
"""

from __future__ import annotations

from collections.abc import Mapping

from gemm_bench.question.precisions import PRECISIONS
from gemm_bench.report.breakdown_figure import Bar
from gemm_bench.report.model_step import ModelStep, optimizer_line
from gemm_bench.results.breakdown import ADDS_UP_WITHIN, model_step_parts
from gemm_bench.results.kernel_kinds import PARTS
from gemm_bench.results.typed import Breakdown, ModelStepBlock, ModelStepPart

#: How the model step's breakdown is composed (the page's methodology says it; the report prints it).
COMPOSED_RULE = ("each part's kernels classified as the layer step's are; composed as the step is: G x (embedding + "
                 "head) + L x (first micro-batch's layer + (G - 1) x cached layer) + the optimizer's time at the "
                 "rank's parameters in the proportions of its larger measured size; divided by G")


def _parts(item: ModelStepPart | None) -> Mapping[str, float] | None:
    return item.breakdown.parts_ms if item is not None and item.breakdown is not None else None


def _optimizer_breakdown(block: ModelStepBlock) -> Breakdown | None:
    """The breakdown block of the larger measured optimizer size, or None without one."""
    sized = sorted((i for i in block.parts if i.part == "optimizer" and i.measured and i.params is not None),
                   key=lambda i: i.params or 0)
    return sized[-1].breakdown if sized else None


def model_bars(block: ModelStepBlock | None, summary: ModelStep, microbatches: int | None = None) -> list[Bar]:
    """One bar per recipe whose every part has a breakdown (BF16 first, registry order): the model
    step per micro-batch at G = ``microbatches`` (default: the question's) split into kinds of work.
    ``block``: the result's typed model step (``result.model_step``). [] without one, or when its parts
    carry no breakdown (measured before the model step's breakdown was)."""
    if block is None:
        return []
    g = summary.microbatches if microbatches is None else microbatches
    layers = summary.config.measured_layers
    embedding, head = _parts(block.part("embedding")), _parts(block.part("head"))
    optimizer = _optimizer_breakdown(block)
    if embedding is None or head is None or optimizer is None:
        return []
    line = optimizer_line(block)
    if line is None:
        return []
    opt_ms = line.at(summary.rank_params)  # as the rows compose it (composed_rows)
    out = []
    for precision in PRECISIONS:
        row = summary.row(precision, g)
        first = _parts(block.part("layer-first", precision))
        cached = _parts(block.part("layer-cached", precision))
        if row is None or first is None or cached is None:
            continue
        step = model_step_parts(embedding, head, first, cached, optimizer.as_mapping(), layers=layers, microbatches=g,
                                optimizer_ms=opt_ms)
        parts = {p: ms / g for p, ms in step.items()}
        out.append(Bar(precision, row.ms_per_microbatch, parts, per=f"per micro-batch at G = {g}"))
    return out


def _total(parts: Mapping[str, float]) -> float:
    return float(sum(parts[p] for p in PARTS))


def adds_up(bar: Bar, within: float = ADDS_UP_WITHIN) -> str | None:
    """None when the bar's parts add up to its step within ``within``; else what is wrong (a part's
    stored breakdown that does not add up to its time carries into the composition)."""
    total = _total(bar.parts)
    if abs(total - bar.step_ms) > within * bar.step_ms:
        return (f"{PRECISIONS[bar.precision].display}: the model step's parts add up to {total:.3f} ms, "
                f"not its {bar.step_ms:.3f} ms per micro-batch")
    return None
