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

from gemm_bench.question.config import PRESET_DESCRIPTIONS, PRESET_SOURCES
from gemm_benchmark.config import CONFIG_VALUES
from gemm_benchmark.diagnostics import DESCRIPTIONS, WARNING_TYPE
from gemm_benchmark.options import OPTIONS
from gemm_benchmark.render_block import scrolling
from gemm_benchmark.render_table import Entry, build_table
from gemm_benchmark.roles import ROLES

#: A command-line flag outside literal markup: written as code, so ``--`` never becomes an en dash.
_FLAG = re.compile(r"(?<![`\w-])(--[a-z][a-z0-9-]*)")


def _flags_as_code(text: str) -> str:
    parts = re.split(r"(``.+?``)", text)
    return "".join(part if part.startswith("``") else _FLAG.sub(r"``\1``", part) for part in parts)


def reference_table(header: list[str], rows: list[list[str]], widths: list[int], classes: list[str]) -> nodes.table:
    """A reference table: the result tables' builder, with ````literal```` markup in every cell."""
    return build_table([[Entry(h, markup=True) for h in header]],
                       [[Entry(_flags_as_code(c), markup=True) for c in r] for r in rows],
                       widths, classes=["gemm-reference", *classes])


def _boxed(table: nodes.table) -> list[nodes.Node]:
    return [scrolling(table)]


class GemmBenchmarkOptionsDirective(SphinxDirective):
    """The table of every ``gemm-benchmark`` option."""

    def run(self) -> list[nodes.Node]:
        rows = [[f"``:{o.name}:``", o.description, o.default, f"``{o.example}``" if o.example else "(flag)"]
                for o in OPTIONS.values()]
        return _boxed(reference_table(["Option", "Meaning", "Default", "Example"], rows, [18, 50, 14, 18],
                                ["gemm-options-reference"]))


class GemmBenchmarkRolesDirective(SphinxDirective):
    """The table of the value roles."""

    def run(self) -> list[nodes.Node]:
        rows = [[f"``:{r.name}:``", f"``{r.syntax}``", r.description, f"``:{r.name}:`{r.example}```"]
                for r in ROLES.values()]
        return _boxed(reference_table(["Role", "Argument", "Value", "Example"], rows, [14, 24, 40, 30],
                                ["gemm-roles-reference"]))


class GemmBenchmarkConfigDirective(SphinxDirective):
    """The table of ``conf.py`` values."""

    def run(self) -> list[nodes.Node]:
        rows = [[f"``{c.name}``", f"``{c.default!r}``", c.description] for c in CONFIG_VALUES]
        return _boxed(reference_table(["conf.py value", "Default", "Meaning"], rows, [28, 14, 58],
                                ["gemm-config-reference"]))


class GemmBenchmarkWarningsDirective(SphinxDirective):
    """The table of warning subtypes (``suppress_warnings`` names)."""

    def run(self) -> list[nodes.Node]:
        rows = [[f"``{WARNING_TYPE}.{s.value}``", text] for s, text in DESCRIPTIONS.items()]
        return _boxed(reference_table(["suppress_warnings name", "Meaning"], rows, [30, 70],
                                      ["gemm-warnings-reference"]))


class GemmBenchmarkPresetsDirective(SphinxDirective):
    """The table of model presets, each with the public configuration it was taken from."""

    def run(self) -> list[nodes.Node]:
        rows = [[f"``{name}``", text, PRESET_SOURCES.get(name, "")] for name, text in PRESET_DESCRIPTIONS.items()]
        table = reference_table(["Preset", "Model", "Source"], rows, [16, 54, 30], ["gemm-presets-reference"])
        for row in list(table.findall(nodes.row))[1:]:  # sources as links
            cell = row.children[2]
            para = cell.children[0]
            assert isinstance(para, nodes.Element)
            url = para.astext()
            if url.startswith("https://"):
                del para[:]
                para += nodes.reference(url, url.removeprefix("https://huggingface.co/"), refuri=url)
        return _boxed(table)
