"""What each GPU kernel of a step is for: the one place that turns CUDA kernel names into categories.

Why: "FP8 is slower than BF16" is answered only by saying *where* a step's time goes. The profiler
gives kernel names (cuBLAS's ``nvjet_*`` and ``sm90_xmma_gemm_*``, Transformer Engine's
``cast_transpose_*``, cuDNN's ``cudnn_generated_fort_native_sdpa_*``, torch's
``vectorized_elementwise_kernel``...); the rules below, tried in order, give each one a category
of :data:`CATEGORIES`. A name no rule matches is ``other`` and keeps its name in the result, so
nothing is classified silently.

Order matters and is part of the rules:

* attention comes before GEMMs, as a guard: attention is matrix products, and FlashAttention 3's
  kernels are CUTLASS kernels (``cutlass::device_kernel<flash::...>``), so an attention kernel's
  name (template arguments included) may hold a GEMM rule's words (``gemm``, ``cutlass3x``); with
  attention first it counts as attention whatever it holds. No recorded name needs the guard yet:
  cuDNN's SDPA kernels name ``wgmma`` (the instruction), which no GEMM rule matches;
* GEMMs come before quantization, because FP8 GEMMs name their types (``e4m3``);
* the recipes' scale bookkeeping (amax, scale updates) comes before the optimizer, because both
  run as ``multi_tensor_apply_kernel``;
* normalization and activations come before quantization: a kernel that fuses the cast to FP8
  into a LayerNorm or an activation (TE's ``rmsnorm_fwd_tuned_kernel<..fp8..>``,
  ``cast_fp8_gated_kernel``, ``dgated_act_cast_transpose``) runs in a BF16 step too (without
  the cast), so it counts as that work, and ``quantization`` holds only the kernels a recipe
  adds: casts, amax reductions, scale updates and transposes of its own.

Pure: no torch. Names are matched case-sensitively on the demangled name the profiler records
(template arguments included).
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Iterable, Mapping

GEMM = "gemm"
QUANTIZATION = "quantization"
ATTENTION = "attention"
ELEMENTWISE = "elementwise"
OPTIMIZER = "optimizer"
OTHER = "other"
#: Not a kernel category: the part of the step's time when no kernel of it ran (see
#: :mod:`gemm_bench.results.breakdown`).
IDLE = "idle"

#: Kernel categories, in the order a breakdown lists them.
CATEGORIES: tuple[str, ...] = (GEMM, QUANTIZATION, ATTENTION, ELEMENTWISE, OPTIMIZER, OTHER)
#: Every part of a step's time: the kernel categories and the idle time.
PARTS: tuple[str, ...] = (*CATEGORIES, IDLE)

DISPLAY: dict[str, str] = {
    GEMM: "GEMMs",
    QUANTIZATION: "Quantization, casts, amax and transposes",
    ATTENTION: "Attention",
    ELEMENTWISE: "Normalization, activations and other elementwise work",
    OPTIMIZER: "Optimizer",
    OTHER: "Other kernels",
    IDLE: "GPU idle inside the step",
}


@dataclasses.dataclass(frozen=True)
class Rule:
    """A kernel whose name matches ``pattern`` (``re.search``) belongs to ``category``; ``why`` says
    whose kernels these are, for the methodology page."""

    category: str
    pattern: str
    why: str

    def matches(self, name: str) -> bool:
        return re.search(self.pattern, name) is not None


RULES: tuple[Rule, ...] = (
    Rule(ATTENTION, r"sdpa|flash|fmha|fused_attn|FlashAttn|attention|"
                    r"scaled_(upper_triang_|aligned_causal_)?masked_softmax",
         "cuDNN fused attention (cudnn_generated_fort_native_sdpa_*), FlashAttention 2/3, torch's "
         "memory-efficient attention (fmha_cutlass*), TE's fused_attn helpers and unfused masked softmax"),
    Rule(GEMM, r"gemm|Gemm|GEMM|nvjet|splitKreduce|gemv|gemmk1|cublasLt|cutlass.*tensorop|cutlass3x",
         "cuBLAS / cuBLASLt (nvjet_*, sm90_xmma_gemm_*, ampere_*gemm*, split-K reductions, gemv) and "
         "CUTLASS GEMMs, grouped GEMMs included"),
    Rule(QUANTIZATION, r"amax|scaling_recipe|compute_scale|scale_and_scale_inv|ComputeScale|update_scale",
         "the recipes' scale bookkeeping: amax reductions, amax-history and scale updates (TE's "
         "delayed_scaling_recipe and current-scaling kernels)"),
    Rule(OPTIMIZER, r"(?<![Hh])[Aa]dam|SGD|[Ss]gd_|LAMB|Lamb(Stage|Functor)|l2norm|L2Norm|multi_tensor|foreach|"
                    r"[Oo]ptimizer|clip_grad",
         "optimizer steps and their helpers (fused or foreach AdamW, multi-tensor L2 norms for clipping)"),
    Rule(ELEMENTWISE, r"rmsnorm|layernorm|layer_norm|LayerNorm|RMSNorm|rms_norm|\bln_|_ln_|norm_fwd|norm_bwd|"
                      r"batch_norm|group_norm",
         "normalization (TE's rmsnorm_*/ln_* kernels, with or without a fused cast to FP8; torch's norms)"),
    Rule(ELEMENTWISE, r"gated|silu|gelu|swiglu|relu|srelu|sigmoid|activation|\bact_|_act_|_act\b|dact",
         "activations and their gradients (TE's gated_act/dgated_act kernels, fused cast included; torch's)"),
    Rule(QUANTIZATION, r"cast_transpose|transpose|quantiz|cast_fp8|cast_mxfp8|cast_nvfp4|fp8|Float8|e4m3|e5m2|"
                       r"mxfp8|nvfp4|[Hh]adamard|blockwise|block_scal|swap_first_dims|cast_kernel|\bcast_|_cast\b",
         "casts to and from FP8, and transposes (TE's cast_transpose_*, quantize_transpose_*_blockwise, "
         "cast_fp8_*; torch copies to float8 types)"),
    Rule(ELEMENTWISE, r"elementwise|unary_kernel|binary|vectorized|unrolled|reduce_kernel|[Ss]oft[Mm]ax|"
                      r"index|gather|scatter|CatArray|copy|[Ff]ill|dropout|rope|embedding|nll_loss|cross_entropy|"
                      r"add_kernel|mul_kernel",
         "other elementwise and memory-bound work: torch's elementwise, copy, fill, reduction, softmax, "
         "index/gather/scatter and concatenation kernels, dropout, rotary embeddings, loss"),
)


def classify(name: str) -> str:
    """The category of one kernel name: the first rule of :data:`RULES` that matches, else ``other``."""
    for rule in RULES:
        if rule.matches(name):
            return rule.category
    return OTHER


def classify_all(names: Iterable[str]) -> dict[str, str]:
    """Each distinct name's category (for a recorded list of names)."""
    return {name: classify(name) for name in dict.fromkeys(names)}


def category_totals(kernel_ms: Mapping[str, float]) -> dict[str, float]:
    """Milliseconds per category of ``{kernel name: milliseconds}``, every category present."""
    totals = dict.fromkeys(CATEGORIES, 0.0)
    for name, ms in kernel_ms.items():
        totals[classify(name)] += ms
    return totals
