"""The result cache: one JSON file per question per device, written atomically.

File names are ``<question hash>--<device slug>.json``, so a directory listing says which
devices answered which question. Writers hold an exclusive lock on a sibling ``.lock`` file
(``filelock``, so the package imports and works on Windows too), write to a temporary file in the
same directory, fsync it and ``os.replace`` it over the target: a reader (or a build interrupted
at any instant) sees the old valid file or the new valid file, never a half-written one.

Readers validate every file; one that fails, for any reason at all (unreadable, not UTF-8, not
JSON, NaN, nested too deep, numbers out of range, a symlink, not a regular file), is a
:class:`CacheError` naming its path and is ignored as a whole. Nothing else escapes
:func:`read_document`: a cache file is input, and input never crashes a build.
"""

from __future__ import annotations

import contextlib
import dataclasses
import datetime as dt
import functools
import glob
import hashlib
import json
import os
import stat
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from filelock import FileLock

from gemm_bench.results.invariants import check
from gemm_bench.results.schema import (
    METHOD_VERSION,
    STILL_VALID_METHODS,
    ResultError,
    device_slug,
    merge_documents,
    validate,
)

#: Larger than any real result (the committed ones are ~100 kB) by far; a bigger file is refused
#: before it is read, so a stray multi-gigabyte file cannot exhaust the build's memory.
MAX_FILE_BYTES = 64 * 1024 * 1024


class CacheError(Exception):
    """A cache file that cannot be used; the message starts with its path."""

    def __init__(self, path: Path, problem: str) -> None:
        self.path = path
        self.problem = problem
        super().__init__(f"{path}: {problem}")


def file_name(question_hash: str, device_name: str) -> str:
    return f"{question_hash}--{device_slug(device_name)}.json"


class _NonFiniteNumber(ValueError):
    pass


def _refuse_constant(name: str) -> Any:
    """``json.loads`` accepts NaN and Infinity, which are not JSON and not measurements."""
    raise _NonFiniteNumber(f"holds {name}, which is not a JSON number")


def _read_bytes(path: Path) -> bytes:
    """The bytes of a regular file, never following a symlink; every failure a CacheError."""
    try:
        info = os.lstat(path)
    except OSError as exc:
        raise CacheError(path, f"cannot be read ({exc.strerror or exc})") from None
    if stat.S_ISLNK(info.st_mode):
        raise CacheError(path, "is a symbolic link; only regular files in the cache directory are read")
    if not stat.S_ISREG(info.st_mode):
        raise CacheError(path, "is not a regular file")
    flags = os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_BINARY", 0)
    try:
        fd = os.open(path, flags)
    except OSError as exc:
        raise CacheError(path, f"cannot be read ({exc.strerror or exc})") from None
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):  # swapped for something else after the lstat
            raise CacheError(path, "is not a regular file")
        if info.st_size > MAX_FILE_BYTES:
            raise CacheError(path, f"is {info.st_size} bytes, more than the {MAX_FILE_BYTES} a result may have")
        chunks, size = [], 0
        while chunk := os.read(fd, 1 << 20):
            size += len(chunk)
            if size > MAX_FILE_BYTES:
                raise CacheError(path, f"is more than the {MAX_FILE_BYTES} bytes a result may have")
            chunks.append(chunk)
        return b"".join(chunks)
    except OSError as exc:
        raise CacheError(path, f"cannot be read ({exc.strerror or exc})") from None
    finally:
        os.close(fd)


@functools.cache
def validator_fingerprint() -> str:
    """A hash of this package's source: what :func:`~gemm_bench.results.schema.validate` decides
    depends on it (the schema, the bounds, the devices' peaks), so a content found valid by one
    version of the code is trusted again only by the same version."""
    digest = hashlib.sha256()
    package = Path(__file__).resolve().parents[1]  # gemm_bench: the schema's bounds live in question/ too
    for source in sorted(package.rglob("*.py")):
        digest.update(source.relative_to(package).as_posix().encode())
        digest.update(source.read_bytes())
    return digest.hexdigest()


def content_key(data: bytes) -> str:
    """The key under which a file's validation is remembered: its bytes and the validator's code."""
    return hashlib.sha256(validator_fingerprint().encode() + b"\0" + data).hexdigest()


def parse_json(path: Path, data: bytes) -> Any:
    """The JSON value of a cache file's bytes, or :class:`CacheError` (its path first) saying why not:
    not UTF-8, not JSON, NaN or Infinity (which are not JSON numbers), too deep or too large."""
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise CacheError(path, f"is not UTF-8 text (byte {exc.start})") from None
    try:
        doc = json.loads(text, parse_constant=_refuse_constant)
    except json.JSONDecodeError as exc:
        raise CacheError(path, f"is not valid JSON (line {exc.lineno} column {exc.colno}: {exc.msg})") from None
    except _NonFiniteNumber as exc:
        raise CacheError(path, f"is not valid JSON: {exc}") from None
    except ValueError as exc:  # e.g. an integer with more digits than Python converts
        raise CacheError(path, f"is not usable JSON ({exc})") from None
    except RecursionError:
        raise CacheError(path, "is nested too deeply to be a result") from None
    except MemoryError:
        raise CacheError(path, "is too large to parse") from None
    return doc


def read_document(path: Path, *, trusted: set[str] | None = None, raw: bool = False) -> dict[str, Any]:
    """Load and validate one result file, or raise :class:`CacheError` saying why not.

    The door every reader goes through: the document returned is *checked*
    (:func:`gemm_bench.results.invariants.check`): a number that breaks an invariant the schema
    cannot see is demoted to a failed entry whose reason says why, and the violations are its
    :attr:`~gemm_bench.results.schema.CheckedDocument.violations` (JSON path, block, recipe,
    problem), for the report and the pages to say. ``raw=True`` returns the file as stored, for the
    writers that merge it and write it back (a checked document is never stored:
    :func:`gemm_bench.results.schema.validate` refuses it).

    :class:`CacheError` is the only exception this raises for any file content. ``trusted``:
    keys (:func:`content_key`) of contents that passed validation before, with this code; such a
    file is parsed but not validated again, and a file that passes is added. Anything else about
    the file (its name, its JSON) is checked every time.
    """
    path = Path(path)
    data = _read_bytes(path)
    key = content_key(data) if trusted is not None else ""
    doc = parse_json(path, data)
    if trusted is None or key not in trusted:
        try:
            validate(doc)
        except ResultError as exc:
            raise CacheError(path, f"does not match the result schema: {exc}") from None
        if trusted is not None:
            trusted.add(key)
    expected = file_name(doc["question_hash"], doc["device"]["name"])
    if path.name != expected:
        raise CacheError(path, f"holds question {doc['question_hash']} on {doc['device']['name']!r}, "
                         f"which belongs in {expected}")
    if raw:
        return doc
    return check(doc)


def write_atomic(path: Path, data: str | bytes, *, mode: int | None = None, durable: bool = True) -> None:
    """Replace ``path`` with ``data`` so that no reader ever sees a partial file.

    ``mode`` defaults to an ordinary file's (0666 less the umask; mkstemp would make 0600).
    ``durable`` fsyncs the file and its directory, so a result survives a crash right after the
    store; a build artefact that can be drawn again (a figure) skips that cost.
    """
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        os.fchmod(fd, 0o666 & ~_umask() if mode is None else mode)
        with os.fdopen(fd, "wb") as handle:
            handle.write(data.encode("utf-8") if isinstance(data, str) else data)
            if durable:
                handle.flush()
                os.fsync(handle.fileno())
        os.replace(tmp, path)
    except BaseException:  # cleanup only, then re-raised: Ctrl-C included, the temp file goes
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    if not durable:
        return
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
    #: The file each of ``documents`` was read from (same order).
    paths: list[Path] = dataclasses.field(default_factory=list)


class Cache:
    """A directory of result documents."""

    def __init__(self, directory: str | Path) -> None:
        self.directory = Path(directory)

    def path_for(self, question_hash: str, device_name: str) -> Path:
        return self.directory / file_name(question_hash, device_name)

    def files(self, question_hash: str | None = None) -> list[Path]:
        """Result files directly in the directory (symlinks included, so that they are reported).

        A directory that does not exist holds no result; one that cannot be listed is a
        :class:`CacheError` naming it (never an empty cache by mistake).
        """
        try:
            if not self.directory.is_dir():
                return []
            pattern = f"{glob.escape(question_hash)}--*.json" if question_hash else "*--*.json"
            return sorted(self.directory.glob(pattern))
        except OSError as exc:
            raise CacheError(self.directory, f"cannot be listed ({exc.strerror or exc})") from None

    def lookup(self, question_hash: str) -> Lookup:
        """Every file of one question, listed once and each read once."""
        return _read_files(self.files(question_hash))

    def read_all(self) -> dict[str, Lookup]:
        """Every result file, keyed by the question hash its name starts with.

        One listing and one parse per file, for a build that wants the whole cache up front.
        """
        by_hash: dict[str, list[Path]] = {}
        for path in self.files():
            by_hash.setdefault(path.name.split("--", 1)[0], []).append(path)
        return {question: _read_files(paths) for question, paths in by_hash.items()}

    @contextlib.contextmanager
    def locked(self, question_hash: str, device_name: str) -> Iterator[Path]:
        """Hold the writer's lock of one cache file (blocks while another process holds it)."""
        path = self.path_for(question_hash, device_name)
        path.parent.mkdir(parents=True, exist_ok=True)
        with FileLock(str(path.with_name(path.name + ".lock"))):
            yield path

    def store(self, doc: dict[str, Any]) -> Path:
        """Validate ``doc``, merge it with a valid older file of the same question, write it.

        An old file that is invalid (or a symlink) is replaced, never merged or followed
        (``os.replace`` renames over a link; it does not write through it).
        """
        validate(doc)
        with self.locked(doc["question_hash"], doc["device"]["name"]) as path:
            try:
                old: dict[str, Any] | None = read_document(path, raw=True)
            except CacheError:
                old = None  # absent, or corrupt: the new valid document replaces it
            if old is not None:
                doc = merge_documents(old, doc)
            validate(doc)
            write_atomic(path, dumps(doc))
        return path


def _read_files(paths: list[Path]) -> Lookup:
    found = Lookup([], [], [])
    for path in paths:
        try:
            found.documents.append(read_document(path))
            found.paths.append(path)
        except CacheError as exc:
            found.errors.append(exc)
    return found


def is_stale(doc: dict[str, Any], *, max_age_days: float | None = None, now: dt.datetime | None = None) -> str | None:
    """Why a valid document should be re-measured, or None when it is fresh.

    The date is text from a file: one that cannot be read or placed in time is a reason to
    re-measure, never an exception. A result of an earlier method whose numbers the current one
    keeps (:data:`~gemm_bench.results.schema.STILL_VALID_METHODS`) is not stale here; a GPU box
    re-measures it through the ``method`` field of the stack rule (:mod:`gemm_bench.results.stack`).
    """
    version = doc.get("method_version")
    if version != METHOD_VERSION and version not in STILL_VALID_METHODS:
        return f"measured with method version {version!r}, current is {METHOD_VERSION}"
    return age_staleness(doc.get("provenance", {}).get("date"), max_age_days, now)


def age_staleness(date: Any, max_age_days: float | None, now: dt.datetime | None = None) -> str | None:
    """Why a result (or a study) dated ``date`` is too old under ``max_age_days``, or None.

    The one age rule of question results and studies. The date is text from a file: one that
    cannot be read or placed in time is a reason to re-measure, never an exception.
    """
    if max_age_days is None:
        return None
    try:
        when = dt.datetime.fromisoformat(date)  # a non-string raises TypeError: caught below
        if when.tzinfo is None:
            when = when.replace(tzinfo=dt.timezone.utc)
        age = ((now or dt.datetime.now(dt.timezone.utc)) - when).total_seconds() / 86400
    except (TypeError, ValueError, OverflowError):
        return f"unreadable date {date!r}"
    if age > max_age_days:
        return f"{age:.0f} days old, older than the configured {max_age_days:g}"
    return None
