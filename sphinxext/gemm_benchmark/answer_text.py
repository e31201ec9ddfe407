"""The summary's words: the answer sentence per model and GPU, cell notes, SQNR once per recipe and pass.

Everything here is computed from the same :class:`~gemm_bench.report.report.Report` objects and the
same :func:`.values.decide_fastest` rule as the summary's table, so the sentence cannot recommend
what the table does not star: "train in X" only where X's training step is faster than BF16's
beyond the two steps' measured spread, "stay in BF16" otherwise.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Mapping, Sequence
from typing import Any

from gemm_bench.question.precisions import BASELINE, PRECISIONS
from gemm_bench.question.shapes import PASSES
from gemm_bench.question.vocabulary import LAYER_STEP, MODEL_STEP, layer_step, model_step_at
from gemm_bench.report.fastest import TIE_ORDER, TieBreak, listed
from gemm_bench.report.layout_memory import gib, remedy_sentence
from gemm_bench.report.layout_step import assumed_words
from gemm_bench.report.loss_parity_words import band_of, gap_in_band
from gemm_bench.report.model_step import ModelStep, part_absence
from gemm_bench.report.report import Report
from gemm_bench.report.run_answer import Reversal, Run, reversal
from gemm_bench.report.tie_break import GEMMS, MODEL, STEP, pick
from gemm_bench.results import loss_parity_schema
from gemm_benchmark.render_table import FLAG_MARK
from gemm_benchmark.values import (
    Fastest,
    Point,
    decide_fastest,
    model_step_points,
    reason_clause,
    step_absence,
    step_points,
    total_points,
    unavailable_text,
)

#: Note markers of a table's cells without a number (the reason is written under the table).
_MARKS = "¹²³⁴⁵⁶⁷⁸⁹"


class Notes:
    """Numbered notes under one table: each distinct text once, its mark in every cell it explains;
    then one line per number resting on a time the profiler cross-check flags (its cell carries
    :data:`~.render_table.FLAG_MARK`), with the flag and its ratio."""

    def __init__(self) -> None:
        self.texts: list[str] = []
        self.flags: list[str] = []

    def flag(self, text: str) -> None:
        if text not in self.flags:
            self.flags.append(text)

    def mark(self, text: str) -> str:
        if text not in self.texts:
            self.texts.append(text)
        return _mark(self.texts.index(text))

    def lines(self) -> list[str]:
        return [f"{_mark(i)} {text}" for i, text in enumerate(self.texts)] + [f"{FLAG_MARK} {t}" for t in self.flags]


def _mark(index: int) -> str:
    return _MARKS[index] if index < len(_MARKS) else f"[{index + 1}]"


def _name(precision: str) -> str:
    return PRECISIONS[precision].display


def names(precisions: Sequence[str]) -> str:
    """"A", "A and B", "A, B and C"."""
    return listed([_name(p) for p in precisions])


def _absent(statuses: Mapping[str, tuple[str, str]]) -> str:
    """"FP8 Delayed failed: CUDA out of memory; NVFP4 unsupported on this GPU": why precisions have
    no number (missing ones unsaid); a failure with its reason, as every cell and role says it."""
    by_word: dict[str, list[str]] = {}
    for precision, (status, reason) in statuses.items():
        if status == "failed":
            word = unavailable_text(status, reason, limit=80)
        elif status == "unsupported":
            word = "unsupported on this GPU"
        else:
            continue
        by_word.setdefault(word, []).append(precision)
    return "; ".join(f"{names(ps)} {word}" for word, ps in by_word.items())


@dataclasses.dataclass(frozen=True)
class Sentence:
    """The answer in words; ``link`` is a phrase of ``text`` to link to ``link_doc`` (the loss-parity
    page), "" for none."""

    text: str
    link: str = ""
    link_doc: str = ""
    #: The recipe the answer speaks of (the one it recommends, else the best of those that lost to
    #: BF16; "" for none): the step's breakdown sentence under the panel speaks of it too.
    recipe: str = ""
    #: The decision the words state (its ``answer`` the recipe to train in, BF16 for "stay in BF16",
    #: its ``speedup`` on :attr:`basis`), None where the sentence recommends nothing: a compact view
    #: of the answer (the landing page's table of every model) reads it here, never deciding again.
    verdict: Fastest | None = None
    #: What :attr:`verdict` was decided on: ``model`` (the model's training step at G =
    #: :attr:`microbatches`), ``step`` (one layer's training step) or ``gemms`` (the GEMMs alone).
    basis: str = ""
    microbatches: int | None = None
    #: The run the reader launches (issue 41 item 4, 42 item 5): the recipe's speedup over BF16 with
    #: communication in, on :attr:`layout` (its words), None where no layout step could be composed
    #: (the sentence then says collectives are not in its number) or where the answer is BF16.
    run_speedup: float | None = None
    layout: str = ""
    #: The recipe that runs faster than the answer beyond the measured spread with communication in
    #: (the sentence says so), "" where communication does not reverse the pick.
    reversed_by: str = ""


#: The page of the loss-parity study (:mod:`.study_loss_parity`) that the answer's words link to.
LOSS_PARITY_DOC = "loss-parity"
LOSS_PARITY_PHRASE = "the loss-parity study"


#: What an answer resting on one layer's step adds where the question's model step is not measured yet.
PENDING = f"; {MODEL_STEP} is not measured on this GPU yet (the next refresh measures it)"


def answer(report: Report, mode: str, precisions: Sequence[str], *, device: str, model: str = "",
           step_modes: Sequence[str] = ("layer-graphed", "layer"),
           loss_parity: Mapping[str, Any] | None = None, model_step_pending: bool = False,
           run: Run | None = None) -> Sentence:
    """The recommendation for ``model`` on ``device``: from the model's step (issue 32: tokens
    per second at the question's G, with the memory it costs, the layer step and the GEMMs beside it)
    where the result has one, else from its layer's training step in the first of ``step_modes`` (the
    step rows the table shows, CUDA-graphed first) that has a number or a failure, else from its
    GEMMs in ``mode`` (autocast, or the mode the summary shows); the accuracy it costs (SQNR), and
    what ``loss_parity`` (this GPU's loss-parity study document) found for it.

    A step that failed, BF16's included, is never passed over for the GEMMs: the sentence says
    it failed, with the reason. ``model_step_pending``: the question has a model step this result lacks
    (an older result): the sentence names one layer's step as its basis and says the model's is not
    measured on this GPU yet, beside a tab whose answer rests on the model's step.

    ``run``: the result's run on the question's layout (:func:`gemm_bench.report.run_answer.run_of`):
    an answer on the model's step speaks of it (the layout in words, tokens per second per GPU of the
    recipe and of BF16 with communication in, the speedup, memory per GPU and whether it fits), keeps
    the rank's compute alone beside it, labelled, and says where communication reverses the pick. The
    pick itself stays the model step's (the measured one); without a composed step the sentence says
    that collectives are not in its number."""
    others = [p for p in precisions if p != BASELINE]
    gemm_words = "the autocast GEMMs" if mode == "autocast" else "the pre-quantized GEMMs"
    gemm_points = total_points(report, mode, precisions)
    gemms = pick(gemm_points, report, precisions, basis=GEMMS, loss_parity=loss_parity, gemm_mode=mode)
    who = f"{model} on the {device}" if model else f"On the {device}"
    subject = f"{who}: " if model else f"{who}, "
    basis, points, verdict, quantity = "gemms", gemm_points, gemms, gemm_words
    graphed = False
    base_status, base_reason = report.total(mode, BASELINE).status, report.total(mode, BASELINE).reason
    absent = {p: (report.total(mode, p).status, report.total(mode, p).reason) for p in others if p not in gemm_points}
    for step_mode in step_modes:
        graphed = step_mode == "layer-graphed"
        found = step_points(report, precisions, graphed=graphed)
        base = report.step(BASELINE, graphed=graphed)
        statuses = {p: step_absence(report, p, graphed=graphed) for p in others if p not in found}
        if found or base.status == "failed" or any(s == "failed" for s, _ in statuses.values()):
            basis, points, verdict = "step", found, decide_fastest(found)
            quantity = layer_step(graphed)
            base_status, base_reason = base.status, base.reason
            absent = statuses
            break
    layer_points = points if basis == "step" else {}
    summary = report.model_step()
    model_points = model_step_points(summary, precisions)
    if summary is not None and model_points:  # the model's step: what a reader's training run sees
        basis, points, verdict = "model", model_points, decide_fastest(model_points)
        quantity = model_step_at(summary.microbatches)
        base_status = "measured"  # BF16's model step is the reference of every point above
        absent = {p: part_absence(report.result, p) for p in others if p not in model_points}
    if base_status == "failed":
        return Sentence(f"{subject}no recommendation: {unavailable_text('failed', base_reason, limit=80)} "
                        f"(BF16, the reference of every speedup of {quantity}).")
    lost = _absent(absent)
    if verdict is None:
        why = f" ({lost})" if lost else ""
        return Sentence(f"{subject}no recommendation: no FP8 or FP4 precision has a number for {quantity}{why}.")
    # A tie on the answer's own measure is broken by the one tie-break (accuracy, the other rows, energy),
    # and the sentence names the tie and what broke it before the recipe it recommends.
    verdict = pick(points, report, precisions, basis=MODEL if basis == "model" else STEP if basis == "step"
                   else GEMMS, loss_parity=loss_parity, graphed=graphed, gemm_mode=mode)
    assert verdict is not None
    tie = verdict.tie_break
    lead = subject + (tie_words(tie, quantity) if tie is not None else "")
    words: list[str] = []
    link = ""
    recipe = verdict.answer
    run_speedup: float | None = None
    turned: Reversal | None = None
    if basis == "model" and summary is not None:
        words.append(_model_words(report, summary, verdict, points, lead, layer_points, graphed,
                                  gemm_points, gemm_words, gemms, none="of the recipes measured, none" if lost
                                  else "no FP8 recipe", run=run))
        if verdict.answer == BASELINE:
            recipe = max(points, key=lambda p: points[p].value)
        if run is not None and run.steps is not None:
            ratio = run.steps.speedup(verdict.answer)
            run_speedup = ratio[0] if ratio is not None and verdict.answer != BASELINE else None
            turned = reversal(run, verdict.answer, precisions)
            if turned is not None:
                words.append(reversal_words(turned))
    elif verdict.answer != BASELINE:
        chosen = verdict.answer
        verb = "runs" if basis == "step" else "run"  # the step runs; the GEMMs run
        text = f"{lead}train in {_name(chosen)}: {quantity} {verb} {verdict.speedup:.2f}× as fast as in BF16"
        text += flag_clause(report, chosen, mode, step=basis == "step", graphed=graphed)
        if basis == "step" and chosen in gemm_points:
            text += f" (its {gemm_words.removeprefix('the ')} {gemm_points[chosen].value:.2f}×)"
        elif basis == "gemms":
            text += " (no step is measured yet)"
        words.append(text + _ties(verdict) + (PENDING if basis == "step" and model_step_pending else "") + ".")
    else:
        rest = {p: v for p, v in points.items() if p != BASELINE}
        best = recipe = max(rest, key=lambda p: rest[p].value)
        measured = "of the recipes measured, none" if lost else "no FP8 recipe"
        if rest[best].value <= 1.0:
            text = (f"{subject}stay in BF16: {measured} makes {quantity} faster "
                    f"(the best, {_name(best)}, runs at {rest[best].value:.2f}× BF16's speed)")
        else:
            text = (f"{subject}stay in BF16: {measured} makes {quantity} clearly faster "
                    f"({_name(best)}'s {rest[best].value:.2f}× is within the measured spread of BF16's speed)")
        text += flag_clause(report, best, mode, step=basis == "step", graphed=graphed)
        if basis == "step" and gemms is not None and gemms.answer != BASELINE:
            text += (f", although {_name(gemms.answer)} makes {gemm_words} alone "
                     f"{gemms.speedup:.2f}× as fast")
        words.append(text + (PENDING if basis == "step" and model_step_pending else "") + ".")
    if verdict.answer != BASELINE:
        words.append(_accuracy(report, mode, precisions, verdict.answer, points))
        parity = loss_parity_words(loss_parity, verdict.answer)
        if parity:
            words.append(parity)
            link = LOSS_PARITY_PHRASE
    if lost:
        words.append(f"No number: {lost} (see the notes under the table).")
    said_run = basis == "model" and run is not None and run.steps is not None
    return Sentence(" ".join(w for w in words if w), link, LOSS_PARITY_DOC if link else "", recipe, verdict, basis,
                    summary.microbatches if basis == "model" and summary is not None else None,
                    run_speedup, run.layout.describe() if said_run and run is not None else "",
                    turned.faster if turned is not None else "")


def tie_words(tie: TieBreak, quantity: str) -> str:
    """"FP8 Delayed, FP8 Current or FP8 Block tie on the model's step at G = 8 (FP8 Delayed 1.33×,
    ...); tie-break (accuracy, then ...): FP8 Current ended beyond ...; so ": the tie an answer names before
    the recipe its tie-break picks ("train in ...")."""
    # Short, so the first answer stays on a phone's first screen: "tie" is the site's word for speedups within
    # the fastest's measured spread (the table's ≈ and its title say so).
    verb = "tie" if " or " in tie.names else "ties"
    return f"{tie.names} {verb} on {quantity} ({tie.values}); tie-break ({TIE_ORDER}): {tie.why}; so "


def _ties(verdict: Fastest) -> str:
    """"; FP8 Current is within its measured spread" (the precisions tied with the answer), or "" (also
    where a tie-break chose the answer: the sentence named the tie before it)."""
    if not verdict.tied or verdict.tie_break is not None:
        return ""
    return f"; {names(verdict.tied)} {'is' if len(verdict.tied) == 1 else 'are'} within its measured spread"


def _model_words(report: Report, summary: ModelStep, verdict: Fastest, points: Mapping[str, Point], subject: str,
                 layer_points: Mapping[str, Point], graphed: bool, gemm_points: Mapping[str, Point], gemm_words: str,
                 gemms: Fastest | None, *, none: str, run: Run | None = None) -> str:
    """The model step's recommendation, speaking of the run the reader launches where ``run`` has its
    steps: "train in FP8 Delayed: 1.37× the tokens per second of BF16 with communication in (15,013 per
    GPU against BF16's 10,982 on 8 GPUs: CP 2, DP 4, distributed optimizer, G = 32; collectives assumed
    in part), and it fits in memory per GPU there (48.7 GiB free); the model's step on one GPU, collectives
    not in it: 1.39× in the model's step at G = 32 (one layer's step 1.44×, its autocast GEMMs 1.69×)";
    without them the rank's compute leads, saying collectives
    are not in it. Or why BF16 stays (``none``: who gives no more), with the run beside."""
    where = f"in {model_step_at(summary.microbatches)}"
    steps = run.steps if run is not None else None
    if verdict.answer == BASELINE:
        best = max(points, key=lambda p: points[p].value)
        value = points[best].value
        # Where no layout step is composed, the figures are the rank's compute: said in the sentence.
        scope = "" if steps is not None else ", one rank's compute with collectives not in it"
        text = (f"{subject}stay in BF16: {none} gives more tokens per second {where}{scope} (the best, "
                f"{_name(best)}, gives {value:.2f}× BF16's)" if value <= 1.0 else
                f"{subject}stay in BF16: {none} gives clearly more tokens per second {where}{scope} ({_name(best)}'s "
                f"{value:.2f}× is within the measured spread of BF16's)")
        if gemms is not None and gemms.answer != BASELINE:
            text += f", although {_name(gemms.answer)} makes {gemm_words} alone {gemms.speedup:.2f}× as fast"
        return text + _run_beside(run, best) + "."
    chosen = verdict.answer
    row = summary.row(chosen)
    assert row is not None  # a point is a row's speedup
    base = summary.row(BASELINE)
    # BF16's own figure beside the recipe's (a reader compares the two).
    against = f" against BF16's {base.tokens_per_s:,.0f}" if base is not None else ""
    beside = []
    if chosen in layer_points:
        beside.append(f"{LAYER_STEP} {layer_points[chosen].value:.2f}×"
                      + flag_clause(report, chosen, "", step=True, graphed=graphed))
    if chosen in gemm_points:
        beside.append(f"its {gemm_words.removeprefix('the ')} {gemm_points[chosen].value:.2f}×")
    rows_beside = f" ({', '.join(beside)})" if beside else ""
    lead = _run_lead(run, chosen)
    if lead is not None:  # the run with communication leads; the rank's compute alone stays beside, labelled
        fits = _fits_words(run, chosen)
        # the rank's own tokens per second are the table's row below: the clause keeps its speedup (a
        # phone's first screen holds the answer only so, issue 44 item 1's browser check)
        text = (f"{subject}train in {_name(chosen)}: {lead}" + (f", {fits}" if fits else "")
                + f"; the model's step on one GPU, collectives not in it: {verdict.speedup:.2f}× {where}{rows_beside}")
    else:  # no layout step: the number is the rank's compute, and the sentence says so
        text = (f"{subject}train in {_name(chosen)}: {verdict.speedup:.2f}× the tokens per second of BF16 "
                f"({row.tokens_per_s:,.0f} per GPU{against}; one rank's compute, collectives not in it) {where}"
                f"{rows_beside}")
        on_layout = _fits_words(run, chosen, on=run.layout.describe()) if run is not None else ""
        memory = summary.memory_words(chosen)  # the whole rank's, where no layout's memory is known
        if on_layout:
            text += f", {on_layout}"
        elif memory:
            text += f", {memory}"
    return text + _ties(verdict) + _layer_lead(chosen, layer_points, graphed) + "."


def _run_lead(run: Run | None, chosen: str) -> str | None:
    """"1.37× the tokens per second of BF16 with communication in (15,013 per GPU against BF16's 10,982 on
    8 GPUs: ...; collectives assumed in part)": the run's step of ``chosen`` and BF16's, from the
    ``gemm-layout-step`` table's composition; None where either has no step."""
    steps = run.steps if run is not None else None
    if steps is None:
        return None
    mine, base, ratio = steps.step(chosen), steps.step(BASELINE), steps.speedup(chosen)
    if mine is None or base is None or ratio is None:
        return None
    words = assumed_words(mine, base)
    assumed = f"; {words}" if words else ""
    return (f"{ratio[0]:.2f}× the tokens per second of BF16 with communication in ({mine.tokens_per_s:,.0f} per "
            f"GPU against BF16's {base.tokens_per_s:,.0f} on {steps.layout.describe()}{assumed})")


def _run_beside(run: Run | None, best: str) -> str:
    """What a stay-in-BF16 answer adds about the run: "; with communication in, on 64 GPUs: ..., BF16 gives
    2,309 tokens/s per GPU and FP8 Delayed 0.98× BF16's (2,256), and BF16 fits in memory per GPU there
    (70.1 GiB free)"; "" without the run's steps (the sentence then says the figures are one rank's)."""
    steps = run.steps if run is not None else None
    if run is None or steps is None:
        return ""
    base, other, ratio = steps.step(BASELINE), steps.step(best), steps.speedup(best)
    if base is None:
        return ""
    text = (f"; with communication in, on {steps.layout.describe()}, BF16 gives {base.tokens_per_s:,.0f} tokens/s "
            "per GPU")
    if other is not None and ratio is not None:
        text += f" and {_name(best)} {ratio[0]:.2f}× BF16's ({other.tokens_per_s:,.0f})"
    words = assumed_words(base, other)
    if words:
        text += f" ({words})"
    fits = _fits_words(run, BASELINE, who="BF16")
    return text + (f", {fits}" if fits else "")


def _fits_words(run: Run | None, precision: str, *, who: str = "it", on: str = "") -> str:
    """"and it fits in memory per GPU there (48.7 GiB free)", "but it does not fit in memory per GPU there
    (11.9 GiB over; selective recompute would make it fit: 70.1 GiB)" (``on``: the layout in words, said
    where the sentence has not named it: "and on 8 GPUs: ..., it fits ..."): the ``gemm-layout-memory``
    table's composition for ``precision`` on the run's layout; "" where it has none."""
    found = run.memory.get(precision) if run is not None else None
    if found is None:
        return ""
    mem = found.memory
    place = f" on {on}," if on else ""
    there = "" if on else " there"
    if mem.fits:
        return f"and{place} {who} fits in memory per GPU{there} ({gib(mem.headroom)} free)"
    return (f"but{place} {who} does not fit in memory per GPU{there} ({gib(-mem.headroom)} over; "
            f"{remedy_sentence(found)})")


def reversal_words(turned: Reversal) -> str:
    """"With communication in, FP8 Current runs faster than FP8 Delayed beyond the measured spread (1.25× BF16
    against 1.10×): the pick above rests on one rank's compute." (issue 42 item 5: never hidden)."""
    faster, chosen = _name(turned.faster), _name(turned.chosen)
    if turned.faster == BASELINE:
        values = f"{chosen} {turned.chosen_point.value:.2f}× BF16"
    elif turned.chosen == BASELINE:
        values = f"{faster} {turned.faster_point.value:.2f}× BF16"
    else:
        values = f"{faster} {turned.faster_point.value:.2f}× BF16 against {chosen}'s {turned.chosen_point.value:.2f}×"
    return (f"With communication in, {faster} runs faster than {chosen} beyond the measured spread ({values}): "
            "the pick above rests on one rank's compute, and on this layout the faster run is "
            f"{faster}'s.")


def _layer_lead(chosen: str, layer_points: Mapping[str, Point], graphed: bool) -> str:
    """"; FP8 Delayed leads the layer step at 1.19×, though not beyond FP8 Current's measured spread": where the
    recipe the model's step picks is not the one the layer step's row stars (:func:`.values.decide_fastest`,
    the site's one rule), as for Mixtral 8x22B on the H100, where three recipes tie on the model step and
    the reader saw the chosen one lose the rows below it without a word; "" otherwise."""
    lead = decide_fastest(layer_points) if chosen in layer_points else None
    if lead is None or lead.answer in (chosen, BASELINE):
        return ""
    step = layer_step(graphed)
    spread = ("though not beyond" if chosen in lead.tied else "beyond") + f" {_name(chosen)}'s measured spread"
    return f"; {_name(lead.answer)} leads {step} at {lead.speedup:.2f}×, {spread}"


_RATIO = re.compile(r"timed (\d+(?:\.\d+)?)x")


def flag_clause(report: Report, precision: str, mode: str, *, step: bool, graphed: bool) -> str:
    """" († its step time fails the cross-check: ratio 1.60)": what the answer sentence adds when the
    speedup it quotes rests on a time the profiler cross-check flags (issue 31), the same flags the
    table's cells carry (the step's and BF16's step, or the GEMM times of ``mode``); "" when none is.
    The full flags are in the table's notes under the sentence."""
    if step:
        flag = report.step(precision, graphed=graphed).cross_check_flag
        own = f"{_name(precision)} step:"
        if not flag:
            return ""
        mine, bf16 = own in flag, f"{_name(BASELINE)} step:" in flag
        what = ("its step time and BF16's fail" if mine and bf16 else "its step time fails" if mine
                else "BF16's step time, which it divides, fails")
    else:
        flag = report.speedup_flag(mode, precision)
        if not flag:
            return ""
        what = "GEMM times it rests on fail"
    ratios = sorted({float(r) for r in _RATIO.findall(flag)}, reverse=True)
    if not ratios:  # a flag of another wording: say it whole rather than a number it does not hold
        return f" ({FLAG_MARK} {flag})"
    said = ("ratio " if len(ratios) == 1 else "ratios ") + ", ".join(f"{r:.2f}" for r in ratios)
    return f" ({FLAG_MARK} {what} the cross-check: {said})"


def loss_parity_words(doc: Mapping[str, Any] | None, precision: str) -> str:
    """What this GPU's loss-parity study found for ``precision``, as a sentence ("" when the study has
    not run on this GPU or did not train that recipe): within or beyond BF16's seed-to-seed range,
    diverged, or failed with its reason."""
    if doc is None:
        return ""
    recipes = loss_parity_schema.recipes_by_id(doc["data"])
    recipe = recipes.get(precision)
    if recipe is None or recipe["status"] == "unsupported":
        return ""
    lead = f"In {LOSS_PARITY_PHRASE}, {_name(precision)}"  # the sentence names the GPU already
    status = recipe["status"]
    if status == "diverged":
        return f"{lead} diverged ({' '.join(recipe['reason'].split())})."
    if status != "measured":
        return f"{lead} {unavailable_text(status, reason_clause(recipe.get('reason', '')), limit=80)}."
    val = loss_parity_schema.gaps(doc["data"]).get(precision, {}).get("val")
    if val is None:
        return f"{lead} trained, but BF16's run did not complete: nothing to compare it with."
    band = band_of(dict(doc))
    if isinstance(band, str):
        return f"{lead} ended {val.percent:+.2f}% from BF16's validation loss ({band})."
    # The gap with its unit and the band it is judged by (the seeds' detail is on the study's page,
    # one link away): "+0.0181" alone named neither what it measured nor the range it fell in.
    return f"{lead} ended {gap_in_band(val.delta, band)}."


def _accuracy(report: Report, mode: str, precisions: Sequence[str], chosen: str, speeds: Mapping[str, Point]) -> str:
    """The accuracy the chosen recipe costs: its least accurate GEMM's SQNR, and the most accurate
    recipe's where that one keeps clearly more (0.5 dB or more) and what speed it gives."""
    sqnr = {p: report.sqnr(mode, p) for p in precisions if p != BASELINE}
    mine = sqnr.get(chosen)
    if mine is None:
        return ""
    # Gaussian inputs of the model's GEMM shapes: nearly the same for every model, said so (a reader
    # comparing two models' answers would otherwise read the same figure as a finding about both).
    text = f"On Gaussian inputs (nearly the same for every model) its least accurate GEMM keeps {mine:.1f} dB SQNR"
    known = {p: v for p, v in sqnr.items() if v is not None}
    best = max(known, key=lambda p: known[p])
    if best != chosen and known[best] >= mine + 0.5:
        speed = f" at {speeds[best].value:.2f}×" if best in speeds else ""
        text += f"; {_name(best)} keeps {known[best]:.1f} dB{speed}"
    return text + "."


@dataclasses.dataclass(frozen=True)
class PassRange:
    """One recipe's least SQNR of one pass, over every model and GPU shown: its lowest and highest."""

    low: float
    high: float
    count: int

    @property
    def text(self) -> str:
        return f"{self.low:.1f}" if round(self.low, 1) == round(self.high, 1) else f"{self.low:.1f}–{self.high:.1f}"


def sqnr_by_pass(reports: Sequence[Report], mode: str, precisions: Sequence[str]) -> dict[tuple[str, str], PassRange]:
    """(precision, pass) -> the range, over ``reports``, of each report's least SQNR in that pass."""
    found: dict[tuple[str, str], list[float]] = {}
    for report in reports:
        for precision in precisions:
            for pass_ in PASSES:
                values = [report.sqnr(mode, precision, g) for g in report.gemms if g.pass_ == pass_]
                if values and all(v is not None for v in values):
                    found.setdefault((precision, pass_), []).append(min(v for v in values if v is not None))
    return {key: PassRange(min(v), max(v), len(v)) for key, v in found.items()}
