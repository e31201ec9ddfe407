"""The one stage split and expert-parallel weight factor that memory per GPU and the layout's step share
(:mod:`gemm_bench.question.stage_shape`), against hand counts, and the two compositions reading it."""

from __future__ import annotations

import dataclasses

import pytest

from gemm_bench.question.config import ConfigError, ModelConfig
from gemm_bench.question.layout import ParallelLayout
from gemm_bench.question.layout_step import RecipeParts, layout_step
from gemm_bench.question.model_step import PartTimes, layer_parameters
from gemm_bench.question.stage_shape import Stage, stage_shape
from tests.test_layout_step import LAYER_PARAMS, LINE, NET, TABLE

DENSE = ModelConfig(hidden_size=1024, ffn_hidden_size=4096, num_attention_heads=8, num_layers=126, seq_length=1024,
                    micro_batch_size=1, tensor_model_parallel_size=2, vocab_size=32000)


def test_pp_1_is_one_stage_with_both_ends() -> None:
    shape = stage_shape(ParallelLayout(gpus=2, tp=2), DENSE)
    assert shape.stages == (Stage("only", 126, True, True),)
    assert shape.first.vocab_ends == 2 and shape.weight_scale == 1.0


def test_an_uneven_split_puts_ceil_on_the_first_stage_and_the_rest_on_the_last() -> None:
    # Llama 3.1 405B's 126 layers on PP 8: 16 on the first stage, 126 - 7 x 16 = 14 on the last.
    shape = stage_shape(ParallelLayout(gpus=16, tp=2, pp=8), DENSE)
    assert shape.stages == (Stage("first", 16, True, False), Stage("last", 14, False, True))
    assert shape.first_layers == 16 and shape.first.vocab_ends == 1


def test_the_last_stage_never_holds_fewer_than_no_layers() -> None:
    # 5 layers on PP 4: ceil(5 / 4) = 2 on the first stage leaves 5 - 3 x 2 = -1: the last holds none.
    five = dataclasses.replace(DENSE, num_layers=5)
    assert stage_shape(ParallelLayout(gpus=8, tp=2, pp=4), five).stages[1] == Stage("last", 0, False, True)


def test_expert_parallelism_scales_by_the_parameter_count_at_the_layouts_ep() -> None:
    moe = dataclasses.replace(DENSE, tensor_model_parallel_size=1, num_experts=8, moe_router_topk=2)
    expected = layer_parameters(dataclasses.replace(moe, expert_model_parallel_size=4)) / layer_parameters(moe)
    assert expected < 1
    assert stage_shape(ParallelLayout(gpus=4, ep=4), moe).weight_scale == expected
    assert stage_shape(ParallelLayout(gpus=1), moe).weight_scale == 1.0  # the measured EP


def test_another_tp_or_an_expert_tp_other_than_tp_is_refused_naming_the_option() -> None:
    with pytest.raises(ConfigError, match=r"--tensor-model-parallel-size: .*measure the layer at TP 4"):
        stage_shape(ParallelLayout(gpus=4, tp=4), DENSE)
    with pytest.raises(ConfigError, match="--etp: expert tensor parallelism other than TP"):
        stage_shape(ParallelLayout(gpus=4, tp=2, etp=4), DENSE)


def test_the_layout_step_weighs_a_last_stage_of_no_layers_as_its_output_layer_alone() -> None:
    # Before the shared helper the step's last stage of an uneven split was given -1 layers, which
    # subtracted a layer's time from the output layer's: here 30 - 9 / 4 ms instead of 30.
    five = dataclasses.replace(DENSE, num_layers=5)
    parts = PartTimes(embedding=0.5, head=30.0, layer_first=3.0, layer_cached=2.0)
    step = layout_step(five, ParallelLayout(gpus=8, tp=2, pp=4, num_microbatches=4), "bf16",
                       RecipeParts(parts, parts, parts), LINE, LAYER_PARAMS, TABLE, network=NET)
    first = (4 * 0.5 + 2 * (3.0 + 3 * 2.0)) / 4
    assert first < 30.0 and step.compute_ms == pytest.approx(30.0)
    assert step.layers == 2
