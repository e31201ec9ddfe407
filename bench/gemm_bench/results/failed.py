"""Failed is failed: which measurements of a result failed, for every reader of that fact.

A failed cell (a CUDA error, an out-of-memory step) is neither fresh nor unsupported: the build's
freshness (``gemm_benchmark.execution.assess``, the freshness page, the build's last line) counts its
result as failed, and the planners (:func:`gemm_bench.results.stack.remeasure`, shared by auto-mode
builds and ``gemm-bench refresh``) measure its mode again, since a failure may be transient and must
not need ``--force``. One predicate, so the two can never disagree about what failed.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any


def failed_cells(doc: Mapping[str, Any], modes: Iterable[str], precisions: Iterable[str]) -> list[tuple[str, str, str]]:
    """(mode, precision, reason) of each failed per-GEMM cell or layer-step cell (every routing) of
    ``modes`` and ``precisions`` in a valid result document, in the document's order, one per
    (mode, precision): the first failure's reason."""
    wanted_modes, wanted_precisions = set(modes), set(precisions)
    found: dict[tuple[str, str], str] = {}
    for cell in [*doc.get("cells", []), *(doc.get("layer", []) or [])]:
        key = (cell["mode"], cell["precision"])
        if cell["status"] == "failed" and key[0] in wanted_modes and key[1] in wanted_precisions:
            found.setdefault(key, str(cell.get("reason", "")))
    return [(mode, precision, reason) for (mode, precision), reason in found.items()]


def failed_modes(doc: Mapping[str, Any], modes: Iterable[str], precisions: Iterable[str]) -> list[str]:
    """The modes among ``modes`` with a failed cell of one of ``precisions``: what to measure again."""
    failed = {mode for mode, _, _ in failed_cells(doc, modes, precisions)}
    return [mode for mode in dict.fromkeys(modes) if mode in failed]
