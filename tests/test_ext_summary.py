"""The summary directive and the decision roles: the answer first, computed from the cache."""

from __future__ import annotations

from pathlib import Path

import pytest

from gemm_bench.question.precisions import PRECISIONS
from gemm_bench.question.question import build_question
from gemm_bench.report.report import Report
from gemm_benchmark.values import format_ms, format_speedup

from .conftest import H100, H200, make_document
from .test_correctness import Project


@pytest.fixture
def project(tmp_path: Path) -> Project:
    return Project(tmp_path)


def test_summary_rows_equal_the_reports_and_mark_the_fastest(project: Project) -> None:
    q = build_question(model="te-guide-5b")
    docs = {H100["name"]: make_document(q, device=H100, precisions=("bf16", "fp8-delayed", "fp8-current")),
            H200["name"]: make_document(q, device=H200, precisions=("bf16", "fp8-delayed", "fp8-current"), speed=1.3)}
    for doc in docs.values():
        project.store(doc)
    project.page("index", "T\n=\n\n.. gemm-benchmark-summary::\n   :models: te-guide-5b\n"
                 "   :precisions: bf16, fp8-delayed, fp8-current\n   :devices: h100, h200\n   :show: table\n\n"
                 ".. gemm-benchmark::\n   :name: te\n   :model: te-guide-5b\n   :precisions: bf16, fp8-delayed, "
                 "fp8-current\n   :devices: h100, h200\n\n"
                 "Fastest: :gemm-fastest:`te@h100 autocast` at :gemm-speedup:`te@h100 autocast fastest`.\n")
    warnings, _ = project.build()
    assert "WARNING" not in warnings, warnings
    soup = project.html()
    rows = soup.select("table.gemm-summary-table tbody tr")
    assert len(rows) == 4  # 2 devices x 2 modes
    for row in rows:
        head = row.td.get_text()
        device = H100["name"] if "H100" in head else H200["name"]
        mode = "autocast" if "autocast" in head else "prequant"
        report = Report(docs[device], gemms=list(q.gemms), num_layers=q.num_layers, kind=q.kind)
        cells = row.select("td")[1:]
        speeds = {}
        for precision, cell in zip(("fp8-delayed", "fp8-current"), cells, strict=True):
            total = report.total(mode, precision)
            if total.speedup_vs_bf16:
                speeds[precision] = total.speedup_vs_bf16
                assert cell.get_text().startswith(format_speedup(total.speedup_vs_bf16))
            else:
                # unsupported / failed with the reason (shortened; whole on hover), never one "n/a" for both
                status = total.status
                assert cell.get_text().startswith(f"{status}: ") and status in cell.abbr["title"]
        fastest = max(speeds, key=lambda p: speeds[p])
        marked = [c for c in cells if "gemm-fastest" in c.get("class", [])]
        assert len(marked) == 1 and marked[0].get_text().endswith("★")
        assert marked[0] is cells[("fp8-delayed", "fp8-current").index(fastest)]
    report = Report(docs[H100["name"]], gemms=list(q.gemms), num_layers=q.num_layers, kind=q.kind)
    best = max(("fp8-delayed", "fp8-current"), key=lambda p: report.total("autocast", p).speedup_vs_bf16 or 0)
    values = [a.get_text() for a in soup.select("p abbr.gemm-value")]
    assert values == [PRECISIONS[best].display, format_speedup(report.total("autocast", best).speedup_vs_bf16)]


def test_summary_names_unmeasured_models_with_their_command(project: Project) -> None:
    q = build_question(model="llama3-8b")
    project.store(make_document(q, device=H100, precisions=("bf16", "fp8-current")))
    project.page("index", "T\n=\n\n.. gemm-benchmark-summary::\n   :models: llama3-8b, qwen2.5-72b/tp8\n"
                 "   :precisions: bf16, fp8-current\n   :missing: note\n")
    warnings, _ = project.build()
    assert "WARNING" not in warnings, warnings
    text = project.html().select_one("table.gemm-summary-table").get_text()
    assert "gemm-bench run --model qwen2.5-72b --tensor-model-parallel-size 8" in text
    assert "Llama 3 8B" in text and "Qwen2.5 72B (TP 8)" in text


def test_summary_bad_option_is_a_located_warning(project: Project) -> None:
    project.page("index", "T\n=\n\n.. gemm-benchmark-summary::\n   :models: no-such-model\n")
    warnings, _ = project.build()
    assert "index.rst:4" in warnings and "no-such-model" in warnings and "[gemm_benchmark.config]" in warnings


def test_a_speedup_within_the_fastests_spread_is_marked_not_significant(project: Project) -> None:
    q = build_question(model="te-guide-5b")
    doc = make_document(q, device=H100, precisions=("bf16", "fp8-delayed", "fp8-current"), modes=("autocast",))
    by_key = {(c["precision"], c["op"], c["pass"]): c for c in doc["cells"]}
    for cell in doc["cells"]:
        if cell["precision"] == "fp8-current":  # 1% slower than delayed scaling, with a 10% spread
            other = by_key[("fp8-delayed", cell["op"], cell["pass"])]
            cell["ms"] = round(other["ms"] * 1.01, 6)
            cell["stats"] = {"median_ms": cell["ms"], "iqr_ms": round(cell["ms"] * 0.1, 6)}
    project.store(doc)
    project.page("index", "T\n=\n\n.. gemm-benchmark-summary::\n   :models: te-guide-5b\n"
                 "   :precisions: bf16, fp8-delayed, fp8-current\n   :modes: autocast\n   :show: table\n")
    warnings, _ = project.build()
    assert "WARNING" not in warnings, warnings
    cells = project.html().select("table.gemm-summary-table tbody tr td")[1:]
    assert cells[0].get_text().endswith("★") and cells[1].get_text().endswith("≈")
    assert "not significantly slower" in cells[1].abbr["title"]


def _stored_beyond(project: Project) -> Report:
    """A synthetic te-guide-5b result with a layer step and SQNRs, stored in the project; its Report."""
    from tests.fake_beyond import beyond_document

    doc = beyond_document()
    project.store(doc)
    q = build_question(model="te-guide-5b")
    return Report(doc, gemms=list(q.gemms), num_layers=q.num_layers, kind=q.kind)


def test_step_share_sqnr_and_peak_roles_quote_the_report(project: Project) -> None:
    """Issue 11's quantities through the roles, from a synthetic document with a layer step and SQNRs."""
    report = _stored_beyond(project)
    project.page("index", "T\n=\n\n.. gemm-benchmark::\n   :name: te\n   :model: te-guide-5b\n"
                 "   :precisions: bf16, fp8-current\n\n"
                 ":gemm-step-speedup:`te layer fp8-current` :gemm-share:`te layer bf16` "
                 ":gemm-sqnr:`te autocast fp8-current` :gemm-peak:`te prequant fp8-current mlp_up/fprop`\n")
    warnings, _ = project.build()
    assert "WARNING" not in warnings, warnings
    values = [a.get_text() for a in project.html().select("p abbr.gemm-value")]
    step = report.step("fp8-current")
    share = report.step("bf16").gemm_share
    sqnr = report.sqnr("autocast", "fp8-current")
    gemm = report.find_gemm("mlp_up/fprop")
    pct = report.pct_of_peak("prequant", "fp8-current", gemm)
    assert step.speedup_vs_bf16 and share and sqnr is not None and pct
    assert values == [format_speedup(step.speedup_vs_bf16), f"{share * 100:.0f}%", f"{sqnr:.1f} dB", f"{pct:.0f}%"]


def test_v1_results_say_why_there_is_no_step_or_sqnr(project: Project) -> None:
    q = build_question(model="te-guide-5b")
    project.store(make_document(q, device=H100, precisions=("bf16", "fp8-current")))
    project.page("index", "T\n=\n\n.. gemm-benchmark::\n   :name: te\n   :model: te-guide-5b\n"
                 "   :precisions: bf16, fp8-current\n\n:gemm-step-speedup:`te layer fp8-current`\n")
    warnings, _ = project.build()
    missing = project.html().select_one("p abbr.gemm-value-error")
    assert missing.get_text() == "n/a" and "not measured" in missing["title"]
    assert "[gemm_benchmark.role]" in warnings  # a number the page asks for that the data lack


def test_summary_adds_step_and_sqnr_rows_when_measured(project: Project) -> None:
    report = _stored_beyond(project)
    project.page("index", "T\n=\n\n.. gemm-benchmark-summary::\n   :models: te-guide-5b\n"
                 "   :precisions: bf16, fp8-current\n   :show: table\n")
    warnings, _ = project.build()
    assert "WARNING" not in warnings, warnings
    rows = {r.td.get_text(): [c.get_text() for c in r.select("td")[1:]]
            for r in project.html().select("table.gemm-summary-table tbody tr")}
    step = next(v for k, v in rows.items() if "training step" in k)
    sqnr = next(v for k, v in rows.items() if "SQNR" in k)
    assert step == [format_speedup(report.step("fp8-current").speedup_vs_bf16) + " ★"]  # the only one: fastest
    assert sqnr == [f"{report.sqnr('autocast', 'fp8-current'):.1f}"]
    assert "Not in these results yet" not in project.html().get_text()


def test_peers_have_their_own_table_never_in_te_totals(project: Project) -> None:
    source = Path(__file__).parent.parent / "docs" / "_gemm_cache" / "2160d33ec54a347e--h100-80gb-hbm3.json"
    doc = __import__("json").loads(source.read_text(encoding="utf-8"))
    project.store(doc)
    project.page("index", "T\n=\n\n.. gemm-benchmark::\n   :name: te\n   :model: te-guide-5b\n"
                 "   :precisions: bf16, fp8-current\n")
    warnings, _ = project.build()
    assert "WARNING" not in warnings, warnings
    soup = project.html()
    q = build_question(model="te-guide-5b")
    report = Report(doc, gemms=list(q.gemms), num_layers=q.num_layers, kind=q.kind)
    peers = [r for r in report.peers() if r.kind == "gemm"]
    backends = list(dict.fromkeys(r.backend for r in peers))
    # One peers table per mode the result has peers in; the pre-quantized one holds the GEMM peers.
    tables = soup.select("table.gemm-peers")
    heads = [[th.get_text() for th in t.select("thead th")][2:] for t in tables]
    assert heads.count([f"{b}: ms · TFLOP/s" for b in backends]) == 1
    table = tables[heads.index([f"{b}: ms · TFLOP/s" for b in backends])]
    first = table.select("tbody tr")[0].select("td")[2:]
    row = {r.backend: r for r in peers if (r.op, r.pass_) == ("qkv", "fprop")}
    assert [c.get_text().split(" · ")[0] for c in first] == [format_ms(row[b].ms) for b in backends]
    # TE's totals are TE's: the peers' times appear nowhere in the totals table.
    totals = soup.select_one("table.gemm-totals").get_text()
    assert all(format_ms(r.ms) not in totals for r in peers if r.ms)
