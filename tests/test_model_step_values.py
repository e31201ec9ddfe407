"""Role values of the model's step (issue 32, sphinxext/gemm_benchmark/model_step_values.py), from a
result whose model-step block the fake Transformer Engine measured."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest

from gemm_bench.report.report import Report
from gemm_benchmark.model_step_values import MODEL_BREAKDOWN, MODEL_STEP_KINDS, model_step_g_key, model_step_values
from gemm_benchmark.records import value_key


def test_every_role_has_a_value_per_precision_and_g(monkeypatch: pytest.MonkeyPatch, cpu_step: Any) -> None:
    doc, _ = cpu_step._document_with_block(monkeypatch)
    report = Report(doc)
    values = model_step_values(report, "tiny on H100")
    summary = report.model_step()
    assert summary is not None
    for precision in ("bf16", "fp8-current"):
        for g in ("G", "G=1", "G=4"):
            for kind in ("gemm-tokens", "gemm-model-tflops", "gemm-mfu", "gemm-model-speedup"):
                assert values[value_key(kind, "layer-graphed", precision, g)].available, (kind, precision, g)
        row = summary.row(precision, 4)
        assert row is not None
        assert values[value_key("gemm-tokens", "layer-graphed", precision, "G")].text == f"{row.tokens_per_s:,.0f}"
        assert values[value_key("gemm-memory", "layer-graphed", precision, "G")].text.endswith("GiB")
        assert values[value_key("gemm-largest-microbatch", "layer-graphed", precision, "G")].text == "2"
    speedup = values[value_key("gemm-model-speedup", "layer-graphed", "fp8-current", "G")]
    assert speedup.low is not None and speedup.high is not None and speedup.low <= speedup.high
    # BF16 against itself: "the same", never "0.0 GiB more" (a difference the shown digit cannot tell)
    assert values[value_key("gemm-memory-delta", "layer-graphed", "bf16", "G")].text == "the same"


def test_a_result_without_a_model_step_gives_reasons_not_numbers(monkeypatch: pytest.MonkeyPatch,
                                                                  cpu_step: Any) -> None:
    doc, question = cpu_step._document_with_block(monkeypatch)
    del doc["model_step"]
    values = model_step_values(Report(doc), "tiny on H100", ("bf16",))
    assert {k.split()[0] for k in values} == {*MODEL_STEP_KINDS, MODEL_BREAKDOWN}
    assert not any(v.available for v in values.values())
    assert all("no model step" in v.tooltip for v in values.values())
    other = Report(doc)
    other.config = dataclasses.replace(question.config, vocab_size=4000)
    assert not any(v.available for v in model_step_values(other, "x").values())


@pytest.mark.parametrize(("text", "key"), [("G=8", "G=8"), ("g1", "G=1"), ("4", "G=4"), ("", "G"), ("G = 2", "G=2")])
def test_the_roles_g_word(text: str, key: str) -> None:
    assert model_step_g_key(text) == key


@pytest.mark.parametrize("text", ["G=0", "G=x", "eight", "G=-1"])
def test_a_g_word_that_is_no_g_is_refused_not_read_as_the_questions_g(text: str) -> None:
    """Before, "G=0" quietly quoted the question's G (8): a number the author did not ask for."""
    with pytest.raises(ValueError, match="not a G of at least 1"):
        model_step_g_key(text)


def test_the_role_specs_are_registered_as_roles() -> None:
    from gemm_benchmark.model_step_values import MODEL_STEP_ROLES
    from gemm_benchmark.roles import ROLES, RoleSpec

    specs = [RoleSpec(**spec) for spec in MODEL_STEP_ROLES]
    assert all(ROLES[s.name] == s for s in specs)
    assert all(s.example.split()[1] == "layer-graphed" for s in specs)


def test_a_result_older_than_the_vocabulary_says_it_predates_the_model_step(monkeypatch: pytest.MonkeyPatch,
                                                                            cpu_step: Any) -> None:
    """Reader pass 4: roles @h200 told the author to "give vocab-size" on a preset that carries it; the
    H200 result was written before the config stored a vocabulary (no ``vocab_size`` key at all).
    The page's question decides (issue 43: the directive's reports carry the page's config), whatever
    vocabulary the older result stored."""
    doc, question = cpu_step._document_with_block(monkeypatch)
    del doc["model_step"]
    doc["question"]["config"].pop("vocab_size", None)
    assert question.config is not None and question.config.vocab_size is not None
    values = model_step_values(Report(doc, config=question.config), "tiny on H200", ("bf16",))
    assert all("the next refresh measures it" in v.tooltip for v in values.values())
    assert not any("vocab" in v.tooltip for v in values.values())
    no_vocabulary = dataclasses.replace(question.config, vocab_size=None)  # a page without one: its own reason
    assert all("vocab" in v.tooltip for v in model_step_values(Report(doc, config=no_vocabulary), "x",
                                                               ("bf16",)).values())
