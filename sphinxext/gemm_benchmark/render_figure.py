"""Speedup figures drawn with matplotlib from :class:`gemm_bench.report.Report` numbers.

Pure drawing (no Sphinx): the directive, and ``readme_figure`` for the README, call the same
functions. Every plotted number is a Report value (``gemm_speedup``, ``total().speedup_vs_bf16``).

Figures are drawn twice, for a light and a dark page background (Furo switches between them with
its ``only-light`` / ``only-dark`` classes); backgrounds are transparent. SVG output is made
byte-for-byte deterministic (fixed ``svg.hashsalt``, no date metadata, glyphs as paths) so that
rebuilding an unchanged page, or building with ``-j 4`` instead of ``-j 1``, writes the same file,
and files are named by a hash of their content.
"""

from __future__ import annotations

import hashlib
import io
import os
import tempfile
from collections.abc import Sequence
from pathlib import Path

import matplotlib
from matplotlib.figure import Figure

from gemm_bench.precisions import BASELINE, MODE_NAMES, PRECISIONS
from gemm_bench.report import Report
from gemm_bench.shapes import OP_NAMES, PASS_NAMES, PASSES

THEMES: tuple[str, ...] = ("light", "dark")

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

_INK = {"light": "#1f2328", "dark": "#e6edf3"}
_GRID = {"light": "#d0d7de", "dark": "#3d444d"}

_RC = {
    "svg.hashsalt": "gemm-benchmark",
    "svg.fonttype": "path",
    "font.size": 9,
    "font.family": "DejaVu Sans",
    "path.simplify": False,
}


def _style(fig: Figure, axes: Sequence[matplotlib.axes.Axes], theme: str) -> None:
    ink, grid = _INK[theme], _GRID[theme]
    fig.patch.set_alpha(0)
    for ax in axes:
        ax.set_facecolor("none")
        for spine in ax.spines.values():
            spine.set_color(grid)
        ax.tick_params(colors=ink, which="both")
        ax.xaxis.label.set_color(ink)
        ax.yaxis.label.set_color(ink)
        ax.title.set_color(ink)
        ax.grid(True, axis="x" if ax.name == "rectilinear" else "both", color=grid, linewidth=0.6)
        ax.set_axisbelow(True)


def measured_precisions(report: Report, mode: str) -> list[str]:
    """Non-baseline precisions with every GEMM measured in ``mode``: the ones a figure can plot."""
    return [p for p in report.precisions if p != BASELINE and report.status(mode, p)[0] == "measured"]


def _legend(fig: Figure, ax: matplotlib.axes.Axes, theme: str) -> None:
    """A one-row legend above the plot, where it cannot cover a bar."""
    handles, labels = ax.get_legend_handles_labels()
    legend = fig.legend(handles, labels, frameon=False, fontsize=8, loc="outside upper center",
                        ncols=min(len(labels), 6))
    for text in legend.get_texts():
        text.set_color(_INK[theme])


def gemm_figure(report: Report, mode: str, *, theme: str = "light", title: str = "") -> Figure:
    """Speedup vs BF16 of each GEMM, and of the whole model, in one mode (horizontal bars)."""
    with matplotlib.rc_context(_RC):
        precisions = measured_precisions(report, mode)
        rows: list[tuple[str, dict[str, float | None]]] = []
        whole = "Whole model" if report.kind == "model" else "All shapes"
        rows.append((whole, {p: report.total(mode, p).speedup_vs_bf16 for p in precisions}))
        for pass_ in PASSES:
            for g in (g for g in report.gemms if g.pass_ == pass_):
                label = (f"{OP_NAMES.get(g.op, g.op)} · {PASS_NAMES[pass_]}" if report.kind == "model" else g.label)
                rows.append((label, {p: report.gemm_speedup(mode, p, g) for p in precisions}))
        n_bars = max(len(precisions), 1)
        fig = Figure(figsize=(7.0, 0.9 + len(rows) * (0.16 + 0.12 * n_bars)), layout="constrained")
        ax = fig.add_subplot()
        height = 0.8 / n_bars
        for i, p in enumerate(precisions):
            ys = [r + (i - (n_bars - 1) / 2) * height for r in range(len(rows))]
            values = [row[1][p] or 0.0 for row in rows]
            bars = ax.barh(ys, values, height=height * 0.92, color=PRECISION_COLORS[p], label=PRECISIONS[p].display)
            ax.bar_label(bars, labels=[f"{v:.2f}×" if v else "" for v in values], padding=2, fontsize=7,
                         color=_INK[theme])
        ax.axvline(1.0, color=_INK[theme], linewidth=0.8, linestyle="--")
        ax.set_yticks(range(len(rows)), [r[0] for r in rows])
        ax.get_yticklabels()[0].set_fontweight("bold")
        ax.invert_yaxis()
        ax.set_xlabel(f"Speedup vs BF16 ({MODE_NAMES[mode]}; higher is faster)")
        right = max([v or 0.0 for _, vals in rows for v in vals.values()] + [1.0])
        ax.set_xlim(0, right * 1.15)
        if title:
            ax.set_title(title, loc="left", fontsize=9, color=_INK[theme])
        if not precisions:
            ax.text(0.5, 0.5, "no precision besides BF16 measured", transform=ax.transAxes, ha="center",
                    color=_INK[theme])
        _style(fig, [ax], theme)
        if precisions:
            _legend(fig, ax, theme)
        return fig


def sweep_figure(report: Report, mode: str, *, theme: str = "light", title: str = "") -> Figure:
    """Speedup vs BF16 against the size ``S`` of square ``SxSxS`` GEMMs (one line per precision)."""
    with matplotlib.rc_context(_RC):
        precisions = measured_precisions(report, mode)
        gemms = sorted(report.gemms, key=lambda g: g.m)
        fig = Figure(figsize=(7.0, 3.6), layout="constrained")
        ax = fig.add_subplot()
        for p in precisions:
            points = [(g.m, report.gemm_speedup(mode, p, g)) for g in gemms]
            points = [(x, y) for x, y in points if y is not None]
            ax.plot([x for x, _ in points], [y for _, y in points], marker="o", markersize=4,
                    color=PRECISION_COLORS[p], label=PRECISIONS[p].display)
        ax.axhline(1.0, color=_INK[theme], linewidth=0.8, linestyle="--")
        ax.set_xscale("log", base=2)
        ax.set_xticks([g.m for g in gemms], [str(g.m) for g in gemms])
        ax.minorticks_off()
        ax.set_xlabel("Square GEMM size S (S x S x S)")
        ax.set_ylabel(f"Speedup vs BF16 ({MODE_NAMES[mode]})")
        if title:
            ax.set_title(title, loc="left", fontsize=9, color=_INK[theme])
        _style(fig, [ax], theme)
        if precisions:
            _legend(fig, ax, theme)
        return fig


def figure_for(report: Report, mode: str, *, theme: str = "light", title: str = "") -> Figure:
    """The figure that suits the question: speedup vs size for sweeps, per-GEMM bars otherwise."""
    draw = sweep_figure if report.kind == "sweep" else gemm_figure
    return draw(report, mode, theme=theme, title=title)


def summary_figure(reports: Sequence[tuple[str, Report]], modes: Sequence[str], *, theme: str = "light",
                   title: str = "") -> Figure:
    """Whole-model speedup vs BF16 per precision, one panel per mode, one bar group per device."""
    with matplotlib.rc_context(_RC):
        fig = Figure(figsize=(7.0, 0.8 + 1.1 * max(len(reports), 1) * len(modes)), layout="constrained")
        axes = fig.subplots(len(modes), 1, squeeze=False)[:, 0]
        right = 1.0
        for ax, mode in zip(axes, modes, strict=True):
            labels = []
            for row, (device, report) in enumerate(reports):
                precisions = measured_precisions(report, mode)
                labels.append(device)
                n = max(len(precisions), 1)
                for i, p in enumerate(precisions):
                    value = report.total(mode, p).speedup_vs_bf16 or 0.0
                    right = max(right, value)
                    y = row + (i - (n - 1) / 2) * (0.8 / n)
                    bar = ax.barh([y], [value], height=0.8 / n * 0.92, color=PRECISION_COLORS[p],
                                  label=PRECISIONS[p].display)
                    ax.bar_label(bar, labels=[f"{value:.2f}×"], padding=2, fontsize=7, color=_INK[theme])
            ax.set_yticks(range(len(labels)), labels)
            ax.invert_yaxis()
            ax.axvline(1.0, color=_INK[theme], linewidth=0.8, linestyle="--")
            ax.set_title(f"{MODE_NAMES[mode]}" + (f": {title}" if title else ""), loc="left", fontsize=9,
                         color=_INK[theme])
        for ax in axes:
            ax.set_xlim(0, right * 1.18)
        axes[-1].set_xlabel("Whole-model GEMM speedup vs BF16 (higher is faster)")
        _style(fig, list(axes), theme)
        handles: dict[str, object] = {}
        for ax in axes:
            for handle, label in zip(*ax.get_legend_handles_labels(), strict=True):
                handles.setdefault(label, handle)
        if handles:
            legend = fig.legend(list(handles.values()), list(handles), frameon=False, fontsize=8,
                                loc="outside lower center", ncols=min(len(handles), 5))
            for text in legend.get_texts():
                text.set_color(_INK[theme])
        return fig


def svg_bytes(fig: Figure) -> bytes:
    """The figure as deterministic SVG."""
    buffer = io.BytesIO()
    with matplotlib.rc_context(_RC):
        fig.savefig(buffer, format="svg", metadata={"Date": None, "Creator": None})
    return buffer.getvalue()


def image_bytes(fig: Figure, fmt: str) -> bytes:
    """The figure as ``svg``, ``pdf`` or ``png`` (deterministic metadata in every format)."""
    if fmt == "svg":
        return svg_bytes(fig)
    buffer = io.BytesIO()
    metadata = {"pdf": {"CreationDate": None, "ModDate": None, "Creator": None, "Producer": None},
                "png": {"Software": None}}[fmt]
    with matplotlib.rc_context(_RC):
        fig.savefig(buffer, format=fmt, metadata=metadata, dpi=150)
    return buffer.getvalue()


def write_content_addressed(data: bytes, directory: Path, stem: str, ext: str) -> Path:
    """Write ``data`` as ``<stem>-<hash>.<ext>`` unless that file already exists; return its path.

    Named by content, a file is never rewritten with other bytes, so parallel readers and repeated
    builds cannot disagree and an unchanged figure keeps its old modification time (it is a page
    dependency; a new mtime would make the page look outdated on the next build).
    """
    digest = hashlib.sha256(data).hexdigest()[:16]
    path = directory / f"{stem}-{digest}.{ext}"
    if path.exists():
        return path
    directory.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=directory)
    with os.fdopen(fd, "wb") as handle:
        handle.write(data)
    os.replace(tmp, path)
    return path
