"""Whether a recipe's energy per step differs from BF16's: the site's one significance rule on joules.

Why: each recipe's energy is one window of about 15 NVML power samples (:mod:`gemm_bench.results.energy`),
and the samples scatter by tens of watts around their median. "FP8 Current uses 1.5 J less per step"
is a claim only when the two energies' spreads (the power samples' quartiles x the time per step)
do not overlap: :func:`gemm_bench.report.fastest.overlaps` / :func:`~gemm_bench.report.fastest.clearly_less`
on a :class:`~gemm_bench.report.fastest.Point` of each energy, the rule of the ★, ``≈`` and the answer.
Tokens per joule is the step's tokens over the energy (the same tokens for every recipe of a result),
so it differs exactly where the energy does and needs no verdict of its own.

A result measured before the quartiles were stored has no spread: the comparison then says so and
claims no difference (``overlaps`` alone would let the bare values decide, as speedups did before
their spreads were stored; for energy no result ever had a spread to lean on). It reads the typed entries
of a checked result (:class:`gemm_bench.results.typed.EnergyEntry`, :meth:`~gemm_bench.results.typed.Result.energies`),
never the JSON dict: an energy the door refused is a failed entry there, and never compared. The page's energy line,
``:gemm-energy:`` … ``vs-bf16`` and ``gemm-bench report`` all take their words from here.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

from gemm_bench.question.precisions import BASELINE, PRECISIONS
from gemm_bench.report.fastest import Point, clearly_less, overlaps
from gemm_bench.results.energy import joules
from gemm_bench.results.typed import EnergyEntry

#: The verdicts, as the JSON report stores them.
LESS, MORE, WITHIN, UNKNOWN, UNSETTLED = "less", "more", "within", "unknown", "unsettled"
#: What a comparison says when either energy has no stored spread (every result before the quartiles).
NOT_STORED = "the sampling spread was not stored, so no difference is claimed"
#: The widest power spread (interquartile range over the median) of a window whose median is read as
#: the recipe's draw. Why: a reader pass found Mixtral 8x22B's FP8 Delayed window (H100, session 12)
#: with its median equal to its first quartile, 413.8 W, one reading repeated over half the window
#: while every other recipe drew about 700 W and its own samples rose to 688 W: the board's readings
#: had not settled, and its "13 J less per step, beyond the sampling spread" was an artefact. Its IQR
#: was 66% of the median; the other 43 windows of that refresh spread 0.2-26%. Above this bound the
#: window's energy is shown, and no difference is claimed.
UNSETTLED_IQR = 0.3


@dataclasses.dataclass(frozen=True)
class EnergyComparison:
    """One recipe's energy per step against BF16's, judged by the site's significance rule."""

    precision: str
    verdict: str
    #: The recipe's energy minus BF16's, in mJ (negative: the recipe uses less).
    difference_mj: float

    @property
    def words(self) -> str:
        """A phrase a sentence can hold after the two numbers: "7.91 J less per step, beyond the
        sampling spread", "within the sampling spread", or :data:`NOT_STORED`."""
        if self.verdict == UNKNOWN:
            return NOT_STORED
        if self.verdict == UNSETTLED:
            return (f"the power readings did not settle in the window (their quartiles spread over "
                    f"{UNSETTLED_IQR:.0%} of the median), so no difference is claimed")
        if self.verdict == WITHIN:
            return "within the sampling spread"
        return f"{joules(abs(self.difference_mj))} J {self.verdict} per step, beyond the sampling spread"

    def clause(self) -> str:
        """The phrase with the recipe's name, for a sentence that lists every recipe."""
        name = PRECISIONS[self.precision].display
        if self.verdict in (UNKNOWN, UNSETTLED):
            return f"for {name} {self.words}"
        return f"{name} {'is' if self.verdict == WITHIN else 'uses'} {self.words}"

    @property
    def label(self) -> str:
        """The verdict in a table cell (``gemm-bench compare``): "1.52 J less", "within", "no spread",
        "unsettled"; the sentence's :attr:`words` in a dozen columns."""
        if self.verdict in (LESS, MORE):
            return f"{joules(abs(self.difference_mj))} J {self.verdict}"
        return {WITHIN: "within", UNKNOWN: "no spread", UNSETTLED: "unsettled"}.get(self.verdict, self.verdict)

    @property
    def claims(self) -> bool:
        """Whether the verdict says the recipe uses less or more than BF16 (what a page then claims)."""
        return self.verdict in (LESS, MORE)

    def to_json(self) -> dict[str, Any]:
        return {"verdict": self.verdict, "difference_mj": round(self.difference_mj, 3), "words": self.words}


def energy_point(entry: EnergyEntry) -> Point:
    """A measured energy entry as the significance rule's point: its energy (mJ) and its spread
    (None, None for an entry measured before the quartiles were stored)."""
    bounds = entry.bounds()
    return Point(entry.energy_mj, *(bounds if bounds is not None else (None, None)))


def unsettled(entry: EnergyEntry) -> bool:
    """Whether a window's power readings spread too widely for its median to be the recipe's draw
    (:data:`UNSETTLED_IQR`); False for an entry without stored quartiles."""
    q1, q3, median = entry.power_w_q1, entry.power_w_q3, entry.power_w
    if q1 is None or q3 is None or not median:
        return False
    return (q3 - q1) / median > UNSETTLED_IQR


def compare(entry: EnergyEntry, base: EnergyEntry) -> EnergyComparison:
    """``entry``'s energy against ``base``'s (BF16's): less or more only beyond both spreads, and
    only where both windows' readings settled (:func:`unsettled`)."""
    mine, theirs = energy_point(entry), energy_point(base)
    difference = mine.value - theirs.value
    if None in (mine.low, mine.high, theirs.low, theirs.high):
        verdict = UNKNOWN
    elif unsettled(entry) or unsettled(base):
        verdict = UNSETTLED
    elif overlaps(mine, theirs):
        verdict = WITHIN
    else:
        verdict = LESS if clearly_less(mine, theirs) else MORE
    return EnergyComparison(entry.precision, verdict, difference)


def against_bf16(found: Mapping[str, EnergyEntry]) -> dict[str, EnergyComparison]:
    """Every measured recipe's comparison with BF16's energy (``found``: precision -> measured entry,
    :meth:`gemm_bench.results.typed.Result.energies`), in the site's order; {} without BF16's."""
    base = found.get(BASELINE)
    if base is None:
        return {}
    return {p: compare(found[p], base) for p in PRECISIONS if p in found and p != BASELINE}


def comparison_sentence(found: Mapping[str, EnergyEntry]) -> str:
    """One sentence for the energy line under a model's step (the page's and the report's): each
    recipe against BF16's step, or why no recipe is said to differ; "" without a pair to compare."""
    compared = against_bf16(found)
    if not compared:
        return ""
    if all(c.verdict == UNKNOWN for c in compared.values()):
        return ("This result did not store the power samples' spread (their quartiles), so it claims no "
                "difference between these energies: a difference may lie within the sampling scatter.")
    said = "; ".join(c.clause() for c in compared.values())
    return f"Against BF16's energy per step: {said}."
