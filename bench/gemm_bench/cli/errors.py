"""The command line's errors and output: what ``gemm-bench`` prints, and the exit status it returns.

Every line ``gemm-bench`` prints goes through :func:`echo`, which escapes terminal controls
(:func:`gemm_bench.results.untrusted_text.terminal`): result files, configs and error messages
carry strings from other machines, and none of them may drive the reader's terminal.

In a module of their own so that every command module (:mod:`gemm_bench.cli.commands`,
:mod:`gemm_bench.cli.fleet`, :mod:`gemm_bench.cli.refresh`) raises the one class that
:func:`gemm_bench.cli.commands.main` catches, whichever module was imported first.
"""

from __future__ import annotations

import sys
from typing import IO

from gemm_bench.results.untrusted_text import field, terminal


class UsageError(Exception):
    """Bad input: printed as one line, exit status 2. The message starts with the flag or file."""


class MissingSoftwareError(Exception):
    """Software the command needs is missing or unusable: printed as one line, exit status 3."""


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
    from gemm_bench.report.report import wrap_line

    lines = terminal(str(text)).split("\n")
    echo("\n".join(part for line in lines for part in wrap_line(line, hanging)), file=file)
