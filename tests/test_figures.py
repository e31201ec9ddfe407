"""Figures: specs keyed by their content, one theme-following SVG, text never read as markup,
spread from stored quartiles, readable at phone width, and the README's light and dark files."""

from __future__ import annotations

import dataclasses
import json
import re
import statistics
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

import pytest

from gemm_bench import figures
from gemm_bench.figures import FigureError, quartiles, ratio_spread, render, spec_for, summary_spec
from gemm_bench.report import Report

from .conftest import DATA, H200, make_document, read_document_any_name

ROOT = Path(__file__).resolve().parents[1]
SVG_NS = "{http://www.w3.org/2000/svg}"


def real_report(name: str = "h100-te-guide-5b.json") -> Report:
    return Report(read_document_any_name(DATA / name))


def texts(svg: bytes) -> list[ET.Element]:
    return list(ET.fromstring(svg).iter(f"{SVG_NS}text"))


def font_px(element: ET.Element) -> float:
    match = re.search(r"font-size: ([0-9.]+)px", element.get("style", ""))
    assert match, element.get("style")
    return float(match.group(1))


# ------------------------------------------------------------------------------------------ spread
def test_quartiles_come_from_the_samples_with_the_timers_definition() -> None:
    samples = [1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 100.0]
    q1, _, q3 = statistics.quantiles(samples, n=4)
    assert quartiles({"median_ms": 4.5, "iqr_ms": 99.0, "samples_ms": samples}) == (q1, q3)


def test_quartiles_fall_back_to_median_and_iqr() -> None:
    assert quartiles({"median_ms": 2.0, "iqr_ms": 0.4}) == pytest.approx((1.8, 2.2))
    assert quartiles({"median_ms": 2.0, "iqr_ms": 0.4, "samples_ms": [1.0, 2.0]}) == pytest.approx((1.8, 2.2))


@pytest.mark.parametrize("stats", [
    {}, {"median_ms": 2.0}, {"median_ms": "2", "iqr_ms": 0.1}, {"median_ms": 2.0, "iqr_ms": float("nan")},
    {"median_ms": 2.0, "iqr_ms": -1.0}, {"median_ms": 2.0, "iqr_ms": 5.0}, {"median_ms": True, "iqr_ms": 0.1},
    {"median_ms": float("inf"), "iqr_ms": 0.0},
    {"median_ms": 2.0, "iqr_ms": 1e308 * 10},
])
def test_quartiles_of_hostile_stats_are_none_not_an_exception(stats: dict[str, Any]) -> None:
    assert quartiles(stats) is None


def test_hostile_samples_fall_back_without_raising() -> None:
    for samples in (["a", 1, 2, 3], [1, 2, 3, float("nan")], [0, 0, 0, 0], [True, 1, 2, 3], "1234"):
        assert quartiles({"median_ms": 2.0, "iqr_ms": 0.2, "samples_ms": samples}) == pytest.approx((1.9, 2.1))


def test_ratio_spread_pairs_the_fast_quartile_of_one_with_the_slow_of_the_other() -> None:
    low, high = ratio_spread([(1.8, 2.2)], [(0.9, 1.1)], 2.0)
    assert (low, high) == pytest.approx((1.8 / 1.1, 2.2 / 0.9))
    # Sums for a whole model; widened to contain the value; None when a cell has no statistics.
    assert ratio_spread([(1, 2), (3, 4)], [(1, 1), (1, 1)], 2.0) == pytest.approx((2.0, 3.0))
    assert ratio_spread([(1, 1)], [(1, 1)], 2.0) == (1.0, 2.0)
    assert ratio_spread([(1, 2), None], [(1, 1), (1, 1)], 2.0) == (None, None)
    assert ratio_spread([(1, 2)], [(1, 1)], None) == (None, None)
    assert ratio_spread([(1.0, 2.0)], [(5e-324, 5e-324)], 2.0) == (None, None)  # overflows: no whisker


def test_every_real_bar_sits_inside_its_whisker() -> None:
    report = real_report()
    for mode in report.modes:
        spec = spec_for(report, mode)
        assert spec is not None
        for series in spec.panels[0].series:
            for value, low, high in zip(series.values, series.low, series.high, strict=True):
                assert value is not None and low is not None and high is not None
                assert low <= value <= high and high - low < value  # measured spreads are a few percent
    whole = spec_for(report, "autocast").panels[0].series[0]  # type: ignore[union-attr]
    assert whole.values[0] == report.total("autocast", whole.precision).speedup_vs_bf16


# -------------------------------------------------------------------------------------------- spec
def test_spec_key_is_the_content(question: Any) -> None:
    doc = make_document(question(model="te-guide-5b"))
    first, again = spec_for(Report(doc), "autocast"), spec_for(Report(json.loads(json.dumps(doc))), "autocast")
    assert first is not None and again is not None
    assert first == again and first.key() == again.key()
    for cell in doc["cells"]:
        if cell["precision"] == "fp8-block" and cell["op"] == "qkv" and cell["pass"] == "wgrad":
            cell["ms"] = cell["stats"]["median_ms"] = cell["ms"] * 0.9
    assert spec_for(Report(doc), "autocast").key() != first.key()  # type: ignore[union-attr]
    assert spec_for(Report(doc), "prequant").key() != first.key()  # type: ignore[union-attr]
    assert dataclasses.replace(first, title="x").key() != first.key()
    with pytest.raises(dataclasses.FrozenInstanceError):
        first.title = "changed"  # type: ignore[misc]


def test_the_key_changes_with_the_figure_code_version(monkeypatch: pytest.MonkeyPatch) -> None:
    spec = spec_for(real_report(), "autocast")
    assert spec is not None
    before = spec.key()
    monkeypatch.setattr(figures, "FIGURE_VERSION", figures.FIGURE_VERSION + "-next")
    assert spec.key() != before


def test_nothing_to_compare_is_no_figure(question: Any) -> None:
    doc = make_document(question(model="te-guide-5b"), precisions=("bf16",))
    assert spec_for(Report(doc), "autocast") is None
    assert summary_spec([("H100", Report(doc))], ["autocast"]) is None


def test_sweep_spec_plots_against_size(question: Any) -> None:
    report = Report(make_document(question(sweep=["1024", "4096", "2048"]), precisions=("bf16", "fp8-current")))
    spec = spec_for(report, "autocast")
    assert spec is not None and spec.kind == "sweep"
    assert spec.panels[0].x == (1024.0, 2048.0, 4096.0) and spec.panels[0].categories == ("1024", "2048", "4096")


# --------------------------------------------------------------------------------------- rendering
def test_one_svg_follows_the_page_theme() -> None:
    spec = spec_for(real_report(), "autocast")
    assert spec is not None
    svg = render(spec, "svg")
    root = ET.fromstring(svg)
    assert "gemm-figure-svg" in root.get("class", "")
    assert "var(--gemm-figure-ink" in root.get("style", "")
    assert b"prefers-color-scheme: dark" in svg
    assert b"currentColor" in svg and figures._PAGE_INK.encode() not in svg
    assert figures._INK["light"].encode() not in svg.split(b"<g id=")[1]  # ink only through the root's rule
    labels = [t.text for t in texts(svg)]
    assert "Whole model" in labels and "QKV projection · Fprop" in labels  # text as text: searchable
    assert b"<path id=\"DejaVu" not in svg  # no glyph outlines
    for colour in ("#e69f00", "#56b4e9", "#009e73"):  # data colours stay
        assert colour.encode() in svg.lower()


def test_fixed_themes_and_formats() -> None:
    spec = spec_for(real_report(), "prequant")
    assert spec is not None
    light, dark = render(spec, "svg", theme="light"), render(spec, "svg", theme="dark")
    assert b"#1f2328" in light and b"#e6edf3" not in light and b"currentColor" not in light
    assert b"#e6edf3" in dark and b"#1f2328" not in dark
    assert render(spec, "pdf").startswith(b"%PDF") and render(spec, "png").startswith(b"\x89PNG")
    with pytest.raises(FigureError, match=r"'page'.*only for SVG"):
        render(spec, "pdf", theme="page")
    with pytest.raises(FigureError, match="'jpg' is not one of svg, pdf, png"):
        render(spec, "jpg")


def test_bytes_are_deterministic_across_processes(tmp_path: Path) -> None:
    spec = spec_for(real_report(), "autocast")
    assert spec is not None
    mine = {fmt: render(spec, fmt) for fmt in figures.FORMATS}
    assert mine == {fmt: render(spec, fmt) for fmt in figures.FORMATS}
    code = ("import sys, json\nfrom pathlib import Path\nfrom gemm_bench.report import Report\n"
            "from gemm_bench.figures import spec_for, render\n"
            f"r = Report(json.loads(Path({str(DATA / 'h100-te-guide-5b.json')!r}).read_text()))\n"
            "sys.stdout.buffer.write(render(spec_for(r, 'autocast'), 'svg'))\n")
    out = subprocess.run([sys.executable, "-c", code], check=True, capture_output=True)
    assert out.stdout == mine["svg"]
    assert b"<dc:date>" not in mine["svg"] and b"CreationDate" not in mine["pdf"]


@pytest.mark.parametrize("name", ["H100 $x", "a\\$b$", "$\\frac{1}{0}$", "x^{2}_$", "<script>&amp;"])
def test_text_from_files_is_never_markup(name: str, question: Any) -> None:
    """An unbalanced ``$`` once crashed the README figure in mathtext; every string stays literal."""
    doc = make_document(question(model="te-guide-5b"), device={**H200, "name": name},
                        precisions=("bf16", "fp8-current"))
    spec = summary_spec([(name, Report(doc))], ["autocast", "prequant"], title=f"caption {name}")
    assert spec is not None
    for fmt in figures.FORMATS:
        assert render(spec, fmt)
    svg = render(spec, "svg")
    shown = [t.text for t in texts(svg)]
    assert name in shown and f"caption {name}" in shown


@pytest.mark.parametrize("which", ["bars", "sweep", "summary"])
def test_labels_stay_readable_at_phone_width(which: str, question: Any) -> None:
    if which == "bars":
        spec = spec_for(real_report("h100-mixtral-8x7b.json"), "autocast")
    elif which == "sweep":
        spec = spec_for(Report(make_document(question(sweep=["256", "1024", "4096", "16384"]))), "autocast")
    else:
        spec = figures.readme_spec(ROOT / "docs" / "_gemm_cache")
    assert spec is not None
    svg = render(spec, "svg")
    view_width = float(ET.fromstring(svg).get("viewBox", "").split()[2])
    smallest = min(font_px(t) for t in texts(svg))
    assert smallest * figures.PHONE_WIDTH_PX / view_width >= figures.MIN_PHONE_PX


def test_text_stays_inside_the_figure() -> None:
    """Hand layout: every text lies wholly within the canvas (a cut-off label would not)."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    for spec in (spec_for(real_report(), "prequant"), figures.readme_spec(ROOT / "docs" / "_gemm_cache")):
        assert spec is not None
        fig = figures.draw(spec)
        canvas = FigureCanvasAgg(fig)
        canvas.draw()
        renderer = canvas.get_renderer()
        drawn = fig.get_tightbbox(renderer)  # inches: everything drawn, text included
        width, height = fig.get_size_inches()
        assert drawn.x0 >= -0.01 and drawn.y0 >= -0.01, (drawn, spec.title)
        assert drawn.x1 <= width + 0.01 and drawn.y1 <= height + 0.01, (drawn, spec.title)


# ------------------------------------------------------------------------------------ figure files
def test_a_figure_is_drawn_once_per_key(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    spec = spec_for(real_report(), "autocast")
    assert spec is not None
    drawn: list[str] = []
    real_render = figures.render
    def counting_render(spec: figures.FigureSpec, fmt: str, **kwargs: Any) -> bytes:
        drawn.append(fmt)
        return real_render(spec, fmt, **kwargs)

    monkeypatch.setattr(figures, "render", counting_render)
    first = figures.figure_file(spec, "svg", tmp_path)
    assert first.name == f"gemm-{spec.key()}.svg" and first.read_bytes() == real_render(spec, "svg")
    mtime = first.stat().st_mtime_ns
    assert figures.figure_file(spec, "svg", tmp_path) == first and first.stat().st_mtime_ns == mtime
    assert drawn == ["svg"]
    other = figures.figure_file(dataclasses.replace(spec, title="other"), "svg", tmp_path)
    assert other != first and drawn == ["svg", "svg"]
    # Each figure has its spec beside it (for builders that need another format); no temp files left.
    expected = [first.name, first.with_suffix(".spec").name, other.name, other.with_suffix(".spec").name]
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(expected)
    assert figures.load_spec(first) == spec


def test_importing_figures_is_cheap_and_pure() -> None:
    code = ("import sys\nimport gemm_bench.figures\n"
            "bad = sorted(m for m in sys.modules if m.split('.')[0] in ('matplotlib', 'sphinx', 'torch', 'numpy'))\n"
            "assert not bad, bad\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr


# ------------------------------------------------------------------------------------------ README
def test_readme_figure_has_a_light_and_a_dark_file(tmp_path: Path, real_result: Any, make_result: Any,
                                                   store_result: Any, question: Any) -> None:
    cache = tmp_path / "cache"
    real_result(cache, "h100-te-guide-5b.json")
    store_result(cache, make_result(question(model="te-guide-5b"), device=H200))
    out = tmp_path / "static" / "readme.svg"
    light, dark = out, out.with_name("readme-dark.svg")
    assert figures.write_readme_figure(cache, out) == [light, dark]
    for path, ink in ((light, b"#1f2328"), (dark, b"#e6edf3")):
        data = path.read_bytes()
        shown = [t.text for t in texts(data)]
        assert ink in data and b"currentColor" not in data
        assert "H100 80GB HBM3" in shown and "H200" in shown and "Pre-quantized" in shown
    assert figures.write_readme_figure(cache, out) == []  # up to date: nothing rewritten
    assert light.stat().st_mode & 0o777 == 0o644  # readable by others, like any file in the repository


def test_readme_figure_reports_unreadable_files_and_missing_results(tmp_path: Path, real_result: Any) -> None:
    with pytest.raises(FigureError, match=f"no result for te-guide-5b .* in {re.escape(str(tmp_path))}"):
        figures.write_readme_figure(tmp_path, tmp_path / "x.svg")
    assert not (tmp_path / "x.svg").exists()
    good = real_result(tmp_path, "h100-te-guide-5b.json")
    broken = good.with_name(good.name.replace("h100-80gb-hbm3", "h200"))
    broken.write_text("{", encoding="utf-8")
    seen: list[Exception] = []
    assert len(figures.write_readme_figure(tmp_path, tmp_path / "x.svg", on_error=seen.append)) == 2
    assert len(seen) == 1 and str(broken) in str(seen[0])


def test_committed_readme_figures_are_what_the_committed_cache_draws(tmp_path: Path) -> None:
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    assert 'srcset="docs/_static/readme-speedups-dark.svg"' in readme
    assert 'src="docs/_static/readme-speedups.svg"' in readme
    out = tmp_path / "readme-speedups.svg"
    figures.write_readme_figure(ROOT / "docs" / "_gemm_cache", out)
    for name in ("readme-speedups.svg", "readme-speedups-dark.svg"):
        committed = ROOT / "docs" / "_static" / name
        assert (tmp_path / name).read_bytes() == committed.read_bytes(), "run `nox -s readme_figure` and commit"
