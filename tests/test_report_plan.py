"""Report arithmetic (totals, per-pass sums, speedups) and the measurement plan."""

from __future__ import annotations

import pytest

from gemm_bench.question.plan import Support, make_plan
from gemm_bench.question.precisions import PRECISIONS
from gemm_bench.question.question import build_question
from gemm_bench.report.report import Report
from gemm_bench.results.cache import Cache
from tests.helpers import synthetic_document

Q = build_question(model="te-guide-5b")
GFLOP_PER_LAYER = sum(g.flops for g in Q.gemms) / 1e12  # in TFLOP: ms = rate x TFLOP


def test_totals_and_speedups_follow_from_the_cells() -> None:
    doc = synthetic_document(Q, unsupported={"mxfp8": "needs sm_100"})
    report = Report(doc)
    bf16 = report.total("autocast", "bf16")
    fp8 = report.total("autocast", "fp8-current")
    assert bf16.per_layer_ms is not None
    assert bf16.per_layer_ms == pytest.approx(2.0 * GFLOP_PER_LAYER, rel=1e-5)
    assert bf16.model_ms == pytest.approx(bf16.per_layer_ms * 24)
    assert fp8.speedup_vs_bf16 == pytest.approx(2.0, rel=1e-4)
    assert bf16.speedup_vs_bf16 == 1.0
    assert sum(v or 0.0 for v in bf16.pass_ms.values()) == pytest.approx(bf16.per_layer_ms)
    mx = report.total("autocast", "mxfp8")
    assert (mx.status, mx.reason, mx.per_layer_ms, mx.speedup_vs_bf16) == ("unsupported", "needs sm_100", None, None)
    cell = report.cell("prequant", "bf16", Q.gemms[0])
    assert cell.tflops == pytest.approx(1 / 1.5 * 1e3, rel=1e-4)  # 1.5 ms per TFLOP -> 666.7 TFLOP/s
    assert report.gemm_speedup("prequant", "fp8-current", Q.gemms[0]) == pytest.approx(2.0, rel=1e-4)
    assert Report(doc, num_layers=2).total("autocast", "bf16").model_ms == pytest.approx(2 * bf16.per_layer_ms)


def test_a_failed_gemm_poisons_totals_but_not_other_cells() -> None:
    doc = synthetic_document(Q, failed={("autocast", "fp8-current", "mlp_up", "wgrad"): "CUDA out of memory"})
    report = Report(doc)
    total = report.total("autocast", "fp8-current")
    assert total.status == "failed" and total.per_layer_ms is None and "out of memory" in total.reason
    assert total.pass_ms["fprop"] is not None and total.pass_ms["wgrad"] is None
    assert report.total("autocast", "bf16").status == "measured"


def test_missing_cells_are_listed_for_requested_precisions() -> None:
    doc = synthetic_document(Q, ms={("autocast", "bf16"): 1.0})
    report = Report(doc, modes=["autocast"], precisions=["bf16", "fp8-block"])
    assert len(report.missing_cells()) == 12
    assert report.total("autocast", "fp8-block").status == "missing"


def test_json_report_has_the_contract_keys() -> None:
    out = Report(synthetic_document(Q)).to_json()
    assert set(out["device"]) == {"name", "compute_capability"}
    assert {"torch", "transformer_engine", "cuda", "driver", "date", "method"} <= set(out["provenance"])
    cell_keys = {"mode", "precision", "op", "pass", "m", "k", "n", "groups", "status", "ms", "tflops", "reason"}
    assert all(cell_keys <= set(c) for c in out["cells"])
    assert all({"mode", "precision", "per_layer_ms", "model_ms", "speedup_vs_bf16"} <= set(t) for t in out["totals"])


def test_real_cache_reports_are_consistent() -> None:
    from pathlib import Path

    for path in Cache(Path(__file__).parent.parent / "docs" / "_gemm_cache").files():
        from gemm_bench.results.cache import read_document

        report = Report(read_document(path))
        for total in report.totals():
            if total.status != "measured":
                assert total.reason
                continue
            cells = report.cells(total.mode, total.precision)
            assert total.per_layer_ms == pytest.approx(sum(c.ms for c in cells))
        text = report.to_text()
        assert "vs BF16" in text


def test_plan_filters_by_support_and_mode() -> None:
    support = {"mxfp8": Support(False, "Device compute capability 10.0 or higher required for MXFP8 execution.")}
    plan = make_plan(Q.gemms, ["fp8-delayed", "mxfp8"], ["autocast", "prequant"], support)
    measured = {(c.mode, c.precision) for c in plan.to_measure}
    # BF16 joins every plan: it is the baseline of every speedup.
    assert measured == {("autocast", "bf16"), ("prequant", "bf16"), ("autocast", "fp8-delayed")}
    reasons = {(c.mode, c.precision): r for c, r in plan.unsupported}
    assert reasons[("prequant", "fp8-delayed")] == PRECISIONS["fp8-delayed"].absent_modes["prequant"]
    assert "10.0" in reasons[("autocast", "mxfp8")]
    assert len(plan.to_measure) + len(plan.unsupported) == 2 * 3 * 12  # modes x precisions x GEMMs
    assert [len(cells) for _, cells in plan.rounds()] == [3] * 12
