"""The GEMMs of one transformer layer, derived from a :class:`~gemm_bench.config.ModelConfig`.

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

from gemm_bench.config import MAX_DIMENSION, ConfigError, ModelConfig

PASSES: tuple[str, ...] = ("fprop", "dgrad", "wgrad")
PASS_NAMES = {"fprop": "Fprop", "dgrad": "Dgrad", "wgrad": "Wgrad"}
OPS: tuple[str, ...] = ("qkv", "attn_out", "mlp_up", "mlp_down")
OP_NAMES = {
    "qkv": "QKV projection",
    "attn_out": "Attention output",
    "mlp_up": "MLP up",
    "mlp_down": "MLP down",
}

#: Printed with every MoE result: grouped-GEMM shapes assume each expert gets the same tokens.
BALANCED_ROUTING_NOTE = (
    "MoE expert GEMMs assume balanced routing: every expert receives "
    "tokens x top-k x EP / experts tokens (rounded up). Real routing is uneven; the router GEMM, "
    "shared experts and "
    "token dispatch/communication are not included."
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
    """The 12 GEMMs of one transformer layer on one tensor-parallel rank.

    Column-parallel ops (QKV, MLP up) split their output features N across TP ranks;
    row-parallel ops (attention output, MLP down) split their input features K. Sequence
    parallelism changes communication, not GEMM shapes (each GEMM still sees all tokens of the
    micro-batch after the all-gather), so it does not appear here.
    """
    config.validate()
    tp = config.tensor_model_parallel_size
    tokens = config.tokens
    d = config.head_dim
    qkv_out = (config.num_attention_heads + 2 * config.query_groups) * d
    attn_in = config.num_attention_heads * d
    up_factor = 2 if config.swiglu else 1
    gemms = linear_gemms("qkv", tokens, config.hidden_size, qkv_out // tp)
    gemms += linear_gemms("attn_out", tokens, attn_in // tp, config.hidden_size)
    if config.is_moe:
        experts = config.num_experts or 1
        routed = tokens * config.moe_router_topk * config.expert_model_parallel_size
        per_expert = -(-routed // experts)  # rounded up when routing cannot be exactly even
        ffn = config.expert_ffn_hidden_size
        groups = config.local_experts
        gemms += linear_gemms("mlp_up", per_expert, config.hidden_size, up_factor * ffn // tp, groups)
        gemms += linear_gemms("mlp_down", per_expert, ffn // tp, config.hidden_size, groups)
    else:
        ffn = config.ffn_hidden_size
        gemms += linear_gemms("mlp_up", tokens, config.hidden_size, up_factor * ffn // tp)
        gemms += linear_gemms("mlp_down", tokens, ffn // tp, config.hidden_size)
    return gemms


_SHAPE_RE = re.compile(r"^\s*(\d+)\s*[xX×]\s*(\d+)\s*[xX×]\s*(\d+)\s*$")


def parse_shape(text: str, *, field: str = "shape") -> GemmShape:
    """Parse ``MxKxN`` (manual mode) into a single Fprop GEMM labelled by its shape."""
    match = _SHAPE_RE.match(text)
    if not match:
        raise ConfigError(field, f"{text!r} is not of the form MxKxN (three positive integers)")
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
        if not text.isdecimal() or int(text) < 1:  # isdigit() admits '²', which int() refuses
            raise ConfigError(field, f"{text!r} is not a positive whole number")
        out.append(parse_shape(f"{text}x{text}x{text}", field=field))
    if not out:
        raise ConfigError(field, "needs at least one size")
    return list(dict.fromkeys(out))


def total_flops(gemms: Iterable[GemmShape]) -> int:
    return sum(g.flops for g in gemms)
