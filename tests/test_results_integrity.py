"""Issue 10, the data core: results, cache and report never yield a wrong number or crash.

One test (or one parametrized table) per defect class; each fails on the code before the fix:
run ids (schema 2), range- and type-checked values with exact JSON paths, every unreadable file a
CacheError naming its path (symlinks never followed), merges that never mix runs in one mode,
reports that take the page's question and only compare cells of one run, hostile dates.
"""

from __future__ import annotations

import copy
import datetime as dt
import json
import math
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from gemm_bench.question.precisions import PRECISIONS
from gemm_bench.question.question import build_question
from gemm_bench.report.report import Report
from gemm_bench.results import cache as cache_module
from gemm_bench.results.cache import Cache, CacheError, dumps, file_name, is_stale, read_document
from gemm_bench.results.schema import (
    MAX_LAYERS,
    MAX_MS,
    MIN_MS,
    SCHEMA_VERSION,
    ResultError,
    cell_run_id,
    merge_documents,
    new_run_id,
    question_hash,
    stamp_run_ids,
    validate,
)
from tests.helpers import synthetic_document

ROOT = Path(__file__).resolve().parent.parent
DOCS_CACHE = ROOT / "docs" / "_gemm_cache"
#: Old (schema 1) files as the site's cache held them before method v3 (tests/data/cache-v1/README.md).
V1_CACHE = ROOT / "tests" / "data" / "cache-v1"
Q = build_question(model="te-guide-5b")
Doc = dict[str, Any]


def committed(name: str = "2160d33ec54a347e--h100-80gb-hbm3.json") -> Doc:
    """A real v1 result (te-guide-5b on H100), parsed without validation."""
    doc: Doc = json.loads((V1_CACHE / name).read_text(encoding="utf-8"))
    return doc


def first_measured(doc: Doc, key: str = "cells") -> int:
    return next(i for i, c in enumerate(doc[key]) if c["status"] == "measured")


# ------------------------------------------------------------------------------- run ids
def test_schema_2_records_a_run_and_version_1_is_one_implicit_run() -> None:
    doc = synthetic_document()
    assert doc["schema_version"] == SCHEMA_VERSION == 2
    assert validate(doc) is doc
    assert {cell_run_id(doc, c) for c in doc["cells"]} == {doc["run_id"]}
    assert new_run_id() != new_run_id()
    old = committed()
    assert old["schema_version"] == 1 and validate(old) is old
    assert {cell_run_id(old, c) for c in old["cells"] + old["peers"]} == {f"v1:{old['question_hash']}"}
    upgraded = stamp_run_ids(old)
    assert upgraded["schema_version"] == 2 and validate(upgraded) is upgraded
    assert all(c["run_id"] == f"v1:{old['question_hash']}" for c in upgraded["cells"] + upgraded["peers"])


@pytest.mark.parametrize(("edit", "where"), [
    (lambda d: d.pop("run_id"), r"\$\.run_id: is missing"),
    (lambda d: d.update(run_id=""), r"\$\.run_id"),
    (lambda d: d.update(run_id="a b"), r"\$\.run_id"),
    (lambda d: d["cells"][2].update(run_id=7), r"\$\.cells\[2\]\.run_id"),
    (lambda d: d["cells"][2].update(run_id="x" * 65), r"\$\.cells\[2\]\.run_id"),
])
def test_run_ids_are_checked(edit: Callable[[Doc], Any], where: str) -> None:
    doc = synthetic_document()
    edit(doc)
    with pytest.raises(ResultError, match=where):
        validate(doc)


def test_a_version_1_file_cannot_claim_run_ids() -> None:
    doc = committed()
    doc["cells"][0]["run_id"] = "elsewhere"
    with pytest.raises(ResultError, match=r"\$\.cells\[0\]\.run_id: is a schema version 2 field"):
        validate(doc)


def test_committed_version_1_files_were_each_measured_in_one_run() -> None:
    """The claim behind reading a v1 file as one run: its cells' measured_at span < 30 s."""
    files = sorted(DOCS_CACHE.glob("*--*.json"))
    assert files
    for path in files:
        doc = read_document(path)
        if doc["schema_version"] != 1:
            continue
        times = [dt.datetime.fromisoformat(c["measured_at"]) for c in doc["cells"] if "measured_at" in c]
        assert len(times) == sum(c["status"] == "measured" for c in doc["cells"]), path
        assert (max(times) - min(times)).total_seconds() < 30, path


# ------------------------------------------------------------------------------- validation
def _cell(doc: Doc) -> dict[str, Any]:
    cell: dict[str, Any] = doc["cells"][first_measured(doc)]
    return cell


def _peer(doc: Doc) -> dict[str, Any]:
    peer: dict[str, Any] = doc["peers"][first_measured(doc, "peers")]
    return peer


C = "$.cells[{i}]"
HOSTILE_VALUES: list[tuple[str, Callable[[Doc], Any], str]] = [
    # ms: subnormal, huge, signed zero, boolean, FLOP-count bug
    ("ms 5e-324", lambda d: _cell(d).update(ms=5e-324), r"{C}\.ms"),
    ("ms 1e308", lambda d: _cell(d).update(ms=1e308), r"{C}\.ms"),
    ("ms -0.0", lambda d: _cell(d).update(ms=-0.0), r"{C}\.ms"),
    ("ms true", lambda d: _cell(d).update(ms=True), r"{C}\.ms: must be an integer or a number, got a boolean"),
    ("ms NaN", lambda d: _cell(d).update(ms=math.nan), r"{C}\.ms"),
    ("ms too fast", lambda d: _cell(d).update(ms=MIN_MS), r"{C}\.ms: .* TFLOP/s"),
    ("ms huge int", lambda d: _cell(d).update(ms=10**30), r"{C}\.ms: is an integer outside"),
    # stats consistent with ms
    ("median != ms", lambda d: _cell(d)["stats"].update(median_ms=_cell(d)["ms"] * 2), r"{C}\.stats\.median_ms"),
    ("iqr < 0", lambda d: _cell(d)["stats"].update(iqr_ms=-1.0), r"{C}\.stats\.iqr_ms"),
    ("p10 > median", lambda d: _cell(d)["stats"].update(p10_ms=_cell(d)["ms"] * 3), r"{C}\.stats\.p10_ms"),
    ("p90 < median", lambda d: _cell(d)["stats"].update(p90_ms=_cell(d)["ms"] / 3), r"{C}\.stats\.median_ms"),
    ("min > p10", lambda d: _cell(d)["stats"].update(min_ms=_cell(d)["stats"]["p10_ms"] * 1.5),
     r"{C}\.stats\.min_ms"),
    ("n = 0", lambda d: _cell(d)["stats"].update(n=0), r"{C}\.stats\.n"),
    ("n bool", lambda d: _cell(d)["stats"].update(n=True), r"{C}\.stats\.n"),
    ("n != samples", lambda d: _cell(d)["stats"].update(n=3), r"{C}\.stats\.n"),
    ("sample < 0", lambda d: _cell(d)["stats"]["samples_ms"].__setitem__(1, -2.0), r"{C}\.stats\.samples_ms\[1\]"),
    ("sample text", lambda d: _cell(d)["stats"]["samples_ms"].__setitem__(0, "1.0"), r"{C}\.stats\.samples_ms\[0\]"),
    ("stats missing", lambda d: _cell(d).pop("stats"), r"{C}\.stats: is missing"),
    # question
    ("layers 0", lambda d: d["question"].update(num_layers=0), r"\$\.question\.num_layers"),
    ("layers bool", lambda d: d["question"].update(num_layers=True), r"\$\.question\.num_layers.*boolean"),
    ("layers huge", lambda d: d["question"].update(num_layers=MAX_LAYERS + 1), r"\$\.question\.num_layers"),
    ("kind", lambda d: d["question"].update(kind="sweeps"), r"\$\.question\.kind"),
    ("flops", lambda d: d["question"]["gemms"][0].update(flops=1), r"\$\.question\.gemms\[0\]\.flops"),
    ("config list", lambda d: d["question"].update(config=[1]), r"\$\.question\.config"),
    # device, provenance, method, notes
    ("capability", lambda d: d["device"].update(compute_capability="9"), r"\$\.device\.compute_capability"),
    ("capability digits", lambda d: d["device"].update(compute_capability="\u0669.\u0660"),
     r"\$\.device\.compute_capability"),
    ("device name empty", lambda d: d["device"].update(name=" "), r"\$\.device\.name"),
    ("device name long", lambda d: d["device"].update(name="x" * 500), r"\$\.device\.name"),
    ("sm_count text", lambda d: d["device"].update(sm_count="132"), r"\$\.device\.sm_count"),
    ("device nested", lambda d: d["device"].update(extra={"a": 1}), r"\$\.device\.extra"),
    ("surrogate", lambda d: d["device"].update(name="H100 \udc80"), r"\$\.device\.name: .*surrogate"),
    ("surrogate key", lambda d: d["device"].update({"\ud800": 1}), r"\$\.device \(a key\)"),
    ("torch version", lambda d: d["provenance"].update(torch=2), r"\$\.provenance\.torch"),
    ("commit", lambda d: d["provenance"].update(commit=None), r"\$\.provenance\.commit"),
    ("method nested", lambda d: d["provenance"]["method"].update(timer=["events"]),
     r"\$\.provenance\.method\.timer"),
    ("note", lambda d: d["notes"].append(3), r"\$\.notes\[\d+\]"),
    ("deep", lambda d: d["question"].update(config=json.loads("[" * 40 + "]" * 40)), r"nested more than"),
    # support
    ("support id", lambda d: d["support"].update(fp9={"available": False, "reason": ""}), r"\$\.support\.fp9"),
    ("support bool", lambda d: d["support"]["bf16"].update(available="yes"), r"\$\.support\.bf16\.available"),
    ("support reason", lambda d: d["support"]["mxfp8"].pop("reason"), r"\$\.support\.mxfp8\.reason"),
    # cells' own shape must be their GEMM's
    ("cell m", lambda d: _cell(d).update(m=_cell(d)["m"] + 1), r"{C}\.m"),
    # peers, fully
    ("peer backend", lambda d: _peer(d).pop("backend"), r"\$\.peers\[\d+\]\.backend"),
    ("peer op", lambda d: _peer(d).update(op="router"), r"\$\.peers\[\d+\]: GEMM router/"),
    ("peer shape", lambda d: _peer(d).update(k=1), r"\$\.peers\[\d+\]\.k"),
    ("peer status", lambda d: _peer(d).update(status="ok"), r"\$\.peers\[\d+\]\.status"),
    ("peer ms", lambda d: _peer(d).pop("ms"), r"\$\.peers\[\d+\]\.ms"),
    ("peer ms tiny", lambda d: _peer(d).update(ms=5e-324), r"\$\.peers\[\d+\]\.ms"),
    ("peer stats", lambda d: _peer(d).pop("stats"), r"\$\.peers\[\d+\]\.stats"),
    ("peer reason", lambda d: d["peers"].append({**_peer(d), "backend": "x", "status": "failed", "ms": None}),
     r"\$\.peers\[\d+\]\.reason"),
    ("peer duplicate", lambda d: d["peers"].append(copy.deepcopy(_peer(d))), r"\$\.peers\[\d+\]: duplicate peer"),
    ("peer shape missing", lambda d: _peer(d).pop("groups"), r"\$\.peers\[\d+\]\.groups: is missing"),
]


@pytest.mark.parametrize(("edit", "where"), [(e, w) for _, e, w in HOSTILE_VALUES],
                         ids=[name for name, _, _ in HOSTILE_VALUES])
def test_every_value_merging_reporting_and_rendering_touch_is_checked(edit: Callable[[Doc], Any], where: str) -> None:
    doc = committed()
    i = first_measured(doc)
    edit(doc)
    with pytest.raises(ResultError, match=where.replace("{C}", C.format(i=i).replace("$", r"\$").replace("[", r"\[")
                                                              .replace("]", r"\]"))):
        validate(doc)


def test_validation_accepts_the_bounds_themselves() -> None:
    doc = committed()
    doc["question"]["num_layers"] = MAX_LAYERS
    assert validate(doc) is doc
    small = synthetic_document(build_question(shapes=["16x16x16"]))
    for cell in small["cells"]:
        cell["ms"] = cell["stats"]["median_ms"] = MIN_MS
        cell["stats"]["samples_ms"] = [MIN_MS]
    assert validate(small) is small
    for cell in small["cells"]:
        cell["ms"] = cell["stats"]["median_ms"] = MAX_MS
        cell["stats"]["samples_ms"] = [MAX_MS]
    assert validate(small) is small


@pytest.mark.parametrize("value", [{"a": 1j}, {"a": (1, 2)}, {1: "a"}])
def test_validate_raises_only_result_error_for_non_json_values(value: dict[Any, Any]) -> None:
    doc = synthetic_document()
    doc["question"]["config"] = value
    with pytest.raises(ResultError, match=r"\$\.question\.config"):
        validate(doc)


def test_a_repeated_gemm_in_the_question_is_refused() -> None:
    doc = synthetic_document()
    doc["question"]["gemms"].append(copy.deepcopy(doc["question"]["gemms"][0]))
    with pytest.raises(ResultError, match=r"\$\.question\.gemms\[12\]: repeats GEMM qkv/fprop"):
        validate(doc)


# ------------------------------------------------------------------------------- reading files
def _store_text(tmp_path: Path, text: str | bytes, doc: Doc | None = None) -> Path:
    doc = doc or synthetic_document()
    path = tmp_path / file_name(doc["question_hash"], doc["device"]["name"])
    if isinstance(text, bytes):
        path.write_bytes(text)
    else:
        path.write_text(text, encoding="utf-8")
    return path


@pytest.mark.parametrize(("content", "words"), [
    ('{"schema_version": NaN}', "NaN"),
    ('{"schema_version": 2, "x": -Infinity}', "-Infinity"),
    ('{"schema_version": 2, "x": 1e400}', "finite"),
    ('{"schema_version": ' + "9" * 5000 + "}", "not usable JSON"),
    ("[" * 200_000 + "]" * 200_000, "nested too deeply"),
    ('{"schema_version": 2, "device": {"name": "\\ud800"}}', "surrogate"),
    (b'{"a": "\xc3\x28"}', "not UTF-8"),
    ("", "not valid JSON"),
])
def test_every_unreadable_file_is_a_cache_error_naming_its_path(tmp_path: Path, content: str | bytes,
                                                                 words: str) -> None:
    path = _store_text(tmp_path, content)
    with pytest.raises(CacheError) as info:
        read_document(path)
    assert info.value.path == path and str(info.value).startswith(str(path)) and words in str(info.value)
    # ... and a lookup reports it beside the other devices' valid results.
    other = synthetic_document(device="Other GPU")
    Cache(tmp_path).store(other)
    found = Cache(tmp_path).lookup(other["question_hash"])
    assert found.documents == [other] and [e.path for e in found.errors] == [path]


def test_a_symlink_is_refused_even_to_a_valid_result(tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    doc = synthetic_document()
    target = Cache(outside).store(doc)
    cache_dir = tmp_path / "cache"
    cache_dir.mkdir()
    link = cache_dir / target.name
    link.symlink_to(target)
    with pytest.raises(CacheError, match="symbolic link"):
        read_document(link)
    found = Cache(cache_dir).lookup(doc["question_hash"])
    assert found.documents == [] and [e.path for e in found.errors] == [link]


def test_a_symlink_is_never_opened(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    doc = synthetic_document()
    target = Cache(tmp_path / "outside").store(doc)
    link = tmp_path / target.name
    link.symlink_to(target)
    opened: list[str] = []
    real_open = os.open

    def spying_open(path: Any, *args: Any, **kwargs: Any) -> int:
        opened.append(str(path))
        return real_open(path, *args, **kwargs)

    monkeypatch.setattr(os, "open", spying_open)
    with pytest.raises(CacheError):
        read_document(link)
    assert opened == []


def test_only_regular_files_are_read(tmp_path: Path) -> None:
    doc = synthetic_document()
    directory = tmp_path / file_name(doc["question_hash"], "GPU A")
    directory.mkdir()
    with pytest.raises(CacheError, match="not a regular file"):
        read_document(directory)
    fifo = tmp_path / file_name(doc["question_hash"], "GPU B")
    os.mkfifo(fifo)  # opening a FIFO for reading would block the build forever
    with pytest.raises(CacheError, match="not a regular file"):
        read_document(fifo)


def test_an_absurdly_large_file_is_refused_before_it_is_read(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = Cache(tmp_path).store(synthetic_document())
    monkeypatch.setattr(cache_module, "MAX_FILE_BYTES", 1000)
    with pytest.raises(CacheError, match="bytes"):
        read_document(path)


def test_store_after_a_malformed_peer_keeps_the_new_measurement(tmp_path: Path) -> None:
    """Old code: validation let a peer without 'backend' through, and merging it raised KeyError."""
    old = committed()
    del old["peers"][0]["backend"]
    path = tmp_path / file_name(old["question_hash"], old["device"]["name"])
    path.write_text(dumps(old), encoding="utf-8")
    new = synthetic_document(device=old["device"]["name"])
    assert Cache(tmp_path).store(new) == path
    assert read_document(path) == new


def test_the_writer_lock_is_filelock_not_fcntl() -> None:
    """The package imports where fcntl does not exist (Windows), even to read or write the cache."""
    code = ("import sys; sys.modules['fcntl'] = None\n"
            "import gemm_bench.results.cache as c, tempfile, pathlib\n"
            "from tests.helpers import synthetic_document\n"
            "d = tempfile.mkdtemp(); p = c.Cache(d).store(synthetic_document()); c.read_document(p); print('ok')\n")
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert out.stdout.strip() == "ok", out.stderr
    assert "fcntl" not in vars(cache_module)


def test_read_all_parses_each_file_once(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    cache = Cache(tmp_path)
    a = synthetic_document()
    b = synthetic_document(build_question(shapes=["1024x1024x1024"]))
    cache.store(a)
    cache.store(b)
    bad = _store_text(tmp_path, "{", synthetic_document(device="Broken GPU"))
    parsed: list[str] = []
    real_loads = json.loads

    def counting_loads(text: str, **kwargs: Any) -> Any:
        parsed.append(text[:20])
        return real_loads(text, **kwargs)

    monkeypatch.setattr(json, "loads", counting_loads)
    everything = cache.read_all()
    assert len(parsed) == 3
    assert set(everything) == {a["question_hash"], b["question_hash"]}
    assert everything[a["question_hash"]].documents == [a]
    assert [e.path for e in everything[a["question_hash"]].errors] == [bad]
    assert everything[b["question_hash"]].paths == [cache.path_for(b["question_hash"], "Test GPU 80GB")]


# ------------------------------------------------------------------------------- merging
def test_two_pages_asking_for_different_precisions_never_mix_runs_in_a_mode(tmp_path: Path) -> None:
    """Old code kept page A's FP8 Current beside page B's newer BF16: a speedup across two runs."""
    cache = Cache(tmp_path)
    page_a = synthetic_document(ms={("autocast", "bf16"): 2.0, ("autocast", "fp8-current"): 1.0})
    page_b = synthetic_document(ms={("autocast", "bf16"): 4.0, ("autocast", "fp8-block"): 2.0})
    cache.store(page_a)
    merged = read_document(cache.store(page_b))
    assert {cell_run_id(merged, c) for c in merged["cells"]} == {page_b["run_id"]}
    assert {c["precision"] for c in merged["cells"]} == {"bf16", "fp8-block"}
    report = Report(merged, precisions=["bf16", "fp8-current", "fp8-block"])
    assert report.total("autocast", "fp8-current").status == "missing"  # re-measured, never mixed
    assert report.total("autocast", "fp8-block").speedup_vs_bf16 == pytest.approx(2.0, rel=1e-4)


def test_peers_belong_to_the_prequant_run() -> None:
    old = committed()
    base = {k: old[k] for k in ("question", "device")}
    new_autocast = stamp_run_ids(old)
    new_autocast.update(run_id="later", cells=[{**c, "run_id": "later"} for c in old["cells"]
                                                if c["mode"] == "autocast"], peers=[])
    kept = merge_documents(old, new_autocast)
    assert validate(kept) is kept and kept["question"] == base["question"]
    assert len(kept["peers"]) == len(old["peers"]) and {p["run_id"] for p in kept["peers"]} == {
        f"v1:{old['question_hash']}"}
    new_prequant = copy.deepcopy(new_autocast)
    new_prequant["cells"] = [{**c, "run_id": "later"} for c in old["cells"] if c["mode"] == "prequant"]
    replaced = merge_documents(old, new_prequant)
    assert validate(replaced) is replaced and replaced["peers"] == []
    assert {cell_run_id(replaced, c) for c in replaced["cells"] if c["mode"] == "autocast"} == {
        f"v1:{old['question_hash']}"}


def test_merging_a_v1_file_never_makes_two_runs_look_like_one() -> None:
    old = committed()
    new = stamp_run_ids(old)
    new.update(run_id="fresh-run", cells=[{k: v for k, v in c.items() if k != "run_id"} for c in new["cells"]
                                          if c["mode"] == "prequant"])
    merged = merge_documents(old, new)
    validate(merged)
    runs: dict[str, set[str]] = {c["mode"]: set() for c in merged["cells"]}
    for c in merged["cells"]:
        runs[c["mode"]].add(cell_run_id(merged, c))
    assert runs == {"autocast": {f"v1:{old['question_hash']}"}, "prequant": {"fresh-run"}}


# ------------------------------------------------------------------------------- report
def test_the_pages_layer_count_and_kind_decide_the_totals() -> None:
    """Old code: a page asking for 48 layers showed the file's 24."""
    doc = synthetic_document(Q)
    assert doc["question"]["num_layers"] == 24
    page = build_question(model="te-guide-5b", fields={"num_layers": 48})
    assert page.hash == doc["question_hash"]
    report = Report(doc, gemms=list(page.gemms), num_layers=page.num_layers, kind=page.kind)
    total = report.total("autocast", "bf16")
    assert total.per_layer_ms is not None
    assert report.num_layers == 48 and total.model_ms == pytest.approx(48 * total.per_layer_ms)
    assert "model (48 layers)" in report.to_text() and report.to_json()["num_layers"] == 48
    sweep = synthetic_document(build_question(sweep=["1024", "2048"]))
    as_shapes = Report(sweep, kind="shapes")
    assert as_shapes.kind == "shapes" and as_shapes.to_json()["kind"] == "shapes"


def test_the_pages_gemms_decide_order_and_must_be_the_documents_question() -> None:
    doc = synthetic_document(Q)
    reordered = list(reversed(Q.gemms))
    assert Report(doc, gemms=reordered).gemms == reordered
    other = build_question(model="te-guide-5b", fields={"seq_length": 1024})
    with pytest.raises(ValueError, match="not the question"):
        Report(doc, gemms=list(other.gemms))
    with pytest.raises(ValueError, match="num_layers"):
        Report(doc, num_layers=0)
    with pytest.raises(ValueError, match="kind"):
        Report(doc, kind="table")
    with pytest.raises(ValueError, match="unknown mode or precision"):
        Report(doc, precisions=["fp9"])


def _two_runs_in_one_mode() -> Doc:
    """A valid file whose autocast BF16 and FP8 cells come from two runs (hand-merged, say)."""
    doc = synthetic_document(Q)
    for cell in doc["cells"]:
        cell["run_id"] = "run-a" if cell["precision"] == "bf16" else "run-b"
    return validate(doc)


def test_a_speedup_is_only_computed_within_one_run() -> None:
    """Old code divided run A's BF16 by run B's FP8 and showed 2.00x."""
    report = Report(_two_runs_in_one_mode())
    total = report.total("autocast", "fp8-current")
    assert total.per_layer_ms is not None and total.status == "measured"
    assert total.speedup_vs_bf16 is None and "different measurement runs" in total.speedup_reason
    assert total.run_id == "run-b" and report.total("autocast", "bf16").run_id == "run-a"
    gemm = Q.gemms[0]
    assert report.gemm_speedup("autocast", "fp8-current", gemm) is None
    assert "run-a, run-b" in report.gemm_speedup_reason("autocast", "fp8-current", gemm)
    assert report.pass_speedup("autocast", "fp8-current", "wgrad") is None
    assert report.pass_speedup_reason("autocast", "fp8-current", "wgrad")
    assert "x vs BF16" not in report.to_text() and "no speedup vs BF16" in report.to_text()
    out = report.to_json()
    assert {t["speedup_vs_bf16"] for t in out["totals"] if t["precision"] != "bf16"} == {None}
    # one run: every speedup is a number and has no reason
    same = Report(synthetic_document(Q))
    assert same.total("autocast", "fp8-current").speedup_vs_bf16 == pytest.approx(2.0, rel=1e-4)
    assert same.total("autocast", "fp8-current").speedup_reason == ""
    assert same.gemm_speedup_reason("autocast", "fp8-current", gemm) == ""
    assert same.pass_speedup("autocast", "fp8-current", "wgrad") == pytest.approx(2.0, rel=1e-4)


def test_json_report_carries_run_ids() -> None:
    doc = synthetic_document(Q)
    out = Report(doc).to_json()
    assert out["run_ids"] == [doc["run_id"]]
    assert {c["run_id"] for c in out["cells"]} == {doc["run_id"]}
    assert {t["run_id"] for t in out["totals"]} == {doc["run_id"]}
    real = committed()
    peers = Report(real).to_json()["peers"]
    assert peers and {p["run_id"] for p in peers} == {f"v1:{real['question_hash']}"}


def test_a_precision_the_device_cannot_run_is_unsupported_with_tes_reason() -> None:
    """Old code: MXFP8 on a Hopper result was 'missing: 48 requested cells were never measured'."""
    doc = committed()
    assert not any(c["precision"] == "mxfp8" for c in doc["cells"])
    report = Report(doc, modes=["autocast", "prequant"], precisions=["bf16", "mxfp8"])
    assert report.missing_cells() == []
    status, reason = report.status("autocast", "mxfp8")
    assert (status, reason) == ("unsupported", doc["support"]["mxfp8"]["reason"])
    assert report.total("prequant", "mxfp8").speedup_vs_bf16 is None
    assert "MXFP8        unsupported: Device compute capability 10.0" in report.to_text()
    # a precision without a pre-quantized form says why, from the registry
    assert Report(doc, precisions=["fp8-delayed"]).status("prequant", "fp8-delayed") == (
        "unsupported", PRECISIONS["fp8-delayed"].absent_modes["prequant"])
    # a supported precision never measured is still missing
    doc["cells"] = [c for c in doc["cells"] if c["precision"] != "fp8-block"]
    assert Report(doc, precisions=["fp8-block"]).status("autocast", "fp8-block")[0] == "missing"


def test_report_arithmetic_at_the_validation_bounds_stays_finite() -> None:
    small = synthetic_document(build_question(shapes=["16x16x16", "32x32x32"]))
    for cell in small["cells"]:
        fast = cell["precision"] != "bf16"
        cell["ms"] = cell["stats"]["median_ms"] = MIN_MS if fast else MAX_MS
        cell["stats"]["samples_ms"] = [cell["ms"]]
    validate(small)
    report = Report(small, num_layers=MAX_LAYERS)
    for total in report.totals():
        assert total.speedup_vs_bf16 is not None and math.isfinite(total.speedup_vs_bf16) and total.speedup_vs_bf16 > 0
        assert total.model_ms is not None and math.isfinite(total.model_ms)
    json.dumps(report.to_json(), allow_nan=False)
    report.to_text().encode("utf-8")


# ------------------------------------------------------------------------------- staleness
@pytest.mark.parametrize("date", [
    "0001-01-01T00:00:00-23:59", "9999-12-31T23:59:59+23:59",  # the ends of datetime's range
    "not a date", "", "2026-13-45", "\ud800", None, 20261123, ["2026-11-23"],
])
def test_a_hostile_date_is_a_reason_to_re_measure_never_an_exception(date: Any) -> None:
    doc = synthetic_document()
    doc["provenance"]["date"] = date
    now = dt.datetime(2026, 12, 1, tzinfo=dt.timezone.utc)
    reason = is_stale(doc, max_age_days=30, now=now)
    assert reason is None or isinstance(reason, str)
    if date in ("not a date", "", "2026-13-45", None, 20261123):
        assert reason is not None and "unreadable date" in reason


def test_question_hash_is_unchanged_by_the_schema_bump() -> None:
    """Schema 2 changes what a cell records, not which file a question maps to."""
    assert Q.hash == question_hash(Q.gemms, Q.config.to_dict()) == "2160d33ec54a347e" == committed()["question_hash"]


def test_the_key_holds_everything_the_step_depends_on() -> None:
    """Class (issue 24, wrong numbers): the key held only GEMM shapes, so a page asking 1 x 15872 tokens
    was answered with the layer step of a 31 x 512 run (same GEMMs, another step). The key now holds
    the config too, canonically (a file of an older version that omits a field asks the same)."""
    split = build_question(model="te-guide-5b", fields={"micro_batch_size": 1, "seq_length": 15872})
    assert split.gemms == Q.gemms and split.hash != Q.hash
    fewer_heads = build_question(model="te-guide-5b", fields={"num_attention_heads": 16})
    assert fewer_heads.gemms == Q.gemms and fewer_heads.hash != Q.hash
    assert build_question(model="te-guide-5b", fields={"num_layers": 48}).hash == Q.hash  # totals only
    stored = committed()["question"]["config"]
    assert question_hash(Q.gemms, {k: v for k, v in stored.items() if k != "v_head_dim"}) == Q.hash
