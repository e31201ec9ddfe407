"""The cross-check reads the profiler's events in memory; the chrome trace is only a fallback.

Fake profiler sessions hold the same GPU activities twice: as Kineto's in-memory events
(``prof.profiler.kineto_results.events()``, with or without ``activity_type()``, as torch versions
differ) and as the chrome trace ``export_chrome_trace`` writes (microseconds to the nanosecond).
Both readers must give the very same kernel time per region, since one function splits both; the
in-memory one must not export anything. The GPU check on a real session is
``tests/test_gpu_profiler.py``.
"""

from __future__ import annotations

import json
import sys
import types
from typing import Any

import pytest

from gemm_bench.measure import timing
from gemm_bench.measure.timing import GpuActivity, Interleaver, TimerSettings, kernel_ms_per_region, split_at_flushes
from tests import fake_cuda
from tests.fake_cuda import FakeCuda
from tests.test_timing_method import cuda  # noqa: F401  (a fixture: the fake CUDA timeline as torch)

#: (Kineto category, name, device type, start ns, duration ns): one session of two timed regions.
#: Host events (CUDA runtime calls), a user annotation, a memset, a host-to-device copy and a
#: synchronization are there too, as in a real trace: none is a kernel or a flush.
SESSION = [
    ("cuda_runtime", "cudaMemcpyAsync", "CPU", 999_000, 4_000),
    ("kernel", "warm_up_leftover", "CUDA", 999_500, 700),  # before the first flush: no region's
    ("gpu_memcpy", "Memcpy DtoD (Device -> Device)", "CUDA", 1_000_000, 90_123),
    ("cuda_runtime", "cudaGraphLaunch", "CPU", 1_001_000, 6_000),
    ("gpu_user_annotation", "fprop", "CUDA", 1_090_200, 50_000),
    ("kernel", "quantize_kernel", "CUDA", 1_090_200, 20_001),
    ("gpu_memset", "Memset (Device)", "CUDA", 1_110_300, 1_000),
    ("kernel", "sm90_xmma_gemm_e4m3", "CUDA", 1_111_400, 200_457),
    ("gpu_memcpy", "Memcpy HtoD (Pinned -> Device)", "CUDA", 1_312_000, 3_000),
    ("gpu_memcpy", "Memcpy DtoD (Device -> Device)", "CUDA", 1_400_000, 90_010),
    ("kernel", "sm90_xmma_gemm_bf16", "CUDA", 1_490_100, 150_333),
    ("cuda_sync", "Context Sync", "CUDA", 1_640_500, 12_345),
]
EXPECTED_MS = [(20_001 + 200_457) / 1e6, 150_333 / 1e6]


class _Device:
    def __init__(self, name: str) -> None:
        self.name = name

    def __str__(self) -> str:
        return f"DeviceType.{self.name}"


class _Event:
    """A ``torch._C._autograd._KinetoEvent``: accessor methods only."""

    def __init__(self, cat: str, name: str, device: str, start: int, dur: int, with_type: bool) -> None:
        self._cat, self._name, self._device, self._start, self._dur = cat, name, device, start, dur
        if with_type:
            self.activity_type = lambda: self._cat

    def name(self) -> str:
        return self._name

    def device_type(self) -> _Device:
        return _Device(self._device)

    def start_ns(self) -> int:
        return self._start

    def duration_ns(self) -> int:
        return self._dur

    def is_user_annotation(self) -> bool:
        return self._cat == "gpu_user_annotation"


class _Session:
    """A stopped ``torch.profiler.profile``: ``profiler.kineto_results`` (unless ``in_memory`` is
    False: an old torch) and ``export_chrome_trace``, which records that it was called."""

    def __init__(self, activities: list[tuple[str, str, str, int, int]], *, in_memory: bool = True,
                 with_type: bool = True) -> None:
        self.activities = activities
        self.exported = 0
        if in_memory:
            events = [_Event(*a, with_type=with_type) for a in activities]
            results = types.SimpleNamespace(events=lambda: list(reversed(events)))  # not in time order
            self.profiler = types.SimpleNamespace(kineto_results=results)

    def export_chrome_trace(self, path: str) -> None:
        self.exported += 1
        # Kineto writes microseconds to the nanosecond ("us.nnn"), relative to a base time.
        events = ['{"ph": "M", "name": "process_name"}'] + [
            f'{{"ph": "X", "cat": {json.dumps(cat)}, "name": {json.dumps(name)}, '
            f'"ts": {(start - 900_000) // 1000}.{start % 1000:03d}, "dur": {dur // 1000}.{dur % 1000:03d}}}'
            for cat, name, _, start, dur in self.activities]
        with open(path, "w", encoding="utf-8") as handle:
            handle.write('{"traceEvents": [' + ", ".join(events) + "]}")


@pytest.mark.parametrize("with_type", [True, False], ids=["activity_type", "device type and name"])
def test_in_memory_events_give_the_chrome_traces_numbers_without_exporting(with_type: bool) -> None:
    in_memory = _Session(SESSION, with_type=with_type)
    from_trace = _Session(SESSION, in_memory=False)
    assert kernel_ms_per_region(in_memory, 2) == kernel_ms_per_region(from_trace, 2) == EXPECTED_MS
    assert in_memory.exported == 0 and from_trace.exported == 1
    kinds = [(a.kind, a.name) for a in sorted(timing.gpu_activities_in_memory(in_memory) or [],
                                               key=lambda a: a.start_ns)]
    assert kinds == [(cat, name) for cat, name, *_ in SESSION if cat in timing.SPLIT_KINDS]


def test_both_readers_yield_the_same_activities() -> None:
    memory = sorted(timing.gpu_activities_in_memory(_Session(SESSION)) or [], key=lambda a: a.start_ns)
    trace = sorted(timing.gpu_activities_from_chrome_trace(_Session(SESSION, in_memory=False)),
                   key=lambda a: a.start_ns)
    # The same activities, durations to the nanosecond; the trace's times start at its base time.
    assert [(a.kind, a.name, a.duration_ns) for a in memory] == [(a.kind, a.name, a.duration_ns) for a in trace]
    assert {m.start_ns - t.start_ns for m, t in zip(memory, trace, strict=True)} == {900_000}


def test_a_torch_without_nanosecond_events_falls_back_to_the_trace() -> None:
    session = _Session(SESSION)
    # An old torch's events have start_us and duration_us only.
    old_event = types.SimpleNamespace(name=lambda: "k", start_us=lambda: 1, duration_us=lambda: 1)
    session.profiler.kineto_results = types.SimpleNamespace(events=lambda: [old_event])
    assert timing.gpu_activities_in_memory(session) is None
    assert kernel_ms_per_region(session, 2) == EXPECTED_MS and session.exported == 1


def test_split_at_flushes_counts_regions_and_says_when_they_disagree() -> None:
    acts = [GpuActivity("kernel", "k", 30, 5), GpuActivity("gpu_memcpy", "Memcpy DtoD (Device -> Device)", 10, 9),
            GpuActivity("kernel", "k", 20, 1_000_000)]
    assert split_at_flushes(acts, 1) == [1.000005]
    with pytest.raises(RuntimeError, match="found 1 L2 flushes for 2 timed regions"):
        split_at_flushes(acts, 2)


# ----------------------------------------------------------------------------- the timer, end to end
class _InMemoryProfile(fake_cuda._Profile):
    """The fake CUDA timeline's profiler session, with Kineto's in-memory results as well."""

    exports = 0

    def __exit__(self, *exc: object) -> None:
        super().__exit__(*exc)
        events = [_Event(kind, name, "CUDA", round(start * 1e6), round((end - start) * 1e6), with_type=True)
                  for kind, name, start, end in self.cuda.trace[self.first:self.last]]
        self.profiler = types.SimpleNamespace(kineto_results=types.SimpleNamespace(events=lambda: events))

    def export_chrome_trace(self, path: str) -> None:
        type(self).exports += 1
        super().export_chrome_trace(path)


def _time(device: FakeCuda, monkeypatch: pytest.MonkeyPatch, in_memory: bool) -> Any:
    device.__init__()  # type: ignore[misc]  (a fresh timeline: both runs see the same one)
    profile = _InMemoryProfile if in_memory else fake_cuda._Profile
    monkeypatch.setattr(sys.modules["torch"].profiler, "profile", lambda activities=None: profile(device))

    def linear(mark: Any) -> None:
        for region, kernels in (("fprop", [0.021, 0.2]), ("dgrad", [0.033, 0.18]), ("wgrad", [0.15])):
            mark(region, "start")
            device.host_work(0.8)
            for ms in kernels:
                device.kernel(ms)
            mark(region, "end")

    settings = TimerSettings(warmup_s=0.0, spinup_s=0.0, repetitions=12, min_repetitions=12)
    return Interleaver(settings, cross_check=True).run({"fp8": linear})


def test_the_timers_cross_check_is_the_same_from_memory_and_from_the_trace(
        cuda: FakeCuda, monkeypatch: pytest.MonkeyPatch) -> None:  # noqa: F811
    _InMemoryProfile.exports = 0
    memory = _time(cuda, monkeypatch, in_memory=True)
    trace = _time(cuda, monkeypatch, in_memory=False)
    assert _InMemoryProfile.exports == 0  # nothing was written or parsed
    assert memory.cross_check == trace.cross_check
    assert memory.cross_check["kernel_ms"] == pytest.approx({"fp8/fprop": 0.221, "fp8/dgrad": 0.213,
                                                             "fp8/wgrad": 0.15})
    assert {r: s.ms for r, s in memory.samples["fp8"].items()} == {r: s.ms for r, s in trace.samples["fp8"].items()}
