"""``gemm-benchmark-summary``: the answer first — speedup per precision, device and model, in one table.

The landing page opens with it; the "Speedup by model" page is one. Each entry of ``:models:`` is a
preset, optionally at a tensor-parallel size (``llama3-70b/tp8``); each becomes a question through
the directive's own option parser and is answered through the same path as ``gemm-benchmark``
(:func:`.execution.answer`, one :class:`~gemm_bench.report.report.Report` per mode from the page's
question), so the summary and the detailed blocks cannot disagree. Rows are (model, device, mode);
columns are precisions; the fastest precision of a row is marked. A model no device has measured yet
gets one row saying so, with the command that measures it. Unless ``:show: table``, two figures
follow for several models or GPUs: first the model's step (what every answer rests on; a panel per
GPU, models ranked by the speedup of the recipe their answer picks, that recipe marked ★), then the
GEMMs (whole-model GEMM speedups, a panel per mode).

This module asks, warns and renders; what the summary says (sentences, rows, stars, claims) is
computed in :mod:`.summary_answer`, apart from the nodes.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from docutils import nodes
from sphinx import addnodes
from sphinx.util import logging
from sphinx.util.docutils import SphinxDirective

from gemm_bench.measure.step import step_scope_sentence
from gemm_bench.question.choices import split_list
from gemm_bench.question.devices import device_label, selector_label
from gemm_bench.question.precisions import ALL_MODES, BASELINE, gemm_modes, layer_modes
from gemm_bench.question.question import Question
from gemm_bench.question.vocabulary import GEMMS, LAYER_STEP, MODEL_STEP, title
from gemm_bench.report import figures, model_step_figure, models_compared
from gemm_bench.report.figure_spec import FigureSpec
from gemm_bench.report.layout_step import Sweep, sweeps
from gemm_bench.report.model_step import ModelStep
from gemm_bench.report.report import Report
from gemm_bench.results import tp_comm_schema
from gemm_bench.results.accuracy_schema import ACCURACY_MODES
from gemm_bench.results.stack import MODEL_STEP_LACKING, lacking_blocks
from gemm_bench.results.typed import Result
from gemm_benchmark import answer_text, execution, freshness, questions_builder, records
from gemm_benchmark.breakdown_render import step_detail_nodes
from gemm_benchmark.config import settings
from gemm_benchmark.diagnostics import Subtype, warn
from gemm_benchmark.directive import build_known_devices
from gemm_benchmark.options import LAYOUT_DIRECTIVE_OPTIONS, LAYOUT_REFERENCE, OptionError, mode_spellings, option_line
from gemm_benchmark.render_block import FIGURE_CLASS, FIGURE_DIR, _relative_uri, figure_pair, scrolling
from gemm_benchmark.render_table import Entry, data_table, inline_literals
from gemm_benchmark.summary_answer import (
    SHOW_PARTS,
    Measured,
    ModelAsk,
    Panel,
    RunInputs,
    Shown,
    Table,
    claim_problems,
    collapsed_notes,
    gains_less_claims,
    model_label,
    panel,
    panel_sentence,
    sqnr_section,
    step_problems,
    summary_asks,
    unsupported_everywhere,
)
from gemm_benchmark.tabs import tab_set

__all__ = ["GemmBenchmarkSummaryDirective", "ModelAsk", "gains_less_claims", "model_label", "summary_asks"]

logger = logging.getLogger(__name__)

#: The figure that leads a summary of several models or GPUs: what every answer rests on.
MODEL_STEP_FIGURE_TITLE = f"{title(MODEL_STEP)}: speedup vs BF16, ranked by the answer"
#: The figure after it: the GEMMs alone, summed over each model.
GEMMS_FIGURE_TITLE = f"{GEMMS}: whole-model GEMM speedup vs BF16"


def _text(text: str | None) -> str:
    """docutils' converter of an option kept as text (a flag given without a value is "")."""
    return text or ""


class GemmBenchmarkSummaryDirective(SphinxDirective):
    """One table (and figure) of whole-model GEMM speedups for several models and devices."""

    reference_example = """\
.. gemm-benchmark-summary::
   :models: te-guide-5b, llama3-70b/tp8
   :precisions: bf16, fp8-current, fp8-block
   :devices: h100, h200
   :show: table
"""
    reference_options = {  # noqa: RUF012  (read from the class by the authoring reference)
        "models": "model presets, each optionally ``/tpN`` and ``/epN`` (``llama3-70b/tp8``, ``deepseek-v3/ep64``)",
        "precisions": "as ``gemm-benchmark``'s; BF16 is the reference, every other one a column",
        "modes": "any of " + ", ".join(f"``{m}``" for m in ALL_MODES) + " (default ``autocast, prequant``); "
                 f"{LAYER_STEP} comes with autocast. " + mode_spellings(ALL_MODES),
        "devices": "device slugs or aliases; one tab per device, synced with every block's device tabs",
        "show": "any of ``table`` (per model: the answer sentence and its table), ``figure`` (every model's "
                "step, ranked by the answer, then its GEMMs), ``sqnr`` (SQNR once per recipe and pass); "
                "default ``table, figure``",
        "missing": "``warn`` (default: a model or device without a result is a warning) or ``note``",
        "caption": "a line of text above the summary",
        "gains-less": "``A < B, C ~ D, ...``: prose claims the build checks: ``<``, A's autocast speedup is below "
                      "B's beyond both measured spreads on every GPU and precision; ``~``, on some GPU and "
                      "precision the two lie within each other's measured spread",
        "accuracy": "``row`` (default: a least-SQNR row in each table) or ``sentence`` (only the answer sentence's "
                    "SQNR, for a page that shows ``:show: sqnr`` once)",
        "name": "with one model in ``:models:``: a name roles quote its numbers by, as a ``gemm-benchmark``'s "
                "(``:gemm-breakdown:`NAME@h100 layer-graphed fp8-current more```); unique across the site",
        **LAYOUT_REFERENCE,
    }
    has_content = False
    option_spec = {  # noqa: RUF012  (docutils reads it as a class attribute)
        **{name: _text for name in LAYOUT_DIRECTIVE_OPTIONS},
        "models": lambda text: text or "",
        "precisions": lambda text: text or "",
        "modes": lambda text: text or "",
        "devices": lambda text: text or "",
        "show": lambda text: text or "",
        "missing": lambda text: text or "",
        "caption": lambda text: text or "",
        "gains-less": lambda text: text or "",
        "accuracy": lambda text: text or "",
        "name": lambda text: text or "",
    }

    def _warn(self, subtype: Subtype, message: str) -> None:
        warn(subtype, f"gemm-benchmark-summary: {message}", location=(self.env.docname, self.lineno))

    def _report_missing(self, message: str, note: bool) -> None:
        if note:
            logger.info("gemm-benchmark-summary: %s (:missing: note)", message,
                        location=(self.env.docname, self.lineno))
        else:
            self._warn(Subtype.MISSING, message)

    def run(self) -> list[nodes.Node]:
        try:
            asks, show, note_missing = self._parse()
        except OptionError as exc:
            if settings(self.env).questions_only:
                questions_builder.note_problem(self, str(exc))
            for bad in exc.errors:  # every bad option, each at its own line, as gemm-benchmark does
                subtype = Subtype(bad.subtype) if bad.subtype in Subtype._value2member_map_ else Subtype.OPTION
                warn(subtype, f"gemm-benchmark-summary: {bad}",
                     location=(self.env.docname, option_line(self.block_text, self.lineno, bad.option)))
            name = self.options.get("name", "").strip()
            if name and not any(bad.option == "name" for bad in exc.errors):
                records.note_rejected_name(self.env, name, self.lineno)  # its clash reported now
            return []
        config = settings(self.env)
        if config.questions_only:
            questions_builder.note_asks(self, [ask.request for ask in asks])
            return []
        figure_reports: list[tuple[str, Report]] = []
        compared: list[models_compared.Compared] = []
        #: every shown device's typed result (the notes under the summary ask what they hold)
        documents: list[Result] = []
        precisions = [p for p in asks[0].request.precisions if p != BASELINE]
        modes = list(asks[0].request.modes)
        per_gemm, steps = gemm_modes(modes), layer_modes(modes)
        # The sentence and the SQNR speak of autocast where the summary shows it (the GEMMs in
        # training), else of the GEMM mode it shows ("" when it shows steps only).
        gemm_mode = "autocast" if "autocast" in per_gemm else (per_gemm[0] if per_gemm else "")
        show_table = "table" in show
        unmeasured: list[str] = []
        answers: dict[str, execution.Answer] = {}
        for ask in asks:
            req = ask.request
            answer = answers[ask.entry] = execution.answer(
                req.question, precisions=req.precisions, modes=req.modes, devices=req.devices,
                cache_dir=config.cache_dir, mode=config.mode, max_age_days=config.max_age_days,
                build_started=config.build_started, stale_when=config.stale_when)
            for path in answer.files:
                self.env.note_dependency(str(path))
            records.watch(self.env, config.cache_dir, req.question.hash, answer)
            freshness.note_summary_model(self.env, self.lineno, ask.label or model_label(ask.preset, ask.tp, ask.ep),
                                         req, answer, config.cache_dir)
            for error in answer.errors:
                self._warn(Subtype.CACHE, f"ignoring unusable cache file {error}")
            for problem in answer.problems:
                self._warn(Subtype.MEASURE, problem)
        measured = {entry: [measured_of(d) for d in answer.devices] for entry, answer in answers.items()}
        # A precision no shown GPU can run (MXFP8 and NVFP4 on Hopper) is one line under the table,
        # not a column of "unsupported" in every row (on a phone it pushed the answer off the screen).
        collapsed = unsupported_everywhere(precisions, [m.result for found in measured.values() for m in found])
        if len(collapsed) < len(precisions):
            precisions = [p for p in precisions if p not in collapsed]
        else:
            collapsed = {}  # every column would go: keep them, each cell saying why
        out = nodes.container(classes=["gemm-summary"])
        caption = self.options.get("caption", "").strip()
        if caption:
            out += nodes.paragraph(caption, caption, classes=["gemm-caption"])
        by_pass: list[tuple[str, Report]] = []
        found_sweeps = page_sweeps(self) if show_table else ()
        for ask in asks:
            answer = answers[ask.entry]
            label = ask.label or ""
            block = nodes.container(classes=["gemm-summary-model"])
            if len(asks) > 1 and show_table:
                name = label or ask.preset
                head = nodes.paragraph(classes=["gemm-summary-model-name"])
                head += nodes.strong(name, name)
                block += head
            if not answer.devices and not answer.unmatched:
                unmeasured.append(f"{label or ask.preset} ({ask.command})")
                block += _missing_paragraph(f"Not measured yet: ``{ask.command}``")
                if show_table:
                    out += block
                continue
            panels: list[tuple[str, list[nodes.Node]]] = []
            for device, result in zip(answer.devices, measured[ask.entry], strict=True):
                self._assess(ask, device, note_missing)
                documents.append(device.result)
                for problem in step_problems(result):
                    self._warn(Subtype.CLAIM, f"{label or ask.preset} on {device_label(device.device)}: {problem}")
                if gemm_mode in ACCURACY_MODES and device.result.accuracy:
                    by_pass.append((ask.entry, device.reports[gemm_mode]))
                loss_parity = self._loss_parity(config.cache_dir, device.device)
                pending = MODEL_STEP_LACKING in lacking_blocks(device.result, ask.request.question)
                sentence: answer_text.Sentence | None = None
                if show_table:
                    # The tab keeps the GPU's plain name (tabs of one name switch together across the
                    # page); a stale result says so in its panel.
                    found = panel(result, label, label or model_label(ask.preset, ask.tp, ask.ep), per_gemm,
                                  gemm_mode, steps, precisions, accuracy_row=self.accuracy == "row",
                                  loss_parity=loss_parity, model_step_pending=pending,
                                  run=run_inputs(self, ask.request.question, found_sweeps))
                    sentence = found.sentence
                    # Under the step rows, which a summary shows whether or not its modes name a
                    # layer mode (summary_answer: "else both forms"); [] for a result without them.
                    detail = step_detail_nodes(device.result, device_label(device.device),
                                               f"bd{self.lineno}-{len(documents)}", found.model_step_summary,
                                               found.sentence.recipe if found.sentence else "")
                    panels.append((device_label(device.device),
                                   self._panel_nodes(found, f"ms{self.lineno}-{len(documents)}") + detail))
                if "figure" in show and gemm_mode and (len(asks) > 1 or len(answer.devices) > 1):
                    # The model's step, ranked by the very answer its panel (and the model's page) states.
                    if sentence is None:
                        sentence = panel_sentence(result, label, per_gemm, gemm_mode, steps, precisions,
                                                  loss_parity=loss_parity, model_step_pending=pending)
                    compared.append(_compared(label or model_label(ask.preset, ask.tp, ask.ep),
                                              device_label(device.device), device.reports[gemm_mode], sentence))
                if per_gemm and (len(asks) > 1 or len(answer.devices) > 1):
                    figure_reports.append((f"{label} · {device_label(device.device)}" if len(asks) > 1
                                           else device_label(device.device), device.reports[per_gemm[0]]))
            for selector in answer.unmatched:
                unmeasured.append(f"{label or ask.preset} on {selector} ({ask.command})")
                panels.append((selector_label(selector), [_missing_paragraph(
                    f"Not measured on the {selector_label(selector)} yet: ``{ask.command}``")]))
            if not show_table:
                continue
            if len(panels) > 1:
                block += tab_set(panels, classes=["gemm-device-tabs", "gemm-summary-devices"])
            else:
                block.extend(panels[0][1])
            model = ask.request.question.config
            scope = step_scope_sentence(model) if model is not None and any(
                d.result.layer for d in answer.devices) else None
            if scope:  # what a rank's one-GPU step leaves out (collectives, routing)
                block += nodes.paragraph(scope, scope, classes=["gemm-summary-note", "gemm-summary-scope"])
            out += block
        if per_gemm:
            for problem in claim_problems(self.claims, measured, precisions, per_gemm[0]):
                self._warn(Subtype.CLAIM, problem)
        if unmeasured:
            self._report_missing("not measured yet: " + "; ".join(unmeasured), note_missing)
        if collapsed:
            for text in collapsed_notes(collapsed):
                out += nodes.paragraph(text, text, classes=["gemm-summary-note", "gemm-summary-collapsed"])
        if unmeasured and show_table:
            text = (f"{len(unmeasured)} of the models and devices asked for are not measured yet. On a GPU box, "
                    "gemm-bench refresh DOCS_DIR (the folder of conf.py) measures every question the site asks "
                    "(or run the command shown), then commit the new files of the result cache.")
            out += nodes.paragraph(text, text, classes=["gemm-summary-note"])
        held = {"training-step speedups": any(r.layer for r in documents),
                "accuracy (SQNR)": any(r.accuracy for r in documents)}
        lacking = [what for what, found in held.items() if documents and not found]
        if lacking and show_table:
            text = (f"Not in these results yet: {' and '.join(lacking)}; the results above were measured before "
                    "they were part of the method, and come with the next measurement on each GPU.")
            out += nodes.paragraph(text, text, classes=["gemm-summary-note"])
        if "figure" in show and compared:
            # First what the answers use: the model's step per GPU, models ranked by the answer's pick.
            spec = models_compared.model_step_spec(compared, precisions, title_text=MODEL_STEP_FIGURE_TITLE)
            if spec is not None:
                out += self._figure(spec, f"{title(MODEL_STEP)}'s speedup vs BF16 per recipe, model and GPU, models "
                                          "ranked by the speedup of the recipe their answer picks (marked ★)")
        if "figure" in show and figure_reports and per_gemm:
            spec = figures.summary_spec([(label, report) for label, report in figure_reports], per_gemm,
                                        title=GEMMS_FIGURE_TITLE)
            if spec is not None:
                out += self._figure(spec, "GEMMs: whole-model GEMM speedup vs BF16 per precision")
        if "sqnr" in show and per_gemm:
            section = sqnr_section([report for _, report in by_pass], len({entry for entry, _ in by_pass}),
                                   gemm_mode, precisions)
            if section.table is not None:
                out += scrolling(_table_node(section.table, section.title))
            out += nodes.paragraph(section.text, section.text, classes=["gemm-summary-note"])
        if len(out.children) <= (1 if caption else 0):
            self._warn(Subtype.OPTION, f":show: {', '.join(show) or '(empty)'} renders nothing for these models "
                       "and GPUs (the figure compares several models or GPUs; sqnr needs SQNR results); "
                       "add table")
        self.set_source_info(out)
        return [out]

    def _figure(self, spec: FigureSpec, alt: str) -> nodes.image:
        """``spec`` drawn once under its key (:func:`~gemm_bench.report.figures.figure_file`), as an image
        any builder converts (HTML shows the SVG, with its desktop twin)."""
        path = figures.figure_file(spec, "svg", Path(self.env.doctreedir) / FIGURE_DIR)
        return nodes.image(uri=_relative_uri(self.env, path.with_suffix(".*")), alt=alt, classes=[FIGURE_CLASS])

    def _loss_parity(self, cache_dir: Path, device: str) -> dict[str, Any] | None:
        return gpu_loss_parity(self, cache_dir, device)

    def _panel_nodes(self, found: Panel, prefix: str) -> list[nodes.Node]:
        """One GPU's panel as nodes: notices, the sentence (its loss-parity phrase a link), table, notes,
        the result's cross-check flag when its median breaks the bound, then the model's step
        in the units teams plan in (its table, notes and figure) where the result has one."""
        out: list[nodes.Node] = [nodes.paragraph(text, text, classes=["gemm-summary-note", cls])
                                 for text, cls in found.notices]
        if found.sentence is not None:
            out.append(self._sentence_node(found.sentence))
        out.append(scrolling(_table_node(found.table, found.title)))
        for line in found.notes:
            out.append(nodes.paragraph(line, line, classes=["gemm-summary-note", "gemm-cell-note"]))
        if found.routing_note:
            out.append(nodes.paragraph(found.routing_note, found.routing_note,
                                       classes=["gemm-summary-note", "gemm-summary-routing"]))
        if found.file_flag:  # the result's cross-check breaks its median bound: every number above rests on it
            out.append(nodes.paragraph(found.file_flag, found.file_flag, classes=["gemm-summary-note", "gemm-flagged"]))
        if found.model_step is not None:
            out.append(scrolling(_table_node(found.model_step, found.model_step_title, "gemm-model-step-table")))
            out += [nodes.paragraph(line, line, classes=["gemm-summary-note", "gemm-cell-note"])
                    for line in found.model_step_notes]
        if found.model_step_summary is not None:
            out += model_step_figure_nodes(found.model_step_summary, found.gpu, prefix)
        return out

    def _sentence_node(self, sentence: answer_text.Sentence) -> nodes.paragraph:
        para = nodes.paragraph(classes=["gemm-summary-answer"])
        before, found, after = sentence.text.partition(sentence.link) if sentence.link else (sentence.text, "", "")
        para += nodes.Text(before)
        if found:
            if sentence.link_doc in self.env.found_docs:
                ref = addnodes.pending_xref("", refdomain="std", reftype="doc", reftarget="/" + sentence.link_doc,
                                            refexplicit=True, refwarn=True)
                ref += nodes.inline(found, found)
                para += ref
            else:
                para += nodes.Text(found)
            para += nodes.Text(after)
        return para

    def _assess(self, ask: ModelAsk, device: execution.DeviceAnswer, note_missing: bool) -> None:
        """Freshness as the ``gemm-benchmark`` directive judges it: a stale result is said to be."""
        where = f"{ask.label + ' ' if ask.label else ''}result on {device.device}"
        if device.status is execution.Status.STALE:
            self._warn(Subtype.STALE, f"{where} is stale: {device.reason}")
        elif device.status is execution.Status.MISSING:
            self._report_missing(f"{where} is missing: {device.reason}", note_missing)

    def _parse(self) -> tuple[list[ModelAsk], tuple[str, ...], bool]:
        """The summary's asks and choices; every bad option is found (issue 35: one run of an author's
        build names all of them), the first raised with :attr:`OptionError.errors` holding each."""
        docdir = Path(self.env.doc2path(self.env.docname)).parent
        errors: list[OptionError] = []
        asks: list[ModelAsk] = []
        try:
            asks = summary_asks(self.options, srcdir=Path(self.env.srcdir), docdir=docdir,
                               known_devices=build_known_devices(self.env))
        except OptionError as exc:
            # Each entry of :models: is asked as a :model: of gemm-benchmark; the summary has no :model:,
            # so a typo'd preset is the :models: option's (named, and located, as the author wrote it).
            errors.extend(OptionError("models", bad.message, bad.subtype) if bad.option == "model" else bad
                          for bad in exc.errors)
        show = tuple(part.lower() for part in split_list(self.options.get("show", "table, figure")))
        errors += [OptionError("show", f"unknown value {part!r}; choose from {', '.join(SHOW_PARTS)}")
                   for part in show if part not in SHOW_PARTS]
        accuracy = self.options.get("accuracy", "row").strip().lower() or "row"
        if accuracy not in ("row", "sentence"):
            errors.append(OptionError("accuracy", f"unknown value {accuracy!r}; choose from row, sentence"))
        self.accuracy = accuracy
        missing = self.options.get("missing", "warn").strip().lower() or "warn"
        if missing not in ("warn", "note"):
            errors.append(OptionError("missing", f"unknown value {missing!r}; choose from warn, note"))
        if asks:
            try:
                self.claims = gains_less_claims(self.options.get("gains-less", ""), [ask.entry for ask in asks])
            except OptionError as exc:
                errors.extend(exc.errors)
        if errors:
            first = errors[0]
            first.errors = tuple(errors)
            raise first
        return asks, show, missing == "note"


def gpu_loss_parity(directive: SphinxDirective, cache_dir: Path, device: str) -> dict[str, Any] | None:
    """This GPU's loss-parity study document (the answer's words quote it, its tie-break reads it), None
    when there is none; an unusable one is warned about at ``directive`` and read as none. One reader
    (:func:`records.loss_parity_study`) for the summary, the answers table and the roles."""
    return records.loss_parity_study(directive.env, cache_dir, device,
                                     location=(directive.env.docname, directive.lineno),
                                     directive=directive.name or "gemm-benchmark-summary")


def page_sweeps(directive: SphinxDirective) -> tuple[Sweep, ...]:
    """The collective sweeps of the cache's tp-comm studies (:func:`records.page_studies`: the page is
    re-read when a study file changes; an unusable one is a located warning), for the answer's run."""
    docs, _ = records.page_studies(directive.env, tp_comm_schema.NAME,
                                   location=(directive.env.docname, directive.lineno))
    return tuple(sweeps(docs))


def run_inputs(directive: SphinxDirective, question: Question, found: tuple[Sweep, ...]) -> RunInputs:
    """What the answer needs to speak of the run: ``question``'s layout, the ``found`` sweeps
    (:func:`page_sweeps`) and ``conf.py``'s assumed network. One function for the summary and the answers
    table, so that the landing page's cell and the model's page speak of the same run."""
    return RunInputs(question.layout, found, settings(directive.env).network)


def _compared(model: str, gpu: str, report: Report, sentence: answer_text.Sentence | None) -> models_compared.Compared:
    """One model on one GPU for the comparison figure: the answer sentence's own decision (its recipe,
    tie-break included, and that recipe's speedup), ranked only where it rests on the model's step."""
    if sentence is None or sentence.verdict is None:
        return models_compared.Compared(model, gpu, report, "", None, "no answer")
    if sentence.basis != "model":  # an older result: its answer rests on one layer's step or the GEMMs
        basis = LAYER_STEP if sentence.basis == "step" else f"the {GEMMS}"
        return models_compared.Compared(model, gpu, report, sentence.verdict.answer, None, basis)
    return models_compared.Compared(model, gpu, report, sentence.verdict.answer, sentence.verdict.speedup)


def measured_of(device: execution.DeviceAnswer) -> Measured:
    """One device's answer as the summary and the answers table read it: its result, typed once where it
    was read (:meth:`.execution.ResultReads.result`), so neither indexes the document."""
    return Measured(device.device, device.result, device.reports, device.status.value, device.reason)


def _entry(cell: Shown) -> Entry:
    return Entry(cell.text, morecols=cell.morecols, strong=cell.strong, classes=cell.classes, tooltip=cell.tooltip)


def _table_node(table: Table, title: str, kind: str = "gemm-summary-table") -> nodes.Element:
    return data_table([[_entry(c) for c in table.header]], [[_entry(c) for c in row] for row in table.rows],
                      [30] + [12] * (table.width - 1), classes=[kind], title=title)


def model_step_figure_nodes(summary: ModelStep, gpu: str, prefix: str) -> list[nodes.Node]:
    """Tokens/s per GPU (the question's G and G = 1) and peak memory per recipe, drawn at a phone's
    width and a desktop's (:func:`~.render_block.figure_pair`); a sentence for builders without SVG."""
    label = f"Tokens per second per GPU and peak memory per recipe of {MODEL_STEP} on the {gpu}"
    wide = model_step_figure.svg(summary, gpu, model_step_figure.WIDE_PT)
    box = figure_pair(model_step_figure.svg(summary, gpu), wide, prefix, label)
    box["classes"].append("gemm-model-step-figure")
    elsewhere = addnodes.only(expr="not html")
    text = f"{title(MODEL_STEP)}'s tokens per second and memory per recipe are drawn in the HTML version of this page."
    elsewhere += nodes.paragraph(text, text, classes=["gemm-note"])
    return [box, elsewhere]


def _missing_paragraph(text: str) -> nodes.paragraph:
    para = nodes.paragraph(classes=["gemm-summary-missing"])
    para.extend(inline_literals(text))
    return para
