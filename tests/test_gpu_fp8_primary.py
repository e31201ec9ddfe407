"""GPU test of what an FP8 primary weight weighs (issue 41: memory per GPU with FP8 parameter gather).

Megatron-Bridge's FP8 performance recipes gather FP8 parameters (``fp8_param_gather``): the layers
hold only their FP8 weights, built under ``te.quantized_model_init``. The memory per GPU
(:mod:`gemm_bench.question.memory_per_gpu`) takes such a layer to weigh what the measured FP8 weight
copy of a BF16 layer weighs (``layer_fp8_weights``: on Hopper the data and its transpose). This test
builds both on the GPU, for a dense and a mixture-of-experts layer, per-tensor FP8 recipe, and holds
the FP8 primary layer's bytes after a step to at most the copy's (the composition never counts less
than the GPU holds) and at least 90% of it; it prints the bytes per parameter of each.

On an H200 (TE 2.20.2, session 17) both held 2.000 bytes per parameter (data and transpose) except the
mixture of experts' copy under FP8 Delayed, which held 2.139: the copy carries per-GEMM scaling state
that the primary weights do not, so the composition is conservative there by 7% of the FP8 weights.

    python3 -m pytest -m gpu -s tests/test_gpu_fp8_primary.py
"""

from __future__ import annotations

import dataclasses

import pytest

from gemm_bench.question.question import build_question
from tests.gpu_skip import gpu_module

torch, _, pytestmark = gpu_module()

from gemm_bench.measure.backends.model_parts import fp8_primary_layer_bytes, layer_memory  # noqa: E402

#: The primary weights over the copy: never above (by more than the allocator's rounding), at most 10% below.
BOUNDS = (0.90, 1.01)


@pytest.mark.parametrize("model", ["llama3-8b", "mixtral-8x7b"])
@pytest.mark.parametrize("precision", ["fp8-delayed", "fp8-current"])
def test_an_fp8_primary_layer_weighs_the_measured_fp8_copy(model: str, precision: str) -> None:
    config = build_question(model=model).config
    assert config is not None
    config = dataclasses.replace(config, seq_length=2048)  # the weights do not depend on the tokens
    copy = layer_memory(config, precision)
    primary = fp8_primary_layer_bytes(config, precision)
    params = primary["layer_params"]
    assert params == copy["layer_params"]
    ratio = primary["after_step"] / copy["layer_fp8_weights"]
    print(f"{model} {precision}: BF16 weights {copy['layer_weights'] / params:.3f} B/param, FP8 copy "
          f"{copy['layer_fp8_weights'] / params:.3f} B/param; FP8 primary built {primary['built'] / params:.3f}, "
          f"after a step {primary['after_step'] / params:.3f} B/param; primary / copy {ratio:.3f}")
    assert BOUNDS[0] <= ratio <= BOUNDS[1]
