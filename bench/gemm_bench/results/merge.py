"""Merging result files that several GPU runners produced into one cache.

The refresh workflow runs one job per GPU family; each uploads the cache files it wrote. The
final job calls :func:`merge` with the downloaded directories. Every incoming file is validated
exactly as a cache read would (:func:`gemm_bench.results.cache.read_document`: schema, question hash,
file name), so a runner cannot slip a malformed or misnamed file into the pull request.

When the cache already holds a file for the same question and device, the rule is:

* identical content: nothing to do;
* another software stack (TE, PyTorch, CUDA, driver or method version): the newer run wins
  whole, because one provenance block must stay true of every cell in a file;
* the same stack: the runs are folded by :func:`gemm_bench.results.schema.merge_documents` (the one rule
  the cache uses for every store), with the newer run passed as the new one, so where both
  measured, the newer run's measurement is kept.

Each decision is returned as a :class:`MergeAction` saying which run was kept and why, and
printed by ``gemm-bench merge``. Writes are atomic under the file's lock.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from gemm_bench.results.cache import Cache, CacheError, dumps, read_document, write_atomic
from gemm_bench.results.schema import merge_documents, validate
from gemm_bench.results.stack import document_stack


class MergeError(ValueError):
    """A merge that cannot start (a source directory that does not exist)."""


@dataclasses.dataclass(frozen=True)
class MergeAction:
    source: Path
    target: Path | None
    #: "added", "replaced", "merged", "kept-existing", "identical" or "rejected".
    action: str
    reason: str

    def describe(self) -> str:
        where = f" -> {self.target}" if self.target else ""
        return f"{self.action}: {self.source}{where} ({self.reason})"


def _when(doc: dict[str, Any]) -> dt.datetime | None:
    try:
        when = dt.datetime.fromisoformat(doc["provenance"]["date"])
    except (ValueError, TypeError):
        return None
    return when if when.tzinfo else when.replace(tzinfo=dt.timezone.utc)


def _stack_text(doc: dict[str, Any]) -> str:
    stack = document_stack(doc)
    return (f"TE {stack['transformer_engine']}, torch {stack['torch']}, CUDA {stack['cuda']}, "
            f"driver {stack['driver']}, method {stack['method']}")


def incoming_files(dirs: Sequence[Path]) -> list[Path]:
    """Result files under each directory (recursively: one sub-folder per downloaded artifact)."""
    files: list[Path] = []
    for directory in dirs:
        if not directory.is_dir():
            raise MergeError(f"DIR: {directory} is not a directory")
        files += sorted(p for p in directory.rglob("*.json") if p.is_file())
    return files


def decide(existing: dict[str, Any], incoming: dict[str, Any]) -> tuple[str, dict[str, Any] | None, str]:
    """(action, document to write or None, reason) for one conflict; pure, for tests and dry runs."""
    if existing == incoming:
        return "identical", None, "same content as the cached file"
    when_old, when_new = _when(existing), _when(incoming)
    newer_incoming = when_old is not None and when_new is not None and when_new > when_old
    if document_stack(existing) != document_stack(incoming):
        if newer_incoming:
            return "replaced", incoming, (f"another software stack and newer: kept the incoming run "
                                          f"({_stack_text(incoming)}, {incoming['provenance']['date']}) over the "
                                          f"cached one ({_stack_text(existing)}, {existing['provenance']['date']})")
        return "kept-existing", None, (f"another software stack but not newer: kept the cached run "
                                       f"({_stack_text(existing)}, {existing['provenance']['date']}) over the "
                                       f"incoming one ({_stack_text(incoming)}, {incoming['provenance']['date']})")
    if newer_incoming:
        merged = merge_documents(existing, incoming)
        return "merged", validate(merged), (
            f"same stack; the incoming run ({incoming['provenance']['date']}) is newer: "
            "its cells replace the cached ones; cached cells it did not re-measure are kept")
    merged = merge_documents(incoming, existing)
    if merged == existing:
        return "kept-existing", None, (f"same stack; the cached run ({existing['provenance']['date']}) is not older "
                                       "and already holds every cell of the incoming one")
    return "merged", validate(merged), (f"same stack; the cached run ({existing['provenance']['date']}) is not older: "
                                        "its cells win, the incoming run adds the cells it lacks")


def merge(dirs: Iterable[str | Path], cache_dir: str | Path) -> list[MergeAction]:
    """Validate every result file under ``dirs`` and place it in ``cache_dir``; say what was done.

    Files are taken in the order of ``dirs`` and, within one, by path, so a run is reproducible.
    A rejected file is reported and skipped; it never stops the others.
    """
    cache = Cache(cache_dir)
    actions: list[MergeAction] = []
    for source in incoming_files([Path(d) for d in dirs]):
        try:
            incoming = read_document(source)
        except CacheError as exc:
            actions.append(MergeAction(source, None, "rejected", exc.problem))
            continue
        with cache.locked(incoming["question_hash"], incoming["device"]["name"]) as target:
            existing: dict[str, Any] | None = None
            corrupt = ""
            if target.exists():
                try:
                    existing = read_document(target)
                except CacheError as exc:
                    corrupt = exc.problem
            if existing is None:
                write_atomic(target, dumps(incoming))
                reason = (f"replaced an unusable cached file ({corrupt})" if corrupt
                          else f"new result for {incoming['device']['name']}")
                actions.append(MergeAction(source, target, "replaced" if corrupt else "added", reason))
                continue
            action, document, reason = decide(existing, incoming)
            if document is not None:
                write_atomic(target, dumps(document))
            actions.append(MergeAction(source, target, action, reason))
    return actions
