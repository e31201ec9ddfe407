"""The shape of a layout's pipeline stages over a measured layer: one definition for memory and time.

Both compositions of a layout from one measured layer (memory per GPU,
:mod:`gemm_bench.question.memory_per_gpu`, and the step per optimizer step,
:mod:`gemm_bench.question.layout_step`) need the same three facts, and a page that quotes both must not
see them disagree, so they are computed here once:

* **the stage split**: the first stage holds ``ceil(L / PP)`` of the ``L`` measured layers plus the
  embedding, the last what is left (never fewer than none) plus the output layer; at PP 1 one stage
  holds all of them and both ends. Uneven splits (Llama 3.1 405B's 126 layers on PP 8: 16 and 14)
  are allowed, as :func:`~gemm_bench.question.layout.question_layout` allows them.
* **the expert-parallel weight factor**: a layout at an EP other than the measured layer's holds the
  parameters of a layer at that EP (:func:`~gemm_bench.question.model_step.layer_parameters`), so the
  measured layer's weights and parameters scale by their ratio (1 for a dense model or the measured EP).
* **what is not modelled**: a layout at another TP than the measured layer's (measure the layer at that
  TP), and expert tensor parallelism other than TP (the expert-TP weight factor is 1 by this rule).
"""

from __future__ import annotations

import dataclasses
import math

from gemm_bench.question.config import ConfigError, ModelConfig
from gemm_bench.question.layout import ParallelLayout, fp8_primary_weights
from gemm_bench.question.model_step import layer_parameters


@dataclasses.dataclass(frozen=True)
class Stage:
    """One pipeline stage a composition weighs: its name (``only`` at PP 1, else ``first`` or
    ``last``), its layers and whether it holds the embedding and the output layer."""

    name: str
    layers: int
    embedding: bool
    head: bool

    @property
    def vocab_ends(self) -> int:
        """How many vocabulary-sized parts (embedding, output layer) the stage holds: 0, 1 or 2."""
        return int(self.embedding) + int(self.head)


@dataclasses.dataclass(frozen=True)
class StageShape:
    """The stages a composition weighs and the factor of the measured layer's weights at the layout's EP."""

    stages: tuple[Stage, ...]
    weight_scale: float

    @property
    def first(self) -> Stage:
        """The first stage (the only one at PP 1): the one whose activations 1F1B keeps most of."""
        return self.stages[0]

    @property
    def first_layers(self) -> int:
        return self.first.layers


def stage_shape(layout: ParallelLayout, config: ModelConfig) -> StageShape:
    """The stages of ``layout`` over the measured question ``config`` (module docstring). A layout the
    measured layer cannot stand for raises a :class:`ConfigError` naming the option to change."""
    if layout.tp != config.tensor_model_parallel_size:
        raise ConfigError("tensor_model_parallel_size", f"the layout's TP {layout.tp} is not the measured "
                          f"layer's {config.tensor_model_parallel_size}: measure the layer at TP {layout.tp}")
    if layout.etp != layout.tp:
        raise ConfigError("etp", "expert tensor parallelism other than TP is not modelled")
    weight_scale = 1.0
    if config.is_moe and layout.ep != config.expert_model_parallel_size:
        at_ep = dataclasses.replace(config, expert_model_parallel_size=layout.ep)
        at_ep.validate()
        weight_scale = layer_parameters(at_ep) / layer_parameters(config)
    total = config.measured_layers
    if layout.pp == 1:
        return StageShape((Stage("only", total, True, True),), weight_scale)
    first = math.ceil(total / layout.pp)
    last = max(total - (layout.pp - 1) * first, 0)
    return StageShape((Stage("first", first, True, False), Stage("last", last, False, True)), weight_scale)


@dataclasses.dataclass(frozen=True)
class SearchedRank:
    """What the largest-micro-batch search builds for a layout (``tools/gpu_layout_search.py``): the
    stage it stands for (``only`` at PP 1, else ``first``), its layers, whether it holds the output
    layer, the micro-batches in flight at its peak (1F1B's count on the first stage), the rank's
    tokens (S / CP), the distributed optimizer's shards (DP x CP), the main gradients' dtype (the
    layout's gradient-reduce dtype: Megatron keeps them in the dtype it reduces them in) and whether
    an FP8 recipe's layers hold FP8 primary weights (the layout's FP8 parameter gather)."""

    stage: str
    layers: int
    head: bool
    in_flight: int
    tokens: int
    optimizer_shards: int
    grad_dtype: str = "fp32"
    fp8_param_gather: bool = False

    def fp8_primary(self, precision: str) -> bool:
        """Whether ``precision``'s layers are built with FP8 primary weights (the layout's rule)."""
        return fp8_primary_weights(self.fp8_param_gather, precision)


def searched_rank(layout: ParallelLayout, config: ModelConfig) -> SearchedRank | str:
    """The rank the search builds for ``layout`` over ``config``, or why it builds none. At PP 1 the whole
    rank (every layer, the embedding and the output layer, one micro-batch at a time); at PP > 1 the first
    stage (its layers and the embedding, no output layer, ``min(PP, G)`` micro-batches in flight, as
    Megatron's 1F1B keeps them there and :func:`~gemm_bench.question.memory_per_gpu.in_flight` counts
    them), the stage whose activations 1F1B keeps most of. Virtual stages interleave the first stage's
    chunks with others' in an order this build does not reproduce: not built."""
    if layout.pp > 1 and layout.vpp is not None and layout.vpp > 1:
        return f"pipeline parallel {layout.pp} with {layout.vpp} virtual stages: the interleaved stage is not built"
    shape = stage_shape(layout, config)
    first = shape.first
    tokens = config.seq_length // layout.cp
    shards = layout.dp * layout.cp
    held = (layout.grad_reduce_dtype, layout.fp8_param_gather)
    if layout.pp == 1:
        return SearchedRank("only", config.num_layers, True, 1, tokens, shards, *held)
    if shape.weight_scale != 1.0:
        return f"expert parallel {layout.ep}: the measured layer is at EP {config.expert_model_parallel_size}"
    return SearchedRank("first", first.layers, False, min(layout.pp, layout.microbatches), tokens, shards, *held)
