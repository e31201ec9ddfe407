"""The runner measures the model step's parts with the layer step, in its own timed groups, and the
block lands in the run's document (issue 32); against the fake torch and TE of the runner's tests."""

from __future__ import annotations

import sys
import types
from typing import Any

import pytest

from gemm_bench.question.question import build_question
from gemm_bench.results.schema import validate
from tests.test_beyond_integration import fake_runner_module  # noqa: F401 (the fixture)

FIELDS = dict(hidden_size=256, ffn_hidden_size=512, num_attention_heads=4, micro_batch_size=1, seq_length=128)


def _fake_parts(monkeypatch: pytest.MonkeyPatch) -> dict[str, Any]:
    seen: dict[str, Any] = {}
    module = types.ModuleType("gemm_bench.measure.backends.model_parts")

    def competitor(mark: Any) -> None:
        for region in ("layer-first", "layer-cached"):
            mark(region, "start")
            mark(region, "end")

    def model_step_block(config: Any, precisions: Any, group: Any, run_id: str) -> dict[str, Any]:
        result, failures = group({p: (lambda: competitor) for p in precisions}, True, "layers")
        seen.update(precisions=list(precisions), regions=sorted(result.samples["bf16"]), failures=failures)
        stats = result.samples["bf16"]["layer-first"].to_stats()

        def part(name: str, precision: str = "bf16", **extra: Any) -> dict[str, Any]:
            return {"part": name, "precision": precision, "status": "measured", "ms": 1.0, "stats": stats, **extra}

        return {"run_id": run_id, "what": "fake", "padded_vocab_size": config.padded_vocab_size, "layer_params": 10,
                "capacity_bytes": 1 << 30, "state_per_param": 16.0,
                "parts": [part("layer-first"), part("layer-cached"), part("embedding"), part("head"),
                          part("optimizer", params=100), part("optimizer", params=200)],
                "memory": {}}

    module.model_step_block = model_step_block  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "gemm_bench.measure.backends.model_parts", module)
    return seen


def test_a_model_with_a_vocabulary_gets_its_model_step_in_the_same_run(fake_runner_module: Any,  # noqa: F811
                                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    runner, _ = fake_runner_module
    from gemm_bench.measure.timing import TimerSettings

    seen = _fake_parts(monkeypatch)
    settings = TimerSettings(warmup_s=0.0, spinup_s=0.0, repetitions=3, min_repetitions=3, l2_flush=False)
    question = build_question(fields={**FIELDS, "vocab_size": 1000})
    doc = runner.Runner(settings, telemetry=False).measure(question, ["fp8-current", "mxfp8"], ["layer-graphed"])
    validate(doc)
    assert doc["model_step"]["run_id"] == doc["run_id"]
    assert seen["precisions"] == ["bf16", "fp8-current"]  # mxfp8 is unsupported on the fake GPU
    assert seen["regions"] == ["layer-cached", "layer-first"] and seen["failures"] == {}


#: A mixture of experts and multi-latent attention (with its MoE): their layer is the layer step's.
MOE = {"vocab_size": 1000, "num_experts": 4, "moe_router_topk": 2}
MLA = {**MOE, "num_attention_heads": 4, "q_lora_rank": 64, "kv_lora_rank": 32, "qk_head_dim": 32,
       "qk_pos_emb_head_dim": 16, "v_head_dim": 32}


@pytest.mark.parametrize("extra", [MOE, MLA])
def test_a_moe_or_mla_model_gets_its_model_step_too(fake_runner_module: Any,  # noqa: F811
                                                    monkeypatch: pytest.MonkeyPatch, extra: dict[str, Any]) -> None:
    """Before issue 32's MoE/MLA work the runner skipped them (``config.is_moe or config.is_mla``)."""
    runner, _ = fake_runner_module
    from gemm_bench.measure.timing import TimerSettings

    seen = _fake_parts(monkeypatch)
    settings = TimerSettings(warmup_s=0.0, spinup_s=0.0, repetitions=3, min_repetitions=3, l2_flush=False)
    doc = runner.Runner(settings, telemetry=False).measure(build_question(fields={**FIELDS, **extra}), ["fp8-current"],
                                                           ["layer-graphed"])
    validate(doc)
    assert doc["model_step"]["run_id"] == doc["run_id"] and seen["regions"] == ["layer-cached", "layer-first"]


@pytest.mark.parametrize("extra", [{}, {**MLA, "tensor_model_parallel_size": 2, "sequence_parallel": True}])
def test_no_vocabulary_or_a_layer_the_step_cannot_build_has_no_model_step(
        fake_runner_module: Any, monkeypatch: pytest.MonkeyPatch, extra: dict[str, Any]) -> None:  # noqa: F811
    runner, _ = fake_runner_module
    from gemm_bench.measure.timing import TimerSettings

    seen = _fake_parts(monkeypatch)
    settings = TimerSettings(warmup_s=0.0, spinup_s=0.0, repetitions=3, min_repetitions=3, l2_flush=False)
    doc = runner.Runner(settings, telemetry=False).measure(build_question(fields={**FIELDS, **extra}), ["fp8-current"],
                                                           ["layer-graphed"])
    assert "model_step" not in doc and not seen
    assert runner.Runner(settings, telemetry=False, model_step=False).measure(
        build_question(fields={**FIELDS, "vocab_size": 1000}), ["fp8-current"], ["layer-graphed"]).get(
        "model_step") is None
