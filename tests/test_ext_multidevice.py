"""Several devices answer one question: device tabs inside each mode tab, roles pick a device."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from bs4 import BeautifulSoup

from gemm_bench.report.report import Report
from gemm_benchmark.render_table import format_speedup
from tests.helpers import near, tooltip_number

H200 = {"name": "NVIDIA H200", "compute_capability": "9.0", "sm_count": 132}

@pytest.fixture
def multidevice(app, real_result, make_result, store_result, question):
    cache = Path(app.srcdir) / "_gemm_cache"
    h100 = json.loads(real_result(cache, "h100-te-guide-5b.json").read_text())
    h200 = make_result(question(model="te-guide-5b"), device=H200, speed=1.3,
                       unsupported={"mxfp8": "Device compute capability 10.0 or higher required for MXFP8 execution."},
                       failed={("prequant", "fp8-block"): "RuntimeError: out of memory"})
    store_result(cache, h200)
    app.build()
    soup = BeautifulSoup((Path(app.outdir) / "index.html").read_text(encoding="utf-8"), "html.parser")
    return soup, h100, h200


@pytest.mark.sphinx("html", testroot="multidevice", srcdir="multidevice-tabs")
def test_device_tabs_inside_mode_tabs(multidevice, warning):
    soup, _, _ = multidevice
    # The one warning: the page's role without @DEVICE on two devices (test_roles_select_devices).
    warnings = [line for line in warning.getvalue().splitlines() if "WARNING" in line]
    assert len(warnings) == 1 and "write multi@h200 or multi@h100" in warnings[0], warnings
    block = soup.select_one("div.gemm-benchmark#multi")
    mode_panels = block.select("div.gemm-mode-tabs > div[role=tabpanel]")
    assert len(mode_panels) == 2
    for panel in mode_panels:
        device_tabs = [b.get_text() for b in panel.select("div.gemm-device-tabs > [role=tablist] > button")]
        assert device_tabs == ["H200", "H100 80GB HBM3"]  # the :devices: order
        device_panels = panel.select("div.gemm-device-tabs > div[role=tabpanel]")
        assert "NVIDIA H200" in device_panels[0].select_one(".gemm-provenance").get_text()
        assert "NVIDIA H100 80GB HBM3" in device_panels[1].select_one(".gemm-provenance").get_text()
    h200_prequant = mode_panels[1].select("div.gemm-device-tabs > div[role=tabpanel]")[0]
    assert "FP8 Block failed: RuntimeError: out of memory" in h200_prequant.select_one("ul.gemm-unavailable").get_text()
    header = [th.get_text() for th in h200_prequant.select_one("table.gemm-gemms thead tr").select("th")]
    assert [h for h in header if h] == ["BF16", "FP8 Current"]
    # Only the H100 block: one device, no device tabs, totals only.
    single = soup.select_one("div.gemm-benchmark#only-h100")
    assert not single.select("div.gemm-device-tabs") and not single.select("table.gemm-gemms")
    assert single.select("table.gemm-totals") and not single.select("img")


@pytest.mark.sphinx("html", testroot="multidevice", srcdir="multidevice-roles")
def test_roles_select_devices(multidevice):
    soup, h100, h200 = multidevice
    values = soup.select("abbr.gemm-value")
    first, on_h100, h200_time, h200_tflops = values
    assert first.get_text() == format_speedup(Report(h200).total("autocast", "fp8-current").speedup_vs_bf16)
    assert on_h100.get_text() == format_speedup(Report(h100).total("autocast", "fp8-current").speedup_vs_bf16)
    assert first.get_text() != on_h100.get_text()
    assert tooltip_number(h200_time["title"]) == near(Report(h200).total("prequant", "fp8-current").model_ms)
    gemm = Report(h200).find_gemm("mlp_down/wgrad")
    assert tooltip_number(h200_tflops["title"]) == near(Report(h200).cell("prequant", "bf16", gemm).tflops)


@pytest.mark.sphinx("html", testroot="multidevice", srcdir="multidevice-missing-device",
                    confoverrides={"suppress_warnings": []})
def test_requested_device_without_result_warns(app, real_result, warning):
    real_result(Path(app.srcdir) / "_gemm_cache", "h100-te-guide-5b.json")
    app.build()
    assert "index.rst:4: WARNING: gemm-benchmark: no cached result for device(s) h200" in warning.getvalue()
    soup = BeautifulSoup((Path(app.outdir) / "index.html").read_text(encoding="utf-8"), "html.parser")
    assert soup.select_one("div.gemm-benchmark#multi table.gemm-gemms") is not None  # H100 still shown
