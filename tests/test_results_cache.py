"""The result schema, the cache (atomic, locked, validated) and staleness."""

from __future__ import annotations

import datetime as dt
import json
import os
import threading
from pathlib import Path

import pytest

from gemm_bench.question.question import build_question
from gemm_bench.results.cache import Cache, CacheError, file_name, is_stale, read_document
from gemm_bench.results.schema import (
    METHOD_VERSION,
    ResultError,
    cell_run_id,
    merge_documents,
    question_hash,
    validate,
)
from tests.helpers import synthetic_document


def test_question_hash_ignores_order_and_spelling() -> None:
    preset = build_question(model="te-guide-5b")
    spelled = build_question(fields=dict(num_layers=24, seq_length=512, micro_batch_size=31, num_attention_heads=32,
                                         ffn_hidden_size=16384, hidden_size=4096))
    assert preset.hash == spelled.hash == question_hash(reversed(preset.gemms), preset.config.to_dict())
    other = build_question(model="te-guide-5b", fields={"seq_length": 1024})
    assert other.hash != preset.hash
    # Layers do not change what is measured, only the model total.
    assert build_question(model="te-guide-5b", fields={"num_layers": 2}).hash == preset.hash


def test_validate_accepts_a_good_document_and_names_the_broken_field() -> None:
    doc = synthetic_document()
    assert validate(doc) is doc
    broken = synthetic_document()
    del broken["cells"][3]["ms"]
    with pytest.raises(ResultError, match=r"\$\.cells\[3\]\.ms"):
        validate(broken)
    broken = synthetic_document()
    broken["cells"][0]["status"] = "great"
    with pytest.raises(ResultError, match="status"):
        validate(broken)
    broken = synthetic_document()
    broken["schema_version"] = 99
    with pytest.raises(ResultError, match="schema_version"):
        validate(broken)
    broken = synthetic_document()
    broken["question"]["gemms"][0]["m"] += 1
    with pytest.raises(ResultError, match="question_hash"):
        validate(broken)
    broken = synthetic_document()
    broken["cells"].append(dict(broken["cells"][0]))
    with pytest.raises(ResultError, match="duplicate"):
        validate(broken)
    broken = synthetic_document()
    broken["cells"][0]["ms"] = "fast"
    with pytest.raises(ResultError, match=r"\$\.cells\[0\]\.ms: must be an integer or a number"):
        validate(broken)


def test_store_then_lookup_round_trips(tmp_path: Path) -> None:
    cache = Cache(tmp_path)
    doc = synthetic_document()
    path = cache.store(doc)
    expected = f"{doc['question_hash']}--test-gpu-80gb.json"
    assert path.name == file_name(doc["question_hash"], "Test GPU 80GB") == expected
    assert path.stat().st_mode & 0o044  # readable by group and others, like any committed file
    found = cache.lookup(doc["question_hash"])
    assert found.errors == [] and found.documents == [doc]
    assert not list(tmp_path.glob("*.tmp"))


@pytest.mark.parametrize(
    ("mutate", "words"),
    [
        (lambda p: p.write_text(p.read_text()[:200]), "not valid JSON"),
        (lambda p: p.write_text(p.read_text().replace('"schema_version": 2', '"schema_version": 7')), "schema_version"),
        (lambda p: p.write_text(p.read_text().replace('"provenance"', '"provenancE"')), "provenance"),
        (lambda p: p.write_text(p.read_text().replace('"groups": 1', '"groups": "1"', 1)), "must be an integer"),
        (lambda p: p.write_bytes(b"\xff\xfe garbage"), "UTF-8"),
        (lambda p: p.write_text(json.dumps([1, 2])), "$: must be an object"),
    ],
)
def test_corrupt_files_are_reported_with_their_path_and_never_used(tmp_path: Path, mutate, words: str) -> None:
    cache = Cache(tmp_path)
    doc = synthetic_document()
    path = cache.store(doc)
    mutate(path)
    found = cache.lookup(doc["question_hash"])
    assert found.documents == []
    (error,) = found.errors
    assert error.path == path and str(error).startswith(str(path)) and words in str(error)


def test_hash_that_does_not_match_content_is_corrupt(tmp_path: Path) -> None:
    cache = Cache(tmp_path)
    doc = synthetic_document()
    path = cache.store(doc)
    data = json.loads(path.read_text())
    data["question"]["gemms"][0]["n"] = 1
    path.write_text(json.dumps(data))
    with pytest.raises(CacheError, match="does not match the question"):
        read_document(path)


def test_a_file_under_the_wrong_name_is_refused(tmp_path: Path) -> None:
    path = Cache(tmp_path).store(synthetic_document())
    moved = path.with_name("0000000000000000--test-gpu-80gb.json")
    os.rename(path, moved)
    with pytest.raises(CacheError, match="belongs in"):
        read_document(moved)


@pytest.mark.skipif(os.geteuid() == 0, reason="root reads files whatever their mode")
def test_unreadable_file_is_reported(tmp_path: Path) -> None:
    path = Cache(tmp_path).store(synthetic_document())
    path.chmod(0)
    with pytest.raises(CacheError, match="cannot be read"):
        read_document(path)


def test_store_merges_by_mode_one_mode_one_run(tmp_path: Path) -> None:
    cache = Cache(tmp_path)
    first = synthetic_document(ms={("autocast", "bf16"): 2.0, ("prequant", "bf16"): 1.5})
    cache.store(first)
    # A new autocast run replaces every old autocast cell (its BF16 too: one mode is one run) and
    # keeps the other mode's cells, each still naming the run that measured it.
    second = synthetic_document(ms={("autocast", "bf16"): 2.1, ("autocast", "fp8-block"): 1.5})
    path = cache.store(second)
    merged = read_document(path)
    modes = {(c["mode"], c["precision"]) for c in merged["cells"]}
    assert modes == {("autocast", "bf16"), ("autocast", "fp8-block"), ("prequant", "bf16")}
    runs = {c["mode"]: cell_run_id(merged, c) for c in merged["cells"]}
    assert runs == {"autocast": second["run_id"], "prequant": first["run_id"]}
    assert merged["run_id"] == second["run_id"] != first["run_id"]
    # A different software stack is a new baseline: nothing of the old run is kept.
    third = synthetic_document(ms={("prequant", "fp8-current"): 1.0})
    third["provenance"]["transformer_engine"] = "9.9"
    assert {c["precision"] for c in merge_documents(merged, third)["cells"]} == {"fp8-current"}


def test_a_corrupt_old_file_is_replaced_not_merged(tmp_path: Path) -> None:
    cache = Cache(tmp_path)
    doc = synthetic_document()
    path = cache.path_for(doc["question_hash"], doc["device"]["name"])
    path.write_text("{ truncated")
    cache.store(doc)
    assert read_document(path) == doc


def test_staleness_by_method_version_and_age() -> None:
    doc = synthetic_document(date="2026-01-01T00:00:00+00:00")
    now = dt.datetime(2026, 3, 1, tzinfo=dt.timezone.utc)
    assert is_stale(doc, now=now) is None
    assert "older than" in str(is_stale(doc, max_age_days=30, now=now))
    assert is_stale(doc, max_age_days=90, now=now) is None
    doc["method_version"] = METHOD_VERSION + "-old"
    assert "method version" in str(is_stale(doc, now=now))


def test_the_lock_serialises_writers(tmp_path: Path) -> None:
    cache = Cache(tmp_path)
    doc = synthetic_document()
    order: list[str] = []
    with cache.locked(doc["question_hash"], doc["device"]["name"]):
        def writer() -> None:
            cache.store(doc)
            order.append("writer")

        t = threading.Thread(target=writer)
        t.start()
        t.join(0.5)
        order.append("holder")
    t.join(5)
    assert order == ["holder", "writer"]


def test_committed_docs_cache_is_valid_and_real() -> None:
    """Every file in the docs cache validates and carries real provenance (not a test document)."""
    files = Cache(Path(__file__).parent.parent / "docs" / "_gemm_cache").files()
    assert files, "the docs cache is empty"
    for path in files:
        doc = read_document(path)
        prov = doc["provenance"]
        assert prov["method"].get("timer_id") in ("events", "profiler"), path
        assert doc["device"]["name"].startswith("NVIDIA"), path
        assert prov["driver"] != "unknown" and prov["transformer_engine"] != "unknown", path
