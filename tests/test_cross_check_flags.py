"""Issue 31, item 3: a number resting on a time the profiler cross-check flags carries its mark,
with the ratio in its detail, in every table and figure that shows it; a file whose median breaks
the bound says so on its page; a graphed step is a region like any other."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from gemm_bench.report import figures
from gemm_bench.report.report import Report
from gemm_bench.results import cross_check
from tests.conftest import H100, make_document


def _with_ratio(doc: dict[str, Any], ratio: float, *, precision: str | None = None,
                op: str | None = None) -> dict[str, Any]:
    """Every measured cell (of ``precision`` / ``op`` when given) profiled at ``ratio`` (kernel time
    = published time / ratio, the same launches), every other measured cell at 1.00."""
    for cell in doc["cells"]:
        if cell["status"] != "measured":
            continue
        mine = (precision in (None, cell["precision"])) and (op in (None, cell["op"]))
        r = ratio if mine else 1.0
        cell["kernel_ms"] = round(cell["ms"] / r, 6)
        cell["kernel_ratio"] = r
    return doc


def _table(report: Report, mode: str, precisions: list[str], which: str = "gemm") -> tuple[str, list[list[Any]]]:
    from gemm_benchmark import render_table

    node = (render_table.gemm_table if which == "gemm" else render_table.totals_table)(report, mode, precisions)
    data = node["table"]
    return data.title, [list(row) for row in data.body_rows]


def test_a_graphed_step_with_a_judged_ratio_of_1_60_is_flagged() -> None:
    """Issue 31: a graphed step judged 1.60 drove "train in FP8 Delayed" with no mark. The step's
    result carries the flag (and so does every step whose speedup divides by a flagged BF16 step)."""
    from tests.fake_beyond import beyond_document

    doc = beyond_document()
    for cell in doc["layer"]:
        if cell["mode"] == "layer-graphed" and cell["status"] == "measured":
            r = 1.6 if cell["precision"] == "fp8-current" else 1.01
            cell.update(kernel_ms=round(cell["ms"] / r, 6), kernel_ratio=r)
    report = Report(doc, modes=["autocast", "layer", "layer-graphed"])
    flagged = report.step("fp8-current", graphed=True)
    assert flagged.cross_check_flag is not None and "FP8 Current step: timed 1.60x" in flagged.cross_check_flag
    assert report.step("fp8-block", graphed=True).cross_check_flag is None
    assert report.step("fp8-current").cross_check_flag is None  # the eager step stores no kernel time
    for cell in doc["layer"]:  # now the BF16 step every speedup divides by
        if cell["mode"] == "layer-graphed" and cell.get("kernel_ms"):
            r = 1.6 if cell["precision"] == "bf16" else 1.01
            cell.update(kernel_ms=round(cell["ms"] / r, 6), kernel_ratio=r)
    step = Report(doc, modes=["autocast", "layer-graphed"]).step("fp8-block", graphed=True)
    assert step.cross_check_flag is not None and step.cross_check_flag.startswith("BF16 step: timed 1.60x")


def test_tables_mark_every_number_resting_on_a_flagged_time(question: Any) -> None:
    """The time, the speedups that divide by it, the pass sum and the totals, each with the flag in
    its detail: before, only the time itself carried the mark, and its speedup read plainly."""
    from gemm_benchmark.render_table import FLAG_MARK

    q = question(model="te-guide-5b")
    doc = _with_ratio(make_document(q, precisions=("bf16", "fp8-current"), modes=("autocast",)), 1.3,
                      precision="bf16", op="qkv")
    report = Report(doc)
    title, rows = _table(report, "autocast", ["bf16", "fp8-current"])
    assert FLAG_MARK in title and "20%" in title
    qkv = next(r for r in rows if r[1].text == "QKV projection")
    bf16_ms, fp8_ms, fp8_x = qkv[3], qkv[4], qkv[5]
    assert bf16_ms.text.endswith(FLAG_MARK) and "timed 1.30x" in bf16_ms.tooltip
    assert not fp8_ms.text.endswith(FLAG_MARK) and "profiled: events 1.00x kernel time" in fp8_ms.tooltip
    assert fp8_x.text.endswith(FLAG_MARK) and "BF16 qkv/fprop: timed 1.30x" in fp8_x.tooltip
    other = next(r for r in rows if r[1].text == "MLP down")
    assert not any(e.text.endswith(FLAG_MARK) for e in other)
    sums = next(r for r in rows if r[1].text == "sum" and r[0].text == "Fprop")
    assert [e.text.endswith(FLAG_MARK) for e in sums[3:6]] == [True, False, True]
    title, rows = _table(report, "autocast", ["bf16", "fp8-current"], "totals")
    assert FLAG_MARK in title
    by_name = {r[0].text: r for r in rows}
    assert by_name["BF16"][1].text.endswith(FLAG_MARK) and by_name["FP8 Current"][3].text.endswith(FLAG_MARK)
    assert not by_name["FP8 Current"][1].text.endswith(FLAG_MARK)  # its own times hold


def test_a_short_region_is_shown_with_its_ratio_not_flagged(question: Any) -> None:
    q = question(shapes=["256x256x256"])
    doc = _with_ratio(make_document(q, precisions=("bf16", "fp8-current"), modes=("prequant",)), 1.6)
    report = Report(doc)
    assert all(c.cross_check_flag is None for c in report.cells("prequant", "bf16"))
    title, rows = _table(report, "prequant", ["bf16", "fp8-current"])
    assert "†" not in title and "profiled: events 1.60x kernel time" in rows[0][2].tooltip
    assert "shown, not judged" in rows[0][2].tooltip


def test_the_figure_marks_the_category_and_says_the_ratio(question: Any) -> None:
    q = question(model="te-guide-5b")
    doc = _with_ratio(make_document(q, precisions=("bf16", "fp8-current"), modes=("autocast",)), 1.45,
                      precision="fp8-current", op="qkv")
    spec = figures.build_spec(Report(doc), "autocast")
    categories = spec.panels[0].categories
    assert categories[0].endswith(" †")  # the whole model rests on the flagged QKV times
    assert [c for c in categories[1:] if c.endswith(" †")] == ["QKV projection · Fprop †", "QKV projection · Dgrad †",
                                                                "QKV projection · Wgrad †"]
    assert "†: rests on a time up to 1.45× its profiled kernel time (cross-check bound 1.2)" in spec.value_label
    plain = figures.build_spec(Report(_with_ratio(make_document(q, precisions=("bf16", "fp8-current"),
                                                                modes=("autocast",)), 1.02)), "autocast")
    assert "†" not in " ".join(plain.panels[0].categories) + plain.value_label
    summary = figures.summary_spec([("H100", Report(doc))], ["autocast"])
    assert summary is not None and summary.panels[0].categories == ("H100 †",) and "1.45×" in summary.value_label


def test_a_file_whose_every_region_reads_1_12_says_so_on_its_page(tmp_path: Path) -> None:
    """Issue 31: such a file showed nothing anywhere. No number breaks 1.20, so none is marked; the
    file's median breaks 1.05, so its page says so, whatever ``:show:`` hides."""
    from gemm_bench.question.question import build_question
    from tests.test_correctness import Project

    project = Project(tmp_path)
    q = build_question(shapes=["8192x8192x8192"])
    project.store(_with_ratio(make_document(q, device=H100, precisions=("bf16", "fp8-current")), 1.12))
    project.page("index", "T\n=\n\n.. gemm-benchmark::\n   :name: sq\n   :shapes: 8192x8192x8192\n"
                 "   :precisions: bf16, fp8-current\n   :modes: autocast\n   :show: table\n")
    warnings, _ = project.build()
    assert "WARNING" not in warnings, warnings
    soup = project.html()
    notes = [p.get_text() for p in soup.select("p.gemm-note.gemm-flagged")]
    assert len(notes) == 1 and "1.120x their kernel time at the median (bound 1.05" in notes[0], notes
    assert "†" not in soup.select_one("table.gemm-gemms").get_text()


def test_a_failed_sqnr_reads_failed_in_the_totals(question: Any) -> None:
    """Failed is failed: the totals table's SQNR of a failed accuracy cell read "n/a"."""
    from tests.fake_beyond import beyond_document

    doc = beyond_document(modes=("autocast",))
    for cell in doc["accuracy"]:
        if cell["precision"] == "fp8-current" and cell["status"] == "measured":
            cell.pop("sqnr_db")
            cell.update(status="failed", reason="CUDA out of memory (synthetic)")
    report = Report(doc, modes=["autocast"])
    assert report.sqnr_status("autocast", "fp8-current") == "failed"
    assert report.sqnr_status("autocast", "bf16") == "measured"
    _, rows = _table(report, "autocast", ["bf16", "fp8-current"], "totals")
    sqnr = {r[0].text: r[-1] for r in rows}["FP8 Current"]
    assert sqnr.text == "failed" and "failed: CUDA out of memory" in sqnr.tooltip


@pytest.mark.parametrize("ratio", [1.19, 1.21])
def test_a_region_of_50_us_or_more_is_judged_at_1_20(question: Any, ratio: float) -> None:
    q = question(shapes=["8192x8192x8192"])
    doc = _with_ratio(make_document(q, precisions=("bf16",), modes=("prequant",)), ratio)
    cell = Report(doc).cells("prequant", "bf16")[0]
    assert (cell.cross_check_flag is not None) is (ratio > 1.20)  # the decided bound, not the module's
    assert cross_check.REGION_MAX == 1.20


def test_a_failed_baseline_reads_failed_in_the_figures(question: Any) -> None:
    """Failed is failed: a device whose BF16 GEMMs failed drew "n/a" (the speedup's reason said
    "BF16 GEMMs is failed: ...", which the figure's mark did not read as failed)."""
    from gemm_bench.report.figure_spec import missing_mark

    q = question(model="te-guide-5b")
    doc = make_document(q, precisions=("bf16", "fp8-current"), modes=("autocast",),
                        failed={("autocast", "bf16"): "CUDA error: an illegal memory access"})
    report = Report(doc)
    assert figures.total_reason(report, "autocast", "fp8-current") == \
        "failed: BF16: CUDA error: an illegal memory access"
    assert missing_mark(figures.gemm_reason(report, "autocast", "fp8-current", report.gemms[0])) == "failed"
    healthy = Report(make_document(q, precisions=("bf16", "fp8-current"), modes=("autocast",)))
    spec = figures.summary_spec([("H100", report), ("H200", healthy)], ["autocast"])
    assert spec is not None
    [series] = spec.panels[0].series
    assert series.values[0] is None and missing_mark(series.missing_reason(0)) == "failed"


def test_a_speedup_missing_because_bf16_failed_says_so_in_the_table(question: Any) -> None:
    """The directive's table showed a bare "–" where BF16 failed; its detail now says why."""
    q = question(model="te-guide-5b")
    doc = make_document(q, precisions=("bf16", "fp8-current"), modes=("autocast",),
                        failed={("autocast", "bf16"): "CUDA error: an illegal memory access"})
    report = Report(doc)
    _, rows = _table(report, "autocast", ["fp8-current"])
    assert rows[0][4].text == "–" and "is failed: CUDA error: an illegal memory access" in rows[0][4].tooltip
    _, rows = _table(report, "autocast", ["fp8-current"], "totals")
    assert rows[0][3].text == "–" and "is failed: CUDA error" in rows[0][3].tooltip
