"""What the site's models page leads with, as ``gemm-bench report`` prints it: the model's step
(tokens/s per GPU, MFU and memory per recipe, at G = 1 and at the question's G), where the training
step's time goes, the precision plan and the energy per step.

Why a module of its own: :mod:`gemm_bench.report.precision_plan` builds on
:class:`~gemm_bench.report.report.Report`, so the report cannot import it; this module sits above
both and composes the whole report, text (:func:`text`, at most
:data:`~gemm_bench.report.report.TEXT_WIDTH` columns) and JSON (:func:`to_json`), for the CLI's
``report`` and ``run``. Every number and sentence comes from the report layer's own code
(:meth:`Report.model_step`, :mod:`~gemm_bench.report.breakdown_figure`,
:func:`~gemm_bench.report.precision_plan.plan_sentence`, :mod:`~gemm_bench.report.energy_compare`),
as the pages show them: nothing is recomputed here, only laid out. It reads the typed result
(``report.result``, :mod:`gemm_bench.results.typed`), never the JSON dict: a number the door refused (an
energy from too few power samples, a plan step faster than the GPU can run, a breakdown that does not
add up) is a failed entry there and is printed with its reason, never as measured.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

from gemm_bench.question.model_step import unsupported_reason
from gemm_bench.question.precisions import BASELINE, LAYER_MODES, PRECISIONS
from gemm_bench.question.vocabulary import LAYER_STEP, MODEL_STEP, title
from gemm_bench.report import breakdown_figure, energy_compare, model_step_breakdown, precision_plan
from gemm_bench.report.fastest import TIE_ORDER
from gemm_bench.report.model_step import (
    GIB,
    ModelStep,
    attention_note,
    largest_microbatch_absence,
    memory_delta_text,
    part_absence,
)
from gemm_bench.report.report import STEP_WORDS, Report
from gemm_bench.results import energy
from gemm_bench.results.breakdown import IDLE_RULE
from gemm_bench.results.kernel_kinds import DISPLAY, IDLE, PARTS
from gemm_bench.results.typed import Breakdown, EnergyBlock, EnergyEntry, PlanBlock, PlanStep, Stats

#: The section titles, one per quantity, in the site's words (:mod:`gemm_bench.question.vocabulary`: the
#: model's step is a whole rank's, one layer's step is replayed as a CUDA graph).
MODEL_STEP_TITLE = f"== {title(MODEL_STEP)} (one rank, per micro-batch) =="
BREAKDOWN_TITLE = "== Where each step's time goes (ms per step; the model's, per micro-batch) =="
PLAN_TITLE = "== Precision plan =="
ENERGY_TITLE = f"== Energy per {LAYER_STEP} =="

#: Short column heads of the breakdown table; the legend under its title gives each part's full name.
_PART_HEADS = {"gemm": "GEMMs", "quantization": "quant.", "attention": "attn.", "elementwise": "elemwise",
               "optimizer": "optim.", "other": "other", "idle": "idle"}


def text(report: Report, loss_parity: Mapping[str, Any] | None = None) -> str:
    """The whole report as text: the model's step first (what the models page leads with) and the
    answer's pick (:func:`pick_lines`), then the report's GEMMs and layer steps, each step followed by
    its breakdown, plan and energy. ``loss_parity``: this GPU's loss-parity study, which breaks ties."""
    return report.to_text(lead=[*model_step_lines(report), *pick_lines(report, loss_parity)],
                          after_steps=[*breakdown_lines(report), *plan_lines(report), *energy_lines(report)])


PICK_TITLE = "== The answer's pick =="


def pick_lines(report: Report, loss_parity: Mapping[str, Any] | None = None) -> list[str]:
    """The recipe the models page's answer, ★ and plan name for this result
    (:func:`gemm_bench.report.precision_plan.answer_pick`: the site's one rule, a tie broken by accuracy,
    the other rows and energy), with the tie and what broke it; [] where the result has nothing to pick
    from. Before, the report printed every row and named no recipe, so a reader could not see the tie
    the page broke."""
    found = precision_plan.answer_pick(report, loss_parity=loss_parity)
    if found is None:
        return []
    verdict = found.verdict
    name = PRECISIONS[verdict.answer].display
    if verdict.answer == BASELINE:
        said = f"BF16 ({verdict.why}), by {found.measure}"
    else:
        said = f"{name}: {verdict.speedup:.2f}x BF16's speed in {found.measure}"
    lines = ["", PICK_TITLE, said]
    tie = verdict.tie_break
    if tie is not None:
        lines.append(f"{tie.names} tie on {found.measure} ({tie.values}); tie-break ({TIE_ORDER}): "
                     f"{tie.why}".replace("×", "x"))  # the terminal's x, as every other line
    if loss_parity is None:
        lines.append("(no loss-parity study of this GPU beside the file: accuracy could not break a tie)")
    return lines


def to_json(report: Report) -> dict[str, Any]:
    """``gemm-bench report --json``: :meth:`Report.to_json` with ``model_step``, ``breakdown``,
    ``plan`` and ``energy`` beside it (each None, with a ``*_reason``, where the result has none)."""
    out = report.to_json()
    out.update(model_step_json(report))
    found = breakdowns(report)
    plan, block = report.result.plan, report.result.energy
    measured = report.result.energies()
    out.update({
        "breakdown": {"rule": IDLE_RULE, "modes": found} if found else None,
        "breakdown_reason": None if found else "no step of this result has a breakdown",
        # the plan as the door checked it (a refused step failed), with the words the page says of it
        "plan": {**plan_json(plan), "sentence": precision_plan.plan_sentence(plan),
                 "snippet": precision_plan.PrecisionPlan.from_block(plan).snippet()} if plan is not None else None,
        "plan_reason": None if plan is not None else "no precision plan in this result",
        # vs_bf16: each recipe against BF16 by the site's significance rule ("unknown" without the spread)
        "energy": {"method": block.method, "mode": block.mode, "steps": [energy_entry_json(e) for e in block.entries],
                   "words": {p: energy.energy_words(e.as_mapping()) for p, e in measured.items()},
                   "vs_bf16": {p: c.to_json() for p, c in energy_compare.against_bf16(measured).items()}}
        if block is not None else None,
        "energy_reason": None if block is not None else "no energy per step in this result",
    })
    return out


def plan_json(plan: PlanBlock) -> dict[str, Any]:
    """The precision plan as the result stores it (``PrecisionPlan.config`` and its measured steps), from
    the typed block: the same keys and values on valid data, a step the door refused as failed with the
    door's reason. Why not the stored block: the JSON report would print a refused number as measured."""
    return {"recipe": plan.recipe, "fp8": list(plan.fp8), "keep_in_bf16": list(plan.keep_in_bf16),
            **{k: v for k, v in (("kind", plan.kind), ("rule", plan.rule), ("chosen", plan.chosen)) if v is not None},
            "projections": [{"op": p.op, "speedup": p.speedup, "low": p.low, "high": p.high, "fp8": p.fp8,
                             **({"reason": p.reason} if p.reason else {})} for p in plan.projections],
            "steps": [_as_stored(s) for s in plan.steps]}


def _as_stored(step: PlanStep) -> dict[str, Any]:
    """A typed step's fields under their stored names (``pass_`` as ``pass``), as a layer cell stores them:
    none that is None, a measured step without a reason, a failed one without a time."""
    out: dict[str, Any] = {}
    for field in dataclasses.fields(step):
        value = getattr(step, field.name)
        if value is None or (field.name == "reason" and step.measured):
            continue
        out[field.name.rstrip("_")] = (value.as_mapping() if isinstance(value, (Stats, Breakdown))
                                       else dict(value) if isinstance(value, Mapping) else value)
    return out


def energy_entry_json(entry: EnergyEntry) -> dict[str, Any]:
    """One recipe's energy entry as the result stores it, from the typed entry: a measured one with its
    numbers (tokens per joule per GPU, as the door recomputed it), a failed or refused one with only why."""
    if not entry.measured:
        return {"precision": entry.precision, "status": entry.status, "reason": entry.reason}
    return {k: v for k, v in entry.as_mapping().items() if k != "reason"}


# ------------------------------------------------------------------------------ the model's step
def absence(report: Report) -> str:
    """Why the report has no model step (as the models page says it): a result measured before the
    model step was (whose stored question may lack the vocabulary too), a question without one."""
    if report.config is not None and report.result.model_step is None:
        return (f"not measured in this result (method v{report.result.method_version}); a GPU refresh measures "
                "tokens/s, MFU and memory with everything else")
    why = unsupported_reason(report.config)
    if why is not None:
        return why
    return "the result's model step does not answer this question (another vocabulary, or a part missing)"


def model_step_json(report: Report) -> dict[str, Any]:
    """``model_step`` (or None) and ``model_step_reason``: the composed rows at G = 1 and the
    question's G, memory per recipe and what it is made of, and the sentence per recipe."""
    summary = report.model_step()
    block = report.result.model_step
    if summary is None or block is None:
        return {"model_step": None, "model_step_reason": absence(report)}
    shown = _recipes(report, summary)
    return {"model_step": {
        "run_id": summary.run_id,
        "what": block.what,
        "microbatches": summary.microbatches,
        "layers": summary.config.measured_layers,
        "rows": [dataclasses.asdict(r) for g in sorted(summary.rows) for r in summary.rows[g]],
        "memory": {p: m.to_dict() for p, m in summary.memory.items()},
        "capacity_bytes": summary.capacity_bytes,
        "fits": {p: summary.fits(p) for p in summary.memory},
        "layers_that_fit": dict(summary.layers_that_fit),
        "largest_microbatch": dict(summary.largest_microbatch),
        "largest_microbatch_searched_with_layers": summary.search_layers,
        "largest_microbatch_predicted": dict(summary.largest_microbatch_predicted),
        "sentences": {p: s for p in shown if (s := summary.sentence(p))},
        "absent": {p: " ".join(x for x in part_absence(report.result, p) if x) for p in shown
                   if summary.row(p) is None},
    }, "model_step_reason": None}


def _recipes(report: Report, summary: ModelStep) -> list[str]:
    """BF16 first, then the report's recipes (those the page or file shows), in registry order."""
    held = {r.precision for rows in summary.rows.values() for r in rows}
    return [p for p in PRECISIONS if p == BASELINE or p in report.precisions or p in held]


def model_step_lines(report: Report) -> list[str]:
    """The model's step per recipe: time per micro-batch, tokens/s per GPU, model TFLOP/s, MFU and the
    speedup over BF16 with its spread, at G = 1 and the question's G; then memory. A model question
    without one says why; manual shapes and sweeps (no model) print nothing."""
    if report.config is None:
        return []
    summary = report.model_step()
    if summary is None:
        return ["", MODEL_STEP_TITLE, absence(report)[:1].upper() + absence(report)[1:]]
    shown = _recipes(report, summary)
    layers = summary.config.measured_layers
    lines = ["", MODEL_STEP_TITLE,
             f"One rank's embedding, {layers} layers, BF16 output layer, loss and optimizer; G micro-batches per "
             "optimizer step, weights quantized once per step; composed of parts measured on the GPU (GPU time; "
             "collectives excluded). The last column is the speedup of one layer's forward + backward alone "
             "(quantizing its weights), a part of the same run: what the rest of the model's step changes.",
             f"run: {summary.run_id}",
             f"  {'G':>2}  {'precision':<12}{'ms/micro-batch':>15}{'tokens/s/GPU':>14}{'TFLOP/s':>9}{'MFU':>6}"
             f"  {'vs BF16 (spread)':<22}{'layer step':>10}"]
    for g in sorted(summary.rows, reverse=True):  # the question's G first, as the page's table has it
        for p in shown:
            row = summary.row(p, g)
            name = PRECISIONS[p].display
            if row is None:
                status, reason = part_absence(report.result, p)
                said = f"{status}: {reason}" if status else (f"n/a: its parts {reason}" if reason else "n/a")
                lines.append(f"  {g:>2}  {name:<12}{said}")
                continue
            mfu = f"{row.mfu:>6.0%}" if row.mfu is not None else f"{'-':>6}"
            vs = "" if p == BASELINE or row.speedup is None else (
                f"{row.speedup:.2f}x ({row.speedup_low:.2f}-{row.speedup_high:.2f}x)")
            layer = "" if p == BASELINE or row.layer_step_speedup is None else f"{row.layer_step_speedup:.2f}x"
            lines.append(f"  {g:>2}  {name:<12}{row.ms_per_microbatch:>15.2f}{row.tokens_per_s:>14,.0f}"
                         f"{row.tflops:>9.1f}{mfu}  {vs:<22}{layer:>10}".rstrip())
    note = attention_note(summary)  # a window or sinks the stored question reads: not timed as they run
    if note:
        lines.append(f"  {note}")
    lines += _memory_lines(report, summary, shown)
    lines += [f"  {s}" for p in shown if p != BASELINE and (s := summary.sentence(p))]
    return lines


def _memory_lines(report: Report, summary: ModelStep, shown: list[str]) -> list[str]:
    """Peak memory of one rank's model step per recipe and what it is made of (GiB), the layers that
    fit where the whole rank does not, and the largest micro-batch found on the GPU."""
    capacity = summary.capacity_bytes / GIB
    lines = ["", f"memory of one rank's model step, GiB (the allocator's counters, composed; this run could "
                 f"allocate {capacity:.1f} GiB):",
             f"  {'precision':<13}{'peak':>6}{'vs BF16':>9}{'weights':>9}{'FP8 copies':>12}{'activations':>13}"
             f"{'gradients':>11}{'optimizer':>11}{'transient':>11}"]
    base = summary.memory.get(BASELINE)
    for p in shown:
        m = summary.memory.get(p)
        if m is None:
            continue
        delta = "-" if base is None or p == BASELINE else _delta_gib((m.peak - base.peak) / GIB)
        lines.append(f"  {PRECISIONS[p].display:<13}{m.peak / GIB:>6.1f}{delta:>9}{m.weights / GIB:>9.1f}"
                     f"{m.fp8_weights / GIB:>12.1f}{m.activations / GIB:>13.1f}{m.gradients / GIB:>11.1f}"
                     f"{m.optimizer_state / GIB:>11.1f}{m.transient / GIB:>11.1f}")
    unfit = [p for p in shown if summary.fits(p) is False]
    if unfit:
        which = "every recipe" if len(unfit) == len([p for p in shown if p in summary.memory]) else ", ".join(
            PRECISIONS[p].display for p in unfit)
        fit = ", ".join(f"{PRECISIONS[p].display} {summary.layers_that_fit[p]}" for p in shown
                        if p in summary.layers_that_fit)
        lines.append(f"  peak above the GPU's {capacity:.1f} GiB for {which}: the whole rank does not fit one GPU; "
                     f"layers that fit with the embedding and output layer (a pipeline stage's size), of "
                     f"{summary.config.measured_layers}: {fit}")
    if summary.largest_microbatch:
        found = ", ".join(f"{PRECISIONS[p].display} {summary.largest_microbatch[p] or 'none'}" for p in shown
                          if p in summary.largest_microbatch)
        lines.append(f"  largest micro-batch that fitted, found on the GPU with {summary.search_layers} layers: "
                     f"{found}")
    else:
        lines.append(f"  {largest_microbatch_absence(report.result, BASELINE)}")
    return lines


def _delta_gib(delta: float) -> str:
    """"+9.5", "-1.2", "same" (a difference the shown digit cannot tell, :func:`memory_delta_text`)."""
    return "same" if memory_delta_text(delta) == "the same" else f"{delta:+.1f}"


# ------------------------------------------------------------------------------ where the time goes
def breakdowns(report: Report) -> dict[str, dict[str, Any]]:
    """Per training-step mode (the CUDA-graphed step first), each recipe's stored parts and the
    sentence naming the largest change (:mod:`gemm_bench.report.breakdown_figure`)."""
    out: dict[str, dict[str, Any]] = {}
    for mode, bars in _all_bars(report, report.model_step() if report.config is not None else None):
        if bars:
            out[mode] = {"steps": [{"precision": b.precision, "step_ms": b.step_ms, "parts_ms": dict(b.parts)}
                                   for b in bars],
                         "sentence": _sentence(report, bars)}
    return out


def _sentence(report: Report, bars: list[breakdown_figure.Bar]) -> str | None:
    """The sentence under the bars, of the recipe the site's sentence, plan and answer speak of
    (:func:`gemm_bench.report.precision_plan.step_recipe`): the report says what the page says."""
    recipe = precision_plan.step_recipe(report)
    return breakdown_figure.sentence(bars, recipe) if recipe else None


#: The key of the model's step among the breakdowns (beside the layer step's modes).
MODEL_BREAKDOWN = "model"


def _all_bars(report: Report, summary: ModelStep | None) -> list[tuple[str, list[breakdown_figure.Bar]]]:
    """The model's step per micro-batch at the question's G (:mod:`gemm_bench.report.model_step_breakdown`,
    from ``summary``, the report's model step), then the CUDA-graphed and eager layer steps: each with
    its bars, [] where the result has none."""
    model = model_step_breakdown.model_bars(report.result.model_step, summary) if summary is not None else []
    return [(MODEL_BREAKDOWN, model), *((mode, breakdown_figure.bars(report.result.layer, mode))
                                        for mode in (LAYER_MODES[1], LAYER_MODES[0]))]


def breakdown_lines(report: Report) -> list[str]:
    """Each recipe's training step split into GPU time per kind of kernel and idle time, the parts
    adding up to the step (the model's step per micro-batch first, where the result has it); the
    sentence that names the largest change under each table."""
    lines: list[str] = []
    summary = report.model_step() if report.config is not None else None
    for mode, bars in _all_bars(report, summary):
        if not bars:
            continue
        if not lines:
            lines += ["", BREAKDOWN_TITLE,
                      "(" + "; ".join(f"{_PART_HEADS[p]} = {DISPLAY[p][:1].lower()}{DISPLAY[p][1:]}" for p in PARTS
                                      if p != IDLE and _PART_HEADS[p] != DISPLAY[p]) + "; " + IDLE_RULE + ")"]
        words = (f"{MODEL_STEP}, per micro-batch at G = {summary.microbatches} "
                 f"({model_step_breakdown.COMPOSED_RULE})" if mode == MODEL_BREAKDOWN and summary is not None
                 else STEP_WORDS[mode])
        lines += ["", f"{words}:",
                  f"  {'precision':<13}{'step':>8}" + "".join(f"{_PART_HEADS[p]:>9}" for p in PARTS)]
        for bar in bars:
            lines.append(f"  {bar.label:<13}{bar.step_ms:>8.3f}" + "".join(f"{bar.parts[p]:>9.3f}" for p in PARTS))
        said = _sentence(report, bars)
        if said:
            lines.append(f"  {said}")
    return lines


# ------------------------------------------------------------------------------ plan and energy
def plan_lines(report: Report) -> list[str]:
    """The result's precision plan: what it keeps in BF16, its measured step against all-BF16 and
    all-FP8, and the configuration a reader writes (as the page shows it)."""
    block = report.result.plan
    if block is None:
        return []
    snippet = precision_plan.PrecisionPlan.from_block(block).snippet()
    return ["", PLAN_TITLE, precision_plan.plan_sentence(block), *(f"    {line}" for line in snippet.splitlines())]


def energy_lines(report: Report) -> list[str]:
    """Energy per CUDA-graphed training step and tokens per joule per recipe, BF16 first, with the
    rule it was measured by, why a median above the board's limit is no error, and each recipe against
    BF16 as the page says it (:func:`gemm_bench.report.energy_compare.comparison_sentence`)."""
    block = report.result.energy
    if block is None:
        return []
    found = report.result.energies()
    lines = ["", ENERGY_TITLE, f"({block.method or energy.ALONE_RULE})"]
    for entry in _ordered(block):
        name = PRECISIONS[entry.precision].display
        if entry.measured:
            lines.append(f"  {name:<13}{energy.energy_words(entry.as_mapping())}")
        else:  # failed when measured, or refused at the door (too few samples, a stuck reading): why
            lines.append(f"  {name:<13}{entry.status}: {entry.reason}")
    if found:
        above = energy.power_above_limit(report.result.device.fields, max(e.power_w for e in found.values()),
                                         (e.power_source for e in found.values()))
        if above:
            lines.append(f"  {above}")
        compared = energy_compare.comparison_sentence(found)
        if compared:
            lines.append(f"  {compared}")
    return lines


def _ordered(block: EnergyBlock) -> list[EnergyEntry]:
    """The block's entries of known recipes, in registry order (BF16 first)."""
    order = list(PRECISIONS)
    return sorted((e for e in block.entries if e.precision in PRECISIONS), key=lambda e: order.index(e.precision))
