"""Method v4 on a fake CUDA timeline: what the timer publishes is GPU time, not the host's.

The fake (:mod:`tests.fake_cuda`) gives the host and the GPU their own clocks, so a competitor whose
Python work (TE's host overhead) is longer than its kernels makes the GPU wait in eager mode, as
on the real H100. The tests check the method's promises: graph replays time the kernels (and the
small gaps a graph has), eager rounds keep the host-inclusive time beside them, rounds stop once
the median is known, a region that cannot be captured fails alone, and the cross-check's kernel
time is the kernels' sum. Issue 34's decisions: eager rounds are a fixed count with no confidence
target, and a warm-up round longer than the warm-up time is not repeated.
"""

from __future__ import annotations

import sys
import types
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from gemm_bench.measure import phases
from gemm_bench.measure.timing import (
    GraphCaptureError,
    Interleaver,
    Samples,
    TimerSettings,
    TimerSettingsError,
)
from tests import fake_cuda
from tests.fake_cuda import FakeCuda

Mark = Callable[[str, str], None]


@pytest.fixture
def cuda(monkeypatch: pytest.MonkeyPatch) -> Iterator[FakeCuda]:
    device = FakeCuda()
    torch = fake_cuda.fake_torch(device)
    monkeypatch.setitem(sys.modules, "torch", torch)
    monkeypatch.setitem(sys.modules, "torch.profiler", torch.profiler)
    yield device


def linear(cuda: FakeCuda, host_ms: float, kernels: dict[str, list[float]]) -> Callable[[Mark], None]:
    """A fake autocast Linear: per region, ``host_ms`` of Python, then its kernels (quantize, GEMM)."""

    def iteration(mark: Mark) -> None:
        for region, durations in kernels.items():
            mark(region, "start")
            cuda.host_work(host_ms)
            for ms in durations:
                cuda.kernel(ms)
            mark(region, "end")
        cuda.host_work(0.05)  # x.grad = None and friends, between iterations: never timed

    return iteration


SETTINGS = TimerSettings(warmup_s=0.0, spinup_s=0.0, repetitions=40, min_repetitions=10)


def test_graph_replays_time_the_kernels_and_eager_rounds_the_host(cuda: FakeCuda) -> None:
    """Host work of 0.8 ms per region around 0.2 ms of kernels: the eager time is the host's, the
    published time is the kernels' and the gaps between the graph's nodes (event, kernels, event),
    without the graph's launch preamble."""
    kernels = {"fprop": [0.02, 0.2], "dgrad": [0.03, 0.18], "wgrad": [0.15]}
    result = Interleaver(SETTINGS, cross_check=True).run({"fp8": linear(cuda, 0.8, kernels)})
    assert not result.failures
    for region, durations in kernels.items():
        gpu = sum(durations) + fake_cuda.GRAPH_GAP_MS * (len(durations) + 1)
        assert result.samples["fp8"][region].median == pytest.approx(gpu, rel=1e-6)
        # the host's 0.8 ms, less what the flush overlapped: host time, which a step would hide
        assert result.eager["fp8"][region].median > 3 * result.samples["fp8"][region].median
        assert result.cross_check["kernel_ms"][f"fp8/{region}"] == pytest.approx(sum(durations), rel=1e-6)
        assert result.cross_check["stored_ratios"][f"fp8/{region}"] == pytest.approx(gpu / sum(durations), rel=1e-4)
    assert result.record["eager_rounds"] == SETTINGS.eager_repetitions
    assert cuda.captures == 3  # one graph per region


def test_without_graphs_the_eager_time_is_published(cuda: FakeCuda) -> None:
    result = Interleaver(SETTINGS).run({"bf16": linear(cuda, 0.8, {"step": [0.3]})}, graphs=False)
    assert result.eager == {} and cuda.captures == 0
    assert result.samples["bf16"]["step"].median > 0.6  # the host's 0.8 ms, less the flush it overlapped


def test_a_gpu_bound_region_measures_the_same_both_ways(cuda: FakeCuda) -> None:
    """Kernels far longer than the host's work: eager and graph times agree (within the gaps)."""
    result = Interleaver(SETTINGS).run({"bf16": linear(cuda, 0.01, {"fprop": [2.0]})})
    graph, eager = result.samples["bf16"]["fprop"].median, result.eager["bf16"]["fprop"].median
    assert graph == pytest.approx(eager, rel=0.01)


def test_regions_are_replayed_in_capture_order_and_interleaved(cuda: FakeCuda) -> None:
    from gemm_bench.measure.timing import capture

    graphed = {"a": capture(linear(cuda, 0.1, {"fprop": [0.1], "dgrad": [0.2]})),
               "b": capture(linear(cuda, 0.1, {"fprop": [0.3]}))}
    launched: list[tuple[str, str]] = []
    events, _ = Interleaver(SETTINGS)._rounds(graphed, 3, profile=False, order=launched)
    assert launched == [("a", "fprop"), ("a", "dgrad"), ("b", "fprop")] * 3
    assert [round(events[n][r].median, 4) for n, r in (("a", "fprop"), ("a", "dgrad"), ("b", "fprop"))] == \
        [0.102, 0.202, 0.302]


def test_one_group_captures_into_one_pool_in_replay_order(cuda: FakeCuda, monkeypatch: pytest.MonkeyPatch) -> None:
    """Every graph of a group shares one memory pool (a gradient freed by one competitor's graphs
    serves the next one's: DeepSeek-V3's experts ran an H100 out of memory with a pool each), and
    the rounds replay the graphs in the order they were captured, which that sharing requires."""
    from gemm_bench.measure import timing

    captured: list[tuple[str, Any]] = []
    real_capture = timing.capture

    def spy(fn: Any, pool: Any = None) -> Any:
        graphed = real_capture(fn, pool)
        captured.extend((region, graph.pool) for region, graph, _, _ in graphed.graphs)
        return graphed

    monkeypatch.setattr(timing, "capture", spy)
    competitors = {"a": linear(cuda, 0.1, {"fprop": [0.1], "dgrad": [0.2]}), "b": linear(cuda, 0.1, {"fprop": [0.3]})}
    Interleaver(SETTINGS).run(competitors)
    first = [pool for _, pool in captured]
    assert len(captured) == 3 and first[0] is not None and all(p is first[0] for p in first)
    captured.clear()
    Interleaver(SETTINGS).run(competitors)
    assert captured[0][1] is not first[0]  # a new group, a new pool


def dataclass_replace(settings: TimerSettings, **changes: Any) -> TimerSettings:
    import dataclasses

    return dataclasses.replace(settings, **changes)


def test_a_competitor_that_cannot_be_captured_fails_alone(cuda: FakeCuda) -> None:
    def syncs(mark: Mark) -> None:
        mark("fprop", "start")
        cuda.kernel(0.1)
        cuda.host_sync()  # .item() inside the region
        mark("fprop", "end")

    result = Interleaver(SETTINGS).run({"bad": syncs, "good": linear(cuda, 0.5, {"fprop": [0.1]})})
    assert "not permitted when stream is capturing" in result.failures["bad"]
    assert "bad" not in result.samples and result.samples["good"]["fprop"].median == pytest.approx(0.102)
    # the failed capture was ended, on its own stream (torch ends a capture only there: ended from the
    # caller's stream, it stayed open and the next allocator call failed on the H100, DeepSeek-V3)
    assert cuda.capturing is None


def test_nested_or_unclosed_regions_are_capture_errors(cuda: FakeCuda) -> None:
    from gemm_bench.measure.timing import capture

    def nested(mark: Mark) -> None:
        mark("outer", "start")
        mark("inner", "start")

    with pytest.raises(GraphCaptureError, match="starts inside"):
        capture(nested)
    assert cuda.capturing is None

    def unclosed(mark: Mark) -> None:
        mark("fprop", "start")
        cuda.kernel(0.1)

    with pytest.raises(GraphCaptureError, match="never ended"):
        capture(unclosed)


def test_rounds_stop_once_the_median_is_known(cuda: FakeCuda) -> None:
    steady = Interleaver(SETTINGS).run({"bf16": linear(cuda, 0.01, {"fprop": [1.0]})})
    assert steady.record["converged"] and steady.samples["bf16"]["fprop"].to_stats()["n"] == SETTINGS.floor


def test_noisy_rounds_go_on_to_the_cap(cuda: FakeCuda, monkeypatch: pytest.MonkeyPatch) -> None:
    """A region whose replays vary by 10%: the 0.5% target is never met, so the cap decides."""
    durations = iter([1.0 + 0.1 * ((i * 7919) % 11) / 10 for i in range(10_000)])
    real_replay = fake_cuda.FakeCuda.replay

    def noisy(self: FakeCuda, graph: Any) -> None:
        graph.kernels = [(name, next(durations), kind) for name, _, kind in graph.kernels]
        real_replay(self, graph)

    monkeypatch.setattr(fake_cuda.FakeCuda, "replay", noisy)
    result = Interleaver(SETTINGS).run({"bf16": linear(cuda, 0.01, {"fprop": [1.0]})})
    assert not result.record["converged"]
    assert result.samples["bf16"]["fprop"].to_stats()["n"] == SETTINGS.repetitions


def test_the_cross_check_profiles_the_first_batch_only(cuda: FakeCuda, monkeypatch: pytest.MonkeyPatch) -> None:
    """Noisy rounds run to the cap (40), but the profiler sees the first batch (10 rounds) only: its
    ratios compare those rounds' events with their own kernels, the stored ratio the published median
    (all 40) with that kernel time. The ``profiler`` timer publishes kernel time, so it profiles all."""
    durations = iter([1.0 + 0.1 * ((i * 7919) % 11) / 10 for i in range(10_000)])
    real_replay = fake_cuda.FakeCuda.replay
    profiled: list[int] = []
    real_exit = fake_cuda._Profile.__exit__

    def noisy(self: FakeCuda, graph: Any) -> None:
        graph.kernels = [(name, next(durations), kind) for name, _, kind in graph.kernels]
        real_replay(self, graph)

    def counted_exit(self: Any, *exc: object) -> None:
        real_exit(self, *exc)
        profiled.append(sum(1 for kind, *_ in cuda.trace[self.first:self.last] if kind == "gpu_memcpy"))

    monkeypatch.setattr(fake_cuda.FakeCuda, "replay", noisy)
    monkeypatch.setattr(fake_cuda._Profile, "__exit__", counted_exit)
    result = Interleaver(SETTINGS, cross_check=True).run({"bf16": linear(cuda, 0.01, {"fprop": [1.0]})})
    published = result.samples["bf16"]["fprop"]
    assert len(published.ms) == SETTINGS.repetitions and not result.record["converged"]
    assert result.cross_check["rounds"] == SETTINGS.floor
    assert profiled == [SETTINGS.floor]  # one session, one flush per profiled round
    first = Samples(published.ms[:SETTINGS.floor])
    kernel = result.cross_check["kernel_ms"]["bf16/fprop"]
    assert result.cross_check["ratios"]["bf16/fprop"] == pytest.approx(first.median / kernel, rel=1e-4)
    assert result.cross_check["stored_ratios"]["bf16/fprop"] == pytest.approx(published.median / kernel, rel=1e-4)

    profiled.clear()
    every = Interleaver(dataclass_replace(SETTINGS, timer="profiler")).run(
        {"bf16": linear(cuda, 0.01, {"fprop": [1.0]})})
    assert profiled == [SETTINGS.repetitions] and len(every.samples["bf16"]["fprop"].ms) == SETTINGS.repetitions


def test_the_confidence_interval_of_the_median() -> None:
    # 10 samples: the whole range; 100 samples: the 40th to 61st value (ranks n/2 -+ 9.8)
    assert Samples([1.0] * 9 + [2.0]).ci_half_width() == pytest.approx(0.5)
    hundred = Samples([float(i) for i in range(100)])
    assert hundred.ci_half_width() == pytest.approx((60 - 39) / 2)
    assert Samples([5.0, 5.0, 5.0]).converged(0.005)
    assert not Samples([1.0, 1.1, 1.2]).converged(0.005)


@pytest.mark.parametrize(("changes", "field"), [
    ({"eager_repetitions": -1}, "eager_repetitions"), ({"eager_repetitions": True}, "eager_repetitions"),
    ({"target_ci": float("nan")}, "target_ci"), ({"target_ci": 1.0}, "target_ci"), ({"graphs": "yes"}, "graphs"),
    ({"graphs": False, "eager_repetitions": 0}, "eager_repetitions"),
])
def test_new_settings_are_validated(changes: dict[str, Any], field: str) -> None:
    with pytest.raises(TimerSettingsError) as info:
        TimerSettings(**changes)
    assert info.value.field == field


def test_the_method_says_what_is_published() -> None:
    assert "CUDA graph" in TimerSettings().method()["timed"] and TimerSettings().method()["graphs"] is True
    eager = TimerSettings(graphs=False).method()
    assert eager["graphs"] is False and eager["eager_repetitions"] == 10 and "eager" in eager["timed"]
    assert eager["rounds_rule"].startswith("each group timed exactly 10 eager rounds, with no confidence target")
    exact = TimerSettings(repetitions=3, target_ci=0.0)
    assert "exactly 3 rounds" in exact.rounds_rule() and exact.floor == 3
    # the graph rounds' rule, then what the eager time beside them rests on
    assert "the eager time beside it rests on exactly 10 eager rounds" in TimerSettings().rounds_rule()


# ------------------------------------------------------------------------------------------------
# Issue 34: eager rounds a fixed count, warm-up by time but a long round never twice. The timer's
# own clock (time.perf_counter) is the fake's host clock here, so time-based rules are exact.
# ------------------------------------------------------------------------------------------------


@pytest.fixture
def host_clock(cuda: FakeCuda, monkeypatch: pytest.MonkeyPatch) -> FakeCuda:
    """The timer reads the fake host's clock (ms there, seconds here) instead of the machine's."""
    from gemm_bench.measure import timing

    monkeypatch.setattr(timing, "time", types.SimpleNamespace(perf_counter=lambda: cuda.host / 1e3))
    return cuda


class PhaseCounter:
    """A phase recorder that knows the open phase, so a competitor can count its calls per phase."""

    def __init__(self) -> None:
        self.current: list[str] = []
        self.names: list[str] = []
        self.calls: dict[str, int] = {}

    def phase(self, name: str) -> Any:
        import contextlib

        @contextlib.contextmanager
        def open_phase() -> Iterator[None]:
            self.names.append(name)
            self.current.append(name)
            try:
                yield
            finally:
                self.current.pop()

        return open_phase()

    def counted(self, fn: Callable[[Mark], None]) -> Callable[[Mark], None]:
        def call(mark: Mark) -> None:
            where = self.current[-1] if self.current else "none"
            self.calls[where] = self.calls.get(where, 0) + 1
            fn(mark)

        return call


def noisy_host(cuda: FakeCuda) -> Callable[[Mark], None]:
    """An eager, host-bound region whose host time varies by up to 20% from call to call: its
    median is never known to 1% in 10 rounds."""
    spread = iter([2.0 + 0.4 * ((i * 7919) % 11) / 10 for i in range(100_000)])

    def iteration(mark: Mark) -> None:
        mark("step", "start")
        cuda.host_work(next(spread))
        cuda.kernel(0.1)
        mark("step", "end")

    return iteration


def test_eager_rounds_are_a_fixed_ten_with_their_spread_as_it_is(cuda: FakeCuda) -> None:
    """Published eagerly (graphs=False, the eager layer step), a noisy group times exactly
    ``eager_repetitions`` rounds, not rounds until a 1% median (which ran to 40 before) and claims
    no convergence; its spread is stored as measured. Beside graph replays it is the same count."""
    settings = dataclass_replace(SETTINGS, eager_repetitions=10)
    published = Interleaver(settings).run({"bf16": noisy_host(cuda)}, graphs=False)
    samples = published.samples["bf16"]["step"]
    assert len(samples.ms) == 10 and published.record["rounds"] == 10
    assert "converged" not in published.record  # no target, so nothing converged or failed to
    assert not samples.converged(SETTINGS.target_ci) and samples.to_stats()["iqr_ms"] > 0.05  # spread kept
    beside = Interleaver(settings).run({"bf16": noisy_host(cuda)})
    assert len(beside.eager["bf16"]["step"].ms) == 10 and beside.record["eager_rounds"] == 10
    assert "converged" in beside.record  # the graph rounds have their target


def test_an_eager_group_needs_eager_rounds(cuda: FakeCuda) -> None:
    with pytest.raises(TimerSettingsError, match="nothing to publish"):
        Interleaver(dataclass_replace(SETTINGS, eager_repetitions=0)).run({"bf16": noisy_host(cuda)}, graphs=False)


@pytest.mark.usefixtures("host_clock")
@pytest.mark.parametrize(("round_ms", "warmup_s", "eager_warm_up", "graph_warm_up"), [
    (250.0, 0.1, 1, 1),  # a round longer than the warm-up time: once, never a second time
    (80.0, 0.1, 2, 1),  # two rounds pass the 0.1 s; the graphs' 0.05 s passes in one
    (1.0, 0.1, 100, 50),  # short rounds: by time, as before
    (5.0, 0.0, 1, 1),  # no warm-up time: one round
])
def test_warm_up_is_by_time_and_a_long_round_is_not_repeated(cuda: FakeCuda, monkeypatch: pytest.MonkeyPatch,
                                                            round_ms: float, warmup_s: float, eager_warm_up: int,
                                                            graph_warm_up: int) -> None:
    """Eager warm-up for ``warmup_s``, the graphs' for half of it; every round is ``round_ms`` of GPU
    time (and the flush), so the count is exact. Before issue 34 every warm-up ran two rounds at least."""
    counter = PhaseCounter()
    replays: list[str] = []
    real_replay = fake_cuda.FakeCuda.replay

    def replay(self: FakeCuda, graph: Any) -> None:
        replays.append(counter.current[-1])
        real_replay(self, graph)

    monkeypatch.setattr(fake_cuda.FakeCuda, "replay", replay)
    settings = dataclass_replace(SETTINGS, warmup_s=warmup_s, l2_flush=False, eager_repetitions=3, target_ci=0.0,
                                 repetitions=10, min_repetitions=10)
    competitor = counter.counted(linear(cuda, 0.0, {"fprop": [round_ms - 2 * fake_cuda.GRAPH_GAP_MS]}))
    Interleaver(settings, phases=counter).run({"bf16": competitor})
    assert counter.calls[phases.WARM_UP] == eager_warm_up  # the eager warm-up's rounds
    assert replays.count(phases.WARM_UP) == graph_warm_up  # the graphs' warm-up's rounds (one region each)
    assert counter.calls[phases.EAGER] == 3 and counter.calls[phases.CAPTURE] == 1
    assert replays.count(phases.TIMED) == 10


@pytest.mark.usefixtures("host_clock")
@pytest.mark.parametrize(("repetitions", "kernel_ms", "cap_s", "expected"),
                         [(3, 0.01, 20.0, 3), (40, 0.01, 20.0, 40), (3, 10.0, 0.02, 3), (40, 10.0, 0.05, 10)])
def test_graph_rounds_are_what_the_settings_and_the_time_cap_allow(
        cuda: FakeCuda, repetitions: int, kernel_ms: float, cap_s: float, expected: int) -> None:
    """With no confidence target the graph rounds are ``repetitions``, or what fits in
    ``max_group_s`` at the warm-up's pace (never fewer than ``min_repetitions``, itself at most
    ``repetitions``). (Was tests/test_cli.py's eager version; eager rounds are a fixed count now.)"""
    settings = TimerSettings(repetitions=repetitions, warmup_s=0.0, spinup_s=0.0, l2_flush=False,
                             max_group_s=cap_s, target_ci=0.0)
    counter = PhaseCounter()
    result = Interleaver(settings, phases=counter).run(
        {"a": linear(cuda, 0.0, {"main": [kernel_ms]}), "b": linear(cuda, 0.0, {"main": [kernel_ms]})})
    assert {name: len(r["main"].ms) for name, r in result.samples.items()} == {"a": expected, "b": expected}
    assert result.samples["a"]["main"].to_stats()["n"] == expected == result.record["rounds"]
    assert counter.names == [phases.SPIN_UP, phases.WARM_UP, phases.EAGER, phases.CAPTURE, phases.SPIN_UP,
                             phases.WARM_UP, phases.TIMED]
    eager = Interleaver(dataclass_replace(settings, graphs=False), phases=PhaseCounter()).run(
        {"a": linear(cuda, 0.0, {"main": [kernel_ms]})})
    assert eager.record["rounds"] == settings.eager_repetitions  # whatever repetitions and the cap say
