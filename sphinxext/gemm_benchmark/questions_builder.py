"""The ``gemm-questions`` builder: every question a site asks, read by Sphinx, written as JSON.

Why a builder. ``gemm-bench refresh`` must measure what the pages show, and only Sphinx knows
which directives a build runs: a directive in an ``.. include::``-d file, in a MyST
``{eval-rst}`` block, or spelled ``.. GEMM-Benchmark::`` (docutils matches directive names
case-insensitively) is built, and a scanner of the source text missed all three. Reading the
project through Sphinx finds exactly the directives the HTML build runs, parsed by their own
option parser. It also keeps the library free of Sphinx: ``gemm-bench refresh`` runs
``python -m sphinx -b gemm-questions SRCDIR OUTDIR`` in another process and reads
``OUTDIR/questions.json``.

While this builder reads, the ``gemm-benchmark`` and ``gemm-benchmark-summary`` directives
record what they ask (:func:`note_asks`, or :func:`note_problem` for options they reject) and
render nothing: no cache lookup, no measuring. Nothing is written but the JSON file:

``format``
    :data:`FORMAT_VERSION`.
``questions``
    One entry per question (deduplicated by hash, in page order): ``hash``, ``question``
    (:meth:`gemm_bench.question.question.Question.to_dict`) and ``asks``, each with the directive's
    name, its ``source`` file (relative to the source directory where it lies inside it) and
    ``line``, the ``precisions``, ``modes`` and ``devices`` it asks for, and ``peers``: whether it
    shows the peers (a ``gemm-benchmark`` directive whose ``:show:`` names them; a summary never
    does), since a question's peers are measured only where some page shows them.
``problems``
    Directives whose options were rejected: ``source``, ``line`` and ``message``.
"""

from __future__ import annotations

import json
import os
import tempfile
from collections.abc import Iterable, Set
from pathlib import Path
from typing import Any

from docutils import nodes
from sphinx.application import Sphinx
from sphinx.builders import Builder
from sphinx.environment import BuildEnvironment
from sphinx.util.docutils import SphinxDirective

BUILDER_NAME = "gemm-questions"
OUTPUT_NAME = "questions.json"
FORMAT_VERSION = 1

_ATTR = "gemm_benchmark_questions"

#: The directive that never shows peers, whatever its requests say (its own ``:show:`` has no such part).
SUMMARY_DIRECTIVE = "gemm-benchmark-summary"


def _store(env: BuildEnvironment) -> dict[str, list[dict[str, Any]]]:
    """Per page: what its directives asked, in reading order (JSON-ready, so it pickles as is)."""
    store = getattr(env, _ATTR, None)
    if not isinstance(store, dict):
        store = {}
        setattr(env, _ATTR, store)
    return store


def _location(directive: SphinxDirective) -> dict[str, Any]:
    source, line = directive.get_source_info()
    path = Path(source) if source else Path(directive.env.doc2path(directive.env.docname))
    srcdir = Path(directive.env.srcdir)
    try:
        shown = path.resolve().relative_to(srcdir.resolve()).as_posix()
    except ValueError:
        shown = str(path)
    return {"source": shown, "line": line if isinstance(line, int) else directive.lineno}


def note_asks(directive: SphinxDirective, requests: Iterable[Any]) -> None:
    """Record the questions a directive asks (its parsed ``Request`` objects)."""
    where = _location(directive)
    entries = _store(directive.env).setdefault(directive.env.docname, [])
    name = directive.name.lower()
    for request in requests:
        entries.append({
            "kind": "ask", "directive": name, **where,
            "hash": request.question.hash, "question": request.question.to_dict(),
            "precisions": list(request.precisions), "modes": list(request.modes), "devices": list(request.devices),
            "peers": name != SUMMARY_DIRECTIVE and "peers" in request.show,
        })


def note_problem(directive: SphinxDirective, message: str) -> None:
    """Record a directive whose options were rejected (the build warns about it too)."""
    _store(directive.env).setdefault(directive.env.docname, []).append(
        {"kind": "problem", "directive": directive.name.lower(), **_location(directive), "message": message})


def site_questions(env: BuildEnvironment) -> dict[str, Any]:
    """The JSON document of every question the pages read into ``env`` ask (see the module docstring)."""
    questions: dict[str, dict[str, Any]] = {}
    problems: list[dict[str, Any]] = []
    store = _store(env)
    for docname in sorted(store):
        for entry in store[docname]:
            if entry["kind"] == "problem":
                problems.append({k: entry[k] for k in ("directive", "source", "line", "message")})
                continue
            question = questions.setdefault(entry["hash"], {"hash": entry["hash"], "question": entry["question"],
                                                            "asks": []})
            question["asks"].append({k: entry[k] for k in ("directive", "source", "line", "precisions", "modes",
                                                           "devices", "peers")})
    return {"format": FORMAT_VERSION, "questions": list(questions.values()), "problems": problems}


class QuestionsBuilder(Builder):
    """Reads every page (directives record their questions) and writes :data:`OUTPUT_NAME`."""

    name = BUILDER_NAME
    format = ""
    epilog = "The questions the pages ask are in %(outdir)s/" + OUTPUT_NAME + "."
    allow_parallel = True

    def init(self) -> None:
        pass

    def get_outdated_docs(self) -> Set[str]:
        return self.env.found_docs  # the questions of every page, whatever was read before

    def get_target_uri(self, docname: str, typ: str | None = None) -> str:
        return ""

    def write_documents(self, docnames: Set[str]) -> None:
        """No page is written (nor resolved): the questions were recorded while reading."""

    def write_doc(self, docname: str, doctree: nodes.document) -> None:
        pass

    def finish(self) -> None:
        out = Path(self.outdir)
        out.mkdir(parents=True, exist_ok=True)
        text = json.dumps(site_questions(self.env), indent=1, ensure_ascii=False)
        fd, tmp = tempfile.mkstemp(dir=out, prefix=".questions-", suffix=".json")
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text + "\n")
        os.replace(tmp, out / OUTPUT_NAME)


def _purge(app: Sphinx, env: BuildEnvironment, docname: str) -> None:
    _store(env).pop(docname, None)


def _merge(app: Sphinx, env: BuildEnvironment, docnames: Set[str], other: BuildEnvironment) -> None:
    mine, theirs = _store(env), _store(other)
    for docname in docnames:
        if docname in theirs:
            mine[docname] = theirs[docname]


def setup_questions(app: Sphinx) -> None:
    app.add_builder(QuestionsBuilder)
    app.connect("env-purge-doc", _purge)
    app.connect("env-merge-info", _merge)
