"""Issue 33 in prose: the models page's and the landing page's sentences about where a step's time
goes, its precision plan and its energy, quoted through roles of a named summary.

The committed H100 results carry the blocks; a result measured before them (the H200 results until
their refresh) must make a role quoting them a warning at the role's own line, never a number.
"""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path
from typing import Any

import pytest

from gemm_bench.report import breakdown_figure, precision_plan
from gemm_bench.report.report import Report
from gemm_bench.results.typed import parse
from gemm_benchmark import values
from gemm_benchmark.records import value_key
from tests.helpers import typed_plan

DOCS = Path(__file__).parent.parent / "docs"
CACHE = DOCS / "_gemm_cache"
#: gpt-oss-120b (the issue's case: FP8 loses its step, and the plan is mixed); its H100 result has the blocks.
OSS = "19210ed9493a1e7a"

SUMMARY = """\
.. gemm-benchmark-summary::
   :models: gpt-oss-120b
   :precisions: bf16, fp8-delayed, fp8-current, fp8-block
   :devices: h100, h200
   :missing: note
   :show: table
   :accuracy: sentence
   :name: oss
"""
SENTENCE = ("On the H100, FP8 Delayed's training step spends\n"
            ":gemm-breakdown:`oss@h100 layer-graphed fp8-delayed more` than BF16's and\n"
            ":gemm-breakdown:`oss@h100 layer-graphed fp8-delayed less`; its precision plan keeps\n"
            ":gemm-plan:`oss@h100 layer-graphed fp8-delayed kept` in BF16, and the plan's step runs at\n"
            ":gemm-plan:`oss@h100 layer-graphed fp8-delayed vs-bf16` the speed of the all-BF16 step and\n"
            ":gemm-plan:`oss@h100 layer-graphed fp8-delayed vs-fp8` that of the all-FP8 one; a step takes\n"
            ":gemm-energy:`oss@h100 layer-graphed fp8-delayed joules`.\n")
#: The same words of the GPU whose result lacks the blocks.
LACKING = ("On the H200, FP8 Delayed's step spends\n"
           ":gemm-breakdown:`oss@h200 layer-graphed fp8-delayed more` than BF16's, keeps\n"
           ":gemm-plan:`oss@h200 layer-graphed fp8-delayed kept` in BF16 and takes\n"
           ":gemm-energy:`oss@h200 layer-graphed fp8-delayed joules`.\n")


def _committed(device: str) -> dict[str, Any]:
    return json.loads((CACHE / f"{OSS}--{device}.json").read_text(encoding="utf-8"))


def _without_blocks(doc: dict[str, Any]) -> dict[str, Any]:
    """A result as measured before the breakdown, the plan and the energy were (kept so after a refresh)."""
    doc = {k: v for k, v in doc.items() if k not in ("plan", "energy")}
    doc["layer"] = [{k: v for k, v in cell.items() if k != "breakdown"} for cell in doc.get("layer", [])]
    return doc


def _visible(html: str) -> str:
    return " ".join(re.sub(r"<[^>]+>", "", html).replace("&#8217;", "'").replace("’", "'").split())


@pytest.mark.sphinx("html", testroot="basic", srcdir="step-detail-prose")
def test_the_sentence_resolves_on_the_committed_cache_and_warns_where_a_gpu_lacks_the_blocks(
        app: Any, warning: Any) -> None:
    src = Path(app.srcdir)
    cache = src / "_gemm_cache"
    cache.mkdir(exist_ok=True)
    shutil.copy(CACHE / f"{OSS}--h100-80gb-hbm3.json", cache)
    (cache / f"{OSS}--h200.json").write_text(json.dumps(_without_blocks(_committed("h200"))), encoding="utf-8")
    (src / "index.rst").write_text(f"Prose\n=====\n\n.. toctree::\n\n   other\n\n{SUMMARY}\n{SENTENCE}",
                                   encoding="utf-8")
    lacking_line = 4  # other.rst: title (2 lines), blank, then LACKING's paragraph, a role a line
    (src / "other.rst").write_text("Other\n=====\n\n" + LACKING + "\n" + SUMMARY.replace(
        ":models: gpt-oss-120b", ":models: gpt-oss-120b, llama3-8b").replace(":name: oss", ":name: two"),
                                   encoding="utf-8")
    app.build()
    said = warning.getvalue()

    # The good page: every role resolved, no warning, and the numbers are the result's own.
    assert "index.rst" not in said, said
    doc = _committed("h100-80gb-hbm3")
    expected = values.device_values({"autocast": Report(doc)}, "H100 80GB HBM3", "oss")
    page = _visible((Path(app.outdir) / "index.html").read_text(encoding="utf-8"))
    bars = {b.precision: b for b in breakdown_figure.bars(parse(doc).layer)}
    grew, shrank = breakdown_figure.changes(bars["bf16"], bars["fp8-delayed"])
    assert grew is not None and shrank is not None
    vs_bf16, vs_fp8, _ = precision_plan.plan_speedups(typed_plan(doc))
    assert vs_bf16 is not None and vs_fp8 is not None
    kept = precision_plan.kept_words(doc["plan"]["keep_in_bf16"])
    quoted = {"more": grew.words(), "less": shrank.words(), "kept": kept,
              "vs-bf16": f"{vs_bf16:.2f}×", "vs-fp8": f"{vs_fp8:.2f}×",
              "joules": f"{parse(doc).energies()['fp8-delayed'].energy_mj / 1000:.3g} J"}
    for item, text in quoted.items():
        kind = {"more": "gemm-breakdown", "less": "gemm-breakdown", "joules": "gemm-energy"}.get(item, "gemm-plan")
        assert expected[value_key(kind, "layer-graphed", "fp8-delayed", item)].text == text
        assert text in page, item
    assert f"spends {grew.words()} than BF16's and {shrank.words()}; its precision plan keeps {quoted['kept']}" in page

    # The GPU whose result lacks the blocks: a warning per role at the role's own line (not its
    # paragraph's first, where docutils puts inline text), saying why; the page reads n/a.
    for line, what in enumerate(("breakdown", "plan", "energy"), start=lacking_line + 1):
        assert re.search(rf"other\.rst:{line}: WARNING: .*{what} not measured in this result", said), said
    assert "n/a" in _visible((Path(app.outdir) / "other.html").read_text(encoding="utf-8"))
    # A name quotes one model: a summary of two with a :name: is refused at that option's line.
    name_line = 3 + LACKING.count("\n") + 1 + SUMMARY.splitlines().index("   :name: oss") + 1
    assert re.search(rf"other\.rst:{name_line}: WARNING: .*:name: names one model's result", said), said


def test_more_and_less_are_the_parts_the_sentence_names() -> None:
    doc = _committed("h100-80gb-hbm3")
    bars = {b.precision: b for b in breakdown_figure.bars(parse(doc).layer)}
    out = values.device_values({"autocast": Report(doc)}, "H100", "oss")
    for precision in ("fp8-delayed", "fp8-current", "fp8-block"):
        sentence = breakdown_figure.largest_change(bars["bf16"], bars[precision])
        assert sentence is not None
        for item in ("more", "less"):
            phrase = out[value_key("gemm-breakdown", "layer-graphed", precision, item)].text
            assert phrase and phrase in sentence, (precision, item, sentence)
    reference = out[value_key("gemm-breakdown", "layer-graphed", "bf16", "more")]
    assert not reference.available and "BF16 is the reference" in reference.tooltip


def test_a_part_that_did_not_move_is_no_phrase() -> None:
    """A recipe whose every part is BF16's or below has no ``more``: the role warns, never "0.00 ms more"."""
    parts = dict.fromkeys(breakdown_figure.PART_COLORS, 1.0)
    base = breakdown_figure.Bar("bf16", 7.0, parts)
    faster = breakdown_figure.Bar("fp8-current", 6.0, {**parts, "gemm": 0.0})
    grew, shrank = breakdown_figure.changes(base, faster)
    assert grew is None and shrank is not None and shrank.words() == "1.00 ms less in GEMMs"
    assert breakdown_figure.largest_change(base, faster) == (
        "FP8 Current saves 1.00 ms in GEMMs against BF16: its step is 1.00 ms shorter.")


@pytest.mark.parametrize(("ops", "said"), [
    ([], "no projection"), (["attn_out"], "attention output"), (["mlp_up", "mlp_down"], "MLP up and MLP down"),
    (["qkv", "attn_out", "mlp_up"], "QKV projection, attention output and MLP up"),
    (["kv_down", "kv_up"], "MLA KV down and MLA KV up")])
def test_what_a_plan_keeps_reads_as_a_sentence_names_it(ops: list[str], said: str) -> None:
    assert precision_plan.kept_words(ops) == said


def test_the_site_pages_quote_every_plan_breakdown_and_energy_role_with_a_number(docs_site: Any) -> None:
    """docs/models.rst and docs/index.rst on the committed cache: no role of the three reads n/a (the
    build is -W clean too, but a role that resolved to no number would be the worst way to fail)."""
    pages = ["index", *(f"models/{p.stem}" for p in sorted((DOCS / "models").glob("*.rst")))]  # issue 44
    for page in pages:
        source = (DOCS / f"{page}.rst").read_text(encoding="utf-8")
        roles = re.findall(r":gemm-(?:breakdown|plan|energy):`[^`]+`", source)
        assert roles, page
        soup = docs_site.soup(f"{page}.html")
        assert not soup.select(".gemm-value-error"), page
        assert len(soup.select("abbr.gemm-value")) >= len(roles), page
