"""Where a step's time goes: its GPU time per kernel category and its idle time, adding up to the step.

Why: a recipe that loses to BF16 loses somewhere: in its GEMMs, in the kernels it adds
(quantization, amax, transposes), in attention, in elementwise work, or in time the GPU sits idle.
The timer's cross-check already profiles the first batch of timed rounds of every region
(:mod:`gemm_bench.measure.timing`); this module turns each profiled round's kernels into the parts
of the step.

How the parts are counted, per profiled round of the region:

* each kernel's interval is classified (:func:`gemm_bench.results.kernel_kinds.classify`);
* the union of the kernel intervals is the GPU's busy time; where kernels overlap (two streams),
  each instant is shared equally among the kernels running then, so the categories add up to the
  busy time exactly and no instant is counted twice;
* the categories of the block are the mean over the profiled rounds (means add up; medians do not).

**Idle** is the step's published time (the cell's ``ms``: the median over every timed round)
minus that mean busy time: the gaps between dependent kernels, the graph's launch inside the
region's events and, in the eager step, every moment the GPU waited for the host. So the parts add
up to the step by construction, unless the profiled kernels take *longer* than the step (a higher
clock in the unprofiled rounds, the profiler's own cost; on an H100, gpt-oss-120b's BF16 graphed step
of 13.20 ms had 13.53 ms of profiled kernels). Then idle is 0 and every kernel category (and each
``other`` name) is scaled by ``step / busy``, stored as ``scaled_by``: the parts keep the profiled
rounds' proportions and add up to the published step. A scale below :data:`MIN_SCALE` means the
profiled rounds do not represent the step; :func:`check_scale` says so and the cache's test fails.

Pure: no torch. The timer hands over each round's kernels as ``(name, start_ns, duration_ns)``.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from gemm_bench.results.kernel_kinds import CATEGORIES, IDLE, OTHER, PARTS, classify
from gemm_bench.results.step_error import StepError

#: The parts of a stored breakdown add up to its step time within this fraction.
ADDS_UP_WITHIN = 0.02
#: The smallest ``scaled_by`` a stored breakdown may carry: profiled kernels more than 10% longer than
#: the published step (the cross-check's bound for one region is 1.20, its file median 1.05) are not
#: the step's parts, scaled or not.
MIN_SCALE = 0.9
#: Names of ``other`` kernels kept in a block, the longest first (the rest are summed as one).
MAX_OTHER_NAMES = 12
#: Longest kernel name stored (a demangled template can run to kilobytes).
MAX_NAME_CHARS = 240

#: How the block's idle time is counted (stored with each block's method).
IDLE_RULE = ("idle = the step's published time minus the mean, over the profiled rounds, of the union of the "
             "step's kernel intervals; overlapping kernels share each instant equally, so the kernel "
             "categories add up to that union; where that union is longer than the published step, idle is 0 "
             "and the categories are scaled to the step (the factor stored as scaled_by)")

Kernel = tuple[str, int, int]  # (name, start ns, duration ns)


class BreakdownError(StepError):
    """A breakdown block that breaks the schema; ``where`` is its JSON path (a step cell's error, so
    the schema reports it as it reports the cell's)."""


@dataclasses.dataclass(frozen=True)
class RoundParts:
    """One profiled round of a region: nanoseconds per category, busy (union) time, span and kernels."""

    category_ns: Mapping[str, float]
    busy_ns: int
    #: First kernel's start to last kernel's end.
    span_ns: int
    kernels: int
    #: Nanoseconds of each ``other`` kernel name.
    other_ns: Mapping[str, float]


def round_parts(kernels: Sequence[Kernel]) -> RoundParts:
    """Classify one round's kernels and share out overlapping time (the module docstring's rule)."""
    categories = dict.fromkeys(CATEGORIES, 0.0)
    other: dict[str, float] = {}
    if not kernels:
        return RoundParts(categories, 0, 0, 0, other)
    kinds = [classify(name) for name, _, _ in kernels]
    edges: list[tuple[int, int, int]] = []  # (time, +1 start / -1 end, kernel index)
    for i, (_, start, duration) in enumerate(kernels):
        if duration > 0:
            edges += [(start, 1, i), (start + duration, -1, i)]
    edges.sort(key=lambda e: (e[0], e[1]))  # ends before starts at the same instant
    active: set[int] = set()
    busy = 0
    last = edges[0][0] if edges else 0
    for time, kind, i in edges:
        if active and time > last:
            share = (time - last) / len(active)
            busy += time - last
            for j in active:
                categories[kinds[j]] += share
                if kinds[j] == OTHER:
                    name = kernels[j][0][:MAX_NAME_CHARS]
                    other[name] = other.get(name, 0.0) + share
        last = time
        if kind == 1:
            active.add(i)
        else:
            active.discard(i)
    start = min(s for _, s, _ in kernels)
    end = max(s + d for _, s, d in kernels)
    return RoundParts(categories, busy, end - start, len(kernels), other)


#: The longest kernel name a result stores (the schema's limit on a key): C++ kernels' demangled
#: template names run to thousands of characters; their head says what they are.
MAX_STORED_NAME = 200


def stored_name(name: str) -> str:
    """``name`` as a result stores it: cut to :data:`MAX_STORED_NAME` characters with an ellipsis
    (names that share their head then share one entry, their times summed)."""
    return name if len(name) <= MAX_STORED_NAME else name[: MAX_STORED_NAME - 1] + "…"


def breakdown_block(step_ms: float, rounds: Sequence[RoundParts], *, source: str) -> dict[str, Any]:
    """The ``breakdown`` of one step cell: ``parts_ms`` (every category and ``idle``) adding up to
    ``step_ms``, ``other_kernels`` (name: ms per step), the number of profiled ``rounds``, kernels per
    step, the mean ``busy_ms`` and ``span_ms``, and ``source`` (which rounds' kernels these are)."""
    if not rounds:
        raise BreakdownError("breakdown", "no profiled rounds to break the step down from")
    n = len(rounds)
    parts = {c: sum(r.category_ns[c] for r in rounds) / n / 1e6 for c in CATEGORIES}
    busy = sum(r.busy_ns for r in rounds) / n / 1e6
    # The profiled kernels took longer than the published step: its parts in their proportions.
    scale = step_ms / busy if busy > step_ms else 1.0
    parts = {c: ms * scale for c, ms in parts.items()}
    parts[IDLE] = max(0.0, step_ms - busy)
    other: dict[str, float] = {}
    for r in rounds:
        for name, ns in r.other_ns.items():
            short = stored_name(name)
            other[short] = other.get(short, 0.0) + ns / n / 1e6 * scale
    longest = sorted(other.items(), key=lambda kv: -kv[1])
    kept = dict(longest[:MAX_OTHER_NAMES])
    rest = sum(ms for _, ms in longest[MAX_OTHER_NAMES:])
    if rest:
        kept[f"({len(longest) - MAX_OTHER_NAMES} more names)"] = rest
    kernels = sorted(r.kernels for r in rounds)[n // 2]
    return {
        "step_ms": round(step_ms, 6),
        "parts_ms": {p: round(parts[p], 6) for p in PARTS},
        "busy_ms": round(busy, 6),
        "span_ms": round(sum(r.span_ns for r in rounds) / n / 1e6, 6),
        "other_kernels": {k: round(v, 6) for k, v in kept.items()},
        "rounds": n,
        "kernels": kernels,
        "source": source,
        **({"scaled_by": round(scale, 6)} if scale != 1.0 else {}),
    }


def weighted_parts(terms: Iterable[tuple[float, Mapping[str, float]]]) -> dict[str, float]:
    """Sum of ``weight x parts`` per part (every part of :data:`PARTS`): how a step composed of
    measured parts (the model's step, issue 33) is split as its time is composed. With non-negative
    weights and parts that add up to each term's time, the result adds up to the composed time."""
    out = dict.fromkeys(PARTS, 0.0)
    for weight, parts in terms:
        for p in PARTS:
            out[p] += weight * float(parts[p])
    return out


def model_step_parts(embedding: Mapping[str, float], head: Mapping[str, float], first: Mapping[str, float],
                     cached: Mapping[str, float], optimizer: Mapping[str, Any], *, layers: int, microbatches: int,
                     optimizer_ms: float) -> dict[str, float]:
    """A model step's parts over one optimizer step of G = ``microbatches``, weighted as
    :func:`gemm_bench.question.model_step.step_ms` weighs the parts' times: G x (embedding + head) +
    L x (first + (G - 1) x cached) + the optimizer's ``optimizer_ms`` in the proportions of
    ``optimizer`` (a breakdown block: its ``parts_ms`` over its ``step_ms``). The one formula the
    report's bars and the GPU proof's composed kinds share."""
    g = microbatches
    return weighted_parts([(g, embedding), (g, head), (layers, first), (layers * (g - 1), cached),
                           (optimizer_ms / float(optimizer["step_ms"]), optimizer["parts_ms"])])


def category_ms_per_step(rounds: Sequence[Sequence[Kernel]]) -> tuple[float, dict[str, float]]:
    """(busy ms, ms per kernel category) per step, the mean over ``rounds`` (each one step's kernels):
    a real model's profiled steps, which the composed model step's breakdown is checked against."""
    parts = [round_parts(r) for r in rounds]
    n = max(1, len(parts))
    return (sum(r.busy_ns for r in parts) / n / 1e6,
            {c: sum(r.category_ns[c] for r in parts) / n / 1e6 for c in CATEGORIES})


def rounds_from_kernels(per_round: Iterable[Sequence[Kernel]]) -> list[RoundParts]:
    return [round_parts(k) for k in per_round]


def check_adds_up(block: Mapping[str, Any], within: float = ADDS_UP_WITHIN) -> str | None:
    """Why a stored breakdown's parts do not add up to its step time within ``within``, or None."""
    step = block["step_ms"]
    total = sum(block["parts_ms"].values())
    if abs(total - step) > within * step:
        return (f"parts add up to {total:.4f} ms for a step of {step:.4f} ms ({total / step - 1:+.1%}; "
                f"bound {within:.0%})" + ("" if total < step else
                                          ": the profiled kernels took longer than the published step"))
    return None


def check_scale(block: Mapping[str, Any], least: float = MIN_SCALE) -> str | None:
    """Why a stored breakdown's scale (``scaled_by``, see the module docstring) is too far from 1 for its
    parts to be the step's, or None (a block without a scale was not scaled)."""
    scale = block.get("scaled_by", 1.0)
    if scale < least:
        return (f"the profiled kernels took {1 / scale:.2f}x the published step; scaled by {scale:.3f} "
                f"(least {least:g}) its parts are not the step's")
    return None


def validate_breakdown(block: Any, *, where: str, cell_ms: float | None = None) -> dict[str, Any]:
    """Check one ``breakdown`` block's form (not whether it adds up: :func:`check_adds_up` judges that,
    and the cache's test fails on it); its ``step_ms`` must be the cell's ``ms``."""
    if not isinstance(block, dict):
        raise BreakdownError(where, "must be an object")

    def number(value: Any, at: str, *, positive: bool = False) -> float:
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value < 0 \
                or (positive and value == 0):
            raise BreakdownError(at, f"must be a {'positive' if positive else 'non-negative'} finite number, "
                                     f"got {value!r}")
        return float(value)

    step = number(block.get("step_ms"), f"{where}.step_ms", positive=True)
    if cell_ms is not None and abs(step - cell_ms) > 1e-6 * max(1.0, cell_ms):
        raise BreakdownError(f"{where}.step_ms", f"{step!r} is not the cell's ms {cell_ms!r}")
    parts = block.get("parts_ms")
    if not isinstance(parts, dict) or set(parts) != set(PARTS):
        raise BreakdownError(f"{where}.parts_ms", f"must hold exactly {', '.join(PARTS)}")
    for part in PARTS:
        number(parts[part], f"{where}.parts_ms.{part}")
    for field in ("busy_ms", "span_ms"):
        number(block.get(field), f"{where}.{field}")
    other = block.get("other_kernels")
    if not isinstance(other, dict) or not all(isinstance(k, str) for k in other):
        raise BreakdownError(f"{where}.other_kernels", "must map kernel names to milliseconds")
    for name, ms in other.items():
        number(ms, f"{where}.other_kernels[{name[:40]!r}]")
    for field in ("rounds", "kernels"):
        value = block.get(field)
        if isinstance(value, bool) or not isinstance(value, int) or value < (1 if field == "rounds" else 0):
            raise BreakdownError(f"{where}.{field}", f"must be a whole number, got {value!r}")
    if not isinstance(block.get("source"), str):
        raise BreakdownError(f"{where}.source", "must be a string")
    if "scaled_by" in block:
        scale = number(block["scaled_by"], f"{where}.scaled_by", positive=True)
        if scale > 1:
            raise BreakdownError(f"{where}.scaled_by", f"{scale!r} is above 1 (only longer kernels are scaled)")
    return block


def kernel_ms_per_step(rounds: Sequence[Sequence[Kernel]]) -> dict[str, float]:
    """Each kernel name's milliseconds per step (summed durations, mean over the profiled rounds):
    what a recorded list of a recipe's kernel names holds (``tests/data/kernel-names/recorded``)."""
    totals: dict[str, float] = {}
    for kernels in rounds:
        for name, _, duration in kernels:
            totals[name] = totals.get(name, 0.0) + duration / 1e6
    n = max(1, len(rounds))
    return {name: round(ms / n, 6) for name, ms in sorted(totals.items(), key=lambda kv: -kv[1])}
