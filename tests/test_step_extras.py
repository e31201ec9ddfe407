"""The refresh's precision plan and step energy (issue 33): which plan is measured, how it is stored,
what an all-FP8 plan costs (nothing), and each recipe's energy entry, with fakes for the GPU.

Inputs are the H100 run of ``tools/gpu_breakdown.py`` committed under ``measurements/``: real
autocast GEMMs, layer steps and breakdowns of Qwen2.5-7B at 2048 tokens and gpt-oss-120b.
"""

from __future__ import annotations

import gzip
import json
from pathlib import Path
from typing import Any

import pytest

from gemm_bench.measure import step_extras
from gemm_bench.question.question import build_question
from gemm_bench.report import precision_plan as pp
from gemm_bench.results import energy
from gemm_bench.results.schema import validate
from gemm_bench.results.step_error import StepError
from gemm_bench.results.typed import parse
from tests.helpers import typed_plan
from tests.test_beyond_integration import fake_runner_module  # noqa: F401 (a fixture)

RUN = Path(__file__).parent.parent / "measurements" / "2026-11-25-session10" / "h100-breakdown"


def _doc(name: str) -> dict[str, Any]:
    return json.loads(gzip.decompress((RUN / f"{name}.json.gz").read_bytes()))


class FakeSampler:
    def __init__(self, power: float = 700.0, samples: int = 15) -> None:
        self.power, self.samples = power, samples

    def summary(self) -> dict[str, Any]:
        return {"power_w_median": self.power, "power_w_max": self.power + 20, "samples": self.samples,
                "power_source": "fake"}


class FakeRunner:
    def __init__(self, sampler: FakeSampler | None) -> None:
        self.sampler = sampler


def _plan_step(calls: list[tuple[Any, ...]]) -> Any:
    def plan_step(question: Any, recipe: str, keep: list[str], group: Any, *, modes: list[str]) -> list[dict[str, Any]]:
        calls.append((recipe, tuple(keep), tuple(modes)))
        return [{"step": s, "mode": "layer-graphed", "status": "measured", "ms": ms,
                 "stats": {"median_ms": ms, "iqr_ms": 0.01}}
                for s, ms in (("all-bf16", 13.175), ("all-fp8", 18.959), ("plan", 13.112))]
    return plan_step


def _energy(question: Any, steps: dict[str, float], sampler: Any) -> list[dict[str, Any]]:
    tokens = question.config.seq_length * question.config.micro_batch_size
    return [energy.alone_energy(p, sampler.summary(), 0.3, max(1, int(300 / ms)), tokens) for p, ms in steps.items()]


def test_the_plan_measured_is_the_fastest_fp8_steps_and_gpt_oss_keeps_its_mlp_in_bf16() -> None:
    config = pp.plan_to_measure(_doc("gpt-oss-120b"))
    assert config is not None and config["recipe"] == "fp8-delayed" and config["kind"] == "mixed"
    assert config["keep_in_bf16"] == ["mlp_up", "mlp_down"] and config["chosen"] == pp.CHOICE_RULE


def test_qwen_at_2048_tokens_plans_all_fp8_for_its_fastest_recipe() -> None:
    config = pp.plan_to_measure(_doc("qwen2.5-7b-2048"))
    assert config is not None and config["recipe"] == "fp8-delayed" and config["kind"] == "all-fp8"


def test_a_mixed_plan_is_measured_graphed_only_and_stored_valid() -> None:
    doc = _doc("gpt-oss-120b")
    question = build_question(model="gpt-oss-120b", fields={})
    calls: list[tuple[Any, ...]] = []
    step_extras.measure_plan_and_energy(FakeRunner(FakeSampler()), question, doc, planner=pp.plan_to_measure,
                                        plan_step=_plan_step(calls), step_energy=_energy)
    assert calls == [("fp8-delayed", ("mlp_up", "mlp_down"), ("layer-graphed",))]
    assert [c["step"] for c in doc["plan"]["steps"]] == ["all-bf16", "all-fp8", "plan"]
    assert all(c["run_id"] == doc["run_id"] for c in doc["plan"]["steps"])
    vs_bf16, vs_fp8, why = pp.plan_speedups(typed_plan(doc))
    assert why == "" and vs_bf16 == pytest.approx(13.175 / 13.112) and vs_fp8 == pytest.approx(18.959 / 13.112)
    said = pp.plan_sentence(typed_plan(doc))
    assert "MLP up and MLP down in BF16" in said and "1.45× all-FP8" in said
    # energy: one entry per recipe with a graphed step, each its own
    assert sorted(parse(doc).energies()) == ["bf16", "fp8-block", "fp8-current", "fp8-delayed"]
    validate(doc)


def test_an_all_fp8_plan_measures_nothing_extra_and_says_so() -> None:
    doc = _doc("qwen2.5-7b-2048")
    question = build_question(model="qwen2.5-7b", fields={"seq_length": 2048})
    calls: list[tuple[Any, ...]] = []
    step_extras.measure_plan_and_energy(FakeRunner(None), question, doc, planner=pp.plan_to_measure,
                                        plan_step=_plan_step(calls), step_energy=_energy)
    assert calls == [] and doc["plan"]["steps"] == [] and doc["plan"]["kind"] == "all-fp8"
    assert "energy" not in doc  # no sampler, no energy
    assert "Nothing beyond the recipe's own step" in pp.plan_sentence(typed_plan(doc))
    validate(doc)


def test_a_question_without_a_graphed_step_gets_neither() -> None:
    doc = _doc("qwen2.5-7b-2048")
    doc["layer"] = [c for c in doc["layer"] if c["mode"] != "layer-graphed"]
    question = build_question(model="qwen2.5-7b", fields={"seq_length": 2048})
    step_extras.measure_plan_and_energy(FakeRunner(FakeSampler()), question, doc, planner=pp.plan_to_measure,
                                        plan_step=_plan_step([]), step_energy=_energy)
    assert "plan" not in doc and "energy" not in doc


def test_measure_question_calls_the_extras_once_with_its_planner(monkeypatch: pytest.MonkeyPatch,
                                                                  fake_runner_module: Any) -> None:  # noqa: F811
    """The runner's one call site: measure_question hands its runner, the run's document and the planner."""
    runner_module, _ = fake_runner_module
    seen: list[Any] = []

    class Runner:
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            self.sampler = None

        def measure(self, question: Any, precisions: Any, modes: Any, **kwargs: Any) -> dict[str, Any]:
            return {"provenance": {}}

    monkeypatch.setattr(runner_module, "Runner", Runner)
    monkeypatch.setattr(runner_module, "measure_plan_and_energy",
                        lambda runner, question, doc, *, planner: seen.append((question, planner)))
    monkeypatch.setattr("gemm_bench.measure.compile_cache.use_persistent_compile_cache", lambda: None)
    question = build_question(model="qwen2.5-7b", fields={"seq_length": 2048})
    runner_module.measure_question(question, ["bf16"], ["autocast"], planner=pp.plan_to_measure)
    assert seen == [(question, pp.plan_to_measure)]


def test_the_refresh_and_the_docs_build_hand_the_planner_to_measure_question() -> None:
    root = Path(__file__).parent.parent
    for path in (root / "bench/gemm_bench/cli/refresh.py", root / "sphinxext/gemm_benchmark/execution.py"):
        assert "planner=plan_to_measure" in path.read_text(encoding="utf-8"), path


def test_an_energy_entry_is_the_recipes_own_power_times_its_step() -> None:
    entry = energy.alone_energy("bf16", {"power_w_median": 715.8, "power_w_max": 730, "samples": 15}, 0.3006, 22,
                                8192)
    assert entry["step_ms"] == pytest.approx(13.6636, rel=1e-4)
    assert entry["energy_mj"] == pytest.approx(715.8 * 300.6 / 22, rel=1e-4)
    assert entry["tokens_per_j"] == pytest.approx(8192 / (entry["energy_mj"] / 1000), rel=1e-3)
    assert energy.energy_words(entry).startswith("9.78 J per step (838 tokens/J, 716 W)")
    few = energy.alone_energy("bf16", {"power_w_median": 700, "samples": 2}, 0.3, 20, 8192)
    assert few["status"] == "failed" and "too few" in few["reason"]
    none = energy.alone_energy("bf16", {"samples": 0, "unavailable": "no NVML"}, 0.3, 20, 8192)
    assert none["status"] == "failed" and "no NVML" in none["reason"]


@pytest.mark.parametrize(("change", "problem"), [
    (lambda b: b["steps"][0].update(energy_mj=1.0), "power_w x step_ms"),
    (lambda b: b["steps"].append(dict(b["steps"][0])), "duplicate"),
    (lambda b: b["steps"][0].update(samples=0), "samples"),
    (lambda b: b.update(window_s=-1), "window_s"),
])
def test_the_schema_rejects_a_malformed_energy_block(change: Any, problem: str) -> None:
    block = energy.energy_document([energy.alone_energy("bf16", {"power_w_median": 700, "samples": 15}, 0.3, 20, 8)])
    change(block)
    with pytest.raises(StepError, match=problem):
        energy.validate_energy_block(block)


def test_the_planner_sees_the_step_energy() -> None:
    """The plan's recipe is the answer's, whose tie-break weighs the step energy: the planner runs
    after the energy is stored (session 16's H200 refresh planned before it, and Gemma 2 27B's plan
    named FP8 Delayed under an answer that, with the energy, trains in FP8 Current)."""
    doc = _doc("qwen2.5-7b-2048")
    doc.pop("energy", None)
    doc.pop("plan", None)
    question = build_question(model="qwen2.5-7b", fields={"seq_length": 2048})
    seen: list[bool] = []

    def planner(d: dict[str, Any]) -> dict[str, Any] | None:
        seen.append("energy" in d)
        return None

    step_extras.measure_plan_and_energy(FakeRunner(FakeSampler()), question, doc, planner=planner,
                                        plan_step=_plan_step([]), step_energy=_energy)
    assert seen == [True]
