"""Every model's step on every GPU, ranked by the answer: the figure that leads "All models compared".

Why a figure of its own. The models page compared models by their whole-model GEMM speedups, while
every answer on the site rests on the model's step (issue 44 item 2): a reader who ranked models by
that figure ranked them by a quantity no answer uses. This figure draws, per GPU (one panel each),
every model's step's speedup against BF16 for each recipe, with the spread the model-step rows give
it (:func:`~gemm_bench.report.fastest.model_step_points`, the very points the rows and the answer
decide on), ranks the models by the speedup of the recipe their answer picks, and marks that recipe.

The pick is given, never decided here: the caller passes the answer's own verdict (in the Sphinx
extension, the sentence a model's page prints), so the figure cannot rank by another recipe than
the one the answer names, tie-break included. Pure: no Sphinx, no torch.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

from gemm_bench.question.precisions import BASELINE, PRECISIONS
from gemm_bench.question.vocabulary import MODEL_STEP, NO_MODEL_STEP, title
from gemm_bench.report.fastest import model_step_points
from gemm_bench.report.figure_spec import PRECISION_COLORS, FigureSpec, Panel, Series
from gemm_bench.report.figures import status_reason
from gemm_bench.report.model_step import part_absence
from gemm_bench.report.report import Report

#: Drawn after the value of the recipe the answer picks.
ANSWER_MARK = "★"
#: What a category adds where the answer is to stay in BF16 (BF16 has no bar: it is the 1.0 line).
STAY_IN_BF16 = "stay in BF16"


@dataclasses.dataclass(frozen=True)
class Compared:
    """One model on one GPU as the comparison draws it.

    ``answer`` is the precision the answer picks (:data:`BASELINE`: stay in BF16; "" where there is
    no answer) and ``speedup`` that pick's speedup of the model's step (1.0 for BF16); ``speedup`` is
    None where the answer does not rest on the model's step (a result measured before it was part of
    the method): such a model is ranked last, its category saying what its answer rests on."""

    model: str
    gpu: str
    report: Report
    answer: str
    speedup: float | None
    basis: str = "the model's step"


def ranked(models: Sequence[Compared]) -> dict[str, list[Compared]]:
    """Per GPU (in the order first given), its models by the answer's speedup of the model's step,
    highest first; equal speedups keep the order given; models without one come last."""
    by_gpu: dict[str, list[Compared]] = {}
    for model in models:
        by_gpu.setdefault(model.gpu, []).append(model)
    return {gpu: sorted(found, key=lambda m: (m.speedup is None, -(m.speedup or 0.0)))
            for gpu, found in by_gpu.items()}


def category(model: Compared) -> str:
    """A model's row label: its name, and where no recipe's bar is starred, what the answer is."""
    if model.speedup is None:
        return f"{model.model} (answer on {model.basis})"
    return f"{model.model} ({STAY_IN_BF16})" if model.answer == BASELINE else model.model


def _absence(report: Report, precision: str) -> str:
    status, reason = part_absence(report.result, precision)
    if report.model_step() is None:
        return f"not measured: {MODEL_STEP} is not in this result"
    return status_reason(status, reason) if status else f"n/a: {NO_MODEL_STEP} ({reason or 'no speedup'})"


def model_step_spec(models: Sequence[Compared], precisions: Sequence[str], *,
                    title_text: str = "") -> FigureSpec | None:
    """The figure: a panel per GPU, a bar group per model (ranked by :func:`ranked`), a bar per
    recipe of ``precisions`` (BF16 is the reference line) at the question's G with its spread, the
    answer's recipe marked :data:`ANSWER_MARK`. None when no model has a model step to draw."""
    shown = [p for p in PRECISIONS if p in precisions and p != BASELINE]
    panels = []
    for gpu, found in ranked(models).items():
        points = [model_step_points(m.report.model_step(), shown) for m in found]
        series = tuple(
            Series(p, PRECISIONS[p].display, PRECISION_COLORS[p],
                   tuple(pts[p].value if p in pts else None for pts in points),
                   tuple(pts[p].low if p in pts else None for pts in points),
                   tuple(pts[p].high if p in pts else None for pts in points),
                   missing=tuple("" if p in pts else _absence(m.report, p)
                                 for m, pts in zip(found, points, strict=True)),
                   marks=tuple(ANSWER_MARK if m.answer == p and m.speedup is not None else "" for m in found))
            for p in shown if any(p in pts for pts in points))
        panels.append(Panel(f"{gpu}: ranked by the answer's speedup", tuple(category(m) for m in found), series))
    spec = FigureSpec("bars", title_text,
                      f"{title(MODEL_STEP)}: speedup vs BF16 in tokens per second (higher is faster); "
                      f"{ANSWER_MARK} the answer's recipe", "", tuple(panels))
    return None if spec.is_empty else spec
