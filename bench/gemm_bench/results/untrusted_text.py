"""Strings from result files are data from another machine: how to print them without obeying them.

A result file is written by whichever runner measured it (or by whoever edits a pull request),
and every string in it (device name, software versions, reasons, dates) passes schema
validation as long as it is a string. Printed raw, such a string can drive the reader's terminal
(ESC and OSC sequences set the title, write the clipboard, clear the screen; C1 codes do the same
in one byte) or, in a pull request body, make headings, @-mentions, links and HTML. So every
place that shows a result string goes through one of these functions:

* :func:`field`: one string inside a line of text; nothing in it can end the line or control the
  terminal (every non-printable character, newline included, is shown as its escape).
* :func:`terminal`: a whole text about to be printed, whose newlines are layout; every other
  control or non-printable character is escaped. The backstop of everything the CLI prints.
* :func:`markdown`: one string inside a Markdown line or table cell: one line, no markup, no
  HTML, no mention, no issue reference.

Pure and dependency-free, in :mod:`gemm_bench.results` so the results room (merge), reporting
(compare) and the command line share it.
"""

from __future__ import annotations

import re


def field(text: str) -> str:
    """``text`` as one line of printable characters: controls (newline too) shown as escapes."""
    return "".join(ch if ch.isprintable() else repr(ch)[1:-1] for ch in text)


def terminal(text: str) -> str:
    """``text`` for a terminal: newlines kept as layout, every other non-printable escaped.

    Covers C0 (ESC, BEL, CR, ...), DEL, C1 (CSI ``\\x9b``, OSC ``\\x9d``, ...), and the format and
    separator characters :meth:`str.isprintable` refuses (bidirectional overrides among them).
    """
    return "\n".join(field(line) for line in text.split("\n"))


#: Characters that start Markdown inline syntax anywhere in a line (code, emphasis, links and
#: images, table cells, strikethrough, headings, escapes): escaped with a backslash.
_MARKDOWN_SPECIAL = frozenset("\\`*_[]|~#")
_HTML = {"&": "&amp;", "<": "&lt;", ">": "&gt;"}
#: An @ or # followed by a name (a mention, a team, an issue) is broken by a zero-width space, as
#: Renovate does: GitHub neither links nor notifies, and the text reads the same.
_LINKING = re.compile(r"(@|\\#)(?=[\w-])")


def _markdown_char(ch: str) -> str:
    if ch in _HTML:
        return _HTML[ch]
    return "\\" + ch if ch in _MARKDOWN_SPECIAL else ch


def markdown(text: str) -> str:
    """``text`` safe inside a Markdown paragraph, list item or table cell, shown as written.

    One line (:func:`field`), HTML characters as entities, Markdown punctuation backslash-escaped
    (a ``|`` cannot end a table cell, a backtick cannot open code, a ``#`` cannot make a heading),
    and ``@name`` / ``#123`` made inert with a zero-width space (``&#8203;``): no one is mentioned,
    no issue is linked.
    """
    escaped = "".join(_markdown_char(ch) for ch in field(text))
    return _LINKING.sub(lambda m: m.group(1) + "&#8203;", escaped)
