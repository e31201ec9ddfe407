"""Reader pass 3, item 14: the methodology's SQNR figure drew its 28.5 dB series on the plot's top edge
(top tick 25, the rings of three hidden lines touching the frame). Every line figure's y range now
leaves room for the highest and lowest points' markers and ends on a tick above the highest point
where that costs at most half a step."""

from __future__ import annotations

import random

import defusedxml.ElementTree as ET
import pytest

from gemm_bench.report.figure_layout import axis_ticks
from gemm_bench.report.line_figure import (
    _MARKER_R,
    _RING_STEP,
    HEIGHT_PT,
    ROOM_PT,
    WIDE_HEIGHT_PT,
    Series,
    line_svg,
    y_range,
)

SVG = "{http://www.w3.org/2000/svg}"
XS = (8.6, 86.0, 860.0, 8600.0)
#: The methodology figure's shape: FP8 Current and FP8 Block, median row and whole tensor, all ~28.5 dB
#: (FP8 Current's median row lies under three lines: the widest ring).
FLAT = [Series("FP8 Current, median row", XS, (28.5, 28.5, 28.6, 28.5)),
        Series("FP8 Current, whole tensor", XS, (28.5, 28.5, 28.5, 28.5), dashed=True),
        Series("FP8 Block, median row", XS, (28.5, 28.5, 28.5, 28.6)),
        Series("FP8 Block, whole tensor", XS, (28.5, 28.4, 28.5, 28.5), dashed=True)]


@pytest.mark.parametrize("height", [HEIGHT_PT, WIDE_HEIGHT_PT])
def test_the_highest_points_ring_and_a_tick_fit_under_the_top(height: float) -> None:
    """Before: (-1.43, 29.93) at both heights: the top tick 25 under every point, and the 7.9 pt ring of
    the 28.6 dB point 7.2 pt under the top of the phone's plot (10.8 pt on the desktop's)."""
    low, high = y_range(FLAT, height=height, include_y=(0,))
    ring = _MARKER_R + 3 * _RING_STEP
    assert (high - 28.6) / (high - low) * height >= ring + ROOM_PT - 1e-9
    ticks = [v for v, _ in axis_ticks(low, high, height, "y")]
    assert ticks[-1] >= 28.6, ticks  # a labelled gridline above the highest point
    assert low <= 0.0


def test_the_drawn_figure_uses_that_range() -> None:
    svg = line_svg(FLAT, x_label="R", y_label="SQNR (dB)", log_x=True, include_y=(0,))
    labels = [t.text for t in ET.fromstring(svg).iter(f"{SVG}text")]
    assert "30" in labels and "25" in labels


@pytest.mark.parametrize("log_y", [False, True])
def test_every_figure_has_room_at_both_ends(log_y: bool) -> None:
    """Random series (values down to the axis' bottom and up to its top): the extreme points lie at
    least a marker and ROOM_PT inside the range, in log space on a log axis; never narrower than the
    5% margins."""
    import math

    rng = random.Random(14)
    for _ in range(200):
        n = rng.randint(1, 4)
        series = [Series(f"s{i}", XS, tuple(rng.choice([None, rng.uniform(0.5, 60.0)]) for _ in XS),
                         dashed=rng.random() < 0.5, markers=rng.random() < 0.7) for i in range(n)]
        ys = [y for s in series for y in s.ys if y is not None]
        if not ys:
            continue
        low, high = y_range(series, height=HEIGHT_PT, log_y=log_y)

        def t(v: float) -> float:
            return math.log10(v) if log_y else v

        span = t(high) - t(low)
        need = (_MARKER_R + ROOM_PT) / HEIGHT_PT * 0.999 if any(s.markers for s in series) else 0.0
        assert (t(high) - t(max(ys))) / span >= need and (t(min(ys)) - t(low)) / span >= need
        assert (t(high) - t(max(ys))) / span >= 0.04 and (t(min(ys)) - t(low)) / span >= 0.04
