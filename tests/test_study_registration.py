"""One registration helper for every study schema (:func:`gemm_bench.results.studies.register_schema`) and
one lookup of "this GPU kind's stored study" (:func:`gemm_bench.results.studies.stored_study`), which
``gemm-bench study`` and the refresh's plan both ask.

Before: each schema module checked its own ``data`` block's object and keys (or did not: loss-parity and
tp-comm carried a key no reader knows without a word), and the two callers each matched a GPU's file their
own way (one by file name, one by device slug)."""

from __future__ import annotations

import copy
import json
import re
import shutil
import sys
import types
from pathlib import Path
from typing import Any

import pytest

from gemm_bench.results import studies
from gemm_bench.results.cache import CacheError
from tests.test_cli import call, one_error

ROOT = Path(__file__).resolve().parent.parent
STUDY_FILES = sorted((ROOT / "docs" / "_gemm_cache" / "studies").glob("*.json"))
PROVENANCE = {"torch": "2.11.0", "transformer_engine": "2.20.2", "cuda": "12.9", "driver": "580.00",
              "commit": "abc1234", "date": "2025-01-01T00:00:00+00:00"}


def copy_study(path: Path, cache: Path) -> Path:
    """``path`` copied into ``cache``'s studies/ folder under its own name (the name a reader checks)."""
    target = studies.study_dir(cache) / path.name
    target.parent.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(path, target)
    return target


# ------------------------------------------------------------------------------ the registration helper
def test_the_committed_files_cover_every_registered_study() -> None:
    """So the next test checks the door of every study, a new one included once its file is committed."""
    studies.get("loss-parity")  # imports every module of STUDY_MODULES
    assert {p.name.split("--")[0] for p in STUDY_FILES} == set(studies.REGISTRY)


@pytest.mark.parametrize("path", STUDY_FILES, ids=lambda p: p.name)
def test_every_study_file_with_a_key_no_reader_knows_is_refused_with_its_path(path: Path, tmp_path: Path) -> None:
    """Before: loss-parity and tp-comm files carried ``data.surprise`` silently (their schemas checked no keys)."""
    target = copy_study(path, tmp_path)
    doc = json.loads(target.read_text(encoding="utf-8"))
    assert studies.read_study(target) == doc  # the committed file itself is valid
    doc["data"]["surprise"] = 1
    target.write_text(json.dumps(doc), encoding="utf-8")
    with pytest.raises(CacheError) as caught:
        studies.read_study(target)
    assert str(caught.value).startswith(f"{target}: does not match the study schema: $.data.surprise: is not a "
                                        "field here (known: ")
    docs, errors = studies.read_studies(tmp_path, doc["study"])
    assert docs == [] and [e.path for e in errors] == [target]


@pytest.fixture
def toy(monkeypatch: pytest.MonkeyPatch) -> list[dict[str, Any]]:
    """A study registered through the helper in a registry of its own (the project's stays as it is); the
    list records what its check was handed."""
    studies.get("loss-parity")
    monkeypatch.setattr(studies, "REGISTRY", dict(studies.REGISTRY))
    seen: list[dict[str, Any]] = []

    def check(data: dict[str, Any]) -> None:
        seen.append(data)
        studies.number(data["seconds"], "$.data.seconds", minimum=0.0)

    studies.register_schema("toy-study", title="A toy", method_version="1", measure="nowhere:measure",
                            fields=("seconds",), optional=("note",), check=check)
    return seen


def toy_document(data: Any) -> dict[str, Any]:
    return {"kind": "study", "schema_version": studies.STUDY_SCHEMA_VERSION, "study": "toy-study",
            "method_version": "1", "device": {"name": "NVIDIA H200"},
            "provenance": {**PROVENANCE, "method": {}}, "data": data}


def test_a_schema_registered_through_the_helper_is_checked_at_the_door(toy: list[dict[str, Any]],
                                                                       tmp_path: Path) -> None:
    study = studies.get("toy-study")
    assert (study.name, study.title, study.method_version, study.measure, study.min_gpus) == (
        "toy-study", "A toy", "1", "nowhere:measure", 1)
    path = studies.write_study(tmp_path, toy_document({"seconds": 2.5, "note": "optional"}))
    assert studies.read_study(path)["data"] == {"seconds": 2.5, "note": "optional"}
    assert toy[-1] == {"seconds": 2.5, "note": "optional"}  # the check ran, on the block
    for data, problem in [([1], "$.data: must be an object, got list"),
                          ({}, "$.data.seconds: is missing"),
                          ({"seconds": 1, "surprise": 2},
                           "$.data.surprise: is not a field here (known: seconds, note)"),
                          ({"seconds": -1}, "$.data.seconds: must be at least 0, got -1")]:
        path.write_text(json.dumps(toy_document(data)), encoding="utf-8")
        with pytest.raises(CacheError) as caught:
            studies.read_study(path)
        assert str(caught.value) == f"{path}: does not match the study schema: {problem}"
        with pytest.raises(studies.StudyError, match=re.escape(problem)):
            study.validate_data(data)  # the module's validate_data is the same door
    # The object and key checks came first: the check saw only blocks of known keys (written, read back,
    # then the last case's twice).
    assert toy == [{"seconds": 2.5, "note": "optional"}] * 2 + [{"seconds": -1}] * 2


def test_the_helper_refuses_a_name_no_file_can_carry(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(studies, "REGISTRY", {})
    with pytest.raises(ValueError, match="study name 'Toy Study' is not lower-case letters, digits and dashes"):
        studies.register_schema("Toy Study", title="t", method_version="1", measure="m:f", fields=(),
                                check=lambda data: None)
    assert studies.REGISTRY == {}


def test_each_schema_modules_validate_data_is_its_studys_door() -> None:
    from gemm_bench.results import dynamic_range_schema, layout_search_schema, loss_parity_schema, tp_comm_schema

    for module in (dynamic_range_schema, layout_search_schema, loss_parity_schema, tp_comm_schema):
        assert module.validate_data is module.STUDY.validate_data is studies.get(module.NAME).validate_data
        assert module.STUDY.method_version == module.METHOD_VERSION


# ------------------------------------------------------------------------------ one lookup of a GPU's stored study
def test_stored_study_is_this_gpu_kinds_file_and_says_why_it_is_unreadable(tmp_path: Path) -> None:
    h100, h200 = (copy_study(ROOT / "docs" / "_gemm_cache" / "studies" / f"layout-search--{slug}.json", tmp_path)
                  for slug in ("h100-80gb-hbm3", "h200"))
    found = studies.stored_study(tmp_path, "layout-search", "NVIDIA H100 80GB HBM3")
    assert found.document == studies.read_study(h100) and found.unreadable is None
    assert [d["device"]["name"] for d in found.documents] == ["NVIDIA H100 80GB HBM3", "NVIDIA H200"]
    # Names of one slug are one GPU kind.
    assert studies.stored_study(tmp_path, "layout-search", "nvidia_h200").document == studies.read_study(h200)
    # A corrupt file is this GPU's reason, never another's.
    h200.write_text('{"kind": "study", "data": [', encoding="utf-8")
    broken = studies.stored_study(tmp_path, "layout-search", "NVIDIA H200")
    assert broken.document is None and broken.unreadable is not None and broken.unreadable.path == h200
    assert [d["device"]["name"] for d in broken.documents] == ["NVIDIA H100 80GB HBM3"]
    assert studies.stored_study(tmp_path, "layout-search", "NVIDIA H100 80GB HBM3").unreadable is None
    nothing = studies.stored_study(tmp_path, "layout-search", "NVIDIA B200")
    assert (nothing.document, nothing.unreadable) == (None, None) and len(nothing.documents) == 1


def test_the_refresh_plans_a_gpus_unreadable_study_and_keeps_another_gpus(tmp_path: Path) -> None:
    from gemm_bench.cli.refresh import Rules, plan_studies

    for path in STUDY_FILES:
        copy_study(path, tmp_path)
    (studies.study_dir(tmp_path) / "layout-search--h200.json").write_text("{", encoding="utf-8")
    rules = Rules(stale_when=())
    h200 = {t.name: t.reason for t in plan_studies(tmp_path, "NVIDIA H200", None, rules, gpus=4)}
    assert list(h200) == ["layout-search"] and h200["layout-search"].startswith("unreadable: ")
    # The H100's own layout search is fresh, and was emulated on an H200: a real H100 measures it.
    h100 = {t.name: t.reason for t in plan_studies(tmp_path, "NVIDIA H100 80GB HBM3", None, rules, gpus=4)}
    assert set(h100) == {"layout-search", "tp-comm"} and h100["layout-search"].startswith("emulated on an ")
    assert h100["tp-comm"] == "not measured on this device yet"


# ------------------------------------------------------------------------------ gemm-bench study keeps a wider run
@pytest.fixture
def study_box(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> dict[str, Any]:
    """``gemm-bench study`` on a fake GPU box (``box["gpus"]`` GPUs named ``box["name"]``) whose cache holds
    the committed tp-comm study of four H200s; measuring stores that study again and counts itself."""
    from gemm_bench.cli import commands
    from gemm_bench.measure import studies as measure_studies

    committed = ROOT / "docs" / "_gemm_cache" / "studies" / "tp-comm--h200.json"
    copy_study(committed, tmp_path)
    box: dict[str, Any] = {"gpus": 2, "name": "NVIDIA H200", "measured": 0, "cache": tmp_path}
    cuda = types.SimpleNamespace(device_count=lambda: box["gpus"], get_device_name=lambda index: box["name"])
    monkeypatch.setitem(sys.modules, "torch", types.SimpleNamespace(cuda=cuda))
    monkeypatch.setattr(commands, "load_runner", lambda: (None, RuntimeError))

    def measure(name: str, cache_dir: Path | None = None) -> dict[str, Any]:
        box["measured"] += 1
        box["measured_for"] = cache_dir  # the cache the study is stored in (the layout search seeds from it)
        return copy.deepcopy(studies.read_study(committed))

    monkeypatch.setattr(measure_studies, "measure_study", measure)
    return box


def test_gemm_bench_study_refuses_to_replace_a_run_on_more_gpus(study_box: dict[str, Any]) -> None:
    code, out, err = call(["study", "tp-comm", "--cache-dir", str(study_box["cache"])])
    assert code == 2 and out == "" and study_box["measured"] == 0
    assert ("STUDY: the stored tp-comm study of the NVIDIA H200 was measured on 4 GPUs and this box has 2"
            in one_error(err))


@pytest.mark.parametrize(("gpus", "name", "flags"), [(4, "NVIDIA H200", []), (2, "NVIDIA H200", ["--replace-wider"]),
                                                     (2, "NVIDIA H100 80GB HBM3", [])])
def test_gemm_bench_study_measures_where_nothing_wider_is_lost(study_box: dict[str, Any], gpus: int, name: str,
                                                              flags: list[str]) -> None:
    study_box.update(gpus=gpus, name=name)
    code, out, err = call(["study", "tp-comm", *flags, "--cache-dir", str(study_box["cache"])])
    assert code == 0 and err == "" and study_box["measured"] == 1 and study_box["measured_for"] == study_box["cache"]
    assert out.startswith(f"stored {studies.study_dir(study_box['cache']) / 'tp-comm--h200.json'} (")


def test_the_refresh_and_the_readers_know_the_same_studies() -> None:
    """One list of study modules (results.studies.STUDY_MODULES): measure.studies once kept its own copy."""
    import importlib

    from gemm_bench.measure import studies as measuring

    names = {importlib.import_module(m).NAME for m in studies.STUDY_MODULES}
    assert set(measuring.load_registry()) == names == {"loss-parity", "dynamic-range", "tp-comm", "layout-search"}
    assert not hasattr(measuring, "STUDY_MODULES")
