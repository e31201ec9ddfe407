"""Where a refresh's wall time goes: a phase profile of one ``gemm-bench run`` process.

A GPU refresh of the site (five questions took about 109 s on an H100) is mostly not timed
rounds: the process starts and imports torch and Transformer Engine, spins the clocks up,
builds modules and quantizes operands, probes every competitor once, warms each group up, and
writes the result. To cut that time one must first see it, phase by phase.

Phases nest in use (``with p.phase("timed rounds"): ... with p.phase("warm-up"): ...``) but are
*exclusive* in accounting: every second is charged to the innermost open phase only, so the
phases and the unaccounted rest add up exactly to the process's wall time, and a table of them
answers "where did the time go" without double counting. The process's own start (before
Python ran a line of ours) is read from the kernel, so interpreter start-up and imports are
counted too.

Pure: imports neither torch nor anything outside the standard library (psutil only if present).
Times are host wall time; GPU work is charged to the phase that waits for it, which is where the
runner synchronises (probes and timed groups end with ``torch.cuda.synchronize``).
"""

from __future__ import annotations

import contextlib
import os
import sys
import time
from collections.abc import Callable, Iterator
from typing import Any

#: The phases of a refresh, in the order they usually happen (names shown to users).
PROCESS_START = "process start and imports"
IMPORTS = "import torch and Transformer Engine"
CUDA_START = "CUDA start-up"
SUPPORT = "support checks and provenance"
SPIN_UP = "spin-up"
BUILD = "building modules and quantized operands"
PROBE = "first call (probe)"
WARM_UP = "warm-up"
EAGER = "eager rounds"
CAPTURE = "CUDA graph capture"
TIMED = "timed rounds"
PROFILER_START = "profiler start (cross-check)"
TRACE = "profiler trace (cross-check)"
ACCURACY = "accuracy (SQNR)"
MODEL_STEP_MEMORY = "model step: memory of its parts"
ENERGY = "energy (each recipe's step alone)"
PLAN = "precision plan (decision and set-up)"
RELEASE = "releasing memory"
WRITING = "writing"
UNACCOUNTED = "unaccounted"


class PhaseError(RuntimeError):
    """A phase profile used out of order (finished twice, a phase left open at the end)."""


def process_start_age(clock_boottime: Callable[[], float] | None = None) -> float | None:
    """Seconds since this process started, from the kernel; ``None`` where it cannot be read.

    On Linux: ``/proc/self/stat`` field 22 (start time in clock ticks since boot) against
    ``CLOCK_BOOTTIME`` (the same clock, at nanosecond resolution), so the answer is exact to a
    clock tick (10 ms); ``/proc/stat``'s ``btime`` would add up to a second of rounding.
    Elsewhere psutil's ``create_time`` if psutil is installed.
    """
    try:
        with open("/proc/self/stat", encoding="ascii") as handle:
            stat = handle.read()
        # The command name (field 2) may hold spaces and parentheses: fields resume after the last ')'.
        fields = stat[stat.rindex(")") + 2:].split()
        start_ticks = int(fields[19])  # field 22 overall; fields[0] is field 3
        ticks = os.sysconf("SC_CLK_TCK")
        now = clock_boottime() if clock_boottime else time.clock_gettime(time.CLOCK_BOOTTIME)
        age = now - start_ticks / ticks
        return age if age >= 0 else None
    except (OSError, ValueError, IndexError, AttributeError):
        pass
    try:
        import psutil  # type: ignore[import-untyped]
    except ImportError:
        return None
    try:
        age = time.time() - psutil.Process().create_time()
    except (psutil.Error, OSError):
        return None
    return age if age >= 0 else None


class PhaseProfiler:
    """Exclusive wall time per named phase, from process start (if marked) to :meth:`finish`.

    ``clock`` is a monotonic clock in seconds (``time.perf_counter``); tests pass a fake one.
    """

    def __init__(self, clock: Callable[[], float] = time.perf_counter) -> None:
        self._clock = clock
        self._start = clock()
        self._end: float | None = None
        self._seconds: dict[str, float] = {}
        self._counts: dict[str, int] = {}
        self._stack: list[str] = []
        self._since = self._start  # when the innermost open phase (or no phase) last began accruing
        self.process_start_known: bool | None = None  # None: never asked; False: not readable here

    def mark_process_start(self, age_s: float | None = None) -> None:
        """Charge the time from process start until now to "process start and imports".

        Call it first, as early as the CLI has a profiler: everything before it (interpreter
        start-up, imports) becomes the first phase, and the profile's total becomes the
        process's wall time. ``age_s`` (seconds since process start) defaults to the kernel's
        answer; where there is none, the phase is left out and the text says so.
        """
        if self._stack or self._seconds:
            raise PhaseError("mark_process_start() must come before any phase")
        age = process_start_age() if age_s is None else age_s
        if age is None:
            self.process_start_known = False
            return
        now = self._clock()
        age = max(age, now - self._start)  # never less than this profiler has existed
        self.process_start_known = True
        self._start = now - age
        self._seconds[PROCESS_START] = age
        self._counts[PROCESS_START] = 1
        self._since = now

    def _charge(self, now: float) -> None:
        """Charge the time since the last event to the innermost open phase (or to none)."""
        if self._stack:
            name = self._stack[-1]
            self._seconds[name] = self._seconds.get(name, 0.0) + (now - self._since)
        self._since = now

    @contextlib.contextmanager
    def phase(self, name: str) -> Iterator[None]:
        """Charge the time inside the block to ``name`` (minus what inner phases take)."""
        if self._end is not None:
            raise PhaseError(f"phase {name!r} started after finish()")
        self._charge(self._clock())
        self._stack.append(name)
        self._counts[name] = self._counts.get(name, 0) + 1
        self._seconds.setdefault(name, 0.0)
        try:
            yield
        finally:
            self._charge(self._clock())
            self._stack.pop()

    def finish(self) -> None:
        """Stop the clock: the total is fixed from here (calling it again is an error)."""
        if self._end is not None:
            raise PhaseError("finish() called twice")
        if self._stack:
            raise PhaseError(f"finish() inside the open phase {self._stack[-1]!r}")
        self._charge(self._clock())
        self._end = self._since

    def to_dict(self) -> dict[str, Any]:
        """Total, each phase's exclusive seconds, share and count, and the unaccounted rest."""
        end = self._end if self._end is not None else self._clock()
        total = end - self._start
        seconds = dict(self._seconds)
        if self._stack:  # a profile read from inside a phase: charge the open phase up to now
            seconds[self._stack[-1]] += end - self._since
        accounted = sum(seconds.values())
        phases = [
            {"name": name, "seconds": s, "share": s / total if total > 0 else 0.0, "count": self._counts[name]}
            for name, s in seconds.items()
        ]
        rest = total - accounted
        return {
            "total_s": total,
            "from_process_start": bool(self.process_start_known),
            "phases": phases,
            "unaccounted_s": rest,
            "unaccounted_share": rest / total if total > 0 else 0.0,
            "clock": "host wall time (monotonic); GPU work is charged to the phase that synchronises on it",
        }

    def summary(self) -> dict[str, float]:
        """Seconds per phase (exclusive, rounded to 0.1 s), the unaccounted rest and the total:
        what a stored result keeps of its own measurement (``provenance.phases_s``)."""
        data = self.to_dict()
        out = {p["name"]: round(p["seconds"], 1) for p in data["phases"]}
        out[UNACCOUNTED] = round(max(data["unaccounted_s"], 0.0), 1)
        out["total"] = round(data["total_s"], 1)
        return out

    def to_text(self) -> str:
        """A table for the terminal, phases in the order they first began."""
        data = self.to_dict()
        width = max([len(p["name"]) for p in data["phases"]] + [len(UNACCOUNTED), 5])
        lines = [f"{'phase':{width}}  {'seconds':>9}  {'share':>6}  {'count':>5}"]
        for p in data["phases"]:
            lines.append(f"{p['name']:{width}}  {p['seconds']:9.3f}  {p['share']:6.1%}  {p['count']:5d}")
        lines.append(f"{UNACCOUNTED:{width}}  {data['unaccounted_s']:9.3f}  {data['unaccounted_share']:6.1%}")
        total = "total (from process start)" if data["from_process_start"] else "total (from profiler start)"
        lines.append(f"{total:{width}}  {data['total_s']:9.3f}")
        if self.process_start_known is False:
            lines.append(f"(the process start time is not readable on {sys.platform}: start-up and imports "
                         "before the profiler are not counted)")
        return "\n".join(lines)


@contextlib.contextmanager
def optional_phase(profiler: PhaseProfiler | None, name: str) -> Iterator[None]:
    """``profiler.phase(name)``, or nothing when no profile was asked for."""
    if profiler is None:
        yield
    else:
        with profiler.phase(name):
            yield
