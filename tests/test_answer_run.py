"""The answer speaks of the run the reader launches (issue 41 item 4, issue 42 item 5).

Each model's answer sentence states the preset layout in words, the picked recipe's and BF16's tokens per
second per GPU with communication in, the speedup with communication in, and whether the recipe fits in
memory per GPU on that layout, with the rank's compute alone beside it, labelled; every figure checked
here is computed through the library from the committed cache (the ``gemm-layout-step`` and
``gemm-layout-memory`` tables' own functions), never typed. Without a collective sweep the sentence says
that collectives are not in its number; where communication makes another recipe faster beyond the
spread, it says so.
"""

from __future__ import annotations

import dataclasses
import time
from pathlib import Path

import pytest

from gemm_bench.question.devices import device_label
from gemm_bench.question.precisions import BASELINE, PRECISIONS, gemm_modes, layer_modes
from gemm_bench.report.layout_memory import gib, recipe_memory, remedy_sentence
from gemm_bench.report.layout_step import ResultLayoutSteps, Sweep, preset_layout_steps, sweeps
from gemm_bench.report.run_answer import Run, reversal, run_of
from gemm_bench.results import studies
from gemm_benchmark import answer_text, execution
from gemm_benchmark.options import Request
from gemm_benchmark.summary_answer import Measured, RunInputs, panel_sentence, panel_step_modes, summary_asks

ROOT = Path(__file__).resolve().parents[1]
CACHE = ROOT / "docs" / "_gemm_cache"
DOCS = ROOT / "docs"
ASKED = "bf16, fp8-delayed, fp8-current, fp8-block"  # what the models' pages ask
DEVICES = ("H100", "H200")


def _measured(model: str) -> tuple[Request, list[Measured]]:
    """The model page's question (its layout the preset's) and its committed results, one per GPU."""
    ask = summary_asks({"models": model, "precisions": ASKED, "devices": "h100, h200"}, srcdir=DOCS,
                       docdir=DOCS / "models")[0]
    req = ask.request
    found = execution.answer(req.question, precisions=req.precisions, modes=req.modes, devices=req.devices,
                             cache_dir=CACHE, mode="cache", max_age_days=None, build_started=time.time())
    return req, [Measured(d.device, d.result, d.reports) for d in found.devices]


def _sentence(req: Request, measured: Measured, run: RunInputs | None) -> answer_text.Sentence:
    modes = req.modes
    precisions = [p for p in req.precisions if p != BASELINE]
    sentence = panel_sentence(measured, "", gemm_modes(modes), "autocast", layer_modes(modes), precisions, run=run)
    assert sentence is not None
    return sentence


def _sweeps() -> tuple[Sweep, ...]:
    docs, errors = studies.read_studies(CACHE, "tp-comm")
    assert not errors and docs, "the committed cache holds the tp-comm study with its collective sweep"
    return tuple(sweeps(docs))


@pytest.mark.parametrize("model", ["llama3-8b", "mixtral-8x22b"])  # one dense, one mixture of experts
def test_the_sentence_states_the_layout_both_tokens_per_second_the_speedup_and_the_memory(model: str) -> None:
    req, results = _measured(model)
    assert sorted(device_label(m.device).split()[0] for m in results) == list(DEVICES)
    layout = req.question.layout
    for measured in results:
        sentence = _sentence(req, measured, RunInputs(layout, _sweeps()))
        text = sentence.text
        assert sentence.verdict is not None and sentence.basis == "model"
        recipe = sentence.verdict.answer
        assert recipe != BASELINE, text
        # What the gemm-layout-step table computes for this model's preset layout, from the committed cache.
        steps = preset_layout_steps(measured.result, model, _sweeps())
        assert isinstance(steps, ResultLayoutSteps), steps
        mine, base, ratio = steps.step(recipe), steps.step(BASELINE), steps.speedup(recipe)
        assert mine is not None and base is not None and ratio is not None
        assert steps.layout == layout
        name = PRECISIONS[recipe].display
        assert (f"train in {name}: {ratio[0]:.2f}× the tokens per second of BF16 with communication in "
                f"({mine.tokens_per_s:,.0f} per GPU against BF16's {base.tokens_per_s:,.0f} on "
                f"{layout.describe()}") in text, text
        assert ("collectives assumed in part" in text) == (mine.assumed or base.assumed)
        assert sentence.run_speedup == ratio[0] and sentence.layout == layout.describe()
        # What the gemm-layout-memory table computes for the recipe on the same layout.
        config = req.question.config
        assert config is not None
        found = {m.precision: m for m in recipe_memory(measured.result, config, layout)[0]}[recipe]
        mem = found.memory
        said = (f"and it fits in memory per GPU there ({gib(mem.headroom)} free)" if mem.fits else
                f"but it does not fit in memory per GPU there ({gib(-mem.headroom)} over; {remedy_sentence(found)})")
        assert said in text, text
        # The rank's compute alone stays beside, labelled, with the model step's own speedup.
        # the single-GPU model step (the whole model, unsharded), named so: not the layout stage's "rank
        # compute alone" of the layout-step table, which can differ (reviewer, session 15)
        assert f"; the model's step on one GPU, collectives not in it: {sentence.verdict.speedup:.2f}×" in text, text


@pytest.mark.parametrize("model", ["llama3-8b", "gpt-oss-120b"])  # a recipe answer and a stay-in-BF16 answer
def test_without_a_sweep_the_sentence_says_collectives_are_not_in_its_number(model: str) -> None:
    req, results = _measured(model)
    for measured in results:
        sentence = _sentence(req, measured, RunInputs(req.question.layout, ()))
        assert "collectives not in it" in sentence.text and "with communication in" not in sentence.text
        assert sentence.run_speedup is None and sentence.layout == ""
        if sentence.verdict is not None and sentence.verdict.answer == BASELINE:
            assert "one rank's compute with collectives not in it" in sentence.text, sentence.text
        else:
            assert "; one rank's compute, collectives not in it)" in sentence.text, sentence.text


def test_the_committed_answers_are_not_reversed_by_communication() -> None:
    """The picks of the two pages checked above stand with communication in (so no sentence says otherwise)."""
    for model in ("llama3-8b", "mixtral-8x22b"):
        req, results = _measured(model)
        for measured in results:
            sentence = _sentence(req, measured, RunInputs(req.question.layout, _sweeps()))
            assert req.question.layout is not None
            run = run_of(measured.result, req.question.layout, _sweeps())
            assert sentence.verdict is not None
            assert reversal(run, sentence.verdict.answer, PRECISIONS) is None
            assert sentence.reversed_by == "" and "With communication in" not in sentence.text


def _reversed_run(run: Run, faster: str, factor: float) -> Run:
    """``run`` with ``faster``'s rank compute made ``factor`` times as fast (synthetic: to reverse a pick)."""
    assert run.steps is not None
    step = run.steps.step(faster)
    assert step is not None
    quick = dataclasses.replace(step, compute_ms=step.compute_ms / factor, compute_low_ms=step.compute_low_ms / factor,
                                compute_high_ms=step.compute_high_ms / factor)
    return dataclasses.replace(run, steps=dataclasses.replace(run.steps, steps={**run.steps.steps, faster: quick}))


@pytest.mark.parametrize("faster", ["fp8-block", BASELINE])
def test_a_pick_reversed_by_communication_is_said_with_both_speedups(faster: str) -> None:
    req, results = _measured("llama3-8b")
    measured = next(m for m in results if "H200" in m.device)
    layout = req.question.layout
    assert layout is not None
    honest = _sentence(req, measured, RunInputs(layout, _sweeps()))
    assert honest.verdict is not None
    chosen = honest.verdict.answer
    run = _reversed_run(run_of(measured.result, layout, _sweeps()), faster, 3.0)
    turned = reversal(run, chosen, PRECISIONS)
    assert turned is not None and turned.faster == faster and turned.chosen == chosen
    modes = req.modes
    precisions = [p for p in req.precisions if p != BASELINE]
    sentence = answer_text.answer(measured.reports["autocast"], "autocast", precisions,
                                  device=device_label(measured.device),
                                  step_modes=panel_step_modes(measured, gemm_modes(modes), layer_modes(modes)),
                                  run=run)
    assert sentence.verdict is not None and sentence.verdict.answer == chosen  # the pick stays the model step's
    assert sentence.reversed_by == faster
    assert run.steps is not None
    points = run.points(PRECISIONS)
    name, mine = PRECISIONS[faster].display, PRECISIONS[chosen].display
    values = (f"{mine} {points[chosen].value:.2f}× BF16" if faster == BASELINE else
              f"{name} {points[faster].value:.2f}× BF16 against {mine}'s {points[chosen].value:.2f}×")
    assert (f"With communication in, {name} runs faster than {mine} beyond the measured spread ({values})"
            in sentence.text), sentence.text
