"""What the extension remembers between pages and builds, kept in the build environment.

Per page: a *record* of every ``gemm-benchmark`` directive (its name, question, devices, the cache
files it used, freshness), the names its roles quote, and whether it holds a freshness table.
Plain dicts and sets, so the environment pickles, and so ``-j`` workers' data merges back by
page (``env-merge-info``) and a re-read page drops its old data first (``env-purge-doc``).

Roles and the freshness table are resolved after all pages are read, from these records; the
``env-get-outdated`` hook uses them to re-read exactly the pages affected by a change elsewhere.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Any

from sphinx.application import Sphinx
from sphinx.environment import BuildEnvironment

Record = dict[str, Any]

_ATTR = "gemm_benchmark_data"


def data(env: BuildEnvironment) -> dict[str, Any]:
    """The extension's store in ``env`` (created on first use)."""
    store = getattr(env, _ATTR, None)
    if store is None:
        store = {"records": {}, "role_uses": {}, "freshness": set(), "execution_mode": None}
        setattr(env, _ATTR, store)
    return store


def add_record(env: BuildEnvironment, record: Record) -> None:
    data(env)["records"].setdefault(record["docname"], []).append(record)


def note_role_use(env: BuildEnvironment, docname: str, name: str) -> None:
    data(env)["role_uses"].setdefault(docname, set()).add(name.lower())


def note_freshness_page(env: BuildEnvironment, docname: str) -> None:
    data(env)["freshness"].add(docname)


def all_records(env: BuildEnvironment) -> list[Record]:
    """Every directive on the site, in page order then line order (stable across ``-j``)."""
    records = data(env)["records"]
    return [r for docname in sorted(records) for r in sorted(records[docname], key=lambda r: r["lineno"])]


def find(env: BuildEnvironment, name: str) -> Record | None:
    """The directive named ``name`` (case-insensitive, as docutils normalizes labels)."""
    wanted = name.lower()
    for record in all_records(env):
        if record["name"] and record["name"].lower() == wanted:
            return record
    return None


def records_of(env: BuildEnvironment, docnames: Iterable[str]) -> Iterator[Record]:
    records = data(env)["records"]
    for docname in docnames:
        yield from records.get(docname, [])


def purge_doc(app: Sphinx, env: BuildEnvironment, docname: str) -> None:
    store = data(env)
    store["records"].pop(docname, None)
    store["role_uses"].pop(docname, None)
    store["freshness"].discard(docname)


def merge_info(app: Sphinx, env: BuildEnvironment, docnames: Iterable[str], other: BuildEnvironment) -> None:
    mine, theirs = data(env), data(other)
    for docname in docnames:
        if docname in theirs["records"]:
            mine["records"][docname] = theirs["records"][docname]
        if docname in theirs["role_uses"]:
            mine["role_uses"][docname] = theirs["role_uses"][docname]
        if docname in theirs["freshness"]:
            mine["freshness"].add(docname)
