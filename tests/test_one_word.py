"""Issue 44 item 2, issue 43 item 4: one word per thing, and one pick everywhere a recipe is named.

Before: rows titled "Training step" meant one layer's step, "Model step" and the CLI's "one layer" sat
beside them and "Whole model" labelled a sum of GEMMs; now every page, table, figure and the CLI say
"the model's step", "one layer's step" and "GEMMs" (:mod:`gemm_bench.question.vocabulary`). Before,
``:gemm-fastest:``-style values and ``gemm-bench report`` named the measure's fastest recipe without
the tie-break the summary's answer applies (Mixtral 8x22B on the H200: FP8 Current, while the answer
said FP8 Delayed); now they ask the same pick (:func:`gemm_bench.report.tie_break.pick`).
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

from gemm_bench.cli.commands import main
from gemm_bench.question import vocabulary
from gemm_bench.report import figures
from gemm_bench.report.report import Report
from gemm_bench.results.cache import read_document
from gemm_benchmark.model_step_values import DEFAULT_G
from gemm_benchmark.records import value_key
from gemm_benchmark.values import device_values
from tests.helpers import typed_plan

CACHE = Path(__file__).resolve().parent.parent / "docs" / "_gemm_cache"
MIXTRAL_8X22B = "bd92f789991e76d6"
#: The words a reader met for three things; none may come back.
OLD_WORDS = re.compile(r"Training step|training step|Whole model|Model step|\bone layer\b(?!'s)")


def _report_text(capsys: pytest.CaptureFixture[str], *args: str) -> str:
    assert main(list(args)) == 0
    return capsys.readouterr().out


def _study(device: str) -> dict[str, Any]:
    return json.loads((CACHE / "studies" / f"loss-parity--{device}.json").read_text(encoding="utf-8"))


def test_the_vocabulary_has_one_word_per_thing() -> None:
    assert vocabulary.MODEL_STEP == "the model's step" and vocabulary.LAYER_STEP == "one layer's step"
    assert vocabulary.model_step_row(8) == "The model's step, G = 8"
    assert vocabulary.LAYER_STEP_TITLES == {"layer-graphed": "One layer's step", "layer": "One layer's step, eager"}


@pytest.mark.parametrize("device", ["h100-80gb-hbm3", "h200"])
def test_report_and_compare_use_the_site_s_words(capsys: pytest.CaptureFixture[str], device: str) -> None:
    path = str(CACHE / f"{MIXTRAL_8X22B}--{device}.json")
    out = _report_text(capsys, "report", path)
    assert not OLD_WORDS.search(out), OLD_WORDS.search(out)
    for title in ("== The model's step (one rank, per micro-batch) ==", "== One layer's step ==",
                  "== One layer's step, eager ==", "== Energy per one layer's step =="):
        assert title in out
    compared = _report_text(capsys, "compare", path, path)
    assert not OLD_WORDS.search(compared), OLD_WORDS.search(compared)


def test_the_gemm_figure_labels_its_sum_as_all_gemms() -> None:
    report = Report(read_document(CACHE / f"{MIXTRAL_8X22B}--h200.json"))
    spec = figures.spec_for(report, "autocast")
    assert spec is not None
    assert spec.panels[0].categories[0].startswith(vocabulary.ALL_GEMMS)


def test_report_names_the_answer_s_pick_with_its_tie_break(capsys: pytest.CaptureFixture[str]) -> None:
    """Mixtral 8x22B on the H200: three recipes tie on the model's step; FP8 Current leads it by noise but
    ends beyond BF16's loss band in the study beside the file: the pick is FP8 Delayed, as on the page."""
    out = _report_text(capsys, "report", str(CACHE / f"{MIXTRAL_8X22B}--h200.json"))
    flat = " ".join(out[out.index("== The answer's pick =="):].split())
    assert flat.startswith("== The answer's pick == FP8 Delayed: 1.")
    assert "tie on the model's step at G = 8" in flat and "FP8 Current ended beyond BF16's seed-to-seed" in flat


def test_report_says_when_no_study_could_break_a_tie(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    copy = tmp_path / f"{MIXTRAL_8X22B}--h200.json"
    copy.write_bytes((CACHE / copy.name).read_bytes())
    out = _report_text(capsys, "report", str(copy))
    assert "no loss-parity study of this GPU beside the file" in " ".join(out.split())


def test_a_role_s_fastest_is_the_answer_s_pick() -> None:
    """Before: ``:gemm-model-speedup:`NAME layer-graphed fastest``` quoted FP8 Current's 1.34× (the
    measure's fastest) while the answer beside it said "train in FP8 Delayed"."""
    report = Report(read_document(CACHE / f"{MIXTRAL_8X22B}--h200.json"))
    found = device_values({"autocast": report}, "H200", "x", _study("h200"))
    value = found[value_key("gemm-model-speedup", "layer-graphed", "fastest", DEFAULT_G)]
    assert "by FP8 Delayed" in value.tooltip and "a tie of FP8 Delayed, FP8 Current or FP8 Block" in value.tooltip
    assert "FP8 Current ended beyond" in value.tooltip
    without = device_values({"autocast": report}, "H200", "x")  # no study: the other rows break it
    assert "a tie of" in without[value_key("gemm-model-speedup", "layer-graphed", "fastest", DEFAULT_G)].tooltip


#: How prose may name a recipe: its display name, or Transformer Engine's name for its scaling.
_RECIPE_WORDS = {"fp8-current": ("FP8 Current", "current scaling"), "fp8-delayed": ("FP8 Delayed", "delayed scaling"),
                 "fp8-block": ("FP8 Block", "block scaling")}
_SPEEDUP_ROLE = re.compile(r"[{:]gemm-(?:step-|model-)?speedup[}:]`[^`]*?\b(fp8-current|fp8-delayed|fp8-block)\b[^`]*`")


def _unnamed_speedups(text: str) -> list[str]:
    """Speedup roles whose clause (from the sentence's start or colon to the role's next comma) names
    no recipe."""
    flat = " ".join(text.split())
    out = []
    for found in _SPEEDUP_ROLE.finditer(flat):
        before, after = flat[:found.start()], flat[found.end():]
        ends = [i for i in (after.find(", "), after.find(". ")) if i >= 0]  # "X for FP8 current scaling, ..."
        sentence = before[max(before.rfind(". "), before.rfind(": "), 0):] + after[:min(ends, default=len(after))]
        if not any(word.lower() in sentence.lower() for words in _RECIPE_WORDS.values() for word in words):
            out.append(found.group(0))
    return out


@pytest.mark.parametrize("page", ["tutorial.md", "methodology.rst"])
def test_every_quoted_speedup_in_the_tutorial_names_its_recipe(page: str) -> None:
    """Before: the tutorial quoted "1.53×" and "1.45×" (Llama 3 8B's and Llama 3 70B's autocast GEMMs)
    with no recipe named in the sentence."""
    text = (Path(__file__).resolve().parent.parent / "docs" / page).read_text(encoding="utf-8")
    assert _unnamed_speedups(text) == []


def test_the_recipe_check_finds_an_unnamed_speedup() -> None:
    assert _unnamed_speedups("The GEMMs gain :gemm-speedup:`x autocast fp8-current`.") != []
    assert _unnamed_speedups("With FP8 Current the GEMMs gain :gemm-speedup:`x autocast fp8-current`.") == []


def test_where_plan_and_answer_differ_the_page_says_which_to_follow() -> None:
    """Qwen2.5 72B (TP 8) on the H100: the answer says FP8 Delayed, the plan keeps the attention output in
    BF16 and runs at 0.99× all-FP8. Before, the plan's sentence and code stood there with no word on
    which to follow; now the plan's own measured group decides, by the site's spread rule."""
    from gemm_bench.report.precision_plan import plan_advice, plan_sentence

    doc = read_document(CACHE / "1b59f8aaa83a14db--h100-80gb-hbm3.json")
    block = doc["plan"]
    said = plan_sentence(typed_plan(doc))
    assert "Rather than this plan, train in FP8 Delayed throughout: the plan's step runs at 0.99× all FP8 " \
           "Delayed" in said and "gains no speed here" in said
    faster = {**block, "steps": [({**c, "ms": c["ms"] * 0.8, "stats": {**c["stats"], "median_ms": c["ms"] * 0.8,
                                                                       "samples_ms": [v * 0.8 for v in
                                                                                      c["stats"]["samples_ms"]]}}
                                  if c["step"] == "plan" else c) for c in block["steps"]]}
    assert plan_advice(typed_plan({**doc, "plan": faster})).startswith(
        "Follow the plan rather than FP8 Delayed throughout: keeping")
    without = {**block, "steps": [c for c in block["steps"] if c["step"] != "plan"]}
    assert plan_advice(typed_plan({**doc, "plan": without})) == ""
