"""Communication of a parallel layout, composed from collective costs measured on a box (issue 42).

Pure: no torch. Three things live here, so that the measuring tool (:mod:`gemm_bench.measure.tp_step`,
``tools/gpu_tp_comm.py``) and a later per-optimizer-step composition read one definition:

1. **Which collectives a step runs, call by call, with their bytes and dtypes**
   (:func:`tp_layer_collectives`, :func:`dp_grad_reduce_scatter`, :func:`dp_grad_all_reduce`,
   :func:`dp_param_all_gather`, :func:`ep_all_to_all`, :func:`pp_send_recv`).
2. **What a collective costs**: a table of costs measured on the box (:class:`CollectiveTable`:
   op, dtype and group size -> bytes -> ms, interpolated log-log between measured sizes), and
   beyond the box the ring algorithm over a stated, configurable link (:class:`Link`,
   :data:`INTER_NODE_DEFAULT`), every such number flagged ``assumed``.
3. **The composition** (:func:`compose`): the rank's compute plus its collectives, no overlap, with
   the part Transformer Engine launches asynchronously beside a GEMM shown apart (the most overlap
   could hide), never silently subtracted.

Sizes follow nccl-tests (``all_gather_perf``, ``reduce_scatter_perf``, ...: the "size" column): an
all-gather's is its output (the gathered tensor), a reduce-scatter's its input (the tensor before
scattering), an all-reduce's its buffer, an all-to-all's one rank's send buffer, a send/recv's
message. Bus bandwidth is nccl-tests' too (:func:`bus_factor`): algorithm bandwidth (size / time)
times ``(n-1)/n`` for all-gather, reduce-scatter and all-to-all, ``2(n-1)/n`` for all-reduce, 1 for
send/recv; it is the per-GPU link rate the ring algorithm needs, comparable across group sizes.

The tensor-parallel layer's collectives are read from Transformer Engine's source (2.20,
``transformer_engine/pytorch``), not from the Megatron paper's count, for a ``te.TransformerLayer``
with ``tp_size=TP, sequence_parallel=True, set_parallel_mode=True`` and no Userbuffers
(``ub_tp_comm_overlap=False``; NCCL collectives through ``torch.distributed``):

* forward, ``module/layernorm_linear.py`` ``_LayerNormLinear.forward`` (QKV) and
  ``module/layernorm_mlp.py`` ``_LayerNormMLP.forward`` (FC1): the LayerNorm runs on the rank's
  ``S/TP`` tokens, its output is quantized there (under an FP8 recipe) and all-gathered to ``S``
  (``distributed.py`` ``gather_along_first_dim``): in FP8 under the per-tensor recipes
  (``_all_gather_fp8``: the uint8 data, one scale for all ranks), in FP8 with the 1x128 block scales
  under block scaling (``_start_all_gather_fp8_blockwise``: row-wise data and scales, two gathers
  coalesced into one NCCL group), in BF16 otherwise;
* forward, ``module/linear.py`` ``_linear_forward_impl`` (attention output projection) and
  ``_LayerNormMLP.forward`` (FC2): the row-parallel output is reduce-scattered in BF16
  (``reduce_scatter_along_first_dim``);
* backward, ``module/base.py`` ``TransformerEngineBaseModule.grad_output_preprocess`` (projection,
  FC2): the output gradient is all-gathered before the data-gradient GEMM, quantized like the
  forward input (E5M2 under per-tensor FP8; under block scaling both its row-wise and column-wise
  data with their scales, because the data-gradient and weight-gradient GEMMs each need one);
* backward, ``_LayerNormLinear.backward`` and ``_LayerNormMLP.backward`` (QKV, FC1): the input was
  saved as the rank's shard, so it is **all-gathered again** for the weight gradient
  (``ln_out_needs_gather``; ``async_op=True``, beside the data-gradient GEMM; per-tensor FP8 row-wise
  data, block scaling column-wise data with scales, BF16 otherwise), and the data gradient is
  reduce-scattered in BF16 (``async_op=True``, beside the weight-gradient GEMM).

So one micro-batch's forward + backward runs six all-gathers and four reduce-scatters of the full
``[S, B, H]`` activation (Megatron's "4 all-gathers and 4 reduce-scatters" omits the two backward
re-gathers). Beside them, the recipes' scale bookkeeping runs small all-reduces over the TP group:
FP8 current scaling reduces the amax of each sequence-parallel tensor before quantizing it (TE's
``Float8CurrentScalingQuantizer`` with ``with_amax_reduction``, set by
``module/_common.py`` ``set_quantizer_amax_reduction_group`` for column-parallel inputs and
row-parallel output gradients: 2 in the forward, 2 in the backward; the saved FP8 shards are
re-gathered without quantizing again), and FP8 delayed scaling reduces its amax buffer once at the
end of the forward and once at the end of the backward (``quantization.py``
``FP8GlobalStateManager.reduce_and_update_fp8_tensors``). FP8 block scaling keeps its scales local.
"""

from __future__ import annotations

import bisect
import dataclasses
import math
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Literal, get_args

from gemm_bench.question.config import ModelConfig

ALL_GATHER = "all-gather"
REDUCE_SCATTER = "reduce-scatter"
ALL_REDUCE = "all-reduce"
ALL_TO_ALL = "all-to-all"
SEND_RECV = "send-recv"
#: Every collective the composition knows, in the order a table lists them.
OPS: tuple[str, ...] = (ALL_GATHER, REDUCE_SCATTER, ALL_REDUCE, ALL_TO_ALL, SEND_RECV)

#: Bytes per element of the payload dtypes a step's collectives move.
DTYPE_BYTES: dict[str, int] = {"bf16": 2, "fp32": 4, "uint8": 1}

#: Elements per FP8 block scale along a row or column (TE's ``Float8BlockQuantizer`` with
#: ``block_scaling_dim=1``, the recipe's activations and gradients): one FP32 scale per 128 values.
BLOCK = 128
#: TE pads the 1D block scales' second dimension to a multiple of 4 (``get_scale_shape``).
SCALE_ALIGN = 4

#: The recipes whose tensor-parallel collectives are read from TE's source here. MXFP8 and NVFP4
#: (Blackwell) gather in their own formats, with paths not checked here: asking for them is an error.
MODELLED_PRECISIONS: tuple[str, ...] = ("bf16", "fp8-delayed", "fp8-current", "fp8-block")
PER_TENSOR_FP8 = frozenset({"fp8-delayed", "fp8-current"})

#: The GEMMs of a dense ``te.TransformerLayer`` (QKV, projection, FC1, FC2): delayed scaling keeps
#: three forward amaxes (input, weight, output) and two backward ones (output and input gradients) per GEMM.
DENSE_GEMMS = 4
FWD_AMAXES_PER_GEMM = 3
BWD_AMAXES_PER_GEMM = 2

TE_SOURCE = "Transformer Engine 2.20, transformer_engine/pytorch/"

#: Which parallelism a collective call serves, set where the call is made: what readers of a composed
#: step select calls by (never by their human-readable ``what`` or ``source`` text, which may be reworded).
CollectiveKind = Literal["tp", "cp", "ep", "pp", "dp"]
KINDS: tuple[CollectiveKind, ...] = get_args(CollectiveKind)


class CommError(ValueError):
    """A composition asked for something it cannot give: an op or dtype never measured, a recipe
    whose collectives are not modelled, a size that makes no sense. The message names what."""


# --------------------------------------------------------------------------------- one collective
@dataclasses.dataclass(frozen=True)
class CollectiveCall:
    """One collective call of a step.

    ``bytes`` is nccl-tests' size (module docstring); ``group`` the ranks in the call;
    ``overlappable`` whether Transformer Engine launches it asynchronously beside a GEMM (so a
    run may hide some of it; the composition never assumes it does); ``overlaps_with`` the compute
    it runs beside, from its launch to TE's wait on it (the most of it overlap could hide is that
    compute's time); ``crosses_nodes`` whether the
    group spans more than one box (then its cost is the assumed link's, never a measurement);
    ``source`` the file and function that issues it (words for the reader); ``kind`` the parallelism
    it serves (:data:`KINDS`), keyword-only and required, so that no call is made without one."""

    op: str
    dtype: str
    bytes: int
    group: int
    what: str
    phase: str
    overlappable: bool = False
    crosses_nodes: bool = False
    source: str = ""
    overlaps_with: str = ""
    kind: CollectiveKind = dataclasses.field(kw_only=True)

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise CommError(f"unknown collective kind {self.kind!r}; known: {', '.join(KINDS)}")
        if self.op not in OPS:
            raise CommError(f"unknown collective {self.op!r}; known: {', '.join(OPS)}")
        if self.dtype not in DTYPE_BYTES:
            raise CommError(f"unknown payload dtype {self.dtype!r}; known: {', '.join(DTYPE_BYTES)}")
        if self.overlaps_with and not self.overlappable:
            raise CommError(f"{self.op} of {self.what}: only an overlappable call overlaps with compute")
        if self.bytes < 1 or self.group < 1:
            raise CommError(f"{self.op} of {self.what}: bytes ({self.bytes}) and group ({self.group}) must be >= 1")

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


def bus_factor(op: str, group: int) -> float:
    """nccl-tests' bus bandwidth factor: bus bandwidth = algorithm bandwidth x this
    (``doc/PERFORMANCE.md`` of nccl-tests)."""
    if op not in OPS:
        raise CommError(f"unknown collective {op!r}; known: {', '.join(OPS)}")
    if group < 1:
        raise CommError(f"a group has at least one rank, got {group}")
    if op == SEND_RECV:
        return 1.0
    if op == ALL_REDUCE:
        return 2.0 * (group - 1) / group
    return (group - 1) / group


def bus_bandwidth_gb_s(op: str, size_bytes: int, ms: float, group: int) -> float:
    """nccl-tests' bus bandwidth in GB/s (10^9 bytes) of ``size_bytes`` moved in ``ms``."""
    if ms <= 0:
        raise CommError(f"{op} of {size_bytes} bytes: a time must be positive, got {ms} ms")
    return size_bytes / (ms * 1e-3) / 1e9 * bus_factor(op, group)


def ring_steps(op: str, group: int) -> int:
    """Sequential steps of the ring algorithm (each pays the link's latency once)."""
    if group <= 1:
        return 0
    return {ALL_GATHER: group - 1, REDUCE_SCATTER: group - 1, ALL_REDUCE: 2 * (group - 1),
            ALL_TO_ALL: group - 1, SEND_RECV: 1}[op]


# -------------------------------------------------------------------------------- assumed links
@dataclasses.dataclass(frozen=True)
class Link:
    """A link whose speed is assumed, not measured: per GPU, each direction.

    ``bandwidth_gb_s`` is the bus bandwidth a ring achieves over it (GB/s, 10^9 bytes per second),
    ``latency_us`` the time of one ring step on top of the bytes."""

    name: str
    bandwidth_gb_s: float
    latency_us: float

    def __post_init__(self) -> None:
        if not (self.bandwidth_gb_s > 0 and math.isfinite(self.bandwidth_gb_s)):
            raise CommError(f"link {self.name!r}: bandwidth must be a positive number of GB/s, "
                            f"got {self.bandwidth_gb_s!r}")
        if not (self.latency_us >= 0 and math.isfinite(self.latency_us)):
            raise CommError(f"link {self.name!r}: latency must be >= 0 us, got {self.latency_us!r}")

    def describe(self) -> str:
        return (f"assumed: {self.name}, {self.bandwidth_gb_s:g} GB/s per GPU each way, "
                f"{self.latency_us:g} us per ring step")


#: The default link between nodes: one 400 Gb/s InfiniBand NDR (or 400G Ethernet) adapter per GPU,
#: as in NVIDIA's DGX H100/H200 and most H100 clusters: 50 GB/s each way. The ring is taken to
#: reach it (nccl-tests across nodes report bus bandwidths near the adapter's rate for large
#: messages). 10 us per ring step: a few microseconds of network latency plus NCCL's own per step.
#: Both are assumptions: the box cannot measure a network; a caller passes its own Link.
INTER_NODE_DEFAULT = Link("InfiniBand NDR, 400 Gb/s per GPU", 50.0, 10.0)


def ring_ms(op: str, size_bytes: int, group: int, link: Link) -> float:
    """Ring-algorithm time of one collective over ``link``: ``steps x latency + bus_factor x size /
    bandwidth`` (the bus bandwidth definition inverted, plus one latency per ring step)."""
    if size_bytes < 0:
        raise CommError(f"{op}: size must be >= 0 bytes, got {size_bytes}")
    if group <= 1:
        return 0.0
    seconds = ring_steps(op, group) * link.latency_us * 1e-6 + bus_factor(op, group) * size_bytes / (
        link.bandwidth_gb_s * 1e9)
    return seconds * 1e3


# --------------------------------------------------------------------------- measured cost table
@dataclasses.dataclass(frozen=True)
class Cost:
    """What one call costs and where the number comes from: ``measured`` (a size measured on the
    box), ``interpolated`` (log-log between two measured sizes), ``extrapolated`` (beyond the
    measured sizes at the nearest one's bus bandwidth, or at its time below the smallest),
    ``scaled`` (a group larger than the box's, from the box's largest at the same bus bandwidth),
    ``assumed`` (an assumed link) or ``borrowed`` (measured on another GPU kind's box and taken for
    this one: :func:`borrowed`). ``assumed`` is true for the last three: a number that holds an
    assumption must say so wherever it enters a total."""

    ms: float
    how: str
    note: str = ""

    @property
    def assumed(self) -> bool:
        return self.how in ("scaled", "assumed", "borrowed")


def borrowed(cost: Cost, measured_on: str) -> Cost:
    """``cost`` measured on a box of ``measured_on`` GPUs, taken for another GPU kind: an assumption
    (the two kinds' links are taken to be as fast), said in the note. An assumed link's cost is no
    measurement of either kind and stays as it is."""
    if cost.how == "assumed":
        return cost
    note = f"assumed: measured on {measured_on} ({cost.how}), taken for this GPU kind"
    return Cost(cost.ms, "borrowed", note + (f"; {cost.note}" if cost.note else ""))


class CollectiveTable:
    """Costs measured on the box: (op, dtype, group) -> sizes in bytes -> median ms.

    Between two measured sizes the time is interpolated linearly in log(size) -> log(time) (the
    curve is a latency floor that bends into a bandwidth line: straight pieces in log-log follow
    it where straight pieces in linear scale would not); above the largest size, the largest
    size's bus bandwidth (time proportional to size: the bandwidth regime); below the smallest,
    the smallest's time (the latency floor: no message is cheaper than the cheapest measured)."""

    def __init__(self, points: Mapping[tuple[str, str, int], Mapping[int, float]]) -> None:
        self._points: dict[tuple[str, str, int], tuple[list[int], list[float]]] = {}
        for key, by_size in points.items():
            op, dtype, group = key
            if op not in OPS or dtype not in DTYPE_BYTES:
                raise CommError(f"table entry {key!r}: unknown op or dtype")
            sizes = sorted(by_size)
            if not sizes:
                continue
            for size in sizes:
                ms = by_size[size]
                if size < 1 or not (isinstance(ms, (int, float)) and math.isfinite(ms) and ms > 0):
                    raise CommError(f"table entry {key!r}: size {size!r} -> {ms!r} ms is not a measured cost")
            self._points[(op, dtype, group)] = (sizes, [float(by_size[s]) for s in sizes])

    @classmethod
    def from_records(cls, records: Iterable[Mapping[str, Any]]) -> CollectiveTable:
        """From the sweep's records (``{"op", "dtype", "group", "bytes", "ms", ...}``, as
        :func:`gemm_bench.measure.tp_step.sweep_collectives` stores them); a failed record (no
        ``ms``) is skipped."""
        points: dict[tuple[str, str, int], dict[int, float]] = {}
        for r in records:
            ms = r.get("ms")
            if ms is None:
                continue
            points.setdefault((str(r["op"]), str(r["dtype"]), int(r["group"])), {})[int(r["bytes"])] = float(ms)
        return cls(points)

    def keys(self) -> list[tuple[str, str, int]]:
        return sorted(self._points)

    def groups(self, op: str, dtype: str) -> list[int]:
        return sorted(g for o, d, g in self._points if o == op and d == dtype)

    def cost(self, op: str, dtype: str, size_bytes: int, group: int) -> Cost:
        """The cost of one call on the box (``CommError`` when (op, dtype, group) was not measured)."""
        key = (op, dtype, group)
        if key not in self._points:
            have = ", ".join(f"{o} {d} x{g}" for o, d, g in self.keys()) or "nothing"
            raise CommError(f"no measured cost for {op} of {dtype} over {group} GPUs (measured: {have})")
        sizes, times = self._points[key]
        i = bisect.bisect_left(sizes, size_bytes)
        if i < len(sizes) and sizes[i] == size_bytes:
            return Cost(times[i], "measured")
        if i == 0:
            return Cost(times[0], "extrapolated", f"below the smallest measured size ({sizes[0]} bytes): its time")
        if i == len(sizes):
            return Cost(times[-1] * size_bytes / sizes[-1], "extrapolated",
                        f"above the largest measured size ({sizes[-1]} bytes): its bus bandwidth")
        x0, x1 = math.log(sizes[i - 1]), math.log(sizes[i])
        y0, y1 = math.log(times[i - 1]), math.log(times[i])
        t = (math.log(size_bytes) - x0) / (x1 - x0)
        return Cost(math.exp(y0 + t * (y1 - y0)), "interpolated")


def call_cost(call: CollectiveCall, table: CollectiveTable, *, inter_node: Link = INTER_NODE_DEFAULT) -> Cost:
    """One call's cost: measured on the box where its (op, dtype, group) was; for a group inside one
    box but larger than any measured (TP 8 on a 4-GPU box), scaled from the largest measured group at
    the same size and the same bus bandwidth (ring: time x bus_factor(n) / bus_factor(m); assumed:
    the larger box's links are taken to be as fast per GPU); across nodes, the ring over ``inter_node``
    (assumed)."""
    if call.group <= 1:
        return Cost(0.0, "measured", "a group of one rank moves nothing")
    if call.crosses_nodes:
        return Cost(ring_ms(call.op, call.bytes, call.group, inter_node), "assumed", inter_node.describe())
    measured = table.groups(call.op, call.dtype)
    if call.group in measured:
        return table.cost(call.op, call.dtype, call.bytes, call.group)
    if not measured:
        return table.cost(call.op, call.dtype, call.bytes, call.group)  # raises, naming what was measured
    largest = max(measured)
    if call.group < largest:
        raise CommError(f"{call.op} of {call.dtype} over {call.group} GPUs was not measured although "
                        f"{largest} were: measure every group size the box holds")
    base = table.cost(call.op, call.dtype, call.bytes, largest)
    ms = base.ms * bus_factor(call.op, call.group) / bus_factor(call.op, largest)
    return Cost(ms, "scaled", f"assumed: from {largest} GPUs on the box ({base.how}) at the same bus bandwidth")


# ----------------------------------------------------------------- the tensor-parallel layer's calls
def _activation_elements(config: ModelConfig) -> int:
    return config.seq_length * config.micro_batch_size * config.hidden_size


def _block_scale_bytes(rows: int, cols: int, tp: int, *, columnwise: bool) -> int:
    """Bytes of the FP32 1x128 block scales of ``tp`` shards of ``rows/tp x cols`` (TE's
    ``Float8BlockQuantizer.get_scale_shape`` for ``block_scaling_dim=1``: row-wise
    ``ceil(cols/128) x roundup(rows, 4)``, column-wise ``ceil(rows/128) x roundup(cols, 4)``)."""
    local = rows // tp
    if columnwise:
        per_rank = -(-local // BLOCK) * (-(-cols // SCALE_ALIGN) * SCALE_ALIGN)
    else:
        per_rank = -(-cols // BLOCK) * (-(-local // SCALE_ALIGN) * SCALE_ALIGN)
    return per_rank * tp * DTYPE_BYTES["fp32"]


def _gathered(precision: str, rows: int, cols: int, tp: int, usage: str) -> tuple[str, int]:
    """(dtype, bytes) of one all-gather of a ``rows x cols`` activation under ``precision``.
    ``usage``: ``rowwise`` (forward input), ``columnwise`` (the weight gradient's re-gather),
    ``both`` (an output gradient: the data- and weight-gradient GEMMs each need one)."""
    elements = rows * cols
    if precision == "bf16":
        return "bf16", elements * DTYPE_BYTES["bf16"]
    if precision in PER_TENSOR_FP8:
        # row-wise data only: TE gathers no FP8 transpose, it makes one after the gather
        return "uint8", elements
    if precision == "fp8-block":
        parts = {"rowwise": (False,), "columnwise": (True,), "both": (False, True)}[usage]
        return "uint8", sum(elements + _block_scale_bytes(rows, cols, tp, columnwise=c) for c in parts)
    raise CommError(f"the tensor-parallel collectives of {precision!r} are not modelled "
                    f"(modelled: {', '.join(MODELLED_PRECISIONS)})")


def tp_layer_collectives(config: ModelConfig, tp: int, precision: str) -> tuple[CollectiveCall, ...]:
    """Every collective one rank runs in one micro-batch's forward + backward of a dense
    ``te.TransformerLayer`` at tensor-parallel size ``tp`` with sequence parallelism, in the order
    they run (module docstring: what and where in Transformer Engine's source). Sizes are of the
    full-sequence activation ``[seq_length, micro_batch_size, hidden_size]``. A block-scaled
    all-gather's bytes are its data plus its FP32 scales (TE coalesces the two gathers into one NCCL
    group: one call here, costed at their summed size as uint8)."""
    if precision not in MODELLED_PRECISIONS:
        raise CommError(f"the tensor-parallel collectives of {precision!r} are not modelled "
                        f"(modelled: {', '.join(MODELLED_PRECISIONS)})")
    if tp < 1:
        raise CommError(f"tensor-parallel size must be >= 1, got {tp}")
    if tp == 1:
        return ()
    rows = config.seq_length * config.micro_batch_size
    cols = config.hidden_size
    if rows % tp:
        raise CommError(f"sequence parallelism needs the {rows} tokens of a micro-batch to divide by TP {tp}")
    bf16_rs = _activation_elements(config) * DTYPE_BYTES["bf16"]
    src = TE_SOURCE

    def ag(what: str, phase: str, usage: str, where: str, overlaps_with: str = "") -> CollectiveCall:
        dtype, size = _gathered(precision, rows, cols, tp, usage)
        return CollectiveCall(ALL_GATHER, dtype, size, tp, what, phase, bool(overlaps_with), source=src + where,
                              overlaps_with=overlaps_with, kind="tp")

    def rs(what: str, phase: str, where: str, overlaps_with: str = "") -> CollectiveCall:
        return CollectiveCall(REDUCE_SCATTER, "bf16", bf16_rs, tp, what, phase, bool(overlaps_with),
                              source=src + where, overlaps_with=overlaps_with, kind="tp")

    def amax(what: str, phase: str, where: str, count: int = 1) -> CollectiveCall:
        return CollectiveCall(ALL_REDUCE, "fp32", count * DTYPE_BYTES["fp32"], tp, what, phase, source=src + where,
                              kind="tp")

    current = precision == "fp8-current"
    calls: list[CollectiveCall] = []
    ln_linear = "module/layernorm_linear.py _LayerNormLinear"
    ln_mlp = "module/layernorm_mlp.py _LayerNormMLP"
    # forward
    if current:
        calls.append(amax("amax of the QKV input (current scaling)", "forward", ln_linear + ".forward"))
    calls.append(ag("QKV input (LayerNorm output)", "forward", "rowwise", ln_linear + ".forward"))
    calls.append(rs("attention projection output", "forward", "module/linear.py _linear_forward_impl"))
    if current:
        calls.append(amax("amax of the FC1 input (current scaling)", "forward", ln_mlp + ".forward"))
    calls.append(ag("FC1 input (LayerNorm output)", "forward", "rowwise", ln_mlp + ".forward"))
    calls.append(rs("FC2 output", "forward", ln_mlp + ".forward"))
    if precision == "fp8-delayed":
        calls.append(amax("amax buffer (delayed scaling)", "forward",
                          "quantization.py FP8GlobalStateManager.reduce_and_update_fp8_tensors",
                          DENSE_GEMMS * FWD_AMAXES_PER_GEMM))
    # backward, FC2 -> FC1 -> projection -> QKV
    grad_out = "module/base.py TransformerEngineBaseModule.grad_output_preprocess"
    if current:
        calls.append(amax("amax of the FC2 output gradient (current scaling)", "backward", grad_out))
    calls.append(ag("FC2 output gradient", "backward", "both", grad_out))
    # _LayerNormMLP.backward launches the FC1 input's re-gather first (async_op=True) and waits on it
    # before the FC1 weight-gradient GEMM; the FC1 data gradient's reduce-scatter (async) is waited
    # on after the FC1 weight-gradient GEMM
    calls.append(ag("FC1 input again, for the weight gradient", "backward", "columnwise", ln_mlp + ".backward",
                    overlaps_with="FC2 data- and weight-gradient GEMMs, the activation's gradient and the FC1 "
                                  "data-gradient GEMM"))
    calls.append(rs("FC1 input gradient", "backward", ln_mlp + ".backward",
                    overlaps_with="FC1 weight-gradient GEMM"))
    if current:
        calls.append(amax("amax of the projection output gradient (current scaling)", "backward", grad_out))
    calls.append(ag("attention projection output gradient", "backward", "both", grad_out))
    # _LayerNormLinear.backward: the re-gather (async) beside the QKV data-gradient GEMM, waited on
    # before the weight-gradient GEMM; the data gradient's reduce-scatter (async) beside that one
    calls.append(ag("QKV input again, for the weight gradient", "backward", "columnwise", ln_linear + ".backward",
                    overlaps_with="QKV data-gradient GEMM"))
    calls.append(rs("QKV input gradient", "backward", ln_linear + ".backward",
                    overlaps_with="QKV weight-gradient GEMM"))
    if precision == "fp8-delayed":
        calls.append(amax("amax buffer (delayed scaling)", "backward",
                          "quantization.py FP8GlobalStateManager.reduce_and_update_fp8_tensors",
                          DENSE_GEMMS * BWD_AMAXES_PER_GEMM))
    return tuple(calls)


def sizes_needed(calls: Iterable[CollectiveCall]) -> dict[tuple[str, str, int], list[int]]:
    """The (op, dtype, group) -> sizes a set of calls needs from the table: what the sweep must
    measure exactly, so that the proof interpolates nothing."""
    out: dict[tuple[str, str, int], set[int]] = {}
    for c in calls:
        out.setdefault((c.op, c.dtype, c.group), set()).add(c.bytes)
    return {k: sorted(v) for k, v in sorted(out.items())}


# ------------------------------------------------------------------ data, expert and pipeline parallel
def dp_grad_reduce_scatter(params: int, dp: int, *, grad_bytes: int = 4,
                           crosses_nodes: bool = True) -> CollectiveCall:
    """The distributed optimizer's gradient reduce-scatter once per optimizer step (Megatron-LM
    ``--use-distributed-optimizer``): the rank's ``params`` gradients, FP32 by default
    (``grad_bytes=2`` for ``--grad-reduce-in-bf16``); size = the whole gradient buffer."""
    dtype = {4: "fp32", 2: "bf16"}.get(grad_bytes)
    if dtype is None:
        raise CommError(f"gradients reduce in FP32 (4 bytes) or BF16 (2), got {grad_bytes} bytes")
    return CollectiveCall(REDUCE_SCATTER, dtype, params * grad_bytes, dp, "data-parallel gradients",
                          "optimizer", overlappable=True, crosses_nodes=crosses_nodes,
                          source="Megatron-LM distributed optimizer (grad buffer reduce-scatter)", kind="dp")


def dp_grad_all_reduce(params: int, dp: int, *, grad_bytes: int = 4, crosses_nodes: bool = True) -> CollectiveCall:
    """Plain data parallel (no distributed optimizer): one all-reduce of the gradient buffer."""
    dtype = {4: "fp32", 2: "bf16"}.get(grad_bytes)
    if dtype is None:
        raise CommError(f"gradients reduce in FP32 (4 bytes) or BF16 (2), got {grad_bytes} bytes")
    return CollectiveCall(ALL_REDUCE, dtype, params * grad_bytes, dp, "data-parallel gradients", "optimizer",
                          overlappable=True, crosses_nodes=crosses_nodes, source="Megatron-LM DDP grad buffer",
                          kind="dp")


def dp_param_all_gather(params: int, dp: int, *, fp8_param_gather: bool = False,
                        crosses_nodes: bool = True) -> CollectiveCall:
    """The distributed optimizer's parameter all-gather after the optimizer step: BF16 weights, or
    FP8 with ``--fp8-param-gather`` (one byte each; the per-tensor scales are negligible)."""
    dtype = "uint8" if fp8_param_gather else "bf16"
    return CollectiveCall(ALL_GATHER, dtype, params * DTYPE_BYTES[dtype], dp, "data-parallel parameters",
                          "optimizer", overlappable=True, crosses_nodes=crosses_nodes,
                          source="Megatron-LM distributed optimizer (param all-gather)", kind="dp")


def ep_all_to_all(config: ModelConfig, ep: int, *, dtype: str = "bf16",
                  crosses_nodes: bool = False) -> tuple[CollectiveCall, ...]:
    """Expert parallel's all-to-alls of one micro-batch's forward + backward (Megatron-LM's
    all-to-all token dispatcher): dispatch and combine in the forward, the same two in the
    backward. Each call's size is one rank's send buffer, its ``tokens x top-k`` routed rows of
    ``hidden_size`` (balanced routing: ``(EP-1)/EP`` of it leaves the rank, which the bus factor
    counts)."""
    if ep < 1:
        raise CommError(f"expert-parallel size must be >= 1, got {ep}")
    if ep == 1 or not config.is_moe:
        return ()
    size = config.tokens * config.moe_router_topk * config.hidden_size * DTYPE_BYTES[dtype]
    src = "Megatron-LM MoEAlltoAllTokenDispatcher"
    return tuple(CollectiveCall(ALL_TO_ALL, dtype, size, ep, what, phase, crosses_nodes=crosses_nodes, source=src,
                                kind="ep")
                 for what, phase in (("dispatch", "forward"), ("combine", "forward"),
                                     ("combine's gradient", "backward"), ("dispatch's gradient", "backward")))


def cp_attention_exchanges(config: ModelConfig, cp: int, tp: int, *,
                           crosses_nodes: bool = False) -> tuple[CollectiveCall, ...]:
    """Context parallel's ring exchange of one attention layer's forward + backward (Transformer Engine
    ``attention/dot_product_attention/context_parallel.py`` ``AttnFuncWithCPAndKVP2P``, Megatron's
    default ``--cp-comm-type p2p``): the forward passes each rank's K and V chunk to the next rank
    ``CP - 1`` times; the backward passes K and V with their gradients ``CP - 1`` times (twice the
    bytes). ``config`` is the rank's: its ``seq_length`` the rank's ``S / CP`` tokens. Each exchange is
    a ring shift (every rank sends and receives at once: what the sweep's send/recv measures over a
    group of ``CP``), BF16, of the rank's ``tokens x kv_heads / TP x head_dim`` K and V. TE overlaps
    each exchange with the attention of the chunk it already has (``overlappable``)."""
    if cp < 1:
        raise CommError(f"context-parallel size must be >= 1, got {cp}")
    if cp == 1:
        return ()
    if config.is_mla:
        raise CommError("context parallelism of multi-latent attention is not modelled")
    kv = 2 * config.tokens * max(1, config.query_groups // tp) * config.head_dim * DTYPE_BYTES["bf16"]
    src = "Transformer Engine attention AttnFuncWithCPAndKVP2P"
    fwd = [CollectiveCall(SEND_RECV, "bf16", kv, cp, f"K and V chunk, ring step {i + 1}", "forward",
                          overlappable=True, crosses_nodes=crosses_nodes, source=src,
                          overlaps_with="the attention of the chunk in hand", kind="cp") for i in range(cp - 1)]
    bwd = [CollectiveCall(SEND_RECV, "bf16", 2 * kv, cp, f"K, V and their gradients, ring step {i + 1}",
                          "backward", overlappable=True, crosses_nodes=crosses_nodes, source=src,
                          overlaps_with="the attention backward of the chunk in hand", kind="cp")
           for i in range(cp - 1)]
    return (*fwd, *bwd)


def pp_send_recv(config: ModelConfig, tp: int, *, sequence_parallel: bool = True,
                 crosses_nodes: bool = False) -> tuple[CollectiveCall, ...]:
    """A pipeline stage boundary per micro-batch: the activation sent forward and its gradient sent
    back, BF16, the rank's ``S/TP`` shard with sequence parallelism (else the whole)."""
    size = _activation_elements(config) * DTYPE_BYTES["bf16"] // (tp if sequence_parallel else 1)
    src = "Megatron-LM p2p_communication"
    return (CollectiveCall(SEND_RECV, "bf16", size, 2, "activation to the next stage", "forward",
                           crosses_nodes=crosses_nodes, source=src, kind="pp"),
            CollectiveCall(SEND_RECV, "bf16", size, 2, "gradient to the previous stage", "backward",
                           crosses_nodes=crosses_nodes, source=src, kind="pp"))


# ---------------------------------------------------------------------------------- composition
@dataclasses.dataclass(frozen=True)
class Composed:
    """A rank's step composed: its compute plus every collective's cost, nothing overlapped."""

    compute_ms: float
    calls: tuple[tuple[CollectiveCall, Cost], ...]

    @property
    def comm_ms(self) -> float:
        return sum(cost.ms for _, cost in self.calls)

    @property
    def overlappable_ms(self) -> float:
        """The collectives TE launches beside a GEMM: the most overlap could hide."""
        return sum(cost.ms for call, cost in self.calls if call.overlappable)

    @property
    def step_ms(self) -> float:
        """The composition: compute + every collective, no overlap."""
        return self.compute_ms + self.comm_ms

    @property
    def step_hidden_ms(self) -> float:
        """A lower bound: compute + the collectives nothing overlaps (every overlappable one hidden
        whole, not capped at the time of the compute it overlaps with, which is not measured apart:
        so the bound, never the published number)."""
        return self.step_ms - self.overlappable_ms

    @property
    def comm_share(self) -> float:
        return self.comm_ms / self.step_ms if self.step_ms > 0 else 0.0

    @property
    def assumed(self) -> bool:
        return any(cost.assumed for _, cost in self.calls)

    def to_dict(self) -> dict[str, Any]:
        return {
            "compute_ms": round(self.compute_ms, 6),
            "comm_ms": round(self.comm_ms, 6),
            "overlappable_ms": round(self.overlappable_ms, 6),
            "step_ms": round(self.step_ms, 6),
            "step_hidden_ms": round(self.step_hidden_ms, 6),
            "comm_share": round(self.comm_share, 6),
            "assumed": self.assumed,
            "calls": [{**call.to_dict(), "ms": round(cost.ms, 6), "how": cost.how,
                       **({"note": cost.note} if cost.note else {})} for call, cost in self.calls],
        }


def compose(compute_ms: float, calls: Sequence[CollectiveCall], table: CollectiveTable, *,
            inter_node: Link = INTER_NODE_DEFAULT, measured_on: str | None = None) -> Composed:
    """The rank's step: ``compute_ms`` (its compute measured alone, collectives absent) plus each of
    ``calls`` at its cost (:func:`call_cost`), with no overlap between them or with compute.
    ``measured_on``: the GPU kind the table was measured on where it is not the compute's (every cost
    then :func:`borrowed`, an assumption)."""
    if not (compute_ms >= 0 and math.isfinite(compute_ms)):
        raise CommError(f"compute time must be a finite number of ms >= 0, got {compute_ms!r}")
    costs = [(c, call_cost(c, table, inter_node=inter_node)) for c in calls]
    if measured_on is not None:
        costs = [(c, borrowed(cost, measured_on)) for c, cost in costs]
    return Composed(compute_ms, tuple(costs))
