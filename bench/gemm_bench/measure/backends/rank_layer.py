"""One transformer layer as one rank runs it, for models ``te.TransformerLayer`` cannot stand for.

A dense model (tensor parallel or not) is a ``te.TransformerLayer`` with the rank's shard of
heads, KV groups and FFN (:func:`gemm_bench.measure.backends.layer_step.build_layer`). A mixture
of experts or multi-latent attention is built here from Transformer Engine's parts, so that its
GEMMs are exactly the rank's GEMMs of :func:`gemm_bench.question.shapes.layer_gemms`:

* attention: ``te.MultiheadAttention`` (LayerNorm and fused QKV in), or for multi-latent attention
  a LayerNorm, Q down (or a direct Q projection), KV down, LayerNorms on the latents, Q up, KV up,
  ``te.DotProductAttention`` with the config's Q/K and V head sizes, and the output projection;
* MLP: a LayerNorm, the router (a BF16 GEMM over every expert, softmax, top-k), the rank's local
  experts as two ``te.GroupedLinear`` with the activation between them, a gather of the routed
  tokens before and a weighted scatter-add after, and the shared experts as two ``te.Linear``.

Routing is a fixed assignment of tokens to local experts (:func:`gemm_bench.measure.step.routing_splits`),
so a CUDA graph can hold the step and every precision routes alike; the router's top-k scores
weight the experts' outputs, so the router's GEMM, softmax and backward all run. What this leaves
out is :func:`gemm_bench.measure.step.left_out`. Imports torch and Transformer Engine.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F
import transformer_engine.pytorch as te

from gemm_bench.measure.step import routing_splits
from gemm_bench.question.config import ModelConfig

_BF16 = torch.bfloat16


def _linear(k: int, n: int) -> Any:
    return te.Linear(k, n, bias=False, params_dtype=_BF16, device="cuda")


def _norm(width: int) -> Any:
    return te.LayerNorm(width, params_dtype=_BF16, device="cuda")


def _activate(h: torch.Tensor, swiglu: bool) -> torch.Tensor:
    if swiglu:
        gate, up = h.chunk(2, dim=-1)
        return F.silu(gate) * up
    return F.gelu(h, approximate="tanh")


class LatentAttention(torch.nn.Module):
    """Multi-latent attention of one rank (heads divided by TP), input ``[s, b, h]``."""

    def __init__(self, config: ModelConfig) -> None:
        super().__init__()
        tp = config.tensor_model_parallel_size
        h = config.hidden_size
        self.heads = config.num_attention_heads // tp
        self.qk = config.qk_head_dim or 0
        self.rope = config.qk_pos_emb_head_dim or 0
        self.v = config.v_head_dim or 0
        self.kv_rank = config.kv_lora_rank or 0
        self.norm = _norm(h)
        if config.q_lora_rank is None:
            self.q_down = None
            self.q_up = _linear(h, self.heads * (self.qk + self.rope))
        else:
            self.q_down = _linear(h, config.q_lora_rank)
            self.q_norm = _norm(config.q_lora_rank)
            self.q_up = _linear(config.q_lora_rank, self.heads * (self.qk + self.rope))
        self.kv_down = _linear(h, self.kv_rank + self.rope)
        self.kv_norm = _norm(self.kv_rank)
        self.kv_up = _linear(self.kv_rank, self.heads * (self.qk + self.v))
        self.core = te.DotProductAttention(self.heads, (self.qk + self.rope, self.v), attention_dropout=0.0,
                                           qkv_format="sbhd", attn_mask_type="causal")
        self.out = _linear(self.heads * self.v, h)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        s, b, _ = x.shape
        xn = self.norm(x)
        q = self.q_up(self.q_norm(self.q_down(xn))) if self.q_down is not None else self.q_up(xn)
        q = q.view(s, b, self.heads, self.qk + self.rope)
        latent, k_rope = self.kv_down(xn).split([self.kv_rank, self.rope], dim=-1)
        kv = self.kv_up(self.kv_norm(latent)).view(s, b, self.heads, self.qk + self.v)
        k_nope, v = kv.split([self.qk, self.v], dim=-1)
        k = torch.cat([k_nope, k_rope.unsqueeze(2).expand(s, b, self.heads, self.rope)], dim=-1)
        context = self.core(q.contiguous(), k.contiguous(), v.contiguous())
        return self.out(context.reshape(s, b, self.heads * self.v))


class Experts(torch.nn.Module):
    """The MLP of a mixture-of-experts layer on one rank, input ``[s, b, h]``."""

    def __init__(self, config: ModelConfig, routing: str) -> None:
        super().__init__()
        tp = config.tensor_model_parallel_size
        h = config.hidden_size
        up = 2 if config.swiglu else 1
        ffn = config.expert_ffn_hidden_size // tp
        self.swiglu = config.swiglu
        self.topk = config.moe_router_topk
        self.splits = routing_splits(config, routing)
        local = config.local_experts
        self.norm = _norm(h)
        router = torch.randn(config.num_experts or 1, h, device="cuda", dtype=_BF16) * h ** -0.5
        self.router = torch.nn.Parameter(router)
        self.fc1 = te.GroupedLinear(local, h, up * ffn, bias=False, params_dtype=_BF16, device="cuda")
        self.fc2 = te.GroupedLinear(local, ffn, h, bias=False, params_dtype=_BF16, device="cuda")
        shared = config.moe_shared_expert_intermediate_size if config.has_shared_experts else None
        self.shared_up = _linear(h, up * shared // tp) if shared else None
        self.shared_down = _linear(shared // tp, h) if shared else None
        tokens = config.tokens
        routed = sum(self.splits)
        # Row r of the experts' input is token r mod tokens, in its (r // tokens) mod top-k slot: every
        # token is sent top-k times (more when the rounding up of the splits adds rows).
        rows = torch.arange(routed, device="cuda")
        self.register_buffer("token_of_row", rows % tokens, persistent=False)
        self.register_buffer("slot_of_row", (rows // tokens) % self.topk, persistent=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        s, b, h = x.shape
        xn = self.norm(x).view(s * b, h)
        logits = F.linear(xn, self.router)  # the router stays in BF16 under every recipe, as in Megatron-LM
        scores, _ = torch.topk(torch.softmax(logits.float(), dim=-1), self.topk, dim=-1)
        weight = scores[self.token_of_row, self.slot_of_row].to(x.dtype).unsqueeze(-1)
        routed = xn.index_select(0, self.token_of_row)
        hidden = _activate(self.fc1(routed, self.splits), self.swiglu)
        out = torch.zeros_like(xn).index_add_(0, self.token_of_row, self.fc2(hidden, self.splits) * weight)
        if self.shared_up is not None and self.shared_down is not None:
            out = out + self.shared_down(_activate(self.shared_up(xn), self.swiglu))
        return out.view(s, b, h)


class RankLayer(torch.nn.Module):
    """Attention and MLP with their residuals: one rank's layer of a MoE or MLA model."""

    def __init__(self, config: ModelConfig, routing: str = "balanced") -> None:
        super().__init__()
        tp = config.tensor_model_parallel_size
        if config.is_mla:
            self.attention: torch.nn.Module = LatentAttention(config)
        else:
            self.attention = te.MultiheadAttention(
                config.hidden_size, config.num_attention_heads // tp, kv_channels=config.head_dim,
                num_gqa_groups=config.query_groups // tp, attention_dropout=0.0, attn_mask_type="causal",
                input_layernorm=True, fuse_qkv_params=True, bias=False, params_dtype=_BF16, device="cuda",
                qkv_format="sbhd")
        if config.is_moe:
            self.mlp: torch.nn.Module = Experts(config, routing)
        else:
            self.mlp = te.LayerNormMLP(config.hidden_size, config.ffn_hidden_size // tp, bias=False,
                                       activation="swiglu" if config.swiglu else "gelu",
                                       params_dtype=_BF16, device="cuda")

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attention(x)
        return x + self.mlp(x)
