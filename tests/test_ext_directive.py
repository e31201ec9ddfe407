"""The gemm-benchmark directive renders a cached real H100 result as tabs, figures, tables, provenance."""

from __future__ import annotations

import dataclasses
import io
import json
import shutil
from pathlib import Path

import pytest
from bs4 import BeautifulSoup
from sphinx.testing.util import SphinxTestApp

from gemm_bench.question.precisions import PRECISIONS
from gemm_bench.report.report import Report
from gemm_bench.results.schema import METHOD_VERSION
from gemm_benchmark.values import format_ms, format_speedup
from tests.conftest import copy_real_document, without_gpu


def _build(app, real_result) -> BeautifulSoup:
    real_result(Path(app.srcdir) / "_gemm_cache", "h100-te-guide-5b.json")
    real_result(Path(app.srcdir) / "_gemm_cache", "h100-mixtral-8x7b.json")
    app.build()
    return BeautifulSoup((Path(app.outdir) / "index.html").read_text(encoding="utf-8"), "html.parser")


@dataclasses.dataclass(frozen=True)
class Built:
    """One HTML build of the ``basic`` test root with the two real H100 results: its output folder
    and the warnings it printed."""

    outdir: Path
    warnings: str

    def soup(self, page: str = "index.html") -> BeautifulSoup:
        """The page parsed afresh (a test may not change what another reads)."""
        return BeautifulSoup((self.outdir / page).read_text(encoding="utf-8"), "html.parser")


@pytest.fixture(scope="module")
def basic_html(rootdir: Path, tmp_path_factory: pytest.TempPathFactory) -> Built:
    """The ``basic`` project built once for the tests that only read its HTML (each of them built the
    same project with the same results before)."""
    srcdir = tmp_path_factory.mktemp("directive") / "basic"
    shutil.copytree(rootdir / "test-basic", srcdir)
    copy_real_document(srcdir / "_gemm_cache", "h100-te-guide-5b.json")
    copy_real_document(srcdir / "_gemm_cache", "h100-mixtral-8x7b.json")
    warning = io.StringIO()
    with pytest.MonkeyPatch.context() as monkeypatch:
        without_gpu(monkeypatch, tmp_path_factory)
        app = SphinxTestApp("html", srcdir=srcdir, builddir=srcdir / "_build", status=io.StringIO(), warning=warning)
        try:
            app.build()
        finally:
            app.cleanup()
    return Built(Path(app.outdir), warning.getvalue())


def test_html_structure(basic_html):
    soup = basic_html.soup()
    assert basic_html.warnings == ""
    block = soup.select_one("div.gemm-benchmark#te-5b-h100")
    assert block is not None
    tabs = [b.get_text() for b in block.select("div.gemm-mode-tabs > [role=tablist] > button")]
    assert tabs == ["Autocast", "Pre-quantized"]
    panels = block.select("div.gemm-mode-tabs > div[role=tabpanel]")
    assert len(panels) == 2 and not panels[0].has_attr("hidden") and panels[1].has_attr("hidden")
    for panel in panels:
        figures = panel.select("div.gemm-figure")
        assert len(figures) == 1  # one SVG that follows the page theme (no light/dark pair)
        svg = figures[0].select_one("svg")
        assert svg is not None and svg["role"] == "img" and svg["aria-label"].startswith(("Autocast", "Pre-quantized"))


def test_table_numbers_come_from_report(basic_html):
    soup = basic_html.soup()
    doc = json.loads((Path(__file__).parent / "data" / "h100-te-guide-5b.json").read_text())
    report = Report(doc)
    panel = soup.select("div.gemm-benchmark#te-5b-h100 div.gemm-mode-tabs > div[role=tabpanel]")[1]  # Pre-quantized
    gemms_table = panel.select_one("table.gemm-gemms")
    header = [th.get_text() for th in gemms_table.select("thead tr")[0].select("th")]
    # Measured precisions only: H100 has no MXFP8/NVFP4, FP8 delayed has no pre-quantized form.
    assert [h for h in header if h] == ["BF16", "FP8 Current", "FP8 Block"]
    first = [td.get_text() for td in gemms_table.select("tbody tr")[0].select("td")]
    gemm = report.gemms[0]
    assert first[:3] == ["Fprop", "QKV projection", gemm.label]
    cell = report.cell("prequant", "bf16", gemm)
    assert first[3] == format_ms(cell.ms)
    # compact: TFLOP/s, % of peak and the spread are on hover of the time, not columns
    hover = gemms_table.select("tbody tr")[0].select("td")[3].select_one("abbr")["title"]
    assert hover.startswith(f"{cell.tflops:.0f} TFLOP/s; spread (IQR) ") and "% of the dense peak" in hover
    assert first[4] == format_ms(report.cell("prequant", "fp8-current", gemm).ms)
    totals = panel.select_one("table.gemm-totals")
    rows = {tr.td.get_text(): [td.get_text() for td in tr.select("td")] for tr in totals.select("tbody tr")}
    total = report.total("prequant", "fp8-current")
    roofline = sum(report.roofline_ms("prequant", "fp8-current", g) for g in report.gemms)
    # method 1: no SQNR column; the device is known, so the roofline prediction per layer is shown
    assert rows["FP8 Current"][1:] == [format_ms(total.per_layer_ms), format_ms(total.model_ms),
                                       format_speedup(total.speedup_vs_bf16), format_ms(roofline)]
    unavailable = panel.select_one("ul.gemm-unavailable").get_text()
    assert "FP8 Delayed" in unavailable and PRECISIONS["fp8-delayed"].absent_modes["prequant"][:40] in unavailable
    assert "MXFP8 unsupported: Device compute capability 10.0" in unavailable


def test_provenance_and_download(basic_html):
    soup = basic_html.soup()
    prov = soup.select_one("div.gemm-benchmark#te-5b-h100 p.gemm-provenance")
    text = prov.get_text(" ")
    for expected in ("NVIDIA H100 80GB HBM3", "driver 580.159.04", "CUDA 13.0", "PyTorch 2.11.0+cu130",
                     "Transformer Engine 2.20.2", "2026-11-23", f"method v{METHOD_VERSION}", "L2 flushed"):
        assert expected in text, expected
    link = prov.select_one("a.download")
    downloaded = basic_html.outdir / link["href"]
    assert downloaded.name.startswith("2160d33ec54a347e--h100-80gb-hbm3")
    assert json.loads(downloaded.read_text())["question_hash"] == "2160d33ec54a347e"


def test_name_is_a_label_and_failed_cells_are_listed(basic_html):
    soup = basic_html.soup()
    ref = soup.select_one("a.reference.internal[href='#te-5b-h100']")
    assert ref is not None and ref.get_text() == "Transformer Engine guide layer"
    other = basic_html.soup("other.html")
    block = other.select_one("div.gemm-benchmark#moe")
    assert not block.select("img"), ":show: table, totals draws no figure"
    assert "balanced routing" in block.get_text()
    prequant = block.select("div[role=tabpanel]")[1]
    assert "FP8 Block failed: RuntimeError" in prequant.select_one("ul.gemm-unavailable").get_text()
    # A grouped (MoE) GEMM is labelled with its group count.
    assert "8 x " in prequant.select_one("table.gemm-gemms").get_text()


@pytest.mark.sphinx("text", testroot="basic", srcdir="directive-text")
def test_text_builder(app, real_result, warning):
    real_result(Path(app.srcdir) / "_gemm_cache", "h100-te-guide-5b.json")
    real_result(Path(app.srcdir) / "_gemm_cache", "h100-mixtral-8x7b.json")
    app.build()
    text = (Path(app.outdir) / "index.txt").read_text(encoding="utf-8")
    assert "Autocast: time per GEMM" in text and "Pre-quantized: totals" in text
    assert "15872x4096x12288" in text
    assert "1.62×" in text  # the role, resolved for a non-HTML builder
    assert "WARNING" not in warning.getvalue()


@pytest.mark.sphinx("latex", testroot="basic", srcdir="directive-latex")
def test_latex_builder(app, real_result, warning):
    real_result(Path(app.srcdir) / "_gemm_cache", "h100-te-guide-5b.json")
    real_result(Path(app.srcdir) / "_gemm_cache", "h100-mixtral-8x7b.json")
    app.build()
    tex = next(Path(app.outdir).glob("*.tex")).read_text(encoding="utf-8")
    assert "\\sphinxincludegraphics" in tex and ".pdf}" in tex
    assert "\\subsubsection*{Pre\\sphinxhyphen{}quantized}" in tex
    assert "only-dark" not in tex
    pdfs = list(Path(app.outdir).glob("gemm-*.pdf"))
    assert len(pdfs) == 2 and all(p.read_bytes().startswith(b"%PDF") for p in pdfs)
    assert "WARNING" not in warning.getvalue()


@pytest.mark.sphinx("html", testroot="basic", srcdir="directive-data-tables", confoverrides={"numfig": True})
def test_tables_are_data_until_written(app, real_result, warning):
    """The stored doctree holds each result table as one data node (issue 14: the tables were most
    of a page's nodes); the written page has every one of them as a table, numbered with numfig."""
    from docutils import nodes

    from gemm_benchmark.nodes import gemm_data_table

    soup = _build(app, real_result)
    assert warning.getvalue() == ""
    doctree = app.env.get_doctree("index")
    data = list(doctree.findall(gemm_data_table))
    assert data and not list(doctree.findall(nodes.table))
    assert all(len(node.children) == 0 and node["ids"] for node in data)
    tables = soup.select("div.gemm-benchmark table")
    assert len(tables) == len(data)
    assert [t.get("id") for t in tables] == [node["ids"][0] for node in data]
    captions = [t.select_one("caption span.caption-number") for t in tables]
    assert all(c is not None and c.get_text().startswith("Table ") for c in captions)
    for table, node in zip(tables, data, strict=True):
        assert len(table.select("tbody tr")) == len(node["table"].body_rows) > 0
