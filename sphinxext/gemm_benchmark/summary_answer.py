"""The summary's answer, computed apart from its nodes: what ``gemm-benchmark-summary`` says, as data.

:mod:`.summary` (the directive) asks the cache, warns and builds nodes; everything it shows is
decided here, from the same :class:`~gemm_bench.report.report.Report` objects and the same rule
(:func:`.values.decide_fastest`) as the roles, as :mod:`.values` and :mod:`.records` serve the
``gemm-benchmark`` directive: the models asked (:func:`summary_asks`), each GPU's panel (its answer
sentence, the table's rows with ★ / ≈ and the cells without a number, the notes those point to),
the SQNR-by-pass table, the ``:gains-less:`` claims and the steps that contradict their GEMMs.
Nothing here builds a node, so a test can check the answer without a Sphinx build.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Collection, Mapping, Sequence
from pathlib import Path
from typing import Any

from gemm_bench.measure.step import ROUTING_NAMES, routings
from gemm_bench.question import vocabulary
from gemm_bench.question.choices import split_list
from gemm_bench.question.config import PRESET_DESCRIPTIONS, ConfigError, ModelId, parse_model_id
from gemm_bench.question.devices import device_label
from gemm_bench.question.layout import ParallelLayout
from gemm_bench.question.layout_step import Network
from gemm_bench.question.model_step import unsupported_reason
from gemm_bench.question.precisions import ALL_MODES, BASELINE, LAYER_MODES, MODE_NAMES, PRECISIONS
from gemm_bench.question.shapes import PASS_NAMES, PASSES
from gemm_bench.report.cached_layer import quantize_once_note
from gemm_bench.report.fastest import TIE_RULE
from gemm_bench.report.layout_step import Sweep
from gemm_bench.report.model_step import (
    GIB,
    ModelStep,
    attention_note,
    capacity_text,
    memory_delta_text,
    optimizer_state_note,
    part_absence,
)
from gemm_bench.report.report import Report
from gemm_bench.report.run_answer import Run, run_of
from gemm_bench.report.tie_break import GEMMS, MODEL, STEP, pick
from gemm_bench.results.accuracy_schema import ACCURACY_MODES
from gemm_bench.results.typed import Result
from gemm_benchmark import answer_text
from gemm_benchmark.options import LAYOUT_DIRECTIVE_OPTIONS, OptionError, Request, parse_options
from gemm_benchmark.render_table import FLAG_MARK
from gemm_benchmark.values import (
    SAME,
    Fastest,
    Point,
    absent_status,
    clearly_less,
    format_speedup,
    model_step_points,
    overlaps,
    step_absence,
    step_points,
    total_points,
    unavailable_text,
)

#: What ``:show:`` may list: the per-model tables, the figure, and SQNR once per recipe and pass.
SHOW_PARTS = ("table", "figure", "sqnr")
MODE_ROW_NAMES = {"autocast": "Autocast GEMMs", "prequant": "Pre-quantized GEMMs"}


# ------------------------------------------------------------------------------ the models asked
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
        return ModelId(self.preset, self.tp, self.ep).text()

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


def summary_asks(options: Mapping[str, str], *, srcdir: Path, docdir: Path,
                 known_devices: Collection[str] | None = None) -> list[ModelAsk]:
    """The questions a summary asks, one per ``:models:`` entry, through the directive's own parser.

    ``gemm-bench refresh`` calls this too, so a summary's models are measured like any directive's.
    ``known_devices`` checks ``:devices:`` as ``gemm-benchmark`` does (:func:`.options.parse_options`).
    Every bad entry and option is found, each once (a shared option's error is the same for every
    model); the first is raised, its :attr:`~.options.OptionError.errors` holding them all.
    """
    models = split_list(options.get("models", "") or "")
    if not models:
        raise OptionError("models", "needs at least one model preset (e.g. te-guide-5b, llama3-70b/tp8)")
    if (options.get("name") or "").strip() and len(models) > 1:  # a name quotes one model's numbers
        raise OptionError("name", f"names one model's result for roles to quote; this summary shows {len(models)}")
    shared = {k: options[k] for k in ("precisions", "modes", "devices", "name") if (options.get(k) or "").strip()}
    # The layout's options hold for every model of the summary (a flag may be given without a value).
    shared.update({k: options[k] or "" for k in LAYOUT_DIRECTIVE_OPTIONS if k in options})
    asks = []
    errors: dict[str, OptionError] = {}
    for entry in models:
        try:  # the one parser of model ids (gemm-bench --model takes them too); refuses /tp0 and /ep0
            model_id = parse_model_id(entry)
        except ConfigError as exc:
            errors.setdefault(f"models:{exc.rule}", OptionError("models", exc.rule))
            continue
        fields = {"model": model_id.preset, **shared}
        tp, ep = model_id.tp, model_id.ep
        if tp:
            fields["tensor-model-parallel-size"] = str(tp)
        if ep:
            fields["expert-model-parallel-size"] = str(ep)
        try:
            request = parse_options(fields, srcdir=srcdir, docdir=docdir, modes_known=ALL_MODES,
                                    known_devices=known_devices)
        except OptionError as exc:
            for bad in exc.errors:
                if bad.option in ("tensor-model-parallel-size", "expert-model-parallel-size"):
                    # the author wrote no such option: the size came from the id (llama3-70b/tp9)
                    bad = OptionError("models", f"{entry.strip()!r} sets :{bad.option}: to "
                                                f"{fields[bad.option]}: {bad.message}", bad.subtype)
                errors.setdefault(f"{bad.option}:{bad.message}", bad)
            continue
        if not any(p != BASELINE for p in request.precisions):
            errors.setdefault("precisions:baseline", OptionError(
                "precisions", "the summary shows speedups vs BF16: name at least one precision besides BF16",
                subtype="precisions"))
        asks.append(ModelAsk(model_label(model_id.preset, tp, ep) if len(models) > 1 else "", request,
                             model_id.preset, tp, ep))
    if errors:
        first, *_ = found = list(errors.values())
        first.errors = tuple(found)
        raise first
    return asks


@dataclasses.dataclass(frozen=True)
class Claim:
    """One ``:gains-less:`` item: ``left < right`` (left gains clearly less everywhere both are
    measured) or ``left ~ right`` (somewhere, on a GPU and a precision, the two are not told apart)."""

    left: str
    relation: str
    right: str


def gains_less_claims(text: str, entries: Sequence[str]) -> list[Claim]:
    """``:gains-less: A < B, C ~ D``: the comparisons a page's prose makes between its models, in a
    form the build checks (each side one of ``:models:``'s entries)."""
    claims = []
    for item in (part.strip() for part in (text or "").split(",")):
        if not item:
            continue
        found = re.fullmatch(r"(?P<left>[^<~]*)(?P<rel>[<~])(?P<right>[^<~]*)", item)
        left, right = (found["left"].strip(), found["right"].strip()) if found else ("", "")
        if not found or not left or not right:
            raise OptionError("gains-less", f"{item!r} is not MODEL < MODEL or MODEL ~ MODEL")
        for side in (left, right):
            if side not in entries:
                raise OptionError("gains-less", f"{side!r} is not one of :models: ({', '.join(entries)})")
        claims.append(Claim(left, found["rel"], right))
    return claims


@dataclasses.dataclass(frozen=True)
class Measured:
    """One model's result on one GPU, as the summary reads it: what :func:`claim_problems` and
    :func:`panel` need of an :class:`~.execution.DeviceAnswer`."""

    device: str
    #: The result, typed (:func:`gemm_bench.results.typed.parse`): all the summary reads of it.
    result: Result
    reports: Mapping[str, Report]
    #: ``fresh``, ``stale``, ``missing`` (and why, for the last two).
    status: str = "fresh"
    reason: str = ""


def claim_problems(claims: Sequence[Claim], results: Mapping[str, Sequence[Measured]], precisions: Sequence[str],
                   mode: str) -> list[str]:
    """Each claim that the measurements do not support, in words (empty when every claim holds).

    ``A < B`` must hold, with :func:`.values.clearly_less` (the spreads apart, the same rule as the
    ★ and the prose check), on every GPU both models have a result of and every precision both
    measured; ``A ~ B`` needs one such GPU and precision where the two overlap."""
    problems = []
    for claim in claims:
        theirs = {d.device: d for d in results.get(claim.right, ())}
        pairs: list[tuple[str, str, Point, Point]] = []
        for mine in results.get(claim.left, ()):
            other = theirs.get(mine.device)
            if other is None or mode not in mine.reports or mode not in other.reports:
                continue
            ours = total_points(mine.reports[mode], mode, precisions)
            others = total_points(other.reports[mode], mode, precisions)
            gpu = device_label(mine.device)
            pairs += [(gpu, p, ours[p], others[p]) for p in precisions if p != BASELINE and p in ours and p in others]
        if claim.relation == "<":
            for gpu, p, a, b in pairs:
                if not clearly_less(a, b):
                    how = "within each other's measured spread" if overlaps(a, b) else "not less"
                    problems.append(f":gains-less: {claim.left} < {claim.right} does not hold on {gpu} with "
                                    f"{PRECISIONS[p].display} ({MODE_NAMES[mode]}): {_spread(a)} against "
                                    f"{_spread(b)}, {how}")
        elif pairs and not any(overlaps(a, b) for _, _, a, b in pairs):
            problems.append(f":gains-less: {claim.left} ~ {claim.right} does not hold: on every GPU and precision "
                            f"({MODE_NAMES[mode]}) the two are apart, e.g. {_spread(pairs[0][2])} against "
                            f"{_spread(pairs[0][3])}")
    return problems


def _spread(point: Point) -> str:
    if point.low is None or point.high is None:
        return f"{point.value:.2f}x"
    return f"{point.value:.2f}x [{point.low:.2f}-{point.high:.2f}]"


def step_problems(measured: Measured) -> list[str]:
    """The steps of one result that contradict their GEMMs (the summary shows every step it holds)."""
    if not measured.result.layer:
        return []
    report = Report(measured.result, modes=["autocast", *LAYER_MODES])
    return report.step_contradictions()


# ------------------------------------------------------------------------------ precisions shown
def unsupported_everywhere(precisions: Sequence[str], results: Sequence[Result]) -> dict[str, str]:
    """The precisions that every shown result reports unsupported (none when nothing is shown), with
    the reason (the first result's, as TE gave it)."""
    if not results:
        return {}
    out = {}
    for p in precisions:
        verdicts = [result.support.get(p) for result in results]
        if all(v is not None and not v.available for v in verdicts):
            out[p] = verdicts[0].reason  # type: ignore[union-attr]  # all verdicts are there
    return out


def collapsed_notes(collapsed: Mapping[str, str]) -> list[str]:
    """One line per distinct reason: "MXFP8, NVFP4: not measured on any GPU shown (unsupported: ...)",
    with Transformer Engine's whole reason: a note under the table has the room a table cell lacks,
    and a reason cut short ("… required for MXFP8…") hid what the GPU lacks (issue 35). Its closing
    full stop goes, as the note's own ends it."""
    by_reason: dict[str, list[str]] = {}
    for p, why in collapsed.items():
        by_reason.setdefault(why, []).append(PRECISIONS[p].display)
    return [f"{', '.join(names)}: not measured on any GPU shown "
            f"({unavailable_text('unsupported', why.strip().rstrip('.'), limit=len(why) + 1)})."
            for why, names in by_reason.items()]


# ------------------------------------------------------------------------------ one GPU's panel
@dataclasses.dataclass(frozen=True)
class Shown:
    """One cell of a summary table, as data (the directive turns it into a table entry)."""

    text: str
    strong: bool = False
    classes: tuple[str, ...] = ()
    tooltip: str = ""
    morecols: int = 0


class Table:
    """The summary's rows, each exactly as wide as the header: no row of another width can be built.

    A row of the wrong width (a span of ``-1`` columns when a summary shows no precision besides
    BF16) made docutils' writers fail; every row goes through :meth:`row`, which refuses one.
    """

    def __init__(self, head: str, columns: Sequence[str]) -> None:
        self.header = [Shown(head), *(Shown(c) for c in columns)]
        self.width = len(self.header)
        if self.width < 2:
            raise ValueError("a summary table needs a column besides its row heads")
        self.rows: list[list[Shown]] = []

    def row(self, cells: Sequence[Shown]) -> None:
        width = sum(1 + c.morecols for c in cells)
        if width != self.width or any(c.morecols < 0 for c in cells):
            raise ValueError(f"a summary row of {width} columns in a table of {self.width} columns")
        self.rows.append(list(cells))

    def span(self, head: Shown, cell: Shown) -> None:
        """A row whose one cell spans every column after the head."""
        self.row([head, dataclasses.replace(cell, morecols=self.width - 2)])


@dataclasses.dataclass(frozen=True)
class Panel:
    """One model on one GPU: notices (a stale result), the answer sentence, the table and its notes."""

    notices: tuple[tuple[str, str], ...]  # (text, its class)
    sentence: answer_text.Sentence | None
    table: Table
    title: str
    notes: tuple[str, ...]
    routing_note: str
    #: What the panel says under its table when the result's profiler cross-check breaks the file's
    #: median bound (:attr:`~gemm_bench.results.cross_check.Verdict.file_flag`), "" when it holds.
    file_flag: str = ""
    #: The model's step in the units teams plan in (tokens/s per GPU, MFU, memory), its
    #: title and notes; None where the result has no model step (the speedup table says why).
    model_step: Table | None = None
    model_step_title: str = ""
    model_step_notes: tuple[str, ...] = ()
    #: The composed model step the figure draws (None: no figure).
    model_step_summary: ModelStep | None = None
    #: The GPU's name as the panel says it (``H100 80GB HBM3``).
    gpu: str = ""


def panel_step_modes(measured: Measured, per_gemm: Sequence[str], steps: Sequence[str]) -> list[str]:
    """The step rows a panel shows: those the summary's modes ask for (graphed first), else both forms."""
    return sorted(steps, key=lambda m: m != LAYER_MODES[1]) or (
        [LAYER_MODES[1], LAYER_MODES[0]] if per_gemm and measured.result.layer else [])


@dataclasses.dataclass(frozen=True)
class RunInputs:
    """What the answer needs to speak of the run a reader launches: the question's layout (None for a
    question without one), the tp-comm studies' collective sweeps and the assumed network (``conf.py``)."""

    layout: ParallelLayout | None
    sweeps: tuple[Sweep, ...] = ()
    network: Network = dataclasses.field(default_factory=Network)


def panel_run(measured: Measured, inputs: RunInputs | None) -> Run | None:
    """One result's run on the question's layout (:func:`gemm_bench.report.run_answer.run_of`: the
    functions of the ``gemm-layout-step`` and ``gemm-layout-memory`` tables); None without a layout."""
    if inputs is None or inputs.layout is None:
        return None
    return run_of(measured.result, inputs.layout, inputs.sweeps, network=inputs.network)


def panel_sentence(measured: Measured, label: str, per_gemm: Sequence[str], gemm_mode: str, steps: Sequence[str],
                   precisions: Sequence[str], *, loss_parity: Mapping[str, Any] | None = None,
                   model_step_pending: bool = False, run: RunInputs | None = None) -> answer_text.Sentence | None:
    """The answer sentence of one GPU's panel (None where the summary shows no GEMM mode): one function,
    so that a panel and any shorter view of the same answer (:mod:`.answers_table`) cannot differ.
    ``run``: the question's layout and the collective sweeps, for the run the answer speaks of."""
    if not gemm_mode:
        return None
    return answer_text.answer(measured.reports[gemm_mode], gemm_mode, precisions, device=device_label(measured.device),
                              model=label, step_modes=panel_step_modes(measured, per_gemm, steps),
                              loss_parity=loss_parity, model_step_pending=model_step_pending,
                              run=panel_run(measured, run))


def panel(measured: Measured, label: str, model: str, per_gemm: Sequence[str], gemm_mode: str, steps: Sequence[str],
          precisions: Sequence[str], *, accuracy_row: bool,
          loss_parity: Mapping[str, Any] | None = None, model_step_pending: bool = False,
          run: RunInputs | None = None) -> Panel:
    """One GPU's answer for one model: the sentence, then the table (rows: what is timed; columns:
    precisions), then the notes its cells without a number point to. ``label`` names the model in the
    sentence (a summary of several models), ``model`` in the table's title. ``model_step_pending``: the
    page's question has a model step that this result lacks (measured before it was part of the method:
    :func:`gemm_bench.results.stack.lacking_blocks`), so the answer rests on one layer's step and says so."""
    gpu = device_label(measured.device)
    notices: list[tuple[str, str]] = []
    stale = measured.status in ("stale", "missing")
    if stale:
        # As text, not hover-only: a phone reader sees why these numbers may be out of date.
        notices.append((f"This {gpu} result is {measured.status}: {measured.reason}. A GPU run of gemm-bench "
                        "refresh re-measures it (see the freshness page).", f"gemm-{measured.status}"))
    step_modes = panel_step_modes(measured, per_gemm, steps)
    sentence = panel_sentence(measured, label, per_gemm, gemm_mode, steps, precisions, loss_parity=loss_parity,
                              model_step_pending=model_step_pending, run=run)
    notes = answer_text.Notes()
    table = Table("What is timed", [PRECISIONS[p].display for p in precisions])
    main = measured.reports[gemm_mode or step_modes[0]] if (gemm_mode or step_modes) else None
    summary = main.model_step() if main is not None else None
    if main is not None and summary is not None:  # the model's step first: the answer sentence speaks of it
        for g in sorted(summary.rows, reverse=True):
            table.row(model_step_row(main, summary, precisions, gpu, notes, g, loss_parity=loss_parity))
    elif main is not None and main.config is not None and unsupported_reason(main.config) is None:
        # A result without it is re-measured by the next refresh (results.stack.lacking_blocks).
        table.span(Shown(vocabulary.title(vocabulary.MODEL_STEP), strong=True),
                   Shown(f"not measured on the {gpu} yet: tokens/s, MFU and memory come with its next refresh",
                         classes=("gemm-na", "gemm-model-step-missing")))
    for mode in per_gemm:
        table.row(mode_row(measured.reports[mode], mode, precisions, gpu, notes, loss_parity=loss_parity))
    for mode in step_modes:
        table.row(step_row(measured.reports[gemm_mode or mode], precisions, gpu, notes,
                           graphed=mode == LAYER_MODES[1], loss_parity=loss_parity))
    config = measured.reports[gemm_mode or step_modes[0]].config if (gemm_mode or step_modes) else None
    skewed = bool(step_modes) and config is not None and "skewed" in routings(config)
    if skewed:  # a mixture of experts: the same step with the skewed routing the page names
        table.row(step_row(measured.reports[gemm_mode or step_modes[0]], precisions, gpu, notes,
                           graphed=step_modes[0] == LAYER_MODES[1], routing="skewed", loss_parity=loss_parity))
    if gemm_mode in ACCURACY_MODES and measured.result.accuracy and accuracy_row:
        table.row(sqnr_row(measured.reports[gemm_mode], gemm_mode, precisions, gpu, notes))
    status = f" ({measured.status}: see the freshness page)" if stale else ""
    title = (f"Speedup vs BF16, {model} on the {gpu}{status}: ★ fastest (or, among speedups within the "
             "fastest's spread, the tie-break's pick), ≈ within the fastest's measured spread; tap a number for "
             "its source")
    routing_note = (f"{vocabulary.LAYER_STEP_TITLES[LAYER_MODES[1]]}, skewed routing: the same step with "
                    f"{ROUTING_NAMES['skewed']}; the other rows "
                    f"use {ROUTING_NAMES['balanced']}. The answer above is about the balanced step." if skewed else "")
    shown = [measured.reports[m] for m in (gemm_mode, *per_gemm, *step_modes) if m in measured.reports]
    file_flag = shown[0].cross_check.file_flag if shown else None  # one verdict per file, whatever the mode
    units, units_title, units_notes = (model_step_table(main, summary, precisions, model, gpu)
                                       if main is not None and summary is not None else (None, "", ()))
    # Where a model step gains more than its own GEMMs, the note says what does it, from the parts
    # (issue 43 item 5): weights quantized once per optimizer step.
    once = [n for p in precisions if main is not None and summary is not None
            and (n := quantize_once_note(main, p, gemm_mode=gemm_mode or "autocast"))]
    return Panel(tuple(notices), sentence, table, title, (*notes.lines(), *once), routing_note,
                 f"{FLAG_MARK} On the {gpu}, {file_flag}." if file_flag else "", units, units_title, units_notes,
                 summary, gpu)


def model_step_row(report: Report, summary: ModelStep, precisions: Sequence[str], gpu: str, notes: answer_text.Notes,
                   microbatches: int, *, loss_parity: Mapping[str, Any] | None = None) -> list[Shown]:
    """The model's step's speedup at G = ``microbatches`` (its tokens per second over BF16's),
    ★ and ≈ by the one rule and its tie-break (``loss_parity``: this GPU's study); a recipe without a
    model step reads failed or n/a with its reason."""
    points = model_step_points(summary, precisions, microbatches)
    verdict = pick(points, report, precisions, basis=MODEL, loss_parity=loss_parity)
    row = [head(vocabulary.model_step_row(microbatches), verdict)]
    for p in precisions:
        source = f"{PRECISIONS[p].display}, {gpu}, {vocabulary.model_step_at(microbatches)}"
        if p in points:
            point = points[p]
            row.append(speed_cell(point, verdict, p, f"{point.value:.3f}× BF16's tokens per second (spread "
                                  f"{point.low:.2f}–{point.high:.2f}×) in {vocabulary.MODEL_STEP}: {source}"))
            continue
        status, reason = part_absence(report.result, p)
        row.append(absent_cell(status, reason or vocabulary.NO_MODEL_STEP, source, notes))
    return row


def _delta_gib(delta: float) -> str:
    """"+9.5", "−1.2", "same" (a difference the shown digit cannot tell)."""
    return "same" if memory_delta_text(delta) == "the same" else f"{delta:+.1f}".replace("-", "−")


def model_step_table(report: Report, summary: ModelStep, precisions: Sequence[str], model: str,
                     gpu: str) -> tuple[Table, str, tuple[str, ...]]:
    """The model's step in the units teams plan in, one column per recipe (BF16 first): tokens/s per
    GPU and MFU at the question's G, the peak memory of one rank's step and its difference from BF16,
    the layers that fit where the whole rank does not, and the largest micro-batch found on the GPU."""
    shown = [BASELINE, *precisions]
    notes = answer_text.Notes()
    g = summary.microbatches
    table = Table("Per GPU", [PRECISIONS[p].display for p in shown])

    def cells(value: Any) -> list[Shown]:
        out = []
        for p in shown:
            got = value(p)
            if got is None:
                status, reason = part_absence(report.result, p)
                out.append(absent_cell(status, reason or vocabulary.NO_MODEL_STEP,
                                       f"{PRECISIONS[p].display}, {gpu}, {vocabulary.MODEL_STEP}", notes))
            else:
                out.append(Shown(got[0], classes=("gemm-num",), tooltip=f"{got[1]}: {PRECISIONS[p].display}, {gpu}"))
        return out

    def row_of(p: str) -> Any:
        return summary.row(p)

    table.row([Shown(f"Tokens/s, G = {g}", strong=True),
               *cells(lambda p: (f"{r.tokens_per_s:,.0f}", f"{r.tokens_per_s:,.1f} tokens per second per GPU, "
                                 f"{r.ms_per_microbatch:.4g} ms per micro-batch at G = {g}")
                      if (r := row_of(p)) else None)])
    if any((r := row_of(p)) is not None and r.mfu for p in shown):
        table.row([Shown(f"MFU vs the BF16 peak, G = {g}", strong=True),  # FP8 recipes can pass 90% of it
                   *cells(lambda p: (f"{r.mfu:.0%}", f"{r.mfu:.1%} of the dense BF16 peak ({r.tflops:.0f} model "
                                     f"TFLOP/s per GPU, Megatron-LM's count) at G = {g}")
                          if (r := row_of(p)) and r.mfu else None)])
    base = summary.memory.get(BASELINE)
    table.row([Shown("Peak memory, GiB", strong=True),
               *cells(lambda p: (f"{m.peak / GIB:.1f}", f"{m.peak / GIB:.2f} GiB peak of {vocabulary.MODEL_STEP} "
                                 "(one rank) "
                                 f"(weights {m.weights / GIB:.1f}, FP8 copies {m.fp8_weights / GIB:.1f}, activations "
                                 f"{m.activations / GIB:.1f}, gradients {m.gradients / GIB:.1f}, optimizer state "
                                 f"{m.optimizer_state / GIB:.1f}, transient {m.transient / GIB:.1f} GiB)"
                                 + (f"; {memory_delta_text((m.peak - base.peak) / GIB)} than BF16"
                                    if base is not None and p != BASELINE else ""))
                      if (m := summary.memory.get(p)) else None)])
    if base is not None:
        table.row([Shown("Memory vs BF16, GiB", strong=True),
                   *cells(lambda p: ("–", "BF16 is the reference") if p == BASELINE else
                          (_delta_gib((m.peak - base.peak) / GIB), f"{memory_delta_text((m.peak - base.peak) / GIB)} "
                           f"peak memory than BF16 in {vocabulary.MODEL_STEP}")
                          if (m := summary.memory.get(p)) else None)])
    capacity = capacity_text(summary.capacity_bytes)
    layers = summary.config.measured_layers
    if any(summary.fits(p) is False for p in shown):
        table.row([Shown(f"Layers that fit, of {layers}", strong=True),
                   *cells(lambda p: (str(summary.layers_that_fit[p]), f"{summary.layers_that_fit[p]} of {layers} "
                                     f"layers fit {capacity}, "
                                     "with the embedding and output layer "
                                     "(a pipeline stage's size)") if p in summary.layers_that_fit else None)])
    if summary.largest_microbatch:
        table.row([Shown("Largest micro-batch", strong=True),
                   *cells(lambda p: (str(summary.largest_microbatch[p]) if summary.largest_microbatch[p] else "none",
                                     f"the largest micro-batch that fitted, found on the GPU with "
                                     f"{summary.search_layers} layers") if p in summary.largest_microbatch
                          else None)])
    title = (f"{vocabulary.title(vocabulary.MODEL_STEP)}, {model} on the {gpu}: one rank's embedding, {layers} "
             "layers, BF16 output "
             f"layer, loss and optimizer, G = {g} micro-batches per optimizer step, composed of measured GPU times "
             "(collectives excluded); tap a number for its source")
    lines = list(notes.lines())
    unfit = [p for p in shown if summary.fits(p) is False]
    if unfit:
        whose = ("no recipe's whole rank fits one GPU" if len(unfit) == len(shown)
                 else f"under {answer_text.names(unfit)}, the whole rank does not fit one GPU")
        lines.append(f"Peak memory above {capacity} on the {gpu} (free memory "
                     f"plus what the allocator held when it measured; it moves by a few hundred MB between runs): "
                     f"{whose}; the layers that fit give a pipeline stage's size"
                     + ("; where none fits, not even one layer fits beside the embedding and output layer with its "
                        "whole optimizer state, so the rank needs more parallelism (expert or tensor) or a "
                        "sharded optimizer." if any(summary.layers_that_fit.get(p) == 0 for p in unfit) else "."))
    state = optimizer_state_note(summary)
    if state:
        lines.append(state)
    attention = attention_note(summary)
    if attention:
        lines.append(attention)
    return table, title, tuple(lines)


def mode_row(report: Report, mode: str, precisions: Sequence[str], gpu: str, notes: answer_text.Notes, *,
             loss_parity: Mapping[str, Any] | None = None) -> list[Shown]:
    """The whole model's GEMM speedups in one mode (autocast or pre-quantized), ★ and ≈ by the one rule
    and its tie-break."""
    points = total_points(report, mode, precisions)
    verdict = pick(points, report, precisions, basis=GEMMS, gemm_mode=mode, loss_parity=loss_parity)
    row = [head(MODE_ROW_NAMES.get(mode, MODE_NAMES[mode]), verdict)]
    for p in precisions:
        total = report.total(mode, p)
        source = f"{PRECISIONS[p].display}, {MODE_NAMES[mode]}, {gpu}"
        if p in points:
            point = points[p]
            range_text = (f" (spread {point.low:.2f}–{point.high:.2f}×)"
                          if point.low is not None and point.high is not None else "")
            row.append(speed_cell(point, verdict, p, f"{point.value:.3f}× BF16{range_text}, {vocabulary.GEMMS} "
                                  f"summed over the model ({report.num_layers} layers): {source}",
                                  flag=report.speedup_flag(mode, p), notes=notes, where=source))
        else:
            status, reason = absent_status(p, mode, total.status if total.status != "measured" else "",
                                           total.reason or total.speedup_reason)
            row.append(absent_cell(status, reason, source, notes, explain=total.reason if status == SAME else ""))
    return row


def step_row(report: Report, precisions: Sequence[str], gpu: str, notes: answer_text.Notes, *, graphed: bool = True,
             routing: str = "balanced", loss_parity: Mapping[str, Any] | None = None) -> list[Shown]:
    """The training step's speedup (CUDA-graphed or eager) per precision; a step whose BF16 step
    failed reads failed, as its own failure would."""
    name = vocabulary.LAYER_STEP_TITLES[LAYER_MODES[1] if graphed else LAYER_MODES[0]]
    if routing != "balanced":
        name = f"{name}, {routing} routing"
    points = step_points(report, precisions, graphed=graphed, routing=routing)
    # the same rule and spread as the GEMM rows' ★ and ≈, and the same tie-break
    verdict = pick(points, report, precisions, basis=STEP, graphed=graphed, loss_parity=loss_parity)
    row = [head(name, verdict)]
    for p in precisions:
        source = f"{PRECISIONS[p].display}, {gpu}"
        if p in points:
            point = points[p]
            row.append(speed_cell(point, verdict, p, f"{point.value:.3f}× BF16 "
                                  f"(spread {point.low:.2f}–{point.high:.2f}×) for the whole layer step"
                                  f"{'' if graphed else ', eager'}: {source}",
                                  flag=report.step(p, graphed=graphed, routing=routing).cross_check_flag,
                                  notes=notes, where=f"{source}, {name.lower()}"))
            continue
        status, reason = step_absence(report, p, graphed=graphed, routing=routing)
        row.append(absent_cell(status, reason, f"{source}, {name.lower()}", notes))
    return row


def sqnr_row(report: Report, mode: str, precisions: Sequence[str], gpu: str, notes: answer_text.Notes) -> list[Shown]:
    """The accuracy: SQNR of the least accurate GEMM, per precision."""
    row = [head("Least SQNR, dB", None)]
    for p in precisions:
        source = f"{PRECISIONS[p].display}, {gpu}"
        sqnr = report.sqnr(mode, p)
        if sqnr is not None:
            row.append(Shown(f"{sqnr:.1f}", classes=("gemm-num",),
                             tooltip=f"{sqnr:.2f} dB, the layer's least accurate GEMM: {source}"))
        else:
            row.append(absent_cell("", report.sqnr_reason(mode, p), f"{source}, SQNR", notes))
    return row


def head(what: str, verdict: Fastest | None) -> Shown:
    """A row's first cell: what is timed, and "fastest: BF16" when no precision is clearly faster."""
    return Shown(what + (" · fastest: BF16" if verdict is not None and verdict.starred is None else ""), strong=True)


def speed_cell(point: Point, verdict: Fastest | None, precision: str, tooltip: str, *, flag: str | None = None,
               notes: answer_text.Notes | None = None, where: str = "") -> Shown:
    """A speedup cell: ★ on the answer, ≈ on one within the answer's measured spread (with why); a
    speedup resting on a time the profiler cross-check flags (``flag``) carries :data:`FLAG_MARK` after
    its number, the flag (with its ratio) in its tooltip and in the table's ``notes`` (saying
    ``where``: precision, mode and GPU) (issue 31)."""
    star = verdict is not None and precision == verdict.starred
    tied = verdict is not None and precision in verdict.tied
    why = ""
    tie = verdict.tie_break if verdict is not None else None
    if tie is not None and (star or tied):
        top = max(tie.measure, key=lambda p: tie.measure[p].value)
        why = (("; the largest of this row, but not beyond the measured spread of the pick" if precision == top else
                f"; within the measured spread of the fastest ({PRECISIONS[top].display}): not significantly slower")
               if tied else f"; this row does not tell {tie.names} apart (within the measured spread of the fastest)")
        why += f"; the tie-break ({TIE_RULE}) picks {PRECISIONS[tie.pick].display}: {tie.why}"
    elif tied and verdict is not None and verdict.answer == BASELINE:
        why = "; within the measured spread of BF16: not significantly faster"
    elif tied and verdict is not None:
        why = (f"; within the measured spread of the fastest ({PRECISIONS[verdict.answer].display}): "
               "not significantly slower")
    text = format_speedup(point.value) + (f" {FLAG_MARK}" if flag else "") + (" ★" if star else " ≈" if tied else "")
    classes = ("gemm-num", *(("gemm-fastest",) if star else ("gemm-tie",) if tied else ()),
               *(("gemm-flagged",) if flag else ()))
    if flag and notes is not None:
        notes.flag(f"{where}: {flag}")
    return Shown(text, strong=star, classes=classes, tooltip=tooltip + why + (f"; {FLAG_MARK} {flag}" if flag else ""))


def absent_cell(status: str, reason: str, source: str, notes: answer_text.Notes, *, explain: str = "") -> Shown:
    """A cell without a number: "failed", "same" (as FP8 Current) or "n/a", with a note mark; the reason
    is a numbered note under the table (text a phone reader can read, not hover-only), so a failed
    cell never reads as unsupported, and FP8 Delayed's pre-quantized GEMM (FP8 Current's GEMM) never
    as unsupported. ``explain``: why a "same as" cell is the other precision's."""
    full = unavailable_text(status, reason, limit=10_000)
    # "same" (its note says as what): "same as FP8 Current" widened a phone's column by half again
    word = "failed" if status == "failed" else "same" if status == SAME else "n/a"
    precision_only = status in ("unsupported", SAME)  # true of the precision on this GPU, not of one cell
    note = f"{source.split(',')[0] if precision_only else source}: {full}" + (f" ({explain})" if explain else "")
    mark = notes.mark(note)
    classes = ("gemm-num", "gemm-na", *((f"gemm-{status}",) if status else ()))
    return Shown(f"{word}{mark}", classes=classes, tooltip=f"{source}: {full}" + (f" ({explain})" if explain else ""))


# ------------------------------------------------------------------------------ SQNR once per pass
@dataclasses.dataclass(frozen=True)
class SqnrSection:
    """SQNR once per recipe and pass over every model and GPU shown; ``table`` None when none is measured."""

    table: Table | None
    title: str
    text: str


def sqnr_section(reports: Sequence[Report], models: int, mode: str, precisions: Sequence[str]) -> SqnrSection:
    """Each model's least accurate GEMM of each pass, as a range over every model and GPU shown (one
    number where they agree to the shown digit)."""
    shown = [BASELINE, *precisions]
    ranges = answer_text.sqnr_by_pass(reports, mode, shown)
    if not ranges:
        return SqnrSection(None, "", "No SQNR is measured in these results yet.")
    table = Table("Pass", [PRECISIONS[p].display for p in shown])
    for pass_ in PASSES:
        name = PASS_NAMES[pass_]
        row = [Shown(name, strong=True)]
        for p in shown:
            cell = ranges.get((p, pass_))
            row.append(Shown(cell.text, classes=("gemm-num",),
                             tooltip=f"{PRECISIONS[p].display}, {name}: least SQNR of the pass's GEMMs, "
                                     f"{cell.low:.2f} to {cell.high:.2f} dB over {cell.count} results")
                       if cell else Shown("n/a", classes=("gemm-num", "gemm-na")))
        table.row(row)
    width = max(r.high - r.low for r in ranges.values())
    count = max(r.count for r in ranges.values())
    title = (f"SQNR in dB per recipe and pass ({MODE_NAMES[mode].lower()}, Gaussian inputs), the least "
             f"accurate GEMM of each pass over {models} model{'s' if models != 1 else ''} and {count} results")
    text = (f"Every result's value lies within {width:.1f} dB of the others' for the same recipe and pass: "
            "the inputs are synthetic and the same for every model, so this table is shown once rather than "
            "per model." if count > 1 else "One result: a range needs several.")
    return SqnrSection(table, title, text)
