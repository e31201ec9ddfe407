"""The model's step in a result (``doc["model_step"]``, issue 32): its measured parts and memory.

One block per document, written by one run (its ``run_id``) and replaced whole by a newer run that
measured it. It stores what was measured, never what is composed from it: G and the layer count
belong to the page's question (G is not in the question's hash), so the report composes the step
for the page's G from these parts (:mod:`gemm_bench.question.model_step`). The output layer's time
depends on the vocabulary, which is not in the hash either: the block names the padded vocabulary
it measured, and a question of another vocabulary finds no model step here (:func:`answers`).

Block::

    {"run_id": "...", "what": "...", "padded_vocab_size": 128256, "layer_params": 218112000,
     "capacity_bytes": 84000000000, "state_per_param": 16.0,
     "parts": [{"part": "layer-first", "precision": "bf16", "status": "measured", "ms": 20.1,
                "stats": {...}, "breakdown": {...}},     (breakdown optional: results.breakdown's block)
               {"part": "optimizer", "precision": "bf16", "params": 67108864, ...}, ...],
     "memory": {"bf16": {"layer_weights": ..., ...}, ...},
     "largest_microbatch": {"layers": 4, "bf16": {"largest": 1, "tried": [1, 2]}},   (optional)
     "routing": "balanced"}   (a mixture of experts' only)

``embedding``, ``head`` and ``optimizer`` parts are BF16 under every recipe (outside it), so they
are stored once, as ``bf16``; each precision has its ``layer-first`` and ``layer-cached``. A mixture of
experts' layer parts name the routing they were measured with (one of the layer step's routings);
``layer_params`` is then the rank's layer: its local experts (experts / EP), shared experts, router,
attention (or multi-latent attention's projections) and norms.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from gemm_bench.question.config import MAX_DIMENSION, ModelConfig
from gemm_bench.question.model_step import PARTS, MemoryParts
from gemm_bench.question.precisions import PRECISIONS
from gemm_bench.question.step_plan import ROUTINGS
from gemm_bench.results.breakdown import BreakdownError, validate_breakdown

STATUSES: tuple[str, ...] = ("measured", "unsupported", "failed")
#: Parts measured once, in BF16, whatever the recipe (outside it).
SHARED_PARTS: tuple[str, ...] = ("embedding", "head", "optimizer")
MEMORY_FIELDS: tuple[str, ...] = ("layer_weights", "layer_fp8_weights", "layer_activations", "layer_backward_extra",
                                  "embedding_weights", "head_weights", "head_transient")
#: More bytes than any GPU of this decade holds: a typo or a corrupted file, not a measurement.
MAX_BYTES = 1 << 50
MAX_PARAMS = 1 << 45


class ModelStepSchemaError(ValueError):
    """A model-step block that breaks the schema; ``where`` is its JSON path."""

    def __init__(self, where: str, problem: str) -> None:
        self.where = where
        self.problem = problem
        super().__init__(f"{where}: {problem}")


def _whole(obj: Mapping[str, Any], key: str, where: str, low: int, high: int, *, required: bool = True) -> int | None:
    value = obj.get(key)
    if value is None and not required:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        raise ModelStepSchemaError(f"{where}.{key}", f"must be a whole number from {low} to {high}, got {value!r}")
    return value


def _positive(obj: Mapping[str, Any], key: str, where: str) -> float:
    value = obj.get(key)
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value <= 0:
        raise ModelStepSchemaError(f"{where}.{key}", f"must be a positive finite number, got {value!r}")
    return float(value)


def validate_model_step(block: Any, *, where: str = "$.model_step") -> dict[str, Any]:
    """Check ``doc["model_step"]``; return it or raise :class:`ModelStepSchemaError`."""
    if not isinstance(block, dict):
        raise ModelStepSchemaError(where, "must be an object")
    for key in ("run_id", "what"):
        if not isinstance(block.get(key), str):
            raise ModelStepSchemaError(f"{where}.{key}", "must be a string")
    _whole(block, "padded_vocab_size", where, 1, MAX_DIMENSION * 4)
    _whole(block, "layer_params", where, 1, MAX_PARAMS)
    _whole(block, "capacity_bytes", where, 1, MAX_BYTES)
    _positive(block, "state_per_param", where)
    parts = block.get("parts")
    if not isinstance(parts, list):
        raise ModelStepSchemaError(f"{where}.parts", "must be a list")
    seen: set[tuple[str, str, int]] = set()
    for i, part in enumerate(parts):
        at = f"{where}.parts[{i}]"
        if not isinstance(part, dict):
            raise ModelStepSchemaError(at, "must be an object")
        name, precision, status = part.get("part"), part.get("precision"), part.get("status")
        if not isinstance(name, str) or name not in PARTS:
            raise ModelStepSchemaError(f"{at}.part", f"{name!r} is not one of {', '.join(PARTS)}")
        if not isinstance(precision, str) or precision not in PRECISIONS:
            raise ModelStepSchemaError(f"{at}.precision", f"{precision!r} is not a known precision")
        if name in SHARED_PARTS and precision != "bf16":
            raise ModelStepSchemaError(f"{at}.precision", f"the {name} is BF16 under every recipe: stored as bf16")
        if not isinstance(status, str) or status not in STATUSES:
            raise ModelStepSchemaError(f"{at}.status", f"{status!r} is not one of {', '.join(STATUSES)}")
        params = _whole(part, "params", at, 1, MAX_PARAMS, required=name == "optimizer") or 0
        ident = (str(name), str(precision), params)
        if ident in seen:
            raise ModelStepSchemaError(at, f"duplicate part {name}/{precision}")
        seen.add(ident)
        if status == "measured":
            _positive(part, "ms", at)
            stats = part.get("stats")
            if not isinstance(stats, dict) or not all(
                    isinstance(stats.get(k), (int, float)) and not isinstance(stats.get(k), bool)
                    for k in ("median_ms", "iqr_ms")):
                raise ModelStepSchemaError(f"{at}.stats", "must hold median_ms and iqr_ms")
            if "breakdown" in part:  # where the part's time goes (issue 33), the layer step's own block
                try:
                    validate_breakdown(part["breakdown"], where=f"{at}.breakdown", cell_ms=float(part["ms"]))
                except BreakdownError as exc:
                    raise ModelStepSchemaError(exc.where, exc.problem) from exc
        elif not isinstance(part.get("reason"), str):
            raise ModelStepSchemaError(f"{at}.reason", "must be a string")
    memory = block.get("memory")
    if not isinstance(memory, dict):
        raise ModelStepSchemaError(f"{where}.memory", "must be an object")
    for precision, fields in memory.items():
        at = f"{where}.memory.{precision}"
        if precision not in PRECISIONS or not isinstance(fields, dict):
            raise ModelStepSchemaError(at, "must be a known precision's object")
        for field in MEMORY_FIELDS:
            _whole(fields, field, at, 0, MAX_BYTES)
    routing = block.get("routing")
    if routing is not None and (not isinstance(routing, str) or routing not in ROUTINGS):
        raise ModelStepSchemaError(f"{where}.routing", f"{routing!r} is not one of {', '.join(ROUTINGS)}")
    search = block.get("largest_microbatch")
    if search is not None:
        if not isinstance(search, dict):
            raise ModelStepSchemaError(f"{where}.largest_microbatch", "must be an object")
        _whole(search, "layers", f"{where}.largest_microbatch", 1, 1 << 16)
        for precision, found in search.items():
            if precision == "layers":
                continue
            at = f"{where}.largest_microbatch.{precision}"
            if precision not in PRECISIONS:
                raise ModelStepSchemaError(at, "is not a known precision")
            if isinstance(found, dict):
                _whole(found, "largest", at, 0, 1 << 16)
            elif not isinstance(found, str):
                raise ModelStepSchemaError(at, "must be an object or a failure's reason")
    return block


def answers(block: Mapping[str, Any] | None, config: ModelConfig | None) -> bool:
    """Whether a stored model step answers this question: measured at its padded vocabulary."""
    return (block is not None and config is not None and config.padded_vocab_size is not None
            and block.get("padded_vocab_size") == config.padded_vocab_size)


def part(block: Mapping[str, Any], name: str, precision: str = "bf16", params: int | None = None
         ) -> Mapping[str, Any] | None:
    """One measured part of a valid block (the optimizer's at ``params``), or None."""
    for item in block["parts"]:
        if (item["part"], item["precision"]) == (name, precision) and item["status"] == "measured" and (
                params is None or item.get("params") == params):
            return item
    return None


def memory_parts(block: Mapping[str, Any], precision: str) -> MemoryParts | None:
    fields = block["memory"].get(precision)
    if fields is None:
        return None
    return MemoryParts(**{f: fields[f] for f in MEMORY_FIELDS}, state_per_param=float(block["state_per_param"]))
