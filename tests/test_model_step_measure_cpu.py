"""The model step's measuring path, end to end on CPU with a fake Transformer Engine (tests/fake_te.py):
every region, the memory records, the real model at G = 1 and G > 1, the search for the largest
micro-batch (an out-of-memory is its answer) and the JSON the GPU tool writes. The GPU times it;
this checks the plumbing the one GPU call depends on."""

from __future__ import annotations

import dataclasses
import importlib.util
import json
from pathlib import Path
from typing import Any

import pytest

from gemm_bench.measure.timing import TimerSettings
from gemm_bench.question.config import ModelConfig
from tests import fake_te

REPO = Path(__file__).resolve().parent.parent

TINY = ModelConfig(hidden_size=32, ffn_hidden_size=48, num_attention_heads=4, num_query_groups=2, num_layers=6,
                   micro_batch_size=1, seq_length=16, swiglu=True, vocab_size=500, num_microbatches=4)


def test_the_whole_measuring_path_runs_and_returns_json(monkeypatch: pytest.MonkeyPatch,
                                                         capsys: pytest.CaptureFixture[str]) -> None:
    parts = fake_te.install(monkeypatch, oom_above=2)
    out = parts.measure_model(TINY, ["bf16", "fp8-current"], TimerSettings(spinup_s=0.0), proof_layers=2,
                              microbatches=(1, 4),
                              real_steps=2, search_layers=2, search_limit=8, group=fake_te.group_timer())
    json.dumps(out)
    assert set(out["parts_ms"]) == {"bf16", "fp8-current"}
    assert set(out["parts_ms"]["bf16"]) == {"embedding", "head", "layer_first", "layer_cached"}
    assert set(out["rows"]) == {"1", "4"}
    assert {r["precision"] for r in out["rows"]["4"]} == {"bf16", "fp8-current"}
    assert {k for k in out["proof"] if k != "layers"} == {"bf16/G1", "bf16/G4", "fp8-current/G1", "fp8-current/G4"}
    # the composition is held to the real run's GPU time (the union of its kernels per step: fake_te's
    # two overlapping kernels over 3 steps), the event time with the host's waits kept beside it
    for key in ("bf16/G1", "fp8-current/G4"):
        proof = out["proof"][key]
        assert proof["real_gpu_ms"] == pytest.approx(4 / 3)
        assert proof["time_ratio"] == pytest.approx(proof["composed_ms"] / (4 / 3))
        assert proof["event_ratio"] == pytest.approx(proof["composed_ms"] / proof["real_ms"])
        # held busy to busy: the composed kinds' sum (no idle) over the real run's busy time
        busy = sum(proof["composed_parts_ms"].values())
        assert proof["composed_busy_ms"] == pytest.approx(busy)
        assert proof["busy_ratio"] == pytest.approx(busy / (4 / 3))
        assert proof["parts_idle_ms"] == pytest.approx(proof["composed_ms"] - busy)
    # the layer's parameters counted on the module are the pure count (GEMM weights + two norms)
    from gemm_bench.question.model_step import layer_parameters

    assert out["layer_params"] == layer_parameters(TINY)
    # an out-of-memory above 2 sequences is the answer, found by doubling then bisecting
    assert out["largest_microbatch"]["fp8-current"]["largest"] == 2
    assert out["largest_microbatch"]["fp8-current"]["tried"] == [1, 2, 4, 3]
    # the GPU tool's table prints every part of it (its proof "OFF" on CPU times: a status of 1 or 0)
    tool = _tool()
    assert tool.print_table("tiny", out) in (0, 1)
    printed = capsys.readouterr().out
    assert "proof fp8-current/G4" in printed and "largest micro-batch" in printed and "memory bf16" in printed


def _tool() -> Any:
    spec = importlib.util.spec_from_file_location("gpu_model_step", REPO / "tools" / "gpu_model_step.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_real_model_accumulates_fp32_main_grads_and_steps(monkeypatch: pytest.MonkeyPatch) -> None:
    parts = fake_te.install(monkeypatch)
    import torch

    model = parts.RealModel(TINY, 2, "fp8-current")
    before = [p.detach().clone() for p in model.params]
    loss = model.step(3)
    assert loss == loss  # finite: not NaN
    assert all(float(p.main_grad.abs().sum()) == 0 for p in model.params)  # zeroed for the next step
    assert all(p.grad is None for p in model.params)
    assert any(not torch.equal(a, p) for a, p in zip(before, model.params, strict=True))  # the optimizer moved them
    assert dataclasses.asdict(parts.PartTimes(1.0, 2.0, 3.0, 4.0))["layer_cached"] == 4.0


def test_the_real_model_runs_the_bridge_recipes_bf16_gradients_and_fp8_primary_weights(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Issue 41: Megatron-Bridge's performance recipes reduce gradients in BF16 (grad_reduce_in_fp32 =
    False) and keep FP8 primary weights (fp8_param_gather); the search builds that rank: the layers'
    GEMM weights FP8 (the embedding and output layer BF16), every main gradient BF16, the FP32
    masters updated from an FP32 copy of the owned gradients and written back into the FP8 weights."""
    parts = fake_te.install(monkeypatch)
    import torch

    model = parts.RealModel(TINY, 2, "fp8-current", grad_dtype=torch.bfloat16, fp8_primary=True, optimizer_shards=2)
    layer_weights = [p for layer in model.layers for n, p in layer.named_parameters() if "norm" not in n]
    assert layer_weights and all(p.dtype == torch.float8_e4m3fn for p in layer_weights)
    assert model.embedding.table.weight.dtype == torch.bfloat16
    assert model.head is not None and model.head.output.weight.dtype == torch.bfloat16
    assert all(p.main_grad.dtype == torch.bfloat16 for p in model.params)
    assert all(m.dtype == torch.float32 for m in model.masters)
    before = [p.detach().float().clone() for p in model.owned]
    model.step(2)
    assert any(not torch.equal(a, p.detach().float()) for a, p in zip(before, model.owned, strict=True))
    assert all(float(p.main_grad.abs().sum()) == 0 for p in model.params)
    assert all(m.grad is None for m in model.masters)  # the FP32 copy of the gradients is a transient
    with pytest.raises(ValueError, match="need an FP8 recipe"):
        parts.RealModel(TINY, 2, "bf16", fp8_primary=True)
    found = parts.largest_microbatch(TINY, 2, "fp8-current", limit=4, grad_dtype=torch.bfloat16, fp8_primary=True)
    assert found["largest"] == 2  # the fake runs out of memory above 2


def test_a_cached_layer_call_needs_a_first_one(monkeypatch: pytest.MonkeyPatch) -> None:
    parts = fake_te.install(monkeypatch)
    import torch

    layer = parts.build_dense_layer(TINY)
    x = torch.randn(TINY.seq_length, 1, TINY.hidden_size, dtype=torch.bfloat16)
    with fake_te.autocast(recipe=object()), pytest.raises(RuntimeError, match="before a first"):
        layer(x, is_first_microbatch=False)


_BLOCK: dict[str, Any] = {}


def _document_with_block(monkeypatch: pytest.MonkeyPatch) -> tuple[dict[str, Any], Any]:
    """A synthetic result with a model-step block measured (once per module) on the tiny model; the
    document's question is a larger model of the same vocabulary, so its GEMM times are valid ones."""
    import copy

    from gemm_bench.question.question import build_question
    from tests.conftest import make_document

    question = build_question(fields=dataclasses.asdict(dataclasses.replace(TINY, hidden_size=256, ffn_hidden_size=384,
                                                                            seq_length=1024)))
    doc = make_document(question, precisions=("bf16", "fp8-current"), modes=("autocast",))
    if not _BLOCK:
        parts = fake_te.install(monkeypatch)
        _BLOCK.update(parts.model_step_block(TINY, ["bf16", "fp8-current"], fake_te.group_timer(rounds=2), "r",
                                             search_layers=1, search_limit=4) or {})
    # The fake GPU's allocator counts 254 bytes of optimizer state per parameter, which the door refuses
    # (gemm_bench.results.invariants drops the memory and the micro-batch search composed from it), and a
    # Report checks the document it parses: the readers' tests get a state the recipe's optimizer can hold.
    # Its layer weights read 134 bytes per parameter, which the door refuses too (a layer built in BF16 holds
    # 2.0-2.1): the readers' tests get BF16's 2.
    block = {**copy.deepcopy(_BLOCK), "run_id": doc["run_id"], "state_per_param": 16.0}
    for memory in block["memory"].values():
        memory["layer_weights"] = 2 * block["layer_params"]
    doc["model_step"] = block
    return doc, question


def test_the_block_validates_and_the_report_composes_it_for_the_pages_g(monkeypatch: pytest.MonkeyPatch) -> None:
    from gemm_bench.report.report import Report
    from gemm_bench.results.schema import validate

    doc, question = _document_with_block(monkeypatch)
    validate(doc)
    summary = Report(doc).model_step()
    assert summary is not None and summary.microbatches == 4 and set(summary.rows) == {1, 4}
    assert {r.precision for r in summary.rows[4]} == {"bf16", "fp8-current"}
    assert summary.row("bf16", 4).speedup == 1.0  # type: ignore[union-attr]
    assert "the tokens per second of BF16 with G = 4" in (summary.sentence("fp8-current") or "")
    assert summary.largest_microbatch == {"bf16": 2, "fp8-current": 2}  # the fake's out-of-memory above 2
    # the page's G, not the stored one: G = 1 has one set of rows
    one = Report(doc).model_step(dataclasses.replace(question.config, num_microbatches=1))
    assert one is not None and set(one.rows) == {1}
    # another vocabulary is another output layer: no answer from this block
    assert Report(doc).model_step(dataclasses.replace(question.config, vocab_size=4000)) is None


@pytest.mark.parametrize(("path", "value", "where"), [
    (("parts", 0, "part"), "decoder", "$.model_step.parts[0].part"),
    (("parts", -1, "precision"), "fp8-current", "$.model_step.parts[-1].precision"),
    (("memory", "bf16", "layer_weights"), -1, "$.model_step.memory.bf16.layer_weights"),
    (("state_per_param",), float("nan"), "$.model_step.state_per_param"),
    (("parts", 0, "precision"), ["bf16"], "$.model_step.parts[0].precision"),  # unhashable: refused, not a crash
    (("parts", 0, "status"), {}, "$.model_step.parts[0].status"),
])
def test_a_bad_block_is_refused_with_its_path(monkeypatch: pytest.MonkeyPatch, path: tuple[Any, ...], value: Any,
                                              where: str) -> None:
    from gemm_bench.results.schema import ResultError, validate

    doc, _ = _document_with_block(monkeypatch)
    target = doc["model_step"]
    for key in path[:-1]:
        target = target[key]
    target[path[-1]] = value
    with pytest.raises(ResultError) as caught:
        validate(doc)
    assert caught.value.where.replace(f"[{len(doc['model_step']['parts']) - 1}]", "[-1]") == where


def test_a_newer_run_without_a_model_step_keeps_the_older_one(monkeypatch: pytest.MonkeyPatch) -> None:
    import copy

    from gemm_bench.results.schema import merge_documents, validate
    from tests.conftest import make_document

    doc, question = _document_with_block(monkeypatch)
    newer = make_document(question, precisions=("bf16", "fp8-current"), modes=("prequant",))
    merged = merge_documents(copy.deepcopy(doc), newer)
    validate(merged)
    assert merged["model_step"] == doc["model_step"]


def test_the_real_run_is_timed_under_a_sustained_load(monkeypatch: pytest.MonkeyPatch) -> None:
    """Issue 43 item 7: the real run is timed after at least the parts' spin-up of back-to-back steps
    and profiled over at least as long, not right after an idle moment (an H200 under its power cap
    holds a higher clock then, and the composition read 3-5% slow at G = 1)."""
    parts = fake_te.install(monkeypatch, oom_above=2)
    clock = {"now": 0.0}
    monkeypatch.setattr(parts.time, "monotonic", lambda: clock["now"])

    class Model:
        steps = 0

        def step(self, microbatches: int) -> float:
            Model.steps += 1
            clock["now"] += 0.07  # a 70 ms step
            return 0.0

    model = Model()
    assert parts.sustain(model, 1, 1.0) == 15  # 15 x 70 ms >= 1 s
    assert parts.sustain(model, 1, 0.0, least=2) == 2
    Model.steps = 0
    parts.time_real_steps(model, 1, steps=4, sustain_s=1.0)
    assert Model.steps == 15 + 4
    Model.steps = 0
    monkeypatch.setattr(parts, "category_ms_per_step", lambda rounds: (0.0, {}))
    parts.real_gpu_profile(model, 1, sustain_s=1.0)
    assert Model.steps == 15 + 15  # loaded 1 s, then profiled over 15 steps (not the default 3)


def test_a_distributed_optimizer_rank_updates_its_slice_of_the_parameters(monkeypatch: pytest.MonkeyPatch) -> None:
    """Issue 41 item 3: the real rank of a layout with the distributed optimizer holds FP32 masters and
    moments for 1 / (DP x CP) of the parameters (whole tensors in order, at least one), the main
    gradients whole; one shard is every parameter."""
    import torch

    parts = fake_te.install(monkeypatch, oom_above=2)
    params = [torch.zeros(n) for n in (100, 30, 30, 20, 20)]
    assert parts.shard_of(params, 1) == params
    assert [p.numel() for p in parts.shard_of(params, 2)] == [100]
    assert [p.numel() for p in parts.shard_of(params, 4)] == [100]  # at least one tensor
    assert [p.numel() for p in parts.shard_of(params[1:], 2)] == [30]
    with pytest.raises(ValueError, match="not a positive"):
        parts.shard_of(params, 0)
    model = parts.RealModel(TINY, 2, "bf16", optimizer_shards=4)
    owned = sum(p.numel() for p in model.owned)
    assert 0 < owned <= model.parameter_count / 4 + max(p.numel() for p in model.params)
    assert len(model.masters) == len(model.owned) < len(model.params)
    model.step(2)  # the step runs with the slice
