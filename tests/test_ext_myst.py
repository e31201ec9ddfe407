"""The directive and roles work the same from MyST Markdown."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from bs4 import BeautifulSoup


@pytest.mark.sphinx("html", testroot="myst", srcdir="myst-html")
def test_myst_directive_role_and_warning(app, real_result, warning):
    real_result(Path(app.srcdir) / "_gemm_cache", "h100-te-guide-5b.json")
    app.build()
    soup = BeautifulSoup((Path(app.outdir) / "index.html").read_text(encoding="utf-8"), "html.parser")
    block = soup.select_one("div.gemm-benchmark#te-5b-md")
    assert [b.get_text() for b in block.select("div.gemm-mode-tabs > [role=tablist] > button")] == [
        "Autocast", "Pre-quantized"]
    assert block.select("div.gemm-figure svg") and block.select("table.gemm-gemms")
    assert soup.select_one("abbr.gemm-value").get_text() == "1.62×"
    warnings = re.sub(r"\x1b\[[0-9;]*m", "", warning.getvalue())
    assert re.search(r"index\.md:15: WARNING: gemm-benchmark: :precisions: unknown value 'fp9'", warnings), warnings
    assert warnings.count("WARNING") == 1
