"""The report model: per-GEMM times, TFLOP/s, per-pass sums, totals and speedups vs BF16.

Pure arithmetic over a typed result (:class:`gemm_bench.results.typed.Result`: a document parsed once,
after the door's invariants; ``Report(doc)`` parses a document it is handed, ``Report(result)`` reads
the result as it is); the CLI prints it as text or JSON and the Sphinx extension renders it as tables,
figures and role values. Every number a reader sees is computed here, once.

Two rules keep those numbers right whatever the file holds:

* The page's question decides what is shown: its GEMMs (order included), its layer count and
  its kind. The file only supplies per-GEMM measurements, so two pages asking for 24 and 48
  layers of one model share a file and still show their own totals.
* A speedup divides two cells of one run only (see :func:`gemm_bench.results.schema.cell_run_id`);
  otherwise it is None, with a reason saying why, never a ratio of two runs' clocks.

Beside the times, and never in their place, it computes the quantities of issue 11: % of the
device's dense peak and the roofline prediction per cell (:mod:`gemm_bench.question.hardware`,
:mod:`gemm_bench.report.roofline`), the layer step with its GEMM share and Amdahl's law
(:mod:`gemm_bench.measure.step`), each precision's SQNR (:mod:`gemm_bench.measure.accuracy`) and the peers (their
own rows, never in TE's totals). A value a file does not hold is None with a reason ("not measured
in this result (method v1)"), never a number.

Nothing here raises on a document :func:`gemm_bench.results.schema.validate` accepts. Its ``Cell`` is the
page's view of a GEMM cell (on the page's GEMM, ``missing`` or ``unsupported`` where the result holds
none, its statistics as the mapping the renderers read), built from the stored
:class:`~gemm_bench.results.typed.Cell`; the two share the cross-check rule
(:func:`gemm_bench.results.cross_check.region_of`).
"""

from __future__ import annotations

import dataclasses
import statistics
import textwrap
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from gemm_bench.measure import step, telemetry
from gemm_bench.question import hardware
from gemm_bench.question.config import ModelConfig
from gemm_bench.question.precisions import (
    ALL_MODES,
    BASELINE,
    LAYER_MODES,
    MODE_NAMES,
    MODES,
    PRECISIONS,
    SAME_AS,
    gemm_modes,
    layer_modes,
)
from gemm_bench.question.shapes import OP_NAMES, PASS_NAMES, PASSES, GemmShape
from gemm_bench.question.vocabulary import LAYER_STEP_TITLES
from gemm_bench.report import roofline
from gemm_bench.report.model_step import ModelStep, model_step_summary
from gemm_bench.report.rounds import rounds_outcome
from gemm_bench.results import cross_check, energy, untrusted_text
from gemm_bench.results.accuracy_schema import ACCURACY_MODES, DISTRIBUTIONS
from gemm_bench.results.invariants import REFUSED
from gemm_bench.results.kernel_kinds import GEMM, QUANTIZATION
from gemm_bench.results.schema import KINDS, MAX_LAYERS, peer_format, peer_timed
from gemm_bench.results.typed import Cell as StoredCell
from gemm_bench.results.typed import LayerCell, Result, Stats, parse

Key = tuple[str, str]  # (mode, precision)

#: One layer's step in its two forms, as every page, table and the CLI name it (:mod:`gemm_bench.question.vocabulary`):
#: the report and compare title their sections with it. MODE_NAMES' "Layer step" stays the mode's name
#: where a mode is named (tabs, ``--modes``).
STEP_WORDS = LAYER_STEP_TITLES


@dataclasses.dataclass(frozen=True)
class Cell:
    mode: str
    precision: str
    gemm: GemmShape
    status: str
    ms: float | None
    reason: str
    stats: dict[str, Any]
    #: The run that measured it ("" for a cell the document does not hold).
    run_id: str = ""
    #: Method v4: the same region's eager (host-inclusive) median, and its profiled kernel time.
    eager_ms: float | None = None
    kernel_ms: float | None = None
    #: The profiled rounds' event median over ``kernel_ms`` (None in results that profiled every round).
    kernel_ratio: float | None = None

    @property
    def cross_check(self) -> cross_check.Region | None:
        """This time's profiler cross-check (:func:`gemm_bench.results.cross_check.region_of`, the rule the
        typed cell's :attr:`~gemm_bench.results.typed.Outcome.cross_check` applies), None if unchecked."""
        return cross_check.region_of(self.status, self.ms, self.kernel_ms, self.kernel_ratio)

    @property
    def cross_check_flag(self) -> str | None:
        """Why this time is not plainly the GPU's time for the region (a judged region over the bound),
        with its ratio; None when it holds, is too short to judge, or was not checked. Every renderer
        marks a number whose flag (or :meth:`Report.speedup_flag`) is set."""
        found = self.cross_check
        return found.flag if found is not None else None

    @property
    def tflops(self) -> float | None:
        if self.status != "measured" or not self.ms:
            return None
        return hardware.achieved_tflops(self.gemm.flops, self.ms)


@dataclasses.dataclass(frozen=True)
class Total:
    mode: str
    precision: str
    #: Sum over the layer's GEMMs per pass (None when a GEMM of that pass is not measured).
    pass_ms: dict[str, float | None]
    per_layer_ms: float | None
    model_ms: float | None
    speedup_vs_bf16: float | None
    status: str
    reason: str
    #: Why ``speedup_vs_bf16`` is None ("" when it is a number).
    speedup_reason: str = ""
    #: The one run all of this precision's cells come from, or None (none measured, or several).
    run_id: str | None = None
    #: The cross-check flags of the times this total and its speedup rest on (this precision's
    #: cells and BF16's), None when none is flagged (:meth:`Report.speedup_flag`).
    cross_check_flag: str | None = None


@dataclasses.dataclass(frozen=True)
class StepResult:
    """One precision's layer step (``layer`` or ``layer-graphed``), with Amdahl's law beside it."""

    mode: str
    precision: str
    #: measured, failed, unsupported or missing (the file holds no such cell).
    status: str
    reason: str
    step_ms: float | None
    stats: dict[str, Any]
    #: BF16 step time / this precision's, both from one run (1.0 for BF16 itself).
    speedup_vs_bf16: float | None
    speedup_reason: str
    #: The 12 BF16 autocast GEMM times of this question / the BF16 step time (same run).
    gemm_share: float | None
    gemm_share_reason: str
    #: This precision's summed autocast GEMM time, and BF16's sum over it (same run as the step).
    gemm_ms: float | None
    gemm_speedup: float | None
    #: What Amdahl's law predicts for the step from ``gemm_share`` and ``gemm_speedup``.
    amdahl_speedup: float | None
    #: "With FP8 Current, the layer's GEMMs get 1.70x and the whole step 1.40x, because ..."
    sentence: str | None
    run_id: str | None
    #: The relative spread (IQR / median) of this step plus BF16's: how far the speedup is known.
    spread: float | None = None
    #: The cross-check flag of this step's time, and of BF16's step its speedup divides by (a graphed
    #: step is a region like any other); None when neither is flagged. Marked wherever it is shown.
    cross_check_flag: str | None = None


@dataclasses.dataclass(frozen=True)
class PeerRow:
    """One peer's timing of one GEMM pass (``gemm`` peers) or Linear region (``linear`` peers)."""

    backend: str
    #: The peer's own label of what it computes in ("BF16", "FP8 rowwise"), not a TE precision id.
    precision: str
    kind: str
    op: str
    #: The pass (``gemm``), or ``fprop``/``backward`` (``linear``: backward is Dgrad + Wgrad).
    pass_: str
    m: int
    k: int
    n: int
    groups: int
    flops: int
    status: str
    ms: float | None
    reason: str
    run_id: str
    tflops: float | None
    pct_of_peak: float | None
    pct_of_peak_reason: str
    #: The row's profiler cross-check flag (a peer's region is judged like TE's), None when it holds.
    cross_check_flag: str | None = None

    def to_dict(self) -> dict[str, Any]:
        out = dataclasses.asdict(self)
        out["pass"] = out.pop("pass_")
        return out


class Report:
    """A view of one result document (or its typed :class:`~gemm_bench.results.typed.Result`) for the
    question a page asked.

    ``gemms``, ``num_layers`` and ``kind`` are the page's (defaults: the document's); ``gemms``
    must be the document's question, in any order, else :class:`ValueError`. ``modes`` and
    ``precisions`` are what was asked, as asked; by default whatever the document holds.
    ``config`` is the page's model (default: the one the result stores): the fields left out of the
    question's hash (G, the layer count, the vocabulary) may differ from the stored ones, and the
    page's win (issue 43), so the model step is composed for the page's G and layers.
    """

    def __init__(
        self,
        doc: dict[str, Any] | Result,
        *,
        gemms: Sequence[GemmShape] | None = None,
        num_layers: int | None = None,
        kind: str | None = None,
        modes: Sequence[str] | None = None,
        precisions: Sequence[str] | None = None,
        config: ModelConfig | None = None,
    ) -> None:
        # A reader that holds the typed result hands it over (read once, not parsed again); a document
        # (a run's fresh one, a test's) is parsed here, through the door's invariants.
        result = doc if isinstance(doc, Result) else parse(doc)
        #: The result, typed (:func:`gemm_bench.results.typed.parse`): every method reads it, and so do
        #: the readers of a report.
        self.result: Result = result
        stored = list(result.gemms)
        if gemms is None:
            self.gemms = stored
        else:
            self.gemms = list(dict.fromkeys(gemms))
            if set(self.gemms) != set(stored):
                raise ValueError(f"the page asks for {len(self.gemms)} GEMMs that are not the question of "
                                 f"result {result.question_hash} ({len(stored)} GEMMs)")
        if num_layers is None:
            num_layers = result.num_layers
        if isinstance(num_layers, bool) or not isinstance(num_layers, int) or not 1 <= num_layers <= MAX_LAYERS:
            raise ValueError(f"num_layers must be a whole number from 1 to {MAX_LAYERS}, got {num_layers!r}")
        self.num_layers: int = num_layers
        self.kind: str = kind if kind is not None else result.kind
        if self.kind not in KINDS:
            raise ValueError(f"kind must be one of {', '.join(KINDS)}, got {self.kind!r}")
        asked = list(dict.fromkeys(modes)) if modes else None
        unknown = [m for m in asked or () if m not in ALL_MODES]
        #: The per-GEMM modes shown (tables of cells); the layer modes asked are :attr:`layer_modes`.
        self.modes = (gemm_modes(asked) if asked is not None
                      else [m for m in MODES if any(c.mode == m for c in result.cells)])
        #: The whole-layer modes shown (:meth:`step`): asked, or those the file holds.
        self.layer_modes = (layer_modes(asked) if asked is not None
                            else [m for m in LAYER_MODES if any(c.mode == m for c in result.layer)])
        self.precisions = list(dict.fromkeys(precisions)) if precisions else result.cached_precisions()
        unknown += [p for p in self.precisions if p not in PRECISIONS]
        if unknown:
            raise ValueError(f"unknown mode or precision: {', '.join(map(repr, unknown))}")
        by_gemm = {(g.op, g.pass_): g for g in self.gemms}
        self._cells: dict[tuple[str, str, str, str], Cell] = {
            (c.mode, c.precision, c.op, c.pass_): _view_cell(c, by_gemm[(c.op, c.pass_)]) for c in result.cells}
        #: The page's model config (default: the result's stored one, with ``num_layers`` the layers
        #: asked, so ``gemm-bench report --num-layers`` scales the model step as it scales the GEMM
        #: totals; None for manual shapes and sweeps).
        if config is None:
            config = result.config
            if config is not None and config.measured_layers != self.num_layers:
                config = dataclasses.replace(config, num_layers=self.num_layers + config.dense_layers)
        self.config: ModelConfig | None = config
        self._layer = {(c.mode, c.precision, c.routing): c for c in result.layer}
        self._accuracy = {(c.mode, c.precision, c.op, c.pass_, c.distribution): c for c in result.accuracy}
        #: The file's profiler cross-check (:meth:`gemm_bench.results.typed.Result.cross_check`): its
        #: ``file_flag`` is what the file's page says when the median breaks the bound.
        self.cross_check: cross_check.Verdict = result.cross_check()

    # ------------------------------------------------------------------ lookups
    def cell(self, mode: str, precision: str, gemm: GemmShape) -> Cell:
        """The stored cell; else ``unsupported`` where the registry or the device's recorded
        support says so (with that reason), else ``missing``."""
        found = self._cells.get((mode, precision, gemm.op, gemm.pass_))
        if found is not None:
            return found
        reason = self.result.unstored_reason(mode, precision)
        if reason is not None:
            return Cell(mode, precision, gemm, "unsupported", None, reason, {})
        return Cell(mode, precision, gemm, "missing", None, "not measured in this result", {})

    def cells(self, mode: str, precision: str) -> list[Cell]:
        return [self.cell(mode, precision, g) for g in self.gemms]

    def status(self, mode: str, precision: str) -> tuple[str, str]:
        """Overall status of one (mode, precision): measured only if every GEMM is."""
        cells = self.cells(mode, precision)
        for status in ("unsupported", "failed", "missing"):
            bad = [c for c in cells if c.status == status]
            if bad:
                return status, bad[0].reason
        return "measured", ""

    def failures(self) -> list[tuple[str, str, str]]:
        """(row, precision, reason) of each failed measurement of the shown precisions a page may show
        (:func:`gemm_bench.results.failed.failed_cells`: the shown per-GEMM modes, both layer-step
        modes, the model step's parts, the energy): what makes the result failed, as the refresh
        plans it."""
        return self.result.failed_cells([*self.modes, *self.layer_modes], self.precisions)

    def missing_cells(self) -> list[tuple[str, str, GemmShape]]:
        return [
            (m, p, g)
            for m in self.modes
            for p in self.precisions
            for g in self.gemms
            if self.cell(m, p, g).status == "missing"
        ]

    def run_ids(self) -> list[str]:
        """The runs the shown cells come from, sorted."""
        return sorted({c.run_id for m in self.modes for p in self.precisions for c in self.cells(m, p) if c.run_id})

    # ------------------------------------------------------------------ speedups
    def _speedup(self, mode: str, precision: str, gemms: list[GemmShape], what: str) -> tuple[float | None, str]:
        """BF16's summed time over ``precision``'s for ``gemms``, only within one run."""
        if not gemms:
            return None, f"the question has no {what}"
        name = PRECISIONS[precision].display
        mine = [self.cell(mode, precision, g) for g in gemms]
        base = [self.cell(mode, BASELINE, g) for g in gemms]
        for label, group in ((name, mine), (PRECISIONS[BASELINE].display, base)):
            bad = next((c for c in group if c.status != "measured" or not c.ms), None)
            if bad is not None:
                return None, f"{label} {what} is {bad.status}: {bad.reason}"
        runs = sorted({c.run_id for c in mine + base})
        if len(runs) != 1:
            return None, (f"BF16 and {name} {what} come from different measurement runs ({', '.join(runs)}); "
                          "a speedup across runs would compare two runs' clocks")
        return sum(c.ms or 0.0 for c in base) / sum(c.ms or 0.0 for c in mine), ""

    def time_flag(self, mode: str, precision: str, gemms: Sequence[GemmShape] | None = None) -> str | None:
        """The cross-check flags of ``precision``'s times over ``gemms`` (default: all of the
        question's), which a time or a sum of them rests on; None when none is flagged."""
        return self._flags(mode, (precision,), gemms)

    def speedup_flag(self, mode: str, precision: str, gemms: Sequence[GemmShape] | None = None) -> str | None:
        """The cross-check flags of the times a speedup of ``precision`` over ``gemms`` (default: all
        of the question's) rests on: its own cells and BF16's; None when none is flagged."""
        return self._flags(mode, tuple(dict.fromkeys((precision, BASELINE))), gemms)

    def _flags(self, mode: str, precisions: Sequence[str], gemms: Sequence[GemmShape] | None) -> str | None:
        cells = [self.cell(mode, p, g) for p in precisions for g in (self.gemms if gemms is None else gemms)]
        return flags_sentence([(f"{_display(c.precision)} {c.gemm.op}/{c.gemm.pass_}", c.cross_check_flag)
                               for c in cells])

    def gemm_speedup(self, mode: str, precision: str, gemm: GemmShape) -> float | None:
        """BF16's time for one GEMM over this precision's (same run only)."""
        return self._speedup(mode, precision, [gemm], f"{gemm.op}/{gemm.pass_}")[0]

    def gemm_speedup_reason(self, mode: str, precision: str, gemm: GemmShape) -> str:
        """Why :meth:`gemm_speedup` is None ("" when it is a number)."""
        return self._speedup(mode, precision, [gemm], f"{gemm.op}/{gemm.pass_}")[1]

    def pass_speedup(self, mode: str, precision: str, pass_: str) -> float | None:
        """BF16's time for one pass (Fprop, Dgrad or Wgrad) over this precision's (same run only)."""
        return self._speedup(mode, precision, self._pass_gemms(pass_), PASS_NAMES.get(pass_, pass_))[0]

    def pass_speedup_reason(self, mode: str, precision: str, pass_: str) -> str:
        """Why :meth:`pass_speedup` is None ("" when it is a number)."""
        return self._speedup(mode, precision, self._pass_gemms(pass_), PASS_NAMES.get(pass_, pass_))[1]

    def _pass_gemms(self, pass_: str) -> list[GemmShape]:
        return [g for g in self.gemms if g.pass_ == pass_]

    def find_gemm(self, text: str) -> GemmShape:
        """A GEMM named ``op/pass`` (``mlp_up/fprop``) or by its ``MxKxN`` label."""
        text = text.strip()
        for g in self.gemms:
            if text in (f"{g.op}/{g.pass_}", f"{g.op}.{g.pass_}", g.label, g.op):
                return g
        raise KeyError(text)

    # ------------------------------------------------------------------ totals
    def total(self, mode: str, precision: str) -> Total:
        cells = self.cells(mode, precision)
        status, reason = self.status(mode, precision)
        pass_ms: dict[str, float | None] = {}
        for pass_ in PASSES:
            chosen = [c for c in cells if c.gemm.pass_ == pass_]
            if chosen:
                pass_ms[pass_] = (sum(c.ms or 0.0 for c in chosen)
                                  if all(c.status == "measured" for c in chosen) else None)
        per_layer = sum(c.ms or 0.0 for c in cells) if status == "measured" else None
        model = per_layer * self.num_layers if per_layer is not None else None
        if precision == BASELINE:
            speedup, why = (1.0, "") if per_layer is not None else (None, f"BF16 is {status}: {reason}")
        else:
            speedup, why = self._speedup(mode, precision, self.gemms, "GEMMs")
        runs = {c.run_id for c in cells if c.run_id}
        return Total(mode, precision, pass_ms, per_layer, model, speedup, status, reason, why,
                     runs.pop() if len(runs) == 1 else None, self.speedup_flag(mode, precision))

    def totals(self) -> list[Total]:
        return [self.total(m, p) for m in self.modes for p in self.precisions]

    # ------------------------------------------------------------------ hardware: % of peak, roofline
    @property
    def device(self) -> str:
        return self.result.device.name

    def _not_measured(self, c: Cell) -> str:
        name = PRECISIONS[c.precision].display if c.precision in PRECISIONS else c.precision
        return f"{name} {c.gemm.op}/{c.gemm.pass_} is {c.status}: {c.reason}"

    def _no_peak(self, precision: str) -> str:
        spec = hardware.spec_for(self.device)
        if spec is None:
            return (f"no published peak for {self.device} in gemm_bench.question.hardware "
                    f"(known: {', '.join(s.name for s in hardware.SPECS.values())})")
        fmt = hardware.precision_format(precision)
        return f"{spec.name} has no {fmt.upper()} tensor cores"

    def pct_of_peak(self, mode: str, precision: str, gemm: GemmShape) -> float | None:
        """The cell's TFLOP/s as a % of the device's dense peak for its format (None: see reason)."""
        return self._pct(self.cell(mode, precision, gemm))[0]

    def pct_of_peak_reason(self, mode: str, precision: str, gemm: GemmShape) -> str:
        return self._pct(self.cell(mode, precision, gemm))[1]

    def _of_measured(self, c: Cell, value: Callable[[Cell, float], float | None]) -> tuple[float | None, str]:
        """``value(c, c.ms)`` of a measured cell, else None and why: not measured, or None from
        ``value`` because the device has no peak for the cell's format."""
        if c.status != "measured" or not c.ms:
            return None, self._not_measured(c)
        result = value(c, c.ms)
        return (result, "") if result is not None else (None, self._no_peak(c.precision))

    def _pct(self, c: Cell) -> tuple[float | None, str]:
        return self._of_measured(c, lambda c, ms: hardware.pct_of_peak(c.gemm.flops, ms, self.device, c.precision))

    def roofline(self, mode: str, precision: str, gemm: GemmShape) -> roofline.Prediction | None:
        """The roofline prediction of a cell (its GEMM and, in autocast, its quantization kernels).

        A prediction exists for a cell that was not measured too; it is shown beside a
        measurement, never instead of one (:meth:`roofline_ms` is None for an unmeasured cell).
        """
        if mode not in roofline.MODES:
            return None
        return roofline.predict(gemm, precision, mode, self.device)

    def roofline_ms(self, mode: str, precision: str, gemm: GemmShape) -> float | None:
        """The roofline-predicted time of a *measured* cell, to set beside its measured time."""
        return self._roof(self.cell(mode, precision, gemm))[0]

    def roofline_reason(self, mode: str, precision: str, gemm: GemmShape) -> str:
        return self._roof(self.cell(mode, precision, gemm))[1]

    def _roof(self, c: Cell) -> tuple[float | None, str]:
        def predicted(c: Cell, ms: float) -> float | None:
            prediction = self.roofline(c.mode, c.precision, c.gemm)
            return prediction.total_ms if prediction is not None else None

        return self._of_measured(c, predicted)

    # ------------------------------------------------------------------ the layer step
    def _method_lacks(self, key: str) -> str | None:
        """The reason a quantity is absent because the file's method predates it, else None."""
        if key in self.result.provenance.method:
            return None
        return f"not measured in this result (method v{self.result.method_version})"

    def _layer_cell(self, mode: str, precision: str,
                    routing: str = "balanced") -> tuple[LayerCell | None, str, str]:
        """(the stored cell or None, status, reason) of one layer-step cell of ``routing``."""
        found = self._layer.get((mode, precision, routing))
        if found is not None:
            return found, found.status, found.reason
        if self.kind != "model" or self.result.config is None:
            return None, "unsupported", step.unsupported_reason(None) or ""
        if self.config is not None and routing not in step.routings(self.config):
            return None, "unsupported", f"{routing} routing: this layer has no experts to route tokens to"
        why = step.unsupported_reason(self.config) if self.config is not None else None
        if why:
            return None, "unsupported", why
        verdict = self.result.support.get(precision)
        if verdict is not None and not verdict.available:
            return None, "unsupported", verdict.reason or f"{PRECISIONS[precision].display} is not supported"
        lacks = self._method_lacks("layer_step")
        if lacks:
            return None, "missing", lacks
        return None, "missing", f"not measured in this result (gemm-bench run --modes {mode})"

    def _autocast_gemm_ms(self, precision: str, run: str) -> tuple[float | None, str]:
        """Sum of the layer's autocast GEMM times, when all are measured in ``run``."""
        cells = self.cells("autocast", precision)
        bad = next((c for c in cells if c.status != "measured" or not c.ms), None)
        if bad is not None:
            return None, f"autocast {self._not_measured(bad)}"
        runs = {c.run_id for c in cells}
        if runs != {run}:
            return None, (f"the autocast GEMMs ({', '.join(sorted(runs))}) and the layer step ({run}) come "
                          "from different measurement runs")
        return sum(c.ms or 0.0 for c in cells), ""

    def step(self, precision: str, graphed: bool = False, routing: str = "balanced") -> StepResult:
        """The layer step of one precision: time, speedup vs BF16 and the GEMM share of the BF16 step.

        Every ratio is within one run: the step speedup divides two layer cells of one run, and the
        GEMM share divides the 12 BF16 autocast GEMM times of this question by the BF16 step time
        of the same run. ``sentence`` is Amdahl's law in words (:meth:`gemm_bench.measure.step.StepSummary.sentence`).
        ``routing`` picks a mixture of experts' routing (:data:`gemm_bench.measure.step.ROUTINGS`): the
        headline is ``balanced``; the GEMM share and Amdahl's prediction are about the balanced GEMMs.
        """
        if precision not in PRECISIONS:
            raise ValueError(f"unknown precision {precision!r}")
        if routing not in step.ROUTINGS:
            raise ValueError(f"unknown routing {routing!r}; choose from {', '.join(step.ROUTINGS)}")
        mode = LAYER_MODES[1] if graphed else LAYER_MODES[0]
        raw, status, reason = self._layer_cell(mode, precision, routing)
        base, base_status, base_reason = self._layer_cell(mode, BASELINE, routing)
        run = raw.run_id if raw is not None else None
        ms = raw.ms if raw is not None and status == "measured" else None
        stats = raw.stats if raw is not None and status == "measured" else None
        # speedup: two layer cells of one run
        speedup, speedup_reason = None, ""
        base_run = base.run_id if base is not None else None
        if ms is None:
            speedup_reason = f"{PRECISIONS[precision].display} step is {status}: {reason}"
        elif base is None or base_status != "measured":
            speedup_reason = f"BF16 step is {base_status}: {base_reason}"
        elif base_run != run:
            speedup_reason = (f"BF16 and {PRECISIONS[precision].display} steps come from different measurement "
                              f"runs ({base_run}, {run})")
        elif base.ms is not None:
            speedup = base.ms / ms
        # GEMM share of the BF16 step, from the same run
        share, share_reason, bf16_gemm = None, "", None
        if routing != "balanced":
            share_reason = "the GEMM share is stated for the balanced routing, whose GEMMs the question times"
        elif base is None or base_status != "measured" or base_run is None:
            share_reason = f"BF16 step is {base_status}: {base_reason}"
        else:
            bf16_gemm, share_reason = self._autocast_gemm_ms(BASELINE, base_run)
            if bf16_gemm is not None and base.ms is not None:
                share = bf16_gemm / base.ms
        gemm_ms, gemm_speedup, amdahl_speedup, sentence = None, None, None, None
        if base_run is not None and share is not None:
            mine, _ = self._autocast_gemm_ms(precision, base_run)
            summary = step.summarize(
                [c for c in (base, raw) if c is not None and c.run_id == base_run],
                {BASELINE: bf16_gemm, precision: mine}, mode=mode)
            row = next((r for r in summary.rows if r.precision == precision), None)
            if row is not None:
                gemm_ms, gemm_speedup, amdahl_speedup = row.gemm_ms, row.gemm_speedup, row.amdahl_speedup
                if share <= 1 and precision != BASELINE:
                    sentence = summary.sentence(precision)
        elif precision == BASELINE:
            gemm_ms = bf16_gemm
        spread = None
        if speedup is not None and base is not None:
            spread = _relative_iqr(stats) + _relative_iqr(base.stats)
        pairs = [(precision, raw)] + ([(BASELINE, base)] if precision != BASELINE else [])
        flags = [(f"{_display(p)} step", c.cross_check_flag) for p, c in pairs if c is not None]
        return StepResult(mode, precision, status, reason, ms, _stats_mapping(stats), speedup, speedup_reason, share,
                          share_reason, gemm_ms, gemm_speedup, amdahl_speedup, sentence, run, spread,
                          flags_sentence(flags))

    def step_contradictions(self) -> list[str]:
        """Every step the report shows whose speedup lies above what Amdahl's law allows, by more
        than the spread of the two step times: a step whose GEMMs get faster cannot gain more than
        its GEMMs (method v3 published Qwen2.5-7B's step at 1.43x over GEMMs at 1.13x), and a step
        whose GEMMs get slower cannot get faster than BF16; between the GEMMs' speedup and 1 is what
        the law predicts (the rest of the step is unchanged). Such a pair is a measurement problem,
        never something to publish silently."""
        problems = []
        for result in self.steps():
            if result.precision == BASELINE or result.speedup_vs_bf16 is None or result.gemm_speedup is None:
                continue
            inside = self.in_step_gemm_speedup(result.mode, result.precision)
            bound = max(result.gemm_speedup, inside or 0.0)
            allowed = max(bound, 1.0) * (1 + (result.spread or 0.0))
            if result.speedup_vs_bf16 > allowed:
                limit = (f"its GEMMs only {result.gemm_speedup:.2f}x" if result.gemm_speedup >= 1
                         else f"its GEMMs {result.gemm_speedup:.2f}x (slower than BF16)")
                if inside is not None:
                    limit += f" alone and {inside:.2f}x with their quantization inside the step"
                problems.append(
                    f"{STEP_WORDS[result.mode]} {PRECISIONS[result.precision].display}: the step gains "
                    f"{result.speedup_vs_bf16:.2f}x but {limit}, beyond the steps' spread "
                    f"({(result.spread or 0.0):.1%})")
        return problems

    def in_step_gemm_speedup(self, mode: str, precision: str) -> float | None:
        """The speedup over BF16 of the GEMM and quantization kernels inside the layer step itself, from the two
        steps' profiled breakdowns (:mod:`gemm_bench.results.breakdown`), or None where either lacks one or
        had its parts scaled to the step (then they are not a measurement independent of the step's time).

        Why a second bound (session 19): the autocast GEMM rows time each op alone, and for a mixture of
        experts' grouped FP8 GEMMs they do not reproduce the step's own GEMMs. gpt-oss-120b at EP 8 on an H200
        read FP8 Delayed's layer step at 1.02x over GEMM rows at 0.99x, while inside the step its GEMM and
        quantization kernels ran 1.04x faster than BF16's. Why is not known: an L2 flush before each row is
        not it (a probe timed the same grouped forward and backward cold and warm within 0.5%:
        ``measurements/2026-11-29-session19/call2-l2-probe``). A step contradicts its GEMMs only where it
        gains beyond both measurements of what its GEMMs (with their quantization) gain."""
        cells = [self._layer_cell(mode, p, "balanced")[0] for p in (precision, BASELINE)]
        parts = []
        for cell in cells:
            block = cell.breakdown if cell is not None and cell.status == "measured" else None
            if block is None or block.scaled_by is not None:
                return None
            parts.append(block.parts_ms.get(GEMM, 0.0) + block.parts_ms.get(QUANTIZATION, 0.0))
        mine, base = parts
        return base / mine if mine > 0 and base > 0 else None

    def steps(self, *, default: bool = False) -> list[StepResult]:
        """Every (layer mode, precision) the report shows; with ``default``, the eager ``layer``
        mode when none is shown (so a file without a layer step says why, per precision)."""
        modes = self.layer_modes or ([LAYER_MODES[0]] if default else [])
        return [self.step(p, graphed=m == LAYER_MODES[1]) for m in modes for p in self.precisions]

    # ------------------------------------------------------------------ the model's step
    def model_step(self, config: ModelConfig | None = None) -> ModelStep | None:
        """The model's step of this result for ``config`` (the page's question: its G and
        layers; default the stored config), or None where the result has none that answers it
        (:func:`gemm_bench.report.model_step.model_step_summary`)."""
        return model_step_summary(self.result, config if config is not None else self.config)

    # ------------------------------------------------------------------ accuracy
    def _accuracy_cell(self, mode: str, precision: str, gemm: GemmShape, distribution: str) -> tuple[float | None, str]:
        found = self._accuracy.get((mode, precision, gemm.op, gemm.pass_, distribution))
        if found is not None:
            if found.measured and found.sqnr_db is not None:
                return found.sqnr_db, ""
            return None, f"{found.status}: {found.reason}"
        info = PRECISIONS[precision]
        if not info.has_mode(mode) and mode in info.absent_modes:
            return None, f"unsupported: {info.absent_modes[mode]}"
        verdict = self.result.support.get(precision)
        if verdict is not None and not verdict.available:
            return None, f"unsupported: {verdict.reason or info.display + ' is not supported'}"
        lacks = self._method_lacks("accuracy")
        if lacks:
            return None, lacks
        return None, "not measured in this result (gemm-bench run --accuracy)"

    def _sqnr(self, mode: str, precision: str, gemm: GemmShape | None, distribution: str) -> tuple[float | None, str]:
        if mode not in ACCURACY_MODES:
            raise ValueError(f"accuracy is measured per GEMM in {', '.join(ACCURACY_MODES)}, not {mode!r}")
        if precision not in PRECISIONS:
            raise ValueError(f"unknown precision {precision!r}")
        if distribution not in DISTRIBUTIONS:
            raise ValueError(f"unknown distribution {distribution!r}; choose from {', '.join(DISTRIBUTIONS)}")
        gemms = [gemm] if gemm is not None else self.gemms
        values = []
        for g in gemms:
            value, reason = self._accuracy_cell(mode, precision, g, distribution)
            if value is None:
                return None, f"{PRECISIONS[precision].display} {g.op}/{g.pass_} SQNR is {reason}"
            values.append(value)
        return min(values), ""

    def sqnr(self, mode: str, precision: str, gemm: GemmShape | None = None,
             distribution: str = "gaussian") -> float | None:
        """SQNR in dB of one GEMM's output against the FP32 reference; with no ``gemm``, the
        minimum over the question's GEMMs (the worst pass a training step runs: a recipe is as
        accurate as its least accurate GEMM). None, with :meth:`sqnr_reason`, unless every GEMM
        asked for is measured."""
        return self._sqnr(mode, precision, gemm, distribution)[0]

    def sqnr_reason(self, mode: str, precision: str, gemm: GemmShape | None = None,
                    distribution: str = "gaussian") -> str:
        return self._sqnr(mode, precision, gemm, distribution)[1]

    def sqnr_status(self, mode: str, precision: str, gemm: GemmShape | None = None,
                    distribution: str = "gaussian") -> str:
        """``measured`` when :meth:`sqnr` is a number, else the status of the first accuracy cell
        that is not (``failed``, ``unsupported``, ``missing``): a failed SQNR reads failed."""
        for g in [gemm] if gemm is not None else self.gemms:
            found = self._accuracy.get((mode, precision, g.op, g.pass_, distribution))
            if found is None:
                return "unsupported" if self._accuracy_cell(mode, precision, g, distribution)[1].startswith(
                    "unsupported") else "missing"
            if found.status != "measured":
                return found.status
        return "measured"

    def accuracy_modes(self) -> list[str]:
        """The GEMM modes shown that have accuracy (autocast, prequant)."""
        return [m for m in self.modes if m in ACCURACY_MODES]

    # ------------------------------------------------------------------ peers
    def peers(self) -> list[PeerRow]:
        """The peers' rows, as stored: their own section, never part of TE's totals or speedups."""
        rows = []
        by_gemm = {(g.op, g.pass_): g for g in self.gemms}
        for peer in self.result.peers:
            timed = peer_timed(by_gemm, peer.kind, peer.op, peer.pass_)
            assert timed is not None, "the schema holds every peer to a GEMM of the question"
            shape, flops = timed
            ms = peer.ms if peer.status == "measured" else None
            label = peer.label
            fmt = peer_format(label)
            pct, pct_reason = None, ""
            if ms is None:
                pct_reason = f"{peer.status}: {peer.reason}"
            elif fmt is None:
                pct_reason = f"no tensor-core format known for the label {label!r}"
            else:
                pct = hardware.pct_of_peak(flops, ms, self.device, fmt)
                if pct is None:
                    pct_reason = self._no_peak(fmt)
            rows.append(PeerRow(
                backend=peer.backend, precision=label, kind=peer.kind, op=peer.op, pass_=peer.pass_,
                m=shape.m, k=shape.k, n=shape.n, groups=shape.groups, flops=flops, status=peer.status,
                ms=ms, reason=peer.reason, run_id=peer.run_id,
                tflops=hardware.achieved_tflops(flops, ms) if ms else None, pct_of_peak=pct,
                pct_of_peak_reason=pct_reason, cross_check_flag=peer.cross_check_flag,
            ))
        return rows

    # ------------------------------------------------------------------ output
    def to_json(self) -> dict[str, Any]:
        """The ``gemm-bench report --json`` object: the page's question, each value's run id.

        Per cell: ``pct_of_peak`` and ``roofline_ms`` (and ``sqnr_db`` per distribution), each None
        with a ``*_reason`` when absent; then the layer ``steps``, the ``accuracy`` aggregates, the
        ``peers`` (never in ``totals``), the device's ``peaks`` and the ``roofline_method``.
        """
        result, prov = self.result, self.result.provenance
        spec = hardware.spec_for(self.device)
        return {
            "question_hash": result.question_hash,
            "kind": self.kind,
            "device": {
                "name": result.device.name,
                "compute_capability": result.device.compute_capability,
            },
            "provenance": {
                "torch": prov.torch,
                "transformer_engine": prov.transformer_engine,
                "cuda": prov.cuda,
                "driver": prov.driver,
                "date": prov.date,
                "method": dict(prov.method),
            },
            "num_layers": self.num_layers,
            "run_ids": self.run_ids(),
            "notes": list(result.notes),
            "cells": [
                {
                    "mode": c.mode,
                    "precision": c.precision,
                    "op": c.gemm.op,
                    "pass": c.gemm.pass_,
                    "m": c.gemm.m,
                    "k": c.gemm.k,
                    "n": c.gemm.n,
                    "groups": c.gemm.groups,
                    "status": c.status,
                    "ms": c.ms,
                    "tflops": c.tflops,
                    "reason": c.reason or None,
                    "run_id": c.run_id or None,
                    **self._cell_extras(c),
                }
                for m in self.modes
                for p in self.precisions
                for c in self.cells(m, p)
            ],
            "totals": [
                {
                    "mode": t.mode,
                    "precision": t.precision,
                    "status": t.status,
                    "pass_ms": t.pass_ms,
                    "per_layer_ms": t.per_layer_ms,
                    "model_ms": t.model_ms,
                    "speedup_vs_bf16": t.speedup_vs_bf16,
                    "speedup_reason": t.speedup_reason or None,
                    "run_id": t.run_id,
                }
                for t in self.totals()
            ],
            "peers": [row.to_dict() for row in self.peers()],
            "peaks": {
                "device": spec.to_dict() if spec is not None else None,
                "reason": "" if spec is not None else self._no_peak(BASELINE),
                "note": hardware.DENSE_NOTE,
            },
            "roofline_method": roofline.method(),
            "steps": [_step_json(r) for r in self.steps(default=True)],
            "accuracy": {
                "method": None if result.accuracy_method is None else dict(result.accuracy_method),
                "aggregate": "sqnr_db is the minimum over the question's GEMMs (the least accurate pass)",
                "rows": [
                    {"mode": m, "precision": p, "distribution": d, "sqnr_db": self.sqnr(m, p, distribution=d),
                     "reason": self.sqnr_reason(m, p, distribution=d) or None,
                     "same_as": SAME_AS.get((p, m)) if self._same_as(m, p) else None}
                    for m in self.accuracy_modes() for p in self.precisions for d in DISTRIBUTIONS
                ],
            },
        }

    def _cell_extras(self, c: Cell) -> dict[str, Any]:
        """% of peak, roofline and SQNR of one cell, each None with its reason when absent."""
        pct, pct_reason = self._pct(c)
        roof, roof_reason = self._roof(c)
        out: dict[str, Any] = {"pct_of_peak": pct, "pct_of_peak_reason": pct_reason or None,
                               "roofline_ms": roof, "roofline_reason": roof_reason or None}
        if c.mode in ACCURACY_MODES:
            out["sqnr_db"] = {d: self.sqnr(c.mode, c.precision, c.gemm, d) for d in DISTRIBUTIONS}
            out["sqnr_reason"] = {d: self.sqnr_reason(c.mode, c.precision, c.gemm, d) or None for d in DISTRIBUTIONS}
        return out

    def to_text(self, *, lead: Sequence[str] = (), after_steps: Sequence[str] = ()) -> str:
        """The report as lines of text at most :data:`TEXT_WIDTH` columns (a longer line, a note or a
        reason, wraps under its own indent); every line is one line whatever a result file's strings
        hold (a newline or an escape sequence in a device name or reason is shown escaped).

        ``lead`` goes after the header (the model's step leads, as on the models page) and
        ``after_steps`` after the training steps (their breakdown, plan and energy):
        :func:`gemm_bench.report.training_text.text` fills both, from modules this one cannot import."""
        return "\n".join(wrapped for line in self._text_lines(lead, after_steps)
                         for wrapped in wrap_line(untrusted_text.field(line)))

    def _text_lines(self, lead: Sequence[str] = (), after_steps: Sequence[str] = ()) -> Iterable[str]:
        dev, prov = self.result.device, self.result.provenance
        yield (
            f"{dev.name} (sm_{dev.compute_capability.replace('.', '')}) | driver {prov.driver}"
            f" | CUDA {prov.cuda} | torch {prov.torch} | TE {prov.transformer_engine}"
            f" | {prov.date}"
        )
        yield f"method: {describe_method(prov.method)}"
        if outcome := rounds_outcome(self.result):
            yield f"rounds: {outcome}"
        for note in self.result.notes:
            yield f"note: {note}"
        yield from lead
        for mode in self.modes:
            yield ""
            yield f"== {MODE_NAMES[mode]} =="
            runs = sorted({c.run_id for p in self.precisions for c in self.cells(mode, p) if c.run_id})
            if runs:
                yield f"run: {', '.join(runs)}"
            measured = [p for p in self.precisions if self.status(mode, p)[0] == "measured"]
            shape_width = max([len("shape (MxKxN)"), *(len(g.label) for g in self.gemms)])
            name_width = max(len(PRECISIONS[p].display) for p in PRECISIONS)
            op_width = max([16, *(len(OP_NAMES.get(g.op, g.op)) for g in self.gemms)])
            for pass_ in PASSES:
                gemms = [g for g in self.gemms if g.pass_ == pass_]
                if not gemms or not measured:
                    continue
                # One region per line (GEMM x precision): fits TEXT_WIDTH however many precisions there are.
                yield ""
                yield (f"{PASS_NAMES[pass_]:<{op_width + 2}} {'shape (MxKxN)':>{shape_width}}  "
                       f"{'precision':<{name_width}}{'ms':>10}{'TFLOP/s':>9}{'%peak':>6}{'vs BF16':>9}")
                for g in gemms:
                    for index, p in enumerate(measured):
                        c = self.cell(mode, p, g)
                        pct = self._pct(c)[0]
                        first = index == 0
                        line = (f"  {OP_NAMES.get(g.op, g.op) if first else '':<{op_width}} "
                                f"{g.label if first else '':>{shape_width}}  {PRECISIONS[p].display:<{name_width}}"
                                f"{c.ms or 0.0:>10.4f}{c.tflops or 0.0:>9.1f}")
                        line += f"{pct:>6.0f}" if pct is not None else f"{'-':>6}"
                        if p != BASELINE:
                            speedup = self.gemm_speedup(mode, p, g)
                            line += f"{speedup:>8.2f}x" if speedup else f"{'-':>9}"
                        yield line
                for index, p in enumerate(measured if self.kind != "sweep" else []):  # sizes: no sum
                    label = "sum" if index == 0 else ""
                    yield (f"  {label:<{op_width}} {'':>{shape_width}}  {PRECISIONS[p].display:<{name_width}}"
                           f"{self.total(mode, p).pass_ms.get(pass_) or 0.0:>10.4f}")
            yield ""
            layers = self.num_layers
            whole = f"model ({layers} layers)" if self.kind == "model" else "all shapes"
            # A sweep's sizes are separate questions: their sum (dominated by the largest) is no
            # layer's time, and a speedup of that sum answers nothing a reader asked.
            precisions = [] if self.kind == "sweep" else self.precisions
            if self.kind == "sweep":
                yield "  each size is a question of its own: no total over the sizes (each size's speedup is above)"
            for p in precisions:
                t = self.total(mode, p)
                name = PRECISIONS[p].display
                if t.status != "measured" or t.per_layer_ms is None or t.model_ms is None:
                    same = self._same_as(mode, p)
                    yield f"  {name:<12} {f'same as {same}' if same else t.status}: {t.reason}"
                    continue
                if p == BASELINE:
                    vs = ""
                elif t.speedup_vs_bf16 is not None:
                    vs = f"  {t.speedup_vs_bf16:.2f}x vs BF16"
                else:
                    vs = f"  (no speedup vs BF16: {t.speedup_reason})"
                passes = ", ".join(f"{PASS_NAMES[k]} {v:.3f}" for k, v in t.pass_ms.items() if v is not None)
                yield f"  {name:<12} per layer {t.per_layer_ms:9.3f} ms | {whole} {t.model_ms:9.2f} ms{vs}"
                yield f"  {'':<12} ({passes} ms)"
            yield from self._roofline_lines(mode, measured)
            yield from self._accuracy_lines(mode)
        yield from self._step_lines()
        yield from after_steps
        yield from self._peer_lines()
        yield from self._telemetry_lines()

    def _telemetry_lines(self) -> Iterable[str]:
        """What the GPU did while each group was timed (clock, power) and the events-vs-profiler check."""
        groups = self.result.groups
        yield ""
        if not groups:
            yield "telemetry: " + (self._method_lacks("telemetry") or "not recorded in this result")
            return
        clocked = [(g, g.clock) for g in groups if g.clock is not None and g.clock.samples]
        if clocked:
            medians = [c.sm_clock_mhz_median for _, c in clocked if c.sm_clock_mhz_median is not None]
            powered = [c for _, c in clocked if c.has_power]
            watts = [c.power_w_max for c in powered if c.power_w_max is not None]
            yield (f"telemetry: {len(groups)} timed groups; SM clock medians {min(medians):.0f}-{max(medians):.0f} MHz"
                   + (f", board power up to {max(watts):.0f} W" if watts else ""))
            note = energy.power_above(self.result.device.power_limit_w, max(watts), (c.power_source for c in powered)
                                      ) if watts else ""
            if note:
                yield "  " + note
            refused = [(g.label, c.power_refused) for g, c in clocked if c.power_refused]
            if refused:
                yield (f"  board power refused when read in {len(refused)} group(s), e.g. {refused[0][0]}: "
                       f"{refused[0][1].removeprefix(REFUSED)}")
            low = [g.label for g, _ in clocked if g.clock_low]
            if low:
                yield (f"  clock more than {telemetry.CLOCK_DROP:.0%} below the run's median in {len(low)} group(s) "
                       "(power- or heat-limited while timed):")
                yield from (f"    {label}" for label in low)
        else:
            reason = next((g.clock.reason for g in groups if g.clock is not None), "no clock samples")
            yield f"telemetry: {len(groups)} timed groups; no clock samples ({reason})"
        checked = [(g.label, g.cross_check) for g in groups if g.cross_check is not None and g.cross_check.ratios]
        if checked:
            # The bounds judge event time / kernel time of the profiled launches (kernel_ratio), graph
            # replays only; stored (every round) / profiled kernel time is printed beside it: it adds
            # the clock's drift between the profiled rounds and the rest, and the profiler's own cost.
            found = self.cross_check
            if found.median is not None or found.short:
                yield "  " + found.sentence() + (": holds" if found.holds else ": DOES NOT HOLD")
            limit = 1.10  # 10%: worth naming, below the bound
            rows = [(f"{label} {region}", c.ratios[region], c.stored_ratios.get(region))
                    for label, c in checked for region in c.ratios]
            stored = sorted(s for _, _, s in rows if s is not None)
            if stored:
                yield (f"  stored time / profiled kernel time per group: median {statistics.median(stored):.3f}, "
                       f"{stored[0]:.3f}-{stored[-1]:.3f} over {len(stored)} region(s) in {len(checked)} group(s)")
                waited = sorted(name for name, _, s in rows if s is not None and s > limit)
                overlapped = sorted(name for name, _, s in rows if s is not None and s < 2 - limit)
                if waited:
                    yield (f"  more than {limit - 1:.0%} above kernel time (the GPU was idle for part of the region: "
                           "gaps between its kernels, the host's work in an eager group, or a lower clock than "
                           f"when profiled) in {len(waited)} region(s):")
                    yield from (f"    {name}" for name in waited)
                if overlapped:
                    yield (f"  more than {limit - 1:.0%} below kernel time (the summed kernel time exceeds the "
                           "elapsed time: kernels overlapped, e.g. on several streams, or the trace's split into "
                           "regions counted a neighbour's kernels, or the unprofiled rounds ran at a higher clock "
                           f"or without the profiler's cost) in {len(overlapped)} region(s):")
                    yield from (f"    {name}" for name in overlapped)
            eager = [g.label for g in groups if g.timed == "eager"]
            if eager:
                yield f"  timed eagerly (host work included by definition; not judged) in {len(eager)} group(s):"
                yield from (f"    {label}" for label in eager)
            yield (f"  profiled rounds: events up to {max(r for _, r, _ in rows):.2f}x their own kernel time "
                   "(the same launches; what the bounds above judge where a result stores it per cell)")
        skipped = [g.cross_check.reason for g in groups if g.cross_check is not None and g.cross_check.reason]
        if skipped:
            yield f"  cross-check not possible in {len(skipped)} group(s), e.g. {skipped[0]}"

    def _roofline_lines(self, mode: str, measured: list[str]) -> Iterable[str]:
        """Roofline-predicted vs measured per GEMM: a prediction beside each measurement, never alone."""
        if not measured:
            return
        if hardware.spec_for(self.device) is None:
            yield ""
            yield f"roofline: {self._no_peak(BASELINE)}"
            return
        yield ""
        # "The prediction omits host overhead" beside graph replays read as if the measured times held
        # some: say what the times are where every group of this mode was replayed as a CUDA graph.
        timed = {g.timed for g in self.result.groups if g.mode == mode}
        if timed == {"graph replays"}:
            yield "roofline-predicted vs measured (ms, graph replays; the prediction omits kernel gaps and tiling):"
        else:
            yield "roofline-predicted vs measured (ms; the prediction omits host work, kernel gaps and tiling):"
        # The label column as wide as the longest GEMM name; each line takes as many "FP8 Current
        # 1.1918/1.4050" as fit TEXT_WIDTH, never splitting a precision's name from its numbers.
        width = max([18, *(len(f"{g.op}/{g.pass_}") for g in self.gemms)])
        for g in self.gemms:
            parts = []
            for p in measured:
                c = self.cell(mode, p, g)
                roof = self._roof(c)[0]
                parts.append(f"{PRECISIONS[p].display} {roof:.4f}/{c.ms or 0.0:.4f}" if roof is not None
                             else f"{PRECISIONS[p].display} -")
            label = f"{g.op}/{g.pass_}"
            line = ""
            for part in parts:
                joined = f"{line} | {part}" if line else part
                if line and 2 + width + 1 + len(joined) > TEXT_WIDTH:
                    yield f"  {label:<{width}} {line}"
                    label, joined = "", part
                line = joined
            yield f"  {label:<{width}} {line}"

    def _accuracy_lines(self, mode: str) -> Iterable[str]:
        if mode not in ACCURACY_MODES:
            return
        yield ""
        if not any(c.mode == mode for c in self.result.accuracy):
            lacks = self._method_lacks("accuracy") or "not measured in this result (gemm-bench run --accuracy)"
            yield f"accuracy (SQNR): {lacks}"
            return
        yield "accuracy: SQNR vs FP32 reference, dB, minimum over the GEMMs (higher is more accurate)"
        for p in self.precisions:
            parts = []
            for d in DISTRIBUTIONS:
                value = self._sqnr(mode, p, None, d)[0]
                parts.append(f"{DISTRIBUTIONS[d].display} {value:.1f}" if value is not None else None)
            if all(part is None for part in parts) and self._same_as(mode, p):
                # FP8 Delayed's pre-quantized GEMM is FP8 Current's: the site says "same as FP8
                # Current", never the cell's stored reason (which speaks of time, and repeats the name).
                yield f"  {PRECISIONS[p].display:<12} same as {self._same_as(mode, p)}: {SAME_ACCURACY}"
            elif all(part is None for part in parts):
                yield f"  {PRECISIONS[p].display:<12} {self.sqnr_reason(mode, p)}"
            else:
                yield f"  {PRECISIONS[p].display:<12} " + ", ".join(x if x is not None else "-" for x in parts)

    def _same_as(self, mode: str, precision: str) -> str | None:
        """The display name of the precision whose form ``precision`` has in ``mode`` (FP8 Current for
        FP8 Delayed pre-quantized, :data:`~gemm_bench.question.precisions.SAME_AS`), where the result
        stores it so; else None."""
        other = SAME_AS.get((precision, mode))
        if other is None or self.status(mode, precision)[0] != "unsupported":
            return None
        return PRECISIONS[other].display

    def _step_lines(self) -> Iterable[str]:
        if not self.layer_modes and self.precisions:
            first = self.step(self.precisions[0], graphed=True)
            yield ""
            yield f"== {STEP_WORDS[LAYER_MODES[1]]} =="
            yield f"{first.status}: {first.reason}"
        # The site's order and words: one layer's step (replayed as a CUDA graph) first, eager beside it.
        shown = sorted(self.layer_modes, key=lambda m: m != LAYER_MODES[1])
        for index, mode in enumerate(shown):
            yield ""
            yield f"== {STEP_WORDS[mode]} =="
            # What is timed is the same for both forms of the step: said once, under the first.
            yield f"({step.WHAT_IS_TIMED})" if index == 0 else f"(as {STEP_WORDS[shown[0]]} above)"
            rows = [self.step(p, graphed=mode == LAYER_MODES[1]) for p in self.precisions]
            base = next((r for r in rows if r.precision == BASELINE), None)
            if base is not None and base.gemm_share is not None:
                yield (f"GEMM share of the BF16 step: {base.gemm_share:.0%} "
                       f"(the {len(self.gemms)} autocast GEMMs / the step)")
            elif base is not None:
                yield f"GEMM share of the BF16 step: n/a ({base.gemm_share_reason})"
            for r in rows:
                name = PRECISIONS[r.precision].display
                if r.step_ms is None:
                    yield f"  {name:<12} {r.status}: {r.reason}"
                    continue
                line = f"  {name:<12} step {r.step_ms:9.3f} ms"
                if r.precision != BASELINE:
                    line += (f"  {r.speedup_vs_bf16:.2f}x vs BF16" if r.speedup_vs_bf16 is not None
                             else f"  (no speedup vs BF16: {r.speedup_reason})")
                    if r.gemm_speedup is not None:
                        line += f" | GEMMs {r.gemm_speedup:.2f}x"
                    if r.amdahl_speedup is not None:
                        line += f" | Amdahl {r.amdahl_speedup:.2f}x"
                yield line
            for r in rows:
                if r.sentence:
                    yield f"  {r.sentence}"

    def _peer_lines(self) -> Iterable[str]:
        rows = self.peers()
        if not rows:
            return
        yield ""
        yield "== Peers (context; not in TE totals) =="
        # Columns as wide as their longest entry (a backend name, an op/pass), so every row aligns.
        backend_width = max(len(r.backend) for r in rows)
        where_width = max(len(f"{r.op}/{r.pass_}") for r in rows)
        for r in rows:
            where = f"{r.op}/{r.pass_}"
            if r.ms is not None:
                pct = f" {r.pct_of_peak:4.0f}% of peak" if r.pct_of_peak is not None else ""
                yield (f"  {r.backend:<{backend_width}} {where:<{where_width}} {r.ms:9.4f} ms "
                       f"{r.tflops or 0.0:7.1f} TFLOP/s{pct}")
            else:
                yield f"  {r.backend:<{backend_width}} {where:<{where_width}} {r.status}: {r.reason}"


#: Why FP8 Delayed has no pre-quantized SQNR of its own: what the report's accuracy row says.
SAME_ACCURACY = ("its pre-quantized inputs are quantized as FP8 Current quantizes them (delayed scaling differs "
                 "only in how a scale is chosen during training) and both run the same per-tensor-scaled FP8 GEMM")

#: The widest line :meth:`Report.to_text` prints (a terminal, a log, a pull request's code block);
#: every command of the CLI holds its output to it (:func:`wrap_line`).
TEXT_WIDTH = 100


def wrap_line(line: str, hanging: int | None = None) -> list[str]:
    """``line`` in lines of at most :data:`TEXT_WIDTH` columns, continued under its own indent plus two
    (or ``hanging`` columns: a list's second column); a word longer than the width, a file path, is
    broken rather than left over the edge. Every command of the CLI prints its text through it."""
    if len(line) <= TEXT_WIDTH:
        return [line]
    indent = " " * (hanging if hanging is not None else len(line) - len(line.lstrip(" ")) + 2)
    return textwrap.wrap(line, TEXT_WIDTH, initial_indent="", subsequent_indent=indent,
                         break_on_hyphens=False, drop_whitespace=True) or [line]


def _display(precision: str) -> str:
    return PRECISIONS[precision].display if precision in PRECISIONS else precision


def flags_sentence(flags: Iterable[tuple[str, str | None]]) -> str | None:
    """The cross-check flags of the times one number rests on, each with what it is ("BF16
    qkv/fprop: timed 1.31x ..."); None when none is flagged."""
    found = [f"{label}: {flag}" for label, flag in flags if flag]
    return "; ".join(found) or None


def _step_json(r: StepResult) -> dict[str, Any]:
    out = dataclasses.asdict(r)
    for key in ("reason", "speedup_reason", "gemm_share_reason"):
        out[key] = out[key] or None
    return out


def describe_method(method: Mapping[str, Any]) -> str:
    """One line saying how the numbers were taken (shown in the CLI and on every page)."""
    name = method.get("timer", "?")
    parts = [f"{name}"]
    if "warmup_s" in method:
        parts.append(f"warm-up {method['warmup_s']} s")
    if isinstance(method.get("rounds_rule"), str):
        parts.append(method["rounds_rule"])
    elif "repetitions" in method:
        launches = method.get("launches_per_repetition", 1)
        parts.append(f"up to {method['repetitions']} timed rounds of {launches} "
                     f"launch{'' if launches == 1 else 'es'} (each cell records how many)")
    if method.get("l2_flush"):
        parts.append("L2 flushed between launches")
    if method.get("interleaved"):
        parts.append("precisions interleaved round by round")
    parts.append(f"statistic: {method.get('statistic', 'median')}")
    return ", ".join(parts)


def _relative_iqr(stats: Stats | None) -> float:
    """IQR / median of a stored time's statistics (0 where the file has no spread)."""
    if stats is None or stats.median_ms <= 0:
        return 0.0
    return stats.iqr_ms / stats.median_ms


def _stats_mapping(stats: Stats | None) -> dict[str, Any]:
    """A time's statistics as the stored block spells them ({} without), for the renderers that read one
    (:func:`gemm_bench.report.figures.quartiles`)."""
    return stats.as_mapping() if stats is not None else {}


def _view_cell(stored: StoredCell, gemm: GemmShape) -> Cell:
    """The page's view of a stored GEMM cell: on the page's GEMM, its statistics as a mapping."""
    return Cell(stored.mode, stored.precision, gemm, stored.status, stored.ms, stored.reason,
                _stats_mapping(stored.stats), stored.run_id,
                stored.eager.median_ms if stored.eager is not None else None, stored.kernel_ms, stored.kernel_ratio)
