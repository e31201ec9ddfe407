"""Issue 42 on CPU: the local stand-ins for a tensor-parallel layer's collectives
(gemm_bench.measure.standins), exercised on a fake ``torch.distributed`` namespace whose collectives
count as NCCL calls, a fake TE distributed module that looks them up at call time as TE 2.20's
``distributed.py`` does, fake quantizer classes and fake process groups with NCCL sequence numbers."""

from __future__ import annotations

import types
from typing import Any

import pytest

from gemm_bench.measure import standins

torch = pytest.importorskip("torch", reason="the stand-ins' shape checks are tested on CPU tensors")


class FakeGroup:
    """A process group with ProcessGroupNCCL's sequence number (bumped by every fake NCCL call)."""

    def __init__(self, size: int) -> None:
        self.size = size
        self.seq = 0

    def _get_sequence_number_for_group(self) -> int:
        return self.seq


def fake_dist(group: FakeGroup) -> tuple[types.ModuleType, list[str]]:
    """A ``torch.distributed`` stand-in whose collectives record themselves as NCCL calls."""
    nccl: list[str] = []
    ns = types.ModuleType("fake_torch_distributed")

    def collective(name: str) -> Any:
        def call(*args: Any, **kwargs: Any) -> None:
            nccl.append(name)
            group.seq += 1
        return call

    for name in ("all_gather_into_tensor", "reduce_scatter_tensor", "all_reduce", "broadcast", "barrier"):
        setattr(ns, name, collective(name))
    ns.get_world_size = lambda group=None: group.size if group is not None else 1  # type: ignore[attr-defined]
    return ns, nccl


def fake_te_distributed(dist: Any) -> types.SimpleNamespace:
    """TE 2.20's ``distributed.py`` in miniature: every function looks up ``dist.<collective>`` when
    it runs (as TE's ``torch.distributed.all_gather_into_tensor(...)`` does), and does local work
    around it (here: allocating the output)."""

    def gather_along_first_dim(inp: Any, group: Any, async_op: bool = False) -> tuple[Any, Any]:
        out = torch.empty((inp.shape[0] * dist.get_world_size(group), *inp.shape[1:]), dtype=inp.dtype)
        return out, dist.all_gather_into_tensor(out, inp, group=group, async_op=async_op)

    def reduce_scatter_along_first_dim(inp: Any, group: Any, async_op: bool = False) -> tuple[Any, Any]:
        out = torch.empty((inp.shape[0] // dist.get_world_size(group), *inp.shape[1:]), dtype=inp.dtype)
        return out, dist.reduce_scatter_tensor(out, inp, group=group, async_op=async_op)

    def blockwise_gather(data: Any, scales: Any, group: Any) -> Any:
        n = dist.get_world_size(group)
        with dist._coalescing_manager(group=group, device=None, async_ops=True) as manager:
            dist.all_gather_into_tensor(torch.empty(data.numel() * n, dtype=data.dtype), data, group=group)
            dist.all_gather_into_tensor(torch.empty(scales.numel() * n, dtype=scales.dtype), scales, group=group)
        return manager

    return types.SimpleNamespace(gather_along_first_dim=gather_along_first_dim,
                                 reduce_scatter_along_first_dim=reduce_scatter_along_first_dim,
                                 blockwise_gather=blockwise_gather)


class FakeCurrentScalingQuantizer:
    """TE's Float8CurrentScalingQuantizer in the one way that matters: an instance attribute
    ``with_amax_reduction`` that its C++ quantize reads (here: ``quantize`` reads it)."""

    def __init__(self) -> None:
        self.with_amax_reduction = False
        self.amax_reduction_group: Any = None

    def would_all_reduce(self) -> bool:
        return bool(self.with_amax_reduction)


def test_a_tp_layers_gathers_and_reduce_scatters_run_locally_with_the_right_shapes() -> None:
    group = FakeGroup(2)
    dist, nccl = fake_dist(group)
    te = fake_te_distributed(dist)
    log = standins.StandInLog()
    x = torch.ones(4, 1, 8, dtype=torch.bfloat16)
    with standins.collectives_stood_in(log, groups={"tp": group}, dist=dist, quantizer_classes=[]):
        gathered, handle = te.gather_along_first_dim(x, group, async_op=True)
        assert tuple(gathered.shape) == (8, 1, 8) and handle.wait() is True
        scattered, handle = te.reduce_scatter_along_first_dim(gathered, group)
        assert tuple(scattered.shape) == (4, 1, 8) and handle is None
        manager = te.blockwise_gather(torch.ones(32, dtype=torch.uint8), torch.ones(2, dtype=torch.float32), group)
        assert manager.wait() is True  # TE's _AsyncHandle waits on the coalescing manager
    assert nccl == [] and group.seq == 0  # no NCCL call ran
    # nccl-tests sizes: a gather's output, a reduce-scatter's input
    assert log.calls == [("all-gather", "bf16", 128), ("reduce-scatter", "bf16", 128),
                         ("all-gather", "uint8", 64), ("all-gather", "fp32", 16)]
    assert log.coalesced == 1 and log.regions == 1
    assert log.totals() == {"all-gather": {"calls": 3, "bytes": 208}, "reduce-scatter": {"calls": 1, "bytes": 128}}
    assert log.to_dict()["nccl_sequence_checked"] == ["tp"]
    # after the region, the namespace's own functions are back: a gather is an NCCL call again
    te.gather_along_first_dim(x, group)
    assert nccl == ["all_gather_into_tensor"]
    assert not hasattr(dist, "_coalescing_manager")  # added for the region only


def test_a_stand_in_refuses_shapes_torch_would_refuse() -> None:
    group = FakeGroup(4)
    dist, _ = fake_dist(group)
    with pytest.raises(ValueError, match="not 4 x the input"):
        with standins.collectives_stood_in(standins.StandInLog(), dist=dist, quantizer_classes=[]):
            dist.all_gather_into_tensor(torch.empty(6), torch.empty(2), group=group)
    with pytest.raises(ValueError, match="not 4 x the output"):
        with standins.collectives_stood_in(standins.StandInLog(), dist=dist, quantizer_classes=[]):
            dist.reduce_scatter_tensor(torch.empty(2), torch.empty(6), group=group)


def test_a_collective_without_a_stand_in_raises_and_everything_is_restored() -> None:
    group = FakeGroup(2)
    dist, nccl = fake_dist(group)
    original = dist.broadcast
    with pytest.raises(RuntimeError, match=r"torch.distributed.broadcast called while the collectives are stood in"):
        with standins.collectives_stood_in(standins.StandInLog(), groups={"tp": group}, dist=dist,
                                           quantizer_classes=[]):
            dist.broadcast(torch.empty(1), 0, group=group)
    assert nccl == [] and dist.broadcast is original
    # a block that swallowed the refusal still fails on the way out
    with pytest.raises(RuntimeError, match=r"without a stand-in were called inside the region: \['barrier'\]"):
        with standins.collectives_stood_in(standins.StandInLog(), dist=dist, quantizer_classes=[]):
            try:
                dist.barrier(group=group)
            except RuntimeError:
                pass
    assert nccl == []


def test_an_nccl_call_that_bypasses_the_namespace_is_caught_by_the_sequence_number() -> None:
    tp, world = FakeGroup(2), FakeGroup(4)
    dist, _ = fake_dist(tp)
    log = standins.StandInLog()
    moved = r"NCCL collectives were issued inside the stand-in region.*'world': \(0, 1\)"
    with pytest.raises(RuntimeError, match=moved):
        with standins.collectives_stood_in(log, groups={"tp": tp, "world": world}, dist=dist, quantizer_classes=[]):
            world.seq += 1  # what C++ calling the process group directly does (an amax all-reduce)
    assert log.nccl_sequence == {"tp": (0, 0), "world": (0, 1)}
    # a group that keeps no sequence number is recorded as unchecked, not as a failure
    log = standins.StandInLog()
    with standins.collectives_stood_in(log, groups={"tp": object()}, dist=dist, quantizer_classes=[]):
        pass
    assert log.nccl_sequence == {"tp": (None, None)} and log.to_dict()["nccl_sequence_checked"] == []


def test_current_scalings_amax_reduction_reads_false_inside_and_comes_back_after() -> None:
    dist, _ = fake_dist(FakeGroup(2))
    q = FakeCurrentScalingQuantizer()
    q.with_amax_reduction = True  # what a sequence-parallel module set up before
    log = standins.StandInLog()
    with standins.collectives_stood_in(log, dist=dist, quantizer_classes=[FakeCurrentScalingQuantizer]):
        assert not q.would_all_reduce()
        q.with_amax_reduction = True  # TE's module sets it again in the forward: counted, suppressed
        q.amax_reduction_group = "tp"
        assert not q.would_all_reduce() and FakeCurrentScalingQuantizer().with_amax_reduction is False
    assert log.amax_reduction_requests == 1
    assert q.would_all_reduce()  # the instance's own value again
    assert "with_amax_reduction" not in FakeCurrentScalingQuantizer.__dict__


def test_everything_is_restored_when_the_layer_raises() -> None:
    dist, _ = fake_dist(FakeGroup(2))
    before = dict(vars(dist))
    with pytest.raises(KeyError):
        with standins.collectives_stood_in(standins.StandInLog(), dist=dist,
                                           quantizer_classes=[FakeCurrentScalingQuantizer]):
            raise KeyError("a failing layer")
    assert vars(dist) == before and "with_amax_reduction" not in FakeCurrentScalingQuantizer.__dict__


def test_the_real_torch_distributed_has_every_stood_in_name_and_gets_it_back() -> None:
    import torch.distributed as dist

    missing = [name for name in standins.STOOD_IN if not hasattr(dist, name)]
    assert not missing, f"this torch lacks {missing}: the stand-ins would miss TE's calls"
    originals = {name: getattr(dist, name) for name in standins.STOOD_IN + standins.FORBIDDEN if hasattr(dist, name)}
    with standins.collectives_stood_in(standins.StandInLog(), quantizer_classes=[]):
        assert all(getattr(dist, name) is not original for name, original in originals.items())
    assert all(getattr(dist, name) is original for name, original in originals.items())


def test_dtype_names_are_the_compositions() -> None:
    assert [standins.dtype_name(d) for d in (torch.bfloat16, torch.float32, torch.uint8, torch.float16)] == [
        "bf16", "fp32", "uint8", "float16"]


def _recording_dist(group: FakeGroup) -> tuple[types.ModuleType, list[tuple[str, bool]]]:
    """A fake ``torch.distributed`` whose collectives record (name, async_op) as they are issued."""
    import contextlib

    issued: list[tuple[str, bool]] = []
    ns = types.ModuleType("fake_torch_distributed")

    def collective(name: str) -> Any:
        def call(*args: Any, async_op: bool = False, **kwargs: Any) -> Any:
            issued.append((name, async_op))
            group.seq += 1
            return "pending-work" if async_op else None
        return call

    @contextlib.contextmanager
    def _coalescing_manager(group: Any = None, device: Any = None, async_ops: bool = False) -> Any:
        issued.append(("_coalescing_manager", async_ops))
        yield types.SimpleNamespace(wait=lambda: True)

    for name in ("all_gather_into_tensor", "reduce_scatter_tensor", "all_reduce"):
        setattr(ns, name, collective(name))
    ns._coalescing_manager = _coalescing_manager  # type: ignore[attr-defined]
    ns.get_world_size = lambda group=None: group.size if group is not None else 1  # type: ignore[attr-defined]
    return ns, issued


def test_serialized_collectives_really_run_and_none_is_asynchronous() -> None:
    group = FakeGroup(2)
    dist, issued = _recording_dist(group)
    originals = {n: getattr(dist, n) for n in standins.STOOD_IN}
    te_dist = fake_te_distributed(dist)
    log = standins.SerialLog()
    x = torch.zeros(4, 3, dtype=torch.bfloat16)
    with standins.collectives_serialized(log, dist=dist):
        _, gather = te_dist.gather_along_first_dim(x, group, async_op=True)
        _, scatter = te_dist.reduce_scatter_along_first_dim(torch.zeros(8, 3, dtype=torch.bfloat16), group,
                                                            async_op=True)
        te_dist.gather_along_first_dim(x, group)
        te_dist.blockwise_gather(torch.zeros(8, dtype=torch.uint8), torch.zeros(2), group)
    # every collective reached NCCL (the data moves), none asynchronously; the handles TE waits on are done
    assert group.seq == 5
    assert all(not asynchronous for _, asynchronous in issued), issued
    assert gather.is_completed() and scatter.wait()
    assert log.made_sync == 3  # two async calls and one async coalescing manager
    assert log.to_dict()["totals"]["all-gather"] == {"calls": 4, "bytes": 2 * 48 + 16 + 16}
    assert {n: getattr(dist, n) for n in standins.STOOD_IN} == originals  # restored


def test_serialized_collectives_are_restored_when_the_layer_raises() -> None:
    group = FakeGroup(2)
    dist, _ = _recording_dist(group)
    originals = {n: getattr(dist, n) for n in standins.STOOD_IN}
    with pytest.raises(ZeroDivisionError), standins.collectives_serialized(standins.SerialLog(), dist=dist):
        raise ZeroDivisionError
    assert {n: getattr(dist, n) for n in standins.STOOD_IN} == originals


def test_stood_in_outputs_are_filled_with_the_ranks_own_data_after_capture() -> None:
    """Issue 42 item 3: a stand-in leaves its output unwritten (zeros in a fresh graph pool: a GEMM on
    zeros runs faster at a power cap); after the captured region has run once, each gathered output gets
    the rank's shard in every slot and each reduce-scatter output its slice of the input."""
    group = FakeGroup(2)
    dist, _ = fake_dist(group)
    te_dist = fake_te_distributed(dist)
    log = standins.StandInLog()
    shard = torch.arange(6, dtype=torch.bfloat16).reshape(2, 3)
    partial = torch.arange(12, dtype=torch.float32).reshape(4, 3)
    with standins.collectives_stood_in(log, dist=dist, quantizer_classes=[]):
        gathered, _ = te_dist.gather_along_first_dim(shard, group)
        scattered, _ = te_dist.reduce_scatter_along_first_dim(partial, group)
        te_dist.gather_along_first_dim(torch.empty(0, dtype=torch.float32), group)  # an empty scale gather
    gathered.zero_()
    scattered.zero_()
    assert standins.fill_stood_in_outputs(log) == 2
    assert torch.equal(gathered, torch.cat([shard, shard]))
    assert torch.equal(scattered, partial[:2])
    assert group.seq == 0  # still no NCCL call: the fill is a local copy
    log.begin()
    assert log.buffers == [] and standins.fill_stood_in_outputs(log) == 0  # a new region holds its own


def test_a_stand_in_with_sync_calls_it_once_per_collective_and_once_per_coalesced_block() -> None:
    """Issue 42 item 3 (the lockstep compute): with ``sync``, every stood-in collective is a sync point
    (the caller's one-element all-reduce over the TP group), a coalesced block one; the step's own
    collectives still run no NCCL, and the count is kept per region."""
    group = FakeGroup(2)
    dist, nccl = fake_dist(group)
    te = fake_te_distributed(dist)
    sync_group = FakeGroup(2)
    real_all_reduce = dist.all_reduce
    synced: list[int] = []

    def sync() -> None:
        synced.append(1)
        sync_group.seq += 1

    log = standins.StandInLog()
    x = torch.ones(4, 1, 8, dtype=torch.bfloat16)
    with standins.collectives_stood_in(log, groups={"tp": group}, dist=dist, quantizer_classes=[], sync=sync):
        gathered, _ = te.gather_along_first_dim(x, group, async_op=True)
        te.reduce_scatter_along_first_dim(gathered, group)
        te.blockwise_gather(torch.ones(32, dtype=torch.uint8), torch.ones(2, dtype=torch.float32), group)
        dist.all_reduce(torch.ones(1), group=group)
    assert nccl == [] and group.seq == 0  # the step's collectives stood in: no NCCL on the TP group
    assert len(synced) == 4 and log.syncs == 4 and sync_group.seq == 4  # gather, scatter, block, all-reduce
    assert log.to_dict()["syncs"] == 4
    assert dist.all_reduce is real_all_reduce
    # a region without sync counts none
    plain = standins.StandInLog()
    with standins.collectives_stood_in(plain, groups={"tp": group}, dist=dist, quantizer_classes=[]):
        te.gather_along_first_dim(x, group)
    assert plain.syncs == 0 and len(synced) == 4
