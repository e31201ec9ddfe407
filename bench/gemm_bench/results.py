"""The result document: what one measurement run of one question on one device produced.

A *question* is the set of GEMMs to measure (derived from a model config, manual shapes or a
sweep), independent of how it was spelled: a preset and the same numbers written out, options in
any order, give the same GEMMs and so the same :func:`question_hash`. Precisions and modes are
not part of the question: they select cells inside the answer, so a page that asks for a subset
of what one run measured is answered by that run.

Documents are plain JSON with a versioned schema, validated on read by :func:`validate`
(hand-written rather than jsonschema so the error names the exact field and the core needs no
dependency). A document that fails validation is never used in part.
"""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Iterable
from typing import Any

from gemm_bench.devices import device_slug
from gemm_bench.precisions import MODES, PRECISIONS
from gemm_bench.shapes import PASSES, GemmShape

SCHEMA_VERSION = 1

#: Bumped whenever what is timed, or how, changes: results of another method version are stale.
METHOD_VERSION = "1"

STATUSES: tuple[str, ...] = ("measured", "unsupported", "failed")


class ResultError(ValueError):
    """A result document that does not satisfy the schema; ``where`` is the JSON path."""

    def __init__(self, where: str, problem: str) -> None:
        self.where = where
        self.problem = problem
        super().__init__(f"{where}: {problem}")


def question_payload(gemms: Iterable[GemmShape]) -> list[list[Any]]:
    """The canonical, order-free form of a question: sorted (op, pass, m, k, n, groups) rows."""
    return sorted([g.op, g.pass_, g.m, g.k, g.n, g.groups] for g in gemms)


def question_hash(gemms: Iterable[GemmShape]) -> str:
    text = json.dumps(question_payload(gemms), separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()[:16]




# ------------------------------------------------------------------------------- validation
def _require(doc: dict[str, Any], key: str, types: type | tuple[type, ...], where: str) -> Any:
    if key not in doc:
        raise ResultError(f"{where}.{key}", "is missing")
    value = doc[key]
    if isinstance(value, bool) and bool not in (types if isinstance(types, tuple) else (types,)):
        raise ResultError(f"{where}.{key}", f"must be {_type_name(types)}, got a boolean")
    if not isinstance(value, types):
        raise ResultError(f"{where}.{key}", f"must be {_type_name(types)}, got {type(value).__name__}")
    return value


def _type_name(types: type | tuple[type, ...]) -> str:
    if isinstance(types, tuple):
        return " or ".join(t.__name__ for t in types)
    return types.__name__


def _positive(value: Any, where: str) -> None:
    if not isinstance(value, (int, float)) or isinstance(value, bool) or not math.isfinite(value) or value <= 0:
        raise ResultError(where, f"must be a positive finite number, got {value!r}")


def validate(doc: Any) -> dict[str, Any]:
    """Check a result document; return it unchanged or raise :class:`ResultError`."""
    if not isinstance(doc, dict):
        raise ResultError("$", "the document must be a JSON object")
    version = _require(doc, "schema_version", int, "$")
    if version != SCHEMA_VERSION:
        raise ResultError("$.schema_version", f"is {version}, this gemm-guide reads {SCHEMA_VERSION}")
    _require(doc, "method_version", str, "$")
    question = _require(doc, "question", dict, "$")
    gemm_rows = _require(question, "gemms", list, "$.question")
    gemms = []
    for i, row in enumerate(gemm_rows):
        where = f"$.question.gemms[{i}]"
        if not isinstance(row, dict):
            raise ResultError(where, "must be an object")
        _require(row, "op", str, where)
        if _require(row, "pass", str, where) not in PASSES:
            raise ResultError(f"{where}.pass", f"must be one of {', '.join(PASSES)}")
        for key in ("m", "k", "n", "groups"):
            if _require(row, key, int, where) < 1:
                raise ResultError(f"{where}.{key}", "must be at least 1")
        gemms.append(GemmShape.from_dict(row))
    if not gemms:
        raise ResultError("$.question.gemms", "is empty")
    _require(question, "num_layers", int, "$.question")
    _require(question, "kind", str, "$.question")
    stored_hash = _require(doc, "question_hash", str, "$")
    if stored_hash != question_hash(gemms):
        raise ResultError(
            "$.question_hash",
            f"{stored_hash} does not match the question's GEMMs (hash {question_hash(gemms)}): "
            "the file was edited or corrupted",
        )
    device = _require(doc, "device", dict, "$")
    _require(device, "name", str, "$.device")
    _require(device, "compute_capability", str, "$.device")
    provenance = _require(doc, "provenance", dict, "$")
    for key in ("torch", "transformer_engine", "cuda", "driver", "date"):
        _require(provenance, key, str, "$.provenance")
    _require(provenance, "method", dict, "$.provenance")
    known = {(g.op, g.pass_) for g in gemms}
    seen: set[tuple[str, str, str, str]] = set()
    for i, cell in enumerate(_require(doc, "cells", list, "$")):
        where = f"$.cells[{i}]"
        if not isinstance(cell, dict):
            raise ResultError(where, "must be an object")
        mode = _require(cell, "mode", str, where)
        precision = _require(cell, "precision", str, where)
        op = _require(cell, "op", str, where)
        pass_ = _require(cell, "pass", str, where)
        status = _require(cell, "status", str, where)
        if mode not in MODES:
            raise ResultError(f"{where}.mode", f"{mode!r} is not one of {', '.join(MODES)}")
        if precision not in PRECISIONS:
            raise ResultError(f"{where}.precision", f"{precision!r} is not a known precision")
        if (op, pass_) not in known:
            raise ResultError(where, f"GEMM {op}/{pass_} is not part of the question")
        if status not in STATUSES:
            raise ResultError(f"{where}.status", f"{status!r} is not one of {', '.join(STATUSES)}")
        key = (mode, precision, op, pass_)
        if key in seen:
            raise ResultError(where, f"duplicate cell {'/'.join(key)}")
        seen.add(key)
        if status == "measured":
            _positive(cell.get("ms"), f"{where}.ms")
            stats = _require(cell, "stats", dict, where)
            for k in ("median_ms", "iqr_ms"):
                _require(stats, k, (int, float), f"{where}.stats")
        else:
            _require(cell, "reason", str, where)
    _require(doc, "peers", list, "$")
    return doc


# ------------------------------------------------------------------------------- building
def new_document(
    *,
    kind: str,
    gemms: list[GemmShape],
    num_layers: int,
    config: dict[str, Any] | None,
    device: dict[str, Any],
    provenance: dict[str, Any],
    notes: list[str] | None = None,
) -> dict[str, Any]:
    """An empty (no cells yet) result document for one question on one device."""
    return {
        "schema_version": SCHEMA_VERSION,
        "method_version": METHOD_VERSION,
        "question_hash": question_hash(gemms),
        "question": {
            "kind": kind,
            "gemms": [g.to_dict() for g in gemms],
            "num_layers": num_layers,
            "config": config,
        },
        "device": device,
        "provenance": provenance,
        "notes": notes or [],
        "cells": [],
        "peers": [],
    }


def document_gemms(doc: dict[str, Any]) -> list[GemmShape]:
    return [GemmShape.from_dict(row) for row in doc["question"]["gemms"]]


def merge_documents(old: dict[str, Any], new: dict[str, Any]) -> dict[str, Any]:
    """Fold a fresh run into an older one of the same question and device.

    Cells the new run measured replace the old ones; old cells of precisions or modes the new run
    did not ask for are kept only if they were taken with the same method version, so that a
    later ``--precisions fp8-block`` refresh does not throw away the BF16 baseline. Old cells are
    kept only when both runs used the same software stack (torch, TE, CUDA, driver), so the one
    provenance block stays true of every cell; each cell records its own measurement date.
    """
    if old.get("question_hash") != new.get("question_hash"):
        return new
    if old.get("method_version") != new.get("method_version"):
        return new
    same_stack = ("torch", "transformer_engine", "cuda", "driver")
    if any(old["provenance"].get(k) != new["provenance"].get(k) for k in same_stack):
        return new
    fresh = {(c["mode"], c["precision"], c["op"], c["pass"]) for c in new["cells"]}
    kept = [c for c in old["cells"] if (c["mode"], c["precision"], c["op"], c["pass"]) not in fresh]
    merged = dict(new)
    merged["cells"] = kept + list(new["cells"])
    fresh_peers = {(p["backend"], p["op"], p["pass"]) for p in new["peers"]}
    merged["peers"] = [
        p for p in old["peers"] if (p["backend"], p["op"], p["pass"]) not in fresh_peers
    ] + list(new["peers"])
    return merged
