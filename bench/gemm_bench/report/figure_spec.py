"""What a figure shows, as plain data, and the style it is drawn in: the one module the figure
writers share.

A :class:`FigureSpec` holds exactly what a figure shows; :meth:`FigureSpec.key` hashes that, the
drawing code's :data:`FIGURE_VERSION` and the style (colours, inks, width, font sizes), so equal
keys draw equal bytes. :mod:`gemm_bench.report.figures` builds specs from reports and writes them;
the layout (:mod:`gemm_bench.report.figure_layout`), the SVG writer and the matplotlib painter
import this module, never :mod:`~gemm_bench.report.figures`. Pure: no matplotlib, no torch.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from typing import Literal

#: Bump when the drawing code changes what a spec looks like: every figure key changes with it.
FIGURE_VERSION = "9"

#: Okabe-Ito colours: distinguishable with colour-blindness, and mid-tone enough to read on both a
#: white and a near-black background.
PRECISION_COLORS = {
    "bf16": "#999999",
    "fp8-delayed": "#E69F00",
    "fp8-current": "#56B4E9",
    "fp8-block": "#009E73",
    "mxfp8": "#CC79A7",
    "nvfp4": "#D55E00",
}

#: Fixed inks (GitHub's light/dark foregrounds); a ``page`` SVG draws in ``currentColor``.
_INK = {"light": "#1f2328", "dark": "#e6edf3"}

#: Width 3.8 in and no text below 8.4 pt. On a 390 px phone a figure nested in two tab panels gets
#: about 296 px (measured in Chromium: Furo's margins and the panels' padding), so the smallest
#: label renders at 8.4 * (4/3) * 296 / (3.8 * 96) = 9.1 px, above the 9 px floor (the browser test
#: measures it; a unit test checks the SVG against PHONE_WIDTH_PX).
WIDTH_IN = 3.8
#: The width of a figure's desktop twin: 7 in is 672 CSS px, the narrowest content column a figure
#: gets at 1400 px (nested in two tab panels; measured in Chromium: 672-736 px). The page shows it
#: where its container is at least :data:`WIDE_MIN_PX` wide and the 3.8 in figure elsewhere, so a
#: desktop plot uses the column's width without text growing with it.
WIDE_IN = 7.0
#: The narrowest container that shows the wide twin: scaled to it, the smallest label is
#: 8.4 * (4/3) * 620 / 672 = 10.3 px, above the 10 px the browser tests ask for.
WIDE_MIN_PX = 620
#: Every width a figure is drawn at, the phone's first.
WIDTHS = (WIDTH_IN, WIDE_IN)
FONT_PT = 9.0
SMALL_PT = 8.4
PHONE_WIDTH_PX = 296
MIN_PHONE_PX = 9.0


class FigureError(Exception):
    """A figure that cannot be made from what was given (no result, an unknown format or theme)."""


@dataclasses.dataclass(frozen=True)
class Series:
    """One precision's values across a panel's categories; None where nothing was measured.

    ``low`` and ``high`` bound the spread of each value (see
    :func:`gemm_bench.report.figures.ratio_spread`); None where the stored statistics cannot give
    one, and then no error bar is drawn.

    ``missing`` says why each value is None, one reason per value ("" where the value exists):
    the cell's status and its reason (``unsupported: …``, ``failed: CUDA out of memory …``,
    ``not measured …``); empty when no reasons are known. A ``bars`` figure marks a missing value
    where its bar would start, ``failed`` for a reason starting with "failed", else ``n/a``, with
    the reason as its tooltip (:func:`missing_mark`).
    """

    precision: str
    label: str
    color: str
    values: tuple[float | None, ...]
    low: tuple[float | None, ...]
    high: tuple[float | None, ...]
    #: ``scatter`` figures: each value's x coordinate (``values`` are the y coordinates).
    x: tuple[float | None, ...] = ()
    #: Why each value is None ("" where it is not); () when no reasons are known.
    missing: tuple[str, ...] = ()
    #: A short mark drawn after each value's label ("" for none; () for no marks): ``bars`` figures
    #: mark the bar a text picks (the answer's recipe: :mod:`gemm_bench.report.models_compared`).
    marks: tuple[str, ...] = ()

    def missing_reason(self, index: int) -> str:
        """Why value ``index`` is missing ("" when it is not, or when no reason is known)."""
        return self.missing[index] if index < len(self.missing) else ""

    def mark(self, index: int) -> str:
        """The mark drawn after value ``index``'s label ("" for none)."""
        return self.marks[index] if index < len(self.marks) else ""


def missing_mark(reason: str) -> str:
    """The short text drawn where a value is missing: ``failed`` for a failed measurement, else
    ``n/a`` (unsupported, not measured, no speedup)."""
    return "failed" if reason.startswith("failed") else "n/a"


@dataclasses.dataclass(frozen=True)
class Panel:
    """One axes: categories (bar rows, or sweep points at positions ``x``) and their series."""

    title: str
    categories: tuple[str, ...]
    series: tuple[Series, ...]
    x: tuple[float, ...] = ()


@dataclasses.dataclass(frozen=True)
class FigureSpec:
    """Everything a figure shows, as plain data; equal specs draw equal bytes.

    ``kind`` ``bars``: horizontal bars, one row per category, one bar per series, the first row
    in bold when ``emphasize_first`` (the whole-model total). ``sweep``: one line per series
    against ``Panel.x`` on a log-2 axis. ``scatter``: one labelled point per series value at
    (``Series.x``, value), ``category_label`` naming the x axis. ``reference`` draws a dashed line
    (1.0: as fast as BF16); ``references`` draws dotted lines with a label each (a device's peak).
    ``value_format`` formats the value printed beside each bar.
    """

    kind: Literal["bars", "sweep", "scatter"]
    title: str
    value_label: str
    category_label: str
    panels: tuple[Panel, ...]
    reference: float | None = 1.0
    emphasize_first: bool = False
    note: str = ""
    value_format: str = "{:.2f}×"
    references: tuple[tuple[float, str], ...] = ()

    def key(self) -> str:
        """A stable hash of the content, :data:`FIGURE_VERSION` and the style: the file's name."""
        payload = json.dumps(
            {"version": FIGURE_VERSION, "style": _STYLE_FINGERPRINT, "spec": dataclasses.asdict(self)},
            sort_keys=True, ensure_ascii=False, default=repr,
        )
        return hashlib.sha256(payload.encode("utf-8")).hexdigest()[:20]

    @property
    def is_empty(self) -> bool:
        return not any(panel.series for panel in self.panels)


_STYLE_FINGERPRINT = json.dumps(
    {"colors": PRECISION_COLORS, "ink": _INK, "widths": WIDTHS, "font": FONT_PT, "small": SMALL_PT},
    sort_keys=True, default=repr,
)
