"""The model step of a mixture of experts and of multi-latent attention, pure parts (issue 32): Megatron's
FLOP count and the rank's parameters, each against a case worked out by hand in its docstring, and
the question's reason where the layer step cannot build the layer."""

from __future__ import annotations

import dataclasses

from gemm_bench.question import model_step as ms
from gemm_bench.question.question import build_question


def _config(model: str):  # type: ignore[no-untyped-def]
    config = build_question(model=model).config
    assert config is not None
    return config


def test_megatron_flops_of_mixtral_8x7b_by_hand() -> None:
    """Megatron's ``num_floating_point_operations`` (MoE: the routed experts' FFN x top-k, no shared
    experts), h 4096, expert FFN 14336 (SwiGLU: x 3), top-2, 32 heads of 128 (q 4096), 8 KV groups
    (kv 1024), s 4096, 32 layers, vocabulary 32,000 (a multiple of 128: not padded). Per token:
    MLP 6 x 4096 x (14336 x 2 x 3) = 2,113,929,216; attention's projections 6 x (4096 x (4096 +
    2 x 1024) + 4096 x 4096) = 251,658,240; its two causal products 6 x 4096 x 4096 (q x s) =
    100,663,296; a layer 2,466,250,752, 32 of them 78,920,024,064; logits 6 x 4096 x 32000 =
    786,432,000; in all 79,706,456,064 per token, x 4096 tokens."""
    assert ms.megatron_flops(_config("mixtral-8x7b")) == 79_706_456_064 * 4096 == 326_477_644_038_144


def test_megatron_flops_of_deepseek_v3_mla_by_hand() -> None:
    """Megatron's MLA terms, h 7168, 128 heads, q rank 1536, kv rank 512, qk 128 + rope 64, v 128, s 4096:
    q 1536 x (7168 + 128 x 192 + 1) = 48,760,320; kv 512 x (7168 + 128 x 256 + 1) = 20,447,744; rope
    7168 x 64 = 458,752; output 128 x 128 x 7168 = 117,440,512; the two causal products 4096 x (128 x
    192 / 2 + 128 x 128 / 2) = 83,886,080: attention 6 x 270,993,408 = 1,625,960,448 per token and
    layer. MoE: 6 x 7168 x (2048 x 8 x 3 + 2048 x 3) (top-8 routed + one shared expert) =
    2,378,170,368. A layer 4,004,130,816, the 58 MoE layers 232,239,587,328 (the 3 dense layers are
    not the measured layer: not counted, as not timed); logits 6 x 7168 x 129,280 = 5,560,074,240; in
    all 237,799,661,568 per token, x 4096 tokens. EP divides nothing (each rank computes its own
    micro-batch's share of the routed tokens)."""
    expected = 237_799_661_568 * 4096
    assert ms.megatron_flops(_config("deepseek-v3")) == expected == 974_027_413_782_528
    assert ms.rank_flops(_config("deepseek-v3/ep64")) == expected


def test_the_rank_parameters_of_mixtral_8x7b_by_hand() -> None:
    """One layer: QKV 4096 x 6144 = 25,165,824, output 4096 x 4096 = 16,777,216, 8 experts x (4096 x
    28672 + 14336 x 4096) = 1,409,286,144, router 8 x 4096 = 32,768, two LayerNorms' weight and bias
    16,384: 1,451,278,336. The rank (EP 1): 32 layers, embedding and output layer 2 x 32000 x 4096,
    final LayerNorm's weight and bias 2 x 4096: 46,703,058,944 (Mixtral 8x7B's published 46.7B)."""
    config = _config("mixtral-8x7b")
    assert ms.layer_parameters(config) == 1_451_278_336
    assert ms.rank_parameters(config) == 32 * 1_451_278_336 + 2 * 32000 * 4096 + 2 * 4096 == 46_703_058_944
    # EP shards the experts, nothing else: EP 4 keeps 2 of the 8 experts on the rank
    ep4 = dataclasses.replace(config, expert_model_parallel_size=4)
    assert ms.layer_parameters(ep4) == 1_451_278_336 - 6 * 176_160_768


def test_the_rank_parameters_of_deepseek_v3_at_ep64_by_hand() -> None:
    """One rank's MoE layer at EP 64: Q down 7168 x 1536 = 11,010,048, Q up 1536 x 24576 = 37,748,736,
    KV down 7168 x 576 = 4,128,768, KV up 512 x 32768 = 16,777,216, output 16384 x 7168 = 117,440,512;
    256 / 64 = 4 local experts x (7168 x 4096 + 2048 x 7168) = 176,160,768; the shared expert 44,040,192;
    router 256 x 7168 = 1,835,008; norms 4 x 7168 + 2 x (512 + 1536) = 32,768: 409,174,016. The rank:
    58 such layers, embedding and output layer 2 x 129,280 x 7168, final LayerNorm 2 x 7168."""
    config = _config("deepseek-v3/ep64")
    assert ms.layer_parameters(config) == 409_174_016
    assert ms.rank_parameters(config) == 58 * 409_174_016 + 2 * 129_280 * 7168 + 2 * 7168 == 25_585_465_344


def test_moe_and_mla_have_a_model_step_unless_the_layer_step_cannot_build_the_layer() -> None:
    for model in ("mixtral-8x7b", "mixtral-8x22b", "deepseek-v3/ep64", "gpt-oss-120b"):
        assert ms.unsupported_reason(_config(model)) is None, model
    sp = dataclasses.replace(_config("deepseek-v3"), tensor_model_parallel_size=8, sequence_parallel=True)
    reason = ms.unsupported_reason(sp) or ""
    assert "layer step's layer" in reason and "all-gather" in reason
