"""The dynamic-range study: the rounding model is E4M3/E5M2 as the formats define them, the measure
separates the recipes where it should and not where it should not, documents validate strictly and
survive a round trip through the cache; on a GPU, Transformer Engine agrees with the model."""

from __future__ import annotations

import copy
import itertools
import json
import math
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from gemm_bench.measure import dynamic_range as dr
from gemm_bench.results import dynamic_range_schema as schema
from gemm_bench.results import studies
from gemm_bench.results.studies import StudyError
from tests.conftest import H100, H200

#: Small enough for pure Python (a case is a 16 x 256 x 256 GEMM), large enough for two 1x128 blocks a row.
SIZE = {"m": 16, "k": 256, "n": 256, "count": 2}
RATIOS = (1.0, 1e4, 1e5)
PROVENANCE = {"torch": "n/a (CPU rounding model)", "transformer_engine": "n/a (CPU rounding model)",
              "cuda": "n/a", "driver": "n/a", "commit": "test", "date": "2026-11-24T10:00:00+00:00"}


def model_document(device: dict[str, Any] = H100, ratios: tuple[float, ...] = RATIOS) -> dict[str, Any]:
    """A valid study document whose numbers come from the CPU rounding model (its method says so)."""
    data, method = dr.model_study(ratios=ratios, **SIZE)
    return studies.build_document(schema.STUDY, data, method, device, PROVENANCE)


def shared_model_document(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """:func:`model_document` for the H100, computed once per test run (seconds of pure Python) and
    shared with tests/test_ext_dynamic_range.py, through JSON as the study cache stores it."""
    from tests.site_build import shared_json

    doc: dict[str, Any] = shared_json(tmp_path_factory, "dynamic-range-model-h100", model_document)
    return doc


@pytest.fixture(scope="module")
def document(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    return shared_model_document(tmp_path_factory)


def _case(data: dict[str, Any], tensor: str, kind: str, ratio: float, pid: str) -> dict[str, Any]:
    return next(c for c in data["cases"] if (c["tensor"], c["input"], c["ratio"]) == (tensor, kind, ratio))[
        "results"][pid]


# ----------------------------------------------------------------------------- the formats
def _grid(fmt: dr.Fp8Format) -> list[float]:
    """Every positive finite value of ``fmt``, from its definition (not from :func:`dr.fp8_round`)."""
    step = 2 ** fmt.mantissa_bits
    subnormals = [m * fmt.smallest_subnormal for m in range(1, step)]
    normals = [(1 + m / step) * 2.0 ** e for e in range(fmt.min_normal_exponent, 64) for m in range(step)]
    return subnormals + [v for v in normals if v <= fmt.max_value]


def test_e4m3_known_values() -> None:
    e4m3 = dr.E4M3
    assert e4m3.max_value == 448.0 and e4m3.min_normal == 2.0 ** -6 and e4m3.smallest_subnormal == 2.0 ** -9
    assert len(_grid(e4m3)) == 126  # 7 subnormals, 15 binades of 8, less 480 (its NaN encoding's neighbour)
    assert dr.fp8_round(448.0, e4m3) == 448.0
    assert dr.fp8_round(1e6, e4m3) == 448.0 and dr.fp8_round(-1e6, e4m3) == -448.0  # saturating
    assert dr.fp8_round(math.inf, e4m3) == 448.0
    assert dr.fp8_round(464.0, e4m3) == 448.0  # halfway to 480: ties to even (and 480 does not exist)
    assert dr.fp8_round(2.0 ** -9, e4m3) == 2.0 ** -9
    assert dr.fp8_round(2.0 ** -10, e4m3) == 0.0  # half the smallest subnormal: ties to even (zero)
    assert dr.fp8_round(1.5 * 2.0 ** -10, e4m3) == 2.0 ** -9
    assert dr.fp8_round(3 * 2.0 ** -10, e4m3) == 2 * 2.0 ** -9  # 1.5 subnormal steps: ties to 2 (even)
    assert dr.fp8_round(1 + 1 / 16, e4m3) == 1.0  # halfway between 1.0 (even) and 1.125
    assert dr.fp8_round(1 + 3 / 16, e4m3) == 1.25  # halfway between 1.125 and 1.25 (even)
    assert dr.fp8_round(-(1 + 3 / 16), e4m3) == -1.25
    assert dr.fp8_round(0.0, e4m3) == 0.0


@pytest.mark.parametrize("fmt", [dr.E4M3, dr.E5M2], ids=lambda f: f.name)
def test_the_grid_rounds_to_itself_and_midpoints_to_the_even_neighbour(fmt: dr.Fp8Format) -> None:
    grid = [0.0, *_grid(fmt)]
    for value in grid:
        assert dr.fp8_round(value, fmt) == value
    for i, (low, high) in enumerate(itertools.pairwise(grid)):
        even = low if i % 2 == 0 else high  # codes alternate even, odd from zero
        assert dr.fp8_round((low + high) / 2, fmt) == even, (low, high)
        assert dr.fp8_round(low + (high - low) * 0.49, fmt) == low
        assert dr.fp8_round(low + (high - low) * 0.51, fmt) == high


def test_e5m2_known_values() -> None:
    assert dr.E5M2.max_value == 57344.0 and dr.E5M2.smallest_subnormal == 2.0 ** -16
    assert len(_grid(dr.E5M2)) == 123
    assert dr.fp8_round(1e9, dr.E5M2) == 57344.0
    assert dr.fp8_round(2.0 ** -17, dr.E5M2) == 0.0


def test_bf16_and_scales_follow_transformer_engine() -> None:
    assert dr.to_bf16([1 + 2.0 ** -8, 1 + 3 * 2.0 ** -8, -3.0]) == [1.0, 1 + 2.0 ** -6, -3.0]
    assert dr.current_scale(4.0, dr.E4M3) == 112.0
    assert dr.current_scale(3.0, dr.E4M3, pow2=True) == 128.0  # 149.33 rounded down to a power of 2
    assert dr.current_scale(0.0, dr.E4M3) == 1.0
    # A whole-tensor scale maps amax to 448 exactly; a block's power-of-2 scale maps it into [224, 448].
    rows = [[3.0, -0.5, 0.25] * 64]
    assert max(abs(v) for v in dr.quantize_per_tensor(rows, dr.E4M3)[0]) == 3.0
    assert dr.quantize_blocks_1d(rows, dr.E4M3)[0][:3] == [3.0, -0.5, 0.25]


def test_block_scaling_keeps_a_scale_per_128_values() -> None:
    small, large = [0.0001 * (i % 7 + 1) for i in range(128)], [1000.0] * 128
    per_block = dr.quantize_blocks_1d([small + large], dr.E4M3)[0]
    per_tensor = dr.quantize_per_tensor([small + large], dr.E4M3)[0]
    assert max(abs(q - v) / v for q, v in zip(per_block[:128], small, strict=True)) < 2 ** -4
    assert all(q == 0.0 for q in per_tensor[:128])  # 0.0007 * 448 / 1000 is below half of 2^-9


# ----------------------------------------------------------------------------- the measure separates
def test_at_r_1_the_recipes_agree_within_a_db(document: dict[str, Any]) -> None:
    data = document["data"]
    for kind in schema.INPUTS:
        current = _case(data, "activation", kind, 1.0, "fp8-current")
        block = _case(data, "activation", kind, 1.0, "fp8-block")
        for part in ("gemm", "quantize"):
            for field in ("whole_db", "row_median_db"):
                assert abs(current[part][field] - block[part][field]) < 1.0, (kind, part, field)


def test_massive_tokens_separate_per_tensor_from_block_scaling_per_row(document: dict[str, Any]) -> None:
    data = document["data"]
    current = _case(data, "activation", "massive-tokens", 1e5, "fp8-current")
    block = _case(data, "activation", "massive-tokens", 1e5, "fp8-block")
    # Every ordinary token's scale is 10^5 too small: its values sink into E4M3's subnormals.
    assert current["gemm"]["row_median_db"] < block["gemm"]["row_median_db"] - 15
    assert current["quantize"]["row_median_db"] < block["quantize"]["row_median_db"] - 15
    # ... and the whole-tensor SQNR hides it: the few huge rows hold almost all of the energy.
    assert current["gemm"]["whole_db"] > block["gemm"]["whole_db"] - 1.5
    assert current["gemm"]["whole_db"] > current["gemm"]["row_median_db"] + 15
    # At 10^4 the loss has begun (E4M3 spans 2^17.8 from 448 to its smallest subnormal).
    at_1e4 = _case(data, "activation", "massive-tokens", 1e4, "fp8-current")["gemm"]["row_median_db"]
    assert block["gemm"]["row_median_db"] > at_1e4 > current["gemm"]["row_median_db"]


def test_outlier_channels_show_in_the_non_outlier_elements(document: dict[str, Any]) -> None:
    data = document["data"]
    current = _case(data, "activation", "outlier-channels", 1e5, "fp8-current")
    block = _case(data, "activation", "outlier-channels", 1e5, "fp8-block")
    assert current["quantize"]["bulk_db"] < 12 and current["quantize"]["whole_db"] > 25
    assert block["quantize"]["bulk_db"] > current["quantize"]["bulk_db"]


def test_gradients_per_tensor_e5m2_holds_its_range_but_has_fewer_bits(document: dict[str, Any]) -> None:
    data = document["data"]
    for ratio in RATIOS:
        current = _case(data, "gradient", "massive-tokens", ratio, "fp8-current")["gemm"]["row_median_db"]
        block = _case(data, "gradient", "massive-tokens", ratio, "fp8-block")["gemm"]["row_median_db"]
        assert 22 < current < block - 2.5, ratio  # E5M2's 2 mantissa bits, at every R up to 10^5


def test_bf16_is_the_ceiling(document: dict[str, Any]) -> None:
    for case in document["data"]["cases"]:
        bf16 = case["results"]["bf16"]["gemm"]["row_median_db"]
        assert bf16 > 50 and all(r["gemm"]["row_median_db"] < bf16 for p, r in case["results"].items() if p != "bf16")


def test_summaries_of_rows() -> None:
    summary = dr.summarize([1.0, 1.0, 100.0], [0.01, 0.001, 0.01], bulk=(2.0, 0.011))
    assert summary["row_median_db"] == pytest.approx(30.0) and summary["row_min_db"] == pytest.approx(20.0)
    assert summary["bulk_db"] == pytest.approx(10 * math.log10(2 / 0.011))
    assert summary["whole_db"] == pytest.approx(10 * math.log10(102 / 0.021))
    with pytest.raises(dr.DynamicRangeError, match="all zeros"):
        dr.summarize([0.0], [1.0])


def test_the_model_and_recipes_blocks_say_what_they_are(document: dict[str, Any]) -> None:
    data = document["data"]
    assert data["source"] == "cpu-model" and "not Transformer Engine" in document["provenance"]["method"]["quantizers"]
    recipes = data["recipes"]
    assert recipes["fp8-current"]["formats"] == {"activation": "E4M3", "gradient": "E5M2"}
    assert recipes["fp8-block"]["formats"] == {"activation": "E4M3", "gradient": "E4M3"}
    assert recipes["fp8-delayed"] == {"status": "same-as", "same_as": "fp8-current", "reason": dr.DELAYED_REASON}
    assert recipes["nvfp4"]["status"] == "unsupported"


def test_recipes_read_transformer_engines_reason() -> None:
    from gemm_bench.question.plan import Support

    support = {"mxfp8": Support(False, "MXFP8 needs compute capability 10.0"), "nvfp4": Support(False, "")}
    recipes = dr.recipe_entries(support)
    assert recipes["mxfp8"] == {"status": "unsupported", "reason": "MXFP8 needs compute capability 10.0"}
    assert recipes["nvfp4"]["reason"] == "NVFP4 is not supported on this GPU"
    assert recipes["fp8-delayed"]["status"] == "same-as"
    no_fp8 = dr.recipe_entries({"fp8-current": Support(False, "FP8 needs sm_89"),
                                "fp8-delayed": Support(False, "FP8 needs sm_89")})
    assert no_fp8["fp8-delayed"] == {"status": "unsupported", "reason": "FP8 needs sm_89"}


# ----------------------------------------------------------------------------- validation
def _set(path: tuple[Any, ...], value: Any) -> Callable[[dict[str, Any]], None]:
    def edit(data: dict[str, Any]) -> None:
        target = data
        for key in path[:-1]:
            target = target[key]
        if value is _DELETE:
            del target[path[-1]]
        else:
            target[path[-1]] = value
    return edit


_DELETE = object()
BAD = [
    (_set(("shape",), _DELETE), "$.data.shape", "is missing"),
    (_set(("source",), "gpu"), "$.data.source", "must be one of"),
    (_set(("shape", "m"), 1.5), "$.data.shape.m", "whole number"),
    (_set(("shape", "k"), True), "$.data.shape.k", "whole number"),
    (_set(("ratios",), "1, 10"), "$.data.ratios", "non-empty list"),
    (_set(("ratios", 1), math.nan), "$.data.ratios[1]", "finite"),
    (_set(("ratios", 2), 1.0), "$.data.ratios[2]", "does not increase"),
    (_set(("recipes", "fp8-block", "status"), "maybe"), "$.data.recipes.fp8-block.status", "must be one of"),
    (_set(("recipes", "fp8-current", "formats"), {"activation": "E4M3"}),
     "$.data.recipes.fp8-current.formats.gradient", "is missing"),
    (_set(("cases", 0, "results", "fp8-current", "gemm", "whole_db"), math.nan),
     "$.data.cases[0].results.fp8-current.gemm.whole_db", "finite"),
    (_set(("cases", 0, "results", "fp8-current", "gemm", "whole_db"), "28.5"),
     "$.data.cases[0].results.fp8-current.gemm.whole_db", "must be a finite number"),
    (_set(("cases", 0, "results", "fp8-current", "gemm", "row_min_db"), 99.0),
     "$.data.cases[0].results.fp8-current.gemm.row_min_db", "above the median"),
    (_set(("cases", 0, "results", "fp8-block", "quantize"), _DELETE),
     "$.data.cases[0].results.fp8-block.quantize", "is missing"),
    (_set(("cases", 0, "results", "fp8-block"), _DELETE), "$.data.cases[0].results.fp8-block", "is missing"),
    (_set(("cases", 0, "amax_over_median"), -1.0), "$.data.cases[0].amax_over_median", "positive"),
    (_set(("cases", 0, "ratio"), 7.0), "$.data.cases[0].ratio", "not one of the study's ratios"),
    (_set(("cases", 0, "surprise"), 1), "$.data.cases[0].surprise", "is not a field"),
    (lambda d: d["cases"].pop(), "$.data.cases", "has no case"),
    (lambda d: d["cases"].append(copy.deepcopy(d["cases"][0])), "$.data.cases[", "repeats"),
]


@pytest.mark.parametrize(("edit", "where", "problem"), BAD, ids=[f"{w} {p}" for _, w, p in BAD])
def test_validation_names_the_json_path(document: dict[str, Any], edit: Callable[[dict[str, Any]], None],
                                        where: str, problem: str) -> None:
    data = copy.deepcopy(document["data"])
    edit(data)
    with pytest.raises(StudyError) as caught:
        schema.validate_data(data)
    assert caught.value.where.startswith(where) and problem in caught.value.problem, str(caught.value)
    assert str(caught.value).startswith(where)


def test_a_valid_document_validates(document: dict[str, Any]) -> None:
    studies.validate(document)
    schema.validate_data(json.loads(json.dumps(document["data"])))


# ----------------------------------------------------------------------------- the cache
def test_round_trip_through_the_cache(tmp_path: Path, document: dict[str, Any]) -> None:
    path = studies.write_study(tmp_path, document)
    assert path == tmp_path / "studies" / "dynamic-range--h100-80gb-hbm3.json"
    docs, errors = studies.read_studies(tmp_path, schema.NAME)
    assert errors == [] and docs == [json.loads(json.dumps(document))]


def test_a_bad_file_is_an_error_naming_its_path(tmp_path: Path, document: dict[str, Any]) -> None:
    studies.write_study(tmp_path, document)
    bad = copy.deepcopy(document)
    bad["device"] = dict(H200)
    bad["data"]["cases"][0]["results"]["fp8-current"]["gemm"]["whole_db"] = math.nan
    path = tmp_path / "studies" / studies.file_name(schema.NAME, H200["name"])
    path.write_text(json.dumps(bad), encoding="utf-8")  # json writes NaN, which JSON does not have
    docs, errors = studies.read_studies(tmp_path, schema.NAME)
    assert [d["device"]["name"] for d in docs] == [H100["name"]]
    assert len(errors) == 1 and str(errors[0]).startswith(str(path)) and "NaN" in str(errors[0])
    path.write_text(json.dumps({**bad, "data": {**bad["data"], "cases": []}}), encoding="utf-8")
    _, errors = studies.read_studies(tmp_path, schema.NAME)
    assert str(errors[0]).startswith(str(path)) and "$.data.cases" in str(errors[0])


def test_the_study_is_registered_where_gemm_bench_looks() -> None:
    from gemm_bench.measure.studies import load_registry

    assert load_registry()[schema.NAME].measure == "gemm_bench.measure.dynamic_range:measure"


def test_the_pure_modules_import_without_torch_or_sphinx() -> None:
    code = (
        "import sys\n"
        "import gemm_bench.results.dynamic_range_schema, gemm_bench.measure.dynamic_range\n"
        "import gemm_bench.report.line_figure\n"
        "bad = sorted(m for m in sys.modules if m.split('.')[0] in ('torch', 'transformer_engine', 'numpy',\n"
        "                                                           'matplotlib', 'sphinx', 'docutils'))\n"
        "assert not bad, bad\n"
        "print('pure')\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "pure"


# ----------------------------------------------------------------------------- on a GPU
@pytest.mark.gpu
def test_transformer_engine_agrees_with_the_model() -> None:
    """TE's quantizers and GEMMs on a small size: valid data, the model's direction, the model's level."""
    data, method = dr.measure(m=512, k=512, n=512, ratios=(1.0, 1e4, 1e5))
    schema.validate_data(data)
    assert data["source"] == "transformer-engine" and "Float8BlockQuantizer" in method["quantizers"]
    for ratio in (1e4, 1e5):
        got = dr.direction(data, "activation", "massive-tokens", ratio)
        assert got["fp8-block"] >= got["fp8-current"], (ratio, got)
    at_1e5 = dr.direction(data, "activation", "massive-tokens", 1e5)
    assert at_1e5["fp8-block"] > at_1e5["fp8-current"] + 10
    model = {(t, k): dr.model_case(t, k, 1.0, dr.MODELLED, **SIZE) for t in schema.TENSORS for k in schema.INPUTS}
    for (tensor, kind), case in model.items():
        for pid in ("fp8-current", "fp8-block"):
            te_value = dr.direction(data, tensor, kind, 1.0)[pid]
            assert abs(te_value - case["results"][pid]["gemm"]["row_median_db"]) < 1.0, (tensor, kind, pid)


@pytest.mark.gpu
def test_the_whole_study_measures_in_seconds() -> None:
    from gemm_bench.measure.studies import measure_study

    start = time.perf_counter()
    doc = measure_study(schema.NAME)
    elapsed = time.perf_counter() - start
    studies.validate(doc)
    assert elapsed < 60, f"the study took {elapsed:.1f} s"
    failed = [(c["tensor"], c["input"], c["ratio"], p) for c in doc["data"]["cases"]
              for p, r in c["results"].items() if r["status"] != "measured"]
    assert not failed, failed
