"""Assemble one directive's output: mode tabs, device tabs, figures, tables, provenance.

Layout::

    [caption] question summary, notes
    (Autocast | Pre-quantized)                 group tabs: one choice switches every block
        (H100 | H200)                          group tabs, only when several devices answer
            figure (light + dark SVG), table per GEMM, totals, unavailable precisions, provenance

Figures are written like matplotlib's plot_directive does: at read time, into a directory of the
build (``<doctreedir>/gemm_benchmark``), referenced by a path relative to the page, so Sphinx's
image collector copies them into the output (``_images/``) and records them as page dependencies.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path

from docutils import nodes
from sphinx import addnodes
from sphinx.application import Sphinx
from sphinx.environment import BuildEnvironment

from gemm_bench.precisions import MODE_NAMES, PRECISIONS
from gemm_bench.report import Report, describe_method
from gemm_benchmark import render_figure, render_table
from gemm_benchmark.execution import Answer, DeviceAnswer
from gemm_benchmark.options import Request
from gemm_benchmark.tabs import group_tabs

FIGURE_DIR = "gemm_benchmark"

_MIME = {"svg": "image/svg+xml", "pdf": "application/pdf", "png": "image/png"}


def app_of(env: BuildEnvironment) -> Sphinx:
    """The application (``env.app`` is deprecated since Sphinx 9; ``_app`` is what it returns)."""
    return getattr(env, "_app", None) or env.app


def figure_format(env: BuildEnvironment) -> str | None:
    """SVG where the builder shows it (HTML); else PDF (LaTeX); else PNG; None: no images (text).

    Decided per builder at read time; ``outdated_pages`` re-reads pages when a build with another
    builder reuses the doctrees, so a LaTeX build never inherits SVG-only figures.
    """
    supported = getattr(app_of(env).builder, "supported_image_types", [])
    for fmt in ("svg", "pdf", "png"):
        if _MIME[fmt] in supported:
            return fmt
    return None


def _relative_uri(env: BuildEnvironment, path: Path) -> str:
    """``path`` relative to the current page's directory, as image and download nodes expect."""
    docdir = Path(env.doc2path(env.docname)).parent
    return Path(os.path.relpath(path, docdir)).as_posix()


def device_label(name: str) -> str:
    """``NVIDIA H100 80GB HBM3`` -> ``H100 80GB HBM3``: tabs and legends need no vendor prefix."""
    return name.removeprefix("NVIDIA ").strip() or name


#: Figures already written in this process, by what they depend on: pages showing the same result
#: (a question quoted on several pages, or one directive per device) draw it once.
_drawn: dict[tuple[object, ...], Path] = {}


def _figure_file(env: BuildEnvironment, report: Report, source: Path, mode: str, theme: str, fmt: str) -> Path:
    stat = source.stat()
    key = (str(source), stat.st_mtime_ns, stat.st_size, mode, tuple(report.precisions), theme, fmt,
           str(env.doctreedir))
    path = _drawn.get(key)
    if path is None or not path.exists():
        figure = render_figure.figure_for(report, mode, theme=theme)
        data = render_figure.image_bytes(figure, fmt)
        path = render_figure.write_content_addressed(data, Path(env.doctreedir) / FIGURE_DIR,
                                                     f"gemm-{mode}-{theme}", fmt)
        _drawn[key] = path
    return path


def figure_nodes(env: BuildEnvironment, report: Report, source: Path, mode: str, device: str) -> list[nodes.Node]:
    """The figure of one (device, mode): a light and a dark SVG for HTML, one light image elsewhere."""
    fmt = figure_format(env)
    if fmt is None:
        return []
    themes = render_figure.THEMES if fmt == "svg" else ("light",)
    out: list[nodes.Node] = []
    what = "speedup vs square GEMM size" if report.kind == "sweep" else "speedup vs BF16 per GEMM and in total"
    for theme in themes:
        path = _figure_file(env, report, source, mode, theme, fmt)
        classes = ["gemm-figure"] + ([f"only-{theme}"] if len(themes) > 1 else [])
        image = nodes.image(uri=_relative_uri(env, path), alt=f"{MODE_NAMES[mode]}: {what} on {device}",
                            classes=classes)
        out.append(image)
    return out


def provenance_nodes(env: BuildEnvironment, answer: DeviceAnswer) -> nodes.paragraph:
    doc = answer.doc
    dev, prov = doc["device"], doc["provenance"]
    cc = dev["compute_capability"].replace(".", "")
    parts = [f"{dev['name']} (sm_{cc}" + (f", {dev['sm_count']} SMs)" if "sm_count" in dev else ")"),
             f"driver {prov['driver']}", f"CUDA {prov['cuda']}"]
    if prov.get("cublas"):
        parts.append(f"cuBLAS {prov['cublas']}")
    parts += [f"PyTorch {prov['torch']}", f"Transformer Engine {prov['transformer_engine']}",
              f"measured {prov['date']}", f"method v{doc['method_version']}: {describe_method(prov['method'])}"]
    para = nodes.paragraph(classes=["gemm-provenance"])
    para += nodes.strong("Measured on ", "Measured on ")
    para += nodes.Text(" · ".join(parts) + ". ")
    if answer.status != "fresh":
        para += nodes.emphasis(f"({answer.status}: {answer.reason}) ", f"({answer.status}: {answer.reason}) ")
    target = _relative_uri(env, answer.path)
    link = addnodes.download_reference("", "", refdoc=env.docname, refdomain="", reftype="download",
                                       refexplicit=True, refwarn=False, reftarget=target)
    link += nodes.literal("raw JSON", "raw JSON", classes=["download"])
    para += link
    return para


def device_nodes(env: BuildEnvironment, request: Request, answer: DeviceAnswer, mode: str) -> list[nodes.Node]:
    report = Report(answer.doc, modes=request.modes, precisions=request.precisions)
    measured = [p for p in request.precisions if report.status(mode, p)[0] == "measured"]
    out: list[nodes.Node] = []
    if "figure" in request.show and measured:
        out += figure_nodes(env, report, answer.path, mode, device_label(answer.device))
    if "table" in request.show and measured:
        out.append(render_table.gemm_table(report, mode, measured))
    if "totals" in request.show and measured and report.kind != "sweep":
        out.append(render_table.totals_table(report, mode, measured))
    unavailable = render_table.unavailable_list(report, mode, request.precisions)
    if unavailable is not None:
        out.append(unavailable)
    if "provenance" in request.show:
        out.append(provenance_nodes(env, answer))
    return out


def block_nodes(env: BuildEnvironment, request: Request, answer: Answer) -> list[nodes.Node]:
    """The contents of a block whose question has at least one cached answer."""
    out: list[nodes.Node] = []
    if request.caption:
        out.append(nodes.paragraph(request.caption, request.caption, classes=["gemm-caption"]))
    summary = nodes.paragraph(classes=["gemm-question"])
    summary += nodes.Text(request.question.describe() + ".")
    out.append(summary)
    for note in request.question.notes:
        out.append(nodes.paragraph(note, note, classes=["gemm-note"]))
    panels = []
    for mode in request.modes:
        if len(answer.devices) == 1:
            children = device_nodes(env, request, answer.devices[0], mode)
        else:
            device_panels = [(device_label(d.device), device_nodes(env, request, d, mode)) for d in answer.devices]
            children = [group_tabs(env, device_panels, classes=["gemm-device-tabs"])]
        panels.append((MODE_NAMES[mode], children))
    out.append(group_tabs(env, panels, classes=["gemm-mode-tabs"]))
    return out


def not_measured_admonition(request: Request, reason: str, cache_dir: Path, *, note: bool = False) -> nodes.Element:
    """The visible stand-in for a result no device has yet (a note when the page expects that)."""
    admonition = nodes.admonition(classes=["gemm-not-measured", "note" if note else "warning"])
    admonition += nodes.title("Not measured yet", "Not measured yet")
    precisions = ", ".join(PRECISIONS[p].display for p in request.precisions)
    where = f" from a GPU matching {', '.join(request.devices)}" if request.devices else ""
    text = (f"No cached result{where} answers this question ({request.question.describe()}; question "
            f"{request.question.hash}) for {precisions}, and this build did not measure it: {reason}. "
            f"To add one, run nox -s docs on such a GPU (execution mode auto measures what is missing), "
            f"or run gemm-bench run there, and commit the new file in {cache_dir.name}/.")
    admonition += nodes.paragraph(text, text)
    return admonition


def device_names(answers: Sequence[DeviceAnswer]) -> list[str]:
    return [a.device for a in answers]
