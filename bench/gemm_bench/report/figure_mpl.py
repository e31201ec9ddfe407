"""A figure scene (:mod:`gemm_bench.report.figure_layout`) painted by matplotlib, for PDF and PNG.

Builders that take no SVG (LaTeX and others) get these; the HTML build never imports this
module's matplotlib. Nothing is laid out here: every primitive is drawn where the scene puts it
(points from the top-left, texts on their baselines), so PDF, PNG and SVG show one layout.
Tooltips (a text's or marker's ``title``) have no place in a PDF or PNG and are left out.
"""

from __future__ import annotations

import io
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from itertools import groupby
from typing import TYPE_CHECKING, Any, cast

from gemm_bench.report.figure_layout import Circle, Item, Polygon, Polyline, Rect, Scene, Text
from gemm_bench.report.figure_spec import FONT_PT

if TYPE_CHECKING:
    from matplotlib.figure import Figure
    from matplotlib.transforms import Transform

#: Text is literal (no mathtext, no TeX: a ``$`` is a dollar sign), the font DejaVu Sans, dash
#: patterns in points as the scene gives them, and no date or tool name in the files.
_RC: dict[str, Any] = {
    "text.parse_math": False,
    "text.usetex": False,
    "font.family": "sans-serif",
    "font.sans-serif": ["DejaVu Sans"],
    "font.size": FONT_PT,
    "lines.scale_dashes": False,
    "path.simplify": False,
    "axes.unicode_minus": False,
}
_SAVE_METADATA: dict[str, dict[str, Any]] = {
    "pdf": {"CreationDate": None, "ModDate": None, "Creator": None, "Producer": None},
    "png": {"Software": None},
}
_CAP = {"butt": "butt", "square": "projecting"}


@contextmanager
def _style() -> Iterator[None]:
    import matplotlib

    with matplotlib.rc_context(cast(Any, _RC)):
        yield


def figure(scene: Scene) -> Figure:
    """A matplotlib Figure with the scene's primitives as artists, in its order."""
    from matplotlib.figure import Figure
    from matplotlib.transforms import Affine2D

    with _style():
        fig = Figure(figsize=(scene.width / 72, scene.height / 72))
        fig.patch.set_alpha(0)
        # Points from the top-left to the figure's display coordinates (inches from the bottom-left).
        points = Affine2D().scale(1 / 72, -1 / 72).translate(0, scene.height / 72) + fig.dpi_scale_trans
        for zorder, (_, run) in enumerate(groupby(scene.items, key=lambda item: (type(item), _paint(item)))):
            _draw(fig, list(run), points, zorder)  # painted in the scene's order
    return fig


def _paint(item: Item) -> tuple[object, ...]:
    if isinstance(item, Polyline):
        return item.stroke, item.width, item.dash, item.alpha, item.cap
    if isinstance(item, Circle):
        return item.fill, item.stroke, item.stroke_width
    if isinstance(item, Rect):
        return (item.fill,)
    if isinstance(item, Polygon):
        return item.fill, item.alpha
    return ()


def _draw(fig: Figure, items: Sequence[Item], points: Transform, zorder: int) -> None:
    from matplotlib.collections import LineCollection, PatchCollection, PolyCollection
    from matplotlib.patches import Circle as CirclePatch

    first = items[0]
    if isinstance(first, Rect):
        boxes = [((r.x, r.y), (r.x + r.width, r.y), (r.x + r.width, r.y + r.height), (r.x, r.y + r.height))
                 for r in cast(Sequence[Rect], items)]
        fig.add_artist(PolyCollection(boxes, facecolors=first.fill, edgecolors="none", linewidths=0,
                                      transform=points, zorder=zorder))
    elif isinstance(first, Polygon):
        fig.add_artist(PolyCollection([shape.points for shape in cast(Sequence[Polygon], items)], facecolors=first.fill,
                                      edgecolors="none", linewidths=0, alpha=first.alpha, transform=points,
                                      zorder=zorder))
    elif isinstance(first, Polyline):
        style: Any = (0, first.dash) if first.dash else "solid"
        fig.add_artist(LineCollection([line.points for line in cast(Sequence[Polyline], items)], colors=first.stroke,
                                      linewidths=first.width, linestyles=style, alpha=first.alpha,
                                      capstyle=_CAP[first.cap], joinstyle="round", transform=points, zorder=zorder))
    elif isinstance(first, Circle):
        circles = [CirclePatch((c.x, c.y), c.radius) for c in cast(Sequence[Circle], items)]
        fig.add_artist(PatchCollection(circles, facecolors=first.fill, edgecolors=first.stroke or "none",
                                       linewidths=first.stroke_width if first.stroke else 0, transform=points,
                                       zorder=zorder))
    else:
        for text in cast(Sequence[Text], items):
            fig.text(text.x, text.y, text.text, transform=points, fontsize=text.size, color=text.fill,
                     fontweight="bold" if text.bold else "normal", rotation=text.rotation, rotation_mode="anchor",
                     ha={"start": "left", "middle": "center", "end": "right"}[text.anchor], va="baseline",
                     zorder=zorder, gid=text.group or None)


def render(scene: Scene, fmt: str) -> bytes:
    """``pdf`` or ``png`` bytes of the scene (PNG at 150 dpi), without a date or tool name."""
    if fmt not in _SAVE_METADATA:
        raise ValueError(f"matplotlib back end: {fmt!r} is not pdf or png")
    buffer = io.BytesIO()
    with _style():
        extra: dict[str, Any] = {"dpi": 150} if fmt == "png" else {}
        figure(scene).savefig(buffer, format=fmt, metadata=_SAVE_METADATA[fmt], **extra)
    return buffer.getvalue()
