"""Method v4's promise, checked per result: a published time is the GPU's time for the region.

Every region timed as CUDA-graph replays is profiled during its first batch of timed rounds (the
timer's cross-check) and stores the median of its kernels' summed durations as ``kernel_ms`` beside its
``ms``. Their ratio is 1 plus the GPU's idle time inside the region: the short gaps between a
region's dependent kernels and a graph's launch, which a step pays too, and never the host's
Python work, which a training step hides. The bounds (decided in issues 31 and 34), per result file:

* only regions whose kernels take at least :data:`MIN_KERNEL_MS` are *judged*: a CUDA graph's nodes
  add 2-3 us each, a large share of a 3-50 us region and no sign of host work; a shorter region is
  shown with its ratio (:attr:`Region.detail`), never flagged;
* the median ratio over the judged regions is at most :data:`MEDIAN_MAX` (else the file is flagged:
  :attr:`Verdict.file_flag`, said on its page);
* every judged region is at most :data:`REGION_MAX` (else that region is flagged:
  :attr:`Region.flag`, marked wherever its number is shown).

:func:`region_of` judges one region and :func:`verdict_of` a file, from those regions alone: the typed
result applies them (:attr:`gemm_bench.results.typed.Outcome.cross_check`,
:meth:`gemm_bench.results.typed.Result.cross_check`), and ``gemm-bench report``, the report model and
every renderer read the typed result, so the rule lives here once; the door
(:mod:`~gemm_bench.results.invariants`) judges a stored entry by :func:`region_flag`, the same rule. Eager
quantities (``eager`` beside each cell, the eager ``layer`` step) include host time by definition
and store no ``kernel_ms``: they are not judged. Pure: no torch.
"""

from __future__ import annotations

import dataclasses
import statistics
from collections.abc import Iterable, Mapping
from typing import Any

MEDIAN_MAX = 1.05
REGION_MAX = 1.20
MIN_KERNEL_MS = 0.05


def _ratio(status: object, ms: float | None, kernel: float | None, same_launches: float | None) -> float | None:
    """Event time / kernel time of the same profiled launches of a measured entry (``kernel_ratio``);
    None when it was not cross-checked.

    A result whose cells have no ``kernel_ratio`` profiled every timed round, so its published
    median over ``kernel_ms`` is that ratio. Since the cross-check profiles the first batch of
    rounds only, the published median (every round) over ``kernel_ms`` also holds how the clock
    moved between those rounds and the rest (a power-limited H100 slowed by 15% within one group)
    and the profiler's own cost in the profiled rounds; neither is idle GPU time, which is what the
    bounds judge."""
    if status != "measured" or ms is None or kernel is None:
        return None
    if same_launches is not None:
        return same_launches
    return ms / kernel if kernel > 0 else None


def _number(value: Any) -> float | None:
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


@dataclasses.dataclass(frozen=True)
class Region:
    """One cross-checked region: its ratio, its kernel time, and the judgement of the bounds."""

    ratio: float
    kernel_ms: float

    @property
    def judged(self) -> bool:
        """Whether the bounds apply: kernels of at least :data:`MIN_KERNEL_MS`."""
        return self.kernel_ms >= MIN_KERNEL_MS

    @property
    def flag(self) -> str | None:
        """Why this region's time is not plainly GPU time (a judged region above :data:`REGION_MAX`),
        with its ratio; None when it holds or is not judged."""
        if not self.judged or self.ratio <= REGION_MAX:
            return None
        return (f"timed {self.ratio:.2f}x its profiled kernel time ({self.kernel_ms:.4g} ms of kernels, in the "
                f"same launches; bound {REGION_MAX:g}): the GPU was idle for part of this region")

    @property
    def detail(self) -> str:
        """The cross-check as a number's detail says it: its flag, else its ratio (and, for a short
        region, why it is not judged)."""
        if self.flag is not None:
            return self.flag
        text = f"profiled: events {self.ratio:.2f}x kernel time"
        if not self.judged:
            text += (f" (kernels {self.kernel_ms * 1000:.3g} us, under {MIN_KERNEL_MS * 1000:g} us: a CUDA graph's "
                     "node gaps weigh there; shown, not judged)")
        return text


def region(item: Mapping[str, Any]) -> Region | None:
    """The cross-check of one cell, layer cell or peer row; None when it was not cross-checked."""
    return region_of(item.get("status"), _number(item.get("ms")), _number(item.get("kernel_ms")),
                     _number(item.get("kernel_ratio")))


def region_of(status: object, ms: float | None, kernel_ms: float | None, kernel_ratio: float | None) -> Region | None:
    """The cross-check of a timed entry's fields as the typed result holds them
    (:attr:`gemm_bench.results.typed.Outcome.cross_check`); :func:`region` reads the same fields from a
    stored entry: the one rule for both forms."""
    r = _ratio(status, ms, kernel_ms, kernel_ratio)
    return None if r is None or kernel_ms is None else Region(r, kernel_ms)


def region_flag(item: Mapping[str, Any]) -> str | None:
    """Why this region's published time is not plainly GPU time, or None when it is (or is unchecked,
    or too short to judge)."""
    found = region(item)
    return found.flag if found is not None else None


@dataclasses.dataclass(frozen=True)
class Verdict:
    """The cross-check of one result file."""

    #: Regions judged (kernels of at least :data:`MIN_KERNEL_MS`), and their median ratio (None: none).
    regions: int
    median: float | None
    #: (label, ratio) of each judged region over :data:`REGION_MAX`.
    outside: tuple[tuple[str, float], ...]
    #: Regions cross-checked but too short to judge, and their median ratio (shown, not judged).
    short: int = 0
    short_median: float | None = None

    @property
    def holds(self) -> bool:
        """No bound broken (also when nothing could be judged: :attr:`sentence` says so)."""
        return self.file_flag is None and not self.outside

    @property
    def file_flag(self) -> str | None:
        """What the file's page says when the median of its judged regions breaks :data:`MEDIAN_MAX`."""
        if self.median is None or self.median <= MEDIAN_MAX:
            return None
        return (f"the profiler cross-check of this result does not hold: its regions of at least "
                f"{MIN_KERNEL_MS * 1000:g} us run {self.median:.3f}x their kernel time at the median (bound "
                f"{MEDIAN_MAX:g}, over {self.regions} regions), so the GPU was idle for part of its published times")

    def sentence(self) -> str:
        if self.median is None and not self.short:
            return "no region of this result was cross-checked against the profiler"
        if self.median is None:
            text = f"no region of at least {MIN_KERNEL_MS * 1000:g} us to judge"
        else:
            text = (f"event time / kernel time of the profiled launches: median {self.median:.3f} over "
                    f"{self.regions} region(s) of at least {MIN_KERNEL_MS * 1000:g} us (bound {MEDIAN_MAX:g})")
        if self.outside:
            text += (f"; {len(self.outside)} of them above {REGION_MAX:g}: "
                     + ", ".join(f"{label} {r:.2f}" for label, r in self.outside))
        if self.short and self.short_median is not None:
            text += (f"; {self.short} shorter region(s), not judged (a CUDA graph's node gaps): median "
                     f"{self.short_median:.3f}")
        return text


def cell_label(mode: str, op: str, pass_: str, precision: str) -> str:
    """How the file's verdict names a GEMM cell ("prequant qkv/fprop bf16")."""
    return f"{mode} {op}/{pass_} {precision}"


def step_label(mode: str, precision: str, routing: str = "balanced") -> str:
    """How the file's verdict names a layer-step cell ("layer-graphed step bf16 (skewed)")."""
    return f"{mode} step {precision}" + ("" if routing == "balanced" else f" ({routing})")


def peer_label(backend: str, op: str, pass_: str) -> str:
    return f"peer {backend} {op}/{pass_}"


def plan_label(step: object) -> str:
    return f"plan step {step}"


def part_label(part: str, precision: str) -> str:
    return f"model step {part} {precision}"


def verdict_of(regions: Iterable[tuple[str, Region | None]]) -> Verdict:
    """The verdict over labelled regions (None: an item not cross-checked): a typed result's
    (:meth:`~gemm_bench.results.typed.Result.cross_check` over its
    :meth:`~gemm_bench.results.typed.Result.timed_regions`)."""
    judged: list[float] = []
    short: list[float] = []
    outside: list[tuple[str, float]] = []
    for label, found in regions:
        if found is None:
            continue
        if not found.judged:
            short.append(found.ratio)
            continue
        judged.append(found.ratio)
        if found.flag is not None:
            outside.append((label, round(found.ratio, 3)))
    return Verdict(len(judged), statistics.median(judged) if judged else None, tuple(outside),
                   len(short), statistics.median(short) if short else None)
