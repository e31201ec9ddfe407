"""Studies: measured answers that are not one question's GEMMs.

A *study* answers a question the site asks once per GPU rather than once per model: the loss of a
small GPT trained per recipe (loss parity), or each recipe's SQNR against the dynamic range of its
input. It is measured on a GPU box like every result and stored beside them, one file per study per
device, ``<cache>/studies/<study>--<device slug>.json``, with the same provenance (device, software
stack, commit, date, method) and its own method version, so a change in how a study measures
re-measures that study only.

Pure: this module reads, validates and writes documents; measuring lives in the study's own module
under :mod:`gemm_bench.measure` (named by :attr:`Study.measure`, imported only on a GPU box).

A document::

    {"kind": "study", "schema_version": 1, "study": "loss-parity", "method_version": "1",
     "device": {"name": "NVIDIA H100 80GB HBM3", ...}, "provenance": {"torch": ..., "method": {...}},
     "data": {...}}          # what the study's own validator accepts
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import importlib
import math
import os
import re
import sys
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from gemm_bench.question.devices import device_slug
from gemm_bench.results.cache import CacheError, _read_bytes, age_staleness, dumps, parse_json, write_atomic

STUDY_SCHEMA_VERSION = 1
#: The studies' folder inside the result cache (question results live in the cache's top level).
SUBDIR = "studies"
_NAME = re.compile(r"^[a-z][a-z0-9-]{0,39}$")
#: Provenance fields every study document holds, as every question result does.
PROVENANCE_FIELDS: tuple[str, ...] = ("torch", "transformer_engine", "cuda", "driver", "commit", "date")
#: The largest magnitude any number of a study may have. Far above every real quantity (a loss, a
#: token count, an amax ratio), and far enough below the float range that sums, differences and
#: scaled figure coordinates of such numbers stay finite: a schema-valid 1e308 made a figure of
#: ``nan`` coordinates.
MAX_MAGNITUDE = 1e15
#: SQNRs in dB are bounded tighter: FP32 itself reaches about 150 dB, so no comparison of two
#: computed outputs is outside +-1000 dB (and -1e308 dB is not a measurement).
MAX_DECIBELS = 1000.0


class StudyError(ValueError):
    """A study document (or part of one) that is not valid; ``where`` is a JSON path."""

    def __init__(self, where: str, problem: str) -> None:
        self.where = where
        self.problem = problem
        super().__init__(f"{where}: {problem}")


@dataclasses.dataclass(frozen=True)
class Study:
    """One kind of study, as :func:`register_schema` builds and registers it.

    ``validate_data`` raises :class:`StudyError` for a ``data`` block this study cannot render;
    ``measure`` names ``"module:function"``, a function of no arguments (or, where
    :attr:`reads_cache`, of the keyword ``cache_dir``) run on a GPU box that returns ``(data,
    method)``: the data block and what the method was (stored in ``provenance.method``)."""

    name: str
    title: str
    method_version: str
    validate_data: Callable[[Any], None]
    measure: str
    #: GPUs of one box the study needs: the refresh measures studies on one GPU, so a study of
    #: several (tp-comm) is measured by ``gemm-bench study NAME`` on such a box and never planned there.
    min_gpus: int = 1
    #: Whether ``measure`` is given the cache the study will be stored in (``cache_dir=``): the
    #: layout search starts each search from the answer this GPU's stored study found there.
    reads_cache: bool = False


REGISTRY: dict[str, Study] = {}
#: The modules whose import registers the project's studies (pure, in this package). Read by
#: :func:`get` before it looks a name up, so a reader (``gemm-bench merge``, ``compare``) knows every
#: study whichever modules its process happened to import first.
STUDY_MODULES: tuple[str, ...] = (
    "gemm_bench.results.loss_parity_schema",
    "gemm_bench.results.dynamic_range_schema",
    "gemm_bench.results.tp_comm_schema",
    "gemm_bench.results.layout_search_schema",
)


def register_schema(name: str, *, title: str, method_version: str, measure: str, fields: Sequence[str],
                    optional: Sequence[str] = (), check: Callable[[dict[str, Any]], None],
                    min_gpus: int = 1, reads_cache: bool = False) -> Study:
    """Register a study and return it: the one way a study schema module declares its study.

    Its :attr:`Study.validate_data` is the door every ``data`` block passes (:func:`validate`, the
    schema module's ``validate_data``, a converter's check of what it is about to store): the block
    must be an object holding every key of ``fields`` and no key but those and ``optional`` (a key
    that no reader knows is refused, never silently carried), then ``check`` checks the values. So a
    schema cannot forget the object and key checks, and ``check`` reads a dict whose keys are known.

    A new study's schema module, then (named in :data:`STUDY_MODULES`, the one list the readers, the
    refresh and ``gemm-bench study`` read)::

        NAME = "my-study"
        METHOD_VERSION = "1"

        def _check_data(data: dict[str, Any]) -> None:
            number(data["seconds"], "$.data.seconds", minimum=0.0)  # the field checks below

        STUDY = register_schema(NAME, title="...", method_version=METHOD_VERSION, fields=("seconds",),
                                measure="gemm_bench.measure.my_study:measure", check=_check_data)
        validate_data = STUDY.validate_data
    """

    def validate_data(data: Any) -> None:
        block = json_object(data, "$.data")
        keys(block, "$.data", fields, optional)
        check(block)

    if not _NAME.match(name):
        raise ValueError(f"study name {name!r} is not lower-case letters, digits and dashes")
    study = Study(name=name, title=title, method_version=method_version, validate_data=validate_data,
                  measure=measure, min_gpus=min_gpus, reads_cache=reads_cache)
    REGISTRY[name] = study
    return study


def load_known() -> None:
    """Import every module of :data:`STUDY_MODULES` (each registers its study)."""
    for module in STUDY_MODULES:
        if module not in sys.modules:
            importlib.import_module(module)


def get(name: str) -> Study:
    load_known()
    try:
        return REGISTRY[name]
    except KeyError:
        raise StudyError("study", f"{name!r} is not a study; known: {', '.join(sorted(REGISTRY)) or 'none'}") from None


def file_name(study: str, device_name: str) -> str:
    return f"{study}--{device_slug(device_name)}.json"


def study_dir(cache_dir: str | Path) -> Path:
    return Path(cache_dir) / SUBDIR


def study_path(cache_dir: str | Path, study: str, device_name: str) -> Path:
    """Where one GPU's file of ``study`` lives in a cache folder (it may not exist): the summary, a
    page's roles and ``gemm-bench report`` look for the loss-parity study that breaks ties there."""
    return study_dir(cache_dir) / file_name(study, device_name)


def build_document(study: Study, data: dict[str, Any], method: dict[str, Any], device: dict[str, Any],
                   provenance: Mapping[str, Any]) -> dict[str, Any]:
    """A study document from a measurement (``device`` and ``provenance`` as a question result's)."""
    doc = {
        "kind": "study",
        "schema_version": STUDY_SCHEMA_VERSION,
        "study": study.name,
        "method_version": study.method_version,
        "device": dict(device),
        "provenance": {**{k: v for k, v in provenance.items() if k != "method"}, "method": dict(method)},
        "data": data,
    }
    validate(doc)
    return doc


# ------------------------------------------------------------------------------ field checks
# The checks every study's validator uses: each takes a JSON value and ``where``, its JSON path, and
# returns the value or raises :class:`StudyError` at that path ("<where>: must be ..., got ...").


def text(value: Any, where: str) -> str:
    """``value`` as non-empty text."""
    if not isinstance(value, str) or not value.strip():
        raise StudyError(where, f"must be non-empty text, got {value!r}"[:200])
    return value


def number(value: Any, where: str, *, minimum: float | None = None, positive: bool = False,
           limit: float = MAX_MAGNITUDE) -> float:
    """A finite JSON number (never a bool) of magnitude at most ``limit`` (:data:`MAX_MAGNITUDE`),
    at least ``minimum`` when given, above 0 if ``positive``."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise StudyError(where, f"must be a finite number, got {value!r}"[:200])
    if abs(value) > limit:
        raise StudyError(where, f"must be between {-limit:g} and {limit:g}, got {value!r}"[:200])
    if positive and value <= 0:
        raise StudyError(where, f"must be positive, got {value!r}")
    if minimum is not None and value < minimum:
        raise StudyError(where, f"must be at least {minimum:g}, got {value!r}")
    return float(value)


def decibels(value: Any, where: str) -> float:
    """An SQNR in dB: a finite number within +-:data:`MAX_DECIBELS` (it may be negative: noise above
    the signal)."""
    return number(value, where, limit=MAX_DECIBELS)


def integer(value: Any, where: str, *, minimum: int, maximum: int | None = None) -> int:
    """A JSON whole number (never a bool) from ``minimum`` to ``maximum`` (when given), inclusive."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise StudyError(where, f"must be a whole number, got {value!r}"[:200])
    if value < minimum or (maximum is not None and value > maximum):
        bound = f"between {minimum} and {maximum}" if maximum is not None else f"at least {minimum}"
        raise StudyError(where, f"must be {bound}, got {value}")
    return value


def choice(value: Any, where: str, allowed: Sequence[str]) -> str:
    """One of the ``allowed`` strings."""
    if not isinstance(value, str) or value not in allowed:
        raise StudyError(where, f"must be one of {', '.join(allowed)}, got {value!r}"[:200])
    return value


def json_object(value: Any, where: str) -> dict[str, Any]:
    """A JSON object."""
    if not isinstance(value, dict):
        raise StudyError(where, f"must be an object, got {type(value).__name__}")
    return value


def json_list(value: Any, where: str, *, non_empty: bool = False) -> list[Any]:
    """A JSON list (with at least one item if ``non_empty``)."""
    if not isinstance(value, list) or (non_empty and not value):
        kind = "an empty list" if isinstance(value, list) else type(value).__name__
        raise StudyError(where, f"must be a {'non-empty ' if non_empty else ''}list, got {kind}")
    return value


def field(block: Mapping[str, Any], key: str, where: str) -> Any:
    """``block[key]`` (``block`` is the object at ``where``)."""
    if key not in block:
        raise StudyError(f"{where}.{key}", "is missing")
    return block[key]


def keys(block: Mapping[str, Any], where: str, required: Sequence[str], optional: Sequence[str] = ()) -> None:
    """That the object at ``where`` holds every ``required`` key and no key but those and ``optional``."""
    for key in required:
        field(block, key, where)
    extra = sorted(k for k in block if k not in required and k not in optional)
    if extra:
        raise StudyError(f"{where}.{extra[0]}", f"is not a field here (known: {', '.join((*required, *optional))})")


def _text(doc: Mapping[str, Any], key: str, where: str) -> str:
    return text(doc.get(key), f"{where}.{key}")


def validate(doc: Any) -> None:
    """Raise :class:`StudyError` unless ``doc`` is a valid study document of a registered study."""
    json_object(doc, "$")
    if doc.get("kind") != "study":
        raise StudyError("$.kind", f"must be 'study', got {doc.get('kind')!r}"[:200])
    if doc.get("schema_version") != STUDY_SCHEMA_VERSION:
        raise StudyError("$.schema_version", f"must be {STUDY_SCHEMA_VERSION}, got {doc.get('schema_version')!r}"[:200])
    study = get(_text(doc, "study", "$"))
    _text(doc, "method_version", "$")
    _text(json_object(doc.get("device"), "$.device"), "name", "$.device")
    provenance = json_object(doc.get("provenance"), "$.provenance")
    for key in PROVENANCE_FIELDS:
        _text(provenance, key, "$.provenance")
    json_object(provenance.get("method"), "$.provenance.method")
    study.validate_data(json_object(doc.get("data"), "$.data"))


def read_study(path: Path) -> dict[str, Any]:
    """Load and validate one study file, or raise :class:`CacheError` (its path first) saying why not."""
    path = Path(path)
    doc = parse_json(path, _read_bytes(path))
    try:
        validate(doc)
    except StudyError as exc:
        raise CacheError(path, f"does not match the study schema: {exc}") from None
    expected = file_name(doc["study"], doc["device"]["name"])
    if path.name != expected:
        raise CacheError(path, f"holds study {doc['study']} on {doc['device']['name']!r}, which belongs in {expected}")
    return doc


def holds_study(path: Path) -> bool:
    """Whether a file holds a study document (``"kind": "study"``), valid or not; anything unreadable
    does not (a result reader then says why it cannot be used)."""
    try:
        doc = parse_json(path, _read_bytes(path))
    except CacheError:
        return False
    return isinstance(doc, dict) and doc.get("kind") == "study"


def study_in(path: Path) -> dict[str, Any] | None:
    """The valid study document ``path`` holds, whatever its name (a downloaded artifact), or None
    when it holds no study; a study that is not valid is a :class:`CacheError` saying why (never a
    result reader's "$.question: is missing")."""
    if not holds_study(path):
        return None
    doc = parse_json(path, _read_bytes(path))
    try:
        validate(doc)
    except StudyError as exc:
        raise CacheError(path, f"holds a study that does not match the study schema: {exc}") from None
    return dict(doc)


def read_studies(cache_dir: str | Path, name: str) -> tuple[list[dict[str, Any]], list[CacheError]]:
    """Every valid document of study ``name`` in the cache (sorted by device), and one error per bad file."""
    docs, errors = [], []
    folder = study_dir(cache_dir)
    if folder.is_symlink():
        # As a cache file that is a link is never read: a linked folder could point anywhere
        # (outside the source tree, at another project's files), and the site would publish it.
        return [], [CacheError(folder, f"is a symbolic link (to {_link_target(folder)}); study files are read only "
                                       "from a real folder inside the cache: replace the link with the folder")]
    if not folder.is_dir():
        return [], []
    for path in sorted(folder.glob(f"{name}--*.json")):
        try:
            doc = read_study(path)
        except CacheError as exc:
            errors.append(exc)
            continue
        if doc["study"] != name:
            errors.append(CacheError(path, f"holds study {doc['study']!r}, not {name!r}"))
            continue
        docs.append(doc)
    return docs, errors


@dataclasses.dataclass(frozen=True)
class StoredStudy:
    """One study's files in a cache as one GPU kind sees them (:func:`stored_study`).

    ``document`` is this GPU kind's valid document and ``unreadable`` why its file cannot be used
    (None for each when it has none); ``documents`` are the valid documents of every GPU (a plan
    estimates a study's time from another GPU's run)."""

    document: dict[str, Any] | None
    unreadable: CacheError | None
    documents: list[dict[str, Any]]


def stored_study(cache_dir: str | Path, name: str, device_name: str) -> StoredStudy:
    """Study ``name`` as the cache holds it for the GPU named ``device_name``: the one lookup of "this
    GPU kind's stored study" (``gemm-bench study`` asks it before replacing a wider run, the refresh's
    plan before measuring one). A GPU kind's file is the one :func:`file_name` gives its device name
    (GPU names of one slug are one kind), and :func:`read_study` holds each document to that name."""
    documents, errors = read_studies(cache_dir, name)
    own = file_name(name, device_name)
    return StoredStudy(
        document=next((d for d in documents if file_name(name, d["device"]["name"]) == own), None),
        unreadable=next((e for e in errors if e.path.name == own), None),
        documents=documents)


def _link_target(path: Path) -> str:
    try:
        return os.readlink(path)
    except OSError as exc:
        return f"an unreadable target: {exc.strerror or exc}"


def write_study(cache_dir: str | Path, doc: dict[str, Any]) -> Path:
    """Validate and store atomically (a reader never sees half a file); returns the path."""
    validate(doc)
    path = study_dir(cache_dir) / file_name(doc["study"], doc["device"]["name"])
    write_atomic(path, dumps(doc))
    return path


def staleness(doc: Mapping[str, Any] | None, local: Mapping[str, str] | None, fields: Sequence[str], *,
              max_age_days: float | None = None, now: dt.datetime | None = None) -> str | None:
    """Why a study should be measured again on a box running ``local``, or None when it is fresh.

    ``fields`` are the stack rule's (:data:`gemm_bench.results.stack.STACK_FIELDS`); ``method``
    compares the study's own method version with the registered one. ``max_age_days``
    (``gemm_benchmark_max_age_days``, ``--max-age-days``) ages a study as it ages a question's
    result (:func:`gemm_bench.results.cache.age_staleness`, the one rule)."""
    if doc is None:
        return "not measured on this device yet"
    study = get(str(doc.get("study")))
    if "method" in fields and doc.get("method_version") != study.method_version:
        return f"measured with study method version {doc.get('method_version')!r}, current is {study.method_version}"
    aged = age_staleness(doc.get("provenance", {}).get("date"), max_age_days, now)
    if aged:
        return aged
    if local is None:
        return None
    provenance = doc.get("provenance", {})
    reasons = [f"{key} {provenance.get(key)} -> {local[key]}" for key in fields
               if key != "method" and local.get(key, "unknown") not in ("unknown", str(provenance.get(key)))]
    return "measured with another software stack: " + ", ".join(reasons) if reasons else None
