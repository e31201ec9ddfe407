"""GPU check that sharing each op's operands and references changed no SQNR (bit for bit).

    python3 -m pytest -m gpu -s tests/test_gpu_accuracy.py

``measure_accuracy`` builds each op's BF16 operands and FP32 references once per distribution and
every precision and mode measures on them, with the references of the question's passes only.
The SQNR functions as they were before (each drew its own operands and all three references, in
one call per precision x mode x distribution) are kept here verbatim as the reference; every cell
of both must be equal, ``==`` on the stored (rounded) value and on the raw SQNR, for a question
with all three passes (a grouped op among them) and for a sweep question (Fprop only). The CPU
test of the loop itself is ``tests/test_accuracy_inputs.py``.
"""

from __future__ import annotations

import dataclasses
import time
from typing import Any

import pytest

from gemm_bench.question.question import build_question
from gemm_bench.question.shapes import PASSES, GemmShape, linear_gemms
from tests.gpu_skip import gpu_module

torch, te, pytestmark = gpu_module()

from gemm_bench.measure import accuracy  # noqa: E402
from gemm_bench.measure.backends.te import support  # noqa: E402
from gemm_bench.results.accuracy_schema import DISTRIBUTIONS  # noqa: E402

PRECISIONS = ["bf16", "fp8-delayed", "fp8-current", "fp8-block", "mxfp8", "nvfp4"]


# ----------------------------------------------------------------------------- the code as it was
def _old_references(x: Any, w: Any, dy: Any) -> dict[str, Any]:
    allow = torch.backends.cuda.matmul.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = False
    try:
        xf, wf, dyf = x.float(), w.float(), dy.float()
        return {"fprop": xf @ wf.t(), "dgrad": dyf @ wf, "wgrad": dyf.t() @ xf}
    finally:
        torch.backends.cuda.matmul.allow_tf32 = allow


def _old_autocast_sqnr(precision: str, fprop: GemmShape, distribution: str) -> dict[str, float]:
    from gemm_bench.measure.backends.te import make_recipe

    x, w, dy = accuracy._operands(fprop, distribution)
    refs = _old_references(x, w, dy)
    layer = te.Linear(fprop.k, fprop.n, bias=False, params_dtype=torch.bfloat16, device="cuda")
    with torch.no_grad():
        layer.weight.copy_(w)
    recipe = make_recipe(precision)
    steps = 3 if precision == "fp8-delayed" else 1
    for _ in range(steps):
        xin = x.detach().clone().requires_grad_(True)
        layer.weight.grad = None
        with te.autocast(enabled=recipe is not None, recipe=recipe):
            y = layer(xin)
        y.backward(dy)
    torch.cuda.synchronize()
    outputs = {"fprop": y.detach(), "dgrad": xin.grad, "wgrad": layer.weight.grad}
    return {p: accuracy.sqnr_db_tensor(refs[p], outputs[p]) for p in PASSES}


def _old_prequant_sqnr(precision: str, fprop: GemmShape, distribution: str) -> dict[str, float]:
    from transformer_engine.pytorch.cpp_extensions import general_gemm

    from gemm_bench.measure.backends.te import _quantizers, make_recipe

    x, w, dy = accuracy._operands(fprop, distribution)
    refs = _old_references(x, w, dy)
    operands = {"fprop": (w, x), "dgrad": (w.t().contiguous(), dy), "wgrad": (x.t().contiguous(), dy.t().contiguous())}
    recipe = make_recipe(precision)
    out: dict[str, float] = {}
    for pass_, (a, b) in operands.items():
        if precision == "bf16":
            a_q, b_q = a, b
        else:
            qa, qb = _quantizers(precision, pass_)
            a_q, b_q = qa(a), qb(b)
        split = bool(recipe is not None and getattr(recipe, f"fp8_gemm_{pass_}").use_split_accumulator)
        result = general_gemm(a_q, b_q, out_dtype=torch.bfloat16, use_split_accumulator=split)
        product = result[0] if isinstance(result, (tuple, list)) else result
        torch.cuda.synchronize()
        out[pass_] = accuracy.sqnr_db_tensor(refs[pass_], product)
    return out


# ----------------------------------------------------------------------------- the check
def _questions() -> dict[str, Any]:
    gemms = (*linear_gemms("qkv", 512, 1024, 1536), *linear_gemms("mlp_up", 256, 1024, 768, groups=4))
    model = dataclasses.replace(build_question(shapes=["512x1024x1536"]), gemms=gemms)
    return {"all passes": model, "sweep (Fprop only)": build_question(sweep=[512, 1024])}


@pytest.mark.parametrize("which", ["all passes", "sweep (Fprop only)"])
def test_shared_inputs_give_bit_identical_sqnrs(which: str, monkeypatch: pytest.MonkeyPatch) -> None:
    question = _questions()[which]
    s = support()
    modes = ["autocast", "prequant"]
    started = time.perf_counter()
    new = accuracy.measure_accuracy(question, PRECISIONS, modes, support=s, run_id="r")
    new_s = time.perf_counter() - started

    raw_new: list[float] = []
    new_auto, new_pre = accuracy.autocast_sqnr, accuracy.prequant_sqnr

    def record(measure: Any) -> Any:
        def wrapped(precision: str, fprop: GemmShape, inputs: Any) -> dict[str, float]:
            values = measure(precision, fprop, inputs)
            raw_new.extend(values.values())
            return values

        return wrapped

    # The old loop: the old per-call functions, each drawing its own operands and references.
    old_cells: list[dict[str, Any]] = []
    for fprop in (g for g in question.gemms if g.pass_ == "fprop"):
        one = dataclasses.replace(fprop, groups=1)
        for mode, measure in (("autocast", _old_autocast_sqnr), ("prequant", _old_prequant_sqnr)):
            for precision in PRECISIONS:
                if not s[precision].available or not accuracy.PRECISIONS[precision].has_mode(mode):
                    continue
                for dist in DISTRIBUTIONS:
                    values = measure(precision, one, dist)
                    for g in question.gemms:
                        if g.op == fprop.op:
                            old_cells.append({"mode": mode, "precision": precision, "op": g.op, "pass": g.pass_,
                                              "distribution": dist, "sqnr_raw": values[g.pass_]})
    old_s = time.perf_counter() - started - new_s

    measured = [c for c in new if c["status"] == "measured"]
    assert not [c for c in new if c["status"] == "failed"], [c for c in new if c["status"] == "failed"]
    key = ("mode", "precision", "op", "pass", "distribution")
    old_by_key = {tuple(c[k] for k in key): c["sqnr_raw"] for c in old_cells}
    assert {tuple(c[k] for k in key) for c in measured} == set(old_by_key)
    for cell in measured:
        assert cell["sqnr_db"] == round(old_by_key[tuple(cell[k] for k in key)], 4), cell

    # The raw values too (before the cell's rounding): measure again through the new functions.
    monkeypatch.setattr(accuracy, "autocast_sqnr", record(new_auto))
    monkeypatch.setattr(accuracy, "prequant_sqnr", record(new_pre))
    accuracy.measure_accuracy(question, PRECISIONS, modes, support=s, run_id="r")
    assert sorted(raw_new) == sorted(old_by_key.values())
    print(f"accuracy {which}: {len(measured)} cells, shared inputs {new_s:.2f} s, per-call inputs {old_s:.2f} s")
