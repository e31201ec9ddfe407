"""Captions, names and config strings with markup, quotes and backslashes render escaped; paths stay inside.

Hostile text reaches the output from three places: the page (``:caption:``), ``conf.py`` (the cache
directory's name, quoted by the "not measured" note) and a cache file (device name, provenance,
failure reasons, shown in tabs, tables, tooltips, figures' alt text and the freshness table). The
HTML must hold that text literally and no element it injected; the LaTeX output must hold it with
LaTeX's escapes. ``:hf-config:`` paths outside the source tree are tested in test_ext_options.py and
test_ext_warnings.py; here, ``gemm_benchmark_cache_dir`` outside the source tree is refused.
"""

from __future__ import annotations

import contextlib
import io
import re
import shutil
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
from bs4 import BeautifulSoup
from sphinx.cmd.build import build_main

from gemm_bench.question.question import build_question
from tests.conftest import make_document, write_document

ROOT = Path(__file__).parent / "roots" / "test-reliability-escaping"
CAPTION = "<script>alert(\"caption\")</script> & 'single' \"double\" back\\slash {braces} 50% $x$ #1 ~_^"
CACHE_NAME = "_cache <script>alert('dir') \"q\" \\ b"
DEVICE = 'Evil <script>alert("dev")</script> GPU \\ \'q\' & --> x'
TORCH = '2.11<script>alert("torch")</script>'
REASON = 'boom <img src=x onerror="alert(1)"> \\n & done'


def _cache(srcdir: Path) -> Path:
    question = build_question(shapes=["1024x1024x1024"])
    doc = make_document(question, device={"name": DEVICE, "compute_capability": "9.0"},
                        precisions=("bf16", "fp8-current"), failed={("prequant", "fp8-current"): REASON})
    doc["provenance"]["torch"] = TORCH
    return write_document(srcdir / CACHE_NAME, doc)


def _hostile_fragments() -> list[str]:
    return ["<script>alert(", "<img src=x", "<b>not bold</b>"]


@pytest.mark.sphinx("html", testroot="reliability-escaping", srcdir="reliability-escaping-html")
def test_html_holds_hostile_text_literally_and_no_injected_element(app, warning):
    _cache(Path(app.srcdir))
    app.build()
    warnings = re.sub(r"\x1b\[[0-9;]*m", "", warning.getvalue())
    # Only the expected warning: FP8 prequant failed (its reason is quoted, in a log, not in HTML).
    assert [w for w in warnings.splitlines() if "WARNING" in w and "failed" not in w] == [], warnings
    html = (Path(app.outdir) / "index.html").read_text(encoding="utf-8")
    for fragment in _hostile_fragments():
        assert fragment not in html, fragment
    soup = BeautifulSoup(html, "html.parser")
    assert all("alert" not in (s.string or "") and "alert" not in s.get("src", "") for s in soup.find_all("script"))
    assert not soup.find_all("img", onerror=True) and not soup.find_all("b")

    block = soup.select_one("div.gemm-benchmark#evil")
    assert block.select_one(".gemm-caption").get_text() == CAPTION
    assert DEVICE in block.select_one(".gemm-provenance").get_text()
    assert TORCH in block.select_one(".gemm-provenance").get_text()
    assert REASON in block.get_text()
    figures = block.select("div.gemm-figure")
    assert figures
    for figure in figures:
        svg = figure.select_one("svg")
        assert svg["aria-label"].endswith(" on " + DEVICE.removeprefix("NVIDIA "))
        ET.fromstring(str(svg).replace("&nbsp;", " "))  # the inlined figure is well-formed whatever the names
    role = soup.select_one("abbr.gemm-value")
    assert DEVICE in role["title"]  # an attribute: quotes and '&' survive as text
    link = soup.select_one("a.reference.internal[href='#evil']")
    assert link.get_text() == CAPTION

    unmeasured = soup.select_one("div.gemm-benchmark#unmeasured")
    assert f"{CACHE_NAME}/." in unmeasured.get_text()
    freshness = soup.select_one("table.gemm-freshness") or soup.select_one(".gemm-freshness")
    assert freshness is not None and DEVICE in freshness.get_text()


@pytest.mark.sphinx("latex", testroot="reliability-escaping", srcdir="reliability-escaping-latex")
def test_latex_escapes_hostile_text(app, warning):
    _cache(Path(app.srcdir))
    app.build()
    tex = next(Path(app.outdir).glob("*.tex")).read_text(encoding="utf-8")
    for fragment in _hostile_fragments():
        assert fragment not in tex, fragment
    caption = (r'\textless{}script\textgreater{}alert("caption")\textless{}/script\textgreater{} \& '
               r'\textquotesingle{}single\textquotesingle{} "double" back\textbackslash{}slash \{braces\} 50\% '
               r"\$x\$ \#1 \textasciitilde{}\_\textasciicircum{}")
    assert tex.count(caption) == 2  # the caption above the block and the :ref: link's text
    assert r"GPU \textbackslash{}" in tex  # the device name from the cache file
    assert r"\textless{}img src=x onerror=" in tex  # the failure reason from the cache file


def _project(tmp_path: Path, cache_dir: str) -> Path:
    src = tmp_path / "project" / "docs"
    shutil.copytree(ROOT, src)
    conf = (src / "conf.py").read_text(encoding="utf-8")
    conf = re.sub(r"^gemm_benchmark_cache_dir = .*$", f"gemm_benchmark_cache_dir = {cache_dir!r}", conf, flags=re.M)
    (src / "conf.py").write_text(conf, encoding="utf-8")
    return src


def _build(src: Path, tmp_path: Path) -> tuple[int, str]:
    stderr = io.StringIO()
    with contextlib.redirect_stderr(stderr):
        code = build_main([str(src), str(tmp_path / "out"), "-q", "-b", "html", "-d", str(tmp_path / "doctrees")])
    return code, stderr.getvalue()


def _listing(directory: Path) -> list[str] | None:
    return sorted(str(p) for p in directory.rglob("*")) if directory.is_dir() else None


@pytest.mark.parametrize("value", ["../../etc", "..", "/etc", "_cache/../../outside"])
def test_cache_dir_outside_the_source_tree_is_refused(tmp_path: Path, value: str) -> None:
    src = _project(tmp_path, value)
    outside = (src / value).resolve()
    before = _listing(outside) if outside != Path("/etc") else sorted(p.name for p in outside.iterdir())
    code, err = _build(src, tmp_path)
    assert code != 0
    assert "Configuration error" in err and f"gemm_benchmark_cache_dir = {value!r}" in err
    assert "outside the documentation source directory" in err
    # Nothing was read there to render, and nothing written: no lock file, no result.
    after = _listing(outside) if outside != Path("/etc") else sorted(p.name for p in outside.iterdir())
    assert after == before
    assert not (tmp_path / "out" / "index.html").exists()


def test_cache_dir_inside_the_source_tree_is_fine(tmp_path: Path) -> None:
    src = _project(tmp_path, "sub/../_gemm_cache")
    code, err = _build(src, tmp_path)
    assert code == 0, err
