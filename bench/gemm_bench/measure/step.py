"""The training step, not only its GEMMs: layer-step cells, their checks, and Amdahl's law.

Why: "GEMMs get 2x but my step only 1.35x" is the most common FP8 question. Timing a whole
``te.TransformerLayer`` forward + backward (:mod:`gemm_bench.measure.backends.layer_step`) beside the
layer's 12 GEMMs lets the report state Amdahl's law with the reader's own numbers: the GEMM share
of the BF16 step bounds what a faster GEMM can give the step.

Pure (no torch): which configs the layer step can time and why not, the result cells (proposed
as ``doc["layer"]``) and the summary the report renders. What a valid cell is belongs to the
schema (:mod:`gemm_bench.results.step_schema`).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping
from typing import Any

from gemm_bench.question.config import ModelConfig
from gemm_bench.question.precisions import BASELINE, LAYER_MODES, PRECISIONS
from gemm_bench.results.step_schema import StepError

WHAT_IS_TIMED = (
    "One te.TransformerLayer (LayerNorm, fused QKV, TE's default attention backend with a causal "
    "mask, output projection, MLP: SwiGLU when the MLP is gated, else GELU), BF16 parameters, no "
    "bias, no dropout, micro-batch x sequence tokens: forward + backward in one timed region, L2 "
    "flushed before it. layer: called eagerly, as an eager training loop runs it (host work "
    "included wherever the GPU waits for it); layer-graphed: the same region captured as one CUDA "
    "graph and its replays timed (the GPU's time; the same group's eager rounds give layer). "
    "Excluded: optimizer step, gradient all-reduce, embedding and loss, and weight-quantization "
    "caching across micro-batches."
)

MOE_REASON = (
    "Transformer Engine has no MoE transformer layer to time as a whole (routing, token dispatch "
    "and expert GEMMs live in Megatron-Core); the layer step is measured for dense models only."
)
TP_REASON = (
    "The layer step runs on one GPU without tensor parallelism; a tensor-parallel rank's step "
    "includes communication this benchmark does not run."
)


def unsupported_reason(config: ModelConfig | None) -> str | None:
    """Why the layer step cannot be timed for this question, or None when it can."""
    if config is None:
        return "The layer step needs a model configuration; manual shapes and sweeps have no layer."
    if config.is_moe:
        return MOE_REASON
    if config.tensor_model_parallel_size > 1:
        return TP_REASON
    return None


def layer_cell(mode: str, precision: str, status: str, *, ms: float | None = None,
               stats: dict[str, Any] | None = None, reason: str = "",
               measured_at: str | None = None, run_id: str | None = None,
               kernel_ms: float | None = None) -> dict[str, Any]:
    """One layer cell in the proposed result form (``doc["layer"]`` is a list of these).
    ``kernel_ms``: the cross-check's profiled kernel time of the step (graph replays only)."""
    cell: dict[str, Any] = {"mode": mode, "precision": precision, "status": status}
    if status == "measured":
        cell.update(ms=ms, stats=stats or {})
        if kernel_ms is not None:
            cell["kernel_ms"] = kernel_ms
        if measured_at is not None:
            cell["measured_at"] = measured_at
    else:
        cell["reason"] = reason
    if run_id is not None:
        cell["run_id"] = run_id
    return cell


@dataclasses.dataclass(frozen=True)
class StepRow:
    """One precision's step against BF16, with the GEMMs' own speedup beside it."""

    mode: str
    precision: str
    step_ms: float | None
    step_speedup: float | None
    gemm_ms: float | None
    gemm_speedup: float | None
    #: Amdahl's prediction from the GEMM share and the GEMM speedup (None when either is missing).
    amdahl_speedup: float | None
    reason: str = ""


@dataclasses.dataclass(frozen=True)
class StepSummary:
    mode: str
    bf16_step_ms: float | None
    bf16_gemm_ms: float | None
    #: Sum of the layer's GEMM times (BF16, autocast) / the BF16 step time.
    gemm_share: float | None
    rows: tuple[StepRow, ...]

    def sentence(self, precision: str) -> str | None:
        """"GEMMs get 1.70x, the step gets 1.40x because GEMMs are 72% of the BF16 step"."""
        row = next((r for r in self.rows if r.precision == precision), None)
        if row is None or row.gemm_speedup is None or row.step_speedup is None or self.gemm_share is None:
            return None
        name = PRECISIONS[precision].display
        return (
            f"With {name}, the layer's GEMMs get {row.gemm_speedup:.2f}x and the whole step "
            f"{row.step_speedup:.2f}x, because GEMMs are {self.gemm_share:.0%} of the BF16 step "
            f"(Amdahl's law predicts {row.amdahl_speedup:.2f}x from those two numbers)."
        )


def amdahl(share: float, speedup: float) -> float:
    """Whole-step speedup when a ``share`` of the time gets ``speedup`` and the rest none."""
    if not 0 < share <= 1 or speedup <= 0:
        raise StepError("amdahl", f"needs 0 < share <= 1 and speedup > 0, got {share!r}, {speedup!r}")
    return 1.0 / ((1.0 - share) + share / speedup)


def summarize(layer_cells: Iterable[Mapping[str, Any]], gemm_ms: Mapping[str, float | None], *,
              mode: str = "layer") -> StepSummary:
    """The step table of one layer mode.

    ``gemm_ms`` maps each precision to the sum of the layer's 12 autocast GEMM times from the same
    result (the report computes it; None when a GEMM of it was not measured). Only cells of one
    result document may be combined here: speedups are never taken across runs.
    """
    if mode not in LAYER_MODES:
        raise StepError("mode", f"{mode!r} is not one of {', '.join(LAYER_MODES)}")
    cells = {c["precision"]: c for c in layer_cells if c["mode"] == mode}
    base = cells.get(BASELINE)
    bf16_step = base["ms"] if base is not None and base["status"] == "measured" else None
    bf16_gemm = gemm_ms.get(BASELINE)
    share = bf16_gemm / bf16_step if bf16_step and bf16_gemm else None
    rows = []
    for precision, cell in cells.items():
        step = cell["ms"] if cell["status"] == "measured" else None
        g = gemm_ms.get(precision)
        step_speedup = bf16_step / step if bf16_step and step else None
        gemm_speedup = bf16_gemm / g if bf16_gemm and g else None
        predicted = amdahl(share, gemm_speedup) if share and gemm_speedup and share <= 1 else None
        rows.append(StepRow(mode, precision, step, step_speedup, g, gemm_speedup, predicted,
                            cell.get("reason", "")))
    return StepSummary(mode, bf16_step, bf16_gemm, share, tuple(rows))
