""""All models compared" ranks by the model's step the answers use (issue 44 item 2).

The section once led with whole-model GEMM speedups, a quantity no answer rests on. It now leads with
the model's step per GPU, models ranked by the speedup of the recipe their answer picks (tie-break
included), that recipe marked ★; the GEMMs figure follows. One Sphinx build of the section exactly as
docs/models.rst writes it, over the committed cache; the expected picks are computed here through the
library, by the path every model's page and the answers table take (:func:`.summary_answer.panel_sentence`
over :func:`.execution.answer` and the GPU's loss-parity study).
"""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path
from typing import Any

import pytest

from gemm_bench.question.devices import device_label
from gemm_bench.question.precisions import BASELINE, PRECISIONS, gemm_modes, layer_modes
from gemm_bench.report import figures
from gemm_bench.report.figure_spec import FigureSpec
from gemm_bench.report.models_compared import ANSWER_MARK, STAY_IN_BF16, Compared, category, model_step_spec
from gemm_bench.report.report import Report
from gemm_bench.results import loss_parity_schema, studies
from gemm_bench.results.stack import MODEL_STEP_LACKING, lacking_blocks
from gemm_benchmark import execution
from gemm_benchmark.render_block import FIGURE_DIR
from gemm_benchmark.summary import GEMMS_FIGURE_TITLE, MODEL_STEP_FIGURE_TITLE, measured_of
from gemm_benchmark.summary_answer import model_label, panel_sentence, summary_asks

from .test_correctness import Project

DOCS = Path(__file__).resolve().parent.parent / "docs"
CACHE = DOCS / "_gemm_cache"


def _section_directive() -> str:
    """The summary of "All models compared" as docs/models.rst writes it (the test asks what the site asks)."""
    text = (DOCS / "models.rst").read_text(encoding="utf-8")
    section = text.partition("\nAll models compared\n")[2]
    found = re.search(r"^\.\. gemm-benchmark-summary::\n(?:   .*\n)+", section, re.MULTILINE)
    assert found, "docs/models.rst's All models compared has no gemm-benchmark-summary"
    return found.group(0)


def _options(directive: str) -> dict[str, str]:
    lines = directive.splitlines()[1:]
    return {m["name"]: m["value"] for m in (re.match(r"   :(?P<name>[\w-]+):\s*(?P<value>.*)", line) for line in lines)
            if m}


def _answers() -> list[tuple[str, str, Report, Any]]:
    """(model label, GPU label, autocast report, answer verdict) for every model and GPU of the section,
    through the library path a model's page takes."""
    options = _options(_section_directive())
    out = []
    for ask in summary_asks(options, srcdir=DOCS, docdir=DOCS):
        req = ask.request
        answer = execution.answer(req.question, precisions=req.precisions, modes=req.modes, devices=req.devices,
                                  cache_dir=CACHE, mode="cache", max_age_days=None, build_started=0.0)
        assert answer.devices, f"{ask.entry}: no committed result"
        for device in answer.devices:
            study = studies.study_path(CACHE, loss_parity_schema.NAME, device.device)
            parity = studies.read_study(study) if study.is_file() else None
            measured = measured_of(device)
            per_gemm = gemm_modes(req.modes)
            sentence = panel_sentence(
                measured, "", per_gemm, "autocast", layer_modes(req.modes),
                [p for p in req.precisions if p != BASELINE], loss_parity=parity,
                model_step_pending=MODEL_STEP_LACKING in lacking_blocks(device.result, req.question))
            assert sentence is not None and sentence.verdict is not None, (ask.entry, device.device)
            assert sentence.basis == "model", f"{ask.entry} on {device.device}: the answer is not the model's step's"
            out.append((ask.label or model_label(ask.preset, ask.tp, ask.ep), device_label(device.device),
                        device.reports["autocast"], sentence.verdict))
    return out


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> tuple[Project, dict[str, FigureSpec]]:
    project = Project(tmp_path_factory.mktemp("compared"))
    shutil.copytree(CACHE, project.cache)
    project.page("index", f"Compared\n========\n\n{_section_directive()}")
    warnings, _ = project.build(fresh=True)
    assert "WARNING" not in warnings, warnings
    specs = {}
    for path in sorted((project.build_dir / "doctrees" / FIGURE_DIR).glob("*.spec")):
        spec = figures.load_spec(path.with_suffix(".svg"))
        assert spec is not None, f"{path}: not read back (a field the spec reader does not know?)"
        specs[spec.title] = spec
    return project, specs


def _category_model(label: str) -> str:
    return label.removesuffix(f" ({STAY_IN_BF16})")


def test_the_model_step_figure_leads_and_ranks_by_the_answers_picks(
        built: tuple[Project, dict[str, FigureSpec]]) -> None:
    project, specs = built
    assert MODEL_STEP_FIGURE_TITLE in specs, f"no figure of the model's step; figures: {sorted(specs)}"
    assert GEMMS_FIGURE_TITLE in specs, "the GEMMs figure is gone"
    labels = [str(svg["aria-label"]) for svg in project.html().select("div.gemm-summary svg[aria-label]")]
    assert labels[0].startswith("The model's step"), labels  # first: what the answers use
    summary = project.html().select_one("div.gemm-summary")
    assert summary is not None
    lead = summary.find(["svg", "table"])  # before the SQNR table too: the section leads with it
    assert lead is not None and lead.name == "svg" and str(lead["aria-label"]).startswith("The model's step"), lead
    assert any(label.startswith("GEMMs") for label in labels), labels
    spec = specs[MODEL_STEP_FIGURE_TITLE]
    answers = _answers()
    gpus = list(dict.fromkeys(gpu for _, gpu, _, _ in answers))
    assert [panel.title.partition(":")[0] for panel in spec.panels] == gpus
    for panel, gpu in zip(spec.panels, gpus, strict=True):
        picks = {model: verdict for model, g, _, verdict in answers if g == gpu}
        shown = [_category_model(c) for c in panel.categories]
        assert sorted(shown) == sorted(picks), (gpu, shown)
        speedups = [picks[m].speedup for m in shown]
        assert speedups == sorted(speedups, reverse=True), f"{gpu}: not in the answers' order: {shown} {speedups}"
        for i, model in enumerate(shown):
            starred = [s.precision for s in panel.series if s.mark(i) == ANSWER_MARK]
            pick = picks[model].answer
            assert starred == ([] if pick == BASELINE else [pick]), (gpu, model, starred, pick)
            assert (panel.categories[i] != model) == (pick == BASELINE), panel.categories[i]


def test_the_model_step_figure_draws_the_model_step_rows(built: tuple[Project, dict[str, FigureSpec]]) -> None:
    """Every bar and whisker is the model-step row's speedup and spread at the question's G."""
    spec = built[1][MODEL_STEP_FIGURE_TITLE]
    reports = {(model, gpu): report for model, gpu, report, _ in _answers()}
    checked = 0
    for panel in spec.panels:
        gpu = panel.title.partition(":")[0]
        for i, label in enumerate(panel.categories):
            summary = reports[_category_model(label), gpu].model_step()
            assert summary is not None
            for series in panel.series:
                row = summary.row(series.precision)
                if row is None or row.speedup is None:
                    assert series.values[i] is None and series.missing_reason(i), (label, gpu, series.precision)
                    continue
                assert (series.values[i], series.low[i], series.high[i]) == (
                    row.speedup, row.speedup_low, row.speedup_high), (label, gpu, series.precision)
                checked += 1
    assert checked >= 2 * 10 * 3


def test_the_mark_is_drawn_after_the_picked_value() -> None:
    """The SVG writes ★ after the answer's recipe's value only, and the spec file keeps the marks."""
    model, gpu, report, verdict = next(a for a in _answers() if a[3].answer != BASELINE)
    spec = model_step_spec([Compared(model, gpu, report, verdict.answer, verdict.speedup)],
                           [p for p in PRECISIONS if p != BASELINE])
    assert spec is not None
    svg = figures.render(spec, "svg").decode("utf-8")
    assert svg.count(ANSWER_MARK) == 2  # the picked bar's value, and the value axis' label saying what ★ is
    assert f"{verdict.speedup:.2f}× {ANSWER_MARK}" in svg
    assert figures.spec_from_json(json.loads(figures.spec_to_json(spec))) == spec


def test_a_model_whose_answer_rests_elsewhere_ranks_last_and_says_so() -> None:
    (model, gpu, report, verdict), (other, _, other_report, other_verdict) = _answers()[:2]
    older = Compared(model, gpu, report, verdict.answer, None, "one layer's step")
    spec = model_step_spec([older, Compared(other, gpu, other_report, other_verdict.answer, other_verdict.speedup)],
                           ["fp8-current"])
    assert spec is not None
    assert spec.panels[0].categories == (other, category(older))
    assert category(older) == f"{model} (answer on one layer's step)"
    assert not spec.panels[0].series[0].mark(1)  # its answer is not the model's step's: nothing starred
