"""One build of ``docs/`` from the committed cache, for the tests that read the site as readers do.

``tests/test_site_claims.py`` reads the built HTML; ``tests/test_ext_browser_reader.py`` serves it to
headless Chromium. Each builds once per module (a module-scoped fixture calls :func:`build_docs`).
The build runs ``python -m sphinx`` in a subprocess, as ``nox -s docs`` and CI do, with
``GEMM_BENCH_EXECUTION_MODE=cache`` so that a test run on a GPU box never measures or writes into
the committed cache; its output goes to a temporary directory, never to ``docs/_build``.
"""

from __future__ import annotations

import dataclasses
import functools
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

from bs4 import BeautifulSoup

ROOT = Path(__file__).resolve().parent.parent
DOCS = ROOT / "docs"
CACHE = DOCS / "_gemm_cache"


class SiteBuildError(AssertionError):
    """``sphinx-build`` of docs/ failed: the tests that read the site have nothing to read."""


@dataclasses.dataclass(frozen=True)
class BuiltSite:
    """The HTML output of one docs build and the warnings it printed."""

    html: Path
    warnings: str

    @functools.cache  # noqa: B019  (one parse per page per build; the object lives for one module)
    def soup(self, page: str) -> BeautifulSoup:
        """The parsed page (``index.html``, ``reference/cli.html``); parse once, copy to modify."""
        path = self.html / page
        if not path.is_file():
            raise SiteBuildError(f"the build made no {page} (pages: {', '.join(self.pages())})")
        return BeautifulSoup(path.read_text(encoding="utf-8"), "html.parser")

    def pages(self) -> list[str]:
        """The site's own pages (not Sphinx's generated index, search and module-source pages)."""
        skip = {"genindex.html", "search.html", "py-modindex.html"}
        return sorted(p.relative_to(self.html).as_posix() for p in self.html.rglob("*.html")
                      if p.name not in skip and "_modules" not in p.parts and "_static" not in p.parts)


def build_docs(out: Path, *, timeout_s: float = 600) -> BuiltSite:
    """Build docs/ into ``out/html`` (doctrees in ``out/doctrees``) from the committed cache."""
    env = {**os.environ, "GEMM_BENCH_EXECUTION_MODE": "cache"}
    warnings_file = out / "warnings.txt"
    out.mkdir(parents=True, exist_ok=True)
    command = [sys.executable, "-m", "sphinx", "-b", "html", "-q", "-w", str(warnings_file),
               "-d", str(out / "doctrees"), str(DOCS), str(out / "html")]
    proc = subprocess.run(command, env=env, capture_output=True, text=True, timeout=timeout_s, check=False)
    if proc.returncode != 0:
        raise SiteBuildError(f"sphinx-build of {DOCS} failed (exit {proc.returncode}):\n{proc.stderr[-4000:]}")
    text = warnings_file.read_text(encoding="utf-8") if warnings_file.exists() else ""
    return BuiltSite(html=out / "html", warnings=re.sub(r"\x1b\[[0-9;]*m", "", text))


def read_cache_file(name: str) -> dict[str, Any]:
    """A committed result document by file name (``<hash>--<device>.json``), validated."""
    from gemm_bench.results.cache import read_document

    return read_document(CACHE / name)
