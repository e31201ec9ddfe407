"""The summary's words: the answer sentence per model and GPU, cell notes, SQNR once per recipe and pass.

Everything here is computed from the same :class:`~gemm_bench.report.report.Report` objects and the
same :func:`.values.decide_fastest` rule as the summary's table, so the sentence cannot recommend
what the table does not star: "train in X" only where X's training step is faster than BF16's
beyond the two steps' measured spread, "stay in BF16" otherwise.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence

from gemm_bench.question.precisions import BASELINE, PRECISIONS
from gemm_bench.question.shapes import PASS_NAMES, PASSES
from gemm_bench.report.report import Report
from gemm_benchmark.values import Fastest, Point, decide_fastest, step_points, total_points

#: Note markers of a table's cells without a number (the reason is written under the table).
_MARKS = "¹²³⁴⁵⁶⁷⁸⁹"


class Notes:
    """Numbered notes under one table: each distinct text once, its mark in every cell it explains."""

    def __init__(self) -> None:
        self.texts: list[str] = []

    def mark(self, text: str) -> str:
        if text not in self.texts:
            self.texts.append(text)
        index = self.texts.index(text)
        return _MARKS[index] if index < len(_MARKS) else f"[{index + 1}]"

    def lines(self) -> list[str]:
        return [f"{_MARKS[i] if i < len(_MARKS) else f'[{i + 1}]'} {text}" for i, text in enumerate(self.texts)]


@dataclasses.dataclass(frozen=True)
class Answer:
    """What one model on one GPU should train in, and the sentence that says so."""

    #: The training step's verdict (CUDA graphs; eager where a result has no graphed step), or the
    #: autocast GEMMs' where no step is measured; None when nothing besides BF16 has a number.
    verdict: Fastest | None
    #: "step" or "gemms": which quantity the verdict is about.
    basis: str
    sentence: str


def _name(precision: str) -> str:
    return PRECISIONS[precision].display


def step_verdict(report: Report, precisions: Sequence[str]) -> tuple[Fastest | None, bool, dict[str, Point]]:
    """The training step's verdict: CUDA-graphed where measured (the site's headline), else eager.
    Returns (verdict, graphed, points)."""
    for graphed in (True, False):
        points = step_points(report, precisions, graphed=graphed)
        if points:
            return decide_fastest(points), graphed, points
    return None, True, {}


def answer(report: Report, mode: str, precisions: Sequence[str], *, device: str, model: str = "") -> Answer:
    """The recommendation for ``model`` on ``device``, from its step (or its GEMMs) and its SQNR."""
    gemm_points = total_points(report, mode, precisions)
    gemms = decide_fastest(gemm_points)
    step, graphed, points = step_verdict(report, precisions)
    basis = "step" if step is not None else "gemms"
    verdict = step if step is not None else gemms
    who = f"{model} on the {device}" if model else f"On the {device}"
    subject = f"{who}: " if model else f"{who}, "
    if verdict is None:
        return Answer(None, basis, f"{subject}no precision besides BF16 is measured yet.")
    quantity = ("the training step" + ("" if graphed else " (eager)")) if basis == "step" else "the autocast GEMMs"
    words: list[str] = []
    if verdict.answer != BASELINE:
        chosen = verdict.answer
        verb = "runs" if basis == "step" else "run"  # the step runs; the GEMMs run
        text = f"{subject}train in {_name(chosen)}: {quantity} {verb} {verdict.speedup:.2f}× as fast as in BF16"
        if basis == "step" and chosen in gemm_points:
            text += f" (its autocast GEMMs {gemm_points[chosen].value:.2f}×)"
        elif basis == "gemms":
            text += " (no training step is measured yet)"
        if verdict.tied:
            names = ", ".join(_name(p) for p in verdict.tied)
            text += f"; {names} {'is' if len(verdict.tied) == 1 else 'are'} within the measured spread of it"
        words.append(text + ".")
        words.append(_accuracy(report, mode, precisions, chosen, points if basis == "step" else gemm_points))
    else:
        others = {p: v for p, v in (points if basis == "step" else gemm_points).items() if p != BASELINE}
        best = max(others, key=lambda p: others[p].value)
        if others[best].value <= 1.0:
            text = (f"{subject}stay in BF16: no FP8 recipe makes {quantity} faster "
                    f"(the best of them, {_name(best)}, runs at {others[best].value:.2f}× BF16's speed)")
        else:
            text = (f"{subject}stay in BF16: no FP8 recipe makes {quantity} clearly faster "
                    f"({_name(best)}'s {others[best].value:.2f}× is within the measured spread)")
        if basis == "step" and gemms is not None and gemms.answer != BASELINE:
            text += (f", although {_name(gemms.answer)} makes its autocast GEMMs alone "
                     f"{gemms.speedup:.2f}× as fast")
        words.append(text + ".")
    return Answer(verdict, basis, " ".join(w for w in words if w))


def _accuracy(report: Report, mode: str, precisions: Sequence[str], chosen: str, speeds: Mapping[str, Point]) -> str:
    """The accuracy the chosen recipe costs: its least accurate GEMM's SQNR, and the most accurate
    recipe's where that one keeps clearly more (0.5 dB or more) and what speed it gives."""
    sqnr = {p: report.sqnr(mode, p) for p in precisions if p != BASELINE}
    mine = sqnr.get(chosen)
    if mine is None:
        return ""
    text = f"Its least accurate GEMM keeps {mine:.1f} dB SQNR"
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


def pass_names() -> list[tuple[str, str]]:
    return [(p, PASS_NAMES[p]) for p in PASSES]
