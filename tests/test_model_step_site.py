"""The model's training step on the models page (issue 32 item 5): the answer sentence in tokens per
second with its memory, the layer step and GEMMs beside it; the speedup rows, the per-GPU table
(tokens/s, MFU, memory) and the figure; a GPU whose result has no model step says so, never crashes
and never shows another GPU's number."""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path
from typing import Any

import pytest

from gemm_bench.question.precisions import PRECISIONS as ALL
from gemm_bench.question.question import build_question
from gemm_bench.report import model_step_figure
from gemm_bench.report.figure_layout import Text
from gemm_bench.report.layout_memory import gib, recipe_memory
from gemm_bench.report.model_step import GIB
from gemm_bench.report.report import Report
from gemm_bench.results.typed import parse
from gemm_benchmark.values import decide_fastest, model_step_points, total_points
from tests.fake_model_step import model_step_block

from .conftest import H100, H200, make_document
from .test_correctness import Project

PRECISIONS = ("bf16", "fp8-delayed", "fp8-current", "fp8-block")
SUMMARY = ("T\n=\n\n.. gemm-benchmark-summary::\n   :models: llama3-8b\n   :precisions: bf16, fp8-delayed, "
           "fp8-current, fp8-block\n   :modes: autocast\n   :devices: h100, h200\n   :show: table\n")


@pytest.fixture
def project(tmp_path: Path) -> Project:
    return Project(tmp_path)


def _store(project: Project, *, h200_block: bool = False, **block: Any) -> dict[str, Any]:
    # FP8 Delayed clearly ahead: at the preset's G = 32 (its layout's global batch of 128 over DP 4) the
    # default synthetic speeds tie FP8 Delayed and FP8 Current, and these tests read the one-recipe answer
    block.setdefault("speeds", {"fp8-delayed": 1.6})
    q = build_question(model="llama3-8b")
    assert q.config is not None
    doc = make_document(q, device=H100, precisions=PRECISIONS, modes=("autocast",))
    doc["model_step"] = model_step_block(q.config, doc["run_id"], PRECISIONS, **block)
    project.store(doc)
    other = make_document(q, device=H200, precisions=PRECISIONS, modes=("autocast",), speed=1.2)
    if h200_block:
        other["model_step"] = model_step_block(q.config, other["run_id"], PRECISIONS)
    project.store(other)
    return doc


def _panels(project: Project) -> dict[str, Any]:
    soup = project.html()
    return {p.select_one("table.gemm-summary-table caption").get_text().split(" on the ")[1].split(":")[0]: p
            for p in soup.select("div.sphinx-tabs-panel")}


def test_the_answer_speaks_of_the_models_step_in_tokens_per_second_and_memory(project: Project) -> None:
    """Before, the sentence recommended from one layer's step ("the training step runs 1.31× as fast")
    where the result had the model's whole step: the reader's tokens per second and memory unsaid."""
    doc = _store(project)
    project.page("index", SUMMARY)
    warnings, _ = project.build()
    assert "WARNING" not in warnings, warnings
    report = Report(doc, modes=["autocast"])
    summary = report.model_step()
    assert summary is not None
    verdict = decide_fastest(model_step_points(summary, PRECISIONS))
    assert verdict is not None and verdict.answer == "fp8-delayed"
    row, gemms = summary.row("fp8-delayed"), total_points(report, "autocast", PRECISIONS)
    assert row is not None
    g = summary.microbatches  # the question's G (the preset layout's global batch sets it)
    # No tp-comm study in this cache: no layout step is composed, so the number is one rank's compute and the
    # sentence says collectives are not in it; memory per GPU on the question's layout is said beside it
    # (issue 41 item 4), from the gemm-layout-memory table's function.
    question = build_question(model="llama3-8b")
    assert question.config is not None and question.layout is not None
    found = {m.precision: m for m in recipe_memory(parse(doc), question.config, question.layout)[0]}["fp8-delayed"]
    # The synthetic parts fit the fake GPU on the preset's layout (Megatron-Bridge's BF16 gradients and FP8
    # primary weights): the sentence says so with the headroom (the other branch: tests/test_answer_run.py).
    assert found.memory.fits
    panel = _panels(project)["H100 80GB HBM3"]
    sentence = panel.select_one("p.gemm-summary-answer").get_text()
    base = summary.row("bf16")
    assert base is not None
    assert (f"train in FP8 Delayed: {verdict.speedup:.2f}× the tokens per second of BF16 ({row.tokens_per_s:,.0f} "
            f"per GPU against BF16’s {base.tokens_per_s:,.0f}; one rank’s compute, collectives not in it) in the "
            f"model’s step at G = {g} (its autocast GEMMs {gemms['fp8-delayed'].value:.2f}×), and on "
            f"{question.layout.describe()}, it fits in memory per GPU ({gib(found.memory.headroom)} free)") in \
        sentence.replace("'", "’"), sentence
    assert "with communication in" not in sentence
    # the table stars what the sentence recommends, in the model step's row of the question's G
    rows = {tr.td.get_text(): tr for tr in panel.select("table.gemm-summary-table tbody tr")}
    assert list(rows)[:2] == [f"The model's step, G = {g}", "The model's step, G = 1"]
    starred = rows[f"The model's step, G = {g}"].select("td.gemm-fastest")
    assert len(starred) == 1 and starred[0].get_text().startswith(f"{verdict.speedup:.2f}×")
    one = summary.row("fp8-current", 1)
    assert one is not None and one.speedup is not None
    assert f"{one.speedup:.2f}×" in rows["The model's step, G = 1"].get_text()


def test_the_per_gpu_table_gives_tokens_mfu_memory_layers_and_largest_microbatch(project: Project) -> None:
    doc = _store(project, largest={"bf16": 1, "fp8-delayed": 2, "fp8-current": 2, "fp8-block": "CUDA error: boom"})
    project.page("index", SUMMARY)
    warnings, _ = project.build()
    assert "WARNING" not in warnings, warnings
    summary = Report(doc).model_step()
    assert summary is not None
    table = _panels(project)["H100 80GB HBM3"].select_one("table.gemm-model-step-table")
    assert table is not None
    rows = {tr.td.get_text(): [td.get_text() for td in tr.select("td")[1:]] for tr in table.select("tbody tr")}
    rows_of = {p: summary.row(p) for p in PRECISIONS}
    assert rows["Tokens/s, G = 32"] == [f"{r.tokens_per_s:,.0f}" for r in rows_of.values() if r]
    assert rows["MFU vs the BF16 peak, G = 32"] == [f"{r.mfu:.0%}" for r in rows_of.values() if r and r.mfu]
    assert rows["Peak memory, GiB"] == [f"{summary.memory[p].peak / GIB:.1f}" for p in PRECISIONS]
    assert rows["Memory vs BF16, GiB"][0] == "–" and rows["Memory vs BF16, GiB"][1].startswith("+")
    assert rows["Layers that fit, of 32"] == [str(summary.layers_that_fit[p]) for p in PRECISIONS]
    assert rows["Largest micro-batch"][:3] == ["1", "2", "2"]
    assert rows["Largest micro-batch"][3].startswith("n/a")  # the search failed: a note says so, never a number
    notes = " ".join(p.get_text() for p in table.find_parent("div", class_="sphinx-tabs-panel").select("p"))
    # Every recipe is above the GPU here: one plain negative, never "every recipe's ... does not fit".
    assert all(not summary.fits(p) for p in PRECISIONS)
    assert "no recipe’s whole rank fits one GPU" in notes.replace("'", "’"), notes
    # (the answer's sentence may say the layout's rank does not fit: that is memory per GPU, another claim)
    assert not re.search(r"every recipe\S* .{0,80}does not fit", notes), notes
    # What the memory assumes about the optimizer state (issue 35 reader pass): the whole state on
    # each rank, and what Megatron-LM's distributed optimizer divides by the data-parallel size.
    bf16 = summary.memory["bf16"]
    per_param = (bf16.gradients + bf16.optimizer_state) / summary.rank_params
    assert f"whole optimizer state (no distributed optimizer, no ZeRO): {per_param:.1f} bytes per parameter" in notes
    assert "6 + 12/d bytes per parameter" in notes
    assert f"{bf16.optimizer_state / GIB:.1f} GiB FP32 master weights and Adam moments" in notes


def test_the_whole_rank_note_names_the_recipes_that_do_not_fit() -> None:
    """Where only some recipes exceed the GPU, the note names them (and says nothing of the rest)."""
    from gemm_benchmark.summary_answer import model_step_table

    q = build_question(model="llama3-8b")
    assert q.config is not None
    doc = make_document(q, device=H100, precisions=PRECISIONS, modes=("autocast",))
    doc["model_step"] = model_step_block(q.config, doc["run_id"], PRECISIONS)
    report = Report(doc)
    summary = report.model_step()
    assert summary is not None
    between = (summary.memory["bf16"].peak + summary.memory["fp8-block"].peak) / 2
    summary = dataclasses.replace(summary, capacity_bytes=int(between))
    unfit = [p for p in PRECISIONS if summary.fits(p) is False]
    assert unfit and len(unfit) < len(PRECISIONS)
    _, _, notes = model_step_table(report, summary, PRECISIONS[1:], "Llama 3 8B", "H100")
    said = next(n for n in notes if n.startswith("Peak memory above"))
    from gemm_benchmark.answer_text import names
    assert f"under {names(unfit)}, the whole rank does not fit one GPU" in said, said


def test_a_gpu_without_a_model_step_says_so_and_keeps_its_layer_answer(project: Project) -> None:
    """The H200 results have no model step yet: its panel says not measured, its sentence keeps the
    GEMM (or layer-step) basis, and no H100 number appears in it."""
    _store(project)
    project.page("index", SUMMARY)
    warnings, _ = project.build()
    assert "WARNING" not in warnings, warnings
    panel = _panels(project)["H200"]
    assert panel.select_one("table.gemm-model-step-table") is None
    assert panel.select_one(".gemm-model-step-figure") is None
    missing = panel.select_one("td.gemm-model-step-missing")
    assert missing is not None and "not measured on the H200 yet" in missing.get_text()
    sentence = panel.select_one("p.gemm-summary-answer").get_text()
    assert "tokens per second" not in sentence and "the autocast GEMMs run" in sentence


def test_a_recipe_whose_model_step_failed_reads_failed_with_its_reason(project: Project) -> None:
    _store(project, failed={"fp8-current": "CUDA out of memory"})
    project.page("index", SUMMARY)
    warnings, _ = project.build()
    assert "WARNING" not in warnings, warnings
    panel = _panels(project)["H100 80GB HBM3"]
    rows = panel.select("table.gemm-summary-table tbody tr")
    row = next(tr for tr in rows if tr.td.get_text() == "The model's step, G = 32")
    assert row.select("td")[2].get_text().startswith("failed")
    sentence = panel.select_one("p.gemm-summary-answer").get_text()
    assert "FP8 Current failed: CUDA out of memory" in sentence
    notes = " ".join(p.get_text() for p in panel.select("p.gemm-cell-note"))
    assert "failed: CUDA out of memory" in notes


def test_bf16_stays_when_no_recipe_gives_clearly_more_tokens(project: Project) -> None:
    _store(project, speeds={"fp8-delayed": 0.9, "fp8-current": 0.88, "fp8-block": 0.8})  # layer-cached 18 ms / 0.9
    project.page("index", SUMMARY)
    warnings, _ = project.build()
    assert "WARNING" not in warnings, warnings
    sentence = _panels(project)["H100 80GB HBM3"].select_one("p.gemm-summary-answer").get_text()
    assert "stay in BF16: no FP8 recipe gives" in sentence and "tokens per second in the model" in sentence, sentence
    assert "although FP8 Delayed makes the autocast GEMMs alone" in sentence


def test_the_figure_is_drawn_twice_and_every_label_lies_inside_it(project: Project) -> None:
    doc = _store(project)
    summary = Report(doc).model_step()
    assert summary is not None
    for width in (model_step_figure.WIDTH_PT, model_step_figure.WIDE_PT):
        scene = model_step_figure.scene(summary, "H100 80GB HBM3", width)
        texts = [i for i in scene.items if isinstance(i, Text)]
        for text in texts:
            x0, y0, x1, y1 = text.box()
            assert 0 <= x0 and x1 <= width and 0 <= y0 and y1 <= scene.height, (text.text, width)
        words = {t.text for t in texts}
        assert {ALL[p].display for p in PRECISIONS} <= words  # recipe names whole, never cut
        assert f"{summary.row('fp8-delayed').tokens_per_s:,.0f}" in words  # type: ignore[union-attr]
    project.page("index", SUMMARY)
    warnings, _ = project.build()
    assert "WARNING" not in warnings, warnings
    figure = _panels(project)["H100 80GB HBM3"].select_one(".gemm-model-step-figure")
    assert figure is not None and len(figure.select("svg")) == 2  # phone and desktop twins


def test_the_figure_and_the_model_step_summary_import_no_torch_numpy_or_matplotlib() -> None:
    """The docs build draws them on a machine with no GPU stack: pure, as the step breakdown's figure."""
    import subprocess
    import sys

    code = ("import sys\nimport gemm_bench.report.model_step_figure, gemm_bench.report.model_step\n"
            "bad = sorted(m for m in sys.modules if m.split('.')[0] in ('torch', 'transformer_engine', 'numpy',"
            " 'matplotlib', 'sphinx'))\nassert not bad, bad\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr


def test_a_mixture_of_experts_without_a_model_step_is_promised_the_next_refresh(project: Project) -> None:
    """This code measures a mixture of experts' model step (h-moestep): a Mixtral result that lacks it is
    one the next refresh re-measures (results.stack.lacking_blocks agrees), so the cell says so."""
    q = build_question(model="mixtral-8x7b")
    project.store(make_document(q, device=H100, precisions=PRECISIONS, modes=("autocast",)))
    project.page("index", SUMMARY.replace("llama3-8b", "mixtral-8x7b").replace("h100, h200", "h100"))
    warnings, _ = project.build()
    assert "WARNING" not in warnings, warnings
    missing = project.html().select_one("td.gemm-model-step-missing")
    assert missing is not None
    assert "next refresh" in missing.get_text() and "dense layers only" not in missing.get_text()

