"""The freshness table lists every result on the site with its status; the build log says the same."""

from __future__ import annotations

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
    assert [r[1] for r in rows] == ["fresh-one", "stale-one", "missing-one", "failed-one"]
    statuses = [r[5].split()[0] for r in rows]
    assert statuses == ["fresh", "stale", "missing", "failed"]
    assert f"measured with method version '0', current is {METHOD_VERSION}" in rows[1][5]
    assert rows[0][2] == "H100 80GB HBM3" and rows[0][3] == "2026-11-23" and rows[0][4] == METHOD_VERSION
    assert rows[0][5] == "fresh"  # no earlier method is still valid since method v4 (STILL_VALID_METHODS is empty)
    assert rows[2][2] == "–"
    assert table.select_one("a.reference.internal")["href"] == "results.html"
    log = re.sub(r"\x1b\[[0-9;]*m", "", status.getvalue())
    assert "gemm-benchmark: 4 results (1 failed, 1 fresh, 1 missing, 1 stale)" in log
    assert re.search(r"results\s+stale-one\s+H100 80GB HBM3\s+2026-11-20\s+v0\s+stale", log)


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
