"""Issue 31, item 3, beyond the tables and figures: a number resting on a time the profiler
cross-check flags carries its mark (the flag, with its ratio, in its detail) in the summary's
cells and notes, in every role that quotes it, and in the answer sentence; a summary panel whose
result breaks the file's median bound says so under its table. A clean result shows no mark."""

from __future__ import annotations

from typing import Any

from gemm_bench.question.question import build_question
from gemm_bench.report.report import Report
from gemm_bench.results.typed import parse
from gemm_benchmark import records
from gemm_benchmark.render_table import FLAG_MARK
from gemm_benchmark.roles import displayed
from gemm_benchmark.summary_answer import Measured, Panel, panel
from gemm_benchmark.values import device_values
from tests.conftest import H100
from tests.fake_beyond import beyond_document

PRECISIONS = ["fp8-current", "fp8-block"]


def _flag_graphed_step(doc: dict[str, Any], precision: str, ratio: float = 1.6) -> dict[str, Any]:
    """The graphed step of ``precision`` profiled at ``ratio`` (kernel time = its time / ratio, the
    same launches), every other graphed step at 1.01: one flagged region, as issue 31 found."""
    for cell in doc["layer"]:
        if cell["mode"] == "layer-graphed" and cell["status"] == "measured":
            r = ratio if cell["precision"] == precision else 1.01
            cell.update(kernel_ms=round(cell["ms"] / r, 6), kernel_ratio=r)
    return doc


def _every_gemm_at(doc: dict[str, Any], ratio: float) -> dict[str, Any]:
    for cell in doc["cells"]:
        if cell["status"] == "measured":
            cell.update(kernel_ms=round(cell["ms"] / ratio, 6), kernel_ratio=ratio)
    return doc


def _reports(doc: dict[str, Any]) -> dict[str, Report]:
    q = build_question(model="te-guide-5b")
    return {m: Report(doc, gemms=list(q.gemms), num_layers=q.num_layers, kind=q.kind, modes=[m])
            for m in ("autocast", "prequant")}


def _panel(doc: dict[str, Any]) -> Panel:
    return panel(Measured(H100["name"], parse(doc), _reports(doc)), "", "TE layer", ["autocast", "prequant"],
                 "autocast", ["layer-graphed"], PRECISIONS, accuracy_row=True)


def _cells(found: Panel) -> list[Any]:
    return [c for row in found.table.rows for c in row]


def test_a_flagged_step_is_marked_in_the_summary_cell_its_notes_and_the_answer() -> None:
    """Before, the summary's cell and sentence said "train in FP8 Current: 1.38×" with no mark."""
    found = _panel(_flag_graphed_step(beyond_document(), "fp8-current"))
    step = next(row for row in found.table.rows if row[0].text.startswith("One layer's step"))
    fp8 = step[1 + PRECISIONS.index("fp8-current")]
    assert FLAG_MARK in fp8.text and fp8.text.index(FLAG_MARK) < fp8.text.index("★")
    assert "gemm-flagged" in fp8.classes and "FP8 Current step: timed 1.60x" in fp8.tooltip
    block = step[1 + PRECISIONS.index("fp8-block")]
    assert FLAG_MARK not in block.text  # its own step and BF16's hold
    assert [n for n in found.notes if n.startswith(FLAG_MARK)] == [
        n for n in found.notes if "timed 1.60x" in n] and any("timed 1.60x" in n for n in found.notes)
    assert all(FLAG_MARK not in c.text for row in found.table.rows[:2] for c in row)  # the GEMM rows hold
    assert found.sentence is not None
    assert "train in FP8 Current" in found.sentence.text
    assert f"({FLAG_MARK} its step time fails the cross-check: ratio 1.60)" in found.sentence.text
    assert found.file_flag == ""  # one region of many: the median holds


def test_a_flagged_bf16_step_marks_every_step_speedup_and_the_answer_says_whose() -> None:
    found = _panel(_flag_graphed_step(beyond_document(), "bf16"))
    step = next(row for row in found.table.rows if row[0].text.startswith("One layer's step"))
    assert all(FLAG_MARK in c.text and "BF16 step: timed 1.60x" in c.tooltip for c in step[1:])
    assert found.sentence is not None and "BF16's step time, which it divides, fails the cross-check: ratio 1.60" \
        in found.sentence.text


def test_a_role_quoting_a_flagged_number_shows_the_mark_and_the_flag() -> None:
    doc = _flag_graphed_step(beyond_document(), "fp8-current")
    values = device_values(_reports(doc), "H100", "")
    text, title, classes = displayed(values[records.value_key("gemm-step-speedup", "layer-graphed", "fp8-current")])
    assert text.endswith(f" {FLAG_MARK}") and "gemm-flagged" in classes
    assert f"{FLAG_MARK} FP8 Current step: timed 1.60x" in title
    text, title, _ = displayed(values[records.value_key("gemm-step-speedup", "layer-graphed", "fp8-block")])
    assert FLAG_MARK not in text + title
    text, _, _ = displayed(values[records.value_key("gemm-step-speedup", "layer", "fp8-current")])
    assert FLAG_MARK not in text  # the eager step stores no kernel time: nothing to flag


def test_the_fastest_step_roles_rest_on_the_answers_flagged_speedup() -> None:
    """``:gemm-fastest:`` and ``fastest`` quote the answer's step speedup: a flagged BF16 step flags it."""
    values = device_values(_reports(_flag_graphed_step(beyond_document(), "bf16")), "H100", "")
    for key in (records.value_key("gemm-step-speedup", "layer-graphed", "fastest"),
                records.value_key("gemm-fastest", "layer-graphed", "")):
        text, title, _ = displayed(values[key])
        assert text.endswith(f" {FLAG_MARK}") and f"{FLAG_MARK} BF16 step: timed 1.60x" in title, key
    assert FLAG_MARK not in displayed(values[records.value_key("gemm-fastest", "layer", "")])[0]


def test_a_role_quoting_a_flagged_gemm_time_its_speedup_and_the_totals_is_marked() -> None:
    doc = beyond_document()
    for cell in doc["cells"]:
        if cell["status"] == "measured":
            r = 1.6 if (cell["precision"], cell["op"], cell["pass"], cell["mode"]) == (
                "bf16", "qkv", "fprop", "autocast") else 1.0
            cell.update(kernel_ms=round(cell["ms"] / r, 6), kernel_ratio=r)
    values = device_values(_reports(doc), "H100", "")
    flagged = [records.value_key("gemm-time", "autocast", "bf16", "qkv/fprop"),
               records.value_key("gemm-tflops", "autocast", "bf16", "qkv/fprop"),
               records.value_key("gemm-speedup", "autocast", "fp8-current", "qkv/fprop"),
               records.value_key("gemm-speedup", "autocast", "fp8-current"),
               records.value_key("gemm-time", "autocast", "bf16")]
    for key in flagged:
        assert displayed(values[key])[0].endswith(FLAG_MARK) and "timed 1.60x" in displayed(values[key])[1], key
    for key in (records.value_key("gemm-time", "autocast", "fp8-current", "qkv/fprop"),
                records.value_key("gemm-speedup", "autocast", "fp8-current", "mlp_up/fprop"),
                records.value_key("gemm-time", "prequant", "bf16", "qkv/fprop")):
        assert FLAG_MARK not in displayed(values[key])[0], key


def test_a_summary_panel_whose_median_breaks_the_bound_says_so() -> None:
    found = _panel(_every_gemm_at(beyond_document(), 1.12))
    assert found.file_flag.startswith(f"{FLAG_MARK} On the H100 80GB HBM3, the profiler cross-check of this result")
    assert all(FLAG_MARK not in c.text for c in _cells(found))  # no region breaks 1.20: no number marked


def test_a_clean_result_shows_no_mark_anywhere() -> None:
    doc = _flag_graphed_step(_every_gemm_at(beyond_document(), 1.01), "nobody")
    found = _panel(doc)
    assert all(FLAG_MARK not in c.text + c.tooltip for c in _cells(found))
    assert not any(FLAG_MARK in n for n in found.notes) and found.file_flag == ""
    assert found.sentence is not None and FLAG_MARK not in found.sentence.text
    values = device_values(_reports(doc), "H100", "")
    assert all(not v.flag for v in values.values())
    assert all(FLAG_MARK not in displayed(v)[0] for v in values.values() if v.available)


def test_a_value_pickled_before_the_flag_field_reads_unflagged() -> None:
    """An environment pickled before :attr:`records.Value.flag` existed holds values without it."""
    import pickle

    value = records.Value("1.20×", "tip")
    state = pickle.loads(pickle.dumps(value))
    del state.__dict__["flag"]  # as unpickled from an older environment
    assert state.flag == "" and displayed(state) == ("1.20×", "tip", ["gemm-value"])
