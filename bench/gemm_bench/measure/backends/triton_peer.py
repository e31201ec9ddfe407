"""The example peer: a plain Triton matmul, BF16 and FP8 (E4M3, tensorwise scales).

Written for this project as the template a kernel author copies: one tiled kernel computing
``C = B @ A.T`` in TE's TN layout (``A`` the ``n x k`` weight, ``B`` the ``m x k`` input, both
row-major, so both tiles are read along K), FP32 accumulation, the dequantization scale applied
once to the accumulator, BF16 output. Tiles are fixed (no autotuning), so it is a fair "plain
Triton" baseline, not a tuned one. Imports torch and Triton.
"""

from __future__ import annotations

from typing import Any

import torch
import triton
import triton.language as tl

from gemm_bench.measure.timing import Competitor, Mark
from gemm_bench.question.shapes import GemmShape

BLOCK_M, BLOCK_N, GROUP_M = 128, 128, 8
BLOCK_K = {"bf16": 64, "fp8": 128}
NUM_WARPS, NUM_STAGES = 8, 3


@triton.jit
def _matmul_tn(
    b_ptr, a_ptr, c_ptr, scale_ptr, M, N, K,
    stride_bm, stride_bk, stride_an, stride_ak, stride_cm, stride_cn,
    HAS_SCALE: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
    GROUP_M: tl.constexpr,
):
    # Grouped launch order: GROUP_M row-blocks share their A tiles while they are in L2.
    pid = tl.program_id(0)
    num_pid_m = tl.cdiv(M, BLOCK_M)
    num_pid_n = tl.cdiv(N, BLOCK_N)
    in_group = GROUP_M * num_pid_n
    first_m = (pid // in_group) * GROUP_M
    group_m = min(num_pid_m - first_m, GROUP_M)
    pid_m = first_m + ((pid % in_group) % group_m)
    pid_n = (pid % in_group) // group_m

    offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    offs_k = tl.arange(0, BLOCK_K)
    b_ptrs = b_ptr + offs_m[:, None] * stride_bm + offs_k[None, :] * stride_bk  # BLOCK_M x BLOCK_K of B
    a_ptrs = a_ptr + offs_k[:, None] * stride_ak + offs_n[None, :] * stride_an  # BLOCK_K x BLOCK_N of A.T
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for step in range(0, tl.cdiv(K, BLOCK_K)):
        k_left = K - step * BLOCK_K
        b = tl.load(b_ptrs, mask=(offs_m[:, None] < M) & (offs_k[None, :] < k_left), other=0.0)
        a = tl.load(a_ptrs, mask=(offs_k[:, None] < k_left) & (offs_n[None, :] < N), other=0.0)
        acc = tl.dot(b, a, acc)
        b_ptrs += BLOCK_K * stride_bk
        a_ptrs += BLOCK_K * stride_ak
    if HAS_SCALE:
        acc = acc * tl.load(scale_ptr)
    c_ptrs = c_ptr + offs_m[:, None] * stride_cm + offs_n[None, :] * stride_cn
    tl.store(c_ptrs, acc.to(tl.bfloat16), mask=(offs_m[:, None] < M) & (offs_n[None, :] < N))


def matmul_tn(b: torch.Tensor, a: torch.Tensor, out: torch.Tensor, scale: torch.Tensor | None = None) -> torch.Tensor:
    """``out = (B @ A.T) * scale`` with the kernel above; ``B`` is ``m x k``, ``A`` is ``n x k``."""
    m, k = b.shape
    n, k_a = a.shape
    if k != k_a or tuple(out.shape) != (m, n):
        raise ValueError(f"shapes do not chain: B {tuple(b.shape)}, A {tuple(a.shape)}, out {tuple(out.shape)}")
    fmt = "fp8" if b.dtype == torch.float8_e4m3fn else "bf16"
    grid = (triton.cdiv(m, BLOCK_M) * triton.cdiv(n, BLOCK_N),)
    _matmul_tn[grid](
        b, a, out, scale if scale is not None else out, m, n, k,
        b.stride(0), b.stride(1), a.stride(0), a.stride(1), out.stride(0), out.stride(1),
        HAS_SCALE=scale is not None, BLOCK_M=BLOCK_M, BLOCK_N=BLOCK_N, BLOCK_K=BLOCK_K[fmt],
        GROUP_M=GROUP_M, num_warps=NUM_WARPS, num_stages=NUM_STAGES,
    )
    return out


def quantize_tensorwise(t: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(E4M3 tensor, FP32 dequantization scale): the amax maps to E4M3's largest value."""
    fmax = torch.finfo(torch.float8_e4m3fn).max
    scale = (t.abs().amax().float() / fmax).clamp(min=1e-12)
    return (t / scale).to(torch.float8_e4m3fn), scale


def matmul_competitor(gemm: GemmShape, *, fp8: bool) -> Competitor:
    """The GEMM alone (operands quantized before timing, as in pre-quantized mode)."""
    if gemm.groups != 1:
        raise ValueError("the Triton example peer is measured for dense GEMMs only")
    m, k, n = gemm.m, gemm.k, gemm.n
    a = torch.randn(n, k, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
    out = torch.empty(m, n, device="cuda", dtype=torch.bfloat16)
    scale: Any = None
    if fp8:
        a, sa = quantize_tensorwise(a)
        b, sb = quantize_tensorwise(b)
        scale = (sa * sb).reshape(1)

    def iteration(mark: Mark) -> None:
        mark(gemm.pass_, "start")
        matmul_tn(b, a, out, scale)
        mark(gemm.pass_, "end")

    return iteration
