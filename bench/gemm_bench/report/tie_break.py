"""The evidence of the one tie-break (:func:`gemm_bench.report.fastest.break_tie`), gathered from one
result and this GPU's loss-parity study, and the tie-break applied to an answer's own measure.

Why a module of its own: the rule (:mod:`.fastest`) is pure over points and sits below the energy
comparison (:mod:`.energy_compare` imports it); gathering its evidence needs that comparison, the
loss-parity verdict and the GEMM totals, so it lives one step above, where the answer sentence, the
summary's ★ (``gemm_benchmark.summary_answer``) and the refresh's choice of the plan's recipe
(:func:`gemm_bench.report.precision_plan.chosen_recipe`) all ask it: one recipe, one reason.

The rows, in the order a tie-break consults them: the model's step at the question's G,
the CUDA-graphed layer step (eager where the answer rests on the eager one), the GEMMs in the
answer's mode; the row the answer's measure *is* is left out. Then energy per layer step.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from gemm_bench.question.precisions import BASELINE, MODE_NAMES
from gemm_bench.question.vocabulary import LAYER_STEP, layer_step, model_step_at
from gemm_bench.report import figures
from gemm_bench.report.energy_compare import energy_point, unsettled
from gemm_bench.report.fastest import (
    BF16_POINT,
    Criterion,
    Fastest,
    Point,
    TieBreak,
    break_tie,
    decide_fastest,
    finite,
    model_step_points,
    step_points,
    with_tie_break,
)
from gemm_bench.report.loss_parity_words import band_of
from gemm_bench.report.report import Report
from gemm_bench.results import loss_parity_schema
from gemm_bench.results.energy import joules
from gemm_bench.results.typed import Result

#: What an answer's measure is (``basis``): the model's step, one layer's step, or the GEMMs.
MODEL, STEP, GEMMS = "model", "step", "gemms"


def total_points(report: Report, mode: str, precisions: Iterable[str]) -> dict[str, Point]:
    """Whole-model GEMM speedups vs BF16 with their spreads (BF16 included) of the precisions measured."""
    out: dict[str, Point] = {}
    for precision in dict.fromkeys((BASELINE, *precisions)):
        total = report.total(mode, precision)
        if total.status != "measured" or not finite(total.speedup_vs_bf16):
            continue
        value, low, high = figures.total_point(report, mode, precision)
        assert value is not None
        out[precision] = BF16_POINT if precision == BASELINE else Point(value, low, high)
    return out


def loss_verdicts(doc: Mapping[str, Any] | None) -> dict[str, bool]:
    """This GPU's loss-parity study as the tie-break reads it: precision -> True where its validation
    loss ended within BF16's seed-to-seed range, False beyond it or diverged; a recipe the study did
    not judge (not trained, failed, no seed band) is absent. {} without a study."""
    if doc is None:
        return {}
    band = band_of(dict(doc))
    gaps = loss_parity_schema.gaps(doc["data"])
    out: dict[str, bool] = {}
    for precision, recipe in loss_parity_schema.recipes_by_id(doc["data"]).items():
        if precision == BASELINE:
            continue
        if recipe["status"] == "diverged":
            out[precision] = False
        elif recipe["status"] == "measured" and not isinstance(band, str):
            val = gaps.get(precision, {}).get("val")
            if val is not None:
                out[precision] = band.holds(val.delta)
    return out


def energy_criterion(result: Result) -> Criterion:
    """Energy per CUDA-graphed layer step, less is better; only windows with a stored spread whose
    readings settled (:func:`~gemm_bench.report.energy_compare.unsettled`) take part, as only those
    are ever said to differ."""
    points = {p: energy_point(e) for p, e in result.energies().items() if e.bounds() is not None and not unsettled(e)}
    return Criterion(f"energy per {LAYER_STEP}", points, higher_is_better=False, show=lambda mj: f"{joules(mj)} J",
                     spread="sampling spread", verb="uses less")


def rows(report: Report, precisions: Iterable[str], *, graphed: bool = True,
         gemm_mode: str = "autocast") -> dict[str, Criterion]:
    """The result's rows as tie-break criteria, keyed by :data:`MODEL`, :data:`STEP`, :data:`GEMMS`
    (a row without a number for any recipe is left out)."""
    shown = list(dict.fromkeys(precisions))
    summary = report.model_step()
    out: dict[str, Criterion] = {}
    model = model_step_points(summary, shown)
    if summary is not None and model:
        out[MODEL] = Criterion(model_step_at(summary.microbatches), model)
    step = step_points(report, shown, graphed=graphed)
    if step:
        out[STEP] = Criterion(layer_step(graphed), step)
    gemms = {p: v for p, v in total_points(report, gemm_mode, shown).items() if p != BASELINE}
    if gemms:
        out[GEMMS] = Criterion(f"the {MODE_NAMES[gemm_mode].lower()} GEMMs", gemms)
    return out


def settle(verdict: Fastest | None, measure: Mapping[str, Point], report: Report, precisions: Iterable[str], *,
           basis: str, loss_parity: Mapping[str, Any] | None = None, graphed: bool = True,
           gemm_mode: str = "autocast") -> TieBreak | None:
    """:func:`~gemm_bench.report.fastest.break_tie` of ``verdict`` (decided on ``measure``, which is the
    ``basis`` row or, for a model step at another G, another measure), with this result's other rows
    and energy and ``loss_parity`` (this GPU's loss-parity study document, None without one)."""
    found = rows(report, precisions, graphed=graphed, gemm_mode=gemm_mode)
    criteria = [c for key, c in found.items() if key != basis or found[key].points != measure]
    return break_tie(verdict, measure, in_band=loss_verdicts(loss_parity),
                     criteria=[*criteria, energy_criterion(report.result)])


def pick(points: Mapping[str, Point], report: Report, precisions: Iterable[str], *, basis: str,
         loss_parity: Mapping[str, Any] | None = None, graphed: bool = True,
         gemm_mode: str = "autocast") -> Fastest | None:
    """The site's one pick on one measure: :func:`~gemm_bench.report.fastest.decide_fastest` over
    ``points`` (the ``basis`` row: :data:`MODEL`, :data:`STEP` or :data:`GEMMS`), its tie broken by
    :func:`settle` (``verdict.tie_break`` says how). Every place that names a recipe asks it: the
    answer sentence, the ★ of every row, the precision plan's recipe, the ``:gemm-fastest:`` role and
    ``gemm-bench report``; so none can name another recipe than the others on the same data."""
    verdict = decide_fastest(points)
    precisions = list(precisions)
    return with_tie_break(verdict, settle(verdict, points, report, precisions, basis=basis, loss_parity=loss_parity,
                                          graphed=graphed, gemm_mode=gemm_mode))
