"""A figure scene (:mod:`gemm_bench.report.figure_layout`) written as SVG text: no matplotlib, no numpy.

What the site and its tests rely on:

* the root ``<svg>`` has ``width``/``height`` in points and a ``viewBox`` in the same units;
* a ``page`` figure's root has the class ``gemm-figure-svg`` and takes its ``color`` from the
  page's ``--gemm-figure-ink``, else from a ``prefers-color-scheme`` rule in ``<defs>``; its ink is
  ``currentColor`` everywhere else;
* every text is a ``<text>`` with ``x``, ``y`` and a style holding its ``font-size`` in px (user
  units) and ``font-weight: bold`` when bold; family and fill come from its group;
* the texts of one group id (a category label's lines: ``ytick_<panel>_<row>``) are the
  ``<text>`` children of one ``<g>`` of that id, its first child a ``<title>`` (the whole label)
  where the scene gives one; no other id is written (so inlining can prefix them all);
* a tooltip of a text without a group is a ``<title>``, the first child of a ``<g>`` (no id)
  around that text; a marker's is a ``<title>`` inside its ``<circle>``;
* text is XML-escaped, never markup; the same scene gives the same bytes.

Consecutive items of one style share an element: rectangles of one colour are one ``<path>``, so
are lines of one stroke, markers of one colour one ``<g>``, texts of one colour one ``<g>``.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Sequence
from itertools import groupby
from xml.sax.saxutils import escape

from gemm_bench.report.figure_layout import Circle, Item, Polygon, Polyline, Rect, Scene, Text

PAGE_CLASS = "gemm-figure-svg"
FONT_FAMILY = "'DejaVu Sans', sans-serif"
#: Characters XML 1.0 cannot hold (control characters, lone surrogates, U+FFFE/FFFF).
_NOT_XML = re.compile("[^\t\n\r\x20-\ud7ff\ue000-\ufffd\U00010000-\U0010ffff]")


def _n(value: float) -> str:
    """A coordinate: two decimals at most, no trailing zeros, never ``-0``."""
    text = f"{value:.2f}".rstrip("0").rstrip(".")
    return "0" if text in ("-0", "") else text


def _text(value: str) -> str:
    return escape(_NOT_XML.sub("\ufffd", value))


def _attr(value: str) -> str:
    return escape(_NOT_XML.sub("\ufffd", value), {'"': "&quot;"})


def _style_key(item: Item) -> tuple[object, ...]:
    """Items that may share one element: same kind and same paint."""
    if isinstance(item, Rect):
        return ("rect", item.fill)
    if isinstance(item, Polygon):
        return ("polygon", item.fill, item.alpha)
    if isinstance(item, Polyline):
        return ("line", item.stroke, item.width, item.dash, item.alpha, item.cap, len(item.points) > 2)
    if isinstance(item, Circle):
        return ("circle", item.fill, item.stroke, item.stroke_width)
    return ("text", item.fill)


def _rects(rects: Sequence[Rect]) -> str:
    d = "".join(f"M{_n(r.x)} {_n(r.y)}h{_n(r.width)}v{_n(r.height)}h{_n(-r.width)}z" for r in rects)
    return f'<path fill="{_attr(rects[0].fill)}" d="{d}"/>'


def _polygons(shapes: Sequence[Polygon]) -> str:
    first = shapes[0]
    paint = f'fill="{_attr(first.fill)}"' + (f' fill-opacity="{_n(first.alpha)}"' if first.alpha != 1 else "")
    d = "".join(_points_d(shape.points) + "Z" for shape in shapes)
    return f'<path {paint} d="{d}"/>'


def _polyline_d(line: Polyline) -> str:
    return _points_d(line.points)


def _points_d(points: Sequence[tuple[float, float]]) -> str:
    (x0, y0), *rest = points
    return f"M{_n(x0)} {_n(y0)}" + "".join(f"L{_n(x)} {_n(y)}" for x, y in rest)


def _lines(lines: Sequence[Polyline]) -> str:
    first = lines[0]
    paint = f'fill="none" stroke="{_attr(first.stroke)}" stroke-width="{_n(first.width)}"'
    if first.alpha != 1:
        paint += f' stroke-opacity="{_n(first.alpha)}"'
    if first.dash:
        paint += f' stroke-dasharray="{",".join(_n(v) for v in first.dash)}"'
    if first.cap != "butt":
        paint += f' stroke-linecap="{first.cap}"'
    if len(first.points) > 2:
        paint += ' stroke-linejoin="round"'
    return f'<path {paint} d="{"".join(_polyline_d(line) for line in lines)}"/>'


def _title(title: str) -> str:
    return f"<title>{_text(title)}</title>" if title else ""


def _circle(circle: Circle) -> str:
    attrs = f'cx="{_n(circle.x)}" cy="{_n(circle.y)}" r="{_n(circle.radius)}"'
    return f"<circle {attrs}>{_title(circle.title)}</circle>" if circle.title else f"<circle {attrs}/>"


def _circles(circles: Sequence[Circle]) -> str:
    first = circles[0]
    paint = f'fill="{_attr(first.fill)}"'
    if first.stroke:
        paint += f' stroke="{_attr(first.stroke)}" stroke-width="{_n(first.stroke_width)}"'
    return f'<g {paint}>{"".join(_circle(c) for c in circles)}</g>'


def _one_text(text: Text) -> str:
    style = f"font-size: {_n(text.size)}px"
    if text.bold:
        style += "; font-weight: bold"
    if text.anchor != "start":
        style += f"; text-anchor: {text.anchor}"
    turn = f' transform="rotate(-90 {_n(text.x)} {_n(text.y)})"' if text.rotation == 90 else ""
    return f'<text x="{_n(text.x)}" y="{_n(text.y)}" style="{style}"{turn}>{_text(text.text)}</text>'


def _grouped(texts: Sequence[Text]) -> Iterator[str]:
    """Each run of texts of one group id as one ``<g>`` of that id (its title first); a text with
    no group alone, in a ``<g>`` holding its title if it has one."""
    for group, run in groupby(texts, key=lambda t: t.group):
        members = list(run)
        if group:
            title = next((t.title for t in members if t.title), "")
            yield f'<g id="{_attr(group)}">{_title(title)}{"".join(_one_text(t) for t in members)}</g>'
            continue
        for text in members:
            yield f"<g>{_title(text.title)}{_one_text(text)}</g>" if text.title else _one_text(text)


def _texts(texts: Sequence[Text]) -> str:
    body = "\n".join(_grouped(texts))
    return f'<g fill="{_attr(texts[0].fill)}" font-family="{FONT_FAMILY}">\n{body}\n</g>'


def _group(item: Item) -> str:
    return item.group if isinstance(item, Text) else ""


def _elements(items: Sequence[Item]) -> Iterator[str]:
    for key, run in groupby(items, key=_style_key):
        group = list(run)
        if key[0] == "rect":
            yield _rects(group)  # type: ignore[arg-type]
        elif key[0] == "polygon":
            yield _polygons(group)  # type: ignore[arg-type]
        elif key[0] == "line":
            yield _lines(group)  # type: ignore[arg-type]
        elif key[0] == "circle":
            yield _circles(group)  # type: ignore[arg-type]
        else:
            yield _texts(group)  # type: ignore[arg-type]


def to_svg(scene: Scene, *, page_style: str = "", root_attrs: str = "") -> bytes:
    """The scene as an SVG document; ``root_attrs`` go on the root element, ``page_style`` (a
    ``<style>`` element) in its ``<defs>``."""
    # One id per run of texts that share it and a style (what _grouped writes as one group).
    ids = [key[1] for key, _ in groupby(scene.items, key=lambda item: (_style_key(item), _group(item)))
           if key[1]]
    if len(ids) != len(set(ids)):
        raise ValueError(f"duplicate group ids in a figure: {sorted(i for i in ids if ids.count(i) > 1)}")
    width, height = _n(scene.width), _n(scene.height)
    root = (f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}pt" height="{height}pt" '
            f'viewBox="0 0 {width} {height}"{" " + root_attrs if root_attrs else ""}>')
    parts = ['<?xml version="1.0" encoding="utf-8"?>', root]
    if page_style:
        parts.append(f"<defs>{page_style}</defs>")
    parts += _elements(scene.items)
    parts.append("</svg>\n")
    return "\n".join(parts).encode("utf-8")
