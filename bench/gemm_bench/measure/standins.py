"""Local stand-ins for a tensor-parallel layer's collectives (issue 42): the rank's compute alone,
measured as the *same* sequence-parallel layer with no data moved between GPUs.

Why here and why this way: the composition (:func:`gemm_bench.question.comm.compose`) adds the
measured collectives to "the rank's compute alone". Measured as a plain layer of the shard's sizes
on the full sequence, that compute ran its LayerNorms, residual adds and (per-tensor FP8) the
quantization of the gathered inputs on S tokens, where the real sequence-parallel rank runs them
on S/TP and gathers the result: it overstated the rank's compute by what sequence parallelism
divides, more at larger TP and under FP8 (composed/real up to 1.16 on 4 H200s). So the compute is
now the real layer itself (``te.TransformerLayer`` with ``tp_group``, ``tp_size``,
``sequence_parallel=True`` on the rank's ``[S/TP, B, H]``) with each collective replaced, while the
layer's forward and backward run, by a call that moves nothing.

Where the stand-ins sit: at the ``torch.distributed`` calls, not at Transformer Engine's
``gather_along_first_dim`` and friends. TE 2.20's ``transformer_engine/pytorch/distributed.py``
does local work around every gather that the real rank also does: quantizing the rank's shard
(``_all_gather_fp8``, ``_start_all_gather_fp8_blockwise``), allocating the gathered output
(``quantizer.make_empty``), making the FP8 transpose after the gather on Hopper
(``_create_transpose``) and, under block scaling, un-interleaving the gathered scales and
column-wise data (``_finish_all_gather_fp8_blockwise``: ``tex.swap_first_dims``). Standing in for
``torch.distributed.all_gather_into_tensor``, ``reduce_scatter_tensor``, ``all_reduce`` and
``_coalescing_manager`` (which TE looks up as ``torch.distributed.<name>`` at call time, in
``distributed.py`` and ``quantization.py``, so replacing the module's attribute reaches every call
site, on the autograd engine's thread too) keeps all of that, and drops only the data movement:
the output buffer TE allocated keeps whatever it held (kernel times do not depend on the values).
FP8 current scaling reduces its amax from C++ (``Float8CurrentScalingQuantizer`` with
``with_amax_reduction``: ``amax_reduction_group->allreduce`` in ``csrc/quantizer.cpp``, between the
amax and the scale kernels, which run either way): the stand-in makes ``with_amax_reduction`` read
False on the quantizer classes while the layer runs (a class property, restored after; TE's
attempts to set it are counted). FP8 delayed scaling's amax all-reduce is avoided by the caller
(an autocast ``amax_reduction_group`` of one rank: TE skips the reduction for a group of one).

Guarded: every other ``torch.distributed`` collective or point-to-point call raises inside the
region, and the NCCL sequence number of each group given (ProcessGroupNCCL counts every collective
it issues, from Python or C++) must not move across the region: a call that slipped past the
stand-ins is an error, never a silently wrong compute time.

torch is not imported here: the namespace and classes are passed in (the real ones by default),
so the logic is tested on CPU with fakes.
"""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any

#: ``torch.distributed`` functions TE's tensor-parallel paths call: replaced by stand-ins.
STOOD_IN: tuple[str, ...] = ("all_gather_into_tensor", "reduce_scatter_tensor", "all_reduce", "_coalescing_manager")
#: Every other collective or point-to-point call: raises inside the region (none is expected).
FORBIDDEN: tuple[str, ...] = (
    "all_gather", "all_gather_coalesced", "all_gather_object", "all_reduce_coalesced", "all_to_all",
    "all_to_all_single", "barrier", "batch_isend_irecv", "broadcast", "broadcast_object_list", "gather",
    "gather_object", "irecv", "isend", "monitored_barrier", "recv", "reduce", "reduce_scatter",
    "reduce_scatter_tensor_coalesced", "scatter", "scatter_object_list", "send",
)
#: (module, class) of the quantizers whose C++ quantize all-reduces the amax when
#: ``with_amax_reduction`` (TE 2.20: FP8 current scaling; NVFP4, not on Hopper, alike).
AMAX_QUANTIZERS: tuple[tuple[str, str], ...] = (
    ("transformer_engine.pytorch.tensor.float8_tensor", "Float8CurrentScalingQuantizer"),
    ("transformer_engine.pytorch.tensor.nvfp4_tensor", "NVFP4Quantizer"),
)
AMAX_ATTRIBUTE = "with_amax_reduction"

#: The names a step's payload dtypes have in :mod:`gemm_bench.question.comm`.
_DTYPE_NAMES = {"torch.bfloat16": "bf16", "torch.float32": "fp32", "torch.uint8": "uint8"}
_MISSING = object()


def dtype_name(dtype: Any) -> str:
    """``torch.bfloat16`` -> ``bf16`` (the composition's names); others as torch prints them, less ``torch.``."""
    text = str(dtype)
    return _DTYPE_NAMES.get(text, text.removeprefix("torch."))


def tensor_bytes(tensor: Any) -> int:
    return int(tensor.numel()) * int(tensor.element_size())


class DoneWork:
    """What a stand-in returns where ``async_op=True`` asks for a handle: already complete
    (``torch.distributed.Work``'s ``wait`` and ``is_completed``; a coalescing manager's ``works``)."""

    works: tuple[()] = ()

    def wait(self, timeout: Any = None) -> bool:
        return True

    def is_completed(self) -> bool:
        return True


@dataclasses.dataclass
class StandInLog:
    """What one region stood in for (reset when a region begins: it holds the last region's).

    ``calls``: ``(op, dtype, bytes)`` in call order, bytes in nccl-tests' sense (an all-gather's
    output, a reduce-scatter's input, an all-reduce's buffer); ``coalesced``: coalescing managers
    entered (TE wraps a block-scaled gather's data and scales in one); ``amax_reduction_requests``:
    times TE set ``with_amax_reduction`` to a true value (current scaling, suppressed);
    ``regions``: regions run so far; ``nccl_sequence``: per group, the NCCL sequence number before
    and after the last region (None where the group cannot tell)."""

    calls: list[tuple[str, str, int]] = dataclasses.field(default_factory=list)
    coalesced: int = 0
    amax_reduction_requests: int = 0
    regions: int = 0
    #: Sync points run in the last region (a stand-in with ``sync``: :func:`collectives_stood_in`).
    syncs: int = 0
    nccl_sequence: dict[str, tuple[int | None, int | None]] = dataclasses.field(default_factory=dict)
    #: (op, input, output) of the last region's gathers and reduce-scatters, held (so their memory is
    #: not reused inside a graph captured from that region) for :func:`fill_stood_in_outputs`.
    buffers: list[tuple[str, Any, Any]] = dataclasses.field(default_factory=list)

    def begin(self) -> None:
        self.calls = []
        self.coalesced = 0
        self.amax_reduction_requests = 0
        self.syncs = 0
        self.regions += 1
        self.buffers = []

    def totals(self) -> dict[str, dict[str, int]]:
        """Per op: calls and bytes of the last region."""
        out: dict[str, dict[str, int]] = {}
        for op, _, size in self.calls:
            entry = out.setdefault(op, {"calls": 0, "bytes": 0})
            entry["calls"] += 1
            entry["bytes"] += size
        return out

    def to_dict(self) -> dict[str, Any]:
        checked = [name for name, (a, b) in self.nccl_sequence.items() if a is not None and b is not None]
        return {"calls": [list(c) for c in self.calls], "totals": self.totals(), "coalesced": self.coalesced,
                "amax_reduction_requests": self.amax_reduction_requests, "regions": self.regions,
                "syncs": self.syncs, "nccl_sequence": {k: list(v) for k, v in self.nccl_sequence.items()},
                "nccl_sequence_checked": sorted(checked)}


def nccl_sequence(group: Any) -> int | None:
    """The group's count of collectives issued (``ProcessGroup._get_sequence_number_for_group``:
    ProcessGroupNCCL's, counted on the host when a collective is enqueued, from Python or C++);
    None where this torch or backend does not keep one."""
    getter = getattr(group, "_get_sequence_number_for_group", None)
    if getter is None:
        return None
    try:
        return int(getter())
    except RuntimeError:  # a backend that does not implement it
        return None


def _default_dist() -> Any:
    import torch.distributed as dist

    return dist


def default_quantizer_classes() -> list[type]:
    """The installed TE's classes of :data:`AMAX_QUANTIZERS` (those it has)."""
    import importlib

    classes = []
    for module, name in AMAX_QUANTIZERS:
        try:
            cls = getattr(importlib.import_module(module), name, None)
        except ImportError:
            continue
        if isinstance(cls, type):
            classes.append(cls)
    return classes


def _world(dist: Any, group: Any) -> int:
    return int(dist.get_world_size(group))


@contextlib.contextmanager
def collectives_stood_in(log: StandInLog, *, groups: Mapping[str, Any] | None = None, dist: Any = None,
                         quantizer_classes: Sequence[type] | None = None,
                         sync: Callable[[], None] | None = None) -> Iterator[StandInLog]:
    """While the block runs, ``dist`` (``torch.distributed`` by default) has local stand-ins for
    :data:`STOOD_IN`, every name of :data:`FORBIDDEN` it has raises, and ``with_amax_reduction``
    reads False on ``quantizer_classes`` (:func:`default_quantizer_classes` by default). Every
    attribute is restored on the way out, whatever happened. On a normal exit, raises
    ``RuntimeError`` if a forbidden call was made (it raised already, unless the caller swallowed
    it) or if the NCCL sequence number of any of ``groups`` (name -> process group) moved.

    ``sync``: called once at every stood-in collective (once per coalesced block), counted in
    ``log.syncs``: the caller's one-element all-reduce over the TP group, a sync point that moves no
    data of the step, so the ranks run the compute in the lockstep the real collectives impose
    (issue 42 item 3: the composition held to the serialized real step came out 2-9% short on two
    H200s, most under the recipes with the most collectives; the ranks' waits for each other at each
    collective are a cost neither the rank-alone compute nor the collectives timed alone contain).
    The group the sync runs on must not be among ``groups`` (its sequence number moves by design)."""
    dist = _default_dist() if dist is None else dist
    classes = default_quantizer_classes() if quantizer_classes is None else list(quantizer_classes)
    groups = dict(groups or {})
    forbidden_calls: list[str] = []
    log.begin()
    coalescing = [0]

    def synced() -> None:
        if sync is not None and not coalescing[0]:
            sync()
            log.syncs += 1

    def all_gather_into_tensor(output_tensor: Any, input_tensor: Any, group: Any = None,
                               async_op: bool = False) -> DoneWork | None:
        n = _world(dist, group)
        if output_tensor.numel() != input_tensor.numel() * n:
            raise ValueError(f"all-gather stand-in: output of {output_tensor.numel()} elements is not "
                             f"{n} x the input's {input_tensor.numel()} (torch would refuse it too)")
        log.calls.append(("all-gather", dtype_name(output_tensor.dtype), tensor_bytes(output_tensor)))
        log.buffers.append(("all-gather", input_tensor, output_tensor))
        synced()
        return DoneWork() if async_op else None

    def reduce_scatter_tensor(output: Any, input: Any, op: Any = None, group: Any = None,
                              async_op: bool = False) -> DoneWork | None:
        n = _world(dist, group)
        if input.numel() != output.numel() * n:
            raise ValueError(f"reduce-scatter stand-in: input of {input.numel()} elements is not "
                             f"{n} x the output's {output.numel()} (torch would refuse it too)")
        log.calls.append(("reduce-scatter", dtype_name(input.dtype), tensor_bytes(input)))
        log.buffers.append(("reduce-scatter", input, output))
        synced()
        return DoneWork() if async_op else None

    def all_reduce(tensor: Any, op: Any = None, group: Any = None, async_op: bool = False) -> DoneWork | None:
        log.calls.append(("all-reduce", dtype_name(tensor.dtype), tensor_bytes(tensor)))
        synced()
        return DoneWork() if async_op else None

    @contextlib.contextmanager
    def _coalescing_manager(group: Any = None, device: Any = None, async_ops: bool = False) -> Iterator[DoneWork]:
        log.coalesced += 1
        coalescing[0] += 1
        try:
            yield DoneWork()
        finally:
            coalescing[0] -= 1
        synced()

    def forbid(name: str) -> Any:
        def refuse(*args: Any, **kwargs: Any) -> None:
            forbidden_calls.append(name)
            raise RuntimeError(f"torch.distributed.{name} called while the collectives are stood in: it has "
                               "no local stand-in (gemm_bench.measure.standins), so it would have run NCCL")
        return refuse

    def amax_property() -> property:
        def get(self: Any) -> bool:
            return False

        def set_(self: Any, value: Any) -> None:
            if value:
                log.amax_reduction_requests += 1

        return property(get, set_, doc="False while the collectives are stood in (gemm_bench.measure.standins)")

    replacements: dict[str, Any] = {"all_gather_into_tensor": all_gather_into_tensor,
                                    "reduce_scatter_tensor": reduce_scatter_tensor, "all_reduce": all_reduce,
                                    "_coalescing_manager": _coalescing_manager}
    replacements.update({name: forbid(name) for name in FORBIDDEN if hasattr(dist, name)})
    before = {name: nccl_sequence(g) for name, g in groups.items()}
    saved_dist: list[tuple[str, Any]] = []
    saved_classes: list[tuple[type, Any]] = []
    try:
        for name, stand_in in replacements.items():
            saved_dist.append((name, getattr(dist, name, _MISSING)))
            setattr(dist, name, stand_in)
        for cls in classes:
            saved_classes.append((cls, cls.__dict__.get(AMAX_ATTRIBUTE, _MISSING)))
            setattr(cls, AMAX_ATTRIBUTE, amax_property())
        yield log
    finally:
        for name, original in reversed(saved_dist):
            if original is _MISSING:
                delattr(dist, name)
            else:
                setattr(dist, name, original)
        for cls, original in reversed(saved_classes):
            if original is _MISSING:
                delattr(cls, AMAX_ATTRIBUTE)
            else:
                setattr(cls, AMAX_ATTRIBUTE, original)
    after = {name: nccl_sequence(g) for name, g in groups.items()}
    log.nccl_sequence = {name: (before[name], after[name]) for name in groups}
    if forbidden_calls:
        raise RuntimeError(f"collectives without a stand-in were called inside the region: {forbidden_calls}")
    moved = {name: (a, b) for name, (a, b) in log.nccl_sequence.items() if a is not None and b is not None and a != b}
    if moved:
        raise RuntimeError("NCCL collectives were issued inside the stand-in region (sequence numbers before, after: "
                           f"{moved}): the rank's compute alone would include communication")


def fill_stood_in_outputs(log: StandInLog) -> int:
    """Give every buffer a stand-in left unwritten the values the real collective would have put there,
    near enough: a gather's output gets the rank's own shard in every slot, a reduce-scatter's output the
    rank's own slice of its input. Called once, outside any graph, after a captured region has been
    replayed (so its inputs hold what the region computes); returns the buffers filled.

    Why (issue 42 item 3): a stand-in moves no data, so the gathered tensor a GEMM then reads holds
    whatever its memory held, often zeros in a fresh graph pool. On a GPU at its power cap a GEMM on
    zeros draws less power and runs at a higher clock: the stood-in compute ran up to 3.6 ms faster than
    its region's real counterpart allows (Llama 3 70B BF16 TP 2 on four H200s, session 15), and the
    composition fell 3-12% short of the serialized real step. Filled, the compute's GEMMs read data of
    the real one's kind (the same dtype, scale and magnitude), and no copy is added to the timed graph."""
    filled = 0
    for op, inp, out in log.buffers:
        if inp.numel() == 0 or out.numel() == 0:
            continue  # an empty gather (TE gathers some scale tensors that hold nothing): nothing to fill
        if op == "all-gather":
            src = inp.reshape(-1)
            dst = out.reshape(-1)
            for start in range(0, dst.numel() - src.numel() + 1, src.numel()):
                dst[start:start + src.numel()].copy_(src)
        else:
            out.reshape(-1).copy_(inp.reshape(-1)[:out.numel()])
        filled += 1
    return filled


@dataclasses.dataclass
class SerialLog:
    """What one serialized region did (reset when a region begins): ``calls`` as
    :attr:`StandInLog.calls`, ``made_sync``: of them, the ones TE asked for asynchronously
    (``async_op`` / ``async_ops`` true) that ran synchronously instead; ``regions``: regions run."""

    calls: list[tuple[str, str, int]] = dataclasses.field(default_factory=list)
    made_sync: int = 0
    regions: int = 0

    def begin(self) -> None:
        self.calls = []
        self.made_sync = 0
        self.regions += 1

    def to_dict(self) -> dict[str, Any]:
        totals: dict[str, dict[str, int]] = {}
        for op, _, size in self.calls:
            entry = totals.setdefault(op, {"calls": 0, "bytes": 0})
            entry["calls"] += 1
            entry["bytes"] += size
        return {"totals": totals, "made_sync": self.made_sync, "regions": self.regions}


@contextlib.contextmanager
def collectives_serialized(log: SerialLog, *, dist: Any = None) -> Iterator[SerialLog]:
    """While the block runs, every collective TE's tensor-parallel layer issues asynchronously runs
    synchronously: the real collectives, with the data moved, but none of them beside a GEMM.

    Why (issue 42 item 3): the composition adds the measured collectives to the rank's compute with
    no overlap; TE launches the backward's re-gather of the saved input and the data gradient's
    reduce-scatter with ``async_op=True`` beside a GEMM, so the real step hides part of them and sits
    between the composition and its lower bound (every overlappable collective hidden): on four
    H200s FP8 Current's first micro-batch composed at 1.033 of the real step, BF16 at 1.005. Held to
    the same layer with its collectives serialized, the composition compares like with like (no
    overlap on either side); the real step with TE's overlap stays beside it, and the difference is
    what TE's asynchronous collectives hid, measured.

    A synchronous ``torch.distributed`` call makes the caller's stream wait for the collective, and
    the collective waits for the stream's earlier work, so nothing overlaps it; a handle asked for
    (``async_op=True``) comes back already complete (:class:`DoneWork`). Same call sites as
    :func:`collectives_stood_in` (TE looks the names up on ``torch.distributed`` at call time).
    Restored on the way out, whatever happened."""
    dist = _default_dist() if dist is None else dist
    log.begin()
    originals = {name: getattr(dist, name) for name in STOOD_IN}

    def all_gather_into_tensor(output_tensor: Any, input_tensor: Any, group: Any = None,
                               async_op: bool = False) -> DoneWork | None:
        log.calls.append(("all-gather", dtype_name(output_tensor.dtype), tensor_bytes(output_tensor)))
        log.made_sync += bool(async_op)
        originals["all_gather_into_tensor"](output_tensor, input_tensor, group=group, async_op=False)
        return DoneWork() if async_op else None

    def reduce_scatter_tensor(output: Any, input: Any, op: Any = None, group: Any = None,
                              async_op: bool = False) -> DoneWork | None:
        log.calls.append(("reduce-scatter", dtype_name(input.dtype), tensor_bytes(input)))
        log.made_sync += bool(async_op)
        if op is None:
            originals["reduce_scatter_tensor"](output, input, group=group, async_op=False)
        else:
            originals["reduce_scatter_tensor"](output, input, op=op, group=group, async_op=False)
        return DoneWork() if async_op else None

    def all_reduce(tensor: Any, op: Any = None, group: Any = None, async_op: bool = False) -> DoneWork | None:
        log.calls.append(("all-reduce", dtype_name(tensor.dtype), tensor_bytes(tensor)))
        log.made_sync += bool(async_op)
        if op is None:
            originals["all_reduce"](tensor, group=group, async_op=False)
        else:
            originals["all_reduce"](tensor, op=op, group=group, async_op=False)
        return DoneWork() if async_op else None

    @contextlib.contextmanager
    def _coalescing_manager(group: Any = None, device: Any = None, async_ops: bool = False) -> Iterator[Any]:
        log.made_sync += bool(async_ops)
        with originals["_coalescing_manager"](group=group, device=device, async_ops=False) as cm:
            yield cm

    replacements = {"all_gather_into_tensor": all_gather_into_tensor, "reduce_scatter_tensor": reduce_scatter_tensor,
                    "all_reduce": all_reduce, "_coalescing_manager": _coalescing_manager}
    try:
        for name, wrapper in replacements.items():
            setattr(dist, name, wrapper)
        yield log
    finally:
        for name, original in originals.items():
            setattr(dist, name, original)
