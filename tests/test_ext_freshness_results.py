"""The freshness page counts results, not rows of directives; it lists the studies; a failed step is failed.

Issue 35 item 6 and issue 31 item 4: the models page shows each model twice (the page-wide summary
and its section's), so the page and the build's last line counted one result twice; the studies
were on no list; a result whose training step failed read "fresh". One Sphinx build serves every
check; :func:`gemm_benchmark.freshness.result_counts` is what the page and the build's last line count.
"""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pytest
from bs4 import BeautifulSoup

from gemm_bench.question.question import build_question

from .conftest import H100
from .test_correctness import Project

DOCS_STUDIES = Path(__file__).parent.parent / "docs" / "_gemm_cache" / "studies"

INDEX = """\
Freshness
=========

.. toctree::

   models
   more
   parity

.. gemm-benchmark-freshness::
"""

MODELS = """\
Models
======

.. gemm-benchmark-summary::
   :models: te-guide-5b, llama3-8b
   :precisions: bf16, fp8-current
   :modes: autocast, layer-graphed
   :show: table

Llama 3 8B
----------

.. gemm-benchmark-summary::
   :models: llama3-8b
   :precisions: bf16, fp8-current
   :show: table
"""

MORE = """\
More
====

.. gemm-benchmark::
   :name: llama-again
   :model: llama3-8b
   :precisions: bf16, fp8-current
"""

PARITY = """\
Parity
======

.. gemm-loss-parity::
"""


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> tuple[BeautifulSoup, str, object]:
    from tests.fake_beyond import beyond_document

    from .conftest import make_document

    project = Project(tmp_path_factory.mktemp("fresh-results"))
    project.page("index", INDEX)
    project.page("models", MODELS)
    project.page("more", MORE)
    project.page("parity", PARITY)
    step_failed = beyond_document()
    for cell in step_failed["layer"]:
        if cell["mode"] == "layer-graphed" and cell["precision"] == "bf16":
            cell.update(status="failed", reason="CUDA error: out of memory")
            cell.pop("ms"), cell.pop("stats")
    project.store(step_failed)
    project.store(make_document(build_question(model="llama3-8b"), device=H100,
                                precisions=("bf16", "fp8-current")))
    studies = project.cache / "studies"
    studies.mkdir(parents=True)
    shutil.copy(DOCS_STUDIES / "loss-parity--h100-80gb-hbm3.json", studies)
    old = json.loads((DOCS_STUDIES / "loss-parity--h200.json").read_text(encoding="utf-8"))
    old["method_version"] = "0"
    (studies / "loss-parity--h200.json").write_text(json.dumps(old), encoding="utf-8")
    import io

    from sphinx.testing.util import SphinxTestApp

    status = io.StringIO()
    app = SphinxTestApp("html", srcdir=project.src, builddir=project.build_dir, status=status,
                        warning=io.StringIO())
    try:
        app.build()
        from gemm_benchmark import records
        from gemm_benchmark.freshness import result_counts

        counts = result_counts(records.all_records(app.env))
    finally:
        app.cleanup()
    return project.html("index"), re.sub(r"\x1b\[[0-9;]*m", "", status.getvalue()), counts


def _rows(table) -> list[list[str]]:
    return [[td.get_text(" ", strip=True) for td in tr.select("td")] for tr in table.select("tbody tr")]


def test_one_row_per_result_with_every_page_beside_it(site):
    """Before: one row per directive and per summary model (Llama 3 8B three times)."""
    soup, _, counts = site
    rows = _rows(soup.select("table.gemm-freshness")[0])
    llama = [r for r in rows if r[0] == "Llama 3 8B: " + build_question(model="llama3-8b").describe()]
    assert len(llama) == 1
    assert llama[0][5] == "models (Llama 3 8B, summary), more (llama-again)"
    assert len(rows) == 2 and sum(counts.values()) == 2
    intro = soup.select_one("p.gemm-freshness-intro").get_text()
    assert intro.startswith("2 results (1 failed, 1 fresh) on this site")


def test_a_result_leads_with_its_models_name(site):
    """Issue 35: the rows named results by their config alone ("hidden 4096, FFN 14336, ..."). A
    model a summary shows leads with the name the summary gives it, the config after it; the log
    says the same."""
    soup, log, _ = site
    rows = _rows(soup.select("table.gemm-freshness")[0])
    assert sorted(r[0].split(": ")[0] for r in rows) == ["Llama 3 8B", "Transformer Engine guide's example layer"]
    assert all(r[0].split(": ", 1)[1].startswith("hidden ") for r in rows)
    assert "Llama 3 8B: hidden 4096, FFN 14336" in log


def test_the_build_log_counts_the_same_results(site):
    _, log, counts = site
    assert counts == {"failed": 1, "fresh": 1}
    assert "gemm-benchmark: 2 results (1 failed, 1 fresh)" in log


def test_a_failed_training_step_is_failed_not_fresh(site):
    """Issue 31 item 4: every GEMM cell measured, the BF16 graphed step failed: the result read "fresh"."""
    soup, _, _ = site
    rows = _rows(soup.select("table.gemm-freshness")[0])
    te = next(r for r in rows if r[0].endswith(build_question(model="te-guide-5b").describe()))
    assert te[4].startswith("failed") and "CUDA error: out of memory" in te[4]


def test_the_studies_are_listed_with_date_and_status(site):
    """Before: the studies were on no list."""
    soup, _, _ = site
    tables = soup.select("table.gemm-freshness")
    assert len(tables) == 2
    rows = _rows(tables[1])
    # the models page's summary composes each answer's run from the tp-comm study's sweep (issue 42 item 5):
    # this project has none, and the list says so rather than leaving the study off
    assert rows[2][0].startswith("A tensor-parallel layer") and rows[2][4].startswith("missing"), rows[2]
    assert rows[2][5] == "models"
    rows = rows[:2]
    assert [r[1] for r in rows] == ["H100 80GB HBM3", "H200"]
    assert rows[0][0].startswith("Loss parity") and re.fullmatch(r"\d{4}-\d\d-\d\d", rows[0][2])
    assert rows[0][4] == "fresh" and rows[0][5] == "parity"
    assert rows[1][4].startswith("stale (measured with study method version '0'")
