"""Method v4 on a fake CUDA timeline: what the timer publishes is GPU time, not the host's.

The fake (:mod:`tests.fake_cuda`) gives the host and the GPU their own clocks, so a competitor whose
Python work (TE's host overhead) is longer than its kernels makes the GPU wait in eager mode, as
on the real H100. The tests check the method's promises: graph replays time the kernels (and the
small gaps a graph has), eager rounds keep the host-inclusive time beside them, rounds stop once
the median is known, a region that cannot be captured fails alone, and the cross-check's kernel
time is the kernels' sum.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterator
from typing import Any

import pytest

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
])
def test_new_settings_are_validated(changes: dict[str, Any], field: str) -> None:
    with pytest.raises(TimerSettingsError) as info:
        TimerSettings(**changes)
    assert info.value.field == field


def test_the_method_says_what_is_published() -> None:
    assert "CUDA graph" in TimerSettings().method()["timed"] and TimerSettings().method()["graphs"] is True
    eager = TimerSettings(graphs=False).method()
    assert eager["graphs"] is False and eager["eager_repetitions"] == 0 and "eager" in eager["timed"]
    exact = TimerSettings(repetitions=3, target_ci=0.0)
    assert "exactly 3 rounds" in exact.rounds_rule() and exact.floor == 3
