"""Site-wide freshness: one table of every result the site shows (like myst-nb's execution statistics).

``.. gemm-benchmark-freshness::`` puts a placeholder in its page; after all pages are read the
post-transform fills it from the environment's records. A *result* is one question on one device
(one cache file), or a device a page asks for that has none: one row each, with the pages and the
names that show it beside (:func:`site_results`), however many directives and summary models show
it. A summary's models are recorded too (:func:`note_summary_model`: seven models of the models
page appear nowhere else). The studies (``studies/*.json``) get a table of their own, read when
the freshness page is. :func:`result_counts` is what the page's sentence and the build's last line
count, so the two cannot disagree. At the end of the build the same rows go to the log.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from docutils import nodes
from sphinx.application import Sphinx
from sphinx.environment import BuildEnvironment
from sphinx.transforms.post_transforms import SphinxPostTransform
from sphinx.util import logging
from sphinx.util.docutils import SphinxDirective

from gemm_bench.question.devices import device_label, normalize_selector
from gemm_bench.results import studies, untrusted_text
from gemm_bench.results.cache import CacheError, is_stale
from gemm_bench.results.schema import METHOD_VERSION
from gemm_benchmark import records as envdata
from gemm_benchmark.execution import lacking_reason
from gemm_benchmark.nodes import app_of, builder_format, gemm_freshness
from gemm_benchmark.render_block import scrolling
from gemm_benchmark.render_table import Entry, build_table
from gemm_benchmark.values import device_values, gemm_names

if TYPE_CHECKING:
    from gemm_benchmark.execution import Answer
    from gemm_benchmark.options import Request

logger = logging.getLogger(__name__)

SUMMARY = "gemm-benchmark-summary"

COLUMNS = ("Result", "Device", "Measured", "Method", "Status", "Shown on")
STUDY_COLUMNS = ("Study", "Device", "Measured", "Method", "Status", "Shown on")

#: Worst first: a result shown by several directives has the status of the one that needs most.
_WORST_FIRST = ("missing", "failed", "stale", "fresh")


class GemmBenchmarkFreshnessDirective(SphinxDirective):
    """The tables of every result the site shows (one row per result) and of every study: fresh, stale,
    missing or failed."""

    reference_example = ".. gemm-benchmark-freshness::"
    has_content = False

    def run(self) -> list[nodes.Node]:
        envdata.note_freshness_page(self.env, self.env.docname)
        node = gemm_freshness()
        node["studies"] = self._studies()
        self.set_source_info(node)
        return [node]

    def _studies(self) -> list[tuple[str, ...]]:
        """(study, title, device, date, method version, status) of every study file, read now: a
        study file edited, added or removed re-reads this page (:func:`.records.watch_study`)."""
        from gemm_benchmark.config import settings
        from gemm_benchmark.execution import clock

        config = settings(self.env)
        folder = studies.study_dir(config.cache_dir)
        out: list[tuple[str, ...]] = []
        for name in sorted(studies.REGISTRY):
            title = studies.REGISTRY[name].title
            try:
                envdata.watch_study(self.env, folder, name, max_age_days=config.max_age_days, mode=config.mode)
            except CacheError as exc:
                out.append((name, title, "–", "–", "–", f"missing (cannot list the study files: {exc.problem})"))
                continue
            docs, errors = studies.read_studies(config.cache_dir, name)
            for doc in docs:
                date = str(doc["provenance"]["date"])
                why = studies.staleness(doc, None, ("method",)) or is_stale(
                    {"method_version": METHOD_VERSION, "provenance": {"date": date}},
                    max_age_days=config.max_age_days, now=clock())
                out.append((name, title, str(doc["device"]["name"]), date[:10], str(doc["method_version"]),
                            f"stale ({why})" if why else "fresh"))
            for error in errors:
                out.append((name, title, error.path.name, "–", "–", f"failed (unusable file: {error.problem})"))
        return out


def note_summary_model(env: BuildEnvironment, lineno: int, label: str, request: Request, answer: Answer,
                       cache_dir: Path) -> None:
    """Record one model of a ``gemm-benchmark-summary`` (at ``lineno`` of the current page) as it was
    answered, for the freshness table and the build's last line. Roles quote it only when the summary
    has a ``:name:`` (one model): then it holds every value, computed as a ``gemm-benchmark``'s are.

    A summary shows both layer-step rows whatever its modes: :func:`.execution.assess` judges them
    (with the model step's parts and the energy) by the refresh's own predicate
    (:func:`gemm_bench.results.failed.failed_cells`), so a step that failed makes the result *failed*
    here and on the build's last line, never *fresh*."""
    devices = []
    for d in answer.devices:
        status, reason = d.status.value, d.reason
        reason = lacking_reason(d.result, request.question, status, reason)
        devices.append(envdata.DeviceRecord(
            name=d.device, slug=d.slug, path=str(d.path), date=d.result.provenance.date,
            method_version=d.result.method_version, status=status, reason=reason,
            values=device_values(d.reports, device_label(d.device), request.name,
                                 envdata.loss_parity_study(env, cache_dir, d.device, location=(env.docname, lineno),
                                                           directive="gemm-benchmark-summary"))
            if request.name else {}))
    overall = answer.status.value
    if overall == "fresh" and any(d.status == "failed" for d in devices):
        overall = "failed"
    names = gemm_names(answer.devices[0].reports[request.modes[0]]) if request.name and answer.devices else {}
    envdata.add_record(env, envdata.DirectiveRecord(
        docname=env.docname, lineno=lineno, name=request.name or label, kind=request.question.kind,
        question_hash=request.question.hash, describe=request.question.describe(), modes=tuple(request.modes),
        precisions=tuple(request.precisions), cache_dir=str(cache_dir),
        cache_files=tuple(p.name for p in answer.files), status=overall, devices=tuple(devices),
        unmatched=tuple(answer.unmatched), devices_listed=bool(request.devices), gemm_names=names,
        directive=SUMMARY, named=bool(request.name)))


@dataclasses.dataclass(frozen=True)
class SiteResult:
    """One result the site shows: a question on one device (a cache file), or a device a page asks for
    that has no result (``date`` empty); ``shown`` the (page, name) pairs that show it, in page order."""

    question_hash: str
    describe: str
    device: str
    date: str
    method_version: str
    status: str
    reasons: tuple[str, ...]
    shown: tuple[tuple[str, str], ...]
    #: The model's name as a page gives it (:func:`model_names`); "" for shapes, sweeps and a model no
    #: summary names.
    model: str = ""
    #: The device's slug (``b200``); "" for a question no page asks on any device.
    slug: str = ""

    def result_text(self) -> str:
        """"Llama 3 8B: hidden 4096, FFN 14336, …": the name a reader knows first, the question after
        it (issue 35: the rows named results by their config alone)."""
        return f"{self.model}: {self.describe}" if self.model else self.describe

    def status_text(self) -> str:
        text = self.status + (f" ({'; '.join(self.reasons)})" if self.reasons else "")
        if self.method_version and self.method_version != METHOD_VERSION and not self.reasons:
            text += (f" (method v{self.method_version}: still valid, without the quantities method "
                     f"v{METHOD_VERSION} adds; a GPU refresh re-measures it)")
        return text

    def shown_text(self) -> str:
        return ", ".join(f"{page} ({name})" if name else page for page, name in self.shown)


def _name(record: envdata.DirectiveRecord) -> str:
    if record.directive == SUMMARY:
        return f"{record.name}, summary" if record.name else "summary"
    return record.name or f"line {record.lineno}"


def model_names(records: Sequence[envdata.DirectiveRecord]) -> dict[str, str]:
    """Each question's model name, from the summaries that show it: a summary without ``:name:``
    records the model's label ("Llama 3 8B", or the label its ``:models:`` entry gives), preferred;
    a named one its ``:name:``. A question only ``gemm-benchmark`` directives show has none: their
    ``:name:`` names a directive ("tut-mixtral", "square-sweep"), not a model."""
    out: dict[str, str] = {}
    for named in (False, True):
        for r in records:
            if r.directive == SUMMARY and r.named == named and r.name and r.kind == "model":
                out.setdefault(r.question_hash, r.name)
    return out


@dataclasses.dataclass
class _Row:
    """One result's row while :func:`site_results` gathers the records that show it (the first one's
    question, device, date and method; every record's status, reason and place)."""

    describe: str
    device: str
    date: str
    method: str
    statuses: list[str] = dataclasses.field(default_factory=list)
    reasons: list[str] = dataclasses.field(default_factory=list)
    shown: list[tuple[str, str, bool]] = dataclasses.field(default_factory=list)


def site_results(records: Sequence[envdata.DirectiveRecord]) -> list[SiteResult]:
    """Every result the records show, once each, in the order pages first show them.

    The models page shows each model twice (the page-wide summary and its section's): one result,
    one row, both places beside it. A question with no result anywhere is one *missing* row.
    """
    found: dict[tuple[str, str], _Row] = {}

    def add(key: tuple[str, str], record: envdata.DirectiveRecord, device: str, date: str, method: str,
            status: str, reason: str) -> None:
        row = found.setdefault(key, _Row(record.describe, device, date, method))
        row.statuses.append(status)
        if reason and reason not in row.reasons:
            row.reasons.append(reason)
        place = (record.docname, _name(record), record.quotable)
        if place not in row.shown:
            row.shown.append(place)

    for r in records:
        for d in r.devices:
            add((r.question_hash, d.slug), r, device_label(d.name), d.date[:10], d.method_version, d.status,
                d.reason)
        for selector in r.unmatched:
            add((r.question_hash, normalize_selector(selector)), r, f"{selector} (no result)", "", "", "missing",
                "")
        if not r.devices and not r.unmatched:
            add((r.question_hash, ""), r, "", "", "", "missing", "no result on any device")
    asked = {question for question, device in found if device}
    names = model_names(records)
    out = []
    for (question, device), row in found.items():
        if not device and question in asked:
            continue  # the question's devices have rows of their own
        status = min(row.statuses, key=_WORST_FIRST.index)
        out.append(SiteResult(question, row.describe, row.device, row.date, row.method, status,
                              tuple(row.reasons), _one_per_page(row.shown), names.get(question, ""), device))
    return out


def _one_per_page(places: Sequence[tuple[str, str, bool]]) -> tuple[tuple[str, str], ...]:
    """(page, name) once per page, in page order: the names a role can quote there (``:name:``), else the
    first directive's. The models page shows each model in its page-wide summary and in its section's;
    listing both read as two places ("models (llama3-8b, summary), models (Llama 3 8B, summary)")."""
    pages: dict[str, list[str]] = {}
    for page, name, quotable in places:
        names = pages.setdefault(page, [])
        if quotable and name not in names:
            names.append(name)
    firsts: dict[str, str] = {}
    for page, name, _ in places:
        firsts.setdefault(page, name)
    return tuple((page, "; ".join(names) or firsts[page]) for page, names in pages.items())


def result_counts(records: Sequence[envdata.DirectiveRecord]) -> dict[str, int]:
    """How many results (:func:`site_results`: one per question and device, however many pages
    show it) are in each status, statuses sorted by name. The freshness page's sentence, its log
    and the build's last line all count with this one function."""
    counts: dict[str, int] = {}
    for result in site_results(records):
        counts[result.status] = counts.get(result.status, 0) + 1
    return dict(sorted(counts.items()))


def counts_text(counts: dict[str, int]) -> str:
    """``"24 results (1 failed, 23 fresh)"``."""
    total = sum(counts.values())
    listed = ", ".join(f"{n} {status}" for status, n in counts.items())
    return f"{total} result{'s' if total != 1 else ''} ({listed})"


def rows(records: Sequence[envdata.DirectiveRecord]) -> list[tuple[str, ...]]:
    """One row per result: the table's and the log's content."""
    return [(r.result_text(), r.device or "–", r.date or "–", r.method_version or "–", r.status_text(),
             r.shown_text()) for r in site_results(records)]


class ResolveFreshness(SphinxPostTransform):
    default_priority = 500

    def run(self, **kwargs: Any) -> None:
        for node in list(self.document.findall(gemm_freshness)):
            records = envdata.all_records(self.env)
            out: list[nodes.Node] = []
            if records:
                results = site_results(records)
                body = [[Entry(r.result_text(), tooltip=f"question {r.question_hash}"), Entry(r.device or "–"),
                         Entry(r.date or "–"), Entry(r.method_version or "–"),
                         Entry(r.status_text(), classes=(f"gemm-status-{r.status}",)), Entry(r.shown_text())]
                        for r in results]
                # No table title: titled tables are numbered (given ids) while reading, and this one is
                # built after reading; a paragraph says what the table is instead.
                table = build_table([[Entry(c) for c in COLUMNS]], body, [30, 12, 10, 6, 22, 20],
                                    classes=["gemm-freshness"])
                self._link_pages(table, [r.shown for r in results])
                intro = (f"{counts_text(result_counts(records))} on this site, one row per result (a question "
                         f"on one device), with the pages that show it (current method version {METHOD_VERSION}):")
                out += [nodes.paragraph(intro, intro, classes=["gemm-freshness-intro"]), scrolling(table)]
            else:
                out.append(nodes.paragraph("No gemm-benchmark results on this site.",
                                           "No gemm-benchmark results on this site."))
            out += self._studies(node.get("studies", []))
            node.replace_self(out)

    def _studies(self, found: list[tuple[str, ...]]) -> list[nodes.Node]:
        """The studies' table: one row per study file, with the pages whose study directives show it."""
        folder = str(studies.study_dir(Path(_cache_dir(self.env))))
        pages: dict[str, list[tuple[str, str]]] = {}
        for docname, watches in sorted(envdata.data(self.env).watches.items()):
            for watch in watches:
                if (watch.cache_dir == folder and docname != self.env.docname
                        and (docname, "") not in pages.get(watch.question_hash, [])):
                    pages.setdefault(watch.question_hash, []).append((docname, ""))
        # A study a page shows without any file of it is missing; one no page shows and no file
        # holds is not this site's.
        found = [*found, *((name, studies.REGISTRY[name].title, "–", "–", "–", "missing (no result on any device)")
                           for name in sorted(pages) if name in studies.REGISTRY
                           and not any(row[0] == name for row in found))]
        if not found:
            return []
        body, shown = [], []
        for name, title, device, date, method, status in found:
            shown.append(tuple(pages.get(name, [])))
            body.append([Entry(title, tooltip=f"study {name}"), Entry(device_label(device)), Entry(date),
                         Entry(method), Entry(status, classes=(f"gemm-status-{status.split()[0]}",)),
                         Entry(", ".join(page for page, _ in shown[-1]) or "–")])
        table = build_table([[Entry(c) for c in STUDY_COLUMNS]], body, [30, 12, 10, 6, 22, 20],
                            classes=["gemm-freshness", "gemm-freshness-studies"])
        self._link_pages(table, shown)
        intro = (f"{len(found)} study result{'s' if len(found) != 1 else ''} (studies/*.json: measured once per GPU, "
                 "each with its own method version):")
        return [nodes.paragraph(intro, intro, classes=["gemm-freshness-intro"]), scrolling(table)]

    def _link_pages(self, table: nodes.table, shown: Sequence[Sequence[tuple[str, str]]]) -> None:
        """Make each page named in the last column a link to that page."""
        if builder_format(self.env) != "html":
            return
        builder = app_of(self.env).builder
        entries = [row[-1] for row in table.findall(nodes.row)][1:]  # skip the header row
        for entry, places in zip(entries, shown, strict=True):
            assert isinstance(entry, nodes.Element)
            para = entry[0]
            assert isinstance(para, nodes.Element)
            if not places:
                continue
            del para[:]
            for i, (page, name) in enumerate(places):
                if i:
                    para += nodes.Text(", ")
                uri = builder.get_relative_uri(self.env.docname, page)
                para += nodes.reference("", page, internal=True, refuri=uri)
                if name:
                    para += nodes.Text(f" ({name})")


def _cache_dir(env: BuildEnvironment) -> Path:
    from gemm_benchmark.config import settings

    return Path(settings(env).cache_dir)


def log_summary(app: Sphinx, exception: Exception | None) -> None:
    """``build-finished``: the freshness table, in the log."""
    if exception is not None or not hasattr(app, "env") or app.env is None:
        return
    records = envdata.all_records(app.env)
    if not records:
        return
    logger.info("gemm-benchmark: %s", counts_text(result_counts(records)))
    for line in log_lines(records):
        logger.info("%s", line)


def log_lines(records: Sequence[envdata.DirectiveRecord]) -> list[str]:
    """The build summary's rows, one per result: device, date and method in columns as wide as their
    widest entry (a fixed width broke the columns at "b300-sxm6-ac (no result)"), then status, result
    and pages. Device names, dates and reasons come from result files: escaped."""
    results = site_results(records)
    # "b200 (no result)" is the page's device cell; here the status beside it says "missing".
    heads = [tuple(untrusted_text.field(c) for c in (r.device.removesuffix(" (no result)") or "–", r.date or "–",
                                                     f"v{r.method_version or '–'}")) for r in results]
    widths = [max((len(h[i]) for h in heads), default=0) for i in range(3)]
    out = []
    for r, head in zip(results, heads, strict=True):
        tail = (untrusted_text.field(c) for c in (r.status_text(), r.result_text(), r.shown_text()))
        out.append("  " + " ".join(f"{c:<{w}}" for c, w in zip(head, widths, strict=True))
                   + " {}: {}; shown on {}".format(*tail))
    return out
