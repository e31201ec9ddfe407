"""Figures: specs keyed by their content, one theme-following SVG, text never read as markup,
spread from stored quartiles, readable at phone width, and the README's light and dark files."""

from __future__ import annotations

import dataclasses
import importlib.util
import json
import random
import re
import statistics
import subprocess
import sys
import xml.etree.ElementTree as ET
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from gemm_bench.report import figure_layout as layout
from gemm_bench.report import figure_spec, figures
from gemm_bench.report.figure_spec import FigureError
from gemm_bench.report.figures import quartiles, ratio_spread, render, spec_for, summary_spec
from gemm_bench.report.report import Report

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
    monkeypatch.setattr(figure_spec, "FIGURE_VERSION", figure_spec.FIGURE_VERSION + "-next")
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
    assert b"prefers-color-scheme: dark" in svg.split(b"<defs>")[1].split(b"</defs>")[0]  # the rule, in <defs>
    drawing = svg.split(b"</defs>", 1)[1]
    assert b"currentColor" in drawing
    for ink in figure_spec._INK.values():  # the fixed inks only in the root's rule and <defs>
        assert ink.encode() not in drawing
    labels = [t.text for t in texts(svg)]
    assert "All GEMMs" in labels and "QKV projection · Fprop" in labels  # text as text: searchable
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
    code = ("import sys, json\nfrom pathlib import Path\nfrom gemm_bench.report.report import Report\n"
            "from gemm_bench.report.figures import spec_for, render\n"
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


def test_characters_xml_cannot_hold_become_replacement_characters(question: Any) -> None:
    """A name with a control character or a lone surrogate (JSON can carry both) still gives a
    well-formed SVG, the rest of the name shown as it is."""
    name = "H200\x07 \udcff<x>"
    doc = make_document(question(model="te-guide-5b"), device={**H200, "name": name},
                        precisions=("bf16", "fp8-current"))
    spec = summary_spec([(name, Report(doc))], ["autocast"])
    assert spec is not None
    assert "H200\ufffd \ufffd<x>" in [t.text for t in texts(render(spec, "svg"))]


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


def layout_specs(question: Any) -> list[figure_spec.FigureSpec]:
    """One spec of every kind and feature: bars with a bold total, percent ticks and dotted peaks,
    a sweep, a scatter, the README's titled panels, a titled sweep, a hostile long name, a note,
    wrapped labels beside missing-value markers."""
    from .test_extra_figures import accuracy_report
    from .test_figure_labels import missing_values_spec

    report = real_report()
    sweep = Report(make_document(question(sweep=["256", "1024", "4096", "16384"])))
    hostile = "H100 <&> $x$ " + "very long device name " * 6
    doc = make_document(question(model="te-guide-5b"), device={**H200, "name": hostile},
                        precisions=("bf16", "fp8-current"))
    specs = [spec_for(report, "prequant"), figures.readme_spec(ROOT / "docs" / "_gemm_cache"),
             spec_for(sweep, "autocast"), figures.accuracy_spec(accuracy_report(), "autocast"),
             figures.tflops_spec(report, "autocast"), figures.roofline_spec(report, "autocast"),
             figures.latency_spec(report, "prequant"),
             summary_spec([(hostile, Report(doc))], ["autocast", "prequant"], title="caption " + hostile * 2),
             missing_values_spec(question)]
    titled = spec_for(sweep, "autocast")
    assert titled is not None
    specs.append(dataclasses.replace(titled, title="A sweep with a title long enough to take two lines of the figure"))
    specs.append(figures.build_spec(Report(make_document(question(sweep=["256", "1024"]), precisions=("bf16",))),
                                    "autocast"))
    assert all(spec is not None for spec in specs)
    return [spec for spec in specs if spec is not None]


def test_text_stays_inside_the_figure(question: Any) -> None:
    """Hand layout: every text's box (measured from the font table) and every mark lies within
    the canvas (a cut-off label would not), and each text is one line."""
    for spec in layout_specs(question):
        scene = figures.scene(spec)
        assert any(isinstance(item, layout.Text) for item in scene.items)
        inside = (-0.01, -0.01, scene.width + 0.01, scene.height + 0.01)
        for item in scene.items:
            if isinstance(item, layout.Text):
                x0, y0, x1, y1 = item.box()
                assert "\n" not in item.text
            elif isinstance(item, layout.Rect):
                x0, y0, x1, y1 = item.x, item.y, item.x + item.width, item.y + item.height
            elif isinstance(item, layout.Circle):
                r = item.radius + item.stroke_width / 2
                x0, y0, x1, y1 = item.x - r, item.y - r, item.x + r, item.y + r
            else:
                xs, ys = [x for x, _ in item.points], [y for _, y in item.points]
                x0, y0, x1, y1 = min(xs), min(ys), max(xs), max(ys)
            assert inside[0] <= x0 and inside[1] <= y0 and x1 <= inside[2] and y1 <= inside[3], (item, spec.title)


def test_text_does_not_overlap_text(question: Any) -> None:
    """No two texts of a figure share ink: labels, ticks, legend, titles each have their room.
    (A sweep's value-axis label may reach past its panel into the legend's band, never onto text.)"""
    for spec in layout_specs(question):
        boxes = [(t.box(), t.text) for t in figures.scene(spec).items if isinstance(t, layout.Text)]
        for i, ((a0, b0, a1, b1), first) in enumerate(boxes):
            for (c0, d0, c1, d1), second in boxes[i + 1:]:
                overlap_x = min(a1, c1) - max(a0, c0)
                overlap_y = min(b1, d1) - max(b0, d0)
                assert overlap_x <= 0.5 or overlap_y <= 0.5, (first, second, spec.title)


def test_matplotlib_paints_the_scene_inside_the_figure(question: Any) -> None:
    """The PDF/PNG back end draws the scene where it is: matplotlib's own text extents (FreeType,
    kerning included) stay within the canvas too, and each scene text is one matplotlib text."""
    pytest.importorskip("matplotlib")
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    from gemm_bench.report import figure_mpl

    from .test_figure_labels import missing_values_spec

    for spec in (spec_for(real_report(), "prequant"), figures.readme_spec(ROOT / "docs" / "_gemm_cache"),
                 missing_values_spec(question)):
        assert spec is not None
        scene = figures.scene(spec)
        fig = figure_mpl.figure(scene)
        canvas = FigureCanvasAgg(fig)
        canvas.draw()
        drawn = fig.get_tightbbox(canvas.get_renderer())  # inches: everything drawn, text included
        width, height = fig.get_size_inches()
        assert drawn.x0 >= -0.01 and drawn.y0 >= -0.01, (drawn, spec.title)
        assert drawn.x1 <= width + 0.01 and drawn.y1 <= height + 0.01, (drawn, spec.title)
        scene_texts = [t for t in scene.items if isinstance(t, layout.Text)]
        assert [t.get_text() for t in fig.texts] == [t.text for t in scene_texts]
        for artist, text in zip(fig.texts, scene_texts, strict=True):  # the anchor, back in points from the top
            x, y = artist.get_transform().transform(artist.get_position()) / fig.dpi * 72
            assert (x, scene.height - y) == pytest.approx((text.x, text.y), abs=1e-6)


def test_category_labels_are_in_their_tick_groups_top_first(question: Any) -> None:
    """What tests/test_site_claims.py reads: ``g#ytick_<panel>_<row>`` holds row ``row``'s label
    (one text, or a wrapped label's lines, top first), rows go down the figure, the total is bold;
    no other id, none twice."""
    from .test_figure_labels import missing_values_spec

    spec = figures.readme_spec(ROOT / "docs" / "_gemm_cache")
    bars = spec_for(real_report(), "autocast")
    assert bars is not None
    for which in (spec, bars, missing_values_spec(question)):
        root = ET.fromstring(render(which, "svg"))
        ids = [e.get("id") for e in root.iter() if e.get("id")]
        assert len(ids) == len(set(ids)) and all(re.fullmatch(r"ytick_\d+_\d+", i or "") for i in ids), ids
        for number, panel in enumerate(which.panels):
            ys = []
            for row, category in enumerate(panel.categories):
                group = root.find(f".//{SVG_NS}g[@id='ytick_{number}_{row}']")
                assert group is not None
                lines = list(group)
                assert lines and all(text.tag == f"{SVG_NS}text" for text in lines)
                assert " ".join(text.text or "" for text in lines) == category
                if len(lines) == 1:
                    (text,) = lines
                    assert text.text == category
                tops = [float(text.get("y", "")) for text in lines]
                assert tops == sorted(tops)
                ys.append(tops[0])
                for text in lines:
                    bold = "font-weight: bold" in text.get("style", "")
                    assert bold == (which.emphasize_first and row == 0)
            assert ys == sorted(ys) and len(set(ys)) == len(ys)


def _in_legend(root: ET.Element, spec: figure_spec.FigureSpec) -> Callable[[float], bool]:
    """Whether a mark at height ``y`` is a legend swatch: on the line of a precision's name."""
    names = {s.label for p in spec.panels for s in p.series}
    lines = [float(t.get("y", "")) for t in root.iter(f"{SVG_NS}text") if t.text in names]
    return lambda y: any(abs(y - line) < 8 for line in lines)


_RECT = re.compile(r"M([-0-9.]+) ([-0-9.]+)h([-0-9.]+)v([-0-9.]+)h[-0-9.]+z")


@pytest.mark.parametrize("which", ["speedup", "latency", "tflops", "roofline", "readme"])
def test_every_bar_is_as_long_as_its_value_on_the_drawn_axis(which: str) -> None:
    """The figure's numbers, read back from the SVG the way a reader reads them: each bar's end,
    mapped through the axis its tick labels draw, is its series' value, in row order (a bar drawn
    at the wrong length or in the wrong row would show a wrong number)."""
    report = real_report()
    spec = {"speedup": spec_for(report, "autocast"), "latency": figures.latency_spec(report, "autocast"),
            "tflops": figures.tflops_spec(report, "prequant"), "roofline": figures.roofline_spec(report, "autocast"),
            "readme": figures.readme_spec(ROOT / "docs" / "_gemm_cache")}[which]
    assert spec is not None and spec.kind == "bars"
    root = ET.fromstring(render(spec, "svg", theme="light"))
    # The value axis: its tick labels are the numeric texts of the lowest row of text under the plot.
    numeric = [(float(t.get("x", "")), float(t.get("y", "")), t.text or "") for t in root.iter(f"{SVG_NS}text")
               if re.fullmatch(r"-?[0-9.]+%?", t.text or "")]
    bottom = max(y for _, y, _ in numeric)
    ticks = sorted((x, float(text.rstrip("%")) / (100 if text.endswith("%") else 1))
                   for x, y, text in numeric if y == bottom)
    assert len(ticks) >= 2
    (x0, v0), (x1, v1) = ticks[0], ticks[-1]
    per_unit = (x1 - x0) / (v1 - v0)
    for x, v in ticks:  # the axis is linear and its labels are where their values are
        assert x == pytest.approx(x0 + (v - v0) * per_unit, abs=0.02)
    in_legend = _in_legend(root, spec)  # the legend's colour patches: not bars
    bars: dict[str, list[tuple[float, float]]] = {}
    for path in root.iter(f"{SVG_NS}path"):
        fill = (path.get("fill") or "").upper()
        for m in _RECT.finditer(path.get("d", "")):
            x, y, w = float(m[1]), float(m[2]), float(m[3])
            if in_legend(y + float(m[4]) / 2):
                continue
            assert x == pytest.approx(x0 + (0 - v0) * per_unit, abs=0.02)  # every bar starts at 0
            bars.setdefault(fill, []).append((y, v0 + (x + w - x0) / per_unit))
    span = v1 - v0
    for series_fill in {s.color.upper() for p in spec.panels for s in p.series}:
        expected = [v for p in spec.panels for s in p.series if s.color.upper() == series_fill
                    for v in s.values if v is not None]
        drawn = [v for _, v in sorted(bars.get(series_fill, []))]
        # Rows go down the figure in category order; one bar per value.
        assert len(drawn) == len(expected), (series_fill, drawn, expected)
        for got, want in zip(drawn, expected, strict=True):
            assert got == pytest.approx(want, abs=span * 0.002), (series_fill, got, want)


def test_every_sweep_point_is_at_its_value_on_the_drawn_axis() -> None:
    """The sweep figure read back from the SVG: each series' markers, mapped through the value
    axis (its grid lines at the values its tick labels name), are the series' speedups in size order."""
    from gemm_bench.question.question import build_question
    from gemm_bench.results.cache import Cache

    q = build_question(sweep=["256", "512", "1024", "2048", "4096", "8192", "16384"])  # docs/index.rst
    doc = Cache(ROOT / "docs" / "_gemm_cache").lookup(q.hash).documents[0]
    spec = spec_for(Report(doc, gemms=list(q.gemms), num_layers=q.num_layers, kind=q.kind), "prequant")
    assert spec is not None and spec.kind == "sweep"
    root = ET.fromstring(render(spec, "svg", theme="light"))
    labels = sorted((float(t.get("y", "")), float(t.text or "")) for t in root.iter(f"{SVG_NS}text")
                    if "text-anchor: end" in t.get("style", "") and re.fullmatch(r"[0-9.]+", t.text or ""))
    grid = next(path for path in root.iter(f"{SVG_NS}path") if path.get("stroke-opacity") == "0.22")
    rows = sorted(float(m[1]) for m in re.finditer(r"M[0-9.]+ ([0-9.]+)L", grid.get("d", "")))
    assert len(rows) == len(labels) >= 2
    for (label_y, _), row_y in zip(labels, rows, strict=True):
        assert 0 < label_y - row_y < 5  # each label beside its grid line (baseline a little below)
    (y0, v0), (y1, v1) = (rows[0], labels[0][1]), (rows[-1], labels[-1][1])
    in_legend = _in_legend(root, spec)
    for series in spec.panels[0].series:
        markers = sorted((float(c.get("cx", "")), float(c.get("cy", ""))) for g in root.iter(f"{SVG_NS}g")
                         if (g.get("fill") or "").upper() == series.color.upper() for c in g
                         if not in_legend(float(c.get("cy", ""))))
        drawn = [v0 + (cy - y0) * (v1 - v0) / (y1 - y0) for _, cy in markers]
        expected = [v for v in series.values if v is not None]
        assert drawn == pytest.approx(expected, abs=abs(v1 - v0) * 0.002), series.label


# ------------------------------------------------------------------------ layout: metrics, ticks
def test_font_table_is_what_the_fonts_give() -> None:
    """bench/gemm_bench/report/dejavu_metrics.py is tools/font_metrics.py's output, not typed by hand."""
    pytest.importorskip("matplotlib")
    spec = importlib.util.spec_from_file_location("font_metrics", ROOT / "tools" / "font_metrics.py")
    assert spec is not None and spec.loader is not None
    tool = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(tool)
    committed = (ROOT / "bench" / "gemm_bench" / "report" / "dejavu_metrics.py").read_text(encoding="utf-8")
    assert tool.generate() == committed, "run python tools/font_metrics.py and commit"


def test_text_widths_are_matplotlibs(question: Any) -> None:
    """Every text of the figures measures what matplotlib's FreeType layout measures, to within
    kerning (not in the table: a kerned pair measures a little wide, never narrow)."""
    pytest.importorskip("matplotlib")
    from matplotlib.font_manager import FontProperties
    from matplotlib.textpath import text_to_path

    seen = {(t.text, t.size, t.bold) for spec in layout_specs(question) for t in figures.scene(spec).items
            if isinstance(t, layout.Text)}
    seen |= {(label, size, bold) for label in ("All GEMMs", "É€ ×·–—µ≤≥ çñø", "AVATAR To") for size in (8.4, 9.0)
             for bold in (False, True)}
    assert len(seen) > 100
    for text, size, bold in sorted(seen):
        prop = FontProperties(family=["DejaVu Sans"], size=size, weight="bold" if bold else "normal")
        theirs = text_to_path.get_text_width_height_descent(text, prop, ismath=False)[0]
        mine = layout.text_width(text, size, bold=bold)
        kerning = (0.1 if text == "AVATAR To" else 0.01) * theirs  # the figures' texts: under 1%
        assert -0.01 <= mine - theirs <= kerning + 0.05, (text, size, bold, mine, theirs)
    assert layout.text_width("\u4e2d", 9.0) >= max(layout.text_width(c, 9.0) for c in "W@%‰")  # unknown: widest


def _limits() -> list[tuple[float, float]]:
    """Axis limits these figures have (bars from 0, sweeps and scatters around their data) and
    random ones of every magnitude."""
    rng = random.Random(1)
    out = [(0.0, 1.2 * v) for v in (1.0, 1.05, 1.7, 1.94, 2.3, 3.0, 4.4, 0.0123, 0.35, 7.9, 99.0, 990, 1979, 2250)]
    out += [(0.17, 2.2), (0.27, 1.05), (0.95, 1.12), (24.1, 61.3), (0.9, 1.8), (29.9, 30.35), (-0.05, 1.05)]
    for _ in range(400):
        low = rng.uniform(-3, 3) * 10 ** rng.randint(-4, 5)
        out.append((low, low + abs(rng.gauss(0, 1)) * 10 ** rng.randint(-4, 5) + 1e-9))
    return out


def test_ticks_are_matplotlibs_autolocator() -> None:
    pytest.importorskip("matplotlib")
    from matplotlib.ticker import MaxNLocator

    for low, high in _limits():
        for nbins in range(1, 10):
            expected = MaxNLocator(nbins=nbins, steps=[1, 2, 2.5, 5, 10]).tick_values(low, high)
            assert layout.tick_values(low, high, nbins) == [float(v) for v in expected], (low, high, nbins)


def test_tick_texts_are_matplotlibs_formatters() -> None:
    pytest.importorskip("matplotlib")
    import matplotlib
    from matplotlib.ticker import PercentFormatter, ScalarFormatter

    def formatted(formatter: Any, locs: list[float], low: float, high: float) -> list[str]:
        formatter.create_dummy_axis()
        formatter.axis.set_view_interval(low, high)
        with matplotlib.rc_context({"axes.unicode_minus": False}):  # as the figures drew them: a hyphen
            return list(formatter.format_ticks(locs))

    realistic = _limits()[:21]
    for i, (low, high) in enumerate(_limits()):
        for nbins in (2, 5, 9):
            locs = [v for v in layout.tick_values(low, high, nbins) if low <= v <= high]
            for subset in (locs, locs[:1]):  # one tick: the format comes from the limits
                plain = ScalarFormatter(useOffset=False)
                plain.set_scientific(False)
                assert layout.tick_texts(subset, low, high) == formatted(plain, subset, low, high), (low, high)
                if i < len(realistic):  # matplotlib's default shows the same: no offset, no exponent
                    default = ScalarFormatter()
                    assert layout.tick_texts(subset, low, high) == formatted(default, subset, low, high)
                    assert default.get_offset() == ""
                percent = PercentFormatter(xmax=1.0, decimals=0)
                assert layout.tick_texts(subset, low, high, percent=True) == formatted(percent, subset, low, high)


def test_tick_count_follows_the_axis_length_as_in_matplotlib() -> None:
    """nbins as matplotlib's AutoLocator picks it from the axes' size and the 9 pt tick labels."""
    pytest.importorskip("matplotlib")
    import matplotlib
    from matplotlib.figure import Figure

    with matplotlib.rc_context({"xtick.labelsize": layout.FONT_PT, "ytick.labelsize": layout.FONT_PT}):
        for length in (40.0, 95.0, 133.0, 170.0, 216.0, 260.0):
            fig = Figure(figsize=(4, 4))
            ax = fig.add_axes((0.1, 0.1, length / 288, length / 288))
            for low, high in ((0.0, 2.33), (0.0, 2374.8), (0.18, 2.17), (21.0, 66.0)):
                ax.set_xlim(low, high)
                ax.set_ylim(low, high)
                for axis, mpl_axis in (("x", ax.xaxis), ("y", ax.yaxis)):
                    expected = [float(v) for v in mpl_axis.get_major_locator()() if low <= v <= high]
                    assert [v for v, _ in layout.axis_ticks(low, high, length, axis)] == expected, (length, axis)


# ------------------------------------------------------------------------------------ figure files
def test_a_figure_is_drawn_once_per_key(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    spec = spec_for(real_report(), "autocast")
    assert spec is not None
    drawn: list[str] = []
    real_render = figures.render
    def counting_render(spec: figure_spec.FigureSpec, fmt: str, **kwargs: Any) -> bytes:
        drawn.append(f"{fmt}@{kwargs.get('width', figure_spec.WIDTH_IN)}")
        return real_render(spec, fmt, **kwargs)

    monkeypatch.setattr(figures, "render", counting_render)
    first = figures.figure_file(spec, "svg", tmp_path)
    assert first.name == f"gemm-{spec.key()}.svg" and first.read_bytes() == real_render(spec, "svg")
    # The desktop twin beside it, at its width, under a name the figure's image URI does not match.
    twin = figures.wide_twin(first)
    assert twin.name == f"gemm-wide-{spec.key()}.svg" and not twin.match(f"gemm-{spec.key()}.*")
    assert twin.read_bytes() == real_render(spec, "svg", width=figure_spec.WIDE_IN)
    mtime = first.stat().st_mtime_ns
    assert figures.figure_file(spec, "svg", tmp_path) == first and first.stat().st_mtime_ns == mtime
    assert drawn == ["svg@7.0", "svg@3.8"]
    other = figures.figure_file(dataclasses.replace(spec, title="other"), "svg", tmp_path)
    assert other != first and len(drawn) == 4
    # Each figure has its spec beside it (for builders that need another format); no temp files left.
    expected = [first.name, first.with_suffix(".spec").name, other.name, other.with_suffix(".spec").name,
                twin.name, figures.wide_twin(other).name]
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(expected)
    assert figures.load_spec(first) == spec


def test_importing_figures_is_cheap_and_pure() -> None:
    code = ("import sys\nimport gemm_bench.report.figures\n"
            "bad = sorted(m for m in sys.modules if m.split('.')[0] in ('matplotlib', 'sphinx', 'torch', 'numpy'))\n"
            "assert not bad, bad\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr


def test_drawing_an_svg_imports_neither_matplotlib_nor_numpy(tmp_path: Path) -> None:
    """What an HTML build does (a figure file per spec, the README's two files): no matplotlib,
    no numpy, even where they are installed; and none is needed (they are made unimportable)."""
    code = ("import sys, json\nfrom pathlib import Path\n"
            "sys.modules.update(matplotlib=None, numpy=None)  # an import of either now fails\n"
            "from gemm_bench.report import figures\nfrom gemm_bench.report.report import Report\n"
            f"r = Report(json.loads(Path({str(DATA / 'h100-te-guide-5b.json')!r}).read_text()))\n"
            f"out = Path({str(tmp_path)!r})\n"
            "for mode in r.modes:\n"
            "    figures.figure_file(figures.spec_for(r, mode), 'svg', out)\n"
            "    for build in figures.EXTRA_FIGURES.values():\n"
            "        spec = build(r, mode)\n"
            "        if spec is not None: figures.render(spec, 'svg')\n"
            f"figures.write_readme_figure(Path({str(ROOT / 'docs' / '_gemm_cache')!r}), out / 'readme.svg')\n"
            "bad = sorted(m for m in sys.modules if m.split('.')[0] in ('matplotlib', 'numpy') and sys.modules[m])\n"
            "assert not bad, bad\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    # two figures, each with its desktop twin
    assert len(list(tmp_path.glob("gemm-*.svg"))) == 4 and (tmp_path / "readme-dark.svg").exists()


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


def test_a_panel_names_the_legends_precisions_it_draws_no_bars_of() -> None:
    """Issue 35: the cross-model figure's legend (one, at its top) named FP8 Delayed, and its
    pre-quantized panel had no Delayed bars and no word why. The panel's title says it now, and
    wraps inside the figure at a phone's width as at a desktop's."""
    spec = figures.readme_spec(ROOT / "docs" / "_gemm_cache")
    legend = {s.label for p in spec.panels for s in p.series}
    assert "FP8 Delayed" in legend
    for panel in spec.panels:
        for label in legend - {s.label for s in panel.series}:
            assert f"{label}: " in panel.title, (panel.title, label)
    assert [p.title for p in spec.panels][1] == "Pre-quantized (FP8 Delayed: same as FP8 Current)"
    for width in figure_spec.WIDTHS:
        scene = layout.layout(spec, "#000", width_in=width)
        shown = [t for t in scene.items if isinstance(t, layout.Text)]
        said = " ".join(t.text for t in shown if t.text.startswith(("Pre-quantized", "(FP8 Delayed", "FP8 Current)")))
        assert "Pre-quantized" in said and "same as FP8 Current)" in said, said
        for t in shown:
            assert t.x + layout.text_width(t.text, t.size) <= scene.width + 0.5 or t.anchor != "start", t.text


def test_a_precision_missing_from_a_panel_for_another_reason_says_which(question: Any) -> None:
    doc = make_document(question(model="te-guide-5b"), precisions=("bf16", "fp8-current", "fp8-block"))
    for cell in doc["cells"]:
        if cell["mode"] == "prequant" and cell["precision"] == "fp8-block":
            cell.update(status="failed", reason="CUDA error", ms=None, tflops=None)
    spec = summary_spec([("H200", Report(doc))], ["autocast", "prequant"])
    assert spec is not None and spec.panels[1].title == "Pre-quantized (FP8 Block: failed)"
