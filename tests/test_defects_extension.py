"""Defect classes of the Sphinx extension found in issue 24 (and issue 21 item 4), one test each.

Every test names its class in its docstring, builds a real Sphinx project and failed on the code
before its fix.
"""

from __future__ import annotations

import datetime as dt
import re
from pathlib import Path
from typing import Any

import pytest
from sphinx.errors import ConfigError

from gemm_bench.question.question import build_question
from gemm_bench.report.report import Report
from gemm_benchmark import execution
from gemm_benchmark.values import format_speedup

from .conftest import H100, H200, make_document
from .test_correctness import CONF, Project


@pytest.fixture
def project(tmp_path: Path) -> Project:
    return Project(tmp_path)


def _slower_than_bf16(doc: dict[str, Any], precisions: tuple[str, ...], factor: float = 0.6) -> dict[str, Any]:
    """Make ``precisions`` ``factor`` times BF16's speed on every measured cell (spread 1%)."""
    base = {(c["mode"], c["op"], c["pass"]): c for c in doc["cells"] if c["precision"] == "bf16"}
    for cell in doc["cells"]:
        if cell["precision"] in precisions and cell["status"] == "measured":
            ms = round(base[(cell["mode"], cell["op"], cell["pass"])]["ms"] / factor, 6)
            cell["ms"], cell["stats"] = ms, {"median_ms": ms, "iqr_ms": round(ms * 0.01, 6)}
    return doc


# ------------------------------------------------------------------ 1. fastest never considers BF16
def test_fastest_is_decided_by_one_rule_that_includes_bf16(project: Project) -> None:
    """Class: "fastest" (summary ★, :gemm-fastest:, :gemm-speedup: fastest) never considered BF16 and
    starred a precision slower than BF16. One function decides; BF16 is then the answer, in words."""
    q = build_question(model="te-guide-5b")
    doc = _slower_than_bf16(make_document(q, device=H100, precisions=("bf16", "fp8-delayed", "fp8-current"),
                                          modes=("autocast",)), ("fp8-delayed", "fp8-current"))
    project.store(doc)
    project.page("index", "T\n=\n\n.. gemm-benchmark-summary::\n   :models: te-guide-5b\n"
                 "   :precisions: bf16, fp8-delayed, fp8-current\n   :modes: autocast\n   :show: table\n\n"
                 ".. gemm-benchmark::\n   :name: te\n   :model: te-guide-5b\n   :precisions: bf16, fp8-delayed, "
                 "fp8-current\n   :modes: autocast\n\n"
                 "Fastest: :gemm-fastest:`te autocast` at :gemm-speedup:`te autocast fastest`.\n")
    warnings, _ = project.build()
    assert "WARNING" not in warnings, warnings
    soup = project.html()
    table = soup.select_one("table.gemm-summary-table")
    assert "★" not in table.tbody.get_text() and not table.select("td.gemm-fastest")
    assert "Autocast GEMMs · fastest: BF16" in table.get_text()
    answer = soup.select_one("div.gemm-summary").get_text()
    assert "stay in BF16: no FP8 recipe makes the autocast GEMMs faster" in answer
    values = [a.get_text() for a in soup.select("p abbr.gemm-value")]
    # "BF16" in words a sentence holds ("that is BF16 (1.00× ...)"); why it is BF16 is on hover
    assert values == ["BF16", "1.00×"]
    assert "no FP8 recipe is faster here" in soup.select("p abbr.gemm-value")[0]["title"]


def test_fastest_within_bf16s_spread_is_not_starred() -> None:
    """Class: a precision within the spread of another is starred over it as if clearly faster."""
    from gemm_benchmark.values import Point, decide_fastest

    clear = decide_fastest({"bf16": Point(1.0, 0.98, 1.02), "fp8-current": Point(1.6, 1.55, 1.65),
                            "fp8-delayed": Point(1.62, 1.5, 1.7)})
    assert clear is not None and clear.starred == "fp8-delayed" and clear.tied == ("fp8-current",)
    close = decide_fastest({"bf16": Point(1.0, 0.95, 1.05), "fp8-current": Point(1.02, 0.97, 1.08)})
    assert close is not None and close.answer == "bf16" and close.starred is None
    assert close.text == "BF16" and close.why.startswith("no FP8 recipe is clearly faster here")
    assert close.tied == ("fp8-current",)
    slower = decide_fastest({"bf16": Point(1.0), "nvfp4": Point(0.8)})
    assert slower is not None and slower.text == "BF16" and slower.why == "no FP8 or FP4 recipe is faster here"
    assert slower.speedup == 1.0


# ------------------------------------------------------------------ 2. failed reads as unsupported
def test_failed_cells_read_as_failed_with_their_reason(project: Project) -> None:
    """Class: a failed cell (CUDA out of memory) was shown as the same "n/a" as an unsupported one,
    in the summary and in roles."""
    q = build_question(model="te-guide-5b")
    project.store(make_document(q, device=H100, precisions=("bf16", "fp8-current", "fp8-block"), modes=("autocast",),
                                failed={("autocast", "fp8-current"): "CUDA out of memory"},
                                unsupported={"fp8-block": "needs compute capability 10.0"}))
    project.page("index", "T\n=\n\n.. gemm-benchmark-summary::\n   :models: te-guide-5b\n"
                 "   :precisions: bf16, fp8-current, fp8-block\n   :modes: autocast\n   :show: table\n\n"
                 ".. gemm-benchmark::\n   :name: te\n   :model: te-guide-5b\n   :precisions: bf16, fp8-current, "
                 "fp8-block\n   :modes: autocast\n\n"
                 "A :gemm-speedup:`te autocast fp8-current` B :gemm-speedup:`te autocast fp8-block`\n")
    warnings, _ = project.build()
    assert "[gemm_benchmark.role]" in warnings  # the roles' numbers are absent: each says why, located
    soup = project.html()
    cells = soup.select("table.gemm-summary-table tbody tr td")[1:3]
    notes = [p.get_text() for p in soup.select("div.gemm-summary p.gemm-cell-note")]
    # failed reads "failed", unsupported "n/a"; each with its reason as a note under the table (not hover-only)
    assert cells[0].get_text() == "failed¹" and cells[1].get_text() == "n/a²", cells
    assert notes[0].startswith("¹ ") and "failed: CUDA out of memory" in notes[0], notes
    assert notes[1].startswith("² ") and "unsupported: needs compute capability 10.0" in notes[1], notes
    roles = [a.get_text() for a in soup.select("p abbr.gemm-value-error")]
    assert roles[0].startswith("failed: CUDA out of memory") and roles[1].startswith("unsupported: needs"), roles


# ------------------------------------------------------------------ 3. the summary ignores freshness
def test_summary_shows_stale_results_and_unmeasured_listed_devices(project: Project) -> None:
    """Class: the summary ignored freshness (a stale result looked fresh) and silently dropped a
    listed device with no result."""
    (project.src / "conf.py").write_text(CONF + "gemm_benchmark_max_age_days = 30\n", encoding="utf-8")
    q = build_question(model="te-guide-5b")
    project.store(make_document(q, device=H100, precisions=("bf16", "fp8-current"), date="2020-01-01T00:00:00+00:00"))
    project.page("index", "T\n=\n\n.. gemm-benchmark-summary::\n   :models: te-guide-5b\n"
                 "   :precisions: bf16, fp8-current\n   :devices: h100, h200\n   :show: table\n")
    warnings, _ = project.build()
    assert re.search(r"index\.rst:4: WARNING: .*stale.*\[gemm_benchmark\.stale\]", warnings), warnings
    assert re.search(r"index\.rst:4: WARNING: .*h200.*\[gemm_benchmark\.missing\]", warnings), warnings
    summary = project.html().select_one("div.gemm-summary")
    text = summary.get_text()
    stale = summary.select_one("p.gemm-stale").get_text()
    assert "result is stale:" in stale and "days old" in stale, stale
    assert "not measured on the h200 yet" in text.lower()


# ------------------------------------------------------------------ 4. a row of -1 columns
@pytest.mark.parametrize("builder", ["html", "latex"])
def test_summary_rows_always_have_the_tables_width(project: Project, builder: str) -> None:
    """Class: a summary row built with a wrong column count (``:precisions: bf16`` and an unmeasured
    model gave morecols = -1) aborted html and latex builds."""
    project.page("index", "T\n=\n\n.. gemm-benchmark-summary::\n   :models: llama3-8b\n   :precisions: bf16\n")
    warnings, _ = project.build(builder)
    assert "index.rst:6" in warnings and "[gemm_benchmark.precisions]" in warnings, warnings  # at :precisions:


def test_summary_table_width_is_checked_for_every_row() -> None:
    """Class (structural half): no summary row can be built whose columns differ from the header's."""
    from gemm_benchmark.summary_answer import Shown, Table

    table = Table("GPU", ["FP8 Current"])
    table.span(Shown("a"), Shown("not measured"))
    with pytest.raises(ValueError, match="columns"):
        table.row([Shown("a"), Shown("1"), Shown("2"), Shown("3")])


# ------------------------------------------------------------------ 5. layer modes abort the build
def test_layer_modes_render_in_the_summary_and_are_refused_by_gemm_benchmark(project: Project) -> None:
    """Class: ``:modes: layer`` / ``layer-graphed`` aborted the build with a ValueError. The summary
    renders the step rows; ``gemm-benchmark`` (per-GEMM tables; its docs list autocast, prequant)
    refuses them with a located warning."""
    from tests.fake_beyond import beyond_document

    doc = beyond_document()
    project.store(doc)
    q = build_question(model="te-guide-5b")
    report = Report(doc, gemms=list(q.gemms), num_layers=q.num_layers, kind=q.kind)
    project.page("index", "T\n=\n\n.. gemm-benchmark-summary::\n   :models: te-guide-5b\n"
                 "   :precisions: bf16, fp8-current\n   :modes: layer, layer-graphed\n\n"
                 ".. gemm-benchmark::\n   :model: te-guide-5b\n   :modes: layer-graphed\n")
    warnings, _ = project.build()
    assert re.search(r"index\.rst:11: WARNING: .*layer-graphed.*\[gemm_benchmark\.modes\]", warnings), warnings
    # The synthetic document is of an earlier method (stale under the current one): that warning aside,
    # the layer modes are the only problem.
    others = [w for w in warnings.splitlines() if "WARNING" in w and "[gemm_benchmark.stale]" not in w]
    assert len(others) == 1, warnings
    rows = {r.td.get_text(): r.select("td")[1].get_text()
            for r in project.html().select("table.gemm-summary-table tbody tr")}
    eager = rows["One layer's step, eager"]
    graphed = rows["One layer's step"]
    assert eager.startswith(format_speedup(report.step("fp8-current").speedup_vs_bf16))
    assert graphed.startswith(format_speedup(report.step("fp8-current", graphed=True).speedup_vs_bf16))


# ------------------------------------------------------------------ 6. mistyped conf values
@pytest.mark.parametrize(("setting", "fragment"), [
    ("gemm_benchmark_max_age_days = '30'", "gemm_benchmark_max_age_days"),
    ("gemm_benchmark_max_age_days = True", "gemm_benchmark_max_age_days"),
    ("gemm_benchmark_max_age_days = -1", "gemm_benchmark_max_age_days"),
    ("gemm_benchmark_cache_dir = None", "gemm_benchmark_cache_dir"),
    ("gemm_benchmark_cache_dir = ''", "gemm_benchmark_cache_dir"),
    ("gemm_benchmark_cache_dir = '../../elsewhere'", "gemm_benchmark_cache_dir"),
    ("gemm_benchmark_stale_when = 'torch'", "gemm_benchmark_stale_when"),
    ("gemm_benchmark_stale_when = [1]", "gemm_benchmark_stale_when"),
    ("gemm_benchmark_stale_when = ['no-such-field']", "gemm_benchmark_stale_when"),
    ("gemm_benchmark_execution_mode = 3", "gemm_benchmark_execution_mode"),
    ("gemm_benchmark_execution_mode = None", "gemm_benchmark_execution_mode"),
])
def test_mistyped_conf_values_are_config_errors(project: Project, setting: str, fragment: str) -> None:
    """Class: a mistyped ``gemm_benchmark_*`` conf value crashed builder-inited (TypeError) instead of a
    configuration error naming conf.py and the value."""
    (project.src / "conf.py").write_text(CONF + setting + "\n", encoding="utf-8")
    project.page("index", "T\n=\n\ntext\n")
    with pytest.raises(ConfigError) as caught:
        project.build()
    message = str(caught.value)
    assert fragment in message and "conf.py" in message, message


# ------------------------------------------------------------------ 7. a shape names several GEMMs
def test_a_role_naming_an_ambiguous_shape_is_an_error_naming_the_candidates(project: Project) -> None:
    """Class: a role naming a GEMM by ``MxKxN`` took the first of several GEMMs with that shape."""
    q = build_question(model="te-guide-5b")
    shared = next(g.label for g in q.gemms if g.op == "attn_out" and sum(h.label == g.label for h in q.gemms) > 1)
    project.store(make_document(q, device=H100, precisions=("bf16",), modes=("autocast",)))
    project.page("index", "T\n=\n\n.. gemm-benchmark::\n   :name: te\n   :model: te-guide-5b\n"
                 "   :precisions: bf16\n   :modes: autocast\n\n"
                 f"X :gemm-time:`te autocast bf16 {shared}` Y :gemm-time:`te autocast bf16 attn_out/dgrad`\n")
    warnings, _ = project.build()
    owners = sorted(f"{g.op}/{g.pass_}" for g in q.gemms if g.label == shared)
    assert re.search(r"index\.rst:\d+: WARNING: .*ambiguous.*\[gemm_benchmark\.role\]", warnings), warnings
    assert all(o in warnings for o in owners), warnings
    soup = project.html()
    assert soup.select("p abbr.gemm-value-error") and len(soup.select("p abbr.gemm-value")) == 1


# ------------------------------------------------------------------ 8. incremental builds and staleness
def test_incremental_builds_rejudge_age_and_see_new_devices_of_summary_questions(
        project: Project, monkeypatch: pytest.MonkeyPatch) -> None:
    """Class: incremental builds never re-judged staleness (a result aging past the configured age
    stayed "fresh"), and a new device's file for a question only a summary asks did not re-read it."""
    (project.src / "conf.py").write_text(CONF + "gemm_benchmark_max_age_days = 30\n", encoding="utf-8")
    q = build_question(model="te-guide-5b")
    project.store(make_document(q, device=H100, precisions=("bf16", "fp8-current"),
                                date="2026-11-20T10:00:00+00:00"))
    project.page("index", "T\n=\n\n.. gemm-benchmark-summary::\n   :models: te-guide-5b\n"
                 "   :precisions: bf16, fp8-current\n   :show: table\n")
    monkeypatch.setattr(execution, "clock", lambda: dt.datetime(2026, 11, 25, tzinfo=dt.timezone.utc))
    warnings, _ = project.build()
    assert "WARNING" not in warnings, warnings
    assert "H200" not in project.html().select_one("div.gemm-summary").get_text()
    project.store(make_document(q, device=H200, precisions=("bf16", "fp8-current"),
                                date="2026-11-20T10:00:00+00:00"))
    project.build()
    assert "H200" in project.html().select_one("div.gemm-summary").get_text()
    monkeypatch.setattr(execution, "clock", lambda: dt.datetime(2027, 1, 25, tzinfo=dt.timezone.utc))
    warnings, _ = project.build()
    assert "[gemm_benchmark.stale]" in warnings, warnings
    assert "stale" in project.html().select_one("table.gemm-summary-table").get_text()


# ------------------------------------------------------------------ 9. spans in man pages
def _man_rows(text: str) -> list[list[str]]:
    """The cells of every row of the first tbl table of a man page."""
    body = text[text.index(".TS"):text.index(".TE")]
    rows: list[list[str]] = [[]]
    for cell, end in re.findall(r"T\{\n(.*?)T\}(\t|\n)", body, re.S):
        rows[-1].append(" ".join(cell.split()))
        if end == "\n":
            rows.append([])
    return [r for r in rows if r]


def test_man_and_text_headers_stand_over_their_columns(project: Project) -> None:
    """Class: the man builder put "FP8 Current" over a BF16 column: spanning header entries
    (``morecols``) are not supported by its tables, so every later header moved left."""
    q = build_question(model="te-guide-5b")
    project.store(make_document(q, device=H100, precisions=("bf16", "fp8-delayed", "fp8-current"),
                                modes=("autocast",)))
    project.page("index", "T\n=\n\n.. gemm-benchmark::\n   :model: te-guide-5b\n"
                 "   :precisions: bf16, fp8-delayed, fp8-current\n   :modes: autocast\n   :show: table\n")
    _, out = project.build("man")
    page = next(out.glob("*.1")).read_text(encoding="utf-8")
    top, second, *body = _man_rows(page)
    assert len(top) == len(second) == len(body[0]), (top, second)
    assert second[top.index("FP8 Current")] == "ms" and second[top.index("FP8 Current") + 1] == "× BF16"
    assert second[top.index("BF16")] == "ms"
    _, out = project.build("text")
    lines = (out / "index.txt").read_text(encoding="utf-8").splitlines()
    head = next(line for line in lines if "FP8 Current" in line)
    under = lines[lines.index(head) + 2]
    assert under[head.index("FP8 Current") - 2:].lstrip("| ").startswith("ms")


# ------------------------------------------------------------------ 10. the Linear peers' backward
def test_linear_peers_backward_is_rendered_beside_their_fprop(project: Project) -> None:
    """Class: the Linear peers' backward region (Dgrad + Wgrad, peers rows with pass "backward") was
    stored in every result but rendered nowhere; it belongs in the table that shows their Fprop."""
    import json

    from gemm_benchmark.values import format_ms

    source = Path(__file__).parent.parent / "docs" / "_gemm_cache" / "2160d33ec54a347e--h100-80gb-hbm3.json"
    doc = json.loads(source.read_text(encoding="utf-8"))
    project.store(doc)
    project.page("index", "T\n=\n\n.. gemm-benchmark::\n   :model: te-guide-5b\n   :precisions: bf16, fp8-current\n"
                 "   :modes: autocast\n   :show: table, peers\n")
    project.build()
    q = build_question(model="te-guide-5b")
    report = Report(doc, gemms=list(q.gemms), num_layers=q.num_layers, kind=q.kind)
    backward = [r for r in report.peers() if r.kind == "linear" and r.pass_ == "backward" and r.ms]
    fprop = [r for r in report.peers() if r.kind == "linear" and r.pass_ == "fprop" and r.ms]
    assert backward and fprop
    text = " ".join(t.get_text() for t in project.html().select("table.gemm-peers"))
    assert all(format_ms(r.ms) in text for r in fprop)  # the Fprop is rendered today ...
    assert all(format_ms(r.ms) in text for r in backward)  # ... its backward beside it


# ------------------------------------------------------------------ huge numbers in directive options
def test_a_5000_digit_size_in_a_directive_is_a_located_warning(project: Project) -> None:
    """Class (issue 24, crashes): Python refuses to convert more than 4300 digits, and ``:sweep:`` /
    ``:shapes:`` converted before checking, so a 5000-digit size raised from inside the build. Digits
    are counted first now, in the one parser the CLI and the directive share."""
    huge = "9" * 5000
    project.page("index", f"T\n=\n\n.. gemm-benchmark::\n   :sweep: 256, {huge}\n\n"
                 f".. gemm-benchmark::\n   :shapes: 16x{huge}x16\n")
    warnings, _ = project.build()
    assert "index.rst:5" in warnings and "index.rst:8" in warnings, warnings
    assert "positive whole number up to" in warnings and "every dimension must be between" in warnings
    assert "Traceback" not in warnings and "Exceeds the limit" not in warnings
