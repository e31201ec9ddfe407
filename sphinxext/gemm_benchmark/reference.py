"""Authoring reference generated from the code: directives, options, roles and ``conf.py`` values.

``.. gemm-benchmark-directives::`` renders every directive the extension's ``setup`` registered
(recorded by :func:`recording_registrations` as ``app.add_directive`` is called, wherever in the
extension the call is), with its purpose (the class docstring's first paragraph), its options and
its ``reference_example``: a directive without a docstring or an example is a located warning, so
``-W`` fails until it is documented. ``.. gemm-benchmark-options::``, ``.. gemm-benchmark-roles::``
and ``.. gemm-benchmark-config::`` render :data:`~.options.OPTIONS`, :data:`~.roles.ROLES` and
:data:`~.config.CONFIG_VALUES` as tables, and warn about a registered role or ``conf.py`` value
missing from those lists; so the documentation of the extension is its own definition. Descriptions
use only ````literal```` markup, converted here, so the tables render the same from reST and MyST.
A page with a table depends on the source files it documents: editing them re-reads the page.

Convention for a new directive class: a docstring whose first paragraph says what it is for, and a
``reference_example: str`` class attribute holding a short reStructuredText example of its use.
"""

from __future__ import annotations

import contextlib
import dataclasses
import inspect
import re
import sys
import textwrap
import weakref
from collections.abc import Iterator
from typing import Any

from docutils import nodes
from docutils.parsers.rst import Directive
from sphinx import addnodes
from sphinx.application import Sphinx
from sphinx.util.docutils import SphinxDirective

import gemm_benchmark
from gemm_bench.question import config as presets_module
from gemm_bench.question import layout as layout_module
from gemm_bench.question.config import PRESET_DESCRIPTIONS, PRESET_SOURCES
from gemm_benchmark import config as config_module
from gemm_benchmark import diagnostics, model_step_values, options, roles
from gemm_benchmark.config import CONFIG_VALUES
from gemm_benchmark.diagnostics import DESCRIPTIONS, WARNING_TYPE, Subtype, warn
from gemm_benchmark.nodes import app_of
from gemm_benchmark.options import OPTIONS, PermissiveOptionSpec
from gemm_benchmark.render_block import scrolling
from gemm_benchmark.render_table import Entry, build_table
from gemm_benchmark.roles import ROLES

#: The std-domain label of the options table (the directives table links to it).
OPTIONS_LABEL = "gemm-benchmark-options-table"


# ------------------------------------------------------------------------- what setup registered
@dataclasses.dataclass
class Registrations:
    """What the extension's ``setup`` registered in one application, in the order it did."""

    directives: list[tuple[str, type[Directive]]] = dataclasses.field(default_factory=list)
    roles: list[str] = dataclasses.field(default_factory=list)
    config_values: list[str] = dataclasses.field(default_factory=list)


_REGISTERED: weakref.WeakKeyDictionary[Sphinx, Registrations] = weakref.WeakKeyDictionary()


@contextlib.contextmanager
def recording_registrations(app: Sphinx) -> Iterator[Registrations]:
    """Record every ``app.add_directive``, ``add_role`` and ``add_config_value`` call made inside the
    ``with`` block (the extension's ``setup``), except those of extensions it sets up in turn
    (``app.setup_extension("sphinx_tabs.tabs")``: their directives are not this extension's)."""
    found = Registrations()
    _REGISTERED[app] = found
    nested = 0
    add_directive, add_role, add_config_value = app.add_directive, app.add_role, app.add_config_value
    setup_extension = app.setup_extension

    def directive(name: str, cls: type[Directive], *args: Any, **kwargs: Any) -> None:
        if not nested:
            found.directives.append((name, cls))
        add_directive(name, cls, *args, **kwargs)

    def role(name: str, *args: Any, **kwargs: Any) -> None:
        if not nested:
            found.roles.append(name)
        add_role(name, *args, **kwargs)

    def config_value(name: str, *args: Any, **kwargs: Any) -> None:
        if not nested:
            found.config_values.append(name)
        add_config_value(name, *args, **kwargs)

    def extension(extname: str) -> None:
        nonlocal nested
        nested += 1
        try:
            setup_extension(extname)
        finally:
            nested -= 1

    patches = {"add_directive": directive, "add_role": role, "add_config_value": config_value,
               "setup_extension": extension}
    for attr, function in patches.items():  # instance attributes shadow the methods while recording
        setattr(app, attr, function)
    try:
        yield found
    finally:
        for attr in patches:
            delattr(app, attr)


def registrations(app: Sphinx) -> Registrations:
    """What the extension registered in ``app`` (nothing when it was not set up by :func:`setup`)."""
    return _REGISTERED.get(app) or Registrations()


def purpose(cls: type) -> str:
    """The first paragraph of a class's own docstring, on one line ("" without one)."""
    doc = cls.__dict__.get("__doc__")
    if not isinstance(doc, str) or not doc.strip():
        return ""
    return " ".join(inspect.cleandoc(doc).split("\n\n")[0].split())


def example_of(cls: type) -> str:
    """A directive class's own ``reference_example``, dedented ("" without one)."""
    example = cls.__dict__.get("reference_example")
    if not isinstance(example, str):
        return ""
    return textwrap.dedent(example).strip("\n")


def source_of(cls: type) -> str:
    """``path:line`` of a class's definition ("" where it has none, as in a ``conf.py``)."""
    try:
        path = inspect.getsourcefile(cls)
        line = inspect.getsourcelines(cls)[1]
    except (OSError, TypeError):  # built in, or defined where no source file is
        return ""
    return f"{path}:{line}" if path else ""


class ReferenceDirective(SphinxDirective):
    """A generated table: its page is read again when a source file it documents changes."""

    #: The objects whose source files the table is generated from.
    documents: tuple[Any, ...] = ()

    def depend_on_sources(self, *objects: Any) -> None:
        for obj in (*self.documents, *objects):
            module = obj if inspect.ismodule(obj) else sys.modules.get(getattr(obj, "__module__", ""))
            path = getattr(module, "__file__", None)
            if path:
                self.env.note_dependency(path)

    def reference_warning(self, message: str) -> None:
        warn(Subtype.REFERENCE, f"{self.name}: {message}", location=(self.env.docname, self.lineno))


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


class GemmBenchmarkDirectivesDirective(ReferenceDirective):
    """The table of every directive the extension registers: purpose, options and an example of each."""

    reference_example = ".. gemm-benchmark-directives::"

    def run(self) -> list[nodes.Node]:
        found = registrations(app_of(self.env)).directives
        self.depend_on_sources(gemm_benchmark, *(cls for _, cls in found))
        rows, examples, linked = [], [], []
        for name, cls in found:
            text, example = purpose(cls), example_of(cls)
            lacking = [what for what, have in (("docstring", text), ("reference_example", example)) if not have]
            if lacking:
                where = source_of(cls)
                self.reference_warning(
                    f"directive {name!r} ({cls.__module__}.{cls.__qualname__}{', ' + where if where else ''}) has no "
                    f"{' and no '.join(lacking)}: give its class a docstring whose first paragraph says what it "
                    "is for and a reference_example string holding a reStructuredText example of its use")
            rows.append([f"``{name}``", text or "(undocumented)", self._options(cls), ""])
            examples.append(example or f".. {name}::")
            linked.append(isinstance(cls.option_spec, PermissiveOptionSpec))
        table = reference_table(["Directive", "Purpose", "Options", "Example"], rows, [16, 30, 20, 34],
                                ["gemm-directives-reference"])
        for row, example, link in zip(list(table.findall(nodes.row))[1:], examples, linked, strict=True):
            example_cell = row.children[3]
            assert isinstance(example_cell, nodes.Element)
            del example_cell[:]
            example_cell += nodes.literal_block(example, example, language="rst")
            if link:
                options_cell = row.children[2]
                assert isinstance(options_cell, nodes.Element)
                del options_cell[:]
                options_cell += self._options_link()
        return _boxed(table)

    @staticmethod
    def _options(cls: type[Directive]) -> str:
        """The options (with their meanings where the class has a ``reference_options`` mapping),
        arguments and content a directive takes."""
        spec = cls.option_spec or {}
        meanings = getattr(cls, "reference_options", None) or {}
        parts = [("; " if meanings else ", ").join(
            f"``:{option}:``" + (f" {meanings[option]}" if option in meanings else "") for option in spec) or "none"]
        if cls.required_arguments or cls.optional_arguments:
            parts.append(f"{cls.required_arguments or cls.optional_arguments} argument(s)")
        if cls.has_content:
            parts.append("content")
        return "; ".join(parts)

    def _options_link(self) -> nodes.paragraph:
        """A pointer to the options table, a link where the site has one (and no warning where not)."""
        text = "every option in the table of directive options"
        ref = addnodes.pending_xref("", refdomain="std", reftype="ref", reftarget=OPTIONS_LABEL, refexplicit=True,
                                    refwarn=False, refdoc=self.env.docname)
        ref += nodes.inline(text, text)
        para = nodes.paragraph()
        para += ref
        return para


class GemmBenchmarkOptionsDirective(ReferenceDirective):
    """The table of every ``gemm-benchmark`` option."""

    reference_example = ".. gemm-benchmark-options::"
    documents = (options, layout_module)  # the layout options' table lives in the library's layout module

    def run(self) -> list[nodes.Node]:
        self.depend_on_sources()
        rows = [[f"``:{o.name}:``", o.description, o.default, f"``{o.example}``" if o.example else "(flag)"]
                for o in OPTIONS.values()]
        target = nodes.target("", "", ids=[OPTIONS_LABEL])
        std = self.env.get_domain("std")
        if OPTIONS_LABEL not in std.anonlabels:  # type: ignore[attr-defined]
            std.note_hyperlink_target(OPTIONS_LABEL, self.env.docname, OPTIONS_LABEL,  # type: ignore[attr-defined]
                                      "gemm-benchmark options")
        return [target, *_boxed(reference_table(["Option", "Meaning", "Default", "Example"], rows,
                                                [18, 50, 14, 18], ["gemm-options-reference"]))]


class GemmBenchmarkRolesDirective(ReferenceDirective):
    """The table of the value roles."""

    reference_example = ".. gemm-benchmark-roles::"
    documents = (roles, model_step_values)  # the model step's role specs live beside their values

    def run(self) -> list[nodes.Node]:
        self.depend_on_sources()
        rows = [[f"``:{r.name}:``", f"``{r.syntax}``", r.description, f"``:{r.name}:`{r.example}```"]
                for r in ROLES.values()]
        for name in registrations(app_of(self.env)).roles:
            if name not in ROLES:
                self.reference_warning(f"role {name!r} is registered but not described in gemm_benchmark.roles.ROLES")
                rows.append([f"``:{name}:``", "", "(undocumented)", ""])
        return _boxed(reference_table(["Role", "Argument", "Value", "Example"], rows, [14, 24, 40, 30],
                                ["gemm-roles-reference"]))


class GemmBenchmarkConfigDirective(ReferenceDirective):
    """The table of ``conf.py`` values."""

    reference_example = ".. gemm-benchmark-config::"
    documents = (config_module, gemm_benchmark)

    def run(self) -> list[nodes.Node]:
        self.depend_on_sources()
        rows = [[f"``{c.name}``", f"``{c.default!r}``", c.description] for c in CONFIG_VALUES]
        documented = {c.name for c in CONFIG_VALUES}
        for name in registrations(app_of(self.env)).config_values:
            if name not in documented:
                self.reference_warning(f"conf.py value {name!r} is registered but not described in "
                                       "gemm_benchmark.config.CONFIG_VALUES")
                rows.append([f"``{name}``", "", "(undocumented)"])
        return _boxed(reference_table(["conf.py value", "Default", "Meaning"], rows, [28, 14, 58],
                                ["gemm-config-reference"]))


class GemmBenchmarkWarningsDirective(ReferenceDirective):
    """The table of warning subtypes (``suppress_warnings`` names)."""

    reference_example = ".. gemm-benchmark-warnings::"

    documents = (diagnostics,)

    def run(self) -> list[nodes.Node]:
        self.depend_on_sources()
        rows = [[f"``{WARNING_TYPE}.{s.value}``", text] for s, text in DESCRIPTIONS.items()]
        return _boxed(reference_table(["suppress_warnings name", "Meaning"], rows, [30, 70],
                                      ["gemm-warnings-reference"]))


class GemmBenchmarkPresetsDirective(ReferenceDirective):
    """The table of model presets, each with the public configuration it was taken from."""

    reference_example = ".. gemm-benchmark-presets::"

    documents = (presets_module,)

    def run(self) -> list[nodes.Node]:
        self.depend_on_sources()
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
