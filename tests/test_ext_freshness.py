"""The freshness table lists every result on the site with its status; the build log says the same."""

from __future__ import annotations

import io
import re
from datetime import datetime, timezone
from pathlib import Path

import pytest
from bs4 import BeautifulSoup

from gemm_bench.question.question import build_question
from gemm_bench.results.schema import METHOD_VERSION


@pytest.mark.sphinx("html", testroot="freshness", srcdir="freshness-table",
                    confoverrides={"suppress_warnings": ["gemm_benchmark.stale", "gemm_benchmark.missing"]})
def test_freshness_table_and_log(app, real_result, make_result, store_result, status, warning):
    cache = Path(app.srcdir) / "_gemm_cache"
    real_result(cache, "h100-te-guide-5b.json")
    real_result(cache, "h100-mixtral-8x7b.json")  # has failed cells
    store_result(cache, make_result(build_question(model="llama3-8b"), method_version="0"))  # stale method
    app.build()
    assert warning.getvalue() == ""
    soup = BeautifulSoup((Path(app.outdir) / "index.html").read_text(encoding="utf-8"), "html.parser")
    table = soup.select_one("table.gemm-freshness")
    rows = [[td.get_text(" ", strip=True) for td in tr.select("td")] for tr in table.select("tbody tr")]
    assert [r[5] for r in rows] == ["results (fresh-one)", "results (stale-one)", "results (missing-one)",
                                    "results (failed-one)"]
    statuses = [r[4].split()[0] for r in rows]
    assert statuses == ["fresh", "stale", "missing", "failed"]
    assert f"measured with method version '0', current is {METHOD_VERSION}" in rows[1][4]
    assert rows[0][1] == "H100 80GB HBM3" and rows[0][2] == "2026-11-23" and rows[0][3] == METHOD_VERSION
    assert rows[0][4] == "fresh"  # no earlier method is still valid since method v4 (STILL_VALID_METHODS is empty)
    assert rows[0][0] == build_question(model="te-guide-5b").describe()
    assert rows[2][1] == "–"
    assert table.select_one("a.reference.internal")["href"] == "results.html"
    log = re.sub(r"\x1b\[[0-9;]*m", "", status.getvalue())
    assert "gemm-benchmark: 4 results (1 failed, 1 fresh, 1 missing, 1 stale)" in log
    assert re.search(r"H100 80GB HBM3\s+2026-11-20\s+v0\s+stale .*; shown on results \(stale-one\)", log)


@pytest.mark.sphinx("html", testroot="freshness", srcdir="freshness-max-age",
                    confoverrides={"gemm_benchmark_max_age_days": 30})
def test_max_age_makes_old_results_stale(app, make_result, store_result, warning):
    cache = Path(app.srcdir) / "_gemm_cache"
    today = datetime.now(timezone.utc).replace(microsecond=0).isoformat()
    store_result(cache, make_result(build_question(model="te-guide-5b"), date=today))
    store_result(cache, make_result(build_question(model="llama3-8b"), date="2020-01-01T00:00:00+00:00"))
    app.build()
    text = re.sub(r"\x1b\[[0-9;]*m", "", warning.getvalue())
    assert "results.rst:4: WARNING" not in text
    assert re.search(r"results\.rst:9: WARNING: gemm-benchmark: result on NVIDIA H100 80GB HBM3 is stale: "
                     r"\d+ days old, older than the configured 30 \[gemm_benchmark\.stale\]", text)


SUMMARY_PAGE = """\
Summary
=======

.. gemm-benchmark::
   :name: te-one
   :model: te-guide-5b
   :precisions: bf16, fp8-current
   :modes: autocast

.. gemm-benchmark-summary::
   :models: te-guide-5b, llama3-8b, llama3-70b/tp8
   :precisions: bf16, fp8-current
   :modes: autocast
   :devices: h100
   :show: table
"""


def test_freshness_lists_every_model_of_a_summary(tmp_path, make_app, real_result, make_result, store_result):
    """A model that only a summary shows is a row too (the models page's models were on no list)."""
    from gemm_benchmark import records

    src = tmp_path / "src"
    src.mkdir()
    (src / "conf.py").write_text('extensions = ["gemm_benchmark"]\n'
                                 'suppress_warnings = ["gemm_benchmark.stale", "gemm_benchmark.missing"]\n',
                                 encoding="utf-8")
    (src / "index.rst").write_text("Freshness\n=========\n\n.. toctree::\n\n   summary\n\n"
                                   ".. gemm-benchmark-freshness::\n", encoding="utf-8")
    (src / "summary.rst").write_text(SUMMARY_PAGE, encoding="utf-8")
    cache = src / "_gemm_cache"
    real_result(cache, "h100-te-guide-5b.json")
    store_result(cache, make_result(build_question(model="llama3-8b"), method_version="0"))  # stale method
    status = io.StringIO()
    app = make_app("html", srcdir=src, status=status)
    app.build()
    soup = BeautifulSoup((Path(app.outdir) / "index.html").read_text(encoding="utf-8"), "html.parser")
    rows = [[td.get_text(" ", strip=True) for td in tr.select("td")]
            for tr in soup.select_one("table.gemm-freshness").select("tbody tr")]
    # One row per result: te-one and the summary's first model show one result (one row, one page entry).
    assert [r[4].split()[0] for r in rows] == ["fresh", "stale", "missing"]
    assert rows[0][5] == "summary (te-one)"  # one entry per page: the name a role quotes there
    assert rows[1][5] == "summary (Llama 3 8B, summary)"
    assert rows[2][5] == "summary (Llama 3 70B (TP 8), summary)" and rows[2][1] == "h100-80gb-hbm3 (no result)"
    log = re.sub(r"\x1b\[[0-9;]*m", "", status.getvalue())
    assert "gemm-benchmark: 3 results (1 fresh, 1 missing, 1 stale)" in log
    assert records.find(app.env, "Llama 3 8B") is None, "a role never quotes a summary's model"
    assert records.find(app.env, "te-one") is not None
