"""The result document: what measurement runs of one question on one device produced.

A *question* is the set of GEMMs to measure (derived from a model config, manual shapes or a
sweep), independent of how it was spelled: a preset and the same numbers written out, options in
any order, give the same GEMMs and so the same
:func:`~gemm_bench.question.question.question_hash`. Precisions and modes are not part of the
question: they select cells inside the answer, so a page that asks for a subset of what one run
measured is answered by that run.

A *run* is one ``Runner.measure()`` call: one warm GPU, one clock history, one interleaved
schedule. Only cells of one run may be compared (a speedup between two runs would divide one
run's clocks by another's), so schema version 2 records a ``run_id`` per cell and per peer.
A cell or peer without its own ``run_id`` belongs to the document's top-level ``run_id`` (the run
that wrote the document last, whose provenance block it carries); when a merge keeps cells of an
older run, their ids are written out (:func:`merge_documents`). A version 1 document is one
implicit run, ``"v1:" + question_hash``: every committed v1 file was measured in one run (a test
checks their ``measured_at`` span).

Documents are plain JSON with a versioned schema, validated on read by :func:`validate`
(hand-written rather than jsonschema so the error names the exact JSON path and the core needs
no dependency). Validation covers every field that merging, reporting and rendering touch, with
ranges, so that no value a file can hold makes a later division, format or plot fail or show a
wrong number. A document that fails validation is never used in part.
"""

from __future__ import annotations

import copy
import dataclasses
import datetime as dt
import itertools
import math
import re
import secrets
from collections.abc import Iterable, Mapping
from typing import Any

from gemm_bench.question.config import MAX_DIMENSION
from gemm_bench.question.devices import device_slug
from gemm_bench.question.hardware import FORMATS, above_peak, achieved_tflops, peak_tflops, precision_format
from gemm_bench.question.precisions import ALL_MODES, MODES, PRECISION_IDS, PRECISIONS, gemm_modes
from gemm_bench.question.question import question_hash
from gemm_bench.question.shapes import PASSES, GemmShape
from gemm_bench.results.accuracy_schema import AccuracyError, validate_accuracy_cells
from gemm_bench.results.energy import validate_energy_block
from gemm_bench.results.model_step_schema import ModelStepSchemaError, validate_model_step
from gemm_bench.results.step_schema import StepError, validate_layer_cells, validate_plan_block

__all__ = [
    "KINDS",
    "LINEAR_PEER_REGIONS",
    "MAX_LAYERS",
    "MAX_MS",
    "MAX_TFLOPS",
    "METHOD_VERSION",
    "MIN_MS",
    "PEER_KINDS",
    "READABLE_SCHEMA_VERSIONS",
    "RUN_BLOCKS",
    "SCHEMA_VERSION",
    "STATUSES",
    "STILL_VALID_METHODS",
    "ResultError",
    "cell_run_id",
    "device_slug",
    "merge_documents",
    "new_document",
    "new_run_id",
    "stamp_run_ids",
    "validate",
]

SCHEMA_VERSION = 2
#: Versions :func:`validate` accepts; older ones are read as they are and upgraded on store.
READABLE_SCHEMA_VERSIONS: tuple[int, ...] = (1, 2)

#: Bumped whenever what is timed, or how, changes: results of another method version are stale,
#: except those of :data:`STILL_VALID_METHODS` (re-measured by GPU boxes, shown elsewhere).
METHOD_VERSION = "4"
#: Largest ``kernel_ratio`` accepted (event time over kernel time of the same profiled launches):
#: a real region's ratio is near 1; far above it the file is not a measurement.
MAX_KERNEL_RATIO = 1000.0

#: Earlier method versions whose numbers stay correct under the current one, with what the
#: current method adds; a method change that makes old numbers wrong must not be listed here, and
#: its results are then stale everywhere. Version 4 changes what a published time is: the GPU's
#: time for a region (its CUDA-graph replay), where versions 1 and 3 timed one eager call and so
#: included Transformer Engine's host work wherever the GPU waited for it (up to 8x the kernel time
#: on the H100, by version 3's own cross-check). Their numbers answer another question (the eager
#: time, which version 4 keeps as ``eager``), so none is listed. Version 2 was never published.
STILL_VALID_METHODS: dict[str, str] = {}

STATUSES: tuple[str, ...] = ("measured", "unsupported", "failed")
#: What a group published (method v4): its regions' CUDA-graph replays, or eager calls.
GROUP_TIMINGS: tuple[str, ...] = ("graph replays", "eager")
KINDS: tuple[str, ...] = ("model", "shapes", "sweep")

#: Plausible GEMM times. Below 0.1 us no kernel launch completes; above ~3 hours nothing was
#: benchmarked. Out of range means a corrupt file or a unit bug, never a measurement.
MIN_MS = 1e-4
MAX_MS = 1e7
#: No GPU reaches 100 PFLOP/s on one GEMM: a cell implying more has a wrong FLOP count or time.
MAX_TFLOPS = 1e5
#: Layers of a model: the same bound as every other config field, so any question a page can
#: ask can be stored.
MAX_LAYERS = MAX_DIMENSION
#: One GEMM dimension. Model questions multiply config fields (tokens = sequence x batch), so
#: this is wider than a config field; it keeps FLOP counts far inside float range.
MAX_GEMM_DIMENSION = 1 << 62
#: Identifiers and one-line values (device name, versions, op, backend, run id) vs free text.
MAX_NAME = 200
MAX_TEXT = 1_000_000
MAX_ITEMS = 1_000_000
MAX_DEPTH = 32
MAX_INT = 1 << 63
#: Rounding slack when comparing two stored times (the runner rounds to 1e-6 ms).
_ROUNDING = 2e-6

#: Peer rows (:mod:`gemm_bench.measure.peers`): ``gemm`` peers time one pass of the question; ``linear``
#: peers a Linear's ``fprop`` and ``backward`` (Dgrad + Wgrad) on the op's Fprop shape.
PEER_KINDS: tuple[str, ...] = ("gemm", "linear")
LINEAR_PEER_REGIONS: tuple[str, ...] = ("fprop", "backward")
#: Labels of the peers results already hold, for rows written before peers carried a precision.
_PEER_PRECISIONS = {"torch.matmul": "BF16", "torch._scaled_mm (FP8 tensorwise)": "FP8 tensorwise",
                    "torch._scaled_mm (FP8 rowwise)": "FP8 rowwise"}


def peer_precision(backend: str, stored: str = "") -> str:
    """A peer row's own label of what it computes in ("BF16", "FP8 rowwise"): the ``stored`` one, else
    the one its ``backend`` name implies ("" where none does)."""
    if stored:
        return stored
    for prefix, label in _PEER_PRECISIONS.items():
        if backend.startswith(prefix):
            return label
    if "(" in backend and backend.endswith(")"):
        return backend[backend.rindex("(") + 1:-1]
    return ""


def peer_format(label: str) -> str | None:
    """The tensor-core format a peer's label names (``FP8 rowwise`` -> ``fp8``), else None."""
    head = label.strip().lower().split(" ")[0] if label.strip() else ""
    return head if head in FORMATS else None


def peer_timed(gemms: Mapping[tuple[str, str], GemmShape], kind: str, op: str, pass_: str
               ) -> tuple[GemmShape, int] | None:
    """The question's GEMM a peer row is on and the FLOPs its region runs: a ``gemm`` peer's pass; a
    ``linear`` peer's region on the op's Fprop shape, ``backward`` running two GEMMs of its FLOPs
    (Dgrad and Wgrad). None where the question has no such GEMM."""
    shape = gemms.get((op, "fprop" if kind == "linear" else pass_))
    return None if shape is None else (shape, shape.flops * (2 if pass_ == "backward" else 1))

_RUN_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9:._-]{0,63}")
_CAPABILITY = re.compile(r"[0-9]{1,3}\.[0-9]{1,3}")
_SCALARS = (str, int, float, bool, type(None))


class CheckedDocument(dict[str, Any]):
    """A result document as every reader gets it (:func:`gemm_bench.results.cache.read_document`): its
    numbers passed the invariants of :mod:`gemm_bench.results.invariants` (those that broke one are
    demoted to failed entries) and :attr:`violations` says which broke and where. It equals the plain
    document it holds, so readers index it as before; it is never stored: :func:`validate` refuses
    it, so a copy demoted for showing cannot overwrite the measured file."""

    violations: tuple[Any, ...] = ()


class ResultError(ValueError):
    """A result document that does not satisfy the schema; ``where`` is the JSON path."""

    def __init__(self, where: str, problem: str) -> None:
        self.where = where
        self.problem = problem
        super().__init__(f"{where}: {problem}")


def new_run_id() -> str:
    """A fresh id for one measurement run: its UTC start second plus randomness.

    The time makes ids readable in a file; the random part keeps two runs started in the same
    second (two processes, two machines) apart.
    """
    now = dt.datetime.now(dt.timezone.utc)
    return f"{now:%Y%m%dT%H%M%SZ}-{secrets.token_hex(4)}"


def cell_run_id(doc: dict[str, Any], cell: dict[str, Any]) -> str:
    """The run a cell of a valid document was measured in (see the module docstring)."""
    if doc.get("schema_version") == 1:
        return f"v1:{doc['question_hash']}"
    return str(cell.get("run_id") or doc["run_id"])


#: Optional blocks of per-run cells beside ``cells`` and ``peers``: the layer step
#: (:mod:`gemm_bench.measure.step`) and the SQNRs (:mod:`gemm_bench.measure.accuracy`); one mode is one run.
RUN_BLOCKS: tuple[str, ...] = ("layer", "accuracy")
#: Blocks measured whole by one run (:func:`merge_documents`): a newer run that measured one replaces
#: it whole; one that did not keeps the cached block (issue 43: a run that re-measured only the
#: pre-quantized GEMMs once dropped the cached energy and plan).
WHOLE_BLOCKS: tuple[str, ...] = ("model_step", "plan", "energy")


def stamp_run_ids(doc: dict[str, Any]) -> dict[str, Any]:
    """A copy of a valid document in the current schema, every cell and peer naming its run.

    Version 1 documents become version 2 with the implicit run id written out, so that merging
    them with a newer run can never make two runs look like one.
    """
    out = copy.deepcopy(doc)
    for key in ("cells", "peers", *RUN_BLOCKS):
        if key in doc:
            out[key] = [{**item, "run_id": cell_run_id(doc, item)} for item in doc[key]]
    if doc.get("schema_version") == 1:
        out["run_id"] = f"v1:{doc['question_hash']}"
    out["schema_version"] = SCHEMA_VERSION
    return out


# ------------------------------------------------------------------------------- validation
def _type_name(types: type | tuple[type, ...]) -> str:
    names = {bool: "a boolean", int: "an integer", float: "a number", str: "a string", dict: "an object",
             list: "a list", type(None): "null"}
    seq = types if isinstance(types, tuple) else (types,)
    return " or ".join(names.get(t, t.__name__) for t in seq)


def _describe(value: Any) -> str:
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, (dict, list)):
        return _type_name(type(value))
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _get(obj: dict[str, Any], key: str, types: type | tuple[type, ...], where: str,
         *, required: bool = True) -> Any:
    """``obj[key]`` of exactly ``types`` (a JSON boolean is never an integer)."""
    path = f"{where}.{key}"
    if key not in obj:
        if required:
            raise ResultError(path, "is missing")
        return None
    value = obj[key]
    seq = types if isinstance(types, tuple) else (types,)
    if isinstance(value, bool) and bool not in seq:
        raise ResultError(path, f"must be {_type_name(types)}, got a boolean")
    if not isinstance(value, seq):
        raise ResultError(path, f"must be {_type_name(types)}, got {_describe(value)}")
    return value


def _text(obj: dict[str, Any], key: str, where: str, *, max_len: int = MAX_NAME, nonempty: bool = False) -> str:
    value = _optional_text(obj, key, where, max_len=max_len, nonempty=nonempty)
    if value is None:
        raise ResultError(f"{where}.{key}", "is missing")
    return value


def _optional_text(obj: dict[str, Any], key: str, where: str, *, max_len: int = MAX_NAME,
                   nonempty: bool = False) -> str | None:
    value = _get(obj, key, str, where, required=False)
    if value is None:
        return None
    if len(value) > max_len:
        raise ResultError(f"{where}.{key}", f"is {len(value)} characters long, at most {max_len} allowed")
    if nonempty and not value.strip():
        raise ResultError(f"{where}.{key}", "must not be empty")
    return str(value)


def _integer(obj: dict[str, Any], key: str, where: str, low: int, high: int) -> int:
    value = _optional_integer(obj, key, where, low, high)
    if value is None:
        raise ResultError(f"{where}.{key}", "is missing")
    return value


def _optional_integer(obj: dict[str, Any], key: str, where: str, low: int, high: int) -> int | None:
    value = _get(obj, key, int, where, required=False)
    if value is not None and not low <= value <= high:
        raise ResultError(f"{where}.{key}", f"must be between {low} and {high}, got {_describe(value)}")
    return value if value is None else int(value)


def _number(obj: dict[str, Any], key: str, where: str, low: float, high: float, *,
            required: bool = True, low_open: bool = False) -> float | None:
    value = _get(obj, key, (int, float), where, required=required)
    if value is None:
        return None
    value = float(value)  # exact for the bounded ints that can pass; huge ints fail the walk first
    if not math.isfinite(value) or value > high or value < low or (low_open and value <= low):
        bound = f"more than {low:g}" if low_open else f"at least {low:g}"
        raise ResultError(f"{where}.{key}", f"must be a finite number {bound} and at most {high:g}, "
                                            f"got {_describe(obj[key])}")
    return value


def _walk(doc: Any) -> None:
    """Every value, anywhere: JSON types only, finite, bounded, and text that UTF-8 can encode.

    One pass over the whole tree, iterative so that deep nesting is an error and not a crash, and
    covering fields no rule below names (a renderer or ``--json`` may still print them).
    """
    stack: list[tuple[Any, str, int]] = [(doc, "$", 0)]
    while stack:
        value, where, depth = stack.pop()
        if depth > MAX_DEPTH:
            raise ResultError(where, f"is nested more than {MAX_DEPTH} levels deep")
        if isinstance(value, str):
            _encodable(value, where)
        elif isinstance(value, bool) or value is None:
            pass
        elif isinstance(value, int):
            if not -MAX_INT <= value < MAX_INT:
                raise ResultError(where, "is an integer outside the 64-bit range")
        elif isinstance(value, float):
            if not math.isfinite(value):
                raise ResultError(where, f"must be a finite number, got {value!r}")
        elif isinstance(value, dict):
            if len(value) > MAX_ITEMS:
                raise ResultError(where, f"has more than {MAX_ITEMS} keys")
            for key, item in value.items():
                if not isinstance(key, str):
                    raise ResultError(where, f"has a key that is not a string: {_describe(key)}")
                _encodable(key, f"{where} (a key)")
                if len(key) > MAX_NAME:
                    raise ResultError(f"{where} (a key)", f"is longer than {MAX_NAME} characters")
                stack.append((item, f"{where}.{key}", depth + 1))
        elif isinstance(value, list):
            if len(value) > MAX_ITEMS:
                raise ResultError(where, f"has more than {MAX_ITEMS} items")
            stack.extend((item, f"{where}[{i}]", depth + 1) for i, item in enumerate(value))
        else:
            raise ResultError(where, f"is a {type(value).__name__}, not a JSON value")


def _encodable(text: str, where: str) -> None:
    if len(text) > MAX_TEXT:
        raise ResultError(where, f"is longer than {MAX_TEXT} characters")
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        raise ResultError(where, "holds text UTF-8 cannot encode (a lone surrogate)") from None


def _object(value: Any, where: str) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise ResultError(where, f"must be an object, got {_describe(value)}")
    return value


def _gemm(row: Any, where: str) -> GemmShape:
    row = _object(row, where)
    op = _text(row, "op", where, nonempty=True)
    pass_ = _text(row, "pass", where)
    if pass_ not in PASSES:
        raise ResultError(f"{where}.pass", f"{pass_!r} is not one of {', '.join(PASSES)}")
    m, k, n = (_integer(row, key, where, 1, MAX_GEMM_DIMENSION) for key in ("m", "k", "n"))
    return GemmShape(op, pass_, m, k, n, _integer(row, "groups", where, 1, MAX_DIMENSION))


def _flops(row: dict[str, Any], gemm: GemmShape, where: str) -> None:
    """A stored FLOP count, where the file has one, is the shape's: catches a FLOP-count bug."""
    flops = _get(row, "flops", int, where, required=False)
    if flops is not None and flops != gemm.flops:
        raise ResultError(f"{where}.flops", f"is {flops}, but 2 x m x k x n x groups is {gemm.flops}")


def _same_shape(item: dict[str, Any], gemm: GemmShape, where: str, *, required: bool) -> None:
    """A cell's or peer's own m/k/n/groups, where it records them, are its question GEMM's."""
    for key, expected in (("m", gemm.m), ("k", gemm.k), ("n", gemm.n), ("groups", gemm.groups)):
        value = _get(item, key, int, where, required=required)
        if value is not None and value != expected:
            raise ResultError(f"{where}.{key}", f"is {value}, but the question's {gemm.op}/{gemm.pass_} has {expected}")


def _ms(item: dict[str, Any], gemm: GemmShape, where: str) -> float:
    ms = _number(item, "ms", where, MIN_MS, MAX_MS)
    assert ms is not None
    tflops = achieved_tflops(gemm.flops, ms)
    if tflops > MAX_TFLOPS:
        raise ResultError(f"{where}.ms", f"{ms!r} ms for {gemm.flops} FLOPs would be {tflops:.3g} TFLOP/s, "
                                         f"more than the plausible {MAX_TFLOPS:g}")
    return ms


def _stats(item: dict[str, Any], ms: float | None, where: str, key: str = "stats") -> None:
    """``item[key]``: a statistics block (median, spread, quantiles in order, samples); with ``ms``,
    its median must be the item's published ``ms``."""
    stats = _get(item, key, dict, where)
    at = f"{where}.{key}"
    median = _number(stats, "median_ms", at, 0.0, MAX_MS, low_open=True)
    assert median is not None
    if ms is not None and not math.isclose(median, ms, rel_tol=1e-6, abs_tol=_ROUNDING):
        raise ResultError(f"{at}.median_ms", f"is {median!r}, but the cell's ms is {ms!r}")
    _number(stats, "iqr_ms", at, 0.0, MAX_MS)
    order = [(key, _number(stats, key, at, 0.0, MAX_MS, required=False, low_open=True))
             for key in ("min_ms", "p10_ms")]
    order.append(("median_ms", median))
    order.append(("p90_ms", _number(stats, "p90_ms", at, 0.0, MAX_MS, required=False, low_open=True)))
    present = [(key, value) for key, value in order if value is not None]
    for (low_key, low), (high_key, high) in itertools.pairwise(present):
        if low > high + _ROUNDING:
            raise ResultError(f"{at}.{low_key}", f"is {low!r}, more than {high_key} {high!r}")
    n = _optional_integer(stats, "n", at, 1, MAX_ITEMS)
    samples = _get(stats, "samples_ms", list, at, required=False)
    if samples is not None:
        for i, sample in enumerate(samples):
            if (isinstance(sample, bool) or not isinstance(sample, (int, float)) or not math.isfinite(sample)
                    or not 0 < sample <= MAX_MS):
                raise ResultError(f"{at}.samples_ms[{i}]", f"must be a positive finite time, got {_describe(sample)}")
        if not samples:
            raise ResultError(f"{at}.samples_ms", "is empty")
        if n is not None and n != len(samples):
            raise ResultError(f"{at}.n", f"is {n}, but samples_ms holds {len(samples)} times")


def _outcome(item: dict[str, Any], gemm: GemmShape, where: str, version: int) -> str:
    """Status, then ms and stats or a reason, then the run id: what cells and peers share."""
    status = _text(item, "status", where)
    if status not in STATUSES:
        raise ResultError(f"{where}.status", f"{status!r} is not one of {', '.join(STATUSES)}")
    if status == "measured":
        _stats(item, _ms(item, gemm, where), where)
        timing_extras(item, where)
        _optional_text(item, "reason", where, max_len=MAX_TEXT)
    else:
        _text(item, "reason", where, max_len=MAX_TEXT)
    _optional_text(item, "measured_at", where)
    if version == 1:
        if "run_id" in item:
            raise ResultError(f"{where}.run_id", "is a schema version 2 field, in a version 1 document")
    else:
        _run_id(item, where, required=False)
    return status


def timing_extras(item: dict[str, Any], where: str) -> None:
    """The method-v4 quantities beside a measured time: ``eager`` (statistics of the same region
    called eagerly, host work included), ``kernel_ms`` (the cross-check's profiled kernel time) and
    ``kernel_ratio`` (the profiled rounds' event median over that kernel time: the same launches)."""
    if "eager" in item:
        _stats(item, None, where, key="eager")
    _number(item, "kernel_ms", where, 0.0, MAX_MS, required=False, low_open=True)
    _number(item, "kernel_ratio", where, 0.0, MAX_KERNEL_RATIO, required=False, low_open=True)


def _run_id(obj: dict[str, Any], where: str, *, required: bool) -> None:
    value = _get(obj, "run_id", str, where, required=required)
    if value is not None and not _RUN_ID.fullmatch(value):
        raise ResultError(f"{where}.run_id", f"{_describe(value)} is not a run id (1-64 letters, digits, "
                                             "'.', ':', '_' or '-', starting with a letter or digit)")


def validate(doc: Any) -> dict[str, Any]:
    """Check a result document; return it unchanged or raise :class:`ResultError`.

    Never raises anything else, whatever JSON value ``doc`` is.
    """
    if isinstance(doc, CheckedDocument):
        raise ResultError("$", "is a document checked for showing (numbers that broke an invariant demoted), "
                               "which is never stored: store the measured document (read it with raw=True)")
    doc = _object(doc, "$")
    _walk(doc)
    version = _get(doc, "schema_version", int, "$")
    if version not in READABLE_SCHEMA_VERSIONS:
        raise ResultError("$.schema_version", f"is {version}, this gemm-guide reads "
                                              f"{' and '.join(map(str, READABLE_SCHEMA_VERSIONS))}")
    if version >= 2:
        _run_id(doc, "$", required=True)
    elif "run_id" in doc:
        raise ResultError("$.run_id", "is a schema version 2 field, in a version 1 document")
    _text(doc, "method_version", "$", nonempty=True)

    question = _get(doc, "question", dict, "$")
    rows = _get(question, "gemms", list, "$.question")
    if not rows:
        raise ResultError("$.question.gemms", "is empty")
    gemms: dict[tuple[str, str], GemmShape] = {}
    for i, row in enumerate(rows):
        gemm = _gemm(row, f"$.question.gemms[{i}]")
        if (gemm.op, gemm.pass_) in gemms:
            raise ResultError(f"$.question.gemms[{i}]", f"repeats GEMM {gemm.op}/{gemm.pass_}")
        gemms[(gemm.op, gemm.pass_)] = gemm
    _integer(question, "num_layers", "$.question", 1, MAX_LAYERS)
    kind = _text(question, "kind", "$.question")
    if kind not in KINDS:
        raise ResultError("$.question.kind", f"{kind!r} is not one of {', '.join(KINDS)}")
    config = _get(question, "config", (dict, type(None)), "$.question", required=False)
    _layout_block(question)
    stored_hash = _text(doc, "question_hash", "$")
    expected_hash = question_hash(gemms.values(), config)
    if stored_hash != expected_hash:
        raise ResultError(
            "$.question_hash",
            f"{stored_hash} does not match the question's GEMMs and config (hash {expected_hash}): "
            "the file was edited or corrupted",
        )
    for i, (row, gemm) in enumerate(zip(rows, gemms.values(), strict=True)):
        _flops(row, gemm, f"$.question.gemms[{i}]")

    device = _get(doc, "device", dict, "$")
    _text(device, "name", "$.device", nonempty=True)
    capability = _text(device, "compute_capability", "$.device")
    if not _CAPABILITY.fullmatch(capability):
        raise ResultError("$.device.compute_capability", f"{_describe(capability)} is not of the form 9.0")
    _optional_integer(device, "sm_count", "$.device", 1, 1_000_000)
    for key, value in device.items():
        if not isinstance(value, _SCALARS):
            raise ResultError(f"$.device.{key}", f"must be a string, number, boolean or null, got {_describe(value)}")

    provenance = _get(doc, "provenance", dict, "$")
    for key in ("torch", "transformer_engine", "cuda", "driver", "date"):
        _text(provenance, key, "$.provenance")
    for key in ("cublas", "commit"):
        _optional_text(provenance, key, "$.provenance")
    # Wall seconds the measurement of this question took (process start excluded): what
    # ``gemm-bench refresh --dry-run`` estimates the next measurement of it from.
    _number(provenance, "measure_s", "$.provenance", 0.0, 1e7, required=False)
    # ... and where that time went, seconds per phase (``PhaseProfiler.summary``).
    phases = _get(provenance, "phases_s", dict, "$.provenance", required=False)
    for name in phases or {}:
        _number(phases, name, "$.provenance.phases_s", 0.0, 1e7)
    method = _get(provenance, "method", dict, "$.provenance")
    for key, value in method.items():
        if not isinstance(value, _SCALARS):
            raise ResultError(f"$.provenance.method.{key}",
                              f"must be a string, number, boolean or null, got {_describe(value)}")

    notes = _get(doc, "notes", list, "$")
    for i, note in enumerate(notes):
        if not isinstance(note, str):
            raise ResultError(f"$.notes[{i}]", f"must be a string, got {_describe(note)}")

    support = _get(doc, "support", dict, "$", required=False)
    for precision, verdict in (support or {}).items():
        where = f"$.support.{precision}"
        if precision not in PRECISIONS:
            raise ResultError(where, f"{precision!r} is not a known precision")
        verdict = _object(verdict, where)
        _get(verdict, "available", bool, where)
        _text(verdict, "reason", where, max_len=MAX_TEXT)

    seen: set[tuple[str, str, str, str]] = set()
    for i, cell in enumerate(_get(doc, "cells", list, "$")):
        where = f"$.cells[{i}]"
        cell = _object(cell, where)
        mode = _text(cell, "mode", where)
        precision = _text(cell, "precision", where)
        op = _text(cell, "op", where)
        pass_ = _text(cell, "pass", where)
        if mode not in MODES:
            raise ResultError(f"{where}.mode", f"{mode!r} is not one of {', '.join(MODES)}")
        if precision not in PRECISIONS:
            raise ResultError(f"{where}.precision", f"{precision!r} is not a known precision")
        found = gemms.get((op, pass_))
        if found is None:
            raise ResultError(where, f"GEMM {op}/{pass_} is not part of the question")
        _same_shape(cell, found, where, required=False)
        _outcome(cell, found, where, version)
        key = (mode, precision, op, pass_)
        if key in seen:
            raise ResultError(where, f"duplicate cell {'/'.join(key)}")
        seen.add(key)

    peers_seen: set[tuple[str, str, str]] = set()
    for i, peer in enumerate(_get(doc, "peers", list, "$")):
        where = f"$.peers[{i}]"
        peer = _object(peer, where)
        backend = _text(peer, "backend", where, nonempty=True)
        op = _text(peer, "op", where)
        pass_ = _text(peer, "pass", where)
        _optional_text(peer, "precision", where)
        peer_kind = _optional_text(peer, "kind", where) or "gemm"
        if peer_kind not in PEER_KINDS:
            raise ResultError(f"{where}.kind", f"{peer_kind!r} is not one of {', '.join(PEER_KINDS)}")
        if peer_kind == "linear":
            # A Linear peer's rows time the op's whole training step in two regions, on its Fprop shape.
            if pass_ not in LINEAR_PEER_REGIONS:
                raise ResultError(f"{where}.pass", f"{pass_!r} is not one of {', '.join(LINEAR_PEER_REGIONS)} "
                                                   "(a linear peer's regions)")
            found = gemms.get((op, "fprop"))
        else:
            found = gemms.get((op, pass_))
        if found is None:
            raise ResultError(where, f"GEMM {op}/{pass_} is not part of the question")
        _same_shape(peer, found, where, required=True)
        # The backward region runs two GEMMs of the Fprop's FLOPs (Dgrad and Wgrad).
        timed = dataclasses.replace(found, m=found.m * 2) if pass_ == "backward" else found
        _outcome(peer, timed, where, version)
        peer_key = (backend, op, pass_)
        if peer_key in peers_seen:
            raise ResultError(where, f"duplicate peer {'/'.join(peer_key)}")
        peers_seen.add(peer_key)

    _peaks(doc, gemms)
    if "layer" in doc:
        _layer_block(doc["layer"], version)
    if "plan" in doc:  # a precision plan and its measured steps (gemm_bench.report.precision_plan)
        try:
            validate_plan_block(doc["plan"])
        except StepError as exc:
            raise ResultError(exc.where, exc.problem) from None
    if "energy" in doc:  # each recipe's step energy (gemm_bench.results.energy)
        try:
            validate_energy_block(doc["energy"])
        except StepError as exc:
            raise ResultError(exc.where, exc.problem) from None
    if "accuracy" in doc or "accuracy_method" in doc:
        _accuracy_block(doc, gemms, version)
    if "model_step" in doc:
        try:
            validate_model_step(doc["model_step"])
        except ModelStepSchemaError as exc:
            raise ResultError(exc.where, exc.problem) from None
    if "groups" in doc:
        _groups_block(doc, doc["groups"])
    return doc


def _groups_block(doc: dict[str, Any], groups: Any) -> None:
    """``groups``: per timed group, its clock/power samples and events-vs-profiler cross-check
    (:mod:`gemm_bench.measure.telemetry`). Every number a report prints from it is checked for sense:
    a minimum clock above the median, a power median above the maximum, a deviation that is not
    the ratios' own, ratios of regions the cross-check did not time, or a group of no run of the
    document is refused."""
    if not isinstance(groups, list):
        raise ResultError("$.groups", f"must be a list, got {_describe(groups)}")
    runs = {cell_run_id(doc, c) for block in ("cells", "peers", *RUN_BLOCKS) for c in doc.get(block, [])
            if isinstance(c, dict)}
    runs.add(str(doc.get("run_id", "")))
    if isinstance(doc.get("model_step"), dict):
        runs.add(str(doc["model_step"].get("run_id", "")))
    seen: set[tuple[str, str, str]] = set()
    for i, group in enumerate(groups):
        where = f"$.groups[{i}]"
        group = _object(group, where)
        label = _text(group, "label", where)
        _run_id(group, where, required=True)
        if group["run_id"] not in runs:
            raise ResultError(f"{where}.run_id", f"{group['run_id']!r} is the run of no cell of this document")
        mode = _optional_text(group, "mode", where) or ""
        if mode and mode not in ALL_MODES:
            raise ResultError(f"{where}.mode", f"{mode!r} is not one of {', '.join(ALL_MODES)}")
        key = (group["run_id"], mode, label)
        if key in seen:
            raise ResultError(where, f"duplicate group {label!r} of run {group['run_id']}")
        seen.add(key)
        _integer(group, "rounds", where, 1, 1_000_000)
        members = _get(group, "members", list, where)
        if not all(isinstance(m, str) for m in members):
            raise ResultError(f"{where}.members", "must be a list of strings")
        _get(group, "clock_low", bool, where, required=False)
        timed = _optional_text(group, "timed", where)
        if timed is not None and timed not in GROUP_TIMINGS:
            raise ResultError(f"{where}.timed", f"{timed!r} is not one of {', '.join(GROUP_TIMINGS)}")
        _optional_integer(group, "eager_rounds", where, 1, 1_000_000)
        _get(group, "converged", bool, where, required=False)
        _number(group, "wall_s", where, 0.0, 1e6, required=False)  # the group's wall seconds (refresh time)
        setup = _get(group, "setup_s", dict, where, required=False) or {}
        for key in setup:  # wall seconds each competitor took to build and probe (where refresh time goes)
            _number(setup, key, f"{where}.setup_s", 0.0, 1e6)
        clock = _get(group, "clock", dict, where, required=False)
        if clock is not None:
            _clock_block(clock, f"{where}.clock")
        check = _get(group, "cross_check", dict, where, required=False)
        if check is not None:
            _cross_check_block(check, f"{where}.cross_check")


def _clock_block(clock: dict[str, Any], where: str) -> None:
    samples = _integer(clock, "samples", where, 0, 100_000_000)
    if not samples:
        _text(clock, "reason", where, max_len=MAX_TEXT)
        return
    median = _number(clock, "sm_clock_mhz_median", where, 1.0, 10_000.0)
    low = _number(clock, "sm_clock_mhz_min", where, 1.0, 10_000.0)
    if low is not None and median is not None and low > median:
        raise ResultError(f"{where}.sm_clock_mhz_min", f"{low:g} is above the median {median:g}")
    if ("power_w_median" in clock) != ("power_w_max" in clock):
        raise ResultError(where, "has one of power_w_median and power_w_max without the other")
    if "power_w_median" in clock:
        power = _number(clock, "power_w_median", where, 0.0, 10_000.0)
        peak = _number(clock, "power_w_max", where, 0.0, 10_000.0)
        if power is not None and peak is not None and power > peak:
            raise ResultError(f"{where}.power_w_median", f"{power:g} is above the maximum {peak:g}")
        if ("power_w_q1" in clock) != ("power_w_q3" in clock):
            raise ResultError(where, "has one of power_w_q1 and power_w_q3 without the other")
        if "power_w_q1" in clock:  # the samples' quartiles (results before them have none)
            q1 = _number(clock, "power_w_q1", where, 0.0, 10_000.0)
            q3 = _number(clock, "power_w_q3", where, 0.0, 10_000.0)
            if q1 is not None and q3 is not None and power is not None and peak is not None \
                    and not q1 <= power <= q3 <= peak:
                raise ResultError(f"{where}.power_w_q1", f"quartiles {q1:g}-{q3:g} do not hold the median "
                                  f"{power:g} below the maximum {peak:g}")
    _optional_text(clock, "power_source", where)


def _cross_check_block(check: dict[str, Any], where: str) -> None:
    _integer(check, "rounds", where, 0, 1_000_000)
    blocks = {}
    for block in ("ratios", "stored_ratios", "kernel_ms"):
        values = _get(check, block, dict, where, required=False) or {}
        for key in values:
            _number(values, key, f"{where}.{block}", 0.0, 1e6, low_open=True)
        blocks[block] = values
    ratios = blocks["ratios"]
    if "reason" in check:
        _text(check, "reason", where, max_len=MAX_TEXT)
        if ratios:
            raise ResultError(where, "has both a reason (no cross-check) and ratios")
    for block in ("stored_ratios", "kernel_ms"):
        extra = sorted(set(blocks[block]) - set(ratios))
        if extra:
            raise ResultError(f"{where}.{block}", f"names regions the cross-check has no ratio for: {extra[:3]}")
    if ratios:
        stated = _number(check, "max_deviation", where, 0.0, 1e6)
        actual = max(abs(float(r) - 1) for r in ratios.values())
        if stated is not None and abs(stated - actual) > 1e-4:
            raise ResultError(f"{where}.max_deviation", f"is {stated:g}, the ratios' largest deviation is {actual:.5f}")


def _peaks(doc: dict[str, Any], gemms: dict[tuple[str, str], GemmShape]) -> None:
    """No measured cell above 100% of its device's dense peak (:mod:`gemm_bench.question.hardware`).

    Such a cell can only come from a wrong FLOP count or a timer that missed work. Devices and
    formats without a published peak are not checked: there is nothing to hold them to.
    """
    device = doc["device"]["name"]
    for i, cell in enumerate(doc["cells"]):
        if cell["status"] != "measured":
            continue
        gemm = gemms[(cell["op"], cell["pass"])]
        pct = above_peak(device, cell["precision"], gemm.flops, cell["ms"])
        if pct is not None:
            tflops = achieved_tflops(gemm.flops, cell["ms"])
            raise ResultError(
                f"$.cells[{i}].ms",
                f"{cell['ms']!r} ms for {cell['mode']}/{cell['precision']} {gemm.op}/{gemm.pass_} is "
                f"{tflops:.1f} TFLOP/s, {pct:.0f}% of the dense {precision_format(cell['precision']).upper()} "
                f"peak of {device} ({peak_tflops(device, cell['precision']):g} TFLOP/s): the FLOP count or "
                "the timing is wrong",
            )


def _version_run_id(cell: dict[str, Any], where: str, version: int) -> None:
    if version == 1:
        if "run_id" in cell:
            raise ResultError(f"{where}.run_id", "is a schema version 2 field, in a version 1 document")
    else:
        _run_id(cell, where, required=False)


def _layer_block(cells: Any, version: int) -> None:
    """``doc["layer"]``: :func:`~gemm_bench.results.step_schema.validate_layer_cells`, then the ranges GEMM cells
    have (plausible times, a spread that is ordered, a median equal to the cell's time)."""
    try:
        validate_layer_cells(cells)
    except StepError as exc:
        raise ResultError(exc.where, exc.problem) from None
    for i, cell in enumerate(cells):
        where = f"$.layer[{i}]"
        if cell["status"] == "measured":
            ms = _number(cell, "ms", where, MIN_MS, MAX_MS)
            assert ms is not None
            _stats(cell, ms, where)
            timing_extras(cell, where)
        else:
            _text(cell, "reason", where, max_len=MAX_TEXT)
        _optional_text(cell, "measured_at", where)
        _version_run_id(cell, where, version)


#: SQNR bounds: float64 arithmetic cannot resolve more than ~330 dB, and below -200 dB the output
#: is noise 10^10 times the signal; outside these a value is a corrupt file, not a measurement.
MIN_SQNR_DB = -200.0
MAX_SQNR_DB = 400.0


def _accuracy_block(doc: dict[str, Any], gemms: dict[tuple[str, str], GemmShape], version: int) -> None:
    """``doc["accuracy"]`` (:func:`~gemm_bench.results.accuracy_schema.validate_accuracy_cells`) and its method.

    A file with measured SQNRs must say how they were taken (``accuracy_method``, written by the
    runner from :func:`gemm_bench.measure.accuracy.accuracy_method`).
    """
    cells = doc.get("accuracy", [])
    try:
        validate_accuracy_cells(cells, gemms.keys())
    except AccuracyError as exc:
        raise ResultError(exc.where, exc.problem) from None
    for i, cell in enumerate(cells):
        where = f"$.accuracy[{i}]"
        if cell["status"] == "measured":
            _number(cell, "sqnr_db", where, MIN_SQNR_DB, MAX_SQNR_DB)
        else:
            _text(cell, "reason", where, max_len=MAX_TEXT)
        _optional_text(cell, "measured_at", where)
        _version_run_id(cell, where, version)
    method = _get(doc, "accuracy_method", dict, "$", required=False)
    if method is None and any(c["status"] == "measured" for c in cells):
        raise ResultError("$.accuracy_method", "is missing: measured SQNRs need the method that took them")


# ------------------------------------------------------------------------------- building
def _layout_block(question: dict[str, Any]) -> None:
    """A stored question's layout (optional): the fields of a valid ``ParallelLayout``, and its note."""
    layout = _get(question, "layout", dict, "$.question", required=False)
    if layout is None:
        return
    from gemm_bench.question.config import ConfigError
    from gemm_bench.question.layout import ParallelLayout

    try:
        ParallelLayout(**layout)
    except (TypeError, ValueError, ConfigError) as exc:
        raise ResultError("$.question.layout", f"is not a parallel layout: {exc}") from None
    _text(question, "layout_note", "$.question", max_len=MAX_TEXT)


def new_document(
    *,
    kind: str,
    gemms: list[GemmShape],
    num_layers: int,
    config: dict[str, Any] | None,
    device: dict[str, Any],
    provenance: dict[str, Any],
    notes: list[str] | None = None,
    run_id: str | None = None,
    layout: dict[str, Any] | None = None,
    layout_note: str = "",
) -> dict[str, Any]:
    """An empty (no cells yet) result document for one run of one question on one device.

    ``run_id`` names the run (a fresh :func:`new_run_id` when not given); cells and peers added
    without their own ``run_id`` belong to it. ``layout``: the question's parallel layout (its
    fields, as ``Question.to_dict`` writes them) and ``layout_note`` where it came from, kept with
    the result (not hashed: it changes nothing one GPU measures) so that a reader of the result
    knows the run it was asked for, not a layout assumed.
    """
    return {
        "schema_version": SCHEMA_VERSION,
        "method_version": METHOD_VERSION,
        "run_id": run_id or new_run_id(),
        "question_hash": question_hash(gemms, config),
        "question": {
            "kind": kind,
            "gemms": [g.to_dict() for g in gemms],
            "num_layers": num_layers,
            "config": config,
            **({"layout": dict(layout), "layout_note": layout_note} if layout is not None else {}),
        },
        "device": device,
        "provenance": provenance,
        "notes": notes or [],
        "cells": [],
        "peers": [],
    }


def cached_precisions(doc: dict[str, Any]) -> list[str]:
    """The precisions a valid document holds cells of (GEMM or layer step), in the registry's order."""
    return in_registry_order(c["precision"] for c in [*doc["cells"], *doc.get("layer", [])])


def in_registry_order(precisions: Iterable[str]) -> list[str]:
    """The known precision ids among ``precisions``, once each, in the registry's order: what
    :func:`cached_precisions` and the typed result's
    :meth:`~gemm_bench.results.typed.Result.cached_precisions` list."""
    held = set(precisions)
    return [p for p in PRECISION_IDS if p in held]


def unstored_reason(doc: dict[str, Any], mode: str, precision: str) -> str | None:
    """Why a cell a valid document does not hold is *unsupported* rather than missing, or None.

    The registry's reason where the precision has no such mode, else the device's recorded
    support verdict (``doc["support"]``) where it says unavailable.
    """
    verdict = (doc.get("support") or {}).get(precision)
    return support_reason(mode, precision, None if verdict is None else (bool(verdict["available"]),
                                                                         str(verdict["reason"] or "")),
                          str(doc["device"]["name"]))


def support_reason(mode: str, precision: str, verdict: tuple[bool, str] | None, device: str) -> str | None:
    """:func:`unstored_reason` from its parts: TE's recorded ``verdict`` on the precision (available,
    reason; None where none is stored) and the device's name. The typed result asks it too
    (:meth:`~gemm_bench.results.typed.Result.unstored_reason`)."""
    info = PRECISIONS.get(precision)
    if info is not None and not info.has_mode(mode) and mode in info.absent_modes:
        return info.absent_modes[mode]
    if verdict is not None and not verdict[0]:
        name = info.display if info else precision
        return verdict[1] or f"{name} is not supported on {device}"
    return None


def missing_cells(doc: dict[str, Any], gemms: Iterable[GemmShape], modes: Iterable[str],
                  precisions: Iterable[str]) -> list[tuple[str, str, GemmShape]]:
    """The (mode, precision, GEMM) cells asked of a valid document that it neither holds nor
    records as unsupported (:func:`unstored_reason`): what measuring would add.

    Only the per-GEMM modes among ``modes`` have cells; no precisions means the document's own
    (:func:`cached_precisions`). An unknown mode or precision is a :class:`ValueError`.
    """
    asked_modes = list(dict.fromkeys(modes))
    asked = list(dict.fromkeys(precisions)) or cached_precisions(doc)
    unknown = [m for m in asked_modes if m not in ALL_MODES] + [p for p in asked if p not in PRECISIONS]
    if unknown:
        raise ValueError(f"unknown mode or precision: {', '.join(map(repr, unknown))}")
    held = {(c["mode"], c["precision"], c["op"], c["pass"]) for c in doc["cells"]}
    return [(m, p, g) for m in gemm_modes(asked_modes) for p in asked for g in dict.fromkeys(gemms)
            if (m, p, g.op, g.pass_) not in held and unstored_reason(doc, m, p) is None]


def _peer_mode(peer: dict[str, Any]) -> str:
    """The mode whose run times a peer row: ``autocast`` for Linear peers, else ``prequant``."""
    return "autocast" if peer.get("kind") == "linear" else "prequant"


_SAME_STACK = ("torch", "transformer_engine", "cuda", "driver")


def merge_documents(old: dict[str, Any], new: dict[str, Any]) -> dict[str, Any]:
    """Fold a fresh run into an older document of the same question and device.

    One mode is one run, so a table (one mode) can never mix runs: for every mode the new run
    has cells of, the new run's cells replace *all* old cells of that mode, even precisions the
    new run did not measure (the measuring side re-measures the union of cached and requested
    precisions, so nothing a page shows is lost). Old cells of other modes are kept only when
    both runs used the same method version and software stack (torch, TE, CUDA, driver), so the
    one provenance block stays true of every cell. GEMM peers are timed in the pre-quantized run
    and Linear peers (``kind: linear``) in the autocast run: a new run with peers of a kind, or
    cells of that kind's mode, replaces every old peer of that kind; otherwise old peers are kept
    under the same conditions as old cells. Layer-step cells (``doc["layer"]``) and SQNR
    cells (``doc["accuracy"]``) merge the same way, per mode of their own block; the whole blocks
    (:data:`WHOLE_BLOCKS`: the model step, the precision plan, the energy) are the new run's where it
    has one and the cached run's where it has none, so nothing is lost that the new run did not
    re-measure.

    Both documents must be valid. The result is a valid current-schema document whose top-level
    ``run_id`` is the new run's; every kept old cell and peer has its own run id written out.
    """
    new = stamp_run_ids(new) if new.get("schema_version") == 1 else copy.deepcopy(new)
    if old.get("question_hash") != new.get("question_hash") or old.get("method_version") != new.get("method_version"):
        return new
    if any(old["provenance"].get(k) != new["provenance"].get(k) for k in _SAME_STACK):
        return new
    old = stamp_run_ids(old)
    new_modes = {c["mode"] for c in new["cells"]}
    merged = dict(new)
    merged["cells"] = [c for c in old["cells"] if c["mode"] not in new_modes] + new["cells"]
    # GEMM peers are timed with the pre-quantized GEMMs, Linear peers with autocast: per kind,
    # the run that timed that mode (or that kind's peers) replaces the old rows.
    replaced = {_peer_mode(p) for p in new["peers"]} | new_modes
    merged["peers"] = [p for p in old["peers"] if _peer_mode(p) not in replaced] + new["peers"]
    if "support" not in merged and "support" in old:
        merged["support"] = old["support"]
    for block in RUN_BLOCKS:  # the layer step and the SQNRs: per mode, the newest run's cells
        if block in old or block in new:
            replaced = {c["mode"] for c in new.get(block, [])}
            merged[block] = [c for c in old.get(block, []) if c["mode"] not in replaced] + new.get(block, [])
    for block in WHOLE_BLOCKS:  # one block, one run: the newest run's that has one, else the cached one
        if block not in new and block in old:
            merged[block] = old[block]
    if not new.get("accuracy") and "accuracy_method" in old:
        merged["accuracy_method"] = old["accuracy_method"]
    if "groups" in old or "groups" in new:
        # An old group stays only while the numbers it describes do: its mode not re-measured by
        # the new run (as for cells), and its run still the run of some kept cell.
        kept = {cell_run_id(merged, c) for block in ("cells", "peers", *RUN_BLOCKS) for c in merged.get(block, [])}
        remeasured = new_modes | {c["mode"] for c in new.get("layer", [])}
        merged["groups"] = [g for g in old.get("groups", [])
                            if g.get("run_id") in kept and g.get("run_id") != new.get("run_id")
                            and g.get("mode") and g["mode"] not in remeasured] + new.get("groups", [])
    return merged
