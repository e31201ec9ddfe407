"""Device specifications: the dense tensor-core peaks and memory bandwidth of each GPU we measure.

Why this table exists: a measured TFLOP/s means little until it is set against what the chip can
do at most. "% of peak" answers "is this near the hardware limit?", and a cell above 100% of its
peak can only be a bug (a wrong FLOP count, a timer that missed work), so the same numbers guard
the results. The roofline model (:mod:`gemm_bench.report.roofline`) uses them too.

Every value is **dense** (no 2:4 structured sparsity). NVIDIA's datasheets print tensor-core
throughput *with* sparsity, marked with an asterisk; for every datacenter part here the dense
figure is half of it, and each entry's ``derivation`` says exactly how its numbers were read off
the cited source. Values are per GPU: where the source is a multi-GPU system (HGX, NVL72) the
per-system figure was divided by its GPU count, as the derivation states.

Keyed by device slug (:func:`gemm_bench.question.devices.device_slug` of the driver's name), the identity a
result records, so a result and its peak cannot be paired wrongly. Pure: no torch.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any

from gemm_bench.question.devices import device_slug, normalize_selector

#: The numeric format whose tensor-core peak bounds each precision's GEMM. Block-scaled FP8
#: (DeepSeek-style and MXFP8) runs on the FP8 tensor cores; NVFP4 on the FP4 ones.
FORMAT_OF_PRECISION: dict[str, str] = {
    "bf16": "bf16",
    "fp8-delayed": "fp8",
    "fp8-current": "fp8",
    "fp8-block": "fp8",
    "mxfp8": "fp8",
    "nvfp4": "fp4",
}
FORMATS: tuple[str, ...] = ("bf16", "fp8", "fp4")

DENSE_NOTE = (
    "Peaks are dense tensor-core throughput (no 2:4 structured sparsity) at the boost clock, from "
    "NVIDIA's public specifications; datasheets print the sparse figure, twice the dense one."
)


class HardwareError(ValueError):
    """A precision or format this table cannot map to a peak (names the offending value)."""


@dataclasses.dataclass(frozen=True)
class DeviceSpec:
    """One SKU's published peaks, with where they come from."""

    slug: str
    name: str
    bf16_tflops: float
    fp8_tflops: float
    #: None: the chip has no FP4 tensor cores (Hopper).
    fp4_tflops: float | None
    memory_gbps: float
    source: str
    url: str
    #: How the dense per-GPU numbers were read off the source (halved, divided by GPU count).
    derivation: str
    #: Where NVIDIA documents disagree or the slug may cover a variant: said, not hidden.
    caveat: str = ""

    def peak(self, fmt: str) -> float | None:
        if fmt not in FORMATS:
            raise HardwareError(f"format {fmt!r} is not one of {', '.join(FORMATS)}")
        return {"bf16": self.bf16_tflops, "fp8": self.fp8_tflops, "fp4": self.fp4_tflops}[fmt]

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


_HALVED = "dense = the datasheet's sparse (*) tensor-core figures halved"

SPECS: dict[str, DeviceSpec] = {
    s.slug: s
    for s in (
        DeviceSpec(
            "h100-80gb-hbm3", "H100 SXM", 989.5, 1979.0, None, 3350.0,
            "NVIDIA H100 Tensor Core GPU Datasheet (H100 SXM column)",
            "https://resources.nvidia.com/en-us-tensor-core/nvidia-tensor-core-gpu-datasheet",
            f"BF16 1,979*, FP8 3,958* TFLOPS; {_HALVED}; GPU memory bandwidth 3.35 TB/s",
        ),
        DeviceSpec(
            "h100-pcie", "H100 PCIe", 756.5, 1513.0, None, 2000.0,
            "NVIDIA H100 Tensor Core GPU Datasheet, 2022 edition (H100 PCIe column)",
            "https://resources.nvidia.com/en-us-tensor-core/nvidia-tensor-core-gpu-datasheet",
            f"BF16 1,513*, FP8 3,026* TFLOPS; {_HALVED}; GPU memory bandwidth 2 TB/s",
            "Later editions of the datasheet list H100 NVL instead of H100 PCIe.",
        ),
        DeviceSpec(
            "h200", "H200 SXM", 989.5, 1979.0, None, 4800.0,
            "NVIDIA H200 Tensor Core GPU Datasheet (H200 SXM column)",
            "https://www.nvidia.com/en-us/data-center/h200/",
            f"BF16 1,979*, FP8 3,958* TFLOPS; {_HALVED}; GPU memory bandwidth 4.8 TB/s",
        ),
        DeviceSpec(
            "gh200-480gb", "GH200 (96 GB HBM3)", 989.5, 1979.0, None, 4000.0,
            "NVIDIA GH200 Grace Hopper Superchip Datasheet",
            "https://www.nvidia.com/en-us/data-center/grace-hopper-superchip/",
            f"BF16 1,979*, FP8 3,958* TFLOPS; {_HALVED}; HBM3 bandwidth 4 TB/s (96 GB variant)",
            "The driver name 'GH200 480GB' is the 96 GB HBM3 superchip; the 144 GB HBM3e one "
            "(4.9 TB/s) reports another name and so another slug.",
        ),
        DeviceSpec(
            "b200", "B200 (HGX)", 2250.0, 4500.0, 9000.0, 8000.0,
            "NVIDIA HGX B200 specifications (8 GPUs) and NVIDIA Blackwell Architecture Technical Brief",
            "https://www.nvidia.com/en-us/data-center/hgx/",
            "HGX B200: FP16/BF16 36*, FP8 72*, FP4 144* | 72 (dense) PFLOPS for 8 GPUs; per GPU "
            "divided by 8, sparse figures halved; 8 TB/s HBM3e per GPU (technical brief)",
            "Some later NVIDIA material lists 7.7 TB/s per B200; torchao reads ~7.67 TB/s from the "
            "memory bus width the driver reports.",
        ),
        DeviceSpec(
            "gb200", "B200 in GB200 NVL72", 2500.0, 5000.0, 10000.0, 8000.0,
            "NVIDIA GB200 NVL72 specifications (72 GPUs)",
            "https://www.nvidia.com/en-us/data-center/gb200-nvl72/",
            "GB200 NVL72: FP16/BF16 360*, FP8 720*, FP4 1,440* PFLOPS and 576 TB/s for 72 GPUs; "
            "per GPU divided by 72, sparse figures halved",
            "The Blackwell technical brief's per-GPU table gives 2.25 PFLOPS dense BF16 for a "
            "GB200 GPU; the NVL72 page's figures (higher power) are used here.",
        ),
        DeviceSpec(
            "b300-sxm6-ac", "B300 (HGX)", 2250.0, 4500.0, 13125.0, 8000.0,
            "NVIDIA HGX B300 specifications (8 GPUs) and NVIDIA Blackwell Ultra datasheet",
            "https://www.nvidia.com/en-us/data-center/hgx/",
            "HGX B300: FP16/BF16 36*, FP8 72* PFLOPS, FP4 144* | 105 (dense) PFLOPS for 8 GPUs; "
            "per GPU divided by 8, sparse figures halved; 8 TB/s HBM3e per GPU (datasheet)",
            "Other NVIDIA material rounds dense FP4 per B300 to 14 or 15 PFLOPS (GB300).",
        ),
        DeviceSpec(
            "rtx-pro-6000-blackwell-server-edition", "RTX PRO 6000 Blackwell Server Edition",
            503.8, 1007.6, 2015.2, 1792.0,
            "NVIDIA RTX Blackwell GPU Architecture whitepaper (RTX PRO 6000 Blackwell, FP32 accumulate)",
            "https://www.nvidia.com/en-us/data-center/rtx-pro-6000-blackwell-server-edition/",
            "Dense FP16/BF16 and FP8 tensor TFLOPS with FP32 accumulate and dense FP4 as listed; "
            "4 PFLOPS FP4 with sparsity on the product page; 1,792 GB/s GDDR7 (512-bit, 28 Gbps)",
            "Whitepaper figures are at the Workstation Edition's boost clock; the Server Edition's "
            "sustained clock may be lower, so its real ceiling can sit below these peaks.",
        ),
    )
}

def spec_for(device: str) -> DeviceSpec | None:
    """The spec of a device given as a slug, an alias (``h100``) or the driver's name."""
    key = normalize_selector(device)
    if key in SPECS:
        return SPECS[key]
    return SPECS.get(device_slug(device))


def precision_format(precision: str) -> str:
    """``bf16``/``fp8``/``fp4`` for a precision id (or a format name, returned as is)."""
    if precision in FORMATS:
        return precision
    try:
        return FORMAT_OF_PRECISION[precision]
    except KeyError:
        raise HardwareError(
            f"precision {precision!r} has no tensor-core format; known: "
            f"{', '.join([*FORMAT_OF_PRECISION, *FORMATS])}"
        ) from None


def peak_tflops(device: str, precision: str) -> float | None:
    """Dense peak TFLOP/s of ``precision``'s format on ``device``; None when not known.

    None means "no published peak to compare with": an unknown device, or a format the chip has
    no tensor cores for (FP4 on Hopper: TE reports NVFP4 unsupported there anyway).
    """
    fmt = precision_format(precision)
    spec = spec_for(device)
    return spec.peak(fmt) if spec is not None else None


def achieved_tflops(flops: int | float, ms: float) -> float:
    if not (isinstance(ms, (int, float)) and math.isfinite(ms) and ms > 0):
        raise HardwareError(f"time must be a positive number of milliseconds, got {ms!r}")
    return flops / (ms * 1e-3) / 1e12


def pct_of_peak(flops: int | float, ms: float, device: str, precision: str) -> float | None:
    """Achieved TFLOP/s as a percentage of the dense peak (None when no peak is known)."""
    peak = peak_tflops(device, precision)
    if peak is None:
        return None
    return 100.0 * achieved_tflops(flops, ms) / peak


@dataclasses.dataclass(frozen=True)
class PeakViolation:
    """A measured cell faster than the hardware can be: ``where`` is its JSON path."""

    where: str
    pct: float
    message: str


def above_peak(device: str, precision: str, flops: int | float, ms: float) -> float | None:
    """The % of peak when it exceeds 100, else None: the check one cell needs."""
    pct = pct_of_peak(flops, ms, device, precision)
    return pct if pct is not None and pct > 100.0 else None


def peak_violations(doc: dict[str, Any]) -> list[PeakViolation]:
    """Measured cells of a result document above 100% of their device's dense peak.

    For results validation (called by the schema's owner): such a cell comes from a wrong FLOP
    count or a timer that missed work, never from the hardware. Cells of unknown devices or
    formats are not checked (there is nothing to check them against). Expects a document whose
    cells already passed the schema check (``m``, ``k``, ``n``, ``groups``, ``ms``).
    """
    device = doc["device"]["name"]
    out: list[PeakViolation] = []
    for i, cell in enumerate(doc.get("cells", [])):
        if cell.get("status") != "measured" or cell.get("precision") not in FORMAT_OF_PRECISION:
            continue
        flops = 2 * cell["m"] * cell["k"] * cell["n"] * cell.get("groups", 1)
        pct = above_peak(device, cell["precision"], flops, cell["ms"])
        if pct is not None:
            peak = peak_tflops(device, cell["precision"])
            out.append(PeakViolation(
                f"$.cells[{i}]", pct,
                f"{cell['mode']}/{cell['precision']} {cell['op']}/{cell['pass']}: "
                f"{achieved_tflops(flops, cell['ms']):.1f} TFLOP/s is {pct:.0f}% of the dense "
                f"{precision_format(cell['precision']).upper()} peak ({peak:g} TFLOP/s) of "
                f"{device}: the FLOP count or the timing is wrong",
            ))
    return out
