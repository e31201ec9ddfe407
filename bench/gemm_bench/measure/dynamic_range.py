"""Measuring the "dynamic-range" study (:mod:`gemm_bench.results.dynamic_range_schema`).

Two halves with one vocabulary:

* a **rounding model** in plain Python (no torch): E4M3 and E5M2 round-to-nearest-even onto the
  format's grid, subnormals included, saturating at the format's largest finite value as TE's casts
  do (``__NV_SATFINITE``); per-tensor current scaling (``scale = fp8_max / amax`` in FP32, as TE's
  ``compute_scale_from_amax`` without power-of-2 rounding) and TE's FP8 block scaling (1x128
  blocks along a row for activations and gradients, 128x128 tiles for weights, scales rounded down
  to a power of 2: ``Float8BlockQuantizer(force_pow_2_scales=True)``, the recipe's default). It
  makes the study's claims testable on a CPU and generates documents for tests, never for the site.
* :func:`measure`, run on a GPU box by ``gemm-bench study dynamic-range``: the same sweep with
  Transformer Engine's own quantizers and ``general_gemm`` against an FP32 reference.

The inputs: Gaussian rows, plus either a few rows (tokens) or a few columns (channels) multiplied
by ``R``, for ``R`` over five orders of magnitude; the same seed at every ``R``, so the curves vary
with ``R`` alone. Each input is the activation ``X`` of Fprop (``Y = X W^T``) and the output
gradient ``dY`` of Dgrad (``dX = dY W``); per-tensor FP8 quantizes ``dY`` in E5M2 (TE's HYBRID
format), block scaling in E4M3. The SQNR is reported over the whole tensor, as the median over
rows and as the worst row, for the quantized input (plus ``bulk``: over the elements that are not
outliers) and for the GEMM output: a row of ``Y`` or ``dX`` depends on its own row of the input only.
"""

from __future__ import annotations

import dataclasses
import math
import operator
import random
import statistics
import struct
import zlib
from array import array
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from gemm_bench.question.precisions import PRECISIONS
from gemm_bench.results.dynamic_range_schema import INPUTS, TENSORS

if TYPE_CHECKING:  # pragma: no cover
    from gemm_bench.question.plan import Support

#: The sweep: R from 1 (no outliers) to 10^6, beyond the 2^17.8 that E4M3 spans from its largest value
#: to its smallest subnormal (E5M2 spans 2^31.8).
RATIOS: tuple[float, ...] = (1.0, 10.0, 100.0, 1e3, 1e4, 3e4, 1e5, 1e6)
#: Outlier rows or columns per input (Sun et al. find massive activations on a handful of tokens
#: and feature dimensions; LLM.int8() finds outlier features in a few dimensions).
OUTLIER_COUNT = 4
BLOCK = 128
BASE_SEED = 20240227


class DynamicRangeError(ValueError):
    """A rounding-model or SQNR input that has no answer (an all-zero reference row, a NaN)."""


# ----------------------------------------------------------------------------- formats
@dataclasses.dataclass(frozen=True)
class Fp8Format:
    """An FP8 format's grid: ``mantissa_bits`` explicit bits, normals from ``2^min_normal_exponent``,
    subnormals below in steps of ``2^(min_normal_exponent - mantissa_bits)``, largest ``max_value``."""

    name: str
    mantissa_bits: int
    min_normal_exponent: int
    max_value: float

    @property
    def min_normal(self) -> float:
        return math.ldexp(1.0, self.min_normal_exponent)

    @property
    def smallest_subnormal(self) -> float:
        return math.ldexp(1.0, self.min_normal_exponent - self.mantissa_bits)


#: OCP FP8 E4M3 (the "fn" variant TE uses: no infinity, max 448 = 1.75 * 2^8).
E4M3 = Fp8Format("E4M3", 3, -6, 448.0)
#: OCP FP8 E5M2 (max finite 57344 = 1.75 * 2^15).
E5M2 = Fp8Format("E5M2", 2, -14, 57344.0)
FORMATS = {"E4M3": E4M3, "E5M2": E5M2}
#: BF16's largest finite value: TE's scale when ``fp8_max / amax`` overflows FP32 (``value_for_inf``).
_BF16_MAX = 3.3895313892515355e38


def fp8_round(value: float, fmt: Fp8Format) -> float:
    """``value`` rounded to nearest (ties to even) on ``fmt``'s grid, saturating at its largest
    finite value (TE casts with ``__NV_SATFINITE``)."""
    if math.isnan(value):
        raise DynamicRangeError(f"cannot round NaN to {fmt.name}")
    magnitude = abs(value)
    if magnitude == 0.0:
        return value
    if math.isinf(magnitude):
        return math.copysign(fmt.max_value, value)
    exponent = max(math.frexp(magnitude)[1] - 1, fmt.min_normal_exponent)  # 2^exponent <= magnitude
    quantum = math.ldexp(1.0, exponent - fmt.mantissa_bits)
    rounded = round(magnitude / quantum) * quantum  # exact division; round() ties to even
    return math.copysign(min(rounded, fmt.max_value), value)


def to_f32(values: Sequence[float]) -> list[float]:
    """Each value rounded to the nearest FP32 (ties to even), as a C cast does."""
    return list(array("f", values))


def to_bf16(values: Sequence[float]) -> list[float]:
    """Each value rounded to FP32, then to the nearest BF16 (ties to even), as ``tensor.bfloat16()``."""
    words = array("I", array("f", values).tobytes())
    for i, bits in enumerate(words):
        words[i] = ((bits + 0x7FFF + ((bits >> 16) & 1)) & 0xFFFF0000) & 0xFFFFFFFF
    return list(array("f", words.tobytes()))


def _f32(value: float) -> float:
    return float(struct.unpack("<f", struct.pack("<f", value))[0])


def current_scale(amax: float, fmt: Fp8Format, *, pow2: bool = False) -> float:
    """TE's ``compute_scale_from_amax`` (epsilon 0): ``fp8_max / amax`` in FP32, 1 for a zero or
    non-finite amax; ``pow2`` keeps only the exponent (the largest power of 2 not above it)."""
    if amax == 0.0 or not math.isfinite(amax):
        return 1.0
    quotient = fmt.max_value / _f32(amax)
    scale = _BF16_MAX if quotient > 3.4028234663852886e38 else _f32(quotient)
    if pow2:
        scale = math.ldexp(1.0, math.frexp(scale)[1] - 1)
    return scale


def _quantize_run(values: Sequence[float], scale: float, fmt: Fp8Format) -> list[float]:
    """Cast ``values * scale`` (FP32 product) to ``fmt``, then dequantize with the FP32 inverse scale."""
    inverse = _f32(1.0 / scale)
    scaled = to_f32([v * scale for v in values])
    return to_f32([fp8_round(s, fmt) * inverse for s in scaled])


Matrix = list[list[float]]


def quantize_per_tensor(rows: Sequence[Sequence[float]], fmt: Fp8Format) -> Matrix:
    """Dequantized values after per-tensor current scaling (one scale: the tensor's amax to fp8 max)."""
    amax = max((abs(v) for row in rows for v in row), default=0.0)
    scale = current_scale(amax, fmt)
    return [_quantize_run(row, scale, fmt) for row in rows]


def quantize_blocks_1d(rows: Sequence[Sequence[float]], fmt: Fp8Format, *, block: int = BLOCK,
                       pow2: bool = True) -> Matrix:
    """Dequantized values after TE's 1D block scaling: one scale per ``block`` consecutive values of a row."""
    out: Matrix = []
    for row in rows:
        quantized: list[float] = []
        for start in range(0, len(row), block):
            chunk = row[start:start + block]
            scale = current_scale(max(abs(v) for v in chunk), fmt, pow2=pow2)
            quantized += _quantize_run(chunk, scale, fmt)
        out.append(quantized)
    return out


def quantize_blocks_2d(rows: Sequence[Sequence[float]], fmt: Fp8Format, *, block: int = BLOCK,
                       pow2: bool = True) -> Matrix:
    """Dequantized values after TE's 2D block scaling (weights): one scale per ``block x block`` tile."""
    out: Matrix = [[0.0] * len(row) for row in rows]
    width = len(rows[0]) if rows else 0
    for r0 in range(0, len(rows), block):
        for c0 in range(0, width, block):
            tile = [row[c0:c0 + block] for row in rows[r0:r0 + block]]
            scale = current_scale(max(abs(v) for t in tile for v in t), fmt, pow2=pow2)
            for i, chunk in enumerate(tile):
                out[r0 + i][c0:c0 + len(chunk)] = _quantize_run(chunk, scale, fmt)
    return out


# ----------------------------------------------------------------------------- SQNR
def _db(signal_sq: float, noise_sq: float) -> float:
    if not (math.isfinite(signal_sq) and math.isfinite(noise_sq)):
        raise DynamicRangeError("reference or output holds inf or NaN")
    if signal_sq == 0:
        raise DynamicRangeError("a reference row is all zeros: its SQNR is undefined")
    return math.inf if noise_sq == 0 else 10.0 * math.log10(signal_sq / noise_sq)


def summarize(signal_sq: Sequence[float], noise_sq: Sequence[float], *,
              bulk: tuple[float, float] | None = None) -> dict[str, float]:
    """SQNRs in dB from per-row sums of squares (``||ref_i||^2``, ``||out_i - ref_i||^2``).

    ``whole_db`` over the tensor, ``row_median_db`` the median row's, ``row_min_db`` the worst
    row's; ``bulk`` (the sums over the elements that are not outliers) adds ``bulk_db``.
    """
    if len(signal_sq) != len(noise_sq) or not signal_sq:
        raise DynamicRangeError(f"{len(signal_sq)} reference rows against {len(noise_sq)} output rows")
    rows = [_db(s, n) for s, n in zip(signal_sq, noise_sq, strict=True)]
    out = {"whole_db": _db(math.fsum(signal_sq), math.fsum(noise_sq)),
           "row_median_db": float(statistics.median(rows)), "row_min_db": min(rows)}
    if bulk is not None:
        out["bulk_db"] = _db(*bulk)
    return out


def row_sums(ref: Sequence[Sequence[float]], out: Sequence[Sequence[float]],
             columns: Sequence[int] | None = None) -> tuple[list[float], list[float]]:
    """Per-row ``sum(ref^2)`` and ``sum((out - ref)^2)``, over ``columns`` only when given."""
    signal, noise = [], []
    for r, o in zip(ref, out, strict=True):
        if columns is not None:
            r = [r[j] for j in columns]
            o = [o[j] for j in columns]
        signal.append(math.fsum(v * v for v in r))
        noise.append(math.fsum((b - a) * (b - a) for a, b in zip(r, o, strict=True)))
    return signal, noise


def bulk_sums(signal: Sequence[float], noise: Sequence[float], kind: str, outliers: Sequence[int],
              ref: Sequence[Sequence[float]], out: Sequence[Sequence[float]]) -> tuple[float, float]:
    """The sums over the elements outside the outlier rows (tokens) or columns (channels)."""
    if kind == "massive-tokens":
        skip = set(outliers)
        keep = [i for i in range(len(signal)) if i not in skip]
        return math.fsum(signal[i] for i in keep), math.fsum(noise[i] for i in keep)
    skip = set(outliers)
    columns = [j for j in range(len(ref[0])) if j not in skip]
    s, n = row_sums(ref, out, columns)
    return math.fsum(s), math.fsum(n)


def amax_over_median(rows: Sequence[Sequence[float]]) -> float:
    """``max |x| / median |x|`` (the lower median, as ``torch.median``): the input's dynamic range."""
    magnitudes = sorted(abs(v) for row in rows for v in row)
    median = magnitudes[(len(magnitudes) - 1) // 2]
    if median == 0:
        raise DynamicRangeError("the input's median magnitude is zero")
    return magnitudes[-1] / median


# ----------------------------------------------------------------------------- inputs
def seed_for(tensor: str, kind: str, what: str) -> int:
    """A seed fixed by what is drawn (never by R, run order or Python's salted ``hash``)."""
    return (BASE_SEED + zlib.crc32(f"{tensor}/{kind}/{what}".encode())) % (2**31)


def model_input(rows: int, cols: int, tensor: str, kind: str, ratio: float,
                count: int = OUTLIER_COUNT) -> tuple[Matrix, list[int]]:
    """A BF16-valued input (CPU model): N(0, 1), ``count`` rows or columns times ``ratio``; and their indices."""
    rng = random.Random(seed_for(tensor, kind, "x"))
    base = [to_f32([rng.gauss(0.0, 1.0) for _ in range(cols)]) for _ in range(rows)]
    outliers = sorted(random.Random(seed_for(tensor, kind, "outliers")).sample(
        range(rows if kind == "massive-tokens" else cols), count))
    r = _f32(ratio)
    if kind == "massive-tokens":
        for i in outliers:
            base[i] = to_f32([v * r for v in base[i]])
    else:
        for row in base:
            for j in outliers:
                row[j] = _f32(row[j] * r)
    return [to_bf16(row) for row in base], outliers


def model_weight(rows: int, cols: int, tensor: str) -> Matrix:
    rng = random.Random(seed_for(tensor, "weight", "w"))
    return [to_bf16([rng.gauss(0.0, 1.0) for _ in range(cols)]) for _ in range(rows)]


def _matmul_nt(b: Sequence[Sequence[float]], a: Sequence[Sequence[float]]) -> Matrix:
    """``B @ A^T`` in double precision (TE's TN GEMM with A = weight-like, B = input)."""
    return [[sum(map(operator.mul, row, col)) for col in a] for row in b]


def _transpose(rows: Sequence[Sequence[float]]) -> Matrix:
    return [list(col) for col in zip(*rows, strict=True)]


# ----------------------------------------------------------------------------- recipes
#: Per precision: (scaling, activation format, gradient format) as Transformer Engine's recipe sets it.
RECIPE_FORMATS: dict[str, tuple[str, str, str]] = {
    "bf16": ("none: BF16 operands", "BF16", "BF16"),
    "fp8-current": ("one FP32 scale per tensor (current scaling, HYBRID format)", "E4M3", "E5M2"),
    "fp8-block": ("one power-of-2 scale per 1x128 block of activations and gradients, per 128x128 tile of "
                  "weights (E4M3 everywhere)", "E4M3", "E4M3"),
    "mxfp8": ("one power-of-2 (E8M0) scale per 1x32 block", "E4M3", "E4M3"),
    "nvfp4": ("one E4M3 scale per 1x16 block and one FP32 scale per tensor", "E2M1", "E2M1"),
}
DELAYED_REASON = ("Delayed scaling quantizes with the scale its amax history gives: once the history has "
                  "seen this tensor and nothing larger, that scale is current scaling's, and so is the "
                  "SQNR; a larger amax in the history (an earlier step's outlier) makes the scale smaller "
                  "and the SQNR no better.")


def recipe_entries(support: Mapping[str, Support], *, modelled: Sequence[str] | None = None,
                   not_modelled: str = "") -> dict[str, dict[str, Any]]:
    """The ``recipes`` block: each precision's status with TE's reason where it cannot run here.

    ``modelled`` (the CPU model): only these are measured, the others read ``not_modelled``.
    """
    out: dict[str, dict[str, Any]] = {}
    for pid in PRECISIONS:
        s = support.get(pid)
        if pid == "fp8-delayed":
            continue
        if modelled is not None and pid not in modelled:
            out[pid] = {"status": "unsupported", "reason": not_modelled}
        elif s is not None and not s.available:
            out[pid] = {"status": "unsupported",
                        "reason": s.reason or f"{PRECISIONS[pid].display} is not supported on this GPU"}
        else:
            scaling, act, grad = RECIPE_FORMATS[pid]
            out[pid] = {"status": "measured", "scaling": scaling, "formats": {"activation": act, "gradient": grad}}
    if "fp8-delayed" in PRECISIONS:
        current = out.get("fp8-current", {})
        delayed = support.get("fp8-delayed")
        if delayed is not None and not delayed.available:
            out["fp8-delayed"] = {"status": "unsupported", "reason": delayed.reason or "not supported on this GPU"}
        elif current.get("status") == "measured":
            out["fp8-delayed"] = {"status": "same-as", "same_as": "fp8-current", "reason": DELAYED_REASON}
        else:
            out["fp8-delayed"] = {"status": "unsupported", "reason": current.get("reason", "not measured")}
    return {pid: out[pid] for pid in PRECISIONS if pid in out}


def _measured(recipes: Mapping[str, Mapping[str, Any]]) -> list[str]:
    return [pid for pid, entry in recipes.items() if entry["status"] == "measured"]


# ----------------------------------------------------------------------------- the CPU model
def model_case(tensor: str, kind: str, ratio: float, recipes: Sequence[str], *, m: int, k: int, n: int,
               count: int = OUTLIER_COUNT) -> dict[str, Any]:
    """One case of the study from the rounding model (``recipes``: bf16, fp8-current, fp8-block)."""
    pass_ = TENSORS[tensor]
    cols = k if pass_ == "fprop" else n
    x, outliers = model_input(m, cols, tensor, kind, ratio, count)
    w = model_weight(n, k, tensor)  # N x K, as te.Linear's weight
    a = w if pass_ == "fprop" else _transpose(w)  # A: out_cols x cols
    ref = _matmul_nt(x, a)
    results: dict[str, Any] = {}
    for pid in recipes:
        if pid == "bf16":
            out = [to_bf16(row) for row in _matmul_nt(x, a)]
            results[pid] = {"status": "measured", "gemm": summarize(*row_sums(ref, out))}
            continue
        if pid == "fp8-current":
            fmt = E4M3 if tensor == "activation" else E5M2
            xq, aq = quantize_per_tensor(x, fmt), quantize_per_tensor(a, E4M3)
        elif pid == "fp8-block":
            xq, aq = quantize_blocks_1d(x, E4M3), quantize_blocks_2d(a, E4M3)
        else:
            raise DynamicRangeError(f"the rounding model has no {pid}")
        signal, noise = row_sums(x, xq)
        quantize = summarize(signal, noise, bulk=bulk_sums(signal, noise, kind, outliers, x, xq))
        out = [to_bf16(row) for row in _matmul_nt(xq, aq)]
        results[pid] = {"status": "measured", "quantize": quantize, "gemm": summarize(*row_sums(ref, out))}
    return {"tensor": tensor, "input": kind, "ratio": ratio, "amax_over_median": amax_over_median(x),
            "results": results}


MODELLED = ("bf16", "fp8-current", "fp8-block")
NOT_MODELLED = "the CPU rounding model covers BF16, per-tensor and block FP8 only"


def model_study(*, m: int = 16, k: int = 256, n: int = 256, ratios: Sequence[float] = RATIOS,
                count: int = 2) -> tuple[dict[str, Any], dict[str, Any]]:
    """``(data, method)`` of the study from the rounding model: for tests, never for the site's cache."""
    from gemm_bench.question.plan import Support

    recipes = recipe_entries({pid: Support(True) for pid in PRECISIONS}, modelled=MODELLED,
                             not_modelled=NOT_MODELLED)
    measured = _measured(recipes)
    cases = [_finite_case(model_case(t, kind, r, measured, m=m, k=k, n=n, count=count))
             for t in TENSORS for kind in INPUTS for r in ratios]
    data = {"source": "cpu-model", "shape": {"m": m, "k": k, "n": n},
            "outliers": dict.fromkeys(INPUTS, count), "ratios": list(ratios), "recipes": recipes, "cases": cases}
    return data, {**study_method(), "quantizers": "CPU rounding model (gemm_bench.measure.dynamic_range), "
                                                  "not Transformer Engine: test data, not a measurement"}


def _finite_case(case: dict[str, Any]) -> dict[str, Any]:
    """A measured result with an unbounded SQNR (output equal to the reference) becomes a failed one."""
    for pid, result in case["results"].items():
        values = [v for part in ("quantize", "gemm") for v in result.get(part, {}).values()]
        if result["status"] == "measured" and not all(math.isfinite(v) for v in values):
            case["results"][pid] = {"status": "failed",
                                    "reason": "an SQNR is unbounded: the output equals the reference exactly"}
    return case


def study_method() -> dict[str, Any]:
    """What a document records about how it was measured."""
    return {
        "metric": "SQNR in dB, 10*log10(sum ref^2 / sum (out - ref)^2): over the whole tensor, per row "
                  "(median and minimum over rows), and over the non-outlier elements (input quantization only)",
        "reference": "FP32 product of the same BF16 inputs (TF32 off)",
        "inputs": "N(0, 1) in FP32; a few rows (massive-tokens) or columns (outlier-channels) multiplied by R; "
                  "cast to BF16; the same draw at every R",
        "passes": "activation X: Fprop Y = X W^T; output gradient dY: Dgrad dX = dY W (W ~ N(0, 1))",
        "quantizers": "Transformer Engine: Float8CurrentScalingQuantizer (E4M3; E5M2 for dY), "
                      "Float8BlockQuantizer (E4M3, 1x128 for X and dY, 128x128 for W, power-of-2 scales), "
                      "as gemm_bench.measure.backends.te's pre-quantized GEMMs",
        "gemm": "transformer_engine general_gemm, BF16 output, split accumulation as the recipe sets it",
        "delayed": DELAYED_REASON,
        "seed": f"({BASE_SEED} + crc32('tensor/input/what')) mod 2^31",
    }


# ----------------------------------------------------------------------------- GPU
def measure(*, m: int = 4096, k: int = 4096, n: int = 4096, ratios: Sequence[float] = RATIOS,
            count: int = OUTLIER_COUNT) -> tuple[dict[str, Any], dict[str, Any]]:
    """The study on this box's GPU with Transformer Engine: ``(data, method)``.

    About 2 to 5 seconds on an H100 at the default 4096 x 4096 x 4096 (24 cases, a BF16 and two FP8
    GEMMs each, plus the FP32 references), after TE's first-call setup.
    """
    import torch

    from gemm_bench.measure.accuracy import GPU_FAILURES
    from gemm_bench.measure.backends import te as te_backend

    recipes = recipe_entries(te_backend.support())
    measured = _measured(recipes)
    cases: list[dict[str, Any]] = []
    for tensor, pass_ in TENSORS.items():
        cols = k if pass_ == "fprop" else n
        w = _randn(n, k, seed_for(tensor, "weight", "w")).bfloat16()
        a = w if pass_ == "fprop" else w.t().contiguous()
        for kind in INPUTS:
            base = _randn(m, cols, seed_for(tensor, kind, "x"))
            gen = torch.Generator(device="cuda").manual_seed(seed_for(tensor, kind, "outliers"))
            outliers = torch.randperm(m if kind == "massive-tokens" else cols, device="cuda", generator=gen)[:count]
            outliers = outliers.sort().values
            for ratio in ratios:
                x = base.clone()
                if kind == "massive-tokens":
                    x[outliers] *= ratio
                else:
                    x[:, outliers] *= ratio
                x = x.bfloat16()
                case = _gpu_case(tensor, kind, ratio, x, a, outliers, measured, GPU_FAILURES)
                cases.append(_finite_case(case))
                torch.cuda.empty_cache()
    data = {"source": "transformer-engine", "shape": {"m": m, "k": k, "n": n},
            "outliers": dict.fromkeys(INPUTS, count), "ratios": [float(r) for r in ratios],
            "recipes": recipes, "cases": cases}
    return data, study_method()


def _randn(rows: int, cols: int, seed: int) -> Any:
    import torch

    gen = torch.Generator(device="cuda").manual_seed(seed)
    return torch.randn(rows, cols, device="cuda", dtype=torch.float32, generator=gen)


def _gpu_sums(ref: Any, out: Any) -> tuple[list[float], list[float]]:
    r = ref.double()
    return (r * r).sum(dim=1).tolist(), ((out.double() - r) ** 2).sum(dim=1).tolist()


def _gpu_bulk(ref: Any, out: Any, kind: str, outliers: Any) -> tuple[float, float]:
    import torch

    axis = 0 if kind == "massive-tokens" else 1
    keep = torch.ones(ref.shape[axis], dtype=torch.bool, device=ref.device)
    keep[outliers] = False
    r, o = (ref[keep], out[keep]) if axis == 0 else (ref[:, keep], out[:, keep])
    r, o = r.double(), o.double()
    return float((r * r).sum()), float(((o - r) ** 2).sum())


def _gpu_case(tensor: str, kind: str, ratio: float, x: Any, a: Any, outliers: Any, measured: Sequence[str],
              failures: tuple[type[BaseException], ...]) -> dict[str, Any]:
    """One case on the GPU: ``B = x`` (m x cols), ``A = a`` (out_cols x cols); TE's TN GEMM gives B @ A^T."""
    import torch
    from transformer_engine.pytorch.cpp_extensions import general_gemm

    from gemm_bench.measure.backends.te import _quantizers, make_recipe

    pass_ = TENSORS[tensor]
    allow = torch.backends.cuda.matmul.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = False
    try:
        xf = x.float()
        ref = xf @ a.float().t()
    finally:
        torch.backends.cuda.matmul.allow_tf32 = allow
    magnitudes = xf.abs().flatten()
    dynamic_range = float(magnitudes.max() / magnitudes.median())
    results: dict[str, Any] = {}
    for pid in measured:
        try:
            result: dict[str, Any] = {"status": "measured"}
            if pid == "bf16":
                a_q, b_q = a, x
                split = False
            else:
                qa, qb = _quantizers(pid, pass_)
                a_q, b_q = qa(a), qb(x)
                deq = b_q.dequantize(dtype=torch.float32)
                signal, noise = _gpu_sums(xf, deq)
                result["quantize"] = summarize(signal, noise, bulk=_gpu_bulk(xf, deq, kind, outliers))
                gemm_config = getattr(make_recipe(pid), f"fp8_gemm_{pass_}", None)
                split = bool(getattr(gemm_config, "use_split_accumulator", False))
            product = general_gemm(a_q, b_q, out_dtype=torch.bfloat16, use_split_accumulator=split)
            out = product[0] if isinstance(product, (tuple, list)) else product
            torch.cuda.synchronize()
            result["gemm"] = summarize(*_gpu_sums(ref, out.float()))
            results[pid] = result
        except failures as exc:
            results[pid] = {"status": "failed", "reason": f"{type(exc).__name__}: {exc}".splitlines()[0][:400]}
            torch.cuda.empty_cache()
    return {"tensor": tensor, "input": kind, "ratio": float(ratio), "amax_over_median": dynamic_range,
            "results": results}


def direction(data: Mapping[str, Any], tensor: str, kind: str, ratio: float, field: str = "row_median_db",
              part: str = "gemm") -> dict[str, float]:
    """``{precision: value}`` of one case's measured results (a test's and a reader's view)."""
    case = next(c for c in data["cases"] if (c["tensor"], c["input"], c["ratio"]) == (tensor, kind, ratio))
    return {pid: r[part][field] for pid, r in case["results"].items() if r["status"] == "measured" and part in r}

