"""The precision registry: one entry per numeric format the guide compares.

Each precision maps to one Transformer Engine recipe (autocast mode) and, where it has one, one
TE quantizer (pre-quantized mode). Which of them a GPU supports is never decided here: the GPU
backends ask TE's own ``is_*_available()`` checks and keep TE's reason text.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable

#: The per-GEMM modes: each (mode, precision, GEMM) is one cell of ``doc["cells"]``.
MODES: tuple[str, ...] = ("autocast", "prequant")
#: The whole-layer modes (:mod:`gemm_bench.measure.step`): one cell per (mode, precision) in
#: ``doc["layer"]``, never a per-GEMM cell. ``layer-graphed`` is the same step captured in CUDA
#: graphs, its own mode so graphed numbers never mix with eager ones.
LAYER_MODES: tuple[str, ...] = ("layer", "layer-graphed")
#: Every mode a page or ``--modes`` may name.
ALL_MODES: tuple[str, ...] = MODES + LAYER_MODES
MODE_NAMES = {"autocast": "Autocast", "prequant": "Pre-quantized", "layer": "Layer step",
              "layer-graphed": "Layer step (CUDA graphs)"}
MODE_ALIASES = {"pre-quantized": "prequant", "prequantized": "prequant", "pre_quant": "prequant",
                "layer-step": "layer", "step": "layer", "layer_graphed": "layer-graphed",
                "graphed": "layer-graphed", "layer-step-graphed": "layer-graphed"}


@dataclasses.dataclass(frozen=True)
class Precision:
    id: str
    display: str
    #: TE recipe class in ``transformer_engine.common.recipe`` (None: no recipe, plain BF16).
    recipe: str | None
    #: TE quantizer class used for pre-quantized inputs (None: BF16 needs none).
    quantizer: str | None
    #: The ``transformer_engine.pytorch`` function that says whether this GPU supports it.
    support_check: str | None
    modes: tuple[str, ...]
    #: Why a mode is absent, shown instead of a number.
    absent_modes: dict[str, str] = dataclasses.field(default_factory=dict)
    summary: str = ""

    def has_mode(self, mode: str) -> bool:
        return mode in self.modes


PRECISIONS: dict[str, Precision] = {
    p.id: p
    for p in (
        Precision(
            "bf16", "BF16", None, None, None, MODES,
            summary="BF16 inputs and weights, FP32 accumulation: the baseline of every speedup.",
        ),
        Precision(
            "fp8-delayed", "FP8 Delayed", "DelayedScaling", None, "is_fp8_available", ("autocast",),
            absent_modes={
                "prequant": "FP8 delayed scaling differs from current scaling only in how the "
                "scale is chosen (from an amax history); once inputs are quantized both run the "
                "same per-tensor-scaled FP8 GEMM, so its pre-quantized time is FP8 Current's.",
            },
            summary="Per-tensor FP8 (E4M3 forward, E5M2 gradients) with scales from an amax "
            "history of previous steps.",
        ),
        Precision(
            "fp8-current", "FP8 Current", "Float8CurrentScaling", "Float8CurrentScalingQuantizer",
            "is_fp8_available", MODES,
            summary="Per-tensor FP8 with the scale computed from the tensor being quantized.",
        ),
        Precision(
            "fp8-block", "FP8 Block", "Float8BlockScaling", "Float8BlockQuantizer",
            "is_fp8_block_scaling_available", MODES,
            summary="FP8 with FP32 scales per 1x128 (activations) and 128x128 (weights) block, "
            "as in DeepSeek-V3.",
        ),
        Precision(
            "mxfp8", "MXFP8", "MXFP8BlockScaling", "MXFP8Quantizer", "is_mxfp8_available", MODES,
            summary="OCP microscaling FP8: an E8M0 scale per 32 elements (Blackwell tensor cores).",
        ),
        Precision(
            "nvfp4", "NVFP4", "NVFP4BlockScaling", "NVFP4Quantizer", "is_nvfp4_available", MODES,
            summary="4-bit E2M1 with an FP8 scale per 16 elements and a per-tensor FP32 scale "
            "(Blackwell).",
        ),
    )
}

PRECISION_IDS: tuple[str, ...] = tuple(PRECISIONS)
BASELINE = "bf16"

#: A precision whose form in a mode is another precision's (:attr:`Precision.absent_modes`): FP8
#: Delayed's pre-quantized GEMM is FP8 Current's. Its cells are stored "unsupported" with that
#: sentence as the reason; a reader sees "same as FP8 Current", never "unsupported" (it runs, as
#: FP8 Current): in tables and roles (the extension's ``values.absent_status``) and in figures.
SAME_AS: dict[tuple[str, str], str] = {("fp8-delayed", "prequant"): "fp8-current"}


def normalize_precision(text: str) -> str:
    """Accept ``fp8-current``, ``FP8_Current`` or the display name; return the id."""
    key = text.strip().lower().replace("_", "-").replace(" ", "-")
    if key in PRECISIONS:
        return key
    raise KeyError(text)


def normalize_mode(text: str) -> str:
    """A mode id from ``autocast``, ``Pre-quantized``, ``layer-graphed`` ... (any of :data:`ALL_MODES`).

    Callers that only handle per-GEMM modes split the result with :func:`gemm_modes`.
    """
    key = text.strip().lower()
    key = MODE_ALIASES.get(key, key)
    if key in ALL_MODES:
        return key
    raise KeyError(text)


def gemm_modes(modes: Iterable[str]) -> list[str]:
    """The per-GEMM modes among ``modes``, in order (the layer modes have no GEMM cells)."""
    return [m for m in modes if m in MODES]


def layer_modes(modes: Iterable[str]) -> list[str]:
    """The whole-layer modes among ``modes``, in order."""
    return [m for m in modes if m in LAYER_MODES]
