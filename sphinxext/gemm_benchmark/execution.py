"""Answering a directive's question, once: from the cache, or by measuring on this machine's GPU.

Modelled on myst-nb's ``nb_execution_mode``:

``cache``
    never measure; render what the cache holds (a CPU-only build, CI).
``auto`` (default)
    where a CUDA GPU and Transformer Engine are importable, measure this GPU's result when the
    cache lacks it, lacks cells the page asks for, or holds a stale one.
``force``
    re-measure this GPU's result for every question, once per build.

``GEMM_BENCH_EXECUTION_MODE`` overrides ``conf.py``. Results of *other* devices can only come
from the cache: a build measures the GPU it runs on.

The answer path runs in one direction (see DESIGN.md): the cache files of the question are listed
once and each is read and typed at most once per build (:class:`ResultReads`: the checked document,
then its :class:`~gemm_bench.results.typed.Result`); the GPU is asked once per build; a
:class:`DeviceAnswer` carries that typed result, its status and one
:class:`~gemm_bench.report.report.Report` per mode (each built on the same :class:`Result`, never parsing
it again), from the *page's* question (its GEMMs, its layer count, its kind): the file only supplies
per-GEMM measurements. Renderers and roles use these reports and the typed result, never the document
(``tests/test_typed_result.py`` scans this module and its readers).

GPU work is serialized by a lock file (``filelock``) in the cache directory: two processes of a
``-j`` build (or two builds) timing GEMMs at once would each measure the other's interference.
Inside the lock the cache is consulted again, because another process may just have measured.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import importlib.util
import json
import os
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, Protocol

from filelock import FileLock
from sphinx.util import logging

from gemm_bench.question.devices import device_slug, select
from gemm_bench.question.question import Question
from gemm_bench.report.model_step import other_vocabulary, other_vocabulary_text
from gemm_bench.report.report import Report
from gemm_bench.results.cache import Cache, CacheError, is_stale, read_document
from gemm_bench.results.merge import store_peers
from gemm_bench.results.schema import METHOD_VERSION, ResultError
from gemm_bench.results.stack import (
    DEFAULT_STALE_WHEN,
    Rules,
    Todo,
    lacking_blocks,
    local_stack,
    remeasure,
    stack_staleness,
)
from gemm_bench.results.typed import Result, parse
from gemm_benchmark.diagnostics import TextEnum

logger = logging.getLogger(__name__)

EXECUTION_MODES: tuple[str, ...] = ("cache", "auto", "force")
ENV_VAR = "GEMM_BENCH_EXECUTION_MODE"
GPU_LOCK_NAME = "gemm-benchmark-gpu.lock"


class Status(TextEnum):
    """Freshness of a result, in the order of how much it needs attention."""

    MISSING = "missing"
    STALE = "stale"
    FAILED = "failed"
    FRESH = "fresh"


#: Freshness statuses as strings, most urgent first.
STATUSES: tuple[str, ...] = tuple(s.value for s in Status)


class ExecutionModeError(ValueError):
    """An execution mode that is not one of :data:`EXECUTION_MODES`."""


def execution_mode(configured: str) -> str:
    """The mode in effect: the environment variable wins over ``conf.py``."""
    value = os.environ.get(ENV_VAR, "").strip().lower() or str(configured).strip().lower()
    if value not in EXECUTION_MODES:
        source = ENV_VAR if os.environ.get(ENV_VAR, "").strip() else "gemm_benchmark_execution_mode"
        raise ExecutionModeError(f"{source}={value!r} is not one of {', '.join(EXECUTION_MODES)}")
    return value


class Measure(Protocol):
    """``(question, precisions, modes, peers=..., peers_only=...) -> result document``: the
    arguments of :func:`gemm_bench.measure.runner.measure_question` (a :class:`~gemm_bench.results.stack.Todo`)."""

    def __call__(self, question: Question, precisions: Sequence[str], modes: Sequence[str], *, peers: bool,
                 peers_only: bool) -> dict[str, Any]: ...


@dataclasses.dataclass(frozen=True)
class LocalGpu:
    """The GPU this build can measure on: its name (as results record it) and how to measure."""

    name: str
    measure: Measure


def detect_gpu() -> tuple[LocalGpu | None, str]:
    """This machine's GPU, or None and why not. Imports torch only if it is installed."""
    if importlib.util.find_spec("torch") is None:
        return None, "PyTorch is not installed"
    try:
        import torch
    except (ImportError, OSError, RuntimeError) as exc:  # a broken install is "no GPU", not a failed build
        return None, f"PyTorch cannot be imported ({exc})"
    if not torch.cuda.is_available():
        return None, "no CUDA GPU is visible to PyTorch"
    try:
        import transformer_engine.pytorch  # noqa: F401
    except (ImportError, OSError, RuntimeError) as exc:
        return None, f"Transformer Engine cannot be imported ({exc})"

    def measure(question: Question, precisions: Sequence[str], modes: Sequence[str], *, peers: bool,
                peers_only: bool) -> dict[str, Any]:
        # The one measuring path, shared with ``gemm-bench refresh``: GEMMs, step, SQNRs, telemetry,
        # and the peers where the page shows them; a progress line with an estimate meanwhile.
        from gemm_bench.measure.runner import measure_question
        from gemm_bench.report.precision_plan import plan_to_measure

        progress = MeasureProgress(f"{question.hash} ({question.describe()}) on {torch.cuda.get_device_name()}")
        return measure_question(question, precisions, modes, peers=peers, peers_only=peers_only, progress=progress,
                                planner=plan_to_measure)

    return LocalGpu(torch.cuda.get_device_name(), measure), ""


class MeasureProgress:
    """The Runner's ``progress(done, total, label)`` as a few status lines with an estimate.

    A line when a tenth more of the groups is done or ``every_s`` passed, and at the end; the time
    left is the elapsed time per group done times the groups still to do (``estimate_s``, e.g. the
    wall time the question's last run stored, until the first group is done).
    """

    def __init__(self, what: str, *, estimate_s: float | None = None, every_s: float = 30.0,
                 clock: Callable[[], float] = time.monotonic, emit: Callable[[str], None] | None = None) -> None:
        self.what = what
        self.estimate_s = estimate_s
        self.every_s = every_s
        self.clock = clock
        self.emit = emit or (lambda line: logger.info("%s", line))
        self.started = clock()
        self._last_time = self.started
        self._last_tenth = -1

    def __call__(self, done: int, total: int, label: str) -> None:
        now = self.clock()
        tenth = (10 * done) // total if total else 10
        if done < total and tenth == self._last_tenth and now - self._last_time < self.every_s:
            return
        self._last_time, self._last_tenth = now, tenth
        self.emit(self.line(done, total, label, now))

    def line(self, done: int, total: int, label: str, now: float) -> str:
        elapsed = now - self.started
        head = f"gemm-benchmark: measuring {self.what}: {done}/{total} groups, {_duration(elapsed)} elapsed"
        if total and done >= total:
            return f"{head}, done"
        if done:
            left: float | None = elapsed / done * (total - done)
        else:
            left = None if self.estimate_s is None else max(self.estimate_s - elapsed, 0.0)
        return head + (f", ~{_duration(left)} left" if left is not None else "") + (f" ({label})" if label else "")


def _duration(seconds: float) -> str:
    seconds = round(seconds)
    return f"{seconds // 60}m{seconds % 60:02d}s" if seconds >= 60 else f"{seconds}s"


#: Replaced by tests (a fake GPU) and reset at every build; see :func:`local_gpu`.
gpu_detector: Callable[[], tuple[LocalGpu | None, str]] = detect_gpu
_detected: dict[str, tuple[LocalGpu | None, str]] = {}


def local_gpu() -> tuple[LocalGpu | None, str]:
    """The GPU, detected once per build (:func:`reset_detection` at ``builder-inited``)."""
    if "gpu" not in _detected:
        _detected["gpu"] = gpu_detector()
    return _detected["gpu"]


def reset_detection() -> None:
    _detected.clear()
    _stack.clear()
    READS.clear()


# ------------------------------------------------------------------------------- reading once
class ResultReads:
    """Each cache file read at most once while it is unchanged (keyed by its stat), and typed at most once
    (:meth:`result`).

    ``parses`` counts real reads of a file, so a test can prove the "once per file per build" rule.
    """

    def __init__(self) -> None:
        self._memo: dict[tuple[str, int, int, int], dict[str, Any] | CacheError] = {}
        self._results: dict[tuple[str, int, int, int], Result] = {}
        self.parses = 0
        #: Contents validated by this code in an earlier build (kept in the environment, see
        #: :func:`gemm_bench.results.cache.read_document`): an edit of prose re-reads a page's results
        #: without validating them again. ``validations`` counts the ones that were.
        self.trusted: set[str] = set()
        self.validations = 0

    def read(self, path: Path) -> dict[str, Any]:
        """The checked document at ``path``, or raise :class:`CacheError` (memoized too)."""
        return self._read(path)[1]

    def result(self, path: Path) -> Result:
        """The typed result of the file at ``path`` (:func:`gemm_bench.results.typed.parse` of its checked
        document), or raise :class:`CacheError`: parsed once while the file is unchanged, so every mode's
        report and every directive of the question share one :class:`Result` (issue 43)."""
        key, doc = self._read(path)
        found = self._results.get(key)
        if found is None:
            found = self._results[key] = parse(doc)
        return found

    def _read(self, path: Path) -> tuple[tuple[str, int, int, int], dict[str, Any]]:
        try:
            stat = path.lstat()
        except OSError as exc:
            raise CacheError(path, f"cannot be read ({exc.strerror or exc})") from None
        key = (str(path), stat.st_mtime_ns, stat.st_size, stat.st_ino)
        found = self._memo.get(key)
        if found is None:
            self.parses += 1
            known = len(self.trusted)
            try:
                found = read_document(path, trusted=self.trusted)
            except CacheError as exc:
                found = exc
            self.validations += int(len(self.trusted) > known or isinstance(found, CacheError))
            self._memo[key] = found
        if isinstance(found, CacheError):
            raise found
        return key, found

    def clear(self) -> None:
        self._memo.clear()
        self._results.clear()
        self.parses = 0
        self.validations = 0


READS = ResultReads()


def read_results(cache: Cache, question_hash: str) -> tuple[list[tuple[Path, Result]], list[CacheError]]:
    """Every cache file of one question, each typed once per build (:data:`READS`), and one error per file
    that was refused (or the listing's): what the directives, the layout tables and the published runs
    read, so no page reads, checks or parses a file another page already has."""
    try:
        files = cache.files(question_hash)
    except CacheError as exc:
        return [], [exc]
    results: list[tuple[Path, Result]] = []
    errors: list[CacheError] = []
    for path in files:
        try:
            results.append((path, READS.result(path)))
        except CacheError as exc:
            errors.append(exc)
    return results, errors


# ------------------------------------------------------------------------------- the answer
@dataclasses.dataclass
class DeviceAnswer:
    """One device's result for a directive, typed once (:meth:`ResultReads.result`), how fresh it is, and
    its reports (one per mode, each on that same :class:`Result`)."""

    device: str
    slug: str
    path: Path
    result: Result
    status: Status
    reason: str
    reports: dict[str, Report]
    measured_now: bool = False


@dataclasses.dataclass
class Answer:
    devices: list[DeviceAnswer]
    #: Cache files that failed validation: never used, each reported with its path.
    errors: list[CacheError]
    #: Measurement problems the directive logs as warnings at its own location.
    problems: list[str]
    #: Device selectors (``:devices:``) with no result.
    unmatched: list[str]
    #: Every cache file this answer depended on (read or refused): page dependencies.
    files: list[Path] = dataclasses.field(default_factory=list)

    @property
    def status(self) -> Status:
        """The directive's overall status: its worst device (missing when it has none)."""
        if not self.devices or self.unmatched:
            return Status.MISSING
        return min((d.status for d in self.devices), key=lambda s: STATUSES.index(s.value))


def reports_for(result: Result, question: Question, precisions: Sequence[str],
                modes: Sequence[str]) -> dict[str, Report]:
    """One report per mode, built from the page's question: its GEMMs, layers and kind decide. Each is
    built on ``result`` (typed once), so no mode parses the document again."""
    return {
        mode: Report(result, gemms=list(question.gemms), num_layers=question.num_layers, kind=question.kind,
                     modes=[mode], precisions=list(precisions), config=question.config)
        for mode in modes
    }


def clock() -> dt.datetime:
    """Now, for judging a result's age (one function, so a test can move time)."""
    return dt.datetime.now(dt.timezone.utc)


def how_to_measure(gpu: str, cache_dir: Path) -> str:
    """How a GPU's missing result gets into the cache, as a clause (``gpu``: "such a GPU", "b200").

    One wording for every place that reports a result nobody has measured: the directive's "Not
    measured yet" panel (:func:`.render_block.not_measured_admonition`), its warning, and a role
    quoting a GPU the cache has no result for (:mod:`.roles`), so an author is told the same thing by
    all. It names what works in *any* project using the extension (a build in execution mode auto,
    ``gemm-bench refresh``), never this repository's own ``nox`` sessions, which an author's project
    does not have.
    """
    return (f"build the docs on {gpu} in execution mode auto (the default of gemm_benchmark_execution_mode; "
            f"{ENV_VAR}=auto overrides conf.py), which measures what is missing, or run gemm-bench refresh "
            f"DOCS_DIR there (DOCS_DIR: the folder of conf.py); then commit the new file in {cache_dir.name}/")


#: What a page does about hardware it expects to lack a result (a GPU not measured yet on purpose).
MISSING_NOTE_REMEDY = ("where the page shows hardware not measured yet on purpose, :missing: note makes this "
                       "a note instead of a warning")


def freshness_key(dates: Sequence[str], *, max_age_days: float | None, mode: str) -> str:
    """What a page's rendering of results dated ``dates`` depends on beyond their files' contents.

    Which of them are older than the configured age *now*, and this GPU box's software stack where
    this build may measure (:func:`answer` judges this box's own result against it). A page whose
    key changed since it was read is read again (:class:`.records.GemmBenchmarkCollector`), so an
    incremental build re-judges staleness as a full one would.
    """
    now = clock()
    aged = [bool(result_staleness(METHOD_VERSION, date, max_age_days, now)) for date in dates]
    stack = None
    if mode != "cache" and local_gpu()[0] is not None:
        stack = _local_stack()
    return json.dumps([aged, stack], sort_keys=True, default=str)


def result_staleness(method_version: str, date: str, max_age_days: float | None,
                   now: dt.datetime | None = None) -> str | None:
    """Why a result of ``method_version`` measured on ``date`` is stale
    (:func:`gemm_bench.results.cache.is_stale`: another method, or older than ``max_age_days``), or None.
    What a result's typed fields give it, so the answer and the page's key judge the same rule."""
    return is_stale({"method_version": method_version, "provenance": {"date": date}}, max_age_days=max_age_days,
                    now=now or clock())


def measured_stack(result: Result) -> dict[str, Any]:
    """The method version and provenance of ``result`` as :func:`gemm_bench.results.stack.stack_staleness`
    reads a document's, from the typed fields."""
    return {"method_version": result.method_version, "provenance": dataclasses.asdict(result.provenance)}


def lacking_reason(result: Result, question: Question, status: str, reason: str) -> str:
    """A fresh result's reason on the freshness page when it lacks what this code measures with its
    step (:func:`gemm_bench.results.stack.lacking_blocks`): not a warning (the pages render what it
    has), but never "fresh" without a word while ``gemm-bench refresh`` plans it."""
    lacking = lacking_blocks(result, question) if status == Status.FRESH.value else []
    return f"lacks {' and '.join(lacking)}: the next refresh measures them" if lacking else reason


def assess(reports: dict[str, Report], result: Result, max_age_days: float | None) -> tuple[Status, str]:
    """(status, reason) of one cached result for the cells a directive asks for."""
    stale = result_staleness(result.method_version, result.provenance.date, max_age_days)
    if stale:
        return Status.STALE, stale
    missing = [cell for report in reports.values() for cell in report.missing_cells()]
    if missing:
        pairs = sorted({f"{m}/{p}" for m, p, _ in missing})
        return Status.MISSING, f"{len(missing)} requested cells were never measured ({', '.join(pairs)})"
    # A failed layer step counts as a failed GEMM cell does (a summary shows it as failed).
    failed = list(dict.fromkeys(found for report in reports.values() for found in report.failures()))
    if failed:
        return Status.FAILED, "failed: " + ", ".join(f"{m}/{p} ({why})" for m, p, why in failed)
    return Status.FRESH, ""


def to_measure(doc: dict[str, Any] | None, question: Question, precisions: Sequence[str], modes: Sequence[str],
               *, force: bool, max_age_days: float | None,
               stale_when: Sequence[str] = DEFAULT_STALE_WHEN,
               retry_failed: bool = True, peers: bool = False) -> Todo | None:
    """What this GPU should measure now (precisions, modes, peers), or None when the cache suffices.

    The rule is :func:`gemm_bench.results.stack.remeasure`, shared with ``gemm-bench refresh``: a mode is
    measured whole, a result measured with another software stack (the fields of
    ``gemm_benchmark_stale_when``) is stale on this GPU box, and a mode with a failed cell is measured
    again (``retry_failed``: not for a result this build already measured). ``peers``: the directive
    shows the peers, so a run times them, and a fresh result without them gets them alone.
    """
    rules = Rules(stale_when=tuple(stale_when), max_age_days=max_age_days, force=force, retry_failed=retry_failed)
    return remeasure(doc, question, precisions, modes, local=_local_stack(), rules=rules, peers=peers)


def _local_stack() -> dict[str, str] | None:
    """This GPU box's software stack (asked once per build), None where nothing can be measured."""
    if "stack" not in _stack:
        _stack["stack"] = local_stack()
    return _stack["stack"]


_stack: dict[str, dict[str, str] | None] = {}


def answer(question: Question, *, precisions: Sequence[str], modes: Sequence[str], devices: Sequence[str],
           cache_dir: Path, mode: str, max_age_days: float | None, build_started: float,
           stale_when: Sequence[str] = DEFAULT_STALE_WHEN, peers: bool = False) -> Answer:
    """Look the question up, measure on this GPU if the mode says so, and assess every device.

    ``peers``: the directive shows the peers (``:show: peers``; a summary never does): only then
    does a measurement time them (issue 34)."""
    cache = Cache(cache_dir)
    problems: list[str] = []
    local: LocalGpu | None = None
    if mode != "cache":
        gpu, _ = local_gpu()
        local = gpu
        if gpu is not None and (not devices or any(select(s, [gpu.name]) for s in devices)):
            problem = _measure_if_needed(cache, gpu, question, precisions, modes, mode=mode,
                                         max_age_days=max_age_days, build_started=build_started,
                                         stale_when=stale_when, peers=peers)
            if problem:
                problems.append(problem)
    results, errors = read_results(cache, question.hash)
    files = [*(path for path, _ in results), *(error.path for error in errors)]
    by_name: dict[str, DeviceAnswer] = {}
    for path, result in sorted(results, key=lambda item: item[1].device.name):
        name = result.device.name
        try:
            reports = reports_for(result, question, precisions, modes)
        except (ResultError, ValueError) as exc:  # the file's GEMMs are not the page's question
            errors.append(CacheError(path, f"does not answer this question: {exc}"))
            continue
        status, reason = assess(reports, result, max_age_days)
        other = other_vocabulary(result, question.config)
        if other is not None:  # the page's :vocab-size: (not in the hash) is not the one measured
            problems.append(f"on {name}, the page's :vocab-size: asks for another vocabulary than the result's "
                            f"model step: {other_vocabulary_text(*other)}; no model-step number is shown")
        if status is Status.FRESH and local is not None and device_slug(local.name) == device_slug(name):
            # Only this box's own GPU result can be judged against this box's software stack.
            by_stack = stack_staleness(measured_stack(result), _local_stack(), stale_when)
            if by_stack:
                status, reason = Status.STALE, by_stack
        measured_now = mode != "cache" and path.stat().st_mtime >= build_started
        by_name[name] = DeviceAnswer(name, device_slug(name), path, result, status, reason, reports, measured_now)
    chosen = list(by_name.values())
    unmatched: list[str] = []
    if devices:
        chosen = []
        for selector in devices:
            selected = select(selector, by_name)
            if selected is None:
                unmatched.append(selector)
            elif by_name[selected] not in chosen:
                chosen.append(by_name[selected])
    return Answer(chosen, errors, problems, unmatched, files)


def _current(cache: Cache, question: Question, gpu: LocalGpu) -> dict[str, Any] | None:
    path = cache.path_for(question.hash, gpu.name)
    try:
        return READS.read(path) if path.exists() or path.is_symlink() else None
    except CacheError:
        return None  # a corrupt file of this GPU is replaced by a fresh measurement


def _measure_if_needed(cache: Cache, gpu: LocalGpu, question: Question, precisions: Sequence[str],
                       modes: Sequence[str], *, mode: str, max_age_days: float | None,
                       build_started: float, stale_when: Sequence[str], peers: bool = False) -> str | None:
    """Measure what this GPU lacks; the message of a failure, or None. Never raises for a GPU error.

    ``force`` re-measures a question once per build: a file written since the build started (by
    this process or another ``-j`` worker) already is this build's measurement. A run of some modes
    with the peers can leave the peers of the file's other modes missing: they are then measured
    alone (a second, peers-only run), so the page shows every peer it asks for.
    """
    path = cache.path_for(question.hash, gpu.name)

    def this_build() -> bool:
        """The file was written by this build (this process or another ``-j`` worker)."""
        return path.exists() and path.stat().st_mtime >= build_started

    def todo() -> Todo | None:
        # Once per build: ``force`` re-measures, and a failed cell is measured again, only in a
        # file this build has not written yet (a failure that repeats is this build's answer).
        measured = this_build()
        return to_measure(_current(cache, question, gpu), question, precisions, modes,
                          force=mode == "force" and not measured, max_age_days=max_age_days,
                          stale_when=stale_when, retry_failed=not measured, peers=peers)

    if todo() is None:
        return None
    cache.directory.mkdir(parents=True, exist_ok=True)
    with FileLock(str(cache.directory / GPU_LOCK_NAME)):
        # Another process may have measured this question while we waited for the lock.
        planned = todo()
        ran_peers_only = False
        while planned is not None and not ran_peers_only:
            ran_peers_only = planned.peers_only
            what = "the peers alone" if planned.peers_only else ", ".join(planned.precisions)
            logger.info("gemm-benchmark: measuring %s (%s) on %s: %s | %s%s", question.hash, question.describe(),
                        gpu.name, what, ", ".join(planned.modes), " | with peers" if planned.peers else "")
            try:
                doc = gpu.measure(question, planned.precisions, planned.modes, peers=planned.peers,
                                  peers_only=planned.peers_only)
                if planned.peers_only:
                    store_peers(cache, doc)
                else:
                    cache.store(doc)
            except (RuntimeError, OSError, ValueError, MemoryError, CacheError) as exc:
                # A failed measurement (CUDA errors are RuntimeErrors) leaves the cache as it was.
                return f"measuring on {gpu.name} failed: {type(exc).__name__}: {exc}"
            # What a run with peers left without them (another mode's): the peers alone, once.
            planned = todo() if peers else None
            if planned is not None and not planned.peers_only:
                planned = None  # anything else is this build's answer (a repeated failure, say)
    return None
