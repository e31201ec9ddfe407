"""Every value a role may quote, computed once from a directive's answer.

The directive calls :func:`device_values` with the same :class:`~gemm_bench.report.report.Report` objects
its tables and figures are drawn from, and records the result in the environment; roles only look
values up (:mod:`.roles`). A table and a role on any page therefore cannot disagree, and a role
never re-reads a file or recomputes a number.

Displayed text and tooltips round to the shown precision (tooltips one digit more), never a raw
``1.6148308599957166``.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Iterable, Mapping

from gemm_bench.question.precisions import BASELINE, MODE_NAMES, PRECISIONS
from gemm_bench.report import figures
from gemm_bench.report.report import Report
from gemm_benchmark.records import Value, value_key

ROLE_KINDS: tuple[str, ...] = ("gemm-speedup", "gemm-time", "gemm-eager-time", "gemm-tflops")


def _finite(value: float | None) -> bool:
    return value is not None and isinstance(value, (int, float)) and math.isfinite(value) and value > 0


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
FASTEST_RULE = ("the precision with the largest whole-model GEMM speedup vs BF16 among those the directive shows "
                "and this device measured in this mode, BF16 included: a precision whose speedup lies within "
                "BF16's measured spread is not called faster than BF16")


#: The same rule for the training step (``layer``, ``layer-graphed``): the summary's answer sentence.
STEP_RULE = ("the precision with the largest training-step speedup vs BF16 among those measured, BF16 included: "
             "a precision whose step speedup lies within the two steps' measured spread is not called faster")


@dataclasses.dataclass(frozen=True)
class Point:
    """A speedup vs BF16 and its measured spread (``low``/``high`` None when unknown)."""

    value: float
    low: float | None = None
    high: float | None = None


#: BF16's speedup vs itself: exactly 1, no spread of its own (see :func:`decide_fastest`).
BF16_POINT = Point(1.0, 1.0, 1.0)


def overlaps(a: Point, b: Point) -> bool:
    """Whether two speedups' spreads overlap: their difference is not significant."""
    if a.low is None or a.high is None or b.low is None or b.high is None:
        return False
    return a.high >= b.low and b.high >= a.low


@dataclasses.dataclass(frozen=True)
class Fastest:
    """The answer to "which precision is fastest here", decided by :func:`decide_fastest` only."""

    #: The precision to recommend: BF16 when no other precision is clearly (beyond the spread) faster.
    answer: str
    #: The answer's speedup vs BF16 (1.0 when the answer is BF16).
    speedup: float
    #: The largest speedup's precision (differs from ``answer`` when it is within BF16's spread).
    best: str
    best_speedup: float
    #: The other precisions whose spread overlaps the answer's (shown ≈: not significantly slower).
    tied: tuple[str, ...]
    #: Lower precisions among the candidates ("FP8", "FP8 or FP4"), for the words.
    family: str

    @property
    def starred(self) -> str | None:
        """The precision a table marks ★: the answer, unless the answer is BF16 (no column of its own)."""
        return None if self.answer == BASELINE else self.answer

    @property
    def text(self) -> str:
        """The answer in words: a precision's name, or BF16 and why."""
        if self.answer != BASELINE:
            return PRECISIONS[self.answer].display
        if self.best == BASELINE:
            return f"BF16 (no {self.family} recipe is faster here)"
        return (f"BF16 (no {self.family} recipe is clearly faster here: {PRECISIONS[self.best].display}'s "
                f"{self.best_speedup:.2f}× is within the measured spread)")


def decide_fastest(points: Mapping[str, Point]) -> Fastest | None:
    """The one rule for "fastest", used by the summary, the roles and every other place that picks one.

    ``points`` holds every precision shown that has a speedup vs BF16 with its spread. BF16 is
    always a candidate, at exactly 1.0: its run-to-run variability is already inside every other
    precision's ratio spread (:func:`gemm_bench.report.figures.ratio_spread`), so it is not counted
    twice. The largest speedup wins; an exact tie goes to BF16. A winner whose spread reaches down
    to 1.0 is not clearly faster than BF16: BF16 is then the answer. None when nothing besides BF16
    has a number.
    """
    candidates = {p: v for p, v in points.items() if p != BASELINE and _finite(v.value)}
    if not candidates:
        return None
    everyone = {BASELINE: BF16_POINT, **candidates}
    best = max(everyone, key=lambda p: (everyone[p].value, p == BASELINE))
    answer = best if best == BASELINE or not overlaps(everyone[best], everyone[BASELINE]) else BASELINE
    tied = tuple(p for p in everyone if p != answer and overlaps(everyone[p], everyone[answer]))
    family = "FP8 or FP4" if any(p == "nvfp4" for p in candidates) else "FP8"
    return Fastest(answer, everyone[answer].value, best, everyone[best].value, tied, family)


def total_points(report: Report, mode: str, precisions: Iterable[str]) -> dict[str, Point]:
    """Whole-model speedups vs BF16 with their spreads (BF16 included) of the precisions measured."""
    out: dict[str, Point] = {}
    for precision in dict.fromkeys((BASELINE, *precisions)):
        total = report.total(mode, precision)
        if total.status != "measured" or not _finite(total.speedup_vs_bf16):
            continue
        value, low, high = figures.total_point(report, mode, precision)
        assert value is not None
        out[precision] = BF16_POINT if precision == BASELINE else Point(value, low, high)
    return out


def step_points(report: Report, precisions: Iterable[str], *, graphed: bool,
                routing: str = "balanced") -> dict[str, Point]:
    """Training-step speedups vs BF16 with their spreads, of the precisions whose step is measured:
    the same :func:`decide_fastest` rule as the GEMMs'. The spread reads each step time as its
    median -/+ half its IQR, as :func:`gemm_bench.report.figures.ratio_spread` reads a GEMM's: the
    ratio's relative half-width is half the two steps' relative IQRs summed (``StepResult.spread``)."""
    out: dict[str, Point] = {}
    for precision in dict.fromkeys(precisions):
        if precision == BASELINE:
            continue
        step = report.step(precision, graphed=graphed, routing=routing)
        value = step.speedup_vs_bf16
        if step.status != "measured" or not _finite(value):
            continue
        assert value is not None
        half = (step.spread or 0.0) / 2
        out[precision] = Point(value, value * (1 - half), value * (1 + half))
    return out


def fastest_total(report: Report, mode: str, precisions: Iterable[str] | None = None) -> Fastest | None:
    """:func:`decide_fastest` over a report's whole-model speedups in ``mode``."""
    return decide_fastest(total_points(report, mode, report.precisions if precisions is None else precisions))


#: What a reader sees for each reason a number is absent (the table owner uses the same words).
STATUS_WORDS = {"failed": "failed", "unsupported": "unsupported", "missing": "not measured"}


def unavailable_text(status: str, reason: str, *, limit: int = 60) -> str:
    """``failed: <reason>`` / ``unsupported: <reason>`` (shortened to ``limit``), never one "n/a" for all."""
    word = STATUS_WORDS.get(status, status or "n/a")
    reason = " ".join(reason.split())
    if not reason:
        return word
    if len(reason) > limit:
        reason = reason[:limit - 1].rstrip() + "…"
    return f"{word}: {reason}"


def device_values(reports: dict[str, Report], device: str, name: str) -> dict[str, Value]:
    """All quotable values of one device's answer, keyed by :func:`~.records.value_key`."""
    out: dict[str, Value] = {}
    named = f" ({name})" if name else ""
    for mode, report in reports.items():
        where = f"{MODE_NAMES[mode]}, {device}{named}"
        _fastest_values(out, fastest_total(report, mode), mode, "gemm-speedup", where,
                        rule=FASTEST_RULE, absent="no precision besides BF16 measured")
        if mode == report.modes[0]:  # the training step: once per result, like its other step values
            for graphed, layer_mode in ((False, "layer"), (True, "layer-graphed")):
                _fastest_values(out, decide_fastest(step_points(report, report.precisions, graphed=graphed)),
                                layer_mode, "gemm-step-speedup", f"{layer_mode} step {device}{named}",
                                rule=STEP_RULE, absent="no step besides BF16's measured",
                                of=" for the whole layer step", noun="fastest step")
        for precision in report.precisions:
            where = f"{PRECISIONS[precision].display}, {MODE_NAMES[mode]}, {device}" + (f" ({name})" if name else "")
            total = report.total(mode, precision)
            if total.status != "measured" or not _finite(total.model_ms):
                why = f"{where}: {total.status}" + (f" ({total.reason})" if total.reason else "")
                out[value_key("gemm-time", mode, precision)] = Value("", why, total.status, total.reason)
                out[value_key("gemm-speedup", mode, precision)] = Value("", why, total.status, total.reason)
            else:
                assert total.model_ms is not None
                layers = f"{report.num_layers} layers" if report.kind == "model" else "all shapes"
                out[value_key("gemm-time", mode, precision)] = Value(
                    f"{format_ms(total.model_ms)} ms", f"{_tooltip_ms(total.model_ms)} for {layers}: {where}")
                speedup = total.speedup_vs_bf16
                if _finite(speedup):
                    assert speedup is not None
                    _, low, high = figures.total_point(report, mode, precision)
                    out[value_key("gemm-speedup", mode, precision)] = Value(
                        format_speedup(speedup), f"{speedup:.3f}× BF16 for {layers}: {where}", low=low, high=high)
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
                    for kind in ROLE_KINDS:
                        out[value_key(kind, mode, precision, gid)] = Value("", why, cell.status, cell.reason)
                    continue
                assert cell.ms is not None
                out[value_key("gemm-time", mode, precision, gid)] = Value(
                    f"{format_ms(cell.ms)} ms", f"{_tooltip_ms(cell.ms)}: {at}")
                out[value_key("gemm-eager-time", mode, precision, gid)] = (
                    Value(f"{format_ms(cell.eager_ms)} ms",
                          f"{_tooltip_ms(cell.eager_ms)} called eagerly, host work included: {at}")
                    if _finite(cell.eager_ms) and cell.eager_ms
                    else Value("", f"{at}: no eager time in this result (method v4 measures it)"))
                tflops = cell.tflops
                shown = f"{format_tflops(tflops)} TFLOP/s"
                out[value_key("gemm-tflops", mode, precision, gid)] = (
                    Value(shown, f"{_tooltip_tflops(tflops)} TFLOP/s: {at}") if _finite(tflops) and tflops
                    else Value("", f"{at}: no throughput"))
                pct = report.pct_of_peak(mode, precision, gemm)
                out[value_key("gemm-peak", mode, precision, gid)] = (
                    Value(f"{pct:.0f}%", f"{pct:.1f}% of the dense peak: {at}") if _finite(pct) and pct
                    else Value("", f"{at}: {report.pct_of_peak_reason(mode, precision, gemm)}"))
                sqnr = report.sqnr(mode, precision, gemm)
                out[value_key("gemm-sqnr", mode, precision, gid)] = (
                    Value(f"{sqnr:.1f} dB", f"{sqnr:.2f} dB SQNR (Gaussian inputs): {at}") if sqnr is not None
                    else Value("", f"{at}: {report.sqnr_reason(mode, precision, gemm)}"))
                speedup = report.gemm_speedup(mode, precision, gemm)
                out[value_key("gemm-speedup", mode, precision, gid)] = (
                    Value(format_speedup(speedup), f"{speedup:.3f}× BF16: {at}") if _finite(speedup) and speedup
                    else Value("", f"{at}: no BF16 time of the same run to compare with"))
    return out


def _absent(status: str, reason: str) -> tuple[str, str]:
    """(status, reason) of a value that is absent because its own cell is (measured: no status)."""
    return ("", "") if status == "measured" else (status, reason)


def _beyond_values(out: dict[str, Value], report: Report, mode: str, precision: str, where: str) -> None:
    """SQNR of the whole layer (its least accurate GEMM), and the training step (once per precision)."""
    sqnr = report.sqnr(mode, precision)
    out[value_key("gemm-sqnr", mode, precision)] = (
        Value(f"{sqnr:.1f} dB", f"{sqnr:.2f} dB SQNR, the layer's least accurate GEMM (Gaussian inputs): {where}")
        if sqnr is not None else Value("", f"{where}: {report.sqnr_reason(mode, precision)}"))
    if mode != report.modes[0]:
        return
    for graphed, layer_mode in ((False, "layer"), (True, "layer-graphed")):
        step = report.step(precision, graphed=graphed)
        at = f"{PRECISIONS[precision].display}, {layer_mode} step" + where.split(",", 2)[-1]
        speedup, share = step.speedup_vs_bf16, step.gemm_share
        point = step_points(report, [precision], graphed=graphed).get(precision)
        out[value_key("gemm-step-speedup", layer_mode, precision)] = (
            Value(format_speedup(speedup), f"{speedup:.3f}× BF16 for the whole layer step: {at}",
                  low=point.low if point else None, high=point.high if point else None)
            if _finite(speedup) and speedup else Value("", f"{at}: {step.speedup_reason or step.reason}",
                                                       *_absent(step.status, step.reason)))
        out[value_key("gemm-share", layer_mode, precision)] = (
            Value(f"{share * 100:.0f}%", f"{share * 100:.1f}% of the BF16 step is its GEMMs: {at}")
            if _finite(share) and share else Value("", f"{at}: {step.gemm_share_reason or step.reason}"))


def _fastest_values(out: dict[str, Value], fastest: Fastest | None, mode: str, speed_kind: str, where: str, *,
                    rule: str, absent: str, of: str = "", noun: str = "fastest") -> None:
    """``gemm-fastest`` of one mode and its ``speed_kind`` ``fastest`` value (the GEMMs' speedup, or
    the training step's), from one :func:`decide_fastest` verdict."""
    if fastest is None:
        out[value_key("gemm-fastest", mode, "")] = Value("", f"{where}: {absent}")
        out[value_key(speed_kind, mode, "fastest")] = Value("", f"{where}: {absent}")
        return
    display = PRECISIONS[fastest.answer].display
    ties = f"; within its spread: {', '.join(PRECISIONS[p].display for p in fastest.tied)}" if fastest.tied else ""
    out[value_key("gemm-fastest", mode, "")] = Value(
        fastest.text, f"{display} ({fastest.speedup:.3f}× BF16{of}): {rule}{ties}; {where}")
    out[value_key(speed_kind, mode, "fastest")] = Value(
        format_speedup(fastest.speedup), f"{fastest.speedup:.3f}× BF16 by {display}, the {noun}: {where}")


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
