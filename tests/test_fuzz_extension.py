"""Hypothesis fuzz of hostile result files through the Sphinx extension: directive, summary, roles.

Each example writes a batch of mutated result files (the hostile values of ``test_fuzz_results``),
each under its own device name so that one page shows them all, and builds a page with a
``gemm-benchmark`` directive, a summary and a role per device. Whatever the files hold:

* the build completes (an exception in the extension would end it: no traceback, ever);
* every file ``read_document`` refuses is named, with its path, in a ``gemm_benchmark.cache``
  warning, and no number from it reaches the page;
* every role renders a value or a visible ``n/a``; every warning is of the extension's own type.
"""

from __future__ import annotations

import copy
import io
import json
import re
from pathlib import Path
from typing import Any

import pytest
from bs4 import BeautifulSoup
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from sphinx.testing.util import SphinxTestApp

from gemm_bench.question.devices import device_slug
from gemm_bench.results.cache import CacheError, file_name, read_document
from tests.conftest import fuzz_examples
from tests.test_fuzz_results import BASES, hostile_documents

TE_HASH = BASES[0]["question_hash"]
CONF = 'extensions = ["gemm_benchmark"]\nproject = "fuzz"\ngemm_benchmark_execution_mode = "cache"\n'


def _device_documents(draw: st.DrawFn, count: int) -> list[dict[str, Any]]:
    docs = []
    for i in range(count):
        doc, base = draw(hostile_documents())
        if base != 0:  # keep to the page's question; the sweep base is fuzzed in test_fuzz_results
            doc = copy.deepcopy(BASES[0])
        if isinstance(doc.get("device"), dict):
            doc["device"]["name"] = f"Fuzz GPU {i}"
        docs.append(doc)
    return docs


@st.composite
def batches(draw: st.DrawFn) -> list[dict[str, Any]]:
    return _device_documents(draw, draw(st.integers(4, 10)))


@pytest.mark.slow  # started first in a parallel run (conftest.py)
@settings(max_examples=fuzz_examples(8), deadline=None, database=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large,
                                 HealthCheck.function_scoped_fixture])
@given(batches())
def test_hostile_files_never_break_the_build_and_are_named(tmp_path_factory: Any, docs: list[dict[str, Any]]) -> None:
    root = tmp_path_factory.mktemp("fuzz-ext")
    src = root / "src"
    cache = src / "_gemm_cache"
    cache.mkdir(parents=True)
    (src / "conf.py").write_text(CONF, encoding="utf-8")
    written: dict[str, Path] = {}
    for i, doc in enumerate(docs):
        path = cache / file_name(TE_HASH, f"Fuzz GPU {i}")
        path.write_bytes(json.dumps(doc, indent=1).encode("utf-8", "surrogatepass"))
        written[f"Fuzz GPU {i}"] = path
    refused = {name for name, path in written.items() if _refused(path)}
    roles = " ".join(f":gemm-speedup:`te@{device_slug(name)} autocast fp8-current`" for name in written)
    (src / "index.rst").write_text(
        "T\n=\n\n.. gemm-benchmark-summary::\n   :models: te-guide-5b\n   :missing: note\n\n"
        ".. gemm-benchmark::\n   :name: te\n   :model: te-guide-5b\n   :missing: note\n\n" + roles + "\n",
        encoding="utf-8")
    warning = io.StringIO()
    app = SphinxTestApp("html", srcdir=src, builddir=root / "build", warning=warning, status=io.StringIO(),
                        freshenv=True)
    try:
        app.build()  # an uncaught exception anywhere in the extension fails the test here
    finally:
        app.cleanup()
    text = re.sub(r"\x1b\[[0-9;]*m", "", warning.getvalue())
    for line in filter(None, text.splitlines()):
        assert "[gemm_benchmark." in line or line.startswith(" "), line  # only the extension's own warnings
    for name in refused:
        assert str(written[name]) in text, (name, text)
    soup = BeautifulSoup((root / "build" / "html" / "index.html").read_text(encoding="utf-8"), "html.parser")
    quoted = soup.select("p abbr.gemm-value, p abbr.gemm-value-error")
    assert len(quoted) == len(written)
    for abbr, name in zip(quoted, written, strict=True):
        if name in refused:
            assert abbr.get_text() == "n/a", (name, abbr)
        assert abbr.get_text() == "n/a" or re.fullmatch(r"\d+\.\d\d×", abbr.get_text()), abbr


def _refused(path: Path) -> bool:
    try:
        read_document(path)
    except CacheError:
        return True
    return False
