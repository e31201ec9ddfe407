"""The layer step's Amdahl check against both measurements of what its GEMMs gain (session 19).

gpt-oss-120b measured at EP 8 on an H200 read FP8 Delayed's layer step at 1.02x BF16's while its
autocast GEMM rows, each pass timed alone after an L2 flush, summed to 0.99x: the check called it a
contradiction, and the page could not be built. Inside the step the profiled GEMM and quantization
kernels ran 1.04x faster than BF16's (why the rows differ is not known; an L2 flush is not it, measured).
A step now contradicts its GEMMs only where it gains beyond both.
"""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest

from gemm_bench.report.report import Report
from gemm_bench.results.typed import parse

CACHE = Path(__file__).resolve().parent.parent / "docs" / "_gemm_cache"
GPT_OSS_EP8_H200 = CACHE / "2a6f44509a377c37--h200.json"
MODES = ["autocast", "layer", "layer-graphed"]


def _doc() -> dict[str, Any]:
    return json.loads(GPT_OSS_EP8_H200.read_text(encoding="utf-8"))


def _cells(doc: dict[str, Any], precision: str) -> list[dict[str, Any]]:
    return [c for c in doc["layer"] if c["precision"] == precision and c.get("routing", "balanced") == "balanced"]


def _shorten(cell: dict[str, Any], ms: float) -> None:
    """The cell's step ``ms`` shorter, all of it taken from its elementwise kernels (the rest of the step,
    which an FP8 recipe does not change): its breakdown still adds up, its GEMMs and quantization untouched."""
    cell["ms"] -= ms
    stats = cell["stats"]
    for key in ("median_ms", "p10_ms", "p90_ms", "min_ms"):
        if key in stats:
            stats[key] -= ms
    stats["samples_ms"] = [s - ms for s in stats.get("samples_ms", [])]
    if "kernel_ms" in cell:
        cell["kernel_ms"] -= ms
    block = cell.get("breakdown")
    if block:
        for key in ("step_ms", "busy_ms", "span_ms"):
            block[key] -= ms
        block["parts_ms"]["elementwise"] -= ms


def test_the_committed_case_holds_on_the_steps_own_kernels() -> None:
    report = Report(parse(_doc()), modes=MODES)
    step = report.step("fp8-delayed", graphed=True)
    assert step.speedup_vs_bf16 is not None and step.gemm_speedup is not None
    assert step.speedup_vs_bf16 > step.gemm_speedup * 1.01  # what the GEMM rows alone called a contradiction
    inside = report.in_step_gemm_speedup("layer-graphed", "fp8-delayed")
    assert inside is not None and inside > step.speedup_vs_bf16
    assert report.step_contradictions() == []


@pytest.mark.parametrize("drop", ["breakdown", "scaled"])
def test_without_an_independent_in_step_measurement_the_rows_decide(drop: str) -> None:
    """No breakdown, or one scaled to the step (then it is not independent of the step's time): the
    autocast rows are the only measure, and the same data is a contradiction again."""
    doc = _doc()
    for cell in _cells(doc, "fp8-delayed"):
        if drop == "breakdown":
            cell.pop("breakdown", None)
        else:
            cell["breakdown"]["scaled_by"] = 0.95
    report = Report(parse(doc), modes=MODES)
    assert report.in_step_gemm_speedup("layer-graphed", "fp8-delayed") is None
    problems = report.step_contradictions()
    assert any("FP8 Delayed: the step gains" in p and "its GEMMs 0.99x" in p for p in problems), problems


def test_a_step_that_gains_beyond_both_is_still_a_contradiction() -> None:
    """FP8 Delayed's step 1 ms shorter in its elementwise kernels: it gains 1.16x, against 1.04x for its
    GEMMs and quantization inside the step and 0.99x in the rows."""
    doc = _doc()
    for cell in _cells(doc, "fp8-delayed"):
        _shorten(cell, 1.0)
    report = Report(parse(copy.deepcopy(doc)), modes=MODES)
    inside = report.in_step_gemm_speedup("layer-graphed", "fp8-delayed")
    assert inside is not None and inside == pytest.approx(1.042, abs=0.002)
    problems = report.step_contradictions()
    assert any("FP8 Delayed: the step gains 1.16x" in p and "1.04x with their quantization inside the step" in p
               for p in problems), problems
