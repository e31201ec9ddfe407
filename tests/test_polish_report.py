"""Reader pass 3, item 9: ``gemm-bench report`` on the dynamic-range study gives a recipe x R table,
not one value per line (100 lines before), within 100 columns; every stored value is in it."""

from __future__ import annotations

import copy
import json
from pathlib import Path

from gemm_bench.report.study_compare import dynamic_range_table
from tests.test_cli import call  # main in this process: (exit status, stdout, stderr)

STUDIES = Path(__file__).resolve().parent.parent / "docs" / "_gemm_cache" / "studies"
STUDY = STUDIES / "dynamic-range--h100-80gb-hbm3.json"


def test_report_on_the_dynamic_range_study_is_a_table_in_100_columns() -> None:
    code, out, err = call(["report", str(STUDY)])
    assert code == 0 and err == ""
    lines = out.splitlines()
    # 30 lines before the median row was shown beside the whole tensor (issue 44): 8 more, and its sentence.
    assert len(lines) <= 45, f"{len(lines)} lines"
    assert max(map(len, lines)) <= 100
    doc = json.loads(STUDY.read_text(encoding="utf-8"))
    ratios = doc["data"]["ratios"]
    header = next(line for line in lines if line.split()[:1] == ["R"])
    assert header.split()[1:] == [f"{r:g}" for r in ratios]
    # each (tensor, input) block's FP8 Current row holds the stored values in R order
    for case in ("activation, massive-tokens", "gradient, outlier-channels"):
        tensor, kind = case.split(", ")
        at = lines.index(f"  {case}")
        # FP8 Current's median row, then its whole tensor (issue 44: the median row is the finding)
        row = next(i for i, line in enumerate(lines) if i > at and line.strip().startswith("FP8 Current"))
        for line, words, key in ((lines[row], "FP8 Current median row", "row_median_db"),
                                 (lines[row + 1], "whole", "whole_db")):
            want = [f"{c['results']['fp8-current']['gemm'][key]:.1f}" for c in doc["data"]["cases"]
                    if c["tensor"] == tensor and c["input"] == kind]
            assert line.split() == [*words.split(), *want]
    assert "FP8 Delayed: same as FP8 Current" in out


def test_a_failed_case_and_ratios_that_do_not_fit_one_table() -> None:
    """A failed cell reads "failed"; 20 ratios split into tables that each fit 100 columns."""
    doc = json.loads(STUDY.read_text(encoding="utf-8"))
    doc = copy.deepcopy(doc)
    doc["data"]["cases"][0]["results"]["fp8-block"] = {"status": "failed", "reason": "out of memory"}
    doc["data"]["ratios"] = [float(10 ** (i / 4)) for i in range(20)]
    lines = dynamic_range_table(doc)
    assert max(map(len, lines)) <= 100
    assert sum(1 for line in lines if line.split()[:1] == ["R"]) >= 2
    assert "failed" in next(line for line in lines if line.strip().startswith("FP8 Block"))
