"""Authoring reference generated from the code: options, roles and ``conf.py`` values.

``.. gemm-benchmark-options::``, ``.. gemm-benchmark-roles::`` and ``.. gemm-benchmark-config::``
render :data:`~.options.OPTIONS`, :data:`~.roles.ROLES` and :data:`~.config.CONFIG_VALUES` as
tables, so the documentation of the directive is the directive's own definition. Descriptions
use only ````literal```` markup, converted here, so the tables render the same from reST and MyST.
"""

from __future__ import annotations

import re

from docutils import nodes
from sphinx.util.docutils import SphinxDirective

from gemm_benchmark.config import CONFIG_VALUES
from gemm_benchmark.options import OPTIONS
from gemm_benchmark.roles import ROLES

_LITERAL = re.compile(r"``(.+?)``(?!`)")


def inline(text: str) -> list[nodes.Node]:
    """Text with ````literal```` spans as literal nodes."""
    out: list[nodes.Node] = []
    pos = 0
    for match in _LITERAL.finditer(text):
        if match.start() > pos:
            out.append(nodes.Text(text[pos:match.start()]))
        out.append(nodes.literal(match.group(1), match.group(1)))
        pos = match.end()
    if pos < len(text):
        out.append(nodes.Text(text[pos:]))
    return out


def reference_table(header: list[str], rows: list[list[str]], widths: list[int], classes: list[str]) -> nodes.table:
    table = nodes.table(classes=["gemm-reference", *classes])
    group = nodes.tgroup(cols=len(header))
    table += group
    for width in widths:
        group += nodes.colspec(colwidth=width)
    head, body = nodes.thead(), nodes.tbody()
    group += head
    group += body
    for container, cells in [(head, header)] + [(body, r) for r in rows]:
        row = nodes.row()
        for text in cells:
            entry = nodes.entry()
            para = nodes.paragraph()
            para.extend(inline(text))
            entry += para
            row += entry
        container += row
    return table


class GemmBenchmarkOptionsDirective(SphinxDirective):
    """The table of every ``gemm-benchmark`` option."""

    def run(self) -> list[nodes.Node]:
        rows = [[f"``:{o.name}:``", o.description, o.default, f"``{o.example}``" if o.example else "(flag)"]
                for o in OPTIONS.values()]
        return [reference_table(["Option", "Meaning", "Default", "Example"], rows, [18, 50, 14, 18],
                                ["gemm-options-reference"])]


class GemmBenchmarkRolesDirective(SphinxDirective):
    """The table of the value roles."""

    def run(self) -> list[nodes.Node]:
        rows = [[f"``:{r.name}:``", f"``{r.syntax}``", r.description, f"``:{r.name}:`{r.example}```"]
                for r in ROLES.values()]
        return [reference_table(["Role", "Argument", "Value", "Example"], rows, [14, 24, 40, 30],
                                ["gemm-roles-reference"])]


class GemmBenchmarkConfigDirective(SphinxDirective):
    """The table of ``conf.py`` values."""

    def run(self) -> list[nodes.Node]:
        rows = [[f"``{c.name}``", f"``{c.default!r}``", c.description] for c in CONFIG_VALUES]
        return [reference_table(["conf.py value", "Default", "Meaning"], rows, [28, 14, 58],
                                ["gemm-config-reference"])]
