"""The site's significance rule for a speedup against BF16: clearly faster means above 1 beyond its
spread. One function, below the report, so the door (:mod:`~gemm_bench.results.invariants`: a stored
plan's FP8 list must follow its own projections' spreads) and the report's plan
(:mod:`gemm_bench.report.precision_plan`) judge with the same rule.

Pure: no torch.
"""

from __future__ import annotations

import math


def clearly_faster(value: float | None, low: float | None, high: float | None) -> bool:
    """Whether a speedup vs BF16 is clearly (beyond its spread) above 1: the site's one rule.

    The same test as ``decide_fastest``'s "does its spread overlap BF16's exact 1.0": a speedup
    above 1 whose spread is unknown counts as clear there too."""
    if value is None or not math.isfinite(value) or value <= 1.0:
        return False
    if low is None or high is None:
        return True
    return not (high >= 1.0 >= low)
