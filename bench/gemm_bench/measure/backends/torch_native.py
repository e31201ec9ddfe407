"""PyTorch-native peers, for context beside TE: ``torch.matmul`` (BF16) and ``torch._scaled_mm``
(FP8 E4M3 with tensorwise or rowwise scales). Reported on their own, never mixed into TE totals.

Operands are laid out as TE's TN GEMM lays them out: ``B`` is the ``m x k`` row-major input, ``A``
the ``n x k`` row-major weight, and the product is ``B @ A.T``; ``_scaled_mm`` needs its second
operand column-major, which ``A.T`` of a row-major ``A`` is.
"""

from __future__ import annotations

import torch

from gemm_bench.measure.timing import Competitor, Mark
from gemm_bench.question.shapes import GemmShape

PEERS: dict[str, str] = {
    "torch.matmul (BF16)": "bf16",
    "torch._scaled_mm (FP8 tensorwise)": "tensorwise",
    "torch._scaled_mm (FP8 rowwise)": "rowwise",
}


def peer_competitor(peer: str, gemm: GemmShape) -> Competitor:
    if gemm.groups != 1:
        raise NotImplementedError("PyTorch-native peers are measured for dense GEMMs only")
    kind = PEERS[peer]
    m, k, n = gemm.m, gemm.k, gemm.n
    a = torch.randn(n, k, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
    if kind == "bf16":
        def run() -> None:
            torch.matmul(b, a.t())
    else:
        fp8 = torch.float8_e4m3fn
        fmax = torch.finfo(fp8).max
        if kind == "tensorwise":
            sa = (a.abs().amax().float() / fmax).clamp(min=1e-12)
            sb = (b.abs().amax().float() / fmax).clamp(min=1e-12)
            a8, b8 = (a / sa).to(fp8), (b / sb).to(fp8)
            scale_b, scale_a = sb.reshape(()), sa.reshape(())
        else:
            sa = (a.abs().amax(dim=1, keepdim=True).float() / fmax).clamp(min=1e-12)  # n x 1
            sb = (b.abs().amax(dim=1, keepdim=True).float() / fmax).clamp(min=1e-12)  # m x 1
            a8, b8 = (a / sa).to(fp8), (b / sb).to(fp8)
            scale_b, scale_a = sb, sa.t().contiguous()  # m x 1, 1 x n
        a8_t = a8.t()
        del a, b

        def run() -> None:
            torch._scaled_mm(b8, a8_t, scale_a=scale_b, scale_b=scale_a, out_dtype=torch.bfloat16)

    def iteration(mark: Mark) -> None:
        mark(gemm.pass_, "start")
        run()
        mark(gemm.pass_, "end")

    return iteration
