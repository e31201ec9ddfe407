"""The result cache: one JSON file per question per device, written atomically.

File names are ``<question hash>--<device slug>.json``, so a directory listing says which
devices answered which question. Writers hold an exclusive ``fcntl`` lock on a sibling
``.lock`` file, write to a temporary file in the same directory, fsync it and ``os.replace`` it
over the target: a reader (or a build interrupted at any instant) sees the old valid file or the
new valid file, never a half-written one. Readers validate every file; one that fails is
reported with its path and ignored as a whole.
"""

from __future__ import annotations

import contextlib
import dataclasses
import datetime as dt
import fcntl
import json
import os
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from gemm_bench.results import METHOD_VERSION, ResultError, device_slug, merge_documents, validate


class CacheError(Exception):
    """A cache file that cannot be used; the message starts with its path."""

    def __init__(self, path: Path, problem: str) -> None:
        self.path = path
        self.problem = problem
        super().__init__(f"{path}: {problem}")


def file_name(question_hash: str, device_name: str) -> str:
    return f"{question_hash}--{device_slug(device_name)}.json"


def read_document(path: Path) -> dict[str, Any]:
    """Load and validate one result file, or raise :class:`CacheError` saying why not."""
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise CacheError(path, f"cannot be read ({exc.strerror or exc})") from None
    except UnicodeDecodeError:
        raise CacheError(path, "is not UTF-8 text") from None
    try:
        doc = json.loads(text)
    except json.JSONDecodeError as exc:
        raise CacheError(path, f"is not valid JSON (line {exc.lineno} column {exc.colno}: {exc.msg})") from None
    try:
        validate(doc)
    except ResultError as exc:
        raise CacheError(path, f"does not match the result schema: {exc}") from None
    expected = file_name(doc["question_hash"], doc["device"]["name"])
    if path.name != expected:
        raise CacheError(path, f"holds question {doc['question_hash']} on {doc['device']['name']}, "
                         f"which belongs in {expected}")
    return doc


def write_atomic(path: Path, text: str) -> None:
    """Replace ``path`` with ``text`` so that no reader ever sees a partial file."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        os.fchmod(fd, 0o666 & ~_umask())  # mkstemp makes 0600; a cache file is an ordinary file
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(text)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    with contextlib.suppress(OSError):
        dir_fd = os.open(path.parent, os.O_RDONLY)
        try:
            os.fsync(dir_fd)
        finally:
            os.close(dir_fd)


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def dumps(doc: dict[str, Any]) -> str:
    return json.dumps(doc, indent=1, sort_keys=False) + "\n"


@dataclasses.dataclass
class Lookup:
    """What the cache knows about one question: a valid document per device, and the problems."""

    documents: list[dict[str, Any]]
    errors: list[CacheError]


class Cache:
    """A directory of result documents."""

    def __init__(self, directory: str | Path) -> None:
        self.directory = Path(directory)

    def path_for(self, question_hash: str, device_name: str) -> Path:
        return self.directory / file_name(question_hash, device_name)

    def files(self, question_hash: str | None = None) -> list[Path]:
        if not self.directory.is_dir():
            return []
        pattern = f"{question_hash}--*.json" if question_hash else "*--*.json"
        return sorted(self.directory.glob(pattern))

    def lookup(self, question_hash: str) -> Lookup:
        documents, errors = [], []
        for path in self.files(question_hash):
            try:
                documents.append(read_document(path))
            except CacheError as exc:
                errors.append(exc)
        return Lookup(documents, errors)

    @contextlib.contextmanager
    def locked(self, question_hash: str, device_name: str) -> Iterator[Path]:
        """Hold the writer's lock of one cache file (blocks while another process holds it)."""
        path = self.path_for(question_hash, device_name)
        path.parent.mkdir(parents=True, exist_ok=True)
        lock_path = path.with_name(path.name + ".lock")
        with open(lock_path, "a+") as lock:
            fcntl.flock(lock.fileno(), fcntl.LOCK_EX)
            try:
                yield path
            finally:
                fcntl.flock(lock.fileno(), fcntl.LOCK_UN)

    def store(self, doc: dict[str, Any]) -> Path:
        """Validate ``doc``, merge it with a valid older file of the same question, write it."""
        validate(doc)
        with self.locked(doc["question_hash"], doc["device"]["name"]) as path:
            if path.exists():
                try:
                    doc = merge_documents(read_document(path), doc)
                except CacheError:
                    pass  # a corrupt old file is replaced by the new valid one, never merged
            validate(doc)
            write_atomic(path, dumps(doc))
        return path


def is_stale(doc: dict[str, Any], *, max_age_days: float | None = None, now: dt.datetime | None = None) -> str | None:
    """Why a valid document should be re-measured, or None when it is fresh."""
    if doc.get("method_version") != METHOD_VERSION:
        return f"measured with method version {doc.get('method_version')}, current is {METHOD_VERSION}"
    if max_age_days is not None:
        try:
            when = dt.datetime.fromisoformat(doc["provenance"]["date"])
        except ValueError:
            return f"unreadable date {doc['provenance']['date']!r}"
        if when.tzinfo is None:
            when = when.replace(tzinfo=dt.timezone.utc)
        now = now or dt.datetime.now(dt.timezone.utc)
        age = (now - when).total_seconds() / 86400
        if age > max_age_days:
            return f"{age:.0f} days old, older than the configured {max_age_days:g}"
    return None
