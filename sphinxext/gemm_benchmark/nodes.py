"""The extension's own doctree nodes; builder-neutral, so one doctree serves every builder.

Everything a reader sees is built from standard docutils nodes (tables, images, paragraphs), so
every builder renders it. Our nodes:

* :class:`gemm_benchmark_block` wraps one directive's output. It is registered as an *enumerable*
  node so that ``:name:`` becomes a label ``:ref:`` can link to, titled by the caption.
* :class:`gemm_tab_set` / :class:`gemm_tab`: a set of titled panels (modes, devices). Reading
  builds these neutral nodes; a post-transform turns them into sphinx-tabs group tabs for HTML
  and into rubrics elsewhere (:mod:`.tabs`), as sphinx-design's tab-set transform does.
* :class:`gemm_value` is a role's value waiting for all pages to be read (:mod:`.roles`).
* :class:`gemm_freshness` is the freshness table's placeholder, filled the same way.
* :class:`gemm_data_table` is a result table kept as data (:class:`.render_table.TableData`) until
  a late post-transform turns it into a docutils table (:mod:`.render_table`). A page's tables
  are most of its nodes, and every read-phase transform, pickle and early post-transform of a
  build walks them all (issue 14).
"""

from __future__ import annotations

from typing import Any

from docutils import nodes
from sphinx.application import Sphinx
from sphinx.environment import BuildEnvironment
from sphinx.transforms.post_transforms import SphinxPostTransform


class gemm_benchmark_block(nodes.General, nodes.Element):
    """One ``gemm-benchmark`` directive's rendered output."""


class gemm_tab_set(nodes.General, nodes.Element):
    """Titled panels (attribute ``classes``); children are :class:`gemm_tab`."""


class gemm_tab(nodes.General, nodes.Element):
    """One panel; attribute ``title``."""


class gemm_value(nodes.Inline, nodes.TextElement):
    """A role's reference to a measured value, resolved after reading (attributes: see roles)."""


class gemm_freshness(nodes.General, nodes.Element):
    """Placeholder for the site-wide freshness table."""


class gemm_data_table(nodes.General, nodes.Element):
    """A result table as data (attribute ``table``: a :class:`.render_table.TableData`)."""


def app_of(env: BuildEnvironment) -> Sphinx:
    """The application (``env.app`` is deprecated since Sphinx 9; ``_app`` is what it returns)."""
    return getattr(env, "_app", None) or env.app


def builder_format(env: BuildEnvironment) -> str:
    """The current builder's format (``html``, ``latex``, ``text`` ...)."""
    cls = getattr(env, "_builder_cls", None)
    if cls is not None:
        return str(cls.format)
    return str(app_of(env).builder.format)


def _visit_block_html(self: Any, node: gemm_benchmark_block) -> None:
    self.body.append(self.starttag(node, "div", CLASS="gemm-benchmark"))


def _depart_block_html(self: Any, node: gemm_benchmark_block) -> None:
    self.body.append("</div>\n")


def _pass(self: Any, node: nodes.Node) -> None:
    """Non-HTML writers render the block's children only."""


def _unresolved(self: Any, node: nodes.Node) -> None:
    # A post-transform replaces every gemm_tab_set / gemm_freshness; reaching a writer means a
    # builder skipped post-transforms. Writing nothing is better than a crash.
    raise nodes.SkipNode


def block_title(node: nodes.Node) -> str:
    """The title ``:ref:`` shows for a block: its caption, else its name.

    The caption is kept as an attribute, not a ``caption`` node: LaTeX writes captions as
    ``\\caption`` which is an error outside a float, and the block is not one.
    """
    assert isinstance(node, nodes.Element)
    return str(node.get("gemm_caption") or node.get("gemm_name", ""))


WRITERS = ("latex", "text", "man", "texinfo")

#: Formats whose writers cannot span a table entry over columns (docutils' man writer drops
#: ``morecols``, so every later entry of the row moved one column left per spanned column).
NO_COLUMN_SPANS = ("man",)


class UnspanColumns(SphinxPostTransform):
    """Where a writer cannot span columns, a spanning entry becomes itself plus empty entries.

    Every table of the page, whoever built it: the row keeps its width, so each header stands over
    its own column ("FP8 Current" over FP8 Current's times, not over FP8 Delayed's speedups).
    After :class:`.render_table.ExpandTables` (450), which makes our data tables docutils tables.
    """

    default_priority = 460
    formats = NO_COLUMN_SPANS

    def run(self, **kwargs: Any) -> None:
        for entry in list(self.document.findall(nodes.entry)):
            span = int(entry.get("morecols", 0) or 0)
            if span <= 0:
                continue
            del entry["morecols"]
            row = entry.parent
            at = row.index(entry)
            for offset in range(1, span + 1):
                row.insert(at + offset, nodes.entry("", nodes.paragraph()))


def setup_nodes(app: Sphinx) -> None:
    block_visitors: dict[str, Any] = {w: (_pass, _pass) for w in WRITERS}
    app.add_enumerable_node(gemm_benchmark_block, "gemm-benchmark", block_title,
                            html=(_visit_block_html, _depart_block_html), **block_visitors)
    placeholders: dict[str, Any] = {w: (_unresolved, None) for w in WRITERS}
    for node_class in (gemm_tab_set, gemm_tab, gemm_freshness):
        app.add_node(node_class, html=(_unresolved, None), **placeholders)
    app.add_post_transform(UnspanColumns)
