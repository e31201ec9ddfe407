"""The model's step on one GPU: the parts the layer step lacks, their memory, and a real model run.

What is composed from these parts, and how, is :mod:`gemm_bench.question.model_step`. Here, with
torch and Transformer Engine:

* **Parts** (GPU time, timed with :class:`gemm_bench.measure.timing.Interleaver`, graph replays):
  per precision, one layer's forward + backward that quantizes its weights
  (``is_first_microbatch=True``) and the same on the cached FP8 weights (``False``), in one
  interleaved group with BF16; the embedding (forward + backward + the add into its FP32 main
  gradient, as Megatron-LM's gradient hook does) and the head (final LayerNorm, the BF16 output
  layer and the FP32 cross-entropy, forward + backward) in a second group; the optimizer (zeroing
  the FP32 main gradients, ``torch.optim.AdamW(fused=True)`` on FP32 master weights, the copy back
  to the BF16 weights) at two parameter counts, timed eagerly (its kernels are milliseconds long
  and few: the host runs ahead).
* **Gradients as Megatron-LM and Transformer Engine accumulate them**: every layer and the output
  layer are built with ``fuse_wgrad_accumulation=True`` and an FP32 ``main_grad`` per weight, so
  the weight-gradient GEMMs add into FP32 directly.
* **Memory** from the allocator's own counters (``torch.cuda.memory_allocated`` and
  ``max_memory_allocated``) around each part (:class:`~gemm_bench.question.model_step.MemoryParts`).
* **A real model** (:class:`RealModel`): embedding, N layers, final norm, output layer, loss and
  the optimizer over G micro-batches, timed whole with CUDA events (eager, as a training loop runs
  it): the check that the composition holds (``tests/test_gpu_model_step.py``), and the search for
  the largest micro-batch that fits (an out-of-memory is a result, caught as
  ``torch.OutOfMemoryError`` only).

The layer is the layer step's (:func:`build_model_layer`): a dense model's ``te.TransformerLayer``,
or for a mixture of experts or multi-latent attention the
:class:`~gemm_bench.measure.backends.rank_layer.RankLayer` of TE modules (``te.MultiheadAttention``
or MLA's ``te.Linear`` projections, ``te.GroupedLinear`` local experts, ``te.Linear`` shared
experts), routed evenly over the rank's local experts (``balanced``, as the GEMM tables assume).
Every one of those modules takes ``is_first_microbatch`` (it caches its quantized weights in its
``_fp8_workspaces`` on the first micro-batch) and ``fuse_wgrad_accumulation`` (Transformer Engine
2.19-2.20's ``linear.py``, ``layernorm_linear.py``, ``grouped_linear.py``,
``multi_head_attention.py``), so ``layer-first`` and ``layer-cached`` are built alike for every
model; the router (a BF16 ``F.linear`` outside every recipe) and the norms have nothing to cache.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import gc
import math
import statistics
import time
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import torch
import torch.nn.functional as F
import transformer_engine.pytorch as te

from gemm_bench.measure.backends.te import Operands, make_recipe
from gemm_bench.measure.microbatch_search import search_largest
from gemm_bench.measure.step import step_breakdown
from gemm_bench.measure.telemetry import quartiles
from gemm_bench.measure.timing import Competitor, Interleaver, Mark, Samples, TimerSettings
from gemm_bench.question.config import ModelConfig
from gemm_bench.question.model_step import MemoryParts, OptimizerLine, PartTimes, layer_parameters, vocab_parameters
from gemm_bench.question.stage_shape import SearchedRank
from gemm_bench.results.breakdown import category_ms_per_step, model_step_parts

_BF16 = torch.bfloat16
#: Where every tensor lives: the GPU (a CPU test with a fake Transformer Engine swaps it).
DEVICE = "cuda"
#: The routing a mixture of experts' layer is measured with in the model step (the GEMM tables').
ROUTING = "balanced"
#: The optimizer's two parameter counts: both far above its launch cost, both in memory beside a
#: layer group's graphs (16 bytes each of FP32 master, moments and main gradient, 2 of BF16).
OPTIMIZER_SIZES: tuple[int, int] = (1 << 26, 1 << 28)
#: The optimizer's tensors are cut into pieces of this many parameters, about one layer GEMM's
#: weight, so the fused kernel walks a tensor list as it does over a model's weights.
OPTIMIZER_PIECE = 1 << 24


def build_model_layer(config: ModelConfig, *, main_grads: bool = True) -> Any:
    """One rank's layer as the layer step builds it (a dense ``te.TransformerLayer``, or a mixture of
    experts' or multi-latent attention's ``RankLayer`` with :data:`ROUTING`), with fused FP32
    weight-gradient accumulation in every TE module; ``main_grads`` as :func:`build_dense_layer`."""
    if not (config.is_moe or config.is_mla):
        return build_dense_layer(config, main_grads=main_grads)
    from gemm_bench.measure.backends.rank_layer import RankLayer

    layer = RankLayer(config, ROUTING, fuse_wgrad=True)
    if main_grads:
        add_main_grads(layer)
    return layer


def build_dense_layer(config: ModelConfig, *, main_grads: bool = True) -> Any:
    """One rank's dense layer as the layer step builds it, with fused FP32 weight-gradient
    accumulation (every weight given a ``main_grad``, as Megatron-LM's DDP buffer does, unless
    ``main_grads`` is false: the memory measurement adds them after counting the weights)."""
    tp = config.tensor_model_parallel_size
    layer = te.TransformerLayer(
        config.hidden_size, config.ffn_hidden_size // tp, config.num_attention_heads // tp,
        num_gqa_groups=config.query_groups // tp, kv_channels=config.head_dim,
        hidden_dropout=0.0, attention_dropout=0.0, self_attn_mask_type="causal",
        params_dtype=_BF16, device=DEVICE, fuse_qkv_params=True, bias=False,
        activation="swiglu" if config.swiglu else "gelu", fuse_wgrad_accumulation=True,
    )
    if main_grads:
        add_main_grads(layer)
    return layer


def add_main_grads(module: torch.nn.Module, dtype: torch.dtype = torch.float32) -> None:
    """A ``main_grad`` for every parameter that has none yet (a shared one keeps its own): FP32, or
    BF16 where the layout reduces its gradients in BF16 (Megatron's ``grad_reduce_in_fp32=False``,
    which Megatron-Bridge's performance recipes set: the DDP buffer is then BF16)."""
    for p in module.parameters():
        if getattr(p, "main_grad", None) is None:
            p.main_grad = torch.zeros(p.shape, dtype=dtype, device=p.device)  # type: ignore[attr-defined]


def to_master(p: torch.Tensor) -> torch.Tensor:
    """A parameter's FP32 master copy: an FP8 primary weight (Transformer Engine's quantized tensor,
    built under ``te.quantized_model_init``) dequantized, any other parameter cast."""
    quantized = hasattr(p, "quantize_")  # a plain tensor has ``dequantize`` (PyTorch's int8 kind), not this
    # TE's dequantize is differentiable (its result a non-leaf while the weight requires grad): detached.
    return (p.dequantize(dtype=torch.float32) if quantized else p).detach().float().requires_grad_(True)


def from_master(p: torch.Tensor, master: torch.Tensor) -> None:
    """The optimizer's update written back: an FP8 primary weight quantized from its master (as
    Megatron casts its master shard before the FP8 parameter gather), any other parameter copied."""
    quantize = getattr(p, "quantize_", None)
    if quantize is not None:
        quantize(master)
    else:
        p.copy_(master)


def fold_unfused_grads(module: torch.nn.Module) -> None:
    """Add each gradient autograd left in ``.grad`` (norm weights, the embedding) into its FP32
    main gradient and drop it: Megatron-LM's gradient hook, for the weights TE does not fuse."""
    for p in module.parameters():
        if p.grad is not None:
            p.main_grad.add_(p.grad)  # type: ignore[attr-defined]
            p.grad = None


class Head(torch.nn.Module):
    """Final LayerNorm, the BF16 output layer of the rank's vocabulary shard, FP32 cross-entropy."""

    def __init__(self, config: ModelConfig, grad_dtype: torch.dtype = torch.float32) -> None:
        super().__init__()
        assert config.padded_vocab_size is not None
        self.norm = te.LayerNorm(config.hidden_size, params_dtype=_BF16, device=DEVICE)
        self.output = te.Linear(config.hidden_size, config.padded_vocab_size // config.tensor_model_parallel_size,
                                bias=False, params_dtype=_BF16, device=DEVICE, fuse_wgrad_accumulation=True)
        add_main_grads(self, grad_dtype)

    def forward(self, hidden: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
        logits = self.output(self.norm(hidden))
        return F.cross_entropy(logits.float().view(-1, logits.shape[-1]), labels.view(-1))


class Embedding(torch.nn.Module):
    def __init__(self, config: ModelConfig, grad_dtype: torch.dtype = torch.float32) -> None:
        super().__init__()
        assert config.padded_vocab_size is not None
        rows = config.padded_vocab_size // config.tensor_model_parallel_size
        self.table = torch.nn.Embedding(rows, config.hidden_size, dtype=_BF16, device=DEVICE)
        add_main_grads(self, grad_dtype)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        return self.table(tokens)


def _tokens(config: ModelConfig) -> torch.Tensor:
    rows = (config.padded_vocab_size or 1) // config.tensor_model_parallel_size
    return torch.randint(0, rows, (config.seq_length, config.micro_batch_size), device=DEVICE)


def _hidden(config: ModelConfig, *, grad: bool = False) -> torch.Tensor:
    shape = (config.seq_length, config.micro_batch_size, config.hidden_size)
    return torch.randn(*shape, device=DEVICE, dtype=_BF16, requires_grad=grad)


# ------------------------------------------------------------------------------ competitors
def layer_competitor(config: ModelConfig, precision: str, shared: Operands | None = None) -> Competitor:
    """Regions ``layer-first`` and ``layer-cached``: the layer's forward + backward quantizing its
    weights, then the same on the weights that call cached. ``shared``: the BF16 weights (with their
    FP32 main gradients), input and output gradient every precision of the group uses, as the
    layer step shares them: one copy of a 128-expert layer's 6 GB of weights and 13 GB of main
    gradients, not one per precision (four would not fit an 80 GB GPU); each precision keeps its
    own quantized weight cache, as it must."""
    layer = build_model_layer(config, main_grads=False)
    recipe = make_recipe(precision)
    x, dy = (shared or Operands()).adopt(layer, lambda: _hidden(config, grad=True), lambda: _hidden(config))
    add_main_grads(layer)

    def iteration(mark: Mark) -> None:
        for region, first in (("layer-first", True), ("layer-cached", False)):
            mark(region, "start")
            with te.autocast(enabled=recipe is not None, recipe=recipe):
                y = layer(x, is_first_microbatch=first)
            y.backward(dy)
            mark(region, "end")
            x.grad = None
            for p in layer.parameters():
                p.grad = None

    return iteration


def vocab_competitor(config: ModelConfig) -> Competitor:
    """Regions ``embedding`` and ``head`` (BF16, outside every recipe)."""
    embedding, head = Embedding(config), Head(config)
    tokens, labels = _tokens(config), _tokens(config)
    dy = _hidden(config)
    hidden = _hidden(config, grad=True)

    def iteration(mark: Mark) -> None:
        mark("embedding", "start")
        embedding(tokens).backward(dy)
        fold_unfused_grads(embedding)
        mark("embedding", "end")
        mark("head", "start")
        head(hidden, labels).backward()
        mark("head", "end")
        hidden.grad = None
        for p in head.parameters():
            p.grad = None

    return iteration


class FlatOptimizer:
    """The optimizer step of Megatron-LM's mixed precision over ``params`` parameters in pieces:
    FP32 main gradients zeroed for the next step, fused AdamW on FP32 master weights, masters
    copied into the BF16 weights."""

    def __init__(self, params: int) -> None:
        sizes = [OPTIMIZER_PIECE] * (params // OPTIMIZER_PIECE) + ([params % OPTIMIZER_PIECE] if params %
                                                                   OPTIMIZER_PIECE else [])
        self.weights = [torch.randn(n, device=DEVICE, dtype=_BF16) * 0.02 for n in sizes]
        self.masters = [w.float().requires_grad_(True) for w in self.weights]
        for m in self.masters:
            m.grad = torch.randn_like(m) * 1e-3
        self.grads = [m.grad for m in self.masters]
        self.optimizer = torch.optim.AdamW(self.masters, lr=1e-4, weight_decay=0.1, fused=True)

    def step(self) -> None:
        self.optimizer.step()
        for weight, master in zip(self.weights, self.masters, strict=True):
            weight.copy_(master)
        torch._foreach_zero_(self.grads)  # type: ignore[arg-type]


def optimizer_competitor(params: int) -> Competitor:
    opt = FlatOptimizer(params)

    def iteration(mark: Mark) -> None:
        mark("optimizer", "start")
        opt.step()
        mark("optimizer", "end")

    return iteration


# ---------------------------------------------------------------------------------- memory
@contextlib.contextmanager
def _clean() -> Iterator[None]:
    gc.collect()
    torch.cuda.synchronize()
    torch.cuda.empty_cache()
    yield
    gc.collect()
    torch.cuda.synchronize()
    torch.cuda.empty_cache()


def _allocated() -> int:
    torch.cuda.synchronize()
    return int(torch.cuda.memory_allocated())


def layer_memory(config: ModelConfig, precision: str) -> dict[str, int]:
    """One layer's bytes by the allocator: weights, FP8 weight copies kept after a first micro-batch,
    activations kept by a cached micro-batch's forward, its backward's peak above them; and the
    layer's parameter count."""
    recipe = make_recipe(precision)
    with _clean():
        start = _allocated()
        layer = build_model_layer(config, main_grads=False)
        weights = _allocated() - start
        add_main_grads(layer)
        x, dy = _hidden(config, grad=True), _hidden(config)
        before_first = _allocated()
        for first in (True, False):
            if not first:
                before = _allocated()
                torch.cuda.reset_peak_memory_stats()
            with te.autocast(enabled=recipe is not None, recipe=recipe):
                y = layer(x, is_first_microbatch=first)
            if not first:
                after_forward = _allocated()
            y.backward(dy)
            del y
            x.grad = None
            fold_unfused_grads(layer)
            if first:
                fp8 = _allocated() - before_first
        peak = int(torch.cuda.max_memory_allocated())
        out = {"layer_weights": weights, "layer_fp8_weights": max(0, fp8),
               "layer_activations": after_forward - before, "layer_backward_extra": max(0, peak - after_forward),
               "layer_params": sum(p.numel() for p in layer.parameters())}
        del layer, x, dy
    return out


def fp8_primary_layer_bytes(config: ModelConfig, precision: str) -> dict[str, int]:
    """One layer built with FP8 primary weights (``te.quantized_model_init``, Megatron's
    ``--fp8-param-gather``): its parameters' bytes as built and as they stay after a forward and
    backward (Transformer Engine adds what the backward's GEMMs need: on Hopper the transpose), by
    the allocator, main gradients and activations excluded; and its parameter count. What
    :func:`~gemm_bench.question.memory_per_gpu.memory_per_gpu` takes an FP8 primary layer to weigh
    (the measured FP8 copy, ``layer_fp8_weights``) is held to it by ``tests/test_gpu_fp8_primary.py``."""
    recipe = make_recipe(precision)
    if recipe is None:
        raise ValueError(f"FP8 primary weights need an FP8 recipe, not {precision}")
    with _clean():
        start = _allocated()
        with te.quantized_model_init(enabled=True, recipe=recipe):
            layer = build_model_layer(config, main_grads=False)
        built = _allocated() - start
        add_main_grads(layer)
        grads = sum(p.main_grad.numel() * p.main_grad.element_size() for p in layer.parameters())  # type: ignore[attr-defined]
        x, dy = _hidden(config, grad=True), _hidden(config)
        inputs = _allocated() - start - built - grads
        with te.autocast(enabled=True, recipe=recipe):
            y = layer(x, is_first_microbatch=None)
        y.backward(dy)
        del y
        x.grad = None
        fold_unfused_grads(layer)
        after = _allocated() - start - grads - inputs
        out = {"built": built, "after_step": after, "layer_params": sum(p.numel() for p in layer.parameters())}
        del layer, x, dy
    return out


def vocab_memory(config: ModelConfig) -> dict[str, int]:
    """The embedding's and output layer's weights and the head's transient peak (its logits)."""
    with _clean():
        start = _allocated()
        embedding = torch.nn.Embedding((config.padded_vocab_size or 1) // config.tensor_model_parallel_size,
                                       config.hidden_size, dtype=_BF16, device=DEVICE)
        embedding_weights = _allocated() - start
        del embedding
    with _clean():
        start = _allocated()
        head = Head(config)  # with its FP32 main gradients: subtract them
        main = sum(p.main_grad.numel() * 4 for p in head.parameters())  # type: ignore[attr-defined]
        head_weights = _allocated() - start - main
        hidden, labels = _hidden(config, grad=True), _tokens(config)
        base = _allocated()
        torch.cuda.reset_peak_memory_stats()
        head(hidden, labels).backward()
        transient = int(torch.cuda.max_memory_allocated()) - base
        del head, hidden, labels
    return {"embedding_weights": embedding_weights, "head_weights": head_weights, "head_transient": transient}


def optimizer_memory(params: int) -> float:
    """Bytes per parameter of the optimizer's FP32 master weight, moments and main gradient."""
    with _clean():
        start = _allocated()
        opt = FlatOptimizer(params)
        opt.step()
        bf16 = sum(w.numel() * 2 for w in opt.weights)
        per_param = (_allocated() - start - bf16) / params
        del opt
    return per_param


def memory_parts(config: ModelConfig, precision: str, state_per_param: float,
                 vocab: dict[str, int] | None = None) -> MemoryParts:
    """One precision's memory records; ``vocab``: :func:`vocab_memory`'s, measured once for every
    precision (the embedding and head are BF16 under every recipe)."""
    layer = layer_memory(config, precision)
    vocab = vocab if vocab is not None else vocab_memory(config)
    return MemoryParts(layer["layer_weights"], layer["layer_fp8_weights"], layer["layer_activations"],
                       layer["layer_backward_extra"], vocab["embedding_weights"], vocab["head_weights"],
                       vocab["head_transient"], state_per_param)


# -------------------------------------------------------------------------------- the parts
@dataclasses.dataclass
class PartsTiming:
    """Samples per precision per region (``layer-first``, ``layer-cached``), the BF16 vocabulary
    parts (``embedding``, ``head``) and the optimizer at each size, with failures."""

    layers: dict[str, dict[str, Samples]]
    vocab: dict[str, Samples]
    optimizer: dict[int, Samples]
    failures: dict[str, str]
    cross_check: dict[str, Any]
    #: Each part's profiled rounds, keyed ``(part, precision)`` (the optimizer's ``(optimizer, "<params>")``):
    #: ``(source, rounds)``, each round its kernels ``(name, start ns, duration ns)``, and ``source`` a
    #: key of :data:`gemm_bench.measure.step.BREAKDOWN_SOURCES` (graph replays or eager rounds). What
    #: the model step's time breakdown is made of (issue 33); empty where no round was profiled.
    kernels: dict[tuple[str, str], tuple[str, list[list[tuple[str, int, int]]]]] = dataclasses.field(
        default_factory=dict)


TimeGroup = Callable[[dict[str, Callable[[], Competitor]], bool, str], Any]


def interleaver_group(settings: TimerSettings, sampler: Any = None,
                      clocks: dict[str, Any] | None = None) -> TimeGroup:
    """A stand-alone group timer (for the GPU tool and tests): build, probe, time interleaved.
    With ``sampler`` (a :class:`~gemm_bench.measure.telemetry.ClockSampler`), each group's SM clock
    and power over its timed rounds go into ``clocks`` under the group's label."""
    timer = Interleaver(settings, cross_check=True, sampler=sampler)

    def group(builders: dict[str, Callable[[], Competitor]], graphs: bool, label: str) -> Any:
        competitors: dict[str, Competitor] = {}
        failures: dict[str, str] = {}
        for name, build in builders.items():
            try:
                fn = build()
                fn(lambda region, edge: None)
                torch.cuda.synchronize()
                competitors[name] = fn
            except (RuntimeError, ValueError, AssertionError) as exc:  # GPU boundary: the part's reason
                failures[name] = f"{type(exc).__name__}: {exc}"[:400]
        result = None
        try:
            result = timer.run(competitors, graphs=graphs, kernels=True) if competitors else None
        except RuntimeError as exc:  # GPU boundary (out of memory in the rounds): the group's parts fail
            failures.update({name: f"{type(exc).__name__}: {exc}"[:400] for name in competitors})
        if result is not None:
            failures.update(result.failures)
            if clocks is not None and "clock" in getattr(result, "record", {}):
                clocks[label] = result.record["clock"]
        del competitors
        gc.collect()
        torch.cuda.empty_cache()
        return result, failures

    return group


def _group_kernels(result: Any) -> dict[str, dict[str, list[list[tuple[str, int, int]]]]]:
    """A timed group's profiled kernels per competitor and region (none from a timer that keeps none)."""
    return dict(getattr(result, "kernels", None) or {})


def time_parts(config: ModelConfig, precisions: Sequence[str], group: TimeGroup) -> PartsTiming:
    """Every part's samples: three groups (layers per precision, vocabulary parts, optimizer sizes),
    with each part's profiled rounds' kernels (:attr:`PartsTiming.kernels`)."""
    failures: dict[str, str] = {}
    layers, vocab, optimizer, check = {}, {}, {}, {}
    kernels: dict[tuple[str, str], tuple[str, list[list[tuple[str, int, int]]]]] = {}

    def keep(result: Any, source: str, names: dict[str, str] | None = None) -> None:
        for name, regions in _group_kernels(result).items():
            for region, rounds in regions.items():
                if rounds:
                    kernels[(region, (names or {}).get(name, name))] = (source, rounds)

    shared = Operands()  # one set of BF16 weights, main gradients and inputs for every precision
    builders: dict[str, Callable[[], Competitor]] = {p: functools.partial(layer_competitor, config, p, shared)
                                                     for p in precisions}
    result, failed = group(builders, True, "layers")
    failures.update(failed)
    if result is not None:
        layers = dict(result.samples)
        check["layers"] = result.cross_check
        keep(result, "graph replays")
    missing = [p for p in precisions if p not in layers]
    if missing:  # a capture that failed: the same regions timed eagerly (GPU-bound: the host runs ahead)
        result, failed = group({p: builders[p] for p in missing}, False, "layers (eager)")
        failures.update({f"eager/{k}": v for k, v in failed.items()})
        if result is not None:
            layers.update(result.samples)
            check["layers_eager"] = {"precisions": sorted(result.samples), **result.cross_check}
            keep(result, "eager rounds")
    del builders, shared  # the layer's shared weights and main gradients: not held through the next groups
    # Eager: the embedding's CUDA backward reads its segment count on the host (a sync no graph can
    # hold), as it does in the real step; the head's GEMMs take tens of milliseconds.
    result, failed = group({"bf16": lambda: vocab_competitor(config)}, False, "vocabulary")
    failures.update({f"vocab/{k}": v for k, v in failed.items()})
    if result is not None and "bf16" in result.samples:
        vocab = result.samples["bf16"]
        check["vocabulary"] = result.cross_check
        keep(result, "eager rounds")
    sizes: dict[str, Callable[[], Competitor]] = {str(n): functools.partial(optimizer_competitor, n)
                                                  for n in OPTIMIZER_SIZES}
    result, failed = group(sizes, False, "optimizer")
    failures.update({f"optimizer/{k}": v for k, v in failed.items()})
    if result is not None:
        optimizer = {int(n): regions["optimizer"] for n, regions in result.samples.items()}
        check["optimizer"] = result.cross_check
        keep(result, "eager rounds")
    return PartsTiming(layers, vocab, optimizer, failures, check, kernels)


# --------------------------------------------------------------------------------- real run
class RealModel:
    """Embedding, ``layers`` layers (:func:`build_model_layer`: dense, mixture of experts or
    multi-latent attention), final norm, BF16 output layer, FP32 cross-entropy and the fused AdamW
    step over G micro-batches: a rank's training step as it really runs.

    A pipeline's first stage (issue 41 item 3, a mixture of experts' preset layout is PP > 1):
    ``head=False`` builds no output layer (the stage hands its output to the next one, whose gradient
    comes back: here a random one of the output's shape), and ``in_flight`` micro-batches are run
    forward before the first of them is run backward, then one forward and one backward in turn, as
    Megatron's 1F1B schedule runs its first stage (without virtual stages): the stage holds that many
    micro-batches' activations at its peak. ``in_flight=1`` with the head is the whole rank of PP 1."""

    def __init__(self, config: ModelConfig, layers: int, precision: str, *, optimizer_shards: int = 1,
                 head: bool = True, in_flight: int = 1, grad_dtype: torch.dtype = torch.float32,
                 fp8_primary: bool = False) -> None:
        if in_flight < 1:
            raise ValueError(f"micro-batches in flight {in_flight} is not a positive whole number")
        self.config = config
        self.recipe = make_recipe(precision)
        if fp8_primary and self.recipe is None:
            raise ValueError(f"FP8 primary weights need an FP8 recipe, not {precision}")
        self.in_flight = in_flight
        self.embedding = Embedding(config, grad_dtype)
        # FP8 primary weights (Megatron's --fp8-param-gather): the layers' TE modules hold only their
        # quantized weights; the embedding and output layer stay BF16, as Megatron keeps them.
        init = te.quantized_model_init(enabled=True, recipe=self.recipe) if fp8_primary else contextlib.nullcontext()
        with init:
            self.layers = torch.nn.ModuleList(build_model_layer(config, main_grads=False) for _ in range(layers))
        for layer in self.layers:
            add_main_grads(layer, grad_dtype)
        self.head = Head(config, grad_dtype) if head else None
        self.modules = torch.nn.ModuleList([self.embedding, *self.layers, *([self.head] if self.head else [])])
        self.params = [p for p in self.modules.parameters()]
        #: The parameters whose FP32 master weights and moments this rank holds: all of them, or, with
        #: ``optimizer_shards`` (Megatron's distributed optimizer over DP x CP ranks), the first ones
        #: up to 1 / shards of the count, the rank's slice of the flat buffer; the FP32 main gradients
        #: stay whole, as the distributed optimizer keeps them.
        self.owned = shard_of(self.params, optimizer_shards)
        self.masters = [to_master(p) for p in self.owned]
        self.grad_dtype = grad_dtype
        if grad_dtype == torch.float32:
            for m, p in zip(self.masters, self.owned, strict=True):
                m.grad = p.main_grad  # type: ignore[attr-defined]  # FP32 already: Megatron aliases it too
        self.optimizer = torch.optim.AdamW(self.masters, lr=1e-5, weight_decay=0.1, fused=True)

    @property
    def parameter_count(self) -> int:
        return sum(p.numel() for p in self.params)

    def step(self, microbatches: int) -> float:
        """One optimizer step over G micro-batches of the config's micro-batch size (the layers are
        built for it: a mixture of experts routes exactly its tokens); returns the last loss (0 for a
        stage without the output layer). Up to ``in_flight`` micro-batches are held forward before
        their backward (the class docstring says why)."""
        loss = torch.zeros((), device=DEVICE)
        held: list[torch.Tensor] = []

        def backward(out: torch.Tensor) -> None:
            if self.head is not None:
                out.backward()
            else:
                out.backward(torch.randn_like(out))  # the next stage's gradient of this stage's output
            fold_unfused_grads(self.modules)

        for i in range(microbatches):
            tokens, labels = _tokens(self.config), _tokens(self.config)
            x = self.embedding(tokens)
            with te.autocast(enabled=self.recipe is not None, recipe=self.recipe):
                for layer in self.layers:
                    x = layer(x, is_first_microbatch=(i == 0))
            if self.head is not None:
                loss = self.head(x, labels)
                held.append(loss)
            else:
                held.append(x)
            if len(held) >= self.in_flight:
                backward(held.pop(0))
        while held:
            backward(held.pop(0))
        if self.grad_dtype != torch.float32:
            # BF16 main gradients: the rank's shard is cast to FP32 for the optimizer step, as
            # Megatron's distributed optimizer copies its shard of the BF16 buffer (a transient).
            for m, p in zip(self.masters, self.owned, strict=True):
                m.grad = p.main_grad.float()  # type: ignore[attr-defined]
        self.optimizer.step()
        with torch.no_grad():
            for p, master in zip(self.owned, self.masters, strict=True):
                from_master(p, master)
            if self.grad_dtype != torch.float32:
                for m in self.masters:
                    m.grad = None
        torch._foreach_zero_([p.main_grad for p in self.params])  # type: ignore[attr-defined]
        return float(loss.detach())


def sustain(model: RealModel, microbatches: int, seconds: float, *, least: int = 1) -> int:
    """Run whole steps back to back for at least ``seconds`` (and ``least`` steps), then wait for the
    GPU: the steps that follow start at the clock a sustained load holds. Returns the steps run.

    Why (issue 43 item 7): the parts are timed in rounds that keep the GPU loaded for seconds (the
    timer's spin-up, then graph rounds), where an H200 under its 700 W cap settles at 1400-1700 MHz;
    a real run of a few 70 ms steps timed right after an idle moment (building the model, collecting
    garbage, starting the profiler) runs at up to 1980 MHz. Held to such a run, the composition was
    3-5% slow at G = 1 and fine at G = 8, whose steps last long enough to settle (session 15's H200
    runs, measurements/2026-11-28-session15). A real run graphed like the parts ran at the eager
    run's GPU time (65.21 against 65.36 ms): the host's launch gaps were not the cause."""
    steps = 0
    started = time.monotonic()
    while steps < least or time.monotonic() - started < seconds:
        model.step(microbatches)
        steps += 1
    torch.cuda.synchronize()
    return steps


def shard_of(params: Sequence[torch.Tensor], shards: int) -> list[torch.Tensor]:
    """The parameters one of ``shards`` data-parallel ranks updates: whole tensors in order until their
    count reaches 1 / ``shards`` of the total (at least one); all of them for one shard."""
    if shards < 1:
        raise ValueError(f"optimizer shards {shards} is not a positive whole number")
    if shards == 1:
        return list(params)
    target = sum(p.numel() for p in params) / shards
    owned: list[torch.Tensor] = []
    count = 0
    for p in params:
        if owned and count + p.numel() > target:
            break
        owned.append(p)
        count += p.numel()
    return owned


def time_real_steps(model: RealModel, microbatches: int, *, warmup: int = 2, steps: int = 5,
                    sustain_s: float = 0.0) -> Samples:
    """Whole optimizer steps timed with CUDA events (eager), after ``warmup`` untimed steps and at
    least ``sustain_s`` of them (:func:`sustain`), each step queued behind the last without a pause."""
    sustain(model, microbatches, sustain_s, least=warmup)
    events = []
    for _ in range(steps):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        model.step(microbatches)
        end.record()
        events.append((start, end))
    torch.cuda.synchronize()
    return Samples([start.elapsed_time(end) for start, end in events])


def real_gpu_profile(model: RealModel, microbatches: int, *, steps: int = 3,
                     sustain_s: float = 0.0) -> tuple[float, dict[str, float]]:
    """(GPU busy ms, ms per kind of kernel) of one whole step: the union of its kernels' intervals
    (the profiler's, as the time breakdown reads them) over ``steps`` steps, divided by ``steps``, and
    the same kernels classified (:func:`gemm_bench.results.breakdown.category_ms_per_step`): the second
    method the composed step's time and its breakdown are held to. With ``sustain_s``, the GPU is
    loaded that long first (:func:`sustain`) and at least that long is profiled (more steps where
    they are short), so that the profiler's start-up pause weighs little.

    Why beside the event time: the real model runs eagerly, and where the host launches kernels more
    slowly than the GPU runs them (a 4-layer model of 4096 tokens: many short FP8 kernels) the GPU
    waits between kernels; the event time counts that wait, the composed step (of CUDA-graph replay
    times, the GPU's time) does not. Comparing like with like, the proof holds the composition to the
    real run's GPU time and reports the host's wait beside it."""
    from gemm_bench.measure.timing import _activities, _profiler

    started = time.monotonic()
    ran = sustain(model, microbatches, sustain_s)
    step_s = (time.monotonic() - started) / ran
    steps = max(steps, math.ceil(sustain_s / step_s)) if sustain_s else steps
    with _profiler() as prof:
        for _ in range(steps):
            model.step(microbatches)
        torch.cuda.synchronize()
    kernels = [(a.name, a.start_ns, a.duration_ns) for a in _activities(prof) if a.kind == "kernel"]
    busy, parts = category_ms_per_step([kernels])
    return busy / steps, {c: ms / steps for c, ms in parts.items()}


def real_gpu_ms(model: RealModel, microbatches: int, *, steps: int = 3) -> float:
    """The GPU busy ms of one whole step (:func:`real_gpu_profile`)."""
    return real_gpu_profile(model, microbatches, steps=steps)[0]


def composed_parts(timing: PartsTiming, precision: str, medians: PartTimes, line: OptimizerLine, *, layers: int,
                   microbatches: int, params: int) -> dict[str, float] | None:
    """The composed step's kernel time per kind (GPU busy time only: idle is each part's own and no
    real step's), from each part's profiled rounds, weighted as :func:`~gemm_bench.question.model_step.
    step_ms` weighs the parts' times; None where a part was not profiled. The optimizer's kinds are the
    larger measured size's, scaled to the line at ``params`` (as the report composes them)."""
    size = max(OPTIMIZER_SIZES)
    parts = []
    for key, ms in ((("embedding", "bf16"), medians.embedding), (("head", "bf16"), medians.head),
                    (("layer-first", precision), medians.layer_first),
                    (("layer-cached", precision), medians.layer_cached),
                    (("optimizer", str(size)), median_ms(timing.optimizer[size]))):
        profiled = timing.kernels.get(key)
        block = step_breakdown(ms, profiled[1], profiled[0]) if profiled else None
        if block is None:
            return None
        parts.append({**block, "parts_ms": {**block["parts_ms"], "idle": 0.0}})
    embedding, head, first, cached, optimizer = parts
    return model_step_parts(embedding["parts_ms"], head["parts_ms"], first["parts_ms"], cached["parts_ms"], optimizer,
                            layers=layers, microbatches=microbatches, optimizer_ms=line.at(params))


def real_peak_bytes(model: RealModel, microbatches: int) -> int:
    """The allocator's peak over one step, everything the model holds included."""
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    model.step(microbatches)
    torch.cuda.synchronize()
    return int(torch.cuda.max_memory_allocated())


def rank_keywords(rank: SearchedRank, precision: str) -> dict[str, Any]:
    """:class:`RealModel`'s keywords for the rank the layout-search builds
    (:func:`~gemm_bench.question.stage_shape.searched_rank`) under ``precision``: the stage, the
    optimizer's shards, the main gradients' dtype and FP8 primary weights. The search, its step timing
    and the GPU memory test build the same rank from it."""
    return {"optimizer_shards": rank.optimizer_shards, "head": rank.head, "in_flight": rank.in_flight,
            "grad_dtype": torch.bfloat16 if rank.grad_dtype == "bf16" else torch.float32,
            "fp8_primary": rank.fp8_primary(precision)}


def step_samples(config: ModelConfig, layers: int, precision: str, sizes_and_gs: Sequence[tuple[int, int]], *,
                 steps: int = 3, **model: Any) -> dict[str, dict[str, list[float]]]:
    """The whole step's times in ms (CUDA events, eager, :func:`time_real_steps` after one untimed step)
    of the rank built at each micro-batch size of ``sizes_and_gs``, at the G given with it (the layout's G
    at that size, :func:`gemm_bench.question.layout.microbatches_at`): the step the run takes, timed
    directly, so the report quotes its tokens per second with no extrapolation (issue 41 item 3: "the
    tokens per second per GPU it then reaches, measured at that micro-batch"; two G extrapolated to G = 16
    multiplied their noise). ``model``: :class:`RealModel`'s keywords (the stage, the gradients' dtype, FP8
    primary weights, the optimizer's shards). Returns ``{size: {G: [ms, ...]}}``."""
    out: dict[str, dict[str, list[float]]] = {}
    for mbs, g in sizes_and_gs:
        with _clean():
            real = None
            try:
                real = RealModel(dataclasses.replace(config, micro_batch_size=mbs), layers, precision, **model)
                out[str(mbs)] = {str(g): time_real_steps(real, g, warmup=1, steps=steps).ms}
            finally:
                del real
    return out


def largest_microbatch(config: ModelConfig, layers: int, precision: str, *, limit: int = 64,
                       optimizer_shards: int = 1, head: bool = True, in_flight: int = 1,
                       grad_dtype: torch.dtype = torch.float32, fp8_primary: bool = False,
                       seed: int | None = None) -> dict[str, Any]:
    """The largest micro-batch whose whole steps (G = 1, or the ``in_flight`` micro-batches a first
    pipeline stage holds; two of them, so that the optimizer's moments are held through the second)
    run on this GPU with ``layers`` layers, by doubling then bisecting
    (:func:`~gemm_bench.measure.microbatch_search.search_largest`); an
    out-of-memory is the answer, never a crash. Each size builds its own model: a mixture of experts'
    layer routes the tokens of the micro-batch it was built for. ``optimizer_shards``: the distributed
    optimizer's DP x CP; ``head`` and ``in_flight``: the stage, ``grad_dtype`` and ``fp8_primary``: the
    main gradients' dtype and FP8 primary weights (:class:`RealModel`). ``seed``: the answer a stored
    search of the same rank found, tried first (with its neighbour), so that an unchanged answer costs
    two tries instead of the whole doubling; the answer is the same (the search's module says why), and
    the result says the seed it started from (``"seed"``, clamped to ``limit``)."""
    def fits(mbs: int) -> bool:
        with _clean():
            model = None
            try:
                model = RealModel(dataclasses.replace(config, micro_batch_size=mbs), layers, precision,
                                  optimizer_shards=optimizer_shards, head=head, in_flight=in_flight,
                                  grad_dtype=grad_dtype, fp8_primary=fp8_primary)
                # Two steps: the first allocates the optimizer's moments only at its end, after its
                # activations are freed; from the second on they are held through the forward and
                # backward, the peak a training run keeps (one step said a micro-batch "fits" that ran
                # out of memory from the second step on: Qwen2.5 7B BF16 at 4 on an H200, session 17).
                model.step(in_flight)
                model.step(in_flight)
                torch.cuda.synchronize()
                return True
            except torch.OutOfMemoryError:
                return False
            finally:
                del model

    started = time.monotonic()
    largest, tried = search_largest(fits, limit, seed)
    found: dict[str, Any] = {"largest": largest, "tried": tried, "seconds": round(time.monotonic() - started, 1)}
    if seed is not None:
        found["seed"] = min(seed, limit)
    return found


def median_ms(samples: Samples) -> float:
    return float(statistics.median(samples.ms))


def quartiles_ms(samples: Samples) -> tuple[float, float]:
    return quartiles(samples.ms)  # within the samples: "exclusive" extrapolates past them


def first_quartile_ms(samples: Samples) -> float:
    return quartiles_ms(samples)[0]


def third_quartile_ms(samples: Samples) -> float:
    return quartiles_ms(samples)[1]


# ------------------------------------------------------------------------------ the whole job
def capacity_bytes() -> int:
    """What the allocator can hold on this GPU now: free memory plus what it already reserved."""
    free, _ = torch.cuda.mem_get_info()
    return int(free + torch.cuda.memory_reserved())


def part_times(timing: PartsTiming, precision: str, statistic: Callable[[Samples], float]) -> PartTimes:
    layer = timing.layers[precision]
    return PartTimes(statistic(timing.vocab["embedding"]), statistic(timing.vocab["head"]),
                     statistic(layer["layer-first"]), statistic(layer["layer-cached"]))


def optimizer_line(timing: PartsTiming) -> OptimizerLine:
    sizes = sorted(timing.optimizer)
    return OptimizerLine((sizes[0], sizes[1]), (median_ms(timing.optimizer[sizes[0]]),
                                                median_ms(timing.optimizer[sizes[1]])))


def measure_model(config: ModelConfig, precisions: Sequence[str], settings: TimerSettings, *,
                  proof_layers: int = 0, microbatches: Sequence[int] = (1, 8), real_steps: int = 5,
                  search_layers: int = 0, search_limit: int = 16, group: TimeGroup | None = None,
                  sampler: Any = None) -> dict[str, Any]:
    """Parts, memory, the composed model step at each G, and (``proof_layers`` > 0) a real model of
    that many layers timed at each G beside its composition; (``search_layers`` > 0) the largest
    micro-batch of a real model of that many layers, per precision. JSON-ready. ``group``: the group
    timer (default: an :class:`~gemm_bench.measure.timing.Interleaver` with ``settings``).

    ``sampler`` (a :class:`~gemm_bench.measure.telemetry.ClockSampler`; the default group only): the
    SM clock and power of each parts group's timed rounds (``out["clocks"]``) and of each real run's
    timed steps (the proof entry's ``real_clock``), to tell a clock that differs between the parts
    and the real run (the power cap's doing) from a method that composes wrongly (issue 43 item 7)."""
    from gemm_bench.question.model_step import (
        composed_rows,
        largest_microbatch_predicted,
        layers_that_fit,
        memory,
        rank_parameters,
        step_ms,
        unsupported_reason,
    )

    reason = unsupported_reason(config)
    if reason:
        return {"unsupported": reason}
    out: dict[str, Any] = {"config": config.to_dict(), "precisions": list(precisions)}
    if config.is_moe:
        out["routing"] = ROUTING
    started = time.monotonic()
    clocks: dict[str, Any] = {}
    timing = time_parts(config, precisions, group or interleaver_group(settings, sampler, clocks))
    if clocks:
        out["clocks"] = clocks
    out["failures"] = timing.failures
    out["cross_check"] = timing.cross_check
    measured = [p for p in precisions if p in timing.layers]
    if not timing.vocab or len(timing.optimizer) < 2 or not measured:
        out["error"] = "a part was not measured"
        return out
    # the four timed parts (the attention fields, a window's bound, are read from stored profiles only)
    out["parts_ms"] = {p: {k: v for k, v in dataclasses.asdict(part_times(timing, p, median_ms)).items()
                           if v is not None} for p in measured}
    out["optimizer_ms"] = {str(n): median_ms(s) for n, s in timing.optimizer.items()}
    out["parts_s"] = round(time.monotonic() - started, 1)
    line = optimizer_line(timing)
    state = optimizer_memory(OPTIMIZER_SIZES[0])
    vocab_bytes = vocab_memory(config)
    mem = {p: memory_parts(config, p, state, vocab_bytes) for p in measured}
    layer_params = layer_memory(config, measured[0])["layer_params"]
    params = rank_parameters(config, layer_params)
    capacity = capacity_bytes()
    out.update(layer_params=layer_params, rank_params=params, capacity_bytes=capacity, state_per_param=state,
               memory_parts={p: dataclasses.asdict(m) for p, m in mem.items()})
    medians = {p: part_times(timing, p, median_ms) for p in measured}
    quart = {p: (part_times(timing, p, first_quartile_ms), part_times(timing, p, third_quartile_ms))
             for p in measured}
    from gemm_bench.question.hardware import peak_tflops

    peak = peak_tflops(torch.cuda.get_device_name(), "bf16")
    out["device"] = torch.cuda.get_device_name()
    out["rows"] = {str(g): [dataclasses.asdict(r) for r in composed_rows(
        config, medians, quart, line, params, microbatches=g, peak_bf16_tflops=peak)] for g in microbatches}
    out["memory"] = {p: memory(mem[p], params, layers=config.measured_layers).to_dict() for p in measured}
    vocab = vocab_parameters(config)
    out["layers_that_fit"] = {p: layers_that_fit(mem[p], capacity, layer_params=layer_params, vocab_params=vocab,
                                                 hidden_size=config.hidden_size) for p in measured}
    if proof_layers:
        proof: dict[str, Any] = {"layers": proof_layers}
        for p in measured:
            for g in microbatches:
                with _clean():
                    model = None
                    try:
                        model = RealModel(config, proof_layers, p)
                        # loaded as long as the parts' timer spins up (sustain's docstring says why)
                        if sampler is not None:
                            with sampler.sampling():
                                samples = time_real_steps(model, g, steps=real_steps, sustain_s=settings.spinup_s)
                            real_clock = sampler.summary()
                        else:
                            samples = time_real_steps(model, g, steps=real_steps, sustain_s=settings.spinup_s)
                            real_clock = None
                        gpu_ms, real_parts = real_gpu_profile(model, g, sustain_s=settings.spinup_s)
                        peak_bytes = real_peak_bytes(model, g)
                        count = model.parameter_count
                    except RuntimeError as exc:  # GPU boundary (out of memory included): the entry's reason
                        proof[f"{p}/G{g}"] = f"{type(exc).__name__}: {exc}"[:400]
                        continue
                    finally:
                        del model
                composed = step_ms(medians[p], layers=proof_layers, microbatches=g, optimizer_ms=line.at(count))
                predicted = memory(mem[p], count, layers=proof_layers).peak
                real = median_ms(samples)
                kinds = composed_parts(timing, p, medians[p], line, layers=proof_layers, microbatches=g, params=count)
                busy = sum(kinds.values()) if kinds else None
                # Held busy to busy (issue 43 item 7): the composition's kernel time (each part's profiled
                # kernels, weighted as the composition weighs the parts, their idle left out) against the
                # real run's (the union of its kernels). The composed step itself (``composed_ms``) also
                # holds the idle inside the eagerly timed parts (the embedding's host sync, the head's
                # and optimizer's launch gaps), which a busy time has not: on an H200 that idle was 1.35
                # of Mixtral 8x7B's 78.2 composed ms at G = 1, most of its 3-5% miss (session 15). Its
                # ratio to the real GPU time (``time_ratio``) and event time (``event_ratio``) stay beside.
                proof[f"{p}/G{g}"] = {"real_ms": real, "real_ms_all": samples.ms, "real_gpu_ms": gpu_ms,
                                      "host_wait_ms": max(0.0, real - gpu_ms), "composed_ms": composed,
                                      "composed_busy_ms": busy,
                                      "parts_idle_ms": None if busy is None else composed - busy,
                                      "busy_ratio": None if busy is None else busy / gpu_ms,
                                      "time_ratio": composed / gpu_ms, "event_ratio": composed / real,
                                      "params": count, "real_peak_bytes": peak_bytes,
                                      "composed_peak_bytes": predicted,
                                      "memory_ratio": predicted / peak_bytes if peak_bytes else None,
                                      # the breakdown's second method: kernel time per kind, real vs composed
                                      "real_parts_ms": real_parts, "composed_parts_ms": kinds,
                                      **({"real_clock": real_clock} if real_clock is not None else {})}
        out["proof"] = proof
    if search_layers:
        search: dict[str, Any] = {}
        for p in measured:
            try:
                found = largest_microbatch(config, search_layers, p, limit=search_limit)
            except RuntimeError as exc:  # GPU boundary: not an out-of-memory (that is an answer), a failure
                search[p] = f"{type(exc).__name__}: {exc}"[:400]
                continue
            count = rank_parameters(config, layer_params, layers=search_layers)
            found["predicted"] = largest_microbatch_predicted(mem[p], count, layers=search_layers,
                                                              capacity=capacity, limit=search_limit)
            search[p] = found
        out["largest_microbatch"] = {"layers": search_layers, **search}
    out["seconds"] = round(time.monotonic() - started, 1)
    return out


# ------------------------------------------------------------------------- the result block
def _part_cell(part: str, precision: str, samples: Samples | None, reason: str,
               profiled: tuple[str, list[list[tuple[str, int, int]]]] | None = None, **extra: Any) -> dict[str, Any]:
    """One part's stored cell; with ``profiled`` (its source and profiled rounds' kernels) its time
    breakdown (:func:`gemm_bench.measure.step.step_breakdown`, the layer step's own), issue 33."""
    if samples is None:
        return {"part": part, "precision": precision, "status": "failed", "reason": reason or "not measured", **extra}
    cell = {"part": part, "precision": precision, "status": "measured", "ms": round(samples.median, 6),
            "stats": samples.to_stats(), **extra}
    if profiled is not None:
        block = step_breakdown(cell["ms"], profiled[1], profiled[0])
        if block is not None:
            cell["breakdown"] = block
    return cell


def model_step_block(config: ModelConfig, precisions: Sequence[str], group: TimeGroup, run_id: str, *,
                     search_layers: int = 0, search_limit: int = 16) -> dict[str, Any] | None:
    """``doc["model_step"]`` (:mod:`gemm_bench.results.model_step_schema`): every part measured in
    ``group`` (the runner's interleaved group timer), the allocator's memory per precision, and with
    ``search_layers`` the largest micro-batch of a real model of that many layers. None when the
    question has no model step (:func:`gemm_bench.question.model_step.unsupported_reason`: no
    vocabulary, or a layer the layer step cannot build). A mixture of experts' block names its
    ``routing`` (:data:`ROUTING`)."""
    from gemm_bench.question.model_step import WHAT_IS_COMPOSED, unsupported_reason

    if unsupported_reason(config):
        return None
    timing = time_parts(config, precisions, group)
    cells = []
    for p in precisions:
        regions = timing.layers.get(p, {})
        why = timing.failures.get(p) or timing.failures.get(f"eager/{p}", "")
        cells += [_part_cell(r, p, regions.get(r), why, timing.kernels.get((r, p)))
                  for r in ("layer-first", "layer-cached")]
    vocab_why = timing.failures.get("vocab/bf16", "")
    cells += [_part_cell(r, "bf16", timing.vocab.get(r), vocab_why, timing.kernels.get((r, "bf16")))
              for r in ("embedding", "head")]
    for n in OPTIMIZER_SIZES:
        cells.append(_part_cell("optimizer", "bf16", timing.optimizer.get(n), timing.failures.get(f"optimizer/{n}", ""),
                                timing.kernels.get(("optimizer", str(n))), params=n))
    measured = [p for p in precisions if p in timing.layers]
    state = optimizer_memory(OPTIMIZER_SIZES[0])
    memory: dict[str, Any] = {}
    layer_params = 0
    try:  # once: the embedding and the head are BF16 under every recipe
        vocab = vocab_memory(config) if measured else {}
    except RuntimeError:  # GPU boundary: no precision has memory records then
        vocab = {}
    for p in measured if vocab else ():
        try:
            layer = layer_memory(config, p)
        except RuntimeError:  # GPU boundary: a precision without memory records is shown without them
            continue
        layer_params = layer.pop("layer_params")
        memory[p] = {**layer, **vocab}
    block: dict[str, Any] = {
        "run_id": run_id,
        "what": WHAT_IS_COMPOSED,
        "padded_vocab_size": config.padded_vocab_size,
        "layer_params": layer_params or layer_parameters(config),
        "capacity_bytes": capacity_bytes(),
        "state_per_param": state,
        "parts": cells,
        "memory": memory,
    }
    if config.is_moe:
        block["routing"] = ROUTING
    if search_layers:
        search: dict[str, Any] = {"layers": search_layers}
        for p in measured:
            try:
                search[p] = largest_microbatch(config, search_layers, p, limit=search_limit)
            except RuntimeError as exc:  # GPU boundary: a failure, not an out-of-memory (that is an answer)
                search[p] = f"{type(exc).__name__}: {exc}"[:400]
        block["largest_microbatch"] = search
    return block
