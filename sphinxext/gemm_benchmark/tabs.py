"""sphinx-tabs *group* tabs built as nodes, identical to what ``.. tabs::`` / ``.. group-tab::`` emit.

Building the nodes directly (rather than generating reST for sphinx-tabs to parse) keeps the
directive independent of reST versus MyST, and lets each panel hold nodes we already built.
Group tabs share a name across the page: choosing "Pre-quantized" in one block switches every
block, which is what a reader comparing two results wants. Tab ids continue sphinx-tabs' own
per-page counter, so a page mixing our tabs and hand-written ones gets no duplicate ids.

Builders sphinx-tabs does not support (LaTeX, text, ...) get each panel under a rubric instead.
"""

from __future__ import annotations

import base64
from collections.abc import Sequence

from docutils import nodes
from sphinx.environment import BuildEnvironment
from sphinx_tabs.tabs import SphinxTabsPanel, SphinxTabsTab, SphinxTabsTablist, get_compatible_builders


def group_tabs(env: BuildEnvironment, panels: Sequence[tuple[str, list[nodes.Node]]],
               *, classes: Sequence[str] = ()) -> nodes.Element:
    """A tab set whose tabs are group tabs named by the panel titles (first panel selected)."""
    app = getattr(env, "_app", None) or env.app
    if app.builder.name not in get_compatible_builders(app):
        return _plain(panels, classes)
    temp = env.temp_data
    tabs_id = temp.get("next_tabs_id", 0)
    temp["next_tabs_id"] = tabs_id + 1
    container = nodes.container(type="tab-element", classes=["sphinx-tabs", *classes])
    tablist = SphinxTabsTablist()
    tablist["role"] = "tablist"
    tablist["aria-label"] = "Tabbed content"
    if not env.config["sphinx_tabs_disable_tab_closing"]:
        tablist["classes"].append("closeable")
    container += tablist
    seen: set[str] = set()
    for index, (title, children) in enumerate(panels):
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
        panel.extend(children)
        container += panel
    return container


def _plain(panels: Sequence[tuple[str, list[nodes.Node]]], classes: Sequence[str]) -> nodes.Element:
    container = nodes.container(classes=["gemm-tabs-plain", *classes])
    for title, children in panels:
        container += nodes.rubric(title, title)
        container.extend(children)
    return container
