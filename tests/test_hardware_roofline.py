"""Device peaks, % of peak and the roofline, against values computed by hand.

Two shapes (4096x4096x4096, compute-bound; 16x4096x4096, memory-bound) on two devices (H100 SXM:
989.5 / 1,979 dense TFLOP/s, 3,350 GB/s; B200: 2,250 / 4,500 / 9,000 TFLOP/s, 8,000 GB/s), with
torchao's achievable fractions (78% compute, 92% bandwidth). The arithmetic is written out beside
each expected value.
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from gemm_bench.question import hardware
from gemm_bench.question.devices import ALIASES, device_slug
from gemm_bench.question.hardware import HardwareError, pct_of_peak, peak_tflops, peak_violations
from gemm_bench.question.shapes import GemmShape
from gemm_bench.report import roofline
from gemm_bench.report.roofline import Achievable, RooflineError, predict

BIG = GemmShape("square", "fprop", 4096, 4096, 4096)
SKINNY = GemmShape("skinny", "fprop", 16, 4096, 4096)
E = 4096 * 4096  # elements of one 4096x4096 operand


# ----------------------------------------------------------------------------- hardware table
def test_every_alias_device_has_a_spec_with_a_source() -> None:
    for alias, slug in ALIASES.items():
        spec = hardware.spec_for(alias)
        assert spec is not None, alias
        assert spec.slug == slug
        assert spec.url.startswith("https://www.nvidia.com/") or spec.url.startswith("https://resources.nvidia.com/")
        assert spec.source and spec.derivation
    assert set(hardware.SPECS) == set(ALIASES.values())


def test_spec_lookup_by_driver_name_slug_and_alias() -> None:
    assert hardware.spec_for("NVIDIA H100 80GB HBM3") is hardware.SPECS["h100-80gb-hbm3"]
    assert hardware.spec_for("h100") is hardware.SPECS["h100-80gb-hbm3"]
    assert hardware.spec_for("NVIDIA GH200 480GB") is hardware.SPECS["gh200-480gb"]
    # Exact identity: an H200 NVL is not an H200 SXM, and gets no peak rather than the wrong one.
    assert hardware.spec_for("NVIDIA H200 NVL") is None
    assert device_slug("NVIDIA H200") == "h200"


def test_peak_by_precision_format() -> None:
    assert peak_tflops("h100", "bf16") == 989.5
    for fp8 in ("fp8-delayed", "fp8-current", "fp8-block", "mxfp8"):
        assert peak_tflops("h100", fp8) == 1979.0
    assert peak_tflops("h100", "nvfp4") is None  # Hopper has no FP4 tensor cores
    assert peak_tflops("b200", "nvfp4") == 9000.0
    assert peak_tflops("b200", "mxfp8") == 4500.0
    assert peak_tflops("an unknown gpu", "bf16") is None


def test_dense_peaks_are_ordered_per_device() -> None:
    for spec in hardware.SPECS.values():
        assert spec.fp8_tflops == pytest.approx(2 * spec.bf16_tflops, rel=1e-9)
        if spec.fp4_tflops is not None:
            assert spec.fp4_tflops >= spec.fp8_tflops
        assert spec.memory_gbps > 0


def test_unknown_precision_is_named() -> None:
    with pytest.raises(HardwareError, match="'fp6'"):
        peak_tflops("h100", "fp6")


def test_pct_of_peak_hand_computed() -> None:
    # 4096^3 BF16: 2 * 4096^3 = 137,438,953,472 FLOP in 0.2 ms = 687.19 TFLOP/s;
    # / 989.5 (H100 dense BF16) = 69.448 %; / 2,250 (B200) = 30.542 %.
    assert pct_of_peak(BIG.flops, 0.2, "h100", "bf16") == pytest.approx(69.4486, abs=1e-3)
    assert pct_of_peak(BIG.flops, 0.2, "b200", "bf16") == pytest.approx(30.5418, abs=1e-3)
    # 16x4096x4096 FP8: 536,870,912 FLOP in 0.01 ms = 53.687 TFLOP/s; / 1,979 = 2.7129 %.
    assert pct_of_peak(SKINNY.flops, 0.01, "h100", "fp8-current") == pytest.approx(2.71284, abs=1e-4)
    # / 4,500 (B200 FP8) = 1.19305 %
    assert pct_of_peak(SKINNY.flops, 0.01, "b200", "mxfp8") == pytest.approx(1.19305, abs=1e-4)
    assert pct_of_peak(BIG.flops, 0.2, "somewhere-else", "bf16") is None
    with pytest.raises(HardwareError, match="positive"):
        pct_of_peak(BIG.flops, 0.0, "h100", "bf16")


def _doc(ms: float, precision: str = "bf16", status: str = "measured") -> dict:
    cell = {"mode": "prequant", "precision": precision, "op": "square", "pass": "fprop",
            "m": 4096, "k": 4096, "n": 4096, "groups": 1, "status": status}
    if status == "measured":
        cell["ms"] = ms
    else:
        cell["reason"] = "not here"
    return {"device": {"name": "NVIDIA H100 80GB HBM3"}, "cells": [cell]}


def test_peak_violation_flags_only_cells_above_100_percent() -> None:
    # 137,438,953,472 FLOP at 989.5 TFLOP/s takes 0.138897 ms: faster than that is impossible.
    assert peak_violations(_doc(0.14)) == []
    [violation] = peak_violations(_doc(0.1))
    assert violation.where == "$.cells[0]"
    assert violation.pct == pytest.approx(138.897, abs=1e-2)
    assert "1374.4 TFLOP/s" in violation.message and "989.5" in violation.message
    assert "FLOP count or the timing" in violation.message
    assert peak_violations(_doc(0.1, status="failed")) == []
    # NVFP4 on Hopper: no FP4 peak, nothing to check against.
    assert peak_violations(_doc(0.01, precision="nvfp4")) == []


# ----------------------------------------------------------------------------- roofline: GEMM
def test_h100_bf16_big_gemm_is_compute_bound() -> None:
    p = predict(BIG, "bf16", "prequant", "h100")
    assert p is not None
    # 137,438,953,472 FLOP / (989.5e12 x 0.78 = 771.81e12 FLOP/s) = 178.0736 us
    assert p.compute_ms == pytest.approx(0.1780736, rel=1e-6)
    # bytes: two 4096^2 BF16 operands + a BF16 output = 3 x 33,554,432 = 100,663,296 B;
    # / (3,350e9 x 0.92 = 3,082e9 B/s) = 32.6617 us
    assert p.gemm_bytes == 100_663_296
    assert p.memory_ms == pytest.approx(0.0326617, rel=1e-5)
    assert p.bound == "compute" and p.gemm_ms == p.compute_ms
    assert p.quant == () and p.total_ms == p.gemm_ms


def test_h100_bf16_skinny_gemm_is_memory_bound() -> None:
    p = predict(SKINNY, "bf16", "prequant", "h100")
    assert p is not None
    # bytes: (16x4096 + 4096x4096) x 2 + 16x4096 x 2 = 33,816,576 B; / 3,082e9 B/s = 10.97228 us
    assert p.gemm_bytes == 33_816_576
    assert p.gemm_ms == pytest.approx(0.01097228, rel=1e-5)
    assert p.bound == "memory"


def test_b200_bf16_both_shapes() -> None:
    big = predict(BIG, "bf16", "prequant", "b200")
    skinny = predict(SKINNY, "bf16", "prequant", "b200")
    assert big is not None and skinny is not None
    # 137,438,953,472 / (2,250e12 x 0.78) = 78.3128 us
    assert big.gemm_ms == pytest.approx(0.0783128, rel=1e-5) and big.bound == "compute"
    # 33,816,576 B / (8,000e9 x 0.92) = 4.594643 us
    assert skinny.gemm_ms == pytest.approx(0.004594643, rel=1e-5) and skinny.bound == "memory"


def test_b200_block_scaled_gemm_bytes_include_scales() -> None:
    mx = predict(BIG, "mxfp8", "prequant", "b200")
    fp4 = predict(BIG, "nvfp4", "prequant", "b200")
    assert mx is not None and fp4 is not None
    # MXFP8: 2E x 1 B + 2E / 32 scale bytes + E x 2 B output = 68,157,440 B -> 9.26052 us;
    # compute 137,438,953,472 / (4,500e12 x 0.78) = 39.1564 us (compute-bound).
    assert mx.gemm_bytes == 2 * E + 2 * E / 32 + 2 * E == 68_157_440
    assert mx.memory_ms == pytest.approx(0.00926052, rel=1e-5)
    assert mx.gemm_ms == pytest.approx(0.0391564, rel=1e-5)
    # NVFP4: 2E x 0.5 B + 2E / 16 + 2E = 52,428,800 B -> 7.12348 us; compute / 9,000e12 x 0.78
    # = 19.5782 us.
    assert fp4.gemm_bytes == 52_428_800
    assert fp4.memory_ms == pytest.approx(0.00712348, rel=1e-5)
    assert fp4.gemm_ms == pytest.approx(0.0195782, rel=1e-5)


def test_kernel_floor_bounds_tiny_gemms() -> None:
    tiny = GemmShape("t", "fprop", 16, 16, 16)
    p = predict(tiny, "bf16", "prequant", "h100")
    assert p is not None and p.bound == "launch" and p.gemm_ms == pytest.approx(0.002)


# ----------------------------------------------------------------------------- roofline: quantization
def test_h100_fp8_current_autocast_fprop_pays_amax_and_cast() -> None:
    p = predict(BIG, "fp8-current", "autocast", "h100")
    assert p is not None
    # Per tensor (X and W, E elements each): amax reads 2E B; cast+transpose reads 2E, writes 2E
    # (row-wise and transposed FP8) -> 6E B per tensor, 12E = 201,326,592 B in all;
    # / 3,082e9 B/s = 65.3234 us.
    assert [(k.name, k.tensor) for k in p.quant] == [
        ("amax", "X"), ("cast+transpose", "X"), ("amax", "W"), ("cast+transpose", "W")]
    assert sum(k.bytes for k in p.quant) == 12 * E
    assert p.quant_ms == pytest.approx(0.0653234, rel=1e-5)
    # GEMM: 137,438,953,472 / (1,979e12 x 0.78) = 89.0368 us; total 154.3602 us.
    assert p.gemm_ms == pytest.approx(0.0890368, rel=1e-5)
    assert p.total_ms == pytest.approx(0.1543602, rel=1e-5)
    # The same GEMM pre-quantized pays no quantization.
    pre = predict(BIG, "fp8-current", "prequant", "h100")
    assert pre is not None and pre.quant == () and pre.total_ms == pytest.approx(p.gemm_ms)


def test_h100_skinny_fp8_quantization_costs_more_than_the_gemm_saves() -> None:
    # Why FP8 can lose on small M: the weight's quantization dominates a memory-bound GEMM.
    bf16 = predict(SKINNY, "bf16", "autocast", "h100")
    fp8 = predict(SKINNY, "fp8-current", "autocast", "h100")
    assert bf16 is not None and fp8 is not None
    assert fp8.gemm_ms < bf16.gemm_ms < fp8.total_ms


def test_b200_passes_quantize_the_right_tensors() -> None:
    dgrad = GemmShape("square", "dgrad", 4096, 4096, 4096)
    wgrad = GemmShape("square", "wgrad", 4096, 4096, 4096)
    mx = predict(BIG, "mxfp8", "autocast", "b200")
    fp4 = predict(dgrad, "nvfp4", "autocast", "b200")
    none = predict(wgrad, "nvfp4", "autocast", "b200")
    assert mx is not None and fp4 is not None and none is not None
    # MXFP8 Fprop: per tensor read 2E, write 2E (row- and column-wise) + 2E / 32 scales;
    # 2 tensors = 2 x 17,825,792 B / (8,000e9 x 0.92) = 18.52104 us.
    assert mx.quant_ms == pytest.approx(0.01852104, rel=1e-5)
    # NVFP4 Dgrad quantizes dY only: amax 2E + cast (2E read, 2 x 0.5E data, 2E / 16 scales)
    # = 85,983,232 B / 7,360e9 B/s = 11.68250 us.
    assert [k.tensor for k in fp4.quant] == ["dY", "dY"]
    assert fp4.quant_ms == pytest.approx(0.0116825, rel=1e-5)
    # Wgrad reuses the column-wise copies: no quantization kernel.
    assert none.quant == ()


def test_fprop_only_questions_write_one_copy() -> None:
    with_bwd = predict(BIG, "fp8-delayed", "autocast", "h100")
    fwd_only = predict(BIG, "fp8-delayed", "autocast", "h100", backward=False)
    assert with_bwd is not None and fwd_only is not None
    assert sum(k.bytes for k in with_bwd.quant) == 2 * 4 * E  # read 2E, write 2E per tensor
    assert sum(k.bytes for k in fwd_only.quant) == 2 * 3 * E


def test_grouped_gemms_scale_by_groups() -> None:
    one = predict(BIG, "bf16", "autocast", "h100")
    eight = predict(GemmShape("mlp_up", "fprop", 4096, 4096, 4096, groups=8), "bf16", "autocast", "h100")
    assert one is not None and eight is not None
    assert eight.gemm_ms == pytest.approx(8 * one.gemm_ms)


def test_roofline_errors_name_the_value() -> None:
    with pytest.raises(RooflineError, match="'layer'"):
        predict(BIG, "bf16", "layer", "h100")
    with pytest.raises(RooflineError, match="'int8'"):
        predict(BIG, "int8", "prequant", "h100")
    with pytest.raises(RooflineError, match="compute"):
        Achievable(compute=1.5)
    assert predict(BIG, "nvfp4", "prequant", "h100") is None
    assert predict(BIG, "bf16", "prequant", "unknown-gpu") is None


def test_roofline_of_a_4096_square_bf16_gemm_on_the_h100() -> None:
    square = GemmShape("square", "fprop", 4096, 4096, 4096)
    found = predict(square, "bf16", "prequant", "NVIDIA H100 80GB HBM3")
    assert found is not None and found.total_ms == pytest.approx(0.1780736, rel=1e-6)
    assert predict(square, "bf16", "prequant", "NVIDIA A100-SXM4-80GB") is None


def test_method_and_prediction_serialize() -> None:
    p = predict(BIG, "fp8-block", "autocast", "h100")
    assert p is not None
    json.dumps(p.to_dict())
    described = roofline.method()
    assert described["achievable"]["compute"] == 0.78
    assert any("host overhead" in s for s in described["not_modelled"])


def test_hardware_and_roofline_import_without_torch() -> None:
    code = ("import sys, gemm_bench.question.hardware, gemm_bench.report.roofline\n"
            "bad = [m for m in sys.modules if m.split('.')[0] in ('torch', 'numpy', 'transformer_engine')]\n"
            "assert not bad, bad\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
