"""``-j 4`` resolves roles across pages exactly as ``-j 1``, values and located warnings alike.

test_ext_parallel.py checks that a chain of pages, each quoting the next page's directive, renders
byte-identical HTML under ``-j 4`` and ``-j 1``. This adds what it leaves out: pages that hold only
roles (no directive, so no record of their own to merge), every role kind with device and GEMM
selectors, a role quoting a directive with no result and one quoting no directive at all. The
warnings must be the same set, each at its page and line, and the values those of the report.
"""

from __future__ import annotations

import io
import re
import shutil
from pathlib import Path

from bs4 import BeautifulSoup

from gemm_bench.report.report import Report
from gemm_bench.results.cache import read_document
from gemm_benchmark.render_table import format_ms, format_speedup, format_tflops

ROOT = Path(__file__).parent / "roots" / "test-reliability-parallel"
QUOTE_PAGES = [f"q{i}" for i in range(6)]


def _outputs(outdir: Path) -> dict[str, bytes]:
    skip = {".buildinfo", "searchindex.js"}
    return {str(p.relative_to(outdir)): p.read_bytes() for p in sorted(outdir.rglob("*"))
            if p.is_file() and p.name not in skip and ".doctrees" not in p.parts}


def _warnings(text: str) -> set[tuple[str, int, str]]:
    text = re.sub(r"\x1b\[[0-9;]*m", "", text)
    found = {(m.group(1), int(m.group(2)), m.group(3)) for m in re.finditer(r"(\w+)\.rst:(\d+): WARNING: (.*)", text)}
    assert text.count("WARNING") == len(found), text  # every warning located, none twice
    return found


def test_role_only_pages_resolve_the_same_under_j4(tmp_path, make_app, real_result):
    src = tmp_path / "src"
    shutil.copytree(ROOT, src)
    path = real_result(src / "_gemm_cache", "h100-te-guide-5b.json")
    results, warnings = {}, {}
    for jobs in (1, 4):
        warning = io.StringIO()
        app = make_app("html", srcdir=src, builddir=tmp_path / f"build-j{jobs}", parallel=jobs, warning=warning,
                       status=io.StringIO())
        merged: list[str] = []
        app.connect("env-merge-info", lambda app, env, docnames, other, merged=merged: merged.extend(docnames))
        app.build()
        app.cleanup()
        assert bool(merged) == (jobs > 1)
        results[jobs] = _outputs(Path(app.outdir))
        warnings[jobs] = _warnings(warning.getvalue())
    assert warnings[1] == warnings[4]
    expected = set()
    for page in QUOTE_PAGES:
        # `rb` has no result: its directive warned, and its role's "n/a" in prose is a located
        # warning too (issue 35: prose never reads n/a silently).
        expected.add((page, 7, ":gemm-time:`rb autocast bf16`: rb has no measured result on any device "
                               "[gemm_benchmark.role]"))
        expected.add((page, 9, f":gemm-speedup:`nosuch{page[1:]} autocast bf16`: no gemm-benchmark directive is "
                               f"named 'nosuch{page[1:]}'; the names there are: ra, rb [gemm_benchmark.role]"))
    assert warnings[1] == expected
    assert [n for n in results[1] if results[1][n] != results[4].get(n)] == []
    assert sorted(results[1]) == sorted(results[4])

    report = Report(read_document(path))
    gemm = report.find_gemm("mlp_up/fprop")
    wgrad = report.find_gemm("qkv/wgrad")
    values = [format_speedup(report.total("autocast", "fp8-current").speedup_vs_bf16),
              f"{format_ms(report.total('prequant', 'fp8-block').model_ms)} ms",
              f"{format_tflops(report.cell('prequant', 'bf16', gemm).tflops)} TFLOP/s",
              format_speedup(report.gemm_speedup("autocast", "fp8-block", wgrad))]
    for page in QUOTE_PAGES:
        soup = BeautifulSoup(results[4][f"{page}.html"], "html.parser")
        body = soup.select_one("div.body, div[role=main]") or soup
        assert [a.get_text() for a in body.select("abbr.gemm-value")] == values, page
        missing = body.select("abbr.gemm-value-error")
        assert [c.get_text() for c in missing] == ["n/a", "n/a"]
        assert [c["title"].rsplit("(", 1)[1] for c in missing] == [
            "rb autocast bf16)", f"nosuch{page[1:]} autocast bf16)"]
    # The directive's own page and the other directive's page agree with the role-only pages.
    a = BeautifulSoup(results[4]["a.html"], "html.parser")
    assert [x.get_text() for x in a.select("abbr.gemm-value")] == values[:1]
    b = BeautifulSoup(results[4]["b.html"], "html.parser")
    assert [x.get_text() for x in b.select("abbr.gemm-value")] == [
        f"{format_ms(report.total('prequant', 'bf16').model_ms)} ms"]
