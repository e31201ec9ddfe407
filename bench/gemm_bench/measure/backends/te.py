"""Transformer Engine backends: autocast (what training sees) and pre-quantized (the kernel alone).

Autocast
    One bias-free ``te.Linear`` (``te.GroupedLinear`` for MoE experts) with BF16 parameters,
    built with ``delay_wgrad_compute=True`` so that TE's backward splits into its two GEMMs:
    one training iteration is timed as three regions, each after an L2 flush:

    * **Fprop**: ``y = linear(x)`` under ``te.autocast(recipe=...)``: input and weight
      quantization plus the forward GEMM.
    * **Dgrad**: ``y.backward(dy)``: gradient quantization plus the data-gradient GEMM (and the
      transposes TE prepares for Wgrad).
    * **Wgrad**: ``linear.backward_dw()``: the weight-gradient GEMM TE deferred.

    Each GEMM is timed on its own shape inside a real step; nothing is derived from Fprop.

Pre-quantized
    Operands quantized once, before timing, with TE's quantizers; the timed region is TE's GEMM
    entry point alone (``general_gemm``; ``general_grouped_gemm`` for MoE experts) in the TN
    layout Hopper's FP8 tensor cores use, on the pass's own ``m x k x n``. Gradients (the
    ``B`` operand of Dgrad and Wgrad) use E5M2 for per-tensor FP8, as TE's HYBRID format does;
    fast or split accumulation follows the recipe's ``fp8_gemm_<pass>`` setting.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
import transformer_engine
import transformer_engine.pytorch as te
import transformer_engine_torch as tex
from transformer_engine.common import recipe as te_recipe
from transformer_engine.pytorch.cpp_extensions import general_gemm, general_grouped_gemm

from gemm_bench.measure.timing import Competitor, Mark
from gemm_bench.question.plan import Support
from gemm_bench.question.precisions import PRECISIONS
from gemm_bench.question.shapes import GemmShape

VERSION = transformer_engine.__version__


def support() -> dict[str, Support]:
    """TE's own verdict, with its reason text, for every precision on this GPU."""
    out: dict[str, Support] = {}
    for pid, precision in PRECISIONS.items():
        if precision.support_check is None:
            out[pid] = Support(True)
            continue
        ok, reason = getattr(te, precision.support_check)(return_reason=True)
        out[pid] = Support(bool(ok), str(reason or ""))
    return out


def make_recipe(precision_id: str) -> Any:
    name = PRECISIONS[precision_id].recipe
    return getattr(te_recipe, name)() if name else None


# ----------------------------------------------------------------------------- autocast
class Operands:
    """The BF16 weights, input and output gradient that every precision of one op shares.

    The first competitor built for the op keeps its module's parameters and its tensors here; each
    later one puts the same parameters into its own module (TE reads a module's weights by
    attribute at every call) and uses the same ``x`` and ``dy``. Each iteration clears the
    gradients it made, and competitors run one after another, never at once.
    """

    def __init__(self) -> None:
        self.params: dict[str, torch.nn.Parameter] | None = None
        self.x: torch.Tensor | None = None
        self.dy: torch.Tensor | None = None

    def adopt(self, layer: torch.nn.Module, make_x: Callable[[], torch.Tensor],
              make_dy: Callable[[], torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor]:
        """Give ``layer`` the shared parameters (the first layer's become them); the shared x, dy."""
        own = dict(layer.named_parameters())
        if self.params is None:
            self.params, self.x, self.dy = own, make_x(), make_dy()
        else:
            if sorted(own) != sorted(self.params) or any(
                    own[name].shape != p.shape or own[name].dtype != p.dtype for name, p in self.params.items()):
                raise RuntimeError(f"{type(layer).__name__}'s parameters differ from the op's shared ones")
            for name, param in self.params.items():
                owner, _, attribute = name.rpartition(".")  # a nested module's parameter: on its module
                setattr(layer.get_submodule(owner) if owner else layer, attribute, param)  # its own copy is freed
        assert self.x is not None and self.dy is not None
        return self.x, self.dy


def autocast_competitor(precision_id: str, fprop: GemmShape, backward: bool = True,
                        shared: Operands | None = None) -> Competitor:
    """One training iteration of the Linear whose Fprop is ``fprop`` (three timed regions).

    Without ``backward`` (a question made of Fprop shapes alone, like a square sweep) only the
    forward region runs and is timed. ``shared``: the op's weights and inputs, common to every
    precision (:class:`Operands`); without it the competitor makes its own.
    """
    m, k, n, groups = fprop.m, fprop.k, fprop.n, fprop.groups
    recipe = make_recipe(precision_id)
    if groups > 1:
        layer = te.GroupedLinear(groups, k, n, bias=False, params_dtype=torch.bfloat16,
                                 device="cuda", delay_wgrad_compute=True)
        m_splits = [m] * groups
        forward: Callable[[torch.Tensor], torch.Tensor] = lambda x: layer(x, m_splits)
    else:
        layer = te.Linear(k, n, bias=False, params_dtype=torch.bfloat16, device="cuda",
                          delay_wgrad_compute=True)
        forward = layer

    def make_x() -> torch.Tensor:
        return torch.randn(m * groups, k, device="cuda", dtype=torch.bfloat16, requires_grad=backward)

    def make_dy() -> torch.Tensor:
        return torch.randn(m * groups, n, device="cuda", dtype=torch.bfloat16)

    x, dy = (shared or Operands()).adopt(layer, make_x, make_dy)
    enabled = recipe is not None

    def iteration(mark: Mark) -> None:
        mark("fprop", "start")
        with te.autocast(enabled=enabled, recipe=recipe):
            y = forward(x)
        mark("fprop", "end")
        if not backward:
            return
        mark("dgrad", "start")
        y.backward(dy)
        mark("dgrad", "end")
        mark("wgrad", "start")
        layer.backward_dw()
        mark("wgrad", "end")
        x.grad = None
        for p in layer.parameters():
            p.grad = None

    return iteration


# ----------------------------------------------------------------------------- pre-quantized
def _quantizers(precision_id: str, pass_: str) -> tuple[Any, Any]:
    """(quantizer of A = the weight-like n x k operand, quantizer of B = the m x k operand)."""
    device = torch.device("cuda")
    e4m3, e5m2 = tex.DType.kFloat8E4M3, tex.DType.kFloat8E5M2
    grad = pass_ in ("dgrad", "wgrad")
    if precision_id == "fp8-current":
        a = te.Float8CurrentScalingQuantizer(e4m3, device, rowwise=True, columnwise=False)
        b = te.Float8CurrentScalingQuantizer(e5m2 if grad else e4m3, device, rowwise=True, columnwise=False)
        return a, b
    if precision_id == "fp8-block":
        # DeepSeek-style: weights 128x128 blocks (2D), activations and gradients 1x128 (1D).
        # In Wgrad both operands are activations/gradients (dY^T and X^T): 1D x 1D.
        a_dim = 1 if pass_ == "wgrad" else 2
        a = te.Float8BlockQuantizer(e4m3, rowwise=True, columnwise=False, block_scaling_dim=a_dim)
        b = te.Float8BlockQuantizer(e4m3, rowwise=True, columnwise=False, block_scaling_dim=1)
        return a, b
    if precision_id == "mxfp8":
        return (te.MXFP8Quantizer(e4m3, rowwise=True, columnwise=False),
                te.MXFP8Quantizer(e4m3, rowwise=True, columnwise=False))
    if precision_id == "nvfp4":
        return (te.NVFP4Quantizer(rowwise=True, columnwise=False),
                te.NVFP4Quantizer(rowwise=True, columnwise=False))
    raise ValueError(f"{precision_id} has no pre-quantized form")


def prequant_competitor(precision_id: str, gemm: GemmShape) -> Competitor:
    """The GEMM kernel alone on operands quantized before timing."""
    m, k, n, groups = gemm.m, gemm.k, gemm.n, gemm.groups
    a_hp = [torch.randn(n, k, device="cuda", dtype=torch.bfloat16) for _ in range(groups)]
    b_hp = [torch.randn(m, k, device="cuda", dtype=torch.bfloat16) for _ in range(groups)]
    if precision_id == "bf16":
        a_q, b_q = a_hp, b_hp
    else:
        qa, qb = _quantizers(precision_id, gemm.pass_)
        a_q = [qa(t) for t in a_hp]
        b_q = [qb(t) for t in b_hp]
    del a_hp, b_hp
    # Fast vs split accumulation exactly as the precision's TE recipe sets it for this pass
    # (block scaling requires split accumulation on Hopper; per-tensor FP8 splits Dgrad/Wgrad).
    recipe = make_recipe(precision_id)
    split = bool(recipe is not None and getattr(recipe, f"fp8_gemm_{gemm.pass_}").use_split_accumulator)
    if groups == 1:
        a0, b0 = a_q[0], b_q[0]

        def run() -> None:
            general_gemm(a0, b0, out_dtype=torch.bfloat16, use_split_accumulator=split)
    else:
        out = torch.empty(m * groups, n, device="cuda", dtype=torch.bfloat16)
        m_splits = [m] * groups

        def run() -> None:
            general_grouped_gemm(a_q, b_q, [out], [None] * groups, torch.bfloat16,
                                 m_splits=m_splits, single_output=True, use_split_accumulator=split)

    def iteration(mark: Mark) -> None:
        mark(gemm.pass_, "start")
        run()
        mark(gemm.pass_, "end")

    return iteration
