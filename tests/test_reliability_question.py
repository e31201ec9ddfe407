"""The cache key, from directive options: blind to spelling, sensitive to anything measured.

Properties over the directive's own parser (:func:`gemm_benchmark.options.parse_options`):
option order, whitespace, letter case of a preset, list separators, duplicated list items, and a
preset versus the same numbers spelled out all give the same question hash; changing a dimension
that decides a GEMM's shape changes it; the number of layers, leading dense layers and sequence
parallelism (which change no GEMM; sequence parallelism except in multi-latent attention's down
projections at TP > 1) do not, nor do MoE routing options of a dense model. The head count is left out of
the "must change" list on purpose: without GQA or an explicit head dim, heads x head dim is the
hidden size whatever the count, so no Linear changes shape (the last check still covers it:
equal hashes exactly when the GEMMs are equal). bench-level checks are in test_results_cache.py.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from gemm_bench.question.config import BOOL_FIELDS, INT_FIELDS, PRESETS, ModelConfig
from gemm_bench.question.question import step_key
from gemm_benchmark.options import OptionError, parse_options
from tests.conftest import fuzz_examples

HERE = Path(__file__).parent
PRESET_NAMES = sorted(PRESETS)
padding = st.sampled_from(["", " ", "  ", "\t", " \t "])
#: Overrides that keep every preset valid (TP 2 divides every preset's heads, groups and FFN; 4
#: layers leave DeepSeek-V3 one MoE layer after its 3 dense ones).
OVERRIDES: dict[str, list[Any]] = {
    "num_layers": [4, 7, 100], "micro_batch_size": [1, 2, 3], "seq_length": [128, 512, 2048],
    "tensor_model_parallel_size": [1, 2], "swiglu": [True, False], "sequence_parallel": [True, False],
}


def _hash(options: dict[str, str]) -> str:
    return parse_options(options, srcdir=HERE, docdir=HERE).question.hash


def _text(value: Any) -> str:
    return ("true" if value else "false") if isinstance(value, bool) else str(value)


def _spelled_out(config: ModelConfig) -> dict[str, str]:
    """Every field of a config as directive options (``hidden_size`` -> ``hidden-size``)."""
    return {f.name.replace("_", "-"): _text(getattr(config, f.name))
            for f in dataclasses.fields(config) if getattr(config, f.name) is not None}


def _shuffled(draw, options: dict[str, str]) -> dict[str, str]:
    """The same options in another order, each value padded with whitespace."""
    keys = draw(st.permutations(list(options)))
    return {k: draw(padding) + options[k] + draw(padding) for k in keys}


@st.composite
def model_options(draw) -> tuple[str, dict[str, Any]]:
    name = draw(st.sampled_from(PRESET_NAMES))
    fields = draw(st.dictionaries(st.sampled_from(sorted(OVERRIDES)), st.none(), max_size=3))
    return name, {f: draw(st.sampled_from(OVERRIDES[f])) for f in fields}


@settings(max_examples=fuzz_examples(150), deadline=None)
@given(model_options(), st.data())
def test_preset_and_spelled_out_numbers_give_one_hash_in_any_order_and_spacing(preset_and_fields, data):
    name, fields = preset_and_fields
    written = {"model": name, **{f.replace("_", "-"): _text(v) for f, v in fields.items()}}
    reference = _hash(written)
    # Another order, whitespace around every value, the preset's name in another case.
    respelled = _shuffled(data.draw, written)
    respelled["model"] = data.draw(st.sampled_from([name, name.upper(), name.title()])) + data.draw(padding)
    assert _hash(respelled) == reference
    # The preset's numbers spelled out, with and without the defaulted fields written in.
    config = dataclasses.replace(PRESETS[name], **fields)
    assert _hash(_shuffled(data.draw, _spelled_out(config))) == reference
    assert _hash(_shuffled(data.draw, _spelled_out(config.resolved()))) == reference
    # Flags: "" and "true" and "yes" are one spelling of true.
    if fields.get("swiglu") is True:
        assert _hash({**written, "swiglu": data.draw(st.sampled_from(["", "true", "YES", "on", "1"]))}) == reference


SHAPES = ["8192x4096x4096", "8192x4096x14336", "1x1x1", "4096x8192x1024"]


@settings(max_examples=fuzz_examples(100), deadline=None)
@given(st.lists(st.sampled_from(SHAPES), min_size=1, max_size=4, unique=True), st.data())
def test_shapes_and_sweeps_ignore_order_separators_case_and_duplicates(shapes, data):
    reference = _hash({"shapes": ", ".join(shapes)})
    order = data.draw(st.permutations(shapes))
    items = [s.replace("x", data.draw(st.sampled_from(["x", "X", "×"]))) for s in order]
    items += data.draw(st.lists(st.sampled_from(items), max_size=2))  # a shape listed twice
    separator = data.draw(st.sampled_from([",", ", ", " ", " , ", "\t", ",,"]))
    assert _hash({"shapes": data.draw(padding) + separator.join(items) + data.draw(padding)}) == reference

    sizes = [s.split("x")[0] for s in shapes]
    sweep = _hash({"sweep": ",".join(sizes)})
    respelled = data.draw(st.permutations(sizes)) + data.draw(st.lists(st.sampled_from(sizes), max_size=2))
    assert _hash({"sweep": separator.join(respelled)}) == sweep


#: Fields every GEMM shape depends on (for a dense model; MoE and MLA fields are drawn separately).
SHAPE_FIELDS = ["hidden_size", "ffn_hidden_size", "micro_batch_size", "seq_length", "kv_channels",
                "num_query_groups", "tensor_model_parallel_size", "swiglu"]
MOE_FIELDS = ["num_experts", "moe_router_topk", "moe_ffn_hidden_size", "expert_model_parallel_size",
              "moe_shared_expert_intermediate_size"]
#: Multi-latent attention's dims: shape fields of an MLA model, errors on any other.
MLA_FIELDS = ["q_lora_rank", "kv_lora_rank", "qk_head_dim", "qk_pos_emb_head_dim", "v_head_dim"]
#: Change nothing measured, only what the model total counts.
NOT_MEASURED = ["num_layers", "moe_dense_layers",
                # a sliding window: the layer step times causal attention whatever it is (the page bounds it)
                "window_size", "window_attn_skip_freq", "attention_sinks"]
#: The model's step (issue 32): the vocabulary, its padding and G change no layer measurement, so no hash.
MODEL_STEP_FIELDS = ["vocab_size", "make_vocab_size_divisible_by", "num_microbatches"]


@settings(max_examples=fuzz_examples(400), deadline=None)
@given(model_options(),
       st.sampled_from([*SHAPE_FIELDS, *MOE_FIELDS, *MLA_FIELDS, *NOT_MEASURED, *MODEL_STEP_FIELDS,
                        "num_attention_heads"]),
       st.one_of(st.integers(1, 64), st.sampled_from([128, 256, 512, 1024, 2048, 4096, 8192, 14336])), st.data())
def test_changing_a_measured_dimension_changes_the_hash(preset_and_fields, field, number, data):
    name, fields = preset_and_fields
    before = parse_options({"model": name, **{f.replace("_", "-"): _text(v) for f, v in fields.items()}},
                           srcdir=HERE, docdir=HERE).question
    old = getattr(before.config, field)  # resolved: defaulted fields written out
    new: Any = (not old) if field in BOOL_FIELDS else number
    if new == old:
        return
    changed = {**fields, field: new}
    try:
        after = parse_options({"model": name, **{f.replace("_", "-"): _text(v) for f, v in changed.items()}},
                              srcdir=HERE, docdir=HERE).question
    except OptionError:
        return  # not a valid model (e.g. heads no longer divisible by the new TP size): nothing to compare
    moe, mla = before.config.is_moe, before.config.is_mla
    # With its own expert FFN size an MoE model has no GEMM of ffn_hidden_size (DeepSeek's dense layers).
    expert_ffn_given = bool(PRESETS[name].moe_ffn_hidden_size or fields.get("moe_ffn_hidden_size"))
    tp = after.config.tensor_model_parallel_size
    if field == "sequence_parallel":
        # With tensor parallelism, the step (and MLA's duplicated down projections: tokens / TP); without, nothing
        assert (after.hash != before.hash) == (tp > 1), (name, fields, new)
    elif field in MODEL_STEP_FIELDS:
        assert after.hash == before.hash, (name, field, new)
        assert getattr(after.config, field) == new
    elif field in NOT_MEASURED:
        assert after.hash == before.hash, (name, field, new)
        layers = new if field == "num_layers" else before.config.num_layers
        dense = (new if field == "moe_dense_layers" else before.config.moe_dense_layers or 0) if moe else 0
        assert after.num_layers == layers - dense
    elif mla and field in ("kv_channels", "num_query_groups"):
        assert after.hash == before.hash  # only the value that says nothing (one group per head) is accepted
    elif field in SHAPE_FIELDS and not (field == "ffn_hidden_size" and moe and expert_ffn_given):
        assert after.hash != before.hash, (name, fields, field, old, new)
    elif field in MLA_FIELDS:
        assert mla and after.hash != before.hash, (name, fields, field, old, new)
    elif field in MOE_FIELDS and moe:
        assert after.hash != before.hash, (name, fields, field, old, new)
    elif field == "num_experts" and new > 1:  # a dense model becomes a mixture of experts
        assert after.hash != before.hash, (name, fields, field, new)
    elif field == "num_attention_heads":  # the layer step's attention: a new question even where no GEMM changes
        assert after.hash != before.hash, (name, fields, field, new)
    else:  # routing options of a dense model: nothing to route, nothing changes
        assert after.hash == before.hash, (name, fields, field, new)
    # And the hash is the measured quantities': equal hashes exactly when the GEMMs and the step's inputs are.
    same_step = step_key(after.config.to_dict()) == step_key(before.config.to_dict())
    same = set(after.gemms) == set(before.gemms) and same_step
    assert (after.hash == before.hash) == same


def test_every_config_field_is_classified():
    assert set(INT_FIELDS) | set(BOOL_FIELDS) == {*SHAPE_FIELDS, *MOE_FIELDS, *MLA_FIELDS, *NOT_MEASURED,
                                                  *MODEL_STEP_FIELDS,
                                                  "num_attention_heads", "sequence_parallel"}


def test_a_tensor_parallel_note_names_the_collectives_megatron_runs() -> None:
    """Megatron's tensor parallelism all-reduces without sequence parallelism and all-gathers /
    reduce-scatters with it; the note named the latter for every TP question (the models page, which
    counts all-reduces, contradicted it)."""
    from gemm_bench.question.question import build_question

    plain = " ".join(build_question(model="llama3-70b/tp8", fields={"sequence_parallel": False}).notes)
    assert "communication (all-reduce) is not timed" in plain and "reduce-scatter" not in plain
    # Sequence parallel is on by default at TP > 1, as Megatron's recipes run it (issue 41).
    sp = " ".join(build_question(model="llama3-70b/tp8").notes)
    assert "all-gather / reduce-scatter" in sp


def test_a_bad_size_in_a_model_id_blames_the_id_not_an_option_never_written() -> None:
    """A reader pass: `llama3-70b/tp9` was reported as `--tensor-model-parallel-size: 9 ...`, an option
    the user never gave; the id is named, with what it set and why that fails."""
    import pytest

    from gemm_bench.question.config import ConfigError
    from gemm_bench.question.question import build_question

    with pytest.raises(ConfigError) as caught:
        build_question(model="llama3-70b/tp9")
    assert caught.value.field == "model"
    assert str(caught.value) == ("--model: the id 'llama3-70b/tp9' sets --tensor-model-parallel-size to 9: "
                                 "9 does not divide --num-attention-heads 64")
    with pytest.raises(ConfigError) as given:  # an option the user did give is still blamed itself
        build_question(model="llama3-70b", fields={"tensor_model_parallel_size": 9})
    assert given.value.field == "tensor_model_parallel_size"
