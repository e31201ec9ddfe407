"""The model's step, pure parts (issue 32): vocabulary and G in the question, Megatron's FLOP count
against hand-checked cases, the composition of time and memory by exact arithmetic, the units teams
plan in (tokens/s per GPU, model TFLOP/s, MFU), and the committed hashes left as they were."""

from __future__ import annotations

import dataclasses
from fractions import Fraction
from pathlib import Path

import pytest

from gemm_bench.question import model_step as ms
from gemm_bench.question.config import ConfigError, ModelConfig, preset
from gemm_bench.question.question import build_question

HF = Path(__file__).resolve().parent / "data" / "hf"


# ------------------------------------------------------------------------------ the question
@pytest.mark.parametrize(("vocab", "divisible", "tp", "padded"), [
    (128256, 128, 1, 128256),  # Llama 3: already a multiple of 128
    (128256, 128, 8, 129024),  # ... but not of 128 x 8
    (50257, 128, 1, 50304),  # GPT-2's vocabulary, Megatron's classic example
    (256000, 128, 8, 256000),
    (32000, 1, 1, 32000),
])
def test_vocabulary_is_padded_as_megatron_pads_it(vocab: int, divisible: int, tp: int, padded: int) -> None:
    config = ModelConfig(hidden_size=1024, ffn_hidden_size=4096, num_attention_heads=8, vocab_size=vocab,
                         make_vocab_size_divisible_by=divisible, tensor_model_parallel_size=tp)
    assert config.padded_vocab_size == padded


def test_every_model_preset_but_the_te_layer_knows_its_vocabulary_and_it_matches_its_config_json() -> None:
    for name in ("llama3-8b", "llama3-70b", "llama3.1-405b", "mixtral-8x7b", "mixtral-8x22b", "qwen2.5-7b",
                 "qwen2.5-72b", "deepseek-v3", "gpt-oss-120b", "gemma2-27b"):
        from_file = build_question(hf_config=HF / f"{name}.json").config
        assert from_file is not None and from_file.vocab_size == preset(name).vocab_size, name
    assert preset("te-guide-5b").vocab_size is None  # TE's example layer has no model around it


def test_megatron_args_give_the_vocabulary_and_its_padding() -> None:
    q = build_question(megatron_args=["--hidden-size", "4096", "--num-attention-heads", "32", "--vocab-size",
                                      "50257", "--make-vocab-size-divisible-by", "64", "--global-batch-size", "512"])
    assert q.config is not None and (q.config.vocab_size, q.config.padded_vocab_size) == (50257, 50304)
    assert q.ignored_flags == ()  # the global batch is the run's layout (megatron_layout), not ignored


def test_vocabulary_and_g_leave_the_question_hash_as_it_was() -> None:
    """Every committed result keeps its file name: llama3-8b's is 45a55c5d892e31af on both GPUs."""
    base = build_question(model="llama3-8b")
    assert base.hash == "45a55c5d892e31af"
    assert (Path(__file__).resolve().parent.parent / "docs" / "_gemm_cache" / f"{base.hash}--h200.json").exists()
    for fields in ({"num_microbatches": 1}, {"vocab_size": 32000}, {"make_vocab_size_divisible_by": 1}):
        assert build_question(model="llama3-8b", fields=fields).hash == base.hash


def test_g_is_a_whole_number_of_at_least_one() -> None:
    with pytest.raises(ConfigError, match="num-microbatches: must be at least 1"):
        build_question(model="llama3-8b", fields={"num_microbatches": 0})
    # G follows the published layout's global batch (issue 41): 128 / (micro-batch 1 x DP 8 / CP 2 = 4).
    assert build_question(model="llama3-8b").config.num_microbatches == 32  # type: ignore[union-attr]
    # A page's G overrides it (and the preset's global batch goes with it); no layout batch: the default 8.
    given = build_question(model="llama3-8b", fields={"num_microbatches": 4})
    assert given.config.num_microbatches == given.layout.microbatches == 4  # type: ignore[union-attr]
    assert given.layout.global_batch_size is None  # type: ignore[union-attr]
    assert build_question(model="llama3-70b").config.num_microbatches == 8  # type: ignore[union-attr]


def test_a_model_without_vocabulary_has_no_model_step_and_says_why() -> None:
    assert "vocab-size" in (ms.unsupported_reason(preset("te-guide-5b")) or "")
    assert ms.unsupported_reason(preset("llama3-8b")) is None
    assert ms.unsupported_reason(None) is not None


# ----------------------------------------------------------------------------------- FLOPs
def test_megatron_flops_of_a_tiny_model_by_hand() -> None:
    """h 4, two heads of 2 (q = kv = 4), GELU MLP of 8, one layer, 2 tokens, vocabulary 128. Per token:
    MLP 6*4*8*2 = 384; attention 6*(4*(4 + 2*4) + 4*2/2*2 + 4*4) = 6*72 = 432; logits 6*4*128 = 3072."""
    tiny = ModelConfig(hidden_size=4, ffn_hidden_size=8, num_attention_heads=2, num_layers=1, seq_length=2,
                       vocab_size=100)
    assert ms.megatron_flops(tiny) == 2 * (384 + 432 + 3072)


def test_megatron_flops_of_llama3_8b_by_hand() -> None:
    """6 x tokens x (the GEMM weights of 32 layers + the logits) + 6 x layers x tokens x q x s (QK^T and
    softmax x V at half the square, both): one layer's GEMM weights 4096 x 6144 (QKV, 8 KV groups) +
    4096 x 4096 (out) + 3 x 4096 x 14336 (gated MLP) = 218,103,808."""
    tokens, layers, s, q = 8192, 32, 8192, 4096
    weights = 4096 * 6144 + 4096 * 4096 + 3 * 4096 * 14336
    assert weights == 218_103_808
    expected = 6 * tokens * (layers * weights + 4096 * 128256) + 6 * layers * tokens * q * s
    assert ms.megatron_flops(preset("llama3-8b")) == expected == 421_645_529_382_912
    tp8 = dataclasses.replace(preset("llama3-8b"), tensor_model_parallel_size=8)
    assert ms.rank_flops(tp8) == Fraction(6 * tokens * (layers * weights + 4096 * 129024)
                                          + 6 * layers * tokens * q * s, 8)  # the padded vocabulary


def test_an_odd_sequence_halves_exactly_and_moe_counts_top_k_and_shared_experts() -> None:
    odd = ModelConfig(hidden_size=4, ffn_hidden_size=8, num_attention_heads=2, seq_length=3, vocab_size=128)
    # attention per token 6*(48 + 4*3/2*2 + 16) = 456
    assert ms.megatron_flops(odd) == 3 * (384 + 456 + 3072)
    moe = ModelConfig(hidden_size=4, ffn_hidden_size=8, num_attention_heads=2, seq_length=2, vocab_size=128,
                      num_experts=4, moe_router_topk=2, moe_ffn_hidden_size=2, moe_shared_expert_intermediate_size=6)
    # MLP per token: 6*4*(2*2*2 + 6*2) = 480 in place of the dense 384
    assert ms.megatron_flops(moe) == 2 * (480 + 432 + 3072)


def test_deepseek_counts_only_the_measured_moe_layers() -> None:
    v3 = preset("deepseek-v3")
    assert ms.megatron_flops(v3) == ms.megatron_flops(v3, layers=v3.num_layers - 3)


# ----------------------------------------------------------------------------- composition
def test_the_step_composes_by_exact_arithmetic() -> None:
    parts = ms.PartTimes(embedding=1.0, head=2.0, layer_first=10.0, layer_cached=6.0)
    # G (E + H) + L (first + (G - 1) cached) + optimizer = 4*3 + 3*(10 + 3*6) + 5
    assert ms.step_ms(parts, layers=3, microbatches=4, optimizer_ms=5.0) == 101.0
    assert ms.per_microbatch_ms(parts, layers=3, microbatches=4, optimizer_ms=5.0) == 25.25
    assert ms.step_ms(parts, layers=3, microbatches=1, optimizer_ms=5.0) == 3 + 30 + 5  # no cached call at G = 1
    with pytest.raises(ms.ModelStepError):
        ms.step_ms(parts, layers=3, microbatches=0, optimizer_ms=5.0)


def test_the_optimizer_line_goes_through_both_sizes() -> None:
    line = ms.OptimizerLine((100, 300), (1.0, 2.0))
    assert (line.at(100), line.at(300), line.at(500)) == (1.0, 2.0, 3.0)
    assert line.at(1) == pytest.approx(0.505)
    with pytest.raises(ms.ModelStepError):
        ms.OptimizerLine((100, 100), (1.0, 2.0))


def test_units_teams_plan_in() -> None:
    tp2 = dataclasses.replace(preset("llama3-8b"), tensor_model_parallel_size=2)
    assert ms.tokens_per_s_per_gpu(tp2, 100.0) == 8192 / 0.1 / 2
    assert ms.model_tflops_per_gpu(tp2, 1000.0) == pytest.approx(float(ms.rank_flops(tp2)) / 1e12)


def test_composed_rows_give_speedup_with_spread_and_mfu() -> None:
    config = preset("llama3-8b")
    bf16 = ms.PartTimes(1.0, 2.0, 10.0, 10.0)
    fp8 = ms.PartTimes(1.0, 2.0, 8.0, 6.0)
    low = {p: (dataclasses.replace(t, layer_first=t.layer_first - 1, layer_cached=t.layer_cached - 1),
               dataclasses.replace(t, layer_first=t.layer_first + 1, layer_cached=t.layer_cached + 1))
           for p, t in (("bf16", bf16), ("fp8-current", fp8))}
    line = ms.OptimizerLine((100, 200), (4.0, 8.0))
    rows = {r.precision: r for r in ms.composed_rows(config, {"bf16": bf16, "fp8-current": fp8}, low, line, 100,
                                                     microbatches=2, peak_bf16_tflops=1000.0)}
    # per micro-batch: bf16 (2*3 + 32*(10 + 10) + 4) / 2 = 325; fp8 (6 + 32*(8 + 6) + 4) / 2 = 229
    assert (rows["bf16"].ms_per_microbatch, rows["fp8-current"].ms_per_microbatch) == (325.0, 229.0)
    assert rows["fp8-current"].speedup == 325 / 229
    assert rows["fp8-current"].speedup_low == rows["bf16"].ms_low / rows["fp8-current"].ms_high < 325 / 229
    assert rows["fp8-current"].mfu == rows["fp8-current"].tflops / 1000.0
    assert rows["fp8-current"].layer_step_speedup == 10 / 8


def test_memory_composes_and_says_how_many_layers_fit() -> None:
    parts = ms.MemoryParts(layer_weights=100, layer_fp8_weights=50, layer_activations=200, layer_backward_extra=30,
                           embedding_weights=1000, head_weights=1000, head_transient=400, state_per_param=16.0)
    m = ms.memory(parts, params=10, layers=4)
    assert (m.weights, m.fp8_weights, m.activations, m.gradients, m.optimizer_state, m.transient) == (
        2400, 200, 800, 40, 120, 400)
    assert m.peak == 3960 and m.to_dict()["peak"] == 3960
    # fixed: 2000 + 400 + 16 * (2 * 1 + 2) = 2464; per layer: 350 + 16 * 3 = 398; (5000 - 2464) // 398 = 6
    assert ms.layers_that_fit(parts, 5000, layer_params=3, vocab_params=1, hidden_size=2) == 6
    assert ms.layers_that_fit(parts, 2000, layer_params=3, vocab_params=1, hidden_size=2) == 0
    # fixed 2400 + 200 + 160 = 2760, per micro-batch 800 + 400: (6000 - 2760) // 1200 = 2
    assert ms.largest_microbatch_predicted(parts, 10, layers=4, capacity=6000) == 2
    assert ms.largest_microbatch_predicted(parts, 10, layers=4, capacity=1000) == 0


def test_the_cli_and_the_directive_take_g_and_the_vocabulary_from_one_option_table() -> None:
    from gemm_bench.cli.commands import build_parser, question_from_args
    from gemm_benchmark.options import OPTIONS, parse_options

    args = build_parser().parse_args(["shapes", "--model", "llama3-8b", "--num-microbatches", "4",
                                      "--vocab-size", "32000"])
    cli = question_from_args(args).config
    page = parse_options({"model": "llama3-8b", "num-microbatches": "4", "vocab-size": "32000"},
                         srcdir=HF, docdir=HF).question.config
    assert cli == page and cli is not None and (cli.num_microbatches, cli.vocab_size) == (4, 32000)
    assert OPTIONS["num-microbatches"].default == "8" and OPTIONS["make-vocab-size-divisible-by"].default == "128"


def test_a_parts_spread_stays_within_its_samples() -> None:
    """Python's default ("exclusive") quartiles of two samples lie outside them, and composed into a
    speedup spread they went negative; the spread is the inclusive quartiles."""
    from gemm_bench.results.typed import Stats

    low, high = Stats(5.5, 9.0, samples_ms=(1.0, 10.0)).quartiles_around(5.5)
    assert 1.0 <= low <= high <= 10.0
