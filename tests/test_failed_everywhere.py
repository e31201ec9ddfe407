"""Issue 43 item 8: one predicate (:func:`gemm_bench.results.failed.failed_cells`) decides *failed*
for the freshness page, the build's last line and the refresh plan, whatever rows a summary shows.

A summary without ``:modes:`` shows both layer-step rows, so a failed graphed step appeared on the
page ("failed") while the freshness page and the build's last line called the result fresh; the
model step's parts and the energy entries (failed, or refused when read) are rows a page shows too.
"""

from __future__ import annotations

import io
import json
import re
from pathlib import Path
from typing import Any

import pytest
from bs4 import BeautifulSoup

from gemm_bench.question.question import build_question
from gemm_bench.results.cache import dumps, file_name
from gemm_bench.results.stack import Rules, remeasure
from gemm_benchmark import buildlog

ANSI = re.compile(r"\x1b\[[0-9;]*m")
CACHE = Path(__file__).resolve().parent.parent / "docs" / "_gemm_cache"
QUESTION = build_question(model="llama3-8b")


def _graphed(doc: dict[str, Any]) -> None:
    for cell in doc["layer"]:
        if cell["precision"] == "fp8-current" and cell["mode"] == "layer-graphed":
            cell.clear()
            cell.update(mode="layer-graphed", precision="fp8-current", status="failed",
                        reason="CUDA error: an illegal memory access (synthetic)")


def _model_step_part(doc: dict[str, Any]) -> None:
    for part in doc["model_step"]["parts"]:
        if part["precision"] == "fp8-current" and part["part"] == "layer-cached":
            part.clear()
            part.update(part="layer-cached", precision="fp8-current", status="failed",
                        reason="CUDA out of memory (synthetic)")


def _energy(doc: dict[str, Any]) -> None:
    steps = doc["energy"]["steps"]
    i = next(i for i, e in enumerate(steps) if e["precision"] == "fp8-current")
    steps[i] = {"precision": "fp8-current", "status": "failed", "reason": "NVML read failed (synthetic)"}


@pytest.mark.parametrize("breaks", [_graphed, _model_step_part, _energy])
def test_a_failed_row_a_summary_shows_is_failed_on_the_freshness_page_last_line_and_plan(
        tmp_path: Path, make_app: Any, monkeypatch: pytest.MonkeyPatch, breaks: Any) -> None:
    monkeypatch.setenv(buildlog.LOG_ENV_VAR, "brief")
    doc = json.loads((CACHE / f"{QUESTION.hash}--h100-80gb-hbm3.json").read_text())
    breaks(doc)
    src = tmp_path / "src"
    (src / "_gemm_cache").mkdir(parents=True)
    (src / "_gemm_cache" / file_name(doc["question_hash"], doc["device"]["name"])).write_text(dumps(doc))
    (src / "conf.py").write_text('extensions = ["gemm_benchmark"]\nproject = "failed"\n'
                                 'gemm_benchmark_execution_mode = "cache"\n')
    # no :modes: the summary shows both layer-step rows (and the model step, and the energy)
    (src / "index.rst").write_text("T\n=\n\n.. gemm-benchmark-summary::\n   :models: llama3-8b\n"
                                   "   :devices: h100\n   :precisions: bf16, fp8-current\n\n"
                                   ".. gemm-benchmark-freshness::\n")
    status = io.StringIO()
    app = make_app("html", srcdir=src, status=status, warning=io.StringIO())
    app.build()
    out = Path(app.outdir)
    app.cleanup()
    last = [line for line in ANSI.sub("", status.getvalue()).splitlines() if line.strip()][-1]
    assert "1 of 1 results need a GPU run (1 failed)" in last, last
    soup = BeautifulSoup((out / "index.html").read_text(), "html.parser")
    row = soup.select("table.gemm-freshness")[0].select("tbody tr")[0].get_text(" ")
    assert "failed" in row and "fresh" not in row.replace("refresh", ""), row
    todo = remeasure(doc, QUESTION, ["bf16", "fp8-current"], ["autocast", "prequant"], local=None, rules=Rules())
    assert todo is not None and "failed" in todo.why and {"layer-graphed", "autocast"} <= set(todo.modes)
