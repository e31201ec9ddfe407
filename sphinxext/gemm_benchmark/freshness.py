"""Site-wide freshness: one table of every result the site shows (like myst-nb's execution statistics).

``.. gemm-benchmark-freshness::`` puts a placeholder in its page; after all pages are read the
post-transform fills it from the environment's records: page, name, devices, measured date,
method version and status (fresh / stale / missing / failed, with the reason). A row per
``gemm-benchmark`` directive and one per model of a ``gemm-benchmark-summary``
(:func:`note_summary_model`: seven models of the models page appear nowhere else). At the end of
the build the same summary goes to the log, so a CI log says which numbers need a GPU run.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from docutils import nodes
from sphinx.application import Sphinx
from sphinx.environment import BuildEnvironment
from sphinx.transforms.post_transforms import SphinxPostTransform
from sphinx.util import logging
from sphinx.util.docutils import SphinxDirective

from gemm_bench.question.devices import device_label
from gemm_bench.results import untrusted_text
from gemm_bench.results.schema import METHOD_VERSION
from gemm_benchmark import records as envdata
from gemm_benchmark.nodes import app_of, builder_format, gemm_freshness
from gemm_benchmark.render_block import scrolling
from gemm_benchmark.render_table import Entry, build_table

if TYPE_CHECKING:
    from gemm_benchmark.execution import Answer
    from gemm_benchmark.options import Request

logger = logging.getLogger(__name__)

SUMMARY = "gemm-benchmark-summary"

COLUMNS = ("Page", "Name", "Devices", "Measured", "Method", "Status")


class GemmBenchmarkFreshnessDirective(SphinxDirective):
    """The table of every result the site shows (directives and summaries): fresh, stale, missing or failed."""

    reference_example = ".. gemm-benchmark-freshness::"
    has_content = False

    def run(self) -> list[nodes.Node]:
        envdata.note_freshness_page(self.env, self.env.docname)
        node = gemm_freshness()
        self.set_source_info(node)
        return [node]


def note_summary_model(env: BuildEnvironment, lineno: int, label: str, request: Request, answer: Answer,
                       cache_dir: Path) -> None:
    """Record one model of a ``gemm-benchmark-summary`` (at ``lineno`` of the current page) as it was
    answered, for the freshness table and the build's last line. Roles never quote it (no values)."""
    envdata.add_record(env, envdata.DirectiveRecord(
        docname=env.docname, lineno=lineno, name=label, kind=request.question.kind,
        question_hash=request.question.hash, describe=request.question.describe(), modes=tuple(request.modes),
        precisions=tuple(request.precisions), cache_dir=str(cache_dir),
        cache_files=tuple(p.name for p in answer.files), status=answer.status.value,
        devices=tuple(envdata.DeviceRecord(
            name=d.device, slug=d.slug, path=str(d.path), date=str(d.doc["provenance"]["date"]),
            method_version=str(d.doc["method_version"]), status=d.status.value, reason=d.reason, values={})
            for d in answer.devices),
        unmatched=tuple(answer.unmatched), devices_listed=bool(request.devices), gemm_names={},
        directive=SUMMARY))


def _name(record: envdata.DirectiveRecord) -> str:
    if record.directive == SUMMARY:
        return f"{record.name} (summary)"
    return record.name or f"(line {record.lineno})"


def rows(records: list[envdata.DirectiveRecord]) -> list[tuple[str, ...]]:
    """One row per directive: the table's and the log's content."""
    out: list[tuple[str, ...]] = []
    for r in records:
        devices = r.devices
        names = ", ".join(device_label(d.name) for d in devices) or "–"
        if r.unmatched:
            names += " (none for " + ", ".join(r.unmatched) + ")"
        dates = ", ".join(d.date[:10] for d in devices) or "–"
        methods = ", ".join(sorted({d.method_version for d in devices})) or "–"
        reasons = "; ".join(f"{device_label(d.name)}: {d.reason}" for d in devices if d.reason)
        status = r.status + (f" ({reasons})" if reasons else "")
        earlier = sorted({d.method_version for d in devices if d.method_version != METHOD_VERSION})
        if earlier and not reasons:
            status += (f" (method v{', v'.join(earlier)}: still valid, without the quantities method "
                       f"v{METHOD_VERSION} adds; a GPU refresh re-measures it)")
        out.append((r.docname, _name(r), names, dates, methods, status))
    return out


class ResolveFreshness(SphinxPostTransform):
    default_priority = 500

    def run(self, **kwargs: Any) -> None:
        for node in list(self.document.findall(gemm_freshness)):
            records = envdata.all_records(self.env)
            if not records:
                node.replace_self(nodes.paragraph("No gemm-benchmark results on this site.",
                                                  "No gemm-benchmark results on this site."))
                continue
            body = []
            for row in rows(records):
                docname = row[0]
                cells = [Entry(docname), *(Entry(v) for v in row[1:5]),
                         Entry(row[5], classes=(f"gemm-status-{row[5].split()[0]}",))]
                body.append(cells)
            # No table title: titled tables are numbered (given ids) while reading, and this one is
            # built after reading; a paragraph says what the table is instead.
            table = build_table([[Entry(c) for c in COLUMNS]], body, [14, 14, 20, 12, 6, 30],
                                classes=["gemm-freshness"])
            self._link_pages(table, records)
            intro = f"Every gemm-benchmark result on this site (current method version {METHOD_VERSION}):"
            node.replace_self([nodes.paragraph(intro, intro, classes=["gemm-freshness-intro"]), scrolling(table)])

    def _link_pages(self, table: nodes.table, records: list[envdata.DirectiveRecord]) -> None:
        """Make each page cell a link to the directive's page."""
        if builder_format(self.env) != "html":
            return
        builder = app_of(self.env).builder
        entries = [row[0] for row in table.findall(nodes.row)][1:]  # skip the header row
        for entry, record in zip(entries, records, strict=True):
            assert isinstance(entry, nodes.Element)
            para = entry[0]
            assert isinstance(para, nodes.Element)
            uri = builder.get_relative_uri(self.env.docname, record.docname)
            ref = nodes.reference("", record.docname, internal=True, refuri=uri)
            del para[:]
            para += ref


def log_summary(app: Sphinx, exception: Exception | None) -> None:
    """``build-finished``: the freshness table, in the log."""
    if exception is not None or not hasattr(app, "env") or app.env is None:
        return
    records = envdata.all_records(app.env)
    if not records:
        return
    counts: dict[str, int] = {}
    for r in records:
        counts[r.status] = counts.get(r.status, 0) + 1
    summary = ", ".join(f"{n} {status}" for status, n in sorted(counts.items()))
    logger.info("gemm-benchmark: %d results (%s)", len(records), summary)
    for row in rows(records):  # device names, dates and reasons come from result files: escaped
        logger.info("  %-24s %-18s %-28s %-12s v%-3s %s", *(untrusted_text.field(str(cell)) for cell in row))
