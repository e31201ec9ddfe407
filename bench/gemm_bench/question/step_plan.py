"""What a layer-step question asks, before any GPU: whether the step of a config can be built,
and with which routings a mixture of experts is timed (and how many tokens each local expert gets).

Pure, in the question layer, so the staleness rules (:mod:`gemm_bench.results.stack`) and the
measuring side (:mod:`gemm_bench.measure.step`, which re-exports these) agree on one definition.
"""

from __future__ import annotations

from gemm_bench.question.config import ConfigError, ModelConfig
from gemm_bench.question.shapes import tokens_per_expert

#: The routings a mixture-of-experts step is timed with (the GEMM tables assume ``balanced``); a
#: layer cell without ``routing`` is balanced.
ROUTINGS: tuple[str, ...] = ("balanced", "skewed")
ROUTING_NAMES = {
    "balanced": "balanced routing (every local expert receives the same tokens)",
    "skewed": ("skewed (Zipf) routing: the i-th busiest local expert receives a share of the routed "
               "tokens proportional to 1/i"),
}
#: Token counts per expert are rounded to this multiple (FP8 GEMMs need 16-aligned dimensions).
SPLIT_ALIGN = 16
MLA_SP_REASON = (
    "Multi-latent attention with sequence parallelism at TP > 1 projects each rank's 1/TP of the "
    "tokens down and all-gathers the latent; the one-GPU step does not emulate that all-gather."
)


def unsupported_reason(config: ModelConfig | None) -> str | None:
    """Why the layer step cannot be timed for this question, or None when it can."""
    if config is None:
        return "The layer step needs a model configuration; manual shapes and sweeps have no layer."
    if config.is_mla and config.sequence_parallel_on and config.tensor_model_parallel_size > 1:
        return MLA_SP_REASON
    return None


def routings(config: ModelConfig) -> tuple[str, ...]:
    """The routings a step of this config is timed with: both for a mixture of experts (with more
    than one local expert), else the one dense layer (``balanced`` standing for "no routing")."""
    return ROUTINGS if config.is_moe and config.local_experts > 1 else ROUTINGS[:1]


def routing_splits(config: ModelConfig, routing: str = "balanced") -> list[int]:
    """Tokens each local expert of one rank receives, in expert order.

    ``balanced``: the GEMM tables' count per expert (tokens x top-k x EP / experts, rounded up), for
    every local expert. ``skewed``: the same total, shared in proportion to 1/i (Zipf, i = 1 for
    the busiest expert), each count a multiple of :data:`SPLIT_ALIGN` and at least that, the
    rounding remainder given to the busiest expert.
    """
    if not config.is_moe:
        raise ConfigError("routing", "only a mixture of experts routes tokens")
    if routing not in ROUTINGS:
        raise ConfigError("routing", f"{routing!r} is not one of {', '.join(ROUTINGS)}")
    per_expert = tokens_per_expert(config)
    local = config.local_experts
    if routing == "balanced":
        return [per_expert] * local
    total = per_expert * local
    weights = [1.0 / (i + 1) for i in range(local)]
    scale = total / sum(weights)
    splits = [max(SPLIT_ALIGN, int(w * scale) // SPLIT_ALIGN * SPLIT_ALIGN) for w in weights]
    splits[0] += total - sum(splits)
    if splits[0] <= 0:
        raise ConfigError("routing", f"{total} routed tokens are too few to skew over {local} experts")
    return splits
