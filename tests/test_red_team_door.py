"""Issue 43, hostile inputs: schema-valid documents that no GPU could have produced, put through the door
(:func:`gemm_bench.results.cache.read_document`) and the report. Each test here failed before the fix it
names (its commit says how that was checked)."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest

from gemm_bench.cli.commands import main
from gemm_bench.results.cache import read_document
from gemm_bench.results.invariants import REFUSED
from gemm_bench.results.schema import validate
from gemm_bench.results.typed import parse

CACHE = Path(__file__).resolve().parents[1] / "docs" / "_gemm_cache"
LLAMA_8B_H100 = CACHE / "45a55c5d892e31af--h100-80gb-hbm3.json"


def _stored() -> dict[str, Any]:
    return json.loads(LLAMA_8B_H100.read_text(encoding="utf-8"))


def _write(tmp_path: Path, doc: dict[str, Any]) -> Path:
    validate(copy.deepcopy(doc))  # schema-valid: only the door's invariants can refuse it
    path = tmp_path / LLAMA_8B_H100.name
    path.write_text(json.dumps(doc), encoding="utf-8")
    return path


def _as(entry: dict[str, Any], precision: str) -> dict[str, Any]:
    out = copy.deepcopy(entry)
    out["precision"] = precision
    return out


def test_a_recipe_measured_where_te_says_it_is_unsupported_is_refused(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The H100's support verdict says MXFP8 needs compute capability 10.0; a layer step, a model step's
    part and an energy entry "measured" in MXFP8 there were shown as valid (``MXFP8 step 20.492 ms 1.00x
    vs BF16`` in ``gemm-bench report``): now each is failed, its reason TE's verdict."""
    doc = _stored()
    assert doc["support"]["mxfp8"]["available"] is False
    bf16_layer = next(c for c in doc["layer"] if (c["mode"], c["precision"]) == ("layer", "bf16"))
    doc["layer"].append(_as(bf16_layer, "mxfp8"))
    parts = doc["model_step"]["parts"]
    parts.extend(_as(p, "mxfp8") for p in list(parts)
                 if p["precision"] == "bf16" and p["part"] in ("layer-first", "layer-cached"))
    doc["energy"]["steps"].append(_as(doc["energy"]["steps"][0], "mxfp8"))
    path = _write(tmp_path, doc)

    result = parse(read_document(path))
    refused = [v for v in result.violations if v.precision == "mxfp8"]
    assert {v.block for v in refused} == {"layer", "model_step", "energy"}
    assert all("compute capability 10.0" in v.problem for v in refused)
    layer = next(c for c in result.layer if (c.mode, c.precision) == ("layer", "mxfp8"))
    assert layer.status == "failed" and layer.reason.startswith(REFUSED)
    assert "mxfp8" not in result.energies()
    assert not any(p.precision == "mxfp8" and p.measured for p in result.model_step.parts)  # type: ignore[union-attr]

    assert main(["report", str(path)]) == 0
    out = capsys.readouterr().out
    assert "MXFP8        step    20.492 ms" not in out


@pytest.mark.parametrize(("change", "words"), [
    # the plan runs qkv in FP8 although its stored speedup is 0.5x (0.4-0.6x): the page said "every projection
    # in FP8 is clearly faster" beside a 0.5x in the JSON report
    ({"speedup": 0.5, "low": 0.4, "high": 0.6}, "the plan runs 'qkv' in FP8 although its stored speedup 0.5x"),
    ({"speedup": 1.02, "low": 0.97, "high": 1.08}, "is not clearly faster"),           # a tie kept in FP8
    ({"op": "router"}, "the plan's projection 'router' is not a GEMM of this question"),
])
def test_a_plan_that_contradicts_its_own_numbers_is_not_shown(tmp_path: Path, change: dict[str, Any],
                                                              words: str, capsys: pytest.CaptureFixture[str]) -> None:
    doc = _stored()
    doc["plan"]["projections"][0].update(change)
    path = _write(tmp_path, doc)
    got = read_document(path)
    assert "plan" not in got
    plan = [v for v in got.violations if v.block == "plan"]  # (the file's short groups' power is refused too)
    assert [v.where for v in plan] == ["$.plan.projections[0]"] and words in plan[0].problem
    assert parse(got).plan is None
    assert main(["report", str(path)]) == 0
    assert "every projection" not in capsys.readouterr().out


def test_a_projection_clearly_faster_but_kept_in_bf16_is_not_shown(tmp_path: Path) -> None:
    doc = _stored()
    doc["plan"]["fp8"].remove("qkv")
    doc["plan"]["keep_in_bf16"].append("qkv")
    doc["plan"]["projections"][0]["fp8"] = False
    doc["plan"]["kind"] = "mixed"
    got = read_document(_write(tmp_path, doc))
    assert "plan" not in got and any("keeps 'qkv' in BF16" in v.problem for v in got.violations if v.block == "plan")


@pytest.mark.parametrize(("factor", "refused"), [(10.0, True), (0.45, True), (1.5, False), (0.9, False)])
def test_a_cached_layer_part_far_from_its_first_is_failed(tmp_path: Path, factor: float, refused: bool) -> None:
    """Red team: FP8 Delayed's cached part at 10x its first was shown as a 0.17x model-step row. The committed
    results hold 0.91-1.50x (a BF16 mixture of experts' cached part reads its FP32 main gradients back)."""
    doc = _stored()
    parts = doc["model_step"]["parts"]
    first = next(p for p in parts if (p["part"], p["precision"]) == ("layer-first", "fp8-delayed"))
    cached = next(p for p in parts if (p["part"], p["precision"]) == ("layer-cached", "fp8-delayed"))
    cached["ms"] = round(first["ms"] * factor, 6)
    cached["stats"] = {"median_ms": cached["ms"], "iqr_ms": 0.0}
    for key in ("breakdown", "kernel_ms", "kernel_ratio"):
        cached.pop(key, None)
    got = read_document(_write(tmp_path, doc))
    after = next(p for p in got["model_step"]["parts"]
                 if (p["part"], p["precision"]) == ("layer-cached", "fp8-delayed"))
    assert (after["status"] == "failed") is refused
    if refused:
        assert "cached layer part takes" in after["reason"] and after["reason"].startswith(REFUSED)
        step = parse(got).model_step
        part = step.part("layer-cached", "fp8-delayed") if step is not None else None
        assert part is None or not part.measured
