"""The accuracy quantity's pure parts: SQNR, distributions and seeds, result cells and their checks."""

from __future__ import annotations

import json
import math
import subprocess
import sys

import pytest

from gemm_bench.measure import accuracy
from gemm_bench.measure.accuracy import accuracy_cell, accuracy_method, seed_for, sqnr_db
from gemm_bench.question.shapes import GemmShape, linear_gemms
from gemm_bench.results.accuracy_schema import DISTRIBUTIONS, AccuracyError, validate_accuracy_cells

GEMMS = linear_gemms("qkv", 64, 32, 96)
KNOWN = {(g.op, g.pass_) for g in GEMMS}


def test_sqnr_hand_computed() -> None:
    # ||ref|| = 5 (3-4-5), ||out - ref|| = 0.5: 20 log10(10) = 20 dB.
    assert sqnr_db([3.0, 4.0], [3.0, 4.5]) == pytest.approx(20.0)
    # Noise 1/1000 of the signal: 60 dB.
    assert sqnr_db([1.0, 0.0, 0.0], [1.0, 0.001, 0.0]) == pytest.approx(60.0)
    # Scale-invariant: the same relative error on a 1000x larger signal.
    assert sqnr_db([3000.0, 4000.0], [3000.0, 4500.0]) == pytest.approx(20.0)
    # Noise larger than the signal: negative dB.
    assert sqnr_db([1.0], [-2.0]) == pytest.approx(20 * math.log10(1 / 3))
    assert sqnr_db([1.0, 2.0], [1.0, 2.0]) == math.inf


@pytest.mark.parametrize(
    ("ref", "out", "problem"),
    [([1.0], [1.0, 2.0], "1 values, output 2"), ([], [], "at least one"),
     ([0.0, 0.0], [1.0, 0.0], "all zeros"), ([math.nan], [1.0], "NaN")],
)
def test_sqnr_rejects_bad_input(ref: list[float], out: list[float], problem: str) -> None:
    with pytest.raises(AccuracyError, match=problem):
        sqnr_db(ref, out)


def test_more_bits_give_higher_sqnr() -> None:
    # Rounding to a coarser grid must lower the SQNR: about 6 dB per bit.
    values = [math.sin(i * 0.37) * (1 + i % 7) for i in range(2000)]

    def rounded(bits: int) -> list[float]:
        step = 2.0 ** -bits
        return [round(v / step) * step for v in values]

    s4, s8 = sqnr_db(values, rounded(4)), sqnr_db(values, rounded(8))
    assert s8 - s4 == pytest.approx(24.0, abs=1.5)


def test_distributions_are_stated() -> None:
    gauss, outliers = DISTRIBUTIONS["gaussian"], DISTRIBUTIONS["outliers"]
    assert gauss.outlier_channels(4096) == 0
    assert outliers.outlier_fraction == 0.01 and outliers.outlier_scale == 30.0
    assert outliers.outlier_channels(4096) == 41
    assert outliers.outlier_channels(16) == 1  # at least one
    method = accuracy_method()
    json.dumps(method)
    assert method["distributions"]["outliers"]["outlier_scale"] == 30.0
    assert "20*log10" in method["metric"]


def test_seeds_are_deterministic_and_distinct() -> None:
    a = seed_for("gaussian", "qkv", "X")
    assert a == seed_for("gaussian", "qkv", "X")
    # Computed in a fresh interpreter: no dependence on Python's salted hash().
    code = "from gemm_bench.measure.accuracy import seed_for; print(seed_for('gaussian', 'qkv', 'X'))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         env={"PYTHONHASHSEED": "123", "PATH": ""}, check=True)
    assert int(out.stdout) == a
    seeds = {seed_for(d, op, t) for d in DISTRIBUTIONS for op in ("qkv", "mlp_up") for t in ("X", "W", "dY")}
    assert len(seeds) == 12
    assert all(0 <= s < 2**31 for s in seeds)


def _cells() -> list[dict]:
    g = GEMMS[0]
    return [
        accuracy_cell("autocast", "bf16", g, "gaussian", "measured", sqnr=45.123456, run_id="r1"),
        accuracy_cell("autocast", "fp8-current", g, "gaussian", "measured", sqnr=27.0),
        accuracy_cell("prequant", "fp8-delayed", g, "gaussian", "unsupported", reason="same as current"),
        accuracy_cell("autocast", "nvfp4", g, "outliers", "failed", reason="RuntimeError: no"),
    ]


def test_cells_round_trip_through_json_and_validate() -> None:
    cells = json.loads(json.dumps(_cells()))
    assert validate_accuracy_cells(cells, KNOWN) == cells
    assert cells[0]["sqnr_db"] == 45.1235 and cells[0]["run_id"] == "r1" and "measured_at" in cells[0]
    assert "sqnr_db" not in cells[2] and cells[2]["reason"] == "same as current"


def test_measured_cell_needs_a_finite_sqnr() -> None:
    with pytest.raises(AccuracyError, match="finite SQNR"):
        accuracy_cell("autocast", "bf16", GEMMS[0], "gaussian", "measured", sqnr=math.inf)


@pytest.mark.parametrize(
    ("edit", "where", "problem"),
    [
        (lambda c: c.update(mode="layer"), "$.accuracy[0].mode", "'layer' is not one of"),
        (lambda c: c.update(precision="int8"), "$.accuracy[0].precision", "not a known precision"),
        (lambda c: c.update(op="lm_head"), "$.accuracy[0]", "lm_head/fprop is not part of the question"),
        (lambda c: c.update(distribution="uniform"), "$.accuracy[0].distribution", "'uniform'"),
        (lambda c: c.update(status="done"), "$.accuracy[0].status", "'done'"),
        (lambda c: c.update(sqnr_db="45"), "$.accuracy[0].sqnr_db", "finite number"),
        (lambda c: c.update(sqnr_db=True), "$.accuracy[0].sqnr_db", "finite number"),
        (lambda c: c.pop("sqnr_db"), "$.accuracy[0].sqnr_db", "finite number"),
        (lambda c: c.pop("distribution"), "$.accuracy[0].distribution", "is missing"),
        (lambda c: c.update(run_id=3), "$.accuracy[0].run_id", "must be a string"),
    ],
)
def test_validation_names_the_field(edit, where: str, problem: str) -> None:  # type: ignore[no-untyped-def]
    cells = _cells()
    edit(cells[0])
    with pytest.raises(AccuracyError) as info:
        validate_accuracy_cells(cells, KNOWN)
    assert info.value.where == where
    assert problem in info.value.problem


def test_validation_rejects_duplicates_and_non_lists() -> None:
    cells = _cells()
    with pytest.raises(AccuracyError, match="duplicate accuracy cell autocast/bf16/qkv/fprop/gaussian"):
        validate_accuracy_cells([*cells, dict(cells[0])], KNOWN)
    with pytest.raises(AccuracyError, match="must be a list"):
        validate_accuracy_cells({"cells": cells}, KNOWN)
    unsupported = dict(cells[2])
    unsupported.pop("reason")
    with pytest.raises(AccuracyError, match="reason"):
        validate_accuracy_cells([unsupported], KNOWN)


def test_unknown_distribution_is_refused_before_any_gpu_work() -> None:
    from gemm_bench.question.question import build_question

    question = build_question(shapes=["64x64x64"])
    # No torch in the test environment: reaching the GPU part would raise ImportError instead.
    with pytest.raises(AccuracyError, match="'laplace' is not one of gaussian, outliers"):
        accuracy.measure_accuracy(question, ["bf16"], ["autocast"], support={},
                                  distributions=["gaussian", "laplace"])


def test_accuracy_imports_without_torch() -> None:
    code = ("import sys, gemm_bench.measure.accuracy\n"
            "bad = [m for m in sys.modules if m.split('.')[0] in ('torch', 'numpy', 'transformer_engine')]\n"
            "assert not bad, bad\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr


def test_grouped_shapes_measure_one_expert() -> None:
    # The GPU path measures one expert's GEMM; the cell still names the question's op and pass.
    grouped = GemmShape("mlp_up", "fprop", 128, 64, 256, groups=8)
    cell = accuracy_cell("autocast", "bf16", grouped, "gaussian", "measured", sqnr=40.0)
    assert (cell["op"], cell["pass"]) == ("mlp_up", "fprop")
    assert "one expert" in accuracy_method()["grouped"]
