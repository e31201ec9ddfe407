"""GPU timing you can defend: CUDA events or torch.profiler kernel time, L2 flushed, warmed up.

Modelled on ``triton.testing.do_bench``: warm-up by wall time (the GPU idles at a low clock),
a fresh L2 before every timed launch, and per-launch event pairs enqueued back to back so the
host never stalls the stream between repetitions. What is measured is returned as
:class:`Samples`, which carries its own statistics (as ``torch.utils.benchmark`` does).

The *rounds* interface exists for interleaving: :class:`Interleaver` runs every competitor once
per round, round after round, so clock and thermal drift hit all of them alike.
"""

from __future__ import annotations

import dataclasses
import statistics
import time
from collections.abc import Callable, Sequence
from typing import Any

import torch

#: Bigger than any Hopper / Blackwell L2 (50-126 MB): writing it evicts every cached line.
L2_FLUSH_BYTES = 256 * 1024 * 1024


@dataclasses.dataclass(frozen=True)
class TimerSettings:
    timer: str = "events"  # "events" | "profiler"
    warmup_s: float = 0.25  # per competitor group, after a global clock spin-up
    spinup_s: float = 2.0  # once per process: bring SM clocks out of idle
    repetitions: int = 40  # timed rounds
    min_repetitions: int = 10
    max_group_s: float = 20.0  # cap on one group's timed rounds (huge shapes get fewer rounds)
    l2_flush: bool = True

    def method(self) -> dict[str, Any]:
        """Every parameter of the method, stored in each result's provenance."""
        return {
            "timer": {
                "events": "CUDA events around each launch",
                "profiler": "torch.profiler CUDA kernel time",
            }[self.timer],
            "timer_id": self.timer,
            "spinup_s": self.spinup_s,
            "warmup_s": self.warmup_s,
            "repetitions": self.repetitions,
            "min_repetitions": self.min_repetitions,
            "max_group_s": self.max_group_s,
            "launches_per_repetition": 1,
            "l2_flush": self.l2_flush,
            "l2_flush_bytes": L2_FLUSH_BYTES if self.l2_flush else 0,
            "interleaved": True,
            "statistic": "median; spread as interquartile range",
        }


@dataclasses.dataclass
class Samples:
    """Per-repetition times of one competitor, in milliseconds."""

    ms: list[float]

    @property
    def median(self) -> float:
        return statistics.median(self.ms)

    @property
    def iqr(self) -> float:
        if len(self.ms) < 4:
            return 0.0
        q = statistics.quantiles(self.ms, n=4)
        return q[2] - q[0]

    def to_stats(self) -> dict[str, Any]:
        q = statistics.quantiles(self.ms, n=10) if len(self.ms) >= 10 else [min(self.ms)] * 9
        return {
            "median_ms": round(self.median, 6),
            "iqr_ms": round(self.iqr, 6),
            "p10_ms": round(q[0], 6),
            "p90_ms": round(q[-1], 6),
            "min_ms": round(min(self.ms), 6),
            "n": len(self.ms),
            "samples_ms": [round(v, 5) for v in self.ms],
        }


class L2Flusher:
    def __init__(self, enabled: bool) -> None:
        self.buffer = torch.empty(L2_FLUSH_BYTES // 4, dtype=torch.int32, device="cuda") if enabled else None

    def __call__(self) -> None:
        if self.buffer is not None:
            self.buffer.zero_()


_SPUN_UP = False


def spin_up(seconds: float) -> None:
    """Run large BF16 matmuls for ``seconds`` so clocks leave their idle state."""
    global _SPUN_UP
    if _SPUN_UP or seconds <= 0:
        return
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

    def __init__(self, settings: TimerSettings) -> None:
        self.settings = settings
        self.flush = L2Flusher(settings.l2_flush)

    def run(self, competitors: dict[str, Competitor]) -> dict[str, dict[str, Samples]]:
        s = self.settings
        spin_up(s.spinup_s)
        # Warm-up by time, also learning how long one round takes.
        rounds_done, start = 0, time.perf_counter()
        while True:
            for fn in competitors.values():
                fn(self._untimed_mark)
            torch.cuda.synchronize()
            rounds_done += 1
            if time.perf_counter() - start >= s.warmup_s and rounds_done >= 2:
                break
        per_round = (time.perf_counter() - start) / rounds_done
        reps = max(s.min_repetitions, min(s.repetitions, int(s.max_group_s / max(per_round, 1e-6))))
        if s.timer == "profiler":
            return self._run_profiler(competitors, reps)
        return self._run_events(competitors, reps)

    def _untimed_mark(self, region: str, edge: str) -> None:
        if edge == "start":
            self.flush()

    def _run_events(self, competitors: dict[str, Competitor], reps: int) -> dict[str, dict[str, Samples]]:
        pairs: dict[str, dict[str, list[tuple[Any, Any]]]] = {name: {} for name in competitors}
        for _ in range(reps):
            for name, fn in competitors.items():
                open_events: dict[str, Any] = {}

                def mark(region: str, edge: str, name: str = name, open_events: dict = open_events) -> None:
                    if edge == "start":
                        self.flush()
                        event = torch.cuda.Event(enable_timing=True)
                        event.record()
                        open_events[region] = event
                    else:
                        event = torch.cuda.Event(enable_timing=True)
                        event.record()
                        pairs[name].setdefault(region, []).append((open_events.pop(region), event))

                fn(mark)
        torch.cuda.synchronize()
        return {
            name: {region: Samples([a.elapsed_time(b) for a, b in events]) for region, events in regions.items()}
            for name, regions in pairs.items()
        }

    def _run_profiler(self, competitors: dict[str, Competitor], reps: int) -> dict[str, dict[str, Samples]]:
        """Kernel time per region from torch.profiler: each region in its own profiled window.

        The L2 flush runs before the window opens, so its kernel is never counted; within a
        window every CUDA kernel (GEMM, quantization, casts) adds to the region's time.
        """
        from torch.profiler import ProfilerActivity, profile

        out: dict[str, dict[str, list[float]]] = {name: {} for name in competitors}
        for _ in range(reps):
            for name, fn in competitors.items():
                windows: dict[str, Any] = {}

                def mark(region: str, edge: str, name: str = name, windows: dict = windows) -> None:
                    if edge == "start":
                        self.flush()
                        torch.cuda.synchronize()
                        prof = profile(activities=[ProfilerActivity.CUDA])
                        prof.__enter__()
                        windows[region] = prof
                    else:
                        torch.cuda.synchronize()
                        prof = windows.pop(region)
                        prof.__exit__(None, None, None)
                        out[name].setdefault(region, []).append(kernel_ms(prof))

                fn(mark)
        return {name: {r: Samples(v) for r, v in regions.items()} for name, regions in out.items()}


def kernel_ms(prof: Any) -> float:
    """Sum of the CUDA kernel durations a profiler window saw (memcpy/memset excluded)."""
    total_us = 0.0
    for event in prof.events():
        if getattr(event, "device_type", None) != torch.autograd.DeviceType.CUDA:
            continue
        name = event.name.lower()
        if name.startswith(("memcpy", "memset")):
            continue
        total_us += event.device_time if hasattr(event, "device_time") else event.cuda_time
    return total_us / 1000.0


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
