"""Issue 42 item 2: the tp-comm study carries the collective sweep its run measured on the box, as the
tool wrote it (transformed by code, never typed), and the composition reads its costs from it."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest

from gemm_bench.question.comm import bus_bandwidth_gb_s
from gemm_bench.results import studies
from gemm_bench.results import tp_comm_schema as schema

ROOT = Path(__file__).resolve().parents[1]
STUDY = ROOT / "docs" / "_gemm_cache" / "studies" / "tp-comm--h200.json"


def _raw() -> dict[str, Any]:
    doc = studies.read_study(STUDY)
    raw: dict[str, Any] = json.loads((ROOT / doc["provenance"]["method"]["source"]).read_text(encoding="utf-8"))
    return raw


def test_the_committed_study_is_the_tool_output_transformed_by_code() -> None:
    doc = studies.read_study(STUDY)
    assert doc["data"] == schema.stored_data(_raw())


def test_the_sweep_holds_every_op_and_dtype_the_step_uses_for_both_group_sizes() -> None:
    data = studies.read_study(STUDY)["data"]
    have = {(r["op"], r["dtype"], r["group"]) for r in data["sweep"] if r["ms"] is not None}
    for group in (2, 4):
        for op, dtype in (("all-gather", "bf16"), ("all-gather", "uint8"), ("reduce-scatter", "bf16"),
                          ("reduce-scatter", "fp32"), ("all-reduce", "bf16"), ("all-reduce", "fp32"),
                          ("all-to-all", "bf16"), ("send-recv", "bf16")):
            assert (op, dtype, group) in have


def test_a_cost_read_from_the_table_is_the_slowest_ranks_median_of_the_raw_file() -> None:
    data = studies.read_study(STUDY)["data"]
    table = schema.collective_table(data)
    assert table is not None
    raw = next(r for r in _raw()["sweep"]["4"] if (r["op"], r["dtype"], r["bytes"]) == ("all-gather", "uint8", 1 << 26))
    cost = table.cost("all-gather", "uint8", 1 << 26, 4)
    assert (cost.ms, cost.how) == (raw["ms"], "measured")
    assert raw["ms"] == max(raw["per_rank_ms"].values())


def test_a_study_without_sweep_stays_valid_and_has_no_table() -> None:
    data = copy.deepcopy(studies.read_study(STUDY)["data"])
    del data["sweep"]
    schema.validate_data(data)
    assert schema.collective_table(data) is None


@pytest.mark.parametrize(("field", "value", "problem"), [
    ("busbw_gb_s", 999.0, "is not the bus bandwidth"),
    ("group", 8, "must be"),
    ("op", "broadcast", "must be"),
    ("ms", -1.0, "must be positive"),
])
def test_a_doctored_sweep_record_is_refused_at_its_path(field: str, value: Any, problem: str) -> None:
    data = copy.deepcopy(studies.read_study(STUDY)["data"])
    data["sweep"][3][field] = value
    with pytest.raises(studies.StudyError, match=r"\$\.data\.sweep\[3\]") as caught:
        schema.validate_data(data)
    assert problem in str(caught.value)


def test_a_repeated_record_and_a_failed_size_without_reason_are_refused() -> None:
    data = copy.deepcopy(studies.read_study(STUDY)["data"])
    data["sweep"].append(dict(data["sweep"][0]))
    with pytest.raises(studies.StudyError, match="repeats"):
        schema.validate_data(data)
    data = copy.deepcopy(studies.read_study(STUDY)["data"])
    data["sweep"][0] = {**data["sweep"][0], "ms": None}
    with pytest.raises(studies.StudyError, match=r"sweep\[0\]\.error"):
        schema.validate_data(data)


def test_stored_sweep_keeps_failures_and_recomputes_nothing_but_the_bus_bandwidth() -> None:
    tool = {"sweep": {"2": [{"op": "all-reduce", "dtype": "fp32", "group": 2, "bytes": 1 << 20, "ms": 0.5,
                             "per_rank_ms": {"0": 0.5, "1": 0.4}, "busbw_gb_s": 1.0},
                            {"op": "all-reduce", "dtype": "fp32", "group": 2, "bytes": 1 << 21, "ms": None,
                             "per_rank_ms": {}, "error": "RuntimeError: CUDA out of memory"}]}}
    out = schema.stored_sweep(tool)
    assert out[0] == {"op": "all-reduce", "dtype": "fp32", "group": 2, "bytes": 1 << 20, "ms": 0.5,
                      "busbw_gb_s": round(bus_bandwidth_gb_s("all-reduce", 1 << 20, 0.5, 2), 3)}
    assert out[1]["ms"] is None and out[1]["error"].startswith("RuntimeError")
