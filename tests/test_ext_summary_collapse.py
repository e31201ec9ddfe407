"""A precision no shown GPU can run is one line under the summary, not a column of "unsupported"."""

from __future__ import annotations

from typing import Any

from gemm_bench.question.question import build_question
from gemm_bench.results.typed import Result, parse
from gemm_benchmark.summary import collapsed_notes, unsupported_everywhere
from tests.helpers import synthetic_document

NO = {"available": False, "reason": "Device compute capability 10.0 or higher required"}
YES = {"available": True, "reason": ""}


def _result(support: dict[str, Any]) -> Result:
    """A typed result whose TE support verdicts are ``support`` (none: a result stored before them)."""
    doc = synthetic_document(build_question(model="llama3-8b"), device="NVIDIA H100 80GB HBM3")
    doc["support"] = support
    return parse(doc)


def test_only_precisions_unsupported_on_every_shown_result_collapse() -> None:
    results = [_result({"fp8-current": YES, "mxfp8": NO, "nvfp4": NO}),
               _result({"fp8-current": YES, "mxfp8": YES, "nvfp4": NO})]
    assert unsupported_everywhere(["fp8-current", "mxfp8", "nvfp4"], results) == {"nvfp4": NO["reason"]}


def test_nothing_collapses_without_results_or_without_a_verdict() -> None:
    assert unsupported_everywhere(["mxfp8"], []) == {}
    assert unsupported_everywhere(["mxfp8"], [_result({})]) == {}  # an older result says nothing


def test_the_note_names_the_precisions_and_teS_reason_once_per_reason() -> None:
    notes = collapsed_notes({"mxfp8": "needs sm_100", "nvfp4": "needs sm_100"})
    assert notes == ["MXFP8, NVFP4: not measured on any GPU shown (unsupported: needs sm_100)."]


def test_the_note_gives_transformer_engines_whole_reason() -> None:
    """Issue 35: the notes on the landing and models pages read "(unsupported: Device compute
    capability 10.0 or higher required for MXFP8…)": cut at 60 characters, mid-sentence."""
    why = "Device compute capability 10.0 or higher required for MXFP8 execution."
    assert collapsed_notes({"mxfp8": why}) == [f"MXFP8: not measured on any GPU shown (unsupported: {why[:-1]})."]
    long = "a reason " * 30
    assert " ".join(long.split()) in collapsed_notes({"nvfp4": long})[0]
