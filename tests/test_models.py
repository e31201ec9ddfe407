"""The ten models people train: presets, their Hugging Face config.json files and Megatron-LM arguments.

Every expected shape below is worked out by hand from the public config values (the arithmetic is
written next to it), not from the code under test: only the Fprop/Dgrad/Wgrad convention of
DESIGN.md (``expand``) turns one Linear's ``M x K -> N`` into its three GEMMs.
"""

from __future__ import annotations

import dataclasses
import json
import shlex
from pathlib import Path

import pytest

from gemm_bench.question.config import (
    PRESET_DESCRIPTIONS,
    PRESET_SOURCES,
    PRESETS,
    ConfigError,
    cli_flag,
    megatron_args_to_fields,
    split_megatron_args,
)
from gemm_bench.question.question import Question, build_question
from gemm_bench.question.shapes import OP_NAMES, OPS

DATA = Path(__file__).parent / "data"
HF = DATA / "hf"
MEGATRON = DATA / "megatron"

Linear = tuple[int, int, int, int]  # tokens M, in_features K, out_features N, groups


def expand(linears: dict[str, Linear]) -> dict[tuple[str, str], Linear]:
    """DESIGN.md: Fprop M x K x N, Dgrad M x N x K, Wgrad N x M x K, per op."""
    out = {}
    for op, (m, k, n, g) in linears.items():
        out[(op, "fprop")] = (m, k, n, g)
        out[(op, "dgrad")] = (m, n, k, g)
        out[(op, "wgrad")] = (n, m, k, g)
    return out


def table(q: Question) -> dict[tuple[str, str], Linear]:
    shapes = {(g.op, g.pass_): (g.m, g.k, g.n, g.groups) for g in q.gemms}
    assert len(shapes) == len(q.gemms), "an op and pass listed twice"
    return shapes


#: (preset, options, expected Linears, layers the model total counts). Options are what the page asks.
MODELS: list[tuple[str, dict[str, int], dict[str, Linear], int]] = [
    # Llama 3 8B: hidden 4096, 32 heads (head dim 4096/32 = 128), 8 KV heads, FFN 14336 gated; 1 x 8192 tokens.
    ("llama3-8b", {}, {
        "qkv": (8192, 4096, (32 + 2 * 8) * 128, 1),  # 6144
        "attn_out": (8192, 32 * 128, 4096, 1),
        "mlp_up": (8192, 4096, 2 * 14336, 1),  # gate + up: 28672
        "mlp_down": (8192, 14336, 4096, 1),
    }, 32),
    # Llama 3 70B at TP 8: hidden 8192, 64 heads of 128, 8 KV heads, FFN 28672 gated; 8192 tokens.
    ("llama3-70b", {"tensor_model_parallel_size": 8}, {
        "qkv": (8192, 8192, (64 + 2 * 8) * 128 // 8, 1),  # 1280
        "attn_out": (8192, 64 * 128 // 8, 8192, 1),  # K 1024
        "mlp_up": (8192, 8192, 2 * 28672 // 8, 1),  # 7168
        "mlp_down": (8192, 28672 // 8, 8192, 1),  # K 3584
    }, 80),
    # Llama 3.1 405B at TP 8: hidden 16384, 128 heads of 16384/128 = 128, 8 KV heads, FFN 53248; 8192 tokens.
    ("llama3.1-405b", {"tensor_model_parallel_size": 8}, {
        "qkv": (8192, 16384, (128 + 2 * 8) * 128 // 8, 1),  # 2304
        "attn_out": (8192, 128 * 128 // 8, 16384, 1),  # K 2048
        "mlp_up": (8192, 16384, 2 * 53248 // 8, 1),  # 13312
        "mlp_down": (8192, 53248 // 8, 16384, 1),  # K 6656
    }, 126),
    # Mixtral 8x7B: hidden 4096, 32 heads of 128, 8 KV heads; 8 experts of FFN 14336, top-2; 4096 tokens:
    # 4096 x 2 / 8 = 1024 tokens per expert.
    ("mixtral-8x7b", {}, {
        "qkv": (4096, 4096, (32 + 16) * 128, 1),
        "attn_out": (4096, 4096, 4096, 1),
        "mlp_up": (4096 * 2 // 8, 4096, 2 * 14336, 8),
        "mlp_down": (1024, 14336, 4096, 8),
    }, 32),
    # Mixtral 8x22B: hidden 6144, 48 heads of 6144/48 = 128, 8 KV heads; 8 experts of FFN 16384, top-2.
    ("mixtral-8x22b", {}, {
        "qkv": (4096, 6144, (48 + 2 * 8) * 128, 1),  # 8192
        "attn_out": (4096, 48 * 128, 6144, 1),
        "mlp_up": (4096 * 2 // 8, 6144, 2 * 16384, 8),  # 1024 tokens, 32768 outputs
        "mlp_down": (1024, 16384, 6144, 8),
    }, 56),
    # Qwen2.5 7B: hidden 3584, 28 heads of 3584/28 = 128, 4 KV heads, FFN 18944 gated; 4096 tokens.
    ("qwen2.5-7b", {}, {
        "qkv": (4096, 3584, (28 + 2 * 4) * 128, 1),  # 4608
        "attn_out": (4096, 28 * 128, 3584, 1),
        "mlp_up": (4096, 3584, 2 * 18944, 1),  # 37888
        "mlp_down": (4096, 18944, 3584, 1),
    }, 28),
    # Qwen2.5 72B at TP 8: hidden 8192, 64 heads of 128, 8 KV heads, FFN 29568 gated.
    ("qwen2.5-72b", {"tensor_model_parallel_size": 8}, {
        "qkv": (4096, 8192, (64 + 2 * 8) * 128 // 8, 1),  # 1280
        "attn_out": (4096, 64 * 128 // 8, 8192, 1),
        "mlp_up": (4096, 8192, 2 * 29568 // 8, 1),  # 7392
        "mlp_down": (4096, 29568 // 8, 8192, 1),  # K 3696
    }, 80),
    # DeepSeek-V3: hidden 7168, 128 heads; MLA with q_lora_rank 1536, kv_lora_rank 512, qk_nope 128,
    # qk_rope 64, v 128; 256 routed experts of 2048 (gated), top-8, one shared expert of 2048; 4096 tokens:
    # 4096 x 8 / 256 = 128 tokens per expert. 61 layers, the first 3 dense: 58 MoE layers counted.
    ("deepseek-v3", {}, {
        "q_down": (4096, 7168, 1536, 1),
        "q_up": (4096, 1536, 128 * (128 + 64), 1),  # 24576
        "kv_down": (4096, 7168, 512 + 64, 1),  # 576: the latent KV plus the shared rotary K
        "kv_up": (4096, 512, 128 * (128 + 128), 1),  # 32768: K (nope part) and V of every head
        "attn_out": (4096, 128 * 128, 7168, 1),  # K 16384
        "mlp_up": (4096 * 8 // 256, 7168, 2 * 2048, 256),
        "mlp_down": (128, 2048, 7168, 256),
        "shared_up": (4096, 7168, 2 * 1 * 2048, 1),
        "shared_down": (4096, 1 * 2048, 7168, 1),
    }, 61 - 3),
    # gpt-oss-120b: hidden 2880, 64 heads of head_dim 64 (4096 wide), 8 KV heads; 128 experts of
    # FFN 2880 (gated), top-4: 4096 x 4 / 128 = 128 tokens per expert; 36 layers.
    ("gpt-oss-120b", {}, {
        "qkv": (4096, 2880, (64 + 2 * 8) * 64, 1),  # 5120
        "attn_out": (4096, 64 * 64, 2880, 1),
        "mlp_up": (4096 * 4 // 128, 2880, 2 * 2880, 128),
        "mlp_down": (128, 2880, 2880, 128),
    }, 36),
    # Gemma 2 27B: hidden 4608, 32 heads of head_dim 128 (4096 wide), 16 KV heads, FFN 36864 GeGLU
    # (gated); 8192 tokens; 46 layers.
    ("gemma2-27b", {}, {
        "qkv": (8192, 4608, (32 + 2 * 16) * 128, 1),  # 8192
        "attn_out": (8192, 32 * 128, 4608, 1),
        "mlp_up": (8192, 4608, 2 * 36864, 1),  # 73728
        "mlp_down": (8192, 36864, 4608, 1),
    }, 46),
]


@pytest.mark.parametrize(("name", "options", "linears", "layers"), MODELS, ids=[m[0] for m in MODELS])
def test_every_model_gives_its_hand_derived_gemms(name, options, linears, layers) -> None:
    q = build_question(model=name, fields=options)
    assert table(q) == expand(linears)
    assert q.num_layers == layers


def test_the_ten_models_people_train_are_all_presets_with_a_source() -> None:
    assert {m[0] for m in MODELS} == set(PRESETS) - {"te-guide-5b"}
    assert len(MODELS) == 10
    assert set(PRESET_SOURCES) == set(PRESETS) == set(PRESET_DESCRIPTIONS)
    for name in set(PRESETS) - {"te-guide-5b"}:
        assert PRESET_SOURCES[name].startswith("https://huggingface.co/")
        assert PRESET_SOURCES[name].endswith("/config.json")
    # Every op any model produces has a display name.
    ops = {g.op for name in PRESETS for g in build_question(model=name).gemms}
    assert ops <= set(OPS) == set(OP_NAMES)
    assert max(len(n) for n in OP_NAMES.values()) <= 16  # the op column of the text reports


#: The questions the docs ask today (docs/index.rst, docs/tutorial.md) and the hash their cached
#: measurements in docs/_gemm_cache are filed under. They must never change.
DOC_QUESTIONS = [
    ({"model": "te-guide-5b"}, "2160d33ec54a347e"),
    ({"model": "llama3-8b"}, "45a55c5d892e31af"),
    ({"model": "mixtral-8x7b"}, "8a24d02daa8fda3a"),
    ({"model": "llama3-70b", "fields": {"tensor_model_parallel_size": 8}}, "c1b9aa6aaebc8435"),
    ({"sweep": [256, 512, 1024, 2048, 4096, 8192, 16384]}, "4803128f66703ed6"),
]


@pytest.mark.parametrize(("question", "digest"), DOC_QUESTIONS, ids=[d for _, d in DOC_QUESTIONS])
def test_the_questions_the_docs_ask_keep_their_cached_hashes(question, digest) -> None:
    assert build_question(**question).hash == digest
    cached = sorted(p.name for p in (Path(__file__).parents[1] / "docs" / "_gemm_cache").glob(f"{digest}--*.json"))
    assert cached, f"no cached result filed under {digest}"


# ------------------------------------------------------------------------------- HF configs
#: Each preset and the config.json copied from the source it names (training choices as the preset's).
HF_FILES = {name: HF / f"{name}.json" for name in PRESETS if name != "te-guide-5b"}


@pytest.mark.parametrize("name", sorted(HF_FILES))
def test_each_preset_is_its_hugging_face_config(name) -> None:
    p = PRESETS[name]
    from_file = build_question(hf_config=HF_FILES[name], fields={"seq_length": p.seq_length,
                                                                "micro_batch_size": p.micro_batch_size})
    from_preset = build_question(model=name)
    assert from_file.gemms == from_preset.gemms
    assert from_file.hash == from_preset.hash
    assert from_file.num_layers == from_preset.num_layers
    # The preset's question carries its published layout, whose global batch sets G (issue 41); the
    # file's question has the default layout and the default G: everything else is the same.
    assert from_preset.layout is not None and from_preset.config is not None and from_file.config is not None
    assert from_preset.config.num_microbatches == from_preset.layout.microbatches
    g = from_file.config.num_microbatches
    assert from_file.config == dataclasses.replace(from_preset.config, num_microbatches=g)


def test_deepseek_v3_from_its_config_notes_the_dense_layers_and_counts_the_moe_layers() -> None:
    q = build_question(hf_config=HF_FILES["deepseek-v3"])
    assert q.config is not None
    assert (q.config.num_layers, q.config.moe_dense_layers, q.num_layers) == (61, 3, 58)
    notes = " ".join(q.notes)
    assert "first 3 of the 61 layers are dense" in notes and "58 MoE layers only" in notes
    assert "Shared experts" in notes and "Multi-latent attention" in notes
    assert "61 layers (first 3 dense, not included)" in q.describe()


def test_gpt_oss_reads_experts_per_token_and_a_disagreeing_spelling_is_an_error(tmp_path) -> None:
    raw = json.loads(HF_FILES["gpt-oss-120b"].read_text())
    only_new = {k: v for k, v in raw.items() if k != "num_experts_per_tok"}
    (tmp_path / "a.json").write_text(json.dumps(only_new))
    config = build_question(hf_config=tmp_path / "a.json").config
    assert config is not None and config.moe_router_topk == 4
    (tmp_path / "b.json").write_text(json.dumps({**raw, "experts_per_token": 2}))
    with pytest.raises(ConfigError, match=r"num_experts_per_tok: disagrees with .*experts_per_token = 2"):
        build_question(hf_config=tmp_path / "b.json")


def test_qwen_moe_shared_expert_is_read_not_dropped() -> None:
    # Qwen1.5-MoE-A2.7B: shared_expert_intermediate_size 5632 (gated), 4096 tokens.
    q = build_question(hf_config=HF / "qwen2-moe-a2.7b.json")
    t = table(q)
    assert t[("shared_up", "fprop")] == (4096, 2048, 2 * 5632, 1)
    assert t[("shared_down", "fprop")] == (4096, 5632, 2048, 1)


def test_deepseek_without_q_compression_projects_q_directly(tmp_path) -> None:
    # DeepSeek-V2-Lite-style attention: q_lora_rank null -> one Q projection of 16 x (128 + 64).
    raw = json.loads(HF_FILES["deepseek-v3"].read_text())
    raw.update(q_lora_rank=None, num_attention_heads=16, num_key_value_heads=16)
    (tmp_path / "c.json").write_text(json.dumps(raw))
    t = table(build_question(hf_config=tmp_path / "c.json"))
    assert t[("q_proj", "fprop")] == (4096, 7168, 16 * (128 + 64), 1)
    assert ("q_down", "fprop") not in t and ("q_up", "fprop") not in t


@pytest.mark.parametrize(
    ("change", "words"),
    [
        ({"intermediate_size_mlp": 16384}, "'intermediate_size_mlp' may change the layer's GEMMs"),
        ({"interleave_moe_layer_step": 2, "no_rope_layers": [1, 0]}, "'interleave_moe_layer_step', 'no_rope_layers'"),
        ({"moe_layer_freq": 2}, "moe_layer_freq: 2: MoE only every 2 layers"),
        ({"mlp_only_layers": [0, 5]}, "mlp_only_layers: dense layers among MoE layers"),
        ({"kv_lora_rank": None}, "q_lora_rank: is multi-latent attention's, but kv_lora_rank is missing"),
        ({"head_dim": 192}, "head_dim: 192 with kv_lora_rank"),
        ({"num_key_value_heads": 8}, "num_key_value_heads: 8 with kv_lora_rank"),
        ({"first_k_dense_replace": 61}, "first_k_dense_replace: 61 leaves no MoE layer"),
    ],
)
def test_keys_that_change_gemms_but_are_not_understood_are_errors_naming_them(tmp_path, change, words) -> None:
    raw = {**json.loads(HF_FILES["deepseek-v3"].read_text()), **change}
    path = tmp_path / "config.json"
    path.write_text(json.dumps(raw))
    with pytest.raises(ConfigError) as info:
        build_question(hf_config=path)
    message = info.value.describe(cli_flag)
    assert message.startswith("--hf-config: ") and ascii(str(path)) in message
    assert words in message


def test_keys_that_change_no_gemm_and_unused_gemm_words_set_to_nothing_are_accepted(tmp_path) -> None:
    raw = json.loads(HF_FILES["llama3-8b"].read_text())
    raw.update(layer_norm_eps=1e-5, mlp_bias=False, cross_attention_hidden_size=None, moe_layers=[],
               some_future_flag=True)
    (tmp_path / "config.json").write_text(json.dumps(raw))
    q = build_question(hf_config=tmp_path / "config.json", fields={"seq_length": 8192})
    assert q.hash == build_question(model="llama3-8b").hash


def test_multimodal_text_config_is_read_and_named_in_errors(tmp_path) -> None:
    inner = json.loads(HF_FILES["gemma2-27b"].read_text())
    (tmp_path / "mm.json").write_text(json.dumps({"model_type": "gemma3", "text_config": inner,
                                                  "vision_config": {"hidden_size": 1152}}))
    assert build_question(hf_config=tmp_path / "mm.json", fields={"seq_length": 8192}).hash == \
        build_question(model="gemma2-27b").hash
    (tmp_path / "bad.json").write_text(json.dumps({"text_config": {**inner, "head_dim": "128"}}))
    with pytest.raises(ConfigError, match=r"text_config\.head_dim: must be a whole number, got '128'"):
        build_question(hf_config=tmp_path / "bad.json")


def test_a_rule_the_file_breaks_names_the_file_and_its_key_a_rule_a_flag_breaks_names_the_flag(tmp_path) -> None:
    raw = {**json.loads(HF_FILES["llama3-8b"].read_text()), "num_key_value_heads": 5}
    (tmp_path / "config.json").write_text(json.dumps(raw))
    with pytest.raises(ConfigError) as info:
        build_question(hf_config=tmp_path / "config.json")
    message = info.value.describe(cli_flag)
    assert "config.json" in message and "num_attention_heads: 32 is not divisible by num_key_value_heads 5" in message
    with pytest.raises(ConfigError) as info:
        build_question(hf_config=HF_FILES["llama3-8b"], fields={"tensor_model_parallel_size": 3})
    assert info.value.field == "tensor_model_parallel_size"


# ------------------------------------------------------------------------------ Megatron-LM
def test_a_real_pretrain_gpt_argument_list_gives_the_preset_and_lists_what_it_ignores() -> None:
    argv = split_megatron_args((MEGATRON / "llama3-8b.sh").read_text())
    fields, ignored = megatron_args_to_fields(argv)
    assert fields == {"num_layers": 32, "hidden_size": 4096, "ffn_hidden_size": 14336, "num_attention_heads": 32,
                      "num_query_groups": 8, "kv_channels": 128, "seq_length": 8192, "micro_batch_size": 1,
                      "tensor_model_parallel_size": 1, "swiglu": True,
                      "sequence_parallel": False}  # Megatron runs without it unless the line says so
    for flag in ("--lr", "--train-iters", "--data-path", "--tokenizer-model", "--bf16", "--attention-dropout"):
        assert flag in ignored, flag
    # The run's layout takes these (issue 41: megatron_layout); they are no longer "ignored".
    for flag in ("--global-batch-size", "--pipeline-model-parallel-size", "--context-parallel-size"):
        assert flag not in ignored, flag
    q = build_question(megatron_args=argv)
    assert q.hash == build_question(model="llama3-8b").hash == "45a55c5d892e31af"
    assert q.ignored_flags == tuple(ignored)
    # Fields override the argument list, as they override a preset.
    overridden = build_question(megatron_args=argv, fields={"seq_length": 4096}).config
    assert overridden is not None and overridden.seq_length == 4096


def test_deepseek_v3_megatron_arguments_with_tp_ep_and_sequence_parallel() -> None:
    argv = split_megatron_args((MEGATRON / "deepseek-v3.sh").read_text())
    q = build_question(megatron_args=argv)
    assert "--kv-channels" in q.ignored_flags and "--mtp-num-layers" in q.ignored_flags
    assert q.num_layers == 58  # --moe-layer-freq ([0]*3+[1]*58)
    # TP 2 with sequence parallelism, EP 64: 4096 x 8 x 64 / 256 = 8192 tokens per expert, 256 / 64 = 4
    # local experts; MLA's down projections are duplicated and see 4096 / 2 tokens.
    assert table(q) == expand({
        "q_down": (4096 // 2, 7168, 1536, 1),
        "q_up": (4096, 1536, 128 * (128 + 64) // 2, 1),
        "kv_down": (2048, 7168, 512 + 64, 1),
        "kv_up": (4096, 512, 128 * (128 + 128) // 2, 1),
        "attn_out": (4096, 128 * 128 // 2, 7168, 1),
        "mlp_up": (4096 * 8 * 64 // 256, 7168, 2 * 2048 // 2, 256 // 64),
        "mlp_down": (8192, 2048 // 2, 7168, 4),
        "shared_up": (4096, 7168, 2 * 2048 // 2, 1),
        "shared_down": (4096, 2048 // 2, 7168, 1),
    })
    # The same model without sequence parallelism: down projections see every token.
    no_sp = [a for a in argv if a != "--sequence-parallel"]
    assert table(build_question(megatron_args=no_sp))[("kv_down", "fprop")] == (4096, 7168, 576, 1)
    # The preset at the same parallelism is the same question.
    assert build_question(model="deepseek-v3", fields={"tensor_model_parallel_size": 2, "sequence_parallel": True,
                                                       "expert_model_parallel_size": 64}).hash == q.hash


def test_megatron_rules_gqa_mla_switches_and_default_ffn() -> None:
    # Without --group-query-attention Megatron ignores --num-query-groups.
    fields, ignored = megatron_args_to_fields(["--hidden-size", "4096", "--num-attention-heads", "32",
                                               "--num-query-groups", "8"])
    assert "num_query_groups" not in fields and ignored == ["--num-query-groups"]
    # Megatron's FFN default: 4 x hidden, or int(4 x hidden x 2/3 / 64) x 64 with --swiglu.
    assert fields["ffn_hidden_size"] == 4 * 4096
    fields, _ = megatron_args_to_fields(["--hidden-size=4096", "--swiglu", "--num-attention-heads", "32"])
    assert fields["ffn_hidden_size"] == 10880  # 4 x 4096 x 2/3 = 10922.7 -> 170 x 64
    # MLA flags without --multi-latent-attention change nothing in Megatron.
    fields, ignored = megatron_args_to_fields(["--hidden-size", "64", "--kv-lora-rank", "32"])
    assert "kv_lora_rank" not in fields and ignored == ["--kv-lora-rank"]


@pytest.mark.parametrize(
    ("argv", "words"),
    [
        ("--hidden-size 64 --hybrid-override-pattern M*M*", "--hybrid-override-pattern: may change the GEMMs"),
        ("--hidden-size 64 --foo-ffn-size 3 --bar-expert-thing 1", "--foo-ffn-size, --bar-expert-thing"),
        ("--hidden-size 64 --moe-layer-freq 2", "--moe-layer-freq '2': only 1 or ([0]*K+[1]*N)"),
        ("--num-layers 10 --moe-layer-freq ([0]*3+[1]*5)", "--moe-layer-freq describes 8 layers, --num-layers says 10"),
        ("--hidden-size 64 --expert-tensor-parallel-size 2", "--expert-tensor-parallel-size other than"),
        ("--hidden-size 64 --moe-expert-capacity-factor 0.5", "--moe-expert-capacity-factor below 1"),
        ("--hidden-size 64 --moe-expert-capacity-factor 1.5 --moe-pad-expert-input-to-capacity", "--moe-pad"),
        ("--hidden-size 4k", "--hidden-size: '4k' is not a whole number"),
        ("--hidden-size 64 128", "--hidden-size takes one whole number, got 2 values"),
        ("--swiglu yes", "--swiglu takes no value"),
        ("4096 --hidden-size 64", "'4096' comes before any --flag"),
        ("--multi-latent-attention --hidden-size 64", "--multi-latent-attention needs --kv-lora-rank"),
        ("--hidden-size " + "9" * 5000, "is not a whole number"),
    ],
)
def test_megatron_flags_that_change_gemms_but_are_not_understood_are_errors(argv, words) -> None:
    with pytest.raises(ConfigError) as info:
        megatron_args_to_fields(shlex.split(argv))
    assert info.value.field == "megatron_args"
    assert words in info.value.describe(cli_flag)


def test_megatron_values_the_model_rejects_name_the_flag_and_sources_do_not_mix() -> None:
    with pytest.raises(ConfigError) as info:
        build_question(megatron_args=["--hidden-size", "0", "--num-attention-heads", "1"])
    assert info.value.describe(cli_flag).startswith("--hidden-size: must be at least 1")
    with pytest.raises(ConfigError, match="cannot be combined"):
        build_question(model="llama3-8b", megatron_args=["--hidden-size", "64"])
    with pytest.raises(ConfigError, match="needs at least one flag"):
        build_question(megatron_args=[" "])
    with pytest.raises(ConfigError, match="cannot split"):
        split_megatron_args('--data-path "unterminated')
