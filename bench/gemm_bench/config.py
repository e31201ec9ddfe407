"""Model configurations: the transformer-layer hyper-parameters that decide GEMM shapes.

Field names are Megatron-LM's argument names (``hidden_size`` is ``--hidden-size``), so the CLI,
the Sphinx directive and Megatron launch scripts all speak one vocabulary. Validation errors name
the field they concern; callers turn field names into their own spelling (``--hidden-size`` on
the command line, ``:hidden-size:`` in a directive) through :meth:`ConfigError.describe`.
"""

from __future__ import annotations

import dataclasses
import json
import re
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any


def cli_flag(field: str) -> str:
    """The command-line spelling of a config field (``hidden_size`` -> ``--hidden-size``)."""
    return "--" + field.replace("_", "-")


class ConfigError(ValueError):
    """An invalid configuration value.

    ``field`` is the config field at fault. ``rule`` may contain ``{field_name}`` placeholders
    for other fields it mentions, so that every surface names them in its own spelling.
    """

    def __init__(self, field: str, rule: str) -> None:
        self.field = field
        self.rule = rule
        super().__init__(self.describe(cli_flag))

    def describe(self, name: Callable[[str], str]) -> str:
        def spell(match: re.Match[str]) -> str:
            return name(match.group(1)) if match.group(1) in _REFERABLE else match.group(0)

        return f"{name(self.field)}: {_REFERENCE.sub(spell, self.rule)}"


#: ``{field_name}`` in a rule: a reference to another option, spelled by the caller. Only names
#: of options match, so user text quoted in a rule (``'{'``, ``'{abc}'``) is left as it is.
_REFERENCE = re.compile(r"\{([a-z][a-z_]*)\}")


@dataclasses.dataclass(frozen=True)
class ModelConfig:
    """One transformer layer's shape-deciding hyper-parameters plus the training micro-batch.

    ``num_query_groups`` defaults to ``num_attention_heads`` (no GQA), ``kv_channels`` (head
    dim) to ``hidden_size // num_attention_heads`` and ``moe_ffn_hidden_size`` to
    ``ffn_hidden_size``; :meth:`resolved` fills them in so that equal models compare equal.
    """

    hidden_size: int
    ffn_hidden_size: int
    num_attention_heads: int
    num_layers: int = 1
    micro_batch_size: int = 1
    seq_length: int = 4096
    num_query_groups: int | None = None
    kv_channels: int | None = None
    swiglu: bool = False
    tensor_model_parallel_size: int = 1
    sequence_parallel: bool = False
    num_experts: int | None = None
    moe_router_topk: int = 2
    moe_ffn_hidden_size: int | None = None
    expert_model_parallel_size: int = 1

    # ------------------------------------------------------------------ derived quantities
    @property
    def tokens(self) -> int:
        """Tokens one GEMM sees per micro-batch: micro-batch size x sequence length."""
        return self.micro_batch_size * self.seq_length

    @property
    def query_groups(self) -> int:
        return self.num_query_groups or self.num_attention_heads

    @property
    def head_dim(self) -> int:
        return self.kv_channels or self.hidden_size // self.num_attention_heads

    @property
    def is_moe(self) -> bool:
        return bool(self.num_experts) and (self.num_experts or 0) > 1

    @property
    def expert_ffn_hidden_size(self) -> int:
        return self.moe_ffn_hidden_size or self.ffn_hidden_size

    @property
    def local_experts(self) -> int:
        return (self.num_experts or 1) // self.expert_model_parallel_size

    def resolved(self) -> ModelConfig:
        """The same model with every defaulted field written out (validated first)."""
        self.validate()
        return dataclasses.replace(
            self,
            num_query_groups=self.query_groups,
            kv_channels=self.head_dim,
            num_experts=self.num_experts if self.is_moe else None,
            moe_router_topk=self.moe_router_topk if self.is_moe else 1,
            moe_ffn_hidden_size=self.expert_ffn_hidden_size if self.is_moe else None,
            expert_model_parallel_size=self.expert_model_parallel_size if self.is_moe else 1,
        )

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    # ------------------------------------------------------------------ validation
    def validate(self) -> None:
        """Raise :class:`ConfigError` naming the first field that breaks a rule."""
        for f in dataclasses.fields(self):
            value = getattr(self, f.name)
            if f.name in ("swiglu", "sequence_parallel"):
                if not isinstance(value, bool):
                    raise ConfigError(f.name, f"must be true or false, got {value!r}")
                continue
            if value is None:
                continue
            if isinstance(value, bool) or not isinstance(value, int):
                raise ConfigError(f.name, f"must be a whole number, got {value!r}")
            if value < 1:
                raise ConfigError(f.name, f"must be at least 1, got {value}")
            if value > MAX_DIMENSION:
                raise ConfigError(f.name, f"{value} is larger than the supported {MAX_DIMENSION}")
        h, heads, groups = self.hidden_size, self.num_attention_heads, self.query_groups
        if self.kv_channels is None and h % heads:
            raise ConfigError(
                "hidden_size",
                f"{h} is not divisible by {{num_attention_heads}} {heads} "
                "(give {kv_channels} to set the head dim explicitly)",
            )
        if heads % groups:
            raise ConfigError(
                "num_attention_heads",
                f"{heads} is not divisible by {{num_query_groups}} {groups}",
            )
        tp = self.tensor_model_parallel_size
        for field, value in (
            ("num_attention_heads", heads),
            ("num_query_groups", groups),
            ("ffn_hidden_size", self.ffn_hidden_size),
        ):
            if value % tp:
                raise ConfigError(
                    "tensor_model_parallel_size",
                    f"{tp} does not divide {{{field}}} {value}",
                )
        if self.num_experts is not None and self.num_experts > 1:
            e = self.num_experts
            if self.moe_router_topk > e:
                raise ConfigError(
                    "moe_router_topk", f"{self.moe_router_topk} is more than {{num_experts}} {e}"
                )
            if e % self.expert_model_parallel_size:
                raise ConfigError(
                    "expert_model_parallel_size",
                    f"{self.expert_model_parallel_size} does not divide {{num_experts}} {e}",
                )
            if self.expert_ffn_hidden_size % tp:
                raise ConfigError(
                    "tensor_model_parallel_size",
                    f"{tp} does not divide {{moe_ffn_hidden_size}} {self.expert_ffn_hidden_size}",
                )


#: The largest value any single dimension may take: big enough for any real model, small enough
#: that a typo (an extra zero or three) is caught before it allocates terabytes on a GPU.
MAX_DIMENSION = 1 << 20

#: One wording of each field for every surface (CLI --help, the directive's option table).
FIELD_HELP: dict[str, str] = {
    "hidden_size": "transformer hidden size (model width)",
    "swiglu": "gated MLP (SwiGLU): MLP up computes gate and up, 2 x FFN outputs",
    "sequence_parallel": "Megatron sequence parallelism; recorded, it does not change GEMM shapes",
    "ffn_hidden_size": "MLP hidden size (per expert for MoE unless --moe-ffn-hidden-size)",
    "num_attention_heads": "attention heads",
    "num_query_groups": "KV groups for GQA (default: one per head)",
    "kv_channels": "head dim (default: hidden size / heads)",
    "num_layers": "transformer layers (scales the model total)",
    "micro_batch_size": "sequences per micro-batch",
    "seq_length": "tokens per sequence",
    "tensor_model_parallel_size": "tensor-parallel size: shapes of one rank",
    "num_experts": "MoE experts (MLP GEMMs become grouped GEMMs)",
    "moe_router_topk": "experts each token is routed to",
    "moe_ffn_hidden_size": "expert MLP hidden size (default: --ffn-hidden-size)",
    "expert_model_parallel_size": "expert-parallel size",
}


CONFIG_FIELDS: tuple[str, ...] = tuple(f.name for f in dataclasses.fields(ModelConfig))
_REFERABLE = frozenset(CONFIG_FIELDS) | {"model", "hf_config", "shape", "sweep"}
BOOL_FIELDS = frozenset({"swiglu", "sequence_parallel"})
INT_FIELDS = tuple(f for f in CONFIG_FIELDS if f not in BOOL_FIELDS)


def config_from_mapping(values: Mapping[str, Any], *, base: ModelConfig | None = None) -> ModelConfig:
    """Build a validated config from field values, on top of ``base`` (a preset) if given.

    Unknown keys are an error naming the key; required fields missing without a base too.
    """
    unknown = sorted(set(values) - set(CONFIG_FIELDS))
    if unknown:
        raise ConfigError(unknown[0], "is not a model config option")
    if base is None:
        for required in ("hidden_size", "ffn_hidden_size", "num_attention_heads"):
            if values.get(required) is None:
                raise ConfigError(required, "is required (or name a {model} preset)")
        config = ModelConfig(**{k: v for k, v in values.items() if v is not None})
    else:
        config = dataclasses.replace(base, **{k: v for k, v in values.items() if v is not None})
    config.validate()
    return config


# ---------------------------------------------------------------------------------- presets
#: Public model configurations. Micro-batch and sequence length are training choices, not part
#: of a model: the presets pick common ones (overridable with the usual flags).
PRESETS: dict[str, ModelConfig] = {
    # Transformer Engine's "Getting started" example: the layer it benchmarks (GELU MLP).
    "te-guide-5b": ModelConfig(
        hidden_size=4096, ffn_hidden_size=16384, num_attention_heads=32, num_layers=24,
        micro_batch_size=31, seq_length=512,
    ),
    # Meta Llama 3 8B (config.json of meta-llama/Meta-Llama-3-8B).
    "llama3-8b": ModelConfig(
        hidden_size=4096, ffn_hidden_size=14336, num_attention_heads=32, num_query_groups=8,
        num_layers=32, micro_batch_size=1, seq_length=8192, swiglu=True,
    ),
    # Meta Llama 3 70B.
    "llama3-70b": ModelConfig(
        hidden_size=8192, ffn_hidden_size=28672, num_attention_heads=64, num_query_groups=8,
        num_layers=80, micro_batch_size=1, seq_length=8192, swiglu=True,
    ),
    # Mistral Mixtral 8x7B: 8 experts, top-2 routing, SwiGLU experts.
    "mixtral-8x7b": ModelConfig(
        hidden_size=4096, ffn_hidden_size=14336, num_attention_heads=32, num_query_groups=8,
        num_layers=32, micro_batch_size=1, seq_length=4096, swiglu=True, num_experts=8,
        moe_router_topk=2,
    ),
}

PRESET_DESCRIPTIONS: dict[str, str] = {
    "te-guide-5b": "Transformer Engine guide's example layer (hidden 4096, FFN 16384, 32 heads, "
    "24 layers, 31 x 512 tokens)",
    "llama3-8b": "Llama 3 8B: GQA (8 KV groups), SwiGLU, 32 layers, 1 x 8192 tokens",
    "llama3-70b": "Llama 3 70B: GQA (8 KV groups), SwiGLU, 80 layers, 1 x 8192 tokens",
    "mixtral-8x7b": "Mixtral 8x7B: 8 SwiGLU experts, top-2, GQA, 32 layers, 1 x 4096 tokens",
}


def preset(name: str) -> ModelConfig:
    try:
        return PRESETS[name.strip().lower()]
    except KeyError:
        raise ConfigError(
            "model", f"unknown preset {name!r}; known: {', '.join(sorted(PRESETS))}"
        ) from None


# --------------------------------------------------------------------------- Hugging Face
_GATED_ACTIVATIONS = {"silu", "swiglu", "swish", "geglu"}
#: Model families whose MLP is gated (gate_proj + up_proj) whatever the activation is called.
_GATED_FAMILIES = {"llama", "mistral", "mixtral", "qwen2", "qwen2_moe", "qwen3", "qwen3_moe", "gemma",
                   "gemma2", "gemma3_text", "phi3", "olmo2", "deepseek_v2", "deepseek_v3"}


def config_from_hf(path: str | Path, **training: Any) -> ModelConfig:
    """Read a Hugging Face ``config.json`` (``training`` adds micro-batch / sequence length / TP).

    Gated MLPs are recognised by ``hidden_act: silu`` (Llama, Mistral, Qwen) or a gated
    ``model_type`` (Gemma's GeGLU says ``gelu_pytorch_tanh``); MoE by
    ``num_local_experts`` (Mixtral) or ``num_experts`` (Qwen-MoE), with ``num_experts_per_tok``
    and ``moe_intermediate_size``.
    """
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError("hf_config", f"cannot read {str(path)!r}: {exc.strerror or exc}") from None
    try:
        raw = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ConfigError("hf_config", f"{str(path)!r} is not valid JSON (line {exc.lineno}: {exc.msg})") from None
    if not isinstance(raw, dict):
        raise ConfigError("hf_config", f"{str(path)!r} does not hold a JSON object")
    # Multimodal configs nest the language model.
    if "text_config" in raw and "hidden_size" not in raw:
        raw = raw["text_config"]
    missing = [k for k in ("hidden_size", "num_attention_heads", "num_hidden_layers") if k not in raw]
    if missing:
        raise ConfigError("hf_config", f"{str(path)!r} lacks {', '.join(missing)}")
    experts = raw.get("num_local_experts") or raw.get("num_experts")
    values: dict[str, Any] = {
        "hidden_size": raw["hidden_size"],
        "ffn_hidden_size": raw.get("intermediate_size") or raw.get("moe_intermediate_size"),
        "num_attention_heads": raw["num_attention_heads"],
        "num_query_groups": raw.get("num_key_value_heads"),
        "kv_channels": raw.get("head_dim"),
        "num_layers": raw["num_hidden_layers"],
        "swiglu": str(raw.get("hidden_act", raw.get("hidden_activation", ""))).lower() in _GATED_ACTIVATIONS
        or str(raw.get("model_type", "")).lower() in _GATED_FAMILIES,
    }
    if experts and experts > 1:
        values.update(
            num_experts=experts,
            moe_router_topk=raw.get("num_experts_per_tok", 2),
            moe_ffn_hidden_size=raw.get("moe_intermediate_size"),
        )
    values.update({k: v for k, v in training.items() if v is not None})
    return config_from_mapping(values)
