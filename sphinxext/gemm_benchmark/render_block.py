"""Assemble one directive's output as builder-neutral nodes: panels, figures, tables, provenance.

Layout::

    [caption] question summary, notes
    (Autocast | Pre-quantized)                 neutral tab set (group tabs in HTML)
        (H100 | H200)                          only when several devices answer
            figure, table per GEMM, totals, unavailable precisions, provenance

Every number comes from the :class:`~gemm_bench.report.report.Report` objects of the directive's answer
(built once from the page's question). Figures are drawn by :mod:`gemm_bench.report.figures` from a
spec of the numbers they show, into ``<doctreedir>/gemm_benchmark/gemm-<key>.svg`` where the key
hashes the spec (the numbers, the figure code's version, the style): a figure whose inputs did not
change is not drawn again, across pages and across incremental builds. The image is referenced by
a wildcard URI; builders that take no SVG (LaTeX) get PDF or PNG from :class:`FigureConverter`,
which re-draws the stored spec at write time, so reading never depends on the builder. The spec
is JSON read field by field (never unpickled) and only from the build's own figure directory.
"""

from __future__ import annotations

import html
import os
import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from docutils import nodes
from sphinx import addnodes
from sphinx.application import Sphinx
from sphinx.environment import BuildEnvironment
from sphinx.transforms.post_transforms import SphinxPostTransform
from sphinx.transforms.post_transforms.images import ImageConverter

from gemm_bench.question.devices import device_label
from gemm_bench.question.precisions import BASELINE, MODE_NAMES, PRECISIONS
from gemm_bench.report import figures
from gemm_bench.report.report import Report, describe_method
from gemm_bench.report.rounds import rounds_outcome
from gemm_bench.results.cache import CacheError
from gemm_benchmark import render_table
from gemm_benchmark.diagnostics import refused_files_text
from gemm_benchmark.execution import MISSING_NOTE_REMEDY, Answer, DeviceAnswer, how_to_measure
from gemm_benchmark.options import Request
from gemm_benchmark.tabs import tab_set

FIGURE_DIR = "gemm_benchmark"
FIGURE_CLASS = "gemm-figure"


def _relative_uri(env: BuildEnvironment, path: Path) -> str:
    """``path`` relative to the current page's directory, as image and download nodes expect."""
    docdir = Path(env.doc2path(env.docname)).parent
    return Path(os.path.relpath(path, docdir)).as_posix()


#: What each optional figure shows, for its alt text (``:show:`` parts beside ``figure``).
EXTRA_FIGURE_ALT = {
    "latency": "time per GEMM and precision",
    "tflops": "TFLOP/s per GEMM and precision, with the device's dense peaks",
    "roofline": "roofline-predicted over measured time per GEMM and precision",
    "accuracy": "speedup against accuracy (SQNR) per precision",
}


def figure_nodes(env: BuildEnvironment, report: Report, mode: str, device: str,
                 part: str = "figure") -> list[nodes.Node]:
    """The image node of one figure (``part``: ``figure``, the speedups, or an optional figure)."""
    spec = figures.spec_for(report, mode) if part == "figure" else figures.EXTRA_FIGURES[part](report, mode)
    if spec is None:
        return []
    path = figures.figure_file(spec, "svg", Path(env.doctreedir) / FIGURE_DIR)
    if part == "figure":
        what = "speedup vs square GEMM size" if report.kind == "sweep" else "speedup vs BF16 per GEMM and in total"
    else:
        what = EXTRA_FIGURE_ALT[part]
    uri = _relative_uri(env, path.with_suffix(".*"))
    return [nodes.image(uri=uri, alt=f"{MODE_NAMES[mode]}: {what} on {device}", classes=[FIGURE_CLASS])]


def _own_figure(image: Path, doctreedir: Path) -> bool:
    """Whether ``image`` lies in the figure directory this build writes (``<doctreedir>/gemm_benchmark``).

    Only there does a figure's ``.spec`` come from this build (:func:`figure_nodes`): an image a
    page takes from the source tree, whatever its class, is never re-drawn from a file beside it.
    """
    try:
        return image.resolve().parent == (doctreedir / FIGURE_DIR).resolve()
    except (OSError, RuntimeError):  # a path the system cannot resolve (a symlink loop)
        return False


class FigureConverter(ImageConverter):
    """PDF or PNG of our figures for builders without SVG, re-drawn from the stored spec."""

    conversion_rules = [("image/svg+xml", "application/pdf"), ("image/svg+xml", "image/png")]  # noqa: RUF012

    def match(self, node: nodes.image) -> bool:
        return FIGURE_CLASS in node.get("classes", []) and super().match(node)

    def is_available(self) -> bool:
        return True

    def convert(self, _from: str | os.PathLike[str], _to: str | os.PathLike[str]) -> bool:
        if not _own_figure(Path(_from), Path(self.env.doctreedir)):
            return False  # an image carrying our class from anywhere else: nothing beside it is read
        spec = figures.load_spec(Path(_from))
        if spec is None:
            return False  # not ours, or from another version: Sphinx warns that it cannot convert
        fmt = Path(_to).suffix.lstrip(".")
        Path(_to).write_bytes(figures.render(spec, fmt))
        return True


_ID = re.compile(r'\bid="([^"]+)"')
_REF = re.compile(r'(url\(#|href="#)([^)"]+)')
_PROLOG = re.compile(r"^\s*(<\?xml[^>]*\?>\s*)?(<!DOCTYPE[^>]*>\s*)?", re.S)


def inline_svg(svg: str, prefix: str, label: str) -> str:
    """An SVG file's markup for inlining in a page: ids made unique, prolog gone, labelled.

    Inline, the figure's text, axes and grid take the page's colour (``currentColor`` and the
    ``--gemm-figure-ink`` variable the extension's CSS sets from Furo's foreground), so the figure
    follows the theme toggle; inside ``<img>`` it could only follow the system colour scheme. Every
    id (clip paths, markers) gets the figure's prefix, so two figures on a page never share one.
    """
    body = _PROLOG.sub("", svg, count=1)
    body = _ID.sub(lambda m: f'id="{prefix}-{m.group(1)}"', body)
    body = _REF.sub(lambda m: f"{m.group(1)}{prefix}-{m.group(2)}", body)
    return body.replace("<svg ", f'<svg role="img" aria-label="{html.escape(label, quote=True)}" ', 1)


class InlineFigures(SphinxPostTransform):
    """HTML only: our figures' SVG inlined in the page (see :func:`inline_svg`)."""

    default_priority = 199  # before the image converters and the builder's image collection
    formats = ("html",)

    def run(self, **kwargs: Any) -> None:
        for index, node in enumerate(list(self.document.findall(nodes.image))):
            if FIGURE_CLASS not in node.get("classes", []):
                continue
            candidates: dict[str, str] = node.get("candidates") or {}
            candidate = candidates.get("image/svg+xml")
            if not candidate:
                continue
            path = Path(self.env.srcdir) / candidate
            try:
                svg = path.read_text(encoding="utf-8")
            except (OSError, UnicodeDecodeError):
                continue  # leave the <img>: the builder copies the file and warns if it is gone
            wide = figures.wide_twin(path)
            try:
                wide_svg = wide.read_text(encoding="utf-8") if _own_figure(wide, Path(self.env.doctreedir)) else None
            except (OSError, UnicodeDecodeError):
                wide_svg = None  # the phone figure alone, at every width
            if wide_svg is not None:  # replace_self gives the image's classes to the pair: not this one
                node["classes"] = [c for c in node["classes"] if c != FIGURE_CLASS]
            node.replace_self(figure_pair(svg, wide_svg, f"gemm-fig{index}", node.get("alt", "")))


def figure_pair(svg: str, wide_svg: str | None, prefix: str, label: str) -> nodes.Element:
    """A figure for the page: the phone SVG in a ``div.gemm-figure`` and, when given, its desktop
    twin beside it in a ``div.gemm-figure-wide``, both in a ``div.gemm-figure-pair`` whose width
    (a CSS container query, ``gemm_benchmark.css``) shows one of them. The twin sits outside
    ``div.gemm-figure`` so that whatever reads a page's figures reads each once."""
    figure = nodes.container(classes=[FIGURE_CLASS])
    figure += nodes.raw("", inline_svg(svg, prefix, label), format="html")
    if wide_svg is None:
        return figure
    pair = nodes.container(classes=["gemm-figure-pair"])
    pair += figure
    wide = nodes.container(classes=["gemm-figure-wide"])
    wide += nodes.raw("", inline_svg(wide_svg, f"{prefix}w", label), format="html")
    pair += wide
    return pair


def provenance_nodes(env: BuildEnvironment, answer: DeviceAnswer) -> nodes.paragraph:
    """Where and how the result was measured: its GPU, software stack, date and method (typed fields)."""
    dev, prov = answer.result.device, answer.result.provenance
    cc = dev.compute_capability.replace(".", "")
    parts = [f"{dev.name} (sm_{cc}" + (f", {dev.sm_count} SMs)" if dev.sm_count is not None else ")"),
             f"driver {prov.driver}", f"CUDA {prov.cuda}"]
    if prov.cublas:
        parts.append(f"cuBLAS {prov.cublas}")
    parts += [f"PyTorch {prov.torch}", f"Transformer Engine {prov.transformer_engine}",
              f"measured {prov.date}", f"method v{answer.result.method_version}: {describe_method(dict(prov.method))}"]
    # The rule says what each group aimed for; this, how they ended (the typed timed groups).
    if outcome := rounds_outcome(answer.result):
        parts.append(outcome)
    para = nodes.paragraph(classes=["gemm-provenance"])
    para += nodes.strong("Measured on ", "Measured on ")
    para += nodes.Text(" · ".join(parts) + ". ")
    if answer.status.value != "fresh":
        # "(failed: autocast/fp8-current (...))", never "(failed: failed: ...)"
        reason = answer.reason.removeprefix(f"{answer.status.value}: ")
        text = f"({answer.status.value}: {reason}) "
        para += nodes.emphasis(text, text)
    link = addnodes.download_reference("", "", refdoc=env.docname, refdomain="", reftype="download",
                                       refexplicit=True, refwarn=False, reftarget=_relative_uri(env, answer.path))
    link += nodes.literal("raw JSON", "raw JSON", classes=["download"])
    para += link
    return para


def scrolling(table: nodes.Element) -> nodes.container:
    """A wide table in its own horizontal scroll box (HTML), so the page never scrolls sideways."""
    box = nodes.container(classes=["gemm-scroll"])
    box += table
    return box


def device_nodes(env: BuildEnvironment, request: Request, answer: DeviceAnswer, mode: str) -> list[nodes.Node]:
    report = answer.reports[mode]
    measured = [p for p in request.precisions if report.status(mode, p)[0] == "measured"]
    out: list[nodes.Node] = []
    if "figure" in request.show and measured:
        out += figure_nodes(env, report, mode, device_label(answer.device))
    for part in EXTRA_FIGURE_ALT:
        if part in request.show and measured:
            drawn = figure_nodes(env, report, mode, device_label(answer.device), part)
            if not drawn:  # say why, rather than leave out a figure the page asked for
                others = [p for p in measured if p != BASELINE] or [BASELINE]
                why = (report.sqnr_reason(mode, others[0]) if part == "accuracy"
                       else report.roofline_reason(mode, others[0], report.gemms[0]))
                text = f"No {EXTRA_FIGURE_ALT[part]} figure: {why}."
                drawn = [nodes.paragraph(text, text, classes=["gemm-note"])]
            out += drawn
    if "table" in request.show and measured:
        out.append(scrolling(render_table.gemm_table(report, mode, measured)))
    if "totals" in request.show and measured and report.kind != "sweep":
        out.append(scrolling(render_table.totals_table(report, mode, measured)))
    if "peers" in request.show:
        peers = render_table.peers_table(report, "gemm" if mode == "prequant" else "linear")
        if peers is not None:
            out.append(scrolling(peers))
    unavailable = render_table.unavailable_list(report, mode, request.precisions)
    if unavailable is not None:
        out.append(unavailable)
    out += cross_check_note(report)
    if "provenance" in request.show:
        out.append(provenance_nodes(env, answer))
    return out


def cross_check_note(report: Report) -> list[nodes.Node]:
    """What the page says under a result whose profiler cross-check breaks the file's median bound
    (:attr:`gemm_bench.results.cross_check.Verdict.file_flag`), whatever ``:show:`` hides: every
    number above rests on it. Nothing for a file that holds."""
    flag = report.cross_check.file_flag
    if flag is None:
        return []
    text = f"{render_table.FLAG_MARK} On this GPU, {flag}."
    return [nodes.paragraph(text, text, classes=["gemm-note", "gemm-flagged"])]


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
    panels: list[tuple[str, list[nodes.Node]]] = []
    for mode in request.modes:
        if len(answer.devices) == 1:
            children = device_nodes(env, request, answer.devices[0], mode)
        else:
            device_panels = [(device_label(d.device), device_nodes(env, request, d, mode)) for d in answer.devices]
            children = [tab_set(device_panels, classes=["gemm-device-tabs"])]
        panels.append((MODE_NAMES[mode], children))
    out.append(tab_set(panels, classes=["gemm-mode-tabs"]))
    return out


def not_measured_admonition(request: Request, reason: str, cache_dir: Path, *, note: bool = False) -> nodes.Element:
    """The visible stand-in for a result no device has yet (a note when the page expects that)."""
    admonition = nodes.admonition(classes=["gemm-not-measured", "note" if note else "warning"])
    admonition += nodes.title("Not measured yet", "Not measured yet")
    precisions = ", ".join(PRECISIONS[p].display for p in request.precisions)
    where = f" from {', '.join(request.devices)}" if request.devices else ""
    text = (f"No cached result{where} answers this question ({request.question.describe()}; question "
            f"{request.question.hash}) for {precisions} yet. To add one, {how_to_measure('such a GPU', cache_dir)}.")
    if not note:  # a warning panel: the page's author may mean it (hardware not measured yet on purpose)
        text += f" Or, {MISSING_NOTE_REMEDY}."
    admonition += nodes.paragraph(text, text)
    return admonition


def setup_figures(app: Sphinx) -> None:
    app.add_post_transform(InlineFigures)
    app.add_post_transform(FigureConverter)


def refused_study_admonition(study: str, where: str, cache_dir: Path,
                             refused: Sequence[CacheError]) -> nodes.admonition:
    """The warning-styled note of a study whose files exist but were refused: "No usable <study> study
    <where>: <each file and the schema's reason>" (never "not measured": the file is there). One note
    for every study directive."""
    admonition = nodes.admonition(classes=["gemm-not-measured", "warning"])
    admonition += nodes.title("Study file refused", "Study file refused")
    para = nodes.paragraph()
    text = f"No usable {study} study{where}: {refused_files_text(cache_dir, refused)}"
    para.extend(render_table.inline_literals(text))
    admonition += para
    return admonition
