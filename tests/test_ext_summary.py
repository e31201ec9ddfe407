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
    tables = soup.select("table.gemm-summary-table")
    assert len(tables) == 2  # one per device, each in its own tab
    for table in tables:
        caption = table.caption.get_text()
        device = H100["name"] if "H100" in caption else H200["name"]
        rows = table.select("tbody tr")
        assert [r.td.get_text() for r in rows] == ["Autocast GEMMs", "Pre-quantized GEMMs"]
        notes = [p.get_text() for p in table.find_parent("div", class_="sphinx-tabs-panel").select("p.gemm-cell-note")]
        for row in rows:
            mode = "autocast" if "Autocast" in row.td.get_text() else "prequant"
            report = Report(docs[device], gemms=list(q.gemms), num_layers=q.num_layers, kind=q.kind)
            cells = row.select("td")[1:]
            speeds = {}
            for precision, cell in zip(("fp8-delayed", "fp8-current"), cells, strict=True):
                total = report.total(mode, precision)
                if total.speedup_vs_bf16:
                    speeds[precision] = total.speedup_vs_bf16
                    assert cell.get_text().startswith(format_speedup(total.speedup_vs_bf16))
                else:
                    # "failed" or "n/a" with a note mark; the note under the table gives the status and
                    # TE's reason as text (a phone has no hover), never one "n/a" for failed and unsupported
                    status = total.status
                    mark = cell.get_text()[-1]
                    note = next(n for n in notes if n.startswith(mark))
                    if (precision, mode) == ("fp8-delayed", "prequant"):  # FP8 Current's GEMM, not unsupported
                        assert cell.get_text()[:-1] == "same" and "unsupported" not in note
                        assert "same as FP8 Current (FP8 delayed scaling differs" in note, note
                        continue
                    assert cell.get_text()[:-1] == ("failed" if status == "failed" else "n/a")
                    assert f"{status}: {' '.join(total.reason.split())[:40]}" in note
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
    text = project.html().select_one("div.gemm-summary").get_text()
    assert "gemm-bench run --model qwen2.5-72b --tensor-model-parallel-size 8" in text
    assert "Llama 3 8B" in text and "Qwen2.5 72B (TP 8)" in text


def test_summary_bad_option_is_a_located_warning(project: Project) -> None:
    project.page("index", "T\n=\n\n.. gemm-benchmark-summary::\n   :models: no-such-model\n")
    warnings, _ = project.build()
    # at the :models: line, named :models: (issue 44: it was ":model:", at the directive's line)
    assert "index.rst:5: WARNING: gemm-benchmark-summary: :models: unknown preset 'no-such-model'" in warnings
    assert "[gemm_benchmark.config]" in warnings


def _tied_document() -> dict:
    """te-guide-5b autocast on the H100, FP8 current 1% slower than FP8 delayed with a 10% spread: a tie."""
    q = build_question(model="te-guide-5b")
    doc = make_document(q, device=H100, precisions=("bf16", "fp8-delayed", "fp8-current"), modes=("autocast",))
    by_key = {(c["precision"], c["op"], c["pass"]): c for c in doc["cells"]}
    for cell in doc["cells"]:
        if cell["precision"] == "fp8-current":
            other = by_key[("fp8-delayed", cell["op"], cell["pass"])]
            cell["ms"] = round(other["ms"] * 1.01, 6)
            cell["stats"] = {"median_ms": cell["ms"], "iqr_ms": round(cell["ms"] * 0.1, 6)}
    return doc


def test_a_speedup_within_the_fastests_spread_is_marked_not_significant(project: Project) -> None:
    project.store(_tied_document())
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
    step = rows["One layer's step"]
    sqnr = rows["Least SQNR, dB"]
    assert step == [format_speedup(report.step("fp8-current", graphed=True).speedup_vs_bf16) + " ★"]
    assert sqnr == [f"{report.sqnr('autocast', 'fp8-current'):.1f}"]
    assert "Not in these results yet" not in project.html().get_text()


def test_peers_have_their_own_table_never_in_te_totals(project: Project) -> None:
    source = Path(__file__).parent.parent / "docs" / "_gemm_cache" / "2160d33ec54a347e--h100-80gb-hbm3.json"
    doc = __import__("json").loads(source.read_text(encoding="utf-8"))
    project.store(doc)
    # Peers are shown where ``:show:`` names them (issue 34: measured only for such pages).
    project.page("index", "T\n=\n\n.. gemm-benchmark::\n   :name: te\n   :model: te-guide-5b\n"
                 "   :precisions: bf16, fp8-current\n   :show: figure, table, totals, peers, provenance\n")
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


def _summary_page(project: Project, extra: str = "") -> None:
    project.page("index", "T\n=\n\n.. gemm-benchmark-summary::\n   :models: te-guide-5b\n"
                 "   :precisions: bf16, fp8-current, fp8-block\n" + extra)


def test_the_answer_sentence_names_the_starred_step_and_its_accuracy_cost(project: Project) -> None:
    """The sentence recommends exactly what the training-step row stars, with that step's speedup,
    its autocast GEMMs' and its SQNR (and the more accurate recipe's, where one keeps clearly more)."""
    from gemm_benchmark.values import decide_fastest, step_points

    report = _stored_beyond(project)
    _summary_page(project, "   :show: table\n")
    warnings, _ = project.build()
    assert "WARNING" not in warnings, warnings
    soup = project.html()
    sentence = soup.select_one("p.gemm-summary-answer").get_text()
    verdict = decide_fastest(step_points(report, ["fp8-current", "fp8-block"], graphed=True))
    assert verdict is not None and verdict.answer != "bf16"
    chosen = PRECISIONS[verdict.answer].display
    assert f"train in {chosen}: one layer’s step runs {verdict.speedup:.2f}× as fast as in BF16" in sentence
    assert f"its autocast GEMMs {report.total('autocast', verdict.answer).speedup_vs_bf16:.2f}×" in sentence
    assert f"keeps {report.sqnr('autocast', verdict.answer):.1f} dB SQNR" in sentence
    starred = next(tr for tr in soup.select("table.gemm-summary-table tbody tr")
                   if tr.td.get_text() == "One layer's step").select("td.gemm-fastest")
    assert len(starred) == 1 and starred[0].get_text().startswith(f"{verdict.speedup:.2f}×")


def test_a_step_slower_than_bf16_says_stay_in_bf16_and_stars_nothing(project: Project) -> None:
    from tests.fake_beyond import beyond_document

    doc = beyond_document()
    base = {c["mode"]: c["ms"] for c in doc["layer"] if c["precision"] == "bf16"}
    for cell in doc["layer"]:
        if cell["precision"] not in ("bf16", "mxfp8"):  # every FP8 step 20% slower than BF16's
            cell["ms"] = round(base[cell["mode"]] * 1.2, 6)
            cell["stats"] = {"median_ms": cell["ms"], "iqr_ms": round(cell["ms"] * 0.01, 6), "n": 10}
    project.store(doc)
    _summary_page(project, "   :show: table\n")
    warnings, _ = project.build()
    soup = project.html()
    sentence = soup.select_one("p.gemm-summary-answer").get_text()
    assert "stay in BF16: no FP8 recipe makes one layer’s step faster" in sentence
    assert "train in" not in sentence
    rows = soup.select("table.gemm-summary-table tbody tr")
    row = next(r for r in rows if r.td.get_text().startswith("One layer's step"))
    assert row.td.get_text() == "One layer's step · fastest: BF16" and not row.select("td.gemm-fastest")
    # the autocast GEMMs are still faster, and the sentence says so rather than hiding it
    assert "although" in sentence and "autocast GEMMs alone" in sentence
    assert "WARNING" not in warnings, warnings


def test_sqnr_is_shown_once_per_recipe_and_pass(project: Project) -> None:
    report = _stored_beyond(project)
    _summary_page(project, "   :show: table, sqnr\n   :accuracy: sentence\n")
    warnings, _ = project.build()
    assert "WARNING" not in warnings, warnings
    soup = project.html()
    tables = soup.select("table.gemm-summary-table")
    per_model, by_pass = tables[0], tables[-1]
    assert "SQNR" not in per_model.get_text()  # :accuracy: sentence: no row of its own
    assert "dB SQNR" in soup.select_one("p.gemm-summary-answer").get_text()
    rows = {r.td.get_text(): [c.get_text() for c in r.select("td")[1:]] for r in by_pass.select("tbody tr")}
    assert list(rows) == ["Fprop", "Dgrad", "Wgrad"]
    assert [th.get_text() for th in by_pass.select("thead th")][1:] == ["BF16", "FP8 Current", "FP8 Block"]
    for name, values in rows.items():
        for precision, text in zip(("bf16", "fp8-current", "fp8-block"), values, strict=True):
            least = min(report.sqnr("autocast", precision, g) for g in report.gemms if g.pass_ == name.lower())
            assert text == f"{least:.1f}", (name, precision)


def test_accuracy_and_show_values_are_checked(project: Project) -> None:
    _summary_page(project, "   :accuracy: everywhere\n")
    warnings, _ = project.build()
    assert "index.rst:7" in warnings  # at the :accuracy: line, where the author fixes it
    assert "unknown value 'everywhere'; choose from row, sentence" in warnings


def test_without_a_step_the_answer_is_about_the_autocast_gemms_and_says_so(project: Project) -> None:
    q = build_question(model="te-guide-5b")
    doc = make_document(q, device=H100, precisions=("bf16", "fp8-current"), modes=("autocast",))
    project.store(doc)
    project.page("index", "T\n=\n\n.. gemm-benchmark-summary::\n   :models: te-guide-5b\n"
                 "   :precisions: bf16, fp8-current\n   :modes: autocast\n   :show: table\n")
    warnings, _ = project.build()
    assert "WARNING" not in warnings, warnings
    report = Report(doc, gemms=list(q.gemms), num_layers=q.num_layers, kind=q.kind)
    speedup = report.total("autocast", "fp8-current").speedup_vs_bf16
    assert speedup is not None and speedup > 1
    sentence = project.html().select_one("p.gemm-summary-answer").get_text()
    assert (f"train in FP8 Current: the autocast GEMMs run {speedup:.2f}× as fast as in BF16 "
            "(no step is measured yet)") in sentence, sentence


def test_failed_steps_are_said_never_passed_over_for_the_gemms(project: Project) -> None:
    """Red team: every FP8 step failed, and the sentence said "train in ..." from the GEMMs."""
    from tests.fake_beyond import beyond_document

    doc = beyond_document()
    doc["layer"] = [c if c["precision"] in ("bf16", "mxfp8") else
                    {"mode": c["mode"], "precision": c["precision"], "status": "failed",
                     "reason": "CUDA out of memory (synthetic)"} for c in doc["layer"]]
    project.store(doc)
    _summary_page(project, "   :show: table\n")
    project.build()
    sentence = project.html().select_one("p.gemm-summary-answer").get_text()
    assert "train in" not in sentence and "no recommendation" in sentence, sentence
    assert "FP8 Current and FP8 Block failed" in sentence, sentence


def test_the_sentence_quotes_autocast_and_the_step_rows_the_table_shows(project: Project) -> None:
    """Red team: with prequant listed first the sentence called a pre-quantized speedup "autocast";
    with only the eager step shown it quoted the graphed one, which the page did not show."""
    from gemm_benchmark.values import decide_fastest, step_points

    report = _stored_beyond(project)
    _summary_page(project, "   :modes: prequant, autocast, layer\n   :show: table\n")
    project.build()
    sentence = project.html().select_one("p.gemm-summary-answer").get_text()
    verdict = decide_fastest(step_points(report, ["fp8-current", "fp8-block"], graphed=False))
    assert verdict is not None and verdict.answer != "bf16"
    assert f"one layer’s eager step runs {verdict.speedup:.2f}×" in sentence, sentence
    autocast = report.total("autocast", verdict.answer).speedup_vs_bf16
    assert f"(its autocast GEMMs {autocast:.2f}×)" in sentence, sentence
    assert f"keeps {report.sqnr('autocast', verdict.answer):.1f} dB SQNR" in sentence


@pytest.mark.parametrize(("prose", "warns"), [
    ("Delayed :gemm-speedup:`te autocast fp8-delayed` beats current :gemm-speedup:`te autocast fp8-current`.", True),
    # the same device named two ways is the same quantity (the red team's miss)
    ("Delayed :gemm-speedup:`te@h100 autocast fp8-delayed` beats :gemm-speedup:`te autocast fp8-current`.", True),
    ("Delayed :gemm-speedup:`te autocast fp8-delayed` and current :gemm-speedup:`te autocast fp8-current` lie "
     "within the measured spread of each other.", False),
    ("Delayed :gemm-speedup:`te autocast fp8-delayed`.\n\nCurrent :gemm-speedup:`te autocast fp8-current`.", False),
])
def test_prose_that_compares_two_tied_speedups_must_say_so(project: Project, prose: str, warns: bool) -> None:
    project.store(_tied_document())
    project.page("index", "T\n=\n\n.. gemm-benchmark::\n   :name: te\n   :model: te-guide-5b\n"
                 "   :precisions: bf16, fp8-delayed, fp8-current\n   :modes: autocast\n   :devices: h100\n\n"
                 + prose + "\n")
    warnings, _ = project.build()
    claims = [w for w in warnings.splitlines() if "[gemm_benchmark.claim]" in w]
    assert bool(claims) == warns, warnings
    if warns:
        assert "index.rst:" in claims[0] and "within each other's measured spread" in claims[0]


def test_a_summary_that_renders_nothing_says_so(project: Project) -> None:
    """Red team: ``:show: figure`` with one model on one GPU built an empty summary, silently."""
    q = build_question(model="te-guide-5b")
    project.store(make_document(q, device=H100, precisions=("bf16", "fp8-current")))
    project.page("index", "T\n=\n\n.. gemm-benchmark-summary::\n   :models: te-guide-5b\n"
                 "   :precisions: bf16, fp8-current\n   :devices: h100\n   :show: figure\n")
    warnings, _ = project.build()
    assert "index.rst:4" in warnings and ":show: figure renders nothing" in warnings, warnings


def test_show_values_ignore_case_like_the_other_choices(project: Project) -> None:
    q = build_question(model="te-guide-5b")
    project.store(make_document(q, device=H100, precisions=("bf16", "fp8-current")))
    project.page("index", "T\n=\n\n.. gemm-benchmark-summary::\n   :models: te-guide-5b\n"
                 "   :precisions: bf16, fp8-current\n   :devices: h100\n   :show: Table\n   :accuracy: Sentence\n")
    warnings, _ = project.build()
    assert "WARNING" not in warnings, warnings
    assert project.html().select_one("table.gemm-summary-table") is not None
