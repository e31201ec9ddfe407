"""One recipe per step detail, over the committed cache: the sentence under the step breakdown, the
precision plan and the answer sentence speak of the same recipe (issue 35 reader pass).

The models page once drew gpt-oss-120b's bars with a sentence about FP8 Current (the recipe whose
step moved most: "11.35 ms more in quantization") under an answer, a plan and prose about FP8
Delayed. :func:`gemm_bench.report.precision_plan.step_recipe` is the one rule now; this holds it
against every committed result, as a reader meets them on the page.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
from docutils import nodes

from gemm_bench.question.precisions import BASELINE, PRECISIONS
from gemm_bench.report import breakdown_figure, precision_plan
from gemm_bench.report.report import Report
from gemm_bench.results.typed import parse
from gemm_benchmark import answer_text
from gemm_benchmark.breakdown_render import breakdown_nodes
from tests.helpers import typed_plan

CACHE = Path(__file__).resolve().parent.parent / "docs" / "_gemm_cache"
DISPLAY_TO_ID = {p.display: pid for pid, p in PRECISIONS.items()}
#: The recipe an answer sentence names: the one it recommends, or the best of those that lost to BF16.
_TRAIN_IN = re.compile(r"train in (?P<chosen>[^:]+):")
_ANSWER_RECIPE = re.compile(r"train in (?P<chosen>[^:]+):|\(the best, (?P<best>[^,]+), (?:runs at|gives)|"
                            r"\((?P<within>[^()]+?)'s \d")


def _results_with_bars() -> list[Path]:
    found = []
    for path in sorted(CACHE.glob("*.json")):
        doc = json.loads(path.read_text(encoding="utf-8"))
        if breakdown_figure.bars(parse(doc).layer):
            found.append(path)
    return found


def _answer_recipe(doc: dict[str, Any]) -> str:
    report = Report(doc)
    shown = [p for p in PRECISIONS if p in report.precisions]
    said = answer_text.answer(report, "autocast", shown, device="GPU").text
    # A tie names every tied recipe before the one its tie-break picks ("..., by the tie-break, ...; so
    # train in FP8 Delayed:"): the recommendation, where there is one, is the recipe.
    match = _TRAIN_IN.search(said) or _ANSWER_RECIPE.search(said)
    assert match is not None, said
    return DISPLAY_TO_ID[next(g for g in match.groups() if g).strip()]


def test_the_committed_cache_has_step_breakdowns() -> None:
    assert _results_with_bars()


@pytest.mark.parametrize("path", _results_with_bars(), ids=lambda p: p.stem)
def test_the_breakdown_sentence_speaks_of_the_plans_and_the_answers_recipe(path: Path) -> None:
    doc = json.loads(path.read_text(encoding="utf-8"))
    recipe = precision_plan.step_recipe(Report(doc))
    assert recipe is not None and recipe != BASELINE
    if isinstance(doc.get("plan"), dict) and doc["plan"]["recipe"] != recipe:
        # a plan stored by the older rule (the fastest layer step) names its own recipe
        said_plan = precision_plan.plan_sentence(typed_plan(doc))
        assert said_plan.startswith(f"With {PRECISIONS[doc['plan']['recipe']].display},"), said_plan
    said = [n.astext() for n in breakdown_nodes(parse(doc), "GPU", "t")
            if isinstance(n, nodes.paragraph) and "gemm-breakdown-sentence" in n["classes"]]
    assert len(said) == 1 and said[0].startswith(PRECISIONS[recipe].display + " "), (recipe, said)
    assert _answer_recipe(doc) == recipe, said[0]
