"""A figure scene (:mod:`gemm_bench.report.figure_layout`) written as SVG text: no matplotlib, no numpy.

What the site and its tests rely on:

* the root ``<svg>`` has ``width``/``height`` in points and a ``viewBox`` in the same units;
* a ``page`` figure's root has the class ``gemm-figure-svg`` and takes its ``color`` from the
  page's ``--gemm-figure-ink``, else from a ``prefers-color-scheme`` rule in ``<defs>``; its ink is
  ``currentColor`` everywhere else;
* every text is a ``<text>`` with ``x``, ``y`` and a style holding its ``font-size`` in px (user
  units) and ``font-weight: bold`` when bold; family and fill come from its group;
* a text with a group id (category labels: ``ytick_<panel>_<row>``) is the only child of a
  ``<g>`` of that id, and no other id is written (so inlining can prefix them all);
* text is XML-escaped, never markup; the same scene gives the same bytes.

Consecutive items of one style share an element: rectangles of one colour are one ``<path>``, so
are lines of one stroke, markers of one colour one ``<g>``, texts of one colour one ``<g>``.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Sequence
from itertools import groupby
from xml.sax.saxutils import escape

from gemm_bench.report.figure_layout import Circle, Item, Polyline, Rect, Scene, Text

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
    if isinstance(item, Polyline):
        return ("line", item.stroke, item.width, item.dash, item.alpha, item.cap, len(item.points) > 2)
    if isinstance(item, Circle):
        return ("circle", item.fill)
    return ("text", item.fill)


def _rects(rects: Sequence[Rect]) -> str:
    d = "".join(f"M{_n(r.x)} {_n(r.y)}h{_n(r.width)}v{_n(r.height)}h{_n(-r.width)}z" for r in rects)
    return f'<path fill="{_attr(rects[0].fill)}" d="{d}"/>'


def _polyline_d(line: Polyline) -> str:
    (x0, y0), *rest = line.points
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


def _circles(circles: Sequence[Circle]) -> str:
    body = "".join(f'<circle cx="{_n(c.x)}" cy="{_n(c.y)}" r="{_n(c.radius)}"/>' for c in circles)
    return f'<g fill="{_attr(circles[0].fill)}">{body}</g>'


def _one_text(text: Text) -> str:
    style = f"font-size: {_n(text.size)}px"
    if text.bold:
        style += "; font-weight: bold"
    if text.anchor != "start":
        style += f"; text-anchor: {text.anchor}"
    turn = f' transform="rotate(-90 {_n(text.x)} {_n(text.y)})"' if text.rotation == 90 else ""
    element = f'<text x="{_n(text.x)}" y="{_n(text.y)}" style="{style}"{turn}>{_text(text.text)}</text>'
    return f'<g id="{_attr(text.group)}">{element}</g>' if text.group else element


def _texts(texts: Sequence[Text]) -> str:
    body = "\n".join(_one_text(t) for t in texts)
    return f'<g fill="{_attr(texts[0].fill)}" font-family="{FONT_FAMILY}">\n{body}\n</g>'


def _elements(items: Sequence[Item]) -> Iterator[str]:
    for key, run in groupby(items, key=_style_key):
        group = list(run)
        if key[0] == "rect":
            yield _rects(group)  # type: ignore[arg-type]
        elif key[0] == "line":
            yield _lines(group)  # type: ignore[arg-type]
        elif key[0] == "circle":
            yield _circles(group)  # type: ignore[arg-type]
        else:
            yield _texts(group)  # type: ignore[arg-type]


def to_svg(scene: Scene, *, page_style: str = "", root_attrs: str = "") -> bytes:
    """The scene as an SVG document; ``root_attrs`` go on the root element, ``page_style`` (a
    ``<style>`` element) in its ``<defs>``."""
    ids = [item.group for item in scene.items if isinstance(item, Text) and item.group]
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
