"""The GEMMs of one transformer layer, derived from a :class:`~gemm_bench.question.config.ModelConfig`.

Convention (as in Transformer Engine and Megatron-LM): a Linear with ``in_features=K`` and
``out_features=N`` applied to ``M`` tokens runs three GEMMs per training step::

    Fprop  M x K x N    Y  = X  W^T
    Dgrad  M x N x K    dX = dY W
    Wgrad  N x M x K    dW = dY^T X

Shapes print as ``MxKxN``. A grouped GEMM (MoE experts) has ``groups`` equal GEMMs of the
per-expert shape; its FLOPs count every group.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Iterable
from typing import Any

from gemm_bench.question.config import MAX_DIMENSION, ConfigError, ModelConfig

PASSES: tuple[str, ...] = ("fprop", "dgrad", "wgrad")
PASS_NAMES = {"fprop": "Fprop", "dgrad": "Dgrad", "wgrad": "Wgrad"}
#: Op ids in layer order. A model has either ``qkv`` or multi-latent attention's projections
#: (``q_proj`` or ``q_down`` + ``q_up``, then ``kv_down`` + ``kv_up``); ``shared_*`` only with MoE
#: shared experts.
OPS: tuple[str, ...] = ("qkv", "q_proj", "q_down", "q_up", "kv_down", "kv_up", "attn_out",
                        "mlp_up", "mlp_down", "shared_up", "shared_down")
#: Display names: at most 16 characters, the width the text reports give the op column.
OP_NAMES = {
    "qkv": "QKV projection",
    "q_proj": "MLA Q projection",
    "q_down": "MLA Q down",
    "q_up": "MLA Q up",
    "kv_down": "MLA KV down",
    "kv_up": "MLA KV up",
    "attn_out": "Attention output",
    "mlp_up": "MLP up",
    "mlp_down": "MLP down",
    "shared_up": "Shared MLP up",
    "shared_down": "Shared MLP down",
}

#: Printed with every MoE result: grouped-GEMM shapes assume each expert gets the same tokens.
BALANCED_ROUTING_NOTE = (
    "MoE expert GEMMs assume balanced routing: every expert receives "
    "tokens x top-k x EP / experts tokens (rounded up). Real routing is uneven; the router GEMM "
    "and token dispatch/communication are not included."
)


@dataclasses.dataclass(frozen=True, order=True)
class GemmShape:
    """One GEMM of the workload: ``groups`` x (``m`` x ``k``) @ (``k`` x ``n``)."""

    op: str
    pass_: str
    m: int
    k: int
    n: int
    groups: int = 1

    @property
    def flops(self) -> int:
        return 2 * self.m * self.k * self.n * self.groups

    @property
    def label(self) -> str:
        """``MxKxN``, prefixed with the group count for grouped GEMMs (``8 x 1024x4096x28672``)."""
        mkn = f"{self.m}x{self.k}x{self.n}"
        return f"{self.groups} x {mkn}" if self.groups > 1 else mkn

    @property
    def key(self) -> tuple[int, int, int, int]:
        """What the GPU actually computes: two GEMMs with the same key cost the same."""
        return (self.m, self.k, self.n, self.groups)

    def to_dict(self) -> dict[str, Any]:
        return {
            "op": self.op,
            "pass": self.pass_,
            "m": self.m,
            "k": self.k,
            "n": self.n,
            "groups": self.groups,
            "flops": self.flops,
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> GemmShape:
        return cls(data["op"], data["pass"], data["m"], data["k"], data["n"], data.get("groups", 1))


def linear_gemms(op: str, tokens: int, in_features: int, out_features: int, groups: int = 1) -> list[GemmShape]:
    """Fprop, Dgrad and Wgrad of one Linear (or a group of equal Linears)."""
    m, k, n = tokens, in_features, out_features
    return [
        GemmShape(op, "fprop", m, k, n, groups),
        GemmShape(op, "dgrad", m, n, k, groups),
        GemmShape(op, "wgrad", n, m, k, groups),
    ]


def layer_gemms(config: ModelConfig) -> list[GemmShape]:
    """The GEMMs of one transformer layer on one tensor-parallel rank (12 for a dense layer).

    Column-parallel ops (QKV, MLP up) split their output features N across TP ranks;
    row-parallel ops (attention output, MLP down) split their input features K. Sequence
    parallelism changes communication, not these shapes (each GEMM still sees all tokens of the
    micro-batch after the all-gather), so it does not appear here, except in MLA's down
    projections (see :func:`attention_gemms`).
    """
    config.validate()
    return attention_gemms(config) + mlp_gemms(config)


def attention_gemms(config: ModelConfig) -> list[GemmShape]:
    """QKV (or multi-latent attention's projections) and the attention output projection.

    MLA as Megatron-LM builds it (``MLASelfAttention`` with Transformer Engine): Q goes down to
    ``q_lora_rank`` and back up to heads x (qk + rope) dims (or straight up when there is no Q
    rank), KV goes down to ``kv_lora_rank`` + the rotary K dim and back up to heads x (qk + v)
    dims. The up projections are column-parallel like QKV; the down projections are duplicated
    on every TP rank (``parallel_mode="duplicated"``), so their N is not split, and with sequence
    parallelism each rank projects only its 1/TP of the tokens.
    """
    tp = config.tensor_model_parallel_size
    tokens = config.tokens
    h = config.hidden_size
    heads = config.num_attention_heads
    if not config.is_mla:
        d = config.head_dim
        qkv_out = (heads + 2 * config.query_groups) * d
        return (linear_gemms("qkv", tokens, h, qkv_out // tp)
                + linear_gemms("attn_out", tokens, heads * d // tp, h))
    qk, rope, v = config.qk_head_dim or 0, config.qk_pos_emb_head_dim or 0, config.v_head_dim or 0
    kv_rank = config.kv_lora_rank or 0
    down_tokens = tokens // tp if config.sequence_parallel_on else tokens
    if config.q_lora_rank is None:
        gemms = linear_gemms("q_proj", tokens, h, heads * (qk + rope) // tp)
    else:
        gemms = linear_gemms("q_down", down_tokens, h, config.q_lora_rank)
        gemms += linear_gemms("q_up", tokens, config.q_lora_rank, heads * (qk + rope) // tp)
    gemms += linear_gemms("kv_down", down_tokens, h, kv_rank + rope)
    gemms += linear_gemms("kv_up", tokens, kv_rank, heads * (qk + v) // tp)
    gemms += linear_gemms("attn_out", tokens, heads * v // tp, h)
    return gemms


def tokens_per_expert(config: ModelConfig) -> int:
    """Tokens each expert receives under balanced routing: tokens x top-k x EP / experts, rounded
    up when routing cannot be exactly even (:data:`BALANCED_ROUTING_NOTE`)."""
    routed = config.tokens * config.moe_router_topk * config.expert_model_parallel_size
    return -(-routed // (config.num_experts or 1))


def mlp_gemms(config: ModelConfig) -> list[GemmShape]:
    """MLP up and down: dense, or routed experts as grouped GEMMs plus shared experts.

    Routed experts are grouped GEMMs under balanced routing (:data:`BALANCED_ROUTING_NOTE`).
    Shared experts see every token, so they are dense GEMMs over all tokens, tensor-parallel like
    a dense MLP; their total width (shared experts x their FFN) is one Linear, as Megatron-LM's
    ``SharedExpertMLP`` builds it.
    """
    tp = config.tensor_model_parallel_size
    tokens = config.tokens
    h = config.hidden_size
    up_factor = 2 if config.swiglu else 1
    if not config.is_moe:
        ffn = config.ffn_hidden_size
        return linear_gemms("mlp_up", tokens, h, up_factor * ffn // tp) + linear_gemms("mlp_down", tokens, ffn // tp, h)
    per_expert = tokens_per_expert(config)
    ffn = config.expert_ffn_hidden_size
    groups = config.local_experts
    gemms = linear_gemms("mlp_up", per_expert, h, up_factor * ffn // tp, groups)
    gemms += linear_gemms("mlp_down", per_expert, ffn // tp, h, groups)
    if config.has_shared_experts:
        shared = config.moe_shared_expert_intermediate_size or 0
        gemms += linear_gemms("shared_up", tokens, h, up_factor * shared // tp)
        gemms += linear_gemms("shared_down", tokens, shared // tp, h)
    return gemms


_SHAPE_RE = re.compile(r"^\s*(\d+)\s*[xX×]\s*(\d+)\s*[xX×]\s*(\d+)\s*$")


def parse_shape(text: str, *, field: str = "shape") -> GemmShape:
    """Parse ``MxKxN`` (manual mode) into a single Fprop GEMM labelled by its shape."""
    match = _SHAPE_RE.match(text)
    if not match:
        raise ConfigError(field, f"{text!r} is not of the form MxKxN (three positive integers)")
    # Digits are counted before int() converts them: a 5000-digit number is a clear error, not
    # Python's conversion limit raised from deep inside a build.
    if any(len(v.lstrip("0")) > len(str(MAX_DIMENSION)) for v in match.groups()):
        raise ConfigError(field, f"{text[:40]!r}: every dimension must be between 1 and {MAX_DIMENSION}")
    m, k, n = (int(v) for v in match.groups())
    for v in (m, k, n):
        if not 1 <= v <= MAX_DIMENSION:
            raise ConfigError(field, f"{text!r}: every dimension must be between 1 and {MAX_DIMENSION}")
    return GemmShape(f"{m}x{k}x{n}", "fprop", m, k, n)


def manual_gemms(shapes: Iterable[str], *, field: str = "shape") -> list[GemmShape]:
    gemms = [parse_shape(s, field=field) for s in shapes]
    if not gemms:
        raise ConfigError(field, "needs at least one MxKxN shape")
    unique = list(dict.fromkeys(gemms))
    return unique


def square_sweep(sizes: Iterable[int | str], *, field: str = "sweep") -> list[GemmShape]:
    """Square GEMMs ``S x S x S``, one per size: for "speedup vs size" figures."""
    out = []
    for size in sizes:
        text = str(size).strip()
        if not text.isdecimal() or len(text.lstrip("0")) > len(str(MAX_DIMENSION)) or int(text) < 1:
            # isdigit() admits '²', which int() refuses; digits are counted before int() converts
            raise ConfigError(field, f"{text[:40]!r} is not a positive whole number up to {MAX_DIMENSION}")
        out.append(parse_shape(f"{text}x{text}x{text}", field=field))
    if not out:
        raise ConfigError(field, "needs at least one size")
    return list(dict.fromkeys(out))


def total_flops(gemms: Iterable[GemmShape]) -> int:
    return sum(g.flops for g in gemms)
