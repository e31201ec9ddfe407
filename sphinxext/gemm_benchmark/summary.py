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
from collections.abc import Mapping
from pathlib import Path

from docutils import nodes
from sphinx.util import logging
from sphinx.util.docutils import SphinxDirective

from gemm_bench.question.choices import split_list
from gemm_bench.question.config import PRESET_DESCRIPTIONS
from gemm_bench.question.devices import device_label
from gemm_bench.question.precisions import BASELINE, MODE_NAMES, PRECISIONS
from gemm_bench.report import figures
from gemm_bench.report.report import Report
from gemm_benchmark import execution, questions_builder
from gemm_benchmark.config import settings
from gemm_benchmark.diagnostics import Subtype, warn
from gemm_benchmark.options import OptionError, Request, parse_options
from gemm_benchmark.render_block import FIGURE_CLASS, FIGURE_DIR, _relative_uri, scrolling
from gemm_benchmark.render_table import Entry, data_table
from gemm_benchmark.values import format_speedup

logger = logging.getLogger(__name__)

_MODEL = re.compile(r"^(?P<preset>[A-Za-z0-9][A-Za-z0-9_.-]*?)(?:/tp(?P<tp>\d+))?$")
MODE_ROW_NAMES = {"autocast": "autocast", "prequant": "pre-quantized"}


@dataclasses.dataclass(frozen=True)
class ModelAsk:
    label: str
    request: Request
    preset: str
    tp: int | None

    @property
    def command(self) -> str:
        """The command that measures this model on a GPU box."""
        tp = f" --tensor-model-parallel-size {self.tp}" if self.tp and self.tp > 1 else ""
        return f"gemm-bench run --model {self.preset}{tp}"


def model_label(preset: str, tp: int | None) -> str:
    name = PRESET_DESCRIPTIONS.get(preset, preset).split(":")[0]
    return f"{name} (TP {tp})" if tp and tp > 1 else name


class GemmBenchmarkSummaryDirective(SphinxDirective):
    """One table (and figure) of whole-model GEMM speedups for several models and devices."""

    has_content = False
    option_spec = {  # noqa: RUF012  (docutils reads it as a class attribute)
        "models": lambda text: text or "",
        "precisions": lambda text: text or "",
        "modes": lambda text: text or "",
        "devices": lambda text: text or "",
        "show": lambda text: text or "",
        "missing": lambda text: text or "",
        "caption": lambda text: text or "",
    }

    def _warn(self, subtype: Subtype, message: str) -> None:
        warn(subtype, f"gemm-benchmark-summary: {message}", location=(self.env.docname, self.lineno))

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
        rows: list[list[Entry]] = []
        figure_reports: list[tuple[str, Report]] = []
        documents: list[dict[str, object]] = []
        precisions = [p for p in asks[0].request.precisions if p != BASELINE]
        modes = list(asks[0].request.modes)
        unmeasured: list[ModelAsk] = []
        for ask in asks:
            req = ask.request
            answer = execution.answer(req.question, precisions=req.precisions, modes=req.modes, devices=req.devices,
                                      cache_dir=config.cache_dir, mode=config.mode,
                                      max_age_days=config.max_age_days, build_started=config.build_started,
                                      stale_when=config.stale_when)
            for path in answer.files:
                self.env.note_dependency(str(path))
            for error in answer.errors:
                self._warn(Subtype.CACHE, f"ignoring unusable cache file {error}")
            if not answer.devices:
                unmeasured.append(ask)
                rows.append([Entry(ask.label, strong=True),
                             Entry(f"not measured yet: ``{ask.command}``", morecols=len(precisions) - 1,
                                   classes=("gemm-summary-missing",), markup=True)])
                continue
            for device in answer.devices:
                documents.append(device.doc)
                for mode in modes:
                    rows.append(self._row(ask.label, device, mode, precisions))
                if device.doc.get("layer"):
                    rows.append(self._extra_row(ask.label, device, modes[0], precisions, "step"))
                if device.doc.get("accuracy"):
                    rows.append(self._extra_row(ask.label, device, modes[0], precisions, "sqnr"))
                if len(asks) > 1 or len(answer.devices) > 1:
                    figure_reports.append((f"{ask.label} · {device_label(device.device)}" if len(asks) > 1
                                           else device_label(device.device), device.reports[modes[0]]))
        if unmeasured:
            message = "not measured yet: " + "; ".join(f"{a.label or a.preset} ({a.command})" for a in unmeasured)
            if note_missing:
                logger.info("gemm-benchmark-summary: %s", message, location=(self.env.docname, self.lineno))
            else:
                self._warn(Subtype.MISSING, message)
        header = [Entry("Model · GPU · what is timed" if len(asks) > 1 else "GPU · what is timed")]
        header += [Entry(PRECISIONS[p].display) for p in precisions]
        table = data_table([header], rows, [30] + [12] * len(precisions),
                            classes=["gemm-summary-table"],
                            title="Whole-model GEMM speedup vs BF16 "
                                  "(★ fastest; ≈ within its measured spread; hover for the source)")
        out = nodes.container(classes=["gemm-summary"])
        caption = self.options.get("caption", "").strip()
        if caption:
            out += nodes.paragraph(caption, caption, classes=["gemm-caption"])
        out += scrolling(table)
        if unmeasured:
            text = (f"{len(unmeasured)} of {len(asks)} models are not measured yet. On a GPU box, gemm-bench refresh "
                    "docs/ measures every question the site asks (or run the command in the model's row), then "
                    "commit the new files of the result cache.")
            out += nodes.paragraph(text, text, classes=["gemm-summary-note"])
        lacking = [what for key, what in (("layer", "training-step speedups"), ("accuracy", "accuracy (SQNR)"))
                   if documents and not any(doc.get(key) for doc in documents)]
        if lacking:
            text = (f"Not in these results yet: {' and '.join(lacking)}; the results above were measured before "
                    "they were part of the method, and come with the next measurement on each GPU.")
            out += nodes.paragraph(text, text, classes=["gemm-summary-note"])
        if "figure" in show and figure_reports:
            spec = figures.summary_spec([(label, report) for label, report in figure_reports], modes,
                                        title="Whole-model GEMM speedup vs BF16")
            if spec is not None:
                path = figures.figure_file(spec, "svg", Path(self.env.doctreedir) / FIGURE_DIR)
                out += nodes.image(uri=_relative_uri(self.env, path.with_suffix(".*")),
                                   alt="Whole-model GEMM speedup vs BF16 per precision", classes=[FIGURE_CLASS])
        self.set_source_info(out)
        return [out]

    def _extra_row(self, label: str, device: execution.DeviceAnswer, mode: str, precisions: list[str],
                   what: str) -> list[Entry]:
        """The training step's speedup, or the accuracy (SQNR of the least accurate GEMM), per precision."""
        report = device.reports[mode]
        name = "training step (layer)" if what == "step" else f"SQNR, dB ({MODE_NAMES[mode].lower()})"
        row = [Entry(" · ".join([*([label] if label else []), device_label(device.device), name]), strong=True)]
        steps = {p: report.step(p) for p in precisions} if what == "step" else {}
        speeds = {p: s.speedup_vs_bf16 for p, s in steps.items() if s.speedup_vs_bf16}
        fastest = _fastest(speeds)  # a speed too: ★ as in the GEMM rows
        for p in precisions:
            source = f"{PRECISIONS[p].display}, {device_label(device.device)}"
            if what == "step":
                step = steps[p]
                value, why = step.speedup_vs_bf16, step.speedup_reason or step.reason
                text = format_speedup(value) + (" ★" if p == fastest else "") if value else ""
                tip = f"{value:.3f}× BF16 for the whole layer step: {source}" if value else ""
            else:
                sqnr = report.sqnr(mode, p)
                text, why = (f"{sqnr:.1f}" if sqnr is not None else ""), report.sqnr_reason(mode, p)
                tip = f"{sqnr:.2f} dB, the layer's least accurate GEMM: {source}" if sqnr is not None else ""
            star = what == "step" and p == fastest
            row.append(Entry(text, strong=star, classes=("gemm-num", *(("gemm-fastest",) if star else ())), tooltip=tip)
                       if text else Entry("n/a", classes=("gemm-num", "gemm-na"), tooltip=f"{source}: {why}"))
        return row

    def _row(self, label: str, device: execution.DeviceAnswer, mode: str, precisions: list[str]) -> list[Entry]:
        report = device.reports[mode]
        where = [label] if label else []
        head = " · ".join([*where, device_label(device.device), MODE_ROW_NAMES.get(mode, MODE_NAMES[mode])])
        totals = {p: report.total(mode, p) for p in precisions}
        speeds = {p: t.speedup_vs_bf16 for p, t in totals.items() if t.status == "measured" and t.speedup_vs_bf16}
        fastest = _fastest(speeds)
        spread = {p: figures.total_point(report, mode, p) for p in speeds}
        row = [Entry(head, strong=True)]
        for p in precisions:
            total = totals[p]
            source = f"{PRECISIONS[p].display}, {MODE_NAMES[mode]}, {device_label(device.device)}"
            if p in speeds:
                speedup = speeds[p]
                tied = p != fastest and fastest is not None and _overlap(spread[p], spread[fastest])
                text = format_speedup(speedup) + (" ★" if p == fastest else " ≈" if tied else "")
                why = (f"; within the measured spread of the fastest ({PRECISIONS[fastest].display}): "
                       "not significantly slower" if tied and fastest else "")
                low, high = spread[p][1], spread[p][2]
                range_text = f" (spread {low:.2f}–{high:.2f}×)" if low is not None and high is not None else ""
                classes = ("gemm-num", *(("gemm-fastest",) if p == fastest else ("gemm-tie",) if tied else ()))
                row.append(Entry(text, strong=p == fastest, classes=classes,
                                 tooltip=f"{speedup:.3f}× BF16{range_text}, whole model ({report.num_layers} layers): "
                                         f"{source}{why}"))
            else:
                why = total.reason or getattr(total, "speedup_reason", "") or total.status
                row.append(Entry("n/a", classes=("gemm-num", "gemm-na"), tooltip=f"{source}: {total.status}: {why}"))
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
        return asks, show, missing == "note"


def _fastest(speeds: Mapping[str, float]) -> str | None:
    """The precision with the largest speedup (the row's ★), None when the row has none."""
    return max(speeds, key=lambda p: speeds[p]) if speeds else None


def _overlap(a: tuple[float | None, ...], b: tuple[float | None, ...]) -> bool:
    """Whether two speedups' spreads (value, low, high) overlap: their difference is not significant."""
    if None in (a[1], a[2], b[1], b[2]):
        return False
    return bool(a[2] >= b[1] and b[2] >= a[1])  # type: ignore[operator]


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
            raise OptionError("models", f"{entry!r} is not PRESET or PRESET/tpN")
        fields = {"model": match["preset"], **shared}
        tp = int(match["tp"]) if match["tp"] else None
        if tp:
            fields["tensor-model-parallel-size"] = str(tp)
        request = parse_options(fields, srcdir=srcdir, docdir=docdir)
        asks.append(ModelAsk(model_label(match["preset"], tp) if len(models) > 1 else "", request, match["preset"], tp))
    return asks
