"""The torchao peer: ``Float8Linear`` (tensorwise or rowwise scaling) under ``torch.compile(dynamic=True)``.

What a PyTorch-native user would use instead of Transformer Engine: ``convert_to_float8_training``
swaps ``nn.Linear`` for torchao's ``Float8Linear``, and ``torch.compile`` fuses its casts into the
surrounding kernels. Timed like TE's autocast Linear, on the op's own Fprop shape, as two regions:
``fprop`` (casts + GEMM) and ``backward`` (Dgrad and Wgrad with their casts: torchao's backward is
one autograd node, so the two GEMMs are not timed apart). Imports torch and torchao.
"""

from __future__ import annotations

import torch
from torchao.float8 import Float8LinearConfig, convert_to_float8_training
from torchao.float8.float8_linear import Float8Linear

from gemm_bench.measure.timing import Competitor, Mark
from gemm_bench.question.shapes import GemmShape

#: torchao's float8 GEMMs need every dimension of the Linear divisible by 16.
ALIGNMENT = 16


def _never_fall_back_to_eager() -> None:
    """Every (shape, recipe) is a new module, so dynamo recompiles; past its recompile limit (8 by
    default) it would run the module *eagerly* without an error, and an eager Float8Linear would be
    timed under a ``torch.compile`` label. Raise the limit for a whole site's shapes, and make
    hitting it an error (the peer's cell is then failed with that reason) instead of a fallback."""
    config = torch._dynamo.config
    for name in ("recompile_limit", "cache_size_limit"):
        if hasattr(config, name):
            setattr(config, name, max(getattr(config, name), 1024))
    if hasattr(config, "accumulated_recompile_limit"):
        config.accumulated_recompile_limit = max(config.accumulated_recompile_limit, 4096)
    if hasattr(config, "accumulated_cache_size_limit"):
        config.accumulated_cache_size_limit = max(config.accumulated_cache_size_limit, 4096)
    if hasattr(config, "fail_on_recompile_limit_hit"):
        config.fail_on_recompile_limit_hit = True


def linear_competitor(recipe: str, fprop: GemmShape) -> Competitor:
    """One compiled training iteration of a bias-free ``Float8Linear`` whose Fprop is ``fprop``."""
    m, k, n = fprop.m, fprop.k, fprop.n
    if fprop.groups != 1:
        raise ValueError("torchao Float8Linear is measured for dense GEMMs only")
    if k % ALIGNMENT or n % ALIGNMENT:
        raise ValueError(f"torchao Float8Linear needs in/out features divisible by {ALIGNMENT}; got {k} and {n}")
    model = torch.nn.Sequential(torch.nn.Linear(k, n, bias=False, device="cuda", dtype=torch.bfloat16))
    model = convert_to_float8_training(model, config=Float8LinearConfig.from_recipe_name(recipe))
    if not isinstance(model[0], Float8Linear):  # never time BF16 under an FP8 label
        raise RuntimeError(f"convert_to_float8_training left {type(model[0]).__name__} unconverted")
    _never_fall_back_to_eager()
    # Dynamic shapes: one compilation serves every Linear of a refresh (each op, each question),
    # where static shapes recompiled for each of them (about 10 s each on an H100 box, most of a
    # question's wall time). Timed as CUDA-graph replays like every competitor, so the dynamic
    # graph's host-side shape logic is not in the published time.
    compiled = torch.compile(model, dynamic=True)
    x = torch.randn(m, k, device="cuda", dtype=torch.bfloat16, requires_grad=True)
    dy = torch.randn(m, n, device="cuda", dtype=torch.bfloat16)

    def iteration(mark: Mark) -> None:
        mark("fprop", "start")
        y = compiled(x)
        mark("fprop", "end")
        mark("backward", "start")
        y.backward(dy)
        mark("backward", "end")
        x.grad = None
        for p in model.parameters():
            p.grad = None

    return iteration
