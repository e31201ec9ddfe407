"""The layer-step cells of a result (``doc["layer"]``): their modes, statuses and validation.

The schema's part of the training step (:mod:`gemm_bench.measure.step` produces the cells and
summarizes them); :func:`gemm_bench.results.schema.validate` calls :func:`validate_layer_cells`.
"""

from __future__ import annotations

import math
from typing import Any

from gemm_bench.question.precisions import LAYER_MODES, MODE_NAMES, PRECISIONS
from gemm_bench.question.step_plan import ROUTINGS

#: ``layer``: eager step; ``layer-graphed``: the same step captured by te.make_graphed_callables.
#: Separate modes, so graphed numbers never mix with eager ones.
#: (Defined in :mod:`gemm_bench.question.precisions`, the one list of modes, and re-exported here.)
LAYER_MODE_NAMES = {m: MODE_NAMES[m] for m in LAYER_MODES}
STATUSES: tuple[str, ...] = ("measured", "unsupported", "failed")


class StepError(ValueError):
    """A layer cell that breaks the schema; ``where`` is its JSON path."""

    def __init__(self, where: str, problem: str) -> None:
        self.where = where
        self.problem = problem
        super().__init__(f"{where}: {problem}")


def validate_layer_cells(cells: Any, *, where: str = "$.layer") -> list[dict[str, Any]]:
    """Check ``doc["layer"]``; return it or raise :class:`StepError` (for ``results.validate``)."""
    if not isinstance(cells, list):
        raise StepError(where, "must be a list")
    seen: set[tuple[str, str, str]] = set()
    for i, cell in enumerate(cells):
        at = f"{where}[{i}]"
        if not isinstance(cell, dict):
            raise StepError(at, "must be an object")
        for field in ("mode", "precision", "status"):
            if not isinstance(cell.get(field), str):
                raise StepError(f"{at}.{field}", "is missing" if field not in cell else "must be a string")
        if cell["mode"] not in LAYER_MODES:
            raise StepError(f"{at}.mode", f"{cell['mode']!r} is not one of {', '.join(LAYER_MODES)}")
        if cell["precision"] not in PRECISIONS:
            raise StepError(f"{at}.precision", f"{cell['precision']!r} is not a known precision")
        if cell["status"] not in STATUSES:
            raise StepError(f"{at}.status", f"{cell['status']!r} is not one of {', '.join(STATUSES)}")
        routing = cell.get("routing", "balanced")
        if routing not in ROUTINGS:
            raise StepError(f"{at}.routing", f"{routing!r} is not one of {', '.join(ROUTINGS)}")
        key = (cell["mode"], cell["precision"], routing)
        if key in seen:
            raise StepError(at, f"duplicate layer cell {'/'.join(key)}")
        seen.add(key)
        if cell["status"] == "measured":
            ms = cell.get("ms")
            if isinstance(ms, bool) or not isinstance(ms, (int, float)) or not math.isfinite(ms) or ms <= 0:
                raise StepError(f"{at}.ms", f"must be a positive finite number, got {ms!r}")
            stats = cell.get("stats")
            if not isinstance(stats, dict) or not all(isinstance(stats.get(k), (int, float))
                                                       for k in ("median_ms", "iqr_ms")):
                raise StepError(f"{at}.stats", "must hold median_ms and iqr_ms")
            if "breakdown" in cell:
                from gemm_bench.results.breakdown import validate_breakdown  # it builds on this module

                validate_breakdown(cell["breakdown"], where=f"{at}.breakdown", cell_ms=ms)
        elif not isinstance(cell.get("reason"), str):
            raise StepError(f"{at}.reason", "must be a string")
        for optional in ("run_id", "measured_at"):
            if optional in cell and not isinstance(cell[optional], str):
                raise StepError(f"{at}.{optional}", "must be a string")
    return cells
