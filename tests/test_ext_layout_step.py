"""Issue 42 item 5: the layout step on the page (``gemm-layout-step``), the published runs beside the
prediction (``gemm-published-runs``), the clause the answer sentence quotes, and the conf values of
the assumed network. Every number checked is the library's, from the committed cache."""

from __future__ import annotations

import io
import json
import re
import shutil
from pathlib import Path

import pytest
from bs4 import BeautifulSoup

from gemm_bench.question.comm import Link
from gemm_bench.question.layout import PRESET_LAYOUTS
from gemm_bench.question.layout_step import Network
from gemm_bench.question.question import build_question
from gemm_bench.report.layout_step import (
    ResultLayoutSteps,
    assumed_words,
    layout_clause,
    preset_layout_steps,
    sweeps,
)
from gemm_bench.report.published_runs import PublishedRunsError, compare, load, reasons
from gemm_bench.results import studies
from gemm_bench.results.cache import Cache
from gemm_bench.results.typed import parse

ROOT = Path(__file__).resolve().parents[1]
CACHE = ROOT / "docs" / "_gemm_cache"
RUNS = ROOT / "docs" / "_data" / "published_runs.json"
MODELS = ("llama3-8b", "llama3.1-405b/tp8", "gpt-oss-120b")


def _doc(model: str, device: str) -> dict:
    found = [d for d in Cache(CACHE).lookup(build_question(model=model).hash).documents
             if device in d["device"]["name"]]
    assert found, f"no cached {model} on {device}"
    return dict(found[0])


def _steps(model: str, device: str, network: Network = Network()) -> ResultLayoutSteps:
    docs, _ = studies.read_studies(CACHE, "tp-comm")
    found = preset_layout_steps(parse(_doc(model, device)), model, sweeps(docs), network=network)
    assert isinstance(found, ResultLayoutSteps), found
    return found


def test_layout_clause_quotes_the_step_and_its_speedup() -> None:
    found = _steps("llama3.1-405b/tp8", "H200")
    step, base = found.step("fp8-current"), found.step("bf16")
    assert step is not None and base is not None
    clause = layout_clause(found, "fp8-current")
    assert clause == (f"with communication: {step.tokens_per_s:,.0f} tokens/s per GPU on "
                      f"{PRESET_LAYOUTS['llama3.1-405b/tp8'].layout.describe()}, "
                      f"{base.step_ms / step.step_ms:.2f}× BF16 (compute and collectives assumed in part)")
    # CP 2: the rank's compute is scaled to half the tokens (an assumption of the compute, said since the
    # review of session 15: before, only the collectives' assumptions reached the words)
    assert step.assumptions and step.collectives_assumed
    assert layout_clause(found, "bf16") is not None and "× BF16" not in str(layout_clause(found, "bf16"))
    assert layout_clause(found, "nvfp4") is None


def test_on_its_own_gpu_kind_the_sweep_is_measured_and_on_another_borrowed() -> None:
    own, other = _steps("qwen2.5-7b", "H200"), _steps("qwen2.5-7b", "H100")
    assert own.borrowed_from is None and other.borrowed_from == "H200"
    assert {c.how for _, c in other.step("bf16").dp.calls} == {"borrowed"}  # type: ignore[union-attr]
    # DP 8 in one node, larger than the 4-GPU box: scaled from it, assumed
    assert {c.how for _, c in own.step("bf16").dp.calls} == {"scaled"}  # type: ignore[union-attr]


def test_the_inter_node_link_changes_only_what_crosses_nodes() -> None:
    slow = Network(8, Link("slow", 5.0, 10.0))
    fast, slower = _steps("llama3.1-405b/tp8", "H200"), _steps("llama3.1-405b/tp8", "H200", slow)
    a, b = fast.step("bf16"), slower.step("bf16")
    assert a is not None and b is not None
    assert b.dp.comm_ms > 5 * a.dp.comm_ms  # DP across nodes: the link's
    assert b.compute_ms == a.compute_ms


def test_published_runs_file_is_valid_and_three_models_are_predicted() -> None:
    runs = load(RUNS)
    docs, _ = studies.read_studies(CACHE, "tp-comm")
    predicted = set()
    for run in runs:
        doc = next((d for d in Cache(CACHE).lookup(build_question(model=run.model).hash).documents
                    if d["device"]["name"] == run.device), None)
        comparison = compare(run, parse(doc) if doc is not None else None, sweeps(docs))
        for p in comparison.predictions:
            if p.step is not None:
                predicted.add(run.model)
                assert p.difference == pytest.approx(p.step.tokens_per_s / p.published - 1)
                assert bool(reasons(p)) == p.off
            else:
                assert p.why_none
    assert set(MODELS) <= predicted


def test_a_malformed_published_row_names_the_file_and_row(tmp_path: Path) -> None:
    doc = json.loads(RUNS.read_text(encoding="utf-8"))
    doc["runs"][1]["published"] = {"fp8-current": -1}
    bad = tmp_path / "runs.json"
    bad.write_text(json.dumps(doc), encoding="utf-8")
    with pytest.raises(PublishedRunsError, match=r"runs\.json: runs\[1\]\.published"):
        load(bad)
    doc["runs"][1]["published"] = {"fp8-current": 1}
    doc["runs"][1]["layout"]["tp"] = 3
    bad.write_text(json.dumps(doc), encoding="utf-8")
    with pytest.raises(PublishedRunsError, match=r"runs\[1\]\.layout"):
        load(bad)


@pytest.mark.parametrize(("field", "value", "said"), [
    ("model", "llama9-1t", r"runs\[0\]\.model"),  # before: a ConfigError that aborted the build
    ("seq_length", "8k", r"runs\[0\]\.seq_length"),  # before: a ValueError that aborted the build
    ("published", {"bf16": float("nan")}, r"runs\[0\]\.published"),  # before: rendered "nan"
    ("date", "2024-13", r"runs\[0\]\.date"),  # before: read as 22 months before 2026-11 (red team, session 19)
    ("date", "24-07", r"runs\[0\]\.date"),  # before: "24028 months older"
])
def test_a_hostile_published_row_is_a_located_error(tmp_path: Path, field: str, value: object, said: str) -> None:
    doc = json.loads(RUNS.read_text(encoding="utf-8"))
    doc["runs"][0][field] = value
    if field == "published":
        doc["runs"][0]["precision_words"] = {"bf16": "BF16"}
    bad = tmp_path / "runs.json"
    bad.write_text(json.dumps(doc), encoding="utf-8")
    with pytest.raises(PublishedRunsError, match=said):
        load(bad)


def test_a_published_moe_row_at_an_ep_its_model_cannot_take_is_a_located_error(tmp_path: Path) -> None:
    """Red team, session 19: a Mixtral row at EP 16 (8 experts) loaded, then crashed the build where the page
    asked for the model at the run's EP."""
    doc = json.loads(RUNS.read_text(encoding="utf-8"))
    row = next(i for i, r in enumerate(doc["runs"]) if r["model"] == "gpt-oss-120b")
    doc["runs"][row]["model"] = "mixtral-8x7b"
    doc["runs"][row]["layout"]["ep"] = 16
    bad = tmp_path / "runs.json"
    bad.write_text(json.dumps(doc), encoding="utf-8")
    with pytest.raises(PublishedRunsError, match=rf"runs\[{row}\]\.layout\.ep: mixtral-8x7b/ep16"):
        load(bad)


# ---------------------------------------------------------------------------------------- the pages
CONF = """\
extensions = ["gemm_benchmark"]
project = "layout-step test"
gemm_benchmark_cache_dir = "_gemm_cache"
gemm_benchmark_execution_mode = "cache"
"""
INDEX = """\
Layout step
===========

.. gemm-layout-step::
   :models: llama3-8b, no-such-model

.. gemm-published-runs:: runs.json
"""


def _build(srcdir: Path, conf: str = CONF, index: str = INDEX,
           models: tuple[str, ...] = ("llama3-8b", "llama3.1-405b/tp8")) -> tuple[str, BeautifulSoup]:
    from sphinx.testing.util import SphinxTestApp

    cache = srcdir / "_gemm_cache"
    (cache / "studies").mkdir(parents=True)
    shutil.copy(CACHE / "studies" / "tp-comm--h200.json", cache / "studies")
    for model in models:
        for path in Cache(CACHE).lookup(build_question(model=model).hash).paths:
            shutil.copy(path, cache)
    shutil.copy(RUNS, srcdir / "runs.json")
    (srcdir / "conf.py").write_text(conf, encoding="utf-8")
    (srcdir / "index.rst").write_text(index, encoding="utf-8")
    warnings = io.StringIO()
    app = SphinxTestApp("html", srcdir=srcdir, status=io.StringIO(), warning=warnings, freshenv=True)
    try:
        app.build()
    finally:
        app.cleanup()
    html = (Path(app.outdir) / "index.html").read_text(encoding="utf-8")
    return re.sub(r"\x1b\[[0-9;]*m", "", warnings.getvalue()), BeautifulSoup(html, "html.parser")


def test_the_page_shows_the_layouts_step_and_the_published_runs(tmp_path: Path) -> None:
    warnings, soup = _build(tmp_path / "src")
    assert "'no-such-model' has no layout" in warnings and "index.rst" in warnings
    section = soup.select_one("div.gemm-layout-step")
    assert section is not None
    text = section.get_text(" ", strip=True)
    assert PRESET_LAYOUTS["llama3-8b"].layout.describe() in text
    h200 = _steps("llama3-8b", "H200")
    step = h200.step("fp8-current")
    assert step is not None
    assert f"{step.tokens_per_s:,.0f}" in text and f"{step.compute_tokens_per_s:,.0f}" in text
    assert "Rank compute alone" in text and "assumed" in text and "Measured on the box" in text
    published = soup.select_one("table.gemm-published-runs-table")
    assert published is not None
    rows = published.select("tbody tr")
    assert len(rows) == sum(len(r.published) for r in load(RUNS))
    assert "12,036" in rows[0].get_text(" ", strip=True)
    links = [a["href"] for a in soup.select("ol.gemm-published-sources a")]
    assert {r.url for r in load(RUNS)} == set(links)
    # a model whose result is not in this small cache says so, never a number
    assert "no cached result" in published.get_text(" ", strip=True)


def test_a_bad_network_value_in_conf_is_a_config_error_naming_it(tmp_path: Path) -> None:
    from sphinx.errors import ConfigError

    with pytest.raises(ConfigError, match="gemm_benchmark_inter_node_gb_s = 0"):
        _build(tmp_path / "src", CONF + "gemm_benchmark_inter_node_gb_s = 0\n")


def test_the_cli_flag_sets_the_assumed_link_and_refuses_a_bad_one(capsys: pytest.CaptureFixture[str]) -> None:
    from gemm_bench.cli import main

    assert main(["layout-step", "llama3.1-405b/tp8", "--cache-dir", str(CACHE), "--inter-node-gb-s", "25"]) == 0
    out = capsys.readouterr().out
    found = _steps("llama3.1-405b/tp8", "H200", Network(8, Link("x", 25.0, 10.0)))
    assert "25 GB/s per GPU each way" in out and "assumed" in out
    assert layout_clause(found, "fp8-current") in out
    with pytest.raises(SystemExit):
        main(["layout-step", "llama3-8b", "--inter-node-gb-s", "0"])
    assert "--inter-node-gb-s must be positive" in capsys.readouterr().err


def test_the_assumed_words_say_which_part_holds_the_assumption() -> None:
    found = _steps("llama3.1-405b/tp8", "H200")
    step = found.step("bf16")
    assert step is not None
    from dataclasses import replace

    none = replace(step, compute_assumptions=(), collective_assumptions=())
    assert assumed_words(step) == "compute and collectives assumed in part"
    assert assumed_words(none) == ("collectives assumed in part" if none.collectives_assumed else "")
    assert assumed_words(None) == ""
    assert step.assumed


def test_the_layout_step_table_takes_the_pages_layout_options(tmp_path: Path) -> None:
    """Review, session 15: the summary and gemm-layout-memory took a page's layout options and this
    table did not, so a page setting ``:cp:`` showed a sentence on one layout and a table on another."""
    from gemm_bench.report.layout_step import result_layout_steps

    page = "T\n=\n\n.. gemm-layout-step::\n   :models: llama3-8b\n   :cp: 4\n\n.. gemm-layout-step::\n" \
           "   :models: llama3-8b\n   :cp: x\n"
    warnings, soup = _build(tmp_path / "src", index=page)
    assert re.search(r"index\.rst:10: WARNING: gemm-layout-step: .*cp", warnings), warnings  # the bad value's line
    question = build_question(model="llama3-8b", layout={"cp": 4})
    assert question.layout is not None and question.layout.cp == 4
    text = soup.select_one("div.gemm-layout-step").get_text(" ", strip=True)
    assert question.layout.describe() in text
    doc = next(d for d in Cache(CACHE).lookup(question.hash).documents if d["device"]["name"] == "NVIDIA H200")
    docs, _ = studies.read_studies(CACHE, "tp-comm")
    found = result_layout_steps(parse(doc), question.layout, sweeps(docs), config=question.config)
    assert not isinstance(found, str)
    step = found.step("fp8-delayed")
    assert step is not None and f"{step.tokens_per_s:,.0f}" in text


def test_the_compute_alone_cell_says_assumed_and_a_tiny_share_is_not_zero() -> None:
    """Red team, session 19: the rank-compute-alone cell of a CP 2 layout (its compute scaled to half the tokens)
    carried no "assumed", and Llama 3 70B's 0.47% bubble read "0%"."""
    from gemm_benchmark.layout_step import share_text, step_rows

    found = _steps("llama3-70b/tp8", "H200")
    step = found.step("fp8-delayed")
    assert step is not None and step.assumptions and 0 < step.bubble_share < 0.005
    row = next(r for r in step_rows(found) if r[0].text == "FP8 Delayed")
    texts = [e.text for e in row]
    assert texts[3].endswith("(assumed in part)") and texts[3].startswith(f"{step.compute_tokens_per_s:,.0f}")
    assert texts[6] == "<1%"
    assert (share_text(0.0), share_text(0.004), share_text(0.0051), share_text(0.126)) == ("0%", "<1%", "1%", "13%")
    # the distributed optimizer's shard is an assumption of the compute too (the optimizer's time at 1/DP of the
    # parameters): Qwen2.5 7B on one node, CP 1, says so
    qwen = _steps("qwen2.5-7b", "H200")
    assert all(r[3].text.endswith("(assumed in part)") for r in step_rows(qwen))
    assert share_text(-0.0) == "0%"
    # a collective's assumption alone (an MoE's gradient reduce over DP x CP) is not one of the compute's
    import dataclasses

    from gemm_bench.report.layout_step import result_layout_steps
    mixtral = next(d for d in Cache(CACHE).lookup(build_question(model="mixtral-8x7b/ep8").hash).documents
                   if "H200" in d["device"]["name"])
    docs, _ = studies.read_studies(CACHE, "tp-comm")
    layout = dataclasses.replace(PRESET_LAYOUTS["mixtral-8x7b/ep8"].layout, sharding="none")
    found = result_layout_steps(parse(dict(mixtral)), layout, sweeps(docs))
    assert isinstance(found, ResultLayoutSteps)
    bf16 = found.step("bf16")
    assert bf16 is not None and bf16.assumptions and not bf16.compute_assumptions
    assert not step_rows(found)[0][3].text.endswith("(assumed in part)")
    # and the sentence's words read the same split: the collectives hold that assumption, not the compute
    assert assumed_words(bf16) == "collectives assumed in part"


def test_the_notes_name_what_the_fp8_rows_gather_in_fp8() -> None:
    """Red team, session 19: the notes under a table named BF16's collectives only; an FP8 row's uint8
    all-gathers (sequence-parallel inputs, FP8 parameter gather) were never named, measured or assumed."""
    from gemm_benchmark.layout_step import notes

    said = [n.astext() for n in notes(_steps("llama3-70b/tp8", "H200"))]
    other = next(t for t in said if t.startswith("Collectives other recipes run"))
    # the per-tensor recipes also all-reduce their amax in FP32; block scaling does not
    assert "FP8 Delayed, FP8 Current (assumed: all-gather uint8 over 4" in other and "all-reduce fp32" in other
    assert "FP8 Block (assumed: all-gather uint8 over 4" in other, other
    assert "all-gather uint8" not in said[0]  # BF16's own list holds no FP8 payload


def test_the_published_rows_give_the_expert_parallel_and_the_stack_age_reasons_first(tmp_path: Path) -> None:
    """The page's wiring of the two computed reasons (red team, session 19: reverting it left every test green):
    the gpt-oss row leads with what EP 8 does on the H200 and no longer reads the published figure against an
    EP 1 compute ("the published stack computes faster"); the NeMo 24.07 row says how much older its stack is."""
    _, soup = _build(tmp_path / "src", models=("llama3-8b", "gpt-oss-120b", "gpt-oss-120b/ep8"))
    published = soup.select_one("table.gemm-published-runs-table")
    assert published is not None
    rows = {r.select("td")[0].get_text(strip=True) + " " + r.select("td")[1].get_text(" ", strip=True)[:40]:
            r.select("td")[-1].get_text(" ", strip=True) for r in published.select("tbody tr")}
    gpt = next(why for key, why in rows.items() if key.startswith("gpt-oss-120b"))
    assert gpt.startswith("on the H200, which has measured the layer at both expert-parallel sizes"), gpt
    assert "computes faster than the measured one" not in gpt and "lies between the prediction" not in gpt
    nemo = [why for key, why in rows.items() if key.startswith("llama3-8b")]
    assert nemo[0].startswith("the published run (NeMo 24.07 container, 2024-07) is "), nemo
    assert "months older than the measured stack" in nemo[0] and nemo[1] == "within 10%"


def test_the_flags_the_blocks_quote_keep_two_hyphens_under_default_smart_quotes(tmp_path: Path) -> None:
    """Before: with Sphinx's default smart quotes (this test's conf sets none), the notes' and the published
    rows' --overlap-grad-reduce printed as an en dash and one hyphen. The extension's own blocks now keep
    their flags as code; the author's prose is left to smart quotes."""
    index = INDEX + "\nThe author writes --not-a-block-flag here.\n"
    _, soup = _build(tmp_path / "src", index=index)
    text = soup.get_text(" ")
    assert "\u2013overlap-grad-reduce" not in text and "--overlap-grad-reduce" in text
    quoted = {code.get_text() for code in
              soup.select("div.gemm-layout-step code, table.gemm-published-runs-table code")}
    assert "--overlap-grad-reduce" in quoted
    assert "\u2013not-a-block-flag" in text  # outside the extension's blocks: the author's conf decides
