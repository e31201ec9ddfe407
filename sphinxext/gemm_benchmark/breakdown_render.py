"""Where the step's time goes, on a page: the stacked bars per recipe and the sentence beside them.

Builder-neutral nodes, as :mod:`gemm_benchmark.study_loss_parity` builds its figure: the SVG inline
in HTML (its ink follows the page's theme), a sentence for every builder. The bars and the
sentence come from :mod:`gemm_bench.report.breakdown_figure` over one result's step cells (one
run); this module only places them, with the result's precision plan (its words and the code a reader
writes) and its energy per step: :func:`step_detail_nodes`, which the summary calls under each
model's step table, once per GPU. It reads the typed result (:class:`~gemm_bench.results.typed.Result`),
never the JSON dict: a breakdown that does not add up, a plan step or an energy the door refused is
absent or failed there, with the door's reason, and never drawn or quoted as measured.
"""

from __future__ import annotations

from docutils import nodes
from sphinx import addnodes

from gemm_bench.question.precisions import PRECISIONS
from gemm_bench.question.vocabulary import LAYER_STEP, MODEL_STEP, title
from gemm_bench.report import breakdown_figure, energy_compare, model_step_breakdown, precision_plan
from gemm_bench.report.model_step import ModelStep
from gemm_bench.report.report import Report
from gemm_bench.results import energy
from gemm_bench.results.invariants import REFUSED
from gemm_bench.results.typed import PlanBlock, Result, energy_missing
from gemm_benchmark.render_block import figure_pair


def breakdown_nodes(result: Result, device: str, prefix: str, *, mode: str = "layer-graphed",
                    routing: str = "balanced", recipe: str = "") -> list[nodes.Node]:
    """The figure and its sentence for one result's step cells of ``mode``, and a note naming each recipe
    whose breakdown the door refused (its parts are not its step's: not drawn); [] without either."""
    bars = breakdown_figure.bars(result.layer, mode, routing)
    refusals = [f"{PRECISIONS[p].display}'s breakdown is not drawn, {REFUSED}{why}" for p in PRECISIONS
                if (why := breakdown_figure.refused(result, p, mode, routing)) is not None]
    note: list[nodes.Node] = [nodes.paragraph(text, text, classes=["gemm-note"])
                              for text in ["; ".join(refusals) + "."] if refusals]
    if not bars:
        return note
    # Drawn under the model's step (its table, figure and breakdown) on the models page: the
    # title says this is one layer's step, so its milliseconds never read as the model's.
    how = "CUDA-graphed" if mode == "layer-graphed" else "eager"
    routed = f", {routing} routing" if any(c.routing != routing for c in result.layer) else ""
    label = (f"{title(LAYER_STEP)} ({how}) on the {device}, not {MODEL_STEP}: GPU time per kind of "
             f"kernel and idle time, per recipe{routed}")
    return [*_bars_nodes(result, bars, label, prefix, f"{title(LAYER_STEP)}'s breakdown per recipe", recipe), *note]


def model_breakdown_nodes(result: Result, summary: ModelStep | None, device: str,
                          prefix: str, recipe: str = "") -> list[nodes.Node]:
    """The model's step per micro-batch at the question's G, split as the layer step's is
    (:func:`gemm_bench.report.model_step_breakdown.model_bars`), with its sentence; [] without it."""
    bars = model_step_breakdown.model_bars(result.model_step, summary) if summary is not None else []
    if summary is None or not bars:
        return []
    # Short enough that the legend stays in the figure's first 80 px on a phone (a browser test holds it).
    label = (f"{title(MODEL_STEP)} on the {device} per micro-batch ({summary.config.tokens:,} tokens, "
             f"{summary.config.measured_layers} layers, G = {summary.microbatches}, optimizer / G): GPU time per "
             "kind of kernel and idle time, per recipe")
    return _bars_nodes(result, bars, label, prefix, f"{title(MODEL_STEP)}'s breakdown per recipe", recipe)


def _bars_nodes(result: Result, bars: list[breakdown_figure.Bar], label: str, prefix: str,
                what: str, recipe: str = "") -> list[nodes.Node]:
    """Stacked bars (a phone's and a desktop's drawing), a note for builders without SVG, and the
    sentence for the recipe the page speaks of: ``recipe``, the panel's answer's (its tie-break weighed
    the loss-parity study, which the result alone lacks), else
    :func:`~gemm_bench.report.precision_plan.step_recipe`."""
    # The phone figure and its desktop twin (render_block.figure_pair): one drawing at a phone's width
    # leaves a desktop column half empty, one at a desktop's shrinks a phone's labels below 10 px.
    box = figure_pair(breakdown_figure.svg(bars, heading=label),
                      breakdown_figure.svg(bars, breakdown_figure.WIDE_PT, heading=label), prefix, label)
    box["classes"].append("gemm-breakdown-figure")
    out: list[nodes.Node] = [box]
    elsewhere = addnodes.only(expr="not html")
    text = f"{what} is drawn in the HTML version of this page."
    elsewhere += nodes.paragraph(text, text, classes=["gemm-note"])
    out.append(elsewhere)
    recipe = recipe or precision_plan.step_recipe(Report(result)) or ""
    said = breakdown_figure.sentence(bars, recipe) if recipe else None
    if said:
        out.append(nodes.paragraph(said, said, classes=["gemm-breakdown-sentence"]))
    return out


def plan_nodes(block: PlanBlock | None) -> list[nodes.Node]:
    """The result's precision plan (typed at the door: a refused step reads as failed) as words and as the
    configuration a reader would write; [] without one."""
    if block is None:
        return []
    said = precision_plan.plan_sentence(block)
    out: list[nodes.Node] = [nodes.paragraph(said, said, classes=["gemm-summary-note", "gemm-plan"])]
    snippet = precision_plan.PrecisionPlan.from_block(block).snippet()
    code = nodes.literal_block(snippet, snippet, classes=["gemm-plan-snippet"])
    code["language"] = "python"
    out.append(code)
    return out


def energy_nodes(result: Result) -> list[nodes.Node]:
    """Energy per CUDA-graphed layer step and tokens per joule per recipe, BF16 first, and each recipe
    against BF16's by the site's significance rule (words the report prints too); [] without a measured
    one. A recipe whose entry failed, or was refused at the door (too few power samples, a power beyond
    the board, a stuck reading), is said with its reason where its number would have been."""
    found = result.energies()
    if not found or result.energy is None:
        return []
    listed = "; ".join(f"{PRECISIONS[p].display} {energy.energy_words(found[p].as_mapping())}" if p in found
                       else f"{PRECISIONS[p].display} {energy_missing(result.energy, p)}"
                       for p in PRECISIONS if p in found or result.energy.entry(p) is not None)
    text = f"Energy per CUDA-graphed layer step, each recipe's step measured alone: {listed}."
    # A median above the board's limit (745 W on a 700 W H100) is said where it shows, as the report says it.
    above = energy.power_above_limit(result.device.fields, max(e.power_w for e in found.values()),
                                     (e.power_source for e in found.values()))
    if above:
        text += f" {above[0].upper()}{above[1:]}."
    compared = energy_compare.comparison_sentence(found)
    if compared:
        text += f" {compared}"
    return [nodes.paragraph(text, text, classes=["gemm-summary-note", "gemm-energy"])]


def step_detail_nodes(result: Result, device: str, prefix: str,
                      model_step: ModelStep | None = None, recipe: str = "") -> list[nodes.Node]:
    """What a page shows under a model's step on one GPU: where each recipe's time goes (the model's
    step, for the page's question ``model_step``, then one layer's), the precision plan and the energy;
    nothing (no note, no warning) for a result measured before they were."""
    return [*model_breakdown_nodes(result, model_step, device, f"{prefix}m", recipe),
            *breakdown_nodes(result, device, prefix, recipe=recipe),
            *plan_nodes(result.plan), *energy_nodes(result)]
