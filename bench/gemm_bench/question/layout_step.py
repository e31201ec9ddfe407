"""The layout's step per optimizer step, communication in (issue 42, item 4): tokens per second per GPU,
MFU and the FP8-over-BF16 speedup of the run a reader launches, composed from measured parts.

Pure: no torch. The parts are the model step's (:mod:`gemm_bench.question.model_step`: one rank's
embedding, layer (first and cached micro-batch), head and optimizer, measured on one GPU as regions of
their own) and the collective costs measured on a box of several GPUs
(:class:`~gemm_bench.question.comm.CollectiveTable`, the tp-comm study's sweep). Per recipe, for the most
loaded pipeline stage (``n = ceil(L / PP)`` layers, the embedding on the first stage, the head on the
last; one stage holds both at PP 1; the slower of first and last is the stage: the split of
:func:`~gemm_bench.question.stage_shape.stage_shape`, which memory per GPU reads too)::

    f        = (layout MBS / measured MBS) / CP                     tokens of a rank's micro-batch, relative
    compute  = f x [G x (embedding and/or head) + n x (first + (G - 1) x cached)] / G      per micro-batch
    t_mb     = compute + n x (TP + CP + EP collectives of one layer) + VPP x (PP send + receive)
    bubble   = (PP - 1) / VPP x t_mb                                 Megatron's interleaved 1F1B:
                                                                      (PP - 1) / (VPP x G) of G x t_mb
    DP       = gradient reduce-scatter + parameter all-gather over DP x CP ranks, once per step
               (all-reduce without a sharded optimizer; FSDP: two all-gathers and a reduce-scatter
               per micro-batch), minus the part the overlap flags hide (below)
    step     = G x t_mb + bubble + DP exposed + optimizer(P / (DP x CP), sharded; P otherwise)
    tokens/s per GPU = G x MBS x S / step / (TP x PP x CP)

Every collective is one call of :mod:`gemm_bench.question.comm` at its cost there: measured on the box
(interpolated between measured sizes), scaled from the box's largest group (a group of the node larger
than the box: assumed), or the ring over the stated inter-node link (assumed); a cost measured on another
GPU kind's box is borrowed (assumed). Nothing overlaps but what the layout's flags say, each stated as an
assumption with its formula (:data:`OVERLAP_FORMULAS`):

* ``--overlap-grad-reduce``: the gradient reduce-scatter hides behind the last micro-batch's backward,
  ``hidden = min(T_reduce, 2/3 x compute)`` (the backward is two thirds of a step's FLOPs);
* ``--overlap-param-gather``: the parameter all-gather hides behind the next step's first forward,
  ``hidden = min(T_gather, 1/3 x compute)``;
* FSDP with both flags: each micro-batch's gathers and reduce-scatter hide behind its own compute,
  ``hidden = min(T_fsdp_mb, compute)`` per micro-batch.

Assumed beside the collectives, and said where the number shows (:attr:`LayoutStep.assumptions`): a rank's
compute scales linearly with its tokens (``f``), so CP and another micro-batch size cost in proportion
(the measured layer ran the full sequence, one micro-batch); an expert-parallel size other than the
measured one computes in the measured time (balanced routing: the same FLOPs per rank), its parameters
counted at the layout's EP; full recomputation adds one forward, a third of the layer's step, per
recomputed layer; every DP parameter reduces over the DP x CP group (an MoE's expert parameters really
reduce over the smaller expert-DP group). Not counted: comm-GEMM overlap (TE's Userbuffers are never
initialised here), CUDA graphs of the whole step, the data loader.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence

from gemm_bench.question.comm import (
    INTER_NODE_DEFAULT,
    CollectiveCall,
    CollectiveTable,
    CommError,
    Composed,
    Link,
    compose,
    cp_attention_exchanges,
    dp_grad_all_reduce,
    dp_grad_reduce_scatter,
    dp_param_all_gather,
    ep_all_to_all,
    pp_send_recv,
    tp_layer_collectives,
)
from gemm_bench.question.config import ConfigError, ModelConfig
from gemm_bench.question.layout import ParallelLayout, recomputed_layers
from gemm_bench.question.model_step import (
    SINKS_NOT_TIMED,
    OptimizerLine,
    PartTimes,
    megatron_flops,
    vocab_parameters,
    without_windowed_attention,
)
from gemm_bench.question.stage_shape import Stage, stage_shape

#: GPUs of one node: DGX H100 and H200 hold eight, joined by NVSwitch. A group within a node is costed
#: from the box's measurements; one that spans nodes over the inter-node link. An assumption too.
GPUS_PER_NODE_DEFAULT = 8
#: The backward's share of a layer's step (twice the forward's FLOPs) and the forward's.
BACKWARD_SHARE = 2.0 / 3.0
FORWARD_SHARE = 1.0 / 3.0

OVERLAP_FORMULAS: dict[str, str] = {
    "grad": "--overlap-grad-reduce: hidden = min(T_reduce, 2/3 x compute per micro-batch) (the last "
            "micro-batch's backward)",
    "param": "--overlap-param-gather: hidden = min(T_gather, 1/3 x compute per micro-batch) (the next "
             "step's first forward)",
    "fsdp": "FSDP with both overlap flags: hidden = min(T_fsdp per micro-batch, compute per micro-batch)",
    "none": "no overlap flag: every data-parallel collective is exposed",
}


class LayoutStepError(ConfigError):
    """A layout the composition cannot give a step for (names the layout field or part at fault)."""


@dataclasses.dataclass(frozen=True)
class Network:
    """Where collectives run beyond the box: GPUs per node and the link between nodes (both assumed)."""

    gpus_per_node: int = GPUS_PER_NODE_DEFAULT
    inter_node: Link = INTER_NODE_DEFAULT

    def __post_init__(self) -> None:
        if isinstance(self.gpus_per_node, bool) or not isinstance(self.gpus_per_node, int) or self.gpus_per_node < 1:
            raise LayoutStepError("gpus_per_node", f"must be a whole number >= 1, got {self.gpus_per_node!r}")

    def describe(self) -> str:
        return f"assumed: {self.gpus_per_node} GPUs per node; between nodes {self.inter_node.describe()[9:]}"


@dataclasses.dataclass(frozen=True)
class RecipeParts:
    """One recipe's measured parts: medians and the quartiles (the spread)."""

    median: PartTimes
    low: PartTimes
    high: PartTimes


@dataclasses.dataclass(frozen=True)
class LayoutStep:
    """One recipe's step of one layout, per optimizer step (ms) and per GPU."""

    precision: str
    layout: ParallelLayout
    layers: int  # the most loaded stage's
    compute_ms: float  # rank compute per micro-batch (the stage's), median
    compute_low_ms: float
    compute_high_ms: float
    #: The collectives of one micro-batch (TP, CP, EP of the stage's layers; PP send/recv), composed.
    microbatch: Composed
    bubble_ms: float
    #: The data-parallel collectives of one step (FSDP's: of every micro-batch), composed.
    dp: Composed
    dp_hidden_ms: float
    optimizer_ms: float
    tokens_per_step_per_gpu: float
    flops_per_token: float
    peak_tflops: float | None
    #: The assumptions of the rank's compute (its tokens, EP, recomputation, the optimizer's shard) and of the
    #: collectives beyond their costs (which group a gradient reduces over): the compute-alone figure holds
    #: only the first.
    compute_assumptions: tuple[str, ...]
    collective_assumptions: tuple[str, ...] = ()

    @property
    def assumptions(self) -> tuple[str, ...]:
        """Every assumption of the step, the compute's first."""
        return self.compute_assumptions + self.collective_assumptions

    @property
    def microbatches(self) -> int:
        return self.layout.microbatches

    def _per_microbatch(self, compute: float) -> float:
        return compute + self.microbatch.comm_ms

    def _step(self, compute: float) -> float:
        t_mb = self._per_microbatch(compute)
        return (self.microbatches * t_mb + bubble_ms(self.layout, t_mb) + self.dp.comm_ms - self.dp_hidden_ms
                + self.optimizer_ms)

    @property
    def step_ms(self) -> float:
        """One optimizer step, communication and bubble in (median compute)."""
        return self._step(self.compute_ms)

    @property
    def step_low_ms(self) -> float:
        return self._step(self.compute_low_ms)

    @property
    def step_high_ms(self) -> float:
        return self._step(self.compute_high_ms)

    @property
    def compute_step_ms(self) -> float:
        """The same step of the rank's compute alone: no collective, no bubble (the labelled row beside)."""
        return self.microbatches * self.compute_ms + self.optimizer_ms

    @property
    def comm_ms(self) -> float:
        """Communication of one step that is not hidden: every micro-batch's and the exposed DP part."""
        return self.microbatches * self.microbatch.comm_ms + self.dp.comm_ms - self.dp_hidden_ms

    @property
    def comm_share(self) -> float:
        return self.comm_ms / self.step_ms

    @property
    def bubble_share(self) -> float:
        return self.bubble_ms / self.step_ms

    @property
    def tokens_per_s(self) -> float:
        """Tokens per second per GPU, communication and bubble in."""
        return self.tokens_per_step_per_gpu / (self.step_ms * 1e-3)

    @property
    def tokens_per_s_low(self) -> float:
        return self.tokens_per_step_per_gpu / (self.step_high_ms * 1e-3)

    @property
    def tokens_per_s_high(self) -> float:
        return self.tokens_per_step_per_gpu / (self.step_low_ms * 1e-3)

    @property
    def compute_tokens_per_s(self) -> float:
        """Tokens per second per GPU of the rank's compute alone (no communication, no bubble)."""
        return self.tokens_per_step_per_gpu / (self.compute_step_ms * 1e-3)

    @property
    def tflops(self) -> float:
        """Model TFLOP/s per GPU (Megatron's count)."""
        return self.tokens_per_s * self.flops_per_token / 1e12

    @property
    def mfu(self) -> float | None:
        return self.tflops / self.peak_tflops if self.peak_tflops else None

    @property
    def assumed(self) -> bool:
        """Whether any number of the step holds an assumption: a collective's cost (scaled, inter-node,
        borrowed) or the compute itself (scaled to the layout's tokens per rank, an EP other than the
        measured one, recomputation): :attr:`assumptions` names the latter."""
        return bool(self.assumptions) or self.microbatch.assumed or self.dp.assumed

    @property
    def collectives_assumed(self) -> bool:
        """Whether a collective's cost holds an assumption (the words "collectives assumed in part")."""
        return self.microbatch.assumed or self.dp.assumed


def bubble_ms(layout: ParallelLayout, t_mb: float) -> float:
    """Megatron's interleaved 1F1B bubble: ``(PP - 1) / VPP`` micro-batch times (0 without a pipeline)."""
    if layout.pp == 1:
        return 0.0
    return (layout.pp - 1) / (layout.vpp or 1) * t_mb


def speedup(step: LayoutStep, base: LayoutStep) -> tuple[float, float, float]:
    """(median, low, high) tokens/s of ``step`` over ``base`` (BF16): low = base's fastest quartile
    against this one's slowest, as :func:`gemm_bench.question.model_step.speedups` spreads it."""
    return (base.step_ms / step.step_ms, base.step_low_ms / step.step_high_ms,
            base.step_high_ms / step.step_low_ms)


def compute_speedup(step: LayoutStep, base: LayoutStep) -> float:
    """The speedup of the rank's compute alone (the same layout's stage, no communication, no bubble)."""
    return base.compute_step_ms / step.compute_step_ms


# ---------------------------------------------------------------------------------- the groups
def crosses(span: int, network: Network) -> bool:
    """Whether a group whose ranks spread over ``span`` consecutive GPUs leaves one node."""
    return span > network.gpus_per_node


def microbatch_calls(config: ModelConfig, layout: ParallelLayout, precision: str, layers: int,
                     network: Network) -> list[CollectiveCall]:
    """Every collective one rank of the most loaded stage runs per micro-batch: its ``layers`` layers'
    TP (with SP), CP and EP collectives, and VPP sends and receives at the stage boundaries. Megatron's
    rank order (TP innermost, then CP, DP, PP; experts: ETP, EP) decides which groups leave a node."""
    rank = dataclasses.replace(config, seq_length=config.seq_length // layout.cp,
                               micro_batch_size=layout.micro_batch_size,
                               expert_model_parallel_size=layout.ep if config.is_moe else 1)
    calls: list[CollectiveCall] = []
    if layout.tp > 1:
        if config.is_moe or config.is_mla:
            raise LayoutStepError("tp", "tensor parallelism of a mixture-of-experts or multi-latent-attention "
                                        "layer is not modelled (its collectives were read for a dense layer)")
        if not layout.sp:
            raise LayoutStepError("sp", "tensor parallelism without sequence parallelism is not modelled")
        per_layer = tp_layer_collectives(rank, layout.tp, precision)
        if crosses(layout.tp, network):
            per_layer = tuple(dataclasses.replace(c, crosses_nodes=True) for c in per_layer)
        calls += [c for _ in range(layers) for c in per_layer]
    if layout.cp > 1:
        if config.seq_length % layout.cp:
            raise LayoutStepError("cp", f"{config.seq_length} tokens do not divide by CP {layout.cp}")
        per_layer = cp_attention_exchanges(rank, layout.cp, layout.tp,
                                           crosses_nodes=crosses(layout.tp * layout.cp, network))
        calls += [c for _ in range(layers) for c in per_layer]
    if layout.ep > 1 and config.is_moe:
        per_layer = ep_all_to_all(rank, layout.ep, crosses_nodes=crosses((layout.etp or 1) * layout.ep, network))
        calls += [c for _ in range(layers) for c in per_layer]
    if layout.pp > 1:
        stride = layout.tp * layout.cp * layout.dp
        boundary = pp_send_recv(rank, layout.tp, sequence_parallel=bool(layout.sp),
                                crosses_nodes=crosses(stride * layout.pp, network))
        calls += [c for _ in range(layout.vpp or 1) for c in boundary]
    return calls


def dp_calls(stage_params: int, layout: ParallelLayout, precision: str, network: Network) -> list[CollectiveCall]:
    """The data-parallel collectives of one optimizer step (FSDP: of one micro-batch) over DP x CP ranks."""
    group = layout.dp * layout.cp
    if group == 1:
        return []
    far = crosses(layout.tp * group, network)
    grad_bytes = layout.grad_bytes
    fp8 = layout.fp8_primary(precision)
    if layout.sharding == "none":
        return [dp_grad_all_reduce(stage_params, group, grad_bytes=grad_bytes, crosses_nodes=far)]
    gather = dp_param_all_gather(stage_params, group, fp8_param_gather=fp8, crosses_nodes=far)
    reduce = dp_grad_reduce_scatter(stage_params, group, grad_bytes=grad_bytes, crosses_nodes=far)
    if layout.sharding == "fsdp":
        return [gather, gather, reduce]  # forward and backward gathers, the gradients' reduce-scatter
    return [reduce, gather]


def dp_hidden(layout: ParallelLayout, dp: Composed, compute_ms: float) -> float:
    """The part of the DP collectives the layout's overlap flags hide (:data:`OVERLAP_FORMULAS`)."""
    if layout.sharding == "fsdp":
        if layout.overlap_grad_reduce and layout.overlap_param_gather:
            return layout.microbatches * min(dp.comm_ms / layout.microbatches, compute_ms)
        return 0.0
    hidden = 0.0
    for call, cost in dp.calls:
        if call.op == "all-gather" and layout.overlap_param_gather:
            hidden += min(cost.ms, FORWARD_SHARE * compute_ms)
        elif call.op != "all-gather" and layout.overlap_grad_reduce:
            hidden += min(cost.ms, BACKWARD_SHARE * compute_ms)
    return hidden


# ---------------------------------------------------------------------------------- the step
def stage_windowed_layers(config: ModelConfig, layout: ParallelLayout, stage: Stage) -> int:
    """The most of ``stage``'s layers a sliding window shortens (:meth:`ModelConfig.windowed_among`), so that the
    bound on what it saves holds for the stage it is taken on: its own layers, not the model's share of them
    (35 layers, every other one windowed, PP 4: the first stage's 9 hold 5). Without virtual stages the first
    stage holds the first measured layers and the last the last; with them each stage holds VPP chunks spread
    over the model, Megatron-LM's interleaving, where they divide evenly (PP 4, VPP 9, chunks of one layer: the
    first stage holds layers 1, 5, ..., 33, all windowed when every other layer is), and otherwise as many
    as it has layers, up to every windowed measured layer."""
    dense, total = config.dense_layers, config.measured_layers
    if layout.pp == 1:
        return config.windowed_among(dense + 1, total)
    rank = 0 if stage.name == "first" else layout.pp - 1
    vpp = layout.vpp or 1
    chunk, left = divmod(total, layout.pp * vpp)
    if left and vpp > 1:
        return min(stage.layers, config.windowed_among(dense + 1, total))
    if vpp > 1:
        return sum(config.windowed_among(dense + (v * layout.pp + rank) * chunk + 1, chunk) for v in range(vpp))
    start = dense + 1 if rank == 0 else dense + total - stage.layers + 1
    return config.windowed_among(start, stage.layers)


def layout_step(config: ModelConfig, layout: ParallelLayout, precision: str, parts: RecipeParts,
                optimizer: OptimizerLine, layer_params: int, table: CollectiveTable, *,
                network: Network = Network(), peak_tflops: float | None = None,
                measured_on: str | None = None) -> LayoutStep:
    """One recipe's step of ``layout`` (module docstring: every term). ``config`` is the measured
    question's (its TP, EP, sequence and micro-batch are the measured layer's); ``layer_params`` the GPU's
    count of one measured layer; ``measured_on`` the GPU kind the table was measured on where it is not
    the compute's (every box cost then borrowed: assumed)."""
    shape = stage_shape(layout, config)
    if config.padded_vocab_size is None:
        raise LayoutStepError("vocab_size", "is needed for the embedding and the output layer's parameters")
    assumptions: list[str] = []
    g = layout.microbatches
    factor = layout.micro_batch_size / config.micro_batch_size / layout.cp
    if factor != 1:
        assumptions.append(f"a rank's compute scales linearly with its tokens: x{factor:g} "
                           f"(micro-batch {layout.micro_batch_size} over the measured {config.micro_batch_size}, "
                           f"/ CP {layout.cp})")
    if config.is_moe and layout.ep != config.expert_model_parallel_size:
        measured_per_expert = config.tokens * config.moe_router_topk * config.expert_model_parallel_size / (
            config.num_experts or 1)
        ratio = layout.ep / config.expert_model_parallel_size
        assumptions.append(f"at EP {layout.ep} a rank computes in the time measured at EP "
                           f"{config.expert_model_parallel_size} (balanced routing: the same FLOPs per rank), though "
                           f"each local expert then sees {ratio:g}x the tokens ({measured_per_expert:g} -> "
                           f"{measured_per_expert * ratio:g} per micro-batch): larger grouped GEMMs, which may run "
                           f"faster than measured; its parameters are counted at EP {layout.ep}")
    if layout.recompute == "full":
        assumptions.append("full recomputation adds one forward (a third of a layer's step) per recomputed layer")
    first_layers = shape.first_layers

    def stage(p: PartTimes, *, windowed: bool = False) -> float:
        """The slower stage's compute per micro-batch; ``windowed``: with the attention of the layers a
        sliding window shortens taken out, each stage its own (:func:`stage_windowed_layers`), recomputed
        ones too (their forward's share of it)."""
        def one(s: Stage) -> float:
            ends = g * ((p.embedding if s.embedding else 0.0) + (p.head if s.head else 0.0))
            recomputed = recomputed_layers(layout, s.layers)
            layers = s.layers + FORWARD_SHARE * recomputed
            q: PartTimes | None = p
            if windowed and layers:
                w = stage_windowed_layers(config, layout, s)
                q = without_windowed_attention(p, (w + FORWARD_SHARE * min(recomputed, w)) / layers)
            assert q is not None, "the bound is composed only from profiled layer steps"
            return factor * (ends + layers * (q.layer_first + (g - 1) * q.layer_cached)) / g
        return max(one(s) for s in shape.stages)

    compute, low, high = stage(parts.median), stage(parts.low), stage(parts.high)
    if config.windowed_share:
        profiled = without_windowed_attention(parts.median, config.windowed_share) is not None
        words = f"{config.window_words()}, timed as full causal attention"
        assumptions.append(f"{words}: taking those layers' attention out entirely (its kernels in the profiled layer "
                           "step) would shorten the stage's compute by at most "
                           f"{1 - stage(parts.median, windowed=True) / compute:.1%}" if profiled else
                           f"{words}: this result's layer steps were not profiled, so what the window saves is not "
                           "bounded")
    if config.attention_sinks:
        assumptions.append(SINKS_NOT_TIMED)
    mb = compose(0.0, microbatch_calls(config, layout, precision, first_layers, network), table,
                 inter_node=network.inter_node, measured_on=measured_on)
    vocab = vocab_parameters(config)
    stage_params = round(first_layers * layer_params * shape.weight_scale) + vocab * shape.first.vocab_ends
    dp_list = dp_calls(stage_params, layout, precision, network)
    if layout.sharding == "fsdp":
        dp_list = dp_list * g
    dp = compose(0.0, dp_list, table, inter_node=network.inter_node, measured_on=measured_on)
    hidden = dp_hidden(layout, dp, compute)
    shard = layout.dp * layout.cp if layout.sharding != "none" else 1
    optimizer_ms = optimizer.at(max(1, stage_params // shard))
    if layout.sharding != "none":
        assumptions.append(f"the optimizer steps over the rank's shard, 1/{shard} of the stage's parameters")
    collective_assumptions = ("every parameter's gradient reduces over the DP x CP group (expert parameters "
                              "really reduce over the smaller expert-DP group)",) if (
        config.is_moe and layout.ep > 1 and dp_list) else ()
    t_mb = compute + mb.comm_ms
    tokens = g * layout.micro_batch_size * config.seq_length / (layout.tp * layout.pp * layout.cp)
    flops_per_token = float(megatron_flops(config)) / config.tokens
    return LayoutStep(precision, layout, first_layers, compute, low, high, mb, bubble_ms(layout, t_mb), dp, hidden,
                      optimizer_ms, tokens, flops_per_token, peak_tflops, tuple(assumptions), collective_assumptions)


def layout_steps(config: ModelConfig, layout: ParallelLayout, parts: Mapping[str, RecipeParts],
                 optimizer: OptimizerLine, layer_params: int, table: CollectiveTable, *,
                 network: Network = Network(), peak_tflops: float | None = None,
                 measured_on: str | None = None) -> dict[str, LayoutStep | CommError | ConfigError]:
    """Every recipe's step (or the error that says why it has none: a recipe whose collectives are not
    modelled, an op the table lacks)."""
    out: dict[str, LayoutStep | CommError | ConfigError] = {}
    for precision, recipe in parts.items():
        try:
            out[precision] = layout_step(config, layout, precision, recipe, optimizer, layer_params, table,
                                         network=network, peak_tflops=peak_tflops, measured_on=measured_on)
        except (CommError, ConfigError) as exc:
            out[precision] = exc
    return out


def overlap_formulas(layout: ParallelLayout) -> Sequence[str]:
    """The overlap assumptions this layout's flags bring, each with its formula."""
    if layout.sharding == "fsdp":
        return [OVERLAP_FORMULAS["fsdp" if layout.overlap_grad_reduce and layout.overlap_param_gather else "none"]]
    said = [OVERLAP_FORMULAS[k] for k, on in (("grad", layout.overlap_grad_reduce),
                                             ("param", layout.overlap_param_gather)) if on]
    return said or [OVERLAP_FORMULAS["none"]]
