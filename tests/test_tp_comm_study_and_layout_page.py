"""Issue 42's tp-comm study (validated, rendered from the file alone) and issue 41's layout table (every
number the composition's, from the committed cache)."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest

from gemm_bench.question.layout import PRESET_LAYOUTS
from gemm_bench.question.memory_per_gpu import memory_per_gpu
from gemm_bench.question.question import Question
from gemm_bench.results import studies
from gemm_bench.results import tp_comm_schema as schema
from gemm_bench.results.cache import read_document
from gemm_bench.results.model_step_schema import memory_parts
from gemm_bench.results.typed import parse
from gemm_benchmark.layout_memory import memory_rows
from gemm_benchmark.study_tp_comm import rows

CACHE = Path(__file__).resolve().parents[1] / "docs" / "_gemm_cache"
STUDY = CACHE / "studies" / "tp-comm--h200.json"
LLAMA_8B_H100 = CACHE / "45a55c5d892e31af--h100-80gb-hbm3.json"


def test_the_committed_study_is_valid_and_every_row_is_its_numbers() -> None:
    doc = studies.read_study(STUDY)
    data = doc["data"]
    table = rows(data)
    assert len(table) == len(data["cells"])
    first = data["cells"][0]["regions"]["first"]
    assert table[0][5].text.startswith(f"{1 - first['compute_ms'] / first['real_ms']:.0%}")
    assert table[0][6].text.startswith(f"{first['composed_over_real']:.3f}")


@pytest.mark.parametrize("field", ["composed_ms", "composed_over_real", "real_ms"])
def test_a_doctored_region_is_refused(field: str) -> None:
    doc = json.loads(STUDY.read_text(encoding="utf-8"))
    bad = copy.deepcopy(doc)
    bad["data"]["cells"][0]["regions"]["first"][field] *= 1.5
    with pytest.raises(studies.StudyError):
        schema.validate_data(bad["data"])


def test_a_failed_cell_says_why() -> None:
    data = copy.deepcopy(studies.read_study(STUDY)["data"])
    data["cells"][0] = {"model": "llama3-8b", "tp": 2, "precision": "bf16", "status": "failed",
                        "reason": "RuntimeError: NCCL timeout"}
    schema.validate_data(data)
    assert rows(data)[0][3].text == "failed: RuntimeError: NCCL timeout"


def test_the_layout_table_quotes_the_composition_of_the_cached_parts() -> None:
    doc = read_document(LLAMA_8B_H100)
    table, why = memory_rows(parse(doc), "llama3-8b")
    assert why is None and len(table) == len(doc["model_step"]["memory"])
    block = doc["model_step"]
    config = Question.from_dict(doc["question"]).config
    assert config is not None
    mem = memory_per_gpu(memory_parts(block, "bf16"), int(block["layer_params"]), config,  # type: ignore[arg-type]
                         PRESET_LAYOUTS["llama3-8b"].layout, capacity=int(block["capacity_bytes"]), precision="bf16")
    assert table[0][1].text == f"{mem.total / (1 << 30):.1f} GiB"
    assert table[0][2].text.startswith("yes" if mem.fits else "no")


def test_a_result_without_memory_parts_is_said_not_shown() -> None:
    doc = copy.deepcopy(dict(read_document(LLAMA_8B_H100)))
    doc["model_step"]["memory"] = {}
    assert memory_rows(parse(doc), "llama3-8b") == ([], "no model step with its memory parts in this result "
                                                        "(a GPU refresh measures it)")


def test_a_result_whose_question_this_code_cannot_read_back_is_said_not_composed(tmp_path: Path) -> None:
    """A schema-valid cached result whose stored config holds a field this code no longer has (a retired
    one): the panel read ``Question.from_dict(doc["question"])`` raw, which raised ValueError and crashed
    the build; the typed result's question is None, and the table says why it composes nothing."""
    from gemm_bench.results.cache import file_name
    from gemm_benchmark.layout_memory import UNREAD_QUESTION

    doc = copy.deepcopy(dict(read_document(LLAMA_8B_H100)))
    doc["question"]["config"]["retired_field"] = 1
    path = tmp_path / file_name(doc["question_hash"], doc["device"]["name"])
    path.write_text(json.dumps(doc), encoding="utf-8")
    result = parse(read_document(path))  # through the door: schema-valid
    assert result.question is None and result.model_step is not None and result.model_step.memory
    assert memory_rows(result, "llama3-8b") == ([], UNREAD_QUESTION)


LLAMA_70B_LINE = ("--num-layers 80 --hidden-size 8192 --ffn-hidden-size 28672 --num-attention-heads 64 "
                  "--group-query-attention --num-query-groups 8 --swiglu --seq-length 8192 --micro-batch-size 1 "
                  "--tensor-model-parallel-size 4 --sequence-parallel --pipeline-model-parallel-size 8 "
                  "--num-layers-per-virtual-pipeline-stage 2 --context-parallel-size 2 --global-batch-size 128 "
                  "--use-distributed-optimizer --recompute-granularity selective --overlap-grad-reduce "
                  "--overlap-param-gather --fp8-param-gather")


def test_shapes_prints_the_layout_of_a_pasted_launch_line(capsys: pytest.CaptureFixture[str]) -> None:
    """Issue 41's Done-when line: every layout value held, none of its flags ignored."""
    from gemm_bench.cli.commands import main

    assert main(["shapes", "--megatron-args", LLAMA_70B_LINE + " --num-gpus 128"]) == 0
    out = " ".join(capsys.readouterr().out.split())
    assert ("layout: 128 GPUs: TP 4 with sequence parallel, PP 8 with 5 virtual stages, CP 2, DP 2, distributed "
            "optimizer, selective recomputation, FP8 parameter gather, overlapped gradient reduce and "
            "parameter gather, G = 64") in out
    assert "ignored" not in out
    assert main(["shapes", "--megatron-args", LLAMA_70B_LINE + " --num-gpus 100"]) == 2
    err = " ".join(capsys.readouterr().err.split())
    assert "--num-gpus: 100 GPUs are not divisible by TP x PP x CP" in err


def test_report_prints_each_tp_comm_cell_from_the_file(capsys: pytest.CaptureFixture[str]) -> None:
    from gemm_bench.cli.commands import main

    assert main(["report", str(STUDY)]) == 0
    out = capsys.readouterr().out
    assert "no per-value summary" not in out
    first = studies.read_study(STUDY)["data"]["cells"][0]["regions"]["first"]
    assert f"real {first['real_ms']:.2f} ms" in out and f"composed/real {first['composed_over_real']:.3f}" in out
