"""The model's step, composed from measured parts: FLOPs, tokens/s, MFU and memory (pure).

Why: the reader trains a model, not a layer. One rank's optimizer step over G micro-batches is
the embedding, the rank's layers, the final norm with the output layer and the loss, their
backward, and the optimizer. On one GPU those parts are measured as regions of their own
(:mod:`gemm_bench.measure.backends.model_parts`); this module composes them by exact arithmetic::

    step(G) = G x (embedding + head) + L x (first + (G - 1) x cached) + optimizer(P)
    per micro-batch = step(G) / G

where ``first`` is a layer's forward + backward that quantizes its weights (Transformer Engine's
``is_first_microbatch=True``: what the site's layer step times on every call), ``cached`` one
that reuses the FP8 weights quantized by the first (``is_first_microbatch=False``), ``head`` the
final norm, the BF16 output layer (outside the recipe, as Megatron-LM keeps it by default) and the
FP32 cross-entropy, and ``optimizer(P)`` the step over the rank's P parameters (a straight line
through two measured sizes: the fused AdamW is memory-bound, linear in P). Communication is not
measured on one GPU and not composed; the layer step's NVLink floor stays beside it. The layer is
the layer step's, dense or not: a mixture of experts' (the rank's local experts, experts / EP, as
grouped GEMMs, the shared experts, the BF16 router) and multi-latent attention's take
``is_first_microbatch`` in every Transformer Engine module that holds weights, so ``first`` and
``cached`` mean the same for every model. L is :attr:`ModelConfig.measured_layers`: a mixture of
experts' leading dense layers (DeepSeek-V3's three) are not the measured layer and are left out of
time, FLOPs, parameters and memory alike.

FLOPs are counted as Megatron-LM counts them (``num_floating_point_operations`` in
``megatron/training/training.py``): 6 x tokens x (the layer's GEMM weights, attention's two
causal products at half the square, the logits), so model TFLOP/s and MFU here read as Megatron's
and torchtitan's published tables do. Nothing here imports torch.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping, Sequence
from fractions import Fraction

from gemm_bench.question.config import ConfigError, ModelConfig
from gemm_bench.question.shapes import layer_gemms
from gemm_bench.question.step_plan import unsupported_reason as layer_step_unsupported

#: The parts of the model's step, each measured as its own region.
PARTS: tuple[str, ...] = ("embedding", "layer-first", "layer-cached", "head", "optimizer")
PART_NAMES = {
    "embedding": "embedding forward + backward (the rank's vocabulary shard, BF16)",
    "layer-first": "one layer's forward + backward quantizing its weights (is_first_microbatch=True)",
    "layer-cached": "one layer's forward + backward on the FP8 weights cached by the first micro-batch "
                    "(is_first_microbatch=False)",
    "head": "final norm, BF16 output layer and FP32 cross-entropy, forward + backward",
    "optimizer": "zeroing the FP32 main gradients, fused AdamW on FP32 master weights, copy to the BF16 weights",
}
#: Bytes per parameter the composition adds beside the measured weights (Megatron-LM's mixed
#: precision without the distributed optimizer): the FP32 main gradient (4) and the optimizer's
#: FP32 master weight, first and second moments (4 + 4 + 4). The GPU measures both (the
#: optimizer part's allocator delta per parameter); these are the fallbacks and the check.
MAIN_GRAD_BYTES = 4
OPTIMIZER_STATE_BYTES = 12
BF16_BYTES = 2

WHAT_IS_COMPOSED = (
    "One rank's optimizer step over G micro-batches, per micro-batch: G x (embedding + final norm, BF16 output "
    "layer and FP32 cross-entropy) + L x (one layer's forward + backward that quantizes its weights + (G - 1) x "
    "the same on the cached FP8 weights) + the optimizer step over the rank's parameters, divided by G; every "
    "part measured on the GPU as its own region (GPU time). The output layer stays BF16 under every recipe, as "
    "Megatron-LM keeps it by default. A mixture of experts' layer routes its tokens evenly over the rank's local "
    "experts (balanced routing); leading dense layers of a mixture of experts are not the measured layer and are "
    "left out. Excluded: every collective (tensor-, expert-, pipeline- and data-parallel), pipeline bubbles and "
    "the data loader."
)


class ModelStepError(ConfigError):
    """A model step that cannot be composed (names the field or part at fault)."""


def unsupported_reason(config: ModelConfig | None) -> str | None:
    """Why this question has no model step, or None when it has one: no model, no vocabulary, or a
    layer the layer step cannot build (its layer is the model step's). Dense, mixture-of-experts
    and multi-latent-attention layers all have one: every Transformer Engine module they are built
    from takes ``is_first_microbatch`` and ``fuse_wgrad_accumulation``."""
    if config is None:
        return "The model's step needs a model configuration; manual shapes and sweeps have no model."
    if config.vocab_size is None:
        return ("The model's step needs the vocabulary size to size the embedding and the output layer: "
                "give vocab-size (presets and Hugging Face configs carry it).")
    layer = layer_step_unsupported(config)
    if layer is not None:
        return f"The model's step is built from the layer step's layer, which is not measured here: {layer}"
    return None


# ------------------------------------------------------------------------------------ FLOPs
def megatron_flops(config: ModelConfig, *, layers: int | None = None, micro_batches: int = 1) -> Fraction:
    """Model FLOPs of ``micro_batches`` micro-batches of the whole model (all TP ranks), exactly as
    Megatron-LM's ``num_floating_point_operations`` counts them (forward + backward = 3 x forward,
    2 FLOPs per multiply-add; attention's QK^T and softmax-times-V at half the s x s square for the
    causal mask; the logits over the padded vocabulary; no norms, softmax or optimizer).

    ``layers``: the transformer layers counted (default: the layers the measured layer stands for,
    :attr:`ModelConfig.measured_layers`, so a DeepSeek-V3's three dense layers, not measured, are not
    counted either). Exact (a :class:`~fractions.Fraction`): an odd sequence length halves unevenly.
    """
    if config.padded_vocab_size is None:
        raise ModelStepError("vocab_size", "is needed to count the output layer's FLOPs")
    n_layers = config.measured_layers if layers is None else layers
    h, s = config.hidden_size, config.seq_length
    tokens = micro_batches * config.micro_batch_size * s
    fwd_bwd_fma = 3 * 2
    ffn_factor = 3 if config.swiglu else 2
    if config.is_moe:
        mlp = config.expert_ffn_hidden_size * config.moe_router_topk * ffn_factor
        mlp += (config.moe_shared_expert_intermediate_size or 0) * ffn_factor
    else:
        mlp = config.ffn_hidden_size * ffn_factor
    heads = config.num_attention_heads
    if config.is_mla:
        qk, rope, v = config.qk_head_dim or 0, config.qk_pos_emb_head_dim or 0, config.v_head_dim or 0
        kv_rank = config.kv_lora_rank or 0
        if config.q_lora_rank is None:
            q_term = h * heads * (qk + rope)
        else:
            q_term = config.q_lora_rank * (h + heads * (qk + rope) + 1)
        attention = (q_term + kv_rank * (h + heads * (qk + v) + 1) + h * rope + heads * v * h
                     + Fraction(s * heads * (qk + rope), 2) + Fraction(s * heads * v, 2))
    else:
        q = config.head_dim * heads
        kv = config.head_dim * config.query_groups
        attention = h * (q + 2 * kv) + Fraction(q * s, 2) * 2 + q * h
    per_token = (fwd_bwd_fma * h * mlp * n_layers + fwd_bwd_fma * attention * n_layers
                 + fwd_bwd_fma * h * config.padded_vocab_size)
    return tokens * Fraction(per_token)


def rank_flops(config: ModelConfig) -> Fraction:
    """The model FLOPs one rank carries per micro-batch: Megatron's count over TP (every layer GEMM
    and the vocabulary-parallel output layer are split over the TP ranks; an expert-parallel rank
    computes its own micro-batch's share of the routed tokens, so EP divides nothing)."""
    return megatron_flops(config) / config.tensor_model_parallel_size


# ------------------------------------------------------------------------------ parameters
def layer_parameters(config: ModelConfig) -> int:
    """Parameters of one rank's layer as the measured layer is built: every GEMM's weight (Fprop
    K x N per group) and the LayerNorms' weight and bias (two of the hidden size; MLA's latent
    norms; the GEMMs have no bias). The GPU counts the built layer too; this is the count where it
    did not."""
    weights = sum(g.k * g.n * g.groups for g in layer_gemms(config) if g.pass_ == "fprop")
    norms = 2 * 2 * config.hidden_size
    if config.is_mla:
        norms += 2 * ((config.kv_lora_rank or 0) + (config.q_lora_rank or 0))
    if config.is_moe:
        weights += (config.num_experts or 1) * config.hidden_size  # the router, in BF16
    return weights + norms


def vocab_parameters(config: ModelConfig) -> int:
    """Parameters of one rank's embedding or output layer (vocabulary-parallel: V_padded / TP rows)."""
    if config.padded_vocab_size is None:
        raise ModelStepError("vocab_size", "is needed to size the embedding and the output layer")
    return config.padded_vocab_size // config.tensor_model_parallel_size * config.hidden_size


def rank_parameters(config: ModelConfig, layer_params: int | None = None, *, layers: int | None = None) -> int:
    """All parameters one rank updates: its layers, embedding, output layer (untied, as Megatron-LM's
    Llama recipes run) and final norm (a LayerNorm's weight and bias, as the measured head builds it
    and as :func:`layer_parameters` counts the layer's norms). ``layer_params``: the GPU's count of
    one built layer."""
    per_layer = layer_parameters(config) if layer_params is None else layer_params
    n_layers = config.measured_layers if layers is None else layers
    return n_layers * per_layer + 2 * vocab_parameters(config) + 2 * config.hidden_size


# ------------------------------------------------------------------------------------ time
@dataclasses.dataclass(frozen=True)
class OptimizerLine:
    """The optimizer part: ms = intercept + slope x parameters, through two measured sizes."""

    params: tuple[int, int]
    ms: tuple[float, float]

    def __post_init__(self) -> None:
        if self.params[0] == self.params[1] or min(self.params) < 1:
            raise ModelStepError("optimizer", f"needs two different positive sizes, got {self.params}")
        if not all(math.isfinite(t) and t > 0 for t in self.ms):
            raise ModelStepError("optimizer", f"needs positive times, got {self.ms}")

    @property
    def slope_ms(self) -> float:
        return (self.ms[1] - self.ms[0]) / (self.params[1] - self.params[0])

    def at(self, params: int) -> float:
        """ms of the optimizer step over ``params`` parameters, on the line through the two sizes
        (through the origin instead where the line would give no time: far below both sizes)."""
        line = self.ms[0] + self.slope_ms * (params - self.params[0])
        return line if line > 0 else self.ms[0] * params / self.params[0]


@dataclasses.dataclass(frozen=True)
class PartTimes:
    """One precision's measured parts in ms (the embedding and head are BF16 under every recipe)."""

    embedding: float
    head: float
    layer_first: float
    layer_cached: float
    #: The attention kernels' ms inside the two layer steps (their profiled breakdowns), None where a step
    #: was not profiled: what a sliding window can shorten (:func:`without_windowed_attention`).
    attention_first: float | None = None
    attention_cached: float | None = None


#: Attention sinks in words, the layout step's assumption and the model step's note alike: no stored result
#: measures them (session 20's probe did, on the H200: measurements/2026-11-29-session20).
SINKS_NOT_TIMED = ("attention sinks (a softmax offset per head: Megatron-LM's --softmax-type learnable or "
                   "off-by-one) are not timed: the layer step's attention is ordinary softmax, and sinks add "
                   "attention time to every layer")


def without_windowed_attention(parts: PartTimes, share: float) -> PartTimes | None:
    """``parts`` with the windowed ``share`` of the layers' attention taken out entirely: the fastest any
    sliding window could make the layer steps, so a bound on the speed it adds. Why: the layer step times
    full causal attention (:attr:`~gemm_bench.question.config.ModelConfig.windowed_share`); a window only
    removes attention work, never adds any, so it saves at most those layers' attention kernels. None where
    the steps' attention was not profiled."""
    if parts.attention_first is None or parts.attention_cached is None:
        return None
    return dataclasses.replace(parts, layer_first=parts.layer_first - share * parts.attention_first,
                               layer_cached=parts.layer_cached - share * parts.attention_cached)


def step_ms(parts: PartTimes, *, layers: int, microbatches: int, optimizer_ms: float) -> float:
    """One optimizer step of ``layers`` layers over G = ``microbatches`` micro-batches (module docstring)."""
    g = microbatches
    if g < 1 or layers < 0:
        raise ModelStepError("num_microbatches", f"needs G >= 1 and layers >= 0, got G={g}, layers={layers}")
    return (g * (parts.embedding + parts.head) + layers * (parts.layer_first + (g - 1) * parts.layer_cached)
            + optimizer_ms)


def per_microbatch_ms(parts: PartTimes, *, layers: int, microbatches: int, optimizer_ms: float) -> float:
    return step_ms(parts, layers=layers, microbatches=microbatches, optimizer_ms=optimizer_ms) / microbatches


def tokens_per_s_per_gpu(config: ModelConfig, ms_per_microbatch: float) -> float:
    """Tokens one GPU trains per second: a micro-batch's tokens over its time, shared by the TP
    ranks that compute it together (pipeline stages and data-parallel ranks each add their own GPUs
    and their own tokens, so they do not change the per-GPU rate, bubbles aside)."""
    if not ms_per_microbatch > 0:
        raise ModelStepError("num_microbatches", f"needs a positive time, got {ms_per_microbatch!r}")
    return config.tokens / (ms_per_microbatch * 1e-3) / config.tensor_model_parallel_size


def model_tflops_per_gpu(config: ModelConfig, ms_per_microbatch: float) -> float:
    """Model TFLOP/s per GPU (Megatron's "throughput per GPU"): the rank's FLOPs over its time."""
    return float(rank_flops(config)) / (ms_per_microbatch * 1e-3) / 1e12


# ---------------------------------------------------------------------------------- memory
@dataclasses.dataclass(frozen=True)
class MemoryParts:
    """Bytes measured with the allocator's counters on the GPU, per precision.

    ``layer_weights``: one built layer's BF16 parameters; ``layer_fp8_weights``: what stays allocated
    after a first micro-batch with ``is_first_microbatch=True`` (the cached quantized weights, 0 for
    BF16); ``layer_activations``: allocated after a layer's forward minus before it (what the backward
    keeps); ``layer_backward_extra``: the backward's peak above that; ``embedding_weights`` and
    ``head_weights``: the rank's two vocabulary shards; ``head_transient``: the peak of the head and
    loss region above its start (the BF16 and FP32 logits and their gradients); ``state_per_param``:
    the optimizer part's FP32 main gradient, master weight and moments per parameter."""

    layer_weights: int
    layer_fp8_weights: int
    layer_activations: int
    layer_backward_extra: int
    embedding_weights: int
    head_weights: int
    head_transient: int
    state_per_param: float


@dataclasses.dataclass(frozen=True)
class MemoryBreakdown:
    """The rank's peak memory of the model step, by what it is made of (bytes)."""

    weights: int
    fp8_weights: int
    activations: int
    gradients: int
    optimizer_state: int
    transient: int

    @property
    def peak(self) -> int:
        return self.weights + self.fp8_weights + self.activations + self.gradients + self.optimizer_state + (
            self.transient)

    def to_dict(self) -> dict[str, int]:
        return {**dataclasses.asdict(self), "peak": self.peak}


def memory(parts: MemoryParts, params: int, *, layers: int) -> MemoryBreakdown:
    """The model step's peak, composed: weights, FP8 copies and the stored activations of every
    layer, the gradients and optimizer state of every parameter, and the larger of the two transients
    that happen at the peak (the loss's logits at the end of the forward, or a layer's backward).
    Gradients and optimizer state split the measured per-parameter state as 4 bytes of FP32 main
    gradient and the rest."""
    state = round(parts.state_per_param * params)
    grads = min(state, MAIN_GRAD_BYTES * params)
    return MemoryBreakdown(
        weights=layers * parts.layer_weights + parts.embedding_weights + parts.head_weights,
        fp8_weights=layers * parts.layer_fp8_weights,
        activations=layers * parts.layer_activations,
        gradients=grads,
        optimizer_state=state - grads,
        transient=max(parts.head_transient, parts.layer_backward_extra),
    )


def layers_that_fit(parts: MemoryParts, capacity: int, *, layer_params: int, vocab_params: int,
                    hidden_size: int) -> int:
    """The most layers a stage holding the embedding and the output layer fits in ``capacity`` bytes
    (0 when not even one does): a pipeline stage's size for a rank whose model does not fit."""
    fixed = (parts.embedding_weights + parts.head_weights + max(parts.head_transient, parts.layer_backward_extra)
             + parts.state_per_param * (2 * vocab_params + 2 * hidden_size))  # + the final LayerNorm
    per_layer = (parts.layer_weights + parts.layer_fp8_weights + parts.layer_activations
                 + parts.state_per_param * layer_params)
    if per_layer <= 0:
        raise ModelStepError("memory", "a layer must take memory")
    return max(0, int((capacity - fixed) // per_layer))


def largest_microbatch_predicted(parts: MemoryParts, params: int, *, layers: int, capacity: int,
                                 limit: int = 1024) -> int:
    """The largest micro-batch (a multiple of the measured one) whose composed peak fits ``capacity``:
    weights, FP8 copies, gradients and state stay; activations and transients grow with the tokens."""
    one = memory(parts, params, layers=layers)
    fixed = one.weights + one.fp8_weights + one.gradients + one.optimizer_state
    per = one.activations + one.transient
    if fixed > capacity:
        return 0
    return limit if per <= 0 else max(0, min(limit, int((capacity - fixed) // per)))


# ------------------------------------------------------------------------------ the summary
@dataclasses.dataclass(frozen=True)
class ModelStepRow:
    """One precision's model step at one G."""

    precision: str
    microbatches: int
    ms_per_microbatch: float
    #: The same composed at every part's first and third quartile: the spread.
    ms_low: float
    ms_high: float
    tokens_per_s: float
    tflops: float
    mfu: float | None
    speedup: float | None
    speedup_low: float | None
    speedup_high: float | None
    layer_step_ms: float
    layer_step_speedup: float | None


def speedups(rows: Sequence[ModelStepRow], baseline: str = "bf16") -> dict[str, tuple[float, float, float]]:
    """Speedup over the baseline with its spread (median, low, high) per precision of one G."""
    base = next((r for r in rows if r.precision == baseline), None)
    if base is None:
        return {}
    return {r.precision: (base.ms_per_microbatch / r.ms_per_microbatch, base.ms_low / r.ms_high,
                          base.ms_high / r.ms_low) for r in rows}


def composed_rows(config: ModelConfig, medians: Mapping[str, PartTimes], quartiles: Mapping[str, tuple[PartTimes,
                  PartTimes]], optimizer: OptimizerLine, params: int, *, microbatches: int,
                  peak_bf16_tflops: float | None, baseline: str = "bf16") -> list[ModelStepRow]:
    """Every precision's row at G = ``microbatches``: composed medians, spread, units teams plan in."""
    layers = config.measured_layers
    opt = optimizer.at(params)
    raw = []
    for precision, parts in medians.items():
        mid = per_microbatch_ms(parts, layers=layers, microbatches=microbatches, optimizer_ms=opt)
        low_parts, high_parts = quartiles.get(precision, (parts, parts))
        low = per_microbatch_ms(low_parts, layers=layers, microbatches=microbatches, optimizer_ms=opt)
        high = per_microbatch_ms(high_parts, layers=layers, microbatches=microbatches, optimizer_ms=opt)
        raw.append((precision, mid, min(low, mid), max(high, mid), parts.layer_first))
    base = next((r for r in raw if r[0] == baseline), None)
    rows = []
    for precision, mid, low, high, layer in raw:
        tflops = model_tflops_per_gpu(config, mid)
        rows.append(ModelStepRow(
            precision, microbatches, mid, low, high, tokens_per_s_per_gpu(config, mid), tflops,
            tflops / peak_bf16_tflops if peak_bf16_tflops else None,
            base[1] / mid if base else None, base[2] / high if base else None, base[3] / low if base else None,
            layer, base[4] / layer if base else None))
    return rows
