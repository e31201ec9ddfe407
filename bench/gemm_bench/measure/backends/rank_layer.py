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
out is :func:`gemm_bench.measure.step.left_out`.

A precision plan (:mod:`gemm_bench.report.precision_plan`) keeps some projections in BF16 under an
FP8 recipe: ``keep_bf16`` names them (op ids of :data:`gemm_bench.question.shapes.OPS`) and each
such module runs inside ``te.autocast(enabled=False)``, so its Fprop, Dgrad and Wgrad stay in BF16
(TE records the module's precision in the forward and its backward follows it). A dense layer
cannot be a ``te.TransformerLayer`` then (its MLP is one module), so ``parts=True`` builds it from
parts: ``te.LayerNormLinear`` (QKV), ``te.DotProductAttention``, ``te.Linear`` (output),
``te.LayerNormLinear`` (MLP up), the activation, ``te.Linear`` (MLP down).

The model's step (:mod:`gemm_bench.measure.backends.model_parts`) builds the same layer with
``fuse_wgrad=True`` (every TE module's ``fuse_wgrad_accumulation``: weight gradients added into an
FP32 ``main_grad``, as Megatron-LM trains) and calls it with ``is_first_microbatch`` (each TE module
caches its quantized weights on the first micro-batch and reuses them on the next). Imports torch and
Transformer Engine.
"""

from __future__ import annotations

import contextlib
from collections.abc import Collection
from typing import Any

import torch
import torch.nn.functional as F
import transformer_engine.pytorch as te

from gemm_bench.measure.step import routing_splits
from gemm_bench.question.config import ModelConfig

_BF16 = torch.bfloat16
#: Where the layer's tensors live (a CPU test with a fake Transformer Engine swaps it).
DEVICE = "cuda"


def _linear(k: int, n: int, fuse_wgrad: bool = False) -> Any:
    return te.Linear(k, n, bias=False, params_dtype=_BF16, device=DEVICE, fuse_wgrad_accumulation=fuse_wgrad)


def _norm(width: int) -> Any:
    return te.LayerNorm(width, params_dtype=_BF16, device=DEVICE)


def _precision(op: str, keep_bf16: Collection[str]) -> contextlib.AbstractContextManager[Any]:
    """Where the plan keeps ``op`` in BF16: outside the recipe (a nested ``te.autocast`` that disables it)."""
    return te.autocast(enabled=False) if op in keep_bf16 else contextlib.nullcontext()


def _activate(h: torch.Tensor, swiglu: bool) -> torch.Tensor:
    if swiglu:
        gate, up = h.chunk(2, dim=-1)
        return F.silu(gate) * up
    return F.gelu(h, approximate="tanh")


class LatentAttention(torch.nn.Module):
    """Multi-latent attention of one rank (heads divided by TP), input ``[s, b, h]``."""

    def __init__(self, config: ModelConfig, keep_bf16: Collection[str] = (), fuse_wgrad: bool = False) -> None:
        super().__init__()
        tp = config.tensor_model_parallel_size
        h = config.hidden_size
        self.keep = frozenset(keep_bf16)
        self.heads = config.num_attention_heads // tp
        self.qk = config.qk_head_dim or 0
        self.rope = config.qk_pos_emb_head_dim or 0
        self.v = config.v_head_dim or 0
        self.kv_rank = config.kv_lora_rank or 0
        self.norm = _norm(h)
        if config.q_lora_rank is None:
            self.q_down = None
            self.q_up = _linear(h, self.heads * (self.qk + self.rope), fuse_wgrad)
        else:
            self.q_down = _linear(h, config.q_lora_rank, fuse_wgrad)
            self.q_norm = _norm(config.q_lora_rank)
            self.q_up = _linear(config.q_lora_rank, self.heads * (self.qk + self.rope), fuse_wgrad)
        self.kv_down = _linear(h, self.kv_rank + self.rope, fuse_wgrad)
        self.kv_norm = _norm(self.kv_rank)
        self.kv_up = _linear(self.kv_rank, self.heads * (self.qk + self.v), fuse_wgrad)
        self.core = te.DotProductAttention(self.heads, (self.qk + self.rope, self.v), attention_dropout=0.0,
                                           qkv_format="sbhd", attn_mask_type="causal")
        self.out = _linear(self.heads * self.v, h, fuse_wgrad)

    def forward(self, x: torch.Tensor, is_first_microbatch: bool | None = None) -> torch.Tensor:
        s, b, _ = x.shape
        keep = self.keep
        first = is_first_microbatch
        xn = self.norm(x)
        if self.q_down is not None:
            with _precision("q_down", keep):
                q_latent = self.q_down(xn, is_first_microbatch=first)
            with _precision("q_up", keep):
                q = self.q_up(self.q_norm(q_latent), is_first_microbatch=first)
        else:
            with _precision("q_proj", keep):
                q = self.q_up(xn, is_first_microbatch=first)
        q = q.view(s, b, self.heads, self.qk + self.rope)
        with _precision("kv_down", keep):
            latent, k_rope = self.kv_down(xn, is_first_microbatch=first).split([self.kv_rank, self.rope], dim=-1)
        with _precision("kv_up", keep):
            kv = self.kv_up(self.kv_norm(latent), is_first_microbatch=first).view(s, b, self.heads,
                                                                                  self.qk + self.v)
        k_nope, v = kv.split([self.qk, self.v], dim=-1)
        k = torch.cat([k_nope, k_rope.unsqueeze(2).expand(s, b, self.heads, self.rope)], dim=-1)
        context = self.core(q.contiguous(), k.contiguous(), v.contiguous())
        with _precision("attn_out", keep):
            return self.out(context.reshape(s, b, self.heads * self.v), is_first_microbatch=first)


class PartsAttention(torch.nn.Module):
    """Dense attention of one rank from parts, so the plan can keep QKV or the output projection in
    BF16 apart: ``te.LayerNormLinear`` (LayerNorm and fused QKV), ``te.DotProductAttention`` (causal,
    GQA), ``te.Linear`` (output). Input ``[s, b, h]``."""

    def __init__(self, config: ModelConfig, keep_bf16: Collection[str] = (), fuse_wgrad: bool = False) -> None:
        super().__init__()
        tp = config.tensor_model_parallel_size
        h = config.hidden_size
        self.keep = frozenset(keep_bf16)
        self.heads = config.num_attention_heads // tp
        self.groups = config.query_groups // tp
        self.d = config.head_dim
        self.qkv = te.LayerNormLinear(h, (self.heads + 2 * self.groups) * self.d, bias=False, params_dtype=_BF16,
                                      device=DEVICE, fuse_wgrad_accumulation=fuse_wgrad)
        self.core = te.DotProductAttention(self.heads, self.d, num_gqa_groups=self.groups, attention_dropout=0.0,
                                           qkv_format="sbhd", attn_mask_type="causal")
        self.out = _linear(self.heads * self.d, h, fuse_wgrad)

    def forward(self, x: torch.Tensor, is_first_microbatch: bool | None = None) -> torch.Tensor:
        s, b, _ = x.shape
        with _precision("qkv", self.keep):
            qkv = self.qkv(x, is_first_microbatch=is_first_microbatch)
        q, k, v = qkv.split([self.heads * self.d, self.groups * self.d, self.groups * self.d], dim=-1)
        # contiguous: the layout TE's attention takes from any backend (it copies a split view itself otherwise)
        context = self.core(q.reshape(s, b, self.heads, self.d).contiguous(),
                            k.reshape(s, b, self.groups, self.d).contiguous(),
                            v.reshape(s, b, self.groups, self.d).contiguous())
        with _precision("attn_out", self.keep):
            return self.out(context.reshape(s, b, self.heads * self.d), is_first_microbatch=is_first_microbatch)


class PartsMLP(torch.nn.Module):
    """A dense MLP of one rank from parts, so the plan can keep MLP up or down in BF16 apart:
    ``te.LayerNormLinear`` (LayerNorm and MLP up), the activation (SwiGLU or GELU, in torch),
    ``te.Linear`` (MLP down). Input ``[s, b, h]``."""

    def __init__(self, config: ModelConfig, keep_bf16: Collection[str] = (), fuse_wgrad: bool = False) -> None:
        super().__init__()
        tp = config.tensor_model_parallel_size
        ffn = config.ffn_hidden_size // tp
        self.keep = frozenset(keep_bf16)
        self.swiglu = config.swiglu
        self.up = te.LayerNormLinear(config.hidden_size, (2 if config.swiglu else 1) * ffn, bias=False,
                                     params_dtype=_BF16, device=DEVICE, fuse_wgrad_accumulation=fuse_wgrad)
        self.down = _linear(ffn, config.hidden_size, fuse_wgrad)

    def forward(self, x: torch.Tensor, is_first_microbatch: bool | None = None) -> torch.Tensor:
        with _precision("mlp_up", self.keep):
            h = self.up(x, is_first_microbatch=is_first_microbatch)
        h = _activate(h, self.swiglu)
        with _precision("mlp_down", self.keep):
            return self.down(h, is_first_microbatch=is_first_microbatch)


class Experts(torch.nn.Module):
    """The MLP of a mixture-of-experts layer on one rank, input ``[s, b, h]``."""

    #: Buffers (``register_buffer``): each routed row's token and top-k slot.
    token_of_row: torch.Tensor
    slot_of_row: torch.Tensor

    def __init__(self, config: ModelConfig, routing: str, keep_bf16: Collection[str] = (),
                 fuse_wgrad: bool = False) -> None:
        super().__init__()
        tp = config.tensor_model_parallel_size
        h = config.hidden_size
        up = 2 if config.swiglu else 1
        self.keep = frozenset(keep_bf16)
        ffn = config.expert_ffn_hidden_size // tp
        self.swiglu = config.swiglu
        self.topk = config.moe_router_topk
        self.splits = routing_splits(config, routing)
        local = config.local_experts
        self.norm = _norm(h)
        router = torch.randn(config.num_experts or 1, h, device=DEVICE, dtype=_BF16) * h ** -0.5
        self.router = torch.nn.Parameter(router)
        self.fc1 = te.GroupedLinear(local, h, up * ffn, bias=False, params_dtype=_BF16, device=DEVICE,
                                    fuse_wgrad_accumulation=fuse_wgrad)
        self.fc2 = te.GroupedLinear(local, ffn, h, bias=False, params_dtype=_BF16, device=DEVICE,
                                    fuse_wgrad_accumulation=fuse_wgrad)
        shared = config.moe_shared_expert_intermediate_size if config.has_shared_experts else None
        self.shared_up = _linear(h, up * shared // tp, fuse_wgrad) if shared else None
        self.shared_down = _linear(shared // tp, h, fuse_wgrad) if shared else None
        tokens = config.tokens
        routed = sum(self.splits)
        # Row r of the experts' input is token r mod tokens, in its (r // tokens) mod top-k slot: every
        # token is sent top-k times (more when the rounding up of the splits adds rows).
        rows = torch.arange(routed, device=DEVICE)
        self.register_buffer("token_of_row", rows % tokens, persistent=False)
        self.register_buffer("slot_of_row", (rows // tokens) % self.topk, persistent=False)

    def forward(self, x: torch.Tensor, is_first_microbatch: bool | None = None) -> torch.Tensor:
        s, b, h = x.shape
        first = is_first_microbatch
        xn = self.norm(x).view(s * b, h)
        logits = F.linear(xn, self.router)  # the router stays in BF16 under every recipe, as in Megatron-LM
        scores, _ = torch.topk(torch.softmax(logits.float(), dim=-1), self.topk, dim=-1)
        weight = scores[self.token_of_row, self.slot_of_row].to(x.dtype).unsqueeze(-1)
        routed = xn.index_select(0, self.token_of_row)
        with _precision("mlp_up", self.keep):
            up = self.fc1(routed, self.splits, is_first_microbatch=first)
        hidden = _activate(up, self.swiglu)
        with _precision("mlp_down", self.keep):
            down = self.fc2(hidden, self.splits, is_first_microbatch=first)
        out = torch.zeros_like(xn).index_add_(0, self.token_of_row, down * weight)
        if self.shared_up is not None and self.shared_down is not None:
            with _precision("shared_up", self.keep):
                shared = self.shared_up(xn, is_first_microbatch=first)
            with _precision("shared_down", self.keep):
                shared = self.shared_down(_activate(shared, self.swiglu), is_first_microbatch=first)
            out = out + shared
        return out.view(s, b, h)


class RankLayer(torch.nn.Module):
    """Attention and MLP with their residuals: one rank's layer of a MoE or MLA model."""

    def __init__(self, config: ModelConfig, routing: str = "balanced", *, keep_bf16: Collection[str] = (),
                 parts: bool = False, fuse_wgrad: bool = False) -> None:
        """``keep_bf16``: the projections (op ids) that run outside the recipe; ``parts``: build dense
        attention and MLP from parts (:class:`PartsAttention`, :class:`PartsMLP`), which a plan that
        splits them needs; ``fuse_wgrad``: every TE module's ``fuse_wgrad_accumulation`` (the model
        step's FP32 main gradients)."""
        super().__init__()
        tp = config.tensor_model_parallel_size
        fuse = fuse_wgrad
        if config.is_mla:
            self.attention: torch.nn.Module = LatentAttention(config, keep_bf16, fuse)
        elif parts:
            self.attention = PartsAttention(config, keep_bf16, fuse)
        else:
            self.attention = te.MultiheadAttention(
                config.hidden_size, config.num_attention_heads // tp, kv_channels=config.head_dim,
                num_gqa_groups=config.query_groups // tp, attention_dropout=0.0, attn_mask_type="causal",
                input_layernorm=True, fuse_qkv_params=True, bias=False, params_dtype=_BF16, device=DEVICE,
                qkv_format="sbhd", fuse_wgrad_accumulation=fuse)
        if config.is_moe:
            self.mlp: torch.nn.Module = Experts(config, routing, keep_bf16, fuse)
        elif parts:
            self.mlp = PartsMLP(config, keep_bf16, fuse)
        else:
            self.mlp = te.LayerNormMLP(config.hidden_size, config.ffn_hidden_size // tp, bias=False,
                                       activation="swiglu" if config.swiglu else "gelu",
                                       params_dtype=_BF16, device=DEVICE, fuse_wgrad_accumulation=fuse)

    def forward(self, x: torch.Tensor, is_first_microbatch: bool | None = None) -> torch.Tensor:
        """``is_first_microbatch``: Transformer Engine's, passed to every module that holds weights
        (None, the default, quantizes every call and caches nothing)."""
        x = x + self.attention(x, is_first_microbatch=is_first_microbatch)
        return x + self.mlp(x, is_first_microbatch=is_first_microbatch)
