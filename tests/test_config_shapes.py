"""Model configs and the GEMM shapes they imply, checked against hand-derived shapes of real models."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gemm_bench.question.config import PRESETS, ConfigError, ModelConfig, cli_flag, config_from_hf, config_from_mapping
from gemm_bench.question.question import build_question
from gemm_bench.question.shapes import GemmShape, layer_gemms, manual_gemms, parse_shape, square_sweep
from tests.conftest import fuzz_examples

HF = Path(__file__).parent / "data" / "hf"


def table(gemms: list[GemmShape]) -> dict[tuple[str, str], tuple[int, int, int, int]]:
    return {(g.op, g.pass_): (g.m, g.k, g.n, g.groups) for g in gemms}


def test_te_guide_example_gives_the_twelve_shapes_of_the_issue() -> None:
    q = build_question(fields=dict(hidden_size=4096, ffn_hidden_size=16384, num_attention_heads=32, num_layers=24,
                                   micro_batch_size=31, seq_length=512))
    assert table(list(q.gemms)) == {
        ("qkv", "fprop"): (15872, 4096, 12288, 1),
        ("qkv", "dgrad"): (15872, 12288, 4096, 1),
        ("qkv", "wgrad"): (12288, 15872, 4096, 1),
        ("attn_out", "fprop"): (15872, 4096, 4096, 1),
        ("attn_out", "dgrad"): (15872, 4096, 4096, 1),
        ("attn_out", "wgrad"): (4096, 15872, 4096, 1),
        ("mlp_up", "fprop"): (15872, 4096, 16384, 1),
        ("mlp_up", "dgrad"): (15872, 16384, 4096, 1),
        ("mlp_up", "wgrad"): (16384, 15872, 4096, 1),
        ("mlp_down", "fprop"): (15872, 16384, 4096, 1),
        ("mlp_down", "dgrad"): (15872, 4096, 16384, 1),
        ("mlp_down", "wgrad"): (4096, 15872, 16384, 1),
    }
    assert q.num_layers == 24
    # The preset is the same question: same GEMMs, same hash.
    assert build_question(model="te-guide-5b").hash == q.hash


def test_llama3_8b_gqa_and_swiglu() -> None:
    # Q: 32 heads x 128, K and V: 8 groups x 128 each -> 4096 + 2 x 1024 = 6144.
    # SwiGLU: gate and up projections fused -> 2 x 14336 = 28672.
    t = table(layer_gemms(PRESETS["llama3-8b"]))
    assert t[("qkv", "fprop")] == (8192, 4096, 6144, 1)
    assert t[("attn_out", "fprop")] == (8192, 4096, 4096, 1)
    assert t[("mlp_up", "fprop")] == (8192, 4096, 28672, 1)
    assert t[("mlp_down", "fprop")] == (8192, 14336, 4096, 1)
    assert t[("mlp_up", "wgrad")] == (28672, 8192, 4096, 1)


def test_llama3_70b_tensor_parallel_8_shards_n_of_column_and_k_of_row_parallel_ops() -> None:
    c = config_from_mapping({"tensor_model_parallel_size": 8}, base=PRESETS["llama3-70b"])
    t = table(layer_gemms(c))
    assert t[("qkv", "fprop")] == (8192, 8192, (64 + 2 * 8) * 128 // 8, 1)  # 1280
    assert t[("attn_out", "fprop")] == (8192, 8192 // 8, 8192, 1)
    assert t[("mlp_up", "fprop")] == (8192, 8192, 2 * 28672 // 8, 1)  # 7168
    assert t[("mlp_down", "fprop")] == (8192, 28672 // 8, 8192, 1)
    assert t[("mlp_down", "dgrad")] == (8192, 8192, 3584, 1)


def test_mixtral_experts_are_grouped_gemms_with_balanced_routing() -> None:
    q = build_question(model="mixtral-8x7b")
    t = table(list(q.gemms))
    # 4096 tokens x top-2 / 8 experts = 1024 tokens per expert, 8 local experts.
    assert t[("mlp_up", "fprop")] == (1024, 4096, 28672, 8)
    assert t[("mlp_down", "fprop")] == (1024, 14336, 4096, 8)
    assert t[("mlp_down", "wgrad")] == (4096, 1024, 14336, 8)
    assert t[("qkv", "fprop")] == (4096, 4096, 6144, 1)
    assert any("balanced routing" in n for n in q.notes)
    # Expert parallel 2: 4 local experts, each receiving tokens from both EP ranks.
    ep = build_question(model="mixtral-8x7b", fields={"expert_model_parallel_size": 2})
    assert table(list(ep.gemms))[("mlp_up", "fprop")] == (2048, 4096, 28672, 4)
    assert sum(g.flops for g in ep.gemms if g.op == "mlp_up") == sum(g.flops for g in q.gemms if g.op == "mlp_up")


def test_flops_count_every_group() -> None:
    assert GemmShape("x", "fprop", 2, 3, 5, groups=7).flops == 2 * 2 * 3 * 5 * 7


def test_hugging_face_configs_load_real_models() -> None:
    llama = config_from_hf(HF / "llama3-8b.json", seq_length=8192)
    assert layer_gemms(llama) == layer_gemms(PRESETS["llama3-8b"])
    mixtral = config_from_hf(HF / "mixtral-8x7b.json", seq_length=4096)
    assert layer_gemms(mixtral) == layer_gemms(PRESETS["mixtral-8x7b"])
    qwen = config_from_hf(HF / "qwen2-moe-a2.7b.json")
    t = table(layer_gemms(qwen))
    # 60 experts, top-4, expert FFN 1408 (gated): 4096 x 4 / 60 = 273.07 -> 274 tokens per expert.
    assert t[("mlp_up", "fprop")] == (274, 2048, 2 * 1408, 60)
    gemma = config_from_hf(HF / "gemma2-9b.json")
    t = table(layer_gemms(gemma))
    # head_dim 256 differs from hidden / heads (224): Q is 16 x 256, K and V 8 x 256 each.
    assert t[("qkv", "fprop")] == (4096, 3584, (16 + 16) * 256, 1)
    assert t[("attn_out", "fprop")] == (4096, 16 * 256, 3584, 1)
    assert gemma.swiglu  # GeGLU is gated too


#: A small DeepSeek-like MoE model with multi-latent attention, valid as it stands.
MLA = dict(hidden_size=1024, ffn_hidden_size=4096, num_attention_heads=16, num_experts=8, moe_router_topk=2,
           moe_ffn_hidden_size=512, num_layers=4, q_lora_rank=256, kv_lora_rank=128, qk_head_dim=64,
           qk_pos_emb_head_dim=32, v_head_dim=64)


def test_the_small_mla_model_is_valid() -> None:
    config_from_mapping(MLA)


@pytest.mark.parametrize(
    ("values", "field", "words"),
    [
        (dict(hidden_size=4096, ffn_hidden_size=16384, num_attention_heads=30), "hidden_size", "not divisible"),
        (dict(hidden_size=4096, ffn_hidden_size=16384, num_attention_heads=32, num_query_groups=5),
         "num_attention_heads", "--num-query-groups"),
        (dict(hidden_size=4096, ffn_hidden_size=16384, num_attention_heads=32, tensor_model_parallel_size=3),
         "tensor_model_parallel_size", "does not divide"),
        (dict(hidden_size=4096, ffn_hidden_size=1000, num_attention_heads=32, tensor_model_parallel_size=16),
         "tensor_model_parallel_size", "--ffn-hidden-size"),
        (dict(hidden_size=4096, ffn_hidden_size=16384, num_attention_heads=32, num_experts=8, moe_router_topk=9),
         "moe_router_topk", "more than --num-experts"),
        (dict(hidden_size=4096, ffn_hidden_size=16384, num_attention_heads=32, num_experts=8,
              expert_model_parallel_size=3), "expert_model_parallel_size", "does not divide"),
        (dict(hidden_size=0, ffn_hidden_size=16384, num_attention_heads=32), "hidden_size", "at least 1"),
        (dict(hidden_size=4096, ffn_hidden_size=16384), "num_attention_heads", "required"),
        (dict(hidden_size=4096, ffn_hidden_size=16384, num_attention_heads=32, bogus=1), "bogus", "not a model"),
        # Multi-latent attention's dims come together, and GQA's fields do not apply to it.
        (dict(MLA, kv_lora_rank=None), "q_lora_rank", "multi-latent attention only: give --kv-lora-rank"),
        (dict(MLA, qk_head_dim=None), "qk_head_dim", "is required with --kv-lora-rank"),
        (dict(MLA, kv_channels=128), "kv_channels", "--qk-head-dim + --qk-pos-emb-head-dim"),
        (dict(MLA, num_query_groups=8), "num_query_groups", "no KV groups"),
        (dict(MLA, seq_length=4097, tensor_model_parallel_size=2, sequence_parallel=True), "sequence_parallel",
         "4097 tokens of a micro-batch to divide by --tensor-model-parallel-size 2"),
        (dict(MLA, moe_shared_expert_intermediate_size=1000, tensor_model_parallel_size=16),
         "tensor_model_parallel_size", "does not divide --moe-shared-expert-intermediate-size 1000"),
        (dict(MLA, num_layers=3, moe_dense_layers=3), "moe_dense_layers", "leave no MoE layer of --num-layers 3"),
    ],
)
def test_invalid_configs_name_the_field_and_the_rule(values: dict, field: str, words: str) -> None:
    with pytest.raises(ConfigError) as info:
        config_from_mapping(values)
    assert info.value.field == field
    message = info.value.describe(cli_flag)
    assert message.startswith(cli_flag(field) + ":")
    assert words in message
    directive = info.value.describe(lambda f: f":{f.replace('_', '-')}:")
    assert directive.startswith(f":{field.replace('_', '-')}:")


def test_manual_shapes_and_sweeps() -> None:
    assert parse_shape(" 128 x 256 X 512 ").key == (128, 256, 512, 1)
    assert [g.m for g in square_sweep([256, "512"])] == [256, 512]
    assert len(manual_gemms(["8x8x8", "8x8x8"])) == 1
    for bad in ("8x8", "0x8x8", "axbxc", "8x8x8x8", ""):
        with pytest.raises(ConfigError):
            parse_shape(bad)


def test_a_question_takes_one_source() -> None:
    with pytest.raises(ConfigError, match="cannot be combined"):
        build_question(model="llama3-8b", shapes=["8x8x8"])
    with pytest.raises(ConfigError, match="model option"):
        build_question(shapes=["8x8x8"], fields={"hidden_size": 8})
    with pytest.raises(ConfigError, match="unknown preset"):
        build_question(model="llama9")


dims = st.sampled_from([64, 128, 256])


@settings(max_examples=fuzz_examples(100))  # hypothesis's default, stated
@given(
    heads_per_group=st.sampled_from([1, 2, 4, 8]),
    groups=st.sampled_from([1, 2, 4, 8]),
    head_dim=dims,
    ffn_mult=st.integers(1, 8),
    tp=st.sampled_from([1, 2, 4, 8]),
    swiglu=st.booleans(),
    tokens=st.sampled_from([128, 1024, 4096]),
)
def test_tensor_parallel_divides_work_exactly(heads_per_group, groups, head_dim, ffn_mult, tp, swiglu, tokens) -> None:
    heads = heads_per_group * groups
    if groups % tp or heads % tp:
        return
    hidden = heads * head_dim
    base = ModelConfig(hidden_size=hidden, ffn_hidden_size=hidden * ffn_mult * tp, num_attention_heads=heads,
                       num_query_groups=groups, swiglu=swiglu, seq_length=tokens)
    sharded = config_from_mapping({"tensor_model_parallel_size": tp}, base=base)
    full, part = layer_gemms(base), layer_gemms(sharded)
    assert len(full) == len(part) == 12
    # Every GEMM's work is split evenly across the TP ranks.
    for a, b in zip(full, part, strict=True):
        assert (a.op, a.pass_) == (b.op, b.pass_)
        assert a.flops == b.flops * tp
    # Within one Linear the three passes do the same work.
    for op in ("qkv", "attn_out", "mlp_up", "mlp_down"):
        assert len({g.flops for g in full if g.op == op}) == 1
