"""Failed is failed: which measurements of a result failed, for every reader of that fact.

A failed measurement (a CUDA error, an out-of-memory step, a reading refused when read by
:mod:`gemm_bench.results.invariants`) is neither fresh nor unsupported: the build's freshness
(``gemm_benchmark.execution.assess``, the freshness page, the build's last line) counts its result
as failed, and the planners (:func:`gemm_bench.results.stack.remeasure`, shared by auto-mode builds
and ``gemm-bench refresh``) measure it again, since a failure may be transient and must not need
``--force``. One predicate, :func:`failed_cells`, so they can never disagree about what failed.

It judges every row a page can show of a result, not only the modes a directive names (issue 43:
a summary without ``:modes:`` shows both layer-step rows, and a failed graphed step read "failed"
on the page while the freshness page and the build's last line called the result fresh): the
per-GEMM cells of the modes asked, both layer-step modes, the model step's parts and the step
energy entries. The model step and the energy are measured in the layer step's run, so a failure
there plans the layer step again (:func:`failed_modes`).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from gemm_bench.question.precisions import LAYER_MODES

#: The row of :func:`failed_cells` for a failed model-step part and a failed energy entry.
MODEL_STEP_ROW = "model-step"
ENERGY_ROW = "energy"


def failed_cells(doc: Mapping[str, Any], modes: Iterable[str], precisions: Iterable[str]) -> list[tuple[str, str, str]]:
    """(row, precision, reason) of each failed measurement of ``precisions`` a page may show, in the
    document's order, one per (row, precision), the first failure's reason: the per-GEMM cells of
    ``modes``, the layer step's cells in both layer modes (every routing; a summary shows both,
    whatever its modes), the model step's parts (row :data:`MODEL_STEP_ROW`) and the energy entries
    (row :data:`ENERGY_ROW`)."""
    entries = [(str(cell["mode"]), str(cell["precision"]), str(cell["status"]), str(cell.get("reason", "")))
               for cell in [*doc.get("cells", []), *(doc.get("layer", []) or [])]]
    blocks = ((MODEL_STEP_ROW, doc.get("model_step"), "parts"), (ENERGY_ROW, doc.get("energy"), "steps"))
    for row, block, key in blocks:
        entries += [(row, str(entry.get("precision")), str(entry.get("status")), str(entry.get("reason", "")))
                    for entry in (block.get(key, []) if isinstance(block, Mapping) else [])]
    return failed_rows(entries, modes, precisions)


def failed_rows(entries: Iterable[tuple[str, str, str, str]], modes: Iterable[str],
                precisions: Iterable[str]) -> list[tuple[str, str, str]]:
    """:func:`failed_cells` over a result's entries as (row, precision, status, reason), in the
    document's order: a cell's or layer cell's row is its mode, a model-step part's
    :data:`MODEL_STEP_ROW`, an energy entry's :data:`ENERGY_ROW`. The one predicate, for the raw
    document and the typed result (:meth:`~gemm_bench.results.typed.Result.failed_cells`)."""
    wanted_rows, wanted_precisions = {*modes, *LAYER_MODES, MODEL_STEP_ROW, ENERGY_ROW}, set(precisions)
    found: dict[tuple[str, str], str] = {}
    for row, precision, status, reason in entries:
        if status == "failed" and row in wanted_rows and precision in wanted_precisions:
            found.setdefault((row, precision), reason)
    return [(row, precision, reason) for (row, precision), reason in found.items()]


def failed_modes(doc: Mapping[str, Any], modes: Iterable[str], precisions: Iterable[str]) -> list[str]:
    """The modes to measure again for the failures :func:`failed_cells` finds: each failed per-GEMM
    mode among ``modes``, and both layer modes for a failed layer step, model-step part or energy
    entry (all three come from the layer step's run)."""
    rows = {row for row, _, _ in failed_cells(doc, modes, precisions)}
    if rows & {MODEL_STEP_ROW, ENERGY_ROW}:
        rows |= set(LAYER_MODES)
    return [mode for mode in dict.fromkeys([*modes, *LAYER_MODES]) if mode in rows]
