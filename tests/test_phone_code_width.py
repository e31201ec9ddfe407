"""Every code block of the site's pages is written for a phone: at most 44 characters a line.

A phone's column (390 px screen) holds 46 characters of the site's 12 px code (gemm_benchmark.css),
45 inside a summary's tab panels. Chromium checks the built pages (test_ext_browser_reader.py), but
it cannot see a shell command that the page wraps instead of scrolling, and it is skipped where
Chromium is absent; this reads the sources.
"""

from __future__ import annotations

import re
import textwrap
from pathlib import Path

import pytest

DOCS = Path(__file__).resolve().parent.parent / "docs"
PAGES = ["index.rst", "models.rst", "authoring.rst", "maintainers.rst", "tutorial.md", "freshness.rst",
         "loss-parity.rst", "methodology.rst"]
WIDTH = 44

#: A code-block directive, or a paragraph ending in ``::`` (a literal block); not another directive.
_RST_BLOCK = re.compile(r"^(?P<indent>[ \t]*)(?:\.\. (?:code-block|code|sourcecode)::.*|(?!\.\. ).*\S::)$")
_FENCE = re.compile(r"^(?P<fence>```+|~~~+)(?P<info>[^`]*)$")


def code_blocks(path: Path) -> list[tuple[int, str]]:
    """(first line, dedented text) of each code block: rST code-blocks and ``::`` blocks, MyST fences
    that are not directives."""
    lines = path.read_text(encoding="utf-8").splitlines()
    out = []
    index = 0
    while index < len(lines):
        line = lines[index]
        index += 1
        fence = _FENCE.match(line.strip()) if path.suffix == ".md" else None
        if fence:
            start, body = index, []
            while index < len(lines) and lines[index].strip() != fence["fence"]:
                body.append(lines[index])
                index += 1
            index += 1
            if not fence["info"].strip().startswith("{"):  # a directive's fence holds options, not code
                out.append((start + 1, "\n".join(body)))
            continue
        match = _RST_BLOCK.match(line) if path.suffix == ".rst" else None
        if not match:
            continue
        indent = len(match["indent"].expandtabs())
        while index < len(lines) and lines[index].lstrip().startswith(":") and lines[index].strip():
            index += 1  # the code block's own options
        start, body = index, []
        while index < len(lines) and (not lines[index].strip()
                                      or len(lines[index]) - len(lines[index].lstrip()) > indent):
            body.append(lines[index])
            index += 1
        out.append((start + 1, textwrap.dedent("\n".join(body)).strip("\n")))
    return out


def test_code_blocks_are_found() -> None:
    """The reader finds what it checks (else the test below could not fail)."""
    assert len(code_blocks(DOCS / "authoring.rst")) >= 3
    assert len(code_blocks(DOCS / "tutorial.md")) == 2  # the GEMM diagram and the commands
    assert len(code_blocks(DOCS / "maintainers.rst")) >= 3


@pytest.mark.parametrize("page", PAGES)
def test_every_code_line_fits_a_phone(page: str) -> None:
    """Before (issue 35): the authoring examples had 98-character lines, the tutorial's commands
    up to 90 and its diagram 62, the maintainers' commands 92; on a phone they scrolled or wrapped
    mid-path, a comment landing at the next line's start."""
    long = [f"{page}:{start + offset}: {len(line)} characters: {line}"
            for start, text in code_blocks(DOCS / page)
            for offset, line in enumerate(text.splitlines()) if len(line) > WIDTH]
    assert not long, "\n".join(long)
