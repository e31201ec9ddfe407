"""The layout search seeded with the answer its stored study found (issue 41 item 3, issue 42 item 6: a
one-GPU refresh no slower): the seeded search's answer is the unseeded one's, in fewer tries; the tool's
``--seed-from`` seeds only a rank equal to the stored one; the study carries the seed; the refresh's study
passes its cache to the tool."""

from __future__ import annotations

import copy
import importlib.util
import json
import shutil
import subprocess
import sys
import types
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gemm_bench.measure.microbatch_search import search_largest
from gemm_bench.results import layout_search_schema as schema
from gemm_bench.results import studies
from gemm_bench.results.cache import CacheError
from tests.conftest import fuzz_examples

REPO = Path(__file__).resolve().parents[1]
CACHE = REPO / "docs" / "_gemm_cache"
H200_STUDY = CACHE / "studies" / "layout-search--h200.json"
H200 = "NVIDIA H200"
#: The H200 the committed study searched: its whole memory, the capacity every entry holds.
H200_BYTES = 150109880320


def _search(k: int, limit: int, seed: int | None) -> tuple[int, list[int], list[int]]:
    """The search under ``fits(n) = n <= k``; also the sizes ``fits`` was asked, in order."""
    asked: list[int] = []

    def fits(n: int) -> bool:
        asked.append(n)
        return n <= k

    largest, tried = search_largest(fits, limit, seed)
    return largest, tried, asked


# ------------------------------------------------------------------------------ the search itself
@settings(max_examples=fuzz_examples(400), deadline=None)
@given(data=st.data(), limit=st.integers(1, 70), seed=st.none() | st.integers(1, 100))
def test_a_seeded_search_answers_as_the_unseeded_one(data: st.DataObject, limit: int, seed: int | None) -> None:
    """For every monotone ``fits`` (``n <= k``, k from 0 to the limit and past it) and every seed: the same
    answer as from 1, each try once and honestly recorded, within 1..limit, starting at the seed
    (clamped), and bounded below the limit (``largest + 1`` tried: the tool times steps on it, the
    schema requires it)."""
    k = data.draw(st.integers(0, limit + 3), label="k")
    unseeded, _, _ = _search(k, limit, None)
    largest, tried, asked = _search(k, limit, seed)
    assert unseeded == largest == min(k, limit)
    assert tried == asked and len(set(tried)) == len(tried) and all(1 <= n <= limit for n in tried)
    assert tried[0] == min(seed or 1, limit)
    assert largest == 0 or largest in tried
    if largest < limit:
        assert largest + 1 in tried
    block = {"largest": largest, "tried": tried, "seconds": 1.0, **({"seed": min(seed, limit)} if seed else {})}
    schema._recipe(block, "$")  # the study's door takes every seeded search's record


@pytest.mark.parametrize(("k", "limit", "seed", "tried", "largest"), [
    (4, 16, None, [1, 2, 4, 8, 6, 5], 4),       # the H200's Llama 3 8B and Qwen2.5 7B, as stored
    (4, 16, 4, [4, 5], 4),                      # seeded with that answer: two tries
    (4, 16, 1, [1, 2, 4, 8, 6, 5], 4),          # seed 1 is the unseeded search
    (1, 16, 1, [1, 2], 1),                      # Mixtral 8x7B's stage
    (4, 16, 6, [6, 1, 3, 4, 5], 4),             # a seed too large: 1, then bisecting below it
    (0, 16, 3, [3, 1], 0),                      # nothing fits
    (12, 16, 4, [4, 5, 10, 16, 13, 11, 12], 12),  # a seed too small: doubling from its neighbour
    (16, 16, 40, [16], 16),                     # clamped to the limit, which fits: "at least"
    (20, 16, 16, [16], 16),
    (15, 16, 16, [16, 1, 8, 12, 14, 15], 15),
])
def test_the_tries_of_a_seeded_search(k: int, limit: int, seed: int | None, tried: list[int], largest: int) -> None:
    assert _search(k, limit, seed)[:2] == (largest, tried)


def test_a_seed_below_one_or_no_limit_is_a_callers_bug() -> None:
    with pytest.raises(ValueError, match="seed must be at least 1"):
        search_largest(lambda n: True, 16, 0)
    with pytest.raises(ValueError, match="limit must be at least 1"):
        search_largest(lambda n: True, 0)


def test_the_gpu_search_records_its_seed(monkeypatch: pytest.MonkeyPatch) -> None:
    """``largest_microbatch`` on the CPU fake (out of memory above 2): the seed it started from, clamped."""
    from tests import fake_te
    from tests.test_model_step_measure_cpu import TINY

    parts = fake_te.install(monkeypatch, oom_above=2)
    found = parts.largest_microbatch(TINY, 2, "bf16", limit=8, seed=2)
    assert (found["largest"], found["tried"], found["seed"]) == (2, [2, 3], 2)
    found = parts.largest_microbatch(TINY, 2, "bf16", limit=4, seed=9)
    assert (found["largest"], found["tried"], found["seed"]) == (2, [4, 1, 2, 3], 4)
    assert "seed" not in parts.largest_microbatch(TINY, 2, "bf16", limit=4)


# ------------------------------------------------------------------------------ the study's seeds
def _stored() -> dict[str, Any]:
    return copy.deepcopy(studies.read_study(H200_STUDY)["data"])


def _rank(data: dict[str, Any], model: str, **change: Any) -> dict[str, Any]:
    return {**{k: v for k, v in data["models"][model].items() if k != "recipes"}, **change}


def test_a_stored_answer_seeds_only_the_same_rank() -> None:
    data = _stored()
    assert schema.seed(data, "llama3-8b", _rank(data, "llama3-8b"), "bf16") == 4
    assert schema.seed(data, "mixtral-8x7b", _rank(data, "mixtral-8x7b"), "fp8-current") == 1
    for model, change in (("llama3-8b", {"capacity_bytes": 84100186112}), ("llama3-8b", {"layers": 16}),
                          ("llama3-8b", {"tokens": 8192}), ("llama3-8b", {"optimizer_shards": 4}),
                          ("llama3-8b", {"layout": "8 GPUs: DP 8, distributed optimizer, G = 32"}),
                          ("llama3-8b", {"stage": "first", "in_flight": 1}), ("mixtral-8x7b", {"in_flight": 1})):
        assert schema.seed(data, model, _rank(data, model, **change), "bf16") is None, (model, change)
    assert schema.seed(data, "llama3-8b", _rank(data, "llama3-8b"), "fp8-block") is None   # not searched
    assert schema.seed(data, "llama3-70b", _rank(data, "llama3-8b"), "bf16") is None       # no such model
    assert schema.seed(None, "llama3-8b", _rank(data, "llama3-8b"), "bf16") is None
    data["models"]["llama3-8b"]["recipes"]["bf16"] = {"failed": "RuntimeError: x"}
    data["models"]["qwen2.5-7b"]["recipes"]["bf16"].update(largest=0, tried=[1])
    assert schema.seed(data, "llama3-8b", _rank(data, "llama3-8b"), "bf16") is None
    assert schema.seed(data, "qwen2.5-7b", _rank(data, "qwen2.5-7b"), "bf16") is None


def test_the_seed_file_is_read_by_the_study_reader(tmp_path: Path) -> None:
    """A cache folder gives this GPU's file (or none: its first search); a file that is not a valid
    layout-search study is an error naming it."""
    (tmp_path / "studies").mkdir()
    assert schema.stored_seeds(tmp_path, H200) is None
    shutil.copyfile(H200_STUDY, tmp_path / "studies" / H200_STUDY.name)
    assert schema.stored_seeds(tmp_path, H200) == _stored()
    assert schema.stored_seeds(H200_STUDY, "NVIDIA H100 80GB HBM3") == _stored()  # a file is taken as given
    assert schema.stored_seeds(tmp_path, "NVIDIA H100 80GB HBM3") is None
    bad = tmp_path / "studies" / H200_STUDY.name
    bad.write_text(H200_STUDY.read_text(encoding="utf-8")[:500], encoding="utf-8")
    with pytest.raises(CacheError) as caught:
        schema.stored_seeds(tmp_path, H200)
    assert caught.value.path == bad and "not valid JSON" in caught.value.problem
    with pytest.raises(CacheError, match="not 'layout-search'"):
        schema.stored_seeds(CACHE / "studies" / "tp-comm--h200.json", H200)


def test_a_seeded_record_is_valid_and_its_first_try_is_the_seed() -> None:
    data = _stored()
    recipe = data["models"]["llama3-8b"]["recipes"]["bf16"]
    recipe.update(tried=[4, 5], seed=4)
    schema.validate_data(data)
    for doctor, where in (({"seed": 5}, "tried[0]"), ({"seed": 0}, "seed"), ({"tried": [1, 4, 5]}, "tried[0]")):
        bad = copy.deepcopy(data)
        bad["models"]["llama3-8b"]["recipes"]["bf16"].update(doctor)
        with pytest.raises(studies.StudyError) as caught:
            schema.validate_data(bad)
        assert caught.value.where.endswith(f"recipes.bf16.{where}"), caught.value.where
    del recipe["seed"]
    with pytest.raises(studies.StudyError, match="must be 1"):
        schema.validate_data(data)


# ------------------------------------------------------------------------------ the tool, on the CPU fake
def _tool(name: str = "gpu_layout_search") -> ModuleType:
    spec = importlib.util.spec_from_file_location(name, REPO / "tools" / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture
def h200(monkeypatch: pytest.MonkeyPatch) -> list[dict[str, Any]]:
    """The tool on a fake H200 whose ranks fit what the committed study found (Llama 3 8B 4, Mixtral 8x7B's
    stage 1, at any recipe): each search's keywords, in order."""
    from tests import fake_te

    parts = fake_te.install(monkeypatch)
    import torch

    monkeypatch.setattr(torch.cuda, "get_device_name", lambda *a: H200)
    monkeypatch.setattr(torch.cuda, "get_device_properties", lambda i: types.SimpleNamespace(total_memory=H200_BYTES))
    monkeypatch.setattr(torch.cuda, "set_per_process_memory_fraction", lambda fraction: None)
    calls: list[dict[str, Any]] = []

    def largest_microbatch(config: Any, layers: int, precision: str, *, limit: int, seed: int | None = None,
                           **model: Any) -> dict[str, Any]:
        calls.append({"layers": layers, "precision": precision, "seed": seed})
        fits = 4 if layers == 32 else 1
        largest, tried = search_largest(lambda n: n <= fits, limit, seed)
        return {"largest": largest, "tried": tried, "seconds": 0.1, **({"seed": min(seed, limit)} if seed else {})}

    monkeypatch.setattr(parts, "largest_microbatch", largest_microbatch)
    return calls


def _run(tmp_path: Path, *flags: str) -> dict[str, Any]:
    out = tmp_path / "run"
    assert _tool().main(["--out", str(out), "--models", "llama3-8b,mixtral-8x7b", "--precisions",
                         "bf16,fp8-current", *flags]) == 0
    return json.loads((out / "layout-search.json").read_text(encoding="utf-8"))


def _recipes(run: dict[str, Any]) -> dict[str, tuple[Any, ...]]:
    return {f"{m}/{p}": (f["largest"], f["tried"], f.get("seed")) for m, e in run["models"].items()
            for p, f in e["found"].items()}


def test_the_tool_seeds_each_recipe_from_the_stored_study(h200: list[dict[str, Any]], tmp_path: Path,
                                                          capsys: pytest.CaptureFixture[str]) -> None:
    run = _run(tmp_path, "--seed-from", str(CACHE))  # the cache folder: this GPU's file in it
    assert _recipes(run) == {"llama3-8b/bf16": (4, [4, 5], 4), "llama3-8b/fp8-current": (4, [4, 5], 4),
                             "mixtral-8x7b/bf16": (1, [1, 2], 1), "mixtral-8x7b/fp8-current": (1, [1, 2], 1)}
    assert "llama3-8b bf16: largest micro-batch 4 (tried [4, 5], seeded at 4, " in capsys.readouterr().out
    data = schema.stored_data([("run", run)])  # the study carries the seed, its door accepts it
    assert data["models"]["llama3-8b"]["recipes"]["bf16"]["seed"] == 4
    unseeded = _run(tmp_path)
    assert _recipes(unseeded) == {"llama3-8b/bf16": (4, [1, 2, 4, 8, 6, 5], None),
                                  "llama3-8b/fp8-current": (4, [1, 2, 4, 8, 6, 5], None),
                                  "mixtral-8x7b/bf16": (1, [1, 2], None), "mixtral-8x7b/fp8-current": (1, [1, 2], None)}
    assert "seed" not in schema.stored_data([("run", unseeded)])["models"]["llama3-8b"]["recipes"]["bf16"]


def test_another_capacity_is_not_seeded_and_a_bad_file_warns(h200: list[dict[str, Any]], tmp_path: Path,
                                                             capsys: pytest.CaptureFixture[str]) -> None:
    """An H100's capacity emulated on the H200 is another rank than the H200 study's: unseeded. A corrupt
    seed file is a warning naming it, and the run goes on from 1 (it only orders the tries, and the
    refresh must be able to replace a corrupt study by measuring it again)."""
    run = _run(tmp_path, "--seed-from", str(H200_STUDY), "--capacity-bytes", "84100186112")
    assert all(seed is None for _, _, seed in _recipes(run).values())
    bad = tmp_path / H200_STUDY.name
    bad.write_text("{", encoding="utf-8")
    capsys.readouterr()
    run = _run(tmp_path, "--seed-from", str(bad))
    assert all(seed is None for _, _, seed in _recipes(run).values())
    err = capsys.readouterr().err
    assert f"warning: --seed-from: {bad}: is not valid JSON" in err and "every search starts at 1" in err


# ------------------------------------------------------------------------------ the refresh's study
def test_the_study_seeds_the_tool_from_the_cache_it_is_stored_in(monkeypatch: pytest.MonkeyPatch,
                                                                 tmp_path: Path) -> None:
    from gemm_bench.measure import layout_search_study

    raw = REPO / "measurements" / "2026-11-29-session17" / "call2-layout-search" / "h200" / "layout-search.json"
    commands: list[list[str]] = []

    def run(command: list[str], check: bool) -> subprocess.CompletedProcess[str]:
        commands.append(command)
        shutil.copyfile(raw, Path(command[command.index("--out") + 1]) / "layout-search.json")
        return subprocess.CompletedProcess(command, 0)

    monkeypatch.setattr(layout_search_study.subprocess, "run", run)
    data, method = layout_search_study.measure(tmp_path)
    assert commands[0][commands[0].index("--seed-from") + 1] == str(tmp_path)
    assert method["options"] == ["--time-steps", "--seed-from"]
    schema.validate_data(data)
    layout_search_study.measure()
    assert commands[1][commands[1].index("--seed-from") + 1] == str(CACHE)  # the repository's cache by default


def test_measuring_a_study_gives_the_cache_only_to_a_study_that_reads_it(monkeypatch: pytest.MonkeyPatch,
                                                                        tmp_path: Path) -> None:
    """``gemm-bench study NAME --cache-dir DIR`` (the refresh's process) hands DIR to the layout search."""
    import gemm_bench.measure
    import gemm_bench.measure.backends
    from gemm_bench.measure import layout_search_study
    from gemm_bench.measure import studies as measure_studies

    assert studies.get(schema.NAME).reads_cache and not studies.get("tp-comm").reads_cache
    given: list[tuple[Any, ...]] = []
    stored = studies.read_study(H200_STUDY)

    def measure(*args: Any, **kwargs: Any) -> tuple[dict[str, Any], dict[str, Any]]:
        given.append((args, kwargs))
        return copy.deepcopy(stored["data"]), {}

    provenance = types.SimpleNamespace(collect=lambda method, te: (stored["device"], stored["provenance"]))
    monkeypatch.setattr(gemm_bench.measure, "provenance", provenance, raising=False)
    monkeypatch.setattr(gemm_bench.measure.backends, "te", types.SimpleNamespace(VERSION="0"), raising=False)
    monkeypatch.setattr(layout_search_study, "measure", measure)
    measure_studies.measure_study(schema.NAME, tmp_path)
    measure_studies.measure_study(schema.NAME)
    assert given == [((), {"cache_dir": tmp_path}), ((), {})]


def test_python_runs_the_tool_help_without_a_gpu() -> None:
    done = subprocess.run([sys.executable, str(REPO / "tools" / "gpu_layout_search.py"), "--help"],
                          capture_output=True, text=True, check=False)
    assert done.returncode == 0 and "--seed-from PATH" in done.stdout


def test_the_converter_says_a_run_was_seeded(tmp_path: Path) -> None:
    """``tools/layout_search_to_study.py`` (the emulated H100's path, run by hand with ``--seed-from``):
    the recipe's seed is stored, and the method's words say the search started from it only then."""
    converter = _tool("layout_search_to_study")
    raw = REPO / "measurements" / "2026-11-29-session17" / "call2-layout-search" / "h200" / "layout-search.json"
    run = json.loads(raw.read_text(encoding="utf-8"))
    run["models"]["llama3-8b"]["found"]["bf16"].update(tried=[4, 5], seed=4)
    seeded = tmp_path / "layout-search.json"
    seeded.write_text(json.dumps(run), encoding="utf-8")
    versions = {"torch": "2.11.0+cu130", "transformer_engine": "2.20.2", "cuda": "13.0", "driver": "580.159.04"}
    docs = [converter.build([path], commit="abc1234", date="2026-12-01", versions=versions, answers_for=None)
            for path in (raw, seeded)]
    assert docs[0]["provenance"]["method"]["what"] == converter.WHAT
    assert docs[1]["provenance"]["method"]["what"] == converter.WHAT + converter.SEEDED
    assert docs[1]["data"]["models"]["llama3-8b"]["recipes"]["bf16"]["seed"] == 4
