"""Software-stack staleness: a TE upgrade on the box marks exactly the results measured before it."""

from __future__ import annotations

import copy
from pathlib import Path

import pytest

from gemm_bench.results.cache import read_document
from gemm_bench.results.stack import DEFAULT_STALE_WHEN, StackError, document_stack, stack_staleness, validate_fields

CACHE = Path(__file__).resolve().parent.parent / "docs" / "_gemm_cache"


def committed() -> list[dict]:
    return [read_document(p) for p in sorted(CACHE.glob("*--*.json"))]


def test_fake_te_upgrade_marks_exactly_the_results_of_the_old_version_stale() -> None:
    # The results one box measured with one stack (the cache may also hold other boxes' results).
    box = document_stack(committed()[0])  # the box that measured them
    docs = [d for d in committed() if document_stack(d) == box]
    assert len(docs) >= 2
    old_te = docs[0]["provenance"]["transformer_engine"]
    # Half the results re-measured on the box after its TE upgrade: those carry the new version.
    upgraded = dict(box, transformer_engine=old_te + ".post1")
    renewed = []
    for i, doc in enumerate(docs):
        if i % 2:
            doc = copy.deepcopy(doc)
            doc["provenance"]["transformer_engine"] = upgraded["transformer_engine"]
            renewed.append(doc["question_hash"] + doc["device"]["name"])
        docs[i] = doc
    stale = [d for d in docs if stack_staleness(d, upgraded, DEFAULT_STALE_WHEN)]
    fresh = [d for d in docs if not stack_staleness(d, upgraded, DEFAULT_STALE_WHEN)]
    assert {d["question_hash"] + d["device"]["name"] for d in fresh} == set(renewed)
    assert all(d["provenance"]["transformer_engine"] == old_te for d in stale)
    assert len(stale) == len(docs) - len(renewed)
    reason = stack_staleness(stale[0], upgraded, DEFAULT_STALE_WHEN)
    assert reason == f"measured with another software stack: Transformer Engine {old_te} -> {old_te}.post1"
    # Before the upgrade nothing was stale.
    assert not any(stack_staleness(d, box, DEFAULT_STALE_WHEN) for d in committed() if document_stack(d) == box)


def test_only_the_configured_fields_count() -> None:
    doc = committed()[0]
    box = dict(document_stack(doc), driver="999.1", cuda="99.0")
    assert stack_staleness(doc, box, ["method", "transformer_engine", "torch"]) is None
    assert "driver" in (stack_staleness(doc, box, ["driver"]) or "")
    assert "CUDA" in (stack_staleness(doc, box, ["cuda", "driver"]) or "")
    method = dict(document_stack(doc), method="999")
    assert "measurement method version" in (stack_staleness(doc, method, ["method"]) or "")


def test_unknown_box_or_unknown_field_value_is_never_stale() -> None:
    doc = committed()[0]
    assert stack_staleness(doc, None, DEFAULT_STALE_WHEN) is None
    assert stack_staleness(doc, dict(document_stack(doc), torch="unknown"), ["torch"]) is None


def test_bad_rules_name_the_source() -> None:
    with pytest.raises(StackError, match="gemm_benchmark_stale_when: unknown field 'te'"):
        validate_fields(["method", "te"], source="gemm_benchmark_stale_when")
    with pytest.raises(StackError, match="must be a list"):
        validate_fields("torch")  # type: ignore[arg-type]


def test_a_result_lacking_what_this_code_measures_with_its_step_is_measured_whole_again() -> None:
    """Issues 32/33: the H200 results predate the model step and the step energy; without this rule
    refresh called them fresh and the pages' "comes with its next refresh" never came true."""
    import json
    from pathlib import Path

    from gemm_bench.question.question import build_question
    from gemm_bench.results.stack import Rules, lacking_blocks, remeasure

    cache = Path(__file__).resolve().parent.parent / "docs" / "_gemm_cache"
    q = build_question(model="llama3-8b")
    older = Path(__file__).resolve().parent / "data" / "older-h200"  # session 9's H200 files, before both blocks
    old = json.loads((older / f"{q.hash}--h200.json").read_text())
    new = json.loads((cache / f"{q.hash}--h100-80gb-hbm3.json").read_text())
    assert lacking_blocks(old, q) == ["the model's step", "each recipe's step energy"]
    todo = remeasure(old, q, ["bf16", "fp8-current"], ["autocast"], local=None, rules=Rules())
    assert todo is not None and "lacks the model's step" in todo.why
    assert set(todo.modes) >= {"autocast", "prequant"}  # measured whole, as a stale result is
    assert lacking_blocks(new, q) == []
    # a model step measured before its parts kept their breakdowns (issue 33): planned again
    for part in new["model_step"]["parts"]:
        part.pop("breakdown", None)
    assert lacking_blocks(new, q) == ["the model step's time breakdown"]
    # a mixture of experts: this code measures its model step too (session 12)
    moe = build_question(model="mixtral-8x7b")
    moe_old = json.loads((older / f"{moe.hash}--h200.json").read_text())
    assert lacking_blocks(moe_old, moe) == ["the model's step", "each recipe's step energy"]
    assert lacking_blocks(json.loads((cache / f"{moe.hash}--h100-80gb-hbm3.json").read_text()), moe) == []
    # a result whose run sampled no power (no NVML) lacks no energy; a sweep has no layer step at all
    for group in moe_old["groups"]:
        group.pop("clock", None)
    assert lacking_blocks(moe_old, moe) == ["the model's step"]


def test_lacking_blocks_judges_a_result_as_the_door_leaves_it() -> None:
    """Issue 43: ``lacking_blocks`` reads the typed result (the pages hand theirs, parsed once); a document
    is typed first, through the invariants. A model-step part's breakdown whose parts add up to 1.4x its
    step is dropped at the door, so the pages show none: the result lacks it and the refresh plans it.
    (Read raw, the breakdown was there and nothing was lacking.)"""
    import json
    from pathlib import Path

    from gemm_bench.question.question import build_question
    from gemm_bench.results.stack import lacking_blocks
    from gemm_bench.results.typed import parse

    q = build_question(model="llama3-8b")
    cache = Path(__file__).resolve().parent.parent / "docs" / "_gemm_cache"
    doc = json.loads((cache / f"{q.hash}--h100-80gb-hbm3.json").read_text())
    assert lacking_blocks(doc, q) == [] == lacking_blocks(parse(doc), q)
    part = next(p for p in doc["model_step"]["parts"] if "breakdown" in p)
    part["breakdown"]["parts_ms"]["gemm"] *= 1.5  # schema-valid; the parts no longer add up to the step
    assert lacking_blocks(doc, q) == ["the model step's time breakdown"] == lacking_blocks(parse(doc), q)
