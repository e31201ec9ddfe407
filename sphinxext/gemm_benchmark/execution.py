"""Answering a directive's question: from the cache, or by measuring on this machine's GPU.

Modelled on myst-nb's ``nb_execution_mode``:

``cache``
    never measure; render what the cache holds (a CPU-only build, CI).
``auto`` (default)
    where a CUDA GPU and Transformer Engine are importable, measure this GPU's result when the
    cache lacks it, lacks cells the page asks for, or holds a stale one.
``force``
    re-measure this GPU's result for every question, once per build.

``GEMM_BENCH_EXECUTION_MODE`` overrides ``conf.py`` so that a CI job or a GPU box can change the
mode without editing the project. Results of *other* devices can only come from the cache: a
build measures the GPU it runs on.

GPU work is serialized by an exclusive ``fcntl`` lock on ``gemm-benchmark-gpu.lock`` in the cache
directory: two processes of a ``-j`` build (or two builds) timing GEMMs at once would each
measure the other's interference. Inside the lock the cache is consulted again, because another
process may just have measured the same question.

Nothing here imports torch unless a measurement may be needed; the GPU check is cached per process.
"""

from __future__ import annotations

import contextlib
import dataclasses
import fcntl
import importlib.util
import os
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

from gemm_bench.cache import Cache, CacheError, is_stale
from gemm_bench.precisions import BASELINE
from gemm_bench.question import Question
from gemm_bench.report import Report
from gemm_bench.results import device_slug

EXECUTION_MODES: tuple[str, ...] = ("cache", "auto", "force")
ENV_VAR = "GEMM_BENCH_EXECUTION_MODE"
GPU_LOCK_NAME = "gemm-benchmark-gpu.lock"

#: Freshness statuses, in the order of how much they need attention.
STATUSES: tuple[str, ...] = ("missing", "stale", "failed", "fresh")


def execution_mode(configured: str) -> str:
    """The mode in effect: the environment variable wins over ``conf.py``."""
    value = os.environ.get(ENV_VAR, "").strip().lower() or str(configured).strip().lower()
    if value not in EXECUTION_MODES:
        source = ENV_VAR if os.environ.get(ENV_VAR, "").strip() else "gemm_benchmark_execution_mode"
        raise ValueError(f"{source}={value!r} is not one of {', '.join(EXECUTION_MODES)}")
    return value


@dataclasses.dataclass(frozen=True)
class LocalGpu:
    """The GPU this build can measure on: its name (as results record it) and how to measure."""

    name: str
    measure: Callable[[Question, Sequence[str], Sequence[str]], dict[str, Any]]


def detect_gpu() -> tuple[LocalGpu | None, str]:
    """This machine's GPU, or None and why not. Imports torch only if it is installed."""
    if importlib.util.find_spec("torch") is None:
        return None, "PyTorch is not installed"
    try:
        import torch
    except Exception as exc:  # a broken install is "no GPU", not a failed build
        return None, f"PyTorch cannot be imported ({exc})"
    if not torch.cuda.is_available():
        return None, "no CUDA GPU is visible to PyTorch"
    try:
        import transformer_engine.pytorch  # noqa: F401
    except Exception as exc:
        return None, f"Transformer Engine cannot be imported ({exc})"

    def measure(question: Question, precisions: Sequence[str], modes: Sequence[str]) -> dict[str, Any]:
        from gemm_bench.runner import Runner
        from gemm_bench.timing import TimerSettings

        return Runner(TimerSettings()).measure(question, list(precisions), list(modes))

    return LocalGpu(torch.cuda.get_device_name(), measure), ""


#: Replaced by tests (a fake GPU) and reset at every build; see :func:`local_gpu`.
gpu_detector: Callable[[], tuple[LocalGpu | None, str]] = detect_gpu
_detected: dict[str, tuple[LocalGpu | None, str]] = {}


def local_gpu() -> tuple[LocalGpu | None, str]:
    if "gpu" not in _detected:
        _detected["gpu"] = gpu_detector()
    return _detected["gpu"]


def reset_detection() -> None:
    _detected.clear()


@contextlib.contextmanager
def gpu_lock(cache_dir: Path) -> Iterator[None]:
    """One GPU job at a time across processes (``-j``) and concurrent builds."""
    cache_dir.mkdir(parents=True, exist_ok=True)
    with open(cache_dir / GPU_LOCK_NAME, "a+") as handle:
        fcntl.flock(handle.fileno(), fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle.fileno(), fcntl.LOCK_UN)


@dataclasses.dataclass
class DeviceAnswer:
    """One device's result for a directive, with how fresh it is."""

    device: str
    slug: str
    path: Path
    doc: dict[str, Any]
    status: str  # one of STATUSES except "missing" (a device with no file has no DeviceAnswer)
    reason: str
    measured_now: bool = False


@dataclasses.dataclass
class Answer:
    devices: list[DeviceAnswer]
    #: Cache files that failed validation: never used, each reported with its path.
    errors: list[CacheError]
    #: (subtype, message) pairs the directive logs as warnings at its own location.
    problems: list[tuple[str, str]]
    #: Device selectors (``:devices:``) with no result.
    unmatched: list[str]

    @property
    def status(self) -> str:
        """The directive's overall status: its worst device (missing when it has none)."""
        if not self.devices or self.unmatched:
            return "missing"
        return min((d.status for d in self.devices), key=STATUSES.index)


def assess(doc: dict[str, Any], precisions: Sequence[str], modes: Sequence[str],
           max_age_days: float | None) -> tuple[str, str]:
    """(status, reason) of one cached document for the cells a directive asks for."""
    stale = is_stale(doc, max_age_days=max_age_days)
    if stale:
        return "stale", stale
    report = Report(doc, modes=modes, precisions=precisions)
    missing = report.missing_cells()
    if missing:
        pairs = sorted({f"{m}/{p}" for m, p, _ in missing})
        return "missing", f"{len(missing)} requested cells were never measured ({', '.join(pairs)})"
    failed = [(m, p) for m in modes for p in precisions if report.status(m, p)[0] == "failed"]
    if failed:
        return "failed", "failed: " + ", ".join(f"{m}/{p} ({report.status(m, p)[1]})" for m, p in failed)
    return "fresh", ""


def matches(selector: str, device_name: str) -> bool:
    """``h100`` selects ``NVIDIA H100 80GB HBM3`` (slug ``h100-80gb-hbm3``)."""
    selector = selector.strip().lower()
    return selector in device_slug(device_name) or selector in device_name.lower()


def _needs_measuring(doc: dict[str, Any] | None, path: Path, precisions: Sequence[str], modes: Sequence[str],
                     mode: str, max_age_days: float | None, build_started: float) -> tuple[list[str], list[str]] | None:
    """Which (precisions, modes) this GPU should measure now, or None when the cache suffices."""
    if doc is None:
        return list(precisions), list(modes)
    if mode == "force":
        if path.exists() and path.stat().st_mtime >= build_started:
            return None  # measured earlier in this very build
        return list(precisions), list(modes)
    if is_stale(doc, max_age_days=max_age_days):
        return list(precisions), list(modes)
    missing = Report(doc, modes=modes, precisions=precisions).missing_cells()
    if not missing:
        return None
    want_p = [p for p in precisions if any(m[1] == p for m in missing)]
    want_m = [m for m in modes if any(x[0] == m for x in missing)]
    return list(dict.fromkeys([BASELINE, *want_p])), want_m


def answer(question: Question, *, precisions: Sequence[str], modes: Sequence[str], devices: Sequence[str],
           cache_dir: Path, mode: str, max_age_days: float | None, build_started: float) -> Answer:
    """Look the question up, measure on this GPU if the mode says so, and assess every device."""
    cache = Cache(cache_dir)
    problems: list[tuple[str, str]] = []
    lookup = cache.lookup(question.hash)
    if mode != "cache":
        gpu, _ = local_gpu()
        if gpu is not None and (not devices or any(matches(s, gpu.name) for s in devices)):
            problems += _measure_if_needed(cache, gpu, question, precisions, modes, lookup.documents,
                                           mode, max_age_days, build_started)
            lookup = cache.lookup(question.hash)
    results = []
    for doc in sorted(lookup.documents, key=lambda d: d["device"]["name"]):
        name = doc["device"]["name"]
        path = cache.path_for(question.hash, name)
        status, reason = assess(doc, precisions, modes, max_age_days)
        measured_now = path.stat().st_mtime >= build_started if mode != "cache" else False
        results.append(DeviceAnswer(name, device_slug(name), path, doc, status, reason, measured_now))
    unmatched: list[str] = []
    if devices:
        chosen: list[DeviceAnswer] = []
        for selector in devices:
            found = [r for r in results if matches(selector, r.device) and r not in chosen]
            if not found:
                unmatched.append(selector)
            chosen += found
        results = chosen
    return Answer(results, lookup.errors, problems, unmatched)


def _measure_if_needed(cache: Cache, gpu: LocalGpu, question: Question, precisions: Sequence[str],
                       modes: Sequence[str], documents: list[dict[str, Any]], mode: str,
                       max_age_days: float | None, build_started: float) -> list[tuple[str, str]]:
    path = cache.path_for(question.hash, gpu.name)
    current = next((d for d in documents if d["device"]["name"] == gpu.name), None)
    if _needs_measuring(current, path, precisions, modes, mode, max_age_days, build_started) is None:
        return []
    with gpu_lock(cache.directory):
        # Another process may have measured this question while we waited for the lock.
        fresh = cache.lookup(question.hash).documents
        current = next((d for d in fresh if d["device"]["name"] == gpu.name), None)
        todo = _needs_measuring(current, path, precisions, modes, mode, max_age_days, build_started)
        if todo is None:
            return []
        want_precisions, want_modes = todo
        try:
            doc = gpu.measure(question, want_precisions, want_modes)
            cache.store(doc)
        except Exception as exc:  # a failed measurement leaves the cache as it was
            return [("measure", f"measuring on {gpu.name} failed: {type(exc).__name__}: {exc}")]
    return []
