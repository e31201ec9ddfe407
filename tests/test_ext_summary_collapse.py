"""A precision no shown GPU can run is one line under the summary, not a column of "unsupported"."""

from __future__ import annotations

from gemm_benchmark.summary import collapsed_notes, unsupported_everywhere

NO = {"available": False, "reason": "Device compute capability 10.0 or higher required"}
YES = {"available": True, "reason": ""}


def test_only_precisions_unsupported_on_every_shown_result_collapse() -> None:
    docs = [{"support": {"fp8-current": YES, "mxfp8": NO, "nvfp4": NO}},
            {"support": {"fp8-current": YES, "mxfp8": YES, "nvfp4": NO}}]
    assert unsupported_everywhere(["fp8-current", "mxfp8", "nvfp4"], docs) == {"nvfp4": NO["reason"]}


def test_nothing_collapses_without_results_or_without_a_verdict() -> None:
    assert unsupported_everywhere(["mxfp8"], []) == {}
    assert unsupported_everywhere(["mxfp8"], [{"support": {}}]) == {}  # an older result says nothing


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
