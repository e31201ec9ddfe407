"""GPU check of the cross-check's reader: the profiler's events in memory give the chrome trace's numbers.

    python3 -m pytest -m gpu -s tests/test_gpu_profiler.py

One real ``torch.profiler`` session (CUDA activity only, as the timer's) over L2 flushes, eager
GEMMs and CUDA-graph replays is read both ways: from Kineto's results in memory (what the timer
now uses) and from its exported chrome trace (the old way, kept as the fallback). Both must find
the same kernels and memcpys, to the nanosecond, and the same kernel time per region; the reader
that the installed torch offers is printed, with the time each way took. The CPU tests with fake
events are ``tests/test_profiler_events.py``.
"""

from __future__ import annotations

import time
import types
from typing import Any

import pytest

from tests.gpu_skip import gpu_module

torch, _, pytestmark = gpu_module(transformer_engine=False)

from gemm_bench.measure import timing  # noqa: E402
from gemm_bench.measure.timing import L2Flusher, TimerSettings  # noqa: E402


def _session(rounds: int = 20) -> tuple[Any, int]:
    """A profiled session like the timer's: per round a flush then an eager region, a flush then a
    graphed region (a quantize-like cast and a GEMM)."""
    flush = L2Flusher(True)
    a = torch.randn(2048, 2048, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(2048, 2048, device="cuda", dtype=torch.bfloat16)

    def region() -> Any:
        return (a * 0.5).to(torch.bfloat16) @ b

    for _ in range(3):
        region()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        region()
    torch.cuda.synchronize()
    with timing._profiler() as prof:
        for _ in range(rounds):
            flush()
            region()
            flush()
            graph.replay()
        torch.cuda.synchronize()
    return prof, 2 * rounds


def test_in_memory_events_match_the_chrome_trace() -> None:
    prof, regions = _session()
    started = time.perf_counter()
    memory = timing.gpu_activities_in_memory(prof)
    memory_s = time.perf_counter() - started
    assert memory is not None, "this torch keeps no Kineto results in memory: the timer reads the chrome trace"
    started = time.perf_counter()
    trace = timing.gpu_activities_from_chrome_trace(prof)
    trace_s = time.perf_counter() - started
    first = next(iter(prof.profiler.kineto_results.events()))
    print(f"torch {torch.__version__}: events carry activity_type(): {hasattr(first, 'activity_type')}; "
          f"{len(memory)} activities read in memory in {memory_s * 1000:.1f} ms, "
          f"from the chrome trace in {trace_s * 1000:.1f} ms")
    by_start = sorted(memory, key=lambda x: x.start_ns)
    from_trace = sorted(trace, key=lambda x: x.start_ns)
    assert [(x.kind, x.name, x.duration_ns) for x in by_start] == [(x.kind, x.name, x.duration_ns) for x in from_trace]
    in_memory = timing.split_at_flushes(memory, regions)
    assert in_memory == timing.split_at_flushes(trace, regions)
    assert timing.kernel_ms_per_region(prof, regions) == in_memory
    print("kernel ms per region (first four):", [round(v, 4) for v in in_memory[:4]])


def test_the_name_based_reader_agrees_with_activity_type() -> None:
    """Without ``activity_type()`` (an older torch) the kind follows from device type and name:
    on a real session both ways must keep the same activities."""
    prof, _ = _session(rounds=5)
    events = prof.profiler.kineto_results.events()
    if not hasattr(events[0], "activity_type"):
        pytest.skip("this torch's events have no activity_type(): the name-based reader is the one in use")

    class Untyped:
        def __init__(self, event: Any) -> None:
            self._event = event

        def __getattr__(self, name: str) -> Any:
            if name == "activity_type":
                raise AttributeError(name)
            return getattr(self._event, name)

    hidden = types.SimpleNamespace(profiler=types.SimpleNamespace(
        kineto_results=types.SimpleNamespace(events=lambda: [Untyped(e) for e in events])))
    assert timing.gpu_activities_in_memory(hidden) == timing.gpu_activities_in_memory(prof)


def test_the_timer_cross_check_reads_in_memory(monkeypatch: pytest.MonkeyPatch) -> None:
    """A timed group with the cross-check never exports a chrome trace (where torch keeps events)."""
    exported: list[str] = []
    real = timing.gpu_activities_from_chrome_trace
    monkeypatch.setattr(timing, "gpu_activities_from_chrome_trace", lambda prof: exported.append("x") or real(prof))
    a = torch.randn(4096, 4096, device="cuda", dtype=torch.bfloat16)
    settings = TimerSettings(repetitions=20, warmup_s=0.2, spinup_s=0.5)

    def competitor(mark: Any) -> None:
        mark("gemm", "start")
        a @ a
        mark("gemm", "end")

    result = timing.Interleaver(settings, cross_check=True).run({"bf16": competitor})
    assert exported == [] and result.cross_check["kernel_ms"]["bf16/gemm"] > 0
    print("cross-check:", result.cross_check["ratios"], result.cross_check["kernel_ms"])
