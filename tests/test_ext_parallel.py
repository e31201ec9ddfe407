"""``-j 4`` renders exactly what ``-j 1`` renders (declared parallel_read_safe/parallel_write_safe)."""

from __future__ import annotations

import io
import shutil
from pathlib import Path

import pytest

from gemm_bench.question.question import build_question

H200 = {"name": "NVIDIA H200", "compute_capability": "9.0", "sm_count": 132}

ROOTS = Path(__file__).parent / "roots"


def _outputs(outdir: Path) -> dict[str, bytes]:
    skip = {".buildinfo", "searchindex.js"}
    return {str(p.relative_to(outdir)): p.read_bytes() for p in sorted(outdir.rglob("*"))
            if p.is_file() and p.name not in skip and ".doctrees" not in p.parts}


@pytest.mark.slow  # started first in a parallel run (conftest.py)
def test_parallel_build_equals_serial(tmp_path, make_app, real_result, make_result, store_result):
    src = tmp_path / "src"
    shutil.copytree(ROOTS / "test-parallel", src)
    cache = src / "_gemm_cache"
    real_result(cache, "h100-te-guide-5b.json")
    llama = build_question(model="llama3-8b")
    store_result(cache, make_result(llama, precisions=("bf16", "fp8-current", "fp8-block")))
    store_result(cache, make_result(llama, device=H200, speed=1.3, precisions=("bf16", "fp8-current", "fp8-block")))
    results = {}
    for jobs in (1, 4):
        warning, status = io.StringIO(), io.StringIO()
        app = make_app("html", srcdir=src, builddir=tmp_path / f"build-j{jobs}", parallel=jobs, warning=warning,
                       status=status)
        merged: list[list[str]] = []
        app.connect("env-merge-info", lambda app, env, docnames, other, merged=merged: merged.append(sorted(docnames)))
        app.build()
        app.cleanup()  # unregister this app's docutils nodes before the next app registers them
        assert "WARNING" not in warning.getvalue(), warning.getvalue()
        # The -j 4 build really read in worker processes (Sphinx falls back to serial silently).
        assert bool(merged) == (jobs > 1)
        results[jobs] = _outputs(Path(app.outdir))
    serial, parallel = results[1], results[4]
    assert sorted(serial) == sorted(parallel)
    # Figures are inlined in the pages (one per question, device and mode): byte-identical too.
    assert sum(page.count(b'class="gemm-figure') for page in serial.values()) >= 2
    differing = [name for name in serial if serial[name] != parallel[name]]
    assert differing == []
    page = serial["p3.html"].decode()
    assert page.count('class="gemm-value"') == 2 and "gemm-device-tabs" in page
    freshness = serial["index.html"].decode()
    assert freshness.count('class="gemm-status-fresh') == 3  # one row per result: 3 results, 8 directives
