"""Sliding-window attention (session 20): read from every source a model can come from, kept out of the
question's hash (the layer step times causal attention whatever the window), and bounded on the page.

Why: gpt-oss-120b windows 18 of its 36 layers to 128 tokens and Gemma 2 27B 23 of its 46 to 4,096; the
site read neither and its tokens/s for both said nothing of it. On the H200 a 128-token window takes 71% off
gpt-oss's attention (session 20's probe), so its layer steps overstate those layers by about 0.9 ms each.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

from gemm_bench.question.config import (
    PRESETS,
    ConfigError,
    ModelConfig,
    config_from_hf,
    config_from_mapping,
    megatron_args_to_fields,
    split_megatron_args,
)
from gemm_bench.question.layout import PRESET_LAYOUTS
from gemm_bench.question.layout_step import RecipeParts, layout_step
from gemm_bench.question.model_step import PartTimes, step_ms, without_windowed_attention
from gemm_bench.question.question import build_question
from tests.test_layout_step import LINE, NET, TABLE

HF = Path(__file__).parent / "data" / "hf"


# ------------------------------------------------------------------------------------ reading
def test_the_presets_windows_are_those_of_their_config_json() -> None:
    for name, size, layers in (("gpt-oss-120b", 128, 18), ("gemma2-27b", 4096, 23)):
        read = config_from_hf(HF / f"{name}.json")
        assert (read.window_size, read.window_attn_skip_freq, read.windowed_layers) == (size, 2, layers)
        assert (PRESETS[name].window_size, PRESETS[name].window_attn_skip_freq) == (size, 2)
    for name in ("llama3-8b", "qwen2.5-7b", "mixtral-8x7b", "deepseek-v3"):
        assert config_from_hf(HF / f"{name}.json").window_size is None  # Qwen2.5: use_sliding_window false
        assert PRESETS[name].windowed_share == 0.0


def _hf(tmp_path: Path, base: str, **changes: object) -> Path:
    raw = json.loads((HF / f"{base}.json").read_text())
    raw.update(changes)
    for key in [k for k, v in changes.items() if v is None]:
        del raw[key]
    path = tmp_path / "config.json"
    path.write_text(json.dumps(raw))
    return path


def test_each_familys_rule_for_which_layers_are_windowed(tmp_path: Path) -> None:
    # Mistral-style: a window without layer types windows every layer
    every = config_from_hf(_hf(tmp_path, "mixtral-8x7b", sliding_window=1024))
    assert (every.window_size, every.windowed_layers) == (1024, 32)
    # Qwen: only with use_sliding_window, from max_window_layers on
    qwen = config_from_hf(_hf(tmp_path, "qwen2.5-7b", use_sliding_window=True, max_window_layers=0,
                              sliding_window=2048))
    assert (qwen.window_size, qwen.windowed_layers) == (2048, 28)
    # without max_window_layers, transformers' default (28): the 28 layers of Qwen2.5 7B attend fully
    default = config_from_hf(_hf(tmp_path, "qwen2.5-7b", use_sliding_window=True, max_window_layers=None,
                                 sliding_window=2048))
    assert default.window_size is None
    with pytest.raises(ConfigError, match="max_window_layers"):  # full layers first, then windowed: not modelled
        config_from_hf(_hf(tmp_path, "qwen2.5-7b", use_sliding_window=True, max_window_layers=20,
                           sliding_window=2048))
    # Gemma 3: all but every sliding_window_pattern-th layer
    gemma3 = config_from_hf(_hf(tmp_path, "gemma2-27b", model_type="gemma3_text", sliding_window_pattern=6))
    assert (gemma3.window_attn_skip_freq, gemma3.windowed_layers) == (6, 46 - 46 // 6)
    # layer_types, where given, decides for any family
    typed = config_from_hf(_hf(tmp_path, "gemma2-27b", layer_types=["full_attention"] * 46))
    assert typed.window_size is None


@pytest.mark.parametrize(("changes", "names"), [
    ({"layer_types": ["sliding_attention"] * 35}, "layer_types"),
    ({"layer_types": ["sliding_attention"] * 35 + ["chunked_attention"]}, "layer_types"),
    ({"sliding_window": None}, "layer_types"),
    ({"sliding_window": "128"}, "sliding_window"),
])
def test_a_window_the_reader_cannot_place_names_its_key(tmp_path: Path, changes: dict[str, object],
                                                        names: str) -> None:
    with pytest.raises(ConfigError, match=names):
        config_from_hf(_hf(tmp_path, "gpt-oss-120b", **changes))


def test_megatron_window_flags_as_megatron_reads_them() -> None:
    base = "--num-layers 12 --hidden-size 1024 --num-attention-heads 8 "
    fields, ignored = megatron_args_to_fields(split_megatron_args(base + "--window-size 128,0 "
                                                                  "--window-attn-skip-freq 4"))
    assert (fields["window_size"], fields["window_attn_skip_freq"], ignored) == (128, 4, [])  # 4, 8, 12 full
    fields, _ = megatron_args_to_fields(split_megatron_args(base + "--window-size 128,0 "
                                                            "--window-attn-skip-freq '[1,1,0]*4'"))
    assert fields["window_attn_skip_freq"] == 3
    fields, _ = megatron_args_to_fields(split_megatron_args(base + "--window-size 128,0"))
    assert fields["window_size"] == 128 and "window_attn_skip_freq" not in fields  # every layer
    fields, ignored = megatron_args_to_fields(split_megatron_args(base + "--window-size -1,0"))
    assert "window_size" not in fields and ignored == ["--window-size"]
    for bad, words in (("--window-size 128,4", "not causal"), ("--window-size 128", "LEFT,RIGHT"),
                       ("--window-size 128,0 --window-attn-skip-freq '[1,0]*2'", "lists 4 layers"),
                       ("--window-size 128,0 --window-attn-skip-freq x", "whole number N"),
                       ("--window-size 128,0 --window-attn-skip-freq '[1,0,0]*4'", "not modelled")):
        with pytest.raises(ConfigError, match=words):
            megatron_args_to_fields(split_megatron_args(base + bad))


def test_window_rules_name_the_field() -> None:
    with pytest.raises(ConfigError, match="needs"):
        config_from_mapping({"window_attn_skip_freq": 4}, base=PRESETS["llama3-8b"])
    # a rule, not a count: a page that shortens a preset keeps its pattern
    assert config_from_mapping({"num_layers": 4}, base=PRESETS["gemma2-27b"]).windowed_layers == 2
    # a window reaching over the whole sequence shortens nothing
    assert dataclasses.replace(PRESETS["gemma2-27b"], seq_length=4096).windowed_share == 0.0
    assert PRESETS["gemma2-27b"].windowed_share == pytest.approx(0.5)


def test_the_window_keeps_every_committed_results_name() -> None:
    # measured before the window was read: the same question, so the same file
    assert build_question(model="gpt-oss-120b/ep8").hash == "2a6f44509a377c37"
    assert build_question(model="gpt-oss-120b").hash == "19210ed9493a1e7a"
    assert build_question(model="gemma2-27b").hash == "5e83a84f7dc73ab8"
    assert build_question(model="gpt-oss-120b").config.window_size == 128  # type: ignore[union-attr]


# ------------------------------------------------------------------------------------ the bound
PARTS = PartTimes(embedding=0.5, head=2.0, layer_first=10.0, layer_cached=9.0, attention_first=2.0,
                  attention_cached=1.5)


def test_the_bound_takes_the_windowed_share_of_the_profiled_attention_out() -> None:
    bound = without_windowed_attention(PARTS, 0.5)
    assert bound is not None and (bound.layer_first, bound.layer_cached) == (9.0, 8.25)
    assert without_windowed_attention(dataclasses.replace(PARTS, attention_cached=None), 0.5) is None
    full = step_ms(PARTS, layers=4, microbatches=2, optimizer_ms=1.0)
    assert step_ms(bound, layers=4, microbatches=2, optimizer_ms=1.0) == pytest.approx(full - 4 * (1.0 + 0.75))


def _gpt_oss_step(parts: PartTimes) -> tuple[str, ...]:
    config = dataclasses.replace(PRESETS["gpt-oss-120b"], expert_model_parallel_size=8, num_microbatches=80)
    layout = dataclasses.replace(PRESET_LAYOUTS["gpt-oss-120b/ep8"].layout, overlap_grad_reduce=False,
                                 overlap_param_gather=False)
    table = TABLE  # flat costs: the compute's assumptions do not depend on them
    step = layout_step(config, layout, "bf16", RecipeParts(parts, parts, parts), LINE, 10_000_000, table,
                       network=NET)
    return step.compute_assumptions


def test_the_layout_step_states_the_window_and_its_bound() -> None:
    said = [a for a in _gpt_oss_step(PARTS) if "sliding window" in a]
    # the slower stage, the last: 9 layers; per micro-batch (G = 80) 9 x (10 + 79 x 9) / 80 + the head; it holds
    # layers 28-36, of which 4 (29, 31, 33, 35) lose their attention: 4 x (2 + 79 x 1.5) / 80 (the first stage,
    # 5 windowed of layers 1-9 and the embedding, stays faster)
    layers = 9 * (10.0 + 79 * 9.0) / 80
    stage = layers + 2.0
    saved = 4 * (2.0 + 79 * 1.5) / 80
    assert len(said) == 1 and said[0].startswith("18 of the 36 layers attend over a 128-token sliding window")
    assert f"at most {saved / stage:.1%}" in said[0]
    unprofiled = [a for a in _gpt_oss_step(dataclasses.replace(PARTS, attention_first=None)) if "window" in a]
    assert unprofiled and "not bounded" in unprofiled[0]
    no_window = dataclasses.replace(PRESETS["gpt-oss-120b"], window_size=None, window_attn_skip_freq=None)
    assert not no_window.windowed_share


def test_model_step_note_bounds_the_step_and_the_speedups() -> None:
    from gemm_bench.report.model_step import ModelStep, attention_note

    config = PRESETS["gpt-oss-120b"]
    summary = ModelStep(config, "NVIDIA H200", "run", {}, {}, {}, {}, {}, 0, 0, 0,
                        window_saving={16: {"bf16": 0.061, "fp8-delayed": 0.067}})
    text = attention_note(summary)
    assert text is not None and text.startswith("18 of the 36 layers attend over a 128-token sliding window")
    assert "at most 6.1% (BF16), 6.7% (FP8 Delayed)" in text
    assert f"more than {(1 - 0.061) / (1 - 0.067) - 1:.1%}" in text
    assert "attention sinks" in text and text.endswith("what a window saves.")  # gpt-oss has sinks
    no_sinks = dataclasses.replace(summary, config=dataclasses.replace(config, attention_sinks=False))
    assert "sinks" not in (attention_note(no_sinks) or "")
    assert attention_note(dataclasses.replace(no_sinks, window_saving={})) is None
    sinks_only = attention_note(dataclasses.replace(summary, window_saving={}))
    assert sinks_only is not None and sinks_only.startswith("Its attention sinks")
    assert "window" not in sinks_only  # no window to take back from
    said = [a for a in _gpt_oss_step(PARTS) if "sinks" in a]
    assert said and said[0] in text  # the layout step's assumption and the note say it in one wording
    assert "not bounded" in (attention_note(dataclasses.replace(summary, window_saving={16: {"bf16": None}})) or "")


def test_attention_sinks_are_read_and_said_not_timed() -> None:
    assert config_from_hf(HF / "gpt-oss-120b.json").attention_sinks
    assert PRESETS["gpt-oss-120b"].attention_sinks and not PRESETS["gemma2-27b"].attention_sinks
    base = "--num-layers 12 --hidden-size 1024 --num-attention-heads 8 "
    fields, ignored = megatron_args_to_fields(split_megatron_args(base + "--softmax-type learnable"))
    assert fields["attention_sinks"] is True and ignored == []
    fields, ignored = megatron_args_to_fields(split_megatron_args(base + "--softmax-type vanilla"))
    assert "attention_sinks" not in fields and ignored == ["--softmax-type"]
    with pytest.raises(ConfigError, match="expected vanilla, off-by-one or learnable"):
        megatron_args_to_fields(split_megatron_args(base + "--softmax-type sink"))
    said = [a for a in _gpt_oss_step(PARTS) if "sinks" in a]
    assert said and "not timed" in said[0]
    assert build_question(model="gpt-oss-120b").hash == "19210ed9493a1e7a"  # unkeyed, as the window


def test_the_model_step_of_a_cached_result_reads_its_profiled_attention() -> None:
    from gemm_bench.report.model_step import model_step_summary
    from gemm_bench.results.typed import parse

    doc = json.loads((Path(__file__).parents[1] / "docs" / "_gemm_cache" / "2a6f44509a377c37--h200.json").read_text())
    asked = build_question(model="gpt-oss-120b/ep8").config
    assert isinstance(asked, ModelConfig)
    summary = model_step_summary(parse(doc), asked)
    assert summary is not None
    assert set(summary.window_saving) == set(summary.rows) == {1, 80}  # every G the table shows
    for saving in summary.window_saving.values():
        assert set(saving) == {"bf16", "fp8-delayed", "fp8-current", "fp8-block"}
        assert all(v is not None and 0 < v < 0.15 for v in saving.values())
    # the stored config of that result has no window (measured before it was read): no bound from it
    assert not model_step_summary(parse(doc)).window_saving  # type: ignore[union-attr]


# ------------------------------------------------------------------------------------ red team (session 20)
def test_the_share_counts_the_measured_layers_not_the_leading_dense_ones() -> None:
    # an MoE model with 2 leading dense layers (DeepSeek's first_k_dense_replace) and every other layer windowed:
    # layers 1, 3, 5 windowed; the measured (MoE) layers are 3, 4, 5, of which 2 are windowed. The model totals
    # count only the measured layers, so the bound must take 2/3 of their attention out, not 3/5.
    config = dataclasses.replace(PRESETS["gpt-oss-120b"], num_layers=5, moe_dense_layers=2)
    assert config.windowed_layers == 3
    assert config.windowed_share == pytest.approx(2 / 3)
    bound = without_windowed_attention(PARTS, config.windowed_share)
    assert bound is not None
    removed = config.measured_layers * (PARTS.layer_first - bound.layer_first)
    assert removed == pytest.approx(2 * 2.0)  # both windowed measured layers' attention (PARTS: 2 ms each)


def _stage_bound(config: ModelConfig, vpp: int | None = None) -> str:
    layout = dataclasses.replace(PRESET_LAYOUTS["gpt-oss-120b/ep8"].layout, overlap_grad_reduce=False,
                                 overlap_param_gather=False, vpp=vpp)
    step = layout_step(config, layout, "bf16", RecipeParts(PARTS, PARTS, PARTS), LINE, 10_000_000, TABLE,
                       network=NET)
    said = [a for a in step.compute_assumptions if "sliding window" in a]
    assert len(said) == 1
    return said[0]


def _most_saved(stages: list[tuple[float, int, int]], g: int) -> float:
    """1 - the slower stage with its windowed layers' attention out / the slower stage: (ends ms, layers,
    windowed layers) per stage, PARTS' layer and attention times."""
    def ms(ends: float, layers: float) -> float:
        return (g * ends + layers * (PARTS.layer_first + (g - 1) * PARTS.layer_cached)) / g

    attention = (2.0 + (g - 1) * 1.5) / g  # PARTS' attention_first and attention_cached
    full = max(ms(e, n) for e, n, _ in stages)
    return 1 - max(ms(e, n) - w * attention for e, n, w in stages) / full


def test_the_stage_bound_counts_the_windowed_layers_each_stage_holds() -> None:
    # 35 layers, every other one windowed (18), PP 4: the first stage holds layers 1-9, 5 of them windowed
    # (more than 18/35 of 9), and is the slower stage (9 layers and the embedding against 8 and the output
    # layer): taking its 5 windowed layers' attention out saves more than the model's share of it
    config = dataclasses.replace(PRESETS["gpt-oss-120b"], num_layers=35, expert_model_parallel_size=8,
                                 num_microbatches=80)
    most = _most_saved([(PARTS.embedding, 9, 5), (PARTS.head, 8, 4)], 80)
    assert f"at most {most:.1%}" in _stage_bound(config)
    # with virtual stages the chunks interleave: 36 layers, PP 4, VPP 9, chunks of one layer: the first stage
    # holds layers 1, 5, 9, ..., 33, every one windowed
    config = dataclasses.replace(config, num_layers=36)
    most = _most_saved([(PARTS.embedding, 9, 9), (PARTS.head, 9, 0)], 80)
    assert f"at most {most:.1%}" in _stage_bound(config, vpp=9)


def test_the_model_step_note_holds_for_every_g_the_table_shows() -> None:
    from gemm_bench.report.model_step import ModelStep, attention_note

    # the table shows G = 1 and the question's G; where the G = 1 row's bound is the larger (a layer_first whose
    # attention is a larger share than layer_cached's, a small optimizer), the note must say the larger, and
    # the speedup that moves most: FP8 Delayed at G = 1, (1 - 0.05) / (1 - 0.02) - 1 = -3.1%
    summary = ModelStep(PRESETS["gpt-oss-120b"], "NVIDIA H200", "run", {}, {}, {}, {}, {}, 0, 0, 0,
                        window_saving={16: {"bf16": 0.04, "fp8-delayed": 0.04}, 1: {"bf16": 0.05, "fp8-delayed": 0.02}})
    text = attention_note(summary)
    assert text is not None and "at most 5.0% (BF16), 4.0% (FP8 Delayed)" in text
    assert f"more than {1 - (1 - 0.05) / (1 - 0.02):.1%}" in text


@pytest.mark.parametrize(("flags", "shown"), [
    ("--window-size 128 0", "--window-size '128 0'"),  # two words: Megatron-LM's parser takes one
    ("--window-size 128, 0", "--window-size '128, 0'"),
    ("--window-size 128,0 --window-attn-skip-freq 2 3", "--window-attn-skip-freq '2 3'"),
])
def test_a_window_flag_of_several_words_is_refused_showing_them(flags: str, shown: str) -> None:
    base = "--num-layers 12 --hidden-size 1024 --num-attention-heads 8 "
    with pytest.raises(ConfigError, match=shown):
        megatron_args_to_fields(split_megatron_args(base + flags))


def test_cohere2_windows_all_but_every_fourth_layer(tmp_path: Path) -> None:
    # transformers' Cohere 2 (Command R7B) reads sliding_window_pattern (default 4) as Gemma 3 does: three
    # windowed layers, then a full one; read as "every layer", the page said all 32 were windowed
    for pattern in (4, None):
        read = config_from_hf(_hf(tmp_path, "llama3-8b", model_type="cohere2", sliding_window=4096,
                                  sliding_window_pattern=pattern))
        assert (read.window_attn_skip_freq, read.windowed_layers) == (4, 24)


def test_a_result_that_stores_its_window_reads_valid_under_its_old_name_and_reports_it() -> None:
    # A result measured from now on stores the window in its question's config: the door takes it, the file
    # keeps its name (the window is not keyed), and `gemm-bench report` prints the bound under the model step.
    import copy

    from gemm_bench.question.question import Question
    from gemm_bench.report import training_text
    from gemm_bench.report.report import Report
    from gemm_bench.results.schema import validate

    stored = json.loads((Path(__file__).parents[1] / "docs" / "_gemm_cache" / "2a6f44509a377c37--h200.json")
                        .read_text())
    assert "window_size" not in stored["question"]["config"]  # measured before the window was read
    doc = copy.deepcopy(stored)
    doc["question"]["config"].update(window_size=128, window_attn_skip_freq=2)
    validate(doc)
    assert Question.from_dict(doc["question"]).hash == "2a6f44509a377c37"
    said = [line for line in training_text.model_step_lines(Report(doc)) if "sliding window" in line]
    assert len(said) == 1 and "at most 6.1% (BF16)" in said[0]
    assert not [line for line in training_text.model_step_lines(Report(stored)) if "sliding window" in line]
