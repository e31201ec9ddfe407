"""The layer-step cells of a result (``doc["layer"]``): their modes, statuses and validation.

The schema's part of the training step (:mod:`gemm_bench.measure.step` produces the cells and
summarizes them); :func:`gemm_bench.results.schema.validate` calls :func:`validate_layer_cells`.
"""

from __future__ import annotations

import math
from typing import Any

from gemm_bench.question.precisions import LAYER_MODES, MODE_NAMES, PRECISIONS
from gemm_bench.question.step_plan import ROUTINGS
from gemm_bench.results.step_error import StepError

#: ``layer``: eager step; ``layer-graphed``: the same step captured by te.make_graphed_callables.
#: Separate modes, so graphed numbers never mix with eager ones.
#: (Defined in :mod:`gemm_bench.question.precisions`, the one list of modes, and re-exported here.)
LAYER_MODE_NAMES = {m: MODE_NAMES[m] for m in LAYER_MODES}
STATUSES: tuple[str, ...] = ("measured", "unsupported", "failed")


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


#: The steps a precision plan is measured as (``doc["plan"]["steps"]``).
PLAN_STEPS: tuple[str, ...] = ("all-bf16", "all-fp8", "plan")


def validate_plan_block(block: Any, *, where: str = "$.plan") -> dict[str, Any]:
    """Check ``doc["plan"]``: the plan (``recipe``, ``fp8`` and ``keep_in_bf16`` projection lists) and
    its measured ``steps`` (layer cells with ``step`` in place of ``precision``, breakdowns included)."""
    if not isinstance(block, dict):
        raise StepError(where, "must be an object")
    if block.get("recipe") not in PRECISIONS or block.get("recipe") == "bf16":
        raise StepError(f"{where}.recipe", f"{block.get('recipe')!r} is not a low-precision recipe")
    for field in ("fp8", "keep_in_bf16"):
        ops = block.get(field)
        if not isinstance(ops, list) or not all(isinstance(op, str) for op in ops):
            raise StepError(f"{where}.{field}", "must be a list of projection ids")
    if set(block["fp8"]) & set(block["keep_in_bf16"]):
        raise StepError(where, "a projection cannot be both in FP8 and kept in BF16")
    _validate_projections(block.get("projections", []), f"{where}.projections")
    for field in ("kind", "rule", "chosen"):
        if block.get(field) is not None and not isinstance(block[field], str):
            raise StepError(f"{where}.{field}", "must be a string")
    steps = block.get("steps", [])
    if not isinstance(steps, list):
        raise StepError(f"{where}.steps", "must be a list")
    seen: set[tuple[str, str]] = set()
    for i, cell in enumerate(steps):
        at = f"{where}.steps[{i}]"
        if not isinstance(cell, dict) or cell.get("step") not in PLAN_STEPS:
            raise StepError(f"{at}.step", f"must be one of {', '.join(PLAN_STEPS)}")
        # a layer cell's checks, with the precision the step runs its FP8 projections in
        as_cell = {**{k: v for k, v in cell.items() if k != "step"},
                   "precision": "bf16" if cell["step"] == "all-bf16" else block["recipe"]}
        validate_layer_cells([as_cell], where=at)
        key = (str(cell.get("mode")), cell["step"])
        if key in seen:
            raise StepError(at, f"duplicate plan step {'/'.join(key)}")
        seen.add(key)
    return block


def _validate_projections(rows: Any, where: str) -> None:
    """Each projection's verdict as a plan stores it (``PrecisionPlan.config``): ``op``, ``fp8`` and the
    speedup with its spread (positive numbers, or null with a ``reason``). Why here: the typed plan
    (:class:`gemm_bench.results.typed.PlanProjection`) is parsed from a checked block, never guessed."""
    if not isinstance(rows, list):
        raise StepError(where, "must be a list")
    for i, row in enumerate(rows):
        at = f"{where}[{i}]"
        if not isinstance(row, dict) or not isinstance(row.get("op"), str) or not isinstance(row.get("fp8"), bool):
            raise StepError(at, "must be an object with an op (a projection id) and fp8 (true or false)")
        for field in ("speedup", "low", "high"):
            value = row.get(field)
            if value is not None and (isinstance(value, bool) or not isinstance(value, (int, float))
                                      or not math.isfinite(value) or value <= 0):
                raise StepError(f"{at}.{field}", f"must be a positive finite number or null, got {value!r}")
        if not isinstance(row.get("reason", ""), str):
            raise StepError(f"{at}.reason", "must be a string")
