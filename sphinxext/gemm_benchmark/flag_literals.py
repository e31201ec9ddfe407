"""Command-line flags in the extension's own text keep their two hyphens.

Why: the notes under the tables quote Megatron-LM's flags (``--overlap-grad-reduce``, ``--softmax-type``),
and Sphinx's smart quotes, on by default, print ``--`` as an en dash: a flag no launcher accepts, on every
site that uses the extension without turning smart dashes off (this site's own pages showed it until session
20). This transform runs before Sphinx's smart quotes (priority 750) and wraps each flag inside a block the
extension built (an element with a ``gemm-`` class) in a literal node, which smart quotes never touch; the
flag then also reads as code. The author's own prose is left as it is.
"""

from __future__ import annotations

import re
from typing import Any

from docutils import nodes
from sphinx.application import Sphinx
from sphinx.transforms import SphinxTransform

#: A long flag: two hyphens, then lower-case words joined by single hyphens (``--window-attn-skip-freq``).
FLAG = re.compile(r"(?<![\w-])--[a-z][a-z0-9]*(?:-[a-z0-9]+)*")


def _in_extension_block(node: nodes.Node) -> bool:
    parent = node.parent
    while parent is not None:
        classes: list[str] = parent.get("classes", []) if isinstance(parent, nodes.Element) else []
        if any(c.startswith("gemm-") for c in classes):
            return True
        parent = parent.parent
    return False


def split_literals(text: str, pattern: re.Pattern[str], group: int = 0) -> list[nodes.Node]:
    """``text`` as Text and literal nodes: each match of ``pattern`` a literal of its ``group`` (the one
    splitting of the extension: its flags here, ````code```` spans in cells and notes,
    :func:`~gemm_benchmark.render_table.inline_literals`); nothing for empty text."""
    out: list[nodes.Node] = []
    at = 0
    for match in pattern.finditer(text):
        if match.start() > at:
            out.append(nodes.Text(text[at:match.start()]))
        out.append(nodes.literal(match.group(group), match.group(group)))
        at = match.end()
    if at < len(text):
        out.append(nodes.Text(text[at:]))
    return out


class FlagLiterals(SphinxTransform):
    """Wrap the flags of the extension's blocks in literal nodes, before smart quotes (module docstring)."""

    default_priority = 700

    def apply(self, **kwargs: Any) -> None:
        for text in list(self.document.findall(nodes.Text)):
            parent = text.parent
            if (parent is None or isinstance(parent, (nodes.literal, nodes.FixedTextElement, nodes.Special))
                    or not FLAG.search(text.astext()) or not _in_extension_block(text)):
                continue
            parent.replace(text, split_literals(text.astext(), FLAG))  # holds a flag: never empty


def setup_flag_literals(app: Sphinx) -> None:
    app.add_transform(FlagLiterals)
