"""What the extension remembers between pages and builds: typed records in the environment.

Per page: a :class:`DirectiveRecord` for every ``gemm-benchmark`` directive (its name, question,
devices, the cache files it used, freshness, and every value a role may quote, computed once from
the directive's own answer) and for every model of a ``gemm-benchmark-summary`` (the freshness table
lists them; roles quote one only where its summary has a ``:name:``), the names its roles quote, and
whether it holds a freshness table.

:class:`GemmBenchmarkCollector` (a Sphinx ``EnvironmentCollector``, as myst-nb's
``NbMetadataCollector``) purges a re-read page's data, merges ``-j`` workers' data back by page,
picks pages to re-read before reading (a new device's file appeared, the execution mode changed)
and pages to re-write after reading (a role page whose quoted values changed, e.g. a directive was
renamed to the name it quotes; the freshness page when any record changed).
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from collections.abc import Iterable, Iterator, Set
from pathlib import Path
from typing import Any

from sphinx.application import Sphinx
from sphinx.environment import BuildEnvironment
from sphinx.environment.collectors import EnvironmentCollector

from gemm_bench.results.cache import Cache, CacheError
from gemm_benchmark import execution
from gemm_benchmark.config import settings


@dataclasses.dataclass(frozen=True)
class Value:
    """One quotable value: the text shown, and a tooltip saying what it is and where it is from.

    ``text`` is empty when there is no value; ``tooltip`` then says why (the role warns with it).
    """

    text: str
    tooltip: str
    #: Why the value is absent when its own cell is: ``failed``, ``unsupported``, ``missing`` ("" else),
    #: and that cell's reason, so a role reads "failed: CUDA out of memory", never one "n/a" for all.
    status: str = ""
    reason: str = ""
    #: A speedup's measured spread (``values.Point``'s low and high), where it has one: the prose
    #: check of :mod:`.roles` needs it to tell two quoted speedups apart.
    low: float | None = None
    high: float | None = None
    #: The profiler cross-check flags of the times this value rests on (``Cell.cross_check_flag``,
    #: ``Report.speedup_flag``, ``StepResult.cross_check_flag``: each with its ratio), "" when none is
    #: flagged; a role shows the mark beside the number and the flag in its title (issue 31). Last,
    #: with a default: an environment pickled before the field reads "" (the class attribute).
    flag: str = ""

    @property
    def available(self) -> bool:
        return bool(self.text)


@dataclasses.dataclass(frozen=True)
class DeviceRecord:
    name: str
    slug: str
    path: str
    date: str
    method_version: str
    status: str
    reason: str
    #: ``"<role> <mode> <precision> <op/pass or ''>"`` -> value.
    values: dict[str, Value]


@dataclasses.dataclass(frozen=True)
class DirectiveRecord:
    docname: str
    lineno: int
    name: str
    kind: str
    question_hash: str
    describe: str
    modes: tuple[str, ...]
    precisions: tuple[str, ...]
    cache_dir: str
    cache_files: tuple[str, ...]
    status: str
    devices: tuple[DeviceRecord, ...]
    unmatched: tuple[str, ...]
    #: The directive listed ``:devices:`` (``devices`` are in that order; else by name): a role without
    #: ``@DEVICE`` on several devices warns, and says which of them it quoted (:mod:`.roles`).
    devices_listed: bool
    #: Every spelling of each GEMM a role may use (``mlp_up/fprop``, ``mlp_up.fprop``, the shape
    #: label) -> the ``op/pass`` ids it names (several: ambiguous; see :func:`.values.resolve_gemm`).
    gemm_names: dict[str, tuple[str, ...]]
    #: The directive that asked: ``gemm-benchmark`` (roles quote it by name) or
    #: ``gemm-benchmark-summary`` (one record per model, ``name`` its label: listed, not quoted unless
    #: ``named``).
    directive: str = "gemm-benchmark"
    #: A summary of one model with a ``:name:``: ``name`` is that name and roles quote it as a directive's.
    named: bool = False
    #: The id of the directive's block on its page: the target ``:ref:`NAME``` links to when this
    #: record owns its name (:func:`.directive.check_unique_names`); "" for a summary.
    node_id: str = ""
    #: The title ``:ref:`NAME``` shows (:func:`.nodes.block_title`: the caption, else the name).
    title: str = ""

    @property
    def quotable(self) -> bool:
        return bool(self.name) and (self.directive == "gemm-benchmark" or self.named)

    def digest(self) -> str:
        """A fingerprint of everything roles and the freshness table show from this record."""
        payload = json.dumps(dataclasses.asdict(self), sort_keys=True, default=str)
        return hashlib.sha256(payload.encode("utf-8", "surrogatepass")).hexdigest()[:16]


def value_key(role: str, mode: str, precision: str, gemm: str = "") -> str:
    return f"{role} {mode} {precision} {gemm}"


@dataclasses.dataclass(frozen=True)
class Watch:
    """One question a page asked (a ``gemm-benchmark`` or one model of a summary), as it was answered:
    what an incremental build compares to decide whether the page must be read again."""

    cache_dir: str
    question_hash: str
    #: The question's cache files when the page was read (a new device's file re-reads the page).
    cache_files: tuple[str, ...]
    #: The measured dates of the results shown, and :func:`.execution.freshness_key` of them then.
    dates: tuple[str, ...]
    freshness: str


@dataclasses.dataclass
class SiteData:
    records: dict[str, list[DirectiveRecord]] = dataclasses.field(default_factory=dict)
    role_uses: dict[str, set[str]] = dataclasses.field(default_factory=dict)
    freshness: set[str] = dataclasses.field(default_factory=set)
    #: Per page: every question it asked and how it was answered (directives and summaries alike).
    watches: dict[str, list[Watch]] = dataclasses.field(default_factory=dict)
    execution_mode: str | None = None
    #: Per role page: the digests of the records its roles quoted when it was last written.
    role_digests: dict[str, dict[str, str | None]] = dataclasses.field(default_factory=dict)
    #: Digest of all records when the freshness pages were last written.
    freshness_digest: str = ""
    #: Per page: (``:name:``, line) of each directive rejected for bad options: never quoted, but its
    #: name still clashes with another's (:func:`.directive.check_unique_names`), reported now rather
    #: than on the build after the author fixes the options.
    rejected_names: dict[str, list[tuple[str, int]]] = dataclasses.field(default_factory=dict)


_ATTR = "gemm_benchmark_data"


def data(env: BuildEnvironment) -> SiteData:
    """The extension's store in ``env`` (created on first use)."""
    store = getattr(env, _ATTR, None)
    if not isinstance(store, SiteData):
        store = SiteData()
        setattr(env, _ATTR, store)
    return store


def add_record(env: BuildEnvironment, record: DirectiveRecord) -> None:
    data(env).records.setdefault(record.docname, []).append(record)


def watch(env: BuildEnvironment, cache_dir: Path, question_hash: str, answer: execution.Answer) -> None:
    """Remember a question the current page asked, for :meth:`GemmBenchmarkCollector.get_outdated_docs`."""
    config = settings(env)
    dates = tuple(d.result.provenance.date for d in answer.devices)
    data(env).watches.setdefault(env.docname, []).append(Watch(
        str(cache_dir), question_hash, tuple(p.name for p in answer.files), dates,
        execution.freshness_key(dates, max_age_days=config.max_age_days, mode=config.mode)))


def note_role_use(env: BuildEnvironment, docname: str, name: str) -> None:
    data(env).role_uses.setdefault(docname, set()).add(name.lower())


def note_freshness_page(env: BuildEnvironment, docname: str) -> None:
    data(env).freshness.add(docname)


def note_rejected_name(env: BuildEnvironment, name: str, lineno: int) -> None:
    """The ``:name:`` of a directive of the current page that its bad options kept from rendering."""
    data(env).rejected_names.setdefault(env.docname, []).append((name, lineno))


def all_records(env: BuildEnvironment) -> list[DirectiveRecord]:
    """Every directive on the site, in page order then line order (stable across ``-j``)."""
    records = data(env).records
    return [r for docname in sorted(records) for r in sorted(records[docname], key=lambda r: r.lineno)]


def document_order(env: BuildEnvironment) -> dict[str, int]:
    """Each page's place in the site's reading order: the toctree from the root document, depth
    first (the order of Sphinx's "next" links), then the pages no toctree includes, by name.

    A ``:name:`` given twice belongs to its first definition in this order (not to the first
    page by name, which sent the roles of an early chapter to the directive of a late one).
    """
    order: dict[str, int] = {}
    stack = [env.config.root_doc]
    while stack:
        docname = stack.pop()
        if docname in order:
            continue
        order[docname] = len(order)
        stack.extend(reversed(env.toctree_includes.get(docname, [])))
    for docname in sorted({*env.found_docs, *data(env).records}):
        order.setdefault(docname, len(order))
    return order


def quotable_records(env: BuildEnvironment) -> list[DirectiveRecord]:
    """The records roles may quote by name, in :func:`document_order` then line order: the first
    of a name is the one its roles quote."""
    order = document_order(env)
    found = [r for records in data(env).records.values() for r in records if r.quotable]
    return sorted(found, key=lambda r: (order.get(r.docname, len(order)), r.docname, r.lineno))


def find(env: BuildEnvironment, name: str) -> DirectiveRecord | None:
    """The directive named ``name`` (case-insensitive, as docutils normalizes labels): its first
    definition in :func:`document_order`, every later one being an error at that one."""
    wanted = name.lower()
    return next((r for r in quotable_records(env) if r.name.lower() == wanted), None)


def rejected_duplicate(env: BuildEnvironment, docname: str, name: str) -> bool:
    """Whether page ``docname`` defines ``name`` but a page earlier in :func:`document_order` owns it:
    a role there naming it that cannot be resolved only repeats the duplicate's own error."""
    wanted = name.lower()
    owner = find(env, name)
    return owner is not None and any(r.quotable and r.name.lower() == wanted and r is not owner
                                     for r in data(env).records.get(docname, []))


def quotable_names(env: BuildEnvironment) -> list[str]:
    """Every name roles may quote, as first written, sorted (a role naming none is told the closest)."""
    return sorted({r.name.lower(): r.name for r in quotable_records(env)}.values(), key=str.lower)


def records_of(env: BuildEnvironment, docnames: Iterable[str]) -> Iterator[DirectiveRecord]:
    records = data(env).records
    for docname in docnames:
        yield from records.get(docname, [])


def _digests(env: BuildEnvironment) -> tuple[dict[str, str], str]:
    """Each name's record digest (the record :func:`find` returns), and the whole site's digest.

    One pass over the records, each digested once, whatever the number of pages and roles.
    """
    by_name: dict[str, str] = {}
    parts = []
    digests: dict[int, str] = {}
    for record in all_records(env):
        digests[id(record)] = digest = record.digest()
        parts.append(digest)
    for record in quotable_records(env):  # the order find() reads them in
        by_name.setdefault(record.name.lower(), digests[id(record)])
    return by_name, hashlib.sha256("|".join(parts).encode()).hexdigest()[:16]


class GemmBenchmarkCollector(EnvironmentCollector):
    """Keeps :class:`SiteData` consistent with the pages, across incremental and ``-j`` builds."""

    def clear_doc(self, app: Sphinx, env: BuildEnvironment, docname: str) -> None:
        store = data(env)
        store.records.pop(docname, None)
        store.watches.pop(docname, None)
        store.role_uses.pop(docname, None)
        store.freshness.discard(docname)
        store.rejected_names.pop(docname, None)

    def merge_other(self, app: Sphinx, env: BuildEnvironment, docnames: Set[str], other: BuildEnvironment) -> None:
        mine, theirs = data(env), data(other)
        for docname in docnames:
            if docname in theirs.records:
                mine.records[docname] = theirs.records[docname]
            if docname in theirs.watches:
                mine.watches[docname] = theirs.watches[docname]
            if docname in theirs.role_uses:
                mine.role_uses[docname] = theirs.role_uses[docname]
            if docname in theirs.freshness:
                mine.freshness.add(docname)
            if docname in theirs.rejected_names:
                mine.rejected_names[docname] = theirs.rejected_names[docname]

    def process_doc(self, app: Sphinx, doctree: object) -> None:
        """Records are added by the directive while reading; nothing to collect afterwards."""

    def get_outdated_docs(self, app: Sphinx, env: BuildEnvironment, added: set[str], changed: set[str],
                          removed: set[str]) -> list[str]:
        """Pages to re-read for a change Sphinx cannot see by itself.

        A question whose set of cache files changed (a new device measured, a file deleted: Sphinx
        tracks files a page used, not files that appeared since), whose results' freshness changed
        since the page was read (a result aged past ``gemm_benchmark_max_age_days``, this GPU box's
        software stack changed: :func:`.execution.freshness_key`), for ``gemm-benchmark`` directives
        and summaries alike; and every page when the execution mode changed or is ``force``.
        """
        store = data(env)
        config = settings(env)
        mode = config.mode
        previous_mode, store.execution_mode = store.execution_mode, mode
        extra: set[str] = set()
        for docname, watches in store.watches.items():
            if docname in removed:
                continue
            if mode == "force" or (previous_mode is not None and previous_mode != mode):
                extra.add(docname)
                continue
            for asked in watches:
                try:
                    files = cache_file_names(Path(asked.cache_dir), asked.question_hash)
                except CacheError:
                    files = ()
                if files != asked.cache_files or asked.freshness != execution.freshness_key(
                        asked.dates, max_age_days=config.max_age_days, mode=mode):
                    extra.add(docname)
                    break
        return sorted(extra - removed - changed - added)

    def get_updated_docs(self, app: Sphinx, env: BuildEnvironment) -> list[str]:
        """Pages to re-write after reading: their quoted values or the freshness table changed."""
        store = data(env)
        by_name, site = _digests(env)
        updated: list[str] = []
        for docname, names in store.role_uses.items():
            digests: dict[str, str | None] = {name: by_name.get(name) for name in sorted(names)}
            if store.role_digests.get(docname) != digests:
                store.role_digests[docname] = digests
                updated.append(docname)
        for docname in list(store.role_digests):
            if docname not in store.role_uses:
                del store.role_digests[docname]
        if site != store.freshness_digest:
            store.freshness_digest = site
            updated += sorted(store.freshness)
        return sorted(set(updated))


def cache_file_names(cache_dir: Path, question_hash: str) -> tuple[str, ...]:
    return tuple(p.name for p in Cache(cache_dir).files(question_hash))


def watch_study(env: BuildEnvironment, folder: Path, study: str, *, max_age_days: float | None,
                mode: str) -> tuple[str, ...]:
    """Re-read the current page when a file of ``study`` in ``folder`` is edited, added or removed,
    and only then: a dependency on each file (never on a folder, which Sphinx always calls
    changed) and a :class:`Watch` on the set of names. Returns the names; :class:`CacheError` when
    the folder cannot be listed."""
    from gemm_benchmark import execution

    names = cache_file_names(folder, study)
    for name in names:
        env.note_dependency(str(folder / name))
    data(env).watches.setdefault(env.docname, []).append(Watch(
        str(folder), study, names, (), execution.freshness_key((), max_age_days=max_age_days, mode=mode)))
    return names


def page_studies(env: BuildEnvironment, study: str, *, location: tuple[str, int]) -> tuple[list[dict[str, Any]],
                                                                                          list[CacheError]]:
    """A study's valid documents for the current page, each device's file read once: the page is
    re-read when a file of it changes (:func:`watch_study`), and a folder that cannot be listed or a file
    that cannot be used is a located ``gemm_benchmark.cache`` warning; the refused files are returned too,
    for the page to say why a device has none. One reading for every study directive."""
    from gemm_bench.results import studies
    from gemm_benchmark.diagnostics import Subtype, warn

    config = settings(env)
    try:
        watch_study(env, studies.study_dir(config.cache_dir), study, max_age_days=config.max_age_days,
                    mode=config.mode)
    except CacheError as exc:
        warn(Subtype.CACHE, f"cannot list the study files: {exc}", location=location)
    docs, errors = studies.read_studies(config.cache_dir, study)
    for error in errors:
        warn(Subtype.CACHE, str(error), location=location)
    return docs, errors


def loss_parity_study(env: BuildEnvironment, cache_dir: Path, device: str, *, location: Any,
                      directive: str) -> dict[str, Any] | None:
    """This GPU's loss-parity study document, None where there is none: the tie-break's first
    criterion (:func:`gemm_bench.report.tie_break.pick`), so the summary's answer and ★ and a page's
    ``:gemm-fastest:`` role weigh the same study. The page is re-read when the file changes; an
    unusable file is a located ``gemm_benchmark.cache`` warning (from ``directive``) and reads as no study."""
    from gemm_bench.results import loss_parity_schema, studies
    from gemm_benchmark.diagnostics import Subtype, warn

    path = studies.study_path(cache_dir, loss_parity_schema.NAME, device)
    if not path.is_file():
        return None
    env.note_dependency(str(path))
    try:
        doc = studies.read_study(path)
    except CacheError as exc:
        warn(Subtype.CACHE, f"{directive}: ignoring unusable study file {exc}", location=location)
        return None
    return doc if doc["study"] == loss_parity_schema.NAME else None
