"""Result tables: kept as data in the doctree, docutils tables when written, for every builder.

The directive's tables are built as :class:`TableData` in one :class:`.nodes.gemm_data_table` node
(:func:`data_table`), which :class:`ExpandTables` turns into the docutils table of
:func:`build_table` late in the post-transforms, for every builder: reading, the read-phase
transforms, pickling and the environment see one node per table, and the writers and the search
index see the same table as always.

Every number comes from :class:`gemm_bench.report.report.Report` (cell times, TFLOP/s, per-pass sums, totals,
speedups); this module only chooses rows, columns and formatting. Precisions that are not
measured in a mode get no columns; :func:`unavailable_list` says why (TE's reason text, the
failure message, or "not measured").
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Sequence
from typing import Any

from docutils import nodes
from sphinx.application import Sphinx
from sphinx.transforms.post_transforms import SphinxPostTransform

from gemm_bench.question.precisions import BASELINE, MODE_NAMES, PRECISIONS
from gemm_bench.question.shapes import OP_NAMES, PASS_NAMES, PASSES, GemmShape
from gemm_bench.report.report import Report
from gemm_bench.results import cross_check
from gemm_benchmark.flag_literals import split_literals
from gemm_benchmark.nodes import WRITERS, gemm_data_table
from gemm_benchmark.values import SAME, absent_status, format_ms, format_speedup, format_tflops, unavailable_text


@dataclasses.dataclass(frozen=True)
class Entry:
    text: str
    morecols: int = 0
    strong: bool = False
    classes: tuple[str, ...] = ()
    #: ````literal```` spans in ``text`` become literal nodes (the generated reference tables).
    markup: bool = False
    #: Where the value comes from, shown on hover in HTML (an abbreviation elsewhere).
    tooltip: str = ""


def build_table(header_rows: Sequence[Sequence[Entry]], body_rows: Sequence[Sequence[Entry]],
                colwidths: Sequence[int], *, classes: Sequence[str] = (), title: str = "") -> nodes.table:
    """A docutils table; an entry spanning columns covers the following ones (``morecols``)."""
    table = nodes.table(classes=["gemm-table", *classes])
    if title:
        table += nodes.title(title, title)
    group = nodes.tgroup(cols=len(colwidths))
    table += group
    for width in colwidths:
        group += nodes.colspec(colwidth=width)

    def make_row(entries: Sequence[Entry], *, head: bool = False) -> nodes.row:
        row = nodes.row()
        for item in entries:
            entry = nodes.entry(classes=list(item.classes))
            if item.morecols:
                entry["morecols"] = item.morecols
            # One paragraph per cell, as docutils' table model asks; HTML renders it without <p>.
            para = nodes.paragraph()
            if item.markup:
                para.extend(inline_literals(item.text))
                entry += para
                row += entry
                continue
            inner: list[nodes.Node] = breakable(item.text) if head else [nodes.Text(item.text)]
            if item.strong:
                inner = [nodes.strong(item.text, "", *inner)]
            if item.tooltip:
                inner = [nodes.abbreviation("", "", *inner, explanation=item.tooltip)]
            para += inner
            entry += para
            row += entry
        return row

    if header_rows:
        head = nodes.thead()
        group += head
        for entries in header_rows:
            head += make_row(entries, head=True)
    body = nodes.tbody()
    group += body
    for entries in body_rows:
        body += make_row(entries)
    return table


@dataclasses.dataclass(frozen=True)
class TableData:
    """What :func:`build_table` needs, as plain (picklable, immutable) data."""

    header_rows: tuple[tuple[Entry, ...], ...]
    body_rows: tuple[tuple[Entry, ...], ...]
    colwidths: tuple[int, ...]
    classes: tuple[str, ...] = ()
    title: str = ""

    def build(self) -> nodes.table:
        return build_table(self.header_rows, self.body_rows, self.colwidths, classes=self.classes, title=self.title)


def data_table(header_rows: Sequence[Sequence[Entry]], body_rows: Sequence[Sequence[Entry]],
               colwidths: Sequence[int], *, classes: Sequence[str] = (), title: str = "") -> gemm_data_table:
    """:func:`build_table`'s table as one :class:`.nodes.gemm_data_table` node holding its data."""
    return gemm_data_table(table=TableData(tuple(tuple(r) for r in header_rows), tuple(tuple(r) for r in body_rows),
                                      tuple(colwidths), tuple(classes), title))


def _expanded(node: gemm_data_table) -> nodes.table:
    data = node["table"]
    assert isinstance(data, TableData)
    table = data.build()
    table["ids"] = list(node["ids"])
    return table


def _title(node: nodes.Node) -> str:
    """The table's title, for Sphinx's numbering of tables."""
    assert isinstance(node, nodes.Element)
    return str(node["table"].title)


class ExpandTables(SphinxPostTransform):
    """The data tables become docutils tables, for every builder, late among the post-transforms.

    Late, so that the earlier post-transforms (reference resolution, figure inlining, tabs) walk
    one node per table; before the theme's (Furo wraps each ``table`` for scrolling at 500), so
    that the written page is exactly what a docutils table in the doctree would have given.
    """

    default_priority = 450

    def run(self, **kwargs: Any) -> None:
        for node in list(self.document.findall(gemm_data_table)):
            node.replace_self(_expanded(node))


def _unexpanded(self: Any, node: nodes.Node) -> None:
    raise nodes.SkipNode  # ExpandTables replaced it; reaching a writer means post-transforms were skipped


class gemm_wbr(nodes.Inline, nodes.Element):
    """A place a heading may wrap inside a word (HTML's ``<wbr>``); nothing in other formats and in
    the node's text, so a heading reads, copies and searches as it did."""


#: After a dot or an underscore that follows a letter and comes before a letter or an underscore:
#: ``torch.|_scaled_|mm``, ``torch.|compile``; never inside a number ("1.5") or after "._".
_WORD_JOINT = re.compile(r"(?<=[A-Za-z][._])(?=[A-Za-z_])")


def breakable(text: str) -> list[nodes.Node]:
    """``text`` as Text nodes with a :class:`gemm_wbr` at each :data:`_WORD_JOINT`: a column headed
    "torch._scaled_mm (FP8 tensorwise)" is as wide as its numbers, not as "torch._scaled_mm" (a peers
    table was 769 px in a 704 px column at 1400 px, issue 35)."""
    out: list[nodes.Node] = []
    for i, piece in enumerate(_WORD_JOINT.split(text)):
        if i:
            out.append(gemm_wbr())
        out.append(nodes.Text(piece))
    return out


def _visit_wbr_html(self: Any, node: gemm_wbr) -> None:
    self.body.append("<wbr>")
    raise nodes.SkipNode


def _skip(self: Any, node: nodes.Node) -> None:
    raise nodes.SkipNode


def setup_tables(app: Sphinx) -> None:
    # A table to Sphinx's numbering: the same ids (and, with numfig, numbers) as the docutils table had.
    visitors: dict[str, Any] = {w: (_unexpanded, None) for w in ("html", *WRITERS)}
    app.add_enumerable_node(gemm_data_table, "table", _title, **visitors)
    others: dict[str, Any] = {w: (_skip, None) for w in WRITERS}
    app.add_node(gemm_wbr, html=(_visit_wbr_html, None), **others)
    app.add_post_transform(ExpandTables)


_LITERAL = re.compile(r"``(.+?)``(?!`)")


def inline_literals(text: str) -> list[nodes.Node]:
    """Text with ````literal```` spans as literal nodes."""
    return split_literals(text, _LITERAL, 1)


def _num(text: str, strong: bool = False, *, flag: str | None = None) -> Entry:
    """A numeric cell (right-aligned in HTML, tabular figures); a number the cross-check ``flag``
    concerns carries :data:`FLAG_MARK`, the flag (with its ratio) as its detail."""
    if flag:
        return Entry(f"{text} {FLAG_MARK}", strong=strong, classes=("gemm-num", "gemm-flagged"),
                     tooltip=f"{FLAG_MARK} {flag}")
    return Entry(text, strong=strong, classes=("gemm-num",))


def _speedup(value: float | None, reason: str, flag: str | None, *, strong: bool = False) -> Entry:
    """A speedup cell; where there is none, why (BF16 failed, two runs) is its detail."""
    if value is None:
        return Entry(format_speedup(None), strong=strong, classes=("gemm-num",), tooltip=reason)
    return _num(format_speedup(value), strong, flag=flag)


#: The mark beside a number resting on a time whose cross-check is outside its bound (the flag,
#: with its ratio, is in the number's detail).
FLAG_MARK = "†"


def flag_legend(rows: Sequence[Sequence[Entry]]) -> str:
    """What :data:`FLAG_MARK` means, for a table's title, when one of its ``rows`` carries it ("" else)."""
    if not any("gemm-flagged" in e.classes for row in rows for e in row):
        return ""
    return (f" ({FLAG_MARK}: rests on a time more than {cross_check.REGION_MAX - 1:.0%} above its profiled kernel "
            "time, so the GPU was idle for part of it; the number's detail says which and how much)")


def _gemm_label(report: Report, gemm: GemmShape) -> str:
    if report.kind == "model":
        return OP_NAMES.get(gemm.op, gemm.op)
    if report.kind == "sweep":
        return f"S = {gemm.m}"
    return gemm.label


def gemm_table(report: Report, mode: str, precisions: Sequence[str]) -> nodes.Element:
    """Per GEMM (op and pass): shape, then ms per precision and the speedup vs BF16; TFLOP/s,
    % of peak, the spread, the roofline prediction and the SQNR on hover of each time (compact:
    two columns per precision fit a phone; the ``gemm-tflops`` role and ``gemm-bench report``
    give the TFLOP/s as text).

    ``precisions`` are the measured ones (BF16 first). Model results get a sum row per pass.
    """
    lead = ["Pass", "GEMM", "Shape (MxKxN)"] if report.kind == "model" else ["GEMM", "Shape (MxKxN)"]
    top = [Entry("") for _ in lead]
    second = [Entry(h) for h in lead]
    widths = [8, 18, 20] if report.kind == "model" else [14, 20]
    for p in precisions:
        extra = 0 if p == BASELINE else 1
        top.append(Entry(PRECISIONS[p].display, morecols=extra, classes=("gemm-precision",)))
        second += [Entry("ms")] + ([Entry("× BF16")] if extra else [])
        widths += [8] + ([7] if extra else [])
    rows: list[list[Entry]] = []
    for pass_ in PASSES:
        gemms = [g for g in report.gemms if g.pass_ == pass_]
        if not gemms:
            continue
        for g in gemms:
            row = [Entry(PASS_NAMES[pass_])] if report.kind == "model" else []
            row += [Entry(_gemm_label(report, g)), Entry(g.label)]
            for p in precisions:
                cell = report.cell(mode, p, g)
                row.append(_time_entry(report, mode, p, g))
                if p != BASELINE:
                    row.append(_speedup(report.gemm_speedup(mode, p, g), report.gemm_speedup_reason(mode, p, g),
                                        report.speedup_flag(mode, p, [g])) if cell.status == "measured"
                               else Entry(""))
            rows.append(row)
        if report.kind == "model":
            row = [Entry(PASS_NAMES[pass_], strong=True), Entry("sum", strong=True), Entry("")]
            for p in precisions:
                total = report.total(mode, p)
                row.append(_num(format_ms(total.pass_ms.get(pass_)), strong=True,
                                flag=report.time_flag(mode, p, gemms)))
                if p != BASELINE:
                    row.append(_speedup(report.pass_speedup(mode, p, pass_), report.pass_speedup_reason(mode, p, pass_),
                                        report.speedup_flag(mode, p, gemms), strong=True))
            rows.append(row)
    return data_table([top, second], rows, widths, classes=["gemm-gemms"],
                       title=f"{MODE_NAMES[mode]}: time per GEMM{flag_legend(rows)}")


def _time_entry(report: Report, mode: str, precision: str, gemm: GemmShape) -> Entry:
    """One GEMM's time, or why it has none: a failed cell reads "failed" (its reason in the detail),
    never the "n/a" of a precision the device does not support; a time the cross-check flags carries
    :data:`FLAG_MARK`."""
    cell = report.cell(mode, precision, gemm)
    if cell.status == "measured":
        entry = _num(format_ms(cell.ms), flag=cell.cross_check_flag)
        return dataclasses.replace(entry, tooltip=_cell_detail(report, mode, precision, gemm))
    word = {"failed": "failed", "unsupported": "n/a", "missing": "not measured"}.get(cell.status, cell.status)
    return Entry(word, classes=("gemm-num", f"gemm-{cell.status}"), tooltip=f"{cell.status}: {cell.reason}")


def _cell_detail(report: Report, mode: str, precision: str, gemm: GemmShape) -> str:
    """The hover text of one GEMM's time: the cross-check's flag, the eager time and the profiled
    kernel time beside the published GPU time, its TFLOP/s and % of the device's peak, the spread
    of its rounds, the roofline prediction, the SQNR."""
    parts = []
    cell = report.cell(mode, precision, gemm)
    checked = cell.cross_check
    if checked is not None:  # the flag, else the ratio (a short region's: shown, not judged)
        parts.append(f"{FLAG_MARK} {checked.detail}" if checked.flag else checked.detail)
    if cell.kernel_ms is not None:
        parts.append(f"kernels {cell.kernel_ms:.4f} ms")
    if cell.eager_ms is not None:
        parts.append(f"eager (host work included) {cell.eager_ms:.4f} ms")
    tflops = cell.tflops
    if tflops is not None:
        parts.append(f"{format_tflops(tflops)} TFLOP/s")
    iqr = cell.stats.get("iqr_ms") if isinstance(cell.stats, dict) else None
    if isinstance(iqr, (int, float)) and not isinstance(iqr, bool):
        parts.append(f"spread (IQR) {iqr:.4f} ms over {cell.stats.get('n', '?')} rounds")
    pct = report.pct_of_peak(mode, precision, gemm)
    if pct is not None:
        parts.append(f"{pct:.1f}% of the dense peak")
    roof = report.roofline_ms(mode, precision, gemm)
    if roof is not None:
        parts.append(f"roofline-predicted {roof:.4f} ms")
    sqnr = report.sqnr(mode, precision, gemm)
    if sqnr is not None:
        parts.append(f"SQNR {sqnr:.2f} dB (Gaussian inputs)")
    return "; ".join(parts)


def _roofline_per_layer(report: Report, mode: str, precision: str) -> float | None:
    """The roofline-predicted time of the layer's GEMMs (None unless every GEMM has a prediction)."""
    times = [report.roofline_ms(mode, precision, g) for g in report.gemms]
    return None if any(t is None for t in times) else sum(t for t in times if t is not None)


def totals_table(report: Report, mode: str, precisions: Sequence[str]) -> nodes.Element:
    """Per precision: time per layer, for the whole model, and the speedup vs BF16; the
    roofline-predicted time per layer and the SQNR (least accurate GEMM) where the result has them."""
    layers = report.num_layers
    whole = f"Model ({layers} layers), ms" if report.kind == "model" else "All shapes, ms"
    header = [Entry("Precision"), Entry("Per layer, ms"), Entry(whole), Entry("Speedup vs BF16")]
    widths = [14, 12, 18, 14]
    if report.kind != "model":
        header, widths = [header[0], header[2], header[3]], [14, 18, 14]
    shown = [p for p in precisions if report.total(mode, p).status == "measured"]
    roofs = {p: _roofline_per_layer(report, mode, p) for p in shown}
    sqnrs = {p: report.sqnr(mode, p) for p in shown}
    with_roof = report.kind == "model" and any(v is not None for v in roofs.values())
    with_sqnr = any(v is not None for v in sqnrs.values())
    if with_roof:
        header.append(Entry("Roofline-predicted per layer, ms"))
        widths.append(16)
    if with_sqnr:
        header.append(Entry("SQNR, dB (least accurate GEMM)"))
        widths.append(14)
    rows = []
    for p in shown:
        total = report.total(mode, p)
        own = report.time_flag(mode, p)
        row = [Entry(PRECISIONS[p].display, strong=True), _num(format_ms(total.per_layer_ms), flag=own),
               _num(format_ms(total.model_ms), flag=own),
               _speedup(total.speedup_vs_bf16, total.speedup_reason, total.cross_check_flag)]
        if report.kind != "model":
            row = [row[0], row[2], row[3]]
        if with_roof:
            row.append(_num(format_ms(roofs[p])))
        if with_sqnr:
            value = sqnrs[p]
            # A failed SQNR reads failed, never the "n/a" of an unsupported one.
            row.append(_num(f"{value:.1f}") if value is not None else
                       Entry("failed" if report.sqnr_status(mode, p) == "failed" else "n/a",
                             classes=("gemm-num", f"gemm-{report.sqnr_status(mode, p)}"),
                             tooltip=report.sqnr_reason(mode, p)))
        rows.append(row)
    return data_table([header], rows, widths, classes=["gemm-totals"],
                      title=f"{MODE_NAMES[mode]}: totals{flag_legend(rows)}")


def unavailable_list(report: Report, mode: str, precisions: Sequence[str]) -> nodes.Element | None:
    """Precisions the page asked for that have no numbers in this mode, each with the reason."""
    items = nodes.bullet_list(classes=["gemm-unavailable"])
    for p in precisions:
        status, reason = report.status(mode, p)
        if status == "measured":
            continue
        item = nodes.list_item()
        para = nodes.paragraph()
        para += nodes.strong(PRECISIONS[p].display, PRECISIONS[p].display)
        # One wording with the summary and the roles: "failed: ..." never reads as "unsupported: ...",
        # and FP8 Delayed's pre-quantized GEMM (FP8 Current's) reads "same as FP8 Current (why)".
        shown, why = absent_status(p, mode, status, reason)
        text = unavailable_text(shown, why, limit=10_000)
        para += nodes.Text(" " + (f"{text} ({reason})" if shown == SAME else text))
        item += para
        items += item
    return items if len(items) else None


def peers_table(report: Report, kind: str) -> nodes.Element | None:
    """The peers' own table (PyTorch-native and registered GEMMs): never part of TE's totals.

    One row per timed region, a column per peer: its time and TFLOP/s (and % of the dense peak in
    the tooltip), or why it has none. ``kind`` is ``gemm`` (pre-quantized panel: one row per GEMM
    pass) or ``linear`` (autocast: per op, its Fprop and its backward, Dgrad and Wgrad timed as
    one region, as the Linear peers run them).
    """
    rows = [r for r in report.peers() if r.kind == kind]
    if not rows:
        return None
    backends = list(dict.fromkeys(r.backend for r in rows))
    by_key = {(r.backend, r.op, r.pass_): r for r in rows}
    header = [Entry("GEMM"), Entry("Shape (MxKxN)")]
    widths = [22, 20]
    for backend in backends:
        header.append(Entry(f"{backend}: ms · TFLOP/s"))
        widths.append(16)
    body = []
    for op, pass_, label, shape in _peer_regions(report, kind):
        cells = [by_key.get((b, op, pass_)) for b in backends]
        if not any(cells):
            continue
        row = [Entry(label), Entry(shape)]
        for cell in cells:
            if cell is None:
                row.append(Entry("–", classes=("gemm-num",)))
            elif cell.status == "measured" and cell.ms:
                pct = f", {cell.pct_of_peak:.0f}% of dense peak" if cell.pct_of_peak else ""
                entry = _num(f"{format_ms(cell.ms)} · {format_tflops(cell.tflops)}", flag=cell.cross_check_flag)
                detail = f"{cell.ms:.5g} ms, {cell.tflops or 0:.1f} TFLOP/s{pct}: {cell.backend}"
                row.append(dataclasses.replace(entry, tooltip="; ".join(t for t in (entry.tooltip, detail) if t)))
            else:
                row.append(Entry(unavailable_text(cell.status, cell.reason), classes=("gemm-num", "gemm-na"),
                                 tooltip=f"{cell.status}: {cell.reason}"))
        body.append(row)
    if not body:
        return None
    return data_table([header], body, widths, classes=["gemm-peers"],
                      title=f"Peers beside Transformer Engine (their own rows; not in TE’s totals){flag_legend(body)}")


def _peer_regions(report: Report, kind: str) -> list[tuple[str, str, str, str]]:
    """(op, region, row label, shape) of each row of a peers table, in the question's order."""
    def name(gemm: GemmShape, what: str) -> str:
        return f"{OP_NAMES.get(gemm.op, gemm.op)} {what}" if report.kind == "model" else f"{gemm.label} {what}"

    if kind != "linear":
        return [(g.op, g.pass_, name(g, PASS_NAMES.get(g.pass_, g.pass_)) if report.kind == "model" else g.label,
                 g.label) for g in report.gemms]
    out = []
    for g in report.gemms:
        if g.pass_ != "fprop":
            continue
        out.append((g.op, "fprop", name(g, "Fprop"), g.label))
        out.append((g.op, "backward", name(g, "backward (Dgrad + Wgrad)"), g.label))
    return out
