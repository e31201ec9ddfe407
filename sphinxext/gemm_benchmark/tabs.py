"""Panels read as neutral nodes, written as sphinx-tabs group tabs (HTML) or rubrics (elsewhere).

Reading builds :class:`~.nodes.gemm_tab_set` nodes whatever the builder, so one doctree serves an
HTML, a LaTeX and a text build in turn (as sphinx-design's ``TabSetHtmlTransform``). At write
time :class:`TabsToHtml` (HTML formats only) builds exactly the nodes sphinx-tabs' ``.. tabs::`` /
``.. group-tab::`` emit: group tabs share a name across the page, so choosing "Pre-quantized" in
one block switches every block. Ids carry a ``gemm-`` prefix so they never collide with
hand-written sphinx-tabs on the same page. :class:`TabsToRubrics` renders other formats.
"""

from __future__ import annotations

import base64
from typing import Any

from docutils import nodes
from sphinx.application import Sphinx
from sphinx.transforms.post_transforms import SphinxPostTransform
from sphinx_tabs.tabs import SphinxTabsPanel, SphinxTabsTab, SphinxTabsTablist

from gemm_benchmark.nodes import builder_format, gemm_tab, gemm_tab_set


def tab_set(panels: list[tuple[str, list[nodes.Node]]], *, classes: list[str]) -> gemm_tab_set:
    """A neutral set of titled panels (the first one is shown first)."""
    node = gemm_tab_set(classes=classes)
    for title, children in panels:
        tab = gemm_tab(title=title)
        tab.extend(children)
        node += tab
    return node


class TabsToHtml(SphinxPostTransform):
    default_priority = 200
    formats = ("html",)

    def run(self, **kwargs: Any) -> None:
        closeable = not self.config["sphinx_tabs_disable_tab_closing"]
        # Innermost first, so a set inside a panel is converted before its parent is.
        for index, node in enumerate(reversed(list(self.document.findall(gemm_tab_set)))):
            node.replace_self(_html_tabs(node, f"gemm{index}", closeable))


class TabsToRubrics(SphinxPostTransform):
    default_priority = 200

    def run(self, **kwargs: Any) -> None:
        if builder_format(self.env) == "html":
            return  # TabsToHtml's
        for node in reversed(list(self.document.findall(gemm_tab_set))):
            container = nodes.container(classes=["gemm-tabs-plain", *node["classes"]])
            for tab in node.children:
                assert isinstance(tab, gemm_tab)
                container += nodes.rubric(tab["title"], tab["title"])
                container.extend(tab.children)
            node.replace_self(container)


def _html_tabs(node: gemm_tab_set, tabs_id: str, closeable: bool) -> nodes.Element:
    container = nodes.container(type="tab-element", classes=["sphinx-tabs", *node["classes"]])
    tablist = SphinxTabsTablist()
    tablist["role"] = "tablist"
    tablist["aria-label"] = "Tabbed content"
    if closeable:
        tablist["classes"].append("closeable")
    container += tablist
    seen: set[str] = set()
    for index, panel_node in enumerate(node.children):
        assert isinstance(panel_node, gemm_tab)
        title = panel_node["title"]
        data_tab = base64.b64encode(title.encode("utf-8")).decode("utf-8")
        while data_tab in seen:  # sphinx-tabs' de-duplication rule
            data_tab += "-1"
        seen.add(data_tab)
        tab = SphinxTabsTab()
        tab += nodes.Text(title)
        tab["classes"] += ["sphinx-tabs-tab", "group-tab"]
        tab["role"] = "tab"
        tab["ids"] = [f"tab-{tabs_id}-{data_tab}"]
        tab["name"] = data_tab
        tab["tabindex"] = "0" if index == 0 else "-1"
        tab["aria-selected"] = "true" if index == 0 else "false"
        tab["aria-controls"] = f"panel-{tabs_id}-{data_tab}"
        tablist += tab
        panel = SphinxTabsPanel()
        panel["role"] = "tabpanel"
        panel["ids"] = [f"panel-{tabs_id}-{data_tab}"]
        panel["name"] = data_tab
        panel["tabindex"] = 0
        panel["aria-labelledby"] = f"tab-{tabs_id}-{data_tab}"
        panel["classes"] += ["sphinx-tabs-panel", "group-tab"]
        if index:
            panel["hidden"] = "true"
        panel.extend(panel_node.children)
        container += panel
    return container


def setup_tabs(app: Sphinx) -> None:
    app.add_post_transform(TabsToHtml)
    app.add_post_transform(TabsToRubrics)
