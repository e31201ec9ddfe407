"""A rank's tensor-parallel layer step measured with its collectives, on a box of several GPUs (issue 42).

One process per GPU (``torchrun --standalone --nproc_per_node=N``; ``tools/gpu_tp_comm.py`` is the
entry). For one dense model at tensor-parallel size TP and one recipe it measures, in one
interleaved loop so that clocks and temperature drift alike for all of them:

a) **the real step**: ``te.TransformerLayer(..., tp_group=g, tp_size=TP, sequence_parallel=True,
   set_parallel_mode=True)`` on the rank's ``[S/TP, B, H]`` input, forward + backward, as two regions:
   ``first`` (``is_first_microbatch=True``: weights quantized) and ``cached`` (``False``: the cached
   quantized weights), as the model step measures its layer
   (:func:`gemm_bench.measure.backends.model_parts.layer_competitor`): BF16 parameters, fused FP32
   weight-gradient accumulation into ``main_grad``, no bias, no dropout. Under the recipe's
   ``te.autocast`` with ``amax_reduction_group`` the TP group (Megatron-LM reduces amaxes over its
   model-parallel group; here that is the TP group);
b) **the same rank's compute without collectives** (``compute``): the same sequence-parallel layer
   as (a) (its own instance: same sizes, ``tp_group``, ``tp_size``, ``sequence_parallel``), on the
   same ``[S/TP, B, H]`` input, with every collective replaced by a local stand-in that moves no
   data (:func:`gemm_bench.measure.standins.collectives_stood_in`, around the layer's forward and
   backward only: the timing's barriers stay real), same recipe and regions, its autocast's amax
   reduction group a group of this rank alone (so delayed scaling reduces nothing). Its
   LayerNorms, residual adds and quantizations run on S/TP tokens as the real rank's do, and the
   local work around each gather (quantizing the shard, the FP8 transpose, block scaling's
   un-interleaving) stays in. No NCCL call runs inside (guarded: the stand-ins' module says how);
b') **the old rank-compute layer, kept as a row** (``compute_full``: "compute alone, full sequence, no
   SP"): the plain layer of the shard's sizes (FFN/TP, heads/TP, KV groups/TP:
   :func:`~gemm_bench.measure.backends.model_parts.build_dense_layer` of the config at that TP) on
   the full ``[S, B, H]``; it runs the LayerNorms, residual adds and the casts before the gathers on
   S tokens, so it overstates the rank's compute by what sequence parallelism divides (more at
   larger TP and under FP8). Not composed from; stored beside (``Settings.full_sequence_compute``);
c) **collectives alone** (:func:`sweep_collectives`): all-gather, reduce-scatter, all-reduce,
   all-to-all and send/recv over each TP group, at powers of two and at the step's exact sizes;
d) **a second method** (:func:`region_kernel_split`): ``torch.profiler`` kernel times of a few
   replays of (a) and (b) on rank 0, split into NCCL kernels and the rest, with the NCCL time that no
   other kernel overlaps.

Timing: each competitor is called eagerly (its first call compiles and tunes), warmed up by time
(the same number of iterations on every rank: the largest any rank asks for, because a different
count would leave collectives waiting), then each region is captured as its own CUDA graph with the
project's capture (:func:`gemm_bench.measure.timing.capture`, as the site's ``layer-graphed`` step:
one graph per region, timing events recorded inside it). Capture of NCCL collectives needs NCCL
>= 2.9.6 and torch's graph-safe process group; where any rank's capture fails, every rank of the
group falls back to eager calls (``method: "eager"``, with the capture's error stored), timed with
CUDA events behind a GPU-side delay long enough for the host to queue the step's kernels before the
GPU reaches them. Each timed region is preceded by an L2 flush, a host barrier of the group, and a
one-element all-reduce on the stream (it aligns the ranks' GPUs to within microseconds, so a rank
that started earlier does not count its wait for the others as its step). Median and quartiles per
rank; the result holds rank 0's and the largest over ranks.

Safety: NVLink multicast stays off in this process (:data:`SAFE_ENV`, forced when this module is
imported, before any process group exists, and asserted before one is made); Userbuffers are
never initialized (no ``initialize_ub``, ``ub_tp_comm_overlap`` left False).

torch and Transformer Engine are imported inside the functions that need them, so the pure helpers
(environment, statistics, the profiler's split) import and test on a machine without a GPU.
"""

from __future__ import annotations

import dataclasses
import gc
import math
import os
import statistics
import time
from collections.abc import Callable, Mapping, MutableMapping, Sequence
from contextlib import AbstractContextManager
from typing import Any

from gemm_bench.measure.telemetry import quartiles

#: Environment every process on a shared GPU box keeps (issue 42 item 7): NVLink multicast off.
#: NCCL reads it when a communicator is made, torch's symmetric memory and NVSHMEM when first used.
SAFE_ENV: dict[str, str] = {
    "NCCL_NVLS_ENABLE": "0",
    "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1",
    "NVSHMEM_DISABLE_NVLS": "1",
}

#: The regions of every competitor: weights quantized, then the cached quantized weights.
REGIONS: tuple[str, ...] = ("first", "cached")
#: Competitor keys of one cell's group.
REAL = "real"
#: The real step with every collective synchronous (nothing beside a GEMM): what the composition is held to.
REAL_SERIAL = "real_serial"
COMPUTE = "compute"
#: The rank's compute with its collectives stood in, each stand-in a sync point (a one-element
#: all-reduce over the TP group): the compute in the lockstep the real collectives impose, so its
#: excess over :data:`COMPUTE` (less the sync points' own measured cost) is the ranks' wait for each
#: other (``standins.collectives_stood_in``'s ``sync`` says why).
COMPUTE_SYNC = "compute_sync"
COMPUTE_FULL = "compute_full"
#: Competitors a cell may hold, in the order they are timed and stored.
COMPETITORS: tuple[str, ...] = (REAL, REAL_SERIAL, COMPUTE, COMPUTE_SYNC, COMPUTE_FULL)


def force_safe_env(environ: MutableMapping[str, str] | None = None) -> None:
    """Set :data:`SAFE_ENV` in ``environ`` (the process's by default), overriding any other value:
    ``setdefault`` would keep a ``NCCL_NVLS_ENABLE=1`` inherited from the shell."""
    env = os.environ if environ is None else environ
    for key, value in SAFE_ENV.items():
        env[key] = value


def assert_safe_env(environ: Mapping[str, str] | None = None) -> None:
    """Raise ``RuntimeError`` naming every variable of :data:`SAFE_ENV` that is not as it must be."""
    env = os.environ if environ is None else environ
    wrong = [f"{k}={env.get(k)!r} (must be {v!r})" for k, v in SAFE_ENV.items() if env.get(k) != v]
    if wrong:
        raise RuntimeError("NVLink multicast must stay off on a shared GPU box: " + ", ".join(wrong))


force_safe_env()


# ------------------------------------------------------------------------------- pure helpers
def stats(samples: Sequence[float]) -> dict[str, Any]:
    """Median, quartiles (inclusive method: :func:`gemm_bench.measure.telemetry.quartiles`) and the
    samples themselves, in ms."""
    if not samples:
        raise ValueError("no samples")
    q1, q3 = quartiles(samples)
    return {"median_ms": round(statistics.median(samples), 6), "q1_ms": round(q1, 6), "q3_ms": round(q3, 6),
            "n": len(samples), "samples_ms": [round(s, 5) for s in samples]}


def across_ranks(per_rank: Sequence[Sequence[float] | None]) -> dict[str, Any]:
    """One region's samples of every rank (None: a rank that has none) as ``rank0`` (rank 0's stats),
    ``max_rank`` (the stats of the rank whose median is largest, and which rank: the step of a
    tensor-parallel group is its slowest rank's) and ``per_rank_median_ms``."""
    present = {r: s for r, s in enumerate(per_rank) if s}
    if not present:
        raise ValueError("no rank has samples")
    medians = {r: statistics.median(s) for r, s in present.items()}
    slowest = max(medians, key=lambda r: medians[r])
    out: dict[str, Any] = {"per_rank_median_ms": {str(r): round(m, 6) for r, m in sorted(medians.items())},
                           "max_rank": {"rank": slowest, **stats(present[slowest])}}
    if 0 in present:
        out["rank0"] = stats(present[0])
    return out


def is_nccl_kernel(name: str) -> bool:
    """Whether a profiled kernel is NCCL's (``ncclDevKernel_AllGather_RING_LL``, ``ncclKernel_...``)."""
    return name.lower().startswith("nccl")


def _union_ns(intervals: Sequence[tuple[int, int]]) -> list[tuple[int, int]]:
    """Merged ``(start, end)`` intervals."""
    merged: list[tuple[int, int]] = []
    for start, end in sorted(intervals):
        if merged and start <= merged[-1][1]:
            merged[-1] = (merged[-1][0], max(merged[-1][1], end))
        else:
            merged.append((start, end))
    return merged


def _length_ns(intervals: Sequence[tuple[int, int]]) -> int:
    return sum(end - start for start, end in intervals)


def region_kernel_split(kernels: Sequence[tuple[str, int, int]]) -> dict[str, float]:
    """One profiled region's kernels ``(name, start ns, duration ns)`` split into NCCL and the rest,
    in ms: ``nccl_ms`` (sum of NCCL kernels' durations), ``other_ms`` (sum of the rest), ``busy_ms``
    (union of all: the time some kernel ran), ``compute_busy_ms`` (union of the non-NCCL ones) and
    ``nccl_exposed_ms`` = ``busy_ms - compute_busy_ms``, the time only NCCL ran: the communication
    the step could not hide (the profiler's communication share is ``nccl_exposed_ms / busy_ms``)."""
    nccl = [(s, s + d) for n, s, d in kernels if is_nccl_kernel(n)]
    other = [(s, s + d) for n, s, d in kernels if not is_nccl_kernel(n)]
    busy = _length_ns(_union_ns(nccl + other))
    compute = _length_ns(_union_ns(other))
    return {"nccl_ms": sum(e - s for s, e in nccl) / 1e6, "other_ms": sum(e - s for s, e in other) / 1e6,
            "busy_ms": busy / 1e6, "compute_busy_ms": compute / 1e6, "nccl_exposed_ms": (busy - compute) / 1e6}


def mean_split(splits: Sequence[Mapping[str, float]]) -> dict[str, float]:
    """The mean of several regions' :func:`region_kernel_split`, with ``nccl_exposed_share``."""
    if not splits:
        raise ValueError("no profiled regions")
    keys = splits[0].keys()
    out = {k: round(sum(s[k] for s in splits) / len(splits), 6) for k in keys}
    out["nccl_exposed_share"] = round(out["nccl_exposed_ms"] / out["busy_ms"], 6) if out["busy_ms"] > 0 else 0.0
    out["regions"] = len(splits)
    return out


def sweep_sizes(smallest: int = 1 << 20, largest: int = 512 << 20, extra: Sequence[int] = ()) -> list[int]:
    """Powers of two from ``smallest`` to ``largest`` bytes, with ``extra`` (the step's exact sizes)."""
    sizes = set(extra)
    size = smallest
    while size <= largest:
        sizes.add(size)
        size *= 2
    return sorted(s for s in sizes if s > 0)


#: Small all-reduce sizes measured beside the sweep: the recipes' amax reductions (4 to 48 bytes)
#: and the latency regime up to 64 KiB.
SMALL_ALL_REDUCE_BYTES: tuple[int, ...] = (4, 32, 48, 1024, 65536)


# ------------------------------------------------------------------------------------- the box
@dataclasses.dataclass
class Box:
    """This process's place on the box: its rank, the world, and its group of each TP size."""

    rank: int
    world: int
    local_rank: int
    #: TP size -> (this rank's group, that group's global ranks).
    groups: dict[int, tuple[Any, list[int]]]
    #: A group of this rank alone: the rank-compute layer's amax reduction group (reduces nothing).
    solo: Any

    def group(self, tp: int) -> tuple[Any, list[int]]:
        return self.groups[tp]


def init_box(tp_sizes: Sequence[int], timeout_s: float = 600.0) -> Box:
    """Bind this process to its GPU (``LOCAL_RANK``), make the NCCL process group and one group per
    TP size (every rank calls ``new_subgroups`` for every size, in one order, as torch requires)."""
    import datetime as dt

    import torch
    import torch.distributed as dist

    assert_safe_env()
    local = int(os.environ.get("LOCAL_RANK", "0"))
    torch.cuda.set_device(local)
    device = torch.device("cuda", local)
    dist.init_process_group("nccl", timeout=dt.timedelta(seconds=timeout_s), device_id=device)
    rank, world = dist.get_rank(), dist.get_world_size()
    groups: dict[int, tuple[Any, list[int]]] = {}
    for tp in sorted(set(tp_sizes)):
        if tp < 2 or world % tp:
            raise ValueError(f"TP {tp} does not divide the box's {world} GPUs (or is below 2)")
        mine, _ = dist.new_subgroups(group_size=tp)
        first = rank // tp * tp
        groups[tp] = (mine, list(range(first, first + tp)))
    solo, _ = dist.new_subgroups(group_size=1)
    return Box(rank, world, local, groups, solo)


def gather_objects(value: Any) -> list[Any]:
    """``value`` of every rank, in rank order (on every rank)."""
    import torch.distributed as dist

    out: list[Any] = [None] * dist.get_world_size()
    dist.all_gather_object(out, value)
    return out


def agree_max(value: float, group: Any = None) -> float:
    """The largest ``value`` over ``group`` (every rank gets it): a count every rank uses alike."""
    import torch
    import torch.distributed as dist

    t = torch.tensor([float(value)], device="cuda", dtype=torch.float64)
    dist.all_reduce(t, op=dist.ReduceOp.MAX, group=group)
    return float(t.item())


def broadcast_decision(value: Any) -> Any:
    """Rank 0's ``value`` on every rank (a skip decision every rank must share)."""
    import torch.distributed as dist

    box = [value]
    dist.broadcast_object_list(box, src=0)
    return box[0]


# ------------------------------------------------------------------------------- the layers
def tp_config(config: Any, tp: int) -> Any:
    """The question's config at TP ``tp`` with sequence parallelism, one layer, validated."""
    resolved = dataclasses.replace(config, tensor_model_parallel_size=tp, sequence_parallel=True, num_layers=1)
    resolved.validate()
    return resolved


def build_tp_layer(config: Any, tp: int, group: Any) -> Any:
    """The real tensor-parallel layer: the arguments of
    :func:`~gemm_bench.measure.backends.model_parts.build_dense_layer` (the rank-compute layer) with
    the full sizes and TE's own tensor and sequence parallelism instead of the shard's sizes, and
    FP32 main gradients. No Userbuffers: ``ub_tp_comm_overlap`` stays False."""
    import torch
    import transformer_engine.pytorch as te

    from gemm_bench.measure.backends.model_parts import DEVICE, add_main_grads

    layer = te.TransformerLayer(
        config.hidden_size, config.ffn_hidden_size, config.num_attention_heads,
        num_gqa_groups=config.query_groups, kv_channels=config.head_dim,
        hidden_dropout=0.0, attention_dropout=0.0, self_attn_mask_type="causal",
        params_dtype=torch.bfloat16, device=DEVICE, fuse_qkv_params=True, bias=False,
        activation="swiglu" if config.swiglu else "gelu", fuse_wgrad_accumulation=True,
        tp_group=group, tp_size=tp, sequence_parallel=True, set_parallel_mode=True, ub_tp_comm_overlap=False,
    )
    add_main_grads(layer)
    return layer


def layer_competitor(layer: Any, precision: str, rows: int, config: Any, amax_group: Any,
                     around: Callable[[str], AbstractContextManager[Any]] | None = None) -> Any:
    """Regions ``first`` and ``cached`` of ``layer`` on a ``[rows, B, H]`` input (a
    :data:`gemm_bench.measure.timing.Competitor`), as
    :func:`gemm_bench.measure.backends.model_parts.layer_competitor` runs its layer, under the
    recipe's ``te.autocast`` with ``amax_reduction_group=amax_group``. ``around(region)``, where
    given, is entered around the region's forward and backward (not around the marks: the timing's
    barrier and aligner run outside it)."""
    import contextlib

    import torch
    import transformer_engine.pytorch as te

    from gemm_bench.measure.backends.te import make_recipe

    recipe = make_recipe(precision)
    shape = (rows, config.micro_batch_size, config.hidden_size)
    x = torch.randn(*shape, device="cuda", dtype=torch.bfloat16, requires_grad=True)
    dy = torch.randn(*shape, device="cuda", dtype=torch.bfloat16)

    def iteration(mark: Callable[[str, str], None]) -> None:
        for region, first in zip(REGIONS, (True, False), strict=True):
            mark(region, "start")
            with around(region) if around is not None else contextlib.nullcontext():
                with te.autocast(enabled=recipe is not None, recipe=recipe, amax_reduction_group=amax_group):
                    y = layer(x, is_first_microbatch=first)
                y.backward(dy)
            mark(region, "end")
            x.grad = None
            for p in layer.parameters():
                p.grad = None

    return iteration


# ------------------------------------------------------------------------------------ timing
@dataclasses.dataclass(frozen=True)
class Settings:
    """How long to warm up and how many timed repetitions (per region)."""

    warmup_s: float = 0.3
    repetitions: int = 15
    #: GPU-side delay before an eager region (ms): the host queues the step's kernels meanwhile.
    eager_lead_ms: float = 8.0
    #: Replays of each region under the profiler (d); 0: no profile.
    profile_replays: int = 2
    #: Collective sweep: timed batches per size and calls per batch (averaged, as nccl-tests does).
    sweep_batches: int = 7
    sweep_calls: int = 5
    #: Also time the old rank-compute layer (b'): full sequence, no SP. A row beside, never composed.
    full_sequence_compute: bool = True

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


class _Aligner:
    """What precedes every timed region: L2 flush, host barrier of the group, a one-element
    all-reduce on the stream (the group's GPUs leave it together), and for eager regions a GPU-side
    delay (``torch.cuda._sleep``) so the host runs ahead."""

    def __init__(self, group: Any) -> None:
        import torch

        from gemm_bench.measure.timing import L2Flusher

        self.group = group
        self.flush = L2Flusher(True)
        self.token = torch.zeros(1, device="cuda", dtype=torch.float32)
        self._cycles_per_ms: float | None = None

    def cycles_per_ms(self) -> float:
        import torch

        if self._cycles_per_ms is None:
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            cycles = 20_000_000
            torch.cuda._sleep(cycles // 10)  # first call's overhead off the clock
            start.record()
            torch.cuda._sleep(cycles)
            end.record()
            end.synchronize()
            self._cycles_per_ms = cycles / max(start.elapsed_time(end), 1e-3)
        return self._cycles_per_ms

    def __call__(self, lead_ms: float = 0.0) -> None:
        import torch
        import torch.distributed as dist

        self.flush()
        if self.group is not None:
            dist.barrier(group=self.group)
        else:
            torch.cuda.synchronize()
        if lead_ms > 0:
            torch.cuda._sleep(int(lead_ms * self.cycles_per_ms()))
        if self.group is not None:
            dist.all_reduce(self.token, group=self.group)


def _untimed(region: str, edge: str) -> None:
    """A mark that records nothing."""


def _prepare(fn: Any, group: Any, warmup_s: float) -> tuple[Any, str, str | None, int]:
    """Eager first call and warm-up (an agreed count), then capture: (callable, method, capture
    error, warm-up iterations). The callable is the :class:`~gemm_bench.measure.timing.GraphedCompetitor`
    or, where any rank of ``group`` failed to capture, the eager competitor."""
    import torch

    from gemm_bench.measure.timing import GraphCaptureError, capture

    fn(_untimed)
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    fn(_untimed)
    torch.cuda.synchronize()
    once_s = time.perf_counter() - t0
    count = max(1, min(200, math.ceil(warmup_s / max(once_s, 1e-4))))
    if group is not None:
        count = int(agree_max(count, group))
    for _ in range(count):
        fn(_untimed)
    torch.cuda.synchronize()
    error: str | None = None
    graphed: Any = None
    gc_was_enabled = gc.isenabled()
    gc.disable()  # TE's own capture does the same: a collected graph during capture is a CUDA error
    try:
        graphed = capture(fn)
    except (GraphCaptureError, RuntimeError) as exc:  # GPU boundary: fall back to eager, say why
        error = f"{type(exc).__name__}: {exc}"[:600]
    finally:
        if gc_was_enabled:
            gc.enable()
    ok = 1.0 if graphed is not None else 0.0
    if group is not None:
        ok = -agree_max(-ok, group)  # the smallest: every rank captured, or every rank runs eagerly
    if ok < 1.0:
        if error is None:
            error = "another rank of the group could not capture its step"
        return fn, "eager", error, count
    return graphed, "cuda-graph", None, count


def time_group(competitors: Mapping[str, Any], group: Any, settings: Settings,
               say: Callable[[str], None] = print,
               prepared_hook: Callable[[Mapping[str, Mapping[str, Any]]], None] | None = None,
               ) -> dict[str, dict[str, Any]]:
    """Time each competitor's :data:`REGIONS`, interleaved rep by rep (every region of every
    competitor once per rep). Returns per competitor ``{"method", "capture_error", "warmup_iterations",
    "samples": {region: [ms, ...]}, "runner"}`` (``runner``: what the profiler replays).
    ``prepared_hook(prepared)``: called on every rank once every competitor is captured, before the
    first timed repetition."""
    import torch

    align = _Aligner(group)
    prepared: dict[str, dict[str, Any]] = {}
    for name, fn in competitors.items():
        t0 = time.perf_counter()
        runner, method, error, count = _prepare(fn, group, settings.warmup_s)
        prepared[name] = {"method": method, "capture_error": error, "warmup_iterations": count,
                          "samples": {r: [] for r in REGIONS}, "runner": runner}
        say(f"    {name}: {method} ({count} warm-up iterations, {time.perf_counter() - t0:.1f} s)"
            + (f"; capture failed: {error}" if error else ""))
    if prepared_hook is not None:
        prepared_hook(prepared)
    for _ in range(settings.repetitions):
        for entry in prepared.values():
            runner = entry["runner"]
            if entry["method"] == "cuda-graph":
                for region, graph, start, end in runner.graphs:
                    align()
                    graph.replay()
                    end.synchronize()
                    entry["samples"][region].append(start.elapsed_time(end))
            else:
                events: dict[str, tuple[Any, Any]] = {}

                def mark(region: str, edge: str, events: dict[str, tuple[Any, Any]] = events) -> None:
                    if edge == "start":
                        align(settings.eager_lead_ms)
                        events[region] = (torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True))
                        events[region][0].record()
                    else:
                        events[region][1].record()

                runner(mark)
                torch.cuda.synchronize()
                for region, (start, end) in events.items():
                    entry["samples"][region].append(start.elapsed_time(end))
    return prepared


def profile_runner(entry: Mapping[str, Any], group: Any, replays: int, profiling: bool) -> dict[str, Any] | None:
    """Kernel split (:func:`region_kernel_split`) of each region over ``replays`` replays, recorded
    where ``profiling`` (rank 0); every rank of ``group`` replays alike. Regions are told apart by the
    L2 flush before each (:func:`gemm_bench.measure.timing.kernels_in_regions`), and no barrier runs
    inside the profiled window (its all-reduce kernel would land in a region)."""
    import torch
    import torch.distributed as dist
    from torch.profiler import ProfilerActivity, profile

    from gemm_bench.measure.timing import (
        L2Flusher,
        gpu_activities_from_chrome_trace,
        gpu_activities_in_memory,
        kernels_in_regions,
    )

    if replays <= 0:
        return None
    flush = L2Flusher(True)
    runner = entry["runner"]
    order: list[str] = []

    def once() -> None:
        if entry["method"] == "cuda-graph":
            for region, graph, _, _ in runner.graphs:
                flush()
                graph.replay()
                order.append(region)
        else:
            def mark(region: str, edge: str) -> None:
                if edge == "start":
                    flush()
                    order.append(region)

            runner(mark)

    if group is not None:
        dist.barrier(group=group)
    prof = profile(activities=[ProfilerActivity.CUDA]) if profiling else None
    if prof is not None:
        prof.__enter__()
    try:
        for _ in range(replays):
            once()
        torch.cuda.synchronize()
    finally:
        if prof is not None:
            prof.__exit__(None, None, None)
    if group is not None:
        dist.barrier(group=group)
    if prof is None:
        return None
    activities = gpu_activities_in_memory(prof)
    if activities is None:
        activities = gpu_activities_from_chrome_trace(prof)
    per_region = kernels_in_regions(activities, len(order))
    splits: dict[str, list[dict[str, float]]] = {}
    for region, acts in zip(order, per_region, strict=True):
        splits.setdefault(region, []).append(region_kernel_split([(a.name, a.start_ns, a.duration_ns) for a in acts]))
    return {region: mean_split(s) for region, s in splits.items()}


# ------------------------------------------------------------------------------- one cell
def measure_cell(box: Box, config: Any, tp: int, precision: str, settings: Settings,
                 say: Callable[[str], None] = print) -> dict[str, Any]:
    """One (model, TP, recipe): the real step (a), the rank's compute with its collectives stood in
    (b) and, where ``settings.full_sequence_compute``, the old full-sequence compute layer (b'),
    timed in one interleaved loop, and the profiler's split (d) of each on rank 0. Returns this
    rank's part (samples per region; the profile on rank 0; for (b), what each region stood in
    for); the caller gathers every rank's."""
    import torch
    import torch.distributed as dist

    from gemm_bench.measure.backends.model_parts import build_dense_layer
    from gemm_bench.measure.standins import (
        SerialLog,
        StandInLog,
        collectives_serialized,
        collectives_stood_in,
        fill_stood_in_outputs,
    )

    group, _ = box.group(tp)
    shard = tp_config(config, tp)
    rows = shard.seq_length
    competitors: dict[str, Any] = {}
    layers: list[Any] = []
    logs = {region: StandInLog() for region in REGIONS}
    guarded = {"tp": group, "world": dist.group.WORLD}

    def stood_in(region: str) -> AbstractContextManager[Any]:
        return collectives_stood_in(logs[region], groups=guarded)

    serial_logs = {region: SerialLog() for region in REGIONS}

    def serialized(region: str) -> AbstractContextManager[Any]:
        return collectives_serialized(serial_logs[region])

    layers.append(build_tp_layer(shard, tp, group))
    competitors[REAL] = layer_competitor(layers[-1], precision, rows // tp, shard, group)
    layers.append(build_tp_layer(shard, tp, group))
    competitors[REAL_SERIAL] = layer_competitor(layers[-1], precision, rows // tp, shard, group, around=serialized)
    layers.append(build_tp_layer(shard, tp, group))
    competitors[COMPUTE] = layer_competitor(layers[-1], precision, rows // tp, shard, box.solo, around=stood_in)
    sync_logs = {region: StandInLog() for region in REGIONS}
    token = torch.zeros(1, device="cuda", dtype=torch.float32)
    real_all_reduce = dist.all_reduce  # looked up now: inside the stand-in region the name is replaced

    def lockstep(region: str) -> AbstractContextManager[Any]:
        return collectives_stood_in(sync_logs[region], groups={"world": dist.group.WORLD},
                                    sync=lambda: real_all_reduce(token, group=group))

    layers.append(build_tp_layer(shard, tp, group))
    competitors[COMPUTE_SYNC] = layer_competitor(layers[-1], precision, rows // tp, shard, box.solo, around=lockstep)
    if settings.full_sequence_compute:
        layers.append(build_dense_layer(shard, main_grads=True))
        competitors[COMPUTE_FULL] = layer_competitor(layers[-1], precision, rows, shard, box.solo)
    filled: dict[str, int] = {}

    def fill(prepared: Mapping[str, Mapping[str, Any]]) -> None:
        """The stood-in compute's graphs replayed once (no collective runs in them), then its unwritten
        buffers filled (:func:`~gemm_bench.measure.standins.fill_stood_in_outputs` says why)."""
        for name, region_logs in ((COMPUTE, logs), (COMPUTE_SYNC, sync_logs)):
            entry = prepared.get(name)
            if entry is None or entry["method"] != "cuda-graph":
                continue  # eager: every call allocates anew; nothing held to fill
            entry["runner"](_untimed)  # every rank replays it (the sync points are collectives)
            torch.cuda.synchronize()
            for region, log in region_logs.items():
                filled[f"{name}/{region}"] = fill_stood_in_outputs(log)
            torch.cuda.synchronize()

    timed: dict[str, dict[str, Any]] = {}
    try:
        timed = time_group(competitors, group, settings, say, prepared_hook=fill)
        out: dict[str, Any] = {}
        for name, entry in timed.items():
            profile = None
            profile_error = None
            try:
                profile = profile_runner(entry, group, settings.profile_replays, box.rank == 0)
            except RuntimeError as exc:  # the trace could not be split: the cell keeps its times
                profile_error = f"{type(exc).__name__}: {exc}"[:400]
            out[name] = {"method": entry["method"], "capture_error": entry["capture_error"],
                         "warmup_iterations": entry["warmup_iterations"], "samples": entry["samples"],
                         "profile": profile, "profile_error": profile_error}
        out[COMPUTE]["stand_ins"] = {region: {**log.to_dict(), "filled": filled.get(f"{COMPUTE}/{region}", 0)}
                                     for region, log in logs.items()}
        if COMPUTE_SYNC in out:
            out[COMPUTE_SYNC]["stand_ins"] = {
                region: {**log.to_dict(), "filled": filled.get(f"{COMPUTE_SYNC}/{region}", 0)}
                for region, log in sync_logs.items()}
        out[REAL_SERIAL]["serialized"] = {region: log.to_dict() for region, log in serial_logs.items()}
        return out
    finally:
        competitors.clear()
        timed.clear()  # the graphs and their memory pools go with it
        layers.clear()
        gc.collect()
        torch.cuda.synchronize()
        torch.cuda.empty_cache()


# ------------------------------------------------------------------------------ collectives
_TORCH_DTYPES = {"bf16": "bfloat16", "fp32": "float32", "uint8": "uint8"}


def sweep_plan(extra: Mapping[tuple[str, str, int], Sequence[int]], tp: int) -> dict[tuple[str, str], list[int]]:
    """(op, dtype) -> sizes to measure over a group of ``tp``: powers of two from 1 MiB to 512 MiB for
    every op the composition knows at its step dtypes, the small all-reduces of the recipes' amaxes,
    and every exact size in ``extra`` (``(op, dtype, group) -> sizes``, from
    :func:`gemm_bench.question.comm.sizes_needed`) for this group."""
    base = {("all-gather", "bf16"), ("all-gather", "uint8"), ("reduce-scatter", "bf16"), ("reduce-scatter", "fp32"),
            ("all-reduce", "bf16"), ("all-reduce", "fp32"), ("all-to-all", "bf16"), ("send-recv", "bf16")}
    plan: dict[tuple[str, str], list[int]] = {}
    for op, dtype in sorted(base | {(o, d) for o, d, g in extra if g == tp}):
        exact = [s for (o, d, g), sizes in extra.items() if (o, d, g) == (op, dtype, tp) for s in sizes]
        small = [s for s in exact if s < 1 << 20]
        plan[(op, dtype)] = sorted(set(small) | set(sweep_sizes(extra=[s for s in exact if s >= 1 << 20])))
        if (op, dtype) == ("all-reduce", "fp32"):
            plan[(op, dtype)] = sorted(set(plan[(op, dtype)]) | set(SMALL_ALL_REDUCE_BYTES))
    return plan


def sweep_collectives(box: Box, tp: int, plan: Mapping[tuple[str, str], Sequence[int]], settings: Settings,
                      say: Callable[[str], None] = print) -> list[dict[str, Any]]:
    """Each (op, dtype, size) of ``plan`` over this rank's TP-``tp`` group: ``sweep_batches`` timed
    batches of ``sweep_calls`` back-to-back calls each (after one untimed batch), each batch behind the
    aligner; ms per call = batch time / calls (so the ranks' skew is shared by the calls, as in
    nccl-tests). A record per size: ``op, dtype, group, bytes, ms`` (median), ``q1_ms, q3_ms``,
    ``busbw_gb_s`` and this rank's ``rank``; a size that raises is a record with ``error`` and no
    ``ms`` (CUDA out of memory, an NCCL error: ``RuntimeError``, which torch's
    ``OutOfMemoryError`` and ``DistBackendError`` are)."""
    import torch

    from gemm_bench.question.comm import DTYPE_BYTES, bus_bandwidth_gb_s

    group, ranks = box.group(tp)
    me = ranks.index(box.rank)
    align = _Aligner(group)
    records: list[dict[str, Any]] = []
    for (op, dtype), sizes in plan.items():
        t0 = time.perf_counter()
        for size in sizes:
            elements = max(1, size // DTYPE_BYTES[dtype])
            if op in ("all-gather", "reduce-scatter", "all-to-all") and elements % tp:
                elements += tp - elements % tp
            nbytes = elements * DTYPE_BYTES[dtype]
            record: dict[str, Any] = {"op": op, "dtype": dtype, "group": tp, "bytes": nbytes, "rank": box.rank}
            try:
                call = _collective(op, getattr(torch, _TORCH_DTYPES[dtype]), elements, group, ranks, me)
                times = []
                for batch in range(settings.sweep_batches + 1):
                    align()
                    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                    start.record()
                    for _ in range(settings.sweep_calls):
                        call()
                    end.record()
                    end.synchronize()
                    if batch:
                        times.append(start.elapsed_time(end) / settings.sweep_calls)
                ms = statistics.median(times)
                q1, q3 = quartiles(times)
                record.update(ms=round(ms, 6), q1_ms=round(q1, 6), q3_ms=round(q3, 6),
                              busbw_gb_s=round(bus_bandwidth_gb_s(op, nbytes, ms, tp), 3))
            except RuntimeError as exc:  # OutOfMemoryError, DistBackendError: the size says why
                record.update(ms=None, error=f"{type(exc).__name__}: {exc}"[:400])
            finally:
                call = None  # type: ignore[assignment]
            records.append(record)
        largest = max((r for r in records if r["op"] == op and r["dtype"] == dtype and r.get("ms")),
                      key=lambda r: r["bytes"], default=None)
        say(f"    {op} {dtype} x{tp}: {len(sizes)} sizes in {time.perf_counter() - t0:.1f} s"
            + (f"; {largest['bytes'] >> 20} MiB: {largest['ms']:.3f} ms, bus {largest['busbw_gb_s']:.0f} GB/s"
               if largest else ""))
    torch.cuda.empty_cache()
    return records


def _collective(op: str, dtype: Any, elements: int, group: Any, ranks: Sequence[int], me: int) -> Callable[[], None]:
    """One call of ``op`` on ``elements`` of ``dtype`` (nccl-tests' size: an all-gather's output, a
    reduce-scatter's input, an all-to-all's send buffer, a send/recv's message)."""
    import torch
    import torch.distributed as dist

    n = len(ranks)
    if op == "all-gather":
        src = torch.ones(elements // n, device="cuda", dtype=dtype)
        dst = torch.empty(elements, device="cuda", dtype=dtype)
        return lambda: dist.all_gather_into_tensor(dst, src, group=group)
    if op == "reduce-scatter":
        src = torch.ones(elements, device="cuda", dtype=dtype)
        dst = torch.empty(elements // n, device="cuda", dtype=dtype)
        return lambda: dist.reduce_scatter_tensor(dst, src, group=group)
    if op == "all-reduce":
        buf = torch.ones(elements, device="cuda", dtype=dtype)
        return lambda: dist.all_reduce(buf, group=group)
    if op == "all-to-all":
        src = torch.ones(elements, device="cuda", dtype=dtype)
        dst = torch.empty(elements, device="cuda", dtype=dtype)
        return lambda: dist.all_to_all_single(dst, src, group=group)
    if op == "send-recv":
        # a ring shift: every rank sends to the next and receives from the previous, at once
        src = torch.ones(elements, device="cuda", dtype=dtype)
        dst = torch.empty(elements, device="cuda", dtype=dtype)
        nxt, prv = ranks[(me + 1) % n], ranks[(me - 1) % n]

        def shift() -> None:
            ops = [dist.P2POp(dist.isend, src, nxt, group), dist.P2POp(dist.irecv, dst, prv, group)]
            for work in dist.batch_isend_irecv(ops):
                work.wait()

        return shift
    raise ValueError(f"unknown collective {op!r}")


# ------------------------------------------------------------------------ the cell's record (pure)
def table_records(per_rank: Sequence[Sequence[Mapping[str, Any]]]) -> list[dict[str, Any]]:
    """Every rank's sweep records folded into one record per (op, dtype, group, bytes): the largest
    median over ranks (a collective ends when its slowest rank's part does), with each rank's.
    A size that failed on any rank keeps the failure (``ms`` None, ``error``)."""
    from gemm_bench.question.comm import bus_bandwidth_gb_s

    merged: dict[tuple[str, str, int, int], dict[str, Any]] = {}
    for records in per_rank:
        for r in records:
            key = (r["op"], r["dtype"], r["group"], r["bytes"])
            entry = merged.setdefault(key, {"op": key[0], "dtype": key[1], "group": key[2], "bytes": key[3],
                                            "ms": None, "per_rank_ms": {}})
            if r.get("ms") is None:
                entry["error"] = r.get("error", "no time")
                continue
            entry["per_rank_ms"][str(r["rank"])] = r["ms"]
    out = []
    for entry in merged.values():
        if "error" not in entry and entry["per_rank_ms"]:
            slowest = max(entry["per_rank_ms"].values())
            entry["ms"] = slowest
            entry["busbw_gb_s"] = round(bus_bandwidth_gb_s(entry["op"], entry["bytes"], slowest, entry["group"]), 3)
        out.append(entry)
    return sorted(out, key=lambda e: (e["op"], e["dtype"], e["group"], e["bytes"]))


def stand_in_check(stood_in: Mapping[str, Any], calls: Sequence[Any]) -> dict[str, Any]:
    """The gathers and reduce-scatters the stand-ins saw in one region (``stood_in``: a
    :meth:`~gemm_bench.measure.standins.StandInLog.to_dict`) against those the composition costs
    (``calls``: :func:`gemm_bench.question.comm.tp_layer_collectives`), per op: calls and bytes.
    Block scaling's data and scales are two stood-in calls but one modelled call (TE coalesces
    them), so calls may differ there; bytes must agree. ``bytes_match``: whether they do for every
    op (the check that the composition costs the collectives the layer really runs)."""
    ops = ("all-gather", "reduce-scatter")
    seen = stood_in.get("totals", {})
    modelled: dict[str, dict[str, int]] = {op: {"calls": 0, "bytes": 0} for op in ops}
    for call in calls:
        if call.op in modelled:
            modelled[call.op]["calls"] += 1
            modelled[call.op]["bytes"] += call.bytes
    per_op = {op: {"stood_in": dict(seen.get(op, {"calls": 0, "bytes": 0})), "modelled": modelled[op]}
              for op in ops}
    return {"per_op": per_op,
            "bytes_match": all(v["stood_in"]["bytes"] == v["modelled"]["bytes"] for v in per_op.values())}


def _serial_entry(out: Mapping[str, Any], region: str, composed_ms: float, real_ms: float) -> dict[str, Any]:
    """The composition against the real step with its collectives serialized (:data:`REAL_SERIAL`:
    the held ratio, ``composed_over_serial``) and what TE's asynchronous collectives hid in the real
    step (``overlap_hidden_ms``: serialized minus real, slowest rank); empty where the cell did not
    time it."""
    if REAL_SERIAL not in out:
        return {}
    serial_ms = out[REAL_SERIAL]["regions"][region]["max_rank"]["median_ms"]
    return {"real_serial_ms": serial_ms, "composed_over_serial": round(composed_ms / serial_ms, 6),
            "overlap_hidden_ms": round(serial_ms - real_ms, 6)}


def _lockstep_entry(out: Mapping[str, Any], region: str, compute_ms: float, composed_ms: float,
                    table: Any, group: int) -> dict[str, Any]:
    """The ranks' wait for each other (:data:`COMPUTE_SYNC`): the lockstep compute's slowest-rank
    median less the compute alone and less its sync points at the sweep's cost of a 4-byte FP32
    all-reduce over the group; and the composition with that wait added, against the serialized real
    step (``composed_lockstep_over_serial``). Empty where the cell did not time it."""
    if COMPUTE_SYNC not in out or REAL_SERIAL not in out:
        return {}
    sync_ms = out[COMPUTE_SYNC]["regions"][region]["max_rank"]["median_ms"]
    stand_ins = (out[COMPUTE_SYNC].get("stand_ins") or {}).get(region) or {}
    syncs = int(stand_ins.get("syncs", 0))
    from gemm_bench.question.comm import CommError

    try:
        one: float | None = table.cost("all-reduce", "fp32", 4, group).ms
    except CommError:
        one = None
    wait = sync_ms - compute_ms - syncs * (one or 0.0)
    serial_ms = out[REAL_SERIAL]["regions"][region]["max_rank"]["median_ms"]
    return {"compute_sync_ms": sync_ms, "sync_points": syncs, "sync_point_ms": one,
            "lockstep_wait_ms": round(wait, 6),
            "composed_lockstep_over_serial": round((composed_ms + max(wait, 0.0)) / serial_ms, 6)}


def assemble_cell(parts: Sequence[Mapping[str, Any] | None], calls: Sequence[Any] | None,
                  table: Any | None) -> dict[str, Any]:
    """Rank 0's record of one cell from every rank's :func:`measure_cell` part: per competitor its
    method and per region :func:`across_ranks`; rank 0's profiler split; rank 0's stand-in record.
    With ``calls`` and ``table`` (:class:`gemm_bench.question.comm.CollectiveTable`), per region
    the composition (:func:`gemm_bench.question.comm.compose`: the slowest rank's median of
    :data:`COMPUTE`, the same SP layer with its collectives stood in, plus the measured
    collectives, no overlap) and its ratio to the real step's slowest-rank median
    (``composed_over_real``: the published composition), the lower bound with every overlappable
    collective hidden (``hidden_over_real``), and, where the cell timed it, the same composition
    from the old full-sequence compute (``composed_full_over_real``, a row beside)."""
    from gemm_bench.question.comm import compose

    if not parts or parts[0] is None:
        raise ValueError("rank 0 has no part of this cell")
    out: dict[str, Any] = {}
    for name in COMPETITORS:
        if name not in parts[0]:
            continue
        first = parts[0][name]
        methods = sorted({p[name]["method"] for p in parts if p is not None})
        regions = {region: across_ranks([p[name]["samples"][region] if p is not None else None for p in parts])
                   for region in REGIONS}
        out[name] = {"method": first["method"] if len(methods) == 1 else "mixed: " + ", ".join(methods),
                     "capture_error": first["capture_error"], "warmup_iterations": first["warmup_iterations"],
                     "regions": regions, "profile": first.get("profile"), "profile_error": first.get("profile_error")}
        for key in ("stand_ins", "serialized"):
            if key in first:
                out[name][key] = first[key]
    if calls is None or table is None:
        return out
    composed: dict[str, Any] = {}
    for region in REGIONS:
        real_ms = out[REAL]["regions"][region]["max_rank"]["median_ms"]
        compute_ms = out[COMPUTE]["regions"][region]["max_rank"]["median_ms"]
        step = compose(compute_ms, calls, table)
        real_profile = (out[REAL]["profile"] or {}).get(region)
        compute_profile = (out[COMPUTE]["profile"] or {}).get(region)
        entry: dict[str, Any] = {
            **step.to_dict(),
            "real_ms": real_ms,
            "composed_over_real": round(step.step_ms / real_ms, 6),
            # like with like: the same real layer with its collectives serialized (no overlap either side)
            **_serial_entry(out, region, step.step_ms, real_ms),
            "hidden_over_real": round(step.step_hidden_ms / real_ms, 6),
            "measured_comm_share": round(1 - compute_ms / real_ms, 6),
            "profiler_nccl_exposed_share": real_profile["nccl_exposed_share"] if real_profile else None,
            # the real rank's non-NCCL busy time against the stand-in layer's: the method's own check
            "profiler_real_compute_busy_ms": real_profile["compute_busy_ms"] if real_profile else None,
            "profiler_compute_busy_ms": compute_profile["compute_busy_ms"] if compute_profile else None,
        }
        if COMPUTE_FULL in out:
            full_ms = out[COMPUTE_FULL]["regions"][region]["max_rank"]["median_ms"]
            entry["compute_full_ms"] = full_ms
            entry["composed_full_over_real"] = round((full_ms + step.comm_ms) / real_ms, 6)
        stood_in = (out[COMPUTE].get("stand_ins") or {}).get(region)
        if stood_in is not None:
            entry["stand_in_check"] = stand_in_check(stood_in, calls)
        entry.update(_lockstep_entry(out, region, compute_ms, step.step_ms, table,
                                     max((c.group for c in calls), default=1)))
        composed[region] = entry
    out["composed"] = composed
    return out
