"""What a build says: warnings that still hold, a brief log on request, and an honest last line.

Three things, each about the build's output rather than the pages:

Warnings of unchanged pages are repeated.
    Sphinx re-reads only changed pages, so the warnings of an unchanged page were printed once, by
    the build that read it, and an incremental rebuild after a failed ``-W`` build said "build
    succeeded" although they still held. The warnings a page's reading emits are kept in the
    environment per page (dropped when the page is re-read or removed) and re-emitted, with their
    location, type and subtype, when the page is not re-read: ``-W`` fails again, and
    ``suppress_warnings`` still silences them.

A stable configuration.
    ``sphinx_tabs`` adds its static directory to ``html_static_path`` at ``builder-inited``, after
    the pickled configuration was compared with ``conf.py``'s, so every rebuild printed "The
    configuration has changed ('html_static_path')". The path is added at ``config-inited`` instead
    and the duplicate that ``sphinx_tabs`` adds later is removed: old and new configurations agree.

A brief log (``GEMM_BENCH_BUILD_LOG=brief``, what ``nox -s docs`` asks for; ignored with ``-v``).
    Sphinx's own progress lines, other extensions' messages (MyST's configuration dump) and the
    extension's per-directive notes are left out of the status output; warnings are untouched.
    Python warnings and log records of third-party packages (a GPU box's JAX, torchao's
    SyntaxWarning, sphinx_tabs' DeprecationWarnings) are silenced for the build. What remains is
    one line per phase of the extension's work, progress while a GPU measures
    (:class:`.execution.MeasureProgress`), and a last line that says where the site is and how many results
    are stale or missing, pointing to the freshness page. ``GEMM_BENCH_BUILD_LOG=full`` (or ``-v``)
    shows everything.
"""

from __future__ import annotations

import logging as pylogging
import os
import warnings
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from docutils import nodes
from sphinx.application import Sphinx
from sphinx.config import Config
from sphinx.environment import BuildEnvironment
from sphinx.util import logging
from sphinx.util.logging import NewLineStreamHandler, get_node_location

from gemm_benchmark import records as envdata
from gemm_benchmark.config import settings
from gemm_benchmark.freshness import result_counts, site_results

logger = logging.getLogger(__name__)

#: ``brief`` or ``full`` (the default: Sphinx's usual output).
LOG_ENV_VAR = "GEMM_BENCH_BUILD_LOG"
LOG_STYLES = ("brief", "full")

#: Loggers whose status lines a brief log keeps: this module's, and the line execution logs when
#: it starts measuring on this machine's GPU.
_BRIEF_LOGGERS = (f"{logging.NAMESPACE}.{__name__}", f"{logging.NAMESPACE}.gemm_benchmark.execution")
_SPHINX_APPLICATION = "sphinx.sphinx.application"

_ENV_ATTR = "gemm_benchmark_page_warnings"
_SEEN = "_gemm_benchmark_recorded"
REPEATED_SUFFIX = " (repeated from an earlier build: this page is unchanged and was not re-read)"

#: One warning as re-emitted: location (``"path:line"``, ``(docname, None)`` or None), message,
#: type, subtype.
Stored = tuple[Any, str, str, str]


class BuildLogError(ValueError):
    """A ``GEMM_BENCH_BUILD_LOG`` value that is not one of :data:`LOG_STYLES`."""


def log_style(verbosity: int = 0) -> str:
    """The log style in effect: ``full`` whenever Sphinx runs verbose (``-v``)."""
    value = os.environ.get(LOG_ENV_VAR, "").strip().lower() or "full"
    if value not in LOG_STYLES:
        raise BuildLogError(f"{LOG_ENV_VAR}={value!r} is not one of {', '.join(LOG_STYLES)}")
    return "full" if verbosity > 0 else value


# ------------------------------------------------------------------------- stable configuration
def _tabs_static_dir() -> str | None:
    try:
        import sphinx_tabs.tabs
    except ImportError:
        return None
    return (Path(sphinx_tabs.tabs.__file__).parent / "static").as_posix()


def _pin_tabs_static(app: Sphinx, config: Config) -> None:
    """``config-inited``: the path sphinx_tabs adds at ``builder-inited``, present already."""
    static = _tabs_static_dir()
    if static is not None and static not in config.html_static_path:
        config.html_static_path.insert(0, static)


def _dedupe_static(app: Sphinx) -> None:
    """``builder-inited``, after sphinx_tabs: drop the duplicate it just inserted."""
    paths = app.config.html_static_path
    paths[:] = list(dict.fromkeys(paths))


# ------------------------------------------------------------------------- repeated warnings
def _stored(env: BuildEnvironment) -> dict[str, list[Stored]]:
    found = getattr(env, _ENV_ATTR, None)
    if not isinstance(found, dict):
        found = {}
        setattr(env, _ENV_ATTR, found)
    return found


class _WarningRecorder(pylogging.Handler):
    """Keeps each warning emitted while pages are read, under the page it belongs to."""

    def __init__(self, env: BuildEnvironment) -> None:
        super().__init__(pylogging.WARNING)
        self.env = env

    def emit(self, record: pylogging.LogRecord) -> None:
        if getattr(record, _SEEN, False):  # the same record again, flushed after reading
            return
        setattr(record, _SEEN, True)
        docname, location = self._where(record)
        if not docname:
            return
        kind, sub = str(getattr(record, "type", "") or ""), str(getattr(record, "subtype", "") or "")
        message = record.msg % record.args if record.args else str(record.msg)
        for suffix in (f" [{kind}.{sub}]", f" [{kind}]"):  # added by show_warning_types
            if kind and message.endswith(suffix):
                message = message[: -len(suffix)]
                break
        _stored(self.env).setdefault(docname, []).append((location, message, kind, sub))

    def _where(self, record: pylogging.LogRecord) -> tuple[str | None, Any]:
        """(page, location to re-emit at) of a record, raw or already translated by Sphinx."""
        env = self.env
        current = env.current_document.docname if hasattr(env, "current_document") else env.docname
        location = getattr(record, "location", None)
        if isinstance(location, tuple):
            docname, lineno = location
            return (current or docname), (f"{env.doc2path(docname)}:{lineno}" if lineno else (docname, None))
        if isinstance(location, nodes.Node):
            where = get_node_location(location)
            source = where.rsplit(":", 1)[0] if where else None
            return (current or (env.path2doc(source) if source else None)), where
        if isinstance(location, str) and location:
            if ":" not in location:
                return (current or location), (location, None)
            path, _, _line = location.rpartition(":")
            return (current or env.path2doc(path)), location
        return current or None, None


class WarningMemory:
    """Per build: which pages are read, the recorder while they are, the repeats afterwards."""

    def __init__(self) -> None:
        self.reading: set[str] = set()
        self.recorder: _WarningRecorder | None = None
        self.repeated = 0

    def purge(self, app: Sphinx, env: BuildEnvironment, docname: str) -> None:
        _stored(env).pop(docname, None)

    def before_read(self, app: Sphinx, env: BuildEnvironment, docnames: list[str]) -> None:
        self.reading = set(docnames)
        for docname in docnames:
            _stored(env).pop(docname, None)
        self.recorder = _WarningRecorder(env)
        pylogging.getLogger(logging.NAMESPACE).addHandler(self.recorder)

    def stop(self) -> None:
        if self.recorder is not None:
            pylogging.getLogger(logging.NAMESPACE).removeHandler(self.recorder)
            self.recorder = None

    def repeat(self, app: Sphinx, env: BuildEnvironment) -> None:
        """``env-updated``: re-emit the kept warnings of every page that was not re-read."""
        self.stop()
        stored = _stored(env)
        for docname in list(stored):
            if docname not in env.all_docs:
                del stored[docname]
        pages = sorted(d for d in stored if d not in self.reading and stored[d])
        if not pages:
            return
        count = sum(len(stored[d]) for d in pages)
        self.repeated += count
        logger.info("gemm-benchmark: %d warning(s) of %d unchanged page(s) (%s) still hold: repeated from the "
                    "build that read them", count, len(pages), ", ".join(pages))
        for docname in pages:
            for location, message, kind, sub in stored[docname]:
                logger.warning("%s", message + REPEATED_SUFFIX, location=location, type=kind or None,
                               subtype=sub or None)


# ------------------------------------------------------------------------- brief log
class BriefLog:
    """The brief style: filters on Sphinx's status handler, and third-party noise silenced."""

    def __init__(self) -> None:
        self.final: str | None = None
        self._ended = False
        self._caught: warnings.catch_warnings[None] | None = None
        self._null: pylogging.Handler | None = None

    def install(self) -> None:
        for handler in pylogging.getLogger(logging.NAMESPACE).handlers:
            if isinstance(handler, NewLineStreamHandler):
                handler.addFilter(self)
        # Python warnings attributed to modules other than this project's, and third-party log
        # records that would reach the root logger's last-resort handler (stderr).
        self._caught = warnings.catch_warnings()
        self._caught.__enter__()
        warnings.filterwarnings("ignore", module=r"(?!.*gemm_bench)")
        self._null = pylogging.NullHandler()
        pylogging.getLogger().addHandler(self._null)

    def release_python(self) -> None:
        """Python warnings and root logging back as they were (at ``build-finished``); the status
        filter stays on this application's handler for Sphinx's last lines."""
        if self._caught is not None:
            self._caught.__exit__(None, None, None)
            self._caught = None
        if self._null is not None:
            pylogging.getLogger().removeHandler(self._null)
            self._null = None

    def filter(self, record: pylogging.LogRecord) -> bool:
        if record.name == _SPHINX_APPLICATION and self.final is not None:
            # After build-finished: Sphinx's "build succeeded ..." line, then its epilog ("The HTML
            # pages are in ..."): the first carries the site and freshness, the rest is dropped.
            if self._ended:
                return False
            self._ended = True
            record.msg, record.args = "%s", (f"{record.getMessage()} {self.final}",)
            return True
        return record.name in _BRIEF_LOGGERS


def site_summary(app: Sphinx) -> str:
    """Where the site is and what in it is stale or missing."""
    out = Path(os.path.relpath(app.outdir))
    builder = app.builder
    where = f"Output in {out}."
    if builder.format == "html":
        where = f"The site is in {out / builder.get_target_uri(app.config.root_doc)}."
    records = envdata.all_records(app.env)
    if not records:
        return where
    counts = result_counts(records)  # results, not rows: the freshness page's own count
    total = sum(counts.values())
    behind = {status: n for status, n in counts.items() if status != "fresh"}
    if not behind:
        return f"{where} All {total} results are fresh."
    pages = sorted(envdata.data(app.env).freshness)
    see = ""
    if pages:
        see = f": see {out / builder.get_target_uri(pages[0])}" if builder.format == "html" else f": see {pages[0]}"
    listed = ", ".join(missing_text(records, n) if status == "missing" else f"{n} {status}"
                       for status, n in behind.items())
    return f"{where} {sum(behind.values())} of {total} results need a GPU run ({listed}){see}."


def missing_text(records: Sequence[envdata.DirectiveRecord], count: int) -> str:
    """``4 missing``, saying which of them are for GPUs no result was ever measured on and which pages
    ask for them: every correct build of the site ended "4 of 29 results need a GPU run (4 missing)",
    the maintainers page's Blackwell example, which a newcomer read as a fault. A missing result on a
    GPU that has results elsewhere (a real gap) is counted apart, never folded into the example."""
    measured = {d.slug for r in records for d in r.devices}
    missing = [r for r in site_results(records) if r.status == "missing"]
    new = [r for r in missing if r.slug and r.slug not in measured]
    if not new:
        return f"{count} missing"
    # As the pages name them (the row's label is "b200 (no result)"), in page order.
    gpus = ", ".join(dict.fromkeys(r.device.removesuffix(" (no result)") or r.slug for r in new))
    shown = ", ".join(dict.fromkeys(page for r in new for page, _ in r.shown))
    what = (f"for {'a GPU' if ',' not in gpus else 'GPUs'} no result was ever measured on: {gpus}, asked on "
            f"{'the page' if ',' not in shown else 'the pages'} {shown}")
    if len(new) == count:
        return f"{count} missing, all {what}"
    return f"{count} missing: {count - len(new)} to measure, {len(new)} {what}"


class BuildLog:
    """This module's state for one Sphinx application."""

    def __init__(self, app: Sphinx) -> None:
        try:
            self.style = log_style(app.verbosity)
        except BuildLogError as exc:
            logger.warning("%s; using the full log", exc, type="gemm_benchmark", subtype="config")
            self.style = "full"
        self.memory = WarningMemory()
        self.brief = BriefLog() if self.style == "brief" else None
        if self.brief is not None:
            self.brief.install()

    def reading(self, app: Sphinx, env: BuildEnvironment, docnames: list[str]) -> None:
        self.memory.before_read(app, env, docnames)
        if self.brief is None:
            return
        mode = settings(env).mode
        source = {"cache": "from the cache, never measuring",
                  "auto": "from the cache, measuring what this machine's GPU lacks",
                  "force": "re-measuring this machine's GPU"}.get(mode, mode)
        cache = os.path.relpath(settings(env).cache_dir)
        if docnames:
            logger.info("gemm-benchmark: reading %d of %d pages; results %s (%s, execution mode %s)",
                        len(docnames), len(env.found_docs), source, cache, mode)
        else:
            logger.info("gemm-benchmark: no page changed since the last build (%s, execution mode %s)", cache, mode)

    def finished(self, app: Sphinx, exception: BaseException | None) -> None:
        self.memory.stop()
        if self.brief is None:
            return
        if exception is None and getattr(app, "env", None) is not None:
            self.brief.final = site_summary(app)
        self.brief.release_python()


def setup_buildlog(app: Sphinx) -> None:
    state = BuildLog(app)
    app.connect("config-inited", _pin_tabs_static)
    app.connect("builder-inited", _dedupe_static, priority=900)
    app.connect("env-purge-doc", state.memory.purge)
    app.connect("env-before-read-docs", state.reading, priority=900)
    app.connect("env-updated", state.memory.repeat, priority=900)
    app.connect("build-finished", state.finished, priority=900)
