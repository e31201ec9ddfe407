"""The generic line figure: valid, deterministic SVG; labels whole; bad inputs refused, never drawn."""

from __future__ import annotations

import math
import re

import defusedxml.ElementTree as ET
import pytest

from gemm_bench.report.figure_spec import MIN_PHONE_PX, PHONE_WIDTH_PX
from gemm_bench.report.line_figure import Band, LineFigureError, Series, line_svg, log_ticks

SVG = "{http://www.w3.org/2000/svg}"


def _figure(**overrides: object) -> str:
    args: dict[str, object] = {
        "x_label": "Input dynamic range (log scale)", "y_label": "SQNR (dB)", "log_x": True,
        "bands": [Band(1e4, 1e5, "A range a paper reports, with a label far too long for half the width")],
    }
    args.update(overrides)
    series = [Series("FP8 Current, median row", (1, 10, 1e4, 1e5), (28.5, 28.4, 26.0, 8.0)),
              Series("FP8 Current, whole tensor", (1, 10, 1e4, 1e5), (28.5, 28.5, 28.6, None), dashed=True),
              Series("FP8 Block", (1, 10, 1e4, 1e5), (28.6, 28.5, 28.5, 28.4), color="#009E73")]
    return line_svg(series, **args)  # type: ignore[arg-type]


def _texts(svg: str) -> list[str]:
    return [t.text or "" for t in ET.fromstring(svg).iter(f"{SVG}text")]


def test_a_figure_is_valid_svg_with_every_label_whole() -> None:
    svg = _figure(title="SQNR against the dynamic range of the input, per recipe and summary")
    root = ET.fromstring(svg)
    assert root.tag == f"{SVG}svg" and "gemm-figure-svg" in root.get("class", "")
    words = " ".join(_texts(svg)).split()
    for label in ("FP8 Current, median row", "FP8 Block", "A range a paper reports, with a label far too long",
                  "Input dynamic range (log scale)", "SQNR (dB)", "SQNR against the dynamic range"):
        assert " ".join(label.split()) in " ".join(words), label  # wrapped onto lines, never cut
    assert "…" not in svg
    assert svg == _figure(title="SQNR against the dynamic range of the input, per recipe and summary")


def test_log_axis_ticks_are_decades() -> None:
    assert [t for _, t in log_ticks(0.5, 2e6)] == ["1", "10", "100", "1000", "10⁴", "10⁵", "10⁶"]
    assert [v for v, _ in log_ticks(1.5, 9)] == [2, 5]
    assert {"1", "10", "10⁴", "10⁵"} <= set(_texts(_figure()))


def test_themes_and_readable_text() -> None:
    light = _figure(theme="light")
    assert "currentColor" not in light and "#1f2328" in light
    assert "currentColor" in _figure()
    root = ET.fromstring(light)
    width = float(root.get("viewBox", "").split()[2])
    sizes = [float(m) for m in re.findall(r"font-size: ([\d.]+)px", light)]
    assert min(sizes) * PHONE_WIDTH_PX / width >= MIN_PHONE_PX


def test_the_band_is_drawn_under_the_lines() -> None:
    svg = _figure()
    band = svg.index('stroke-opacity="0.14"')
    assert band < svg.index('stroke="#009E73"')


@pytest.mark.parametrize(("series", "kwargs", "problem"), [
    ([Series("a", (1, 2), (1.0,))], {}, "1 y values"),
    ([Series("a", (1, 2), (1.0, math.nan))], {}, "non-finite"),
    ([Series("a", (0, 2), (1.0, 2.0))], {"log_x": True}, "log axis"),
    ([Series("a", (1, 2), (1.0, 2.0))], {"bands": [Band(2, 1, "b")]}, "cannot draw"),
    ([Series("a", (1, 2), (1.0, 2.0))], {"theme": "sepia"}, "theme"),
])
def test_bad_inputs_are_refused(series: list[Series], kwargs: dict[str, object], problem: str) -> None:
    with pytest.raises(LineFigureError, match=problem):
        line_svg(series, x_label="x", y_label="y", **kwargs)  # type: ignore[arg-type]


def test_include_y_widens_the_axis() -> None:
    series = [Series("a", (1, 2), (24.5, 25.0))]
    assert "0" not in _texts(line_svg(series, x_label="x", y_label="y"))
    assert "0" in _texts(line_svg(series, x_label="x", y_label="y", include_y=(0,)))


def test_no_data_draws_empty_axes() -> None:
    assert "no data" in _texts(line_svg([], x_label="step", y_label="loss"))


def test_a_line_hidden_under_another_is_marked_and_named() -> None:
    """Issue 35: FP8 Current's lines lay under FP8 Block's, four legend entries and one visible line.
    A line whose every point another line drawn after it covers gets rings around its points (wider
    the more lines lie over it) and a legend entry saying which line it is under; a line that leaves
    the others somewhere stays as it was."""
    xs = (1, 10, 100, 1e3)
    series = [Series("Current, median row", xs, (28.5, 28.5, 20.0, 5.0)),      # leaves the others: seen
              Series("Current, whole tensor", xs, (28.5, 28.5, 28.6, 28.5), dashed=True),
              Series("Block, median row", xs, (28.5, 28.5, 28.5, 28.5)),
              Series("Block, whole tensor", xs, (28.6, 28.5, 28.5, 28.6), dashed=True)]
    svg = line_svg(series, x_label="R", y_label="SQNR (dB)", log_x=True, include_y=(0,), theme="light")
    legend = " ".join(_texts(svg))
    assert "Current, whole tensor (under Block, whole tensor)" in legend
    assert "Block, median row (under Block, whole tensor)" in legend
    assert "Current, median row (under" not in legend and "Block, whole tensor (under" not in legend
    root = ET.fromstring(svg)
    hollow = [c for g in root.iter(f"{SVG}g") if g.get("fill") == "none" for c in g.iter(f"{SVG}circle")]
    radii = sorted({round(float(c.get("r", "0")), 2) for c in hollow})
    # two hidden lines: one under one line, one under two, each ring wider than what lies over it
    assert len(radii) == 2 and radii[0] > 2.5 and radii[1] > radii[0], radii
    assert len(hollow) == 2 * (len(xs) + 1)  # every point and the legend's handle
