"""A *question*: which GEMMs to measure, built from CLI flags or directive options.

Three spellings lead here: a model (a preset, a Hugging Face ``config.json``, a Megatron-LM
argument list or Megatron-style fields, where fields override the preset, file or argument
list), manual ``MxKxN`` shapes, or a square-size sweep. The
CLI and the Sphinx directive both call :func:`build_question`, so they accept exactly the same
inputs and reject them with the same messages.

A question is the set of GEMMs, independent of how it was spelled: a preset and the same numbers
written out, options in any order, give the same GEMMs and so the same :func:`question_hash`, the
name of its cache files. Precisions and modes are not part of the question: they select cells
inside the answer.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from gemm_bench.question.config import (
    ConfigError,
    ModelConfig,
    config_from_hf,
    config_from_mapping,
    megatron_args_to_fields,
    megatron_layout,
    parse_model_id,
    preset,
)
from gemm_bench.question.layout import (
    LAYOUT_ONLY_FIELDS,
    ParallelLayout,
    layout_flag,
    preset_layout,
    question_layout,
)
from gemm_bench.question.shapes import BALANCED_ROUTING_NOTE, GemmShape, layer_gemms, manual_gemms, square_sweep

#: Config fields that change no measured quantity of the layer, only how a page scales per-layer values
#: to the model (layer counts) or composes the model's step (vocabulary, its padding, G micro-batches
#: per optimizer step): they are not part of a question's key, so every result written before the
#: model's step keeps its name. The model step's output-layer part records the padded vocabulary it
#: was measured at and is looked up by it (:mod:`gemm_bench.results.model_step_schema`); G changes
#: only the composition's arithmetic, never what is measured. A sliding window and attention sinks are not
#: measured either: the layer step times ordinary causal attention whatever they are, and the page says so.
UNKEYED_CONFIG_FIELDS: tuple[str, ...] = ("num_layers", "moe_dense_layers", "vocab_size",
                                          "make_vocab_size_divisible_by", "num_microbatches", "window_size",
                                          "window_attn_skip_freq", "attention_sinks")
#: Fields that only a mixture of experts, or only multi-latent attention, reads.
MOE_CONFIG_FIELDS: tuple[str, ...] = ("num_experts", "moe_router_topk", "moe_ffn_hidden_size",
                                      "expert_model_parallel_size", "moe_shared_expert_intermediate_size")
MLA_CONFIG_FIELDS: tuple[str, ...] = ("q_lora_rank", "kv_lora_rank", "qk_head_dim", "qk_pos_emb_head_dim",
                                      "v_head_dim")


def stored_config(config: Mapping[str, Any] | None) -> ModelConfig | None:
    """The resolved :class:`ModelConfig` of a config as a result stores it, or None when there is
    none or it is not one this code builds. Canonical through the config class: a field a file of
    an older version does not store takes its default, and derived fields (query groups, head
    size) their resolved value, so the same model reads the same whichever version wrote it."""
    if config is None:
        return None
    known = {f.name for f in dataclasses.fields(ModelConfig)}
    try:
        return ModelConfig(**{k: v for k, v in config.items() if k in known}).resolved()
    except (TypeError, ValueError, ConfigError):
        return None


def step_key(config: Mapping[str, Any] | None) -> dict[str, Any] | None:
    """What a result's layer step depends on beyond its GEMM shapes: the model's fields (tokens per
    micro-batch, heads, query groups, ...; MoE fields for a mixture of experts, MLA fields for
    multi-latent attention, sequence parallelism with tensor parallelism), never the layer
    counts; None without a config (manual shapes and sweeps have no step)."""
    if config is None:
        return None
    model = stored_config(config)
    if model is None:
        return {k: config[k] for k in sorted(config)}  # not a config this code builds: keyed as written
    unread = set(UNKEYED_CONFIG_FIELDS)
    if not model.is_moe:
        unread |= set(MOE_CONFIG_FIELDS)
    else:  # the experts' width is moe_ffn_hidden_size; ffn_hidden_size is the dense layers', never measured
        unread.add("ffn_hidden_size")
    if not model.is_mla:
        unread |= set(MLA_CONFIG_FIELDS)
    if model.tensor_model_parallel_size == 1:
        unread.add("sequence_parallel")
    canonical = model.to_dict()
    if not model.is_mla:
        # Sequence parallelism changes no GEMM of these layers, and the one-GPU layer step does not
        # emulate it (every token runs on the rank: measure/step.py says what is left out), so what
        # is measured is the step without it, whatever the run uses: keyed as false, the value every
        # result measured before it became the default at TP > 1 (issue 41) was keyed with. Multi-latent
        # attention's down projections do change with it: there the asked value stays in the key.
        canonical["sequence_parallel"] = False
    return {k: canonical[k] for k in sorted(canonical) if k not in unread}


def question_payload(gemms: Iterable[GemmShape], config: Mapping[str, Any] | None = None) -> Any:
    """The canonical, order-free form of a question: sorted (op, pass, m, k, n, groups) rows, and
    with a model config its :func:`step_key`, because a layer step of 31 x 512 tokens is not one
    of 1 x 15872 tokens although their GEMMs are the same."""
    rows = sorted([g.op, g.pass_, g.m, g.k, g.n, g.groups] for g in gemms)
    key = step_key(config)
    return rows if key is None else {"gemms": rows, "step": key}


def question_hash(gemms: Iterable[GemmShape], config: Mapping[str, Any] | None = None) -> str:
    """The key of a question: one cache file per question per device. One key holds everything a
    stored quantity depends on: the GEMMs for their cells and SQNRs, the config for the step."""
    text = json.dumps(question_payload(gemms, config), separators=(",", ":"), sort_keys=True)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


@dataclasses.dataclass(frozen=True)
class Question:
    kind: str  # "model" | "shapes" | "sweep"
    gemms: tuple[GemmShape, ...]
    #: Layers the GEMMs stand for: model totals are per-layer values times this. For an MoE
    #: model with leading dense layers (DeepSeek-V3) only the MoE layers, which the GEMMs are.
    num_layers: int
    config: ModelConfig | None
    #: Megatron-LM flags of the question's argument list that change no GEMM (not part of the hash).
    ignored_flags: tuple[str, ...] = ()
    #: The run's parallel layout (issue 41; a model's question only). Not part of the hash: what it
    #: adds to the config changes nothing one GPU measures (:mod:`gemm_bench.question.layout`). None
    #: for a question stored before the layout existed (:meth:`layout_or_assumed` says what it assumed).
    layout: ParallelLayout | None = None
    #: Where the layout comes from: the preset's published layout (its id) or what the question said.
    layout_note: str = ""

    def layout_or_assumed(self) -> tuple[ParallelLayout | None, str]:
        """The layout, and "" ; or, for a model's question stored before the layout existed, the
        layout it assumed (one rank: TP x EP GPUs, no pipeline, no sharding, the stored G) and a note
        that says so. (None, "") for manual shapes and sweeps."""
        if self.layout is not None or self.config is None:
            return self.layout, ""
        assumed = question_layout(self.config, {})
        return assumed, (f"{assumed.describe()}; the result stores no layout (measured before results kept "
                         "theirs), so one rank's run with the whole optimizer state was assumed")

    @property
    def hash(self) -> str:
        return question_hash(self.gemms, self.config.to_dict() if self.config is not None else None)

    def to_dict(self) -> dict[str, Any]:
        """The whole question as JSON data (what a run needs, not only what is hashed)."""
        return {
            "kind": self.kind,
            "gemms": [g.to_dict() for g in self.gemms],
            "num_layers": self.num_layers,
            "config": self.config.to_dict() if self.config is not None else None,
            "ignored_flags": list(self.ignored_flags),
            **({"layout": _layout_dict(self.layout), "layout_note": self.layout_note} if self.layout else {}),
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Question:
        """The question :meth:`to_dict` wrote; :class:`ValueError` (a :class:`ConfigError` for a bad
        model) for anything it would not write."""
        try:
            config = data["config"]
            model = None if config is None else ModelConfig(**config)
            if model is not None:
                model.validate()
            layout = data.get("layout")
            question = cls(str(data["kind"]), tuple(GemmShape.from_dict(g) for g in data["gemms"]),
                           int(data["num_layers"]), model, tuple(str(f) for f in data.get("ignored_flags", ())),
                           None if layout is None else ParallelLayout(**layout), str(data.get("layout_note", "")))
        except (KeyError, TypeError, AttributeError) as exc:
            raise ValueError(f"not a question written by Question.to_dict ({exc!r})") from None
        if question.kind not in ("model", "shapes", "sweep") or not question.gemms:
            raise ValueError(f"not a question written by Question.to_dict (kind {question.kind!r}, "
                             f"{len(question.gemms)} GEMMs)")
        return question

    @property
    def notes(self) -> list[str]:
        notes = []
        c = self.config
        if c is not None and c.is_moe:
            notes.append(BALANCED_ROUTING_NOTE)
        if c is not None and c.has_shared_experts:
            notes.append(
                f"Shared experts (total MLP hidden size {c.moe_shared_expert_intermediate_size}) see every token: "
                "dense GEMMs over all tokens beside the routed experts' grouped GEMMs."
            )
        if c is not None and c.dense_layers:
            notes.append(
                f"The first {c.dense_layers} of the {c.num_layers} layers are dense (an MLP of hidden size "
                f"{c.ffn_hidden_size} instead of experts): they differ from this MoE layer and their GEMMs are "
                f"not included; model totals count the {c.measured_layers} MoE layers only."
            )
        if c is not None and c.is_mla:
            q = (f"Q down to rank {c.q_lora_rank} and back up" if c.q_lora_rank is not None
                 else "Q projected directly")
            notes.append(
                f"Multi-latent attention: {q}, KV down to rank {c.kv_lora_rank} (+ {c.qk_pos_emb_head_dim} rotary "
                "dims) and back up, as Megatron-LM builds it; at tensor-parallel size > 1 the down projections are "
                "duplicated on every rank (not split), and with sequence parallelism each projects 1/TP of the tokens."
            )
        if self.config is not None and self.config.tensor_model_parallel_size > 1:
            collectives = ("all-gather / reduce-scatter" if self.config.sequence_parallel_on
                           else "all-reduce")  # Megatron's TP collectives without and with sequence parallelism
            notes.append(
                f"Shapes of one rank at tensor-parallel size {self.config.tensor_model_parallel_size}; "
                f"communication ({collectives}) is not timed."
            )
        if self.config is not None and self.layout is not None and self.layout.cp > 1:
            notes.append(
                f"Context parallel {self.layout.cp}: each rank holds 1/{self.layout.cp} of the sequence's "
                f"{self.config.seq_length} tokens. These GEMMs are over the whole sequence; the layout's step and "
                "memory per GPU take each rank's share (the step adds attention's exchanges between its ranks)."
            )
        return notes

    def describe(self) -> str:
        if self.config is None:
            return f"{len(self.gemms)} {'square sizes' if self.kind == 'sweep' else 'manual shapes'}"
        c = self.config
        parts = [f"hidden {c.hidden_size}", f"FFN {c.ffn_hidden_size}", f"{c.num_attention_heads} heads"]
        if c.query_groups != c.num_attention_heads:
            parts.append(f"{c.query_groups} KV groups")
        if c.is_mla:
            parts.append(f"MLA (Q rank {c.q_lora_rank or 'none'}, KV rank {c.kv_lora_rank})")
        if c.swiglu:
            parts.append("gated MLP")
        if c.is_moe:
            parts.append(f"{c.num_experts} experts top-{c.moe_router_topk}")
        if c.has_shared_experts:
            parts.append(f"shared experts {c.moe_shared_expert_intermediate_size}")
        if c.tensor_model_parallel_size > 1:
            parts.append(f"TP {c.tensor_model_parallel_size}")
        if c.dense_layers:
            parts.append(f"{c.num_layers} layers (first {c.dense_layers} dense, not included)")
        else:
            parts.append(f"{c.num_layers} layers")
        parts.append(f"{c.micro_batch_size} x {c.seq_length} tokens")
        return ", ".join(parts)


def _layout_dict(layout: ParallelLayout) -> dict[str, Any]:
    """The layout as :meth:`Question.to_dict` stores it: its fields, nothing derived (DP follows)."""
    return dataclasses.asdict(layout)


def build_question(
    *,
    model: str | None = None,
    hf_config: str | Path | None = None,
    shapes: Sequence[str] | None = None,
    sweep: Sequence[int | str] | None = None,
    fields: Mapping[str, Any] | None = None,
    megatron_args: Sequence[str] | None = None,
    layout: Mapping[str, Any] | None = None,
) -> Question:
    """Turn user input into a validated :class:`Question` (raises :class:`ConfigError`).

    ``megatron_args`` is a Megatron-LM argument list (already split into words:
    :func:`~gemm_bench.question.config.split_megatron_args` splits a pasted string); ``fields`` override it.
    ``layout`` holds the layout's own fields (:data:`~gemm_bench.question.layout.LAYOUT_ONLY_FIELDS`),
    over a launch line's or a preset's published layout: a preset's layout applies unless the page
    overrides a field of it, and where the question's shard is not the one the preset's layout was
    published for, the question says so and takes the default layout (one data-parallel rank).
    """
    fields = {k: v for k, v in (fields or {}).items() if v is not None}
    layout = {k: v for k, v in (layout or {}).items() if v is not None}
    # A source given but empty is a mistake, never "no source": it would silently ask another question.
    if model is not None and not model.strip():
        raise ConfigError("model", "needs a preset name")
    if hf_config is not None and not str(hf_config).strip():
        raise ConfigError("hf_config", "needs a path")
    if shapes is not None and not any(s.strip() for s in shapes):
        raise ConfigError("shape", "needs at least one MxKxN shape")
    if sweep is not None and not any(str(s).strip() for s in sweep):
        raise ConfigError("sweep", "needs at least one size")
    if megatron_args is not None and not any(a.strip() for a in megatron_args):
        raise ConfigError("megatron_args", "needs at least one flag")
    sources = [name for name, value in (("model", model), ("hf_config", hf_config), ("megatron_args", megatron_args),
                                        ("shape", shapes), ("sweep", sweep)) if value]
    if len(sources) > 1:
        raise ConfigError(sources[1], f"cannot be combined with {{{sources[0]}}}")
    if shapes or sweep:
        if fields:
            field = sorted(fields)[0]
            raise ConfigError(field, f"is a model option; it cannot be combined with {{{sources[0]}}}")
        if layout:
            raise ConfigError(sorted(layout)[0], f"is a layout option; it cannot be combined with {{{sources[0]}}}")
        gemms = manual_gemms(shapes) if shapes else square_sweep(sweep or ())
        return Question("shapes" if shapes else "sweep", tuple(gemms), 1, None)
    ignored: list[str] = []
    g_given = "num_microbatches" in fields
    from_line_fields: set[str] = set()
    base: ParallelLayout | None = None
    note = ""
    if hf_config:
        training = {k: fields.pop(k) for k in list(fields)}
        config = config_from_hf(hf_config, **training)
    elif megatron_args:
        from_args, ignored = megatron_args_to_fields(megatron_args)
        config = config_from_mapping({**from_args, **fields})
        from_line, layout_ignored = megatron_layout(megatron_args)
        ignored += layout_ignored
        from_line_fields = {k for k in from_line if k not in layout}
        layout = {**{k: v for k, v in from_line.items() if k in LAYOUT_ONLY_FIELDS}, **layout}
        g_given = g_given or "--num-microbatches" in megatron_args
    elif model:
        model_id = parse_model_id(model)
        for field, size in model_id.fields().items():
            given = fields.setdefault(field, size)
            if given != size:
                raise ConfigError(field, f"is {given}, but the model id {model.strip()!r} says {size}")
        try:
            config = config_from_mapping(fields, base=preset(model_id.preset)).resolved()
        except ConfigError as exc:
            if exc.field not in model_id.fields():
                raise
            # The size came from the id (``llama3-70b/tp9``), not from an option the author wrote:
            # blame the id, naming what it set ({field} placeholders keep every surface's spelling).
            raise ConfigError("model", f"the id {model.strip()!r} sets {{{exc.field}}} to "
                                       f"{model_id.fields()[exc.field]}: {exc.rule}") from None
    else:
        config = config_from_mapping(fields)
    config = config.resolved()
    if model:
        published = preset_layout(parse_model_id(model).preset, config)
        if published is not None:
            base = published[1].layout
            note = f"the published layout of {published[0]}" + (" under this question's options" if layout else "")
        else:
            note = (f"no published layout of {parse_model_id(model).preset} at TP "
                    f"{config.tensor_model_parallel_size}, EP {config.expert_model_parallel_size}: the default layout")
    try:
        run = question_layout(config, layout, base=base, g_given=g_given)
    except ConfigError as exc:
        if megatron_args and exc.field in from_line_fields:  # the line's flag, as the line spells it
            raise ConfigError("megatron_args", f"{layout_flag(exc.field)}: {exc.rule}") from None
        if base is None or layout:
            raise
        # The page changed the model under the preset's layout (another layer count, micro-batch...):
        # the question stands, with the default layout, and says so.
        run = question_layout(config, {}, g_given=g_given)
        note = (f"the published layout ({base.describe()}) does not hold this question's model: "
                "the default layout")
    if run.microbatches != config.num_microbatches:
        config = dataclasses.replace(config, num_microbatches=run.microbatches)  # G follows the global batch
    return Question("model", tuple(layer_gemms(config)), config.measured_layers, config, tuple(ignored), run, note)

