"""``.. gemm-layout-memory::``: the run a reader launches: its parallel layout and memory per GPU (issue 41).

For each model id of ``:models:`` (presets and measured ids such as ``llama3-70b/tp8``), the layout a
published recipe runs it with (:data:`gemm_bench.question.layout.PRESET_LAYOUTS`, with its source),
and per GPU with a cached result of that model's question, per recipe: memory per GPU for that
layout (:func:`gemm_bench.question.memory_per_gpu.memory_per_gpu`, composed by exact arithmetic from
the parts the GPU measured: the model step's ``memory`` block), whether it fits and the headroom,
the first change that would make it fit where it does not, and the largest micro-batch the
composition predicts, beside the largest found on the GPU where the layout-search study searched that
model's rank on that GPU kind (:mod:`gemm_bench.report.layout_search`; an H100's capacity emulated on an
H200 says so) and the difference; "not searched" elsewhere. Every number is read from the cache through
the door (:func:`gemm_bench.results.cache.read_document`, :func:`gemm_benchmark.records.page_studies`);
none is typed.

What it does not hold, said under each table in the sentence itself: collectives' buffers and the
allocator's fragmentation, and (until communication is composed into the step) any time.

A model whose result has no model step (measured before it, or another question) is a visible note,
never a number; a model id without a layout is a located warning.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from docutils import nodes
from docutils.parsers.rst import directives
from sphinx.util.docutils import SphinxDirective

from gemm_bench.question.config import ConfigError
from gemm_bench.question.devices import device_label
from gemm_bench.question.layout import PRESET_LAYOUTS, ParallelLayout
from gemm_bench.question.precisions import PRECISIONS
from gemm_bench.question.question import Question, build_question
from gemm_bench.report.layout_memory import NO_PARTS, fits_text, gib, recipe_memory, remedy_text
from gemm_bench.report.layout_search import Search, difference_text, found_text, model_search, search_note
from gemm_bench.results.cache import Cache
from gemm_benchmark.config import settings
from gemm_benchmark.diagnostics import Subtype, warn
from gemm_benchmark.options import LAYOUT_DIRECTIVE_OPTIONS, LAYOUT_REFERENCE, page_layout
from gemm_benchmark.records import page_studies
from gemm_benchmark.render_block import scrolling
from gemm_benchmark.render_table import Entry, build_table
from gemm_benchmark.tabs import tab_set

HEADER = ("Recipe", "Memory per GPU", "Fits?", "Largest micro-batch (predicted)",
          "Largest micro-batch (found on the GPU)", "Found − predicted", "Where it does not fit")
NOT_COUNTED = ("Composed from the parts measured on one GPU (weights, FP8 copies, gradients, optimizer state and "
               "activations as the layout shards them; the most loaded pipeline stage); not counted: the "
               "collectives' buffers and the allocator's fragmentation.")
STUDY = "layout-search"


def header(search: Search | str | None) -> tuple[str, ...]:
    """The table's header: the found column says where it was found (an emulated capacity in words)."""
    if not isinstance(search, Search):
        return HEADER
    return (*HEADER[:4], f"Largest micro-batch ({search.where()})", *HEADER[5:])


def memory_rows(doc: dict[str, Any], model_id: str, layout: ParallelLayout | None = None,
                search: Search | str | None = None) -> tuple[list[list[Entry]], str | None]:
    """The table rows of one model on one GPU (per recipe), or ([], why there are none). ``layout``:
    the page's (default: the published layout of ``model_id``); ``search``: the layout-search study's
    answer for this model and GPU (:func:`gemm_bench.report.layout_search.model_search`)."""
    config = Question.from_dict(doc["question"]).config
    if config is None:
        block = doc.get("model_step")
        measured = isinstance(block, dict) and bool(block.get("memory"))
        return [], "this result is not a model's question" if measured else NO_PARTS
    found, why = recipe_memory(doc, config, layout or PRESET_LAYOUTS[model_id].layout)
    if why is not None:
        return [], why
    rows: list[list[Entry]] = []
    capacity = int(doc["model_step"]["capacity_bytes"])
    for item in found:
        mem = item.memory
        where = (f"{mem.stage} stage: weights {gib(mem.weights)}, FP8 copies {gib(mem.fp8_weights)}, gradients "
                 f"{gib(mem.gradients)}, optimizer state {gib(mem.optimizer_state)}, activations "
                 f"{gib(mem.activations)}, transient {gib(mem.transient)}; capacity {gib(capacity)}")
        rows.append([Entry(PRECISIONS[item.precision].display, strong=item.precision == "bf16"),
                     Entry(gib(mem.total), tooltip=where), Entry(fits_text(mem)), Entry(str(item.largest_micro_batch)),
                     Entry(found_text(search, item.precision)),
                     Entry(difference_text(search, item.precision, item.largest_micro_batch)),
                     Entry(remedy_text(item))])
    return rows, None


class GemmLayoutMemoryDirective(SphinxDirective):
    """Each model's published layout and its memory per GPU per recipe, from the cached model steps."""

    reference_example = """\
.. gemm-layout-memory::
   :models: llama3-8b, llama3-70b/tp8
"""
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
        self.layout, bad = page_layout(self.options, self.block_text, self.lineno)
        if bad is not None:
            warn(Subtype.OPTION, f"gemm-layout-memory: {bad[1]}", location=(self.env.docname, bad[0]))
            return []
        out: list[nodes.Node] = []
        self.searches, _ = page_studies(self.env, STUDY, location=(self.env.docname, self.lineno))
        for model_id in [w for w in self.options.get("models", "").replace(",", " ").split() if w]:
            if model_id not in PRESET_LAYOUTS:
                warn(Subtype.OPTION, f"gemm-layout-memory: :models: {model_id!r} has no layout; known: "
                     + ", ".join(PRESET_LAYOUTS), location=(self.env.docname, self.lineno))
                continue
            out.append(self._model(model_id, config.cache_dir))
        return out

    def _model(self, model_id: str, cache_dir: Path) -> nodes.Node:
        preset = PRESET_LAYOUTS[model_id]
        section = nodes.container(classes=["gemm-layout-memory"])
        try:
            question = build_question(model=model_id, layout=self.layout)
        except ConfigError as exc:
            warn(Subtype.OPTION, f"gemm-layout-memory: {model_id}: {exc}", location=(self.env.docname, self.lineno))
            return section
        layout = question.layout or preset.layout
        head = f"{model_id}: {layout.describe()}."
        section += nodes.paragraph(head, head, classes=["gemm-question"])
        source = nodes.paragraph(classes=["gemm-summary-note"])
        source += nodes.Text("Layout: " + ("this page's options over " if self.layout else ""))
        if preset.url:
            source += nodes.reference(preset.source, preset.source, refuri=preset.url)
        else:
            source += nodes.Text(preset.source)
        section += source
        lookup = Cache(cache_dir).lookup(question.hash)
        for error in lookup.errors:
            warn(Subtype.CACHE, str(error), location=(self.env.docname, self.lineno))
        for path in [*lookup.paths, *(e.path for e in lookup.errors)]:
            self.env.note_dependency(str(path))
        panels: list[tuple[str, list[nodes.Node]]] = []
        for doc in sorted(lookup.documents, key=lambda d: d["device"]["name"]):
            config = Question.from_dict(doc["question"]).config
            search = (model_search(self.searches, doc["device"]["name"], model_id, config, layout)
                      if config is not None else None)
            rows, why = memory_rows(doc, model_id, layout, search)
            label = device_label(doc["device"]["name"])
            if why is not None:
                panels.append((label, [nodes.paragraph(why, f"{label}: {why}.", classes=["gemm-summary-note"])]))
                continue
            table = build_table([[Entry(h, strong=True) for h in header(search)]], rows,
                                [12, 12, 14, 11, 14, 9, 28], classes=["gemm-layout-memory-table"])
            text = f"{NOT_COUNTED} {search_note(search, int(doc['model_step']['capacity_bytes']))}"
            note = nodes.paragraph(text, text, classes=["gemm-summary-note"])
            panels.append((label, [scrolling(table), note]))
        if not panels:
            text = f"No result of {model_id}'s question in the cache yet: a GPU refresh measures it."
            section += nodes.paragraph(text, text, classes=["gemm-summary-note"])
        elif len(panels) == 1:
            section.extend(panels[0][1])
        else:
            section += tab_set(panels, classes=["gemm-device-tabs"])
        return section


def setup_layout_memory(app: Any) -> None:
    app.add_directive("gemm-layout-memory", GemmLayoutMemoryDirective)
