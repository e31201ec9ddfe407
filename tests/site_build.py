"""Builds and reads of the real site shared by a whole test run, for the tests that read it as readers do.

``tests/test_site_claims.py`` reads the built HTML; ``tests/test_ext_browser_reader.py`` serves it to
headless Chromium. Both take :func:`shared_docs_build` (the ``docs_site`` fixture of conftest.py):
one build of ``docs/`` per test run, made by whichever pytest-xdist worker asks first while the
others wait for it, instead of one per module. The build runs ``python -m sphinx`` in a subprocess,
as ``nox -s docs`` and CI do, with ``GEMM_BENCH_EXECUTION_MODE=cache`` so that a test run on a GPU
box never measures or writes into the committed cache; its output goes to pytest's temporary
directory, never to ``docs/_build``. Nothing may write into the shared build (copy what you change).

:class:`SiteReads` shares ``gemm-bench refresh``'s reading of a site (a Sphinx build of the whole
project with the ``gemm-questions`` builder, seconds each) among tests that read the same pages:
the ``shared_site_reads`` fixture.
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import json
import os
import re
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from bs4 import BeautifulSoup
from filelock import FileLock

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

    @property
    def doctrees(self) -> Path:
        """The build's doctrees and pickled environment (``-d``), beside ``html``."""
        return self.html.parent / "doctrees"

    def copy_to(self, html: Path, doctrees: Path) -> None:
        """Copy the HTML output and the doctrees to where a test builds again (incrementally, as a
        second ``sphinx-build`` over the same ``docs/`` would): file times kept, so Sphinx sees the
        output as up to date. The shared build itself is never written into."""
        import shutil

        shutil.copytree(self.html, html)
        shutil.copytree(self.doctrees, doctrees)

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
    return _built(out)


def _built(out: Path) -> BuiltSite:
    """The site :func:`build_docs` made in ``out``: its HTML and its warnings, colour codes removed."""
    warnings_file = out / "warnings.txt"
    text = warnings_file.read_text(encoding="utf-8") if warnings_file.exists() else ""
    return BuiltSite(html=out / "html", warnings=re.sub(r"\x1b\[[0-9;]*m", "", text))


def run_root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The temporary directory of the whole test run: shared by every pytest-xdist worker (each
    worker's own base directory is one level down, ``popen-gwN``), the base directory without xdist."""
    base = tmp_path_factory.getbasetemp()
    return base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base


_SHARED_SITES: dict[Path, BuiltSite] = {}


def shared_docs_build(tmp_path_factory: pytest.TempPathFactory) -> BuiltSite:
    """One build of docs/ per test run, for every module and every xdist worker that asks.

    The first caller builds under a file lock; the others wait on the lock and take the same output.
    A failed build is recorded too, so every caller fails with the build's own message, once built.
    """
    out = run_root(tmp_path_factory) / "shared-docs-build"
    if out in _SHARED_SITES:
        return _SHARED_SITES[out]
    record = out / "outcome.json"
    with FileLock(str(out) + ".lock"):
        if not record.exists():
            try:
                build_docs(out)
                record.write_text(json.dumps({"error": None}), encoding="utf-8")
            except (SiteBuildError, subprocess.SubprocessError, OSError) as exc:
                out.mkdir(parents=True, exist_ok=True)
                record.write_text(json.dumps({"error": f"{type(exc).__name__}: {exc}"}), encoding="utf-8")
        error = json.loads(record.read_text(encoding="utf-8"))["error"]
    if error is not None:
        raise SiteBuildError(error)
    site = _SHARED_SITES[out] = _built(out)
    return site


def shared_json(tmp_path_factory: pytest.TempPathFactory, name: str, compute: Callable[[], Any]) -> Any:
    """``compute()`` once per test run, shared by every module and xdist worker through a JSON file in
    the run's temporary directory (seconds of pure Python that two modules need alike). Every caller
    gets its own copy read from that file, so no caller sees another's changes, and the one that
    computed it sees what the others see."""
    path = run_root(tmp_path_factory) / "shared-json" / f"{name}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    with FileLock(str(path) + ".lock"):
        if not path.exists():
            text = json.dumps(compute(), allow_nan=False)
            path.with_suffix(".tmp").write_text(text, encoding="utf-8")
            path.with_suffix(".tmp").replace(path)
    return json.loads(path.read_text(encoding="utf-8"))


#: ``GEMM_BENCH_*`` variables that cannot change what reading a site finds, left out of :meth:`SiteReads.key`:
#: torch.compile's folder, a fresh one per test (conftest.without_gpu), made every test's key unique, so
#: the refresh tests read the same pages again and again (16 reads for 26 asks in test_refresh.py).
READ_BLIND = frozenset({"GEMM_BENCH_COMPILE_CACHE"})


class SiteReads:
    """``gemm_bench.cli.refresh.read_site`` once per distinct site in a test run.

    A read is a Sphinx build of the whole project in a subprocess (seconds for the real site); the
    refresh tests read copies of the same pages again and again. The key is every file of the source
    directory (names and bytes, ``_build`` left out) and the ``GEMM_BENCH_*`` environment; the value is
    the builder's JSON, whose locations are relative to the source directory, so a copy of a site
    elsewhere gets the same answer. Failed reads raise as before and are not kept. Shared by the
    xdist workers through files in the run's temporary directory.
    """

    def __init__(self, directory: Path, read: Callable[[Path], dict[str, Any]]) -> None:
        self.directory = directory
        self.read = read
        self.hits = 0
        self.misses = 0

    @staticmethod
    def key(srcdir: Path) -> str:
        digest = hashlib.sha256()
        for path in sorted(p for p in srcdir.rglob("*") if p.is_file() and "_build" not in p.relative_to(srcdir).parts):
            digest.update(path.relative_to(srcdir).as_posix().encode("utf-8") + b"\0")
            digest.update(hashlib.sha256(path.read_bytes()).digest())
        for name in sorted(k for k in os.environ if k.startswith("GEMM_BENCH_") and k not in READ_BLIND):
            digest.update(f"{name}={os.environ[name]}\0".encode())
        return digest.hexdigest()[:32]

    def __call__(self, srcdir: Path) -> dict[str, Any]:
        if not srcdir.is_dir():
            return self.read(srcdir)  # its own error
        stored = self.directory / f"{self.key(srcdir)}.json"
        self.directory.mkdir(parents=True, exist_ok=True)
        with FileLock(str(stored) + ".lock"):
            if stored.exists():
                self.hits += 1
                data: dict[str, Any] = json.loads(stored.read_text(encoding="utf-8"))
                return data
            data = self.read(srcdir)
            stored.write_text(json.dumps(data), encoding="utf-8")
            self.misses += 1
            return data


def read_cache_file(name: str) -> dict[str, Any]:
    """A committed result document by file name (``<hash>--<device>.json``), validated."""
    from gemm_bench.results.cache import read_document

    return read_document(CACHE / name)
