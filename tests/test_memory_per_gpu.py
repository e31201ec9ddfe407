"""Memory per GPU of a layout (issue 41), against hand-computed cases: every sharding mode, 1F1B with
and without virtual stages, context and sequence parallelism, recomputation, FP8 primary weights.

The parts are small round numbers so every expected value below is worked out by hand in its comment:
4 layers of 100 parameters (200 B BF16, 100 B FP8 copy, 1000 B activations, 50 B backward extra), an
embedding and an output layer of 400 B each (1024 parameters each: vocabulary 128 x hidden 8),
a 300 B logits transient, 16 B of state per parameter (4 FP32 main gradient + 12 master and moments).
"""

from __future__ import annotations

import dataclasses

import pytest

from gemm_bench.question.config import ConfigError, ModelConfig
from gemm_bench.question.layout import ParallelLayout
from gemm_bench.question.memory_per_gpu import (
    full_recompute_factor,
    in_flight,
    largest_micro_batch,
    memory_per_gpu,
    sp_factor,
    what_would_fit,
)
from gemm_bench.question.model_step import MemoryParts

PARTS = MemoryParts(layer_weights=200, layer_fp8_weights=100, layer_activations=1000, layer_backward_extra=50,
                    embedding_weights=400, head_weights=400, head_transient=300, state_per_param=16.0)
CONFIG = ModelConfig(hidden_size=8, ffn_hidden_size=16, num_attention_heads=2, num_layers=4, micro_batch_size=1,
                     seq_length=64, vocab_size=128, make_vocab_size_divisible_by=128)
CONFIG_TP2 = dataclasses.replace(CONFIG, tensor_model_parallel_size=2)  # padded vocab 256 / 2 = 128 rows: same
BIG = 10**9


def mem(layout: ParallelLayout, config: ModelConfig = CONFIG, precision: str = "bf16", capacity: int = BIG):
    return memory_per_gpu(PARTS, 100, config, layout, capacity=capacity, precision=precision)


# params: 4 x 100 + 2 x 1024 = 2448; grads 4 x 2448 = 9792; state 12 x 2448 = 29376
# weights 4 x 200 + 400 + 400 = 1600; fp8 4 x 100 = 400; activations 4 x 1000 = 4000; transient max(300, 50)
@pytest.mark.parametrize(("sharding", "weights", "grads", "state", "transient"), [
    ("none", 1600, 9792, 29376, 300),
    ("optimizer", 1600, 9792, 29376 // 2, 300),
    ("optimizer+grads", 1600, 9792 // 2, 29376 // 2, 300),
    ("fsdp", 1600 // 2, 9792 // 2, 29376 // 2, 300 + 200),  # + one layer's unsharded weights
])
def test_every_sharding_mode_at_dp_2(sharding, weights, grads, state, transient):
    m = mem(ParallelLayout(gpus=2, sharding=sharding))
    assert (m.stage, m.layers, m.weights, m.fp8_weights, m.gradients, m.optimizer_state, m.activations,
            m.transient) == ("only", 4, weights, 400, grads, state, 4000, transient)
    assert m.total == weights + 400 + grads + state + 4000 + transient


def test_bf16_gradient_reduce_halves_the_main_gradients():
    assert mem(ParallelLayout(gpus=2, grad_reduce_dtype="bf16")).gradients == 2 * 2448


def test_distributed_optimizer_shards_over_dp_times_cp():
    m = mem(ParallelLayout(gpus=4, cp=2, sharding="optimizer"))  # DP 2 x CP 2 = 4
    assert m.optimizer_state == 29376 // 4
    assert m.activations == 2000 and m.transient == 150  # half the tokens per rank: 4 x 1000 / 2, 300 / 2


def test_1f1b_first_stage_holds_min_g_pp_micro_batches_and_the_last_stage_can_be_heavier():
    # PP 2, 2 layers a stage; first stage: embedding 400 + 2 x 200 = 800, fp8 200, params 200 + 1024 = 1224,
    # grads 4896, state 14688, activations 2 x 1000 x min(G, PP) = 4000, transient max(-, 50) = 50: 24634.
    first = mem(ParallelLayout(gpus=2, pp=2, num_microbatches=8))
    assert (first.stage, first.activations, first.transient, first.total) == ("first", 4000, 50, 24634)
    # G = 1: first stage 22634; last stage (head, 1 micro-batch of activations 2000, logits 300) 22884.
    last = mem(ParallelLayout(gpus=2, pp=2, num_microbatches=1))
    assert (last.stage, last.activations, last.transient, last.total) == ("last", 2000, 300, 22884)


def test_interleaved_schedule_counts_megatrons_penalty():
    # v = 2 virtual stages: PP x (1 + (PP - 1) / (PP x v)) = 2 x 1.25 = 2.5 micro-batches of 2 layers.
    m = mem(ParallelLayout(gpus=2, pp=2, vpp=2, num_microbatches=8))
    assert (m.stage, m.activations) == ("first", 5000)


def test_sequence_parallel_factor_is_korthikantis_ratio():
    assert sp_factor(2, True) == pytest.approx(17 / 22)  # (34/2) / (10 + 24/2)
    assert sp_factor(2, False) == 1.0 and sp_factor(1, True) == 1.0
    m = mem(ParallelLayout(gpus=2, tp=2), CONFIG_TP2)  # SP on by default with TP 2
    assert m.activations == round(4 * 1000 * 17 / 22)
    assert mem(ParallelLayout(gpus=2, tp=2, sp=False), CONFIG_TP2).activations == 4000


def test_recomputation():
    assert mem(ParallelLayout(gpus=1, recompute="selective")).activations == 4000  # fused attention: no 5as/h term
    full = mem(ParallelLayout(gpus=1, recompute="full"))
    assert full_recompute_factor(1, False) == pytest.approx(2 / 34)
    assert (full.activations, full.transient) == (round(4 * 1000 * 2 / 34), 300 + 1000)
    assert mem(ParallelLayout(gpus=2, tp=2, recompute="full"), CONFIG_TP2).activations == round(4 * 1000 / 22)
    # block: only 1 layer per (virtual) stage recomputed, the other 3 keep their 1000 B.
    block = mem(ParallelLayout(gpus=1, recompute="full", recompute_method="block", recompute_num_layers=1))
    assert block.activations == round(1000 * 2 / 34 + 3 * 1000)


def test_fp8_parameter_gather_keeps_fp8_primary_weights_only_for_fp8_recipes():
    m = mem(ParallelLayout(gpus=1, fp8_param_gather=True), precision="fp8-current")
    assert (m.weights, m.fp8_weights) == (4 * 100 + 800, 0)
    assert mem(ParallelLayout(gpus=1, fp8_param_gather=True)).weights == 1600  # BF16: nothing to gather in FP8


def test_an_fp8_primary_weight_weighs_what_the_measured_fp8_copy_weighs():
    """On Hopper Transformer Engine keeps an FP8 weight's data and its transpose (2 bytes per
    parameter, as the measured copy shows); FP8 parameter gather keeps that copy as the weight, not
    1 byte per parameter (which made an FP8 primary layer half what it holds)."""
    hopper = dataclasses.replace(PARTS, layer_fp8_weights=200)  # 2 B per parameter of the 100
    m = memory_per_gpu(hopper, 100, CONFIG, ParallelLayout(gpus=1, fp8_param_gather=True), capacity=BIG,
                       precision="fp8-delayed")
    assert (m.weights, m.fp8_weights) == (4 * 200 + 800, 0)


def test_micro_batch_scales_activations_and_transients():
    m = mem(ParallelLayout(gpus=1, micro_batch_size=2))
    assert (m.activations, m.transient) == (8000, 600)


def test_what_would_fit_skips_what_changes_nothing_and_takes_the_first_that_fits():
    layout = ParallelLayout(gpus=1)
    base = mem(layout).total
    assert base == 45468
    name, result = what_would_fit(PARTS, 100, CONFIG, layout, capacity=43000)
    assert name == "full recompute" and result.total == 45468 - 4000 + round(4000 * 2 / 34) + 1000
    assert what_would_fit(PARTS, 100, CONFIG, layout, capacity=100) is None


def test_largest_micro_batch():
    fixed = 1600 + 400 + 9792 + 29376
    assert largest_micro_batch(PARTS, 100, CONFIG, ParallelLayout(gpus=1), capacity=fixed + 3 * 4300) == 3
    assert largest_micro_batch(PARTS, 100, CONFIG, ParallelLayout(gpus=1), capacity=fixed + 3 * 4300 - 1) == 2
    assert largest_micro_batch(PARTS, 100, CONFIG, ParallelLayout(gpus=1), capacity=fixed) == 0


def test_a_layout_at_another_tp_than_the_measured_layer_is_refused():
    with pytest.raises(ConfigError, match="measure the layer at TP 2"):
        mem(ParallelLayout(gpus=2, tp=2))


def test_expert_parallelism_scales_the_layers_weights_by_its_parameter_count():
    from gemm_bench.question.model_step import layer_parameters

    moe = dataclasses.replace(CONFIG, num_experts=4, moe_router_topk=2)
    scale = layer_parameters(dataclasses.replace(moe, expert_model_parallel_size=2)) / layer_parameters(moe)
    assert scale < 1
    m = mem(ParallelLayout(gpus=2, ep=2), moe)
    assert m.weights == round(4 * 200 * scale + 800)
    assert m.gradients == round(4 * (4 * 100 * scale + 2048))
    assert m.activations == 4000  # balanced routing: as many routed tokens per EP rank


# Interleaved 1F1B (PP 2, 2 virtual stages) with CP 2 on 8 GPUs (DP 2): each sharding mode divides by
# DP x CP = 4. Per micro-batch half the tokens (CP 2): a layer's activations 500, backward extra 25,
# logits 150. First stage (embedding, 2 layers): params 2 x 100 + 1024 = 1224, weights 400 + 400 = 800,
# FP8 copies 200, activations 2 layers x 500 x 2.5 micro-batches in flight (2 x (1 + 1 / (2 x 2))) = 2500.
@pytest.mark.parametrize(("sharding", "weights", "grads", "state", "transient", "total"), [
    ("none", 800, 4 * 1224, 12 * 1224, 25, 23109),
    ("optimizer", 800, 4 * 1224, 12 * 1224 // 4, 25, 12093),
    ("optimizer+grads", 800, 1224, 3672, 25, 8421),
    ("fsdp", 200, 1224, 3672, 25 + 200, 8021),  # + one layer's unsharded weights while it is gathered
])
def test_every_sharding_mode_with_virtual_stages_and_context_parallel(sharding, weights, grads, state, transient,
                                                                       total):
    m = mem(ParallelLayout(gpus=8, pp=2, vpp=2, cp=2, sharding=sharding, num_microbatches=8))
    assert (m.stage, m.layers, m.weights, m.fp8_weights, m.gradients, m.optimizer_state, m.activations,
            m.transient, m.total) == ("first", 2, weights, 200, grads, state, 2500, transient, total)


def test_virtual_stages_hold_more_in_flight_than_plain_1f1b_and_ignore_g():
    # Plain 1F1B at G >= PP holds PP = 2 micro-batches; interleaved with v = 2 holds 2.5, with v = 4
    # 2 x (1 + 1 / 8) = 2.25: Megatron's penalty shrinks as the virtual stages grow, whatever G.
    assert in_flight(ParallelLayout(gpus=2, pp=2, num_microbatches=8)) == 2.0
    assert in_flight(ParallelLayout(gpus=2, pp=2, vpp=2, num_microbatches=8)) == 2.5
    assert in_flight(ParallelLayout(gpus=2, pp=2, vpp=4, num_microbatches=8)) == 2.25
    assert in_flight(ParallelLayout(gpus=2, pp=2, vpp=4, num_microbatches=2)) == 2.25
    assert in_flight(ParallelLayout(gpus=4, pp=4, num_microbatches=2)) == 2.0  # 1F1B: min(G, PP)
