"""Measure a question on the current GPU and return a result document.

Order of work: TE's support checks decide which cells are ``unsupported`` (with TE's reason);
then, GEMM by GEMM, every requested precision and every registered peer of that kind
(:mod:`gemm_bench.measure.peers`) is built, probed once (a precision that raises, out of memory say,
becomes a ``failed`` cell with the message, and the others go on), and the survivors are timed
interleaved, round by round. Then, when asked, the whole layer step (``layer``,
``layer-graphed``: :mod:`gemm_bench.measure.backends.layer_step`) and each precision's SQNR
(:mod:`gemm_bench.measure.accuracy`). Imports torch and Transformer Engine.
"""

from __future__ import annotations

import contextlib
import dataclasses
import datetime as dt
import functools
import gc
import logging
import os
import time
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import torch

from gemm_bench.measure import peers as peer_registry
from gemm_bench.measure import provenance
from gemm_bench.measure import telemetry as telemetry_module
from gemm_bench.measure.backends import te as te_backend
from gemm_bench.measure.phases import (
    ACCURACY,
    BUILD,
    ENERGY,
    MODEL_STEP_MEMORY,
    PLAN,
    PROBE,
    RELEASE,
    SUPPORT,
    PhaseProfiler,
    optional_phase,
)
from gemm_bench.measure.step_extras import Planner, measure_plan_and_energy
from gemm_bench.measure.timing import Competitor, Interleaver, Samples, TimerSettings
from gemm_bench.question.model_step import unsupported_reason as model_step_unsupported
from gemm_bench.question.plan import PlannedCell, make_plan
from gemm_bench.question.precisions import ALL_MODES, BASELINE, gemm_modes, layer_modes
from gemm_bench.question.question import Question
from gemm_bench.question.shapes import GemmShape
from gemm_bench.results.schema import new_document
from gemm_bench.results.stack import PEERS_NOT_MEASURED

Progress = Callable[[int, int, str], None]


class NoGpuError(RuntimeError):
    pass


def _now() -> str:
    return dt.datetime.now(dt.timezone.utc).replace(microsecond=0).isoformat()


@dataclasses.dataclass
class Timed:
    """One group's outcome: published samples, eager samples, failures, and the cross-check's
    median kernel time per ``competitor/region``."""

    samples: dict[str, dict[str, Samples]]
    eager: dict[str, dict[str, Samples]]
    failures: dict[str, str]
    kernel_ms: dict[str, float]
    #: The cross-check's ratio per ``competitor/region``: the profiled rounds' event median over
    #: their own kernel median (the same launches), :attr:`GroupTiming.cross_check`'s ``ratios``.
    kernel_ratio: dict[str, float] = dataclasses.field(default_factory=dict)
    #: With a breakdown asked for: competitor -> region -> profiled rounds -> kernels
    #: ``(name, start ns, duration ns)`` (:attr:`~gemm_bench.measure.timing.GroupTiming.kernels`).
    kernels: dict[str, dict[str, list[list[tuple[str, int, int]]]]] = dataclasses.field(default_factory=dict)

    def fields(self, name: str, region: str) -> dict[str, Any]:
        """What a measured cell (or peer row, or layer cell) of ``name``'s ``region`` stores: the
        published median and its statistics, the eager time kept beside it, the profiled kernel time."""
        s = self.samples[name][region]
        out: dict[str, Any] = {"ms": round(s.median, 6), "stats": s.to_stats()}
        eager = self.eager.get(name, {}).get(region)
        if eager is not None:
            out["eager"] = eager.to_stats()
        kernel = self.kernel_ms.get(f"{name}/{region}")
        if kernel is not None:
            out["kernel_ms"] = kernel
            ratio = self.kernel_ratio.get(f"{name}/{region}")
            if ratio is not None:
                out["kernel_ratio"] = ratio
        out["measured_at"] = _now()
        return out


def _cell(cell: PlannedCell, status: str, *, fields: dict[str, Any] | None = None, reason: str = "") -> dict[str, Any]:
    g = cell.gemm
    out: dict[str, Any] = {
        "mode": cell.mode, "precision": cell.precision, "op": g.op, "pass": g.pass_,
        "m": g.m, "k": g.k, "n": g.n, "groups": g.groups, "status": status,
    }
    if fields is not None:
        out.update(fields)
    else:
        out["reason"] = reason
    return out


def _short(exc: BaseException) -> str:
    text = f"{type(exc).__name__}: {exc}".strip()
    first = text.splitlines()[0] if text else type(exc).__name__
    return first[:400]


def _release() -> None:
    gc.collect()
    torch.cuda.empty_cache()


#: Live GPU memory (tensors, :func:`torch.cuda.memory_allocated`), as a share of the device's, above
#: which the end of a timed group collects Python's cyclic garbage and returns PyTorch's cached blocks
#: to the driver. Below it the group's memory is left to reference counting and the caching
#: allocator, which reuses its blocks and itself frees them (graph pools included) before it reports
#: out of memory: a collection after each of a question's ~20 groups cost an author's build 2.4 s,
#: mostly traversing the objects torch.compile and TE's first calls left. What cyclic garbage can
#: then linger is under this share, and a build that still runs out of memory is retried once after
#: a release (:meth:`Runner._build`).
RELEASE_ABOVE_SHARE = 0.10


def _out_of_memory(exc: BaseException) -> bool:
    """An allocation failure (``torch.OutOfMemoryError`` is a RuntimeError that says so)."""
    return isinstance(exc, MemoryError) or "out of memory" in str(exc).lower()


@contextlib.contextmanager
def _nvtx(name: str, enabled: bool) -> Iterator[None]:
    if enabled:
        torch.cuda.nvtx.range_push(name)
    try:
        yield
    finally:
        if enabled:
            torch.cuda.nvtx.range_pop()


class Runner:
    def __init__(self, settings: TimerSettings, *, peers: bool = True, progress: Progress | None = None,
                 nvtx: bool = False, phases: PhaseProfiler | None = None, accuracy: bool = False,
                 telemetry: bool = True, shared_sampler: bool = False, model_step: bool = True) -> None:
        """``phases``: charge this run's wall time to its phases (``gemm-bench run --profile-phases``).

        The runner records support checks, building, probing and releasing memory; the timer
        records spin-up, warm-up and timed rounds; the caller records imports and writing.
        ``peers``: time the registered peers (:mod:`gemm_bench.measure.peers`) beside TE. ``accuracy``:
        also measure each precision's SQNR (:mod:`gemm_bench.measure.accuracy`) in every run.
        ``telemetry``: sample SM clock and power during each timed group and cross-check its
        events against the profiler (:mod:`gemm_bench.measure.telemetry`); stored in ``doc["groups"]``.
        ``shared_sampler``: sample with the process's sampler of this GPU
        (:func:`~gemm_bench.measure.telemetry.shared_sampler`), which outlives the run, instead of
        one of the runner's own that ends with each :meth:`measure` (a refresh worker measures
        many questions; its sampler process starts once). ``model_step``: with the layer step, also
        measure the parts of the model's step (``doc["model_step"]``,
        :mod:`gemm_bench.measure.backends.model_parts`) where the question has one.
        """
        if not torch.cuda.is_available():
            raise NoGpuError("no CUDA GPU is visible to PyTorch")
        self.settings = settings
        self.peers = peers
        self.accuracy = accuracy
        self.model_step = model_step
        self.progress = progress or (lambda done, total, label: None)
        self.nvtx = nvtx
        self.phases = phases
        if telemetry:
            # A torch.profiler session (the cross-check) leaves CUPTI attached and later kernel
            # launches slower unless Kineto tears CUPTI down when the session ends (it reads this
            # when a session starts): a refresh worker times many questions in one process.
            os.environ.setdefault("TEARDOWN_CUPTI", "1")
        self.sampler: telemetry_module.ClockSampler | None = None
        if telemetry:
            # The shared one samples the GPU current when it starts: a refresh worker sees one GPU
            # (CUDA_VISIBLE_DEVICES), and nothing here changes torch's current device.
            self.sampler = (telemetry_module.shared_sampler() if shared_sampler
                            else telemetry_module.ClockSampler())
        self._owns_sampler = not shared_sampler
        self.timer = Interleaver(settings, phases=phases, sampler=self.sampler, cross_check=telemetry)
        self.telemetry = telemetry
        #: Each timed group's record in the run under way (``doc["groups"]``).
        self._groups: list[dict[str, Any]] = []
        #: A group ended without a release since the last one (:data:`RELEASE_ABOVE_SHARE`).
        self._unreleased = False
        self._device_bytes: int | None = None
        #: Wall seconds each competitor of the last group took to build and probe.
        self.setup_s: dict[str, float] = {}
        #: The last run's layer-step groups: (routing, competitor -> region -> profiled rounds' kernels),
        #: for a caller that records kernel names (``tools/gpu_breakdown.py``); the result keeps only
        #: each step's breakdown.
        self.step_kernels: list[tuple[str, dict[str, dict[str, list[list[tuple[str, int, int]]]]]]] = []
        #: The last run's energy entries of each recipe's graphed layer step, measured on the layer-step
        #: group's own graphs right after its timed rounds; None when that group did not measure them.
        self.step_energy: list[dict[str, Any]] | None = None
        # What is alive now (torch, Transformer Engine, their caches) lives for the whole process:
        # out of the collector's sight, a full collection after each group (releasing its memory)
        # takes milliseconds instead of a quarter of a second.
        gc.collect()
        gc.freeze()

    def _build(self, builders: dict[str, Callable[[], Competitor]]) -> tuple[dict[str, Competitor], dict[str, str]]:
        """Build and probe (one untimed call) each competitor: the ones that work, and the reason
        of each one that does not (its memory released). Each one's wall seconds of building and
        probing (compilation, autotuning, first-call set-up) go to :attr:`setup_s`."""
        competitors: dict[str, Competitor] = {}
        failures: dict[str, str] = {}
        self.setup_s = {}
        for name, build in builders.items():
            started = time.monotonic()
            for attempt in (1, 2):
                try:
                    with optional_phase(self.phases, BUILD):
                        fn = build()
                    with optional_phase(self.phases, PROBE):
                        fn(lambda region, edge: None)
                        torch.cuda.synchronize()
                    competitors[name] = fn
                    failures.pop(name, None)
                except Exception as exc:  # GPU boundary: any failure is recorded as the cell's reason
                    failures[name] = _short(exc)
                    competitors.pop(name, None)
                    retry = attempt == 1 and self._unreleased and _out_of_memory(exc)
                    del exc  # its traceback holds the failed build's tensors: released below
                    self._release()
                    if retry:
                        continue  # the memory earlier groups left to the collector, now collected
                break
            self.setup_s[name] = round(time.monotonic() - started, 3)
        return competitors, failures

    @contextlib.contextmanager
    def graph_only(self) -> Iterator[None]:
        """Within: groups timed as graph replays only, without eager rounds (a step whose eager
        time nobody reads: the model step's parts, the precision plan's steps)."""
        saved = self.timer
        self.timer = Interleaver(dataclasses.replace(self.settings, eager_repetitions=0),
                                 phases=self.phases, sampler=self.sampler, cross_check=self.telemetry)
        try:
            yield
        finally:
            self.timer = saved

    def _phased(self, name: str, fn: Callable[..., None]) -> Callable[..., None]:
        """``fn`` charged to the phase ``name`` of this runner's profile."""
        def call(*args: Any) -> None:
            with optional_phase(self.phases, name):
                fn(*args)

        return call

    def _release(self) -> None:
        """Collect cyclic garbage and return cached blocks to the driver, charged to its phase."""
        with optional_phase(self.phases, RELEASE):
            _release()
        self._unreleased = False

    def _release_if_tight(self) -> None:
        """After a group: :meth:`_release` only when live GPU memory is above
        :data:`RELEASE_ABOVE_SHARE` of the device's (see there why not after every group)."""
        if self._device_bytes is None:
            self._device_bytes = int(torch.cuda.get_device_properties(torch.cuda.current_device()).total_memory)
        if torch.cuda.memory_allocated() > RELEASE_ABOVE_SHARE * self._device_bytes:
            self._release()
        else:
            self._unreleased = True

    def _time_group(self, builders: dict[str, Callable[[], Competitor]], label: str = "", mode: str = "",
                    *, graphs: bool | None = None, kernels: bool = False, after: Any = None) -> Timed:
        """Build and probe each competitor; time the ones that work, interleaved (:meth:`Interleaver.run`).

        ``graphs``: publish graph-replay time (default: the settings'), with the eager time kept
        beside it; False for a group whose published time is eager by definition (the eager step).
        ``kernels``: keep the profiled rounds' kernels (:attr:`Timed.kernels`) for a time breakdown.
        ``after``: :meth:`Interleaver.run`'s hook on the group's graphs once timed (the step's energy).
        """
        started = time.monotonic()
        competitors, failures = self._build(builders)
        timed = Timed({}, {}, failures, {})
        if not competitors:
            return timed
        try:
            # ``kernels`` only when asked: a timer without the keyword (an older fake) still times the rest.
            extra: dict[str, Any] = {"kernels": True} if kernels else {}
            if after is not None:
                extra["after"] = after
            result = self.timer.run(competitors, graphs=graphs, **extra)
        except Exception as exc:  # GPU boundary: the group's cells become failed, the run goes on
            message = _short(exc)
            failures.update({name: message for name in competitors})
        else:
            failures.update(result.failures)
            timed = Timed(result.samples, result.eager, failures, result.cross_check.get("kernel_ms", {}),
                          result.cross_check.get("ratios", {}), result.kernels)
            if self.telemetry and result.samples:
                # wall_s: the group's wall time from its first build to its last timed round (where a
                # refresh's time goes, group by group: issue 42 item 6).
                group = {"label": label, "mode": mode, "members": sorted(result.samples), **result.record,
                         "setup_s": dict(self.setup_s), "cross_check": result.cross_check,
                         "wall_s": round(time.monotonic() - started, 3)}
                self._groups.append(group)
        del competitors
        self._release_if_tight()
        return timed

    def measure(self, question: Question, precisions: Sequence[str], modes: Sequence[str], *,
                accuracy: bool | None = None, peers_only: bool = False) -> dict[str, Any]:
        """One run: the GEMM cells of ``autocast``/``prequant``, the layer step of ``layer``/
        ``layer-graphed``, the peers (where the runner times them), and (``accuracy``, default the
        runner's) the SQNRs.

        Everything in the returned document is one run (one ``run_id``): speedups between any
        two of its cells are legitimate, and its method says what the run includes. The clock
        sampler's process ends with the run, however the run ends (unless it is the process's shared
        sampler, which the next run samples with).

        ``peers_only``: time the peers of ``modes`` alone (Linear peers per autocast op, GEMM peers
        per pre-quantized GEMM), no Transformer Engine cell, step or SQNR: a run that
        :func:`gemm_bench.results.merge.merge_peers` adds to a cached result measured without them.
        Peer rows are their own rows (never divided by a TE cell), so they need no baseline of this run.
        """
        if peers_only and not self.peers:
            raise ValueError("peers_only needs a runner that times the peers (Runner(peers=True))")
        started = time.monotonic()
        try:
            doc = self._measure(question, precisions, modes, accuracy=False if peers_only else accuracy,
                                peers_only=peers_only)
            doc["provenance"]["measure_s"] = round(time.monotonic() - started, 1)
            return doc
        finally:
            if self.sampler is not None and self._owns_sampler:
                self.sampler.close()

    def _measure(self, question: Question, precisions: Sequence[str], modes: Sequence[str], *,
                 accuracy: bool | None, peers_only: bool = False) -> dict[str, Any]:
        modes = list(dict.fromkeys(modes))
        unknown = [m for m in modes if m not in ALL_MODES]
        if unknown:
            raise ValueError(f"unknown modes {', '.join(map(repr, unknown))}; choose from {', '.join(ALL_MODES)}")
        per_gemm, layer = gemm_modes(modes), layer_modes(modes)
        if peers_only:
            layer = []
        with_accuracy = self.accuracy if accuracy is None else accuracy
        wanted = list(dict.fromkeys([BASELINE, *precisions]))
        with optional_phase(self.phases, SUPPORT):
            support = te_backend.support()
            plan = make_plan(question.gemms, precisions, per_gemm, support)
            method = run_method(self.settings, telemetry=self.telemetry,
                                teardown=os.environ.get("TEARDOWN_CUPTI") == "1", peers=self.peers,
                                peers_only=peers_only)
            device, prov = provenance.collect(method, te_backend.VERSION)
            registry = peer_registry.registered_peers() if self.peers else []
            available = peer_registry.availability(registry)
            if self.sampler is not None:
                self.sampler.start()  # before any warm-up: its start-up never idles a warm GPU
        doc = new_document(
            kind=question.kind, gemms=list(question.gemms), num_layers=question.num_layers,
            config=question.config.to_dict() if question.config else None,
            device=device, provenance=prov, notes=question.notes,
            layout=dataclasses.asdict(question.layout) if question.layout is not None else None,
            layout_note=question.layout_note,
        )
        run_id = doc["run_id"]
        self._groups = []
        self.step_kernels = []
        self.step_energy = None
        doc["support"] = {pid: {"available": s.available, "reason": s.reason} for pid, s in support.items()}
        cells = [_cell(c, "unsupported", reason=reason) for c, reason in plan.unsupported]
        autocast = [c for c in plan.to_measure if c.mode == "autocast"]
        prequant = [c for c in plan.to_measure if c.mode == "prequant"]
        ops = list(dict.fromkeys(c.gemm.op for c in autocast))
        prequant_gemms = list(dict.fromkeys(c.gemm for c in prequant))
        total = len(ops) + len(prequant_gemms) + len(layer) + int(with_accuracy)
        done = 0
        fprop_of = {g.op: g for g in question.gemms if g.pass_ == "fprop"}
        peers_out: list[dict[str, Any]] = []

        for op in ops:
            self.progress(done, total, f"autocast {op}")
            wanted_cells = [c for c in autocast if c.gemm.op == op]
            chosen = list(dict.fromkeys(c.precision for c in wanted_cells))
            fprop = fprop_of[op]
            backward = any(c.gemm.pass_ != "fprop" for c in wanted_cells)
            # One set of BF16 weights and inputs for every precision of the op (te_backend.Operands):
            # the same numbers for all, and DeepSeek-V3's 256-expert MLP (15 GB of weights per copy)
            # fits a GPU only once, not once per precision (four copies ran an H100 out of memory).
            shared = te_backend.Operands()
            builders: dict[str, Callable[[], Competitor]] = {} if peers_only else {
                p: functools.partial(te_backend.autocast_competitor, p, fprop, backward, shared) for p in chosen
            }
            # Linear peers (torchao Float8Linear ...) time the op's training step beside TE's autocast.
            linear = _peer_builders(registry, fprop, "linear", available)
            with _nvtx(f"autocast {op}", self.nvtx):
                timed = self._time_group({**builders, **linear}, label=f"autocast {op}", mode="autocast")
            if not peers_only:
                cells += _timed_cells(wanted_cells, timed)
            peers_out += _peer_rows(registry, fprop, "linear", available, timed)
            done += 1

        for gemm in prequant_gemms:
            self.progress(done, total, f"prequant {gemm.op}/{gemm.pass_}")
            wanted_cells = [c for c in prequant if c.gemm == gemm]
            builders = {} if peers_only else {
                c.precision: functools.partial(te_backend.prequant_competitor, c.precision, gemm) for c in wanted_cells}
            # GEMM peers (torch.matmul, torch._scaled_mm, plugins) time the same pass beside TE's GEMM.
            extra = _peer_builders(registry, gemm, "gemm", available)
            with _nvtx(f"prequant {gemm.op}/{gemm.pass_}", self.nvtx):
                timed = self._time_group({**builders, **extra}, label=f"prequant {gemm.op}/{gemm.pass_}",
                                         mode="prequant")
            if not peers_only:
                cells += _timed_cells(wanted_cells, timed)
            peers_out += _peer_rows(registry, gemm, "gemm", available, timed)
            done += 1

        # A peers-only run keeps no TE cell (its unsupported ones are the cached result's to say).
        doc["cells"] = [] if peers_only else cells
        doc["peers"] = peers_out
        if layer:
            from gemm_bench.measure.backends.layer_step import measure_layer_step

            self.progress(done, total, f"layer step ({', '.join(layer)})")
            with _nvtx("layer step", self.nvtx):
                # One group: the step's eager rounds give ``layer``, its graph replays ``layer-graphed``.
                def layer_group(builders: dict[str, Callable[[], Competitor]], graphs: bool, routing: str) -> Timed:
                    suffix = "" if routing == "balanced" else f", {routing} routing"
                    after = None
                    if graphs and routing == "balanced" and self.sampler is not None and question.config is not None:
                        # Each recipe's step energy on this group's own graphs (no second build
                        # and capture): gemm_bench.measure.step_extras stores it as doc["energy"].
                        from gemm_bench.measure.backends.layer_step import energy_after

                        self.step_energy = []
                        after = self._phased(ENERGY, energy_after(question.config, self.sampler, self.step_energy))
                    timed = self._time_group(builders, label=f"layer step ({', '.join(layer)}{suffix})",
                                             mode="layer-graphed" if graphs else "layer", graphs=graphs,
                                             kernels=True, after=after)
                    self.step_kernels.append((routing, timed.kernels))
                    return timed

                doc["layer"] = [{**c, "run_id": run_id} for c in measure_layer_step(
                    question, wanted, layer_group, support=support, modes=layer)]
            done += len(layer)
            if self.model_step and question.config is not None:
                with _nvtx("model step", self.nvtx):
                    block = self._model_step(question, wanted, support, run_id)
                if block is not None:
                    doc["model_step"] = block
        if with_accuracy:
            from gemm_bench.measure.accuracy import accuracy_method, measure_accuracy

            self.progress(done, total, "accuracy (SQNR)")
            with _nvtx("accuracy", self.nvtx), optional_phase(self.phases, ACCURACY):
                doc["accuracy"] = measure_accuracy(question, wanted, per_gemm or ["autocast"],
                                                   support=support, run_id=run_id)
            doc["accuracy_method"] = accuracy_method()
            done += 1
        if self.telemetry:
            telemetry_module.flag_clock_drops(self._groups)
            doc["groups"] = [{**g, "run_id": run_id} for g in self._groups]
        self.progress(done, total, "done")
        return doc


    def _model_step(self, question: Question, precisions: Sequence[str], support: dict[str, Any],
                    run_id: str) -> dict[str, Any] | None:
        """The model step's parts in this run's interleaved groups (one per kind of part); None, before
        importing anything of the GPU's, where the question has no model step (no vocabulary, or a
        layer the layer step cannot build). Dense, mixture-of-experts and multi-latent-attention
        layers all have one (:mod:`gemm_bench.measure.backends.model_parts`)."""
        config = question.config
        if config is None or model_step_unsupported(config):
            return None
        from gemm_bench.measure.backends.model_parts import model_step_block

        def group(builders: dict[str, Callable[[], Competitor]], graphs: bool, label: str) -> Any:
            # Graph replays only: the model step is composed of GPU times, so the group's eager
            # rounds (10 rounds of every layer competitor, up to 3 s a question) would be thrown away.
            with self.graph_only() if graphs else contextlib.nullcontext():
                timed = self._time_group(builders, label=f"model step: {label}", graphs=graphs, kernels=True)
            check = {"kernel_ms": timed.kernel_ms, "ratios": timed.kernel_ratio}
            return _PartsGroup(timed.samples, timed.failures, check, timed.kernels), {}

        runnable = [p for p in precisions if p not in support or support[p].available]
        try:
            # Exclusive accounting: the parts' timed groups are charged to their own phases; what
            # is left here is the memory records' builds and the parts' set-up.
            with optional_phase(self.phases, MODEL_STEP_MEMORY):
                return model_step_block(config, runnable, group, run_id)
        except RuntimeError as exc:  # GPU boundary (out of memory outside a timed group): the run keeps its cells
            logging.getLogger(__name__).warning("model step not stored: %s", _short(exc))
            return None


@dataclasses.dataclass
class _PartsGroup:
    """A timed group as the model step's parts read it (:func:`~gemm_bench.measure.backends.model_parts.time_parts`)."""

    samples: dict[str, dict[str, Samples]]
    failures: dict[str, str]
    cross_check: dict[str, Any]
    #: The profiled rounds' kernels per competitor and region (the parts' time breakdown, issue 33).
    kernels: dict[str, dict[str, list[list[tuple[str, int, int]]]]] = dataclasses.field(default_factory=dict)


def measure_question(question: Question, precisions: Sequence[str], modes: Sequence[str], *,
                     peers: bool = True, peers_only: bool = False, settings: TimerSettings | None = None,
                     progress: Progress | None = None, planner: Planner | None = None) -> dict[str, Any]:
    """The one measuring path of ``gemm-bench refresh`` and of a docs build on a GPU box.

    A question is measured completely, whatever mode a page shows: the modes asked (with
    :func:`~gemm_bench.results.stack.complete_modes`, the layer step of a model in both forms),
    clock telemetry and the cross-check, and the SQNRs, so every page that shows any of them reads
    one run, and re-measuring after a stack change drops nothing another page shows. ``peers``:
    time the registered peers too, which only a question some page shows peers for needs
    (:class:`gemm_bench.results.stack.Todo`); their first calls (torchao's compilation) were most of
    an author's one-question build. ``peers_only``: the peers of ``modes`` alone
    (:meth:`Runner.measure`), for :func:`gemm_bench.results.merge.merge_peers`.
    ``progress``: the Runner's ``(groups done, groups in all, what runs now)`` callback (a docs
    build's progress lines: ``gemm_benchmark.execution.MeasureProgress``).
    ``planner``: decides the precision plan whose step is measured after the run
    (``gemm_bench.report.precision_plan.plan_to_measure``; :mod:`gemm_bench.measure.step_extras`), which
    also measures each recipe's step energy.
    """
    from gemm_bench.measure.compile_cache import use_persistent_compile_cache
    from gemm_bench.results.stack import complete_modes

    if peers:
        use_persistent_compile_cache()  # before the peers' first torch.compile: kept across runs
    phases = PhaseProfiler()
    # One sampler process per GPU for the whole worker (or build), not one per question.
    runner = Runner(settings or TimerSettings(), peers=peers or peers_only, accuracy=True, progress=progress,
                    phases=phases, shared_sampler=True)
    modes = list(modes) if peers_only else complete_modes(question, modes)
    doc = runner.measure(question, list(precisions), modes, peers_only=peers_only)
    if not peers_only:  # the peers alone are merged into a result that has its plan and energy
        with phases.phase(PLAN):
            measure_plan_and_energy(runner, question, doc, planner=planner)
    phases.finish()
    # Where this question's wall time went, kept beside measure_s: the refresh's speed is
    # profiled from every GPU run, not only from a `gemm-bench run --profile-phases` by hand.
    doc["provenance"]["phases_s"] = phases.summary()
    return doc


#: Keys of the competitors of peers in a timed group: never equal to a precision id.
_PEER_KEY = "peer:"


def _peer_builders(registry: Sequence[peer_registry.Peer], gemm: GemmShape, kind: str,
                   available: dict[str, tuple[bool, str]]) -> dict[str, Callable[[], Competitor]]:
    return {_PEER_KEY + name: build
            for name, build in peer_registry.builders(registry, gemm, kind, available).items()}


def _peer_rows(registry: Sequence[peer_registry.Peer], gemm: GemmShape, kind: str,
               available: dict[str, tuple[bool, str]], timed: Timed) -> list[dict[str, Any]]:
    def fields(name: str, region: str) -> dict[str, Any]:
        return timed.fields(_PEER_KEY + name, region)

    failures = {k[len(_PEER_KEY):]: v for k, v in timed.failures.items() if k.startswith(_PEER_KEY)}
    return peer_registry.rows(registry, gemm, kind, available, fields, failures)


def run_method(settings: TimerSettings, *, telemetry: bool = True, teardown: bool = True, peers: bool = True,
               peers_only: bool = False) -> dict[str, Any]:
    """The method a run records: the timer's parameters, and what else this version measures.

    The ``layer_step``, ``accuracy`` and ``peers`` entries are written by every run of this code
    (whether or not the run measured them), so a result of the earlier method, which has none,
    is told apart: its report says "not measured in this result (method v1)". ``peers`` False: the
    entry says they were not measured (:data:`~gemm_bench.results.stack.PEERS_NOT_MEASURED`).
    """
    from gemm_bench.measure.step import BREAKDOWN_METHOD, WHAT_IS_TIMED
    from gemm_bench.results.accuracy_schema import DISTRIBUTIONS

    return {
        **settings.method(),
        **(telemetry_module.method(teardown=teardown) if telemetry else {}),
        "layer_step": WHAT_IS_TIMED,
        "breakdown": BREAKDOWN_METHOD,
        "accuracy": "SQNR in dB of each pass's output against an FP32 reference of the same BF16 inputs, "
        f"inputs {' and '.join(DISTRIBUTIONS)} (details in the result's accuracy_method)",
        "peers": (PEERS_ONLY_METHOD if peers_only else PEERS_METHOD) if peers else PEERS_NOT_MEASURED,
    }


#: What a run that times the peers records of them (``provenance.method.peers``).
PEERS_METHOD = ("registered peers (entry point group gemm_bench.peers), timed in the same interleaved groups as TE: "
                "GEMM peers with pre-quantized GEMMs, Linear peers with autocast")
#: ... and a peers-only run (:meth:`Runner.measure`), whose rows are merged into a cached result.
PEERS_ONLY_METHOD = ("registered peers (entry point group gemm_bench.peers), timed in a run of their own (its run "
                     "id on each peer row), interleaved with each other per GEMM, after the result's TE cells "
                     "were measured without them")


def _timed_cells(wanted: list[PlannedCell], timed: Timed) -> list[dict[str, Any]]:
    """Cells of one timed group: each precision's samples of its pass, or its failure."""
    return [
        _cell(c, "failed", reason=timed.failures[c.precision]) if c.precision in timed.failures
        else _cell(c, "measured", fields=timed.fields(c.precision, c.gemm.pass_))
        for c in wanted
    ]
