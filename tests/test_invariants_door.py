"""Issue 43, item 1: a result's invariants are checked once, at the door, and a number that breaks one
is never shown as valid (it is demoted to failed with the violation as its reason)."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest

from gemm_bench.cli.commands import main
from gemm_bench.results import cross_check
from gemm_bench.results.cache import Cache, read_document
from gemm_bench.results.invariants import REFUSED, check
from gemm_bench.results.schema import CheckedDocument, ResultError, validate
from gemm_bench.results.typed import parse

CACHE = Path(__file__).resolve().parents[1] / "docs" / "_gemm_cache"
LLAMA_8B_H100 = CACHE / "45a55c5d892e31af--h100-80gb-hbm3.json"
LLAMA_70B_TP8_H100 = CACHE / "c1b9aa6aaebc8435--h100-80gb-hbm3.json"


def _stored() -> dict[str, Any]:
    return json.loads(LLAMA_8B_H100.read_text(encoding="utf-8"))


def _through_the_door(tmp_path: Path, doc: dict[str, Any]) -> dict[str, Any]:
    validate(copy.deepcopy(doc))  # the hostile document is schema-valid: only the invariants can refuse it
    path = tmp_path / LLAMA_8B_H100.name
    path.write_text(json.dumps(doc), encoding="utf-8")
    return read_document(path)


def _part(doc: dict[str, Any], name: str, precision: str) -> dict[str, Any]:
    return next(p for p in doc["model_step"]["parts"] if (p["part"], p["precision"]) == (name, precision))


def _wheres(doc: dict[str, Any]) -> list[str]:
    """The violations of a hand-changed document, less the stored file's own refused group power readings
    (its short timed groups': :func:`test_the_committed_cache_refuses_short_and_stuck_group_power`)."""
    assert isinstance(doc, CheckedDocument)
    return [v.where for v in doc.violations if v.block != "groups"]


def test_the_committed_cache_breaks_one_invariant_the_stuck_855_w_reading() -> None:
    broken = {}
    for path in sorted(CACHE.glob("*.json")):
        for v in read_document(path).violations:  # type: ignore[attr-defined]
            if v.block != "groups":
                broken[(path.name, v.where)] = v.problem
    assert list(broken) == [(LLAMA_70B_TP8_H100.name, "$.energy.steps[0]")]
    assert "855 W" in next(iter(broken.values()))


def test_the_committed_cache_refuses_short_and_stuck_group_power() -> None:
    """A timed group's board power is held to the energy's rule: the committed short groups (1-4 samples),
    the medians above 1.15x the 700 W limit and the stuck readings (median = third quartile = maximum) are
    refused, their power fields dropped; no layer-step group (whose power an energy rests on) is."""
    refused = 0
    for path in sorted(CACHE.glob("*.json")):
        doc = read_document(path)
        for v in doc.violations:  # type: ignore[attr-defined]
            if v.block != "groups":
                continue
            refused += 1
            clock = doc["groups"][int(v.where.split("[")[1].split("]")[0])]["clock"]
            assert clock["power_refused"] == REFUSED + v.problem and "power_w_median" not in clock
        assert not [g for g in doc["groups"] if g["label"].startswith("layer step")
                    and "power_refused" in g.get("clock", {})], path.name
    assert refused > 100


def test_the_stuck_reading_is_failed_and_no_comparison_rests_on_it() -> None:
    doc = read_document(LLAMA_70B_TP8_H100)
    assert "bf16" not in parse(doc).energies()
    entry = doc["energy"]["steps"][0]
    assert entry["status"] == "failed" and entry["reason"].startswith(REFUSED)
    raw = read_document(LLAMA_70B_TP8_H100, raw=True)
    assert raw["energy"]["steps"][0]["power_w"] == pytest.approx(854.8)  # the file itself is untouched


def test_a_breakdown_that_adds_up_to_1_5x_its_step_is_dropped(tmp_path: Path) -> None:
    doc = _stored()
    part = _part(doc, "layer-first", "fp8-current")
    block = part["breakdown"]
    block["parts_ms"] = {k: v * 1.5 for k, v in block["parts_ms"].items()}
    got = _through_the_door(tmp_path, doc)
    assert "breakdown" not in _part(got, "layer-first", "fp8-current")
    assert _part(got, "layer-first", "fp8-current")["status"] == "measured"  # the time itself holds
    assert any(w.endswith(".breakdown") for w in _wheres(got))


def test_energy_from_two_samples_is_not_published(tmp_path: Path) -> None:
    doc = _stored()
    doc["energy"]["steps"][1]["samples"] = 2
    got = _through_the_door(tmp_path, doc)
    precision = doc["energy"]["steps"][1]["precision"]
    assert precision not in parse(got).energies()
    first = got.violations[0]  # type: ignore[attr-defined]
    assert first.block == "energy" and "2 power samples" in first.problem


def test_a_layer_part_faster_than_the_peak_is_failed(tmp_path: Path) -> None:
    """A BF16 model step at 209% MFU: its layer parts halved twice over."""
    doc = _stored()
    for name in ("layer-first", "layer-cached"):
        part = _part(doc, name, "bf16")
        part["ms"] /= 4
        part["stats"]["median_ms"] = part["ms"]
        part.pop("breakdown", None)
    got = _through_the_door(tmp_path, doc)
    for name in ("layer-first", "layer-cached"):
        part = _part(got, name, "bf16")
        assert part["status"] == "failed" and "peak" in part["reason"]
    assert {v.block for v in got.violations} - {"groups"} == {"model_step"}  # type: ignore[attr-defined]


def test_a_plan_step_of_a_nanosecond_is_failed(tmp_path: Path) -> None:
    source = CACHE / "19210ed9493a1e7a--h100-80gb-hbm3.json"  # a mixed plan with measured steps
    doc = json.loads(source.read_text(encoding="utf-8"))
    step = next(s for s in doc["plan"]["steps"] if s["status"] == "measured" and s["step"] != "all-bf16")
    step["ms"] = 1e-9
    step["stats"] = {"median_ms": 1e-9, "iqr_ms": 0.0, "n": 1, "samples_ms": [1e-9]}
    step.pop("kernel_ms", None)
    step.pop("kernel_ratio", None)
    step.pop("breakdown", None)
    path = tmp_path / source.name
    path.write_text(json.dumps(doc), encoding="utf-8")
    got = read_document(path)
    index = doc["plan"]["steps"].index(step)
    assert got["plan"]["steps"][index]["status"] == "failed"
    assert f"$.plan.steps[{index}]" in _wheres(got)


def test_impossible_optimizer_state_drops_the_memory(tmp_path: Path) -> None:
    doc = _stored()
    doc["model_step"]["state_per_param"] = 0.001
    got = _through_the_door(tmp_path, doc)
    assert got["model_step"]["memory"] == {}
    assert _wheres(got) == ["$.model_step.state_per_param"]


def test_a_model_step_part_at_1_5x_its_kernel_time_is_judged(tmp_path: Path) -> None:
    doc = _stored()
    part = _part(doc, "layer-cached", "fp8-delayed")
    part["kernel_ms"] = part["ms"] / 1.5
    kept = _part(doc, "layer-cached", "bf16")
    kept["kernel_ms"] = kept["ms"] / 1.1  # within the region bound: kept
    got = _through_the_door(tmp_path, doc)
    assert _part(got, "layer-cached", "fp8-delayed")["status"] == "failed"
    # The file's verdict (the typed result's, which the pages read) judges the model step's parts: the kept
    # one at its ratio; the failed one is no region any more.
    regions = dict(parse(got).timed_regions())
    assert regions[cross_check.part_label("layer-cached", "fp8-delayed")] is None
    found = regions[cross_check.part_label("layer-cached", "bf16")]
    assert found is not None and found.judged and found.ratio == pytest.approx(1.1)


def test_a_checked_document_is_never_stored(tmp_path: Path) -> None:
    checked = read_document(LLAMA_70B_TP8_H100)
    with pytest.raises(ResultError, match="checked for showing"):
        validate(checked)
    with pytest.raises(ResultError):
        Cache(tmp_path).store(checked)


def test_check_leaves_its_input_alone() -> None:
    raw = read_document(LLAMA_70B_TP8_H100, raw=True)
    before = json.dumps(raw, sort_keys=True)
    assert check(raw).violations
    assert json.dumps(raw, sort_keys=True) == before


def test_report_says_what_was_refused(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["report", str(LLAMA_70B_TP8_H100)]) == 0
    out = capsys.readouterr().out
    assert "854.8" not in out and "855 W" in out  # the refusal is said, the reading is not used


def test_tokens_per_joule_is_per_gpu_for_a_tensor_parallel_model() -> None:
    """Qwen2.5 72B (TP 8) read as twice as energy-efficient per token as Qwen2.5 7B: its rate was one
    rank's, though each token went through eight GPUs."""
    raw = read_document(LLAMA_70B_TP8_H100, raw=True)
    doc = read_document(LLAMA_70B_TP8_H100)
    tp = doc["question"]["config"]["tensor_model_parallel_size"]
    assert tp == 8
    stored = {e["precision"]: e for e in raw["energy"]["steps"]}  # the file as written: one rank's rates
    for precision, entry in parse(doc).energies().items():
        assert entry.tokens_per_j == pytest.approx(stored[precision]["tokens_per_j"] / tp, rel=1e-3)
        assert entry.tokens_per_j_low is not None and entry.tokens_per_j_high is not None
        assert entry.tokens_per_j_low <= entry.tokens_per_j <= entry.tokens_per_j_high
    single = {e["precision"]: e for e in read_document(LLAMA_8B_H100, raw=True)["energy"]["steps"]}
    for precision, entry in parse(read_document(LLAMA_8B_H100)).energies().items():  # TP 1: unchanged
        assert entry.tokens_per_j == pytest.approx(single[precision]["tokens_per_j"], abs=0.11)


@pytest.mark.parametrize(("bytes_per_param", "refused"), [(2.154, True), (1.5, True), (2.0072, False)])
def test_a_layer_s_weights_per_parameter_outside_bf16_drop_that_recipe_s_memory(
        tmp_path: Path, bytes_per_param: float, refused: bool) -> None:
    """A first layer built in a fresh process read 2.154 B/param on the H200 (session 17): a one-time
    allocation counted as weights would make every recipe's memory per GPU too large by 7% of its
    weights. 2.0072 is the most a committed result reads (a layer's small extra buffers)."""
    doc = _stored()
    block = doc["model_step"]
    block["memory"]["fp8-current"]["layer_weights"] = int(bytes_per_param * block["layer_params"])
    got = _through_the_door(tmp_path, doc)
    assert ("fp8-current" not in got["model_step"]["memory"]) is refused
    assert "bf16" in got["model_step"]["memory"]
    assert _wheres(got) == (["$.model_step.memory.fp8-current.layer_weights"] if refused else [])
