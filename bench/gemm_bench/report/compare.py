"""Comparing two results of one question: two devices, or two software stacks of one device.

``gemm-bench compare A B`` answers "what changed?" for a reviewer: per GEMM and per total, for
every mode and precision both results measured, the ratio of A's time to B's (above 1: B is
faster). A change is *flagged* only when the two medians differ by more than the spreads the
two runs measured (the sum of their interquartile ranges), so run-to-run noise is not reported
as a regression. Speedups vs BF16 are shown per result and are always computed inside one run
(:class:`gemm_bench.report.report.Report`): a speedup never divides one run's time by another's.

GEMMs are paired by what they are, never by where they sit in a file's list: :func:`gemm_identity`
is the one key (op, pass, M, K, N, groups, mode, precision), so two runs that stored one sweep in
another order compare equal, and a GEMM only one side holds is listed as ``only in A`` or ``only
in B``.

Beside the GEMMs, what a reader acts on is compared too, each change judged against its spread:

* the training step (``layer``, ``layer-graphed``): each precision's step speedup vs BF16 in A and
  in B; a change is flagged when the two speedups differ by more than their spreads (each
  speedup's relative spread, the IQR over the median of its step plus BF16's, as
  :meth:`gemm_bench.report.report.Report.step` gives it, times the speedup); a step measured on
  one side only, or failed on one, is listed too;
* SQNR, per GEMM pass and input distribution: it has no run-to-run spread (fixed seeds; the H100
  and H200 results re-measured in session 9 read identical SQNRs in every cell), so a change of
  more than :data:`SQNR_TOLERANCE_DB` is flagged, and a cell measured on one side only is listed;
* energy per CUDA-graphed step: each recipe's verdict against BF16 (:mod:`~.energy_compare`, the
  pages' rule); a verdict that changes where either side claims less or more is flagged;
* studies (``studies/``, :func:`~gemm_bench.report.study_compare.compare_studies`, in a module of
  their own: a study is not a question's result).

Results are read as typed objects only (:func:`gemm_bench.results.typed.parse`, through
:class:`~gemm_bench.report.report.Report`): a number the door refused (energy from too few power
samples, a stuck sensor) is a failed entry on that side, never compared as measured.

Directories compare file by file (the refresh pull request compares the cache before and after
a merge), studies included; a file only one side has is listed as added or removed.

Every string that comes from a result file is escaped where it is shown
(:mod:`gemm_bench.results.untrusted_text`): the text output is one line per row with no
terminal controls, the Markdown (a pull request body) has no markup, HTML or mention of its own.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from gemm_bench.question.precisions import BASELINE, LAYER_MODES, MODE_NAMES, PRECISION_IDS, PRECISIONS
from gemm_bench.question.shapes import OP_NAMES, PASS_NAMES, GemmShape
from gemm_bench.question.vocabulary import LAYER_STEP, MODEL_STEP, title
from gemm_bench.report.compare_basis import (
    SQNR_TOLERANCE_DB,
    STACK_FIELDS,
    CompareError,
    describe_stack,
    markdown_wrapped,
    sqnr_changed,
    wrapped,
)
from gemm_bench.report.energy_compare import EnergyComparison, against_bf16
from gemm_bench.report.model_step import part_absence
from gemm_bench.report.report import STEP_WORDS, Cell, Report, StepResult
from gemm_bench.report.study_compare import (
    StudyComparison,
    compare_studies,
    describe_study,
    study_identity,
)
from gemm_bench.results import energy, studies
from gemm_bench.results.accuracy_schema import ACCURACY_MODES, DISTRIBUTIONS
from gemm_bench.results.cache import MAX_FILE_BYTES, CacheError, read_document
from gemm_bench.results.invariants import check
from gemm_bench.results.schema import ResultError, validate
from gemm_bench.results.typed import Result, parse
from gemm_bench.results.untrusted_text import field, markdown

#: compare's own names, and those of the modules under it that its callers import from here.
__all__ = ["SQNR_TOLERANCE_DB", "CompareError", "Comparison", "DirectoryComparison", "compare", "compare_dirs",
           "compare_studies", "describe_side", "gemm_identity", "load_result", "wrapped"]

#: Pull-request bodies are limited to 65,536 characters; leave room for the workflow's text.
MARKDOWN_LIMIT = 60_000

@dataclasses.dataclass(frozen=True)
class Change:
    """One GEMM (or a total, ``gemm`` None) in one mode and precision, in A and in B."""

    mode: str
    precision: str
    gemm: str | None  # "op/pass" or None for the per-layer total
    shape: str
    a_ms: float | None
    b_ms: float | None
    #: Combined spread (sum of the two interquartile ranges), ms; None where a side has none.
    spread_ms: float | None
    a_speedup: float | None = None  # vs BF16 inside run A (totals only)
    b_speedup: float | None = None
    #: ``only in A`` / ``only in B``: a GEMM one result holds and the other does not.
    unmatched: str | None = None

    @property
    def ratio(self) -> float | None:
        """A's time over B's: above 1, B is faster."""
        if self.a_ms and self.b_ms:
            return self.a_ms / self.b_ms
        return None

    @property
    def flagged(self) -> bool:
        """The medians differ by more than the runs' measured spread."""
        if self.a_ms is None or self.b_ms is None or self.spread_ms is None:
            return False
        return abs(self.a_ms - self.b_ms) > self.spread_ms

    def to_json(self) -> dict[str, Any]:
        return {"mode": self.mode, "precision": self.precision, "gemm": self.gemm, "shape": self.shape,
                "a_ms": self.a_ms, "b_ms": self.b_ms, "ratio": self.ratio, "spread_ms": self.spread_ms,
                "flagged": self.flagged, "a_speedup_vs_bf16": self.a_speedup, "b_speedup_vs_bf16": self.b_speedup,
                "unmatched": self.unmatched}


@dataclasses.dataclass(frozen=True)
class StepChange:
    """One precision's training step (``layer`` or ``layer-graphed``) in A and in B."""

    mode: str
    precision: str
    a_ms: float | None
    b_ms: float | None
    #: Step speedup vs BF16 inside each run, and its relative spread (step's + BF16's IQR / median).
    a_speedup: float | None
    b_speedup: float | None
    a_spread: float | None
    b_spread: float | None
    #: What a side that has no speedup says instead (``failed: ...``, ``missing``); "" where it has one.
    a_status: str = ""
    b_status: str = ""

    @property
    def flagged(self) -> bool:
        """The speedups differ by more than their spreads, or one side lost (or gained) its speedup;
        BF16's own row (its time only) by its step time against the two steps' IQRs."""
        if self.precision == BASELINE:
            return self.a_status != self.b_status
        if self.a_speedup is None or self.b_speedup is None:
            return (self.a_speedup is None) != (self.b_speedup is None)
        allowed = self.a_speedup * (self.a_spread or 0.0) + self.b_speedup * (self.b_spread or 0.0)
        return abs(self.a_speedup - self.b_speedup) > allowed

    def to_json(self) -> dict[str, Any]:
        return {"mode": self.mode, "precision": self.precision, "a_ms": self.a_ms, "b_ms": self.b_ms,
                "a_speedup_vs_bf16": self.a_speedup, "b_speedup_vs_bf16": self.b_speedup,
                "a_relative_spread": self.a_spread, "b_relative_spread": self.b_spread,
                "a_status": self.a_status, "b_status": self.b_status, "flagged": self.flagged}


@dataclasses.dataclass(frozen=True)
class ModelStepChange:
    """One precision's model's step at G micro-batches per optimizer step, in A and in B: its
    tokens/s per GPU and its speedup over BF16 (tokens/s over BF16's, inside each run) with the spread
    :meth:`gemm_bench.report.report.Report.model_step` composes at the parts' quartiles."""

    microbatches: int
    precision: str
    a_tokens_per_s: float | None
    b_tokens_per_s: float | None
    a_speedup: tuple[float, float, float] | None  # (median, low, high)
    b_speedup: tuple[float, float, float] | None
    #: Why a side has no model step for this recipe ("" where it has one).
    a_status: str = ""
    b_status: str = ""

    @property
    def flagged(self) -> bool:
        """The speedups differ by more than the two spreads together (the training step's rule), or
        one side has a model step and the other not; BF16's own row only by the latter."""
        if (self.a_tokens_per_s is None) != (self.b_tokens_per_s is None):
            return True
        if self.precision == BASELINE or self.a_speedup is None or self.b_speedup is None:
            return False
        allowed = (self.a_speedup[2] - self.a_speedup[1]) + (self.b_speedup[2] - self.b_speedup[1])
        return abs(self.a_speedup[0] - self.b_speedup[0]) > allowed

    def to_json(self) -> dict[str, Any]:
        def speedup(value: tuple[float, float, float] | None) -> dict[str, float] | None:
            return None if value is None else {"value": value[0], "low": value[1], "high": value[2]}

        return {"microbatches": self.microbatches, "precision": self.precision,
                "a_tokens_per_s": self.a_tokens_per_s, "b_tokens_per_s": self.b_tokens_per_s,
                "a_speedup_vs_bf16": speedup(self.a_speedup), "b_speedup_vs_bf16": speedup(self.b_speedup),
                "a_status": self.a_status, "b_status": self.b_status, "flagged": self.flagged}


@dataclasses.dataclass(frozen=True)
class SqnrChange:
    """One GEMM pass's SQNR (dB) in one mode, precision and input distribution, in A and in B."""

    mode: str
    precision: str
    gemm: str  # "op/pass"
    distribution: str
    a_db: float | None
    b_db: float | None

    @property
    def delta_db(self) -> float | None:
        return self.b_db - self.a_db if self.a_db is not None and self.b_db is not None else None

    @property
    def flagged(self) -> bool:
        """More than :data:`SQNR_TOLERANCE_DB` apart, or measured on one side only."""
        return sqnr_changed(self.a_db, self.b_db)

    def to_json(self) -> dict[str, Any]:
        return {"mode": self.mode, "precision": self.precision, "gemm": self.gemm, "distribution": self.distribution,
                "a_db": self.a_db, "b_db": self.b_db, "delta_db": self.delta_db, "flagged": self.flagged}


@dataclasses.dataclass(frozen=True)
class EnergySide:
    """One recipe's energy per CUDA-graphed training step in one result, and its verdict against that
    result's BF16 (:mod:`gemm_bench.report.energy_compare`, the rule the pages and the report use)."""

    #: "measured", or what the result says instead ("failed: ...", "not measured").
    status: str
    energy_mj: float | None = None
    #: The energy's spread (the power samples' quartiles x the time per step); None where not stored.
    low_mj: float | None = None
    high_mj: float | None = None
    tokens_per_j: float | None = None
    #: Against BF16's energy of the same result; None for BF16 itself or where either is not measured.
    vs_bf16: EnergyComparison | None = None

    @property
    def measured(self) -> bool:
        return self.energy_mj is not None

    def to_json(self) -> dict[str, Any]:
        return {"status": self.status, "energy_mj": self.energy_mj, "energy_mj_low": self.low_mj,
                "energy_mj_high": self.high_mj, "tokens_per_j": self.tokens_per_j,
                "vs_bf16": self.vs_bf16.to_json() if self.vs_bf16 is not None else None}


@dataclasses.dataclass(frozen=True)
class EnergyChange:
    """One recipe's energy per step in A and in B. What a page says of it is the verdict against
    BF16 ("FP8 Delayed uses 3.78 J less per step"), so a change is a verdict that changes where
    either side claims less or more (a claim that reverses, appears or goes), or an energy measured
    on one side only; BF16's own row only by the latter (an energy moves with the device and stack:
    the verdict is the comparable part, as the speedup is for a step)."""

    precision: str
    a: EnergySide
    b: EnergySide

    @property
    def flagged(self) -> bool:
        if self.a.measured != self.b.measured:
            return True
        if self.precision == BASELINE or self.a.vs_bf16 is None or self.b.vs_bf16 is None:
            return False
        va, vb = self.a.vs_bf16, self.b.vs_bf16
        return va.verdict != vb.verdict and (va.claims or vb.claims)

    def to_json(self) -> dict[str, Any]:
        return {"precision": self.precision, "a": self.a.to_json(), "b": self.b.to_json(), "flagged": self.flagged}


def _energy_sides(result: Result) -> dict[str, EnergySide]:
    """Each recipe a result's energy block holds: its measured energy with the verdict against BF16's,
    or why it has none (a failed entry's reason, a refused one's included)."""
    if result.energy is None:
        return {}
    verdicts = against_bf16(result.energies())
    out: dict[str, EnergySide] = {}
    for entry in result.energy.entries:
        if entry.precision not in PRECISIONS:
            continue
        if not entry.measured:
            out[entry.precision] = EnergySide(entry.status + (f": {entry.reason}" if entry.reason else ""))
            continue
        low, high = entry.bounds() or (None, None)
        out[entry.precision] = EnergySide("measured", entry.energy_mj, low, high, entry.tokens_per_j,
                                          verdicts.get(entry.precision))
    return out


def compare_energy(a: Result, b: Result) -> list[EnergyChange]:
    """Each recipe either result measured the step energy of, in the site's order: nothing where
    neither has energy (a result measured before it was)."""
    sa, sb = _energy_sides(a), _energy_sides(b)
    absent = EnergySide("not measured")
    out = []
    for pid in PRECISIONS:
        side_a, side_b = sa.get(pid, absent), sb.get(pid, absent)
        if side_a.measured or side_b.measured:
            out.append(EnergyChange(pid, side_a, side_b))
    return out



def _paired_db(cells_a: dict[Any, float | None], cells_b: dict[Any, float | None]) -> list[tuple[Any, float | None,
                                                                                                 float | None]]:
    """(key, A's dB, B's dB) of every key either side holds a measurement of, in A's order then B's."""
    pairs = [(key, cells_a.get(key), cells_b.get(key)) for key in dict.fromkeys([*cells_a, *cells_b])]
    return [(key, a, b) for key, a, b in pairs if a is not None or b is not None]


def describe_side(result: Result, escape: Callable[[str], str] = field) -> str:
    """Device, stack and date of a result: what a reader needs to know which side is which
    (:func:`~.compare_basis.describe_stack`; each string from the file through ``escape``)."""
    return describe_stack(result.device.name, _stack(result), escape)


def _iqr(stats: dict[str, Any]) -> float | None:
    value = stats.get("iqr_ms")
    return float(value) if isinstance(value, (int, float)) else None


@dataclasses.dataclass
class Comparison:
    a: Result
    b: Result
    modes: list[str]
    precisions: list[str]
    gemms: list[Change]
    totals: list[Change]
    title: str = ""
    steps: list[StepChange] = dataclasses.field(default_factory=list)
    sqnr: list[SqnrChange] = dataclasses.field(default_factory=list)
    model_steps: list[ModelStepChange] = dataclasses.field(default_factory=list)
    energy: list[EnergyChange] = dataclasses.field(default_factory=list)

    @property
    def flagged_model_steps(self) -> list[ModelStepChange]:
        return [m for m in self.model_steps if m.flagged]

    @property
    def flagged_energy(self) -> list[EnergyChange]:
        return [e for e in self.energy if e.flagged]

    @property
    def flagged(self) -> list[Change]:
        return [c for c in (*self.totals, *self.gemms) if c.flagged]

    @property
    def flagged_steps(self) -> list[StepChange]:
        return [s for s in self.steps if s.flagged]

    @property
    def flagged_sqnr(self) -> list[SqnrChange]:
        return [s for s in self.sqnr if s.flagged]

    def to_json(self) -> dict[str, Any]:
        return {
            "question_hash": self.a.question_hash,
            "a": {"device": self.a.device.name, "provenance": _stack(self.a)},
            "b": {"device": self.b.device.name, "provenance": _stack(self.b)},
            "ratio": "a_ms / b_ms (above 1: B is faster)",
            "flagged_when": "|a_ms - b_ms| > iqr_a + iqr_b",
            "totals": [t.to_json() for t in self.totals],
            "gemms": [g.to_json() for g in self.gemms],
            "steps": [t.to_json() for t in self.steps],
            "step_flagged_when": "|a_speedup - b_speedup| > a_speedup * a_relative_spread + b_speedup * "
                                 "b_relative_spread, or a speedup on one side only",
            "sqnr": [c.to_json() for c in self.sqnr],
            "sqnr_flagged_when": f"|b_db - a_db| > {SQNR_TOLERANCE_DB} dB, or measured on one side only",
            "model_steps": [m.to_json() for m in self.model_steps],
            "model_step_flagged_when": "|a_speedup - b_speedup| > (a_high - a_low) + (b_high - b_low), or a model "
                                       "step on one side only",
            "energy": [e.to_json() for e in self.energy],
            "energy_flagged_when": "the verdict against BF16 changes where either side claims less or more, or an "
                                   "energy measured on one side only",
        }

    def to_text(self) -> str:
        lines = [f"A: {describe_side(self.a)}", f"B: {describe_side(self.b)}",
                 "ratio = A ms / B ms (above 1: B faster); ! = change larger than the runs' spread (IQR A + IQR B)"]
        for mode in self.modes:
            lines += ["", f"== {MODE_NAMES[mode]} =="]
            lines.append(f"  {'precision':<14}{'A ms/layer':>12}{'B ms/layer':>12}{'ratio':>8}  "
                         f"{'A vs BF16':>9}{'B vs BF16':>10}")
            for t in (t for t in self.totals if t.mode == mode):
                lines.append(f"  {PRECISIONS[t.precision].display:<14}{_num(t.a_ms, 12, 3)}{_num(t.b_ms, 12, 3)}"
                             f"{_ratio(t, 8)} {_x(t.a_speedup, 9)}{_x(t.b_speedup, 10)}")
            lines.append("")
            rows = [g for g in self.gemms if g.mode == mode]
            # Columns as wide as their entries (a sweep's names are long, a model's short); a GEMM one
            # side lacks says so where its ratio would be.
            name_w = max([4, *(len(field(_gemm_name(g.gemm))) for g in rows)])
            shape_w = max([5, *(len(field(g.shape)) for g in rows)])
            lines.append(f"  {'GEMM':<{name_w}}  {'shape':>{shape_w}}  {'precision':<12}{'A ms':>10}{'B ms':>10}"
                         f" {'ratio':>8}")
            for g in rows:
                lines.append(f"  {field(_gemm_name(g.gemm)):<{name_w}}  {field(g.shape):>{shape_w}}  "
                             f"{PRECISIONS[g.precision].display:<12}{_num(g.a_ms, 10, 4)}{_num(g.b_ms, 10, 4)} "
                             + (f"  {field(g.unmatched)}" if g.unmatched else _ratio(g, 8)))
        lines += self._model_step_lines()
        lines += self._energy_lines()
        if self.steps:
            lines += ["", f"== {title(LAYER_STEP)} (speedup vs BF16 inside each run; "
                      "! = change beyond both spreads) =="]
            lines.append(f"  {'step':<34}{'precision':<14}{'A ms':>10}{'B ms':>10}{'A vs BF16':>12}{'B vs BF16':>12}")
            for st in self.steps:
                lines.append(f"  {STEP_WORDS[st.mode]:<34}{PRECISIONS[st.precision].display:<14}{_num(st.a_ms, 10, 3)}"
                             f"{_num(st.b_ms, 10, 3)}{_step_x(st.a_speedup, st.a_spread, st.a_status, 12)}"
                             f"{_step_x(st.b_speedup, st.b_spread, st.b_status, 12)}{'  !' if st.flagged else ''}")
        changed = self.flagged_sqnr
        if self.sqnr:
            lines += ["", f"== SQNR (dB; ! = change above {SQNR_TOLERANCE_DB:g} dB or one side only) =="]
            if not changed:
                lines.append(f"  no SQNR changed by more than {SQNR_TOLERANCE_DB:g} dB ({len(self.sqnr)} cells)")
            for q in changed:
                lines.append(f"  {MODE_NAMES[q.mode]:<14}{PRECISIONS[q.precision].display:<14}"
                             f"{field(_gemm_name(q.gemm)):<28}{DISTRIBUTIONS[q.distribution].display[:12]:<13}"
                             f"{_num(q.a_db, 8, 1)}{_num(q.b_db, 8, 1)}  !")
        return wrapped(lines)

    def _model_step_lines(self) -> list[str]:
        """The model's step per G and recipe: tokens/s per GPU and speedup vs BF16 in A and B."""
        if not self.model_steps:
            return []
        # The "!" legend under the rows: beside the header it ran to 116 columns, wrapped mid-row.
        lines = ["", f"== {title(MODEL_STEP)} (tokens/s per GPU; speedup vs BF16 in each run, with its spread) ==",
                 f"  {'G':>2}  {'precision':<13}{'A tokens/s':>12}{'B tokens/s':>12}  {'A vs BF16':<20}"
                 f"{'B vs BF16':<20}".rstrip()]
        for m in self.model_steps:
            lines.append(f"  {m.microbatches:>2}  {PRECISIONS[m.precision].display:<13}{_num(m.a_tokens_per_s, 12, 0)}"
                         f"{_num(m.b_tokens_per_s, 12, 0)}  {_model_x(m.a_speedup, m.a_status):<20}"
                         f"{_model_x(m.b_speedup, m.b_status):<20}{'!' if m.flagged else ''}".rstrip())
        lines.append("  ! = a speedup that changed beyond both spreads, or a model step on one side only")
        return lines

    def _energy_lines(self) -> list[str]:
        """Each recipe's energy per step (J, with its quartiles' spread), tokens per joule and the verdict
        against BF16 in A and in B: a reversed "uses less" is a change (before: never compared)."""
        if not self.energy:
            return []
        lines = ["", f"== Energy per {LAYER_STEP} (J with its spread; tokens/J per GPU; vs BF16 in each run) ==",
                 f"  {'precision':<13}{'A J/step':<18}{'B J/step':<18}{'A tokens/J':>10}{'B tokens/J':>11}"
                 f"  {'A vs BF16':<13}{'B vs BF16':<12}".rstrip()]
        for e in self.energy:
            lines.append(f"  {PRECISIONS[e.precision].display:<13}{_joules(e.a):<18}{_joules(e.b):<18}"
                         f"{_num(e.a.tokens_per_j, 10, 0)}{_num(e.b.tokens_per_j, 11, 0)}  {_verdict(e.a):<13}"
                         f"{_verdict(e.b):<12}{'!' if e.flagged else ''}".rstrip())
        flagged = self.flagged_energy
        lines.append(f"  ! = {len(flagged)} verdict(s) against BF16 changed (a claim of less or more that reverses, "
                     "appears or goes), or an energy on one side only" if flagged else
                     "  no verdict against BF16 changed (the site's rule: less or more only beyond both spreads)")
        lines += [f"  {side}, {PRECISIONS[e.precision].display}: {field(s.status)}" for e in self.energy
                  for side, s in (("A", e.a), ("B", e.b)) if not s.measured and s.status != "not measured"]
        return lines

    def _energy_markdown(self) -> list[str]:
        if not self.energy:
            return []
        flagged = self.flagged_energy
        out = ["", (f"**Energy per step: {len(flagged)} verdict(s) against BF16 changed** (marked !):" if flagged
                    else "Energy per step: no verdict against BF16 changed (less or more only beyond both spreads)."),
               "", "| precision | A J/step | B J/step | A tokens/J | B tokens/J | A vs BF16 | B vs BF16 | changed |",
               "|---|---:|---:|---:|---:|---|---|---|"]
        for e in self.energy:
            out.append(f"| {PRECISIONS[e.precision].display} | {markdown(_joules(e.a))} | {markdown(_joules(e.b))} | "
                       f"{_num(e.a.tokens_per_j, 0, 0)} | {_num(e.b.tokens_per_j, 0, 0)} | "
                       f"{markdown(_verdict(e.a, words=True))} | {markdown(_verdict(e.b, words=True))} | "
                       f"{'!' if e.flagged else ''} |")
        return out

    def _model_steps_markdown(self) -> list[str]:
        if not self.model_steps:
            return []
        flagged = self.flagged_model_steps
        out = ["", (f"**{title(MODEL_STEP)}: {len(flagged)} change(s) beyond the measured spread** (marked !):"
                    if flagged else f"{title(MODEL_STEP)}: no speedup changed by more than the measured spread."),
               "", "| G | precision | A tokens/s | B tokens/s | A vs BF16 | B vs BF16 | changed |",
               "|---:|---|---:|---:|---:|---:|---|"]
        for m in self.model_steps:
            out.append(f"| {m.microbatches} | {PRECISIONS[m.precision].display} | {_num(m.a_tokens_per_s, 0, 0)} | "
                       f"{_num(m.b_tokens_per_s, 0, 0)} | {markdown(_model_x(m.a_speedup, m.a_status))} | "
                       f"{markdown(_model_x(m.b_speedup, m.b_status))} | {'!' if m.flagged else ''} |")
        return out

    def to_markdown(self, *, all_gemms: bool = False) -> str:
        """Totals of every mode and precision, then the GEMMs whose change exceeds the spread."""
        out = []
        if self.title:
            out += [f"### {markdown(self.title)}", ""]
        out += [f"- **A**: {describe_side(self.a, markdown)}", f"- **B**: {describe_side(self.b, markdown)}", ""]
        out += ["| mode | precision | A ms/layer | B ms/layer | A/B | A vs BF16 | B vs BF16 |",
                "|---|---|---:|---:|---:|---:|---:|"]
        for t in self.totals:
            out.append(f"| {MODE_NAMES[t.mode]} | {PRECISIONS[t.precision].display} | {_num(t.a_ms, 0, 3)} | "
                       f"{_num(t.b_ms, 0, 3)} | {_ratio(t, 0).strip()} | {_x(t.a_speedup, 0)} | {_x(t.b_speedup, 0)} |")
        shown = self.gemms if all_gemms else [g for g in self.gemms if g.flagged or g.unmatched]
        out.append("")
        if not shown:
            out.append("No GEMM changed by more than the runs' measured spread.")
        else:
            out += [f"GEMMs changed by more than the measured spread, or held by one side only ({len(shown)}):"
                    if not all_gemms else "Every GEMM:", "",
                    "| mode | precision | GEMM | shape | A ms | B ms | A/B |", "|---|---|---|---|---:|---:|---:|"]
            for g in shown:
                ratio = markdown(g.unmatched) if g.unmatched else _ratio(g, 0).strip()
                out.append(f"| {MODE_NAMES[g.mode]} | {PRECISIONS[g.precision].display} | "
                           f"{markdown(_gemm_name(g.gemm))} | {markdown(g.shape)} | {_num(g.a_ms, 0, 4)} | "
                           f"{_num(g.b_ms, 0, 4)} | {ratio} |")
        out += self._model_steps_markdown() + self._energy_markdown() + self._steps_markdown() + self._sqnr_markdown()
        return markdown_wrapped("\n".join(out)) + "\n"

    def _steps_markdown(self) -> list[str]:
        """Every step both sides show: a step is what the recommendation rests on, so all are listed."""
        if not self.steps:
            return []
        flagged = self.flagged_steps
        out = ["", (f"**{title(LAYER_STEP)}: {len(flagged)} change(s) beyond the measured spread** (marked !):"
                    if flagged else f"{title(LAYER_STEP)}: no speedup changed by more than the measured spread."), "",
               "| step | precision | A ms | B ms | A vs BF16 | B vs BF16 | changed |",
               "|---|---|---:|---:|---:|---:|---|"]
        for t in self.steps:
            out.append(f"| {STEP_WORDS[t.mode]} | {PRECISIONS[t.precision].display} | {_num(t.a_ms, 0, 3)} | "
                       f"{_num(t.b_ms, 0, 3)} | {markdown(_step_x(t.a_speedup, t.a_spread, t.a_status, 0).strip())} | "
                       f"{markdown(_step_x(t.b_speedup, t.b_spread, t.b_status, 0).strip())} | "
                       f"{'!' if t.flagged else ''} |")
        return out

    def _sqnr_markdown(self) -> list[str]:
        if not self.sqnr:
            return []
        changed = self.flagged_sqnr
        if not changed:
            return ["", f"SQNR: no cell changed by more than {SQNR_TOLERANCE_DB:g} dB ({len(self.sqnr)} cells)."]
        out = ["", f"**SQNR: {len(changed)} cell(s) changed by more than {SQNR_TOLERANCE_DB:g} dB, or measured "
                   "on one side only:**", "",
               "| mode | precision | GEMM | input | A dB | B dB | B - A |", "|---|---|---|---|---:|---:|---:|"]
        for q in changed:
            delta = f"{q.delta_db:+.1f}" if q.delta_db is not None else "one side only"
            out.append(f"| {MODE_NAMES[q.mode]} | {PRECISIONS[q.precision].display} | "
                       f"{markdown(_gemm_name(q.gemm))} | {DISTRIBUTIONS[q.distribution].display} | "
                       f"{_num(q.a_db, 0, 1)} | {_num(q.b_db, 0, 1)} | {delta} |")
        return out


def _stack(result: Result) -> dict[str, str]:
    """A result's software stack (:data:`~.compare_basis.STACK_FIELDS`), as its JSON and its line show it."""
    return {k: getattr(result.provenance, k) for k in STACK_FIELDS}


def _gemm_name(gemm: str | None) -> str:
    if gemm is None:
        return "per layer"
    op, pass_ = gemm.split("/")
    return f"{OP_NAMES.get(op, op)} {PASS_NAMES.get(pass_, pass_)}"


def _num(value: float | None, width: int, digits: int) -> str:
    return f"{value:>{width}.{digits}f}" if value is not None else f"{'-':>{width}}"


def _x(value: float | None, width: int) -> str:
    return f"{value:>{width - 1}.2f}x" if value is not None else f"{'-':>{width}}"


def _step_x(speedup: float | None, spread: float | None, status: str, width: int) -> str:
    """``1.57x ±4%`` (the speedup with its relative spread), or what the side says instead."""
    if speedup is None:
        return f"{status or '-':>{width}}"
    text = f"{speedup:.2f}x" + (f" ±{spread:.0%}" if spread else "")
    return f"{text:>{width}}"


def _model_x(speedup: tuple[float, float, float] | None, status: str) -> str:
    """``1.33x (1.30-1.35x)``, the model step's speedup with its spread, or what the side says instead."""
    if speedup is None:
        return status or "-"
    return f"{speedup[0]:.2f}x ({speedup[1]:.2f}-{speedup[2]:.2f}x)"


def _joules(side: EnergySide) -> str:
    """``3.75 (3.70-3.81)``: J per step with its spread; ``3.75`` without one; ``-`` unmeasured."""
    if side.energy_mj is None:
        return "-"
    spread = (f" ({energy.joules(side.low_mj)}-{energy.joules(side.high_mj)})"
              if side.low_mj is not None and side.high_mj is not None else "")
    return energy.joules(side.energy_mj) + spread


def _verdict(side: EnergySide, *, words: bool = False) -> str:
    """A side's verdict against its BF16: the label (``1.52 J less``, ``within``), its sentence's words
    (``words``: the pull request has the room), ``baseline`` for BF16, else its status."""
    if side.vs_bf16 is not None:
        return side.vs_bf16.words if words else side.vs_bf16.label
    if side.measured:
        return "baseline"
    return side.status.split(":", 1)[0]


def _ratio(change: Change, width: int) -> str:
    r = change.ratio
    if r is None:
        return f"{'-':>{width}}"
    return f"{r:>{max(width - 1, 0)}.3f}" + ("!" if change.flagged else " ")


def gemm_identity(mode: str, precision: str, gemm: GemmShape) -> tuple[str, str, int, int, int, int, str, str]:
    """What makes two cells of two results the same measurement: the one pairing key of compare.

    Everything the GEMM is (op, pass, M, K, N, groups) and how it ran (mode, precision); never its
    position in a file's list, which a sweep written in another order changes.
    """
    return (gemm.op, gemm.pass_, gemm.m, gemm.k, gemm.n, gemm.groups, mode, precision)


def _unmatched(ca: Cell | None, cb: Cell | None, a_ms: float | None, b_ms: float | None) -> str | None:
    """``only in A`` / ``only in B`` where one side has no measurement of the GEMM (with the other
    side's status where it holds the cell unmeasured); None where both measured it."""
    if a_ms is not None and b_ms is not None:
        return None
    side, other, other_cell = ("A", "B", cb) if a_ms is not None else ("B", "A", ca)
    return f"only in {side}" + (f" ({other}: {other_cell.status})" if other_cell is not None else "")


def _paired(cells_a: Sequence[Cell], cells_b: Sequence[Cell]) -> list[tuple[Cell | None, Cell | None]]:
    """The cells of A and B paired by :func:`gemm_identity`, in A's order then B's extra ones."""
    by_a = {gemm_identity(c.mode, c.precision, c.gemm): c for c in cells_a}
    by_b = {gemm_identity(c.mode, c.precision, c.gemm): c for c in cells_b}
    return [(by_a.get(key), by_b.get(key)) for key in dict.fromkeys([*by_a, *by_b])]


def compare(a: dict[str, Any], b: dict[str, Any], *, modes: Sequence[str] | None = None,
            precisions: Sequence[str] | None = None, title: str = "") -> Comparison:
    """Compare two validated result documents of the same question (raises :class:`CompareError`).

    Each is read once, typed (``Report(doc).result``; a document that did not come through the door
    is checked on the way), and only its typed objects are read after that."""
    ra, rb = Report(a), Report(b)
    ta_, tb_ = ra.result, rb.result
    if ta_.question_hash != tb_.question_hash:
        raise CompareError(f"the results answer different questions ({ta_.question_hash} on "
                           f"{ta_.device.name}, {tb_.question_hash} on {tb_.device.name}); "
                           "compare only results of the same question")
    chosen_modes = list(modes) if modes else [m for m in ra.modes if m in rb.modes]
    chosen_precisions = (list(precisions) if precisions else
                         [p for p in PRECISION_IDS if p in ra.precisions and p in rb.precisions])
    gemms: list[Change] = []
    totals: list[Change] = []
    for mode in chosen_modes:
        for precision in chosen_precisions:
            ta, tb = ra.total(mode, precision), rb.total(mode, precision)
            if ta.status != "measured" and tb.status != "measured":
                continue  # e.g. MXFP8 on two Hopper runs: nothing to compare
            cells_a, cells_b = ra.cells(mode, precision), rb.cells(mode, precision)
            spreads = [_iqr(c.stats) for c in (*cells_a, *cells_b)]
            total_spread = sum(s for s in spreads if s is not None) if all(s is not None for s in spreads) else None
            totals.append(Change(mode, precision, None, "", ta.per_layer_ms, tb.per_layer_ms, total_spread,
                                 ta.speedup_vs_bf16, tb.speedup_vs_bf16))
            for ca, cb in _paired(cells_a, cells_b):
                a_ms = ca.ms if ca is not None and ca.status == "measured" else None
                b_ms = cb.ms if cb is not None and cb.status == "measured" else None
                if a_ms is None and b_ms is None:
                    continue
                ia = _iqr(ca.stats) if ca is not None else None
                ib = _iqr(cb.stats) if cb is not None else None
                spread = ia + ib if ia is not None and ib is not None else None
                gemm = (ca or cb).gemm  # type: ignore[union-attr]  # one side at least holds it
                unmatched = _unmatched(ca, cb, a_ms, b_ms)
                gemms.append(Change(mode, precision, f"{gemm.op}/{gemm.pass_}", gemm.label, a_ms, b_ms, spread,
                                    unmatched=unmatched))
    return Comparison(ta_, tb_, chosen_modes, chosen_precisions, gemms, totals, title,
                      compare_steps(ra, rb, chosen_precisions), compare_sqnr(ra, rb),
                      compare_model_steps(ra, rb, chosen_precisions), compare_energy(ta_, tb_))


def _step_status(result: StepResult) -> str:
    """What a step's speedup cell says where it has no speedup: BF16 is the baseline (when its step
    was measured), anything else its status (``failed``, ``missing``) or that no speedup is known."""
    if result.status != "measured":
        return result.status
    if result.precision == BASELINE:
        return "baseline"
    return "" if result.speedup_vs_bf16 is not None else "no speedup"


def compare_steps(ra: Report, rb: Report, precisions: Sequence[str]) -> list[StepChange]:
    """Each training step either side holds, per layer mode and precision (BF16 included: its time)."""
    # The site's order: the training step (CUDA-graphed) first, the eager step after it.
    modes = [m for m in (LAYER_MODES[1], LAYER_MODES[0]) if m in ra.layer_modes or m in rb.layer_modes]
    out = []
    for mode in modes:
        for precision in precisions:
            graphed = mode == LAYER_MODES[1]
            sa, sb = ra.step(precision, graphed=graphed), rb.step(precision, graphed=graphed)
            if sa.step_ms is None and sb.step_ms is None and sa.status == sb.status:
                continue  # unsupported (or absent) on both sides: nothing changed
            out.append(StepChange(mode, precision, sa.step_ms, sb.step_ms,
                                  None if precision == BASELINE else sa.speedup_vs_bf16,
                                  None if precision == BASELINE else sb.speedup_vs_bf16,
                                  sa.spread, sb.spread,
                                  _step_status(sa), _step_status(sb)))
    return out


def compare_model_steps(ra: Report, rb: Report, precisions: Sequence[str]) -> list[ModelStepChange]:
    """The model's step of each recipe at every G either side composes (1 and the question's
    G): nothing where neither result has a model step (a result measured before it was)."""
    sa, sb = ra.model_step(), rb.model_step()
    if sa is None and sb is None:
        return []
    gs = sorted({*(sa.rows if sa is not None else ()), *(sb.rows if sb is not None else ())}, reverse=True)
    out = []
    for g in gs:
        for precision in [BASELINE, *(p for p in precisions if p != BASELINE)]:
            row_a = sa.row(precision, g) if sa is not None else None
            row_b = sb.row(precision, g) if sb is not None else None
            if row_a is None and row_b is None:
                continue
            out.append(ModelStepChange(g, precision, row_a.tokens_per_s if row_a else None,
                                       row_b.tokens_per_s if row_b else None, _model_speedup(row_a),
                                       _model_speedup(row_b), _model_status(ra, sa, row_a, precision),
                                       _model_status(rb, sb, row_b, precision)))
    return out


def _model_speedup(row: Any) -> tuple[float, float, float] | None:
    if row is None or row.precision == BASELINE or row.speedup is None:
        return None
    return (row.speedup, row.speedup_low, row.speedup_high)


def _model_status(report: Report, summary: Any, row: Any, precision: str) -> str:
    """What a model-step cell says without a speedup: ``baseline`` for BF16's, else why it has none."""
    if row is not None:
        return "baseline" if precision == BASELINE else ""
    if summary is None:
        return "not measured"
    status, _ = part_absence(report.result, precision)
    return status or "not measured"


def _sqnr_cells(report: Report) -> dict[tuple[str, str, str, str, str, int, int, int, int], float | None]:
    """Every stored SQNR cell of a result by what it is (mode, precision, distribution, and the GEMM
    as :func:`gemm_identity` names it); None where it is stored but not measured."""
    shapes = {(g.op, g.pass_): g for g in report.gemms}
    out: dict[tuple[str, str, str, str, str, int, int, int, int], float | None] = {}
    for cell in report.result.accuracy:
        gemm = shapes.get((cell.op, cell.pass_))
        if gemm is None or cell.mode not in ACCURACY_MODES:
            continue
        key = (cell.mode, cell.precision, cell.distribution, gemm.op, gemm.pass_, gemm.m, gemm.k, gemm.n, gemm.groups)
        out[key] = cell.sqnr_db if cell.measured else None
    return out


def compare_sqnr(ra: Report, rb: Report) -> list[SqnrChange]:
    """Each SQNR cell either side holds, paired by what it is (never by its place in a list)."""
    out = []
    for key, a_db, b_db in _paired_db(_sqnr_cells(ra), _sqnr_cells(rb)):
        mode, precision, distribution, op, pass_ = key[:5]
        out.append(SqnrChange(mode, precision, f"{op}/{pass_}", distribution, a_db, b_db))
    return out


@dataclasses.dataclass
class DirectoryComparison:
    """Two caches (or two studies folders), file by file: what a refresh pull request changes.

    Names are paths relative to the compared directories (``studies/loss-parity--h200.json`` for a
    cache's study); ``added`` and ``studies_added`` are the files only B holds, ``removed`` and
    ``studies_removed`` those only A holds (the text says "only in A", "only in B": comparing two
    caches is not always a refresh, and a file only A holds was not necessarily removed)."""

    compared: list[tuple[str, Comparison]]
    #: The results only B holds, typed (:func:`gemm_bench.results.typed.parse`).
    added: list[tuple[str, Result]]
    removed: list[str]
    unreadable: list[CacheError]
    studies_compared: list[tuple[str, StudyComparison]] = dataclasses.field(default_factory=list)
    studies_added: list[tuple[str, dict[str, Any]]] = dataclasses.field(default_factory=list)
    studies_removed: list[str] = dataclasses.field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        return {"changed": [{"file": name, **c.to_json()} for name, c in self.compared],
                "added": [{"file": name, "device": d.device.name, "provenance": _stack(d)}
                          for name, d in self.added],
                "removed": self.removed, "unreadable": [str(e) for e in self.unreadable],
                "studies": {"changed": [{"file": name, **c.to_json()} for name, c in self.studies_compared],
                            "added": [{"file": name, **study_identity(d)} for name, d in self.studies_added],
                            "removed": self.studies_removed},
                "added_means": "only in B", "removed_means": "only in A"}

    def _empty(self) -> bool:
        return not (self.compared or self.added or self.removed or self.unreadable or self.studies_compared
                    or self.studies_added or self.studies_removed)

    def to_text(self) -> str:
        parts = [f"== {field(name)} ==\n{c.to_text()}" for name, c in self.compared]
        parts += [f"== {field(name)} ==\n{c.to_text()}" for name, c in self.studies_compared]
        parts += [f"only in A: {field(name)}" for name in [*self.removed, *self.studies_removed]]
        parts += [f"only in B: {field(name)}: {describe_side(d)}" for name, d in self.added]
        parts += [f"only in B: {field(name)}: {describe_study(d)}" for name, d in self.studies_added]
        parts += [f"unreadable: {field(str(e))}" for e in self.unreadable]
        return "\n\n".join(wrapped(part.split("\n")) for part in parts) if parts else "no result changed"

    def headline(self) -> list[str]:
        """What changed beyond the spread, counted over every file: the first lines a reviewer reads."""
        gemms = sum(len([g for g in c.gemms if g.flagged]) for _, c in self.compared)
        steps = [(name, t) for name, c in self.compared for t in c.flagged_steps]
        model_steps = sum(len(c.flagged_model_steps) for _, c in self.compared)
        energies = sum(len(c.flagged_energy) for _, c in self.compared)
        sqnr = sum(len(c.flagged_sqnr) for _, c in self.compared)
        study_rows = sum(len(c.flagged) for _, c in self.studies_compared)
        named = "".join(f"; {markdown(name)} {STEP_WORDS[t.mode]} {PRECISIONS[t.precision].display} "
                        f"{markdown(_step_x(t.a_speedup, t.a_spread, t.a_status, 0).strip())} → "
                        f"{markdown(_step_x(t.b_speedup, t.b_spread, t.b_status, 0).strip())}" for name, t in steps[:5])
        out = [f"- GEMMs changed beyond the measured spread: {gemms}",
               f"- model's steps (tokens/s) changed beyond the measured spread: {model_steps}",
               f"- layer steps changed beyond the measured spread: {len(steps)}{named}",
               f"- energy per step: verdicts against BF16 that changed: {energies}",
               f"- SQNR cells changed by more than {SQNR_TOLERANCE_DB:g} dB: {sqnr}",
               f"- study values changed beyond their spread: {study_rows}"]
        return out

    def to_markdown(self) -> str:
        out = ["## Results changed by this refresh", ""]
        if self._empty():
            return "\n".join([*out, "No result changed.", ""])
        out += [*self.headline(), ""]
        out += ["Ratios are old time / new time (above 1: the new run is faster); a change is listed per GEMM "
                "only when it exceeds the two runs' interquartile ranges combined; every layer step is listed "
                "with its speedup and spread; energy, SQNR and study values as their sections say.", ""]
        if self.added:
            out += ["New results:", ""] + [f"- {markdown(name)}: {describe_side(d, markdown)}"
                                           for name, d in self.added] + [""]
        if self.studies_added:
            out += ["New studies:", ""] + [f"- {markdown(name)}: {describe_study(d, markdown)}"
                                           for name, d in self.studies_added] + [""]
        if self.removed or self.studies_removed:
            out += ["Removed (only in the old cache):", ""] + [
                f"- {markdown(name)}" for name in [*self.removed, *self.studies_removed]] + [""]
        if self.unreadable:
            out += ["Unreadable (ignored):", ""] + [f"- {markdown(str(e))}" for e in self.unreadable] + [""]
        text = markdown_wrapped("\n".join(out))
        sections = [(name, "\n" + c.to_markdown(name)) for name, c in self.studies_compared]
        sections += [(name, "\n" + c.to_markdown()) for name, c in self.compared]
        for index, (_name, section) in enumerate(sections):
            if len(text) + len(section) > MARKDOWN_LIMIT:
                rest = [n for n, _ in sections[index:]]
                text += (f"\n_{len(rest)} more changed files are not shown (the pull request body has a size limit): "
                         + ", ".join(markdown(n) for n in rest) + "._\n")
                break
            text += section
        return text


#: The studies' folder inside a cache (:data:`gemm_bench.results.studies.SUBDIR`).
SUBDIR = studies.SUBDIR


def _listed(folder: Path) -> dict[str, Path]:
    """The ``*--*.json`` files of one folder by name ({} for a folder that is not there)."""
    return {p.name: p for p in sorted(folder.glob("*--*.json"))} if folder.is_dir() else {}


def _same_bytes(before: Path | None, path: Path) -> bool:
    """Whether two files hold the same bytes; a side that cannot be read is not the same (its reader
    then says why)."""
    if before is None:
        return False
    try:
        return before.read_bytes() == path.read_bytes()
    except OSError:
        return False


def _holds_study(before: Path | None, after: Path | None) -> bool:
    """Whether a file pair of a directory holds a study (either side; :func:`studies.holds_study`): a
    studies folder given as a directory compares as studies (before, its files were called unreadable
    results, "$.question: is missing")."""
    return any(path is not None and studies.holds_study(path) for path in (before, after))


def compare_dirs(old: Path, new: Path) -> DirectoryComparison:
    """Every result and study file whose content differs between ``old`` and ``new``, compared: the
    files of each directory and of its ``studies/`` folder, each read as what it holds (a result or a
    study, so a studies folder compares too); a file that cannot be read is listed as unreadable."""
    result = DirectoryComparison([], [], [], [])
    for prefix, old_dir, new_dir in (("", old, new), (f"{SUBDIR}/", studies.study_dir(old), studies.study_dir(new))):
        old_files, new_files = _listed(old_dir), _listed(new_dir)
        for name in dict.fromkeys([*old_files, *new_files]):
            before, after = old_files.get(name), new_files.get(name)
            if after is not None and _same_bytes(before, after):
                continue
            shown = prefix + name
            if prefix or _holds_study(before, after):
                _compare_study_files(shown, before, after, result)
            else:
                _compare_result_files(shown, before, after, result)
    return result


def _compare_result_files(name: str, before: Path | None, after: Path | None, result: DirectoryComparison) -> None:
    docs: list[dict[str, Any] | None] = []
    for path in (before, after):
        try:
            docs.append(read_document(path) if path is not None else None)
        except CacheError as exc:
            result.unreadable.append(exc)
            docs.append(None)
    doc_old, doc_new = docs
    if doc_old is not None and doc_new is not None:
        try:
            result.compared.append((name, compare(doc_old, doc_new, title=name)))
        except CompareError as exc:
            result.unreadable.append(CacheError(after or Path(name), f"cannot be compared with A's: {exc}"))
    elif doc_new is not None and before is None:
        result.added.append((name, parse(doc_new)))
    elif doc_old is not None and after is None:
        result.removed.append(name)


def _compare_study_files(name: str, before: Path | None, after: Path | None, result: DirectoryComparison) -> None:
    docs: list[dict[str, Any] | None] = []
    for path in (before, after):
        try:
            docs.append(studies.read_study(path) if path is not None else None)
        except CacheError as exc:
            result.unreadable.append(exc)
            docs.append(None)
    doc_old, doc_new = docs
    if doc_old is not None and doc_new is not None:
        try:
            result.studies_compared.append((name, compare_studies(doc_old, doc_new)))
        except CompareError as exc:
            result.unreadable.append(CacheError(after or Path(name), f"cannot be compared with A's: {exc}"))
    elif doc_new is not None and before is None:
        result.studies_added.append((name, doc_new))
    elif doc_old is not None and after is None:
        result.studies_removed.append(name)


def load_result(path: Path) -> dict[str, Any]:
    """One result file, validated; unlike a cache read it may have any name (a downloaded artifact).

    Raises :class:`CacheError` naming the file.
    """
    try:
        if not path.is_file():  # a device or a FIFO can be endless: never read
            raise CacheError(path, "is not a regular file")
        with path.open("rb") as file:
            data = file.read(MAX_FILE_BYTES + 1)
        if len(data) > MAX_FILE_BYTES:
            raise CacheError(path, f"is more than the {MAX_FILE_BYTES} bytes a result may have")
        doc = validate(json.loads(data.decode("utf-8")))
    except OSError as exc:
        raise CacheError(path, f"cannot be read ({exc.strerror or exc})") from None
    except UnicodeDecodeError:
        raise CacheError(path, "is not UTF-8 text") from None
    except json.JSONDecodeError as exc:
        raise CacheError(path, f"is not valid JSON (line {exc.lineno} column {exc.colno}: {exc.msg})") from None
    except ResultError as exc:
        raise CacheError(path, f"does not match the result schema: {exc}") from None
    # Through the door every reader goes through (results.invariants, as read_document does): an
    # impossible number is demoted, tokens per joule is per GPU, so compare reads what report reads.
    return check(doc)


def dumps_json(value: Any) -> str:
    return json.dumps(value, indent=1)
