"""Issue 42 item 4: the layout's step per optimizer step, each term against a hand computation on a small
model with a collective table of round numbers (every cost a flat time per call, so the sums are exact)."""

from __future__ import annotations

import dataclasses

import pytest

from gemm_bench.question.comm import (
    ALL_GATHER,
    ALL_REDUCE,
    ALL_TO_ALL,
    REDUCE_SCATTER,
    SEND_RECV,
    CollectiveTable,
    Link,
    cp_attention_exchanges,
)
from gemm_bench.question.config import ConfigError, ModelConfig
from gemm_bench.question.layout import ParallelLayout
from gemm_bench.question.layout_step import (
    LayoutStep,
    Network,
    RecipeParts,
    bubble_ms,
    compute_speedup,
    layout_step,
    speedup,
)
from gemm_bench.question.model_step import OptimizerLine, PartTimes, megatron_flops, vocab_parameters

# A dense model: 8 layers, S = 1024, TP 2 measured.
CONFIG = ModelConfig(hidden_size=1024, ffn_hidden_size=4096, num_attention_heads=8, num_layers=8, seq_length=1024,
                     micro_batch_size=1, tensor_model_parallel_size=2, vocab_size=32000, num_microbatches=8)
PARTS = PartTimes(embedding=0.5, head=2.0, layer_first=3.0, layer_cached=2.0)
LOW = PartTimes(embedding=0.4, head=1.8, layer_first=2.8, layer_cached=1.8)
HIGH = PartTimes(embedding=0.6, head=2.2, layer_first=3.2, layer_cached=2.2)
RECIPE = RecipeParts(PARTS, LOW, HIGH)
LINE = OptimizerLine((1_000_000, 2_000_000), (1.0, 2.0))  # 1 ms per million parameters, through the origin
LAYER_PARAMS = 10_000_000
BIG = 1 << 40
# Every (op, dtype) flat: one size measured far above any call, so a call below it costs its time
# ("extrapolated": no message is cheaper than the cheapest measured).
FLAT = {ALL_GATHER: 0.1, REDUCE_SCATTER: 0.2, ALL_REDUCE: 0.05, ALL_TO_ALL: 0.3, SEND_RECV: 0.4}
TABLE = CollectiveTable({(op, dtype, g): {BIG: ms} for op, ms in FLAT.items()
                         for dtype in ("bf16", "fp32", "uint8") for g in (2, 4)})
NET = Network(gpus_per_node=8, inter_node=Link("test link", 100.0, 0.0))


def _step(layout: ParallelLayout, precision: str = "bf16", **kw: object) -> LayoutStep:
    kw.setdefault("network", NET)
    return layout_step(CONFIG, layout, precision, RECIPE, LINE, LAYER_PARAMS, TABLE, **kw)  # type: ignore[arg-type]


def test_tp_only_in_one_node_every_term_by_hand() -> None:
    # 2 GPUs: TP 2 with SP, DP 1, G = 4, no pipeline: compute + 8 layers x (4 all-gathers... ) per micro-batch
    layout = ParallelLayout(gpus=2, tp=2, num_microbatches=4)
    step = _step(layout)
    g = 4
    compute = (g * (0.5 + 2.0) + 8 * (3.0 + (g - 1) * 2.0)) / g
    assert step.compute_ms == pytest.approx(compute)
    # BF16 TP layer: 6 all-gathers and 4 reduce-scatters per layer (comm.tp_layer_collectives)
    per_layer = 6 * 0.1 + 4 * 0.2
    assert step.microbatch.comm_ms == pytest.approx(8 * per_layer)
    assert step.bubble_ms == 0.0 and step.dp.comm_ms == 0.0
    params = 8 * LAYER_PARAMS + 2 * vocab_parameters(CONFIG)
    assert step.optimizer_ms == pytest.approx(params / 1e6)
    total = g * (compute + 8 * per_layer) + params / 1e6
    assert step.step_ms == pytest.approx(total)
    tokens = g * 1 * 1024 / 2
    assert step.tokens_per_s == pytest.approx(tokens / (total * 1e-3))
    assert step.compute_tokens_per_s == pytest.approx(tokens / ((g * compute + params / 1e6) * 1e-3))
    assert step.comm_share == pytest.approx(g * 8 * per_layer / total)
    flops_per_token = float(megatron_flops(CONFIG)) / 1024
    assert step.tflops == pytest.approx(step.tokens_per_s * flops_per_token / 1e12)
    assert _step(layout, peak_tflops=1000.0).mfu == pytest.approx(step.tflops / 1000.0)


def test_fp8_current_adds_its_amax_all_reduces_and_gathers_in_fp8() -> None:
    layout = ParallelLayout(gpus=2, tp=2, num_microbatches=4)
    fp8 = _step(layout, "fp8-current")
    # the same 6 gathers (uint8) and 4 reduce-scatters, plus 4 amax all-reduces per layer
    assert fp8.microbatch.comm_ms == pytest.approx(8 * (6 * 0.1 + 4 * 0.2 + 4 * 0.05))
    assert {c.dtype for c, _ in fp8.microbatch.calls if c.op == ALL_GATHER} == {"uint8"}


def test_pipeline_bubble_send_recv_and_the_slower_stage() -> None:
    # 4 GPUs: TP 2, PP 2 with 2 virtual stages, G = 8: stages of 4 layers, the last holds the head
    layout = ParallelLayout(gpus=4, tp=2, pp=2, vpp=2, num_microbatches=8)
    step = _step(layout)
    g = 8
    first = (g * 0.5 + 4 * (3.0 + (g - 1) * 2.0)) / g
    last = (g * 2.0 + 4 * (3.0 + (g - 1) * 2.0)) / g
    assert step.compute_ms == pytest.approx(max(first, last))
    comm = 4 * (6 * 0.1 + 4 * 0.2) + 2 * 2 * 0.4  # 4 layers' TP + VPP x (send, receive)
    assert step.microbatch.comm_ms == pytest.approx(comm)
    t_mb = last + comm
    assert step.bubble_ms == pytest.approx((2 - 1) / 2 * t_mb)
    assert bubble_ms(layout, 10.0) == pytest.approx(5.0)
    stage_params = 4 * LAYER_PARAMS + vocab_parameters(CONFIG)
    assert step.optimizer_ms == pytest.approx(stage_params / 1e6)
    assert step.step_ms == pytest.approx(g * t_mb + step.bubble_ms + stage_params / 1e6)


def test_data_parallel_in_the_node_and_its_overlap_formulas() -> None:
    # 8 GPUs: TP 2, DP 4 (one node of 8): reduce-scatter + all-gather over 4, measured
    layout = ParallelLayout(gpus=8, tp=2, sharding="optimizer", num_microbatches=4)
    step = _step(layout)
    assert [(c.op, c.dtype, c.group, c.crosses_nodes) for c, _ in step.dp.calls] == [
        (REDUCE_SCATTER, "fp32", 4, False), (ALL_GATHER, "bf16", 4, False)]
    assert step.dp.comm_ms == pytest.approx(0.2 + 0.1) and step.dp_hidden_ms == 0.0
    params = 8 * LAYER_PARAMS + 2 * vocab_parameters(CONFIG)
    assert step.optimizer_ms == pytest.approx(params // 4 / 1e6)  # the distributed optimizer's shard
    hidden = _step(dataclasses.replace(layout, overlap_grad_reduce=True, overlap_param_gather=True))
    compute = hidden.compute_ms
    assert hidden.dp_hidden_ms == pytest.approx(min(0.2, 2 / 3 * compute) + min(0.1, 1 / 3 * compute))
    assert hidden.step_ms == pytest.approx(step.step_ms - hidden.dp_hidden_ms)


def test_fp8_param_gather_moves_one_byte_per_parameter() -> None:
    layout = ParallelLayout(gpus=8, tp=2, sharding="optimizer", fp8_param_gather=True, num_microbatches=4)
    gathers = [c for c, _ in _step(layout, "fp8-delayed").dp.calls if c.op == ALL_GATHER]
    params = 8 * LAYER_PARAMS + 2 * vocab_parameters(CONFIG)
    assert [(c.dtype, c.bytes) for c in gathers] == [("uint8", params)]
    assert [c.dtype for c, _ in _step(layout, "bf16").dp.calls if c.op == ALL_GATHER] == ["bf16"]


def test_across_nodes_the_assumed_link_costs_the_ring() -> None:
    # 32 GPUs: TP 2, DP 16 spans 4 nodes of 8: the ring over the 100 GB/s test link, no latency
    layout = ParallelLayout(gpus=32, tp=2, sharding="optimizer", num_microbatches=4)
    step = _step(layout)
    params = 8 * LAYER_PARAMS + 2 * vocab_parameters(CONFIG)
    rs, ag = step.dp.calls
    assert rs[0].crosses_nodes and rs[1].how == "assumed"
    assert rs[1].ms == pytest.approx(15 / 16 * params * 4 / 100e9 * 1e3)
    assert ag[1].ms == pytest.approx(15 / 16 * params * 2 / 100e9 * 1e3)
    assert step.assumed


def test_a_group_larger_than_the_box_is_scaled_and_assumed() -> None:
    # TP 2, DP 8 in a node of 16 GPUs: a group of 8, larger than the box's 4, within the node
    within = _step(ParallelLayout(gpus=16, tp=2, sharding="optimizer", num_microbatches=4),
                   network=Network(16, NET.inter_node))
    rs = within.dp.calls[0]
    assert rs[0].group == 8 and not rs[0].crosses_nodes and rs[1].how == "scaled"
    # ring: the box's 4-GPU time x bus_factor(8) / bus_factor(4) = 0.2 x (7/8) / (3/4)
    assert rs[1].ms == pytest.approx(0.2 * (7 / 8) / (3 / 4))


def test_context_parallel_ring_exchange_and_tokens() -> None:
    # TP 2, CP 2 (4 GPUs): the rank holds S/2 tokens; each layer passes K,V once forward, K,V + grads once back
    layout = ParallelLayout(gpus=4, tp=2, cp=2, num_microbatches=2)
    step = _step(layout)
    g = 2
    compute = 0.5 * (g * 2.5 + 8 * (3.0 + (g - 1) * 2.0)) / g  # x 1/CP: linear in tokens (assumed)
    assert step.compute_ms == pytest.approx(compute)
    assert any("linear" in a for a in step.assumptions)
    rank = dataclasses.replace(CONFIG, seq_length=512)
    calls = cp_attention_exchanges(rank, 2, 2)
    kv = 2 * 512 * (8 // 2) * 128 * 2  # K and V of the rank's tokens, its 4 KV heads, head dim 128, BF16
    assert [c.bytes for c in calls] == [kv, 2 * kv]
    assert step.microbatch.comm_ms == pytest.approx(8 * ((6 * 0.1 + 4 * 0.2) + 2 * 0.4))
    # and the DP collectives run over DP x CP = 2 ranks
    layout = ParallelLayout(gpus=8, tp=2, cp=2, sharding="optimizer", num_microbatches=2)
    assert {c.group for c, _ in _step(layout).dp.calls} == {4}


def test_expert_parallel_all_to_all_and_its_assumption() -> None:
    moe = ModelConfig(hidden_size=1024, ffn_hidden_size=2048, num_attention_heads=8, num_layers=4, seq_length=1024,
                      num_experts=8, moe_router_topk=2, vocab_size=32000)
    layout = ParallelLayout(gpus=4, ep=4, num_microbatches=2)
    step = layout_step(moe, layout, "bf16", RECIPE, LINE, LAYER_PARAMS, TABLE, network=NET)
    calls = [c for c, _ in step.microbatch.calls]
    assert [c.op for c in calls] == [ALL_TO_ALL] * 16  # 4 layers x dispatch, combine, and their gradients
    assert calls[0].bytes == 1024 * 2 * 1024 * 2 and calls[0].group == 4
    assert step.microbatch.comm_ms == pytest.approx(16 * 0.3)
    assert any("EP 4" in a for a in step.assumptions)


def test_speedup_and_its_spread_from_the_quartiles() -> None:
    layout = ParallelLayout(gpus=2, tp=2, num_microbatches=4)
    base = _step(layout)
    fast = layout_step(CONFIG, layout, "fp8-delayed", RecipeParts(
        PartTimes(0.5, 2.0, 2.0, 1.0), PartTimes(0.5, 2.0, 1.9, 0.9), PartTimes(0.5, 2.0, 2.1, 1.1)),
        LINE, LAYER_PARAMS, TABLE, network=NET)
    mid, low, high = speedup(fast, base)
    assert mid == pytest.approx(base.step_ms / fast.step_ms)
    assert low == pytest.approx(base.step_low_ms / fast.step_high_ms) and low < mid < high
    assert compute_speedup(fast, base) == pytest.approx(base.compute_step_ms / fast.compute_step_ms)
    assert compute_speedup(fast, base) > mid  # the same collectives weigh on the faster step more


def test_a_layout_at_another_tp_than_measured_is_refused_naming_it() -> None:
    with pytest.raises(ConfigError, match=r"--tensor-model-parallel-size: .*measure the layer at TP 4"):
        _step(ParallelLayout(gpus=4, tp=4))


def test_a_borrowed_table_makes_every_box_cost_assumed() -> None:
    step = _step(ParallelLayout(gpus=2, tp=2, num_microbatches=4), measured_on="H200")
    assert {cost.how for _, cost in step.microbatch.calls} == {"borrowed"}
    assert all("measured on H200" in cost.note for _, cost in step.microbatch.calls)
    assert step.assumed


@pytest.mark.parametrize(("method", "num_layers", "recomputed"), [
    (None, None, 8), ("uniform", 2, 8), ("block", 3, 3), ("block", 20, 8)])
def test_full_recomputation_adds_a_forward_to_the_layers_it_recomputes(method: str | None, num_layers: int | None,
                                                                       recomputed: int) -> None:
    """Red team, session 19: the step added a forward to every layer of a block-method layout, whose memory
    (and Megatron) recomputes only ``recompute_num_layers`` of them per virtual stage: Megatron-Bridge's Llama
    3 8B H100 run recomputes 5 of 32. The memory and the step now read one rule (``recomputed_layers``)."""
    from gemm_bench.question.layout import recomputed_layers
    from gemm_bench.question.layout_step import FORWARD_SHARE

    base = ParallelLayout(gpus=2, tp=2, num_microbatches=4)
    layout = ParallelLayout(gpus=2, tp=2, num_microbatches=4, recompute="full", recompute_method=method,
                            recompute_num_layers=num_layers)
    assert recomputed_layers(layout, 8) == recomputed and recomputed_layers(base, 8) == 0
    g = 4
    layer_work = 3.0 + (g - 1) * 2.0
    assert _step(layout).compute_ms - _step(base).compute_ms == pytest.approx(
        FORWARD_SHARE * recomputed * layer_work / g)
