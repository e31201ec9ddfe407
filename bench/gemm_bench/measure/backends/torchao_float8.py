"""The torchao peer: ``Float8Linear`` (tensorwise or rowwise scaling) under ``torch.compile(dynamic=True)``.

What a PyTorch-native user would use instead of Transformer Engine: ``convert_to_float8_training``
swaps ``nn.Linear`` for torchao's ``Float8Linear``, and ``torch.compile`` fuses its casts into the
surrounding kernels. Timed like TE's autocast Linear, on the op's own Fprop shape, as two regions:
``fprop`` (casts + GEMM) and ``backward`` (Dgrad and Wgrad with their casts: torchao's backward is
one autograd node, so the two GEMMs are not timed apart). Imports torch and torchao.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torchao.float8 import Float8LinearConfig, convert_to_float8_training
from torchao.float8.float8_linear import Float8Linear, matmul_with_hp_or_float8_args

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


#: One compiled forward per recipe for the whole process (see :func:`_compiled_forward`).
_COMPILED: dict[str, Callable[[torch.Tensor, torch.Tensor], torch.Tensor]] = {}


def _compiled_forward(recipe: str, layer: Float8Linear) -> Callable[[torch.Tensor, torch.Tensor], torch.Tensor]:
    """``Float8Linear.forward`` as a function of (input, weight), compiled once per recipe with
    dynamic shapes: ``matmul_with_hp_or_float8_args`` with the layer's own ``linear_mm_config`` and
    ``config`` (a bias-free Linear outside ``torch.autocast`` runs exactly this). Compiling each
    Linear module instead recompiled for every op of every question, about 5 s each on an H100
    box, most of a refresh's wall time; the function's shapes are dynamic, so one compilation
    serves them all. Timed as CUDA-graph replays like every competitor, so the dynamic graph's host
    work is not in the published time."""
    if recipe not in _COMPILED:
        mm_config, config = layer.linear_mm_config, layer.config

        def forward(x: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
            return matmul_with_hp_or_float8_args.apply(x, weight.t(), mm_config, config)

        _COMPILED[recipe] = torch.compile(forward, dynamic=True)
    return _COMPILED[recipe]


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
    layer = model[0]
    compiled = _compiled_forward(recipe, layer)
    # A plain leaf tensor, not the module's Parameter: dynamo gives every nn.Parameter static
    # shapes even under dynamic=True (torch._dynamo.config.force_parameter_static_shapes), so
    # passing the Parameter recompiled the function for every (K, N) after all (3-6 s per op on
    # the H100, in the setup_s of the method-v4 files). The Wgrad still reaches weight.grad.
    weight = layer.weight.detach().clone().requires_grad_(True)
    x = torch.randn(m, k, device="cuda", dtype=torch.bfloat16, requires_grad=True)
    dy = torch.randn(m, n, device="cuda", dtype=torch.bfloat16)

    def iteration(mark: Mark) -> None:
        mark("fprop", "start")
        y = compiled(x, weight)
        mark("fprop", "end")
        mark("backward", "start")
        y.backward(dy)
        mark("backward", "end")
        x.grad = None
        weight.grad = None

    return iteration
