"""Issue 42 on CPU: the pure parts of the tensor-parallel step's measuring tool
(gemm_bench.measure.tp_step and tools/gpu_tp_comm.py): the safe environment, per-rank statistics,
the profiler's NCCL split, the sweep's plan, the cell's record and its composition, the table."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from gemm_bench.measure import tp_step
from gemm_bench.question import comm
from gemm_bench.question.config import ConfigError, preset

ROOT = Path(__file__).resolve().parent.parent
MIB = 1 << 20


def _tool() -> ModuleType:
    spec = importlib.util.spec_from_file_location("gpu_tp_comm", ROOT / "tools" / "gpu_tp_comm.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules.setdefault("gpu_tp_comm", module)
    spec.loader.exec_module(module)
    return module


def test_safe_env_overrides_an_inherited_one_and_is_asserted() -> None:
    env = {"NCCL_NVLS_ENABLE": "1", "NVSHMEM_DISABLE_NVLS": "0"}  # what setdefault would have kept
    wrong = r"NCCL_NVLS_ENABLE='1' \(must be '0'\).*TORCH_SYMM_MEM_DISABLE_MULTICAST=None"
    with pytest.raises(RuntimeError, match=wrong):
        tp_step.assert_safe_env(env)
    tp_step.force_safe_env(env)
    assert env == {"NCCL_NVLS_ENABLE": "0", "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1", "NVSHMEM_DISABLE_NVLS": "1"}
    tp_step.assert_safe_env(env)
    import os

    tp_step.assert_safe_env(os.environ)  # importing the module forced them in this process


def test_across_ranks_reports_rank0_and_the_slowest_rank() -> None:
    out = tp_step.across_ranks([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0, 7.0]])
    assert out["rank0"]["median_ms"] == 2.0 and out["rank0"]["q1_ms"] == 1.5 and out["rank0"]["q3_ms"] == 2.5
    assert out["max_rank"]["rank"] == 1 and out["max_rank"]["median_ms"] == 5.5
    assert out["per_rank_median_ms"] == {"0": 2.0, "1": 5.5}
    with pytest.raises(ValueError, match="no rank"):
        tp_step.across_ranks([None, []])


def test_kernel_split_counts_only_nccl_time_no_other_kernel_overlaps() -> None:
    # gemm 0-10 us, NCCL 5-15 us (overlapped 5-10, alone 10-15), gemm 20-30, NCCL 30-32 (alone)
    kernels = [("nvjet_gemm", 0, 10_000), ("ncclDevKernel_AllGather_RING_LL", 5_000, 10_000),
               ("nvjet_gemm", 20_000, 10_000), ("ncclKernel_ReduceScatter", 30_000, 2_000)]
    split = tp_step.region_kernel_split(kernels)
    assert split == pytest.approx({"nccl_ms": 0.012, "other_ms": 0.020, "busy_ms": 0.027,
                                   "compute_busy_ms": 0.020, "nccl_exposed_ms": 0.007})
    mean = tp_step.mean_split([split, split])
    assert mean["nccl_exposed_share"] == pytest.approx(7 / 27, abs=1e-6) and mean["regions"] == 2


def test_sweep_plan_holds_powers_of_two_the_step_sizes_and_the_amax_all_reduces() -> None:
    config = tp_step.tp_config(preset("llama3-8b"), 2)
    needed = comm.sizes_needed(comm.tp_layer_collectives(config, 2, "fp8-block")
                               + comm.tp_layer_collectives(config, 2, "fp8-delayed"))
    plan = tp_step.sweep_plan(needed, 2)
    assert 33 * MIB in plan[("all-gather", "uint8")] and 66 * MIB in plan[("all-gather", "uint8")]
    assert plan[("all-gather", "bf16")] == [MIB << i for i in range(10)]  # 1 MiB .. 512 MiB
    assert {4, 32, 48}.issubset(plan[("all-reduce", "fp32")])
    assert ("send-recv", "bf16") in plan and ("all-to-all", "bf16") in plan
    assert tp_step.sweep_plan(needed, 4)[("all-gather", "uint8")] == [MIB << i for i in range(10)]  # TP 2's sizes only


def test_tp_config_is_one_validated_layer_with_sequence_parallelism() -> None:
    config = tp_step.tp_config(preset("llama3-70b"), 4)
    assert (config.tensor_model_parallel_size, config.sequence_parallel, config.num_layers) == (4, True, 1)
    with pytest.raises(ValueError, match="3 does not divide"):
        tp_step.tp_config(preset("llama3-8b"), 3)


def _part(real: list[float], compute: list[float], full: list[float] | None = None,
          stand_ins: dict[str, Any] | None = None, serial: list[float] | None = None) -> dict[str, Any]:
    def competitor(samples: list[float]) -> dict[str, Any]:
        return {"method": "cuda-graph", "capture_error": None, "warmup_iterations": 3,
                "samples": {"first": samples, "cached": samples}, "profile": None, "profile_error": None}

    part = {"real": competitor(real), "compute": competitor(compute)}
    if full is not None:
        part["compute_full"] = competitor(full)
    if serial is not None:
        made = {"made_sync": 4}
        part["real_serial"] = {**competitor(serial), "serialized": {"first": made, "cached": made}}
    if stand_ins is not None:
        part["compute"]["stand_ins"] = {"first": stand_ins, "cached": stand_ins}
    return part


def test_assemble_cell_composes_the_slowest_ranks_and_merges_the_sweep() -> None:
    config = tp_step.tp_config(preset("llama3-8b"), 2)
    calls = comm.tp_layer_collectives(config, 2, "bf16")
    records = [[{"op": "all-gather", "dtype": "bf16", "group": 2, "bytes": 64 * MIB, "ms": 0.2, "rank": r},
                {"op": "reduce-scatter", "dtype": "bf16", "group": 2, "bytes": 64 * MIB, "ms": 0.25 - 0.01 * r,
                 "rank": r}] for r in (0, 1)]
    merged = tp_step.table_records(records)
    assert [(m["op"], m["ms"]) for m in merged] == [("all-gather", 0.2), ("reduce-scatter", 0.25)]  # the slowest
    table = comm.CollectiveTable.from_records(merged)
    cell = tp_step.assemble_cell([_part([12.0] * 5, [10.0] * 5), _part([12.4] * 5, [9.0] * 5)], calls, table)
    cached = cell["composed"]["cached"]
    # compute: the slowest rank's 10 ms; 6 x 0.2 + 4 x 0.25 = 2.2 ms of collectives; real: the slowest, 12.4
    assert cached["step_ms"] == pytest.approx(12.2) and cached["real_ms"] == 12.4
    assert cached["composed_over_real"] == pytest.approx(12.2 / 12.4, abs=1e-6)
    assert cached["hidden_over_real"] == pytest.approx(11.3 / 12.4, abs=1e-6)
    assert cached["measured_comm_share"] == pytest.approx(1 - 10 / 12.4, abs=1e-6)
    assert cell["real"]["regions"]["cached"]["rank0"]["median_ms"] == 12.0
    assert "composed" not in tp_step.assemble_cell([_part([1.0] * 3, [1.0] * 3)], None, None)
    assert "compute_full_ms" not in cached and "stand_in_check" not in cached  # neither was timed


def test_the_composition_is_from_the_stood_in_sp_compute_and_the_full_sequence_one_is_a_row_beside() -> None:
    config = tp_step.tp_config(preset("llama3-8b"), 2)
    calls = comm.tp_layer_collectives(config, 2, "bf16")
    table = comm.CollectiveTable({("all-gather", "bf16", 2): {64 * MIB: 0.2},
                                  ("reduce-scatter", "bf16", 2): {64 * MIB: 0.25}})
    # what the stand-ins saw: 6 gathers (output 64 MiB) and 4 reduce-scatters (input 64 MiB) in BF16
    seen = {"totals": {"all-gather": {"calls": 6, "bytes": 6 * 64 * MIB},
                       "reduce-scatter": {"calls": 4, "bytes": 4 * 64 * MIB}}, "amax_reduction_requests": 0}
    # the SP compute 9.9 ms, the full-sequence one 10.6 ms (its LayerNorms on S tokens), real 12.2 ms
    cell = tp_step.assemble_cell([_part([12.2] * 5, [9.9] * 5, [10.6] * 5, seen)], calls, table)
    cached = cell["composed"]["cached"]
    assert cached["compute_ms"] == 9.9 and cached["step_ms"] == pytest.approx(9.9 + 2.2)
    assert cached["composed_over_real"] == pytest.approx(12.1 / 12.2, abs=1e-6)
    assert cached["compute_full_ms"] == 10.6
    assert cached["composed_full_over_real"] == pytest.approx(12.8 / 12.2, abs=1e-6)
    assert cell["compute_full"]["regions"]["cached"]["max_rank"]["median_ms"] == 10.6
    assert cell["compute"]["stand_ins"]["cached"] is seen
    check = cached["stand_in_check"]
    assert check["bytes_match"] and check["per_op"]["all-gather"]["modelled"] == {"calls": 6, "bytes": 6 * 64 * MIB}
    # a layer that gathered less than the composition costs is flagged
    short = {"totals": {"all-gather": {"calls": 4, "bytes": 4 * 64 * MIB},
                        "reduce-scatter": {"calls": 4, "bytes": 4 * 64 * MIB}}}
    assert not tp_step.stand_in_check(short, calls)["bytes_match"]


def test_failed_sizes_stay_failed_in_the_merged_sweep() -> None:
    records = [[{"op": "all-reduce", "dtype": "fp32", "group": 2, "bytes": 4, "ms": 0.01, "rank": 0}],
               [{"op": "all-reduce", "dtype": "fp32", "group": 2, "bytes": 4, "ms": None, "rank": 1,
                 "error": "RuntimeError: NCCL"}]]
    merged = tp_step.table_records(records)
    assert merged[0]["ms"] is None and merged[0]["error"] == "RuntimeError: NCCL"
    assert comm.CollectiveTable.from_records(merged).keys() == []


def test_tool_arguments_and_table() -> None:
    tool = _tool()
    args = tool.parse_args(["--models", "llama3-8b", "--tp", "4,2", "--out", "x", "--precisions", "bf16"])
    assert args.tp == [2, 4] and args.models == ["llama3-8b"] and args.precisions == ["bf16"]
    with pytest.raises(SystemExit):
        tool.parse_args(["--out", "x", "--precisions", "mxfp8"])
    with pytest.raises(SystemExit):
        tool.parse_args(["--out", "x", "--tp", "two"])
    with pytest.raises(ConfigError, match="not a dense model"):  # a mixture of experts has no TransformerLayer
        tool.model_config("mixtral-8x7b", None)
    assert tool.model_config("llama3-70b", 4096).seq_length == 4096
    config = tp_step.tp_config(preset("llama3-8b"), 2)
    table = comm.CollectiveTable({("all-gather", "bf16", 2): {64 * MIB: 0.2},
                                  ("reduce-scatter", "bf16", 2): {64 * MIB: 0.25}})
    cell = tp_step.assemble_cell([_part([12.0] * 5, [10.0] * 5)], comm.tp_layer_collectives(config, 2, "bf16"), table)
    doc = {"cells": [{"model": "llama3-8b", "tp": 2, "precision": "bf16", "status": "measured", **cell},
                     {"model": "llama3-8b", "tp": 2, "precision": "fp8-block", "status": "failed",
                      "reason": "RuntimeError: out of memory"}]}
    text = tool.table(doc)
    assert "  12.000 cuda-graph   10.000        -   2.200   12.200   1.017       -" in text
    assert "fp8-block   failed: RuntimeError: out of memory" in text
    seen = {"totals": {"all-gather": {"calls": 6, "bytes": 6 * 64 * MIB},
                       "reduce-scatter": {"calls": 4, "bytes": 4 * 64 * MIB}},
            "amax_reduction_requests": 2, "nccl_sequence_checked": ["tp", "world"]}
    cell = tp_step.assemble_cell([_part([12.0] * 5, [10.0] * 5, [10.5] * 5, seen)],
                                 comm.tp_layer_collectives(config, 2, "bf16"), table)
    doc = {"cells": [{"model": "llama3-8b", "tp": 2, "precision": "bf16", "status": "measured", **cell}]}
    # compute (SP, stood in) 10.000, full sequence 10.500, composed from the first; full/r = 12.7 / 12
    assert "  12.000 cuda-graph   10.000   10.500   2.200   12.200   1.017   1.058" in tool.table(doc)
    assert tool.stand_in_lines(doc) == (
        "llama3-8b TP 2 bf16: stood in: all-gather 6 calls 384.0 MiB (modelled 6, 384.0 MiB); "
        "reduce-scatter 4 calls 256.0 MiB (modelled 4, 256.0 MiB); bytes match; amax reductions suppressed 2; "
        "NCCL sequence checked on tp, world")
    assert tool.parse_args(["--out", "x", "--no-full-compute"]).no_full_compute


def test_the_composition_is_held_to_the_serialized_real_step_and_the_overlap_is_measured() -> None:
    """Issue 42 item 3: no overlap on either side. Composed 12.2 ms (10 + 2.2); the real step with
    TE's asynchronous collectives 11.8 ms, serialized 12.3 ms: held ratio 12.2 / 12.3, and the 0.5 ms
    TE's overlap hid, measured."""
    config = tp_step.tp_config(preset("llama3-8b"), 2)
    calls = comm.tp_layer_collectives(config, 2, "bf16")
    table = comm.CollectiveTable({("all-gather", "bf16", 2): {64 * MIB: 0.2},
                                  ("reduce-scatter", "bf16", 2): {64 * MIB: 0.25}})
    cell = tp_step.assemble_cell([_part([11.8] * 5, [10.0] * 5, serial=[12.3] * 5)], calls, table)
    cached = cell["composed"]["cached"]
    assert cached["real_serial_ms"] == 12.3
    assert cached["composed_over_serial"] == pytest.approx(12.2 / 12.3, abs=1e-6)
    assert cached["composed_over_real"] == pytest.approx(12.2 / 11.8, abs=1e-6)
    assert cached["overlap_hidden_ms"] == pytest.approx(0.5)
    assert cell["real_serial"]["serialized"]["first"]["made_sync"] == 4
    assert "composed_over_serial" not in tp_step.assemble_cell([_part([11.8] * 5, [10.0] * 5)], calls, table)[
        "composed"]["cached"]  # a cell that did not time it


def test_the_lockstep_wait_is_the_synced_compute_less_the_compute_and_its_sync_points() -> None:
    """Issue 42 item 3: the ranks' wait for each other at each collective. Compute alone 10 ms; the
    same compute with 10 sync points 10.5 ms; a sync point (4-byte FP32 all-reduce over 2) 0.02 ms:
    wait 10.5 - 10 - 10 x 0.02 = 0.3 ms; composed 12.2 ms + 0.3 against the serialized 12.6."""
    config = tp_step.tp_config(preset("llama3-8b"), 2)
    calls = comm.tp_layer_collectives(config, 2, "bf16")
    table = comm.CollectiveTable({("all-gather", "bf16", 2): {64 * MIB: 0.2},
                                  ("reduce-scatter", "bf16", 2): {64 * MIB: 0.25},
                                  ("all-reduce", "fp32", 2): {4: 0.02}})
    part = _part([11.8] * 5, [10.0] * 5, serial=[12.6] * 5)
    synced = _part([0.0] * 5, [10.5] * 5)["compute"]
    part["compute_sync"] = {**synced, "stand_ins": {"first": {"syncs": 10}, "cached": {"syncs": 10}}}
    cached = tp_step.assemble_cell([part], calls, table)["composed"]["cached"]
    assert (cached["compute_sync_ms"], cached["sync_points"], cached["sync_point_ms"]) == (10.5, 10, 0.02)
    assert cached["lockstep_wait_ms"] == pytest.approx(0.3)
    assert cached["composed_lockstep_over_serial"] == pytest.approx(12.5 / 12.6, abs=1e-6)
    assert cached["composed_over_serial"] == pytest.approx(12.2 / 12.6, abs=1e-6)  # the old ratio beside
    # without the sync point's measured cost, the wait is the whole excess (and said so: no cost)
    bare = comm.CollectiveTable({("all-gather", "bf16", 2): {64 * MIB: 0.2},
                                 ("reduce-scatter", "bf16", 2): {64 * MIB: 0.25}})
    cached = tp_step.assemble_cell([part], calls, bare)["composed"]["cached"]
    assert cached["sync_point_ms"] is None and cached["lockstep_wait_ms"] == pytest.approx(0.5)
