"""The "tp-comm" study: one transformer layer's step with tensor and sequence parallelism, measured on a
box of several GPUs, against the same rank's compute with its collectives stood in (issue 42).

Why: a tensor-parallel rank's step pays all-gathers and reduce-scatters that one GPU never runs.
The study measures, per model shape, TP size and recipe, on every GPU of one box (``torchrun``, one
process per GPU; :mod:`gemm_bench.measure.tp_step`, :mod:`gemm_bench.measure.standins`):

* ``real``: the ``te.TransformerLayer`` with TE's tensor and sequence parallelism (no Userbuffers,
  no comm-GEMM overlap), first and cached micro-batch, CUDA-graphed;
* ``compute``: the same layer with every collective replaced by a local stand-in that moves no data;
* ``composed``: compute + every collective of :func:`gemm_bench.question.comm.tp_layer_collectives`
  at its cost measured on the same box (no overlap), and the communication's share.

Pure: the validator of the ``data`` block (as :func:`stored_data` writes it from the tool's JSON) and
the registration. The ``data`` block::

    {"gpus": 4, "seq": 8192, "nccl": "2.28.9",
     "cells": [{"model": "llama3-8b", "tp": 2, "precision": "bf16", "status": "measured",
                "regions": {"first": {"real_ms", "real_q1_ms", "real_q3_ms", "compute_ms", "comm_ms",
                                      "overlappable_ms", "composed_ms", "composed_over_real",
                                      "method", "nccl_exposed_share"}, "cached": {...}}}, ...]}
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from gemm_bench.question.precisions import PRECISIONS
from gemm_bench.results.studies import (
    Study,
    StudyError,
    choice,
    integer,
    json_list,
    json_object,
    number,
    register,
    text,
)

NAME = "tp-comm"
METHOD_VERSION = "1"
REGIONS: tuple[str, ...] = ("first", "cached")
STATUSES: tuple[str, ...] = ("measured", "failed")
TIMES: tuple[str, ...] = ("real_ms", "real_q1_ms", "real_q3_ms", "compute_ms", "comm_ms", "overlappable_ms",
                          "composed_ms")


def stored_data(tool: Mapping[str, Any]) -> dict[str, Any]:
    """The study's ``data`` block from ``tools/gpu_tp_comm.py``'s JSON: per cell and region the slowest
    rank's medians (the step waits for it), the composition and the profiler's exposed NCCL share; the
    per-round samples and the collective sweep stay in the tool's own file."""
    cells = []
    for cell in tool["cells"]:
        entry: dict[str, Any] = {"model": cell["model"], "tp": cell["tp"], "precision": cell["precision"],
                                 "status": "measured" if cell.get("status") == "measured" and "composed" in cell
                                 else "failed"}
        if entry["status"] == "failed":
            entry["reason"] = str(cell.get("reason") or cell.get("composition_error") or "not measured")[:400]
            cells.append(entry)
            continue
        regions = {}
        for region in REGIONS:
            real = cell["real"]["regions"][region]["max_rank"]
            composed = cell["composed"][region]
            profile = (cell["real"].get("profile") or {}).get(region) or {}
            regions[region] = {
                "real_ms": real["median_ms"], "real_q1_ms": real["q1_ms"], "real_q3_ms": real["q3_ms"],
                "compute_ms": composed["compute_ms"], "comm_ms": composed["comm_ms"],
                "overlappable_ms": composed["overlappable_ms"], "composed_ms": composed["step_ms"],
                "composed_over_real": composed["step_ms"] / real["median_ms"], "method": cell["real"]["method"],
                "nccl_exposed_share": profile.get("nccl_exposed_share")}
        entry["regions"] = regions
        cells.append(entry)
    return {"gpus": tool["gpus"], "seq": tool["seq"], "nccl": str(tool["provenance"].get("nccl", "")),
            "cells": cells}


def validate_data(data: Any) -> None:
    data = json_object(data, "$.data")
    integer(data.get("gpus"), "$.data.gpus", minimum=2, maximum=1 << 16)
    integer(data.get("seq"), "$.data.seq", minimum=1, maximum=1 << 24)
    seen = set()
    for i, cell in enumerate(json_list(data.get("cells"), "$.data.cells", non_empty=True)):
        at = f"$.data.cells[{i}]"
        cell = json_object(cell, at)
        text(cell.get("model"), f"{at}.model")
        integer(cell.get("tp"), f"{at}.tp", minimum=2, maximum=1 << 10)
        choice(cell.get("precision"), f"{at}.precision", tuple(PRECISIONS))
        status = choice(cell.get("status"), f"{at}.status", STATUSES)
        key = (cell["model"], cell["tp"], cell["precision"])
        if key in seen:
            raise StudyError(at, f"repeats {key}")
        seen.add(key)
        if status == "failed":
            text(cell.get("reason"), f"{at}.reason")
            continue
        regions = json_object(cell.get("regions"), f"{at}.regions")
        for region in REGIONS:
            block = json_object(regions.get(region), f"{at}.regions.{region}")
            for field in TIMES:
                number(block.get(field), f"{at}.regions.{region}.{field}", minimum=0.0)
            for field in ("real_ms", "compute_ms", "composed_ms"):
                number(block.get(field), f"{at}.regions.{region}.{field}", positive=True)
            if not block["real_q1_ms"] <= block["real_ms"] <= block["real_q3_ms"]:
                raise StudyError(f"{at}.regions.{region}.real_ms", "is not within its quartiles")
            if abs(block["compute_ms"] + block["comm_ms"] - block["composed_ms"]) > 1e-6 * block["composed_ms"] + 1e-6:
                raise StudyError(f"{at}.regions.{region}.composed_ms", "is not compute_ms + comm_ms")
            ratio = number(block.get("composed_over_real"), f"{at}.regions.{region}.composed_over_real",
                           positive=True)
            if abs(ratio - block["composed_ms"] / block["real_ms"]) > 1e-6 * ratio:
                raise StudyError(f"{at}.regions.{region}.composed_over_real", "is not composed_ms / real_ms")


STUDY = register(Study(
    name=NAME,
    title="A tensor-parallel layer's step with its collectives, on a box of several GPUs",
    method_version=METHOD_VERSION,
    validate_data=validate_data,
    measure="gemm_bench.measure.tp_comm_study:measure",
    min_gpus=2,
))
