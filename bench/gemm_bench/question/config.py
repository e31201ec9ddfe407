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
import shlex
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, Literal


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

    ``num_microbatches`` is G, the micro-batches of one optimizer step on one rank (gradient
    accumulation). It defaults to 8 because the step a reader plans is neither extreme: at G = 1
    (torchtitan's default, no accumulation) the optimizer and the weights' quantization weigh on
    every micro-batch, while the published pretraining recipes of Megatron-LM / NeMo run global
    batches of hundreds of sequences at micro-batch 1-2 over a few dozen data-parallel ranks, so
    G of 8 or more per rank. At G = 8 both once-per-step costs are already amortized to an eighth;
    the page shows G = 1 beside, so the reader sees the whole range.
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
    #: None: on exactly when TP > 1, as Megatron-LM's recipes run tensor parallelism (issue 41);
    #: :meth:`resolved` writes the value out. A Megatron launch line without ``--sequence-parallel``
    #: says False, as Megatron runs it.
    sequence_parallel: bool | None = None
    num_experts: int | None = None
    moe_router_topk: int = 2
    moe_ffn_hidden_size: int | None = None
    expert_model_parallel_size: int = 1
    # Appended, all defaulting to "absent", so that every earlier question keeps its GEMMs.
    moe_shared_expert_intermediate_size: int | None = None
    moe_dense_layers: int | None = None
    q_lora_rank: int | None = None
    kv_lora_rank: int | None = None
    qk_head_dim: int | None = None
    qk_pos_emb_head_dim: int | None = None
    v_head_dim: int | None = None
    # The model's step (issue 32), appended after every GEMM field and left out of the
    # question's hash (:data:`gemm_bench.question.question.UNKEYED_CONFIG_FIELDS`): no layer GEMM or
    # layer step depends on them, so every committed result keeps its name. The output layer's
    # measurement records the padded vocabulary it was measured at instead.
    vocab_size: int | None = None
    make_vocab_size_divisible_by: int = 128
    num_microbatches: int = 8
    # Sliding-window attention (session 20), also out of the hash: the layer step times full causal
    # attention whatever the window (measure/step.py), so no stored quantity depends on it. The
    # composition bounds what the window saves from the profiled step's attention kernels
    # (:meth:`windowed_share`, :func:`gemm_bench.question.model_step.without_windowed_attention`).
    window_size: int | None = None
    window_attn_skip_freq: int | None = None
    #: Learned attention sinks (Megatron-LM's ``--softmax-type learnable``, gpt-oss): not timed either, the
    #: layer step's attention is ordinary softmax; out of the hash with the window, and said on the page.
    attention_sinks: bool = False

    # ------------------------------------------------------------------ derived quantities
    @property
    def sequence_parallel_on(self) -> bool:
        """Sequence parallel as the run has it: the field when given, else on exactly when TP > 1."""
        if self.sequence_parallel is None:
            return self.tensor_model_parallel_size > 1
        return self.sequence_parallel

    @property
    def tokens(self) -> int:
        """Tokens one GEMM sees per micro-batch: micro-batch size x sequence length."""
        return self.micro_batch_size * self.seq_length

    @property
    def padded_vocab_size(self) -> int | None:
        """The output layer's width as Megatron-LM builds it (``_vocab_size_with_padding``): the
        vocabulary rounded up to a multiple of ``make_vocab_size_divisible_by`` x TP, so every
        tensor-parallel rank holds an equal, aligned shard. None when the vocabulary is unknown."""
        if self.vocab_size is None:
            return None
        multiple = self.make_vocab_size_divisible_by * self.tensor_model_parallel_size
        return -(-self.vocab_size // multiple) * multiple

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

    @property
    def is_mla(self) -> bool:
        """Multi-latent attention (DeepSeek): its projections replace the one QKV projection."""
        return self.kv_lora_rank is not None

    @property
    def has_shared_experts(self) -> bool:
        return self.is_moe and bool(self.moe_shared_expert_intermediate_size)

    @property
    def dense_layers(self) -> int:
        """Leading dense layers of an MoE model: they differ from the layer whose GEMMs are derived."""
        return (self.moe_dense_layers or 0) if self.is_moe else 0

    @property
    def measured_layers(self) -> int:
        """How many layers the derived layer stands for: model totals multiply by this, not by all layers."""
        return self.num_layers - self.dense_layers

    @property
    def windowed_layers(self) -> int:
        """Layers whose attention sees a window of ``window_size`` tokens back, as Megatron-LM's
        ``is_layer_window_attention`` places them: every layer but each ``window_attn_skip_freq``-th
        (1-based), every layer without a frequency, none without a window. A rule, not a count, so a
        page that shortens a preset's ``num_layers`` keeps its pattern."""
        return self.windowed_among(1, self.num_layers)

    def windowed_among(self, first: int, count: int) -> int:
        """How many of the ``count`` consecutive layers from layer ``first`` (1-based) are windowed
        (:attr:`windowed_layers`' rule): a stage or the measured layers hold a share of their own."""
        if self.window_size is None or count < 1:
            return 0
        freq = self.window_attn_skip_freq
        last = first + count - 1
        return count if freq is None else count - (last // freq - (first - 1) // freq)

    @property
    def windowed_share(self) -> float:
        """The share of the measured layers (the model's, less an MoE's leading dense layers, which the model
        totals do not count) whose window shortens their attention at this sequence length (0 where the
        window reaches back over the whole sequence: it masks nothing causal attention does not). Each
        measured layer stands for this share windowed, the rest full: a layer step timed with causal
        attention overstates that share's attention."""
        if self.window_size is None or self.window_size >= self.seq_length - 1:
            return 0.0
        return self.windowed_among(self.dense_layers + 1, self.measured_layers) / self.measured_layers

    def window_words(self) -> str:
        """"18 of the 36 layers attend over a 128-token sliding window" ("" without a window)."""
        if self.window_size is None:
            return ""
        n = self.windowed_layers
        which = "every layer attends" if n == self.num_layers else f"{n} of the {self.num_layers} layers attend"
        return f"{which} over a {self.window_size:,}-token sliding window"

    def resolved(self) -> ModelConfig:
        """The same model with every defaulted field written out (validated first)."""
        self.validate()
        return dataclasses.replace(
            self,
            # MLA has no KV groups and no single head dim: its own fields say what they are.
            num_query_groups=None if self.is_mla else self.query_groups,
            kv_channels=None if self.is_mla else self.head_dim,
            num_experts=self.num_experts if self.is_moe else None,
            moe_router_topk=self.moe_router_topk if self.is_moe else 1,
            moe_ffn_hidden_size=self.expert_ffn_hidden_size if self.is_moe else None,
            expert_model_parallel_size=self.expert_model_parallel_size if self.is_moe else 1,
            moe_shared_expert_intermediate_size=self.moe_shared_expert_intermediate_size if self.is_moe else None,
            moe_dense_layers=self.moe_dense_layers if self.is_moe else None,
            sequence_parallel=self.sequence_parallel_on,
        )

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    # ------------------------------------------------------------------ validation
    def validate(self) -> None:
        """Raise :class:`ConfigError` naming the first field that breaks a rule."""
        for f in dataclasses.fields(self):
            value = getattr(self, f.name)
            if f.name in ("swiglu", "sequence_parallel", "attention_sinks"):
                if not isinstance(value, bool) and not (value is None and f.name == "sequence_parallel"):
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
        self._validate_mla()
        if self.window_attn_skip_freq is not None and self.window_size is None:
            raise ConfigError("window_attn_skip_freq", "needs {window_size} (the window the other layers attend over)")
        if self.kv_channels is None and not self.is_mla and h % heads:
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
            shared = self.moe_shared_expert_intermediate_size
            if shared is not None and shared % tp:
                raise ConfigError(
                    "tensor_model_parallel_size",
                    f"{tp} does not divide {{moe_shared_expert_intermediate_size}} {shared}",
                )
            dense = self.moe_dense_layers
            if dense is not None and dense >= self.num_layers:
                raise ConfigError(
                    "moe_dense_layers",
                    f"{dense} leading dense layers leave no MoE layer of {{num_layers}} {self.num_layers}",
                )

    def _validate_mla(self) -> None:
        """MLA's dims come together or not at all; the fields of ordinary attention do not apply."""
        mla_dims = ("qk_head_dim", "qk_pos_emb_head_dim", "v_head_dim")
        if not self.is_mla:
            for field in ("q_lora_rank", *mla_dims):
                if getattr(self, field) is not None:
                    raise ConfigError(field, "applies to multi-latent attention only: give {kv_lora_rank} too")
            return
        for field in mla_dims:
            if getattr(self, field) is None:
                raise ConfigError(field, "is required with {kv_lora_rank} (multi-latent attention)")
        if self.kv_channels is not None:
            raise ConfigError(
                "kv_channels",
                "does not apply to multi-latent attention: its head dims are "
                "{qk_head_dim} + {qk_pos_emb_head_dim} (Q, K) and {v_head_dim} (V)",
            )
        if self.num_query_groups is not None and self.num_query_groups != self.num_attention_heads:
            raise ConfigError(
                "num_query_groups",
                f"{self.num_query_groups}: multi-latent attention has one K and V per head "
                f"({{num_attention_heads}} {self.num_attention_heads}), no KV groups",
            )
        tp = self.tensor_model_parallel_size
        if self.sequence_parallel_on and tp > 1 and self.tokens % tp:
            raise ConfigError(
                "sequence_parallel",
                f"needs the {self.tokens} tokens of a micro-batch to divide by "
                f"{{tensor_model_parallel_size}} {tp} (each rank projects its share down)",
            )


#: The largest value any single dimension may take: big enough for any real model, small enough
#: that a typo (an extra zero or three) is caught before it allocates terabytes on a GPU.
MAX_DIMENSION = 1 << 20

#: One wording of each field for every surface (CLI --help, the directive's option table).
FIELD_HELP: dict[str, str] = {
    "hidden_size": "transformer hidden size (model width)",
    "swiglu": "gated MLP (SwiGLU): MLP up computes gate and up, 2 x FFN outputs",
    "sequence_parallel": "Megatron sequence parallelism (default: on when the tensor-parallel size is above 1, as "
    "Megatron-LM's recipes run it; false turns it off); it changes no GEMM shape except multi-latent attention's "
    "down projections at TP > 1 (each rank projects only its 1/TP of the tokens), and divides the activations "
    "outside the tensor-parallel regions by TP in memory per GPU",
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
    "moe_shared_expert_intermediate_size": "MoE shared experts' total MLP hidden size (shared experts x their "
    "FFN): dense GEMMs over all tokens beside the routed experts (default: none)",
    "moe_dense_layers": "leading dense layers of an MoE model (DeepSeek's first_k_dense_replace): not among the "
    "layer's GEMMs, and model totals count only the other layers",
    "q_lora_rank": "multi-latent attention: Q compression rank (default: Q projected directly, no compression)",
    "kv_lora_rank": "multi-latent attention: KV compression rank; setting it replaces the QKV projection by "
    "MLA's down and up projections",
    "qk_head_dim": "multi-latent attention: Q/K head dim without the rotary part (DeepSeek's qk_nope_head_dim)",
    "qk_pos_emb_head_dim": "multi-latent attention: Q/K rotary head dim (DeepSeek's qk_rope_head_dim)",
    "v_head_dim": "multi-latent attention: V head dim",
    "vocab_size": "vocabulary size: sizes the embedding and the output layer of the model's step (padded as "
    "Megatron-LM pads it, to a multiple of --make-vocab-size-divisible-by x TP); no layer GEMM depends on it",
    "make_vocab_size_divisible_by": "Megatron-LM's vocabulary padding: the output layer is rounded up to a "
    "multiple of this x TP (default 128)",
    "window_size": "sliding-window attention: tokens each query attends back over (Megatron-LM's --window-size "
    "left value); timed as full causal attention, and the page bounds what the window saves (default: none)",
    "window_attn_skip_freq": "sliding-window attention: every N-th layer (1-based) attends over the whole "
    "sequence, the others over the window, as Megatron-LM's flag (default: every layer windowed; gpt-oss and "
    "Gemma 2 alternate: 2)",
    "attention_sinks": "attention sinks (Megatron-LM's --softmax-type learnable or off-by-one; gpt-oss): not "
    "timed, the layer step's attention is ordinary softmax, and the page says so (default: false)",
    "num_microbatches": "G, micro-batches per optimizer step (gradient accumulation; Megatron-LM's global batch / "
    "(micro-batch x data-parallel size)): weights are quantized and the optimizer runs once per G micro-batches "
    "(default 8)",
}


CONFIG_FIELDS: tuple[str, ...] = tuple(f.name for f in dataclasses.fields(ModelConfig))
_REFERABLE = frozenset(CONFIG_FIELDS) | {"model", "hf_config", "shape", "sweep", "megatron_args"}
BOOL_FIELDS = frozenset({"swiglu", "sequence_parallel", "attention_sinks"})
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
#: of a model: the presets pick common ones (overridable with the usual flags). Every model's
#: numbers are those of the config.json named in :data:`PRESET_SOURCES`; tests/data/hf holds a
#: copy of each and a test loads it into the same GEMMs.
PRESETS: dict[str, ModelConfig] = {
    # Transformer Engine's "Getting started" example: the layer it benchmarks (GELU MLP).
    "te-guide-5b": ModelConfig(
        hidden_size=4096, ffn_hidden_size=16384, num_attention_heads=32, num_layers=24,
        micro_batch_size=31, seq_length=512,
    ),
    "llama3-8b": ModelConfig(
        hidden_size=4096, ffn_hidden_size=14336, num_attention_heads=32, num_query_groups=8,
        num_layers=32, micro_batch_size=1, seq_length=8192, swiglu=True,
        vocab_size=128256,
    ),
    "llama3-70b": ModelConfig(
        hidden_size=8192, ffn_hidden_size=28672, num_attention_heads=64, num_query_groups=8,
        num_layers=80, micro_batch_size=1, seq_length=8192, swiglu=True,
        vocab_size=128256,
    ),
    "llama3.1-405b": ModelConfig(
        hidden_size=16384, ffn_hidden_size=53248, num_attention_heads=128, num_query_groups=8,
        num_layers=126, micro_batch_size=1, seq_length=8192, swiglu=True,
        vocab_size=128256,
    ),
    # Mixtral: 8 SwiGLU experts, top-2 routing.
    "mixtral-8x7b": ModelConfig(
        hidden_size=4096, ffn_hidden_size=14336, num_attention_heads=32, num_query_groups=8,
        num_layers=32, micro_batch_size=1, seq_length=4096, swiglu=True, num_experts=8,
        moe_router_topk=2,
        vocab_size=32000,
    ),
    "mixtral-8x22b": ModelConfig(
        hidden_size=6144, ffn_hidden_size=16384, num_attention_heads=48, num_query_groups=8,
        num_layers=56, micro_batch_size=1, seq_length=4096, swiglu=True, num_experts=8,
        moe_router_topk=2,
        vocab_size=32768,
    ),
    "qwen2.5-7b": ModelConfig(
        hidden_size=3584, ffn_hidden_size=18944, num_attention_heads=28, num_query_groups=4,
        num_layers=28, micro_batch_size=1, seq_length=4096, swiglu=True,
        vocab_size=152064,
    ),
    "qwen2.5-72b": ModelConfig(
        hidden_size=8192, ffn_hidden_size=29568, num_attention_heads=64, num_query_groups=8,
        num_layers=80, micro_batch_size=1, seq_length=4096, swiglu=True,
        vocab_size=152064,
    ),
    # DeepSeek-V3: MLA, 256 routed SwiGLU experts (top-8) plus one shared expert; the first 3 of
    # its 61 layers are dense (FFN 18432), the other 58 are the MoE layer derived here.
    "deepseek-v3": ModelConfig(
        hidden_size=7168, ffn_hidden_size=18432, num_attention_heads=128, num_layers=61,
        micro_batch_size=1, seq_length=4096, swiglu=True, num_experts=256, moe_router_topk=8,
        moe_ffn_hidden_size=2048, moe_shared_expert_intermediate_size=2048, moe_dense_layers=3,
        q_lora_rank=1536, kv_lora_rank=512, qk_head_dim=128, qk_pos_emb_head_dim=64, v_head_dim=128,
        vocab_size=129280,
    ),
    # gpt-oss-120b: 128 SwiGLU experts (top-4) of FFN 2880; 64 query heads of dim 64 (4096 wide,
    # wider than the 2880 hidden size), 8 KV heads; every other layer (18 of 36) attends over a
    # 128-token window (layer_types).
    "gpt-oss-120b": ModelConfig(
        hidden_size=2880, ffn_hidden_size=2880, num_attention_heads=64, num_query_groups=8,
        kv_channels=64, num_layers=36, micro_batch_size=1, seq_length=4096, swiglu=True,
        num_experts=128, moe_router_topk=4,
        vocab_size=201088, window_size=128, window_attn_skip_freq=2, attention_sinks=True,
    ),
    # Gemma 2 27B: GeGLU (gated), 32 heads of dim 128 (4096, not the 4608 hidden size), 16 KV heads;
    # every other layer (23 of 46, the first included) attends over a 4096-token window.
    "gemma2-27b": ModelConfig(
        hidden_size=4608, ffn_hidden_size=36864, num_attention_heads=32, num_query_groups=16,
        kv_channels=128, num_layers=46, micro_batch_size=1, seq_length=8192, swiglu=True,
        vocab_size=256000, window_size=4096, window_attn_skip_freq=2,
    ),
}

#: Where each preset's numbers come from: the model's Hugging Face config.json.
PRESET_SOURCES: dict[str, str] = {
    "te-guide-5b": "Transformer Engine documentation, 'Getting started' (docs/examples/quickstart.ipynb)",
    "llama3-8b": "https://huggingface.co/meta-llama/Meta-Llama-3-8B/blob/main/config.json",
    "llama3-70b": "https://huggingface.co/meta-llama/Meta-Llama-3-70B/blob/main/config.json",
    "llama3.1-405b": "https://huggingface.co/meta-llama/Llama-3.1-405B/blob/main/config.json",
    "mixtral-8x7b": "https://huggingface.co/mistralai/Mixtral-8x7B-v0.1/blob/main/config.json",
    "mixtral-8x22b": "https://huggingface.co/mistralai/Mixtral-8x22B-v0.1/blob/main/config.json",
    "qwen2.5-7b": "https://huggingface.co/Qwen/Qwen2.5-7B/blob/main/config.json",
    "qwen2.5-72b": "https://huggingface.co/Qwen/Qwen2.5-72B/blob/main/config.json",
    "deepseek-v3": "https://huggingface.co/deepseek-ai/DeepSeek-V3/blob/main/config.json",
    "gpt-oss-120b": "https://huggingface.co/openai/gpt-oss-120b/blob/main/config.json",
    "gemma2-27b": "https://huggingface.co/google/gemma-2-27b/blob/main/config.json",
}

PRESET_DESCRIPTIONS: dict[str, str] = {
    "te-guide-5b": "Transformer Engine guide's example layer (hidden 4096, FFN 16384, 32 heads, "
    "24 layers, 31 x 512 tokens)",
    "llama3-8b": "Llama 3 8B: GQA (8 KV groups), SwiGLU, 32 layers, 1 x 8192 tokens",
    "llama3-70b": "Llama 3 70B: GQA (8 KV groups), SwiGLU, 80 layers, 1 x 8192 tokens",
    "llama3.1-405b": "Llama 3.1 405B: GQA (8 KV groups), SwiGLU, 126 layers, 1 x 8192 tokens",
    "mixtral-8x7b": "Mixtral 8x7B: 8 SwiGLU experts, top-2, GQA, 32 layers, 1 x 4096 tokens",
    "mixtral-8x22b": "Mixtral 8x22B: 8 SwiGLU experts, top-2, GQA, 56 layers, 1 x 4096 tokens",
    "qwen2.5-7b": "Qwen2.5 7B: GQA (4 KV groups), SwiGLU, 28 layers, 1 x 4096 tokens",
    "qwen2.5-72b": "Qwen2.5 72B: GQA (8 KV groups), SwiGLU, 80 layers, 1 x 4096 tokens",
    "deepseek-v3": "DeepSeek-V3: MLA, 256 routed experts top-8 + 1 shared, 58 MoE layers after 3 dense "
    "(not included), 1 x 4096 tokens",
    "gpt-oss-120b": "gpt-oss-120b: 128 SwiGLU experts, top-4, GQA (8 KV groups, head dim 64), 36 layers, "
    "1 x 4096 tokens, every other layer over a 128-token window, attention sinks not timed",
    "gemma2-27b": "Gemma 2 27B: GeGLU, GQA (16 KV groups, head dim 128), 46 layers, 1 x 8192 tokens, every "
    "other layer over a 4096-token window, attention logit soft-capping not timed",
}


#: A model id as the site shows it: a preset, optionally at a tensor- and an expert-parallel size
#: (``llama3-70b/tp8``, ``deepseek-v3/ep64``, ``mixtral-8x22b/tp2/ep4``). Sizes of at most 7 digits
#: (far above any cluster), so no id makes a number no check downstream expects.
_MODEL_ID = re.compile(r"^(?P<preset>[A-Za-z0-9][A-Za-z0-9_.-]*?)(?:/tp(?P<tp>\d{1,7}))?(?:/ep(?P<ep>\d{1,7}))?$")


@dataclasses.dataclass(frozen=True)
class ModelId:
    """``PRESET[/tpN][/epM]``: what the summary's ``:models:``, ``--model`` and ``:model:`` accept."""

    preset: str
    tp: int | None = None
    ep: int | None = None

    def text(self) -> str:
        """The id as :func:`parse_model_id` reads it: ``PRESET``, ``PRESET/tpN``, ``PRESET/epN`` or
        ``PRESET/tpN/epM``."""
        return self.preset + (f"/tp{self.tp}" if self.tp else "") + (f"/ep{self.ep}" if self.ep else "")

    def fields(self) -> dict[str, int]:
        """The config fields the id sets (none for a bare preset)."""
        out = {}
        if self.tp is not None:
            out["tensor_model_parallel_size"] = self.tp
        if self.ep is not None:
            out["expert_model_parallel_size"] = self.ep
        return out


def parse_model_id(text: str) -> ModelId:
    """The one parser of model ids (the site, the CLI and the directives); :class:`ConfigError` on
    ``model`` for anything else, and for a size of 0 (``llama3-8b/tp0`` once meant TP 1 silently)."""
    match = _MODEL_ID.match(text.strip())
    if not match:
        raise ConfigError("model", f"{text.strip()[:60]!r} is not PRESET, PRESET/tpN, PRESET/epN or PRESET/tpN/epM")
    sizes: dict[str, int | None] = {}
    for key, what in (("tp", "tensor-parallel"), ("ep", "expert-parallel")):
        digits = match[key]
        sizes[key] = int(digits) if digits is not None else None
        if sizes[key] == 0:
            raise ConfigError("model", f"{text.strip()!r}: /{key}0 is not a {what} size; sizes start at 1 "
                                       f"(/{key}1 is the same as no /{key})")
    return ModelId(match["preset"], sizes["tp"], sizes["ep"])


#: A slug such as the freshness page's ``llama3-70b-tp8``: a preset and its sizes joined by dashes.
_SLUG_SIZES = re.compile(r"^(?P<preset>.+?)(?P<sizes>(?:-tp[1-9]\d{0,6})?(?:-ep[1-9]\d{0,6})?)$")


def _id_hint(name: str) -> str:
    """``"did you mean the id 'llama3-70b/tp8'? "`` when ``name`` is a preset with ``-tpN``/``-epN``
    (a :name: slug, which is not an id), else "": the bare "unknown preset" left the reader to guess."""
    match = _SLUG_SIZES.match(name.strip().lower())
    if not match or not match["sizes"] or match["preset"] not in PRESETS:
        return ""
    return f"did you mean the id {match['preset'] + match['sizes'].replace('-', '/')!r}? "


def preset(name: str) -> ModelConfig:
    try:
        return PRESETS[name.strip().lower()]
    except KeyError:
        raise ConfigError(
            "model", f"unknown preset {name!r}; {_id_hint(name)}known: {', '.join(sorted(PRESETS))}"
        ) from None


# --------------------------------------------------------------------------- Hugging Face
_GATED_ACTIVATIONS = {"silu", "swiglu", "swish", "geglu"}
#: Model families whose MLP is gated (gate_proj + up_proj) whatever the activation is called.
_GATED_FAMILIES = {"llama", "mistral", "mixtral", "qwen2", "qwen2_moe", "qwen3", "qwen3_moe", "gemma",
                   "gemma2", "gemma3_text", "phi3", "olmo2", "deepseek_v2", "deepseek_v3", "gpt_oss"}

#: Words that mark a config key as one that may decide a GEMM's shape. A key holding one of them
#: that is neither read below nor listed in :data:`_HF_NO_GEMM_KEYS` is refused: an unknown
#: architecture feature must be an error, never a silently different model.
_GEMM_WORDS = frozenset({
    "expert", "experts", "lora", "intermediate", "hidden", "head", "heads", "dense", "moe", "mlp", "ffn",
    "shared", "proj", "rank", "sparse", "inner", "kv", "qk", "dim", "layer", "layers", "glu", "swiglu",
    "geglu", "query", "groups", "latent",
})
#: Keys that hold such a word but change no GEMM of the layer (dropout, norms, logit soft-capping,
#: gpt-oss's activation clamp). Sliding windows are read (:func:`_hf_window`): they shorten attention.
_HF_NO_GEMM_KEYS = frozenset({
    "hidden_dropout", "hidden_dropout_prob", "layer_norm_eps", "layer_norm_epsilon", "mlp_bias",
    "query_pre_attn_scalar", "swiglu_limit", "use_qk_norm",
    # DeepSeek's multi-token-prediction module: an extra block after the model, not a layer of it.
    "num_nextn_predict_layers",
})
#: Keys this reader understands (some only at the value that changes nothing, checked below).
_HF_READ_KEYS = frozenset({
    "hidden_size", "intermediate_size", "num_attention_heads", "num_key_value_heads", "head_dim",
    "num_hidden_layers", "hidden_act", "hidden_activation", "model_type",
    "num_local_experts", "num_experts", "n_routed_experts", "num_experts_per_tok", "experts_per_token",
    "moe_intermediate_size", "n_shared_experts", "shared_expert_intermediate_size", "first_k_dense_replace",
    "moe_layer_freq", "decoder_sparse_step", "mlp_only_layers",
    "q_lora_rank", "kv_lora_rank", "qk_nope_head_dim", "qk_rope_head_dim", "v_head_dim",
    "sliding_window", "use_sliding_window", "max_window_layers", "layer_types", "sliding_window_pattern",
})


class _HfKeys:
    """Typed access to one config object: every value read is checked, every error names file and key.

    ``json`` hands back whatever the file holds (strings, floats, booleans, nulls, lists, objects,
    integers of thousands of digits); a value of the wrong kind is a :class:`ConfigError`, never an
    exception from arithmetic on it later.
    """

    def __init__(self, where: str, raw: dict[str, Any], prefix: str) -> None:
        self.where = where
        self.raw = raw
        self.prefix = prefix

    def fail(self, key: str, problem: str) -> ConfigError:
        return ConfigError("hf_config", f"{self.where}: {self.prefix}{key}: {problem}")

    def integer(self, key: str, *, required: bool = False, minimum: int = 1) -> int | None:
        """A whole number >= ``minimum``; ``None`` when absent or null (an error when ``required``)."""
        if key not in self.raw or self.raw[key] is None:
            if required:
                raise self.fail(key, "is required")
            return None
        value = self.raw[key]
        if isinstance(value, _LongInteger):
            raise self.fail(key, f"{_show(value)} is larger than the supported {MAX_DIMENSION}")
        if isinstance(value, bool) or not isinstance(value, int):
            raise self.fail(key, f"must be a whole number, got {_show(value)}")
        if value < minimum:
            raise self.fail(key, f"must be at least {minimum}, got {_show(value)}")
        if value > MAX_DIMENSION:
            raise self.fail(key, f"{_show(value)} is larger than the supported {MAX_DIMENSION}")
        return value

    def text(self, key: str) -> str:
        if key not in self.raw or self.raw[key] is None:
            return ""
        value = self.raw[key]
        if not isinstance(value, str):
            raise self.fail(key, f"must be a string, got {_show(value)}")
        return value

    def one_of(self, keys: tuple[str, ...], **kwargs: Any) -> int | None:
        """One quantity spelled differently by different families; spellings that disagree are an error."""
        found = {k: v for k in keys if (v := self.integer(k, **kwargs)) is not None}
        if len(set(found.values())) > 1:
            raise self.fail(keys[0], "disagrees with " + ", ".join(f"{self.prefix}{k} = {v}" for k, v in found.items()))
        return next(iter(found.values()), None)


def _show(value: Any) -> str:
    """A short, printable description of a value from a file (never its 4000 digits)."""
    if isinstance(value, bool) or value is None:
        return json.dumps(value)
    if isinstance(value, _LongInteger):
        return f"a {value.digits}-digit number"
    if isinstance(value, int):
        return str(value) if value.bit_length() <= 64 else f"a {len(str(value))}-digit number"
    if isinstance(value, float):
        return repr(value)
    if isinstance(value, str):
        return ascii(value if len(value) <= 40 else value[:40] + "...")
    return f"a JSON {'array' if isinstance(value, list) else 'object'}"


class _LongInteger:
    """An integer literal too long to be any model dimension, kept as its digit count.

    Python refuses ``int()`` on more than 4300 digits (a ValueError from deep inside ``json``);
    keeping the count lets the error name the key that holds it instead of failing the whole file.
    """

    def __init__(self, digits: int) -> None:
        self.digits = digits


def _parse_int(text: str) -> int | _LongInteger:
    return int(text) if len(text) <= 20 else _LongInteger(len(text.lstrip("-")))


def _deeply_nested_key(text: str, limit: int = 200) -> str | None:
    """The top-level key whose value nests deeper than ``limit`` (found without recursion)."""
    depth, key, last_string, in_string, escaped, start = 0, None, None, False, False, 0
    for i, ch in enumerate(text):
        if in_string:
            if escaped:
                escaped = False
            elif ch == "\\":
                escaped = True
            elif ch == '"':
                in_string = False
                last_string = text[start:i]
        elif ch == '"':
            in_string, start = True, i + 1
        elif ch == ":" and depth == 1:
            key = last_string
        elif ch in "[{":
            depth += 1
            if depth > limit:
                return key
        elif ch in "]}":
            depth -= 1
    return None


def _read_json_object(path: Path) -> dict[str, Any]:
    """The file's top-level JSON object; anything unreadable is a ConfigError naming the file."""
    where = ascii(str(path))
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise ConfigError("hf_config", f"cannot read {where}: {exc.strerror or type(exc).__name__}") from None
    except ValueError as exc:  # a NUL byte in the path
        raise ConfigError("hf_config", f"cannot read {where}: {exc}") from None
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ConfigError("hf_config", f"{where} is not UTF-8 text (byte {exc.start})") from None
    try:
        raw = json.loads(text, parse_int=_parse_int)
    except json.JSONDecodeError as exc:
        raise ConfigError("hf_config", f"{where} is not valid JSON (line {exc.lineno}: {exc.msg})") from None
    except RecursionError:
        key = _deeply_nested_key(text)
        raise ConfigError("hf_config", f"{where}: {ascii(key) + ' ' if key else ''}is nested too deeply "
                          "to be a model config") from None
    if not isinstance(raw, dict):
        raise ConfigError("hf_config", f"{where} does not hold a JSON object")
    return raw


def config_from_hf(path: str | Path, **training: Any) -> ModelConfig:
    """Read a Hugging Face ``config.json`` (``training`` adds micro-batch / sequence length / TP).

    Gated MLPs are recognised by ``hidden_act: silu`` (Llama, Mistral, Qwen) or a gated
    ``model_type`` (Gemma's GeGLU says ``gelu_pytorch_tanh``). MoE: ``num_local_experts``
    (Mixtral, gpt-oss), ``num_experts`` (Qwen-MoE) or ``n_routed_experts`` (DeepSeek), with
    ``num_experts_per_tok`` (or gpt-oss's ``experts_per_token``), ``moe_intermediate_size``, shared
    experts (DeepSeek's ``n_shared_experts`` of ``moe_intermediate_size`` each, Qwen-MoE's
    ``shared_expert_intermediate_size``) and DeepSeek's leading dense layers
    (``first_k_dense_replace``). Multi-latent attention from ``kv_lora_rank`` and its dims.
    """
    where = ascii(str(path))
    raw = _read_json_object(Path(path))
    prefix = ""
    # Multimodal configs nest the language model.
    if "text_config" in raw and "hidden_size" not in raw:
        nested = raw["text_config"]
        if not isinstance(nested, dict):
            raise ConfigError("hf_config", f"{where}: text_config must be a JSON object, got {_show(nested)}")
        outer_type = raw.get("model_type")
        raw, prefix = nested, "text_config."
        if "model_type" not in raw and isinstance(outer_type, str):
            raw = {**raw, "model_type": outer_type}
    keys = _HfKeys(where, raw, prefix)
    _refuse_unknown_gemm_keys(keys)

    hidden = keys.integer("hidden_size", required=True)
    heads = keys.integer("num_attention_heads", required=True)
    layers = keys.integer("num_hidden_layers", required=True)
    ffn = keys.integer("intermediate_size")
    moe_ffn = keys.integer("moe_intermediate_size")
    activation = keys.text("hidden_act") or keys.text("hidden_activation")
    family = keys.text("model_type")
    values: dict[str, Any] = {
        "hidden_size": hidden,
        "ffn_hidden_size": ffn or moe_ffn,
        "num_attention_heads": heads,
        "num_query_groups": keys.integer("num_key_value_heads"),
        "kv_channels": keys.integer("head_dim"),
        "num_layers": layers,
        "vocab_size": keys.integer("vocab_size"),
        "swiglu": activation.lower() in _GATED_ACTIVATIONS or family.lower() in _GATED_FAMILIES,
    }
    if values["ffn_hidden_size"] is None:
        raise keys.fail("intermediate_size", "is required (or moe_intermediate_size)")
    values.update(_hf_mla(keys))
    if values.get("kv_lora_rank") is not None:
        # MLA has one K and V per head: DeepSeek writes num_key_value_heads = heads, which says no more.
        if values["num_query_groups"] not in (None, heads):
            raise keys.fail("num_key_value_heads", f"{values['num_query_groups']} with kv_lora_rank: multi-latent "
                            "attention has no KV groups")
        values["num_query_groups"] = None
        values["kv_channels"] = None
    values.update(_hf_moe(keys, layers or 1))
    values.update(_hf_window(keys, layers or 1, family.lower()))
    if family.lower() in _HF_SINK_FAMILIES:
        values["attention_sinks"] = True
    given = {k: v for k, v in training.items() if v is not None}
    try:
        return config_from_mapping({**values, **given})
    except ConfigError as exc:
        if exc.field in given or exc.field not in values:
            raise  # the caller's own flag (or not a config field at all): it names itself
        origin = _hf_origin(keys, values)

        def spell(field: str) -> str:
            return keys.prefix + origin[field] if field in origin and field not in given else cli_flag(field)

        raise ConfigError("hf_config", f"{where}: {exc.describe(spell)}") from None


def _hf_origin(keys: _HfKeys, values: Mapping[str, Any]) -> dict[str, str]:
    """The config.json key each field was read from, so that a rule broken by the file names its key."""
    def first(*names: str) -> str:
        return next((n for n in names if keys.raw.get(n) is not None), names[0])

    return {
        "hidden_size": "hidden_size", "num_attention_heads": "num_attention_heads",
        "num_layers": "num_hidden_layers", "ffn_hidden_size": first("intermediate_size", "moe_intermediate_size"),
        "num_query_groups": "num_key_value_heads", "kv_channels": "head_dim", "swiglu": "hidden_act",
        "num_experts": first("num_local_experts", "num_experts", "n_routed_experts"),
        "moe_router_topk": first("num_experts_per_tok", "experts_per_token"),
        "moe_ffn_hidden_size": "moe_intermediate_size",
        "moe_shared_expert_intermediate_size": first("shared_expert_intermediate_size", "n_shared_experts"),
        "moe_dense_layers": "first_k_dense_replace", "q_lora_rank": "q_lora_rank", "kv_lora_rank": "kv_lora_rank",
        "qk_head_dim": "qk_nope_head_dim", "qk_pos_emb_head_dim": "qk_rope_head_dim", "v_head_dim": "v_head_dim",
        "vocab_size": "vocab_size", "window_size": "sliding_window",
        "window_attn_skip_freq": first("layer_types", "max_window_layers", "sliding_window_pattern"),
    }


def _refuse_unknown_gemm_keys(keys: _HfKeys) -> None:
    unknown = sorted(
        k for k, v in keys.raw.items()
        if k not in _HF_READ_KEYS and k not in _HF_NO_GEMM_KEYS
        and _GEMM_WORDS & set(k.lower().split("_"))
        and v not in (None, False, 0, [], {})
    )
    if unknown:
        raise ConfigError(
            "hf_config",
            f"{keys.where}: {', '.join(ascii(keys.prefix + k) for k in unknown)} may change the layer's GEMMs "
            "and are not understood; refusing to guess a different model",
        )


def _hf_mla(keys: _HfKeys) -> dict[str, Any]:
    kv_rank = keys.integer("kv_lora_rank")
    mla_keys = ("q_lora_rank", "qk_nope_head_dim", "qk_rope_head_dim", "v_head_dim")
    if kv_rank is None:
        present = [k for k in mla_keys if keys.raw.get(k) is not None]
        if present:
            raise keys.fail(present[0], "is multi-latent attention's, but kv_lora_rank is missing")
        return {}
    out: dict[str, Any] = {"kv_lora_rank": kv_rank, "q_lora_rank": keys.integer("q_lora_rank")}
    for key, field in (("qk_nope_head_dim", "qk_head_dim"), ("qk_rope_head_dim", "qk_pos_emb_head_dim"),
                       ("v_head_dim", "v_head_dim")):
        out[field] = keys.integer(key, required=True)
    # transformers writes head_dim = qk_rope_head_dim for DeepSeek (the rotary width); anything
    # else would claim a head dim that MLA does not have.
    head_dim = keys.integer("head_dim")
    if head_dim is not None and head_dim != out["qk_pos_emb_head_dim"]:
        raise keys.fail("head_dim", f"{head_dim} with kv_lora_rank: multi-latent attention's head dims are "
                        "qk_nope_head_dim + qk_rope_head_dim and v_head_dim")
    return out


#: Families whose attention always has learned sinks (transformers' gpt-oss: ``self.sinks`` per head).
_HF_SINK_FAMILIES = frozenset({"gpt_oss"})
#: Families whose ``sliding_window`` (without ``layer_types``) windows every other layer, the first
#: included (transformers' Gemma 2: ``is_sliding = not bool(layer_idx % 2)``).
_HF_ALTERNATING_WINDOW = frozenset({"gemma2"})
#: Families whose ``sliding_window`` windows all but every N-th layer (``sliding_window_pattern`` N, this
#: default where absent: transformers' Gemma 3 and Cohere 2 (Command R7B), layer i sliding where (i + 1) % N != 0).
_HF_PATTERN_WINDOW: dict[str, int] = {"gemma3": 6, "gemma3_text": 6, "cohere2": 4}
#: Families whose ``sliding_window`` counts only with ``use_sliding_window``, from layer
#: ``max_window_layers`` on (transformers' Qwen2 and Qwen3, dense and MoE).
_HF_QWEN_WINDOW = frozenset({"qwen2", "qwen2_moe", "qwen3", "qwen3_moe"})
#: ``max_window_layers`` where such a config leaves it out: transformers' default for these families.
_HF_QWEN_MAX_WINDOW_LAYERS = 28


def _hf_window(keys: _HfKeys, layers: int, family: str) -> dict[str, Any]:
    """The sliding window and which layers use it, as transformers reads the family's keys, in Megatron-LM's
    terms (every N-th layer full, :attr:`ModelConfig.windowed_layers`).

    ``layer_types`` (gpt-oss, newer configs), when present, says it per layer. Without it: Gemma 2
    alternates, Gemma 3 and Cohere 2 follow ``sliding_window_pattern``, Qwen windows from ``max_window_layers`` on
    and only with ``use_sliding_window``; any other family (Mistral) windows every layer. A pattern that
    is not "every N-th layer full" is refused, naming its key."""
    window = keys.integer("sliding_window")
    types = keys.raw.get("layer_types")
    if types is not None:
        if not isinstance(types, list) or len(types) != layers or not all(
                t in ("sliding_attention", "full_attention") for t in types):
            raise keys.fail("layer_types", f"must list {layers} entries (num_hidden_layers), each "
                            "\"sliding_attention\" or \"full_attention\"")
        marks = [t == "sliding_attention" for t in types]
        if any(marks) and window is None:
            raise keys.fail("layer_types", "names sliding_attention layers, but sliding_window is missing")
        return _window_fields(keys, "layer_types", window, marks)
    if window is None:
        return {}
    if family in _HF_QWEN_WINDOW:
        use = keys.raw.get("use_sliding_window", False)
        if not isinstance(use, bool):
            raise keys.fail("use_sliding_window", f"must be true or false, got {_show(use)}")
        first = keys.integer("max_window_layers", minimum=0)
        if first is None:
            first = _HF_QWEN_MAX_WINDOW_LAYERS  # transformers' default when the key is absent
        return _window_fields(keys, "max_window_layers", window, [use and i >= first for i in range(layers)])
    if family in _HF_ALTERNATING_WINDOW:
        return {"window_size": window, "window_attn_skip_freq": 2}
    if family in _HF_PATTERN_WINDOW:
        pattern = keys.integer("sliding_window_pattern") or _HF_PATTERN_WINDOW[family]
        return {"window_size": window, "window_attn_skip_freq": pattern}
    return {"window_size": window}


def _window_fields(keys: _HfKeys, key: str, window: int | None, marks: list[bool]) -> dict[str, Any]:
    """The window fields of per-layer marks (True: windowed), or a ConfigError naming ``key``."""
    if not any(marks):
        return {}
    found = window_skip_freq(marks)
    if found is False:
        raise keys.fail(key, "windows layers in a pattern other than every N-th layer attending fully, which is "
                        "not modelled (the measured layer stands for every layer)")
    return {"window_size": window, "window_attn_skip_freq": found}


def window_skip_freq(marks: Sequence[bool]) -> int | Literal[False] | None:
    """Megatron-LM's ``window_attn_skip_freq`` of per-layer marks (True: windowed; some are): None where every
    layer is windowed, N where exactly every N-th layer (1-based) is not, False for any other pattern."""
    if all(marks):
        return None
    n = next(i + 1 for i, windowed in enumerate(marks) if not windowed)  # the first full layer
    if n >= 2 and all(windowed == ((i + 1) % n != 0) for i, windowed in enumerate(marks)):
        return n
    return False


def _hf_moe(keys: _HfKeys, layers: int) -> dict[str, Any]:
    experts = keys.one_of(("num_local_experts", "num_experts", "n_routed_experts"), minimum=0)
    topk = keys.one_of(("num_experts_per_tok", "experts_per_token"))
    moe_ffn = keys.integer("moe_intermediate_size")
    n_shared = keys.integer("n_shared_experts", minimum=0)
    shared_ffn = keys.integer("shared_expert_intermediate_size", minimum=0)
    dense = keys.integer("first_k_dense_replace", minimum=0)
    # Patterns of MoE and dense layers other than "the first k dense" are not modelled.
    for key in ("moe_layer_freq", "decoder_sparse_step"):
        step = keys.integer(key)
        if step is not None and step != 1:
            raise keys.fail(key, f"{step}: MoE only every {step} layers is not supported (one layer's GEMMs "
                            "stand for every layer)")
    if "mlp_only_layers" in keys.raw and keys.raw["mlp_only_layers"] not in (None, []):
        raise keys.fail("mlp_only_layers", "dense layers among MoE layers are not supported")
    if not experts or experts <= 1:
        return {}
    if n_shared and shared_ffn:
        raise keys.fail("shared_expert_intermediate_size", "and n_shared_experts both given: ambiguous")
    if n_shared:
        if moe_ffn is None:
            raise keys.fail("n_shared_experts", "needs moe_intermediate_size (each shared expert's size)")
        shared_ffn = n_shared * moe_ffn
    out: dict[str, Any] = {
        "num_experts": experts,
        "moe_router_topk": topk if topk is not None else 2,
        "moe_ffn_hidden_size": moe_ffn,
        "moe_shared_expert_intermediate_size": shared_ffn or None,
        "moe_dense_layers": dense or None,
    }
    if dense and dense >= layers:
        raise keys.fail("first_k_dense_replace", f"{dense} leaves no MoE layer of num_hidden_layers {layers}")
    return out


# ----------------------------------------------------------------------------- Megatron-LM
#: Megatron flags taking one whole number, and the config field each sets (the same name).
_MEGATRON_INT_FLAGS: dict[str, str] = {
    cli_flag(f): f for f in (
        "hidden_size", "ffn_hidden_size", "num_attention_heads", "num_layers", "micro_batch_size",
        "seq_length", "num_query_groups", "kv_channels", "tensor_model_parallel_size", "num_experts",
        "moe_router_topk", "moe_ffn_hidden_size", "moe_shared_expert_intermediate_size",
        "expert_model_parallel_size", "q_lora_rank", "kv_lora_rank", "qk_head_dim", "qk_pos_emb_head_dim",
        "v_head_dim", "vocab_size", "make_vocab_size_divisible_by",
    )
}
_MEGATRON_SWITCHES = frozenset({"--swiglu", "--sequence-parallel", "--group-query-attention",
                                "--multi-latent-attention"})
_MLA_FIELDS = ("q_lora_rank", "kv_lora_rank", "qk_head_dim", "qk_pos_emb_head_dim", "v_head_dim")
#: Words that mark a Megatron flag as one that may change GEMM shapes (``--foo-hidden-size``).
_MEGATRON_GEMM_WORDS = frozenset({
    "hidden", "ffn", "head", "heads", "expert", "experts", "moe", "layer", "layers", "lora", "dim",
    "parallel", "seq", "sequence", "batch", "query", "groups", "kv", "qk", "mlp", "attention", "swiglu",
    "glu", "channels", "latent", "tokens",
})
#: Flags holding such a word that change no GEMM of one layer on one rank: batch accounting,
#: pipeline placement, dropout, fusions, router and load-balancing settings, recomputation.
_MEGATRON_NO_GEMM_FLAGS = frozenset({
    "--rampup-batch-size",
    "--pipeline-model-parallel-layout", "--decoder-first-pipeline-num-layers",
    "--decoder-last-pipeline-num-layers", "--num-layers-in-first-pipeline-stage",
    "--num-layers-in-last-pipeline-stage", "--account-for-embedding-in-pipeline-split",
    "--account-for-loss-in-pipeline-split", "--attention-dropout", "--hidden-dropout",
    "--attention-softmax-in-fp32", "--attention-backend", "--qk-layernorm",
    "--no-bias-swiglu-fusion", "--mscale-all-dim", "--first-last-layers-bf16",
    "--num-layers-at-start-in-bf16", "--num-layers-at-end-in-bf16",
    "--moe-router-load-balancing-type", "--moe-aux-loss-coeff", "--moe-z-loss-coeff", "--moe-grouped-gemm",
    "--moe-token-dispatcher-type", "--moe-router-dtype", "--moe-router-score-function",
    "--moe-router-enable-expert-bias", "--moe-router-bias-update-rate", "--moe-router-topk-scaling-factor",
    "--moe-router-num-groups", "--moe-router-group-topk", "--moe-router-pre-softmax", "--moe-permute-fusion",
    "--moe-shared-expert-overlap", "--moe-input-jitter-eps", "--moe-token-drop-policy",
    "--moe-per-layer-logging", "--moe-layer-recompute", "--moe-router-fusion", "--moe-enable-deepep",
    "--moe-use-legacy-grouped-gemm", "--moe-router-force-load-balancing", "--overlap-moe-expert-parallel-comm",
    # The multi-token-prediction block: an extra module after the model, not one of its layers.
    "--mtp-num-layers",
})
#: Flags that change GEMMs (or replace the layer) without a GEMM word in their name: always refused.
_MEGATRON_UNSUPPORTED_FLAGS = frozenset({
    "--hybrid-override-pattern", "--heterogeneous-layers-config-path", "--heterogeneous-layers-config-encoded-json",
    "--spec", "--yaml-cfg",
})
_DENSE_THEN_MOE = re.compile(r"^\(?\[0\]\*(\d+)\+\[1\]\*(\d+)\)?$")


def split_megatron_args(text: str) -> list[str]:
    """Split a pasted argument list as a shell would (quotes, ``\\`` line continuations)."""
    try:
        return shlex.split(text.replace("\\\n", " "))
    except ValueError as exc:
        raise ConfigError("megatron_args", f"cannot split the argument list: {exc}") from None


def megatron_args_to_fields(argv: Sequence[str]) -> tuple[dict[str, Any], list[str]]:
    """Config fields from a Megatron-LM ``pretrain_gpt.py`` argument list, and the flags ignored.

    Flags that change no GEMM of a layer (``--lr``, ``--train-iters``, ``--rampup-batch-size``,
    pipeline and router settings...) are returned as ignored, so a whole launch script can be
    pasted; a flag that may change a GEMM but is not understood is a :class:`ConfigError` naming
    it. Megatron's own rules apply where it has them: ``--num-query-groups`` counts only with
    ``--group-query-attention``, MLA flags only with ``--multi-latent-attention``, and a missing
    ``--ffn-hidden-size`` is Megatron's default (4 x hidden, or 2/3 of that rounded down to a
    multiple of 64 with ``--swiglu``). A launcher prefix up to the script (``torchrun ...
    pretrain_gpt.py``) is skipped.
    """
    parsed, order, _ = _parse_megatron_argv(argv)
    fields: dict[str, Any] = {}
    ignored: list[str] = []
    unknown: list[str] = []
    switches = {f for f in _MEGATRON_SWITCHES if f in parsed}
    for flag in order:
        values = parsed[flag]
        if flag in _MEGATRON_SWITCHES:
            if values:
                raise ConfigError("megatron_args", f"{flag} takes no value, got {values[0]!a}")
            continue
        if flag in _MEGATRON_INT_FLAGS:
            field = _MEGATRON_INT_FLAGS[flag]
            if field == "num_query_groups" and "--group-query-attention" not in switches:
                ignored.append(flag)  # Megatron uses it only with --group-query-attention
            elif field in _MLA_FIELDS and "--multi-latent-attention" not in switches:
                ignored.append(flag)  # Megatron uses them only with --multi-latent-attention
            elif field == "kv_channels" and "--multi-latent-attention" in switches:
                ignored.append(flag)  # MLA's projections use its own head dims
            else:
                fields[field] = _megatron_int(flag, values)
            continue
        if flag in MEGATRON_LAYOUT_FLAGS and flag != "--expert-tensor-parallel-size":
            continue  # the run's layout (megatron_layout), not the layer's GEMMs
        if flag == "--window-attn-skip-freq" and "--window-size" in parsed:
            continue  # read with --window-size (_megatron_window)
        special = _megatron_special(flag, values, parsed)
        if special == {} and flag in MEGATRON_LAYOUT_FLAGS:
            continue
        if special:
            fields.update(special)
        elif special is not None:  # understood, at a value that changes no GEMM
            ignored.append(flag)
        elif flag in _MEGATRON_NO_GEMM_FLAGS:
            ignored.append(flag)
        elif flag in _MEGATRON_UNSUPPORTED_FLAGS or _MEGATRON_GEMM_WORDS & set(flag[2:].lower().split("-")):
            unknown.append(flag)
        else:
            ignored.append(flag)
    if unknown:
        raise ConfigError("megatron_args", f"{', '.join(ascii(f)[1:-1] for f in unknown)}: may change the "
                          "GEMMs and not understood; remove them to see the shapes without them")
    if "--swiglu" in switches:
        fields["swiglu"] = True
    # Megatron-LM runs without sequence parallelism unless the line says --sequence-parallel.
    fields["sequence_parallel"] = "--sequence-parallel" in switches
    if "--multi-latent-attention" in switches and "kv_lora_rank" not in fields:
        raise ConfigError("megatron_args", "--multi-latent-attention needs --kv-lora-rank, --qk-head-dim, "
                          "--qk-pos-emb-head-dim and --v-head-dim (Megatron's defaults are not assumed)")
    if "ffn_hidden_size" not in fields and "hidden_size" in fields:
        h = fields["hidden_size"]
        fields["ffn_hidden_size"] = int(4 * h * 2 / 3 / 64) * 64 if fields.get("swiglu") else 4 * h
    dense = fields.get("moe_dense_layers")
    layers = fields.get("num_layers")
    moe = fields.pop("_moe_layers", None)
    if dense is not None and moe is not None and layers is not None and dense + moe != layers:
        raise ConfigError("megatron_args", f"--moe-layer-freq describes {dense + moe} layers, "
                          f"--num-layers says {layers}")
    if dense is not None and moe is not None and layers is None:
        fields["num_layers"] = dense + moe
    _window_layers(fields)
    return fields, ignored


def _window_layers(fields: dict[str, Any]) -> None:
    """``--window-attn-skip-freq`` (read beside ``--window-size``) as the config's frequency: a whole number
    as it is (1: every layer full, no window), a list of marks where it is "every N-th layer full"."""
    freq, marks = fields.pop("_window_skip_freq", None), fields.pop("_window_marks", None)
    if freq is None and marks is None:
        return
    if marks is not None:
        layers = fields.get("num_layers")
        if layers is None:
            raise ConfigError("megatron_args", "--window-attn-skip-freq as a list needs --num-layers")
        if len(marks) != layers:
            raise ConfigError("megatron_args", f"--window-attn-skip-freq lists {len(marks)} layers, --num-layers "
                              f"says {layers}")
        windowed = [m == "1" for m in marks]
        found = window_skip_freq(windowed) if any(windowed) else 1
        if found is False:
            raise ConfigError("megatron_args", "--window-attn-skip-freq: a pattern other than every N-th layer "
                              "full is not modelled (the measured layer stands for every layer)")
        freq = found
    if freq == 0:
        raise ConfigError("megatron_args", "--window-attn-skip-freq 0: every how many layers is full attention?")
    if freq == 1:
        del fields["window_size"]  # every layer full: no window
    elif freq is not None:
        fields["window_attn_skip_freq"] = freq


def _parse_megatron_argv(argv: Sequence[str]) -> tuple[dict[str, list[str]], list[str], dict[str, list[str]]]:
    """The script's flags with their values (the last of a repeated flag wins, as in argparse), their
    order, and the launcher's flags before the script (``torchrun --nnodes 8 ...``)."""
    tokens = [t for t in argv if t.strip() and t.strip() != "\\"]
    scripts = [i for i, t in enumerate(tokens) if t.endswith(".py")]
    launcher: dict[str, list[str]] = {}
    if scripts:
        launcher = _flags(tokens[:scripts[0]], strict=False)[0]
        tokens = tokens[scripts[0] + 1:]
    parsed, order = _flags(tokens, strict=True)
    return parsed, order, launcher


def _flags(tokens: Sequence[str], *, strict: bool) -> tuple[dict[str, list[str]], list[str]]:
    parsed: dict[str, list[str]] = {}
    order: list[str] = []
    flag: str | None = None
    for token in tokens:
        if token.startswith("--") and len(token) > 2:
            flag, _, value = token.partition("=")
            if flag not in parsed:
                order.append(flag)
            parsed[flag] = [value] if value else []  # repeated: the last one wins, as in argparse
        elif flag is None:
            if strict:
                raise ConfigError("megatron_args", f"{token!a} comes before any --flag")
        else:
            parsed[flag].append(token)
    return parsed, order


def _megatron_int(flag: str, values: list[str]) -> int:
    if len(values) != 1:
        raise ConfigError("megatron_args", f"{flag} takes one whole number, got {len(values)} values")
    text = values[0].strip()
    if not text.isdecimal() or len(text) > 12:
        raise ConfigError("megatron_args", f"{flag}: {text[:40]!a} is not a whole number")
    return int(text)


def _megatron_special(flag: str, values: list[str], parsed: Mapping[str, list[str]]) -> dict[str, Any] | None:
    """Flags understood only at values that change nothing, or only in one form; None: not special."""
    value = values[0].strip() if len(values) == 1 else None
    if flag == "--moe-layer-freq":
        compact = (value or "").replace(" ", "")
        if compact == "1":
            return {}
        match = _DENSE_THEN_MOE.match(compact)
        if match is None:
            raise ConfigError("megatron_args", f"--moe-layer-freq {compact[:60]!a}: only 1 or "
                              "([0]*K+[1]*N) (K dense layers, then MoE) are supported")
        dense, moe = int(match.group(1)), int(match.group(2))
        return {"moe_dense_layers": dense or None, "_moe_layers": moe}
    if flag == "--expert-tensor-parallel-size":
        tp = parsed.get("--tensor-model-parallel-size", ["1"])
        if value is not None and [value] == [t.strip() for t in tp]:
            return {}
        raise ConfigError("megatron_args", "--expert-tensor-parallel-size other than "
                          "--tensor-model-parallel-size is not supported (expert GEMMs use the TP size)")
    if flag == "--moe-expert-capacity-factor":
        try:
            factor = float(value or "")
        except ValueError:
            factor = float("nan")
        if "--moe-pad-expert-input-to-capacity" in parsed or not factor >= 1:
            raise ConfigError("megatron_args", "--moe-expert-capacity-factor below 1 (dropped tokens) or with "
                              "--moe-pad-expert-input-to-capacity changes the expert GEMMs; not supported")
        return {}  # balanced routing stays under any capacity of at least 1: no token is dropped
    if flag == "--moe-pad-expert-input-to-capacity":
        return None if "--moe-expert-capacity-factor" in parsed else {}
    if flag == "--window-size":
        return _megatron_window(values, parsed)
    if flag == "--softmax-type":
        kind = (value or "").strip()
        if kind not in ("vanilla", "off-by-one", "learnable"):
            raise ConfigError("megatron_args",
                              f"--softmax-type {kind[:40]!a}: expected vanilla, off-by-one or learnable")
        return {} if kind == "vanilla" else {"attention_sinks": True}
    if flag == "--window-attn-skip-freq":
        return {}  # read by --window-size's branch (the caller lists it as ignored only without that flag)
    return None


_WINDOW_PATTERN = re.compile(r"^\[([01](?:,[01])*)\](?:\*(\d{1,7}))?$")


def _megatron_window(values: list[str], parsed: Mapping[str, list[str]]) -> dict[str, Any]:
    """``--window-size LEFT,RIGHT`` and ``--window-attn-skip-freq`` as the config's window fields:
    LEFT tokens back (-1: unbounded, no window); RIGHT must be 0 (causal). Megatron-LM's
    ``is_layer_window_attention``: skip frequency N windows every layer but each N-th (1-based), a
    list such as ``[1,1,1,0]*3`` windows the layers marked 1. Each flag takes one word, as Megatron-LM's
    parser: ``--window-size 128 0`` is refused, its words shown."""
    value = values[0].strip() if len(values) == 1 else " ".join(values)
    parts = ("" if len(values) != 1 else value).replace(" ", "").strip("()").split(",")
    if len(parts) != 2 or not all(p.lstrip("-").isdecimal() and len(p) <= 8 for p in parts):
        raise ConfigError("megatron_args", f"--window-size {value[:40]!a}: expected LEFT,RIGHT (two whole "
                          "numbers in one word, as Megatron-LM's tuple)")
    left, right = int(parts[0]), int(parts[1])
    if right != 0:
        raise ConfigError("megatron_args", f"--window-size {value!a}: a right window of {right} is not causal "
                          "attention; only 0 is modelled")
    if left < 0:
        return {}  # -1: an unbounded window, ordinary causal attention
    if left == 0:
        raise ConfigError("megatron_args", "--window-size 0,0: a window of no tokens back is not attention")
    out: dict[str, Any] = {"window_size": left}
    skip = parsed.get("--window-attn-skip-freq")
    if skip is None:
        return out
    text = skip[0].replace(" ", "") if len(skip) == 1 else " ".join(skip)
    if text.isdecimal() and len(text) <= 7:
        out["_window_skip_freq"] = int(text)
        return out
    match = _WINDOW_PATTERN.match(text)
    if match is None:
        raise ConfigError("megatron_args", f"--window-attn-skip-freq {text[:40]!a}: expected a whole number N or a "
                          "list of 0 and 1 such as [1,1,1,0]*3")
    marks = match.group(1).split(",") * int(match.group(2) or 1)
    out["_window_marks"] = marks
    return out


# ------------------------------------------------------------------------ the run's layout
#: ``--data-parallel-sharding-strategy`` value -> the layout's sharding (ZeRO-0 to 3).
MEGATRON_SHARDING: dict[str, str] = {"no_shard": "none", "optim": "optimizer", "optim_grads": "optimizer+grads",
                                     "optim_grads_params": "fsdp"}
#: Flags the run's layout takes (:func:`megatron_layout`): no longer "ignored" by
#: :func:`megatron_args_to_fields`. ``--num-gpus``, ``--num-nodes`` and ``--gpus-per-node`` are not
#: Megatron's: the GPU count, which Megatron reads from the launcher (``torchrun --nnodes
#: --nproc-per-node``, also read here).
MEGATRON_LAYOUT_FLAGS = frozenset({
    "--tensor-model-parallel-size", "--sequence-parallel", "--pipeline-model-parallel-size",
    "--num-layers-per-virtual-pipeline-stage", "--virtual-pipeline-model-parallel-size",
    "--context-parallel-size", "--expert-model-parallel-size", "--expert-tensor-parallel-size",
    "--global-batch-size", "--micro-batch-size", "--use-distributed-optimizer", "--data-parallel-sharding-strategy",
    "--recompute-granularity", "--recompute-method", "--recompute-num-layers", "--overlap-grad-reduce",
    "--overlap-param-gather", "--fp8-param-gather", "--grad-reduce-in-bf16", "--num-gpus", "--num-nodes",
    "--gpus-per-node", "--num-virtual-stages-per-pipeline-rank", "--use-megatron-fsdp", "--use-torch-fsdp2",
    "--torch-fsdp2-no-reshard-after-forward", "--recompute-activations",
})
_LAYOUT_INTS = {"--tensor-model-parallel-size": "tp", "--pipeline-model-parallel-size": "pp",
                "--virtual-pipeline-model-parallel-size": "vpp", "--num-virtual-stages-per-pipeline-rank": "vpp",
                "--context-parallel-size": "cp",
                "--expert-model-parallel-size": "ep", "--expert-tensor-parallel-size": "etp",
                "--global-batch-size": "global_batch_size", "--micro-batch-size": "micro_batch_size",
                "--recompute-num-layers": "recompute_num_layers"}
_LAYOUT_SWITCHES = {"--sequence-parallel": "sp", "--overlap-grad-reduce": "overlap_grad_reduce",
                    "--overlap-param-gather": "overlap_param_gather", "--fp8-param-gather": "fp8_param_gather"}


def megatron_layout(argv: Sequence[str]) -> tuple[dict[str, Any], list[str]]:
    """The run's layout fields (:class:`~gemm_bench.question.layout.ParallelLayout`'s names) from a
    Megatron-LM launch line, and the layout flags it could not take with the reason.

    Megatron's rules: ``--num-layers-per-virtual-pipeline-stage`` N gives layers / PP / N virtual
    stages; ``--data-parallel-sharding-strategy`` (Megatron-FSDP) wins over
    ``--use-distributed-optimizer``, ``--use-megatron-fsdp`` alone is its default strategy
    (optim_grads_params: FSDP), ``--use-torch-fsdp2`` is FSDP (ZeRO-2 with
    ``--torch-fsdp2-no-reshard-after-forward``), ``--recompute-activations`` is selective
    recomputation; the GPU count is ``--num-gpus``, ``--num-nodes`` x ``--gpus-per-node``, or the
    launcher's ``--nnodes`` x ``--nproc-per-node``. Without ``--sequence-parallel`` the layout says
    False (Megatron runs TP without it unless told). The flags returned as ignored have their
    reason in :func:`megatron_ignored_reason`.
    """
    parsed, _, launcher = _parse_megatron_argv(argv)
    fields: dict[str, Any] = {}
    ignored: list[str] = []
    for flag, field in _LAYOUT_INTS.items():
        if flag in parsed:
            fields[field] = _megatron_int(flag, parsed[flag])
    if "--tensor-model-parallel-size" in parsed or "--sequence-parallel" in parsed:
        fields["sp"] = "--sequence-parallel" in parsed
    for flag, field in _LAYOUT_SWITCHES.items():
        if field != "sp" and flag in parsed:
            fields[field] = True
    if "--grad-reduce-in-bf16" in parsed:
        fields["grad_reduce_dtype"] = "bf16"
    per_stage = parsed.get("--num-layers-per-virtual-pipeline-stage")
    if per_stage is not None:
        n = _megatron_int("--num-layers-per-virtual-pipeline-stage", per_stage)
        if "--num-layers" not in parsed:
            raise ConfigError("megatron_args", "--num-layers-per-virtual-pipeline-stage needs --num-layers")
        layers = _megatron_int("--num-layers", parsed["--num-layers"])
        pp = fields.get("pp", 1)
        if layers % (pp * n):
            raise ConfigError("megatron_args", f"--num-layers-per-virtual-pipeline-stage {n}: --num-layers {layers} "
                              f"is not divisible by --pipeline-model-parallel-size {pp} x {n}")
        vpp = layers // pp // n
        if fields.get("vpp", vpp) != vpp:
            raise ConfigError("megatron_args", f"--virtual-pipeline-model-parallel-size {fields['vpp']} disagrees "
                              f"with --num-layers-per-virtual-pipeline-stage {n} ({layers} / {pp} / {n} = {vpp})")
        fields["vpp"] = vpp
    strategy = parsed.get("--data-parallel-sharding-strategy")
    if strategy is not None:
        value = strategy[0].strip() if len(strategy) == 1 else ""
        if value not in MEGATRON_SHARDING:
            raise ConfigError("megatron_args", f"--data-parallel-sharding-strategy {value[:40]!a} is not one of "
                              f"{', '.join(MEGATRON_SHARDING)}")
        fields["sharding"] = MEGATRON_SHARDING[value]
    elif "--use-torch-fsdp2" in parsed:
        fields["sharding"] = "optimizer+grads" if "--torch-fsdp2-no-reshard-after-forward" in parsed else "fsdp"
    elif "--use-megatron-fsdp" in parsed:
        fields["sharding"] = "fsdp"
    elif "--use-distributed-optimizer" in parsed:
        fields["sharding"] = "optimizer"
    if "--recompute-activations" in parsed and "--recompute-granularity" not in parsed:
        fields["recompute"] = "selective"
    for flag in ("--recompute-granularity", "--recompute-method"):
        values = parsed.get(flag)
        if values is None:
            continue
        value = values[0].strip() if len(values) == 1 else ""
        allowed = ("selective", "full") if flag == "--recompute-granularity" else ("uniform", "block")
        if value not in allowed:
            raise ConfigError("megatron_args", f"{flag} {value[:40]!a} is not one of {', '.join(allowed)}")
        fields["recompute" if flag == "--recompute-granularity" else "recompute_method"] = value
    if fields.get("recompute") != "full":
        for flag in ("--recompute-method", "--recompute-num-layers"):
            if flag in parsed:
                ignored.append(flag)
                fields.pop("recompute_method" if flag == "--recompute-method" else "recompute_num_layers", None)
    gpus = _gpu_count(parsed, launcher)
    if gpus is not None:
        fields["gpus"] = gpus
    return fields, ignored


def _gpu_count(parsed: Mapping[str, list[str]], launcher: Mapping[str, list[str]]) -> int | None:
    """The world size: ``--num-gpus``, or nodes x GPUs per node (the script's or the launcher's flags)."""
    if "--num-gpus" in parsed:
        return _megatron_int("--num-gpus", parsed["--num-gpus"])
    nodes = next((f for f in ("--num-nodes", "--nnodes") if f in parsed or f in launcher), None)
    per_node = next((f for f in ("--gpus-per-node", "--nproc-per-node", "--nproc_per_node")
                     if f in parsed or f in launcher), None)
    if nodes is None and per_node is None:
        return None
    if nodes is None or per_node is None:
        given = nodes or per_node
        raise ConfigError("megatron_args", f"{given} needs its partner (nodes and GPUs per node), or give --num-gpus")
    n = _megatron_int(nodes, parsed.get(nodes) or launcher[nodes])
    g = _megatron_int(per_node, parsed.get(per_node) or launcher[per_node])
    return n * g


#: Why a Megatron-LM flag is listed as ignored, for the flags with a reason of their own; every other
#: ignored flag changes neither a GEMM nor the memory the layout models (learning rate, data,
#: logging, checkpoints, fusions, dropout, router settings...).
_IGNORED_REASONS: dict[str, str] = {
    "--pipeline-model-parallel-layout": "a custom stage layout: memory per GPU assumes the even split",
    "--decoder-first-pipeline-num-layers": "an uneven first stage: memory per GPU assumes the even split",
    "--decoder-last-pipeline-num-layers": "an uneven last stage: memory per GPU assumes the even split",
    "--num-layers-in-first-pipeline-stage": "an uneven first stage: memory per GPU assumes the even split",
    "--num-layers-in-last-pipeline-stage": "an uneven last stage: memory per GPU assumes the even split",
    "--account-for-embedding-in-pipeline-split": "memory per GPU assumes the even split of the layers",
    "--account-for-loss-in-pipeline-split": "memory per GPU assumes the even split of the layers",
    "--rampup-batch-size": "a batch ramp-up: the step at the full global batch is what is modelled",
    "--num-query-groups": "Megatron-LM reads it only with --group-query-attention",
    "--kv-channels": "multi-latent attention uses its own head dims",
    "--recompute-method": "applies to --recompute-granularity full only",
    "--recompute-num-layers": "applies to --recompute-granularity full only",
    "--mtp-num-layers": "the multi-token-prediction block is not a layer of the model's stack: not modelled",
    "--moe-layer-recompute": "recomputation of the MoE layer alone is not modelled",
    "--window-size": "an unbounded left window (-1): ordinary causal attention",
    "--softmax-type": "vanilla: the ordinary softmax the layer step times",
    "--window-attn-skip-freq": "Megatron-LM reads it only with --window-size",
}
_GENERIC_IGNORED_REASON = "changes no GEMM and no memory the layout models"


def megatron_ignored_reason(flag: str) -> str:
    """Why ``flag`` of a Megatron-LM argument list is listed as ignored (``shapes`` prints it)."""
    if flag in _IGNORED_REASONS:
        return _IGNORED_REASONS[flag]
    if flag[2:].replace("-", "_") in _MLA_FIELDS:
        return "Megatron-LM reads it only with --multi-latent-attention"
    return _GENERIC_IGNORED_REASON
