"""Bar figures hide nothing they show: a long category label wraps and is never cut (only a word
wider than the room is shortened, its whole text kept as a tooltip), a value label never lies
across a reference line, and a missing value is marked where its bar would be, with its reason."""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET
from collections.abc import Callable, Sequence
from typing import Any

import pytest

from gemm_bench.report import figure_layout as layout
from gemm_bench.report import figures
from gemm_bench.report.figure_spec import FONT_PT, SMALL_PT, WIDTH_IN, FigureSpec, Panel, Series
from gemm_bench.report.figures import render, summary_spec
from gemm_bench.report.report import Report

from .conftest import H100, H200, make_document
from .test_figures import SVG_NS, real_report

LONG = "Llama 3.1 405B (TP 8) · H100 80GB HBM3"
ROOM = WIDTH_IN * 72 * 0.45  # what a category label may take of the width
B200 = {**H200, "name": "NVIDIA B200"}
PRECISIONS = ("bf16", "fp8-delayed", "fp8-current", "fp8-block", "mxfp8")
OOM = "CUDA out of memory. Tried to allocate 2.00 GiB"
MXFP8 = "Device compute capability 10.0 or higher required for MXFP8 execution."


def bars(categories: Sequence[str], values: Sequence[float | None], *, reference: float | None = 1.0,
         references: tuple[tuple[float, str], ...] = (), missing: Sequence[str] = ()) -> FigureSpec:
    """One panel of one series (rows as short as they get: a wrapped label needs more)."""
    none = (None,) * len(values)
    reasons: dict[str, Any] = {"missing": tuple(missing)} if missing else {}
    series = Series("fp8-current", "FP8 Current", "#56B4E9", tuple(values), none, none, **reasons)
    return FigureSpec("bars", "", "Speedup vs BF16", "", (Panel("", tuple(categories), (series,)),),
                      reference=reference, references=references)


def missing_values_spec(question: Callable[..., Any]) -> FigureSpec:
    """The whole model on three devices: MXFP8 unsupported on two, FP8 Block failed (out of
    memory) on one in autocast, and a device whose result holds no FP8 Current cells at all."""
    q = question(model="te-guide-5b")
    h100 = make_document(q, device=H100, precisions=PRECISIONS, unsupported={"mxfp8": MXFP8})
    h200 = make_document(q, device=H200, precisions=PRECISIONS, unsupported={"mxfp8": MXFP8},
                         failed={("autocast", "fp8-block"): OOM})
    b200 = make_document(q, device=B200, precisions=PRECISIONS)
    partial = make_document(q, device=B200, precisions=PRECISIONS)
    partial["cells"] = [c for c in partial["cells"] if c["precision"] != "fp8-current"]
    spec = summary_spec([(LONG, Report(h100)), ("Llama 3.1 405B (TP 8) · H200", Report(h200)),
                         ("Llama 3.1 405B (TP 8) · B200", Report(b200)), ("B200, partial", Report(partial))],
                        ["autocast", "prequant"])
    assert spec is not None
    return spec


def tick_group(root: ET.Element, panel: int, row: int) -> tuple[ET.Element, list[ET.Element]]:
    group = root.find(f".//{SVG_NS}g[@id='ytick_{panel}_{row}']")
    assert group is not None
    return group, group.findall(f"{SVG_NS}text")


def scene_texts(spec: FigureSpec) -> list[layout.Text]:
    return [t for t in figures.scene(spec, "light").items if isinstance(t, layout.Text)]


# ------------------------------------------------------------------------------- category labels
def test_a_long_label_wraps_after_the_separator_and_keeps_every_word(question: Any) -> None:
    spec = missing_values_spec(question)
    svg = render(spec, "svg")
    assert "…".encode() not in svg
    root = ET.fromstring(svg)
    for number, panel in enumerate(spec.panels):
        for row, category in enumerate(panel.categories):
            group, lines = tick_group(root, number, row)
            assert group.find(f"{SVG_NS}title") is None  # nothing shortened: the lines are the text
            shown = [line.text or "" for line in lines]
            assert " ".join(shown).split() == category.split(), shown
            assert all(layout.text_width(line, FONT_PT) <= ROOM for line in shown)
            ys = [float(line.get("y", "")) for line in lines]
            assert ys == sorted(ys)
    _, lines = tick_group(root, 0, 0)
    assert [line.text for line in lines] == ["Llama 3.1 405B (TP 8) ·", "H100 80GB HBM3"]
    _, lines = tick_group(root, 0, 3)
    assert [line.text for line in lines] == ["B200, partial"]  # one that fits: one line, as ever


def test_wrapped_lines_are_centred_on_their_bars_and_set_the_margin() -> None:
    spec = bars([LONG, "Short", "Another label that is far too long to fit · on a single line · H200"],
                [1.5, 1.2, 1.1])
    scene = figures.scene(spec, "light")
    labels = [t for t in scene.items if isinstance(t, layout.Text) and t.group]
    rects = [r for r in scene.items if isinstance(r, layout.Rect) and r.width > 20]  # bars, not the legend's patch
    assert len(rects) == 3
    counts = []
    for row, rect in enumerate(sorted(rects, key=lambda r: r.y)):
        lines = [t for t in labels if t.group == f"ytick_0_{row}"]
        counts.append(len(lines))
        # Each line's ascent centred as a single line's is, the block on the bar's middle.
        middle = sum(t.y for t in lines) / len(lines) - layout.ASCENT * FONT_PT / 2
        assert middle == pytest.approx(rect.y + rect.height / 2, abs=0.01)
    assert counts[0] == 2 and counts[1] == 1 and counts[2] >= 3
    # The left margin is the widest line's, not the unwrapped label's: that line starts at the edge.
    assert min(t.box()[0] for t in labels) == pytest.approx(4.0, abs=0.01)


def test_rows_grow_to_hold_a_wrapped_label_and_the_bars_keep_their_size() -> None:
    short = figures.scene(bars(["a", "b", "c"], [1.5, 1.2, 1.1]), "light")
    words = "word " * 30
    spec = bars(["a", words, "c"], [1.5, 1.2, 1.1])
    scene = figures.scene(spec, "light")
    labels = [t for t in scene.items if isinstance(t, layout.Text) and t.group]
    assert len([t for t in labels if t.group == "ytick_0_1"]) >= 4
    boxes = {row: [t.box() for t in labels if t.group == f"ytick_0_{row}"] for row in range(3)}
    for upper, lower in ((0, 1), (1, 2)):  # one row's label ends before the next one's begins
        assert max(b[3] for b in boxes[upper]) < min(b[1] for b in boxes[lower])
    spine = next(item for item in scene.items if isinstance(item, layout.Polyline) and item.points[0][0]
                 == item.points[1][0] and item.alpha == layout.SPINE_ALPHA)
    top, bottom = sorted(y for _, y in spine.points)
    assert top <= min(b[1] for b in boxes[1]) and max(b[3] for b in boxes[1]) <= bottom  # inside the axes
    heights = {round(r.height, 6) for r in scene.items if isinstance(r, layout.Rect)}
    assert heights == {round(r.height, 6) for r in short.items if isinstance(r, layout.Rect)}
    assert scene.height > short.height


def test_only_a_word_wider_than_the_room_is_shortened_and_its_label_kept_as_a_title() -> None:
    word = "Supercalifragilisticexpialidocious-device-name-with-no-spaces"
    label = f"{word} · H200"
    root = ET.fromstring(render(bars([label, "Short"], [1.5, 1.2]), "svg"))
    group, lines = tick_group(root, 0, 0)
    title = group.find(f"{SVG_NS}title")
    assert title is not None and title.text == label
    assert next(iter(group)) is title  # first: the group's tooltip
    shown = [line.text or "" for line in lines]
    assert shown[0].endswith("…") and word.startswith(shown[0][:-1])
    assert shown[-1].endswith("H200") and all(layout.text_width(s, FONT_PT) <= ROOM for s in shown)
    short, lines = tick_group(root, 0, 1)
    assert short.find(f"{SVG_NS}title") is None and [t.text for t in lines] == ["Short"]


@pytest.mark.parametrize(("text", "lines"), [
    ("Llama 3 8B · H200", ["Llama 3 8B · H200"]),
    (LONG, ["Llama 3.1 405B (TP 8) ·", "H100 80GB HBM3"]),
    ("DeepSeek-V3 (EP 64) · NVIDIA H100 80GB HBM3 · run 2", ["DeepSeek-V3 (EP 64) ·", "NVIDIA H100 80GB HBM3 ·",
                                                             "run 2"]),
])
def test_label_lines_prefer_the_separator(text: str, lines: list[str]) -> None:
    assert layout.label_lines(text, FONT_PT, ROOM) == (lines, False)


# -------------------------------------------------------------------------- value labels, lines
def reference_xs(scene: layout.Scene) -> list[float]:
    """The x of each reference line: the dashed or dotted vertical lines."""
    return [item.points[0][0] for item in scene.items if isinstance(item, layout.Polyline) and item.dash
            and item.points[0][0] == item.points[1][0]]


def crossings(spec: FigureSpec) -> list[str]:
    """Every small text (value labels, missing-value marks) whose box a reference line crosses."""
    scene = figures.scene(spec, "light")
    lines = reference_xs(scene)
    found = []
    for text in (t for t in scene.items if isinstance(t, layout.Text) and t.size == SMALL_PT):
        start = {"start": 0.0, "middle": -0.5, "end": -1.0}[text.anchor] * layout.text_width(text.text, SMALL_PT)
        x0 = text.x + start
        x1 = x0 + layout.text_width(text.text, SMALL_PT)
        found += [f"{text.text!r} at {x0:.2f}..{x1:.2f} crosses the line at {x:.2f}" for x in lines
                  if x0 - 0.4 < x < x1 + 0.4]
    return found


def test_a_value_label_is_never_across_the_reference_line() -> None:
    """gpt-oss-120b's 0.67× bar: its label, after the bar, would reach over the dashed line at 1.0."""
    spec = bars(["gpt-oss-120b · H100 80GB HBM3", "gpt-oss-120b · H200", "b", "c"], [0.67, 0.64, 0.96, 1.9])
    scene = figures.scene(spec, "light")
    (line,) = reference_xs(scene)
    assert crossings(spec) == []
    moved = [t for t in scene.items if isinstance(t, layout.Text) and t.text in ("0.67×", "0.64×", "0.96×")]
    assert len(moved) == 3 and all(t.x == pytest.approx(line + 2.0) for t in moved)  # just right of it
    assert all(t.box()[2] <= scene.width for t in moved)


def test_value_labels_step_over_several_dotted_lines_and_stay_on_the_canvas() -> None:
    peaks = ((0.9, "BF16 dense peak"), (0.95, "FP8 dense peak"), (1.0, "another"))
    spec = bars([LONG, "b", "c"], [0.85, 0.5, 0.999], reference=None, references=peaks)
    assert crossings(spec) == []
    scene = figures.scene(spec, "light")
    for text in (t for t in scene.items if isinstance(t, layout.Text)):
        assert 0 <= text.box()[0] and text.box()[2] <= scene.width, text


def test_no_figure_of_the_site_kinds_has_a_label_across_a_reference(question: Any) -> None:
    from .test_figures import layout_specs

    report = real_report()
    specs = [*layout_specs(question), missing_values_spec(question),
             figures.tflops_spec(report, "prequant"), figures.roofline_spec(report, "prequant")]
    for spec in specs:
        assert spec is not None
        assert crossings(spec) == [], spec.title


# -------------------------------------------------------------------------------- missing values
def test_missing_values_carry_their_reasons(question: Any) -> None:
    spec = missing_values_spec(question)
    autocast, prequant = spec.panels
    reasons = {s.precision: s.missing for s in autocast.series}
    assert reasons["fp8-block"] == ("", f"failed: {OOM}", "", "")
    assert reasons["mxfp8"] == (f"unsupported: {MXFP8}", f"unsupported: {MXFP8}", "", "")
    assert reasons["fp8-current"] == ("", "", "", "not measured in this result")
    for panel in spec.panels:
        for series in panel.series:
            assert len(series.missing) == len(series.values)
            assert all(bool(why) == (value is None) for value, why in zip(series.values, series.missing, strict=True))
    assert {s.precision for s in prequant.series} == {"fp8-current", "fp8-block", "mxfp8"}


def test_a_missing_value_is_marked_with_its_reason_as_a_tooltip(question: Any) -> None:
    spec = missing_values_spec(question)
    root = ET.fromstring(render(spec, "svg"))
    marks = []
    for group in root.iter(f"{SVG_NS}g"):
        title, text = group.find(f"{SVG_NS}title"), group.find(f"{SVG_NS}text")
        if title is not None and text is not None and not group.get("id"):
            marks.append((text.text, title.text))
    expected = [("failed", f"failed: {OOM}"), ("n/a", f"unsupported: {MXFP8}"), ("n/a", f"unsupported: {MXFP8}"),
                ("n/a", "not measured in this result"),  # autocast
                ("n/a", f"unsupported: {MXFP8}"), ("n/a", f"unsupported: {MXFP8}"),
                ("n/a", "not measured in this result")]  # pre-quantized
    assert sorted(marks) == sorted(expected)
    circles = [c for c in root.iter(f"{SVG_NS}circle") if c.find(f"{SVG_NS}title") is not None]
    assert sorted(c.findtext(f"{SVG_NS}title") or "" for c in circles) == sorted(why for _, why in expected)


def test_a_missing_value_marker_sits_in_its_bars_slot_beside_the_axis(question: Any) -> None:
    spec = missing_values_spec(question)
    scene = figures.scene(spec, "light")
    hollow = [c for c in scene.items if isinstance(c, layout.Circle) and c.fill == "none"]
    marks = [t for t in scene.items if isinstance(t, layout.Text) and t.title]
    assert len(hollow) == len(marks) == 7
    colours = {s.color for p in spec.panels for s in p.series if any(v is None for v in s.values)}
    assert {c.stroke for c in hollow} == colours and all(c.stroke_width > 0 for c in hollow)
    spines = [item.points[0][0] for item in scene.items if isinstance(item, layout.Polyline)
              and item.alpha == layout.SPINE_ALPHA and item.points[0][0] == item.points[1][0]]
    for circle in hollow:
        assert any(0 < circle.x - circle.radius - x <= 3 for x in spines)  # just right of the axis
        mark = next(t for t in marks if t.title == circle.title and abs(t.box()[1] + t.box()[3] - 2 * circle.y) < 1)
        assert mark.box()[0] > circle.x + circle.radius  # the text after the marker, on its line
    # Where a value is missing, no bar is drawn; every other value keeps its bar.
    drawn = [r for r in scene.items if isinstance(r, layout.Rect) and r.width > 20]
    values = [v for p in spec.panels for s in p.series for v in s.values]
    assert len(drawn) == sum(v is not None for v in values)


def test_a_missing_value_without_a_known_reason_is_still_marked() -> None:
    scene = figures.scene(bars(["a", "b"], [1.2, None]), "light")
    assert [t.text for t in scene.items if isinstance(t, layout.Text) and t.size == SMALL_PT] == ["1.20×", "n/a"]
    assert b"<title>" not in render(bars(["a", "b"], [1.2, None]), "svg")


def test_the_matplotlib_back_end_draws_the_markers(question: Any) -> None:
    pytest.importorskip("matplotlib")
    import numpy as np
    from matplotlib.collections import PatchCollection

    from gemm_bench.report import figure_mpl

    spec = missing_values_spec(question)
    fig = figure_mpl.figure(figures.scene(spec))
    hollow = [a for a in fig.artists if isinstance(a, PatchCollection) and not np.asarray(a.get_facecolor()).any()]
    assert sum(len(a.get_paths()) for a in hollow) == 7
    assert {t.get_text() for t in fig.texts} >= {"n/a", "failed"}
    assert render(spec, "png").startswith(b"\x89PNG") and render(spec, "pdf").startswith(b"%PDF")


def test_reasons_read_back_from_a_spec_file(question: Any) -> None:
    spec = missing_values_spec(question)
    data = json.loads(figures.spec_to_json(spec))
    assert figures.spec_from_json(data) == spec
    data["panels"][0]["series"][0]["missing"] = ["one reason for several values"]
    assert figures.spec_from_json(data) is None
    data["panels"][0]["series"][0]["missing"] = [1] * len(data["panels"][0]["series"][0]["values"])
    assert figures.spec_from_json(data) is None


def test_every_bar_figure_of_a_report_says_why_a_value_is_missing() -> None:
    report = real_report()
    for spec in (figures.spec_for(report, "autocast"), figures.latency_spec(report, "autocast"),
                 figures.tflops_spec(report, "prequant"), figures.roofline_spec(report, "autocast")):
        assert spec is not None
        for series in spec.panels[0].series:
            assert len(series.missing) == len(series.values)
            assert all(bool(why) == (value is None) for value, why in zip(series.values, series.missing, strict=True))


@pytest.mark.parametrize(("status", "reason", "shown"), [
    ("unsupported", MXFP8, f"unsupported: {MXFP8}"),
    ("failed", OOM, f"failed: {OOM}"),
    ("missing", "not measured in this result", "not measured in this result"),
    ("missing", "", "not measured"),
    ("failed", "", "failed"),
])
def test_status_reasons_read_as_a_reader_needs_them(status: str, reason: str, shown: str) -> None:
    assert figures.status_reason(status, reason) == shown
