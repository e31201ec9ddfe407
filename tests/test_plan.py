"""The precision plan: per projection, FP8 only where its three GEMMs are clearly faster together.

Inputs are a committed result (a dense Llama-shaped model, 12 autocast GEMMs per precision) whose
FP8 Current cells are rewritten to known speedups, so each case's answer is known in advance.
"""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest

from gemm_bench.report import precision_plan as pp
from gemm_bench.report.report import Report
from gemm_bench.results.typed import PlanBlock
from gemm_benchmark.values import BF16_POINT, Point, decide_fastest

CACHE = Path(__file__).parent.parent / "docs" / "_gemm_cache"
#: Llama 3 70B-shaped (dense, qkv / attn_out / mlp_up / mlp_down), measured on an H100.
TEMPLATE = CACHE / "1b59f8aaa83a14db--h100-80gb-hbm3.json"


def _doc(speedups: dict[tuple[str, str], float], *, iqr_fraction: float = 0.0) -> dict[str, Any]:
    """The template with FP8 Current's autocast cells at BF16's time / ``speedups[(op, pass)]`` (1.5
    where not given), every sample equal to the median unless ``iqr_fraction`` spreads them."""
    doc = copy.deepcopy(json.loads(TEMPLATE.read_text(encoding="utf-8")))
    bf16 = {(c["op"], c["pass"]): c["ms"] for c in doc["cells"] if c["mode"] == "autocast" and c["precision"] == "bf16"}
    for cell in doc["cells"]:
        if cell["mode"] != "autocast" or cell["precision"] not in ("bf16", "fp8-current"):
            continue
        key = (cell["op"], cell["pass"])
        ms = bf16[key] if cell["precision"] == "bf16" else bf16[key] / speedups.get(key, 1.5)
        half = ms * iqr_fraction / 2
        samples = [ms - half, ms - half, ms, ms + half, ms + half] * 4
        cell.update(ms=ms, stats={**cell["stats"], "median_ms": ms, "iqr_ms": 2 * half, "samples_ms": samples})
    return doc


def test_a_projection_whose_three_gemms_lose_together_stays_in_bf16() -> None:
    doc = _doc({("attn_out", "fprop"): 0.8, ("attn_out", "dgrad"): 0.8, ("attn_out", "wgrad"): 0.9})
    plan = pp.make_plan(Report(doc), "fp8-current")
    assert plan.bf16_ops == ("attn_out",) and plan.fp8_ops == ("qkv", "mlp_up", "mlp_down")
    assert plan.kind == "mixed" and plan.complete
    assert "attention output in BF16" in plan.sentence()
    assert plan.config()["keep_in_bf16"] == ["attn_out"] and "te.autocast(enabled=False)" in plan.snippet()


def test_the_sum_decides_a_projection_whose_passes_disagree() -> None:
    """Fprop loses (0.8x) but Dgrad and Wgrad win by more: the module is faster in FP8 as a whole."""
    doc = _doc({("qkv", "fprop"): 0.8, ("qkv", "dgrad"): 1.7, ("qkv", "wgrad"): 1.7})
    plan = pp.make_plan(Report(doc), "fp8-current")
    qkv = next(v for v in plan.verdicts if v.op == "qkv")
    assert qkv.fp8 and qkv.speedup is not None and 1.1 < qkv.speedup < 1.3
    assert plan.kind == "all-fp8" and "every projection" in plan.sentence()


def test_a_gain_within_the_spread_is_not_clearly_faster() -> None:
    """1.02x with a 10% interquartile range on both sides: not clearly faster, so BF16 stays."""
    doc = _doc({(op, p): 1.02 for op in ("qkv", "attn_out", "mlp_up", "mlp_down") for p in ("fprop", "dgrad", "wgrad")},
               iqr_fraction=0.10)
    plan = pp.make_plan(Report(doc), "fp8-current")
    assert plan.kind == "all-bf16" and plan.fp8_ops == () and "BF16 throughout" in plan.sentence()
    assert all(v.low is not None and v.low < 1.0 < (v.high or 0) for v in plan.verdicts)


@pytest.mark.parametrize(("value", "low", "high"), [
    (1.3, 1.1, 1.5), (1.05, 0.99, 1.1), (0.9, 0.8, 1.0), (1.02, 1.0, 1.04), (1.2, None, None),
    (1.0001, 1.00005, 1.0002)])
def test_clearly_faster_is_the_sites_fastest_rule(value: float, low: float | None, high: float | None) -> None:
    """The plan's rule and the site's ``decide_fastest`` agree on every point: FP8 is clearly faster
    exactly when the site would name it the fastest over BF16 alone."""
    site = decide_fastest({"bf16": BF16_POINT, "fp8-current": Point(value, low, high)})
    assert site is not None
    assert pp.clearly_faster(value, low, high) == (site.answer == "fp8-current")


def test_a_projection_not_measured_stays_in_bf16_with_its_reason() -> None:
    doc = _doc({})
    doc["cells"] = [c for c in doc["cells"] if not (c["precision"] == "fp8-current" and c["op"] == "mlp_down"
                                                     and c["pass"] == "wgrad" and c["mode"] == "autocast")]
    plan = pp.make_plan(Report(doc), "fp8-current")
    down = next(v for v in plan.verdicts if v.op == "mlp_down")
    assert not down.fp8 and down.speedup is None and "missing" in down.reason and not plan.complete


def test_manual_shapes_have_no_plan() -> None:
    sweep = next(p for p in sorted(CACHE.glob("*.json")) if json.loads(p.read_text())["question"]["kind"] == "sweep")
    report = Report(json.loads(sweep.read_text(encoding="utf-8")))
    assert pp.plans(report) == []
    with pytest.raises(ValueError, match="no projections"):
        pp.make_plan(report, "fp8-current")


# ----------------------------------------------------------------------------- the stored plan block
def _plan_block() -> dict[str, Any]:
    from gemm_bench.measure.step import layer_cell
    from gemm_bench.results import breakdown as bd

    def cell(step: str, ms: float) -> dict[str, Any]:
        block = bd.breakdown_block(ms, [bd.round_parts([("nvjet_a", 0, int(ms * 0.9e6))])], source="test")
        out = layer_cell("layer-graphed", "bf16", "measured", ms=ms, stats={"median_ms": ms, "iqr_ms": 0.0},
                         breakdown=block)
        out.pop("precision")
        return {"step": step, **out}

    plan = pp.PrecisionPlan("fp8-current", (pp.ProjectionVerdict("qkv", 1.3, 1.2, 1.4, True),
                                            pp.ProjectionVerdict("mlp_up", 0.7, 0.6, 0.8, False)))
    return {**plan.config(), "steps": [cell("all-bf16", 10.0), cell("all-fp8", 11.0), cell("plan", 9.0)]}


def test_a_plan_block_with_its_steps_validates() -> None:
    from gemm_bench.results.step_schema import validate_plan_block

    block = _plan_block()
    assert validate_plan_block(block) is block and block["keep_in_bf16"] == ["mlp_up"]


@pytest.mark.parametrize(("change", "problem"), [
    (lambda b: b.update(recipe="bf16"), "not a low-precision recipe"),
    (lambda b: b["fp8"].append("mlp_up"), "both in FP8 and kept in BF16"),
    (lambda b: b["steps"][1].update(step="mixed"), "must be one of"),
    (lambda b: b["steps"].append(dict(b["steps"][0])), "duplicate plan step"),
    (lambda b: b["steps"][2]["breakdown"].update(step_ms=1.0), "is not the cell's ms"),
    # the projections the typed plan reads (results.typed.PlanProjection): checked, not guessed
    (lambda b: b["projections"][0].pop("op"), r"projections\[0\]: must be an object with an op"),
    (lambda b: b["projections"][1].update(fp8="no"), r"projections\[1\]: must be an object"),
    (lambda b: b["projections"][0].update(speedup=-1.0), r"projections\[0\]\.speedup: must be a positive"),
    (lambda b: b["projections"][0].update(high=True), r"projections\[0\]\.high: must be a positive"),
    (lambda b: b.update(projections={}), r"projections: must be a list"),
    (lambda b: b.update(chosen=3), r"plan\.chosen: must be a string"),
])
def test_the_schema_rejects_a_broken_plan_block(change: Any, problem: str) -> None:
    from gemm_bench.results.step_schema import StepError, validate_plan_block

    block = _plan_block()
    change(block)
    with pytest.raises(StepError, match=problem):
        validate_plan_block(block)



@pytest.mark.parametrize("kind", ["all-bf16", "mixed", "all-fp8"])
@pytest.mark.parametrize("precision", ["fp8-delayed", "fp8-current", "fp8-block", "mxfp8", "nvfp4"])
def test_a_snippet_fits_a_phones_code_block(precision: str, kind: str) -> None:
    """Issue 35: the snippet's lines (46 and 70 characters) scrolled sideways on a phone; the site's
    code is written for 44 (gemm_benchmark.css). Every op's name fits, MLA's and MoE's too."""
    from gemm_bench.question.shapes import OP_NAMES

    fp8 = {"all-bf16": [], "mixed": ["qkv"], "all-fp8": list(OP_NAMES)}[kind]
    plan = pp.PrecisionPlan.from_block(PlanBlock(precision, tuple(fp8), tuple(op for op in OP_NAMES if op not in fp8),
                                                 None, "", None, (), ()))
    assert plan.kind == kind
    lines = plan.snippet().splitlines()
    assert lines and max(len(line) for line in lines) <= 44, plan.snippet()
