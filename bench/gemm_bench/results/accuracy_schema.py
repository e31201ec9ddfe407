"""The accuracy cells of a result (``doc["accuracy"]``): modes, statuses, input distributions, validation.

The schema's part of accuracy (:mod:`gemm_bench.measure.accuracy` computes the SQNRs and builds
the cells); :func:`gemm_bench.results.schema.validate` calls :func:`validate_accuracy_cells`. The
distributions are here because a stored cell names one and a report describes it.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Iterable
from typing import Any

from gemm_bench.question.precisions import PRECISIONS
from gemm_bench.question.shapes import PASSES

ACCURACY_MODES: tuple[str, ...] = ("autocast", "prequant")
STATUSES: tuple[str, ...] = ("measured", "unsupported", "failed")


class AccuracyError(ValueError):
    """Bad input to an SQNR, or an accuracy cell that breaks the schema; ``where`` locates it."""

    def __init__(self, where: str, problem: str) -> None:
        self.where = where
        self.problem = problem
        super().__init__(f"{where}: {problem}")


@dataclasses.dataclass(frozen=True)
class Distribution:
    """How the input X is drawn (W and dY are N(0, 1) in every distribution)."""

    id: str
    display: str
    description: str
    #: Fraction of X's channels (its K columns) scaled up; 0 for none.
    outlier_fraction: float = 0.0
    outlier_scale: float = 1.0

    def outlier_channels(self, k: int) -> int:
        return 0 if self.outlier_fraction == 0 else max(1, round(self.outlier_fraction * k))

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


DISTRIBUTIONS: dict[str, Distribution] = {
    d.id: d
    for d in (
        Distribution("gaussian", "Gaussian", "X, W and dY drawn i.i.d. from N(0, 1)."),
        Distribution(
            "outliers", "Activation-like (outlier channels)",
            "X drawn from N(0, 1), then 1% of its channels (at least one; chosen by the seed) "
            "multiplied by 30, as the few large feature dimensions of LLM activations; W and dY "
            "from N(0, 1).",
            outlier_fraction=0.01, outlier_scale=30.0,
        ),
    )
}


def validate_accuracy_cells(cells: Any, known: Iterable[tuple[str, str]], *,
                            where: str = "$.accuracy") -> list[dict[str, Any]]:
    """Check ``doc["accuracy"]``; return it or raise :class:`AccuracyError` with the JSON path.

    For ``results.validate`` (which turns the error into its ``ResultError``): ``known`` is the
    question's (op, pass) pairs.
    """
    known = set(known)
    if not isinstance(cells, list):
        raise AccuracyError(where, "must be a list")
    seen: set[tuple[str, ...]] = set()
    for i, cell in enumerate(cells):
        at = f"{where}[{i}]"
        if not isinstance(cell, dict):
            raise AccuracyError(at, "must be an object")
        for field in ("mode", "precision", "op", "pass", "distribution", "status"):
            if not isinstance(cell.get(field), str):
                raise AccuracyError(f"{at}.{field}", "is missing" if field not in cell else "must be a string")
        if cell["mode"] not in ACCURACY_MODES:
            raise AccuracyError(f"{at}.mode", f"{cell['mode']!r} is not one of {', '.join(ACCURACY_MODES)}")
        if cell["precision"] not in PRECISIONS:
            raise AccuracyError(f"{at}.precision", f"{cell['precision']!r} is not a known precision")
        if cell["pass"] not in PASSES or (cell["op"], cell["pass"]) not in known:
            raise AccuracyError(at, f"GEMM {cell['op']}/{cell['pass']} is not part of the question")
        if cell["distribution"] not in DISTRIBUTIONS:
            raise AccuracyError(f"{at}.distribution",
                                f"{cell['distribution']!r} is not one of {', '.join(DISTRIBUTIONS)}")
        if cell["status"] not in STATUSES:
            raise AccuracyError(f"{at}.status", f"{cell['status']!r} is not one of {', '.join(STATUSES)}")
        key = (cell["mode"], cell["precision"], cell["op"], cell["pass"], cell["distribution"])
        if key in seen:
            raise AccuracyError(at, f"duplicate accuracy cell {'/'.join(key)}")
        seen.add(key)
        if cell["status"] == "measured":
            value = cell.get("sqnr_db")
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
                raise AccuracyError(f"{at}.sqnr_db", f"must be a finite number, got {value!r}")
        elif not isinstance(cell.get("reason"), str):
            raise AccuracyError(f"{at}.reason", "must be a string")
        for optional in ("run_id", "measured_at"):
            if optional in cell and not isinstance(cell[optional], str):
                raise AccuracyError(f"{at}.{optional}", "must be a string")
    return cells
