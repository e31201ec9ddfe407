"""The "tp-comm" study: one transformer layer's step with tensor and sequence parallelism, measured on a
box of several GPUs, against the same rank's compute with its collectives stood in (issue 42).

Why: a tensor-parallel rank's step pays all-gathers and reduce-scatters that one GPU never runs.
The study measures, per model shape, TP size and recipe, on every GPU of one box (``torchrun``, one
process per GPU; :mod:`gemm_bench.measure.tp_step`, :mod:`gemm_bench.measure.standins`):

* ``real``: the ``te.TransformerLayer`` with TE's tensor and sequence parallelism (no Userbuffers,
  no comm-GEMM overlap), first and cached micro-batch, CUDA-graphed;
* ``compute``: the same layer with every collective replaced by a local stand-in that moves no data;
* ``composed``: compute + every collective of :func:`gemm_bench.question.comm.tp_layer_collectives`
  at its cost measured on the same box (no overlap), and the communication's share;
* (runs since session 15) ``real_serial_ms``: the real layer with every collective run synchronously
  (no overlap, like the composition: :func:`gemm_bench.measure.standins.collectives_serialized`), the
  composition's ratio to it (``composed_over_serial``, the proof's like-with-like ratio) and what TE's
  asynchronous collectives hid in the real step (``overlap_hidden_ms``).

Pure: the validator of the ``data`` block (as :func:`stored_data` writes it from the tool's JSON) and
the registration. The ``data`` block::

    {"gpus": 4, "seq": 8192, "nccl": "2.28.9",
     "cells": [{"model": "llama3-8b", "tp": 2, "precision": "bf16", "status": "measured",
                "regions": {"first": {"real_ms", "real_q1_ms", "real_q3_ms", "compute_ms", "comm_ms",
                                      "overlappable_ms", "composed_ms", "composed_over_real",
                                      "method", "nccl_exposed_share"}, "cached": {...}}}, ...],
     "sweep": [{"op": "all-gather", "dtype": "bf16", "group": 4, "bytes": 1048576, "ms": 0.0439,
                "busbw_gb_s": 17.91}, ...]}

``sweep`` (optional: files written before it was carried have none) is the collective sweep the same
run measured on the same box, per group size the box holds: every op and payload dtype a step's
collectives use (all-gather BF16 and FP8's uint8, reduce-scatter BF16 and FP32, all-reduce BF16 and
FP32, all-to-all BF16, send/recv BF16), 1 MiB to 512 MiB plus the exact sizes the layer step runs,
each the slowest rank's median ms per call (a collective ends when its slowest rank's part does). A
size that failed keeps ``error`` and no ``ms``. It is what :mod:`gemm_bench.question.layout_step`
composes a layout's communication from (:func:`collective_table`), including groups larger than the
box (scaled, assumed) and groups across nodes (an assumed link).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from gemm_bench.question.comm import DTYPE_BYTES, OPS, CollectiveTable, bus_bandwidth_gb_s
from gemm_bench.question.precisions import PRECISIONS
from gemm_bench.results.studies import (
    StudyError,
    choice,
    integer,
    json_list,
    json_object,
    number,
    register_schema,
    text,
)

NAME = "tp-comm"
METHOD_VERSION = "1"
REGIONS: tuple[str, ...] = ("first", "cached")
STATUSES: tuple[str, ...] = ("measured", "failed")
TIMES: tuple[str, ...] = ("real_ms", "real_q1_ms", "real_q3_ms", "compute_ms", "comm_ms", "overlappable_ms",
                          "composed_ms")
#: Fields of one sweep record the study keeps (the per-rank medians stay in the tool's own file).
SWEEP_FIELDS: tuple[str, ...] = ("op", "dtype", "group", "bytes", "ms", "busbw_gb_s")
#: The stored bus bandwidth is rounded to 3 decimals: it must be ms's within this (relative) or 0.001 GB/s.
BUSBW_TOLERANCE = 1e-3


def stored_sweep(tool: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The tool's collective sweep (``{"2": [records], "4": [...]}``, :func:`gemm_bench.measure.tp_step.
    table_records` per group) as one list sorted by (op, dtype, group, bytes); a failed size keeps its
    ``error`` and ``ms`` None. Numbers are copied, never recomputed, but the bus bandwidth (recomputed
    from the copied ms, as the tool computes it, so that the validator's check holds by construction)."""
    out = []
    for group, records in sorted((tool.get("sweep") or {}).items(), key=lambda kv: int(kv[0])):
        for r in records:
            entry: dict[str, Any] = {"op": r["op"], "dtype": r["dtype"], "group": int(r["group"]),
                                     "bytes": int(r["bytes"])}
            if int(r["group"]) != int(group):
                raise StudyError(f"$.sweep.{group}", f"holds a record of group {r['group']}")
            if r.get("ms") is None:
                entry.update(ms=None, error=str(r.get("error") or "no time")[:400])
            else:
                entry.update(ms=float(r["ms"]), busbw_gb_s=round(bus_bandwidth_gb_s(
                    r["op"], int(r["bytes"]), float(r["ms"]), int(r["group"])), 3))
            out.append(entry)
    return sorted(out, key=lambda e: (e["op"], e["dtype"], e["group"], e["bytes"]))


def run_seq(tool: Mapping[str, Any]) -> int:
    """The sequence length every cell ran at: the tool's ``--seq``, or, where it ran each model at its
    preset's (``seq`` null), that length, which must be one for all the run's models."""
    if tool.get("seq") is not None:
        return int(tool["seq"])
    from gemm_bench.question.config import preset

    lengths = {preset(m).seq_length for m in tool["models"]}
    if len(lengths) != 1:
        raise StudyError("$.seq", f"the run's models ran at their presets' lengths, which differ: {sorted(lengths)}")
    return lengths.pop()


def stored_data(tool: Mapping[str, Any]) -> dict[str, Any]:
    """The study's ``data`` block from ``tools/gpu_tp_comm.py``'s JSON: per cell and region the slowest
    rank's medians (the step waits for it), the composition and the profiler's exposed NCCL share; the
    per-round samples stay in the tool's own file; the collective sweep is carried (:func:`stored_sweep`)."""
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
            if "real_serial" in cell:  # the same layer with its collectives serialized (runs since session 15)
                serial = cell["real_serial"]["regions"][region]["max_rank"]["median_ms"]
                regions[region].update(real_serial_ms=serial, composed_over_serial=composed["step_ms"] / serial,
                                       overlap_hidden_ms=serial - real["median_ms"])
        entry["regions"] = regions
        cells.append(entry)
    data = {"gpus": tool["gpus"], "seq": run_seq(tool), "nccl": str(tool["provenance"].get("nccl", "")),
            "cells": cells}
    sweep = stored_sweep(tool)
    if sweep:
        data["sweep"] = sweep
    return data


def validate_sweep(sweep: Any, gpus: int) -> None:
    """Each record a known op and dtype over 2..``gpus`` ranks, positive bytes, a positive ms whose bus
    bandwidth is the stored one (or no ms and an ``error``), no (op, dtype, group, bytes) twice."""
    seen = set()
    for i, record in enumerate(json_list(sweep, "$.data.sweep", non_empty=True)):
        at = f"$.data.sweep[{i}]"
        record = json_object(record, at)
        op = choice(record.get("op"), f"{at}.op", OPS)
        dtype = choice(record.get("dtype"), f"{at}.dtype", tuple(DTYPE_BYTES))
        group = integer(record.get("group"), f"{at}.group", minimum=2, maximum=gpus)
        size = integer(record.get("bytes"), f"{at}.bytes", minimum=1, maximum=1 << 40)
        key = (op, dtype, group, size)
        if key in seen:
            raise StudyError(at, f"repeats {key}")
        seen.add(key)
        if record.get("ms") is None:
            text(record.get("error"), f"{at}.error")
            continue
        ms = number(record.get("ms"), f"{at}.ms", positive=True)
        busbw = number(record.get("busbw_gb_s"), f"{at}.busbw_gb_s", minimum=0.0)
        expected = bus_bandwidth_gb_s(op, size, ms, group)
        if abs(busbw - expected) > max(BUSBW_TOLERANCE * expected, 1e-3):
            raise StudyError(f"{at}.busbw_gb_s", f"is not the bus bandwidth of {size} bytes in {ms} ms "
                                                 f"({expected:.3f} GB/s)")


def collective_table(data: Mapping[str, Any]) -> CollectiveTable | None:
    """The measured collective costs of a validated ``data`` block, or None where the file has no sweep
    (written before the sweep was carried: a refresh on a box of several GPUs brings it)."""
    sweep = data.get("sweep")
    if not sweep:
        return None
    return CollectiveTable.from_records(sweep)


def _check_data(data: dict[str, Any]) -> None:
    gpus = integer(data.get("gpus"), "$.data.gpus", minimum=2, maximum=1 << 16)
    integer(data.get("seq"), "$.data.seq", minimum=1, maximum=1 << 24)
    if "sweep" in data:
        validate_sweep(data["sweep"], gpus)
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
            if "real_serial_ms" in block:
                _validate_serial(block, f"{at}.regions.{region}")


def _validate_serial(block: Mapping[str, Any], at: str) -> None:
    """The serialized step's fields: a positive time, the composition's ratio to it, and what TE's
    asynchronous collectives hid (serialized minus real)."""
    serial = number(block.get("real_serial_ms"), f"{at}.real_serial_ms", positive=True)
    ratio = number(block.get("composed_over_serial"), f"{at}.composed_over_serial", positive=True)
    if abs(ratio - block["composed_ms"] / serial) > 1e-6 * ratio:
        raise StudyError(f"{at}.composed_over_serial", "is not composed_ms / real_serial_ms")
    hidden = number(block.get("overlap_hidden_ms"), f"{at}.overlap_hidden_ms")
    if abs(hidden - (serial - block["real_ms"])) > 1e-6 * serial:
        raise StudyError(f"{at}.overlap_hidden_ms", "is not real_serial_ms - real_ms")


STUDY = register_schema(NAME, title="A tensor-parallel layer's step with its collectives, on a box of several GPUs",
                        method_version=METHOD_VERSION, measure="gemm_bench.measure.tp_comm_study:measure",
                        fields=("gpus", "seq", "cells"), optional=("nccl", "sweep"), check=_check_data, min_gpus=2)
validate_data = STUDY.validate_data
