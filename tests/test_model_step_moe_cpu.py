"""The model step's measuring path for a mixture of experts and for multi-latent attention (with its
experts), end to end on CPU with the fake Transformer Engine (tests/fake_te.py): the layer step's
``RankLayer`` built with fused FP32 weight-gradient accumulation, called with ``is_first_microbatch``
through every module that holds weights (grouped experts, shared experts, MLA's projections), its
parameters counted as the pure count counts them, its memory records per precision, the real
multi-layer model and the block the runner stores. The GPU times it; this checks the plumbing."""

from __future__ import annotations

import dataclasses
import inspect
import json
from typing import Any

import pytest

from gemm_bench.measure.timing import TimerSettings
from gemm_bench.question.config import ModelConfig
from gemm_bench.question.model_step import layer_parameters
from tests import fake_te

#: Four experts over EP 2 (two local), top-2, GQA: Mixtral's layer in miniature.
MOE = ModelConfig(hidden_size=32, ffn_hidden_size=48, num_attention_heads=4, num_query_groups=2, num_layers=4,
                  micro_batch_size=1, seq_length=16, swiglu=True, vocab_size=500, num_microbatches=4,
                  num_experts=4, moe_router_topk=2, expert_model_parallel_size=2)
#: Multi-latent attention with routed and shared experts and a leading dense layer: DeepSeek-V3's.
MLA = ModelConfig(hidden_size=32, ffn_hidden_size=64, num_attention_heads=4, num_layers=3, micro_batch_size=1,
                  seq_length=16, swiglu=True, vocab_size=500, num_microbatches=4, num_experts=4, moe_router_topk=2,
                  moe_ffn_hidden_size=16, moe_shared_expert_intermediate_size=16, moe_dense_layers=1,
                  q_lora_rank=16, kv_lora_rank=8, qk_head_dim=8, qk_pos_emb_head_dim=4, v_head_dim=8)
CONFIGS = {"moe": MOE, "mla": MLA}


@pytest.mark.parametrize("name", sorted(CONFIGS))
def test_the_whole_measuring_path_runs_for_moe_and_mla(monkeypatch: pytest.MonkeyPatch, name: str) -> None:
    config = CONFIGS[name]
    parts = fake_te.install(monkeypatch, oom_above=2)
    out = parts.measure_model(config, ["bf16", "fp8-current"], TimerSettings(spinup_s=0.0), proof_layers=2,
                              microbatches=(1, 4),
                              real_steps=2, search_layers=2, search_limit=4, group=fake_te.group_timer())
    json.dumps(out)
    assert "unsupported" not in out and "error" not in out, out
    assert set(out["parts_ms"]) == {"bf16", "fp8-current"}
    # the built layer's parameters (TE's modules' own, by the fake's TE names) are the pure count:
    # local experts only (EP), shared experts, router, attention or MLA's projections and norms
    assert out["layer_params"] == layer_parameters(config)
    assert {k for k in out["proof"] if k != "layers"} == {"bf16/G1", "bf16/G4", "fp8-current/G1", "fp8-current/G4"}
    assert all(isinstance(v, dict) for k, v in out["proof"].items() if k != "layers"), out["proof"]
    # the real model's parameters are its layers', embedding's, output layer's and final norm's
    from gemm_bench.question.model_step import rank_parameters

    assert out["proof"]["bf16/G4"]["params"] == rank_parameters(config, layers=2)
    assert out["largest_microbatch"]["bf16"]["largest"] == 2


def _layer_and_input(parts: Any, config: ModelConfig) -> tuple[Any, Any, Any]:
    import torch

    layer = parts.build_model_layer(config)
    x = torch.randn(config.seq_length, 1, config.hidden_size, dtype=torch.bfloat16, requires_grad=True)
    return layer, x, torch.randn_like(x)


@pytest.mark.parametrize("name", sorted(CONFIGS))
def test_every_weight_of_the_layer_caches_its_quantized_copy_and_fuses_its_gradient(
        monkeypatch: pytest.MonkeyPatch, name: str) -> None:
    """``is_first_microbatch`` reaches every TE module that holds weights (a cached call before a first
    one fails, in the fake as on the GPU), and every such weight's gradient lands in its FP32
    ``main_grad`` (``fuse_wgrad_accumulation``), the router's and norms' by the fold."""
    config = CONFIGS[name]
    parts = fake_te.install(monkeypatch)
    layer, x, dy = _layer_and_input(parts, config)
    with fake_te.autocast(recipe=object()), pytest.raises(RuntimeError, match="before a first"):
        layer(x, is_first_microbatch=False)
    for first in (True, False):
        with fake_te.autocast(recipe=object()):
            y = layer(x, is_first_microbatch=first)
        y.backward(dy)
        parts.fold_unfused_grads(layer)
    named = dict(layer.named_parameters())
    assert all(p.grad is None and float(p.main_grad.abs().sum()) > 0 for p in named.values()), [
        n for n, p in named.items() if p.grad is not None or float(p.main_grad.abs().sum()) == 0]
    grouped = [n for n in named if ".fc1.weight" in n or ".fc2.weight" in n]
    assert len(grouped) == 2 * config.local_experts  # the rank's local experts, by EP
    cached = {type(m).__name__ for m in layer.modules() if m.__dict__.get("cached_weights")}
    assert "GroupedLinear" in cached and "Linear" in cached


def test_every_precision_of_the_layer_group_shares_one_set_of_weights_and_main_gradients(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """A 128-expert layer's weights and FP32 main gradients fit an 80 GB GPU once, not once per precision."""
    parts = fake_te.install(monkeypatch)
    shared = parts.Operands()
    layers = [inspect.getclosurevars(parts.layer_competitor(MOE, p, shared)).nonlocals["layer"]
              for p in ("bf16", "fp8-current")]
    first, second = (dict(layer.named_parameters()) for layer in layers)
    assert sorted(first) == sorted(second)
    assert all(first[n] is second[n] and first[n].main_grad is second[n].main_grad for n in first)


def test_the_block_of_a_moe_model_validates_names_its_routing_and_the_report_composes_it(
        monkeypatch: pytest.MonkeyPatch) -> None:
    from gemm_bench.question.question import build_question
    from gemm_bench.report.report import Report
    from gemm_bench.results.model_step_schema import MEMORY_FIELDS
    from gemm_bench.results.schema import ResultError, validate
    from tests.conftest import make_document

    parts = fake_te.install(monkeypatch)
    block = parts.model_step_block(MLA, ["bf16", "fp8-current"], fake_te.group_timer(rounds=2), "r")
    assert block is not None and block["routing"] == "balanced"
    assert block["layer_params"] == layer_parameters(MLA)
    # memory records per precision, every field the composition reads, from the allocator's counters
    assert set(block["memory"]) == {"bf16", "fp8-current"}
    assert all(set(MEMORY_FIELDS) <= set(m) for m in block["memory"].values())
    question = build_question(fields=dataclasses.asdict(dataclasses.replace(  # GEMMs long enough to be valid times
        MLA, hidden_size=2048, seq_length=4096, q_lora_rank=512, kv_lora_rank=512, qk_head_dim=128, v_head_dim=128,
        moe_ffn_hidden_size=1024, moe_shared_expert_intermediate_size=1024)))
    doc = make_document(question, precisions=("bf16", "fp8-current"), modes=("autocast",))
    doc["model_step"] = {**block, "run_id": doc["run_id"]}
    validate(doc)
    summary = Report(doc).model_step()
    assert summary is not None and {r.precision for r in summary.rows[4]} == {"bf16", "fp8-current"}
    doc["model_step"]["routing"] = "uniform"
    with pytest.raises(ResultError, match="routing"):
        validate(doc)


def test_the_search_builds_each_micro_batch_its_own_model(monkeypatch: pytest.MonkeyPatch) -> None:
    """A mixture of experts' layer routes the tokens of the micro-batch it was built for: a model built
    for one sequence and stepped on two would route half of them (and under-count the memory)."""
    parts = fake_te.install(monkeypatch, oom_above=2)
    built: list[int] = []
    init = parts.RealModel.__init__

    def record(self: Any, config: ModelConfig, layers: int, precision: str, **kwargs: Any) -> None:
        init(self, config, layers, precision, **kwargs)
        built.append(config.micro_batch_size)
        experts = self.layers[0].mlp
        assert int(experts.token_of_row.max()) + 1 == config.tokens  # every token of the micro-batch routed

    monkeypatch.setattr(parts.RealModel, "__init__", record)
    found = parts.largest_microbatch(MOE, 1, "fp8-current", limit=4)
    assert found["largest"] == 2 and built == found["tried"] == [1, 2, 4, 3]
