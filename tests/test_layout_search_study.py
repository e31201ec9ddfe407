"""Issue 41 item 3: the layout-search study (the largest micro-batch of a preset layout's rank, found on the
GPU) is validated at the door, the committed files are exactly the converter's output from the raw runs,
and the memory table quotes it beside the prediction."""

from __future__ import annotations

import copy
import dataclasses
import importlib.util
import json
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from gemm_bench.question.question import build_question
from gemm_bench.results import layout_search_schema as schema
from gemm_bench.results import studies
from gemm_bench.results.cache import CacheError

REPO = Path(__file__).resolve().parents[1]
CACHE = REPO / "docs" / "_gemm_cache"
RAW = REPO / "measurements" / "2026-11-29-session18" / "call3-direct"
H100_RUNS = [RAW / "h100cap" / "layout-search.json"]
#: The H200's study was stored by ``gemm-bench study layout-search`` on the box (the refresh's path), which
#: keeps no raw run: the copy it brought back is the study file itself.
H200_STUDY = RAW / "layout-search--h200.json"
#: An uncapped raw run of the tool (call 2's, one step at each size) for the converter's own tests.
H200_RUNS = [REPO / "measurements" / "2026-11-29-session17" / "call2-layout-search" / "h200" / "layout-search.json"]
#: As measurements/2026-11-29-session18/README.md records call 3 (method version 3: each size's step timed at the
#: layout's G, none at CP > 1; on one H200, the study uncapped and the tool capped at an H100's capacity).
PROVENANCE = {"commit": "b9d3f20", "date": "2026-11-29",
              "versions": {"torch": "2.11.0+cu130", "transformer_engine": "2.20.2", "cuda": "13.0",
                           "driver": "580.159.04"}}
H100 = "NVIDIA H100 80GB HBM3"


def _tool() -> ModuleType:
    path = REPO / "tools" / "layout_search_to_study.py"
    spec = importlib.util.spec_from_file_location("layout_search_to_study", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _raw(path: Path) -> dict[str, Any]:
    return json.loads(path.read_text(encoding="utf-8"))


@pytest.mark.parametrize(("runs", "answers_for", "name"), [(H100_RUNS, H100, "layout-search--h100-80gb-hbm3.json")])
def test_the_committed_study_is_the_converters_output_from_the_raw_runs(runs: list[Path], answers_for: str | None,
                                                                        name: str) -> None:
    doc = _tool().build(runs, commit=PROVENANCE["commit"], date=PROVENANCE["date"],
                        versions=PROVENANCE["versions"], answers_for=answers_for)
    committed = studies.read_study(CACHE / "studies" / name)
    assert committed == doc
    assert studies.file_name(doc["study"], doc["device"]["name"]) == name


def test_the_committed_h200_study_is_the_one_the_box_stored() -> None:
    committed = studies.read_study(CACHE / "studies" / "layout-search--h200.json")
    assert committed == studies.read_study(H200_STUDY)
    assert committed["provenance"]["commit"] == PROVENANCE["commit"]
    assert committed["provenance"]["method"]["allocator"] == "expandable_segments:True"
    timed = {m: sorted(p for p, r in e["recipes"].items() if "steps" in r)
             for m, e in committed["data"]["models"].items()}
    assert timed == {"llama3-8b": [], "mixtral-8x7b": [],  # Llama 3 8B's CP 2 is not timed (never quoted)
                     "qwen2.5-7b": ["bf16", "fp8-current", "fp8-delayed"]}


def test_both_studies_hold_one_dense_and_one_moe_model_found_on_the_gpu() -> None:
    """Issue 41 item 3: per GPU kind, two dense whole ranks and a mixture of experts' first stage found
    (session 17, after the presets took Megatron-Bridge's BF16 gradients and FP8 primary weights: Llama 3 8B
    and Qwen2.5 7B 4 on the H200, 1 on the H100's capacity; Mixtral 8x7B's first stage 1 and 0)."""
    found = {}
    for name in ("layout-search--h200.json", "layout-search--h100-80gb-hbm3.json"):
        committed = studies.read_study(CACHE / "studies" / name)
        found[name] = {m: {p: r["largest"] for p, r in e["recipes"].items()}
                       for m, e in committed["data"]["models"].items()}
        assert committed["data"]["models"]["mixtral-8x7b"]["stage"] == "first"
    assert found["layout-search--h200.json"]["llama3-8b"] == {"bf16": 4, "fp8-delayed": 4, "fp8-current": 4}
    assert found["layout-search--h100-80gb-hbm3.json"]["llama3-8b"] == {"bf16": 1, "fp8-delayed": 1,
                                                                        "fp8-current": 1}
    assert found["layout-search--h100-80gb-hbm3.json"]["mixtral-8x7b"] == {"bf16": 0, "fp8-delayed": 0,
                                                                           "fp8-current": 0}


def test_the_h100_file_is_the_emulated_run_and_keeps_each_models_capacity() -> None:
    data = studies.read_study(CACHE / "studies" / "layout-search--h100-80gb-hbm3.json")["data"]
    assert data["emulated"] is True and data["answers_for"] == H100 and data["measured_on"] == "NVIDIA H200"
    assert data["models"]["llama3-8b"]["capacity_bytes"] == _raw(H100_RUNS[0])["capacity_bytes"] == 84100186112
    assert data["models"]["qwen2.5-7b"]["capacity_bytes"] == 84100186112
    raw = {k: v for k, v in _raw(H100_RUNS[0])["models"]["llama3-8b"]["found"]["bf16"].items()
           if k != "peak_bytes_limit"}
    assert data["models"]["llama3-8b"]["recipes"]["bf16"] == raw and raw["largest"] == 1 and raw["tried"] == [1, 2]


def _data() -> dict[str, Any]:
    return copy.deepcopy(studies.read_study(CACHE / "studies" / "layout-search--h100-80gb-hbm3.json")["data"])


def _bf16(data: dict[str, Any]) -> dict[str, Any]:
    return data["models"]["llama3-8b"]["recipes"]["bf16"]  # type: ignore[no-any-return]


@pytest.mark.parametrize(("doctor", "where"), [
    (lambda d: _bf16(d).update(largest=-1), "largest"),
    (lambda d: _bf16(d).update(tried=[]), "tried"),
    (lambda d: _bf16(d).update(largest=4), "largest"),            # never tried
    (lambda d: _bf16(d).update(tried=[1, 2, 4], largest=2), "largest"),  # 3 never tried: 2 is not bounded
    (lambda d: _bf16(d).update(tried=[2, 1]), "tried[0]"),
    (lambda d: _bf16(d).update(tried=[1, 2, 2]), "tried"),
    (lambda d: d["models"]["llama3-8b"].update(capacity_bytes=d["total_bytes"] + 1), "capacity_bytes"),
    (lambda d: d.update(emulated=False), "answers_for"),          # capped, answering for another GPU
    (lambda d: d.update(answers_for="NVIDIA H200"), "answers_for"),  # emulated, answering for itself
    (lambda d: d["models"]["llama3-8b"].update(capacity_bytes=d["total_bytes"]), "capacity_bytes"),  # not capped
    (lambda d: d["models"]["llama3-8b"]["recipes"].update(fp4={"largest": 1, "tried": [1, 2], "seconds": 1.0}),
     "recipes.fp4"),
])
def test_a_doctored_study_is_refused_at_its_path(doctor: Any, where: str) -> None:
    data = _data()
    schema.validate_data(data)
    doctor(data)
    with pytest.raises(studies.StudyError) as caught:
        schema.validate_data(data)
    assert where in caught.value.where


def test_a_search_that_reached_its_limit_is_valid_and_not_bounded() -> None:
    data = _data()
    _bf16(data).update(largest=16, tried=[1, 2, 4, 8, 16])
    schema.validate_data(data)
    assert not schema.bounded(_bf16(data)) and schema.bounded({"largest": 0, "tried": [1]})


def test_a_capped_run_needs_the_gpu_it_answers_for_and_runs_of_two_gpus_do_not_mix() -> None:
    runs = [(str(p), _raw(p)) for p in H100_RUNS]
    with pytest.raises(studies.StudyError, match="answers_for"):
        schema.stored_data(runs)
    with pytest.raises(studies.StudyError, match="mixes capped and uncapped"):
        schema.stored_data([runs[0], ("h200", {**_raw(H200_RUNS[0]), "models": {}})], H100)
    with pytest.raises(studies.StudyError, match="is in two runs"):
        schema.stored_data([runs[0], runs[0]], H100)
    other = {**runs[0][1], "models": {}, "total_bytes": 85899345920}
    with pytest.raises(studies.StudyError, match="one GPU's runs"):
        schema.stored_data([runs[0], ("other", other)], H100)


def test_the_tools_failure_and_a_model_it_did_not_build_are_kept_as_such() -> None:
    run = _raw(H200_RUNS[0])
    run["models"]["llama3-8b"]["found"]["fp8-block"] = "RuntimeError: cuBLAS failed"
    run["models"]["llama3-70b"] = {"error": "pipeline parallel 4: the rank is one stage (not built here)"}
    data = schema.stored_data([("run", run)])
    assert data["models"]["llama3-8b"]["recipes"]["fp8-block"] == {"failed": "RuntimeError: cuBLAS failed"}
    assert data["models"]["llama3-70b"] == {"error": run["models"]["llama3-70b"]["error"]}


def test_a_file_that_is_not_a_run_is_refused_naming_it(tmp_path: Path) -> None:
    bad = tmp_path / "layout-search.json"
    bad.write_text(json.dumps({"device": "NVIDIA H200", "total_bytes": 1, "capacity_bytes": 1,
                               "models": {"x": {"layout": "y"}}}), encoding="utf-8")
    with pytest.raises(CacheError) as caught:
        _tool().build([bad], commit="a", date="2026-11-28", versions=PROVENANCE["versions"], answers_for=None)
    assert caught.value.path == bad and "not a tools/gpu_layout_search.py run" in caught.value.problem


def test_the_converter_refuses_missing_versions_naming_the_option(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        _tool().main(["--commit", "a", "--date", "2026-11-28", "--versions", "torch=2.11", str(H200_RUNS[0])])
    assert "--versions: missing transformer_engine, cuda, driver" in capsys.readouterr().err


def test_the_refresh_searches_two_dense_whole_ranks_and_one_moe_first_stage() -> None:
    """Issue 41 item 3: at least one dense and one mixture-of-experts model per GPU kind. The dense
    presets are PP 1 (the whole rank); Mixtral 8x7B's is PP 4, so its first stage is built: 8 of its 32
    layers and the embedding, min(PP, G) = 4 micro-batches in flight, no output layer. A PP-1 preset
    without a vocabulary (the TE guide's layer: it failed the whole study on the GPU in session 16), one
    with virtual stages and one at another EP than the measured layer are not built, each said why."""
    from gemm_bench.measure.layout_search_study import searched_models
    from gemm_bench.question.stage_shape import SearchedRank, searched_rank

    assert searched_models() == ["llama3-8b", "qwen2.5-7b", "mixtral-8x7b"]

    def rank(model: str, **layout: Any) -> SearchedRank | str:
        q = build_question(model=model, layout=layout or None)
        found, _ = q.layout_or_assumed()
        assert found is not None and q.config is not None
        return searched_rank(found, q.config)

    assert rank("llama3-8b") == SearchedRank("only", 32, True, 1, 4096, 8, "bf16", True)  # Bridge's perf recipe
    assert rank("mixtral-8x7b") == SearchedRank("first", 8, False, 4, 4096, 16)
    assert rank("mixtral-8x7b", gpus=64, pp=4, global_batch_size=32) == SearchedRank("first", 8, False, 2, 4096, 16)
    assert "virtual stages" in str(rank("mixtral-8x7b", gpus=64, pp=4, vpp=2))
    q = build_question(model="mixtral-8x7b")
    assert q.layout is not None and q.config is not None
    at_ep8 = dataclasses.replace(q.layout, ep=8, gpus=64)
    assert "expert parallel 8: the measured layer is at EP 1" == searched_rank(at_ep8, q.config)


# ------------------------------------------------------------------------------ the memory table
LLAMA_8B = {"NVIDIA H100 80GB HBM3": CACHE / "45a55c5d892e31af--h100-80gb-hbm3.json",
            "NVIDIA H200": CACHE / "45a55c5d892e31af--h200.json"}


def _searches() -> list[dict[str, Any]]:
    docs, errors = studies.read_studies(CACHE, schema.NAME)
    assert not errors
    return docs


def _table(device: str, layout: Any = None) -> tuple[Any, list[list[Any]], Any]:
    from gemm_bench.question.layout import PRESET_LAYOUTS
    from gemm_bench.question.question import Question
    from gemm_bench.report.layout_search import model_search
    from gemm_bench.results.cache import read_document
    from gemm_bench.results.typed import parse
    from gemm_benchmark.layout_memory import memory_rows

    doc = dict(read_document(LLAMA_8B[device]))
    config = Question.from_dict(doc["question"]).config
    search = model_search(_searches(), device, "llama3-8b", config, layout or PRESET_LAYOUTS["llama3-8b"].layout)
    rows, why = memory_rows(parse(doc), "llama3-8b", layout, search)
    assert why is None
    return search, rows, doc


def test_the_h100_table_reads_the_emulated_run_beside_the_prediction() -> None:
    from gemm_bench.report.layout_search import search_note
    from gemm_benchmark.layout_memory import header

    search, rows, doc = _table(H100)
    recipes = _data()["models"]["llama3-8b"]["recipes"]
    assert header(search)[4] == "Largest micro-batch (H100 80GB HBM3 capacity emulated on an H200)"
    by_recipe = {row[0].text: row for row in rows}
    bf16 = by_recipe["BF16"]
    assert bf16[4].text == str(recipes["bf16"]["largest"])
    assert bf16[5].text == f"{recipes['bf16']['largest'] - int(bf16[3].text):+d}".replace("+0", "0")
    assert by_recipe["FP8 Delayed"][4].text == str(recipes["fp8-delayed"]["largest"])
    assert by_recipe["FP8 Block"][4].text == "not searched" and by_recipe["FP8 Block"][5].text == "–"
    note = search_note(search, int(doc["model_step"]["capacity_bytes"]))
    assert "the CUDA context and libraries' workspaces outside the allocator are the H200's" in note
    assert "capped at the H100 80GB HBM3's 78.3 GiB" in note and "prediction's capacity" not in note  # the result's


def test_the_h200_table_reads_the_uncapped_run() -> None:
    from gemm_benchmark.layout_memory import header

    search, rows, _ = _table("NVIDIA H200")
    assert header(search)[4] == "Largest micro-batch (found on the GPU)"
    by_recipe = {row[0].text: row for row in rows}
    assert [by_recipe[r][4].text for r in ("BF16", "FP8 Delayed", "FP8 Current")] == ["4", "4", "4"]


def test_another_layout_is_not_searched_and_says_what_was() -> None:
    import dataclasses

    from gemm_bench.question.layout import PRESET_LAYOUTS
    from gemm_bench.report.layout_search import found_text

    other = dataclasses.replace(PRESET_LAYOUTS["llama3-8b"].layout, recompute="full")
    search, rows, _ = _table(H100, other)
    assert isinstance(search, str) and search.startswith("not searched for this layout (searched: 8 GPUs: CP 2")
    assert {row[4].text for row in rows} == {"not searched"} and found_text(None, "bf16") == "not searched"


def test_a_search_stopped_at_its_limit_says_at_least() -> None:
    from gemm_bench.report.layout_search import Search, difference_text, found_text

    search = Search("NVIDIA H200", "NVIDIA H200", False, 1, 4096, 32, 8,
                    {"bf16": {"largest": 16, "tried": [1, 2, 4, 8, 16], "seconds": 1.0}})
    assert found_text(search, "bf16") == "at least 16" and difference_text(search, "bf16", 3) == "at least +13"


def test_the_overlap_flags_change_no_memory_so_the_search_still_answers() -> None:
    import dataclasses

    from gemm_bench.question.layout import PRESET_LAYOUTS

    preset = PRESET_LAYOUTS["llama3-8b"].layout
    for flags in ({"overlap_grad_reduce": True, "overlap_param_gather": True},
                  {"overlap_grad_reduce": False, "overlap_param_gather": False}):
        search, rows, _ = _table("NVIDIA H200", dataclasses.replace(preset, **flags))
        assert not isinstance(search, str), search
        assert [row[4].text for row in rows][:3] == ["4", "4", "4"]


def test_a_first_stage_search_is_valid_and_answers_only_its_own_stage() -> None:
    """A mixture of experts' first-stage search (Mixtral 8x7B, PP 4: 8 layers, 4 micro-batches in flight)
    is held to the schema (stage and in_flight together), answers the page's preset layout, says in its
    note that the first pipeline stage was built, and does not answer another G (another count in flight)."""
    from gemm_bench.question.layout import PRESET_LAYOUTS
    from gemm_bench.question.question import Question
    from gemm_bench.report.layout_search import model_search, search_note
    from gemm_bench.results.cache import read_document

    data = _data()
    data["answers_for"] = data["measured_on"] = "NVIDIA H200"
    data["emulated"] = False
    layout = PRESET_LAYOUTS["mixtral-8x7b"].layout
    data["models"] = {"mixtral-8x7b": {
        "layout": layout.describe(overlap=False), "layers": 8, "tokens": 4096, "optimizer_shards": 16,
        "capacity_bytes": data["total_bytes"], "stage": "first", "in_flight": 4,
        "recipes": {"bf16": {"largest": 1, "tried": [1, 2], "seconds": 30.0}}}}
    schema.validate_data(data)
    half = copy.deepcopy(data)
    del half["models"]["mixtral-8x7b"]["in_flight"]
    with pytest.raises(studies.StudyError, match="stage and in_flight"):
        schema.validate_data(half)
    doc = {"data": data, "device": {"name": "NVIDIA H200"}}
    config = Question.from_dict(dict(read_document(CACHE / "8a24d02daa8fda3a--h200.json"))["question"]).config
    assert config is not None
    found = model_search([doc], "NVIDIA H200", "mixtral-8x7b", config, layout)
    assert not isinstance(found, str) and found is not None
    assert (found.stage, found.in_flight, found.layers) == ("first", 4, 8)
    assert "the first pipeline stage built for real, 4 micro-batches in flight" in search_note(found, 1 << 30)
    other_g = dataclasses.replace(layout, global_batch_size=32, num_microbatches=None)  # G = 2: two in flight
    assert str(model_search([doc], "NVIDIA H200", "mixtral-8x7b", config, other_g)).startswith(
        "not searched for this layout")
