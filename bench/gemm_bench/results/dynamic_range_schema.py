"""The "dynamic-range" study: each recipe's SQNR against the dynamic range of its input.

Why: the site's accuracy cells (:mod:`gemm_bench.measure.accuracy`) use inputs whose range every FP8
format spans, so their SQNRs do not depend on the model and cannot show when a per-tensor scale loses
accuracy. E4M3 spans 448 / 2^-9 (normals down to 2^-6): a per-tensor scale maps the tensor's largest
magnitude to 448, and every value more than that range below it falls into the subnormals or to zero.
The study sweeps the ratio ``R`` of a few outlier rows (tokens) or columns (channels) to the rest and
reports the SQNR of the quantized input and of the GEMM output over the whole tensor *and per row*:
one huge row dominates a whole-tensor SQNR and hides what happens to every other token.

Pure: this module holds the study's vocabulary, its literature reference and the validator of its
``data`` block, and registers the study (:func:`gemm_bench.results.studies.register_schema`). Measuring is
:mod:`gemm_bench.measure.dynamic_range`.

The ``data`` block::

    {"source": "transformer-engine" | "cpu-model",
     "shape": {"m": 4096, "k": 4096, "n": 4096},      # Fprop M x K x N (Dgrad is M x N x K)
     "outliers": {"massive-tokens": 4, "outlier-channels": 4},   # rows / columns scaled by R
     "ratios": [1, 10, 100, ...],                      # R, increasing
     "recipes": {"fp8-current": {"status": "measured", "scaling": "...",
                                 "formats": {"activation": "E4M3", "gradient": "E5M2"}},
                 "fp8-delayed": {"status": "same-as", "same_as": "fp8-current", "reason": "..."},
                 "mxfp8": {"status": "unsupported", "reason": "<Transformer Engine's reason>"}, ...},
     "cases": [{"tensor": "activation", "input": "massive-tokens", "ratio": 1000,
                "amax_over_median": 6.7e3,             # max |x| / median |x| of the BF16 input
                "results": {"fp8-current": {"status": "measured",
                                            "quantize": {"whole_db", "row_median_db", "row_min_db", "bulk_db"},
                                            "gemm": {"whole_db", "row_median_db", "row_min_db"}},
                            "fp8-block": {"status": "failed", "reason": "..."}, ...}}, ...]}

Every (tensor, input, ratio) appears once, and every measured recipe has a result in every case
(BF16 has no ``quantize``: its inputs are BF16 already).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any

from gemm_bench.question.precisions import PRECISIONS
from gemm_bench.results.studies import (
    StudyError,
    choice,
    decibels,
    integer,
    json_list,
    json_object,
    keys,
    number,
    register_schema,
    text,
)

NAME = "dynamic-range"
METHOD_VERSION = "1"

#: What the swept tensor is, and the GEMM pass it feeds (TE's TN GEMM: Fprop Y = X W^T, Dgrad dX = dY W).
TENSORS: dict[str, str] = {"activation": "fprop", "gradient": "dgrad"}
TENSOR_NAMES: dict[str, str] = {"activation": "activation X (Fprop)", "gradient": "output gradient dY (Dgrad)"}
#: Where the large values sit.
INPUTS: dict[str, str] = {
    "massive-tokens": "a few rows (tokens) R times the others, as massive activations",
    "outlier-channels": "a few columns (channels) R times the others, as outlier features",
}
INPUT_NAMES: dict[str, str] = {"massive-tokens": "massive tokens (rows)", "outlier-channels": "outlier channels"}
SOURCES = ("transformer-engine", "cpu-model")
RECIPE_STATUSES = ("measured", "same-as", "unsupported")
GEMM_FIELDS = ("whole_db", "row_median_db", "row_min_db")
QUANTIZE_FIELDS = (*GEMM_FIELDS, "bulk_db")


@dataclasses.dataclass(frozen=True)
class LiteratureBand:
    """A range of max/median magnitude ratios that a paper reports: drawn on the figure, never measured."""

    low: float
    high: float
    label: str
    citation: str
    applies_to: tuple[tuple[str, str], ...]  # (tensor, input) pairs the band is drawn for


#: Sun et al. report massive activations in LLMs' hidden states about 10^4 times their median
#: magnitude (LLaMA2) and give 100,000 times as an example in their abstract.
MASSIVE_ACTIVATIONS = LiteratureBand(
    low=1e4, high=1e5,
    label="Sun et al. 2024: massive activations in LLM hidden states (literature, not measured)",
    citation="M. Sun, X. Chen, J. Z. Kolter, Z. Liu, \"Massive Activations in Large Language Models\", "
             "2024, arXiv:2402.17762",
    applies_to=(("activation", "massive-tokens"),),
)
LITERATURE: tuple[LiteratureBand, ...] = (MASSIVE_ACTIVATIONS,)


# ----------------------------------------------------------------------------- validation
# With the shared checks of :mod:`gemm_bench.results.studies`. SQNRs are in dB and may be negative
# (noise above the signal), so only ratios and magnitudes must be positive.
def _summary(value: Any, where: str, fields: Sequence[str]) -> dict[str, float]:
    block = json_object(value, where)
    keys(block, where, fields)
    out = {f: decibels(block[f], f"{where}.{f}") for f in fields}
    if out["row_min_db"] > out["row_median_db"]:
        raise StudyError(f"{where}.row_min_db", f"{out['row_min_db']} is above the median row's {out['row_median_db']}")
    return out


def _recipe(value: Any, where: str) -> dict[str, Any]:
    entry = json_object(value, where)
    status = choice(entry.get("status"), f"{where}.status", RECIPE_STATUSES)
    if status == "measured":
        keys(entry, where, ("status", "scaling", "formats"))
        text(entry["scaling"], f"{where}.scaling")
        formats = json_object(entry["formats"], f"{where}.formats")
        keys(formats, f"{where}.formats", tuple(TENSORS))
        for tensor in TENSORS:
            text(formats[tensor], f"{where}.formats.{tensor}")
    elif status == "same-as":
        keys(entry, where, ("status", "same_as", "reason"))
        choice(entry["same_as"], f"{where}.same_as", tuple(PRECISIONS))
        text(entry["reason"], f"{where}.reason")
    else:
        keys(entry, where, ("status", "reason"))
        text(entry["reason"], f"{where}.reason")
    return entry


def _check_data(block: dict[str, Any]) -> None:
    """Raise :class:`StudyError` (its JSON path first) unless ``data`` is a complete, finite study block
    (the door, :func:`validate_data`, has checked its keys)."""
    where = "$.data"
    choice(block["source"], f"{where}.source", SOURCES)
    shape = json_object(block["shape"], f"{where}.shape")
    keys(shape, f"{where}.shape", ("m", "k", "n"))
    for dim in ("m", "k", "n"):
        integer(shape[dim], f"{where}.shape.{dim}", minimum=1)
    outliers = json_object(block["outliers"], f"{where}.outliers")
    keys(outliers, f"{where}.outliers", tuple(INPUTS))
    for kind in INPUTS:
        integer(outliers[kind], f"{where}.outliers.{kind}", minimum=1)
    ratios = json_list(block["ratios"], f"{where}.ratios", non_empty=True)
    values = [number(r, f"{where}.ratios[{i}]", positive=True) for i, r in enumerate(ratios)]
    for i in range(1, len(values)):
        if values[i] <= values[i - 1]:
            raise StudyError(f"{where}.ratios[{i}]", f"{values[i]} does not increase on {values[i - 1]}")
    recipes = json_object(block["recipes"], f"{where}.recipes")
    if not recipes:
        raise StudyError(f"{where}.recipes", "names no recipe")
    for pid, entry in recipes.items():
        choice(pid, f"{where}.recipes", tuple(PRECISIONS))
        _recipe(entry, f"{where}.recipes.{pid}")
    measured = [pid for pid, entry in recipes.items() if entry["status"] == "measured"]
    if not measured:
        raise StudyError(f"{where}.recipes", "has no measured recipe")
    for pid, entry in recipes.items():
        if entry["status"] == "same-as" and entry["same_as"] not in measured:
            raise StudyError(f"{where}.recipes.{pid}.same_as", f"{entry['same_as']!r} is not a measured recipe here")
    cases = json_list(block["cases"], f"{where}.cases")
    seen: set[tuple[str, str, float]] = set()
    for i, value in enumerate(cases):
        key = _case(value, f"{where}.cases[{i}]", values, measured)
        if key in seen:
            raise StudyError(f"{where}.cases[{i}]", f"repeats tensor {key[0]}, input {key[1]}, ratio {key[2]:g}")
        seen.add(key)
    expected = {(t, k, r) for t in TENSORS for k in INPUTS for r in values}
    if seen != expected:
        t, k, r = sorted(expected - seen)[0]
        raise StudyError(f"{where}.cases", f"has no case for tensor {t}, input {k}, ratio {r:g}")


def _case(value: Any, where: str, ratios: Sequence[float], measured: Sequence[str]) -> tuple[str, str, float]:
    case = json_object(value, where)
    keys(case, where, ("tensor", "input", "ratio", "amax_over_median", "results"))
    tensor = choice(case["tensor"], f"{where}.tensor", tuple(TENSORS))
    kind = choice(case["input"], f"{where}.input", tuple(INPUTS))
    ratio = number(case["ratio"], f"{where}.ratio", positive=True)
    if ratio not in ratios:
        raise StudyError(f"{where}.ratio", f"{ratio:g} is not one of the study's ratios")
    number(case["amax_over_median"], f"{where}.amax_over_median", positive=True)
    results = json_object(case["results"], f"{where}.results")
    keys(results, f"{where}.results", measured)
    for pid in measured:
        at = f"{where}.results.{pid}"
        result = json_object(results[pid], at)
        status = choice(result.get("status"), f"{at}.status", ("measured", "failed"))
        if status == "failed":
            keys(result, at, ("status", "reason"))
            text(result["reason"], f"{at}.reason")
            continue
        if pid == "bf16":
            keys(result, at, ("status", "gemm"))
        else:
            keys(result, at, ("status", "gemm", "quantize"))
            _summary(result["quantize"], f"{at}.quantize", QUANTIZE_FIELDS)
        _summary(result["gemm"], f"{at}.gemm", GEMM_FIELDS)
    return tensor, kind, ratio


STUDY = register_schema(NAME, title="SQNR per recipe against the dynamic range of the input",
                        method_version=METHOD_VERSION, measure="gemm_bench.measure.dynamic_range:measure",
                        fields=("source", "shape", "outliers", "ratios", "recipes", "cases"), check=_check_data)
validate_data = STUDY.validate_data
