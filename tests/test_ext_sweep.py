"""Square-size sweeps, manual shapes and Hugging Face configs render per their kind."""

from __future__ import annotations

from pathlib import Path

import pytest
from bs4 import BeautifulSoup

from gemm_bench.question.question import build_question
from gemm_bench.report.report import Report
from tests.helpers import near, tooltip_number


@pytest.mark.sphinx("html", testroot="sweep", srcdir="sweep-html")
def test_sweep_shapes_and_hf_config(app, make_result, store_result, warning):
    cache = Path(app.srcdir) / "_gemm_cache"
    sweep = make_result(build_question(sweep=["1024", "2048", "4096"]))
    store_result(cache, sweep)
    store_result(cache, make_result(build_question(shapes=["8192x4096x4096", "8192x4096x14336"])))
    hf = build_question(hf_config=Path(app.srcdir) / "llama-config.json", fields={"seq_length": 2048})
    store_result(cache, make_result(hf))
    app.build()
    assert "WARNING" not in warning.getvalue(), warning.getvalue()
    soup = BeautifulSoup((Path(app.outdir) / "index.html").read_text(encoding="utf-8"), "html.parser")

    sizes = soup.select_one("div.gemm-benchmark#sizes")
    rows = sizes.select("table.gemm-gemms tbody tr")
    assert [tr.td.get_text() for tr in rows[:3]] == ["S = 1024", "S = 2048", "S = 4096"]
    assert not sizes.select("table.gemm-totals")  # a sum over sweep sizes means nothing
    svg = sizes.select_one("div.gemm-figure svg")
    # A line plot against size: the x label, one tick per size (text kept as SVG text, inlined).
    texts = [t.get_text() for t in svg.find_all("text")]
    assert any("Square GEMM size" in t for t in texts), texts
    assert all(str(size) in texts for size in (1024, 2048, 4096)), texts
    gemm = Report(sweep).find_gemm("4096x4096x4096")
    expected = Report(sweep).cell("autocast", "fp8-current", gemm).tflops
    assert tooltip_number(soup.select_one("abbr.gemm-value")["title"]) == near(expected)

    manual = soup.select_one("div.gemm-benchmark#manual")
    assert [b.get_text() for b in manual.select("[role=tablist] > button")] == ["Pre-quantized"]
    assert [tr.td.get_text() for tr in manual.select("table.gemm-gemms tbody tr")] == [
        "8192x4096x4096", "8192x4096x14336"]
    assert "All shapes" in manual.select_one("table.gemm-totals thead").get_text()

    from_hf = soup.select_one("div.gemm-benchmark#from-hf")
    assert from_hf.select_one(".gemm-question").get_text() == hf.describe() + "."
    assert "8 KV groups" in hf.describe() and "1 x 2048 tokens" in hf.describe()


@pytest.mark.sphinx("html", testroot="sweep", srcdir="sweep-hf-dependency")
def test_hf_config_is_a_page_dependency(app):
    app.build()
    deps = {str(p) for p in app.env.dependencies["index"]}
    assert any(p.endswith("llama-config.json") for p in deps)
