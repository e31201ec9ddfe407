"""Bad input is a located, typed Sphinx warning; the build goes on; -W fails it."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from bs4 import BeautifulSoup
from sphinx.cmd.build import build_main

from gemm_bench.question.question import build_question
from gemm_bench.results.cache import file_name
from tests.helpers import warnings_by_line

ROOTS = Path(__file__).parent / "roots"


def _prepare(srcdir: Path, real_result) -> Path:
    cache = srcdir / "_gemm_cache"
    real_result(cache, "h100-te-guide-5b.json")
    corrupt = cache / file_name(build_question(model="llama3-8b").hash, "NVIDIA H100 80GB HBM3")
    corrupt.write_text('{"schema_version": 1, "cells": [', encoding="utf-8")
    return corrupt




@pytest.mark.sphinx("html", testroot="warnings", srcdir="warnings-html")
def test_each_problem_is_a_warning_at_its_line(app, real_result, warning):
    corrupt = _prepare(Path(app.srcdir), real_result)
    app.build()
    found = warnings_by_line(warning.getvalue())
    # An option's problem is at the option's own line, where the author fixes it.
    assert ":colour: is not an option of gemm-benchmark" in found[6][0]
    assert "nor close to one. Every option is in the authoring reference" in found[6][0]  # no list of 36
    assert found[6][0].endswith("[gemm_benchmark.option]")
    assert ":precisions: unknown value 'fp9'" in found[10][0] and found[10][0].endswith("[gemm_benchmark.precisions]")
    assert ":hidden-size: 4096 is not divisible by :num-attention-heads: 30" in found[13][0]
    assert found[13][0].endswith("[gemm_benchmark.config]")
    assert "outside the documentation source directory" in found[18][0]
    assert found[18][0].endswith("[gemm_benchmark.path]")
    assert any("no result for question" in w and w.endswith("[gemm_benchmark.missing]") for w in found[20])
    assert any(str(corrupt) in w and "is not valid JSON" in w and w.endswith("[gemm_benchmark.cache]")
               for w in found[24])
    # Roles warn at their paragraph's line (docutils gives inline markup no line of its own).
    assert "no gemm-benchmark directive is named 'nosuch'" in found[33][0]
    assert "unknown mode 'sideways'" in found[35][0] and found[35][0].endswith("[gemm_benchmark.modes]")
    assert "MXFP8, Autocast, H100 80GB HBM3 (good): unsupported (Device compute capability" in found[37][0]
    assert 28 not in found  # the good directive is fine

    soup = BeautifulSoup((Path(app.outdir) / "index.html").read_text(encoding="utf-8"), "html.parser")
    blocks = soup.select("div.gemm-benchmark")
    # Bad directives render nothing; missing results render the visible admonition; the good one renders.
    assert [b.get("id") for b in blocks] == ["nowhere", "corrupt", "good", "blackwell"]
    # :missing: note: a visible note, no warning (hardware not measured yet on purpose).
    assert 39 not in found
    assert "note" in blocks[3].select_one(".admonition.gemm-not-measured")["class"]
    for missing in blocks[:2]:
        assert missing.select_one(".admonition.gemm-not-measured .admonition-title").get_text() == "Not measured yet"
    assert blocks[2].select("table.gemm-gemms")
    assert soup.select_one("abbr.gemm-value-error").get_text() == "n/a"


def test_minus_w_fails_and_suppress_warnings_silences(tmp_path, real_result):
    src = tmp_path / "src"
    shutil.copytree(ROOTS / "test-warnings", src)
    _prepare(src, real_result)
    args = [str(src), str(tmp_path / "out"), "-q", "-b", "html", "-d", str(tmp_path / "doctrees")]
    assert build_main([*args, "-W"]) != 0
    # Good input and -W: the build passes once the page holds only the good directive.
    (src / "index.rst").write_text("Good\n====\n\n.. gemm-benchmark::\n   :model: te-guide-5b\n", encoding="utf-8")
    assert build_main([*args, "-W", "-E"]) == 0


@pytest.mark.sphinx("html", testroot="warnings", srcdir="warnings-suppressed",
                    confoverrides={"suppress_warnings": ["gemm_benchmark.option", "gemm_benchmark.missing"]})
def test_suppress_warnings_by_subtype(app, real_result, warning):
    _prepare(Path(app.srcdir), real_result)
    app.build()
    found = warnings_by_line(warning.getvalue())
    assert 6 not in found and 20 not in found
    assert 10 in found  # other subtypes still warn
