"""GPU timing you can defend: CUDA events or torch.profiler kernel time, L2 flushed, warmed up.

Modelled on ``triton.testing.do_bench``: warm-up by wall time (the GPU idles at a low clock),
a fresh L2 before every timed launch, and per-launch event pairs enqueued back to back so the
host never stalls the stream between repetitions. What is measured is returned as
:class:`Samples`, which carries its own statistics (as ``torch.utils.benchmark`` does).

The *rounds* interface exists for interleaving: :class:`Interleaver` runs every competitor once
per round, round after round, so clock and thermal drift hit all of them alike.

torch is imported inside the functions that need it, not at module level: the CLI validates
:class:`TimerSettings` (and says "no GPU stack" with exit status 3) on machines without torch.
"""

from __future__ import annotations

import contextlib
import dataclasses
import math
import statistics
import time
from collections.abc import Callable, Sequence
from typing import Any, Protocol

from gemm_bench.measure.phases import CROSS_CHECK, SPIN_UP, TIMED, WARM_UP

#: Twice any Hopper / Blackwell L2 (50-126 MB): copying half of it onto the other half touches
#: every byte, evicting every cached line.
L2_FLUSH_BYTES = 256 * 1024 * 1024

#: Longest warm-up or spin-up accepted, in seconds. Warm-up runs per competitor group, so a
#: value beyond this makes a refresh take hours; it is a typo, not a setting.
MAX_WARMUP_S = 600.0

#: Most timed rounds accepted: each round keeps one sample per region in memory, and the group
#: time cap (``max_group_s``) stops far earlier on any real shape.
MAX_REPETITIONS = 100_000

TIMERS = {
    "events": "CUDA events around each launch",
    "profiler": "torch.profiler CUDA kernel time, summed per region between L2 flushes",
}


class TimerSettingsError(ValueError):
    """A timing parameter out of range; ``field`` names the :class:`TimerSettings` field."""

    def __init__(self, field: str, message: str) -> None:
        self.field = field
        self.message = message
        super().__init__(f"{field}: {message}")


class PhaseRecorder(Protocol):
    """Where wall time goes (``gemm_bench.measure.phases.PhaseProfiler`` satisfies this).

    The timer charges its spin-up, warm-up and timed rounds to the phases of those names, so
    ``gemm-bench run --profile-phases`` separates them from building and probing.
    """

    def phase(self, name: str) -> contextlib.AbstractContextManager[Any]: ...


@dataclasses.dataclass(frozen=True)
class TimerSettings:
    """How to time; validated on construction, because a NaN warm-up loops forever.

    ``repetitions`` is what the caller asks for. A group whose rounds would take longer than
    ``max_group_s`` times fewer rounds, but never fewer than ``min_repetitions``, and that
    minimum never exceeds ``repetitions``: ``repetitions=3`` times exactly 3 rounds.
    """

    timer: str = "events"  # "events" | "profiler"
    warmup_s: float = 0.25  # per competitor group, after a global clock spin-up
    spinup_s: float = 2.0  # once per process: bring SM clocks out of idle
    repetitions: int = 40  # timed rounds asked for
    min_repetitions: int = 10  # floor under the time cap (lowered to ``repetitions`` if above it)
    max_group_s: float = 20.0  # cap on one group's timed rounds (huge shapes get fewer rounds)
    l2_flush: bool = True

    def __post_init__(self) -> None:
        if self.timer not in TIMERS:
            raise TimerSettingsError("timer", f"{self.timer!r} is not one of {', '.join(TIMERS)}")
        for name in ("warmup_s", "spinup_s"):
            value = getattr(self, name)
            if not _is_real(value) or not 0 <= value <= MAX_WARMUP_S:
                raise TimerSettingsError(name, f"{value!r} is not a number of seconds from 0 to {MAX_WARMUP_S:g}")
        if not _is_real(self.max_group_s) or not 0 < self.max_group_s <= 24 * 3600:
            raise TimerSettingsError("max_group_s", f"{self.max_group_s!r} is not a positive number of seconds")
        for name in ("repetitions", "min_repetitions"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= MAX_REPETITIONS:
                raise TimerSettingsError(name, f"{value!r} is not a whole number from 1 to {MAX_REPETITIONS}")

    @property
    def floor(self) -> int:
        """The fewest rounds a group times: ``min_repetitions``, but never more than asked for."""
        return min(self.min_repetitions, self.repetitions)

    def rounds(self, seconds_per_round: float) -> int:
        """Rounds to time for a group whose warm-up rounds took ``seconds_per_round`` each."""
        per_round = seconds_per_round if _is_real(seconds_per_round) and seconds_per_round > 1e-6 else 1e-6
        fit = int(self.max_group_s / per_round)
        return max(self.floor, min(self.repetitions, fit))

    def rounds_rule(self) -> str:
        """How many rounds each group timed, in words (stored with the method)."""
        if self.floor == self.repetitions:
            rule = f"each group timed exactly {self.repetitions} rounds"
        else:
            rule = (f"each group timed {self.repetitions} rounds, or fewer (never fewer than {self.floor}) "
                    f"when that many would take longer than {self.max_group_s:g} s")
        return rule + "; each cell's stats.n is the number of rounds it was timed"

    def method(self) -> dict[str, Any]:
        """Every parameter of the method, stored in each result's provenance.

        It states what ran: the rounds asked for, the time cap and the floor actually applied,
        and that each cell's ``stats.n`` is the number of rounds that cell was timed.
        """
        return {
            "timer": TIMERS[self.timer],
            "timer_id": self.timer,
            "spinup_s": self.spinup_s,
            "warmup_s": self.warmup_s,
            "repetitions": self.repetitions,
            "min_repetitions": self.floor,
            "max_group_s": self.max_group_s,
            "rounds_rule": self.rounds_rule(),
            "launches_per_repetition": 1,
            "l2_flush": self.l2_flush,
            "l2_flush_bytes": L2_FLUSH_BYTES if self.l2_flush else 0,
            "interleaved": True,
            "statistic": "median; spread as interquartile range",
        }


def _is_real(value: object) -> bool:
    """A finite int or float (not a bool, not NaN, not infinite)."""
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


@dataclasses.dataclass
class Samples:
    """Per-repetition times of one competitor, in milliseconds."""

    ms: list[float]

    @property
    def median(self) -> float:
        return statistics.median(self.ms)

    @property
    def iqr(self) -> float:
        """Interquartile range; 0.0 for one sample (``stats.n`` says there was only one)."""
        q = _quantiles(self.ms, 4)
        return q[2] - q[0]

    def to_stats(self) -> dict[str, Any]:
        q = _quantiles(self.ms, 10)
        return {
            "median_ms": round(self.median, 6),
            "iqr_ms": round(self.iqr, 6),
            "p10_ms": round(q[0], 6),
            "p90_ms": round(q[-1], 6),
            "min_ms": round(min(self.ms), 6),
            "n": len(self.ms),
            "samples_ms": [round(v, 5) for v in self.ms],
        }


def _quantiles(ms: list[float], n: int) -> list[float]:
    """Cut points of ``ms`` into ``n`` groups, always within [min, max].

    With at least ``n`` samples, Python's default ("exclusive") method, as results have always
    been computed; with fewer (``--repetitions 3``), the "inclusive" method, which interpolates
    between samples instead of pretending that every quantile is the minimum.
    """
    if len(ms) == 1:
        return [ms[0]] * (n - 1)
    return statistics.quantiles(ms, n=n, method="exclusive" if len(ms) >= n else "inclusive")


class L2Flusher:
    """Evicts L2 by copying a buffer larger than L2 (device-to-device ``cudaMemcpyAsync``).

    A memcpy rather than a fill kernel so that, in a profiler trace, the flush is an event of its
    own kind (``gpu_memcpy``) that marks where each timed region begins.
    """

    def __init__(self, enabled: bool) -> None:
        self.enabled = enabled
        if enabled:
            import torch

            half = L2_FLUSH_BYTES // 2
            self.src = torch.zeros(half, dtype=torch.uint8, device="cuda")
            self.dst = torch.empty(half, dtype=torch.uint8, device="cuda")

    def __call__(self) -> None:
        if self.enabled:
            self.dst.copy_(self.src)


_SPUN_UP = False


def spin_up(seconds: float) -> None:
    """Run large BF16 matmuls for ``seconds`` so clocks leave their idle state."""
    global _SPUN_UP
    if _SPUN_UP or seconds <= 0:
        return
    import torch

    a = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        for _ in range(10):
            a @ a
        torch.cuda.synchronize()
    _SPUN_UP = True


#: A competitor is a callable of one iteration: it receives ``mark(i)`` and must call it around
#: each timed region (``mark(region, "start")`` / ``mark(region, "end")``). Most competitors
#: have one region; an autocast Linear has three (fprop, dgrad, wgrad) in one iteration.
Mark = Callable[[str, str], None]
Competitor = Callable[[Mark], None]


class Interleaver:
    """Times several competitors round by round; each may have several named regions."""

    def __init__(self, settings: TimerSettings, *, phases: PhaseRecorder | None = None,
                 sampler: Any = None) -> None:
        """``sampler``: a :class:`gemm_bench.measure.telemetry.ClockSampler` whose window is each group's
        timed rounds. What the last group recorded is in :attr:`last_group`."""
        self.settings = settings
        self.phases = phases
        self.flush = L2Flusher(settings.l2_flush)
        self.sampler = sampler
        #: The last group's record: ``rounds``, and ``clock`` when a sampler is set.
        self.last_group: dict[str, Any] = {}

    def _phase(self, name: str) -> contextlib.AbstractContextManager[Any]:
        return self.phases.phase(name) if self.phases is not None else contextlib.nullcontext()

    def run(self, competitors: dict[str, Competitor]) -> dict[str, dict[str, Samples]]:
        """Samples per competitor per region, by the configured timer."""
        reps = self._warm_up(competitors)
        profile = self.settings.timer == "profiler"
        sampling = self.sampler.sampling() if self.sampler is not None else contextlib.nullcontext()
        with self._phase(TIMED), sampling:
            events, kernels = self._rounds(competitors, reps, profile=profile)
        self.last_group = {"rounds": reps}
        if self.sampler is not None:
            self.last_group["clock"] = self.sampler.summary()
        return kernels if kernels is not None else events

    def check(self, competitors: dict[str, Competitor], rounds: int) -> dict[str, Any]:
        """The events-vs-profiler cross-check block of a group (:func:`gemm_bench.measure.telemetry.cross_check_block`):
        ``rounds`` rounds after a warm-up, timed by CUDA events and by the profiler at once.

        Runs the profiler, which leaves the CUDA runtime slower to launch for the rest of the
        process unless CUPTI is torn down (``TEARDOWN_CUPTI=1``, which the runner sets): the
        runner therefore cross-checks only after every group of its run is timed.
        """
        from gemm_bench.measure import telemetry

        self._warm_up(competitors)
        with self._phase(CROSS_CHECK):
            try:
                events, kernels = self._rounds(competitors, rounds, profile=True)
            except (RuntimeError, ValueError, KeyError, OSError) as exc:
                # the profiler, or kernel_ms_per_region (a trace that cannot be split per region)
                return {"rounds": 0, "reason": str(exc)[:300]}
        assert kernels is not None
        return telemetry.cross_check_block(events, kernels)

    def cross_check(self, competitors: dict[str, Competitor]) -> tuple[dict, dict]:
        """(event samples, profiler kernel samples) of the very same launches."""
        reps = self._warm_up(competitors)
        with self._phase(TIMED):
            events, kernels = self._rounds(competitors, reps, profile=True)
        assert kernels is not None
        return events, kernels

    def _warm_up(self, competitors: dict[str, Competitor]) -> int:
        """Warm up by time; return how many timed rounds fit the group's time cap."""
        import torch

        s = self.settings
        with self._phase(SPIN_UP):
            spin_up(s.spinup_s)
        with self._phase(WARM_UP):
            rounds_done, start = 0, time.perf_counter()
            while True:
                for fn in competitors.values():
                    fn(self._untimed_mark)
                torch.cuda.synchronize()
                rounds_done += 1
                elapsed = time.perf_counter() - start
                if elapsed >= s.warmup_s and rounds_done >= 2:
                    break
        return s.rounds(elapsed / rounds_done)

    def _untimed_mark(self, region: str, edge: str) -> None:
        if edge == "start":
            self.flush()

    def _rounds(
        self, competitors: dict[str, Competitor], reps: int, *, profile: bool
    ) -> tuple[dict[str, dict[str, Samples]], dict[str, dict[str, Samples]] | None]:
        """``reps`` interleaved rounds: event samples, and kernel samples when ``profile``."""
        import torch

        pairs: dict[str, dict[str, list[tuple[Any, Any]]]] = {name: {} for name in competitors}
        order: list[tuple[str, str]] = []  # (competitor, region) of every timed region, in launch order
        prof = None
        with contextlib.ExitStack() as stack:
            if profile:
                from torch.profiler import ProfilerActivity
                from torch.profiler import profile as profiler

                prof = stack.enter_context(profiler(activities=[ProfilerActivity.CUDA]))
            for _ in range(reps):
                for name, fn in competitors.items():
                    open_events: dict[str, Any] = {}

                    def mark(region: str, edge: str, name: str = name, open_events: dict = open_events) -> None:
                        if edge == "start":
                            self.flush()
                            event = torch.cuda.Event(enable_timing=True)
                            event.record()
                            open_events[region] = event
                            order.append((name, region))
                        else:
                            event = torch.cuda.Event(enable_timing=True)
                            event.record()
                            pairs[name].setdefault(region, []).append((open_events.pop(region), event))

                    fn(mark)
            torch.cuda.synchronize()
        events = {
            name: {region: Samples([a.elapsed_time(b) for a, b in evs]) for region, evs in regions.items()}
            for name, regions in pairs.items()
        }
        if prof is None:
            return events, None
        kernels: dict[str, dict[str, list[float]]] = {name: {} for name in competitors}
        for (name, region), ms in zip(order, kernel_ms_per_region(prof, len(order)), strict=True):
            kernels[name].setdefault(region, []).append(ms)
        return events, {n: {r: Samples(v) for r, v in regions.items()} for n, regions in kernels.items()}


def kernel_ms_per_region(prof: Any, regions: int) -> list[float]:
    """Sum of kernel durations after each L2-flush memcpy, one number per timed region.

    The trace's GPU activity is split at the flush copies (device-to-device memcpy events);
    everything between one flush and the next belongs to the region that flush preceded.
    """
    import json
    import os
    import tempfile

    fd, path = tempfile.mkstemp(suffix=".json")
    os.close(fd)
    try:
        prof.export_chrome_trace(path)
        with open(path, encoding="utf-8") as handle:
            trace = json.load(handle)
    finally:
        os.unlink(path)
    gpu = [e for e in trace.get("traceEvents", []) if e.get("ph") == "X" and e.get("cat") in ("kernel", "gpu_memcpy")]
    gpu.sort(key=lambda e: float(e["ts"]))
    totals: list[float] = []
    for event in gpu:
        if event["cat"] == "gpu_memcpy" and "DtoD" in event.get("name", ""):
            totals.append(0.0)
        elif event["cat"] == "kernel" and totals:
            totals[-1] += float(event["dur"]) / 1000.0
    if len(totals) != regions:
        raise RuntimeError(
            f"profiler timer: found {len(totals)} L2 flushes for {regions} timed regions "
            "(the timed code copies device-to-device itself); use the events timer"
        )
    return totals


def single(settings: TimerSettings, fn: Callable[[], Any]) -> Samples:
    """Time one plain callable (one region): for tests and quick checks."""

    def competitor(mark: Mark) -> None:
        mark("main", "start")
        fn()
        mark("main", "end")

    return Interleaver(settings).run({"only": competitor})["only"]["main"]


def time_many(settings: TimerSettings, fns: Sequence[tuple[str, Callable[[], Any]]]) -> dict[str, Samples]:
    """Time several one-region callables interleaved; returns samples per name."""

    def wrap(fn: Callable[[], Any]) -> Competitor:
        def competitor(mark: Mark) -> None:
            mark("main", "start")
            fn()
            mark("main", "end")

        return competitor

    result = Interleaver(settings).run({name: wrap(fn) for name, fn in fns})
    return {name: regions["main"] for name, regions in result.items()}
