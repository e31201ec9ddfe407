"""GPU test of memory per GPU (issue 41's done-when): the composed peak of a real stage within 5% of the
allocator's.

For a preset layout, the parts are measured as the refresh measures them (one layer's weights, FP8
copy, activations and backward extra; the embedding, output layer and logits; the optimizer's bytes
per parameter: :func:`~gemm_bench.measure.backends.model_parts.memory_parts`) and composed for the
layout by :func:`~gemm_bench.question.memory_per_gpu.memory_per_gpu`. Then the rank the layout-search
study builds (:func:`~gemm_bench.question.stage_shape.searched_rank`: the whole rank at PP 1, the first
stage with 1F1B's micro-batches in flight at PP > 1; BF16 or FP32 main gradients and FP8 primary
weights as the layout says; the distributed optimizer's slice of masters and moments) runs one step
to allocate the optimizer's moments, and the allocator's peak over the next step is held to the
composed total.

Cases: Llama 3 8B's Megatron-Bridge layout (8 GPUs, CP 2, BF16 gradients, FP8 primary weights: the
whole rank) and Mixtral 8x7B's (PP 4: the first stage, 8 layers, 4 micro-batches in flight).

    python3 -m pytest -m gpu -s tests/test_gpu_layout_memory.py
"""

from __future__ import annotations

import dataclasses

import pytest

from gemm_bench.question.question import build_question
from tests.gpu_skip import gpu_module

torch, _, pytestmark = gpu_module()

from gemm_bench.measure.backends import model_parts as mp  # noqa: E402
from gemm_bench.question.memory_per_gpu import memory_per_gpu  # noqa: E402
from gemm_bench.question.stage_shape import searched_rank  # noqa: E402

#: The issue's bound on the composed peak against the allocator's.
TOLERANCE = 0.05
GIB = 1 << 30


@pytest.mark.parametrize(("model", "precision"), [("llama3-8b", "bf16"), ("llama3-8b", "fp8-delayed"),
                                                  ("llama3-8b", "fp8-current"), ("mixtral-8x7b", "bf16"),
                                                  ("mixtral-8x7b", "fp8-current")])
def test_the_composed_peak_of_a_real_stage_is_the_allocators(model: str, precision: str) -> None:
    question = build_question(model=model)
    layout, _ = question.layout_or_assumed()
    config = question.config
    assert layout is not None and config is not None
    rank = searched_rank(layout, config)
    assert not isinstance(rank, str), rank
    state = mp.optimizer_memory(mp.OPTIMIZER_SIZES[0])
    layer = mp.layer_memory(config, precision)
    parts = mp.memory_parts(config, precision, state)
    composed = memory_per_gpu(parts, layer["layer_params"], config, layout, capacity=1 << 50, precision=precision)

    stage_config = dataclasses.replace(config, seq_length=rank.tokens)
    with mp._clean():
        start = mp._allocated()
        real = mp.RealModel(stage_config, rank.layers, precision, **mp.rank_keywords(rank, precision))
        real.step(rank.in_flight)  # the first step allocates the optimizer's moments
        held = mp._allocated() - start
        peak = mp.real_peak_bytes(real, rank.in_flight) - start
        del real
    ratio = composed.total / peak
    terms = {k: round(getattr(composed, k) / GIB, 2) for k in ("weights", "fp8_weights", "gradients",
                                                              "optimizer_state", "activations", "transient")}
    print(f"{model} {precision} ({composed.stage} stage, {rank.layers} layers, {rank.in_flight} in flight, "
          f"{rank.tokens} tokens): allocator peak {peak / GIB:.2f} GiB (held between steps {held / GIB:.2f}), "
          f"composed {composed.total / GIB:.2f} GiB {terms}; composed / real {ratio:.3f}")
    assert abs(ratio - 1) <= TOLERANCE
