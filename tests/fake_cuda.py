"""A fake CUDA device with a timeline, for testing *what* the timer measures on CPU.

The host and the GPU each have a clock (milliseconds). The host advances by the work a competitor
does in Python (:meth:`FakeCuda.host_work`) and by the cost of each launch; a launched kernel runs
on the GPU from ``max(GPU free, host now)``, so when the host is slower than the kernels, the GPU
waits, exactly the effect that makes eager timing measure host time. Events take the GPU's time
when the stream reaches them. A :class:`FakeGraph` records the kernels launched while it captures
and replays them back to back for one launch's host cost, after a start-up preamble and with a
small gap between nodes, like a real CUDA graph; an external event recorded while capturing
becomes a node whose time is set when a replay reaches it. Nothing here is random unless a
competitor adds jitter itself.

:func:`fake_torch` returns a ``torch`` module stand-in exposing what :mod:`gemm_bench.measure.timing`
uses (``torch.cuda`` events, graphs, streams, synchronize; ``torch.zeros``/``empty`` for the L2 flush
buffers; ``torch.profiler`` reading kernel durations back per flush).
"""

from __future__ import annotations

import contextlib
import json
import types
from collections.abc import Iterator
from typing import Any

#: Host cost of one kernel launch, of an event record, and of one graph launch (ms).
LAUNCH_MS = 0.005
EVENT_MS = 0.002
GRAPH_LAUNCH_MS = 0.006
#: GPU time a replayed graph takes to start (its launch, before its first node), and between
#: its dependent nodes (ms).
GRAPH_PREAMBLE_MS = 0.003
GRAPH_GAP_MS = 0.001
#: The L2 flush copy's GPU time (ms).
FLUSH_MS = 0.09


class FakeCuda:
    def __init__(self) -> None:
        self.host = 0.0
        self.gpu = 0.0
        self.capturing: FakeGraph | None = None
        #: Every GPU activity in order: (kind, name, start, end), for the fake profiler.
        self.trace: list[tuple[str, str, float, float]] = []
        self.captures = 0
        #: The current stream (``torch.cuda.stream(s)`` sets it), as CUDA's capture rules need it.
        self.stream: _Stream = _Stream()

    # --- what fake competitors call
    def host_work(self, ms: float) -> None:
        """Python work of the competitor (TE's host overhead): time passes on the host only."""
        if self.capturing is None:
            self.host += ms
        else:
            self.host += ms  # capture runs the Python too, once

    def kernel(self, ms: float, name: str = "kernel", kind: str = "kernel") -> None:
        self.host += LAUNCH_MS
        if self.capturing is not None:
            self.capturing.kernels.append((name, ms, kind))
            return
        self._run(kind, name, max(self.gpu, self.host), ms)

    def host_sync(self) -> None:
        """A host synchronization inside a region (``.item()``): illegal while capturing."""
        if self.capturing is not None:
            raise RuntimeError("operation not permitted when stream is capturing")
        self.synchronize()

    # --- the runtime
    def _run(self, kind: str, name: str, start: float, ms: float) -> None:
        self.gpu = start + ms
        self.trace.append((kind, name, start, self.gpu))

    def record(self, event: _Event) -> None:
        self.host += EVENT_MS
        if self.capturing is not None:
            if not event.external:
                raise RuntimeError("an internal event recorded during capture is no timing node")
            self.capturing.kernels.append(("event", 0.0, event))  # an event record node
            return
        self.gpu = max(self.gpu, self.host)
        event.t = self.gpu

    def synchronize(self) -> None:
        self.host = max(self.host, self.gpu)

    def replay(self, graph: FakeGraph) -> None:
        self.host += GRAPH_LAUNCH_MS
        t = max(self.gpu, self.host) + GRAPH_PREAMBLE_MS
        for i, (name, ms, kind) in enumerate(graph.kernels):
            if i:
                t += GRAPH_GAP_MS
            if name == "event":
                kind.t = t  # an event record node: its time is when the graph reaches it
                continue
            self._run(kind, name, t, ms)
            t = self.gpu
        self.gpu = max(self.gpu, t)


class FakeGraph:
    def __init__(self, cuda: FakeCuda) -> None:
        self.cuda = cuda
        #: Nodes in capture order: (kernel name, ms, kind), or ("event", 0.0, the event).
        self.kernels: list[tuple[str, float, Any]] = []

    def capture_begin(self, pool: Any = None) -> None:
        self.pool = pool
        if self.cuda.capturing is not None:
            raise RuntimeError("a capture is already under way")
        self.cuda.capturing = self
        self.cuda.captures += 1
        self.stream = self.cuda.stream

    def capture_end(self) -> None:
        if self.cuda.stream is not self.stream:  # torch's own check: the capture stays open
            raise RuntimeError("Capture must end on the same stream it began on.")
        self.cuda.capturing = None

    def replay(self) -> None:
        self.cuda.replay(self)


class _Event:
    def __init__(self, cuda: FakeCuda, external: bool = False) -> None:
        self.cuda = cuda
        self.external = external
        self.t: float | None = None

    def record(self) -> None:
        self.cuda.record(self)

    def elapsed_time(self, other: _Event) -> float:
        assert self.t is not None and other.t is not None
        return other.t - self.t


class _Stream:
    def wait_stream(self, other: Any) -> None:
        pass


class _Buffer:
    def __init__(self, cuda: FakeCuda) -> None:
        self.cuda = cuda

    def copy_(self, other: Any) -> None:
        self.cuda.kernel(FLUSH_MS, name="Memcpy DtoD (Device -> Device)", kind="gpu_memcpy")


class _Profile:
    """``torch.profiler.profile``: the trace of what ran on the fake GPU while it was open."""

    def __init__(self, cuda: FakeCuda) -> None:
        self.cuda = cuda
        self.first = 0

    def __enter__(self) -> _Profile:
        self.first = len(self.cuda.trace)
        return self

    def __exit__(self, *exc: object) -> None:
        self.last = len(self.cuda.trace)

    def export_chrome_trace(self, path: str) -> None:
        events = [{"ph": "X", "cat": kind, "name": name, "ts": start * 1000.0, "dur": (end - start) * 1000.0}
                  for kind, name, start, end in self.cuda.trace[self.first:self.last]]
        with open(path, "w", encoding="utf-8") as handle:
            json.dump({"traceEvents": events}, handle)


def fake_torch(cuda: FakeCuda) -> types.ModuleType:
    torch = types.ModuleType("torch")

    @contextlib.contextmanager
    def stream(s: _Stream) -> Iterator[None]:
        before, cuda.stream = cuda.stream, s
        try:
            yield
        finally:
            cuda.stream = before

    torch.cuda = types.SimpleNamespace(  # type: ignore[attr-defined]
        is_available=lambda: True, synchronize=cuda.synchronize, empty_cache=lambda: None,
        memory_allocated=lambda: 0, current_device=lambda: 0,
        get_device_properties=lambda index: types.SimpleNamespace(total_memory=80 * 10**9),
        Event=lambda enable_timing=False, external=False: _Event(cuda, external), CUDAGraph=lambda: FakeGraph(cuda),
        graph_pool_handle=lambda: object(), Stream=_Stream, stream=stream, current_stream=lambda: cuda.stream,
        nvtx=types.SimpleNamespace(range_push=lambda name: None, range_pop=lambda: None),
    )
    torch.uint8 = "uint8"  # type: ignore[attr-defined]
    torch.zeros = lambda *a, **k: _Buffer(cuda)  # type: ignore[attr-defined]
    torch.empty = lambda *a, **k: _Buffer(cuda)  # type: ignore[attr-defined]
    profiler = types.ModuleType("torch.profiler")
    profiler.ProfilerActivity = types.SimpleNamespace(CUDA="cuda")  # type: ignore[attr-defined]
    profiler.profile = lambda activities=None: _Profile(cuda)  # type: ignore[attr-defined]
    torch.profiler = profiler  # type: ignore[attr-defined]
    return torch
