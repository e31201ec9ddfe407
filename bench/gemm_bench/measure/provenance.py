"""Where and how a result was measured: GPU, driver, clocks, software stack, commit, date.

Everything is read from the running system (torch, the CUDA driver through ``nvidia-smi``, the
loaded cuBLAS library itself), never typed in.
"""

from __future__ import annotations

import ctypes
import datetime as dt
import importlib.metadata
import os
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import torch

_SMI_FIELDS = (
    "driver_version",
    "clocks.max.sm",
    "clocks.max.memory",
    "clocks.applications.graphics",
    "power.limit",
    "power.max_limit",
    "memory.total",
    "pci.bus_id",
)


def _nvidia_smi(index: int) -> dict[str, str]:
    exe = shutil.which("nvidia-smi")
    if not exe:
        return {}
    try:
        out = subprocess.run(
            [exe, f"--id={index}", f"--query-gpu={','.join(_SMI_FIELDS)}", "--format=csv,noheader,nounits"],
            capture_output=True, text=True, timeout=30, check=True,
        ).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return {}
    values = [v.strip() for v in out.split(",")]
    unusable = ("N/A", "Not Supported")
    return {k: v for k, v in zip(_SMI_FIELDS, values, strict=False) if v and not any(u in v for u in unusable)}


def cublas_version() -> str:
    """The version of the cuBLAS library this process actually loaded."""
    try:
        a = torch.ones(8, 8, device="cuda")
        (a @ a).sum().item()
        maps = Path("/proc/self/maps").read_text()
        paths = sorted({line.split()[-1] for line in maps.splitlines() if "libcublas.so" in line})
        if paths:
            lib = ctypes.CDLL(paths[0])
            parts = []
            for prop in (0, 1, 2):  # MAJOR_VERSION, MINOR_VERSION, PATCH_LEVEL
                value = ctypes.c_int()
                if lib.cublasGetProperty(prop, ctypes.byref(value)) != 0:
                    raise OSError("cublasGetProperty failed")
                parts.append(str(value.value))
            return ".".join(parts)
    except (OSError, AttributeError, RuntimeError):
        pass
    for dist in ("nvidia-cublas", "nvidia-cublas-cu13", "nvidia-cublas-cu12"):
        try:
            return importlib.metadata.version(dist)
        except importlib.metadata.PackageNotFoundError:
            continue
    return "unknown"


def project_commit() -> str:
    """The project's git commit: ``GEMM_BENCH_COMMIT`` (for trees copied without .git) or git's."""
    candidate = os.environ.get("GEMM_BENCH_COMMIT", "").strip()
    if not candidate:
        root = Path(__file__).resolve().parents[2]
        try:
            candidate = subprocess.run(["git", "-C", str(root), "rev-parse", "HEAD"], capture_output=True,
                                       text=True, timeout=10, check=True).stdout.strip()
        except (OSError, subprocess.SubprocessError):
            candidate = ""
    return candidate if re.fullmatch(r"[0-9a-f]{7,40}", candidate) else "unknown"


def collect(method: dict[str, Any], te_version: str) -> tuple[dict[str, Any], dict[str, Any]]:
    """(device, provenance) blocks of a result document for the current CUDA device."""
    index = torch.cuda.current_device()
    props = torch.cuda.get_device_properties(index)
    smi = _nvidia_smi(index)
    device = {
        "name": props.name,
        "compute_capability": f"{props.major}.{props.minor}",
        "sm_count": props.multi_processor_count,
        "memory_gib": round(props.total_memory / 2**30, 1),
        "max_sm_clock_mhz": smi.get("clocks.max.sm"),
        "max_memory_clock_mhz": smi.get("clocks.max.memory"),
        "application_sm_clock_mhz": smi.get("clocks.applications.graphics"),
        "power_limit_w": smi.get("power.limit"),
        "max_power_limit_w": smi.get("power.max_limit"),
    }
    provenance = {
        "torch": torch.__version__,
        "transformer_engine": te_version,
        "cuda": torch.version.cuda or "unknown",
        "cublas": cublas_version(),
        "driver": smi.get("driver_version", "unknown"),
        "commit": project_commit(),
        "date": dt.datetime.now(dt.timezone.utc).replace(microsecond=0).isoformat(),
        "method": method,
    }
    return device, provenance
