"""Roles quote exactly what ``gemm-bench report --json`` computes, from any page."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from bs4 import BeautifulSoup

from gemm_benchmark.render_table import format_ms, format_speedup, format_tflops
from tests.helpers import near, tooltip_number


def _cli_report(path: Path) -> dict:
    """What the CLI prints: the reference the roles must agree with."""
    out = subprocess.run([sys.executable, "-m", "gemm_bench.cli", "report", "--json", str(path)], check=True,
                         capture_output=True, text=True).stdout
    return json.loads(out)


@pytest.mark.sphinx("html", testroot="basic", srcdir="roles-values")
def test_role_values_equal_report_json(app, real_result, warning):
    cache = Path(app.srcdir) / "_gemm_cache"
    path = real_result(cache, "h100-te-guide-5b.json")
    real_result(cache, "h100-mixtral-8x7b.json")
    app.build()
    assert "WARNING" not in warning.getvalue()
    report = _cli_report(path)
    totals = {(t["mode"], t["precision"]): t for t in report["totals"]}
    cells = {(c["mode"], c["precision"], c["op"], c["pass"]): c for c in report["cells"]}
    index = BeautifulSoup((Path(app.outdir) / "index.html").read_text(encoding="utf-8"), "html.parser")
    speedup, time, tflops = index.select("abbr.gemm-value")
    expected = totals[("autocast", "fp8-current")]["speedup_vs_bf16"]
    assert tooltip_number(speedup["title"]) == near(expected) and speedup.get_text() == format_speedup(expected)
    expected = totals[("autocast", "bf16")]["model_ms"]
    assert tooltip_number(time["title"]) == near(expected) and time.get_text() == f"{format_ms(expected)} ms"
    expected = cells[("prequant", "fp8-block", "mlp_up", "fprop")]["tflops"]
    assert tooltip_number(tflops["title"]) == near(expected)
    assert tflops.get_text() == f"{format_tflops(expected)} TFLOP/s"
    # A name defined on another page (index) resolves on this one (other).
    other = BeautifulSoup((Path(app.outdir) / "other.html").read_text(encoding="utf-8"), "html.parser")
    quoted, gemm_speedup, gemm_time = other.select("abbr.gemm-value")
    assert tooltip_number(quoted["title"]) == near(totals[("prequant", "fp8-current")]["speedup_vs_bf16"])
    # With a GEMM, speedup and time are that GEMM's: the ratio of the two cells report --json prints.
    fp8, bf16 = cells[("autocast", "fp8-current", "mlp_up", "wgrad")], cells[("autocast", "bf16", "mlp_up", "wgrad")]
    assert tooltip_number(gemm_speedup["title"]) == near(bf16["ms"] / fp8["ms"])
    assert tooltip_number(gemm_time["title"]) == near(cells[("prequant", "bf16", "qkv", "fprop")]["ms"])
