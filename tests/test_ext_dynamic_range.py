"""``.. gemm-dynamic-range::`` in a tiny Sphinx project: the note before any GPU measured the study,
the figure, table and provenance once a study file exists (here from the CPU rounding model, which
the page then says), a tab per device, and a corrupt file as a located warning naming its path."""

from __future__ import annotations

import io
import re
from pathlib import Path
from typing import Any

import pytest
from bs4 import BeautifulSoup

from gemm_bench.results import studies
from tests.conftest import H200
from tests.test_dynamic_range import shared_model_document

CONF = """\
extensions = ["gemm_benchmark"]
project = "dynamic-range test"
gemm_benchmark_cache_dir = "_gemm_cache"
gemm_benchmark_execution_mode = "cache"
"""
INDEX = """\
Dynamic range
=============

.. gemm-dynamic-range::

Gradients:

.. gemm-dynamic-range::
   :tensor: gradient
   :show: table
"""


@pytest.fixture(scope="module")
def documents(tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict[str, Any]]:
    h100 = shared_model_document(tmp_path_factory)
    h200 = dict(h100, device=dict(H200))
    return {"h100": h100, "h200": h200}


def _build(srcdir: Path, index: str = INDEX) -> tuple[str, BeautifulSoup]:
    from sphinx.testing.util import SphinxTestApp

    srcdir.mkdir(parents=True, exist_ok=True)
    (srcdir / "conf.py").write_text(CONF, encoding="utf-8")
    (srcdir / "index.rst").write_text(index, encoding="utf-8")
    warnings = io.StringIO()
    app = SphinxTestApp("html", srcdir=srcdir, status=io.StringIO(), warning=warnings, freshenv=True)
    try:
        app.build()
    finally:
        app.cleanup()
    html = (Path(app.outdir) / "index.html").read_text(encoding="utf-8")
    return re.sub(r"\x1b\[[0-9;]*m", "", warnings.getvalue()), BeautifulSoup(html, "html.parser")


def test_without_a_study_file_the_page_says_how_to_measure_it(tmp_path: Path) -> None:
    warnings, soup = _build(tmp_path / "src")
    assert warnings.strip() == ""
    notes = soup.select("div.gemm-dynamic-range .admonition.gemm-not-measured")
    assert len(notes) == 2
    text = notes[0].get_text(" ", strip=True)
    assert "Not measured yet" in text and "gemm-bench study dynamic-range" in text and "any GPU" in text


def test_a_study_file_renders_figure_table_and_provenance(tmp_path: Path, documents: dict[str, Any]) -> None:
    src = tmp_path / "src"
    studies.write_study(src / "_gemm_cache", documents["h100"])
    warnings, soup = _build(src)
    assert warnings.strip() == ""
    first, second = soup.select("div.gemm-dynamic-range")
    assert "Not a measurement" in first.get_text(" ", strip=True)  # the CPU model's numbers say so
    svg = first.select_one("div.gemm-figure svg")
    assert svg is not None and svg.get("aria-label", "").startswith("SQNR of the Fprop output")
    figure_text = svg.get_text(" ", strip=True)
    assert "FP8 Block, median row" in figure_text and "Sun et al. 2024" in figure_text
    table = first.select_one("table.gemm-dynamic-range-table")
    head = [th.get_text(strip=True) for th in table.select("thead tr")[0].select("th")]
    assert head == ["Recipe", "SQNR (dB) of", "R = 1", "R = 10⁴", "R = 10⁵"]
    rows = {tr.select("td")[1].get_text(strip=True): tr for tr in table.select("tbody tr")}
    assert "output, median row" in rows and "quantized input, non-outlier elements" in rows
    recipes = [td.get_text(strip=True) for td in table.select("tbody td strong")]
    assert recipes == ["BF16 (BF16 X, BF16 dY)", "FP8 Current (E4M3 X, E5M2 dY)", "FP8 Block (E4M3 X, E4M3 dY)"]
    cases = sorted((c for c in documents["h100"]["data"]["cases"]
                    if c["tensor"] == "activation" and c["input"] == "massive-tokens"), key=lambda c: c["ratio"])
    block_median = [f"{c['results']['fp8-block']['gemm']['row_median_db']:.1f}" for c in cases]
    shown = [[td.get_text(strip=True) for td in tr.select("td")] for tr in table.select("tbody tr")]
    assert ["", "output, median row", *block_median] in [["", *r[1:]] for r in shown]
    unavailable = first.select_one("ul.gemm-unavailable").get_text(" ", strip=True)
    assert "FP8 Delayed: as FP8 Current" in unavailable and "NVFP4: not run here" in unavailable
    provenance = first.select_one("p.gemm-provenance").get_text(" ", strip=True)
    assert "NVIDIA H100 80GB HBM3" in provenance and "study method v1" in provenance
    # The gradient block asked for the table alone, and no literature band applies to it.
    assert second.select_one("svg") is None and second.select_one("table.gemm-dynamic-range-table")
    assert second.select_one("p.gemm-provenance") is None


def test_devices_get_a_tab_each_and_a_corrupt_file_is_a_located_warning(tmp_path: Path,
                                                                      documents: dict[str, Any]) -> None:
    src = tmp_path / "src"
    for doc in documents.values():
        studies.write_study(src / "_gemm_cache", doc)
    warnings, soup = _build(src)
    assert warnings.strip() == ""
    labels = [t.get_text(strip=True) for t in soup.select("div.gemm-dynamic-range")[0].select(".sphinx-tabs-tab")]
    assert labels == ["H100 80GB HBM3", "H200"]

    corrupt = src / "_gemm_cache" / "studies" / "dynamic-range--h200.json"
    corrupt.write_text('{"kind": "study", "data": [', encoding="utf-8")
    warnings, soup = _build(src, INDEX.split("Gradients:")[0])
    lines = [w for w in warnings.splitlines() if "WARNING" in w]
    assert len(lines) == 1, warnings
    assert "index.rst:4" in lines[0] and str(corrupt) in lines[0] and "is not valid JSON" in lines[0]
    assert lines[0].endswith("[gemm_benchmark.cache]")
    assert soup.select_one("div.gemm-dynamic-range table") is not None  # the H100 still renders


def test_a_devices_filter_with_no_match_is_the_note(tmp_path: Path, documents: dict[str, Any]) -> None:
    src = tmp_path / "src"
    studies.write_study(src / "_gemm_cache", documents["h100"])
    warnings, soup = _build(src, "Title\n=====\n\n.. gemm-dynamic-range::\n   :devices: b200\n")
    assert warnings.strip() == ""
    assert "on b200" in soup.select_one(".gemm-not-measured").get_text(" ", strip=True)
