"""The measurement plan: which (mode, precision, GEMM) cells to time, and which to record as
unsupported without touching the GPU. Pure: support comes in as data from the GPU backends.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping, Sequence

from gemm_bench.question.precisions import BASELINE, PRECISIONS, gemm_modes
from gemm_bench.question.shapes import GemmShape


@dataclasses.dataclass(frozen=True)
class Support:
    """Whether this GPU + TE build can run a precision, with TE's own reason when not."""

    available: bool
    reason: str = ""


@dataclasses.dataclass(frozen=True)
class PlannedCell:
    mode: str
    precision: str
    gemm: GemmShape


@dataclasses.dataclass
class Plan:
    to_measure: list[PlannedCell]
    #: Cells answered without measuring: (cell, reason), status ``unsupported``.
    unsupported: list[tuple[PlannedCell, str]]

    def rounds(self) -> list[tuple[tuple[int, int, int, int], list[PlannedCell]]]:
        """Cells grouped by the GEMM the GPU runs, so precisions of one shape are interleaved.

        Two ops with the same (m, k, n, groups) are still timed separately: the plan does not
        assume that equal shapes cost the same, it measures.
        """
        groups: dict[tuple[str, str], list[PlannedCell]] = {}
        for cell in self.to_measure:
            groups.setdefault((cell.gemm.op, cell.gemm.pass_), []).append(cell)
        return [(cells[0].gemm.key, cells) for cells in groups.values()]


def make_plan(
    gemms: Iterable[GemmShape],
    precisions: Sequence[str],
    modes: Sequence[str],
    support: Mapping[str, Support],
) -> Plan:
    """Every requested cell, split into those to time and those unsupported (with reasons).

    BF16 is always measured in each requested mode (added if not asked for): every speedup is
    relative to it, and a speedup against a baseline from another run would mix two runs' clocks.
    Layer modes (``layer``, ``layer-graphed``) are ignored here: they time a whole layer, not
    per-GEMM cells (:func:`gemm_bench.measure.backends.layer_step.measure_layer_step`).
    """
    wanted = list(dict.fromkeys([BASELINE, *precisions]))
    to_measure: list[PlannedCell] = []
    unsupported: list[tuple[PlannedCell, str]] = []
    gemms = list(gemms)
    for mode in gemm_modes(modes):
        for precision_id in wanted:
            precision = PRECISIONS[precision_id]
            check = support.get(precision_id, Support(True))
            for gemm in gemms:
                cell = PlannedCell(mode, precision_id, gemm)
                if not precision.has_mode(mode):
                    unsupported.append((cell, precision.absent_modes[mode]))
                elif not check.available:
                    unsupported.append((cell, check.reason or f"{precision.display} is not supported here"))
                else:
                    to_measure.append(cell)
    return Plan(to_measure, unsupported)
