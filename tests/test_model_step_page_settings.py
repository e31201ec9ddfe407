"""Issue 43 item 2: every setting a page states reaches every model-step number it quotes.

The model step is composed from stored parts, so the page's ``:num-microbatches:`` (G) and
``:num-layers:`` (L) are composed exactly from a result measured for another G and L (both are left
out of the question's hash); a vocabulary other than the measured one cannot be recomposed: the
directive warns at its location, no model-step number is shown as valid, and the refresh plans it."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from gemm_bench.question.question import build_question
from gemm_bench.report.report import Report
from tests.fake_model_step import model_step_block

from .conftest import H100, make_document
from .test_correctness import Project

PRECISIONS = ("bf16", "fp8-delayed", "fp8-current")


def _directive(extra: str = "") -> str:
    return (".. gemm-benchmark::\n   :name: l8\n   :model: llama3-8b\n   :precisions: bf16, fp8-delayed, "
            f"fp8-current\n   :modes: autocast\n   :devices: h100\n{extra}\n")


@pytest.fixture
def project(tmp_path: Path) -> Project:
    return Project(tmp_path)


def _store(project: Project) -> dict:
    """A result measured for the stored question (G = 32 from the preset layout's global batch, 32 layers,
    Llama 3's vocabulary)."""
    q = build_question(model="llama3-8b")
    assert q.config is not None and q.config.num_microbatches == 32 and q.config.num_layers == 32
    doc = make_document(q, device=H100, precisions=PRECISIONS, modes=("autocast",))
    doc["model_step"] = model_step_block(q.config, doc["run_id"], PRECISIONS)
    project.store(doc)
    return doc


def _values(project: Project) -> dict[str, tuple[str, str]]:
    return {a.find_parent("li").get_text().split(":")[0]: (a.get_text(), a["title"])
            for a in project.html().select("li abbr")}


def test_the_pages_g_and_layers_reach_every_model_step_role(project: Project) -> None:
    doc = _store(project)
    lines = {
        "tokens": ":gemm-tokens:`l8 layer-graphed fp8-delayed`",
        "tokens4": ":gemm-tokens:`l8 layer-graphed fp8-delayed G=4`",
        "tokens1": ":gemm-tokens:`l8 layer-graphed fp8-delayed G=1`",
        "tflops": ":gemm-model-tflops:`l8 layer-graphed bf16 G=4`",
        "mfu": ":gemm-mfu:`l8 layer-graphed bf16`",
        "speedup": ":gemm-model-speedup:`l8 layer-graphed fp8-current G=4`",
        "memory": ":gemm-memory:`l8 layer-graphed bf16`",
    }
    project.page("index", "T\n=\n\n" + _directive("   :num-microbatches: 4\n   :num-layers: 16\n")
                 + "".join(f"- {k}: {v}\n" for k, v in lines.items()))
    warnings, _ = project.build()
    assert "WARNING" not in warnings, warnings  # G=4 is the page's own G: no "set :num-microbatches:"
    got = _values(project)
    page = build_question(model="llama3-8b", fields={"num_microbatches": 4, "num_layers": 16})
    assert page.config is not None
    summary = Report(doc).model_step(page.config)
    stored = Report(doc).model_step()
    assert summary is not None and stored is not None and summary.microbatches == 4
    d4, d1, b4, c4 = (summary.row("fp8-delayed"), summary.row("fp8-delayed", 1), summary.row("bf16"),
                      summary.row("fp8-current"))
    assert d4 and d1 and b4 and c4 and b4.mfu and c4.speedup
    assert got["tokens"][0] == got["tokens4"][0] == f"{d4.tokens_per_s:,.0f}"
    assert got["tokens1"][0] == f"{d1.tokens_per_s:,.0f}"
    assert got["tflops"][0] == f"{b4.tflops:.0f} TFLOP/s"
    assert got["mfu"][0] == f"{b4.mfu:.0%}"
    assert got["speedup"][0] == f"{c4.speedup:.2f}×"
    # the page's 16 layers, not the stored 32: a different number than the stored question gives
    old = stored.row("fp8-delayed", 1)
    assert old is not None and f"{old.tokens_per_s:,.0f}" != got["tokens1"][0]
    assert got["memory"][0] == f"{summary.memory['bf16'].peak / (1 << 30):.1f} GiB"


def test_another_vocabulary_warns_at_the_directive_and_shows_no_model_step_number(project: Project) -> None:
    _store(project)
    project.page("index", "T\n=\n\n" + _directive("   :vocab-size: 32000\n")
                 + "- tokens: :gemm-tokens:`l8 layer-graphed fp8-delayed`\n")
    warnings, _ = project.build()
    assert re.search(r"index\.rst:4: WARNING: .*:vocab-size:.*", warnings), warnings
    assert "32,000" in warnings or "32000" in warnings, warnings
    text = " ".join(project.html().get_text().split())
    assert re.search(r"tokens: (n/a|not measured)", text), text


def test_the_refresh_plans_the_model_step_of_another_vocabulary() -> None:
    """A page's other :vocab-size: shares the result's hash: the refresh must not call it "fresh"."""
    import json

    from gemm_bench.results.stack import Rules, lacking_blocks, remeasure

    cache = Path(__file__).resolve().parent.parent / "docs" / "_gemm_cache"
    q = build_question(model="llama3-8b")
    other = build_question(model="llama3-8b", fields={"vocab_size": 32000})
    assert other.hash == q.hash
    doc = json.loads((cache / f"{q.hash}--h100-80gb-hbm3.json").read_text())
    assert lacking_blocks(doc, q) == []
    lacks = lacking_blocks(doc, other)
    assert len(lacks) == 1 and "the model's step at the question's padded vocabulary of 32,000" in lacks[0]
    todo = remeasure(doc, other, ["bf16"], ["autocast"], local=None, rules=Rules(max_age_days=None))
    assert todo is not None and "32,000" in todo.why


def test_report_num_layers_scales_the_model_step_too(capsys: pytest.CaptureFixture[str]) -> None:
    """``gemm-bench report --num-layers 16`` scaled the GEMM totals but composed the model step with
    the stored 32 layers."""
    import json

    from gemm_bench.cli.commands import main

    cache = Path(__file__).resolve().parent.parent / "docs" / "_gemm_cache"
    q = build_question(model="llama3-8b")
    path = cache / f"{q.hash}--h100-80gb-hbm3.json"
    assert main(["report", str(path), "--num-layers", "16", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    doc = json.loads(path.read_text())
    # the report reads the file's own question (its stored G: this result was asked before G followed the
    # preset layout's global batch), with the layers the flag asks
    stored_g = doc["question"]["config"]["num_microbatches"]
    page = build_question(model="llama3-8b", fields={"num_layers": 16, "num_microbatches": stored_g})
    summary = Report(doc).model_step(page.config)
    assert summary is not None and data["model_step"]["layers"] == 16
    row = summary.row("bf16")
    got = next(r for r in data["model_step"]["rows"]
               if r["precision"] == "bf16" and r["microbatches"] == summary.microbatches)
    assert row is not None and got["tokens_per_s"] == pytest.approx(row.tokens_per_s)
