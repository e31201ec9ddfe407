"""What the layout directives share: ``gemm-layout-memory`` and ``gemm-layout-step`` each show, per model
id of ``:models:``, the page's layout (the model's published layout under the page's layout options) and
a table per GPU with a cached result of that question. One reading of the options, one question per
model, one cache lookup and one panel layout, so the two tables of a page describe the same run; each
directive says only what its panel holds (:meth:`LayoutTableDirective.panel`), from each GPU's result as the
build typed it once (:func:`gemm_benchmark.execution.read_results`, shared with the directives).
"""

from __future__ import annotations

from typing import ClassVar

from docutils import nodes
from docutils.parsers.rst import directives
from sphinx.util.docutils import SphinxDirective

from gemm_bench.question.config import ConfigError
from gemm_bench.question.devices import device_label
from gemm_bench.question.layout import PRESET_LAYOUTS, ParallelLayout, PresetLayout
from gemm_bench.question.question import Question, build_question
from gemm_bench.results.cache import Cache
from gemm_bench.results.typed import Result
from gemm_benchmark.config import Settings, settings
from gemm_benchmark.diagnostics import Subtype, warn
from gemm_benchmark.execution import read_results
from gemm_benchmark.options import LAYOUT_DIRECTIVE_OPTIONS, LAYOUT_REFERENCE, page_layout
from gemm_benchmark.tabs import tab_set


def note(text: str) -> nodes.paragraph:
    """A small note under or instead of a table."""
    return nodes.paragraph(text, text, classes=["gemm-summary-note"])


class LayoutTableDirective(SphinxDirective):
    """A directive of ``:models:`` and the layout options: per model, its layout in words and one panel per
    GPU (tabs where there are several). Subclasses set :attr:`NAME` and :attr:`CSS` and fill
    :meth:`panel` (and, where they need them, :meth:`prepare` and :meth:`preamble`)."""

    NAME: ClassVar[str]
    CSS: ClassVar[str]
    reference_options = {  # noqa: RUF012  (read from the class by the authoring reference)
        "models": "model ids with a layout (every preset, and the measured ids such as ``llama3-70b/tp8``)",
        **LAYOUT_REFERENCE,
    }
    has_content = False
    option_spec = {  # noqa: RUF012  (docutils reads it)
        "models": directives.unchanged_required,
        **{name: directives.unchanged for name in LAYOUT_DIRECTIVE_OPTIONS},
    }

    def run(self) -> list[nodes.Node]:
        config = settings(self.env)
        if config.questions_only:
            return []
        # the page's layout options, read as the summary reads its own: a page setting :cp: gets its
        # sentence, memory table and step table on one layout
        self.layout, bad = page_layout(self.options, self.block_text, self.lineno)
        if bad is not None:
            warn(Subtype.OPTION, f"{self.NAME}: {bad[1]}", location=(self.env.docname, bad[0]))
            return []
        self.prepare(config)
        out: list[nodes.Node] = []
        for model_id in [w for w in self.options.get("models", "").replace(",", " ").split() if w]:
            if model_id not in PRESET_LAYOUTS:
                warn(Subtype.OPTION, f"{self.NAME}: :models: {model_id!r} has no layout; known: "
                     + ", ".join(PRESET_LAYOUTS), location=(self.env.docname, self.lineno))
                continue
            out.append(self._model(model_id, config))
        return out

    def prepare(self, config: Settings) -> None:
        """What every model of the directive reads (studies), once per directive."""

    def preamble(self, preset: PresetLayout) -> list[nodes.Node]:
        """Nodes between the layout's words and the panels."""
        return []

    def panel(self, result: Result, model_id: str, question: Question, layout: ParallelLayout,
              label: str, config: Settings) -> list[nodes.Node]:
        """One GPU's panel for one model, from its typed result."""
        raise NotImplementedError

    def _model(self, model_id: str, config: Settings) -> nodes.Node:
        preset = PRESET_LAYOUTS[model_id]
        section = nodes.container(classes=[self.CSS])
        try:
            question = build_question(model=model_id, layout=self.layout)
        except ConfigError as exc:
            warn(Subtype.OPTION, f"{self.NAME}: {model_id}: {exc}", location=(self.env.docname, self.lineno))
            return section
        layout = question.layout or preset.layout
        head = f"{model_id}: {layout.describe()}."
        section += nodes.paragraph(head, head, classes=["gemm-question"])
        section.extend(self.preamble(preset))
        results, errors = read_results(Cache(config.cache_dir), question.hash)
        for error in errors:
            warn(Subtype.CACHE, str(error), location=(self.env.docname, self.lineno))
        for path in [*(p for p, _ in results), *(e.path for e in errors)]:
            self.env.note_dependency(str(path))
        panels = []
        for result in sorted((r for _, r in results), key=lambda r: r.device.name):
            label = device_label(result.device.name)
            panels.append((label, self.panel(result, model_id, question, layout, label, config)))
        if not panels:
            section += note(f"No result of {model_id}'s question in the cache yet: a GPU refresh measures it.")
        elif len(panels) == 1:
            section.extend(panels[0][1])
        else:
            section += tab_set(panels, classes=["gemm-device-tabs"])
        return section
