"""Where the step's time goes, on a page: the stacked bars per recipe and the sentence beside them.

Builder-neutral nodes, as :mod:`gemm_benchmark.study_loss_parity` builds its figure: the SVG inline
in HTML (its ink follows the page's theme), a sentence for every builder. The bars and the
sentence come from :mod:`gemm_bench.report.breakdown_figure` over one result's step cells (one
run); this module only places them. Wiring (not done here: ``render_block``/``summary`` own the
page's layout): call :func:`breakdown_nodes` with a :class:`~gemm_bench.report.report.Report`'s
``doc`` where the layer step's table is rendered, once per device.
"""

from __future__ import annotations

from typing import Any

from docutils import nodes
from sphinx import addnodes

from gemm_bench.report import breakdown_figure
from gemm_benchmark.render_block import inline_svg


def breakdown_nodes(doc: dict[str, Any], device: str, prefix: str, *, mode: str = "layer-graphed",
                    routing: str = "balanced") -> list[nodes.Node]:
    """The figure and its sentence for one result's step cells of ``mode``; [] without breakdowns."""
    bars = breakdown_figure.bars(doc.get("layer", []), mode, routing)
    if not bars:
        return []
    label = f"Where each recipe's training step goes on {device}: GPU time per kind of kernel and idle time"
    box = nodes.container(classes=["gemm-figure", "gemm-breakdown-figure"])
    box += nodes.raw("", inline_svg(breakdown_figure.svg(bars), prefix, label), format="html")
    out: list[nodes.Node] = [box]
    elsewhere = addnodes.only(expr="not html")
    text = "The step breakdown per recipe is drawn in the HTML version of this page."
    elsewhere += nodes.paragraph(text, text, classes=["gemm-note"])
    out.append(elsewhere)
    said = breakdown_figure.sentence(bars)
    if said:
        out.append(nodes.paragraph(said, said, classes=["gemm-breakdown-sentence"]))
    return out
