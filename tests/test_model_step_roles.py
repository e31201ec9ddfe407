"""The model step's roles on a page (issue 32): every new quantity quoted from the directive's
record, G selectable, and every value a role cannot give a located warning with its reason (the
H200 result without a model step, a G the step is not composed for, a bad G word), never a silent
n/a."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from gemm_bench.question.question import build_question
from gemm_bench.report.model_step import GIB
from gemm_bench.report.report import Report
from tests.fake_model_step import model_step_block

from .conftest import H100, H200, make_document
from .test_correctness import Project

PRECISIONS = ("bf16", "fp8-delayed", "fp8-current")
DIRECTIVE = (".. gemm-benchmark::\n   :name: l8\n   :model: llama3-8b\n   :precisions: bf16, fp8-delayed, "
             "fp8-current\n   :modes: autocast\n   :devices: h100, h200\n   :show: provenance\n\n")


@pytest.fixture
def project(tmp_path: Path) -> Project:
    return Project(tmp_path)


def _store(project: Project, **block: object) -> dict:
    q = build_question(model="llama3-8b")
    doc = make_document(q, device=H100, precisions=PRECISIONS, modes=("autocast",))
    assert q.config is not None
    doc["model_step"] = model_step_block(q.config, doc["run_id"], PRECISIONS, **block)  # type: ignore[arg-type]
    project.store(doc)
    project.store(make_document(q, device=H200, precisions=PRECISIONS, modes=("autocast",), speed=1.2))
    return doc


def _values(project: Project) -> dict[str, tuple[str, str]]:
    """Each list item's role value: {item name: (text, title)}."""
    return {a.find_parent("li").get_text().split(":")[0]: (a.get_text(), a["title"])
            for a in project.html().select("li abbr")}


def test_every_model_step_role_quotes_the_directives_own_numbers_at_either_g(project: Project) -> None:
    doc = _store(project, largest={"bf16": 1, "fp8-delayed": 2, "fp8-current": 2})
    lines = {
        "tokens": ":gemm-tokens:`l8@h100 layer-graphed fp8-delayed`",
        "tokens1": ":gemm-tokens:`l8@h100 layer-graphed fp8-delayed G=1`",
        "tokens32": ":gemm-tokens:`l8@h100 layer-graphed fp8-delayed G=32`",
        "mfu": ":gemm-mfu:`l8@h100 layer-graphed bf16`",
        "tflops": ":gemm-model-tflops:`l8@h100 layer-graphed fp8-current g1`",
        "speedup": ":gemm-model-speedup:`l8@h100 layer-graphed fp8-current`",
        "speedup1": ":gemm-model-speedup:`l8@h100 layer-graphed fp8-current G=1`",
        "fastest": ":gemm-model-speedup:`l8@h100 layer-graphed fastest`",
        "memory": ":gemm-memory:`l8@h100 layer-graphed fp8-delayed`",
        "delta": ":gemm-memory-delta:`l8@h100 layer-graphed fp8-delayed`",
        "same": ":gemm-memory-delta:`l8@h100 layer-graphed bf16`",
        "largest": ":gemm-largest-microbatch:`l8@h100 layer-graphed fp8-current`",
        # a role's words broken across lines (the authoring page's phone-width example does so)
        "broken": ":gemm-tokens:`l8@h100\n  layer-graphed fp8-delayed`",
    }
    project.page("index", "T\n=\n\n" + DIRECTIVE + "".join(f"- {k}: {v}\n" for k, v in lines.items()))
    warnings, _ = project.build()
    assert "WARNING" not in warnings, warnings
    got = _values(project)
    summary = Report(doc).model_step()
    assert summary is not None and summary.microbatches == 32  # the preset layout's global batch: 128 over DP 4
    d8, d1 = summary.row("fp8-delayed"), summary.row("fp8-delayed", 1)
    c8, c1, b8 = summary.row("fp8-current"), summary.row("fp8-current", 1), summary.row("bf16")
    assert d8 and d1 and c8 and c1 and b8 and c8.speedup and c1.speedup and b8.mfu
    assert got["tokens"][0] == got["tokens32"][0] == f"{d8.tokens_per_s:,.0f}"
    assert got["tokens1"][0] == f"{d1.tokens_per_s:,.0f}" != got["tokens"][0]
    assert got["mfu"][0] == f"{b8.mfu:.0%}"
    assert got["tflops"][0] == f"{c1.tflops:.0f} TFLOP/s"
    assert got["speedup"][0] == f"{c8.speedup:.2f}×" and "spread" in got["speedup"][1]
    assert got["speedup1"][0] == f"{c1.speedup:.2f}×"
    assert d8.speedup and got["fastest"][0] == f"{d8.speedup:.2f}×" and "FP8 Delayed" in got["fastest"][1]
    delayed, bf16 = summary.memory["fp8-delayed"], summary.memory["bf16"]
    assert got["memory"][0] == f"{delayed.peak / GIB:.1f} GiB" and "layers fit" in got["memory"][1]
    assert got["delta"][0] == f"{(delayed.peak - bf16.peak) / GIB:.1f} GiB more"
    assert got["same"][0] == "the same"
    assert got["largest"][0] == "2"
    assert got["broken"] == got["tokens"]


@pytest.mark.parametrize(("role", "problem"), [
    (":gemm-tokens:`l8@h200 layer-graphed bf16`", "no model step in this result"),
    (":gemm-memory:`l8@h200 layer-graphed fp8-current`", "no model step in this result"),
    (":gemm-model-speedup:`l8@h200 layer-graphed fastest`", "no model step in this result"),
    (":gemm-mfu:`l8 layer-graphed bf16 G=4`", "composed for G=1 and the question's G=32 only, not G=4"),
    (":gemm-tokens:`l8 layer-graphed bf16 G=0`", "'G=0' is not a G of at least 1"),
    (":gemm-tokens:`l8 autocast bf16`", "quotes the model's step, composed of GPU times: its mode word is "
                                        "layer-graphed, not 'autocast'"),
    (":gemm-model-breakdown:`l8 layer fp8-current less`", "its mode word is layer-graphed, not 'layer'"),
    (":gemm-model-breakdown:`l8@h200 layer-graphed fp8-current less`", "no model step in this result"),
    (":gemm-memory:`l8 layer-graphed bf16 G=1`", "expects"),
    (":gemm-largest-microbatch:`l8 layer-graphed bf16`", "not searched on the GPU"),
    (":gemm-tokens:`l8 layer-graphed fp8-current`", "failed: CUDA out of memory"),
])
def test_a_model_step_value_that_is_not_there_is_a_located_warning(project: Project, role: str, problem: str) -> None:
    """The H200 result has no model step yet; a role quoting it (or a G not composed, a bad G word, a
    recipe whose parts failed) warns at its own line with the reason, and reads n/a or failed."""
    _store(project, failed={"fp8-current": "CUDA out of memory"})
    project.page("index", "T\n=\n\n" + DIRECTIVE + f"The value: {role}.\n")
    warnings, _ = project.build()
    assert re.search(r"index\.rst:1\d: WARNING: .*" + re.escape(problem), warnings), warnings
    text = project.html().select_one("article, div.body, body").get_text()
    shown = re.escape(role.split("`")[1])  # a role refused while reading shows its text, as code
    assert re.search(r"The value: (n/a|failed[^.]*|" + shown + r")\.", " ".join(text.split())), text


def test_the_authoring_reference_lists_every_model_step_role() -> None:
    from gemm_benchmark.model_step_values import MODEL_STEP_KINDS
    from gemm_benchmark.roles import ROLES

    for kind in MODEL_STEP_KINDS:
        spec = ROLES[kind]
        assert spec.description and spec.example.startswith("llama layer-graphed"), kind


@pytest.mark.parametrize(("before", "role", "problem"), [
    ("On the H100 the model trains FP8 Delayed at ", "gemm-step-speedup", False),  # no unit named
    ("FP8 Delayed gives the tokens per second of BF16 times ", "gemm-step-speedup", True),
    ("the model's training step runs ", "gemm-step-speedup", True),
    ("G = 8, where one layer's step gains ", "gemm-step-speedup", False),
    ("FP8 Delayed gives ", "gemm-model-speedup", False),
    ("one layer's step gains ", "gemm-model-speedup", True),
    ("the layer trains ", "gemm-tokens", True),
    ("the model's step of 32 layers trains ", "gemm-tokens", False),
])
def test_a_step_quoted_under_the_other_steps_name_is_a_claim_problem(before: str, role: str, problem: bool) -> None:
    """One layer's step and the model's whole step are different numbers (issue 32): a role of one
    introduced by the other's words states a number the site does not have."""
    from gemm_benchmark.words import noun_problem

    assert bool(noun_problem(before, role, "x")) is problem


def test_a_mixture_of_experts_role_without_a_model_step_names_the_next_refresh(project: Project) -> None:
    """A reader pass: a Mixtral `gemm-tokens` role warned "no model step in this result for this question
    (its vocabulary, or not measured)", which named neither; this code measures a mixture of experts'
    model step, so a result lacking it is one the next refresh brings, and the warning says so."""
    q = build_question(model="mixtral-8x7b")
    project.store(make_document(q, device=H100, precisions=PRECISIONS, modes=("autocast",)))
    directive = DIRECTIVE.replace("llama3-8b", "mixtral-8x7b").replace(":name: l8", ":name: mx").replace(
        "h100, h200", "h100")
    project.page("index", "T\n=\n\n" + directive + "The value: :gemm-tokens:`mx layer-graphed bf16`.\n")
    warnings, _ = project.build()
    assert re.search(r"index\.rst:1\d: WARNING: .*no model step .*next refresh", warnings), warnings
    assert "dense layers only" not in warnings


def test_a_role_on_a_question_without_a_vocabulary_says_why_and_promises_no_refresh(project: Project) -> None:
    """A question given by its sizes without a vocabulary has no model step any refresh could measure:
    the role's warning gives that reason (the vocabulary) and promises no refresh."""
    fields = {"hidden_size": 1024, "num_attention_heads": 8, "ffn_hidden_size": 4096, "seq_length": 2048,
              "num_layers": 2}
    q = build_question(fields=fields)
    assert q.config is not None and q.config.vocab_size is None
    project.store(make_document(q, device=H100, precisions=PRECISIONS, modes=("autocast",)))
    directive = (".. gemm-benchmark::\n   :name: nv\n   :hidden-size: 1024\n   :num-attention-heads: 8\n"
                 "   :ffn-hidden-size: 4096\n   :seq-length: 2048\n   :num-layers: 2\n   :precisions: bf16, "
                 "fp8-delayed, fp8-current\n   :modes: autocast\n   :devices: h100\n   :show: provenance\n\n")
    project.page("index", "T\n=\n\n" + directive + "The value: :gemm-tokens:`nv layer-graphed bf16`.\n")
    warnings, _ = project.build()
    assert re.search(r"index\.rst:1\d: WARNING: .*no model step .*vocab", warnings), warnings
    assert "next refresh" not in warnings
