"""The one rule for "fastest" and for "clearly different": a speedup vs BF16 with its measured spread
(:class:`Point`), :func:`overlaps`, :func:`clearly_less` and :func:`decide_fastest`; and the one
tie-break (:func:`break_tie`) for recipes that rule cannot tell apart.

It lives here, below the site's extension, so the refresh's choice of which recipe a precision plan is
made for (:func:`gemm_bench.report.precision_plan.chosen_recipe`) asks the very rule the answer
sentence asks: the plan, the step's breakdown sentence and the answer then speak of one recipe.
:mod:`gemm_benchmark.values` re-exports these names for the extension.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Iterable, Mapping, Sequence

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
    #: How :func:`break_tie` chose ``answer`` among recipes the measure could not tell apart (None: no
    #: tie, or not broken); :func:`with_tie_break` sets it.
    tie_break: TieBreak | None = None

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


# ------------------------------------------------------------------------------ the one tie-break
def listed(items: Sequence[str], word: str = "and") -> str:
    """"a", "a and b", "a, b and c" (``word`` "and" or "or")."""
    items = list(items)
    if len(items) < 2:
        return "".join(items)
    return ", ".join(items[:-1]) + f" {word} " + items[-1]


def _display(precisions: Iterable[str], word: str = "and") -> str:
    return listed([PRECISIONS[p].display for p in precisions], word)


#: The tie-break's order in a few words, as the answer sentence names it before its steps.
TIE_ORDER = "accuracy, then the other rows, then energy"
#: The tie-break's order in full (tooltips, the methodology).
TIE_RULE = ("accuracy first (a recipe within BF16's seed-to-seed loss range in the loss-parity study before one "
            "beyond it or not judged), then the other rows (the layer step, the GEMMs), then energy per step, each "
            "by the same spread rule; where none tells them apart, the higher measured value")


@dataclasses.dataclass(frozen=True)
class Criterion:
    """One measure a tie-break may consult: its name as a sentence says it ("the layer step"), each
    recipe's point, and which way is better (speedups: more; joules: less)."""

    name: str
    points: Mapping[str, Point]
    higher_is_better: bool = True
    #: How a value prints ("1.25×", "3.1 J").
    show: Callable[[float], str] = dataclasses.field(default=lambda value: f"{value:.2f}×")
    #: The spread's name in the words ("measured spread", "sampling spread").
    spread: str = "measured spread"
    #: What the best one does, before ``name`` ("leads" the layer step, "uses less" energy per step).
    verb: str = "leads"


@dataclasses.dataclass(frozen=True)
class TieBreak:
    """Which recipe the answer names among those its own measure cannot tell apart, and why."""

    #: The recipe picked.
    pick: str
    #: Every recipe the measure could not tell apart (the measure's fastest and those within its
    #: spread), in the site's order of precisions.
    tied: tuple[str, ...]
    #: The measure's points of ``tied`` (what the sentence quotes for each).
    measure: Mapping[str, Point]
    #: One clause per step of the tie-break that set recipes aside, in order.
    steps: tuple[str, ...]
    #: What decided: ``accuracy``, a :class:`Criterion`'s name, or "" (nothing told them apart: the
    #: measure's higher value).
    decided_by: str

    @property
    def names(self) -> str:
        """"FP8 Delayed, FP8 Current or FP8 Block": the tie, as the answer names it."""
        return _display(self.tied, "or")

    @property
    def values(self) -> str:
        """"FP8 Delayed 1.33×, FP8 Current 1.34×, FP8 Block 1.27×": each tied recipe's measure."""
        return ", ".join(f"{PRECISIONS[p].display} {self.measure[p].value:.2f}×" for p in self.tied)

    @property
    def why(self) -> str:
        """The tie-break's steps as one clause ("FP8 Current ended beyond ...; FP8 Delayed leads ...")."""
        if self.steps:
            return "; ".join(self.steps)
        return ("none of accuracy, the other rows and energy tells them apart, and the higher measured value "
                f"({PRECISIONS[self.pick].display}'s) decides")


def break_tie(verdict: Fastest | None, measure: Mapping[str, Point], *, in_band: Mapping[str, bool],
              criteria: Sequence[Criterion]) -> TieBreak | None:
    """The one tie-break, where :func:`decide_fastest`'s answer is a low-precision recipe and other
    recipes lie within its measured spread (``verdict.tied``); None where there is no such tie (BF16
    as the answer is not a tie to break: it stays, the simpler and more accurate choice).

    Why: the measure alone once picked by noise: Mixtral 8x22B on both GPUs said "train in FP8 Current"
    on a three-way tie of the model step (1.34× against FP8 Delayed's 1.33× on the H200), while FP8
    Delayed led every other row, used less energy and, unlike FP8 Current, stayed within BF16's
    seed-to-seed loss range; Mixtral 8x7B's answer flipped between the GPUs on the same kind of tie.

    The order (:data:`TIE_RULE`): ``in_band`` first (precision -> True within BF16's seed-to-seed range
    in the loss-parity study, False beyond it or diverged; absent: no verdict): where some contender is
    within it, those are kept. Then each of ``criteria`` in turn (the other rows, then energy): where
    every contender left has a point, the ones clearly behind the best (:func:`overlaps`, the one
    rule) are set aside. Where several remain, the higher value on ``measure`` decides. Only recipes
    clearly faster than BF16 contend, as only they can be :func:`decide_fastest`'s answer."""
    if verdict is None or verdict.answer == BASELINE:
        return None
    # Only the recipes the rule could have answered (clearly faster than BF16) are in the tie: one whose
    # spread reaches down to BF16's speed is ≈ in the table, never the pick.
    tied = [p for p in PRECISIONS if (p == verdict.answer or p in verdict.tied) and p in measure
            and p != BASELINE and clearly_less(BF16_POINT, measure[p])]
    if len(tied) < 2:
        return None
    alive = list(tied)
    steps: list[str] = []
    decided = ""
    within = [p for p in alive if in_band.get(p) is True]
    if within and len(within) < len(alive):
        beyond = [p for p in alive if in_band.get(p) is False]
        unjudged = [p for p in alive if p not in within and p not in beyond]
        words = []
        if beyond:
            words.append(f"{_display(beyond)} ended beyond BF16's seed-to-seed loss range in the loss-parity study")
        if unjudged:
            words.append(f"{_display(unjudged)} {'has' if len(unjudged) == 1 else 'have'} no verdict in the "
                         "loss-parity study")
        steps.append(" and ".join(words) + f", {_display(within)} {'stays' if len(within) == 1 else 'stay'} "
                     "within it")
        alive, decided = within, "accuracy"
    for criterion in criteria:
        if len(alive) < 2:
            break
        if not all(p in criterion.points for p in alive):
            continue  # a row some contender lacks cannot compare them all
        sign = 1 if criterion.higher_is_better else -1
        best = max(alive, key=lambda p: (sign * criterion.points[p].value, -alive.index(p)))
        lead = criterion.points[best]
        behind = [p for p in alive if p != best and not overlaps(criterion.points[p], lead)]
        if not behind:
            continue
        theirs = ", ".join(f"{PRECISIONS[p].display}'s {criterion.show(criterion.points[p].value)}"
                           for p in behind)
        steps.append(f"{PRECISIONS[best].display} {criterion.verb} {criterion.name} "
                     f"({criterion.show(lead.value)} against {theirs}, beyond the {criterion.spread})")
        alive, decided = [p for p in alive if p not in behind], criterion.name
    pick = alive[0] if len(alive) == 1 else max(alive, key=lambda p: measure[p].value)
    if len(alive) > 1:
        decided = ""
        if steps:
            steps.append(f"nothing else tells {_display(alive)} apart, and the higher measured value "
                         f"({PRECISIONS[pick].display}'s) decides")
    return TieBreak(pick, tuple(tied), {p: measure[p] for p in tied}, tuple(steps), decided)


def with_tie_break(verdict: Fastest | None, tie: TieBreak | None) -> Fastest | None:
    """``verdict`` with the tie-break's pick as its answer (the sentence's "train in" and the table's ★)
    and every other tied recipe as ≈; ``verdict`` itself where there was no tie."""
    if verdict is None or tie is None:
        return verdict
    return dataclasses.replace(verdict, answer=tie.pick, speedup=tie.measure[tie.pick].value,
                               tied=tuple(p for p in tie.tied if p != tie.pick), tie_break=tie)
