"""The one rule for "fastest" and for "clearly different": a speedup vs BF16 with its measured spread
(:class:`Point`), :func:`overlaps`, :func:`clearly_less` and :func:`decide_fastest`.

It lives here, below the site's extension, so the refresh's choice of which recipe a precision plan is
made for (:func:`gemm_bench.report.precision_plan.chosen_recipe`) asks the very rule the answer
sentence asks: the plan, the step's breakdown sentence and the answer then speak of one recipe.
:mod:`gemm_benchmark.values` re-exports these names for the extension.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Iterable, Mapping

from gemm_bench.question.precisions import BASELINE, PRECISIONS
from gemm_bench.report.model_step import ModelStep
from gemm_bench.report.report import Report


def finite(value: float | None) -> bool:
    return value is not None and isinstance(value, (int, float)) and math.isfinite(value) and value > 0


@dataclasses.dataclass(frozen=True)
class Point:
    """A speedup vs BF16 and its measured spread (``low``/``high`` None when unknown)."""

    value: float
    low: float | None = None
    high: float | None = None


#: BF16's speedup vs itself: exactly 1, no spread of its own (see :func:`decide_fastest`).
BF16_POINT = Point(1.0, 1.0, 1.0)


def overlaps(a: Point, b: Point) -> bool:
    """Whether two speedups' spreads overlap: their difference is not significant.

    The one significance rule of the site: the ★ and ≈, ``:gains-less:``, the prose check and the
    answer sentence all ask this. Unknown spreads (a result without quartiles) do not overlap: the
    bare values then decide, as they did before spreads were stored."""
    if a.low is None or a.high is None or b.low is None or b.high is None:
        return False
    return a.high >= b.low and b.high >= a.low


def clearly_less(a: Point, b: Point) -> bool:
    """``a`` is below ``b`` beyond both measured spreads (the same rule as :func:`overlaps`)."""
    return a.value < b.value and not overlaps(a, b)


@dataclasses.dataclass(frozen=True)
class Fastest:
    """The answer to "which precision is fastest here", decided by :func:`decide_fastest` only."""

    #: The precision to recommend: BF16 when no other precision is clearly (beyond the spread) faster.
    answer: str
    #: The answer's speedup vs BF16 (1.0 when the answer is BF16).
    speedup: float
    #: The largest speedup's precision (differs from ``answer`` when its spread reaches down to 1.0).
    best: str
    best_speedup: float
    #: The other precisions whose spread overlaps the answer's (shown ≈: not significantly slower).
    tied: tuple[str, ...]
    #: Lower precisions among the candidates ("FP8", "FP8 or FP4"), for the words.
    family: str

    @property
    def starred(self) -> str | None:
        """The precision a table marks ★: the answer, unless the answer is BF16 (no column of its own)."""
        return None if self.answer == BASELINE else self.answer

    @property
    def text(self) -> str:
        """The answer's name, and nothing else: a sentence holds it ("On the H100 that is BF16 (...)")."""
        return PRECISIONS[self.answer].display

    @property
    def why(self) -> str:
        """Why BF16 is the answer ("" when it is not): no recipe faster, or none clearly faster."""
        if self.answer != BASELINE:
            return ""
        if self.best == BASELINE:
            return f"no {self.family} recipe is faster here"
        return (f"no {self.family} recipe is clearly faster here: {PRECISIONS[self.best].display}'s "
                f"{self.best_speedup:.2f}× is within the measured spread of BF16's speed")


def decide_fastest(points: Mapping[str, Point]) -> Fastest | None:
    """The one rule for "fastest", used by the summary, the roles and every other place that picks one.

    ``points`` holds every precision shown that has a speedup vs BF16 with its spread. BF16 is
    always a candidate, at exactly 1.0: its run-to-run variability is already inside every other
    precision's ratio spread (:func:`gemm_bench.report.figures.ratio_spread`), so it is not counted
    twice. The answer is the fastest of the precisions *clearly* faster than BF16 (spread above
    1.0), so a noisy recipe whose spread reaches down to 1.0 never hides a clearly faster one; BF16
    when none is. ≈ (``tied``) is relative to the answer. None when nothing besides BF16 has a number.
    """
    candidates = {p: v for p, v in points.items() if p != BASELINE and finite(v.value)}
    if not candidates:
        return None
    everyone = {BASELINE: BF16_POINT, **candidates}
    best = max(everyone, key=lambda p: (everyone[p].value, p == BASELINE))
    clear = [p for p, v in candidates.items() if clearly_less(BF16_POINT, v)]
    answer = max(clear, key=lambda p: everyone[p].value) if clear else BASELINE
    tied = tuple(p for p in everyone if p != answer and overlaps(everyone[p], everyone[answer]))
    family = "FP8 or FP4" if any(p == "nvfp4" for p in candidates) else "FP8"
    return Fastest(answer, everyone[answer].value, best, everyone[best].value, tied, family)


def model_step_points(summary: ModelStep | None, precisions: Iterable[str],
                      microbatches: int | None = None) -> dict[str, Point]:
    """The model step's speedups vs BF16 with their composed spreads at G = ``microbatches`` (default:
    the question's G), of the precisions shown whose step has one: the :func:`decide_fastest` input."""
    out: dict[str, Point] = {}
    if summary is None:
        return out
    for precision in dict.fromkeys(precisions):
        row = summary.row(precision, microbatches)
        if precision == BASELINE or row is None or not finite(row.speedup):
            continue
        assert row.speedup is not None
        out[precision] = Point(row.speedup, row.speedup_low, row.speedup_high)
    return out


def step_points(report: Report, precisions: Iterable[str], *, graphed: bool,
                routing: str = "balanced") -> dict[str, Point]:
    """Training-step speedups vs BF16 with their spreads, of the precisions whose step is measured:
    the same :func:`decide_fastest` rule as the GEMMs'. The spread reads each step time as its
    median -/+ half its IQR, as :func:`gemm_bench.report.figures.ratio_spread` reads a GEMM's: the
    ratio's relative half-width is half the two steps' relative IQRs summed (``StepResult.spread``)."""
    out: dict[str, Point] = {}
    for precision in dict.fromkeys(precisions):
        if precision == BASELINE:
            continue
        step = report.step(precision, graphed=graphed, routing=routing)
        value = step.speedup_vs_bf16
        if step.status != "measured" or not finite(value):
            continue
        assert value is not None
        half = (step.spread or 0.0) / 2
        out[precision] = Point(value, value * (1 - half), value * (1 + half))
    return out
