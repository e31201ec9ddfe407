"""Every value a role may quote, computed once from a directive's answer.

The directive calls :func:`device_values` with the same :class:`~gemm_bench.report.report.Report` objects
its tables and figures are drawn from, and records the result in the environment; roles only look
values up (:mod:`.roles`). A table and a role on any page therefore cannot disagree, and a role
never re-reads a file or recomputes a number.

Displayed text and tooltips round to the shown precision (tooltips one digit more), never a raw
``1.6148308599957166``.
"""

from __future__ import annotations

import math

from gemm_bench.question.precisions import MODE_NAMES, PRECISIONS
from gemm_bench.report.report import Report
from gemm_benchmark.records import Value, value_key

ROLE_KINDS: tuple[str, ...] = ("gemm-speedup", "gemm-time", "gemm-tflops")


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


#: The rule behind ``:gemm-fastest:`` and the ``fastest`` precision, stated where it is applied.
FASTEST_RULE = ("the precision with the largest whole-model GEMM speedup vs BF16 among those the directive shows "
                "and this device measured in this mode")


def _fastest(report: Report, mode: str) -> tuple[str, float] | None:
    best: tuple[str, float] | None = None
    for precision in report.precisions:
        if precision == "bf16":
            continue
        total = report.total(mode, precision)
        speedup = total.speedup_vs_bf16
        if total.status == "measured" and _finite(speedup) and speedup and (best is None or speedup > best[1]):
            best = (precision, speedup)
    return best


def device_values(reports: dict[str, Report], device: str, name: str) -> dict[str, Value]:
    """All quotable values of one device's answer, keyed by :func:`~.records.value_key`."""
    out: dict[str, Value] = {}
    for mode, report in reports.items():
        fastest = _fastest(report, mode)
        where = f"{MODE_NAMES[mode]}, {device}" + (f" ({name})" if name else "")
        if fastest is None:
            out[value_key("gemm-fastest", mode, "")] = Value("", f"{where}: no precision besides BF16 measured")
            out[value_key("gemm-speedup", mode, "fastest")] = Value("", f"{where}: no precision besides BF16 measured")
        else:
            display = PRECISIONS[fastest[0]].display
            out[value_key("gemm-fastest", mode, "")] = Value(
                display, f"{display} ({fastest[1]:.3f}× BF16): {FASTEST_RULE}; {where}")
            out[value_key("gemm-speedup", mode, "fastest")] = Value(
                format_speedup(fastest[1]), f"{fastest[1]:.3f}× BF16 by {display}, the fastest: {where}")
        for precision in report.precisions:
            where = f"{PRECISIONS[precision].display}, {MODE_NAMES[mode]}, {device}" + (f" ({name})" if name else "")
            total = report.total(mode, precision)
            if total.status != "measured" or not _finite(total.model_ms):
                why = f"{where}: {total.status}" + (f" ({total.reason})" if total.reason else "")
                out[value_key("gemm-time", mode, precision)] = Value("", why)
                out[value_key("gemm-speedup", mode, precision)] = Value("", why)
            else:
                assert total.model_ms is not None
                layers = f"{report.num_layers} layers" if report.kind == "model" else "all shapes"
                out[value_key("gemm-time", mode, precision)] = Value(
                    f"{format_ms(total.model_ms)} ms", f"{_tooltip_ms(total.model_ms)} for {layers}: {where}")
                speedup = total.speedup_vs_bf16
                if _finite(speedup):
                    assert speedup is not None
                    out[value_key("gemm-speedup", mode, precision)] = Value(
                        format_speedup(speedup), f"{speedup:.3f}× BF16 for {layers}: {where}")
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
                        out[value_key(kind, mode, precision, gid)] = Value("", why)
                    continue
                assert cell.ms is not None
                out[value_key("gemm-time", mode, precision, gid)] = Value(
                    f"{format_ms(cell.ms)} ms", f"{_tooltip_ms(cell.ms)}: {at}")
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
        out[value_key("gemm-step-speedup", layer_mode, precision)] = (
            Value(format_speedup(speedup), f"{speedup:.3f}× BF16 for the whole layer step: {at}")
            if _finite(speedup) and speedup else Value("", f"{at}: {step.speedup_reason or step.reason}"))
        out[value_key("gemm-share", layer_mode, precision)] = (
            Value(f"{share * 100:.0f}%", f"{share * 100:.1f}% of the BF16 step is its GEMMs: {at}")
            if _finite(share) and share else Value("", f"{at}: {step.gemm_share_reason or step.reason}"))


def gemm_names(report: Report) -> dict[str, str]:
    """Every spelling a role may use for each GEMM -> its ``op/pass`` id."""
    names: dict[str, str] = {}
    for g in report.gemms:
        gid = f"{g.op}/{g.pass_}"
        for spelling in (gid, f"{g.op}.{g.pass_}", g.label, g.label.replace(" ", "")):
            names.setdefault(spelling.lower(), gid)
        if g.pass_ == "fprop":
            names.setdefault(g.op.lower(), gid)
    return names
