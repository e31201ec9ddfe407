"""A synthetic model-step block (issue 32) for site tests: every part of a question's model step,
"measured" with chosen speeds, so a page's tokens/s, MFU, memory and answer sentence are computed
from a block the schema accepts. No GPU, no Transformer Engine: numbers chosen, then read back
through the same Report path the site uses."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from gemm_bench.question.config import ModelConfig
from gemm_bench.question.model_step import WHAT_IS_COMPOSED, layer_parameters

GIB = 1 << 30
#: Layer step speed per recipe (BF16 = 1): FP8 Delayed clearly faster, FP8 Current a little less.
SPEEDS = {"bf16": 1.0, "fp8-delayed": 1.45, "fp8-current": 1.4, "fp8-block": 1.2}


def _measured(part: str, precision: str, ms: float, **extra: Any) -> dict[str, Any]:
    return {"part": part, "precision": precision, "status": "measured", "ms": ms,
            "stats": {"median_ms": ms, "iqr_ms": ms * 0.02}, **extra}


#: Kernels of each part's one profiled round, as (recorded name, share of the part's time), back to
#: back from 0: the rest of the part's time is idle. Names the classifier knows (tests/test_breakdown.py).
KERNELS = {
    "layer-first": [("nvjet_sm90_tst_128x256_64x4_bf16", 0.6), ("rmsnorm_fwd_tuned_kernel", 0.15)],
    "fp8": [("nvjet_sm90_tst_128x256_64x4_e4m3", 0.5), ("cast_transpose_kernel", 0.15),
            ("rmsnorm_fwd_tuned_kernel", 0.15)],
    "embedding": [("indexSelectLargeIndex", 0.8)],
    "head": [("nvjet_sm90_tst_128x256_64x4_bf16", 0.7), ("cunn_SoftMaxForward", 0.2)],
    "optimizer": [("multi_tensor_apply_kernel", 0.9)],
}


def with_breakdown(item: dict[str, Any]) -> dict[str, Any]:
    """``item`` with the breakdown of its :data:`KERNELS` (the real block function, the real classifier)."""
    from gemm_bench.results.breakdown import breakdown_block, rounds_from_kernels

    key = ("fp8" if item["precision"] != "bf16" else "layer-first") if item["part"].startswith("layer") \
        else item["part"]
    kernels, start = [], 0
    for name, share in KERNELS[key]:
        duration = int(item["ms"] * share * 1e6)
        kernels.append((name, start, duration))
        start += duration
    return {**item, "breakdown": breakdown_block(item["ms"], rounds_from_kernels([kernels]), source="fake")}


def model_step_block(config: ModelConfig, run_id: str, precisions: Sequence[str], *,
                     speeds: Mapping[str, float] | None = None, failed: Mapping[str, str] | None = None,
                     largest: Mapping[str, int | str] | None = None,
                     capacity_gib: float = 79.1, breakdowns: bool = False) -> dict[str, Any]:
    """The block of ``config`` (its padded vocabulary) with each precision's layer at ``speeds``;
    ``failed`` precisions store failed layer parts with the reason; ``largest``: the micro-batch search
    (a number, or a failure's reason), searched with 2 layers; ``breakdowns``: each measured part with
    its time breakdown (:func:`with_breakdown`)."""
    speeds = {**SPEEDS, **(speeds or {})}
    failed = dict(failed or {})
    parts = [_measured("embedding", "bf16", 0.6), _measured("head", "bf16", 45.0),
             _measured("optimizer", "bf16", 2.0, params=1 << 26), _measured("optimizer", "bf16", 8.0, params=1 << 28)]
    memory = {}
    for p in precisions:
        if p in failed:
            parts += [{"part": name, "precision": p, "status": "failed", "reason": failed[p]}
                      for name in ("layer-first", "layer-cached")]
            continue
        fp8 = p != "bf16"
        parts += [_measured("layer-first", p, 20.0 / speeds[p]),
                  _measured("layer-cached", p, (18.0 if fp8 else 20.0) / speeds[p])]
        memory[p] = {"layer_weights": 2 * layer_parameters(config), "layer_fp8_weights": 230_000_000 if fp8 else 0,
                     "layer_activations": 1_100_000_000 if not fp8 else 1_000_000_000,
                     "layer_backward_extra": 470_000_000, "embedding_weights": 1_050_000_000,
                     "head_weights": 1_050_000_000, "head_transient": 12_000_000_000}
    if breakdowns:
        parts = [with_breakdown(p) if p["status"] == "measured" else p for p in parts]
    block: dict[str, Any] = {
        "run_id": run_id, "what": WHAT_IS_COMPOSED, "padded_vocab_size": config.padded_vocab_size,
        "layer_params": layer_parameters(config), "capacity_bytes": int(capacity_gib * GIB),
        "state_per_param": 16.0, "parts": parts, "memory": memory}
    if largest is not None:
        block["largest_microbatch"] = {"layers": 2, **{p: v if isinstance(v, str) else {"largest": v, "tried": [v]}
                                                       for p, v in largest.items()}}
    return block
