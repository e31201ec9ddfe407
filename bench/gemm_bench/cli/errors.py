"""The command line's errors: what ``gemm-bench`` prints as one line and the exit status it returns.

In a module of their own so that every command module (:mod:`gemm_bench.cli.commands`,
:mod:`gemm_bench.cli.fleet`, :mod:`gemm_bench.cli.refresh`) raises the one class that
:func:`gemm_bench.cli.commands.main` catches, whichever module was imported first.
"""

from __future__ import annotations


class UsageError(Exception):
    """Bad input: printed as one line, exit status 2. The message starts with the flag or file."""


class MissingSoftwareError(Exception):
    """Software the command needs is missing or unusable: printed as one line, exit status 3."""


def one_line(text: str) -> str:
    """Escape anything that is not printable (newlines, separators) so a message stays one line."""
    return "".join(ch if ch.isprintable() else repr(ch)[1:-1] for ch in text)
