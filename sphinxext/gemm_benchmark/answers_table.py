"""``gemm-answers-table``: every model's answer in one compact table, each cell a link to the answer.

A reader arrives with one model and one GPU. The landing page used to answer first for Transformer
Engine's example layer, a gain no real model's step reaches, and the models' answers lay 35 screens
further down; this table puts every model (rows) on every GPU (columns) on the first screen: the
recipe to train in and its speedup against BF16, each cell linking to that model's page. The speedup is
the one the model's sentence leads with: the run the reader launches (the question's layout), with
communication in; where no layout step can be composed, the rank's compute, and the cell says so.

The table and the pages cannot disagree: each cell is read from the very sentence the model's page
prints (:func:`.summary_answer.panel_sentence` over the same cache lookup, :func:`.execution.answer`,
and the same loss-parity study), through the decision that sentence states
(:attr:`.answer_text.Sentence.verdict`); nothing here decides a recipe again.

Links are resolved after every page is read (:class:`ResolveAnswerLinks`): a cell links to the page
whose one-model ``gemm-benchmark-summary`` (with a ``:name:``) asks the same question, found in the
extension's records; the models no page answers are one located warning per table (``missing``) and cells
without a link. In
HTML the link carries the GPU (``#gpu=NAME``), and ``gemm_benchmark.js`` opens that GPU's tab.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any
from urllib.parse import quote

from docutils import nodes
from sphinx.application import Sphinx
from sphinx.transforms.post_transforms import SphinxPostTransform
from sphinx.util.docutils import SphinxDirective
from sphinx.util.nodes import make_refnode

from gemm_bench.question.devices import device_label, selector_label, selects
from gemm_bench.question.precisions import BASELINE, PRECISIONS, gemm_modes, layer_modes
from gemm_bench.results.stack import MODEL_STEP_LACKING, lacking_blocks
from gemm_benchmark import answer_text, execution, records
from gemm_benchmark.config import settings
from gemm_benchmark.diagnostics import Subtype, warn
from gemm_benchmark.directive import build_known_devices
from gemm_benchmark.freshness import SUMMARY
from gemm_benchmark.nodes import app_of, builder_format
from gemm_benchmark.options import OptionError, option_line
from gemm_benchmark.summary import gpu_loss_parity, measured_of, page_sweeps, run_inputs
from gemm_benchmark.summary_answer import ModelAsk, model_label, panel_sentence, summary_asks

NAME = "gemm-answers-table"
#: The fragment a cell's link carries in HTML: ``gemm_benchmark.js`` selects the GPU's tab from it.
GPU_FRAGMENT = "gpu="


@dataclasses.dataclass(frozen=True)
class Cell:
    """One model on one GPU, as the table shows it: ``text`` ("FP8 Delayed 1.47×", "BF16"), its
    ``tooltip`` (what the number is), and ``recipe`` / ``speedup`` for tests and callers (the
    sentence's decision); ``gpu`` is the GPU's tab name on the model's page (a GPU the model is not measured
    on has a tab that says so, :func:`~gemm_bench.question.devices.selector_label`)."""

    text: str
    tooltip: str
    recipe: str = ""
    speedup: float | None = None
    gpu: str = ""


#: What each basis of an answer is called in a cell's tooltip, and (where it is not the model's step,
#: the table's own measure) after the number, so a reader never takes one layer's gain for the model's.
_BASIS_WORDS = {"step": "one layer's training step", "gemms": "the autocast GEMMs alone"}


def answer_cell(sentence: answer_text.Sentence | None, gpu: str) -> Cell:
    """The table's cell for one answer sentence: its recipe and speedup, or why there is none."""
    verdict = sentence.verdict if sentence is not None else None
    if sentence is None or verdict is None:
        return Cell("no answer", sentence.text if sentence is not None else "no answer sentence", gpu=gpu)
    basis = (f"the model's training step at G = {sentence.microbatches}" if sentence.basis == "model"
             else _BASIS_WORDS.get(sentence.basis, sentence.basis))
    suffix = "" if sentence.basis == "model" else f" ({_BASIS_WORDS.get(sentence.basis, sentence.basis)})"
    # Where communication reverses the pick, the cell says so as the sentence does (never hidden).
    turned = (f" ({PRECISIONS[sentence.reversed_by].display} faster with communication)"
              if sentence.reversed_by else "")
    if verdict.answer == BASELINE:
        best = PRECISIONS[verdict.best].display
        return Cell(f"stay in BF16{suffix}{turned}", f"stay in BF16: no recipe is clearly faster in {basis} (the best, "
                    f"{best}, {verdict.best_speedup:.2f}× BF16)", BASELINE, 1.0, gpu)
    name = PRECISIONS[verdict.answer].display
    if sentence.run_speedup is not None:  # the run the reader launches, communication in: the sentence's lead
        return Cell(f"{name} {sentence.run_speedup:.2f}×{turned}",
                    f"train in {name}: {sentence.run_speedup:.2f}× the tokens per second of BF16 with communication "
                    f"in, on {sentence.layout} (the model's step on one GPU, which picked it: "
                    f"{verdict.speedup:.2f}× in {basis})", verdict.answer, sentence.run_speedup, gpu)
    if sentence.basis == "model":  # no layout step: the rank's compute, said in the cell as in the sentence
        suffix = " (one rank's compute)"
    return Cell(f"{name} {verdict.speedup:.2f}×{suffix}{turned}",
                f"train in {name}: {verdict.speedup:.2f}× the speed of BF16 in {basis}", verdict.answer,
                verdict.speedup, gpu)


class gemm_answer_link(nodes.Inline, nodes.TextElement):
    """A cell's text, to become a link to the page answering the question ``asked`` (its hash; on the GPU
    ``gpu``)."""


@dataclasses.dataclass(frozen=True)
class Row:
    ask: ModelAsk
    label: str
    cells: tuple[Cell, ...]


class GemmAnswersTableDirective(SphinxDirective):
    """Every model's answer on every GPU in one compact table (rows: models; columns: GPUs), each cell
    the recipe to train in and its speedup against BF16, linking to that model's page."""

    reference_example = """\
.. gemm-answers-table::
   :models: llama3-8b, qwen2.5-7b
   :precisions: bf16, fp8-current
   :devices: h100, h200
"""
    reference_options = {  # noqa: RUF012  (read from the class by the authoring reference)
        "models": "as ``gemm-benchmark-summary``'s; each needs a page whose one-model summary (with a ``:name:``) "
                  "asks the same question: its cells link there",
        "precisions": "as ``gemm-benchmark-summary``'s (ask what the models' pages ask)",
        "devices": "one column per entry, in this order",
        "caption": "a line of text above the table",
    }
    has_content = False
    option_spec = {  # noqa: RUF012  (docutils reads it as a class attribute)
        "models": lambda text: text or "",
        "precisions": lambda text: text or "",
        "devices": lambda text: text or "",
        "caption": lambda text: text or "",
    }

    def _warn(self, subtype: Subtype, message: str, line: int | None = None) -> None:
        warn(subtype, f"{NAME}: {message}", location=(self.env.docname, line or self.lineno))

    def run(self) -> list[nodes.Node]:
        config = settings(self.env)
        try:
            asks = summary_asks({k: v for k, v in self.options.items() if k != "caption"},
                                srcdir=Path(self.env.srcdir), docdir=Path(self.env.doc2path(self.env.docname)).parent,
                                known_devices=build_known_devices(self.env))
        except OptionError as exc:
            for bad in exc.errors:
                self._warn(Subtype.OPTION, str(bad), option_line(self.block_text, self.lineno, bad.option))
            return []
        if config.questions_only:
            from gemm_benchmark import questions_builder

            questions_builder.note_asks(self, [ask.request for ask in asks])
            return []
        selectors = list(asks[0].request.devices)
        rows: list[Row] = []
        headers: dict[str, str] = {}
        self.sweeps = page_sweeps(self)
        for ask in asks:
            rows.append(self._row(ask, selectors, headers, config))
        return [self._table(rows, [headers.get(s, selector_label(s)) for s in selectors])]

    def _row(self, ask: ModelAsk, selectors: list[str], headers: dict[str, str], config: Any) -> Row:
        req = ask.request
        answer = execution.answer(req.question, precisions=req.precisions, modes=req.modes, devices=req.devices,
                                  cache_dir=config.cache_dir, mode=config.mode, max_age_days=config.max_age_days,
                                  build_started=config.build_started, stale_when=config.stale_when)
        for path in answer.files:
            self.env.note_dependency(str(path))
        records.watch(self.env, config.cache_dir, req.question.hash, answer)
        for error in answer.errors:
            self._warn(Subtype.CACHE, f"ignoring unusable cache file {error}")
        label = ask.label or model_label(ask.preset, ask.tp, ask.ep)
        precisions = [p for p in req.precisions if p != BASELINE]
        cells = []
        for selector in selectors:
            device = next((d for d in answer.devices if selects(selector, d.device)), None)
            if device is None:
                # Linked to the model's page and its "not measured yet" tab (named as the summary names a GPU it
                # has not measured: summary.py, devices.selector_label): a cell that printed the whole command
                # filled the first screen (session 19, EP 8 on the H100).
                cells.append(Cell("not measured yet", f"{label} is not measured on the {selector_label(selector)} "
                                                      f"yet: {ask.command}", gpu=selector_label(selector)))
                continue
            headers.setdefault(selector, device_label(device.device))
            measured = measured_of(device)
            # Exactly the arguments the model's summary gives its panel (summary.py): the same sentence.
            per_gemm = gemm_modes(req.modes)
            sentence = panel_sentence(
                measured, "", per_gemm, "autocast" if "autocast" in per_gemm else (per_gemm[0] if per_gemm else ""),
                layer_modes(req.modes), precisions, loss_parity=gpu_loss_parity(self, config.cache_dir, device.device),
                model_step_pending=MODEL_STEP_LACKING in lacking_blocks(device.result, req.question),
                run=run_inputs(self, req.question, self.sweeps))
            cell = answer_cell(sentence, device_label(device.device))
            # A stale result says so beside its answer (a failed cell is the sentence's to explain: the
            # answer already rests on what did not fail, and "(failed)" read as the recipe failing).
            if device.status in (execution.Status.STALE, execution.Status.MISSING):
                cell = dataclasses.replace(cell, text=f"{cell.text} ({device.status.value})",
                                           tooltip=f"{cell.tooltip}; this result is {device.status.value}: "
                                                   f"{device.reason}")
            cells.append(cell)
        return Row(ask, label, tuple(cells))

    def _table(self, rows: list[Row], gpus: list[str]) -> nodes.Element:
        out = nodes.container(classes=["gemm-answers"])
        caption = self.options.get("caption", "").strip()
        if caption:
            out += nodes.paragraph(caption, caption, classes=["gemm-caption"])
        table = nodes.table(classes=["gemm-table", "gemm-answers-table"])
        group = nodes.tgroup(cols=1 + len(gpus))
        table += group
        for width in [40] + [30] * len(gpus):
            group += nodes.colspec(colwidth=width)
        head = nodes.thead()
        group += head
        head += _row_node([nodes.Text("Model"), *(nodes.Text(g) for g in gpus)], header=True)
        body = nodes.tbody()
        group += body
        for row in rows:
            parts: list[nodes.Node] = [nodes.strong(row.label, row.label)]
            for cell in row.cells:
                # A linked cell's tooltip is its link's title; one without a link (not measured) says why in words.
                parts.append(gemm_answer_link(cell.text, cell.text, asked=row.ask.request.question.hash,
                                              gpu=cell.gpu, model=row.label, tooltip=cell.tooltip)
                             if cell.gpu else nodes.Text(f"{cell.text}: {cell.tooltip}"))
            body += _row_node(parts)
        self.set_source_info(table)
        out += table
        self.set_source_info(out)
        return out


def _row_node(parts: list[nodes.Node], *, header: bool = False) -> nodes.row:
    row = nodes.row()
    for index, part in enumerate(parts):
        entry = nodes.entry(classes=[] if header or index == 0 else ["gemm-answer-cell"])
        para = nodes.paragraph()
        para += part
        entry += para
        row += entry
    return row


def answer_page(env: Any, question_hash: str) -> str | None:
    """The page holding the answer to ``question_hash``: its first one-model summary with a ``:name:``
    in the site's reading order (the record roles quote), None where no page answers it."""
    return next((r.docname for r in records.quotable_records(env)
                 if r.directive == SUMMARY and r.question_hash == question_hash), None)


class ResolveAnswerLinks(SphinxPostTransform):
    """Each cell's link, to the model's page (and GPU tab), once every page's records are known."""

    default_priority = 20

    def run(self, **kwargs: Any) -> None:
        unanswered: dict[str, Any] = {}  # model -> its first cell: one warning per table, not per cell
        for node in list(self.document.findall(gemm_answer_link)):
            target = answer_page(self.env, node["asked"])
            text = node.astext()
            if target is None:
                unanswered.setdefault(node["model"], node)
                node.replace_self(nodes.Text(text))
                continue
            ref = make_refnode(app_of(self.env).builder, self.env.docname, target, "", nodes.inline(text, text),
                               f"{node['model']} on the {node['gpu']}: {node['tooltip']}")
            if builder_format(self.env) == "html":
                ref["refuri"] = ref["refuri"].partition("#")[0] + "#" + GPU_FRAGMENT + quote(node["gpu"])
            node.replace_self(ref)
        if unanswered:
            models = ", ".join(unanswered)
            warn(Subtype.MISSING, f"{NAME}: no page answers {models} (a one-model gemm-benchmark-summary with a "
                 ":name: asking the same question): their cells have no link",
                 location=next(iter(unanswered.values())))


def setup_answers_table(app: Sphinx) -> None:
    app.add_node(gemm_answer_link)
    app.add_directive(NAME, GemmAnswersTableDirective)
    app.add_post_transform(ResolveAnswerLinks)
