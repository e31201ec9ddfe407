"""The run a reader launches, as the answer sentence speaks of it (issue 41 item 4, issue 42 item 5).

One result, one layout: per recipe the layout's step with communication in
(:func:`~gemm_bench.report.layout_step.result_layout_steps`, the ``gemm-layout-step`` table's
function) and memory per GPU (:func:`~gemm_bench.report.layout_memory.recipe_memory`, the
``gemm-layout-memory`` table's function), so the sentence and the two tables on a model's page
cannot disagree; and whether communication reverses the recipe the model's step picked
(:func:`reversal`), decided by the site's one significance rule (:func:`~.fastest.clearly_less`).

Pure: reads checked results, typed (:class:`gemm_bench.results.typed.Result`); no words beyond what a
caller needs to say why a part is missing.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping, Sequence

from gemm_bench.question.layout import ParallelLayout
from gemm_bench.question.layout_step import Network
from gemm_bench.question.precisions import BASELINE
from gemm_bench.report.fastest import BF16_POINT, Point, clearly_less
from gemm_bench.report.layout_memory import RecipeMemory, recipe_memory
from gemm_bench.report.layout_step import ResultLayoutSteps, Sweep, result_layout_steps
from gemm_bench.results.typed import Result


@dataclasses.dataclass(frozen=True)
class Run:
    """One result's run on ``layout``: its steps with communication in (None, and ``steps_why`` saying
    why, where none can be composed) and its memory per GPU per recipe (``memory_why`` where none)."""

    layout: ParallelLayout
    steps: ResultLayoutSteps | None
    steps_why: str
    memory: Mapping[str, RecipeMemory]
    memory_why: str | None

    def points(self, precisions: Iterable[str]) -> dict[str, Point]:
        """The speedups over BF16 with communication in, with their composed spreads, of ``precisions``
        that have a step; BF16 at exactly 1 (:data:`~.fastest.BF16_POINT`), as the model step's points."""
        out: dict[str, Point] = {}
        if self.steps is None:
            return out
        for precision in dict.fromkeys(precisions):
            if precision == BASELINE:
                if self.steps.step(BASELINE) is not None:
                    out[BASELINE] = BF16_POINT
                continue
            ratio = self.steps.speedup(precision)
            if ratio is not None:
                out[precision] = Point(*ratio)
        return out


def run_of(result: Result, layout: ParallelLayout, available: Sequence[Sweep], *,
           network: Network = Network()) -> Run:
    """``result``'s run on ``layout``, composed by the functions the ``gemm-layout-step`` and
    ``gemm-layout-memory`` directives call (the result's own model config, as they read it; typed, so a
    part or a memory the door refused is missing, never composed)."""
    config = result.question.config if result.question is not None else None
    steps = result_layout_steps(result, layout, available, network=network, config=config) if config is not None \
        else "this result is not a model's question"
    if config is None:
        memory: list[RecipeMemory] = []
        memory_why: str | None = "this result is not a model's question"
    else:
        memory, memory_why = recipe_memory(result, config, layout)
    return Run(layout, None if isinstance(steps, str) else steps, steps if isinstance(steps, str) else "",
               {m.precision: m for m in memory}, memory_why)


@dataclasses.dataclass(frozen=True)
class Reversal:
    """With communication in, ``faster`` runs faster than ``chosen`` (the model step's pick) beyond both
    measured spreads: the speedups over BF16 of both, communication in."""

    faster: str
    faster_point: Point
    chosen: str
    chosen_point: Point


def reversal(run: Run, chosen: str, precisions: Iterable[str]) -> Reversal | None:
    """Whether communication reverses the pick: the fastest recipe (BF16 included, at 1) that is faster
    than ``chosen`` beyond both spreads with communication in; None where none is, or where ``chosen``
    has no step to compare (nothing can be said)."""
    points = run.points([BASELINE, *precisions])
    mine = points.get(chosen)
    if mine is None:
        return None
    beyond = [p for p, v in points.items() if p != chosen and clearly_less(mine, v)]
    if not beyond:
        return None
    faster = max(beyond, key=lambda p: points[p].value)
    return Reversal(faster, points[faster], chosen, mine)
