"""A *question*: which GEMMs to measure, built from CLI flags or directive options.

Three spellings lead here: a model (a preset, a Hugging Face ``config.json`` or Megatron-style
fields, where fields override the preset), manual ``MxKxN`` shapes, or a square-size sweep. The
CLI and the Sphinx directive both call :func:`build_question`, so they accept exactly the same
inputs and reject them with the same messages.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from gemm_bench.config import ConfigError, ModelConfig, config_from_hf, config_from_mapping, preset
from gemm_bench.results import question_hash
from gemm_bench.shapes import BALANCED_ROUTING_NOTE, GemmShape, layer_gemms, manual_gemms, square_sweep


@dataclasses.dataclass(frozen=True)
class Question:
    kind: str  # "model" | "shapes" | "sweep"
    gemms: tuple[GemmShape, ...]
    num_layers: int
    config: ModelConfig | None

    @property
    def hash(self) -> str:
        return question_hash(self.gemms)

    @property
    def notes(self) -> list[str]:
        notes = []
        if self.config is not None and self.config.is_moe:
            notes.append(BALANCED_ROUTING_NOTE)
        if self.config is not None and self.config.tensor_model_parallel_size > 1:
            notes.append(
                f"Shapes of one rank at tensor-parallel size {self.config.tensor_model_parallel_size}; "
                "communication (all-gather / reduce-scatter) is not timed."
            )
        return notes

    def describe(self) -> str:
        if self.config is None:
            return f"{len(self.gemms)} {'square sizes' if self.kind == 'sweep' else 'manual shapes'}"
        c = self.config
        parts = [f"hidden {c.hidden_size}", f"FFN {c.ffn_hidden_size}", f"{c.num_attention_heads} heads"]
        if c.query_groups != c.num_attention_heads:
            parts.append(f"{c.query_groups} KV groups")
        if c.swiglu:
            parts.append("gated MLP")
        if c.is_moe:
            parts.append(f"{c.num_experts} experts top-{c.moe_router_topk}")
        if c.tensor_model_parallel_size > 1:
            parts.append(f"TP {c.tensor_model_parallel_size}")
        parts.append(f"{c.num_layers} layers")
        parts.append(f"{c.micro_batch_size} x {c.seq_length} tokens")
        return ", ".join(parts)


def build_question(
    *,
    model: str | None = None,
    hf_config: str | Path | None = None,
    shapes: Sequence[str] | None = None,
    sweep: Sequence[int | str] | None = None,
    fields: Mapping[str, Any] | None = None,
) -> Question:
    """Turn user input into a validated :class:`Question` (raises :class:`ConfigError`)."""
    fields = {k: v for k, v in (fields or {}).items() if v is not None}
    # A source given but empty is a mistake, never "no source": it would silently ask another question.
    if model is not None and not model.strip():
        raise ConfigError("model", "needs a preset name")
    if hf_config is not None and not str(hf_config).strip():
        raise ConfigError("hf_config", "needs a path")
    if shapes is not None and not any(s.strip() for s in shapes):
        raise ConfigError("shape", "needs at least one MxKxN shape")
    if sweep is not None and not any(str(s).strip() for s in sweep):
        raise ConfigError("sweep", "needs at least one size")
    sources = [name for name, value in (("model", model), ("hf_config", hf_config),
                                        ("shape", shapes), ("sweep", sweep)) if value]
    if len(sources) > 1:
        raise ConfigError(sources[1], f"cannot be combined with {{{sources[0]}}}")
    if shapes or sweep:
        if fields:
            field = sorted(fields)[0]
            raise ConfigError(field, f"is a model option; it cannot be combined with {{{sources[0]}}}")
        gemms = manual_gemms(shapes) if shapes else square_sweep(sweep or ())
        return Question("shapes" if shapes else "sweep", tuple(gemms), 1, None)
    if hf_config:
        training = {k: fields.pop(k) for k in list(fields)}
        config = config_from_hf(hf_config, **training)
    elif model:
        config = config_from_mapping(fields, base=preset(model))
    else:
        config = config_from_mapping(fields)
    config = config.resolved()
    return Question("model", tuple(layer_gemms(config)), config.num_layers, config)
