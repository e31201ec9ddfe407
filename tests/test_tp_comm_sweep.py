"""Issue 42 item 2: the tp-comm study carries the collective sweep its run measured on the box, as the
tool wrote it (transformed by code, never typed), and the composition reads its costs from it."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest

from gemm_bench.question.comm import bus_bandwidth_gb_s
from gemm_bench.results import studies
from gemm_bench.results import tp_comm_schema as schema

ROOT = Path(__file__).resolve().parents[1]
STUDY = ROOT / "docs" / "_gemm_cache" / "studies" / "tp-comm--h200.json"


def _raw() -> dict[str, Any]:
    import importlib.util

    spec = importlib.util.spec_from_file_location("tp_comm_to_study", ROOT / "tools" / "tp_comm_to_study.py")
    assert spec is not None and spec.loader is not None
    tool = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(tool)
    doc = studies.read_study(STUDY)
    raw: dict[str, Any] = tool.read_raw(ROOT / doc["provenance"]["method"]["source"])
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


def test_the_serialized_step_is_carried_checked_and_shown() -> None:
    """Issue 42 item 3 (session 15): the run held the composition to the same layer with its
    collectives serialized; the study carries that step, refuses a ratio that is not composed over it,
    and the page's table shows it beside composed / real."""
    doc = studies.read_study(STUDY)
    first = doc["data"]["cells"][0]["regions"]["first"]
    assert first["composed_over_serial"] == pytest.approx(first["composed_ms"] / first["real_serial_ms"])
    assert first["overlap_hidden_ms"] == pytest.approx(first["real_serial_ms"] - first["real_ms"])
    assert doc["provenance"]["commit_recorded"] != doc["provenance"]["commit"]  # the box's stale git, said
    bad = copy.deepcopy(doc["data"])
    bad["cells"][0]["regions"]["first"]["composed_over_serial"] *= 1.1
    with pytest.raises(studies.StudyError, match="composed_over_serial"):
        schema.validate_data(bad)
    from gemm_benchmark.study_tp_comm import rows

    shown = rows(doc["data"])[0][-1]
    assert shown.text == f"{first['composed_over_serial']:.3f} / " \
                         f"{doc['data']['cells'][0]['regions']['cached']['composed_over_serial']:.3f}"
    old = copy.deepcopy(doc["data"])
    for region in old["cells"][0]["regions"].values():
        for key in ("real_serial_ms", "composed_over_serial", "overlap_hidden_ms"):
            region.pop(key)
    schema.validate_data(old)  # a file from before the serialized step stays valid
    assert rows(old)[0][-1].text == "not run"
