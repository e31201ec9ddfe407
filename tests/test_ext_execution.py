"""Execution modes with a fake GPU: what is measured, when, and how it reaches the cache."""

from __future__ import annotations

import os
import re
import time
from pathlib import Path

import pytest

from gemm_bench.question.question import build_question
from gemm_bench.results.cache import Cache
from gemm_benchmark import execution

FAKE = {"name": "NVIDIA Fake GPU", "compute_capability": "9.0"}


@pytest.fixture
def fake_gpu(monkeypatch, make_result):
    """A GPU that 'measures' by writing a synthetic document; records every call."""
    calls: list[tuple[str, tuple[str, ...], tuple[str, ...]]] = []

    def measure(question, precisions, modes, *, peers=False, peers_only=False):
        calls.append((question.hash, tuple(precisions), tuple(modes)))
        if os.environ.get("FAKE_GPU_FAILS"):
            raise RuntimeError("CUDA error: out of memory")
        return make_result(question, device=FAKE, precisions=precisions, modes=modes)

    monkeypatch.setattr(execution, "gpu_detector", lambda: (execution.LocalGpu(FAKE["name"], measure), ""))
    execution.reset_detection()
    return calls


def _clean(text: str) -> str:
    return re.sub(r"\x1b\[[0-9;]*m", "", text)


TE = build_question(model="te-guide-5b").hash


@pytest.mark.sphinx("html", testroot="execution", srcdir="execution-auto")
def test_auto_measures_once_and_answers_subsets_from_it(app, fake_gpu, warning):
    app.build()
    assert fake_gpu == [(TE, ("bf16", "fp8-current"), ("autocast",))]
    cache = Path(app.srcdir) / "_gemm_cache"
    assert (cache / execution.GPU_LOCK_NAME).exists()
    [doc] = Cache(cache).lookup(TE).documents
    assert doc["device"]["name"] == "NVIDIA Fake GPU"
    assert "WARNING" not in warning.getvalue()
    assert (Path(app.outdir) / "index.html").read_text(encoding="utf-8").count("NVIDIA Fake GPU") == 1


@pytest.fixture
def cache_mode_from_environment(monkeypatch):
    """Set before the app is created (requested first), as a shell would."""
    monkeypatch.setenv(execution.ENV_VAR, "cache")


@pytest.mark.sphinx("html", testroot="execution", srcdir="execution-env-cache")
def test_environment_variable_overrides_conf(cache_mode_from_environment, app, fake_gpu, warning):
    assert app.config.gemm_benchmark_execution_mode == "auto"
    app.build()
    assert fake_gpu == []
    assert "it was not measured: execution mode is cache" in _clean(warning.getvalue())


@pytest.mark.sphinx("html", testroot="execution", srcdir="execution-cached",
                    confoverrides={"gemm_benchmark_execution_mode": "auto"})
def test_auto_measures_only_missing_cells(app, fake_gpu, make_result, store_result):
    cache = Path(app.srcdir) / "_gemm_cache"
    store_result(cache, make_result(build_question(model="te-guide-5b"), device=FAKE, precisions=("bf16",),
                                    modes=("autocast", "prequant")))
    app.build()
    # BF16 is re-measured with the missing precision: speedups never mix two runs' baselines.
    assert fake_gpu == [(TE, ("bf16", "fp8-current"), ("autocast",))]
    [doc] = Cache(cache).lookup(TE).documents
    assert {(c["mode"], c["precision"]) for c in doc["cells"]} == {
        ("autocast", "bf16"), ("autocast", "fp8-current"), ("prequant", "bf16")}


@pytest.mark.sphinx("html", testroot="execution", srcdir="execution-complete")
def test_auto_with_complete_fresh_cache_measures_nothing(app, fake_gpu, make_result, store_result):
    store_result(Path(app.srcdir) / "_gemm_cache", make_result(build_question(model="te-guide-5b"), device=FAKE))
    app.build()
    assert fake_gpu == []


@pytest.mark.sphinx("html", testroot="execution", srcdir="execution-force",
                    confoverrides={"gemm_benchmark_execution_mode": "force"})
def test_force_remeasures_once_per_build(app, fake_gpu, make_result, store_result):
    path = store_result(Path(app.srcdir) / "_gemm_cache", make_result(build_question(model="te-guide-5b"), device=FAKE))
    old = time.time() - 3600
    os.utime(path, (old, old))
    app.build()
    assert len(fake_gpu) == 1  # two directives, one question: measured once


@pytest.mark.sphinx("html", testroot="execution", srcdir="execution-fails")
def test_failed_measurement_is_a_warning(app, fake_gpu, warning, monkeypatch):
    monkeypatch.setenv("FAKE_GPU_FAILS", "1")
    app.build()
    text = _clean(warning.getvalue())
    assert "index.rst:4: WARNING: gemm-benchmark: measuring on NVIDIA Fake GPU failed: RuntimeError: CUDA error" in text
    assert "[gemm_benchmark.measure]" in text
    assert "Not measured yet" in (Path(app.outdir) / "index.html").read_text(encoding="utf-8")


@pytest.mark.sphinx("html", testroot="execution", srcdir="execution-bad-mode",
                    confoverrides={"gemm_benchmark_execution_mode": "sometimes"})
def test_bad_mode_warns_and_measures_nothing(app, fake_gpu, warning):
    app.build()
    assert fake_gpu == []
    assert "gemm_benchmark_execution_mode='sometimes' is not one of cache, auto, force" in _clean(warning.getvalue())


def test_gpu_detection_without_torch_is_cheap_and_says_why(monkeypatch):
    monkeypatch.setattr(execution.importlib.util, "find_spec", lambda name: None)
    gpu, reason = execution.detect_gpu()
    assert gpu is None and reason == "PyTorch is not installed"


@pytest.mark.sphinx("html", testroot="execution", srcdir="execution-failed-retried")
def test_auto_measures_a_failed_result_again_once_per_build(app, monkeypatch, make_result, store_result):
    """Issue 31: a failed result was never re-measured: the build said "1 failed" and planned
    nothing, so a transient failure needed ``force``. Auto mode measures its mode again; a failure
    that repeats is this build's answer (two directives of one question: measured once)."""
    calls: list[tuple[tuple[str, ...], tuple[str, ...]]] = []

    def measure(question, precisions, modes, *, peers=False, peers_only=False):
        calls.append((tuple(precisions), tuple(modes)))
        return make_result(question, device=FAKE, precisions=precisions, modes=modes,
                           failed={("autocast", "fp8-current"): "CUDA error: an illegal memory access"})

    monkeypatch.setattr(execution, "gpu_detector", lambda: (execution.LocalGpu(FAKE["name"], measure), ""))
    execution.reset_detection()
    failed = {("autocast", "fp8-current"): "CUDA error: launch failed"}
    path = store_result(Path(app.srcdir) / "_gemm_cache", make_result(
        build_question(model="te-guide-5b"), device=FAKE, precisions=("bf16", "fp8-current"), modes=("autocast",),
        failed=failed))
    old = time.time() - 3600
    os.utime(path, (old, old))
    app.build()
    assert calls == [(("bf16", "fp8-current"), ("autocast",))]
    page = (Path(app.outdir) / "index.html").read_text(encoding="utf-8")
    assert "(failed: autocast/fp8-current (CUDA error: an illegal memory access))" in page
    assert "failed: failed:" not in page  # the provenance said the status twice


def test_the_planner_retries_failed_modes_unless_told_not_to(make_result) -> None:
    """The rule is the library's (gemm_bench.results.stack.remeasure, shared with gemm-bench refresh):
    a failed step plans its layer mode with autocast (the step's GEMM share needs one run)."""
    from gemm_bench.results.stack import Rules, remeasure
    from tests.fake_beyond import beyond_document

    doc = beyond_document()
    question = build_question(model="te-guide-5b")
    modes = ["autocast", "layer", "layer-graphed"]
    assert remeasure(doc, question, ["fp8-current"], modes, local=None, rules=Rules()) is None
    for cell in doc["layer"]:
        if cell["precision"] == "fp8-current" and cell["mode"] == "layer-graphed":
            cell.clear()
            cell.update(mode="layer-graphed", precision="fp8-current", status="failed", reason="out of memory")
    todo = remeasure(doc, question, ["fp8-current"], modes, local=None, rules=Rules())
    assert todo is not None and todo[1] == ["layer-graphed", "autocast"] and "failed: layer-graphed/" in todo[2]
    assert remeasure(doc, question, ["fp8-current"], modes, local=None, rules=Rules(retry_failed=False)) is None
    # A page asking autocast alone still gets the failed step measured again: a question is measured
    # whole (complete_modes), the file serves every page that shows it, and freshness counts it failed.
    again = remeasure(doc, question, ["fp8-current"], ["autocast"], local=None, rules=Rules())
    assert again is not None and again[1] == ["layer-graphed", "autocast"]
