"""The layer step's pure parts: which configs it times, its cells, and Amdahl's law in the summary."""

from __future__ import annotations

import dataclasses
import json

import pytest

from gemm_bench.measure import step
from gemm_bench.measure.step import amdahl, layer_cell, summarize, unsupported_reason
from gemm_bench.question.config import preset
from gemm_bench.results.step_schema import StepError, validate_layer_cells
from gemm_bench.results.typed import LayerCell

STATS = {"median_ms": 1.0, "iqr_ms": 0.01}


def test_every_model_config_has_a_step_but_mla_with_sequence_parallelism() -> None:
    assert unsupported_reason(preset("te-guide-5b")) is None
    assert unsupported_reason(preset("llama3-8b")) is None
    moe = dataclasses.replace(preset("llama3-8b"), num_experts=8, moe_router_topk=2)
    assert unsupported_reason(moe) is None
    tp = dataclasses.replace(preset("llama3-70b"), tensor_model_parallel_size=8)
    assert unsupported_reason(tp) is None
    assert unsupported_reason(preset("deepseek-v3")) is None
    mla_sp = dataclasses.replace(preset("deepseek-v3"), tensor_model_parallel_size=2, sequence_parallel=True)
    assert unsupported_reason(mla_sp) == step.MLA_SP_REASON
    assert "manual shapes" in (unsupported_reason(None) or "")


def test_routing_splits_keep_the_gemm_tables_tokens() -> None:
    from gemm_bench.question.shapes import layer_gemms

    mixtral = preset("mixtral-8x7b").resolved()
    balanced = step.routing_splits(mixtral)
    up = next(g for g in layer_gemms(mixtral) if g.op == "mlp_up" and g.pass_ == "fprop")
    assert balanced == [up.m] * up.groups == [1024] * 8
    skewed = step.routing_splits(mixtral, "skewed")
    assert sum(skewed) == sum(balanced) and skewed == sorted(skewed, reverse=True)
    assert all(n % step.SPLIT_ALIGN == 0 for n in skewed)
    # Zipf: the second expert gets about half the first's share (before the remainder goes to the first)
    assert skewed[1] / skewed[3] == pytest.approx(2.0, rel=0.05)
    ep = dataclasses.replace(preset("deepseek-v3").resolved(), expert_model_parallel_size=64)
    assert step.routing_splits(ep) == [4096 * 8 * 64 // 256] * 4
    assert step.routings(ep) == ("balanced", "skewed") and step.routings(preset("llama3-8b")) == ("balanced",)
    with pytest.raises(ValueError, match="only a mixture of experts"):
        step.routing_splits(preset("llama3-8b"))


def test_collectives_and_what_is_left_out_are_stated() -> None:
    tp = dataclasses.replace(preset("llama3-70b").resolved(), tensor_model_parallel_size=8)
    (ar,) = step.collectives(tp)
    activation = 8192 * 8192 * 2  # tokens x hidden x BF16
    assert (ar.name, ar.count, ar.tensor_bytes, ar.sent_bytes) == ("all-reduce", 4, activation, activation * 2 * 7 // 8)
    assert step.collective_floor_ms(tp) == pytest.approx(4 * activation * 14 / 8 / 450e9 * 1e3)
    sp = dataclasses.replace(tp, sequence_parallel=True)
    assert sum(c.step_sent_bytes for c in step.collectives(sp)) == ar.step_sent_bytes  # AG + RS = AR
    assert any("1/8" in line for line in step.left_out(sp))
    assert step.collectives(preset("llama3-8b")) == [] and step.collective_floor_ms(preset("llama3-8b")) is None
    ep = dataclasses.replace(preset("deepseek-v3").resolved(), expert_model_parallel_size=64)
    (a2a,) = step.collectives(ep)
    assert a2a.name == "all-to-all" and a2a.sent_bytes == 4096 * 8 * 7168 * 2 * 63 // 64
    lines = step.left_out(ep)
    assert any("rotary" in line for line in lines) and any("fixed assignment" in line for line in lines)


def test_a_skewed_cell_is_its_own_cell_and_never_the_summary() -> None:
    cells = [
        layer_cell("layer", "bf16", "measured", ms=10.0, stats=STATS),
        layer_cell("layer", "bf16", "measured", ms=14.0, stats=STATS, routing="skewed"),
    ]
    assert "routing" not in cells[0] and cells[1]["routing"] == "skewed"
    validate_layer_cells(cells)
    assert summarize(_typed(cells), {"bf16": 5.0}).bf16_step_ms == 10.0
    with pytest.raises(StepError, match="routing"):
        validate_layer_cells([{**cells[1], "routing": "zipf"}])
    with pytest.raises(StepError, match="duplicate"):
        validate_layer_cells([cells[1], dict(cells[1])])


def test_amdahl_hand_computed() -> None:
    # 72% of the step gets 1.7x: 1 / (0.28 + 0.72 / 1.7) = 1 / 0.703529 = 1.42140
    assert amdahl(0.72, 1.7) == pytest.approx(1.42140, abs=1e-5)
    assert amdahl(1.0, 2.0) == pytest.approx(2.0)
    with pytest.raises(StepError, match="0 < share <= 1"):
        amdahl(1.2, 2.0)


def _typed(cells: list[dict]) -> list[LayerCell]:
    """The stored layer cells as the typed result holds them (what the report hands :func:`summarize`)."""
    return [LayerCell(status=c["status"], ms=c.get("ms"), stats=None, reason=c.get("reason", ""), mode=c["mode"],
                      precision=c["precision"], routing=c.get("routing", "balanced"), run_id="r") for c in cells]


def _cells() -> list[dict]:
    return [
        layer_cell("layer", "bf16", "measured", ms=10.0, stats=STATS, measured_at="t"),
        layer_cell("layer", "fp8-current", "measured", ms=7.0, stats=STATS, measured_at="t"),
        layer_cell("layer", "nvfp4", "unsupported", reason="needs Blackwell"),
        layer_cell("layer-graphed", "bf16", "measured", ms=9.0, stats=STATS, measured_at="t"),
    ]


def test_summary_states_amdahl_with_the_results_numbers() -> None:
    # BF16: step 10 ms, its 12 GEMMs 7.2 ms -> share 72%; FP8: GEMMs 4.235 ms -> 1.70x; step 7 ms -> 1.43x.
    summary = summarize(_typed(_cells()), {"bf16": 7.2, "fp8-current": 4.2353, "nvfp4": None})
    assert summary.gemm_share == pytest.approx(0.72)
    rows = {r.precision: r for r in summary.rows}
    assert rows["bf16"].step_speedup == pytest.approx(1.0)
    assert rows["fp8-current"].step_speedup == pytest.approx(10 / 7)
    assert rows["fp8-current"].gemm_speedup == pytest.approx(1.7, abs=1e-4)
    assert rows["fp8-current"].amdahl_speedup == pytest.approx(1.4214, abs=1e-3)
    assert rows["nvfp4"].step_ms is None and rows["nvfp4"].reason == "needs Blackwell"
    assert summary.sentence("fp8-current") == (
        "With FP8 Current, the layer's GEMMs get 1.70x and the whole step 1.43x, because GEMMs are "
        "72% of the BF16 step (Amdahl's law predicts 1.42x from those two numbers)."
    )
    assert summary.sentence("nvfp4") is None


def test_graphed_mode_is_summarized_apart() -> None:
    graphed = summarize(_typed(_cells()), {"bf16": 7.2}, mode="layer-graphed")
    assert [r.precision for r in graphed.rows] == ["bf16"]
    assert graphed.bf16_step_ms == 9.0
    with pytest.raises(StepError, match="'autocast'"):
        summarize(_typed(_cells()), {}, mode="autocast")


def test_no_bf16_step_means_no_share_and_no_sentence() -> None:
    cells = [c for c in _cells() if c["precision"] != "bf16"]
    summary = summarize(_typed(cells), {"bf16": 7.2, "fp8-current": 4.0})
    assert summary.gemm_share is None
    assert summary.sentence("fp8-current") is None


def test_gemms_timed_apart_may_exceed_the_step_and_amdahl_is_then_withheld() -> None:
    summary = summarize(_typed(_cells()), {"bf16": 12.0, "fp8-current": 6.0})
    assert summary.gemm_share == pytest.approx(1.2)
    assert {r.precision: r.amdahl_speedup for r in summary.rows}["fp8-current"] is None


def test_layer_cells_validate() -> None:
    cells = json.loads(json.dumps(_cells()))
    assert validate_layer_cells(cells) == cells


@pytest.mark.parametrize(
    ("edit", "where", "problem"),
    [
        (lambda c: c.update(mode="autocast"), "$.layer[0].mode", "'autocast' is not one of layer, layer-graphed"),
        (lambda c: c.update(precision="fp16"), "$.layer[0].precision", "not a known precision"),
        (lambda c: c.update(status="ok"), "$.layer[0].status", "'ok'"),
        (lambda c: c.update(ms=0), "$.layer[0].ms", "positive finite"),
        (lambda c: c.update(ms=True), "$.layer[0].ms", "positive finite"),
        (lambda c: c.update(stats={}), "$.layer[0].stats", "median_ms"),
        (lambda c: c.pop("precision"), "$.layer[0].precision", "is missing"),
        (lambda c: c.update(run_id=7), "$.layer[0].run_id", "must be a string"),
    ],
)
def test_layer_validation_names_the_field(edit, where: str, problem: str) -> None:  # type: ignore[no-untyped-def]
    cells = _cells()
    edit(cells[0])
    with pytest.raises(StepError) as info:
        validate_layer_cells(cells)
    assert info.value.where == where and problem in info.value.problem


def test_layer_validation_rejects_duplicates_and_missing_reasons() -> None:
    with pytest.raises(StepError, match="duplicate layer cell layer/bf16"):
        validate_layer_cells([*_cells(), _cells()[0]])
    unsupported = _cells()[2]
    del unsupported["reason"]
    with pytest.raises(StepError, match="reason"):
        validate_layer_cells([unsupported])
    with pytest.raises(StepError, match="must be a list"):
        validate_layer_cells(None)


def test_what_is_timed_names_inclusions_and_exclusions() -> None:
    assert "forward + backward" in step.WHAT_IS_TIMED and "Excluded: optimizer step" in step.WHAT_IS_TIMED


def test_step_imports_without_torch() -> None:
    import subprocess
    import sys

    code = ("import sys, gemm_bench.measure.step\n"
            "bad = [m for m in sys.modules if m.split('.')[0] in ('torch', 'numpy', 'transformer_engine')]\n"
            "assert not bad, bad\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr


def test_the_skewed_routing_step_is_read_and_a_dense_layer_has_none() -> None:
    """Report.step(routing="skewed") reads the stored skewed cells of a mixture of experts (never the
    balanced ones), and says a dense layer has no experts to route to."""
    from gemm_bench.report.report import Report
    from tests.site_build import read_cache_file

    moe = read_cache_file("19210ed9493a1e7a--h100-80gb-hbm3.json")  # gpt-oss-120b: both routings stored
    report = Report(moe, modes=["autocast", "layer", "layer-graphed"])
    stored = {(c["precision"], c.get("routing", "balanced")): c["ms"] for c in moe["layer"]
              if c["mode"] == "layer-graphed" and c["status"] == "measured"}
    for routing in ("balanced", "skewed"):
        got = report.step("fp8-current", graphed=True, routing=routing)
        assert got.step_ms == stored[("fp8-current", routing)]
        assert got.speedup_vs_bf16 == pytest.approx(stored[("bf16", routing)] / stored[("fp8-current", routing)])
    assert stored[("fp8-current", "skewed")] != stored[("fp8-current", "balanced")]
    assert report.step("fp8-current", graphed=True, routing="skewed").gemm_share is None
    dense = Report(read_cache_file("45a55c5d892e31af--h100-80gb-hbm3.json"), modes=["autocast", "layer-graphed"])
    skewed = dense.step("fp8-current", graphed=True, routing="skewed")
    assert skewed.status == "unsupported" and "no experts" in skewed.reason
    with pytest.raises(ValueError, match="unknown routing"):
        dense.step("fp8-current", routing="zipf")
