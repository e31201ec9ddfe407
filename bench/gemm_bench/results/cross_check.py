"""Method v4's promise, checked per result: a published time is the GPU's time for the region.

Every region timed as CUDA-graph replays is profiled during its first batch of timed rounds (the
timer's cross-check) and stores the median of its kernels' summed durations as ``kernel_ms`` beside its
``ms``. Their ratio is 1 plus the GPU's idle time inside the region: the short gaps between a
region's dependent kernels and a graph's launch, which a step pays too, and never the host's
Python work, which a training step hides. Bounds per result file:

* the median ratio over all checked regions is at most :data:`MEDIAN_MAX`;
* every region whose kernels take at least :data:`MIN_KERNEL_MS` is at most :data:`REGION_MAX`
  (below that, a few microseconds of launch and gaps are a large share of a tiny region).

A region outside its bound is flagged where its number is shown (:func:`region_flag`), not only in
``gemm-bench report``. Eager quantities (``eager`` beside each cell, the ``layer`` step) include
host time by definition and are not judged. Pure: no torch.
"""

from __future__ import annotations

import dataclasses
import statistics
from collections.abc import Iterable, Mapping
from typing import Any

MEDIAN_MAX = 1.05
REGION_MAX = 1.15
MIN_KERNEL_MS = 0.05


def ratio(item: Mapping[str, Any]) -> float | None:
    """Event time / kernel time of the same profiled launches of a measured cell, layer cell or peer
    row (``kernel_ratio``); None when it was not cross-checked.

    A result whose cells have no ``kernel_ratio`` profiled every timed round, so its published
    median over ``kernel_ms`` is that ratio. Since the cross-check profiles the first batch of
    rounds only, the published median (every round) over ``kernel_ms`` also holds how the clock
    moved between those rounds and the rest (a power-limited H100 slowed by 15% within one group)
    and the profiler's own cost in the profiled rounds; neither is idle GPU time, which is what the
    bounds judge."""
    ms, kernel = item.get("ms"), item.get("kernel_ms")
    if item.get("status") != "measured" or not isinstance(ms, (int, float)) or not isinstance(kernel, (int, float)):
        return None
    same_launches = item.get("kernel_ratio")
    if isinstance(same_launches, (int, float)) and not isinstance(same_launches, bool):
        return float(same_launches)
    return ms / kernel if kernel > 0 else None


def region_flag(item: Mapping[str, Any]) -> str | None:
    """Why this region's published time is not plainly GPU time, or None when it is (or is unchecked)."""
    r = ratio(item)
    if r is None or r <= REGION_MAX or item["kernel_ms"] < MIN_KERNEL_MS:
        return None
    return (f"timed {r:.2f}x its profiled kernel time ({item['kernel_ms']:.4g} ms of kernels, in the same "
            "launches): the GPU was idle for part of this region")


@dataclasses.dataclass(frozen=True)
class Verdict:
    """The cross-check of one result file."""

    regions: int
    median: float | None
    #: (label, ratio) of each region over :data:`REGION_MAX` whose kernels take at least :data:`MIN_KERNEL_MS`.
    outside: tuple[tuple[str, float], ...]

    @property
    def holds(self) -> bool:
        return self.median is not None and self.median <= MEDIAN_MAX and not self.outside

    def sentence(self) -> str:
        if self.median is None:
            return "no region of this result was cross-checked against the profiler"
        text = (f"event time / kernel time of the profiled launches: median {self.median:.3f} over "
                f"{self.regions} region(s) (bound {MEDIAN_MAX:g})")
        if self.outside:
            text += (f"; {len(self.outside)} region(s) of at least {MIN_KERNEL_MS * 1000:g} us above {REGION_MAX:g}: "
                     + ", ".join(f"{label} {r:.2f}" for label, r in self.outside))
        return text


def labelled_items(doc: Mapping[str, Any]) -> Iterable[tuple[str, Mapping[str, Any]]]:
    """Every timed item of a result with a label a reader can find it by."""
    for c in doc.get("cells", []):
        yield f"{c['mode']} {c['op']}/{c['pass']} {c['precision']}", c
    for c in doc.get("layer", []) or []:
        yield f"{c['mode']} step {c['precision']}", c
    for p in doc.get("peers", []) or []:
        yield f"peer {p['backend']} {p['op']}/{p['pass']}", p


def verdict(doc: Mapping[str, Any]) -> Verdict:
    """The file's cross-check against the bounds of this module."""
    ratios: list[float] = []
    outside: list[tuple[str, float]] = []
    for label, item in labelled_items(doc):
        r = ratio(item)
        if r is None:
            continue
        ratios.append(r)
        if region_flag(item) is not None:
            outside.append((label, round(r, 3)))
    return Verdict(len(ratios), statistics.median(ratios) if ratios else None, tuple(outside))
