"""Shared fixtures: Sphinx's test fixtures, the test roots, result documents, GPU gating, and the
real site's build and refresh's reading of a site, each done once per test run (``docs_site``,
``shared_site_reads``; tests/site_build.py).

Extension tests build tiny projects from ``tests/roots/test-<name>/`` with Sphinx's own fixtures;
each test passes a unique ``srcdir`` so the project is copied into a temporary directory and
its result cache (``_gemm_cache`` beside ``conf.py``) can be written freely.
"""

from __future__ import annotations

import gc
import hashlib
import importlib.util
import itertools
import os
import tempfile
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any

import pytest
from hypothesis import settings as hypothesis_settings

pytest_plugins = ["sphinx.testing.fixtures"]

#: The cyclic garbage collector's thresholds in pytest's own processes (the children that tests start
#: keep CPython's). With the default (700, 10, 10) each xdist worker ran about 9,000 young and 60-90
#: full collections, 1.5-3 s of them while importing the test modules: 22 s of the suite's ~205 s of
#: CPU, mostly full collections walking the documents, soups and doctrees that tests keep. With these
#: (and the collection's objects frozen, :func:`pytest_collection_finish`) 9 s. Reference counting
#: still frees everything without a cycle at once; a cycle waits for 50,000 allocations, not 700.
GC_THRESHOLDS = (50_000, 20, 20)
gc.set_threshold(*GC_THRESHOLDS)

# PyTorch on CPU with one intra-op thread, in pytest's processes and the children they start (set before
# anything imports torch; a value the caller set is kept). Under pytest-xdist each worker already has a
# core, and torch's default (a thread per core) made each worker's threads wait on the others': with
# the other core busy, the MoE/MLA measuring-path tests took 10.5 s and 11 s of CPU instead of 5.4 s and
# 4.4 s, and once, beside another worker and another process, 76 s instead of 2 s. The numbers are the
# same computation either way, and tests that compare runs (the same seed twice) make both alike.
os.environ.setdefault("OMP_NUM_THREADS", "1")

# Hypothesis profiles (``pytest --hypothesis-profile=NAME``). Every fuzzer states its budget in examples,
# ``@settings(max_examples=fuzz_examples(N))``, and the profile scales it: ``ci`` (what ``nox -s tests``
# and so CI run, and what the suite's time is counted with) and the default run N; ``thorough`` runs
# 10 N, for a change to what a fuzzer covers or a nightly job (``nox -s tests -- --hypothesis-profile=
# thorough``: about 10x the fuzzers' minutes). ``ci`` has no deadline (a loaded 2-core machine is
# slow, not wrong) and prints the blob that reproduces a failure.
#
# ``ci`` is derandomized (which implies no example database): each fuzzer draws the same examples on
# every run of the same commit, seeded from the test itself, so CI's verdict is the commit's, never a
# draw's, and nothing is read from an earlier run (a draw stored in .hypothesis/ once failed every
# later run: a file name longer than the file system takes, a bug of the test). ``database=None``
# alone would still let each CI run fail or pass on a new random draw; a fuzzer's reach grows instead
# with ``thorough``, random and without a database, run on purpose (a change to what a fuzzer covers,
# a nightly job). A plain ``pytest`` keeps Hypothesis's defaults: random, with the local database.
hypothesis_settings.register_profile("ci", deadline=None, print_blob=True, derandomize=True, database=None)
hypothesis_settings.register_profile("thorough", deadline=None, print_blob=True, max_examples=1000, database=None)


def fuzz_examples(n: int) -> int:
    """A fuzzer's stated budget of ``n`` examples under the loaded profile (``thorough``: 10 n)."""
    return max(1, round(n * hypothesis_settings.default.max_examples / 100))

TESTS = Path(__file__).parent
DATA = TESTS / "data"

H100 = {"name": "NVIDIA H100 80GB HBM3", "compute_capability": "9.0", "sm_count": 132}
H200 = {"name": "NVIDIA H200", "compute_capability": "9.0", "sm_count": 132}


@pytest.fixture(scope="session")
def rootdir() -> Path:
    return TESTS / "roots"


@pytest.fixture(scope="session")
def docs_site(tmp_path_factory: pytest.TempPathFactory) -> Any:
    """The real site built once per test run from the committed cache (:func:`tests.site_build.shared_docs_build`),
    shared by every module and xdist worker: read it, never write into it."""
    from tests.site_build import shared_docs_build

    return shared_docs_build(tmp_path_factory)


@pytest.fixture(scope="session")
def _site_reads(tmp_path_factory: pytest.TempPathFactory) -> Any:
    from gemm_bench.cli import refresh
    from tests.site_build import SiteReads, run_root

    return SiteReads(run_root(tmp_path_factory) / "site-reads", refresh.read_site)


@pytest.fixture
def shared_site_reads(_site_reads: Any, monkeypatch: pytest.MonkeyPatch) -> Any:
    """``gemm-bench refresh`` reads each distinct site once per test run (:class:`tests.site_build.SiteReads`):
    for tests that refresh copies of the same pages. ``read_site`` called by name from a test still reads."""
    from gemm_bench.cli import refresh

    monkeypatch.setattr(refresh, "read_site", _site_reads)
    return _site_reads


@pytest.fixture
def cpu_step() -> Any:
    """:mod:`tests.test_model_step_measure_cpu` (its tiny model, the fake Transformer Engine it measures
    through, its document with a model-step block), which run on PyTorch's CPU build. A test module
    that imports it at the top stops the whole collection where torch is missing; a test that asks
    for this fixture skips there, and the rest of its module runs."""
    pytest.importorskip("torch", reason="the fake Transformer Engine runs on PyTorch's CPU build (test-torch extra)")
    from tests import test_model_step_measure_cpu

    return test_model_step_measure_cpu


def cuda_available() -> bool:
    """A CUDA GPU with Transformer Engine: what ``@pytest.mark.gpu`` tests need."""
    if importlib.util.find_spec("torch") is None or importlib.util.find_spec("transformer_engine") is None:
        return False
    import torch

    return bool(torch.cuda.is_available())


def pytest_collection_finish(session: pytest.Session) -> None:
    """Move what collecting made (modules, test items, fixtures' definitions) out of the collector's
    reach: every full collection would walk it again, and none of it becomes garbage before the end."""
    gc.freeze()


@pytest.hookimpl(trylast=True)  # after pytest's own reordering by fixture scope, which this keeps within each group
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if any(item.get_closest_marker("gpu") for item in items) and not cuda_available():
        skip = pytest.mark.skip(reason="needs a CUDA GPU with Transformer Engine")
        for item in items:
            if item.get_closest_marker("gpu"):
                item.add_marker(skip)
    items[:] = slow_first(items, int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1")))


def slow_first(items: list[pytest.Item], workers: int) -> list[pytest.Item]:
    """``items`` with the ``slow`` ones (seconds each: fuzzers, whole-site builds, killed processes) at
    the head of each worker's share, dealt round-robin; otherwise in their order.

    pytest-xdist's worksteal gives worker k the k-th contiguous part of this list (``len // n``, then
    the rest alike) and later moves tests only from the end of a queue, never a worker's last two:
    with the fuzzers last alphabetically in one half, one worker ran them for 18 s after the other
    had finished. At the head of each share, the run ends on short tests that any worker can take.
    """
    slow = [item for item in items if item.get_closest_marker("slow")]
    rest = iter([item for item in items if not item.get_closest_marker("slow")])
    ordered: list[pytest.Item] = []
    left = len(items)
    for k in range(workers):
        size = left // (workers - k)
        left -= size
        share = slow[k::workers]
        ordered += share + list(itertools.islice(rest, max(0, size - len(share))))
    return ordered + list(rest)


@pytest.fixture(autouse=True)
def _no_accidental_measuring(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch,
                             tmp_path_factory: pytest.TempPathFactory) -> None:
    """Builds in tests see no GPU and ignore the caller's GEMM_BENCH_EXECUTION_MODE.

    CI exports ``GEMM_BENCH_EXECUTION_MODE=cache``; a developer's GPU box would otherwise measure
    during tests. Tests that exercise measuring install a fake GPU themselves; ``gpu`` tests keep
    the real one.
    """
    without_gpu(monkeypatch, tmp_path_factory, gpu=request.node.get_closest_marker("gpu") is not None)


def without_gpu(monkeypatch: pytest.MonkeyPatch, tmp_path_factory: pytest.TempPathFactory, *,
                gpu: bool = False) -> None:
    """What ``_no_accidental_measuring`` does for each test, for a module- or session-scoped
    fixture that builds (those are set up before any test's own fixtures): no GPU unless ``gpu``,
    the caller's execution mode ignored, a private torch.compile folder."""
    from gemm_benchmark import execution

    monkeypatch.delenv(execution.ENV_VAR, raising=False)
    if not gpu:
        monkeypatch.setattr(execution, "gpu_detector", lambda: (None, "tests run without a GPU"))
        # the CLI's and the measuring path's torch.compile folder: never the developer's own
        monkeypatch.setenv("GEMM_BENCH_COMPILE_CACHE", str(fresh_compile_cache(tmp_path_factory)))
        monkeypatch.delenv("TORCHINDUCTOR_CACHE_DIR", raising=False)
    execution.reset_detection()


def fresh_compile_cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """An empty folder of its own for one test's torch.compile cache, in ``torch-compile/`` of the
    worker's temporary directory. ``tmp_path_factory.mktemp`` lists the whole directory to number each
    new folder: for the ~900 tests of a worker, beside their own ``tmp_path`` folders, that grew to
    1.3 ms a test (and slowed every ``tmp_path`` alike); ``mkdtemp`` picks a random name instead."""
    parent = tmp_path_factory.getbasetemp() / "torch-compile"
    parent.mkdir(exist_ok=True)
    return Path(tempfile.mkdtemp(dir=parent))


def make_document(
    question: Any,
    *,
    device: Mapping[str, Any] = H100,
    precisions: Iterable[str] = ("bf16", "fp8-delayed", "fp8-current", "fp8-block", "mxfp8", "nvfp4"),
    modes: Iterable[str] = ("autocast", "prequant"),
    unsupported: Mapping[str, str] | None = None,
    failed: Mapping[tuple[str, str], str] | None = None,
    speed: float = 1.0,
    date: str = "2026-11-20T10:00:00+00:00",
    method_version: str | None = None,
) -> dict[str, Any]:
    """A valid synthetic result document: BF16 at ~600 TFLOP/s x ``speed``, FP8 faster.

    ``unsupported`` maps precision -> reason (every cell); ``failed`` maps (mode, precision) ->
    message. Precisions without a pre-quantized form get bench's own reason for that mode.
    """
    from gemm_bench.question.precisions import PRECISIONS
    from gemm_bench.results.schema import new_document

    precisions, modes = tuple(precisions), tuple(modes)

    factors = {"bf16": 1.0, "fp8-delayed": 1.7, "fp8-current": 1.6, "fp8-block": 1.35, "mxfp8": 1.8, "nvfp4": 2.6}
    doc = new_document(
        kind=question.kind, gemms=list(question.gemms), num_layers=question.num_layers,
        config=question.config.to_dict() if question.config else None, device=dict(device),
        provenance={"torch": "2.11.0", "transformer_engine": "2.20.2", "cuda": "13.0", "cublas": "13.1.0",
                    "driver": "580.0", "commit": "test", "date": date,
                    "method": {"timer": "synthetic test data", "repetitions": 1, "statistic": "median"}},
        notes=question.notes,
        # Deterministic: the same synthetic document is byte-identical in every process.
        run_id="test-" + hashlib.sha256(repr((question.hash, dict(device), tuple(precisions), tuple(modes), speed,
                                               date)).encode()).hexdigest()[:12],
    )
    if method_version is not None:
        doc["method_version"] = method_version
    unsupported = dict(unsupported or {})
    failed = dict(failed or {})
    cells = []
    for mode in modes:
        for p in precisions:
            for i, g in enumerate(question.gemms):
                cell = {"mode": mode, "precision": p, "op": g.op, "pass": g.pass_, "m": g.m, "k": g.k,
                        "n": g.n, "groups": g.groups}
                if not PRECISIONS[p].has_mode(mode):
                    cell.update(status="unsupported", reason=PRECISIONS[p].absent_modes[mode])
                elif p in unsupported:
                    cell.update(status="unsupported", reason=unsupported[p])
                elif (mode, p) in failed:
                    cell.update(status="failed", reason=failed[(mode, p)])
                else:
                    factor = factors[p] * (1.1 if mode == "prequant" else 1.0) * (1 + 0.01 * i)
                    ms = round(g.flops / (600e12 * speed * factor) * 1e3, 6)
                    cell.update(status="measured", ms=ms, stats={"median_ms": ms, "iqr_ms": ms * 0.01})
                cells.append(cell)
    doc["cells"] = cells
    return doc


def write_document(cache_dir: Path, doc: dict[str, Any]) -> Path:
    """Write ``doc`` where the cache looks for it (``<hash>--<device slug>.json``)."""
    from gemm_bench.results.cache import dumps, file_name

    cache_dir.mkdir(parents=True, exist_ok=True)
    path = cache_dir / file_name(doc["question_hash"], doc["device"]["name"])
    path.write_text(dumps(doc), encoding="utf-8")
    return path


def copy_real_document(cache_dir: Path, name: str) -> Path:
    """Copy a real GPU result from tests/data into a cache under its proper file name, as a result
    of the current method: these fixtures (method v1, H100, 2026-11-23) are real numbers for the
    rendering tests, which must not see every one of them stale since method v4. Tests about
    staleness set a document's method version themselves."""
    from gemm_bench.results.cache import dumps, file_name, read_document
    from gemm_bench.results.schema import METHOD_VERSION

    source = DATA / name
    doc = read_document_any_name(source)
    doc["method_version"] = METHOD_VERSION
    cache_dir.mkdir(parents=True, exist_ok=True)
    target = cache_dir / file_name(doc["question_hash"], doc["device"]["name"])
    target.write_text(dumps(doc), encoding="utf-8")
    read_document(target)  # validates, including the file name
    return target


def read_document_any_name(path: Path) -> dict[str, Any]:
    import json

    return json.loads(path.read_text(encoding="utf-8"))


@pytest.fixture
def question() -> Callable[..., Any]:
    """``question(model="te-guide-5b")``: bench's build_question."""
    from gemm_bench.question.question import build_question

    return build_question


@pytest.fixture
def make_result() -> Callable[..., dict[str, Any]]:
    return make_document


@pytest.fixture
def store_result() -> Callable[[Path, dict[str, Any]], Path]:
    return write_document


@pytest.fixture
def real_result() -> Callable[[Path, str], Path]:
    return copy_real_document
