"""The command line's errors and output: what ``gemm-bench`` prints, and the exit status it returns.

Every line ``gemm-bench`` prints goes through :func:`echo`, which escapes terminal controls
(:func:`gemm_bench.results.untrusted_text.terminal`): result files, configs and error messages
carry strings from other machines, and none of them may drive the reader's terminal.

In a module of their own so that every command module (:mod:`gemm_bench.cli.commands`,
:mod:`gemm_bench.cli.fleet`, :mod:`gemm_bench.cli.refresh`) raises the one class that
:func:`gemm_bench.cli.commands.main` catches, whichever module was imported first.
"""

from __future__ import annotations

import difflib
import os
import sys
from collections.abc import Iterable
from pathlib import Path
from typing import IO

from gemm_bench.report.report import TEXT_WIDTH, wrap_line
from gemm_bench.results.untrusted_text import field, terminal

#: The columns a wrapped error's lines after the first are indented by: they read as one error
#: (a script keeps the first line, which names the command and what is at fault), never as several.
ERROR_INDENT = 4


class UsageError(Exception):
    """Bad input: printed as one error (:func:`error_text`), exit status 2. The message starts with the flag or file."""


class MissingSoftwareError(Exception):
    """Software the command needs is missing or unusable: printed as one error, exit status 3."""


def one_line(text: str) -> str:
    """Escape anything that is not printable (newlines, separators, terminal controls) so a message
    stays one line: :func:`gemm_bench.results.untrusted_text.field`, the rule for result strings."""
    return field(text)


def echo(text: object = "", *, file: IO[str] | None = None, end: str = "\n") -> None:
    """Print ``text`` with every control character but the newline escaped: the CLI's one printer."""
    print(terminal(str(text)), file=file if file is not None else sys.stdout, end=end)


def echo_wrapped(text: object = "", *, hanging: int | None = None, file: IO[str] | None = None) -> None:
    """:func:`echo`, each line wrapped to the report's 100 columns
    (:func:`gemm_bench.report.report.wrap_line`; escaped first, so an escape cannot widen a line)."""
    lines = terminal(str(text)).split("\n")
    echo("\n".join(part for line in lines for part in wrap_line(line, hanging)), file=file)


#: Joins the words of one cell while a line is wrapped: textwrap breaks at ASCII whitespace only.
_NO_BREAK = "\u00a0"


def wrap_cells(head: str, cells: Iterable[str], *, hanging: int, separator: str = ", ") -> list[str]:
    """``head`` and ``cells`` (joined by ``separator``) wrapped at 100 columns with the ``hanging``
    indent, never inside a cell that fits a line (``presets`` split "1 x 4096 tokens" across two lines);
    a cell wider than a line breaks at its spaces as any text does."""
    room = TEXT_WIDTH - hanging
    joined = separator.join(c.replace(" ", _NO_BREAK) if len(c) <= room else c for c in cells)
    return [line.replace(_NO_BREAK, " ") for line in wrap_line(head + joined, hanging)]


def error_text(prog: str, message: str) -> str:
    """``gemm-bench shapes: error: ...`` as every error is printed: escaped to one logical line (a
    hostile value may hold newlines or terminal controls), then wrapped at the report's 100 columns
    with the lines after the first indented by :data:`ERROR_INDENT` (errors once ran to 214 columns)."""
    return "\n".join(wrap_line(f"{one_line(prog)}: error: {one_line(message)}", ERROR_INDENT))


def print_error(prog: str, message: str) -> None:
    """:func:`error_text` on stderr."""
    echo(error_text(prog, message), file=sys.stderr)


def closest(word: str, candidates: Iterable[str]) -> str | None:
    """The candidate nearest to ``word`` (a misspelt flag, option value or preset), or None when none
    is near enough to suggest: :func:`difflib.get_close_matches`, case-insensitively."""
    known = list(dict.fromkeys(candidates))
    by_lower = {c.lower(): c for c in known}
    found = difflib.get_close_matches(word.strip().lower(), list(by_lower), n=1)
    return by_lower[found[0]] if found else None


def did_you_mean(word: str, candidates: Iterable[str], *, quote: bool = True) -> str:
    """``" (did you mean 'llama3-8b'?)"`` for the closest candidate (:func:`closest`), else "": put
    right after the misspelt word; ``quote=False`` for a flag (``did you mean --model?``), typed as shown."""
    found = closest(word, candidates)
    if found is None:
        return ""
    return f" (did you mean {found!r}?)" if quote else f" (did you mean {found}?)"


def writable_destination(path: Path, flag: str, *, directory: bool, writable: bool = True) -> None:
    """Refuse, before anything runs, a destination nothing could be written to, naming the flag and
    the path at fault: a directory given for a file (``merge --summary /tmp`` named a temporary file
    inside it), a file given for a directory (``--cache-dir /dev/null``), a parent that is a file, or
    (``writable``) a folder this user cannot write. A missing path is fine where its parent can hold it
    (the writers create folders)."""
    if not directory and path.is_dir():
        raise UsageError(f"{flag}: {path} is a directory; give a file name")
    if directory and path.exists() and not path.is_dir():
        raise UsageError(f"{flag}: {path} is not a directory")
    existing = path if directory else path.parent
    while not existing.exists() and existing != existing.parent:
        existing = existing.parent
    if not existing.is_dir():
        raise UsageError(f"{flag}: {existing} is not a directory" + ("" if existing == path else f", so {path} "
                                                                     "cannot be written"))
    if writable and not os.access(existing, os.W_OK | os.X_OK):
        raise UsageError(f"{flag}: {existing} is not writable")
