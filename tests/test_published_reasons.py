"""The computed "why they differ" reasons of a published run select the collectives they speak of by
the call's typed ``kind``, never by its human-readable source text (review of issue 42, item 5)."""

from __future__ import annotations

import pytest

from gemm_bench.question import comm
from gemm_bench.question.layout import ParallelLayout
from gemm_bench.report.published_runs import Prediction, reasons
from tests.test_layout_step import _step

TP_REASON = "tensor-parallel collectives take"


def _reasons() -> list[str]:
    # TP 2 with SP, G = 4: the flat table makes communication outweigh compute, so a published figure
    # just below the rank's compute alone lies between it and the prediction, far more than 10% off.
    step = _step(ParallelLayout(gpus=2, tp=2, num_microbatches=4))
    prediction = Prediction("bf16", 0.95 * step.compute_tokens_per_s, step)
    assert prediction.off and step.tokens_per_s < prediction.published < step.compute_tokens_per_s
    return reasons(prediction)


def test_the_tensor_parallel_reason_is_given_with_its_share() -> None:
    said = [r for r in _reasons() if r.startswith(TP_REASON)]
    assert len(said) == 1 and "of the predicted step: comm-GEMM overlap" in said[0]


def test_rewording_the_calls_source_text_does_not_drop_the_reason(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(comm, "TE_SOURCE", "Transformer Engine 2.21 (renamed), transformer_engine/pytorch/")
    step = _step(ParallelLayout(gpus=2, tp=2, num_microbatches=4))
    assert all(c.source.startswith("Transformer Engine 2.21") for c, _ in step.microbatch.calls)
    assert any(r.startswith(TP_REASON) for r in _reasons())


def test_every_call_says_its_kind_and_an_unknown_kind_is_refused() -> None:
    step = _step(ParallelLayout(gpus=2, tp=2, num_microbatches=4))
    assert {c.kind for c, _ in step.microbatch.calls} == {"tp"}
    with pytest.raises(comm.CommError, match="unknown collective kind 'tensor'"):
        comm.CollectiveCall("all-gather", "bf16", 1, 2, "x", "forward", kind="tensor")  # type: ignore[arg-type]


def test_a_moe_row_measured_at_ep_1_says_what_ep_8_does_on_a_gpu_that_measured_both() -> None:
    """Session 19: gpt-oss-120b's published EP 8 run read -35% against a prediction from the layer measured at
    EP 1, and the reasons blamed the published stack. The H200 has measured the layer at EP 8 too: the reason
    now gives both predictions of the run's layout there, from the committed results."""
    import dataclasses
    import json
    from pathlib import Path

    from gemm_bench.question.question import build_question
    from gemm_bench.report.layout_step import sweeps
    from gemm_bench.report.published_runs import at_run_ep, expert_parallel_reason, load
    from gemm_bench.results.typed import parse

    docs = Path(__file__).resolve().parent.parent / "docs"
    run = next(r for r in load(docs / "_data" / "published_runs.json") if r.model == "gpt-oss-120b")
    assert at_run_ep(run) == "gpt-oss-120b/ep8"
    cache = docs / "_gemm_cache"
    available = sweeps([json.loads(p.read_text(encoding="utf-8")) for p in sorted((cache / "studies").glob(
        "tp-comm--*.json"))])

    def result(model: str) -> object:
        path = cache / f"{build_question(model=model).hash}--h200.json"
        return parse(json.loads(path.read_text(encoding="utf-8")))

    low, high = result("gpt-oss-120b"), result("gpt-oss-120b/ep8")
    said = expert_parallel_reason(run, low, high, available)  # type: ignore[arg-type]
    assert said is not None and said.startswith("on the H200, which has measured the layer at both")
    # the two numbers it quotes are the run's layout predicted from each result
    from gemm_bench.report.layout_step import result_layout_steps
    steps = [result_layout_steps(r, run.layout, available) for r in (low, high)]  # type: ignore[arg-type]
    mine, theirs = (s.step("bf16").tokens_per_s for s in steps)  # type: ignore[union-attr]
    assert theirs > mine and f"BF16 {theirs:,.0f} tokens/s per GPU" in said and f"against {mine:,.0f}" in said
    assert f"({theirs / mine:.2f}x)" in said and "understates an EP 8 rank's speed" in said
    with pytest.raises(ValueError, match="different GPUs"):
        other = cache / f"{build_question(model='gpt-oss-120b').hash}--h100-80gb-hbm3.json"
        expert_parallel_reason(run, parse(json.loads(other.read_text(encoding="utf-8"))), high, available)  # type: ignore[arg-type]
    # a run at another sequence length than the results' has no such reason (red team, session 19)
    assert expert_parallel_reason(dataclasses.replace(run, seq_length=8192), low, high, available) is None  # type: ignore[arg-type]
    # a run at its measured EP has no such reason
    llama = next(r for r in load(docs / "_data" / "published_runs.json") if r.model == "llama3-8b")
    assert at_run_ep(llama) is None


def test_a_run_much_older_than_the_measured_stack_says_so_where_the_site_predicts_more() -> None:
    """Red team, session 19: NeMo 24.07's Llama 3 8B row (+23%) gave only "data loading, stragglers, logging"."""
    import dataclasses
    import json
    from pathlib import Path

    from gemm_bench.question.question import build_question
    from gemm_bench.report.layout_step import sweeps
    from gemm_bench.report.published_runs import compare, load, stack_age_reason
    from gemm_bench.results.typed import parse

    docs = Path(__file__).resolve().parent.parent / "docs"
    runs = [r for r in load(docs / "_data" / "published_runs.json") if r.model == "llama3-8b"]
    old, recent = runs[0], runs[1]
    assert old.version.startswith("NeMo 24.07")
    cache = docs / "_gemm_cache"
    result = parse(json.loads((cache / f"{build_question(model='llama3-8b').hash}--h100-80gb-hbm3.json").read_text(
        encoding="utf-8")))
    available = sweeps([json.loads(p.read_text(encoding="utf-8")) for p in sorted((cache / "studies").glob(
        "tp-comm--*.json"))])
    prediction = compare(old, result, available).predictions[0]
    assert prediction.off and prediction.difference is not None and prediction.difference > 0
    said = stack_age_reason(prediction, old, result)
    ran, measured = old.date, result.provenance.date
    months = (int(measured[:4]) - int(ran[:4])) * 12 + int(measured[5:7]) - int(ran[5:7])
    assert said is not None and f"is {months} months older than the measured stack" in said and months >= 12
    assert stack_age_reason(compare(recent, result, available).predictions[0], recent, result) is None  # within 10%
    under = dataclasses.replace(prediction, published=prediction.predicted * 1.5)  # the site predicts less
    assert stack_age_reason(under, old, result) is None
    assert stack_age_reason(prediction, dataclasses.replace(old, date="unknown"), result) is None
