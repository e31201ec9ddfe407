"""Issue 42 on CPU: the collectives of a tensor-parallel layer step, call by call, and the
composition of a rank's step from measured collective costs (gemm_bench.question.comm).

Every expected number here is worked out by hand in the comment beside it (Llama 3 8B: 8192 tokens x
4096 hidden = 33,554,432 elements; BF16 64 MiB, FP8 32 MiB)."""

from __future__ import annotations

import math

import pytest

from gemm_bench.question import comm
from gemm_bench.question.config import preset

E = 8192 * 4096  # elements of Llama 3 8B's [S, B, H] at 8192 tokens, micro-batch 1
MIB = 1 << 20


def _ops(calls: tuple[comm.CollectiveCall, ...]) -> list[tuple[str, str, int]]:
    return [(c.op, c.dtype, c.bytes) for c in calls]


def test_bf16_tp_layer_runs_six_gathers_and_four_reduce_scatters_of_the_whole_activation() -> None:
    calls = comm.tp_layer_collectives(preset("llama3-8b"), 2, "bf16")
    assert [c.op for c in calls].count("all-gather") == 6  # 2 forward, 2 output gradients, 2 wgrad re-gathers
    assert [c.op for c in calls].count("reduce-scatter") == 4
    assert len(calls) == 10
    assert all(c.dtype == "bf16" and c.bytes == 2 * E == 64 * MIB and c.group == 2 for c in calls)
    # the backward's wgrad re-gathers and dgrad reduce-scatters are the async ones (TE's async_op=True)
    assert [c.what for c in calls if c.overlappable] == [
        "FC1 input again, for the weight gradient", "FC1 input gradient",
        "QKV input again, for the weight gradient", "QKV input gradient"]
    assert [c.phase for c in calls] == ["forward"] * 4 + ["backward"] * 6
    # each says what it overlaps with in TE (launch to wait): the most overlap could hide
    assert [c.overlaps_with for c in calls if c.overlappable] == [
        "FC2 data- and weight-gradient GEMMs, the activation's gradient and the FC1 data-gradient GEMM",
        "FC1 weight-gradient GEMM", "QKV data-gradient GEMM", "QKV weight-gradient GEMM"]
    assert all(not c.overlaps_with for c in calls if not c.overlappable)
    with pytest.raises(comm.CommError, match="only an overlappable call overlaps"):
        comm.CollectiveCall("all-gather", "bf16", 1, 2, "x", "forward", overlaps_with="a GEMM", kind="tp")
    assert all(c.source.startswith(comm.TE_SOURCE) for c in calls)


def test_per_tensor_fp8_gathers_one_byte_an_element_and_reduce_scatters_bf16() -> None:
    current = comm.tp_layer_collectives(preset("llama3-8b"), 2, "fp8-current")
    gathers = [c for c in current if c.op == "all-gather"]
    assert len(gathers) == 6 and all(c.dtype == "uint8" and c.bytes == E == 32 * MIB for c in gathers)
    assert all(c.dtype == "bf16" and c.bytes == 64 * MIB for c in current if c.op == "reduce-scatter")
    # current scaling: one FP32 amax all-reduce before each quantized SP tensor (2 forward, 2 backward)
    amaxes = [c for c in current if c.op == "all-reduce"]
    assert [(c.phase, c.bytes, c.dtype) for c in amaxes] == [("forward", 4, "fp32")] * 2 + [("backward", 4, "fp32")] * 2
    assert len(current) == 14
    delayed = comm.tp_layer_collectives(preset("llama3-8b"), 2, "fp8-delayed")
    # delayed scaling: the amax buffer once per pass: 4 GEMMs x 3 forward amaxes x 4 bytes, x 2 backward
    assert [(c.phase, c.bytes) for c in delayed if c.op == "all-reduce"] == [("forward", 48), ("backward", 32)]
    assert len(delayed) == 12


def test_block_scaling_gathers_fp8_data_with_its_scales_and_output_gradients_both_ways() -> None:
    calls = comm.tp_layer_collectives(preset("llama3-8b"), 2, "fp8-block")
    # a rank's shard is 4096 x 4096: row-wise scales ceil(4096/128) x roundup(4096, 4) = 32 x 4096 FP32
    # = 512 KiB per rank, 1 MiB for 2 ranks; column-wise ceil(4096/128) x 4096: the same 1 MiB
    one_way = 32 * MIB + 1 * MIB
    gathers = {c.what: c.bytes for c in calls if c.op == "all-gather"}
    assert gathers == {
        "QKV input (LayerNorm output)": one_way, "FC1 input (LayerNorm output)": one_way,
        "FC2 output gradient": 2 * one_way, "attention projection output gradient": 2 * one_way,
        "FC1 input again, for the weight gradient": one_way, "QKV input again, for the weight gradient": one_way}
    assert not [c for c in calls if c.op == "all-reduce"]  # block scales are local: no amax reduction


def test_tp4_block_scales_round_each_shard() -> None:
    config = preset("llama3-8b")
    # TP 4, shard 2048 x 4096: row-wise 32 x 2048 per rank x 4 ranks x 4 B = 1 MiB; column-wise
    # ceil(2048/128) = 16 x 4096 x 4 ranks x 4 B = 1 MiB
    calls = comm.tp_layer_collectives(config, 4, "fp8-block")
    assert calls[0].bytes == 32 * MIB + 1 * MIB and calls[0].group == 4
    assert comm._block_scale_bytes(100, 256, 2, columnwise=False) == 2 * (2 * 52 * 4)  # ceil(256/128) x roundup(50, 4)
    assert comm._block_scale_bytes(100, 256, 2, columnwise=True) == 2 * (1 * 256 * 4)  # ceil(50/128) x 256


def test_tp1_has_no_collectives_and_unmodelled_recipes_are_refused() -> None:
    assert comm.tp_layer_collectives(preset("llama3-8b"), 1, "bf16") == ()
    with pytest.raises(comm.CommError, match=r"mxfp8.*not modelled"):
        comm.tp_layer_collectives(preset("llama3-8b"), 2, "mxfp8")
    with pytest.raises(comm.CommError, match="divide by TP 3"):
        comm.tp_layer_collectives(preset("llama3-8b"), 3, "bf16")


def test_bus_bandwidth_is_nccl_tests() -> None:
    # all-gather of 64 MiB in 0.2 ms over 2 GPUs: 335.54 GB/s algorithm bandwidth, x 1/2
    assert comm.bus_bandwidth_gb_s("all-gather", 64 * MIB, 0.2, 2) == pytest.approx(167.772, rel=1e-5)
    # all-reduce over 4: x 2 * 3/4 = 1.5
    assert comm.bus_bandwidth_gb_s("all-reduce", 10**9, 10.0, 4) == pytest.approx(150.0)
    assert comm.bus_factor("send-recv", 2) == 1.0
    assert comm.bus_factor("all-to-all", 8) == 7 / 8


def test_table_interpolates_log_log_and_extrapolates_by_stated_rules() -> None:
    table = comm.CollectiveTable({("all-gather", "bf16", 2): {MIB: 0.02, 4 * MIB: 0.05}})
    assert table.cost("all-gather", "bf16", MIB, 2) == comm.Cost(0.02, "measured")
    mid = table.cost("all-gather", "bf16", 2 * MIB, 2)  # halfway in log(size): the geometric mean
    assert mid.how == "interpolated" and mid.ms == pytest.approx(math.sqrt(0.02 * 0.05))
    above = table.cost("all-gather", "bf16", 8 * MIB, 2)  # the largest size's bandwidth: twice its time
    assert above.how == "extrapolated" and above.ms == pytest.approx(0.1)
    below = table.cost("all-gather", "bf16", 1024, 2)  # the latency floor: the smallest's time
    assert below.how == "extrapolated" and below.ms == pytest.approx(0.02)
    with pytest.raises(comm.CommError, match=r"reduce-scatter of bf16 over 2 GPUs \(measured: all-gather bf16 x2\)"):
        table.cost("reduce-scatter", "bf16", MIB, 2)


def test_table_from_records_skips_failed_records_and_refuses_nonsense() -> None:
    table = comm.CollectiveTable.from_records([
        {"op": "all-reduce", "dtype": "fp32", "group": 2, "bytes": 8, "ms": 0.01},
        {"op": "all-reduce", "dtype": "fp32", "group": 2, "bytes": 16, "ms": None, "error": "RuntimeError: x"}])
    assert table.keys() == [("all-reduce", "fp32", 2)]
    with pytest.raises(comm.CommError, match="not a measured cost"):
        comm.CollectiveTable({("all-gather", "bf16", 2): {MIB: 0.0}})


def test_ring_over_the_assumed_link() -> None:
    link = comm.Link("test", bandwidth_gb_s=50.0, latency_us=10.0)
    # all-reduce of 1 GB over 8: 14 steps x 10 us + 2 x 7/8 x 1e9 / 50e9 s = 0.14 + 35 ms
    assert comm.ring_ms("all-reduce", 10**9, 8, link) == pytest.approx(35.14)
    assert comm.ring_ms("all-gather", 10**9, 1, link) == 0.0
    assert comm.INTER_NODE_DEFAULT.bandwidth_gb_s == 50.0  # 400 Gb/s NDR per GPU
    with pytest.raises(comm.CommError, match="bandwidth must be a positive"):
        comm.Link("bad", 0.0, 1.0)


def test_call_cost_measured_scaled_and_assumed() -> None:
    table = comm.CollectiveTable({("all-gather", "bf16", 2): {64 * MIB: 0.2}})
    on_box = comm.CollectiveCall("all-gather", "bf16", 64 * MIB, 2, "x", "forward", kind="tp")
    assert comm.call_cost(on_box, table) == comm.Cost(0.2, "measured")
    # TP 8 from the box's 2 GPUs, same bus bandwidth: 0.2 x (7/8) / (1/2) = 0.35 ms, assumed
    tp8 = comm.call_cost(comm.CollectiveCall("all-gather", "bf16", 64 * MIB, 8, "x", "forward", kind="tp"), table)
    assert tp8.how == "scaled" and tp8.assumed and tp8.ms == pytest.approx(0.35)
    across = comm.dp_grad_reduce_scatter(10**9 // 4, 8)  # 1 GB of FP32 gradients over 8 nodes
    cost = comm.call_cost(across, table)
    # reduce-scatter: 7 steps x 10 us + 7/8 x 1e9 / 50e9 s = 0.07 + 17.5 ms
    assert cost.how == "assumed" and cost.ms == pytest.approx(17.57) and "assumed: InfiniBand NDR" in cost.note


def test_composition_adds_everything_and_shows_what_overlap_could_hide() -> None:
    calls = comm.tp_layer_collectives(preset("llama3-8b"), 2, "bf16")
    table = comm.CollectiveTable({("all-gather", "bf16", 2): {64 * MIB: 0.2},
                                  ("reduce-scatter", "bf16", 2): {64 * MIB: 0.25}})
    step = comm.compose(10.0, calls, table)
    # 6 x 0.2 + 4 x 0.25 = 2.2 ms of collectives; the overlappable ones: 2 re-gathers + 2 dgrad RS = 0.9
    assert step.comm_ms == pytest.approx(2.2)
    assert step.step_ms == pytest.approx(12.2)
    assert step.overlappable_ms == pytest.approx(0.9)
    assert step.step_hidden_ms == pytest.approx(11.3)
    assert step.comm_share == pytest.approx(2.2 / 12.2)
    assert not step.assumed
    doc = step.to_dict()
    assert len(doc["calls"]) == 10 and doc["calls"][0]["how"] == "measured" and doc["step_ms"] == pytest.approx(12.2)
    with pytest.raises(comm.CommError, match="no measured cost for all-gather of uint8 over 2 GPUs"):
        comm.compose(10.0, comm.tp_layer_collectives(preset("llama3-8b"), 2, "fp8-delayed"), table)


def test_sizes_needed_lists_what_the_sweep_must_measure_exactly() -> None:
    calls = comm.tp_layer_collectives(preset("llama3-8b"), 2, "fp8-block")
    needed = comm.sizes_needed(calls)
    assert needed == {("all-gather", "uint8", 2): [33 * MIB, 66 * MIB], ("reduce-scatter", "bf16", 2): [64 * MIB]}


def test_expert_and_pipeline_bytes() -> None:
    mixtral = preset("mixtral-8x7b")  # 4096 tokens, top-2, hidden 4096: 4096 x 2 x 4096 x 2 B = 64 MiB
    calls = comm.ep_all_to_all(mixtral, 8)
    assert [c.bytes for c in calls] == [64 * MIB] * 4 and {c.op for c in calls} == {"all-to-all"}
    assert comm.ep_all_to_all(preset("llama3-8b"), 8) == ()  # dense: no experts to dispatch to
    sends = comm.pp_send_recv(preset("llama3-8b"), 2)  # the S/TP shard: 32 MiB each way
    assert [c.bytes for c in sends] == [32 * MIB] * 2
    gather = comm.dp_param_all_gather(1000, 4, fp8_param_gather=True)
    assert (gather.dtype, gather.bytes) == ("uint8", 1000)
    assert comm.dp_grad_all_reduce(1000, 4, grad_bytes=2).bytes == 2000
    with pytest.raises(comm.CommError, match="FP32 \\(4 bytes\\) or BF16"):
        comm.dp_grad_reduce_scatter(1000, 4, grad_bytes=1)


def test_the_methodology_states_the_defaults_the_code_uses() -> None:
    """The assumed link and the sweep's range are stated on the methodology page: the page's words
    must be the code's numbers (a default changed in one place only fails here)."""
    from pathlib import Path

    from gemm_bench.measure.tp_step import sweep_sizes

    page = " ".join((Path(__file__).resolve().parent.parent / "docs" / "methodology.rst").read_text(
        encoding="utf-8").split())
    link = comm.INTER_NODE_DEFAULT
    assert f"{link.bandwidth_gb_s * 8:g} Gb/s InfiniBand NDR" in page
    assert f"{link.bandwidth_gb_s:g} GB/s each way" in page  # the latency is the code's (no typed time in prose)
    sizes = sweep_sizes()
    assert f"from {sizes[0] >> 20} MiB to {sizes[-1] >> 20} MiB" in page
