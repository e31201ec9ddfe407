"""The run's parallel layout (issue 41): ParallelLayout's rules, Megatron flags into it, preset layouts,
and that no layout work moves a committed result's question hash."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

from gemm_bench.question.config import (
    ConfigError,
    megatron_args_to_fields,
    megatron_ignored_reason,
    megatron_layout,
    split_megatron_args,
)
from gemm_bench.question.layout import PRESET_LAYOUTS, ParallelLayout
from gemm_bench.question.question import Question, build_question

CACHE = Path(__file__).resolve().parent.parent / "docs" / "_gemm_cache"

LLAMA70B_LINE = """torchrun --nnodes 8 --nproc-per-node 8 pretrain_gpt.py --num-layers 80 --hidden-size 8192 \\
  --ffn-hidden-size 28672 --num-attention-heads 64 --group-query-attention --num-query-groups 8 --swiglu \\
  --seq-length 8192 --micro-batch-size 1 --global-batch-size 128 --tensor-model-parallel-size 4 \\
  --sequence-parallel --pipeline-model-parallel-size 8 --num-layers-per-virtual-pipeline-stage 2 \\
  --context-parallel-size 2 --use-distributed-optimizer --recompute-granularity selective \\
  --overlap-grad-reduce --overlap-param-gather --fp8-param-gather --bf16 --lr 3e-4"""


def test_megatron_llama3_70b_line_gives_every_layout_value_and_ignores_none_of_them():
    argv = split_megatron_args(LLAMA70B_LINE)
    fields, ignored = megatron_args_to_fields(argv)
    assert ignored == ["--bf16", "--lr"]
    assert fields["tensor_model_parallel_size"] == 4 and fields["sequence_parallel"] is True
    layout_fields, layout_ignored = megatron_layout(argv)
    assert layout_ignored == []
    layout = ParallelLayout(**layout_fields)
    assert (layout.gpus, layout.tp, layout.sp, layout.pp, layout.vpp, layout.cp) == (64, 4, True, 8, 5, 2)
    assert (layout.dp, layout.global_batch_size, layout.micro_batch_size, layout.num_microbatches) == (1, 128, 1, 128)
    assert layout.sharding == "optimizer" and layout.recompute == "selective"
    assert layout.overlap_grad_reduce and layout.overlap_param_gather and layout.fp8_param_gather
    assert layout.describe() == ("64 GPUs: TP 4 with sequence parallel, PP 8 with 5 virtual stages, CP 2, DP 1, "
                                 "distributed optimizer, selective recomputation, FP8 parameter gather, "
                                 "overlapped gradient reduce and parameter gather, G = 128")


def test_context_parallel_is_no_longer_refused_and_layout_flags_are_not_ignored():
    argv = ["--hidden-size", "4096", "--num-attention-heads", "32", "--context-parallel-size", "2",
            "--pipeline-model-parallel-size", "2", "--global-batch-size", "64", "--recompute-num-layers", "1",
            "--data-parallel-sharding-strategy", "optim_grads_params", "--grad-reduce-in-bf16", "--num-gpus", "16"]
    _, ignored = megatron_args_to_fields(argv)
    assert ignored == []
    fields, ignored = megatron_layout(argv)
    assert fields["sharding"] == "fsdp" and fields["grad_reduce_dtype"] == "bf16" and fields["gpus"] == 16
    assert ignored == ["--recompute-num-layers"]
    assert megatron_ignored_reason("--recompute-num-layers") == "applies to --recompute-granularity full only"


def test_megatron_layout_full_block_recompute_and_virtual_size_flag():
    fields, _ = megatron_layout(["--num-layers", "32", "--pipeline-model-parallel-size", "4",
                                 "--virtual-pipeline-model-parallel-size", "2", "--recompute-granularity", "full",
                                 "--recompute-method", "block", "--recompute-num-layers", "2",
                                 "--num-nodes", "2", "--gpus-per-node", "8"])
    assert fields == {"pp": 4, "vpp": 2, "recompute": "full", "recompute_method": "block",
                      "recompute_num_layers": 2, "gpus": 16}


@pytest.mark.parametrize(("argv", "says"), [
    (["--num-layers", "80", "--pipeline-model-parallel-size", "8", "--num-layers-per-virtual-pipeline-stage", "3"],
     "--num-layers-per-virtual-pipeline-stage 3"),
    (["--num-layers", "80", "--pipeline-model-parallel-size", "8", "--num-layers-per-virtual-pipeline-stage", "2",
      "--virtual-pipeline-model-parallel-size", "4"], "--virtual-pipeline-model-parallel-size 4 disagrees"),
    (["--data-parallel-sharding-strategy", "zero9"], "--data-parallel-sharding-strategy"),
    (["--recompute-granularity", "some"], "--recompute-granularity"),
    (["--nnodes", "2"], "--nnodes needs its partner"),
])
def test_megatron_layout_errors_name_the_flag(argv, says):
    with pytest.raises(ConfigError, match=says.replace("(", r"\(")):
        megatron_layout(argv)


def test_layout_derives_dp_and_g_and_defaults_sequence_parallel_with_tp():
    layout = ParallelLayout(gpus=64, tp=4, pp=4, cp=2, global_batch_size=256, micro_batch_size=2)
    assert layout.dp == 2 and layout.num_microbatches == 64 and layout.sp is True
    assert ParallelLayout(gpus=8).sp is False and ParallelLayout(gpus=8).num_microbatches == 1
    assert ParallelLayout(gpus=8, num_microbatches=4).num_microbatches == 4


@pytest.mark.parametrize(("kwargs", "flag"), [
    ({"gpus": 60, "tp": 4, "pp": 8}, "--num-gpus"),
    ({"gpus": 8, "global_batch_size": 12}, "--global-batch-size"),
    ({"gpus": 8, "global_batch_size": 64, "num_microbatches": 4}, "--num-microbatches"),
    ({"gpus": 8, "sp": True}, "--sequence-parallel"),
    ({"gpus": 8, "sharding": "zero3"}, "--data-parallel-sharding-strategy"),
    ({"gpus": 8, "recompute": "some"}, "--recompute-granularity"),
    ({"gpus": 8, "vpp": 2}, "--virtual-pipeline-model-parallel-size"),
    ({"gpus": 8, "pp": 0}, "--pipeline-model-parallel-size"),
    ({"gpus": 8, "ep": 3}, "--expert-model-parallel-size"),
    ({"gpus": 8, "recompute_num_layers": 2}, "--recompute-num-layers"),
])
def test_layout_errors_name_the_megatron_flag(kwargs, flag):
    with pytest.raises(ConfigError) as info:
        ParallelLayout(**kwargs)
    assert str(info.value).startswith(flag + ":")


def test_every_measured_model_id_has_a_layout_at_its_measured_shard_with_a_source():
    """The layout's TP and EP are the measured layer's (memory per GPU composes that shard); a bare
    preset such as llama3-70b keeps the published TP 4 and has no measured shard of that size."""
    for path in sorted(CACHE.glob("*.json")):
        question = json.loads(path.read_text())["question"]
        if question["kind"] != "model":
            continue
        stored = Question.from_dict(question)
        config = stored.config
        assert config is not None
        model_id = next(i for i in PRESET_LAYOUTS if build_question(model=i).hash == stored.hash)
        preset = PRESET_LAYOUTS[model_id]
        assert preset.layout.tp == config.tensor_model_parallel_size, model_id
        assert preset.layout.ep == config.expert_model_parallel_size, model_id
    for preset in PRESET_LAYOUTS.values():
        assert preset.url or preset.source.startswith("chosen, not from a published recipe"), preset.source


def test_committed_results_keep_their_question_hash():
    """Every committed result's name is its question's hash: the stored question and the preset id's
    question both still hash to it (nothing typed: the names are read from docs/_gemm_cache)."""
    preset_hashes = {build_question(model=model_id).hash for model_id in PRESET_LAYOUTS}
    files = sorted(CACHE.glob("*.json"))
    assert files
    for path in files:
        prefix = path.name.split("--")[0]
        question = json.loads(path.read_text())["question"]
        assert Question.from_dict(question).hash == prefix, path.name
        if question["kind"] == "model":
            assert prefix in preset_hashes, path.name


# ------------------------------------------------------------------------ the layout in the question
ISSUE_LINE = ("torchrun --nnodes 16 --nproc-per-node 8 "
              + LLAMA70B_LINE.split("torchrun --nnodes 8 --nproc-per-node 8 ")[1])


def test_the_issues_llama3_70b_line_gives_a_question_whose_layout_holds_every_value(capsys):
    """Issue 41's first Done-when: TP 4 + SP, PP 8 with virtual stages, CP 2, GBS 128, distributed
    optimizer, selective recomputation, both overlap flags and FP8 parameter gather, none ignored."""
    from gemm_bench.cli.commands import main

    question = build_question(megatron_args=split_megatron_args(ISSUE_LINE))
    layout, config = question.layout, question.config
    assert layout is not None and config is not None
    assert (layout.gpus, layout.tp, layout.sp, layout.pp, layout.vpp, layout.cp) == (128, 4, True, 8, 5, 2)
    assert layout.dp == 2
    assert (layout.global_batch_size, layout.micro_batch_size, layout.microbatches) == (128, 1, 64)
    assert (layout.sharding, layout.recompute) == ("optimizer", "selective")
    assert layout.overlap_grad_reduce and layout.overlap_param_gather and layout.fp8_param_gather
    assert config.tensor_model_parallel_size == 4 and config.sequence_parallel and config.num_microbatches == 64
    assert question.ignored_flags == ("--bf16", "--lr")
    assert main(["shapes", "--megatron-args", ISSUE_LINE]) == 0
    out = capsys.readouterr().out
    ignored = [line for line in out.splitlines() if line.startswith("ignored")]
    assert ignored == ["ignored (changes no GEMM and no memory the layout models): --bf16 --lr"]
    assert ("layout: 128 GPUs: TP 4 with sequence parallel, PP 8 with 5 virtual stages, CP 2, DP 2, distributed "
            "optimizer, selective recomputation, FP8 parameter gather, overlapped gradient reduce and "
            "parameter gather, G = 64") in " ".join(out.split())
    assert max(map(len, out.splitlines())) <= 100


def test_no_layout_option_changes_the_question_hash_and_each_lands_in_the_layout():
    from gemm_bench.question.layout import LAYOUT_OPTIONS

    base = build_question(model="llama3-70b/tp8")
    assert base.layout == PRESET_LAYOUTS["llama3-70b/tp8"].layout  # the preset's published layout applies
    for given in ({"pp": 8}, {"vpp": 2}, {"cp": 1}, {"gpus": 256}, {"global_batch_size": 512},
                  {"sharding": "fsdp"}, {"recompute": "full", "recompute_method": "block", "recompute_num_layers": 2},
                  {"fp8_param_gather": True}, {"grad_reduce_dtype": "bf16"}, {"overlap_grad_reduce": True},
                  {"overlap_param_gather": True}, {"etp": 8}):
        q = build_question(model="llama3-70b/tp8", layout=given)
        assert q.hash == base.hash == "c1b9aa6aaebc8435", given
        assert q.layout is not None and all(getattr(q.layout, k) == v for k, v in given.items()), given
    # A page's field overrides that field alone: the rest stays the preset's.
    q = build_question(model="llama3-70b/tp8", layout={"cp": 1})
    assert q.layout is not None
    assert (q.layout.gpus, q.layout.pp, q.layout.vpp, q.layout.cp, q.layout.dp) == (128, 4, 5, 1, 4)
    assert q.config is not None and q.config.num_microbatches == 256 // 4  # G follows GBS / (MBS x DP)
    assert {o.field for o in LAYOUT_OPTIONS} <= set(dataclasses.asdict(base.layout))


def test_a_hugging_face_config_plus_layout_fields_and_a_stored_question_round_trip():
    hf = Path(__file__).resolve().parent / "data" / "hf" / "llama3-8b.json"
    q = build_question(hf_config=hf, fields={"seq_length": 8192}, layout={"gpus": 16, "pp": 2, "sharding": "fsdp"})
    assert q.layout is not None
    assert (q.layout.gpus, q.layout.pp, q.layout.dp, q.layout.sharding) == (16, 2, 8, "fsdp")
    assert q.hash == build_question(model="llama3-8b").hash
    assert Question.from_dict(q.to_dict()) == q
    with pytest.raises(ConfigError) as info:
        build_question(hf_config=hf, layout={"gpus": 12, "pp": 8})
    assert info.value.field == "gpus"


def test_a_result_stored_before_the_layout_existed_says_what_it_assumed(capsys):
    from gemm_bench.cli.commands import main

    path = CACHE / "45a55c5d892e31af--h200.json"
    stored = Question.from_dict(json.loads(path.read_text())["question"])
    assert stored.layout is None
    layout, said = stored.layout_or_assumed()
    assert layout is not None
    # the stored G: 32 since session 16's H200 refresh asked the preset layout's G
    assert (layout.gpus, layout.dp, layout.sharding, layout.microbatches) == (1, 1, "none", 32)
    assert "the result stores no layout (measured before results kept theirs)" in said
    assert main(["report", str(path)]) == 0
    out = capsys.readouterr().out
    assert "layout (assumed): 1 GPU: DP 1, no optimizer sharding, G = 32;" in out
    assert "memory per GPU (only stage" in out and max(map(len, out.splitlines())) <= 100


def test_directive_layout_options_reach_the_question_and_bad_ones_name_the_option(tmp_path):
    from gemm_benchmark.options import OptionError, parse_options

    request = parse_options({"model": "llama3-8b", "pp": "2", "gpus": "16", "fp8-param-gather": ""},
                            srcdir=tmp_path, docdir=tmp_path)
    layout = request.question.layout
    assert layout is not None
    assert (layout.pp, layout.gpus, layout.cp, layout.fp8_param_gather) == (2, 16, 2, True)
    assert request.question.hash == build_question(model="llama3-8b").hash
    with pytest.raises(OptionError) as info:
        parse_options({"model": "llama3-8b", "sharding": "zero3"}, srcdir=tmp_path, docdir=tmp_path)
    assert info.value.option == "sharding" and "zero3" in info.value.message
    with pytest.raises(OptionError) as info:
        parse_options({"model": "llama3-8b", "gpus": "15"}, srcdir=tmp_path, docdir=tmp_path)
    assert info.value.option == "gpus" and "not divisible" in info.value.message


def test_cli_layout_flags_and_their_aliases(capsys):
    from gemm_bench.cli.commands import main

    assert main(["shapes", "--model", "llama3-70b", "--tp", "8", "--pp", "8", "--vpp", "5", "--gpus", "128",
                 "--gbs", "128", "--recompute", "full", "--no-sequence-parallel", "--cache-dir", "/nonexistent"]) == 0
    out = " ".join(capsys.readouterr().out.split())
    assert ("layout: 128 GPUs: TP 8, PP 8 with 5 virtual stages, CP 2, DP 1, distributed optimizer, full "
            "recomputation, FP8 parameter gather, BF16 gradient reduce, overlapped gradient reduce and parameter "
            "gather, G = 128") in out  # the preset's flags
    with pytest.raises(SystemExit) as exited:
        main(["shapes", "--model", "llama3-8b", "--sharding", "zero3"])
    assert exited.value.code == 2
    assert "--sharding: 'zero3' is not one of none, optimizer" in capsys.readouterr().err


def test_the_overlap_flags_are_in_the_layout_words() -> None:
    """Reviewer, session 15: the Llama 3 8B page and the Published runs page quoted different tokens/s for
    the same words, one layout with the overlap flags and one without."""
    from gemm_bench.question.layout import ParallelLayout

    plain = ParallelLayout(gpus=8, cp=2, sharding="optimizer", global_batch_size=128)
    both = ParallelLayout(gpus=8, cp=2, sharding="optimizer", global_batch_size=128, overlap_grad_reduce=True,
                          overlap_param_gather=True)
    assert "overlap" not in plain.describe()
    assert "overlapped gradient reduce and parameter gather" in both.describe()
    assert plain.describe() != both.describe()


@pytest.mark.parametrize(("fields", "said"), [({"pp": 64, "gpus": 128}, "pp"), ({"cp": 3}, "cp")])
def test_a_layout_the_model_rules_out_is_refused_by_field(fields: dict, said: str) -> None:
    """Reviewer, session 15: PP 64 on Llama 3 8B's 32 layers composed a stage of -31 layers that "fits";
    CP 3 on 8192 tokens was drawn as fitting. Both now name their option."""
    from gemm_bench.question.config import ConfigError
    from gemm_bench.question.question import build_question

    with pytest.raises(ConfigError) as found:
        build_question(model="llama3-8b", layout=fields)
    assert found.value.field.lstrip("-").startswith(said) or said in str(found.value), found.value


def test_a_new_result_keeps_its_questions_layout_and_a_bad_one_is_refused():
    """A result now stores the layout its question asked (session 16: the H200 refresh's results
    were stored without it, so every reader had to assume one); the schema refuses a stored layout
    that is not one."""
    from gemm_bench.results.schema import ResultError, new_document, validate

    q = build_question(model="llama3-8b")
    assert q.layout is not None
    doc = new_document(kind=q.kind, gemms=list(q.gemms), num_layers=q.num_layers, config=q.config.to_dict(),
                       device={"name": "NVIDIA H200", "compute_capability": "9.0"}, provenance={},
                       layout=dataclasses.asdict(q.layout), layout_note=q.layout_note)
    stored = Question.from_dict(doc["question"])
    assert stored.layout == q.layout and stored.layout_or_assumed() == (q.layout, "")
    assert doc["question_hash"] == q.hash  # not hashed
    bad = json.loads(json.dumps(doc))
    bad["question"]["layout"]["cp"] = 0
    with pytest.raises(ResultError, match=r"\$\.question\.layout"):
        validate(bad)


def test_the_megatron_bridge_presets_overlap_the_data_parallel_collectives() -> None:
    # Megatron-Bridge's Llama recipes set cfg.ddp.overlap_grad_reduce and overlap_param_gather (and
    # CommOverlapConfig turns both on with the distributed optimizer at DP > 1): the presets built on them say so.
    bridge = ("llama3-8b", "llama3-70b", "llama3-70b/tp8", "llama3.1-405b", "llama3.1-405b/tp8", "qwen2.5-7b",
              "qwen2.5-72b", "qwen2.5-72b/tp8", "gpt-oss-120b/ep8")
    for model_id in bridge:
        preset = PRESET_LAYOUTS[model_id]
        assert preset.layout.overlap_grad_reduce and preset.layout.overlap_param_gather, model_id
        assert "(overlap_grad_reduce, overlap_param_gather), as Megatron-Bridge's" in preset.source, model_id
        # Bridge's performance recipes: BF16 gradients (grad_reduce_in_fp32 = False), FP8 primary weights.
        assert preset.layout.grad_reduce_dtype == "bf16" and preset.layout.fp8_param_gather, model_id
        assert "grad_reduce_in_fp32 = False" in preset.source and "fp8_param_gather" in preset.source, model_id
        assert preset.layout.dp > 1 and preset.layout.sharding == "optimizer", model_id
        assert "overlapped gradient reduce and parameter gather" in preset.layout.describe()
        assert "overlapped" not in preset.layout.describe(overlap=False)
    # Megatron-LM's Mixtral example overlaps both too (examples/mixtral/train_mixtral_8x7b_distributed.sh)
    megatron = {"mixtral-8x7b/ep8"}
    for model_id in megatron:
        preset = PRESET_LAYOUTS[model_id]
        assert preset.layout.overlap_grad_reduce and preset.layout.overlap_param_gather, model_id
        assert "--overlap-grad-reduce and --overlap-param-gather" in preset.source, model_id
    others = set(PRESET_LAYOUTS) - set(bridge) - megatron
    assert not any(PRESET_LAYOUTS[m].layout.overlap_grad_reduce for m in others)  # chosen layouts: Megatron's default
    assert not any(PRESET_LAYOUTS[m].layout.fp8_param_gather or PRESET_LAYOUTS[m].layout.grad_reduce_dtype != "fp32"
                   for m in others)


def test_a_context_parallel_layout_says_the_gemms_are_the_whole_sequence_s() -> None:
    """Llama 3 8B's published layout has CP 2: the GEMM table's 8,192 tokens are not one rank's 4,096, and
    the question's notes (printed by ``shapes``, stored with a result) say so; CP 1 says nothing."""
    notes = build_question(model="llama3-8b").notes
    assert any(n.startswith("Context parallel 2: each rank holds 1/2 of the sequence's 8192 tokens") for n in notes)
    assert not any(n.startswith("Context parallel") for n in build_question(model="qwen2.5-7b").notes)


def test_a_block_recomputation_says_how_many_layers_it_recomputes() -> None:
    """Red team, session 19: 5 of 32 layers recomputed by the block method read "full recomputation"."""
    from gemm_bench.question.layout import ParallelLayout

    block = ParallelLayout(gpus=8, recompute="full", recompute_method="block", recompute_num_layers=5)
    assert "full recomputation of 5 layer(s) per stage (block)" in block.describe()
    assert "full recomputation" in ParallelLayout(gpus=8, recompute="full").describe()
    assert "selective recomputation" in ParallelLayout(gpus=8, recompute="selective").describe()


@pytest.mark.parametrize("text", ["llama3-8b", "llama3-70b/tp8", "deepseek-v3/ep64", "mixtral-8x22b/tp2/ep4"])
def test_a_model_id_writes_back_as_it_was_read(text: str) -> None:
    """ModelId.text is parse_model_id's inverse: the one writer of ids (the summary's entries, a published
    row's model at the run's EP)."""
    from gemm_bench.question.config import parse_model_id

    assert parse_model_id(text).text() == text
