"""``gemm-benchmark-summary``: the answer first — speedup per precision, device and model, in one table.

The landing page opens with it; the "Speedup by model" page is one. Each entry of ``:models:`` is a
preset, optionally at a tensor-parallel size (``llama3-70b/tp8``); each becomes a question through
the directive's own option parser and is answered through the same path as ``gemm-benchmark``
(:func:`.execution.answer`, one :class:`~gemm_bench.report.report.Report` per mode from the page's
question), so the summary and the detailed blocks cannot disagree. Rows are (model, device, mode);
columns are precisions; the fastest precision of a row is marked. A model no device has measured yet
gets one row saying so, with the command that measures it. A figure (whole-model speedups, a panel
per mode) follows the table unless ``:show: table``.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from docutils import nodes
from sphinx.util import logging
from sphinx.util.docutils import SphinxDirective

from gemm_bench.measure.step import ROUTING_NAMES, routings, step_scope_sentence
from gemm_bench.question.choices import split_list
from gemm_bench.question.config import PRESET_DESCRIPTIONS, ConfigError, parse_model_id
from gemm_bench.question.devices import device_label
from gemm_bench.question.precisions import (
    ALL_MODES,
    BASELINE,
    LAYER_MODES,
    MODE_NAMES,
    PRECISIONS,
    gemm_modes,
    layer_modes,
)
from gemm_bench.question.shapes import PASS_NAMES, PASSES
from gemm_bench.report import figures
from gemm_bench.report.report import Report
from gemm_bench.results.accuracy_schema import ACCURACY_MODES
from gemm_benchmark import answer_text, execution, freshness, questions_builder, records
from gemm_benchmark.config import settings
from gemm_benchmark.diagnostics import Subtype, warn
from gemm_benchmark.options import OptionError, Request, parse_options
from gemm_benchmark.render_block import FIGURE_CLASS, FIGURE_DIR, _relative_uri, scrolling
from gemm_benchmark.render_table import Entry, data_table, inline_literals
from gemm_benchmark.tabs import tab_set
from gemm_benchmark.values import (
    Fastest,
    Point,
    decide_fastest,
    format_speedup,
    step_points,
    total_points,
    unavailable_text,
)

logger = logging.getLogger(__name__)

#: What ``:show:`` may list: the per-model tables, the figure, and SQNR once per recipe and pass.
SHOW_PARTS = ("table", "figure", "sqnr")
MODE_ROW_NAMES = {"autocast": "Autocast GEMMs", "prequant": "Pre-quantized GEMMs"}


@dataclasses.dataclass(frozen=True)
class ModelAsk:
    label: str
    request: Request
    preset: str
    tp: int | None
    ep: int | None = None

    @property
    def entry(self) -> str:
        """The model as ``:models:`` names it (``PRESET``, ``PRESET/tpN``, ``PRESET/epN``, ``PRESET/tpN/epM``)."""
        return self.preset + (f"/tp{self.tp}" if self.tp else "") + (f"/ep{self.ep}" if self.ep else "")

    @property
    def command(self) -> str:
        """The command that measures this model on a GPU box."""
        tp = f" --tensor-model-parallel-size {self.tp}" if self.tp and self.tp > 1 else ""
        ep = f" --expert-model-parallel-size {self.ep}" if self.ep and self.ep > 1 else ""
        return f"gemm-bench run --model {self.preset}{tp}{ep}"


def model_label(preset: str, tp: int | None, ep: int | None = None) -> str:
    name = PRESET_DESCRIPTIONS.get(preset, preset).split(":")[0].split(" (")[0]  # the name, not its shape
    parallel = [f"TP {tp}"] if tp and tp > 1 else []
    parallel += [f"EP {ep}"] if ep and ep > 1 else []
    return f"{name} ({', '.join(parallel)})" if parallel else name


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
        "modes": "as ``gemm-benchmark``'s (default ``autocast, prequant``); the training step comes with autocast",
        "devices": "device slugs or aliases; one tab per device, synced with every block's device tabs",
        "show": "any of ``table`` (per model: the answer sentence and its table), ``figure`` (every model's "
                "whole-model speedup), ``sqnr`` (SQNR once per recipe and pass); default ``table, figure``",
        "missing": "``warn`` (default: a model or device without a result is a warning) or ``note``",
        "caption": "a line of text above the summary",
        "gains-less": "``A < B, ...``: prose claims the build checks (A's autocast speedup below B's everywhere)",
        "accuracy": "``row`` (default: a least-SQNR row in each table) or ``sentence`` (only the answer sentence's "
                    "SQNR, for a page that shows ``:show: sqnr`` once)",
    }
    has_content = False
    option_spec = {  # noqa: RUF012  (docutils reads it as a class attribute)
        "models": lambda text: text or "",
        "precisions": lambda text: text or "",
        "modes": lambda text: text or "",
        "devices": lambda text: text or "",
        "show": lambda text: text or "",
        "missing": lambda text: text or "",
        "caption": lambda text: text or "",
        "gains-less": lambda text: text or "",
        "accuracy": lambda text: text or "",
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
            self._warn(Subtype(exc.subtype) if exc.subtype in Subtype._value2member_map_ else Subtype.OPTION,
                       str(exc))
            return []
        config = settings(self.env)
        if config.questions_only:
            questions_builder.note_asks(self, [ask.request for ask in asks])
            return []
        figure_reports: list[tuple[str, Report]] = []
        documents: list[dict[str, object]] = []
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
        # A precision no shown GPU can run (MXFP8 and NVFP4 on Hopper) is one line under the table,
        # not a column of "unsupported" in every row (on a phone it pushed the answer off the screen).
        collapsed = unsupported_everywhere(precisions, [d.doc for a in answers.values() for d in a.devices])
        if len(collapsed) < len(precisions):
            precisions = [p for p in precisions if p not in collapsed]
        else:
            collapsed = {}  # every column would go: keep them, each cell saying why
        out = nodes.container(classes=["gemm-summary"])
        caption = self.options.get("caption", "").strip()
        if caption:
            out += nodes.paragraph(caption, caption, classes=["gemm-caption"])
        by_pass: list[tuple[str, Report]] = []
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
            for device in answer.devices:
                self._assess(ask, device, note_missing)
                documents.append(device.doc)
                if device.doc.get("layer"):
                    for problem in Report(device.doc, modes=["autocast", *LAYER_MODES]).step_contradictions():
                        self._warn(Subtype.CLAIM, f"{label or ask.preset} on {device_label(device.device)}: "
                                   f"{problem}")
                if gemm_mode in ACCURACY_MODES and device.doc.get("accuracy"):
                    by_pass.append((ask.entry, device.reports[gemm_mode]))
                if show_table:
                    # The tab keeps the GPU's plain name (tabs of one name switch together across the
                    # page); a stale result says so in its panel.
                    panels.append((device_label(device.device),
                                   self._panel(label, label or model_label(ask.preset, ask.tp, ask.ep), device,
                                               per_gemm, gemm_mode, steps, precisions)))
                if per_gemm and (len(asks) > 1 or len(answer.devices) > 1):
                    figure_reports.append((f"{label} · {device_label(device.device)}" if len(asks) > 1
                                           else device_label(device.device), device.reports[per_gemm[0]]))
            for selector in answer.unmatched:
                unmeasured.append(f"{label or ask.preset} on {selector} ({ask.command})")
                panels.append((selector.upper(), [_missing_paragraph(
                    f"Not measured on {selector} yet: ``{ask.command}``")]))
            if not show_table:
                continue
            if len(panels) > 1:
                block += tab_set(panels, classes=["gemm-device-tabs", "gemm-summary-devices"])
            else:
                block.extend(panels[0][1])
            model = ask.request.question.config
            scope = step_scope_sentence(model) if model is not None and any(
                d.doc.get("layer") for d in answer.devices) else None
            if scope:  # what a rank's one-GPU step leaves out (collectives, routing)
                block += nodes.paragraph(scope, scope, classes=["gemm-summary-note", "gemm-summary-scope"])
            out += block
        if per_gemm:
            self._check_claims(answers, precisions, per_gemm[0])
        if unmeasured:
            self._report_missing("not measured yet: " + "; ".join(unmeasured), note_missing)
        if collapsed:
            for text in collapsed_notes(collapsed):
                out += nodes.paragraph(text, text, classes=["gemm-summary-note", "gemm-summary-collapsed"])
        if unmeasured and show_table:
            text = (f"{len(unmeasured)} of the models and devices asked for are not measured yet. On a GPU box, "
                    "gemm-bench refresh docs/ measures every question the site asks (or run the command shown), "
                    "then commit the new files of the result cache.")
            out += nodes.paragraph(text, text, classes=["gemm-summary-note"])
        lacking = [what for key, what in (("layer", "training-step speedups"), ("accuracy", "accuracy (SQNR)"))
                   if documents and not any(doc.get(key) for doc in documents)]
        if lacking and show_table:
            text = (f"Not in these results yet: {' and '.join(lacking)}; the results above were measured before "
                    "they were part of the method, and come with the next measurement on each GPU.")
            out += nodes.paragraph(text, text, classes=["gemm-summary-note"])
        if "sqnr" in show and per_gemm:
            out.extend(self._sqnr_by_pass(by_pass, gemm_mode, precisions))
        if "figure" in show and figure_reports and per_gemm:
            spec = figures.summary_spec([(label, report) for label, report in figure_reports], per_gemm,
                                        title="Whole-model GEMM speedup vs BF16")
            if spec is not None:
                path = figures.figure_file(spec, "svg", Path(self.env.doctreedir) / FIGURE_DIR)
                out += nodes.image(uri=_relative_uri(self.env, path.with_suffix(".*")),
                                   alt="Whole-model GEMM speedup vs BF16 per precision", classes=[FIGURE_CLASS])
        if len(out.children) <= (1 if caption else 0):
            self._warn(Subtype.OPTION, f":show: {', '.join(show) or '(empty)'} renders nothing for these models "
                       "and GPUs (the figure compares several models or GPUs; sqnr needs SQNR results); "
                       "add table")
        self.set_source_info(out)
        return [out]

    def _panel(self, label: str, model: str, device: execution.DeviceAnswer, per_gemm: list[str],
               gemm_mode: str, steps: list[str], precisions: list[str]) -> list[nodes.Node]:
        """One GPU's answer for one model: the sentence, then the table (rows: what is timed; columns:
        precisions), then the notes its cells without a number point to."""
        gpu = device_label(device.device)
        out: list[nodes.Node] = []
        stale = device.status in (execution.Status.STALE, execution.Status.MISSING)
        if stale:
            # As text, not hover-only: a phone reader sees why these numbers may be out of date.
            text = (f"This {gpu} result is {device.status.value}: {device.reason}. A GPU run of gemm-bench refresh "
                    "re-measures it (see the freshness page).")
            out.append(nodes.paragraph(text, text, classes=["gemm-summary-note", f"gemm-{device.status.value}"]))
        # The step rows are the ones the summary's modes ask for (graphed first), else both forms.
        step_modes = sorted(steps, key=lambda m: m != LAYER_MODES[1]) or (
            [LAYER_MODES[1], LAYER_MODES[0]] if per_gemm and device.doc.get("layer") else [])
        if gemm_mode:
            said = answer_text.answer(device.reports[gemm_mode], gemm_mode, precisions, device=gpu, model=label,
                                      step_modes=step_modes)
            out.append(nodes.paragraph(said, said, classes=["gemm-summary-answer"]))
        notes = answer_text.Notes()
        table = SummaryTable("What is timed", [PRECISIONS[p].display for p in precisions])
        for mode in per_gemm:
            table.row(self._row(device, mode, precisions, notes))
        for mode in step_modes:
            table.row(self._extra_row(device, gemm_mode or mode, precisions, "step", notes,
                                      graphed=mode == LAYER_MODES[1]))
        config = device.reports[gemm_mode or step_modes[0]].config if (gemm_mode or step_modes) else None
        skewed = bool(step_modes) and config is not None and "skewed" in routings(config)
        if skewed:  # a mixture of experts: the same step with the skewed routing the page names
            table.row(self._extra_row(device, gemm_mode or step_modes[0], precisions, "step", notes,
                                      graphed=step_modes[0] == LAYER_MODES[1], routing="skewed"))
        if gemm_mode in ACCURACY_MODES and device.doc.get("accuracy") and self.accuracy == "row":
            table.row(self._extra_row(device, gemm_mode, precisions, "sqnr", notes))
        status = f" ({device.status.value}: see the freshness page)" if stale else ""
        where = f"{model} on the {gpu}"
        out.append(scrolling(table.node(f"Speedup vs BF16, {where}{status}: ★ fastest, ≈ within the fastest's "
                                        "measured spread; tap a number for its source")))
        for line in notes.lines():
            out.append(nodes.paragraph(line, line, classes=["gemm-summary-note", "gemm-cell-note"]))
        if skewed:
            text = (f"Training step, skewed routing: the same step with {ROUTING_NAMES['skewed']}; the other rows "
                    f"use {ROUTING_NAMES['balanced']}. The answer above is about the balanced step.")
            out.append(nodes.paragraph(text, text, classes=["gemm-summary-note", "gemm-summary-routing"]))
        return out

    def _sqnr_by_pass(self, found: list[tuple[str, Report]], mode: str, precisions: list[str]) -> list[nodes.Node]:
        """SQNR once per recipe and pass: each model's least accurate GEMM of that pass, as a range over
        every model and GPU shown (one number where they agree to the shown digit)."""
        shown = [BASELINE, *precisions]
        ranges = answer_text.sqnr_by_pass([report for _, report in found], mode, shown)
        models = len({entry for entry, _ in found})
        if not ranges:
            text = "No SQNR is measured in these results yet."
            return [nodes.paragraph(text, text, classes=["gemm-summary-note"])]
        table = SummaryTable("Pass", [PRECISIONS[p].display for p in shown])
        for pass_ in PASSES:
            name = PASS_NAMES[pass_]
            row = [Entry(name, strong=True)]
            for p in shown:
                cell = ranges.get((p, pass_))
                row.append(Entry(cell.text, classes=("gemm-num",),
                                 tooltip=f"{PRECISIONS[p].display}, {name}: least SQNR of the pass's GEMMs, "
                                         f"{cell.low:.2f} to {cell.high:.2f} dB over {cell.count} results")
                           if cell else Entry("n/a", classes=("gemm-num", "gemm-na")))
            table.row(row)
        width = max(r.high - r.low for r in ranges.values())
        count = max(r.count for r in ranges.values())
        title = (f"SQNR in dB per recipe and pass ({MODE_NAMES[mode].lower()}, Gaussian inputs), the least "
                 f"accurate GEMM of each pass over {models} model{'s' if models != 1 else ''} and {count} results")
        text = (f"Every result's value lies within {width:.1f} dB of the others' for the same recipe and pass: "
                "the inputs are synthetic and the same for every model, so this table is shown once rather than "
                "per model." if count > 1 else "One result: a range needs several.")
        return [scrolling(table.node(title)), nodes.paragraph(text, text, classes=["gemm-summary-note"])]
    def _assess(self, ask: ModelAsk, device: execution.DeviceAnswer, note_missing: bool) -> None:
        """Freshness as the ``gemm-benchmark`` directive judges it: a stale result is said to be."""
        where = f"{ask.label + ' ' if ask.label else ''}result on {device.device}"
        if device.status is execution.Status.STALE:
            self._warn(Subtype.STALE, f"{where} is stale: {device.reason}")
        elif device.status is execution.Status.MISSING:
            self._report_missing(f"{where} is missing: {device.reason}", note_missing)

    def _extra_row(self, device: execution.DeviceAnswer, mode: str, precisions: list[str], what: str,
                   notes: answer_text.Notes, *, graphed: bool = True, routing: str = "balanced") -> list[Entry]:
        """The training step's speedup (CUDA-graphed or eager), or the accuracy (SQNR of the least
        accurate GEMM), per precision."""
        report = device.reports[mode]
        gpu = device_label(device.device)
        if what == "step":
            name = "Training step" if graphed else "Training step, eager"
            if routing != "balanced":
                name = f"{name}, {routing} routing"
            points = step_points(report, precisions, graphed=graphed, routing=routing)
            verdict = decide_fastest(points)  # the same rule and spread as the GEMM rows' ★ and ≈
        else:
            name, points, verdict = "Least SQNR, dB", {}, None
        row = [_head(name, verdict)]
        for p in precisions:
            source = f"{PRECISIONS[p].display}, {gpu}"
            if what == "step":
                step = report.step(p, graphed=graphed, routing=routing)
                if p in points:
                    point = points[p]
                    row.append(_speed_entry(point, verdict, p, f"{point.value:.3f}× BF16 "
                                            f"(spread {point.low:.2f}–{point.high:.2f}×) for the whole layer step"
                                            f"{'' if graphed else ', eager'}: {source}"))
                    continue
                status = step.status if step.status != "measured" else ""
                row.append(_absent(status, step.speedup_reason or step.reason, f"{source}, {name.lower()}", notes))
            else:
                sqnr = report.sqnr(mode, p)
                if sqnr is not None:
                    row.append(Entry(f"{sqnr:.1f}", classes=("gemm-num",),
                                     tooltip=f"{sqnr:.2f} dB, the layer's least accurate GEMM: {source}"))
                else:
                    row.append(_absent("", report.sqnr_reason(mode, p), f"{source}, SQNR", notes))
        return row

    def _row(self, device: execution.DeviceAnswer, mode: str, precisions: list[str],
             notes: answer_text.Notes) -> list[Entry]:
        report = device.reports[mode]
        points = total_points(report, mode, precisions)
        verdict = decide_fastest(points)
        row = [_head(MODE_ROW_NAMES.get(mode, MODE_NAMES[mode]), verdict)]
        for p in precisions:
            total = report.total(mode, p)
            source = f"{PRECISIONS[p].display}, {MODE_NAMES[mode]}, {device_label(device.device)}"
            if p in points:
                point = points[p]
                range_text = (f" (spread {point.low:.2f}–{point.high:.2f}×)"
                              if point.low is not None and point.high is not None else "")
                row.append(_speed_entry(point, verdict, p, f"{point.value:.3f}× BF16{range_text}, whole model "
                                        f"({report.num_layers} layers): {source}"))
            else:
                status = total.status if total.status != "measured" else ""
                row.append(_absent(status, total.reason or total.speedup_reason, source, notes))
        return row

    def _parse(self) -> tuple[list[ModelAsk], tuple[str, ...], bool]:
        docdir = Path(self.env.doc2path(self.env.docname)).parent
        asks = summary_asks(self.options, srcdir=Path(self.env.srcdir), docdir=docdir)
        show = tuple(part.lower() for part in split_list(self.options.get("show", "table, figure")))
        for part in show:
            if part not in SHOW_PARTS:
                raise OptionError("show", f"unknown value {part!r}; choose from {', '.join(SHOW_PARTS)}")
        accuracy = self.options.get("accuracy", "row").strip().lower() or "row"
        if accuracy not in ("row", "sentence"):
            raise OptionError("accuracy", f"unknown value {accuracy!r}; choose from row, sentence")
        self.accuracy = accuracy
        missing = self.options.get("missing", "warn").strip().lower() or "warn"
        if missing not in ("warn", "note"):
            raise OptionError("missing", f"unknown value {missing!r}; choose from warn, note")
        self.claims = gains_less_claims(self.options.get("gains-less", ""), [ask.entry for ask in asks])
        return asks, show, missing == "note"

    def _check_claims(self, answers: dict[str, execution.Answer], precisions: list[str], mode: str) -> None:
        """Each ``:gains-less:`` pair, on every device both models have a result of and every precision
        both measured: the first model's whole-model speedup is below the second's, or the build warns
        at this directive (the prose that states the pair is then false)."""
        for left, right in self.claims:
            devices = {d.device: d for d in answers[right].devices}
            for mine in answers[left].devices:
                theirs = devices.get(mine.device)
                if theirs is None or mode not in mine.reports or mode not in theirs.reports:
                    continue
                for p in precisions:
                    a = mine.reports[mode].total(mode, p).speedup_vs_bf16
                    b = theirs.reports[mode].total(mode, p).speedup_vs_bf16
                    if a is not None and b is not None and not a < b:
                        self._warn(Subtype.CLAIM, f":gains-less: {left} < {right} does not hold on "
                                   f"{device_label(mine.device)} with {PRECISIONS[p].display} ({MODE_NAMES[mode]}): "
                                   f"{a:.2f}x against {b:.2f}x")


def unsupported_everywhere(precisions: Sequence[str], docs: Sequence[Mapping[str, Any]]) -> dict[str, str]:
    """The precisions that every shown result reports unsupported (none when nothing is shown), with
    the reason (the first result's, as TE gave it)."""
    if not docs:
        return {}
    out = {}
    for p in precisions:
        verdicts = [(doc.get("support") or {}).get(p) for doc in docs]
        if all(isinstance(v, Mapping) and v.get("available") is False for v in verdicts):
            out[p] = str(verdicts[0].get("reason", ""))  # type: ignore[union-attr]
    return out


def collapsed_notes(collapsed: Mapping[str, str]) -> list[str]:
    """One line per distinct reason: "MXFP8, NVFP4: not measured on any GPU shown (unsupported: ...)"."""
    by_reason: dict[str, list[str]] = {}
    for p, why in collapsed.items():
        by_reason.setdefault(why, []).append(PRECISIONS[p].display)
    return [f"{', '.join(names)}: not measured on any GPU shown ({unavailable_text('unsupported', why)})."
            for why, names in by_reason.items()]


def _head(what: str, verdict: Fastest | None) -> Entry:
    """A row's first cell: what is timed, and "fastest: BF16" when no precision is clearly faster."""
    return Entry(what + (" · fastest: BF16" if verdict is not None and verdict.starred is None else ""), strong=True)


def _speed_entry(point: Point, verdict: Fastest | None, precision: str, tooltip: str) -> Entry:
    """A speedup cell: ★ on the answer, ≈ on one within the answer's measured spread (with why)."""
    star = verdict is not None and precision == verdict.starred
    tied = verdict is not None and precision in verdict.tied
    why = ""
    if tied and verdict is not None and verdict.answer == BASELINE:
        why = "; within the measured spread of BF16: not significantly faster"
    elif tied and verdict is not None:
        why = (f"; within the measured spread of the fastest ({PRECISIONS[verdict.answer].display}): "
               "not significantly slower")
    text = format_speedup(point.value) + (" ★" if star else " ≈" if tied else "")
    classes = ("gemm-num", *(("gemm-fastest",) if star else ("gemm-tie",) if tied else ()))
    return Entry(text, strong=star, classes=classes, tooltip=tooltip + why)


def _absent(status: str, reason: str, source: str, notes: answer_text.Notes) -> Entry:
    """A cell without a number: "failed" or "n/a" with a note mark; the reason is a numbered note under
    the table (text a phone reader can read, not hover-only), so a failed cell never reads as unsupported."""
    full = unavailable_text(status, reason, limit=10_000)
    word = "failed" if status == "failed" else "n/a"
    mark = notes.mark(f"{source}: {full}" if status != "unsupported" else
                      f"{source.split(',')[0]}: {full}")
    classes = ("gemm-num", "gemm-na", *((f"gemm-{status}",) if status else ()))
    return Entry(f"{word}{mark}", classes=classes, tooltip=f"{source}: {full}")


def _missing_paragraph(text: str) -> nodes.paragraph:
    para = nodes.paragraph(classes=["gemm-summary-missing"])
    para.extend(inline_literals(text))
    return para


class SummaryTable:
    """The summary's rows, each exactly as wide as the header: no row of another width can be built.

    A row of the wrong width (a span of ``-1`` columns when a summary shows no precision besides
    BF16) made docutils' writers fail; every row goes through :meth:`row`, which refuses one.
    """

    def __init__(self, head: str, columns: Sequence[str]) -> None:
        self.header = [Entry(head), *(Entry(c) for c in columns)]
        self.width = len(self.header)
        if self.width < 2:
            raise ValueError("a summary table needs a column besides its row heads")
        self.rows: list[list[Entry]] = []

    def row(self, entries: Sequence[Entry]) -> None:
        width = sum(1 + e.morecols for e in entries)
        if width != self.width or any(e.morecols < 0 for e in entries):
            raise ValueError(f"a summary row of {width} columns in a table of {self.width} columns")
        self.rows.append(list(entries))

    def span(self, head: Entry, entry: Entry) -> None:
        """A row whose one entry spans every column after the head."""
        self.row([head, dataclasses.replace(entry, morecols=self.width - 2)])

    def node(self, title: str) -> nodes.Element:
        return data_table([self.header], self.rows, [30] + [12] * (self.width - 1),
                          classes=["gemm-summary-table"], title=title)


def gains_less_claims(text: str, entries: Sequence[str]) -> list[tuple[str, str]]:
    """``:gains-less: A < B, C < D``: the comparisons a page's prose makes between its models, in a
    form the build checks (each side one of ``:models:``'s entries)."""
    claims = []
    for item in (part.strip() for part in (text or "").split(",")):
        if not item:
            continue
        left, sep, right = item.partition("<")
        left, right = left.strip(), right.strip()
        if not sep or not left or not right:
            raise OptionError("gains-less", f"{item!r} is not MODEL < MODEL")
        for side in (left, right):
            if side not in entries:
                raise OptionError("gains-less", f"{side!r} is not one of :models: ({', '.join(entries)})")
        claims.append((left, right))
    return claims


def summary_asks(options: Mapping[str, str], *, srcdir: Path, docdir: Path) -> list[ModelAsk]:
    """The questions a summary asks, one per ``:models:`` entry, through the directive's own parser.

    ``gemm-bench refresh`` calls this too, so a summary's models are measured like any directive's.
    """
    models = split_list(options.get("models", "") or "")
    if not models:
        raise OptionError("models", "needs at least one model preset (e.g. te-guide-5b, llama3-70b/tp8)")
    shared = {k: options[k] for k in ("precisions", "modes", "devices") if (options.get(k) or "").strip()}
    asks = []
    for entry in models:
        try:  # the one parser of model ids (gemm-bench --model takes them too); refuses /tp0 and /ep0
            model_id = parse_model_id(entry)
        except ConfigError as exc:
            raise OptionError("models", exc.rule) from None
        fields = {"model": model_id.preset, **shared}
        tp, ep = model_id.tp, model_id.ep
        if tp:
            fields["tensor-model-parallel-size"] = str(tp)
        if ep:
            fields["expert-model-parallel-size"] = str(ep)
        request = parse_options(fields, srcdir=srcdir, docdir=docdir, modes_known=ALL_MODES)
        if not any(p != BASELINE for p in request.precisions):
            raise OptionError("precisions", "the summary shows speedups vs BF16: name at least one precision "
                              "besides BF16", subtype="precisions")
        asks.append(ModelAsk(model_label(model_id.preset, tp, ep) if len(models) > 1 else "", request,
                             model_id.preset, tp, ep))
    return asks
