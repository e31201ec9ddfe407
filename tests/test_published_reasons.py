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
