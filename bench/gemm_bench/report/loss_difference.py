"""The loss-parity study as differences from BF16: each recipe's loss minus BF16's, step by step.

The study's table quotes gaps of a few hundredths of a nat per byte; on the loss curves' axis (the
loss falls from about 5.6 to under 2) they are a line's width. Subtracting BF16's loss at every step
makes them the figure's whole height, and BF16's own seed-to-seed range at each evaluation, relative
to its main run, shows beside them how far a change of seed alone moves BF16 (at the last step it is
the range the table judges each validation gap by: :func:`gemm_bench.results.loss_parity_schema.seed_band`).

The window starts at the first evaluation after step 0: before it the loss is falling fast and the
recipes differ by tenths (FP8 Delayed's first steps, before its scaling history fills), which would
set the axis and hide the gaps again; and at step 0 BF16's seeds start from their own weights, so
their range there measures the initialization, not training. :attr:`LossDifferences.early` keeps the
largest early difference so that the page can say what the window leaves out.

Pure arithmetic on a validated study's ``data`` block (no Sphinx, no drawing): the page draws it
(:mod:`gemm_benchmark.study_loss_parity`), a test can hold every number against the document.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

from gemm_bench.question.precisions import BASELINE
from gemm_bench.results import loss_parity_schema as schema


@dataclasses.dataclass(frozen=True)
class RecipeDifference:
    """One recipe's losses minus BF16's main run, at the steps both have, from the window's start."""

    precision: str
    train_steps: tuple[int, ...]
    train: tuple[float, ...]
    val_steps: tuple[int, ...]
    val: tuple[float, ...]


@dataclasses.dataclass(frozen=True)
class SeedRange:
    """BF16's validation loss over its seeds at each evaluation step, minus the main run's: ``lows``
    <= 0 <= ``highs`` (the main run is one of the seeds). ``runs``: how many seeds, the main one included."""

    steps: tuple[int, ...]
    lows: tuple[float, ...]
    highs: tuple[float, ...]
    runs: int


@dataclasses.dataclass(frozen=True)
class EarlyDifference:
    """The largest training-loss difference (by size) before the window: what the window leaves out."""

    precision: str
    step: int
    delta: float


@dataclasses.dataclass(frozen=True)
class LossDifferences:
    """What the difference figure draws: the window ``start``..``last``, each measured recipe's
    differences, BF16's seed range (None without a usable seed band), the diverged recipes left out
    (precision, step), and the largest early difference (None when no step precedes the window)."""

    start: int
    last: int
    recipes: tuple[RecipeDifference, ...]
    seeds: SeedRange | None
    diverged: tuple[tuple[str, int], ...]
    early: EarlyDifference | None


def _by_step(steps: Any, values: Any) -> dict[int, float]:
    return dict(zip(steps, values, strict=True))


def loss_differences(data: Mapping[str, Any]) -> LossDifferences | None:
    """The differences of a valid study ``data`` block, or None when there is nothing to subtract
    from (BF16's main run did not complete) or no evaluation after step 0 to start the window at.

    Only complete (measured) recipes are drawn: a diverged run's loss runs away and would set the
    axis; it is listed in ``diverged`` with its step, and the loss curves show it."""
    recipes = schema.recipes_by_id(data)
    base = recipes[BASELINE]
    if base["status"] != "measured":
        return None
    evaluations = [s for s in base["validation"]["steps"] if s > 0]
    if not evaluations:
        return None
    start, last = evaluations[0], base["validation"]["steps"][-1]
    base_train = _by_step(base["curve"]["steps"], base["curve"]["train_loss"])
    base_val = _by_step(base["validation"]["steps"], base["validation"]["loss"])
    drawn: list[RecipeDifference] = []
    early: EarlyDifference | None = None
    for precision, recipe in recipes.items():
        if precision == BASELINE or recipe["status"] != "measured":
            continue
        train = _by_step(recipe["curve"]["steps"], recipe["curve"]["train_loss"])
        val = _by_step(recipe["validation"]["steps"], recipe["validation"]["loss"])
        train_steps = tuple(s for s in train if s in base_train and s >= start)
        val_steps = tuple(s for s in val if s in base_val and s >= start)
        drawn.append(RecipeDifference(precision, train_steps, tuple(train[s] - base_train[s] for s in train_steps),
                                      val_steps, tuple(val[s] - base_val[s] for s in val_steps)))
        for s in (s for s in train if s in base_train and s < start):
            delta = train[s] - base_train[s]
            if early is None or abs(delta) > abs(early.delta):
                early = EarlyDifference(precision, s, delta)
    diverged = tuple((p, r["diverged_at_step"]) for p, r in recipes.items() if r["status"] == "diverged")
    return LossDifferences(start, last, tuple(drawn), _seed_range(data, base_val, start), diverged, early)


def _seed_range(data: Mapping[str, Any], base_val: Mapping[int, float], start: int) -> SeedRange | None:
    """BF16's seed range at each evaluation from ``start`` on; None where the study has no usable band
    (no ``seed_band`` block, or a seed's run did not complete: :func:`schema.seed_band` says which)."""
    if not isinstance(schema.seed_band(data), schema.SeedBand):
        return None
    runs = [_by_step(r["validation"]["steps"], r["validation"]["loss"]) for r in data["seed_band"]["runs"]]
    steps = tuple(s for s in base_val if s >= start and all(s in run for run in runs))
    lows = tuple(min(0.0, *(run[s] - base_val[s] for run in runs)) for s in steps)
    highs = tuple(max(0.0, *(run[s] - base_val[s] for run in runs)) for s in steps)
    return SeedRange(steps, lows, highs, 1 + len(runs)) if len(steps) >= 2 else None
