"""``.. gemm-dynamic-range::``: the dynamic-range study's SQNRs as a figure and a table.

The study (:mod:`gemm_bench.results.dynamic_range_schema`) is measured once per GPU by
``gemm-bench study dynamic-range`` and stored as ``<cache>/studies/dynamic-range--<device>.json``.
This directive reads those files when its page is read (one tab per device when several answer)
and renders, for one input (``:tensor:`` and ``:input:``):

* a figure: the GEMM output's SQNR (median row, solid; whole tensor, dashed) per recipe against the
  input's measured dynamic range, ``max |x| / median |x|``, with the literature's range as a shaded
  band where one applies (drawn by :mod:`gemm_bench.report.line_figure`, inlined in HTML);
* a table: per recipe, the output's and the quantized input's SQNR at each ratio ``R``;
* the recipes not measured, with the reason (Transformer Engine's, for a precision this GPU lacks),
  and the provenance: GPU, software stack, date, method.

No study file yet is a visible note (the site builds with ``-W`` before any GPU has run the study),
never a warning; a file that cannot be used is a located ``gemm_benchmark.cache`` warning naming its
path, and the other devices still render.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from docutils import nodes
from docutils.parsers.rst import directives
from sphinx.util.docutils import SphinxDirective

from gemm_bench.question.devices import device_label, selects
from gemm_bench.question.precisions import PRECISIONS
from gemm_bench.report.figure_spec import PRECISION_COLORS
from gemm_bench.report.line_figure import HEIGHT_PT, WIDE_HEIGHT_PT, WIDE_PT, WIDTH_PT, Band, Series, line_svg
from gemm_bench.results import dynamic_range_schema as schema
from gemm_bench.results import studies
from gemm_bench.results.cache import CacheError
from gemm_benchmark import records
from gemm_benchmark.config import settings
from gemm_benchmark.diagnostics import Subtype, warn
from gemm_benchmark.render_block import figure_pair, refused_study_admonition, scrolling
from gemm_benchmark.render_table import Entry, build_table
from gemm_benchmark.tabs import tab_set

SHOW = ("figure", "table", "provenance")
_SUPERSCRIPT = str.maketrans("0123456789", "⁰¹²³⁴⁵⁶⁷⁸⁹")
#: Table rows per recipe: (label, part, field); BF16 has no quantized input.
ROWS: tuple[tuple[str, str, str], ...] = (
    ("output, median row", "gemm", "row_median_db"),
    ("output, whole tensor", "gemm", "whole_db"),
    ("output, worst row", "gemm", "row_min_db"),
    ("quantized input, median row", "quantize", "row_median_db"),
    ("quantized input, non-outlier elements", "quantize", "bulk_db"),
)


def _choice(values: tuple[str, ...]) -> Any:
    return lambda text: directives.choice((text or "").strip(), values)


def _words(text: str | None) -> list[str]:
    return [w.strip() for w in (text or "").replace(",", " ").split() if w.strip()]


def ratio_text(ratio: float) -> str:
    """``R`` for a column head: ``1``, ``1000``, ``10⁴``, ``3·10⁴``."""
    if ratio < 1e4 or ratio != round(ratio):
        return f"{ratio:g}"
    exponent = len(str(int(ratio))) - 1
    mantissa = ratio / 10 ** exponent
    head = "" if mantissa == 1 else f"{mantissa:g}·"
    return f"{head}10{str(exponent).translate(_SUPERSCRIPT)}"


def magnitude_text(value: float) -> str:
    """A measured ratio for a table cell: ``4.78``, ``391``, ``3.88·10³``."""
    if value < 1000:
        return f"{value:.3g}"
    exponent = len(str(int(value))) - 1
    return f"{value / 10 ** exponent:.2f}·10{str(exponent).translate(_SUPERSCRIPT)}"


class GemmDynamicRangeDirective(SphinxDirective):
    """Each recipe's SQNR against the dynamic range of its input, from the dynamic-range study in the cache."""

    reference_example = """\
.. gemm-dynamic-range::
   :tensor: activation
   :input: massive-tokens
   :show: figure, table, provenance
"""
    reference_options = {  # noqa: RUF012  (read from the class by the authoring reference)
        "tensor": "``activation`` (X, Fprop; the default) or ``gradient`` (dY, Dgrad)",
        "input": "``massive-tokens`` (outlier rows; the default) or ``outlier-channels`` (outlier columns)",
        "show": "any of ``figure``, ``table``, ``provenance`` (default: all)",
        "devices": "device slugs or aliases to show (default: every device with a study file)",
    }
    has_content = False
    option_spec = {  # noqa: RUF012  (docutils reads it as a class attribute)
        "tensor": _choice(tuple(schema.TENSORS)),
        "input": _choice(tuple(schema.INPUTS)),
        "show": directives.unchanged,
        "devices": directives.unchanged,
    }

    def run(self) -> list[nodes.Node]:
        config = settings(self.env)
        if config.questions_only:
            return []
        tensor = self.options.get("tensor", "activation")
        kind = self.options.get("input", "massive-tokens")
        show = _words(self.options.get("show")) or list(SHOW)
        unknown = [s for s in show if s not in SHOW]
        if unknown:
            warn(Subtype.OPTION, f"gemm-dynamic-range: :show: {', '.join(unknown)} is not one of {', '.join(SHOW)}",
                 location=(self.env.docname, self.lineno))
            show = [s for s in show if s in SHOW]
        wanted = _words(self.options.get("devices"))
        docs, errors = records.page_studies(self.env, schema.NAME, location=(self.env.docname, self.lineno))
        if wanted:
            docs = [d for d in docs if any(selects(w, d["device"]["name"]) for w in wanted)]
        container = nodes.container(classes=["gemm-study", "gemm-dynamic-range"])
        self.set_source_info(container)
        if not docs:
            container += not_measured(config.cache_dir, wanted, errors)
            return [container]
        panels = []
        for n, doc in enumerate(docs):
            # The age rule of every result (gemm_benchmark_max_age_days) and the study's method version.
            stale = studies.staleness(doc, None, ("method",), max_age_days=config.max_age_days)
            if stale:
                warn(Subtype.STALE, f"gemm-dynamic-range: study on {doc['device']['name']} is stale: {stale}",
                     location=(self.env.docname, self.lineno))
            panels.append((device_label(doc["device"]["name"]), self._device(doc, tensor, kind, show, n, stale)))
        if len(panels) == 1:
            container.extend(panels[0][1])
        else:
            container += tab_set(panels, classes=["gemm-device-tabs"])
        return [container]

    def _device(self, doc: dict[str, Any], tensor: str, kind: str, show: list[str], number: int,
                stale: str | None = None) -> list[nodes.Node]:
        data = doc["data"]
        cases = sorted((c for c in data["cases"] if c["tensor"] == tensor and c["input"] == kind),
                       key=lambda c: c["ratio"])
        out: list[nodes.Node] = []
        what = (f"{device_label(doc['device']['name'])}: {schema.TENSOR_NAMES[tensor]}, {schema.INPUT_NAMES[kind]}: "
                f"{data['outliers'][kind]} of them R times the rest; GEMM {data['shape']['m']} x "
                f"{data['shape']['k']} x {data['shape']['n']}.")
        out.append(nodes.paragraph(what, what, classes=["gemm-question"]))
        if data["source"] == "cpu-model":
            text = ("These numbers come from the CPU rounding model (gemm_bench.measure.dynamic_range), not from "
                    "a GPU: test data, not a measurement.")
            note = nodes.admonition(classes=["warning"])
            note += nodes.title("Not a measurement", "Not a measurement")
            note += nodes.paragraph(text, text)
            out.append(note)
        if "figure" in show:
            out.append(self._figure(doc, cases, tensor, kind, number))
        if "table" in show:
            out.append(scrolling(_table(data, cases)))
        out += _not_measured_recipes(data)
        if "provenance" in show or stale:
            out.append(_provenance(doc, stale))
        return out

    def _figure(self, doc: dict[str, Any], cases: list[dict[str, Any]], tensor: str, kind: str,
                number: int) -> nodes.Node:
        data = doc["data"]
        series: list[Series] = []
        xs = [c["amax_over_median"] for c in cases]
        for pid in _measured(data):
            if pid == "bf16":
                continue  # its ~50 dB would squeeze the FP8 curves; the table lists it
            display = PRECISIONS[pid].display
            color = PRECISION_COLORS.get(pid, "")
            for field, label, dashed in (("row_median_db", "median row", False), ("whole_db", "whole tensor", True)):
                ys = [_value(c, pid, "gemm", field) for c in cases]
                series.append(Series(f"{display}, {label}", xs, ys, dashed=dashed, color=color))
        bands = [Band(b.low, b.high, b.label) for b in schema.LITERATURE if (tensor, kind) in b.applies_to]
        pass_name = "Fprop" if schema.TENSORS[tensor] == "fprop" else "Dgrad"
        # Drawn at a phone's width and at a desktop column's (render_block.figure_pair), the wide
        # plot taller in proportion: the phone drawing alone left half of a 720 px column empty.
        svgs = [line_svg(series, x_label="Input dynamic range: max |x| / median |x| (log scale)",
                         y_label=f"SQNR of the {pass_name} output (dB)", log_x=True, bands=bands, include_y=(0,),
                         width=width, height=height)
                for width, height in ((WIDTH_PT, HEIGHT_PT), (WIDE_PT, WIDE_HEIGHT_PT))]
        label = (f"SQNR of the {pass_name} output per recipe against the input's dynamic range on "
                 f"{device_label(doc['device']['name'])}")
        return figure_pair(svgs[0], svgs[1], f"gemm-dr{self.lineno}-{number}", label)


def _measured(data: dict[str, Any]) -> list[str]:
    return [pid for pid, entry in data["recipes"].items() if entry["status"] == "measured"]


def _value(case: dict[str, Any], pid: str, part: str, field: str) -> float | None:
    result = case["results"][pid]
    if result["status"] != "measured" or part not in result:
        return None
    return float(result[part][field])


def _table(data: dict[str, Any], cases: list[dict[str, Any]]) -> nodes.table:
    header = [Entry("Recipe"), Entry("SQNR (dB) of")] + [Entry(f"R = {ratio_text(c['ratio'])}") for c in cases]
    spread = [Entry(""), Entry("input's max |x| / median |x|")] + [
        Entry(magnitude_text(c["amax_over_median"])) for c in cases]
    body: list[list[Entry]] = []
    for pid in _measured(data):
        entry = data["recipes"][pid]
        formats = entry["formats"]
        name = f"{PRECISIONS[pid].display} ({formats['activation']} X, {formats['gradient']} dY)"
        rows = list(ROWS) if pid != "bf16" else list(ROWS[:1])  # BF16: the ceiling, one row is enough
        for i, (label, part, field) in enumerate(rows):
            cells = [Entry(name if i == 0 else "", strong=i == 0), Entry(label)]
            for case in cases:
                result = case["results"][pid]
                if result["status"] == "failed":
                    cells.append(Entry("failed", tooltip=result["reason"]))
                else:
                    cells.append(Entry(f"{result[part][field]:.1f}"))
            body.append(cells)
    widths = [18, 22] + [8] * len(cases)
    return build_table([header, spread], body, widths, classes=["gemm-dynamic-range-table"])


def _not_measured_recipes(data: dict[str, Any]) -> list[nodes.Node]:
    items = nodes.bullet_list(classes=["gemm-unavailable"])
    for pid, entry in data["recipes"].items():
        display = PRECISIONS[pid].display
        if entry["status"] == "same-as":
            text = f"{display}: as {PRECISIONS[entry['same_as']].display}. {entry['reason']}"
        elif entry["status"] == "unsupported":
            text = f"{display}: not run here: {entry['reason']}"
        else:
            continue
        item = nodes.list_item()
        item += nodes.paragraph(text, text)
        items += item
    return [items] if len(items) else []


def _provenance(doc: dict[str, Any], stale: str | None = None) -> nodes.paragraph:
    """Where and how the study was measured; a stale study says so first (as a result's provenance does)."""
    device, prov = doc["device"], doc["provenance"]
    parts = [device["name"]]
    if device.get("compute_capability"):
        parts[0] += f" (sm_{str(device['compute_capability']).replace('.', '')})"
    parts += [f"driver {prov['driver']}", f"CUDA {prov['cuda']}", f"PyTorch {prov['torch']}",
              f"Transformer Engine {prov['transformer_engine']}", f"measured {prov['date']}",
              f"study method v{doc['method_version']}", f"commit {prov['commit']}"]
    para = nodes.paragraph(classes=["gemm-provenance"])
    if stale:
        text = f"(stale: {stale}) "
        para += nodes.strong(text, text)
    para += nodes.strong("Measured on ", "Measured on ")
    para += nodes.Text(" · ".join(parts) + ".")
    method = prov.get("method", {})
    if isinstance(method.get("quantizers"), str):
        text = f" Quantizers: {method['quantizers']}."
        para += nodes.Text(text)
    return para


def not_measured(cache_dir: Path, wanted: list[str], refused: Sequence[CacheError] = ()) -> nodes.Element:
    """The visible note for a study no GPU has a usable file of (no warning for a study not measured
    yet: the site builds before that); a file there but refused is said to be, with its reason."""
    where = f" on {', '.join(wanted)}" if wanted else " on any GPU"
    if refused:
        return refused_study_admonition("dynamic-range", where, cache_dir, refused)
    admonition = nodes.admonition(classes=["gemm-not-measured", "note"])
    admonition += nodes.title("Not measured yet", "Not measured yet")
    para = nodes.paragraph()
    for piece in (f"The dynamic-range study has not been measured{where} yet: ",
                  nodes.literal("", f"{cache_dir.name}/{studies.SUBDIR}/{schema.NAME}--<device>.json"),
                  " does not exist. To measure it, run ", nodes.literal("", f"gemm-bench study {schema.NAME}"),
                  " on a GPU box with Transformer Engine (a few seconds) and commit the file it writes."):
        para += nodes.Text(piece) if isinstance(piece, str) else piece
    admonition += para
    return admonition

