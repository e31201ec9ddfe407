"""Reader pass 3, item 16: Mixtral 8x22B on the H100: the answer picks FP8 Current by the model's step at
G = 8 (a three-way tie), while FP8 Delayed is starred on the layer-step row below it; the reader saw
the chosen recipe lose without a word. The answer now says which recipe leads one layer's step, by the
site's one rule (:func:`gemm_bench.report.fastest.decide_fastest`), computed from the stored data."""

from __future__ import annotations

from pathlib import Path

from gemm_bench.report.fastest import Point, decide_fastest, step_points
from gemm_bench.report.report import Report
from gemm_bench.results.cache import read_document
from gemm_benchmark.answer_text import _layer_lead, answer

CACHE = Path(__file__).resolve().parent.parent / "docs" / "_gemm_cache"
MIXTRAL_8X22B_H100 = CACHE / "bd92f789991e76d6--h100-80gb-hbm3.json"
RECIPES = ("bf16", "fp8-delayed", "fp8-current", "fp8-block")


def _answer(path: Path) -> tuple[str, Report]:
    report = Report(read_document(path))
    shown = [p for p in RECIPES if p in report.precisions]
    return answer(report, "autocast", shown, device="H100 80GB HBM3", model="Mixtral 8x22B").text, report


def test_mixtral_8x22b_names_the_layer_step_s_leader() -> None:
    """Issue 43 item 4 turned this case round: the model step's three-way tie is broken by the layer step
    (the tie-break's first row after accuracy, which all three pass on the H100), so the answer picks the
    layer step's leader and names the tie; the clause below is for a pick the layer step does not star."""
    text, report = _answer(MIXTRAL_8X22B_H100)
    lead = decide_fastest(step_points(report, RECIPES, graphed=True))
    assert lead is not None and lead.answer == "fp8-delayed"
    assert "train in FP8 Delayed:" in text and "FP8 Delayed, FP8 Current or FP8 Block tie on" in text, text
    assert f"FP8 Delayed leads one layer's step ({lead.speedup:.2f}× against" in text
    assert "leads one layer's step at" not in text  # the pick leads it: no clause


def test_the_clause_says_beyond_when_the_spreads_part_and_nothing_when_the_choice_leads() -> None:
    current, delayed = Point(1.13, 1.12, 1.14), Point(1.19, 1.18, 1.20)
    assert _layer_lead("fp8-current", {"fp8-current": current, "fp8-delayed": delayed}, True) == (
        "; FP8 Delayed leads one layer's step at 1.19×, beyond FP8 Current's measured spread")
    assert _layer_lead("fp8-current", {"fp8-current": current, "fp8-delayed": delayed}, False).startswith(
        "; FP8 Delayed leads one layer's eager step at 1.19×")
    assert _layer_lead("fp8-delayed", {"fp8-current": current, "fp8-delayed": delayed}, True) == ""
    # no recipe clearly faster than BF16 in the layer step: the row stars none, nothing to say
    assert _layer_lead("fp8-current", {"fp8-current": Point(1.01, 0.9, 1.1), "fp8-delayed": Point(1.02, 0.9, 1.1)},
                       True) == ""
    assert _layer_lead("fp8-current", {"fp8-delayed": delayed}, True) == ""  # the choice has no layer step


def test_answers_whose_model_and_layer_steps_agree_are_unchanged() -> None:
    """Every H100 model result: the clause appears exactly where the layer step stars another recipe."""
    for path in sorted(CACHE.glob("*--h100-80gb-hbm3.json")):
        text, report = _answer(path)
        if report.kind != "model" or "train in " not in text:
            continue
        chosen = next(p for p in RECIPES if f"train in {report_name(p)}:" in text)
        lead = decide_fastest(step_points(report, RECIPES, graphed=True))
        differs = lead is not None and lead.answer not in (chosen, "bf16") and report.model_step() is not None
        assert ("leads one layer's step at" in text) == differs, (path.name, text)


def report_name(precision: str) -> str:
    from gemm_bench.question.precisions import PRECISIONS

    return PRECISIONS[precision].display
