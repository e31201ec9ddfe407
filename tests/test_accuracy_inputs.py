"""measure_accuracy builds each op's operands and references once per distribution, on CPU.

The GPU parts (``_operands``, ``_references`` and the per-precision SQNR functions) are replaced
by numpy fakes with a fake quantizer (per-tensor rounding to a few bits), and the accuracy loop as
it was before operands were shared (:func:`_old_measure_accuracy`, kept here verbatim with the
old per-call SQNR functions that drew their own operands and all three references) is the
reference: the new loop must give the same cells, value for value, while drawing the operands
once per (op, distribution) instead of once per precision x mode x distribution, and computing
the references of the question's passes only (a sweep question is Fprop only). The GPU check of
the same equality with TE itself is ``tests/test_gpu_accuracy.py``.
"""

from __future__ import annotations

import dataclasses
import math
import types
from collections.abc import Mapping, Sequence
from typing import Any

import pytest

from gemm_bench.measure import accuracy
from gemm_bench.measure.accuracy import GPU_FAILURES, accuracy_cell, seed_for
from gemm_bench.question.plan import Support
from gemm_bench.question.precisions import PRECISIONS
from gemm_bench.question.question import build_question
from gemm_bench.question.shapes import PASSES, GemmShape, linear_gemms
from gemm_bench.results.accuracy_schema import ACCURACY_MODES, DISTRIBUTIONS, validate_accuracy_cells

np = pytest.importorskip("numpy")

#: Bits the fake quantizer keeps per precision and mode; None: no quantization at all, so the
#: output equals the reference (an unbounded SQNR, which the loop records as failed).
BITS = {("autocast", "bf16"): 8, ("prequant", "bf16"): None, ("autocast", "fp8-delayed"): 3,
        ("autocast", "fp8-current"): 4, ("prequant", "fp8-current"): 4, ("autocast", "fp8-block"): 5,
        ("prequant", "fp8-block"): 6}
#: (mode, precision, distribution) whose fake GEMM raises, as an out-of-memory would.
FAILING = ("prequant", "fp8-block", "outliers")
PRECISIONS_ASKED = ["bf16", "fp8-delayed", "fp8-current", "fp8-block", "mxfp8"]
SUPPORT = {"mxfp8": Support(False, "MXFP8 needs Blackwell (fake reason)")}


class Calls:
    def __init__(self) -> None:
        self.operands: list[tuple[str, str]] = []
        self.references: list[tuple[str, ...]] = []
        #: id of each X drawn -> its distribution (what the fake recipe's failure depends on).
        self.distribution_of: dict[int, str] = {}


def _fake_operands(calls: Calls) -> Any:
    def operands(fprop: GemmShape, distribution: str) -> tuple[Any, Any, Any]:
        calls.operands.append((fprop.op, distribution))

        def draw(tensor: str, *shape: int) -> Any:
            return np.random.default_rng(seed_for(distribution, fprop.op, tensor)).standard_normal(shape)

        x = draw("X", fprop.m, fprop.k)
        count = DISTRIBUTIONS[distribution].outlier_channels(fprop.k)
        x[:, :count] *= DISTRIBUTIONS[distribution].outlier_scale
        calls.distribution_of[id(x)] = distribution
        return x, draw("W", fprop.n, fprop.k), draw("dY", fprop.m, fprop.n)

    return operands


def _fake_references(calls: Calls) -> Any:
    def references(x: Any, w: Any, dy: Any, passes: Sequence[str] = PASSES) -> dict[str, Any]:
        calls.references.append(tuple(passes))
        products = {"fprop": lambda: x @ w.T, "dgrad": lambda: dy @ w, "wgrad": lambda: dy.T @ x}
        return {p: products[p]() for p in PASSES if p in passes}

    return references


def _quantize(a: Any, bits: int | None) -> Any:
    if bits is None:
        return a
    scale = float(np.abs(a).max()) / (2 ** (bits - 1) - 1)
    return np.round(a / scale) * scale


def _fake_sqnr(mode: str, precision: str, distribution: str, x: Any, w: Any, dy: Any,
               refs: Mapping[str, Any]) -> dict[str, float]:
    """The fake recipe: every pass's product of quantized operands, against its reference."""
    if (mode, precision, distribution) == FAILING:
        raise RuntimeError("CUDA out of memory (fake)\nsecond line")
    bits = BITS[(mode, precision)]
    xq, wq, dyq = (_quantize(t, bits) for t in (x, w, dy))
    outputs = {"fprop": lambda: xq @ wq.T, "dgrad": lambda: dyq @ wq, "wgrad": lambda: dyq.T @ xq}
    return {p: accuracy.sqnr_db(list(ref.ravel()), list(outputs[p]().ravel())) for p, ref in refs.items()}


def _new_fakes(calls: Calls) -> dict[str, Any]:
    """The GPU functions of the new loop: they read the inputs they are given."""

    def measure(mode: str) -> Any:
        def sqnr(precision: str, fprop: GemmShape, inputs: accuracy.GemmInputs) -> dict[str, float]:
            distribution = calls.distribution_of[id(inputs.x)]
            return _fake_sqnr(mode, precision, distribution, inputs.x, inputs.w, inputs.dy, inputs.refs)

        return sqnr

    return {"_operands": _fake_operands(calls), "_references": _fake_references(calls),
            "autocast_sqnr": measure("autocast"), "prequant_sqnr": measure("prequant")}


def _old_measure_accuracy(question: Any, precisions: Sequence[str], modes: Sequence[str], *,
                          support: Mapping[str, Support], distributions: Sequence[str],
                          run_id: str | None, calls: Calls) -> list[dict[str, Any]]:
    """measure_accuracy as it was: every precision x mode x distribution drew its own operands and
    all three references (the body of the old loop, with the old per-call functions as fakes)."""
    operands, references = _fake_operands(calls), _fake_references(calls)

    def old_measure(mode: str) -> Any:
        def sqnr(precision: str, fprop: GemmShape, distribution: str) -> dict[str, float]:
            x, w, dy = operands(fprop, distribution)
            refs = references(x, w, dy)
            return _fake_sqnr(mode, precision, distribution, x, w, dy, refs)

        return sqnr

    autocast_sqnr, prequant_sqnr = old_measure("autocast"), old_measure("prequant")
    fprops = [g for g in question.gemms if g.pass_ == "fprop"]
    cells: list[dict[str, Any]] = []
    for fprop in fprops:
        passes = [g for g in question.gemms if g.op == fprop.op]
        one = dataclasses.replace(fprop, groups=1)
        for mode in modes:
            if mode not in ACCURACY_MODES:
                continue  # the layer modes have no per-GEMM accuracy
            for precision in precisions:
                s = support.get(precision)
                reason = ""
                if s is not None and not s.available:
                    reason = s.reason or f"{PRECISIONS[precision].display} is not supported on this GPU"
                elif not PRECISIONS[precision].has_mode(mode):
                    reason = PRECISIONS[precision].absent_modes.get(mode, f"no {mode} form")
                for dist in distributions:
                    if reason:
                        cells += [accuracy_cell(mode, precision, g, dist, "unsupported", reason=reason,
                                                run_id=run_id) for g in passes]
                        continue
                    measure = autocast_sqnr if mode == "autocast" else prequant_sqnr
                    try:
                        values = measure(precision, one, dist)
                    except GPU_FAILURES as exc:
                        message = f"{type(exc).__name__}: {exc}".splitlines()[0][:400]
                        cells += [accuracy_cell(mode, precision, g, dist, "failed", reason=message,
                                                run_id=run_id) for g in passes]
                        continue
                    for g in passes:
                        value = values[g.pass_]
                        if math.isfinite(value):
                            cells.append(accuracy_cell(mode, precision, g, dist, "measured", sqnr=value,
                                                       run_id=run_id))
                        else:
                            cells.append(accuracy_cell(
                                mode, precision, g, dist, "failed", run_id=run_id,
                                reason="output equals the FP32 reference exactly: SQNR is unbounded"))
    return cells


def _without_times(cells: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [{k: v for k, v in c.items() if k != "measured_at"} for c in cells]


def _model_question() -> Any:
    # Two ops with all three passes, one of them grouped (measured on one expert's shape).
    gemms = (*linear_gemms("qkv", 24, 16, 40), *linear_gemms("mlp_up", 24, 16, 32, groups=4))
    return dataclasses.replace(build_question(shapes=["24x16x40"]), gemms=gemms)


QUESTIONS = {"model (all passes)": _model_question, "sweep (Fprop only)": lambda: build_question(
    shapes=["24x16x40", "8x32x16"])}


@pytest.fixture
def fake_gpu(monkeypatch: pytest.MonkeyPatch) -> Calls:
    """The new loop's GPU functions replaced by the fakes; a stand-in torch for empty_cache."""
    calls = Calls()
    for name, fake in _new_fakes(calls).items():
        monkeypatch.setattr(accuracy, name, fake)
    torch = types.ModuleType("torch")
    torch.cuda = types.SimpleNamespace(empty_cache=lambda: None)  # type: ignore[attr-defined]
    monkeypatch.setitem(__import__("sys").modules, "torch", torch)
    return calls


@pytest.mark.parametrize("which", list(QUESTIONS))
def test_shared_inputs_give_the_cells_of_the_old_loop_value_for_value(fake_gpu: Calls, which: str) -> None:
    question = QUESTIONS[which]()
    modes = ["autocast", "prequant", "layer"]  # the layer mode has no accuracy: skipped by both
    new = accuracy.measure_accuracy(question, PRECISIONS_ASKED, modes, support=SUPPORT, run_id="r1")
    old_calls = Calls()
    old = _old_measure_accuracy(question, PRECISIONS_ASKED, modes, support=SUPPORT,
                                distributions=tuple(DISTRIBUTIONS), run_id="r1", calls=old_calls)
    assert _without_times(new) == _without_times(old)  # same cells, same order, same SQNRs
    validate_accuracy_cells(new, {(g.op, g.pass_) for g in question.gemms})
    statuses = {c["status"] for c in new}
    assert statuses == {"measured", "failed", "unsupported"}  # every branch of the loop ran
    assert any("SQNR is unbounded" in c.get("reason", "") for c in new)
    assert any(c.get("reason") == "RuntimeError: CUDA out of memory (fake)" for c in new)

    ops = [g.op for g in question.gemms if g.pass_ == "fprop"]
    # Old: one draw per measured precision x mode x distribution; new: one per op x distribution.
    assert sorted(fake_gpu.operands) == sorted((op, d) for op in ops for d in DISTRIBUTIONS)
    assert len(old_calls.operands) == len(ops) * len(DISTRIBUTIONS) * 7  # 4 autocast + 3 prequant
    asked = tuple(p for p in PASSES if any(g.pass_ == p for g in question.gemms))
    assert fake_gpu.references == [asked] * len(fake_gpu.operands)


def test_a_sweep_computes_the_fprop_reference_only(fake_gpu: Calls) -> None:
    question = QUESTIONS["sweep (Fprop only)"]()
    cells = accuracy.measure_accuracy(question, ["bf16"], ["autocast"], support={})
    assert fake_gpu.references == [("fprop",)] * 4  # two ops x two distributions
    assert {c["pass"] for c in cells} == {"fprop"}


def test_nothing_is_drawn_for_an_op_whose_precisions_are_all_unsupported(fake_gpu: Calls) -> None:
    question = QUESTIONS["sweep (Fprop only)"]()
    cells = accuracy.measure_accuracy(question, ["mxfp8"], ["autocast", "prequant"], support=SUPPORT)
    assert fake_gpu.operands == []
    assert {c["status"] for c in cells} == {"unsupported"}
    assert len(cells) == 2 * 2 * 2  # ops x modes x distributions, Fprop only


def test_inputs_that_cannot_be_built_fail_every_measured_cell_of_that_distribution(
        fake_gpu: Calls, monkeypatch: pytest.MonkeyPatch) -> None:
    def no_memory(fprop: GemmShape, distribution: str) -> Any:
        if distribution == "outliers":
            raise RuntimeError("CUDA out of memory drawing X")
        return _fake_operands(fake_gpu)(fprop, distribution)

    monkeypatch.setattr(accuracy, "_operands", no_memory)
    question = QUESTIONS["sweep (Fprop only)"]()
    cells = accuracy.measure_accuracy(question, ["bf16", "fp8-current"], ["autocast"], support={})
    by_dist = {d: {c["status"] for c in cells if c["distribution"] == d} for d in DISTRIBUTIONS}
    assert by_dist == {"gaussian": {"measured"}, "outliers": {"failed"}}
    assert {c["reason"] for c in cells if c["status"] == "failed"} == {"RuntimeError: CUDA out of memory drawing X"}
