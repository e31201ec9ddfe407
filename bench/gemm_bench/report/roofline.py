"""A roofline model of each GEMM and of each recipe's quantization kernels, beside the measurements.

Why: a measured time alone cannot say whether a GEMM is near what the hardware allows, nor why
FP8 gains little on a small GEMM. The roofline answers both in the manner of torchao's
``benchmarks/float8/float8_roofline.py`` and ``torchao/testing/training/roofline_utils.py``:

* a GEMM takes ``max(FLOPs / achievable peak, bytes / achievable bandwidth, launch floor)``,
  reading each operand once and writing the BF16 output once (perfect on-chip reuse);
* in autocast mode each pass also pays for its quantization kernels, which are memory-bound:
  their time is the bytes they read and write over the achievable bandwidth (amax pass, cast,
  the transposed or column-wise copy TE makes for the backward GEMMs, block scales).

It is a *prediction*, shown as "roofline-predicted vs measured", never in place of a measurement.
What it leaves out is listed in :data:`NOT_MODELLED` so the guide can explain the gap. Pure: no
torch; device peaks come from :mod:`gemm_bench.question.hardware`.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from gemm_bench.question.hardware import FORMAT_OF_PRECISION, DeviceSpec, HardwareError, spec_for
from gemm_bench.question.shapes import GemmShape

#: Bytes per element of each tensor-core format (FP4 packs two values per byte).
BYTES_PER_ELEMENT: dict[str, float] = {"bf16": 2.0, "fp8": 1.0, "fp4": 0.5}
BF16_BYTES = 2.0
FP32_BYTES = 4.0

#: Block sizes of the scaled formats: FP8 block (DeepSeek-style, FP32 scales) uses 1x128 for
#: activations and gradients and 128x128 for weights; MXFP8 an E8M0 byte per 32 elements; NVFP4
#: an E4M3 byte per 16 elements (plus one FP32 per tensor, negligible).
FP8_BLOCK_1D = 128
FP8_BLOCK_2D = 128 * 128
MXFP8_BLOCK = 32
NVFP4_BLOCK = 16

MODES: tuple[str, ...] = ("autocast", "prequant")

NOT_MODELLED = (
    "host overhead and launch gaps between kernels (beyond a per-kernel floor)",
    "imperfect on-chip reuse: operands are counted as read once from memory",
    "the amax-history update of delayed scaling and scale computations (tiny tensors)",
    "NVFP4's random Hadamard transform and stochastic rounding of gradients",
    "wave quantization and tile-size effects on small or odd shapes",
    "clock throttling below the boost clock the peak assumes",
)


class RooflineError(ValueError):
    """A mode, precision or parameter the model does not know (names it)."""


@dataclasses.dataclass(frozen=True)
class Achievable:
    """Fractions of the datasheet peaks that real kernels reach, and a per-kernel floor.

    Defaults are torchao's, stated in ``roofline_utils.py``: 78% of peak TFLOP/s observed for large
    GEMMs on H100, 92% of peak bandwidth for large pointwise Triton kernels on H100, and a 2 us
    floor per kernel (a one-element Triton kernel's GPU time on H100). They are assumptions
    carried to every device, and are recorded with each prediction.
    """

    compute: float = 0.78
    memory: float = 0.92
    kernel_floor_s: float = 2e-6
    source: str = (
        "torchao torchao/testing/training/roofline_utils.py: pct_achievable_gemm_tops 0.78, "
        "pct_achievable_mem_bw 0.92, KERNEL_LAUNCH_OVERHEAD_SEC 2e-6 (all measured on H100)"
    )

    def __post_init__(self) -> None:
        for name in ("compute", "memory"):
            value = getattr(self, name)
            if not 0 < value <= 1:
                raise RooflineError(f"achievable {name} fraction must be in (0, 1], got {value!r}")
        if self.kernel_floor_s < 0:
            raise RooflineError(f"kernel_floor_s must be >= 0, got {self.kernel_floor_s!r}")

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


DEFAULT_ACHIEVABLE = Achievable()


@dataclasses.dataclass(frozen=True)
class QuantKernel:
    """One memory-bound kernel of a recipe: what it does, to which tensor, how many bytes."""

    name: str
    tensor: str
    bytes: float
    ms: float


@dataclasses.dataclass(frozen=True)
class Prediction:
    gemm: GemmShape
    precision: str
    mode: str
    device: str
    flops: int
    gemm_bytes: float
    compute_ms: float
    memory_ms: float
    #: The GEMM alone: max(compute, memory, floor).
    gemm_ms: float
    #: "compute", "memory" or "launch": which term decided ``gemm_ms``.
    bound: str
    quant: tuple[QuantKernel, ...]
    quant_ms: float
    achievable: Achievable

    @property
    def total_ms(self) -> float:
        """What the measured cell of this mode should be compared with."""
        return self.gemm_ms + self.quant_ms

    def to_dict(self) -> dict[str, Any]:
        return {
            "op": self.gemm.op, "pass": self.gemm.pass_, "precision": self.precision,
            "mode": self.mode, "device": self.device, "flops": self.flops,
            "gemm_bytes": self.gemm_bytes, "compute_ms": self.compute_ms,
            "memory_ms": self.memory_ms, "gemm_ms": self.gemm_ms, "bound": self.bound,
            "quant": [dataclasses.asdict(k) for k in self.quant], "quant_ms": self.quant_ms,
            "roofline_ms": self.total_ms, "achievable": self.achievable.to_dict(),
        }


def _format(precision: str) -> str:
    try:
        return FORMAT_OF_PRECISION[precision]
    except KeyError:
        raise RooflineError(
            f"precision {precision!r} is not one of {', '.join(FORMAT_OF_PRECISION)}"
        ) from None


def _scale_bytes_per_element(precision: str, role: str) -> float:
    """Scale bytes per element of an operand; ``role`` is "weight" or "activation"."""
    if precision == "fp8-block":
        return FP32_BYTES / (FP8_BLOCK_2D if role == "weight" else FP8_BLOCK_1D)
    if precision == "mxfp8":
        return 1.0 / MXFP8_BLOCK
    if precision == "nvfp4":
        return 1.0 / NVFP4_BLOCK
    return 0.0  # BF16 has none; per-tensor FP8 has one FP32 per tensor


def gemm_bytes(gemm: GemmShape, precision: str) -> float:
    """Bytes a GEMM moves at least: both operands once (with their scales), the BF16 output once.

    Operands as in TE's TN GEMM: ``A`` is ``n x k`` (the weight in Fprop and Dgrad; ``X^T`` in
    Wgrad, an activation), ``B`` is ``m x k``.
    """
    fmt = _format(precision)
    a, b = gemm.n * gemm.k, gemm.m * gemm.k
    a_role = "activation" if gemm.pass_ == "wgrad" else "weight"
    per_group = (
        (a + b) * BYTES_PER_ELEMENT[fmt]
        + a * _scale_bytes_per_element(precision, a_role)
        + b * _scale_bytes_per_element(precision, "activation")
        + gemm.m * gemm.n * BF16_BYTES
    )
    return per_group * gemm.groups


def _tensors_quantized(gemm: GemmShape) -> list[tuple[str, str, int]]:
    """(tensor, role, elements) that TE quantizes inside this pass's timed region.

    Fprop quantizes the input ``X`` (``m x k``) and the weight ``W`` (``n x k``); Dgrad the output
    gradient ``dY`` (``m x k`` of the Dgrad shape ``M x N x K``); Wgrad none: its operands are
    the column-wise copies made in the two passes before it.
    """
    g = gemm.groups
    if gemm.pass_ == "fprop":
        return [("X", "activation", gemm.m * gemm.k * g), ("W", "weight", gemm.n * gemm.k * g)]
    if gemm.pass_ == "dgrad":
        return [("dY", "activation", gemm.m * gemm.k * g)]
    return []


def _kernels_for_tensor(precision: str, tensor: str, role: str, elements: int,
                        backward: bool) -> list[tuple[str, float]]:
    """(kernel, bytes) of quantizing one BF16 tensor: read it, write its quantized copies.

    With ``backward`` TE writes two copies (row-wise for this GEMM, column-wise or transposed
    for the backward GEMM that needs it); without, only the row-wise one.
    """
    e = float(elements)
    copies = 2 if backward else 1
    read = BF16_BYTES * e
    if precision == "bf16":
        return []
    if precision == "fp8-delayed":
        # Scale from the amax history: one fused cast(+transpose) that also records the amax.
        return [("cast+transpose" if backward else "cast", read + copies * e)]
    if precision == "fp8-current":
        # The scale needs this tensor's amax first: a full read, then the cast.
        return [("amax", read), ("cast+transpose" if backward else "cast", read + copies * e)]
    if precision == "fp8-block":
        scales = copies * e * _scale_bytes_per_element(precision, role)
        return [("block cast+transpose" if backward else "block cast", read + copies * e + scales)]
    if precision == "mxfp8":
        scales = copies * e * _scale_bytes_per_element(precision, role)
        return [("mxfp8 cast (row- and column-wise)" if backward else "mxfp8 cast", read + copies * e + scales)]
    if precision == "nvfp4":
        # The per-tensor FP32 second-level scale needs the global amax: a full read first.
        scales = copies * e * _scale_bytes_per_element(precision, role)
        data = copies * e * BYTES_PER_ELEMENT["fp4"]
        return [("amax", read),
                ("nvfp4 cast (row- and column-wise)" if backward else "nvfp4 cast", read + data + scales)]
    raise RooflineError(f"precision {precision!r} is not one of {', '.join(FORMAT_OF_PRECISION)}")


def quantization_kernels(gemm: GemmShape, precision: str, spec: DeviceSpec,
                         achievable: Achievable = DEFAULT_ACHIEVABLE, *,
                         backward: bool = True) -> tuple[QuantKernel, ...]:
    """The memory-bound kernels an autocast pass runs before its GEMM, each with its time."""
    _format(precision)
    bandwidth = spec.memory_gbps * 1e9 * achievable.memory
    out = []
    for tensor, role, elements in _tensors_quantized(gemm):
        for name, nbytes in _kernels_for_tensor(precision, tensor, role, elements, backward):
            seconds = max(nbytes / bandwidth, achievable.kernel_floor_s)
            out.append(QuantKernel(name, tensor, nbytes, seconds * 1e3))
    return tuple(out)


def predict(gemm: GemmShape, precision: str, mode: str, device: str,
            achievable: Achievable = DEFAULT_ACHIEVABLE, *, backward: bool = True) -> Prediction | None:
    """The roofline of one cell; None when the device has no spec or no peak for the format."""
    if mode not in MODES:
        raise RooflineError(f"mode {mode!r} is not one of {', '.join(MODES)}")
    fmt = _format(precision)
    spec = spec_for(device)
    if spec is None:
        return None
    try:
        peak = spec.peak(fmt)
    except HardwareError as exc:  # pragma: no cover - FORMAT_OF_PRECISION only names known formats
        raise RooflineError(str(exc)) from exc
    if peak is None:
        return None
    compute_s = gemm.flops / (peak * 1e12 * achievable.compute)
    nbytes = gemm_bytes(gemm, precision)
    memory_s = nbytes / (spec.memory_gbps * 1e9 * achievable.memory)
    gemm_s = max(compute_s, memory_s, achievable.kernel_floor_s)
    bound = "compute" if gemm_s == compute_s else "memory" if gemm_s == memory_s else "launch"
    quant = quantization_kernels(gemm, precision, spec, achievable, backward=backward) if mode == "autocast" else ()
    return Prediction(
        gemm=gemm, precision=precision, mode=mode, device=spec.slug, flops=gemm.flops,
        gemm_bytes=nbytes, compute_ms=compute_s * 1e3, memory_ms=memory_s * 1e3,
        gemm_ms=gemm_s * 1e3, bound=bound, quant=quant, quant_ms=sum(k.ms for k in quant),
        achievable=achievable,
    )


def method(achievable: Achievable = DEFAULT_ACHIEVABLE) -> dict[str, Any]:
    """The model's assumptions, to print beside any roofline number."""
    return {
        "gemm": "max(FLOPs / (dense peak x compute fraction), bytes / (bandwidth x memory fraction), "
        "kernel floor); operands read once, BF16 output written once",
        "quantization": "autocast passes add their quantization kernels, each max(bytes / "
        "(bandwidth x memory fraction), kernel floor): amax reads, casts writing row- and "
        "column-wise copies, block scales",
        "achievable": achievable.to_dict(),
        "not_modelled": list(NOT_MODELLED),
    }
