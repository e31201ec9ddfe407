"""Every value a role may quote, computed once from a directive's answer.

The directive calls :func:`device_values` with the same :class:`~gemm_bench.report.report.Report` objects
its tables and figures are drawn from, and records the result in the environment; roles only look
values up (:mod:`.roles`). A table and a role on any page therefore cannot disagree, and a role
never re-reads a file or recomputes a number.

Displayed text and tooltips round to the shown precision (tooltips one digit more), never a raw
``1.6148308599957166``.

The step's details (breakdown, plan, energy) are read from the typed result (``report.result``,
:mod:`gemm_bench.results.typed`), never the JSON dict: a number the door refused is a failed entry there,
and its role says why instead of quoting it.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from gemm_bench.question.precisions import BASELINE, MODE_NAMES, PRECISIONS, SAME_AS
from gemm_bench.report import breakdown_figure, energy_compare, figures, precision_plan
from gemm_bench.report.fastest import (  # noqa: F401  (re-exported: the extension's one import point)
    BF16_POINT,
    TIE_ORDER,
    Fastest,
    Point,
    clearly_less,
    decide_fastest,
    model_step_points,
    overlaps,
    step_points,
)
from gemm_bench.report.fastest import (
    finite as _finite,
)
from gemm_bench.report.report import Report
from gemm_bench.report.tie_break import GEMMS, MODEL, STEP, pick, total_points
from gemm_bench.results.energy import joules, power_above_limit
from gemm_bench.results.invariants import REFUSED
from gemm_bench.results.typed import EnergyEntry, energy_missing
from gemm_benchmark.breakdown_values import (  # noqa: F401 (roles read BREAKDOWN_ITEMS here)
    BREAKDOWN_ITEMS,
    NOT_IN_RESULT,
    breakdown_values,
)
from gemm_benchmark.model_step_values import DEFAULT_G, g_key, model_step_values
from gemm_benchmark.moe_words import cached_layer_values
from gemm_benchmark.records import Value, value_key

ROLE_KINDS: tuple[str, ...] = ("gemm-speedup", "gemm-time", "gemm-eager-time", "gemm-tflops")

#: What ``:gemm-breakdown:``, ``:gemm-plan:`` and ``:gemm-energy:`` quote (their last word; the first
#: is the default). They are measured for the CUDA-graphed step only (``layer-graphed``).
PLAN_ITEMS: tuple[str, ...] = ("kept", "vs-bf16", "vs-fp8")
ENERGY_ITEMS: tuple[str, ...] = ("joules", "tokens-per-joule", "vs-bf16")
#: Not a role: the key under which a step that contradicts its GEMMs records the problem
#: (:func:`step_contradictions`), so every page that shows or quotes that step can say so.
STEP_PROBLEM = "step-contradiction"


def format_ms(ms: float | None) -> str:
    """Milliseconds with about four significant digits (GEMMs take 0.01 ms, models 1000 ms)."""
    if not _finite(ms):
        return "–"
    assert ms is not None
    if ms < 0.1:
        return f"{ms:.4f}"
    return f"{ms:.3f}" if ms < 10 else f"{ms:.2f}" if ms < 100 else f"{ms:.1f}"


def format_tflops(tflops: float | None) -> str:
    if not _finite(tflops):
        return "–"
    assert tflops is not None
    return f"{tflops:.0f}" if tflops >= 10 else f"{tflops:.2g}"  # small GEMMs: 0.16, not 0


def format_speedup(speedup: float | None) -> str:
    return f"{speedup:.2f}×" if _finite(speedup) else "–"


def _tooltip_ms(ms: float) -> str:
    return f"{ms:.5g} ms"


def _tooltip_tflops(tflops: float) -> str:
    return f"{tflops:.1f}" if tflops >= 10 else f"{tflops:.3g}"


#: The rule behind ``:gemm-fastest:``, the summary's ★ and ``fastest``, stated where it is applied.
FASTEST_RULE = ("the fastest of the precisions clearly faster than BF16 (their whole-model GEMM speedup's measured "
                "spread lies above 1.0), among those the directive shows and this device measured in this mode; "
                "BF16 when none is")


#: The same rule for the training step (``layer``, ``layer-graphed``): the summary's answer sentence.
STEP_RULE = ("the fastest of the precisions whose training step is clearly faster than BF16's (the step "
             "speedup's measured spread lies above 1.0); BF16 when none is")


#: The same rule for the model's step (issue 32): the summary's answer where a result has one.
MODEL_STEP_RULE = ("the fastest of the precisions whose model's step gives clearly more tokens per second than "
                   "BF16's (the speedup's composed spread lies above 1.0); BF16 when none is")


def step_absence(report: Report, precision: str, *, graphed: bool, routing: str = "balanced") -> tuple[str, str]:
    """(status, reason) of a step speedup that has no number: its own step's when that is not measured,
    ``failed`` when the BF16 step it divides failed (a failed reference is a failure, never "n/a"),
    else ("", why) (BF16 unsupported or missing, steps of different runs)."""
    step = report.step(precision, graphed=graphed, routing=routing)
    if step.status != "measured":
        return step.status, step.reason
    base = report.step(BASELINE, graphed=graphed, routing=routing)
    if base.status == "failed":
        return "failed", f"BF16 step: {' '.join(base.reason.split())}"
    return "", step.speedup_reason or step.reason


def step_contradictions(report: Report, layer_mode: str, precision: str) -> list[str]:
    """:meth:`~gemm_bench.report.report.Report.step_contradictions` of one step (mode and precision):
    the one check, asked wherever that step is shown or quoted."""
    if precision == BASELINE or not report.result.layer:
        return []
    view = Report(report.result, gemms=report.gemms, num_layers=report.num_layers, kind=report.kind,
                  modes=["autocast", layer_mode], precisions=[BASELINE, precision], config=report.config)
    return view.step_contradictions()


def fastest_total(report: Report, mode: str, precisions: Iterable[str] | None = None, *,
                  loss_parity: Mapping[str, Any] | None = None) -> Fastest | None:
    """The site's pick (:func:`gemm_bench.report.tie_break.pick`) over a report's whole-model GEMM
    speedups in ``mode``: the GEMM row's ★."""
    shown = list(report.precisions if precisions is None else precisions)
    return pick(total_points(report, mode, shown), report, shown, basis=GEMMS, gemm_mode=mode, loss_parity=loss_parity)


#: What a reader sees for each reason a number is absent (the table owner uses the same words).
STATUS_WORDS = {"failed": "failed", "unsupported": "unsupported", "missing": "not measured"}

#: The status of a value that is another precision's (:data:`SAME_AS`); its ``reason`` is that precision's id.
SAME = "same"


def absent_status(precision: str, mode: str, status: str, reason: str) -> tuple[str, str]:
    """(status, reason) a reader is told for a cell without a number: :data:`SAME` and the other
    precision's id where the precision has no form of its own in ``mode``, else as stored."""
    other = SAME_AS.get((precision, mode))
    if other is not None and status == "unsupported":
        return SAME, other
    return status, reason


def reason_clause(reason: str) -> str:
    """A stored reason as a clause a sentence goes on after (a list's "; ", its closing "."):
    whitespace collapsed, its own closing period dropped. Transformer Engine's reasons end with one,
    and joined they read "... for MXFP8 execution.; NVFP4: ... execution..". An ellipsis keeps its dots."""
    text = " ".join(reason.split())
    return text[:-1] if text.endswith(".") and not text.endswith("..") else text


def unavailable_text(status: str, reason: str, *, limit: int = 60) -> str:
    """``failed: <reason>`` / ``unsupported: <reason>`` (shortened to ``limit``), never one "n/a" for
    all; ``same as FP8 Current`` for a precision that has no form of its own (:data:`SAME_AS`)."""
    if status == SAME:
        return f"same as {PRECISIONS[reason].display}"
    word = STATUS_WORDS.get(status, status or "n/a")
    reason = " ".join(reason.split())
    if not reason:
        return word
    if len(reason) > limit:
        reason = reason[:limit - 1].rstrip() + "…"
    return f"{word}: {reason}"


def device_values(reports: dict[str, Report], device: str, name: str,
                  loss_parity: Mapping[str, Any] | None = None) -> dict[str, Value]:
    """All quotable values of one device's answer, keyed by :func:`~.records.value_key`. ``fastest``
    values (``:gemm-fastest:`` and each speedup role's ``fastest``) are the site's one pick
    (:func:`gemm_bench.report.tie_break.pick`), its ties broken with ``loss_parity`` (this GPU's
    loss-parity study) as the summary's answer and ★ break them."""
    out: dict[str, Value] = {}
    named = f" ({name})" if name else ""
    if reports:
        first = next(iter(reports.values()))
        out.update(model_step_values(first, f"model step, {device}{named}", tuple(first.precisions)))
        out.update(cached_layer_values(first, f"{device}{named}"))  # :gemm-moe-cached: counts these
        _model_step_fastest(out, first, f"model step, {device}{named}", loss_parity)
    for mode, report in reports.items():
        where = f"{MODE_NAMES[mode]}, {device}{named}"
        _fastest_values(out, fastest_total(report, mode, loss_parity=loss_parity), mode, "gemm-speedup", where,
                        rule=FASTEST_RULE, absent="no precision besides BF16 measured",
                        flags={p: report.speedup_flag(mode, p) for p in report.precisions})
        if mode == report.modes[0]:  # the training step: once per result, like its other step values
            for graphed, layer_mode in ((False, "layer"), (True, "layer-graphed")):
                base = report.step(BASELINE, graphed=graphed)
                _fastest_values(out, pick(step_points(report, report.precisions, graphed=graphed), report,
                                          report.precisions, basis=STEP, graphed=graphed, loss_parity=loss_parity),
                                layer_mode, "gemm-step-speedup", f"{layer_mode} step {device}{named}",
                                rule=STEP_RULE, absent="no step besides BF16's measured",
                                of=" for the whole layer step", noun="fastest step",
                                flags={p: report.step(p, graphed=graphed).cross_check_flag for p in report.precisions},
                                failed=("failed", f"BF16 step: {' '.join(base.reason.split())}")
                                if base.status == "failed" else None)
        for precision in report.precisions:
            where = f"{PRECISIONS[precision].display}, {MODE_NAMES[mode]}, {device}" + (f" ({name})" if name else "")
            total = report.total(mode, precision)
            if total.status != "measured" or not _finite(total.model_ms):
                why = f"{where}: {total.status}" + (f" ({total.reason})" if total.reason else "")
                status, reason = absent_status(precision, mode, total.status, total.reason)
                out[value_key("gemm-time", mode, precision)] = Value("", why, status, reason)
                out[value_key("gemm-speedup", mode, precision)] = Value("", why, status, reason)
            else:
                assert total.model_ms is not None
                layers = f"{report.num_layers} layers" if report.kind == "model" else "all shapes"
                out[value_key("gemm-time", mode, precision)] = Value(
                    f"{format_ms(total.model_ms)} ms", f"{_tooltip_ms(total.model_ms)} for {layers}: {where}",
                    flag=report.time_flag(mode, precision) or "")
                speedup = total.speedup_vs_bf16
                if _finite(speedup):
                    assert speedup is not None
                    _, low, high = figures.total_point(report, mode, precision)
                    out[value_key("gemm-speedup", mode, precision)] = Value(
                        format_speedup(speedup), f"{speedup:.3f}× BF16 for {layers}: {where}", low=low, high=high,
                        flag=total.cross_check_flag or "")
                else:
                    why = getattr(total, "speedup_reason", "") or "BF16 is not measured in the same run"
                    out[value_key("gemm-speedup", mode, precision)] = Value("", f"{where}: {why}")
            _beyond_values(out, report, mode, precision, where)
            for gemm in report.gemms:
                gid = f"{gemm.op}/{gemm.pass_}"
                at = f"{gemm.label}, {where}"
                cell = report.cell(mode, precision, gemm)
                if cell.status != "measured" or not _finite(cell.ms):
                    why = f"{at}: {cell.status}" + (f" ({cell.reason})" if cell.reason else "")
                    status, reason = absent_status(precision, mode, cell.status, cell.reason)
                    for kind in ROLE_KINDS:
                        out[value_key(kind, mode, precision, gid)] = Value("", why, status, reason)
                    continue
                assert cell.ms is not None
                # The time, its throughput and its share of the peak rest on the cell's own time;
                # its speedup on BF16's time too. The eager time and the SQNR are not profiled.
                own = cell.cross_check_flag or ""
                out[value_key("gemm-time", mode, precision, gid)] = Value(
                    f"{format_ms(cell.ms)} ms", f"{_tooltip_ms(cell.ms)}: {at}", flag=own)
                out[value_key("gemm-eager-time", mode, precision, gid)] = (
                    Value(f"{format_ms(cell.eager_ms)} ms",
                          f"{_tooltip_ms(cell.eager_ms)} called eagerly, host work included: {at}")
                    if _finite(cell.eager_ms) and cell.eager_ms
                    else Value("", f"{at}: no eager time in this result (method v4 measures it)"))
                tflops = cell.tflops
                shown = f"{format_tflops(tflops)} TFLOP/s"
                out[value_key("gemm-tflops", mode, precision, gid)] = (
                    Value(shown, f"{_tooltip_tflops(tflops)} TFLOP/s: {at}", flag=own) if _finite(tflops) and tflops
                    else Value("", f"{at}: no throughput"))
                pct = report.pct_of_peak(mode, precision, gemm)
                out[value_key("gemm-peak", mode, precision, gid)] = (
                    Value(f"{pct:.0f}%", f"{pct:.1f}% of the dense peak: {at}", flag=own) if _finite(pct) and pct
                    else Value("", f"{at}: {report.pct_of_peak_reason(mode, precision, gemm)}"))
                sqnr = report.sqnr(mode, precision, gemm)
                out[value_key("gemm-sqnr", mode, precision, gid)] = (
                    Value(f"{sqnr:.1f} dB", f"{sqnr:.2f} dB SQNR (Gaussian inputs): {at}") if sqnr is not None
                    else Value("", f"{at}: {report.sqnr_reason(mode, precision, gemm)}"))
                speedup, low, high = figures.gemm_point(report, mode, precision, gemm)
                out[value_key("gemm-speedup", mode, precision, gid)] = (
                    Value(format_speedup(speedup), f"{speedup:.3f}× BF16: {at}", low=low, high=high,
                          flag=report.speedup_flag(mode, precision, [gemm]) or "")
                    if _finite(speedup) and speedup
                    else Value("", f"{at}: {report.gemm_speedup_reason(mode, precision, gemm)}"))
    return out


def _beyond_values(out: dict[str, Value], report: Report, mode: str, precision: str, where: str) -> None:
    """SQNR of the whole layer (its least accurate GEMM), and the training step (once per precision)."""
    sqnr = report.sqnr(mode, precision)
    out[value_key("gemm-sqnr", mode, precision)] = (
        Value(f"{sqnr:.1f} dB", f"{sqnr:.2f} dB SQNR, the layer's least accurate GEMM (Gaussian inputs): {where}")
        if sqnr is not None else Value("", f"{where}: {report.sqnr_reason(mode, precision)}"))
    if mode != report.modes[0]:
        return
    step_detail_values(out, report, precision, where.split(",", 2)[-1].strip())
    for graphed, layer_mode in ((False, "layer"), (True, "layer-graphed")):
        step = report.step(precision, graphed=graphed)
        at = f"{PRECISIONS[precision].display}, {layer_mode} step" + where.split(",", 2)[-1]
        speedup, share = step.speedup_vs_bf16, step.gemm_share
        point = step_points(report, [precision], graphed=graphed).get(precision)
        status, reason = step_absence(report, precision, graphed=graphed)
        out[value_key("gemm-step-speedup", layer_mode, precision)] = (
            Value(format_speedup(speedup), f"{speedup:.3f}× BF16 for the whole layer step: {at}",
                  low=point.low if point else None, high=point.high if point else None,
                  flag=step.cross_check_flag or "")
            if _finite(speedup) and speedup else Value("", f"{at}: {reason}", status, reason))
        for problem in step_contradictions(report, layer_mode, precision):
            out[value_key(STEP_PROBLEM, layer_mode, precision)] = Value(problem, f"{at}: {problem}")
        out[value_key("gemm-share", layer_mode, precision)] = (
            Value(f"{share * 100:.0f}%", f"{share * 100:.1f}% of the BF16 step is its GEMMs: {at}",
                  flag=_share_flag(report, graphed))
            if _finite(share) and share else Value("", f"{at}: {step.gemm_share_reason or step.reason}"))


def tie_break_clause(verdict: Fastest) -> str:
    """"; a tie of FP8 Delayed or FP8 Current, broken (accuracy, then ...): ...": how the pick chose
    among recipes its measure could not tell apart, for a role's tooltip; "" where nothing tied."""
    tie = verdict.tie_break
    return f"; a tie of {tie.names}, broken ({TIE_ORDER}): {tie.why}" if tie is not None else ""


def _fastest_values(out: dict[str, Value], fastest: Fastest | None, mode: str, speed_kind: str, where: str, *,
                    rule: str, absent: str, of: str = "", noun: str = "fastest",
                    failed: tuple[str, str] | None = None,
                    flags: Mapping[str, str | None] | None = None) -> None:
    """``gemm-fastest`` of one mode and its ``speed_kind`` ``fastest`` value (the GEMMs' speedup, or
    the training step's), from one :func:`decide_fastest` verdict; both rest on the answer's speedup,
    so both carry the answer's cross-check flag in ``flags`` (precision -> flag)."""
    if fastest is None:
        status, reason = failed if failed else ("", "")
        why = f"{where}: {unavailable_text(status, reason, limit=10_000) if status else absent}"
        out[value_key("gemm-fastest", mode, "")] = Value("", why, status, reason)
        out[value_key(speed_kind, mode, "fastest")] = Value("", why, status, reason)
        return
    display = PRECISIONS[fastest.answer].display
    flag = ((flags or {}).get(fastest.answer) if fastest.answer != BASELINE else None) or ""
    ties = f"; within its spread: {', '.join(PRECISIONS[p].display for p in fastest.tied)}" if fastest.tied else ""
    ties += tie_break_clause(fastest)
    why = f": {fastest.why}" if fastest.why else ""
    out[value_key("gemm-fastest", mode, "")] = Value(
        fastest.text, f"{display} ({fastest.speedup:.3f}× BF16{of}){why}; the rule: {rule}{ties}; {where}", flag=flag)
    out[value_key(speed_kind, mode, "fastest")] = Value(
        format_speedup(fastest.speedup), f"{fastest.speedup:.3f}× BF16 by {display}, the {noun}: {where}", flag=flag)


def _model_step_fastest(out: dict[str, Value], report: Report, where: str,
                        loss_parity: Mapping[str, Any] | None = None) -> None:
    """``:gemm-model-speedup:`NAME layer-graphed fastest [G=N]```: the answer of :func:`decide_fastest`
    over the model step's speedups, at each G the step is composed for (the summary's sentence)."""
    summary = report.model_step()
    gs = sorted(summary.rows) if summary is not None else [1]
    for g in gs:
        keys = (g_key(g), DEFAULT_G) if summary is not None and g == summary.microbatches else (g_key(g),)
        verdict = pick(model_step_points(summary, report.precisions, g), report, report.precisions, basis=MODEL,
                       loss_parity=loss_parity)
        for key in keys:
            at = f"{where}, G = {g}"
            out[value_key("gemm-model-speedup", "layer-graphed", "fastest", key)] = (
                Value("", f"{at}: no model step besides BF16's measured" if summary is not None else
                      f"{where}: no model step in this result for this question") if verdict is None else
                Value(format_speedup(verdict.speedup), f"{verdict.speedup:.3f}× BF16's tokens per second by "
                      f"{PRECISIONS[verdict.answer].display}, the fastest model step: {at}; the rule: "
                      f"{MODEL_STEP_RULE}" + (f": {verdict.why}" if verdict.why else "") + tie_break_clause(verdict)))
    if summary is None:
        out.setdefault(value_key("gemm-model-speedup", "layer-graphed", "fastest", DEFAULT_G),
                       out[value_key("gemm-model-speedup", "layer-graphed", "fastest", g_key(1))])


def _share_flag(report: Report, graphed: bool) -> str:
    """The flags of what the GEMM share divides: BF16's autocast GEMM times (when the result holds
    that mode) over BF16's step time."""
    gemms = report.time_flag("autocast", BASELINE) if "autocast" in report.modes else None
    step = report.step(BASELINE, graphed=graphed).cross_check_flag
    return "; ".join(f for f in (gemms, step) if f)


def gemm_names(report: Report) -> dict[str, tuple[str, ...]]:
    """Every spelling a role may use for each GEMM -> the ``op/pass`` ids it names (one, or several
    when GEMMs share a shape: ``attn_out`` Fprop and Dgrad are both ``MxHxH``)."""
    names: dict[str, list[str]] = {}

    def add(spelling: str, gid: str) -> None:
        owners = names.setdefault(spelling.lower(), [])
        if gid not in owners:
            owners.append(gid)

    for g in report.gemms:
        gid = f"{g.op}/{g.pass_}"
        for spelling in (gid, f"{g.op}.{g.pass_}", g.label, g.label.replace(" ", "")):
            add(spelling, gid)
        if g.pass_ == "fprop":
            add(g.op, gid)  # an op alone means its forward GEMM, by definition
    return {spelling: tuple(owners) for spelling, owners in names.items()}


class GemmNameError(LookupError):
    """A GEMM name that names no GEMM, or several (the message names the candidates)."""


def resolve_gemm(names: Mapping[str, tuple[str, ...]], text: str) -> str:
    """The one lookup of a GEMM a role names: its ``op/pass`` id, or :class:`GemmNameError`.

    A shape several GEMMs share is ambiguous, never "the first one": the error names them all.
    """
    key = text.strip().lower()
    owners = names.get(key) or names.get(key.replace(" ", "")) or ()
    if len(owners) == 1:
        return owners[0]
    if owners:
        raise GemmNameError(f"GEMM {text.strip()!r} is ambiguous: it is the shape of {', '.join(owners)}; "
                            "name one as op/pass")
    known = sorted({gid for ids in names.values() for gid in ids})
    raise GemmNameError(f"no GEMM {text.strip()!r} (known: {', '.join(known)})")


def step_detail_values(out: dict[str, Value], report: Report, precision: str, where: str) -> None:
    """``gemm-breakdown``, ``gemm-plan`` and ``gemm-energy`` of one precision's graphed step, from the
    same stored blocks and the same functions the page's figure and sentences use (the plan typed:
    ``report.result.plan``, a step the door refused read as failed)."""
    mode = "layer-graphed"
    name = PRECISIONS[precision].display
    at = f"{name}, CUDA-graphed layer step, {where}"
    bars = breakdown_figure.bars(report.result.layer, mode)
    # a bar the door dropped (its parts did not add up to its step) is said so, not "not measured"
    why = next((f"of {PRECISIONS[p].display} {REFUSED}{problem}" for p in (precision, BASELINE)
                if (problem := breakdown_figure.refused(report.result, p, mode)) is not None), NOT_IN_RESULT)
    breakdown_values(out, "gemm-breakdown", mode, bars, precision, at, why)
    plan = report.result.plan
    if plan is None or plan.recipe != precision:
        why = (f"the result's plan is {PRECISIONS[plan.recipe].display}'s" if plan is not None
               else f"plan {NOT_IN_RESULT}")
        for item in PLAN_ITEMS:
            out[value_key("gemm-plan", mode, precision, item)] = Value("", f"{at}: {why}")
    else:
        out[value_key("gemm-plan", mode, precision, "kept")] = Value(
            precision_plan.kept_words(plan.keep_in_bf16), f"{precision_plan.plan_sentence(plan)} ({at})")
        vs_bf16, vs_fp8, why = precision_plan.plan_speedups(plan)
        for item, value, against in (("vs-bf16", vs_bf16, "all-BF16"), ("vs-fp8", vs_fp8, "all-FP8")):
            out[value_key("gemm-plan", mode, precision, item)] = (
                Value(format_speedup(value), f"{value:.3f}× {against}: the plan's step, {at}")
                if _finite(value) else Value("", f"{at}: {why or 'not measured'}"))
    energy_values(out, report, precision, at)


def energy_values(out: dict[str, Value], report: Report, precision: str, at: str) -> None:
    """``gemm-energy``'s joules, tokens per joule (per GPU, as the door computes it:
    :func:`~gemm_bench.results.energy.tokens_per_gpu`) and the comparison with BF16's energy (``vs-bf16``:
    the significance rule's words, :mod:`gemm_bench.report.energy_compare`, as the page's energy line),
    from the typed entries: an entry the door refused (too few power samples, a power beyond the board)
    is failed, and said so."""
    mode = "layer-graphed"
    block = report.result.energy
    found = report.result.energies()
    entry = found.get(precision)
    if entry is None:
        missing = energy_missing(block, precision)
        for item in ENERGY_ITEMS:
            out[value_key("gemm-energy", mode, precision, item)] = Value("", f"{at}: {missing}")
        return
    above = power_above_limit(report.result.device.fields, entry.power_w, [entry.power_source])
    out[value_key("gemm-energy", mode, precision, "joules")] = Value(
        f"{joules(entry.energy_mj)} J",
        f"{entry.energy_mj / 1000:.4g} J per step at {entry.power_w:.0f} W{_energy_spread(entry)}, the recipe's "
        f"step alone: {at}" + (f" ({above})" if above else ""))
    low, high = entry.tokens_per_j_low, entry.tokens_per_j_high
    rates = (f" (quartiles {low:.0f}–{high:.0f})" if low is not None and high is not None
             else " (the power samples' spread was not stored)")
    out[value_key("gemm-energy", mode, precision, "tokens-per-joule")] = Value(
        f"{entry.tokens_per_j:.0f} tokens/J", f"{entry.tokens_per_j:.1f} tokens per joule{rates}: {at}")
    base = found.get(BASELINE)
    key = value_key("gemm-energy", mode, precision, "vs-bf16")
    if precision == BASELINE or base is None:
        out[key] = Value("", f"{at}: " + ("BF16 is the reference" if precision == BASELINE
                                          else f"BF16's {energy_missing(block, BASELINE)}"))
        return
    said = energy_compare.compare(entry, base)
    out[key] = Value(said.words, f"{joules(entry.energy_mj)} J{_energy_spread(entry)} against BF16's "
                                 f"{joules(base.energy_mj)} J{_energy_spread(base)}: {said.words} ({at})")


def _energy_spread(entry: EnergyEntry) -> str:
    bounds = entry.bounds()
    return (f" (quartiles {joules(bounds[0])}–{joules(bounds[1])} J)" if bounds
            else " (the power samples' spread was not stored)")
