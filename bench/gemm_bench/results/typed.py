"""A checked result as typed objects: what the report and the extension read instead of the JSON dict.

Why: a result used to travel as the raw JSON dict through the report and the pages, and each module
re-read the fields it needed (``doc["model_step"]["parts"]``, ``entry.get("energy_mj_low")``, ...)
and checked what it happened to check (issue 43). Now a document is read at one door
(:func:`gemm_bench.results.cache.read_document`: schema, then the invariants of
:mod:`gemm_bench.results.invariants`, which demote an impossible number to a failed entry) and
parsed here, once, by :func:`parse` into frozen dataclasses whose fields are typed. A reader that
takes a :class:`Result` cannot index a field the door did not check, and a demoted number reaches it
only as a failed entry with its reason.

What is typed: the device, provenance, question, TE's support verdicts, the GEMM cells (their eager
statistics and profiler cross-check included), the layer-step cells, the accuracy (SQNR) cells, the
peers' rows, the timed groups (clock, board power, the rounds rule's outcome, their cross-check), the
model step (parts, memory, largest micro-batch), the energy entries, the precision plan, and every
step's time breakdown.
A :class:`Result` keeps no JSON: every reader of the report and the extension reads these types
(``tests/test_typed_result.py`` scans them all, study readers excepted); writers never use a
:class:`Result`: ``Cache.store`` and the merge read the file raw.

Pure: no torch.
"""

from __future__ import annotations

import dataclasses
import functools
import statistics
import types
import typing
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Any, Literal, TypeVar, cast

from gemm_bench.question.config import ModelConfig
from gemm_bench.question.model_step import MemoryParts
from gemm_bench.question.question import Question, stored_config
from gemm_bench.question.shapes import OP_NAMES, GemmShape
from gemm_bench.results.cross_check import (
    Region,
    Verdict,
    cell_label,
    part_label,
    peer_label,
    plan_label,
    region_of,
    step_label,
    verdict_of,
)
from gemm_bench.results.energy import board_limit_w
from gemm_bench.results.failed import ENERGY_ROW, MODEL_STEP_ROW, failed_rows
from gemm_bench.results.invariants import Violation, check
from gemm_bench.results.model_step_schema import MEMORY_FIELDS
from gemm_bench.results.schema import (
    CheckedDocument,
    cell_run_id,
    in_registry_order,
    peer_precision,
    support_reason,
)

Status = Literal["measured", "unsupported", "failed"]
PartName = Literal["embedding", "layer-first", "layer-cached", "head", "optimizer"]
PlanStepName = Literal["all-bf16", "all-fp8", "plan"]
#: A scalar as a device or method field stores it (the schema allows nothing else there).
Scalar = str | int | float | bool | None
_T = TypeVar("_T")


# ------------------------------------------------------------------------------- the pieces
@dataclasses.dataclass(frozen=True)
class Breakdown:
    """Where a timed step's time went (``breakdown``, :func:`~.breakdown.breakdown_block`): its parts in ms
    (every part of :data:`~.breakdown.PARTS`, ``idle`` included), adding up to ``step_ms`` within the
    door's bound (a breakdown that does not is dropped there), and how it was profiled."""

    step_ms: float
    parts_ms: Mapping[str, float]
    busy_ms: float
    span_ms: float
    other_kernels: Mapping[str, float]
    rounds: int
    kernels: int
    source: str
    #: Below 1 where the profiled kernels took longer than the published step (its parts scaled down).
    scaled_by: float | None = None

    def as_mapping(self) -> dict[str, Any]:
        """The stored block (what :mod:`~.breakdown`'s composition takes)."""
        out = {f.name: getattr(self, f.name) for f in dataclasses.fields(self) if getattr(self, f.name) is not None}
        return {k: dict(v) if isinstance(v, Mapping) else v for k, v in out.items()}


@dataclasses.dataclass(frozen=True)
class Stats:
    """A timed region's statistics (``stats``): median and interquartile range, optional quantiles
    and the samples (milliseconds)."""

    median_ms: float
    iqr_ms: float
    min_ms: float | None = None
    p10_ms: float | None = None
    p90_ms: float | None = None
    n: int | None = None
    samples_ms: tuple[float, ...] = ()

    def quartiles_around(self, ms: float) -> tuple[float, float]:
        """(first, third) quartile: of the samples where there are two or more (inclusive method,
        within the samples, never beyond), else ``ms`` -/+ half the IQR."""
        if len(self.samples_ms) >= 2:
            q = statistics.quantiles(self.samples_ms, n=4, method="inclusive")
            return float(q[0]), float(q[2])
        half = self.iqr_ms / 2
        return ms - half, ms + half

    def as_mapping(self) -> dict[str, Any]:
        """The statistics as the stored block spells them, for helpers that read one (figures.quartiles)."""
        out: dict[str, Any] = {"median_ms": self.median_ms, "iqr_ms": self.iqr_ms}
        for key in ("min_ms", "p10_ms", "p90_ms", "n"):
            if getattr(self, key) is not None:
                out[key] = getattr(self, key)
        if self.samples_ms:
            out["samples_ms"] = list(self.samples_ms)
        return out


@dataclasses.dataclass(frozen=True)
class Outcome:
    """What every timed entry shares: its status, its time and statistics when measured, else the
    reason (a demoted number's reason starts with :data:`~gemm_bench.results.invariants.REFUSED`)."""

    status: Status
    ms: float | None
    stats: Stats | None
    reason: str
    #: The profiler cross-check beside a measured time (method v4, :mod:`~.cross_check`): the profiled
    #: kernel time, and the profiled rounds' event median over it; None where not cross-checked.
    kernel_ms: float | None = dataclasses.field(default=None, kw_only=True)
    kernel_ratio: float | None = dataclasses.field(default=None, kw_only=True)

    @property
    def measured(self) -> bool:
        return self.status == "measured" and self.ms is not None

    @property
    def cross_check(self) -> Region | None:
        """This time's profiler cross-check (:func:`~.cross_check.region_of`), None where unchecked."""
        return region_of(self.status, self.ms, self.kernel_ms, self.kernel_ratio)

    @property
    def cross_check_flag(self) -> str | None:
        """Why this time is not plainly the GPU's time for its region (:attr:`~.cross_check.Region.flag`),
        None when it holds, is too short to judge or was not checked."""
        found = self.cross_check
        return found.flag if found is not None else None


@dataclasses.dataclass(frozen=True)
class Cell(Outcome):
    """One GEMM cell (``cells[]``): one mode, precision and GEMM pass, of one run."""

    mode: str
    precision: str
    op: str
    pass_: str
    run_id: str
    #: Method v4: the same region called eagerly (host work included), where stored.
    eager: Stats | None = None


@dataclasses.dataclass(frozen=True)
class LayerCell(Outcome):
    """One layer-step cell (``layer[]``): a mode (eager or CUDA-graphed), precision and routing."""

    mode: str
    precision: str
    routing: str
    run_id: str
    #: The stored time breakdown (:mod:`gemm_bench.results.breakdown`'s block), None where absent or
    #: dropped at the door (parts that did not add up).
    breakdown: Breakdown | None = None


@dataclasses.dataclass(frozen=True)
class Support:
    """Transformer Engine's verdict on one precision on the result's GPU (``support.<precision>``)."""

    available: bool
    reason: str = ""


@dataclasses.dataclass(frozen=True)
class AccuracyCell:
    """One SQNR cell (``accuracy[]``): a GEMM pass's output SQNR against an FP32 reference in one mode,
    precision and input distribution; the SQNR only where measured, else the reason."""

    mode: str
    precision: str
    op: str
    pass_: str
    distribution: str
    status: Status
    sqnr_db: float | None
    run_id: str
    reason: str = ""

    @property
    def measured(self) -> bool:
        return self.status == "measured" and self.sqnr_db is not None


@dataclasses.dataclass(frozen=True)
class ModelStepPart(Outcome):
    """One measured part of the model step (``model_step.parts[]``)."""

    part: PartName
    precision: str
    #: The optimizer part's parameter count (None for the other parts).
    params: int | None = None
    breakdown: Breakdown | None = None

    def quartiles(self) -> tuple[float, float]:
        """(first, third) quartile of a measured part's time (:meth:`Stats.quartiles_around`)."""
        assert self.ms is not None and self.stats is not None, "only a measured part has quartiles"
        return self.stats.quartiles_around(self.ms)


@dataclasses.dataclass(frozen=True)
class LargestMicrobatch:
    """The largest micro-batch searched on the GPU (``model_step.largest_microbatch``): the layers of the
    real model it was searched with, per recipe the micro-batch found or the search's failure."""

    layers: int
    found: Mapping[str, int]
    failed: Mapping[str, str]


@dataclasses.dataclass(frozen=True)
class ModelStepBlock:
    """The model step's measured parts and memory (``model_step``, :mod:`~.model_step_schema`)."""

    run_id: str
    what: str
    padded_vocab_size: int
    layer_params: int
    capacity_bytes: int
    state_per_param: float
    parts: tuple[ModelStepPart, ...]
    #: Per recipe, the measured memory parts (empty where the door dropped an impossible optimizer state).
    memory: Mapping[str, MemoryParts]
    largest_microbatch: LargestMicrobatch | None
    routing: str | None

    def part(self, name: str, precision: str = "bf16", params: int | None = None) -> ModelStepPart | None:
        """One measured part (the optimizer's at ``params``), or None."""
        for item in self.parts:
            if (item.part, item.precision) == (name, precision) and item.measured and (
                    params is None or item.params == params):
                return item
        return None

    def answers(self, config: ModelConfig | None) -> bool:
        """Whether this block answers a question of ``config``: measured at its padded vocabulary."""
        return config is not None and config.padded_vocab_size is not None \
            and self.padded_vocab_size == config.padded_vocab_size


@dataclasses.dataclass(frozen=True)
class EnergyEntry:
    """One recipe's energy per CUDA-graphed layer step (``energy.steps[]``, :mod:`~.energy`): measured,
    with its window's power and (where stored) quartiles; or failed with the reason (a measurement that
    failed, or one the door refused: too few samples, a power beyond the board, a stuck reading)."""

    precision: str
    status: Literal["measured", "failed"]
    reason: str = ""
    power_w: float = 0.0
    step_ms: float = 0.0
    energy_mj: float = 0.0
    #: Tokens per joule per GPU (recomputed at the door: :func:`~.energy.per_gpu_rates`).
    tokens_per_j: float = 0.0
    samples: int = 0
    steps: int = 0
    wall_s: float = 0.0
    power_source: str = ""
    power_w_max: float | None = None
    power_w_q1: float | None = None
    power_w_q3: float | None = None
    energy_mj_low: float | None = None
    energy_mj_high: float | None = None
    tokens_per_j_low: float | None = None
    tokens_per_j_high: float | None = None

    @property
    def measured(self) -> bool:
        return self.status == "measured"

    def bounds(self) -> tuple[float, float] | None:
        """The energy's spread in mJ (the power quartiles x the time per step), None where not stored."""
        if self.energy_mj_low is None or self.energy_mj_high is None:
            return None
        return self.energy_mj_low, self.energy_mj_high

    def as_mapping(self) -> dict[str, Any]:
        """The entry as the stored block spells it, for the results layer's helpers that read one
        (:func:`~.energy.energy_words`)."""
        return {k: v for k, v in dataclasses.asdict(self).items() if v is not None}


@dataclasses.dataclass(frozen=True)
class EnergyBlock:
    """``energy``: the rule, its parameters and one entry per recipe."""

    method: str
    mode: str
    window_s: float
    sample_interval_s: float
    entries: tuple[EnergyEntry, ...]

    def measured(self) -> dict[str, EnergyEntry]:
        """precision -> its measured entry (a failed or refused one is absent)."""
        return {e.precision: e for e in self.entries if e.measured}

    def entry(self, precision: str) -> EnergyEntry | None:
        return next((e for e in self.entries if e.precision == precision), None)


def energy_missing(block: EnergyBlock | None, precision: str) -> str:
    """Why a result has no energy to quote for ``precision`` (``block``: the typed result's energy,
    :attr:`Result.energy`): a failed entry's reason (a measurement that failed,
    or one refused at the door: :mod:`gemm_bench.results.invariants`), else that it was not measured.
    One wording for the roles, the page and the report. (Each recipe's measured entries are
    :meth:`Result.energies`: a reader never picks them from the JSON dict, where
    a refused entry still reads as measured.)"""
    entry = block.entry(precision) if block is not None else None
    if entry is not None and not entry.measured:
        return f"energy failed: {entry.reason}"
    return "energy not measured in this result (the next refresh measures it)"


@dataclasses.dataclass(frozen=True)
class PlanStep(Outcome):
    """One measured step of a precision plan (``plan.steps[]``): all-BF16, all-FP8 or the plan."""

    step: PlanStepName
    mode: str
    run_id: str
    breakdown: Breakdown | None = None
    #: When the step was measured (ISO time; absent from older files).
    measured_at: str | None = None


@dataclasses.dataclass(frozen=True)
class PlanProjection:
    """One projection's three GEMMs under a recipe against BF16 (``plan.projections[]``): BF16's summed
    autocast time over the recipe's (``speedup``, None with ``reason`` when not every GEMM was
    measured), its spread, and whether the plan runs it in FP8. The report's plan makes these from
    the cells (:func:`gemm_bench.report.precision_plan.verdict`) and reads the stored ones back as such."""

    op: str
    speedup: float | None
    low: float | None
    high: float | None
    fp8: bool
    reason: str = ""

    @property
    def name(self) -> str:
        """The projection's display name ("MLP up")."""
        return OP_NAMES.get(self.op, self.op)


@dataclasses.dataclass(frozen=True)
class PlanBlock:
    """``plan``: which projections run in the recipe's FP8 and which stay in BF16, the rule that
    decided and chose it, and its measured steps."""

    recipe: str
    fp8: tuple[str, ...]
    keep_in_bf16: tuple[str, ...]
    kind: str | None
    rule: str
    chosen: str | None
    projections: tuple[PlanProjection, ...]
    steps: tuple[PlanStep, ...]

    def measured_steps(self, mode: str) -> dict[str, PlanStep]:
        """step name -> its measured step of ``mode``."""
        return {s.step: s for s in self.steps if s.mode == mode and s.measured}

    def step(self, name: str, mode: str) -> PlanStep | None:
        """The stored step of ``name`` in ``mode``, whatever its status."""
        return next((s for s in self.steps if s.step == name and s.mode == mode), None)


@dataclasses.dataclass(frozen=True)
class Peer(Outcome):
    """One peer's row (``peers[]``, :mod:`gemm_bench.measure.peers`): a GEMM pass timed by another library
    (``gemm`` peers), or a Linear's ``fprop`` or ``backward`` region on the op's Fprop shape (``linear``)."""

    backend: str
    op: str
    pass_: str
    run_id: str
    kind: str = "gemm"
    #: The peer's own label of what it computes in ("BF16", "FP8 rowwise") as stored, "" where the row
    #: stores none (:attr:`label` then reads it from the backend's name).
    precision: str = ""

    @property
    def label(self) -> str:
        """What the peer computes in (:func:`~.schema.peer_precision`): a label, not a TE precision id."""
        return peer_precision(self.backend, self.precision)


@dataclasses.dataclass(frozen=True)
class Clock:
    """A timed group's SM clock and board power while it was timed (``groups[].clock``,
    :mod:`gemm_bench.measure.telemetry`): no samples and the ``reason``, or the clock's median and
    minimum and, where the driver gave one, the power's median, quartiles and maximum."""

    samples: int
    reason: str = ""
    sm_clock_mhz_median: float | None = None
    sm_clock_mhz_min: float | None = None
    power_w_median: float | None = None
    power_w_max: float | None = None
    power_w_q1: float | None = None
    power_w_q3: float | None = None
    power_source: str = ""
    #: Why the door refused the power reading (it starts with :data:`~.invariants.REFUSED`; the power
    #: fields are then None), "" where the reading stands or none was taken.
    power_refused: str = ""

    @property
    def has_power(self) -> bool:
        return self.power_w_median is not None and self.power_w_max is not None


@dataclasses.dataclass(frozen=True)
class GroupCrossCheck:
    """A timed group's events-vs-profiler check (``groups[].cross_check``): per region, event time over
    kernel time of the profiled launches (``ratios``), the stored time over it (``stored_ratios``) and the
    kernel time; or the ``reason`` it was not possible."""

    rounds: int
    ratios: Mapping[str, float]
    stored_ratios: Mapping[str, float]
    kernel_ms: Mapping[str, float]
    reason: str = ""
    max_deviation: float | None = None


@dataclasses.dataclass(frozen=True)
class TimedGroup:
    """One timed group of a run (``groups[]``): the regions timed together round by round, how they were
    timed (``timed``: graph replays or eager), how the rounds rule ended (``converged``), and what the GPU
    did meanwhile (``clock``) with the cross-check of its regions."""

    label: str
    run_id: str
    rounds: int
    members: tuple[str, ...]
    mode: str = ""
    timed: str | None = None
    #: The group's median clock more than the telemetry's drop below the run's median (power- or heat-limited).
    clock_low: bool = False
    #: Whether every region's median reached the rule's target (None: the result stores no outcome).
    converged: bool | None = None
    eager_rounds: int | None = None
    wall_s: float | None = None
    setup_s: Mapping[str, float] = dataclasses.field(default_factory=dict)
    clock: Clock | None = None
    cross_check: GroupCrossCheck | None = None


@dataclasses.dataclass(frozen=True)
class Device:
    """The GPU the result was measured on (``device``); ``fields`` keeps every stored field (clocks,
    memory) as the scalars the schema allows."""

    name: str
    compute_capability: str
    sm_count: int | None
    #: The board's power limit in W as nvidia-smi reported it ("700.00"), None where unknown.
    power_limit_w: float | None
    fields: Mapping[str, Scalar]


@dataclasses.dataclass(frozen=True)
class Provenance:
    """The software stack, date and method of the run that wrote the document last (``provenance``)."""

    torch: str
    transformer_engine: str
    cuda: str
    driver: str
    date: str
    cublas: str | None
    commit: str | None
    measure_s: float | None
    phases_s: Mapping[str, float]
    method: Mapping[str, Scalar]


@dataclasses.dataclass(frozen=True)
class Result:
    """One checked result document as the report and the pages read it (:func:`parse`)."""

    schema_version: int
    method_version: str
    #: The run that wrote the document last (a cell of an older, merged run names its own).
    run_id: str
    question_hash: str
    kind: str
    num_layers: int
    gemms: tuple[GemmShape, ...]
    #: The question's model config as this code resolves it (None: not a model's question, or a
    #: config this code no longer builds).
    config: ModelConfig | None
    #: The whole stored question (:meth:`Question.from_dict`), None where it is not one this code writes.
    question: Question | None
    device: Device
    provenance: Provenance
    notes: tuple[str, ...]
    #: precision -> TE's support verdict on the GPU ({} for a result measured before it was stored).
    support: Mapping[str, Support]
    cells: tuple[Cell, ...]
    layer: tuple[LayerCell, ...]
    accuracy: tuple[AccuracyCell, ...]
    #: How the SQNRs were taken (``accuracy_method``), None where the result has none.
    accuracy_method: Mapping[str, Any] | None
    #: The peers' rows: context beside Transformer Engine's cells, never in its totals.
    peers: tuple[Peer, ...]
    #: The timed groups of every run the document holds (() for a result measured before they were stored).
    groups: tuple[TimedGroup, ...]
    model_step: ModelStepBlock | None
    energy: EnergyBlock | None
    plan: PlanBlock | None
    #: The invariants the door found broken (each number at fault demoted, :mod:`~.invariants`).
    violations: tuple[Violation, ...]

    def energies(self) -> dict[str, EnergyEntry]:
        """precision -> measured energy entry; {} without an energy block."""
        return {} if self.energy is None else self.energy.measured()

    def cached_precisions(self) -> list[str]:
        """The precisions the result holds cells of (GEMM or layer step), in the registry's order
        (:func:`~.schema.in_registry_order`, as :func:`~.schema.cached_precisions` lists a document's)."""
        return in_registry_order([*(c.precision for c in self.cells), *(c.precision for c in self.layer)])

    def unstored_reason(self, mode: str, precision: str) -> str | None:
        """Why a cell the result does not hold is *unsupported* rather than missing, or None
        (:func:`~.schema.support_reason`: the registry's reason, else TE's recorded verdict)."""
        verdict = self.support.get(precision)
        return support_reason(mode, precision, None if verdict is None else (verdict.available, verdict.reason),
                              self.device.name)

    def failed_cells(self, modes: Iterable[str], precisions: Iterable[str]) -> list[tuple[str, str, str]]:
        """(row, precision, reason) of each failed measurement a page may show
        (:func:`~.failed.failed_rows`, the predicate the refresh plans with)."""
        entries: list[tuple[str, str, str, str]] = [(c.mode, c.precision, c.status, c.reason) for c in self.cells]
        entries += [(c.mode, c.precision, c.status, c.reason) for c in self.layer]
        if self.model_step is not None:
            entries += [(MODEL_STEP_ROW, p.precision, p.status, p.reason) for p in self.model_step.parts]
        if self.energy is not None:
            entries += [(ENERGY_ROW, e.precision, e.status, e.reason) for e in self.energy.entries]
        return failed_rows(entries, modes, precisions)

    def timed_regions(self) -> Iterator[tuple[str, Region | None]]:
        """Every timed item's label and profiler cross-check (None: not cross-checked): GEMM cells, layer
        steps, peer rows, plan steps and model-step parts, each named by :mod:`~.cross_check`'s label for
        it (:func:`~.cross_check.cell_label`, :func:`~.cross_check.step_label`...): the names a verdict's
        :attr:`~.cross_check.Verdict.outside` lists."""
        for c in self.cells:
            yield cell_label(c.mode, c.op, c.pass_, c.precision), c.cross_check
        for layer in self.layer:
            yield step_label(layer.mode, layer.precision, layer.routing), layer.cross_check
        for peer in self.peers:
            yield peer_label(peer.backend, peer.op, peer.pass_), peer.cross_check
        for step in self.plan.steps if self.plan is not None else ():
            yield plan_label(step.step), step.cross_check
        for part in self.model_step.parts if self.model_step is not None else ():
            yield part_label(part.part, part.precision), part.cross_check

    def cross_check(self) -> Verdict:
        """The result's profiler cross-check against the bounds (:func:`~.cross_check.verdict_of`)."""
        return verdict_of(self.timed_regions())


# ------------------------------------------------------------------------------------ parsing
_ABSENT = object()
#: A field's reader: its name, the stored key, the conversion, its default (or :data:`_ABSENT`), and
#: whether it may be None.
_FieldReader = tuple[str, str, Callable[[Any], Any], Any, bool]


def _given_by_caller(hint: Any) -> Callable[[Any], Any]:
    def refuse(value: Any) -> Any:
        raise TypeError(f"a field of type {hint!r} is parsed by its caller and must be given")
    return refuse


def _converter(hint: Any) -> tuple[Callable[[Any], Any], bool]:
    """The conversion of a stored value to a field of type ``hint``, and whether None is allowed.

    ``float | None`` reads a stored boolean as None (a JSON ``true`` is no time); a tuple reads a
    missing or null list as empty; a mapping is kept when it is one, and a breakdown read, else None."""
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    inner_types = [a for a in args if a is not type(None)]
    if origin in (types.UnionType, typing.Union) and len(inner_types) == 1 < len(args):
        inner = inner_types[0]
        if inner is float:
            return (lambda v: None if v is None or isinstance(v, bool) else float(v)), True
        convert, _ = _converter(inner)
        return (lambda v: None if v is None else convert(v)), True
    if origin is Literal:
        return str, False
    if origin is tuple:
        item, _ = _converter(args[0])
        return (lambda v: tuple(item(x) for x in v or ())), False
    if origin is Mapping:
        return (lambda v: v if isinstance(v, Mapping) else None), False
    if hint is Breakdown:  # a block the door kept (its form checked by the schema), else None
        return (lambda v: _read(Breakdown, v) if isinstance(v, Mapping) else None), False
    if hint in (str, int, float, bool):
        return hint, False
    return _given_by_caller(hint), False


@functools.cache
def _field_readers(cls: type) -> tuple[_FieldReader, ...]:
    hints = typing.get_type_hints(cls)
    readers = []
    for field in dataclasses.fields(cls):
        default = field.default if field.default is not dataclasses.MISSING else (
            field.default_factory() if field.default_factory is not dataclasses.MISSING else _ABSENT)
        convert, optional = _converter(hints[field.name])
        readers.append((field.name, field.name.rstrip("_"), convert, default, optional))
    return tuple(readers)


def _read(cls: type[_T], block: Mapping[str, Any], *, defaults: Mapping[str, Any] | None = None,
          **given: Any) -> _T:
    """One typed object from a stored block: every field not ``given`` is read from the block under its
    own name (``pass_`` from ``pass``) and converted to its annotated type; a field the block lacks
    takes ``defaults``' value, else the dataclass default, else None where the type allows it (a
    required field the block lacks is a KeyError: the schema guarantees it).

    Why one reader: the blocks' parsers used to spell the same ``str(b["x"])``, ``_float(b.get("y"))``
    and ``None if ... else`` for every field, and a field added to a class now needs no parser line."""
    values = dict(given)
    for name, key, convert, default, optional in _field_readers(cast(type, cls)):
        if name in values:
            continue
        if key in block:
            values[name] = convert(block[key])
        elif defaults is not None and name in defaults:
            values[name] = defaults[name]
        elif default is not _ABSENT:
            values[name] = default
        elif optional:
            values[name] = None
        else:
            raise KeyError(key)
    return cls(**values)


def _words(item: Mapping[str, Any]) -> str:
    """A stored reason with its white space folded (a failed entry's reason is shown in a sentence)."""
    return " ".join(str(item.get("reason", "")).split())


def _outcome(item: Mapping[str, Any]) -> dict[str, Any]:
    """What every timed entry shares (:class:`Outcome`): a time and statistics only when measured."""
    measured = item["status"] == "measured"
    return {"status": cast(Status, item["status"]), "ms": float(item["ms"]) if measured else None,
            "stats": _read(Stats, item["stats"]) if measured and isinstance(item.get("stats"), Mapping) else None,
            "reason": _words(item)}


def _eager(cell: Mapping[str, Any]) -> Stats | None:
    """A measured cell's eager statistics (method v4), None where not stored."""
    eager = cell.get("eager")
    return _read(Stats, eager) if cell["status"] == "measured" and isinstance(eager, Mapping) else None


def parse_model_step(block: Mapping[str, Any]) -> ModelStepBlock:
    """A checked document's ``model_step`` block, typed: :func:`parse`'s own step, public for the readers
    not yet converted to :class:`Result` that hand a converted one the block they hold (it must come from
    a checked document: this parses, it does not check)."""
    parts = tuple(_read(ModelStepPart, p, **_outcome(p)) for p in block["parts"])
    state = float(block["state_per_param"])
    memory = {str(precision): MemoryParts(**{f: int(fields[f]) for f in MEMORY_FIELDS}, state_per_param=state)
              for precision, fields in (block.get("memory") or {}).items()}
    search = block.get("largest_microbatch")
    largest = None if not isinstance(search, Mapping) else _read(
        LargestMicrobatch, search, defaults={"layers": 0},
        found={str(p): int(v["largest"]) for p, v in search.items() if p != "layers" and isinstance(v, Mapping)},
        failed={str(p): " ".join(v.split()) for p, v in search.items() if p != "layers" and isinstance(v, str)})
    return _read(ModelStepBlock, block, state_per_param=state, parts=parts, memory=memory, largest_microbatch=largest)


def _energy_entry(entry: Mapping[str, Any]) -> EnergyEntry:
    if entry["status"] != "measured":  # a failed entry keeps none of its numbers, only why
        return _read(EnergyEntry, {"precision": entry["precision"]}, status="failed", reason=_words(entry))
    return _read(EnergyEntry, entry)


def _energy(block: Mapping[str, Any]) -> EnergyBlock:
    return _read(EnergyBlock, block, defaults={"mode": "layer-graphed"},
                 entries=tuple(_energy_entry(e) for e in block.get("steps", [])))


def _plan(doc: Mapping[str, Any], block: Mapping[str, Any]) -> PlanBlock:
    projections = tuple(_read(PlanProjection, p) for p in block.get("projections", []) if isinstance(p, Mapping))
    steps = tuple(_read(PlanStep, s, **_outcome(s), run_id=cell_run_id(dict(doc), dict(s)))
                  for s in block.get("steps", []))
    return _read(PlanBlock, block, defaults={"rule": ""}, projections=projections, steps=steps)


def _device(block: Mapping[str, Any]) -> Device:
    return _read(Device, block, power_limit_w=board_limit_w(block.get("power_limit_w")), fields=dict(block))


def _peer(doc: Mapping[str, Any], row: Mapping[str, Any]) -> Peer:
    return _read(Peer, row, **_outcome(row), run_id=cell_run_id(dict(doc), dict(row)))


def _numbers(block: object) -> dict[str, float]:
    return {str(k): float(v) for k, v in block.items()} if isinstance(block, Mapping) else {}


def _group(group: Mapping[str, Any]) -> TimedGroup:
    clock, check = group.get("clock"), group.get("cross_check")
    return _read(TimedGroup, group, members=tuple(map(str, group["members"])),
                 setup_s=_numbers(group.get("setup_s")),
                 clock=_read(Clock, clock) if isinstance(clock, Mapping) else None,
                 cross_check=None if not isinstance(check, Mapping) else _read(
                     GroupCrossCheck, check, ratios=_numbers(check.get("ratios")),
                     stored_ratios=_numbers(check.get("stored_ratios")), kernel_ms=_numbers(check.get("kernel_ms")),
                     reason=_words(check)))


def _provenance(block: Mapping[str, Any]) -> Provenance:
    return _read(Provenance, block, phases_s={str(k): float(v) for k, v in (block.get("phases_s") or {}).items()},
                 method=dict(block["method"]))


def _question(stored: Mapping[str, Any]) -> Question | None:
    try:
        return Question.from_dict(stored)
    except ValueError:  # ConfigError included: an older question this code no longer writes
        return None


def parse(doc: Mapping[str, Any]) -> Result:
    """The typed result of a document: the checked document :func:`~.cache.read_document` returns, or a
    schema-valid one made in this process (a run's fresh document, a test's), which goes through the
    invariants (:func:`~.invariants.check`) first, so no :class:`Result` holds a number the door refuses.

    Why here, below the report: a demoted number must already be a failed entry when a reader sees it,
    and every reader must see the same objects."""
    checked = doc if isinstance(doc, CheckedDocument) else check(doc)
    plain = dict(checked)
    question = checked["question"]
    model_step, energy, plan = checked.get("model_step"), checked.get("energy"), checked.get("plan")
    cells = tuple(_read(Cell, c, **_outcome(c), run_id=cell_run_id(plain, c), eager=_eager(c))
                  for c in checked["cells"])
    layer = tuple(_read(LayerCell, c, defaults={"routing": "balanced"}, **_outcome(c), run_id=cell_run_id(plain, c))
                  for c in checked.get("layer", []))
    accuracy = tuple(_read(AccuracyCell, c, sqnr_db=float(c["sqnr_db"]) if c["status"] == "measured" else None,
                           reason=_words(c), run_id=cell_run_id(plain, c)) for c in checked.get("accuracy", []))
    return _read(
        Result, checked,
        run_id=str(checked.get("run_id") or f"v1:{checked['question_hash']}"), kind=str(question["kind"]),
        num_layers=int(question["num_layers"]), gemms=tuple(GemmShape.from_dict(g) for g in question["gemms"]),
        config=stored_config(question.get("config")), question=_question(question),
        device=_device(checked["device"]), provenance=_provenance(checked["provenance"]),
        notes=tuple(map(str, checked.get("notes", []))),
        support={str(p): _read(Support, v) for p, v in (checked.get("support") or {}).items()},
        cells=cells, layer=layer, accuracy=accuracy,
        peers=tuple(_peer(plain, p) for p in checked.get("peers", [])),
        groups=tuple(_group(g) for g in checked.get("groups", []) or []),
        model_step=parse_model_step(model_step) if isinstance(model_step, Mapping) else None,
        energy=_energy(energy) if isinstance(energy, Mapping) else None,
        plan=_plan(plain, plan) if isinstance(plan, Mapping) else None,
        violations=tuple(v for v in checked.violations if isinstance(v, Violation)))
