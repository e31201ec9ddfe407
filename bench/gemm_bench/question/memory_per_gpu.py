"""Memory per GPU of the run a layout describes (issue 41), composed from the parts measured on the GPU.

Pure arithmetic on :class:`~gemm_bench.question.model_step.MemoryParts` (one measured layer of the
question's TP/EP shard, its embedding and output-layer shards, the optimizer's bytes per parameter)
and a :class:`~gemm_bench.question.layout.ParallelLayout`. Per GPU, for the most loaded pipeline stage:

* **weights**: BF16, the stage's ``ceil(L / PP)`` layers plus the embedding (first stage) or the output
  layer (last stage); one stage holds both at PP 1. FSDP divides them by the sharding group (DP x CP)
  and adds one layer's unsharded weights as a transient (the layer being gathered).
* **FP8 copies**: ``layer_fp8_weights`` per layer. With FP8 parameter gather (FP8 recipes only) the
  BF16 layer weights are not kept: the FP8 copy is the primary weight, the measured copy's bytes (on
  Hopper its data and its transpose, about 2 bytes per parameter: Transformer Engine keeps both for
  the forward and the backward GEMMs; ``tests/test_gpu_fp8_primary.py`` holds an FP8 primary layer's
  bytes to at most the measured copy's on the GPU: equal to 0.1% on an H200, except a mixture of experts
  under FP8 Delayed, whose copy holds 7% more than the primary weights, so the sum is conservative there).
* **gradients**: FP32 main gradients, 4 bytes per parameter (2 with BF16 gradient reduce), divided by
  DP x CP under ``optimizer+grads`` and ``fsdp``.
* **optimizer state**: ``state_per_param - 4`` bytes per parameter (FP32 master weight and two
  moments), divided by DP x CP under every sharding but ``none`` (Megatron's distributed optimizer
  shards over the data-parallel group with context parallelism).
* **activations** of the first stage: the measured layer's ``A`` (full sequence, the TP shard without
  sequence parallelism, no recomputation) x ``MBS / MBS_measured`` / CP x SP factor x recompute factor,
  for the stage's layers and the micro-batches in flight, counted as Megatron's
  ``theoretical_memory_usage.py`` counts them: ``PP x min(1, G / PP)`` with 1F1B, ``PP x (1 + (PP - 1) /
  (PP x v))`` with ``v`` virtual stages. SP factor (Korthikanti et al. 2022, per layer ``sbh(10 + 24/t
  + 5as/(ht))`` without and ``sbh(34/t + 5as/(ht))`` with sequence parallelism; fused attention stores
  no ``5as/h`` term): ``(34/t) / (10 + 24/t)``. Selective recomputation drops only the ``5as/h`` term,
  already absent with fused attention: factor 1. Full recomputation keeps each layer's input, ``2sbh``
  (``2sbh/t`` with SP), plus one layer's full activations as a transient during its backward.
* **transient**: the larger of the output layer's logits peak (last stage) and a layer's backward
  extra, both scaled with the tokens (MBS / CP), plus FSDP's and full recomputation's transients.

The stage split and the expert-parallel weight factor are :func:`~gemm_bench.question.stage_shape.stage_shape`'s,
the same the layout's step (:mod:`gemm_bench.question.layout_step`) composes its time with. Expert parallelism
other than the measured one scales the layer's weights and parameters by the parameter count of a layer
at that EP (:func:`~gemm_bench.question.model_step.layer_parameters`); a
balanced router gives each EP rank the same number of routed tokens, so activations do not change.
Collectives' buffers (all-gather, reduce-scatter) and the allocator's fragmentation are not counted.
"""

from __future__ import annotations

import dataclasses

from gemm_bench.question.config import ConfigError, ModelConfig
from gemm_bench.question.layout import ParallelLayout, recomputed_layers
from gemm_bench.question.model_step import MemoryParts, vocab_parameters
from gemm_bench.question.stage_shape import stage_shape

MAIN_GRAD_BYTES = 4
#: Korthikanti et al.'s per-layer activation coefficients (units of sbh bytes, BF16, fused attention).
_NO_SP_COEFF = (10.0, 24.0)  # 10 + 24/t
_SP_COEFF = 34.0  # 34/t
_INPUT_COEFF = 2.0  # the layer input kept by full recomputation: 2sbh (2sbh/t with SP)


@dataclasses.dataclass(frozen=True)
class MemoryPerGpu:
    """One GPU's peak memory for a layout and a recipe, by what it is made of (bytes)."""

    stage: str  # "only" (PP 1), "first" or "last": the most loaded pipeline stage
    layers: int
    weights: int
    fp8_weights: int
    gradients: int
    optimizer_state: int
    activations: int
    transient: int
    capacity: int

    @property
    def total(self) -> int:
        return (self.weights + self.fp8_weights + self.gradients + self.optimizer_state + self.activations
                + self.transient)

    @property
    def fits(self) -> bool:
        return self.total <= self.capacity

    @property
    def headroom(self) -> int:
        """Capacity left (negative: what is missing)."""
        return self.capacity - self.total


def sp_factor(tp: int, sp: bool) -> float:
    """Activations with sequence parallelism over those without: ``(34/t) / (10 + 24/t)``; 1 without SP."""
    if not sp or tp == 1:
        return 1.0
    return (_SP_COEFF / tp) / (_NO_SP_COEFF[0] + _NO_SP_COEFF[1] / tp)


def full_recompute_factor(tp: int, sp: bool) -> float:
    """A fully recomputed layer's stored activations over the measured layer's (no SP): its input,
    ``2 / (10 + 24/t)``, or ``(2/t) / (10 + 24/t)`` when sequence parallelism splits it."""
    return (_INPUT_COEFF / (tp if sp and tp > 1 else 1)) / (_NO_SP_COEFF[0] + _NO_SP_COEFF[1] / tp)


def in_flight(layout: ParallelLayout) -> float:
    """Micro-batches' worth of a stage's activations the first stage holds (Megatron's count)."""
    pp = layout.pp
    if pp == 1:
        return 1.0
    if layout.vpp is not None and layout.vpp > 1:
        return pp * (1 + (pp - 1) / (pp * layout.vpp))
    return pp * min(1.0, layout.microbatches / pp)


def memory_per_gpu(parts: MemoryParts, layer_params: int, config: ModelConfig, layout: ParallelLayout, *,
                   capacity: int, precision: str = "bf16") -> MemoryPerGpu:
    """The most loaded stage's memory per GPU (see the module's docstring for every term)."""
    shape = stage_shape(layout, config)
    weight_scale = shape.weight_scale
    params_layer = layer_params * weight_scale
    bf16_layer = parts.layer_weights * weight_scale
    fp8_layer = parts.layer_fp8_weights * weight_scale
    fp8_primary = layout.fp8_primary(precision)
    shard = layout.dp * layout.cp
    tokens = layout.micro_batch_size / config.micro_batch_size / layout.cp
    vocab = vocab_parameters(config) if config.padded_vocab_size is not None else 0

    act_layer = parts.layer_activations * tokens * sp_factor(layout.tp, bool(layout.sp))
    recomputed_layer = parts.layer_activations * tokens * full_recompute_factor(layout.tp, bool(layout.sp))
    extra = parts.layer_backward_extra * tokens

    results = []
    for stage in shape.stages:
        name, layers, has_head = stage.name, stage.layers, stage.head
        vocab_weights = (parts.embedding_weights if stage.embedding else 0) + (parts.head_weights if has_head else 0)
        params = layers * params_layer + vocab * stage.vocab_ends
        layer_weights = layers * (fp8_layer if fp8_primary else bf16_layer)
        weights = layer_weights + vocab_weights
        fp8 = 0 if fp8_primary else layers * fp8_layer
        transient = max(parts.head_transient * tokens if has_head else 0, extra)
        if layout.sharding == "fsdp":
            weights = weights / shard
            transient += bf16_layer
        grads = layout.grad_bytes * params / (shard if layout.sharding in ("optimizer+grads", "fsdp") else 1)
        state = (parts.state_per_param - MAIN_GRAD_BYTES) * params / (shard if layout.sharding != "none" else 1)
        flight = in_flight(layout) if name in ("first", "only") else 1.0
        if layout.recompute == "full":
            recomputed = recomputed_layers(layout, layers)
            per_mb = recomputed * recomputed_layer + (layers - recomputed) * act_layer
            transient += act_layer  # the layer being recomputed
        else:
            per_mb = layers * act_layer
        results.append(MemoryPerGpu(name, layers, round(weights), round(fp8), round(grads), round(state),
                                    round(per_mb * flight), round(transient), capacity))
    return max(results, key=lambda r: r.total)


#: What a run that does not fit could change, in the order a reader would try it.
REMEDIES: tuple[str, ...] = ("selective recompute", "full recompute", "distributed optimizer",
                             "optimizer+grads", "fsdp", "CP x2", "PP x2")


def _remedy(layout: ParallelLayout, name: str) -> ParallelLayout | None:
    """The layout with one remedy applied (the same GPUs), or None where it does not apply."""
    order = ("none", "optimizer", "optimizer+grads", "fsdp")
    if name in ("selective recompute", "full recompute"):
        target = name.split()[0]
        if layout.recompute == target or (target == "selective" and layout.recompute == "full"):
            return None
        return dataclasses.replace(layout, recompute=target, recompute_method=None, recompute_num_layers=None)
    if name in ("distributed optimizer", "optimizer+grads", "fsdp"):
        target = "optimizer" if name == "distributed optimizer" else name
        if order.index(layout.sharding) >= order.index(target):
            return None
        return dataclasses.replace(layout, sharding=target)
    if layout.dp % 2:
        return None
    if name == "CP x2":
        return dataclasses.replace(layout, cp=layout.cp * 2, global_batch_size=None,
                                   num_microbatches=layout.microbatches)
    return dataclasses.replace(layout, pp=layout.pp * 2, global_batch_size=None, num_microbatches=layout.microbatches)


def what_would_fit(parts: MemoryParts, layer_params: int, config: ModelConfig, layout: ParallelLayout, *,
                   capacity: int, precision: str = "bf16") -> tuple[str, MemoryPerGpu] | None:
    """The first remedy of :data:`REMEDIES` that changes the total and makes it fit, with its memory."""
    now = memory_per_gpu(parts, layer_params, config, layout, capacity=capacity, precision=precision)
    for name in REMEDIES:
        changed = _remedy(layout, name)
        if changed is None:
            continue
        try:
            result = memory_per_gpu(parts, layer_params, config, changed, capacity=capacity, precision=precision)
        except ConfigError:
            continue
        if result.total != now.total and result.fits:
            return name, result
    return None


def largest_micro_batch(parts: MemoryParts, layer_params: int, config: ModelConfig, layout: ParallelLayout, *,
                        capacity: int, precision: str = "bf16", limit: int = 64) -> int:
    """The largest micro-batch (sequences) whose memory per GPU fits, G kept; 0 when not even 1 does.
    Activations and transients grow with the micro-batch, the rest does not."""
    best = 0
    for mbs in range(1, limit + 1):
        trial = dataclasses.replace(layout, micro_batch_size=mbs, global_batch_size=None,
                                    num_microbatches=layout.microbatches)
        if not memory_per_gpu(parts, layer_params, config, trial, capacity=capacity, precision=precision).fits:
            break
        best = mbs
    return best
