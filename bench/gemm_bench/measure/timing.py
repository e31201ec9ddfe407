"""GPU timing you can defend: what the GPU does for a region, not the host's work around it.

Method v4. Every competitor is a callable of one training-like iteration that marks its timed
regions (``mark(region, "start")`` ... ``mark(region, "end")``). A group of competitors is timed
like this (:meth:`Interleaver.run`):

1. **Eager warm-up by time**, every competitor once per round (the GPU idles at a low clock, and
   cuBLAS, TE and Triton choose and build their kernels on first use), until ``warmup_s`` has
   passed: a round longer than the warm-up time is run once, never twice (issue 34).
2. **Eager rounds**: exactly ``eager_repetitions`` rounds (10), no confidence target, so their
   spread is stored as it is; each region timed by an event pair around its eager call. This time
   includes the host's Python and launch work whenever that work is longer than the GPU's, as it
   is for an autocast ``te.Linear`` of modest size. It is kept as a second quantity (``eager``),
   never the headline.
3. **Capture**: each region captured as its own CUDA graph (one memory pool per competitor, regions
   captured and replayed in the competitor's order, so a backward graph reads what its forward
   graph wrote). What happens between regions in the competitor (``x.grad = None``) is host work
   and stays out. FP8 delayed scaling's amax and scale update runs on the GPU at the end of the
   forward and the backward, so it is captured and replayed with them, as in a graphed step.
4. **Graph rounds**: an L2 flush, then the region's graph replayed, every region of every
   competitor once per round. The graph holds an event record before and after the region's work,
   so the time between them is the GPU's, from the region's first kernel to its last (with the
   short gaps between its dependent kernels, which a graphed step has too): neither the host's
   work nor the graph's own launch is in it. Rounds go on until the median's 95% confidence
   interval is within ``target_ci`` of the median for every region (at least ``min_repetitions``,
   at most ``repetitions`` or ``max_group_s``). These samples are the published time.
5. **Cross-check**: the first batch of graph rounds runs inside one ``torch.profiler`` session, so
   each region's published median has beside it the median of its kernels' summed durations (the
   trace split at the L2 flushes) from launches among the very ones published, at the same
   clock. A ratio near 1 says the published time is the GPU's time for the region's kernels.

With ``graphs=False`` (a group whose regions are host-inclusive by definition, the eager layer
step) steps 3-4 are skipped: the eager rounds of step 2 (the same fixed count, no confidence
target) are what is published and cross-checked.

torch is imported inside the functions that need it: the CLI validates :class:`TimerSettings` (and
says "no GPU stack" with exit status 3) on machines without torch.
"""

from __future__ import annotations

import contextlib
import dataclasses
import math
import statistics
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Protocol

from gemm_bench.measure.phases import CAPTURE, EAGER, PROFILER_START, SPIN_UP, TIMED, TRACE, WARM_UP
from gemm_bench.measure.telemetry import cross_check_block, with_stored_ratios

#: Twice any Hopper / Blackwell L2 (50-126 MB): copying half of it onto the other half touches
#: every byte, evicting every cached line.
L2_FLUSH_BYTES = 256 * 1024 * 1024

#: Longest warm-up or spin-up accepted, in seconds. Warm-up runs per competitor group, so a
#: value beyond this makes a refresh take hours; it is a typo, not a setting.
MAX_WARMUP_S = 600.0

#: Most timed rounds accepted: each round keeps one sample per region in memory, and the group
#: time cap (``max_group_s``) stops far earlier on any real shape.
MAX_REPETITIONS = 100_000

#: z for a two-sided 95% interval: the median's distribution-free confidence interval runs between
#: the order statistics ``n/2 -+ Z95 * sqrt(n)/2`` (the binomial's normal approximation).
Z95 = 1.96

#: Why ``eager_repetitions=0`` is refused for a group timed eagerly (it publishes its eager rounds).
NO_EAGER_ROUNDS = "0 eager rounds leave a group timed eagerly nothing to publish"

TIMERS = {
    "events": "CUDA events around each region",
    "profiler": "torch.profiler CUDA kernel time, summed per region between L2 flushes",
}


class TimerSettingsError(ValueError):
    """A timing parameter out of range; ``field`` names the :class:`TimerSettings` field."""

    def __init__(self, field: str, message: str) -> None:
        self.field = field
        self.message = message
        super().__init__(f"{field}: {message}")


class GraphCaptureError(RuntimeError):
    """A competitor whose regions cannot be captured as CUDA graphs (the reason is its cell's)."""


#: ``after(graphed competitors, median ms per round)``: see :meth:`Interleaver.run`.
AfterTimed = Callable[[Mapping[str, "GraphedCompetitor"], Mapping[str, float]], None]


class PhaseRecorder(Protocol):
    """Where wall time goes (``gemm_bench.measure.phases.PhaseProfiler`` satisfies this).

    The timer charges its spin-up, warm-up, eager rounds, capture and timed rounds (profiled for
    the cross-check) to the phases of those names, so ``gemm-bench run --profile-phases``
    separates them.
    """

    def phase(self, name: str) -> contextlib.AbstractContextManager[Any]: ...


@dataclasses.dataclass(frozen=True)
class TimerSettings:
    """How to time; validated on construction, because a NaN warm-up loops forever.

    Graph rounds stop adaptively: once every region's median is known to ``target_ci`` (the 95%
    confidence interval's half-width over the median), after at least ``min_repetitions`` rounds
    and at most ``repetitions`` rounds or ``max_group_s`` seconds. ``target_ci=0`` times
    ``repetitions`` rounds, or fewer (never fewer than ``min_repetitions``) where they would take
    longer than ``max_group_s``; ``min_repetitions`` is lowered to ``repetitions`` when above it.

    Eager rounds, kept beside the graph rounds or published (``graphs=False``), are always exactly
    ``eager_repetitions``: no confidence target and no time cap (issue 34's decision: the eager time
    is a second quantity whose spread is shown as it is, and chasing a 1% median on host-bound
    calls cost rounds without making it the headline). ``repetitions``, ``min_repetitions``,
    ``max_group_s`` and ``target_ci`` rule the graph rounds only.
    """

    timer: str = "events"  # "events" | "profiler"
    warmup_s: float = 0.1  # per competitor group, after a global clock spin-up
    spinup_s: float = 2.0  # once per process: bring SM clocks out of idle
    repetitions: int = 40  # most timed rounds
    min_repetitions: int = 10  # fewest timed rounds (lowered to ``repetitions`` if above it)
    max_group_s: float = 10.0  # cap on one group's timed rounds (huge shapes get fewer rounds)
    l2_flush: bool = True
    graphs: bool = True  # publish CUDA-graph replay time (GPU time); False: eager time
    eager_repetitions: int = 10  # eager rounds, exactly: kept beside graph rounds, or published without graphs
    target_ci: float = 0.01  # stop once every region's median is known to 1%

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
        value = self.eager_repetitions
        if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= MAX_REPETITIONS:
            raise TimerSettingsError("eager_repetitions",
                                     f"{value!r} is not a whole number from 0 to {MAX_REPETITIONS}")
        if not _is_real(self.target_ci) or not 0 <= self.target_ci < 1:
            raise TimerSettingsError("target_ci", f"{self.target_ci!r} is not a fraction from 0 to below 1")
        if not isinstance(self.graphs, bool):
            raise TimerSettingsError("graphs", f"{self.graphs!r} is not true or false")
        if not self.graphs and not self.eager_repetitions:
            raise TimerSettingsError("eager_repetitions", NO_EAGER_ROUNDS)

    @property
    def floor(self) -> int:
        """The fewest rounds a group times: ``min_repetitions``, but never more than asked for."""
        return min(self.min_repetitions, self.repetitions)

    def rounds(self, seconds_per_round: float) -> int:
        """Most rounds to time for a group whose warm-up rounds took ``seconds_per_round`` each."""
        per_round = seconds_per_round if _is_real(seconds_per_round) and seconds_per_round > 1e-6 else 1e-6
        fit = int(self.max_group_s / per_round)
        return max(self.floor, min(self.repetitions, fit))

    def rounds_rule(self) -> str:
        """How many rounds each group timed, in words (stored with the method)."""
        eager = (f"exactly {self.eager_repetitions} eager rounds, with no confidence target "
                 "(their spread is stored as it is)")
        if not self.graphs:
            return f"each group timed {eager}; each cell's stats.n is the number of rounds it was timed"
        if self.floor == self.repetitions:
            rule = f"each group timed exactly {self.repetitions} rounds"
        elif self.target_ci == 0:
            rule = (f"each group timed {self.repetitions} rounds, or fewer (never fewer than {self.floor}) "
                    f"when that many would take longer than {self.max_group_s:g} s")
        else:
            rule = (f"each group timed rounds until every region's median was known to {self.target_ci:.1%} "
                    f"(half-width of its 95% confidence interval), at least {self.floor} and at most "
                    f"{self.repetitions} rounds or {self.max_group_s:g} s")
        if self.eager_repetitions:
            rule += f"; the eager time beside it rests on {eager}"
        return rule + "; each cell's stats.n is the number of rounds it was timed"

    def method(self) -> dict[str, Any]:
        """Every parameter of the method, stored in each result's provenance."""
        what = ("GPU time: each region captured as a CUDA graph (quantization kernels included) and its "
                "replays timed, so the host's launch work stays out; the eager, host-inclusive time of the same "
                "regions is kept as a second quantity (eager)") if self.graphs else (
                "eager time: each region called eagerly, host work included where the GPU waits for it")
        return {
            "timer": TIMERS[self.timer],
            "timer_id": self.timer,
            "timed": what,
            "graphs": self.graphs,
            "spinup_s": self.spinup_s,
            "warmup_s": self.warmup_s,
            "repetitions": self.repetitions,
            "min_repetitions": self.floor,
            "max_group_s": self.max_group_s,
            "target_ci": self.target_ci,
            "eager_repetitions": self.eager_repetitions,
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
    """Per-repetition times of one competitor's region, in milliseconds."""

    ms: list[float]

    @property
    def median(self) -> float:
        return statistics.median(self.ms)

    @property
    def iqr(self) -> float:
        """Interquartile range; 0.0 for one sample (``stats.n`` says there was only one)."""
        q = _quantiles(self.ms, 4)
        return q[2] - q[0]

    def ci_half_width(self) -> float:
        """Half the width of the median's distribution-free 95% confidence interval, in ms.

        The interval runs between the order statistics of rank ``n/2 -+ 1.96 sqrt(n)/2`` (clamped
        to the sample): with 10 samples it is the whole range, with 40 the 14th to 27th value.
        """
        ordered = sorted(self.ms)
        n = len(ordered)
        half = Z95 * math.sqrt(n) / 2
        low = max(0, math.floor(n / 2 - half) - 1)
        high = min(n - 1, math.ceil(n / 2 + half))
        return (ordered[high] - ordered[low]) / 2

    def converged(self, target: float) -> bool:
        """Whether the median is known to ``target`` (relative half-width of its 95% interval)."""
        median = self.median
        return median > 0 and self.ci_half_width() <= target * median

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


#: A competitor is a callable of one iteration: it receives ``mark`` and must call it around
#: each timed region (``mark(region, "start")`` / ``mark(region, "end")``). Most competitors
#: have one region; an autocast Linear has three (fprop, dgrad, wgrad) in one iteration.
Mark = Callable[[str, str], None]
Competitor = Callable[[Mark], None]


class GraphedCompetitor:
    """A competitor's regions as CUDA graphs, replayed in capture order (a :data:`Competitor`).

    Each region's graph holds a timing event before and after the region's work (event record
    nodes), so the time between them is the GPU's time for the region alone: not the graph's
    launch, not the flush before it. Holds the graphs (and so their memory pool) while it lives.
    """

    def __init__(self, graphs: list[tuple[str, Any, Any, Any]]) -> None:
        #: (region, graph, start event, end event), in capture order.
        self.graphs = graphs

    def __call__(self, mark: Mark) -> None:
        """Replay every region once (warm-up; the timed rounds replay region by region)."""
        for _, graph, _, _ in self.graphs:
            graph.replay()


#: The graphs of captures that failed, kept for the life of the process: torch 2.11 aborts the
#: process ("The graph should be registered to the state", in ``~CUDAGraph``) when it destroys a
#: graph whose capture failed; seen on an H100 refreshing DeepSeek-V3.
_FAILED_CAPTURES: list[Any] = []


def holds_failed_captures() -> bool:
    """Whether this process keeps a failed capture's graphs (and so their memory pool) alive."""
    return bool(_FAILED_CAPTURES)


def capture(fn: Competitor, pool: Any = None) -> GraphedCompetitor:
    """Run one iteration of ``fn`` with each of its regions captured as its own CUDA graph.

    All graphs of one competitor share one memory pool (``pool``, else a new one), so a later
    region may read what an earlier one allocated (a backward reads the forward's saved tensors);
    they must be replayed in the order they were captured, which the timer does. The timer passes
    one pool for a whole group: its competitors are captured and replayed in one fixed order, so
    memory one competitor's graphs freed (its gradients) serves the next one's, as with
    ``make_graphed_callables``. Capture runs on a side stream (CUDA requires a
    non-default stream), after the caller's eager warm-up. Raises :class:`GraphCaptureError` with
    CUDA's reason when a region cannot be captured (a host sync inside it, for instance) or when
    the competitor's regions nest or are left open.
    """
    import torch

    graphs: list[tuple[str, Any, Any, Any]] = []
    pool = torch.cuda.graph_pool_handle() if pool is None else pool
    current: list[tuple[str, Any, Any]] = []

    def mark(region: str, edge: str) -> None:
        if edge == "start":
            if current:
                raise GraphCaptureError(f"region {region!r} starts inside region {current[0][0]!r}")
            graph = torch.cuda.CUDAGraph()
            graph.capture_begin(pool=pool)
            start = torch.cuda.Event(enable_timing=True, external=True)
            start.record()
            current.append((region, graph, start))
        else:
            if not current or current[0][0] != region:
                raise GraphCaptureError(f"region {region!r} ends without having started")
            name, graph, start = current.pop()
            end = torch.cuda.Event(enable_timing=True, external=True)
            end.record()
            graph.capture_end()
            graphs.append((name, graph, start, end))

    def abandon() -> None:
        """End a capture left open (on its own stream: CUDA ends a capture only there, and a capture
        left open makes every later allocator call fail), and keep the graphs alive."""
        if current:
            with contextlib.suppress(RuntimeError):
                current[0][1].capture_end()
            _FAILED_CAPTURES.append(current.pop()[1])
        _FAILED_CAPTURES.extend(graph for _, graph, _, _ in graphs)

    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        try:
            fn(mark)
        except BaseException as exc:  # GPU boundary: cleanup only (end the capture), then re-raised
            abandon()
            if isinstance(exc, RuntimeError) and not isinstance(exc, GraphCaptureError):
                # CUDA: "operation not permitted when stream is capturing", out of memory, ...
                raise GraphCaptureError(f"CUDA graph capture failed: {exc}") from exc
            raise
        if current:
            region = current[0][0]
            abandon()
            raise GraphCaptureError(f"region {region!r} never ended")
    torch.cuda.current_stream().wait_stream(stream)
    torch.cuda.synchronize()
    return GraphedCompetitor(graphs)


@dataclasses.dataclass
class GroupTiming:
    """What timing one group gave.

    ``samples``: the published samples per competitor per region (graph replays with ``graphs``,
    else eager calls). ``eager``: the eager samples kept beside graph replays (empty without
    ``graphs``). ``failures``: competitors that could not be captured, with the reason.
    ``record``: what the group published (``timed``: graph replays or eager), its ``rounds``,
    ``eager_rounds``, ``converged`` (graph rounds only: eager rounds have no target), and with a sampler its
    ``clock``; ``cross_check``: the events-vs-profiler block (:func:`cross_check_block`).
    """

    samples: dict[str, dict[str, Samples]]
    eager: dict[str, dict[str, Samples]]
    failures: dict[str, str]
    record: dict[str, Any]
    cross_check: dict[str, Any]
    #: With ``run(..., kernels=True)``: each competitor's region's profiled rounds, each round its
    #: kernels as ``(name, start ns, duration ns)`` (the time breakdown reads them:
    #: :mod:`gemm_bench.results.breakdown`). Empty otherwise, or when the trace could not be split.
    kernels: dict[str, dict[str, list[list[tuple[str, int, int]]]]] = dataclasses.field(default_factory=dict)


class Interleaver:
    """Times several competitors round by round; each may have several named regions."""

    def __init__(self, settings: TimerSettings, *, phases: PhaseRecorder | None = None,
                 sampler: Any = None, cross_check: bool = False) -> None:
        """``sampler``: a :class:`gemm_bench.measure.telemetry.ClockSampler` whose window is each
        group's timed rounds. ``cross_check``: time each group's rounds under the profiler and
        compare the two (:attr:`GroupTiming.cross_check`)."""
        self.settings = settings
        self.phases = phases
        self.flush = L2Flusher(settings.l2_flush)
        self.sampler = sampler
        self.cross_check = cross_check
        #: The group under way's profiled regions and their kernels, when ``run`` keeps them.
        self._kernel_log: list[tuple[tuple[str, str], list[GpuActivity]]] | None = None

    def _phase(self, name: str) -> contextlib.AbstractContextManager[Any]:
        return self.phases.phase(name) if self.phases is not None else contextlib.nullcontext()

    def run(self, competitors: dict[str, Competitor], *, graphs: bool | None = None,
            kernels: bool = False, after: AfterTimed | None = None) -> GroupTiming:
        """Time one group (the module docstring's steps). ``graphs`` overrides the settings' choice
        for this group (the eager layer step is timed eagerly by definition). ``kernels``: keep the
        profiled rounds' kernels of every region (:attr:`GroupTiming.kernels`), for a time breakdown.
        ``after``: called once the timed rounds are over, while the group's CUDA graphs still live,
        with each graphed competitor and its median time per round (sum of its regions' medians):
        work that needs the very graphs just timed (each recipe's step energy, issue 34: no second
        build and capture) without touching the group's samples."""
        import torch

        s = self.settings
        graphed = s.graphs if graphs is None else graphs
        if not graphed and not s.eager_repetitions:
            raise TimerSettingsError("eager_repetitions", NO_EAGER_ROUNDS)
        cap = self._warm_up(competitors, s.warmup_s)
        eager: dict[str, dict[str, Samples]] = {}
        failures: dict[str, str] = {}
        timed = competitors
        record: dict[str, Any] = {"timed": "graph replays" if graphed else "eager"}
        if graphed:
            if s.eager_repetitions:
                with self._phase(EAGER):
                    eager, _ = self._rounds(competitors, s.eager_repetitions, profile=False)
                record["eager_rounds"] = s.eager_repetitions
            with self._phase(CAPTURE):
                torch.cuda.empty_cache()  # the eager rounds' cached blocks, before the graphs' pool
                timed = {}
                pool = torch.cuda.graph_pool_handle()  # one for the group, replayed in capture order
                for name, fn in competitors.items():
                    try:
                        timed[name] = capture(fn, pool)
                    except GraphCaptureError as exc:
                        failures[name] = str(exc)[:400]
            if not timed:
                return GroupTiming({}, eager, failures, record, {})
            cap = self._warm_up(timed, s.warmup_s / 2)
        sampling = self.sampler.sampling() if self.sampler is not None else contextlib.nullcontext()
        profile = self.cross_check or s.timer == "profiler"
        self._kernel_log = [] if kernels and profile else None
        try:
            with self._phase(TIMED), sampling:
                if graphed:
                    samples, kernel_samples, profiled, converged, why = self._adaptive(timed, cap, profile=profile)
                else:  # eager rounds published: exactly eager_repetitions of them (no target, no time cap)
                    samples, kernel_samples, profiled, converged, why = self._adaptive(
                        timed, cap, profile=profile, fixed=s.eager_repetitions)
            region_kernels = _kernels_by_region(self._kernel_log or [])
        finally:
            self._kernel_log = None
        if s.timer == "profiler":
            if kernel_samples is None:
                raise RuntimeError(f"profiler timer: {why}")
            samples, kernel_samples = kernel_samples, samples  # publish kernel time; events are the second method
            profiled = samples
        record["rounds"] = max((len(r.ms) for regions in samples.values() for r in regions.values()), default=0)
        if graphed:  # eager rounds have no confidence target: nothing to converge
            record["converged"] = converged
        if self.sampler is not None:
            record["clock"] = self.sampler.summary()
        if after is not None and graphed:
            after({n: fn for n, fn in timed.items() if isinstance(fn, GraphedCompetitor)},
                  {n: sum(smp.median for smp in regions.values()) for n, regions in samples.items()})
        check: dict[str, Any] = {}
        if self.cross_check:
            if kernel_samples is None:
                check = {"rounds": 0, "reason": why[:300]}
            else:
                stored = {f"{n}/{r}": smp.median for n, regions in samples.items() for r, smp in regions.items()}
                check = with_stored_ratios(cross_check_block(profiled, kernel_samples), stored)
        return GroupTiming(samples, eager, failures, record, check, region_kernels)

    def _warm_up(self, competitors: dict[str, Competitor], seconds: float) -> int:
        """Warm up by time: rounds until ``seconds`` have passed, at least one; return the most timed
        rounds the group's time cap allows.

        A round longer than the warm-up time is run once, never twice (issue 34: the first call has
        already run every competitor once, in the runner's probe, so a second long round warmed
        nothing the first had not; it had cost up to a round of each of the largest groups).
        """
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
                if elapsed >= seconds:
                    break
        return s.rounds(elapsed / rounds_done)

    def _untimed_mark(self, region: str, edge: str) -> None:
        if edge == "start":
            self.flush()

    def _adaptive(self, competitors: dict[str, Competitor], cap: int, *, profile: bool, fixed: int | None = None
                  ) -> tuple[dict[str, dict[str, Samples]], dict[str, dict[str, Samples]] | None,
                             dict[str, dict[str, Samples]], bool, str]:
        """Rounds in batches until every region's median is known to ``target_ci`` (or ``cap``, or
        the group's time cap), or exactly ``fixed`` rounds in one batch (eager rounds: no target, no
        cap): the event samples of every round; with ``profile``, the profiled
        kernel samples (None and the reason when the trace cannot be split per region) and the event
        samples of the very launches profiled; and whether the samples converged.

        The cross-check profiles the first batch (``min_repetitions`` rounds, the first rounds of
        the published ones): its event and kernel samples come from the same launches at the same
        clock. (Profiled afterwards, in a session of its own, a GPU that ran at its power limit
        through the timed rounds came back at a higher clock: large GEMMs ran up to 20% faster than
        in the timed rounds on an H100.) The later batches run without the profiler, so collecting
        the trace costs what one batch costs, not every round's kernels (17 s of one MoE model's
        47 s in session 8, when every round was profiled). The ``profiler`` timer publishes kernel
        time, so it profiles every round.
        """
        s = self.settings
        merged: dict[str, dict[str, list[float]]] = {name: {} for name in competitors}
        order: list[tuple[str, str]] = []
        done, start = 0, time.perf_counter()
        batch = fixed if fixed is not None else cap if s.target_ci == 0 else min(s.floor, cap)
        converged = False
        every_round = s.timer == "profiler"
        kernels: dict[str, dict[str, Samples]] | None = None
        profiled: dict[str, dict[str, Samples]] = {}
        why = "not profiled"
        with contextlib.ExitStack() as stack:
            prof = None
            if profile:
                with self._phase(PROFILER_START):
                    prof = stack.enter_context(_profiler())
            while True:
                events, _ = self._rounds(competitors, batch, profile=False, order=order)
                for name, regions in events.items():
                    for region, smp in regions.items():
                        merged[name].setdefault(region, []).extend(smp.ms)
                done += batch
                out = {n: {r: Samples(list(v)) for r, v in regions.items()} for n, regions in merged.items()}
                if prof is not None and not every_round:
                    kernels, why = self._stop_profiler(stack, prof, order)
                    profiled, prof = out, None
                converged = fixed is None and s.target_ci > 0 and all(
                    smp.converged(s.target_ci) for regions in out.values() for smp in regions.values())
                if (converged or fixed is not None or done >= cap or s.target_ci == 0
                        or time.perf_counter() - start >= s.max_group_s):
                    break
                batch = min(cap - done, max(5, done // 2))
            if prof is not None:
                kernels, why = self._stop_profiler(stack, prof, order)
                profiled = out
        return out, kernels, profiled, converged, why

    def _stop_profiler(self, stack: contextlib.ExitStack, prof: Any, order: list[tuple[str, str]]
                       ) -> tuple[dict[str, dict[str, Samples]] | None, str]:
        """Stop the profiler session (Kineto collects its activity here) and split its kernels per
        region of ``order``: (kernel samples, "") or (None, the reason)."""
        with self._phase(TRACE):
            stack.close()
            try:
                if self._kernel_log is None:
                    return _split_kernels(prof, order), ""
                return _split_kernels(prof, order, self._kernel_log), ""
            except (RuntimeError, ValueError, KeyError, OSError) as exc:
                # the profiler's trace, or one that cannot be split per region
                return None, str(exc)

    def _rounds(
        self, competitors: dict[str, Competitor], reps: int, *, profile: bool,
        order: list[tuple[str, str]] | None = None,
    ) -> tuple[dict[str, dict[str, Samples]], dict[str, dict[str, Samples]] | None]:
        """``reps`` interleaved rounds: event samples, and kernel samples when ``profile``.
        ``order`` collects (competitor, region) of every timed region in launch order, for a
        caller that profiles several calls in one session.

        Eager competitors are timed by an event pair around each region, all rounds enqueued back
        to back; graphed ones (:class:`GraphedCompetitor`) by the events inside each region's graph,
        read after each round (each graph records into the same two events at every replay).
        """
        import torch

        samples: dict[str, dict[str, list[float]]] = {name: {} for name in competitors}
        pairs: list[tuple[str, str, Any, Any]] = []  # eager: (competitor, region, start, end)
        order = [] if order is None else order
        first = len(order)
        prof = None
        with contextlib.ExitStack() as stack:
            if profile:
                prof = stack.enter_context(_profiler())
            for _ in range(reps):
                graphed: list[tuple[str, str, Any, Any]] = []
                for name, fn in competitors.items():
                    if isinstance(fn, GraphedCompetitor):
                        for region, graph, start, end in fn.graphs:
                            self.flush()
                            graph.replay()
                            order.append((name, region))
                            graphed.append((name, region, start, end))
                        continue
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
                            pairs.append((name, region, open_events.pop(region), event))

                    fn(mark)
                if graphed:
                    torch.cuda.synchronize()
                    for name, region, start, end in graphed:
                        samples[name].setdefault(region, []).append(start.elapsed_time(end))
            torch.cuda.synchronize()
        for name, region, start, end in pairs:
            samples[name].setdefault(region, []).append(start.elapsed_time(end))
        events = {name: {region: Samples(ms) for region, ms in regions.items()} for name, regions in samples.items()}
        if prof is None:
            return events, None
        return events, _split_kernels(prof, order[first:])


def _profiler() -> Any:
    """A torch.profiler session recording CUDA activity (kernels, memcpys)."""
    from torch.profiler import ProfilerActivity
    from torch.profiler import profile as profiler

    return profiler(activities=[ProfilerActivity.CUDA])


def _split_kernels(prof: Any, order: list[tuple[str, str]],
                   log: list[tuple[tuple[str, str], list[GpuActivity]]] | None = None
                   ) -> dict[str, dict[str, Samples]]:
    """Kernel samples per competitor per region: the trace split at the L2 flushes, in ``order``.
    ``log``: where to append each timed region's own kernels (``((competitor, region), kernels)``)."""
    per_region = kernels_in_regions(_activities(prof), len(order))
    if log is not None:
        log.extend(zip(order, per_region, strict=True))
    kernels: dict[str, dict[str, list[float]]] = {}
    for (name, region), acts in zip(order, per_region, strict=True):
        kernels.setdefault(name, {}).setdefault(region, []).append(sum(a.duration_ns for a in acts) / 1e6)
    return {n: {r: Samples(v) for r, v in regions.items()} for n, regions in kernels.items()}


def _kernels_by_region(log: list[tuple[tuple[str, str], list[GpuActivity]]]
                       ) -> dict[str, dict[str, list[list[tuple[str, int, int]]]]]:
    """The log of :func:`_split_kernels` as competitor -> region -> rounds -> (name, start, duration)."""
    out: dict[str, dict[str, list[list[tuple[str, int, int]]]]] = {}
    for (name, region), acts in log:
        rounds = out.setdefault(name, {}).setdefault(region, [])
        rounds.append([(a.name, a.start_ns, a.duration_ns) for a in acts])
    return out


def _activities(prof: Any) -> list[GpuActivity]:
    """The session's GPU activities: from memory where this torch keeps them, else its chrome trace."""
    activities = gpu_activities_in_memory(prof)
    return activities if activities is not None else gpu_activities_from_chrome_trace(prof)


def kernel_ms_per_region(prof: Any, regions: int) -> list[float]:
    """Sum of kernel durations after each L2-flush memcpy, one number per timed region.

    The session's GPU activities are read from the profiler's results in memory
    (:func:`gpu_activities_in_memory`); only a torch without that API has them written as a chrome
    trace and parsed back (:func:`gpu_activities_from_chrome_trace`), which was once the only way:
    every host and device event written to a JSON file and parsed again, per group (the trace
    phase, the profiler's stop included, took 30.4 s of gpt-oss-120b's 63 s on an H100). Either
    way the activities are split by the one function :func:`split_at_flushes`, so the two readers
    cannot assign a kernel to different regions.
    """
    return split_at_flushes(_activities(prof), regions)


@dataclasses.dataclass(frozen=True)
class GpuActivity:
    """One GPU activity of a profiler session: what the split at the L2 flushes reads.

    ``kind`` is Kineto's category (the chrome trace's ``cat``): ``kernel``, ``gpu_memcpy``; the
    readers keep no other kind. Times in integer nanoseconds, Kineto's own unit.
    """

    kind: str
    name: str
    start_ns: int
    duration_ns: int


#: The kinds of activity the split reads: kernels, and the memcpys among which are the flushes.
SPLIT_KINDS = ("kernel", "gpu_memcpy")

#: Names Kineto gives the GPU activities that are neither kernels nor memcpys, for a torch whose
#: events in memory carry no category: memsets ("Memset (Device)") and CUDA synchronizations
#: (``cuda_sync``, recorded by default since Kineto 2024).
_NOT_KERNELS = ("Memset ", "Context Sync", "Stream Sync", "Event Sync", "Stream Wait Event")


def split_at_flushes(activities: Sequence[GpuActivity], regions: int) -> list[float]:
    """Kernel milliseconds per timed region: the activities in time order, split at the flush copies
    (device-to-device memcpys); everything between one flush and the next belongs to the region that
    flush preceded. Kernels replayed from a CUDA graph are kernels like any other."""
    return [sum(a.duration_ns for a in kernels) / 1e6 for kernels in kernels_in_regions(activities, regions)]


def kernels_in_regions(activities: Sequence[GpuActivity], regions: int) -> list[list[GpuActivity]]:
    """Each timed region's kernels (the split of :func:`split_at_flushes`), in time order."""
    per_region: list[list[GpuActivity]] = []
    for activity in sorted(activities, key=lambda a: a.start_ns):
        if activity.kind == "gpu_memcpy" and "DtoD" in activity.name:
            per_region.append([])
        elif activity.kind == "kernel" and per_region:
            per_region[-1].append(activity)
    if len(per_region) != regions:
        raise RuntimeError(
            f"profiler timer: found {len(per_region)} L2 flushes for {regions} timed regions "
            "(the timed code copies device-to-device itself)"
        )
    return per_region


def gpu_activities_in_memory(prof: Any) -> list[GpuActivity] | None:
    """The session's kernels and memcpys from Kineto's results in memory
    (``prof.profiler.kineto_results.events()`` of a stopped ``torch.profiler.profile``), or None
    where this torch keeps no such results or its events lack nanosecond times (the caller then
    reads the chrome trace). Reads only the raw events: no ``prof.events()``, whose Python parsing
    of every host and device event is what this avoids."""
    results = getattr(getattr(prof, "profiler", None), "kineto_results", None)
    events = getattr(results, "events", None)
    if not callable(events):
        return None
    out: list[GpuActivity] = []
    for event in events():
        if not (hasattr(event, "start_ns") and hasattr(event, "duration_ns")):
            return None
        kind = _activity_kind(event)
        if kind is not None:
            out.append(GpuActivity(kind, str(event.name()), int(event.start_ns()), int(event.duration_ns())))
    return out


def _activity_kind(event: Any) -> str | None:
    """The chrome trace's ``cat`` of an in-memory Kineto event, where the split reads it; else None.

    Recent torch says it (``activity_type()``: Kineto's category name, the very string the trace
    writes). Without it, the kind follows from what Kineto records: GPU activities have the CUDA
    device type (host events, CUDA runtime calls among them, do not); of those, user annotations,
    memsets and synchronizations are named as such, memcpys "Memcpy <kind> (<src> -> <dst>)", and
    the rest are kernels.
    """
    activity_type = getattr(event, "activity_type", None)
    if activity_type is not None:
        kind = str(activity_type())
        return kind if kind in SPLIT_KINDS else None
    device = event.device_type()
    if getattr(device, "name", str(device).rpartition(".")[2]) != "CUDA":
        return None
    if getattr(event, "is_user_annotation", lambda: False)():
        return None
    name = str(event.name())
    if name.startswith("Memcpy "):
        return "gpu_memcpy"
    if name.startswith(_NOT_KERNELS):
        return None
    return "kernel"


def gpu_activities_from_chrome_trace(prof: Any) -> list[GpuActivity]:
    """The session's kernels and memcpys from its chrome trace, exported to a file and parsed: the
    fallback of :func:`gpu_activities_in_memory`. The trace's microseconds (Kineto writes them to
    the nanosecond, ``us.nnn``) become the in-memory reader's integer nanoseconds."""
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
    return [GpuActivity(e["cat"], str(e.get("name", "")), round(float(e["ts"]) * 1000), round(float(e["dur"]) * 1000))
            for e in trace.get("traceEvents", []) if e.get("ph") == "X" and e.get("cat") in SPLIT_KINDS]


def single(settings: TimerSettings, fn: Callable[[], Any]) -> Samples:
    """Time one plain callable (one region): for tests and quick checks."""
    return time_many(settings, [("only", fn)])["only"]


def time_many(settings: TimerSettings, fns: Sequence[tuple[str, Callable[[], Any]]]) -> dict[str, Samples]:
    """Time several one-region callables interleaved; returns samples per name."""

    def wrap(fn: Callable[[], Any]) -> Competitor:
        def competitor(mark: Mark) -> None:
            mark("main", "start")
            fn()
            mark("main", "end")

        return competitor

    result = Interleaver(settings).run({name: wrap(fn) for name, fn in fns})
    if result.failures:
        raise GraphCaptureError("; ".join(f"{n}: {why}" for n, why in result.failures.items()))
    return {name: regions["main"] for name, regions in result.samples.items()}
