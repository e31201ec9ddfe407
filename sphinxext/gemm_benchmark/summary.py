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
import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from docutils import nodes
from sphinx.util import logging
from sphinx.util.docutils import SphinxDirective

from gemm_bench.measure.step import step_scope_sentence
from gemm_bench.question.choices import split_list
from gemm_bench.question.config import PRESET_DESCRIPTIONS
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
from gemm_bench.report import figures
from gemm_bench.report.report import Report
from gemm_benchmark import execution, freshness, questions_builder, records
from gemm_benchmark.config import settings
from gemm_benchmark.diagnostics import Subtype, warn
from gemm_benchmark.options import OptionError, Request, parse_options
from gemm_benchmark.render_block import FIGURE_CLASS, FIGURE_DIR, _relative_uri, scrolling
from gemm_benchmark.render_table import Entry, data_table
from gemm_benchmark.values import Fastest, Point, decide_fastest, format_speedup, total_points, unavailable_text

logger = logging.getLogger(__name__)

_MODEL = re.compile(r"^(?P<preset>[A-Za-z0-9][A-Za-z0-9_.-]*?)(?:/tp(?P<tp>\d+))?(?:/ep(?P<ep>\d+))?$")
MODE_ROW_NAMES = {"autocast": "autocast", "prequant": "pre-quantized"}


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
    name = PRESET_DESCRIPTIONS.get(preset, preset).split(":")[0]
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
        table = SummaryTable("Model · GPU · what is timed" if len(asks) > 1 else "GPU · what is timed",
                             [PRECISIONS[p].display for p in precisions])
        for ask in asks:
            answer = answers[ask.entry]
            if not answer.devices and not answer.unmatched:
                unmeasured.append(f"{ask.label or ask.preset} ({ask.command})")
                table.span(Entry(ask.label, strong=True),
                           Entry(f"not measured yet: ``{ask.command}``", classes=("gemm-summary-missing",),
                                 markup=True))
                continue
            for device in answer.devices:
                self._assess(ask, device, note_missing)
                documents.append(device.doc)
                if device.doc.get("layer"):
                    for problem in Report(device.doc, modes=["autocast", *LAYER_MODES]).step_contradictions():
                        self._warn(Subtype.CLAIM, f"{ask.label or ask.preset} on {device_label(device.device)}: "
                                   f"{problem}")
                for mode in per_gemm:
                    table.row(self._row(ask.label, device, mode, precisions))
                for mode in steps:
                    table.row(self._extra_row(ask.label, device, mode, precisions, "step"))
                if not steps and per_gemm and device.doc.get("layer"):
                    # The headline step is the GPU's time (layer-graphed), like the GEMMs'; the eager
                    # step only where a result has no graphed one (method v3 and older).
                    graphed = any(c.get("mode") == LAYER_MODES[1] and c.get("status") == "measured"
                                  for c in device.doc["layer"])
                    table.row(self._extra_row(ask.label, device, per_gemm[0], precisions, "step", graphed=graphed))
                if per_gemm and device.doc.get("accuracy"):
                    table.row(self._extra_row(ask.label, device, per_gemm[0], precisions, "sqnr"))
                if per_gemm and (len(asks) > 1 or len(answer.devices) > 1):
                    figure_reports.append((f"{ask.label} · {device_label(device.device)}" if len(asks) > 1
                                           else device_label(device.device), device.reports[per_gemm[0]]))
            for selector in answer.unmatched:
                unmeasured.append(f"{ask.label or ask.preset} on {selector} ({ask.command})")
                head = " · ".join([*([ask.label] if ask.label else []), selector])
                table.span(Entry(head, strong=True),
                           Entry(f"not measured on {selector} yet: ``{ask.command}``",
                                 classes=("gemm-summary-missing",), markup=True))
        if per_gemm:
            self._check_claims(answers, precisions, per_gemm[0])
        if unmeasured:
            self._report_missing("not measured yet: " + "; ".join(unmeasured), note_missing)
        out = nodes.container(classes=["gemm-summary"])
        caption = self.options.get("caption", "").strip()
        if caption:
            out += nodes.paragraph(caption, caption, classes=["gemm-caption"])
        out += scrolling(table.node("Whole-model GEMM speedup vs BF16 "
                                    "(★ fastest; ≈ within its measured spread; hover for the source)"))
        if collapsed:
            for text in collapsed_notes(collapsed):
                out += nodes.paragraph(text, text, classes=["gemm-summary-note", "gemm-summary-collapsed"])
        for ask in asks:  # what a rank's one-GPU step leaves out (collectives with their bytes, routing)
            model = ask.request.question.config
            scope = step_scope_sentence(model) if model is not None and any(
                d.doc.get("layer") for d in answers[ask.entry].devices) else None
            if scope:
                text = f"{ask.label or ask.preset}: {scope}" if len(asks) > 1 else scope
                out += nodes.paragraph(text, text, classes=["gemm-summary-note", "gemm-summary-scope"])
        if unmeasured:
            text = (f"{len(unmeasured)} of the models and devices asked for are not measured yet. On a GPU box, "
                    "gemm-bench refresh docs/ measures every question the site asks (or run the command in the "
                    "model's row), then commit the new files of the result cache.")
            out += nodes.paragraph(text, text, classes=["gemm-summary-note"])
        lacking = [what for key, what in (("layer", "training-step speedups"), ("accuracy", "accuracy (SQNR)"))
                   if documents and not any(doc.get(key) for doc in documents)]
        if lacking:
            text = (f"Not in these results yet: {' and '.join(lacking)}; the results above were measured before "
                    "they were part of the method, and come with the next measurement on each GPU.")
            out += nodes.paragraph(text, text, classes=["gemm-summary-note"])
        if "figure" in show and figure_reports and per_gemm:
            spec = figures.summary_spec([(label, report) for label, report in figure_reports], per_gemm,
                                        title="Whole-model GEMM speedup vs BF16")
            if spec is not None:
                path = figures.figure_file(spec, "svg", Path(self.env.doctreedir) / FIGURE_DIR)
                out += nodes.image(uri=_relative_uri(self.env, path.with_suffix(".*")),
                                   alt="Whole-model GEMM speedup vs BF16 per precision", classes=[FIGURE_CLASS])
        self.set_source_info(out)
        return [out]

    def _assess(self, ask: ModelAsk, device: execution.DeviceAnswer, note_missing: bool) -> None:
        """Freshness as the ``gemm-benchmark`` directive judges it: a stale result is said to be."""
        where = f"{ask.label + ' ' if ask.label else ''}result on {device.device}"
        if device.status is execution.Status.STALE:
            self._warn(Subtype.STALE, f"{where} is stale: {device.reason}")
        elif device.status is execution.Status.MISSING:
            self._report_missing(f"{where} is missing: {device.reason}", note_missing)

    def _head(self, label: str, device: execution.DeviceAnswer, what: str, verdict: Fastest | None) -> Entry:
        """A row's first cell: model, GPU, what is timed; the result's staleness; BF16 when it is the answer."""
        text = " · ".join([*([label] if label else []), device_label(device.device), what])
        classes: tuple[str, ...] = ()
        tooltip = ""
        if device.status in (execution.Status.STALE, execution.Status.MISSING):
            # One word in the row (a long reason pushed the landing page's rows below the fold); the
            # reason on hover, in the build's warning and on the freshness page.
            text += f" ({device.status.value})"
            tooltip = f"{device.status.value}: {device.reason}"
            classes = (f"gemm-{device.status.value}",)
        if verdict is not None and verdict.starred is None:
            text += f" · fastest: {verdict.text}"
        return Entry(text, strong=True, classes=classes, tooltip=tooltip)

    def _extra_row(self, label: str, device: execution.DeviceAnswer, mode: str, precisions: list[str],
                   what: str, *, graphed: bool | None = None) -> list[Entry]:
        """The training step's speedup (``layer``, ``layer-graphed``; ``graphed`` picks one where
        ``mode`` is a GEMM mode), or the accuracy (SQNR of the least accurate GEMM), per precision."""
        graphed = mode == LAYER_MODES[1] if graphed is None else graphed
        report = device.reports[mode]
        if what == "step":
            name = "training step (graphed)" if graphed else "training step (eager)"
        else:
            name = f"SQNR, dB ({MODE_NAMES[mode].lower()})"
        steps = {p: report.step(p, graphed=graphed) for p in precisions} if what == "step" else {}
        speeds = {p: s.speedup_vs_bf16 for p, s in steps.items() if s.speedup_vs_bf16}
        verdict = decide_fastest({p: Point(v) for p, v in speeds.items()})  # a speed too: ★ as in the GEMM rows
        row = [self._head(label, device, name, verdict)]
        for p in precisions:
            source = f"{PRECISIONS[p].display}, {device_label(device.device)}"
            status, why = "", ""
            if what == "step":
                step = steps[p]
                value = step.speedup_vs_bf16
                status, why = (step.status if step.status != "measured" else ""), step.speedup_reason or step.reason
                text = format_speedup(value) + (" ★" if verdict and p == verdict.starred else "") if value else ""
                tip = f"{value:.3f}× BF16 for the whole layer step: {source}" if value else ""
            else:
                sqnr = report.sqnr(mode, p)
                text, why = (f"{sqnr:.1f}" if sqnr is not None else ""), report.sqnr_reason(mode, p)
                tip = f"{sqnr:.2f} dB, the layer's least accurate GEMM: {source}" if sqnr is not None else ""
            star = what == "step" and verdict is not None and p == verdict.starred
            row.append(Entry(text, strong=star, classes=("gemm-num", *(("gemm-fastest",) if star else ())), tooltip=tip)
                       if text else _absent(status, why, source))
        return row

    def _row(self, label: str, device: execution.DeviceAnswer, mode: str, precisions: list[str]) -> list[Entry]:
        report = device.reports[mode]
        points = total_points(report, mode, precisions)
        verdict = decide_fastest(points)
        star = verdict.starred if verdict else None
        row = [self._head(label, device, MODE_ROW_NAMES.get(mode, MODE_NAMES[mode]), verdict)]
        for p in precisions:
            total = report.total(mode, p)
            source = f"{PRECISIONS[p].display}, {MODE_NAMES[mode]}, {device_label(device.device)}"
            if p in points:
                point = points[p]
                tied = verdict is not None and p in verdict.tied
                text = format_speedup(point.value) + (" ★" if p == star else " ≈" if tied else "")
                why = ""
                if tied and verdict is not None and verdict.answer == BASELINE:
                    why = "; within the measured spread of BF16: not significantly faster"
                elif tied and verdict is not None:
                    why = (f"; within the measured spread of the fastest ({PRECISIONS[verdict.answer].display}): "
                           "not significantly slower")
                range_text = (f" (spread {point.low:.2f}–{point.high:.2f}×)"
                              if point.low is not None and point.high is not None else "")
                classes = ("gemm-num", *(("gemm-fastest",) if p == star else ("gemm-tie",) if tied else ()))
                row.append(Entry(text, strong=p == star, classes=classes,
                                 tooltip=f"{point.value:.3f}× BF16{range_text}, whole model ({report.num_layers} "
                                         f"layers): {source}{why}"))
            else:
                status = total.status if total.status != "measured" else ""
                row.append(_absent(status, total.reason or total.speedup_reason, source))
        return row

    def _parse(self) -> tuple[list[ModelAsk], tuple[str, ...], bool]:
        docdir = Path(self.env.doc2path(self.env.docname)).parent
        asks = summary_asks(self.options, srcdir=Path(self.env.srcdir), docdir=docdir)
        show = tuple(split_list(self.options.get("show", "table, figure")))
        for part in show:
            if part not in ("table", "figure"):
                raise OptionError("show", f"unknown value {part!r}; choose from table, figure")
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


def _absent(status: str, reason: str, source: str) -> Entry:
    """A cell without a number: "failed: <reason>" or "unsupported: <reason>" (never one "n/a" for all)."""
    text = unavailable_text(status, reason) if status in ("failed", "unsupported") else "n/a"
    classes = ("gemm-num", "gemm-na", *((f"gemm-{status}",) if status else ()))
    return Entry(text, classes=classes, tooltip=f"{source}: {unavailable_text(status, reason, limit=10_000)}")


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
        match = _MODEL.match(entry)
        if not match:
            raise OptionError("models", f"{entry!r} is not PRESET, PRESET/tpN, PRESET/epN or PRESET/tpN/epM")
        fields = {"model": match["preset"], **shared}
        tp = int(match["tp"]) if match["tp"] else None
        ep = int(match["ep"]) if match["ep"] else None
        if tp:
            fields["tensor-model-parallel-size"] = str(tp)
        if ep:
            fields["expert-model-parallel-size"] = str(ep)
        request = parse_options(fields, srcdir=srcdir, docdir=docdir, modes_known=ALL_MODES)
        if not any(p != BASELINE for p in request.precisions):
            raise OptionError("precisions", "the summary shows speedups vs BF16: name at least one precision "
                              "besides BF16", subtype="precisions")
        asks.append(ModelAsk(model_label(match["preset"], tp, ep) if len(models) > 1 else "", request,
                             match["preset"], tp, ep))
    return asks
