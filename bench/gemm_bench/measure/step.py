"""The training step, not only its GEMMs: layer-step cells, their checks, and Amdahl's law.

Why: "GEMMs get 2x but my step only 1.35x" is the most common FP8 question. Timing a whole
``te.TransformerLayer`` forward + backward (:mod:`gemm_bench.measure.backends.layer_step`) beside the
layer's GEMMs (12 for a dense layer) lets the report state Amdahl's law with the reader's own numbers: the GEMM share
of the BF16 step bounds what a faster GEMM can give the step.

Pure (no torch): which configs the layer step can time and why not, the result cells (proposed
as ``doc["layer"]``) and the summary the report renders. What a valid cell is belongs to the
schema (:mod:`gemm_bench.results.step_schema`).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Protocol

from gemm_bench.question.config import ModelConfig
from gemm_bench.question.precisions import BASELINE, LAYER_MODES, PRECISIONS
from gemm_bench.question.step_plan import (  # noqa: F401 (re-exported: the step's vocabulary)
    MLA_SP_REASON,
    ROUTING_NAMES,
    ROUTINGS,
    SPLIT_ALIGN,
    routing_splits,
    routings,
    unsupported_reason,
)
from gemm_bench.results.breakdown import IDLE_RULE, breakdown_block, rounds_from_kernels
from gemm_bench.results.step_schema import StepError

WHAT_IS_TIMED = (
    "One transformer layer as one rank runs it, BF16 parameters, no bias, no dropout, micro-batch x "
    "sequence tokens: forward + backward in one timed region, L2 flushed before it. A dense model is "
    "a te.TransformerLayer (LayerNorm, fused QKV, TE's default attention backend with a causal mask, "
    "output projection, MLP: SwiGLU when the MLP is gated, else GELU); at tensor-parallel size TP it "
    "is the rank's shard (heads, KV groups and FFN divided by TP), measured on one GPU. A mixture of "
    "experts is TE's attention, a LayerNorm, the router (a BF16 GEMM, softmax and top-k), the rank's "
    "local experts as two te.GroupedLinear with the token gather before and the weighted scatter "
    "after them, and the shared experts as te.Linear; multi-latent attention is its real down and "
    "up projections (te.Linear) around TE's attention with the Q/K and V head sizes of the config. "
    "layer: called eagerly, as an eager training loop runs it (host work included wherever the GPU "
    "waits for it); layer-graphed: the same region captured as one CUDA graph and its replays timed "
    "(the GPU's time; the same group's eager rounds give layer). Excluded: optimizer step, "
    "embedding and loss, weight-quantization caching across micro-batches, and every collective "
    "(tensor-parallel all-reduces or all-gathers and reduce-scatters, expert-parallel all-to-alls, "
    "gradient all-reduce), whose bytes per step are stated beside the time."
)

#: An NVLink 4 link, each direction (H100 and H200 SXM: 900 GB/s bidirectional, NVIDIA's data
#: sheets): the link the page's collective line is drawn for. A roofline, never a measurement.
NVLINK4_GB_S = 450.0
#: GPUs one NVLink domain joins (an HGX H100/H200 node): a larger group crosses the network.
NVLINK_DOMAIN = 8
#: Bytes of one BF16 activation element: what the collectives move.
ACTIVATION_BYTES = 2

@dataclasses.dataclass(frozen=True)
class Collective:
    """One kind of collective a rank's step runs (and the one-GPU step does not)."""

    name: str
    group: str
    #: GPUs in the group (TP or EP size).
    size: int
    count: int
    #: Bytes of the full tensor each call operates on (the all-reduced or gathered activation).
    tensor_bytes: int
    #: Bytes one rank sends over the link per call (ring algorithms).
    sent_bytes: int

    @property
    def step_sent_bytes(self) -> int:
        return self.count * self.sent_bytes

    def floor_ms(self, link_gb_s: float = NVLINK4_GB_S) -> float:
        """The least time this collective's calls in one step take on one link of ``link_gb_s``
        (each direction): bytes sent / bandwidth, no latency, no overlap with compute."""
        return self.step_sent_bytes / (link_gb_s * 1e9) * 1e3


def collectives(config: ModelConfig) -> list[Collective]:
    """The collectives one rank runs per layer step (forward + backward), in BF16 activations.

    Tensor parallel (TP > 1): without sequence parallelism, an all-reduce after the attention
    output and after the MLP down projection in the forward, and of the input gradient of QKV and
    of MLP up in the backward (4 per step, ``2 (TP-1)/TP`` of the tensor sent each); with it, an
    all-gather and a reduce-scatter in place of each (8 per step, ``(TP-1)/TP`` each: the same
    bytes). Expert parallel (EP > 1): an all-to-all dispatch and combine of the rank's routed
    tokens in the forward and both again in the backward, ``(EP-1)/EP`` of them leaving the rank
    under balanced routing. The data-parallel gradient all-reduce is not counted (it overlaps the
    backward and is per weight, not per token).
    """
    out: list[Collective] = []
    tp = config.tensor_model_parallel_size
    activation = config.tokens * config.hidden_size * ACTIVATION_BYTES
    if tp > 1:
        if config.sequence_parallel_on:
            share = activation * (tp - 1) // tp
            out += [Collective("all-gather", f"TP {tp}", tp, 4, activation, share),
                    Collective("reduce-scatter", f"TP {tp}", tp, 4, activation, share)]
        else:
            out.append(Collective("all-reduce", f"TP {tp}", tp, 4, activation, 2 * activation * (tp - 1) // tp))
    ep = config.expert_model_parallel_size
    if config.is_moe and ep > 1:
        routed = config.tokens * config.moe_router_topk * config.hidden_size * ACTIVATION_BYTES
        out.append(Collective("all-to-all", f"EP {ep}", ep, 4, routed, routed * (ep - 1) // ep))
    return out


def collective_floor_ms(config: ModelConfig, link_gb_s: float = NVLINK4_GB_S) -> float | None:
    """The least time the step's collectives take on one link of ``link_gb_s`` (each direction):
    bytes sent / bandwidth, no latency, no overlap with compute. None when there are none."""
    colls = collectives(config)
    return sum(c.floor_ms(link_gb_s) for c in colls) if colls else None


def step_scope_sentence(config: ModelConfig) -> str | None:
    """What a rank's one-GPU step leaves out, in one sentence with the bytes and the link floor, for
    a page beside the step's numbers; None for a dense model on one GPU (nothing left out)."""
    parts = left_out(config)
    if not parts:
        return None
    text = "The step is one rank's layer on one GPU: " + "; ".join(parts) + "."
    for c in collectives(config):
        mb = c.step_sent_bytes / 1e6
        text += f" The {c.name}s send {mb:,.0f} MB per rank per step"
        if c.size <= NVLINK_DOMAIN:
            text += (f": at least {c.floor_ms():.2f} ms on an NVLink 4 link ({NVLINK4_GB_S:.0f} GB/s each way; "
                     "a bandwidth floor, not a measurement, which overlap with compute can hide in part).")
        else:
            text += (f"; a group of {c.size} GPUs spans more than one {NVLINK_DOMAIN}-GPU NVLink domain, so the "
                     "network between nodes sets their time (not measured here).")
    return text


def left_out(config: ModelConfig) -> list[str]:
    """What the one-GPU step of this config leaves out of the step it stands for, exactly."""
    out = []
    if collectives(config):
        names = ", ".join(f"{c.count} {c.name} ({c.group})" for c in collectives(config))
        out.append(f"collectives not run: {names} per step")
    if config.tensor_model_parallel_size > 1 and config.sequence_parallel_on:
        out.append("LayerNorms and residual adds run on all tokens of the micro-batch, where sequence "
                   f"parallelism runs them on 1/{config.tensor_model_parallel_size} of them")
    if config.is_moe:
        out.append("tokens are routed by a fixed assignment (the router's scores weight the experts' "
                   "outputs, so its backward runs, but do not choose the experts)")
        if config.expert_model_parallel_size > 1:
            out.append("the rank's experts process copies of its own tokens in place of tokens "
                       "received from other ranks (the same GEMM shapes)")
    if config.is_mla:
        out.append("rotary embedding is not applied to the rope dimensions (they are projected and "
                   "attended over, not rotated)")
    return out


def layer_cell(mode: str, precision: str, status: str, *, ms: float | None = None,
               stats: dict[str, Any] | None = None, reason: str = "",
               measured_at: str | None = None, run_id: str | None = None,
               kernel_ms: float | None = None, kernel_ratio: float | None = None,
               routing: str = "balanced", breakdown: dict[str, Any] | None = None) -> dict[str, Any]:
    """One layer cell in the proposed result form (``doc["layer"]`` is a list of these).
    ``kernel_ms``: the cross-check's profiled kernel time of the step (graph replays only), and
    ``kernel_ratio`` the profiled rounds' event median over it;
    ``routing``: a mixture of experts' routing (:data:`ROUTINGS`), written only when not balanced;
    ``breakdown``: where the step's time goes (:func:`step_breakdown`)."""
    cell: dict[str, Any] = {"mode": mode, "precision": precision, "status": status}
    if routing != "balanced":
        cell["routing"] = routing
    if status == "measured":
        cell.update(ms=ms, stats=stats or {})
        if kernel_ms is not None:
            cell["kernel_ms"] = kernel_ms
        if kernel_ratio is not None:
            cell["kernel_ratio"] = kernel_ratio
        if measured_at is not None:
            cell["measured_at"] = measured_at
        if breakdown is not None:
            cell["breakdown"] = breakdown
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


class StepCell(Protocol):
    """A layer-step cell as the report reads it (:class:`gemm_bench.results.typed.LayerCell`)."""

    @property
    def mode(self) -> str: ...
    @property
    def precision(self) -> str: ...
    @property
    def routing(self) -> str: ...
    @property
    def status(self) -> str: ...
    @property
    def ms(self) -> float | None: ...
    @property
    def reason(self) -> str: ...


def summarize(layer_cells: Iterable[StepCell], gemm_ms: Mapping[str, float | None], *,
              mode: str = "layer") -> StepSummary:
    """The step table of one layer mode.

    ``gemm_ms`` maps each precision to the sum of the layer's autocast GEMM times from the same
    result (the report computes it; None when a GEMM of it was not measured). Only cells of one
    result may be combined here: speedups are never taken across runs.
    """
    if mode not in LAYER_MODES:
        raise StepError("mode", f"{mode!r} is not one of {', '.join(LAYER_MODES)}")
    cells = {c.precision: c for c in layer_cells if c.mode == mode and c.routing == "balanced"}
    base = cells.get(BASELINE)
    bf16_step = base.ms if base is not None and base.status == "measured" else None
    bf16_gemm = gemm_ms.get(BASELINE)
    share = bf16_gemm / bf16_step if bf16_step and bf16_gemm else None
    rows = []
    for precision, cell in cells.items():
        step = cell.ms if cell.status == "measured" else None
        g = gemm_ms.get(precision)
        step_speedup = bf16_step / step if bf16_step and step else None
        gemm_speedup = bf16_gemm / g if bf16_gemm and g else None
        predicted = amdahl(share, gemm_speedup) if share and gemm_speedup and share <= 1 else None
        rows.append(StepRow(mode, precision, step, step_speedup, g, gemm_speedup, predicted, cell.reason))
    return StepSummary(mode, bf16_step, bf16_gemm, share, tuple(rows))


#: How each step cell's ``breakdown`` is made (stored in every run's method).
BREAKDOWN_METHOD = ("each layer step's GPU time per kind of kernel, from the kernels of its profiled rounds (the "
                    "cross-check's first batch of graph replays), classified by name into GEMMs; quantization, casts, "
                    "amax and transposes; attention; normalization, activations and other elementwise work; "
                    "optimizer; other (names kept) by the rules of gemm_bench.results.kernel_kinds; " + IDLE_RULE)

#: Where a breakdown's kernels come from, per how the step was published.
BREAKDOWN_SOURCES = {
    "graph replays": "the profiled graph replays (the first batch of timed rounds)",
    "eager rounds": "the profiled eager rounds (the first batch of timed rounds)",
    "graph replays for eager": ("the profiled graph replays of the same group (the same kernels the eager step "
                                "launches); idle is the eager step's time minus their busy time"),
}


def step_breakdown(step_ms: float, rounds: Sequence[Sequence[tuple[str, int, int]]] | None,
                   source: str) -> dict[str, Any] | None:
    """The ``breakdown`` block of a step cell of ``step_ms`` from its profiled rounds' kernels (each
    ``(name, start ns, duration ns)``), or None when no round was profiled (no cross-check, or a trace
    that could not be split per region). ``source``: a key of :data:`BREAKDOWN_SOURCES`."""
    if not rounds:
        return None
    return breakdown_block(step_ms, rounds_from_kernels(rounds), source=BREAKDOWN_SOURCES[source])


def plan_step_cell(mode: str, step: str, status: str, *, reason: str = "") -> dict[str, Any]:
    """A precision plan's step cell that was not measured (``step``: ``all-bf16``, ``all-fp8`` or
    ``plan``); a measured one is a :func:`layer_cell` with ``step`` in place of ``precision``."""
    return {"step": step, "mode": mode, "status": status, "reason": reason}
