"""The ``gemm-loss-parity`` directive: the loss-parity study, per GPU, from the result cache.

Reads every loss-parity study document in ``<cache>/studies/`` (:mod:`gemm_bench.results.studies`,
validated by :mod:`gemm_bench.results.loss_parity_schema`) and renders, per device (tabs when
several GPUs answer): the training-loss curves of every recipe with BF16 as the reference, each
recipe's loss minus BF16's from the first evaluation on with BF16's seed-to-seed range shaded
(:mod:`gemm_bench.report.loss_difference`: the gaps the table quotes are a line's width on the curves'
axis) and a sentence on what that window leaves out, a table
of each recipe's final training and validation loss with its gap to BF16 (absolute and in per
cent), whether its validation gap lies within BF16's seed-to-seed range, and its tokens/s, the
final losses of BF16's extra seeds, the setup the numbers come from, what was not trained and why,
and the provenance (GPU, software stack, date, corpus hash, a link to the raw JSON).

Every number comes from the study document; the only arithmetic here is the gap to BF16 and BF16's
seed band, computed by :func:`gemm_bench.results.loss_parity_schema.gaps` and
:func:`~gemm_bench.results.loss_parity_schema.seed_band`. A document measured before the band
existed (method v1) renders as before, with "no seed band in this result" where the verdict would be.
With no document the directive shows an admonition saying how to measure one (not a warning: an
unmeasured study is a state of the cache, and the site builds with ``-W``); a corrupt file is a
located warning naming its path, and the other devices still render.

Incremental builds: the page depends on each study file it read (``note_dependency``: an edited
file re-reads it), and it watches the set of loss-parity files in the studies folder as a
``gemm-benchmark`` directive watches its question's files (:class:`.records.Watch`, judged by
:class:`.records.GemmBenchmarkCollector`): a new GPU's file, or a deleted one, re-reads the page;
an unchanged cache re-reads nothing.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any, ClassVar

from docutils import nodes
from sphinx import addnodes
from sphinx.util.docutils import SphinxDirective

from gemm_bench.question.devices import device_label, device_slug
from gemm_bench.question.precisions import BASELINE, PRECISIONS
from gemm_bench.report.figure_spec import PRECISION_COLORS
from gemm_bench.report.line_figure import HEIGHT_PT, WIDE_HEIGHT_PT, WIDE_PT, WIDTH_PT, Area, Series, line_svg
from gemm_bench.report.loss_difference import LossDifferences, loss_differences
from gemm_bench.report.loss_parity_words import BEYOND, LOSS_UNIT, WITHIN, band_of, format_delta, format_seeds
from gemm_bench.results import loss_parity_schema as schema
from gemm_bench.results import studies
from gemm_bench.results.cache import CacheError
from gemm_benchmark import records
from gemm_benchmark.config import settings
from gemm_benchmark.diagnostics import Subtype, warn
from gemm_benchmark.render_block import figure_pair, refused_study_admonition, scrolling
from gemm_benchmark.render_table import Entry, build_table
from gemm_benchmark.tabs import tab_set
from gemm_benchmark.values import reason_clause

DIRECTIVE = "gemm-loss-parity"
HOW_TO_MEASURE = "gemm-bench study loss-parity"
COLUMNS = ("Recipe", "Final train loss", "vs BF16", "Final validation loss", "vs BF16",
           "Validation gap vs BF16's seeds", "Tokens/s")
#: The setup table's two columns: what part of the study a row describes, and how it was done.
SETUP_COLUMNS = ("Setup", "As trained and measured")


def format_loss(value: float) -> str:
    return f"{value:.4f}"


def format_gap(found: schema.Gap | None) -> str:
    """``+0.0123 (+0.85%)``: recipe minus BF16, in nats and in per cent of BF16's loss."""
    if found is None:
        return "–"
    return f"{found.delta:+.4f} ({found.percent:+.2f}%)"


def band_range_text(band: schema.SeedBand) -> str:
    """BF16's own row: ``seed range -0.0100 to +0.0200 (3 seeds)``, relative to the main run."""
    return f"seed range {format_delta(band.low)} to {format_delta(band.high)} ({format_seeds(band.runs)})"


def verdict(delta: float, band: schema.SeedBand) -> Entry:
    """A recipe's validation gap against the band, the numbers on hover."""
    words = WITHIN if band.holds(delta) else BEYOND
    # At the stored precision (6 decimals): a gap at the edge of the band reads as judged.
    tooltip = (f"validation gap {format_delta(delta, 6)} against BF16's range {format_delta(band.low, 6)} to "
               f"{format_delta(band.high, 6)} over seeds {', '.join(map(str, band.seeds))} (BF16 only: "
               "the recipe was trained from the main seed alone)")
    return Entry(f"{words} ({format_seeds(band.runs)})", tooltip=tooltip)


def format_tokens(value: float) -> str:
    return f"{value:,.0f}"


def format_params(count: int) -> str:
    return f"{count / 1e6:.1f} M" if count >= 1e6 else f"{count:,}"


# ------------------------------------------------------------------------------ pieces
def results_table(data: dict[str, Any], band: schema.SeedBand | str) -> nodes.table:
    """One row per recipe that was trained (measured, diverged or failed); BF16 first. ``band``:
    BF16's seed band (:func:`band_of`), or the sentence BF16's row shows instead of its range."""
    recipes = schema.recipes_by_id(data)
    gaps = schema.gaps(data)
    body: list[list[Entry]] = []
    for precision, recipe in recipes.items():
        name = Entry(PRECISIONS[precision].display, strong=precision == BASELINE)
        status = recipe["status"]
        if status == "unsupported":
            continue  # listed under the table with TE's reason
        if status != "measured":
            text = recipe["reason"] if status == "diverged" else f"failed: {recipe['reason']}"
            body.append([name, Entry(" ".join(text.split()), morecols=len(COLUMNS) - 2,
                                     classes=(f"gemm-status-{status}",))])
            continue
        val = gaps.get(precision, {}).get("val")
        if precision == BASELINE:
            train_gap = val_gap = Entry("reference")
            judged = Entry(band if isinstance(band, str) else band_range_text(band))
        elif precision in gaps:
            train_gap, val_gap = Entry(format_gap(gaps[precision]["train"])), Entry(format_gap(val))
            if isinstance(band, str):
                judged = Entry("–", tooltip=band)
            else:
                judged = Entry("–") if val is None else verdict(val.delta, band)
        else:  # BF16 did not finish: nothing to compare with
            train_gap = val_gap = judged = Entry("–", tooltip="BF16 did not complete its run")
        body.append([name, Entry(format_loss(recipe["final_train_loss"])), train_gap,
                     Entry(format_loss(recipe["final_val_loss"])), val_gap, judged,
                     Entry(format_tokens(recipe["tokens_per_s"]))])
    return build_table([[Entry(c) for c in COLUMNS]], body, [14, 13, 17, 15, 17, 14, 10],
                       classes=["gemm-loss-parity-table", "gemm-cards"])  # a card per recipe on a phone


def seed_band_note(data: dict[str, Any]) -> nodes.paragraph | None:
    """Each BF16 seed's final losses, the main run first: the numbers the band is made of."""
    block = data.get("seed_band")
    if block is None:
        return None
    base = schema.recipes_by_id(data)[BASELINE]
    runs = [(data["training"]["seed"], base, " (main run)"), *((r["seed"], r, "") for r in block["runs"])]
    parts = []
    for seed, run, which in runs:
        if run["status"] == "measured":
            parts.append(f"seed {seed}{which}: validation {format_loss(run['final_val_loss'])}, "
                         f"train {format_loss(run['final_train_loss'])}")
        else:
            parts.append(f"seed {seed}{which}: {reason_clause(run['reason'])}")
    text = ("BF16's seed band, the final losses of BF16 trained from each seed (every seed draws its own "
            "initial weights and batch order; the other recipes were trained from the main seed only): "
            + "; ".join(parts) + ".")
    return nodes.paragraph(text, text, classes=["gemm-note", "gemm-loss-parity-seeds"])


def unsupported_note(data: dict[str, Any]) -> nodes.paragraph | None:
    skipped = [(p, r["reason"]) for p, r in schema.recipes_by_id(data).items() if r["status"] == "unsupported"]
    if not skipped:
        return None
    text = "Not trained on this GPU (Transformer Engine's reason): " + "; ".join(
        f"{PRECISIONS[p].display}: {reason_clause(reason)}" for p, reason in skipped) + "."
    return nodes.paragraph(text, text, classes=["gemm-note"])


def figure_svg(data: dict[str, Any], device: str, *, wide: bool = False) -> str | None:
    """The training-loss curves, BF16 solid (the reference), every other recipe dashed."""
    series = [Series(label=PRECISIONS[p].display + (" (reference)" if p == BASELINE else ""), xs=list(xs),
                     ys=list(ys), dashed=p != BASELINE, color=PRECISION_COLORS.get(p, ""), markers=False)
              for p, xs, ys in schema.curve_series(data)]
    if not series:
        return None
    every = data["training"]["curve_every"]
    return line_svg(series, x_label="training step", y_label=f"training loss (nats/byte, mean of {every} steps)",
                    title=f"Training loss per recipe on {device}", width=WIDE_PT if wide else WIDTH_PT,
                    height=WIDE_HEIGHT_PT if wide else HEIGHT_PT)


def difference_svg(found: LossDifferences, device: str, every: int, *, wide: bool = False) -> str:
    """Each recipe's loss minus BF16's from the window's start: the training loss a dashed line (the
    curve's means), the validation loss a dot at each evaluation, in the recipe's colour; BF16's seed
    range shaded in BF16's colour; BF16 itself the line at zero."""
    series: list[Series] = []
    for recipe in found.recipes:
        name, color = PRECISIONS[recipe.precision].display, PRECISION_COLORS.get(recipe.precision, "")
        series.append(Series(f"{name}: training loss", list(recipe.train_steps), list(recipe.train), dashed=True,
                             color=color, markers=False))
        series.append(Series(f"{name}: validation loss", list(recipe.val_steps), list(recipe.val), color=color,
                             line=False))
    # Last, so that no recipe's line can hide it (line_figure rings a line that lies under later ones).
    series.append(Series(f"{PRECISIONS[BASELINE].display} (the reference: 0)", [found.start, found.last], [0.0, 0.0],
                         color=PRECISION_COLORS.get(BASELINE, ""), markers=False))
    areas = []
    if found.seeds is not None:
        areas.append(Area(list(found.seeds.steps), list(found.seeds.lows), list(found.seeds.highs),
                          # The table's words: the note under the figure says it is validation loss.
                          f"{PRECISIONS[BASELINE].display}'s seed-to-seed range ({format_seeds(found.seeds.runs)})",
                          color=PRECISION_COLORS.get(BASELINE, "")))
    return line_svg(series, x_label=f"training step (training loss: mean of {every} steps)",
                    y_label=f"loss minus {PRECISIONS[BASELINE].display}'s ({LOSS_UNIT})",
                    title=f"Loss minus {PRECISIONS[BASELINE].display}'s per recipe on {device}, steps "
                          f"{found.start} to {found.last}",
                    width=WIDE_PT if wide else WIDTH_PT, height=WIDE_HEIGHT_PT if wide else HEIGHT_PT,
                    include_y=(0,), areas=areas)


def difference_note(data: dict[str, Any], found: LossDifferences) -> nodes.paragraph:
    """What the difference figure shows, and what its window leaves out, from the document."""
    base = PRECISIONS[BASELINE].display
    every = data["training"]["curve_every"]
    text = (f"The differences from {base}: each recipe's loss minus {base}'s, from step {found.start} (the first "
            f"evaluation after step 0) to step {found.last}; a dashed line is the training loss (the mean of {every} "
            "steps), a dot the validation loss at each evaluation")
    if found.seeds is not None:
        text += (f"; the shaded range is {base}'s own validation loss over its {format_seeds(found.seeds.runs)} "
                 f"at each evaluation, relative to its main run (at step {found.last}, the range the table judges "
                 "each validation gap by)")
    text += "."
    if found.early is not None:
        text += (f" Earlier, while the loss falls fast, the recipes' training losses differ from {base}'s by up "
                 f"to {format_delta(found.early.delta, 3)} {LOSS_UNIT} ({PRECISIONS[found.early.precision].display} "
                 f"at step {found.early.step}): the loss curves show those steps.")
    for precision, step in found.diverged:
        text += (f" {PRECISIONS[precision].display} is not drawn: it diverged at step {step} "
                 "(the loss curves show it).")
    return nodes.paragraph(text, text, classes=["gemm-note", "gemm-loss-difference-note"])


def _drawn(svg: str, wide_svg: str | None, prefix: str, label: str, what: str, css_class: str) -> list[nodes.Node]:
    """A figure inline in HTML (its ink follows the page's theme); a sentence elsewhere. The phone
    drawing and its desktop twin (render_block.figure_pair): one 365 px drawing left half of a desktop
    column empty."""
    box = figure_pair(svg, wide_svg, prefix, label)
    box["classes"].append(css_class)
    elsewhere = addnodes.only(expr="not html")
    text = f"{what} drawn in the HTML version of this page."
    elsewhere += nodes.paragraph(text, text, classes=["gemm-note"])
    return [box, elsewhere]


def figure_nodes(data: dict[str, Any], device: str, prefix: str) -> list[nodes.Node]:
    """The loss curves, then each recipe's loss minus BF16's (with the sentence saying what it shows)."""
    svg = figure_svg(data, device)
    if svg is None:
        return []
    out = _drawn(svg, figure_svg(data, device, wide=True), prefix,
                 f"Training loss against step per recipe on {device}; BF16 is the reference",
                 "The training-loss curves are", "gemm-loss-parity-figure")
    found = loss_differences(data)
    if found is None or not found.recipes:
        return out
    every = data["training"]["curve_every"]
    out += _drawn(difference_svg(found, device, every), difference_svg(found, device, every, wide=True),
                  f"{prefix}-diff", f"Loss minus BF16's per recipe on {device}, from step {found.start}",
                  "The differences from BF16 are", "gemm-loss-difference-figure")
    out.append(difference_note(data, found))
    return out


def setup_table(data: dict[str, Any]) -> nodes.table:
    """What was trained, on what, how: every number of the setup, from the document."""
    model, corpus, training = data["model"], data["corpus"], data["training"]
    schedule, optimizer = training["lr_schedule"], training["optimizer"]
    optimizer_text = ", ".join(f"{k} {v}" for k, v in optimizer.items() if k != "name")
    rows = [
        ("Model", f"{model['layers']} layers, hidden {model['hidden']}, {model['heads']} heads, MLP "
                  f"{model['ffn_hidden']}, vocabulary {model['vocab']}, sequence {model['seq']}; "
                  f"{format_params(model['params'])} parameters. {model['description']}"),
        ("Corpus", f"{corpus['source']}: {corpus['files']:,} files, {corpus['bytes']:,} bytes, sha256 "
                   f"{corpus['sha256']}. Training {corpus['train_bytes']:,} bytes; {corpus['split']}."),
        ("Training", f"{training['steps']} steps of {training['batch']} sequences x {training['seq']} bytes "
                     f"({training['tokens_per_step']:,} tokens per step), seed {training['seed']}, the same "
                     f"batches in the same order for every recipe (order sha256 "
                     f"{training['batch_order_sha256'][:16]}…)."),
        ("Optimizer", f"{optimizer['name']} ({optimizer_text}); gradient clipping at global norm "
                      f"{training['grad_clip']}. {training['weights']}."),
        ("Schedule", f"{schedule['kind']}: peak {schedule['peak_lr']}, {schedule['warmup_steps']} warm-up steps, "
                     f"minimum {schedule['min_lr']}."),
        ("Evaluation", f"validation loss on {training['eval_sequences']} sequences of the held-out split at "
                       f"step 0, every {training['eval_every']} steps and at the end; final train loss: the "
                       f"mean of the last {training['final_window']} steps' losses."),
        ("Curve", training["curve"] + "."),
        ("Tokens/s", training["timing"] + "."),
    ]
    band = data.get("seed_band")
    if band is not None:
        seeds = ", ".join(str(r["seed"]) for r in band["runs"])
        rows.insert(-1, ("Seed band", f"BF16 trained again from {format_seeds(len(band['runs']))} besides the main "
                                      f"seed {training['seed']}: {seeds}, each drawing its own initial weights and "
                                      "batch order; the same steps, schedule and validation windows. The band is "
                                      "the range of BF16's final validation loss over all its seeds, relative to "
                                      "the main run."))
    return build_table([[Entry(c) for c in SETUP_COLUMNS]], [[Entry(k), Entry(v)] for k, v in rows], [16, 84],
                       classes=["gemm-loss-parity-setup"])


def _relative_uri(env: Any, path: Path) -> str:
    docdir = Path(env.doc2path(env.docname)).parent
    return Path(os.path.relpath(path, docdir)).as_posix()


def provenance_nodes(env: Any, doc: dict[str, Any], path: Path, stale: str | None) -> nodes.paragraph:
    dev, prov = doc["device"], doc["provenance"]
    corpus = doc["data"]["corpus"]
    name = dev["name"]
    if dev.get("compute_capability"):
        name += f" (sm_{str(dev['compute_capability']).replace('.', '')})"
    parts = [name, f"driver {prov['driver']}", f"CUDA {prov['cuda']}", f"PyTorch {prov['torch']}",
             f"Transformer Engine {prov['transformer_engine']}", f"commit {prov['commit']}",
             f"measured {prov['date']}",
             f"corpus Python {corpus['python']} standard library, sha256 {corpus['sha256'][:16]}…",
             f"study method v{doc['method_version']}"]
    para = nodes.paragraph(classes=["gemm-provenance"])
    para += nodes.strong("Measured on ", "Measured on ")
    para += nodes.Text(" · ".join(parts) + ". ")
    if stale:
        text = f"(stale: {stale}) "
        para += nodes.emphasis(text, text)
    link = addnodes.download_reference("", "", refdoc=env.docname, refdomain="", reftype="download",
                                       refexplicit=True, refwarn=False, reftarget=_relative_uri(env, path))
    link += nodes.literal("raw JSON", "raw JSON", classes=["download"])
    para += link
    return para


def not_measured_admonition(cache_dir: Path, refused: Sequence[CacheError] = ()) -> nodes.admonition:
    """The visible note for a study no GPU has a usable file of; a file there but refused is said to
    be, with the path and the schema's reason (never "holds no file")."""
    if refused:
        return refused_study_admonition("loss-parity", "", cache_dir, refused)
    admonition = nodes.admonition(classes=["gemm-not-measured", "note"])
    admonition += nodes.title("Not measured yet", "Not measured yet")
    text = (f"The loss-parity study has not been measured on any GPU yet: {studies.study_dir(cache_dir).name}/ "
            f"in {cache_dir.name}/ holds no {schema.NAME} file. To add one, run {HOW_TO_MEASURE} on a GPU box "
            "with PyTorch and Transformer Engine (it trains the model once per recipe, a few minutes), "
            f"and commit the file it writes under {cache_dir.name}/{studies.SUBDIR}/.")
    admonition += nodes.paragraph(text, text)
    return admonition


# ------------------------------------------------------------------------------ the directive
class GemmLossParityDirective(SphinxDirective):
    """Render the loss-parity study: per GPU, loss curves and final losses of each recipe against BF16."""

    has_content = False
    required_arguments = 0
    optional_arguments = 0
    option_spec: ClassVar[dict[str, Any]] = {}
    reference_example: ClassVar[str] = ".. gemm-loss-parity::\n"

    def warn(self, subtype: Subtype, message: str) -> None:
        warn(subtype, f"{DIRECTIVE}: {message}", location=(self.env.docname, self.lineno))

    def run(self) -> list[nodes.Node]:
        config = settings(self.env)
        if config.questions_only:
            return []  # this directive asks no GEMM question
        folder = studies.study_dir(config.cache_dir)
        docs, errors = studies.read_studies(config.cache_dir, schema.NAME)
        self._watch(folder, config.max_age_days, config.mode)
        for error in errors:
            self.warn(Subtype.CACHE, f"ignoring unusable study file {error}")
        block = nodes.container(classes=["gemm-loss-parity"])
        self.set_source_info(block)
        if not docs:
            block += not_measured_admonition(config.cache_dir, errors)
            return [block]
        panels = []
        for doc in docs:
            path = folder / studies.file_name(doc["study"], doc["device"]["name"])
            stale = studies.staleness(doc, None, ("method",), max_age_days=config.max_age_days)
            if stale:
                self.warn(Subtype.STALE, f"study on {doc['device']['name']} is stale: {stale}")
            panels.append((device_label(doc["device"]["name"]), self.device_nodes(doc, path, stale)))
        if len(panels) == 1:
            block.extend(panels[0][1])
        else:
            block += tab_set(panels, classes=["gemm-device-tabs"])
        return [block]

    def _watch(self, folder: Path, max_age_days: float | None, mode: str) -> None:
        """Re-read this page when a study file is edited, added or removed (and only then)."""
        try:
            records.watch_study(self.env, folder, schema.NAME, max_age_days=max_age_days, mode=mode)
        except CacheError as exc:
            self.warn(Subtype.CACHE, f"cannot list the study files: {exc}")

    def device_nodes(self, doc: dict[str, Any], path: Path, stale: str | None) -> list[nodes.Node]:
        data = doc["data"]
        device = device_label(doc["device"]["name"])
        key = hashlib.sha256(f"{self.env.docname}:{self.lineno}:{path.name}".encode()).hexdigest()[:10]
        out: list[nodes.Node] = []
        out += figure_nodes(data, device, f"gemm-loss-{device_slug(device)}-{key}")
        out.append(scrolling(results_table(data, band_of(doc))))
        for note in (seed_band_note(data), unsupported_note(data)):
            if note is not None:
                out.append(note)
        out.append(scrolling(setup_table(data)))
        out.append(provenance_nodes(self.env, doc, path, stale))
        return out
