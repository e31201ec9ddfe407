"""``.. gemm-layout-memory::``: the run a reader launches: its parallel layout and memory per GPU (issue 41).

For each model id of ``:models:`` (presets and measured ids such as ``llama3-70b/tp8``), the layout a
published recipe runs it with (:data:`gemm_bench.question.layout.PRESET_LAYOUTS`, with its source),
and per GPU with a cached result of that model's question, per recipe: memory per GPU for that
layout (:func:`gemm_bench.question.memory_per_gpu.memory_per_gpu`, composed by exact arithmetic from
the parts the GPU measured: the model step's ``memory`` block), whether it fits and the headroom,
the first change that would make it fit where it does not, and the largest micro-batch the
composition predicts. Every number is read from the cache through the door
(:func:`gemm_bench.results.cache.read_document`); none is typed.

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
from gemm_bench.question.layout import PRESET_LAYOUTS
from gemm_bench.question.memory_per_gpu import largest_micro_batch, memory_per_gpu, what_would_fit
from gemm_bench.question.precisions import PRECISIONS
from gemm_bench.question.question import Question, build_question
from gemm_bench.results.cache import Cache
from gemm_bench.results.model_step_schema import memory_parts
from gemm_benchmark.config import settings
from gemm_benchmark.diagnostics import Subtype, warn
from gemm_benchmark.render_block import scrolling
from gemm_benchmark.render_table import Entry, build_table
from gemm_benchmark.tabs import tab_set

GIB = 1 << 30
HEADER = ("Recipe", "Memory per GPU", "Fits?", "Largest micro-batch (predicted)", "Where it does not fit")
NOT_COUNTED = ("Composed from the parts measured on one GPU (weights, FP8 copies, gradients, optimizer state and "
               "activations as the layout shards them; the most loaded pipeline stage); not counted: the "
               "collectives' buffers and the allocator's fragmentation. The largest micro-batch is predicted "
               "from the same parts, not searched on a GPU.")


def _gib(value: float) -> str:
    return f"{value / GIB:.1f} GiB"


def memory_rows(doc: dict[str, Any], model_id: str) -> tuple[list[list[Entry]], str | None]:
    """The table rows of one model on one GPU (per recipe), or ([], why there are none)."""
    block = doc.get("model_step")
    if not isinstance(block, dict) or not block.get("memory"):
        return [], "no model step with its memory parts in this result (a GPU refresh measures it)"
    config = Question.from_dict(doc["question"]).config
    if config is None:
        return [], "this result is not a model's question"
    layout = PRESET_LAYOUTS[model_id].layout
    capacity = int(block["capacity_bytes"])
    rows: list[list[Entry]] = []
    for precision in (p for p in PRECISIONS if p in block["memory"]):
        parts = memory_parts(block, precision)
        if parts is None:
            continue
        args = (parts, int(block["layer_params"]), config, layout)
        try:
            mem = memory_per_gpu(*args, capacity=capacity, precision=precision)
            largest = largest_micro_batch(*args, capacity=capacity, precision=precision)
            remedy = None if mem.fits else what_would_fit(*args, capacity=capacity, precision=precision)
        except ConfigError as exc:
            return [], f"the layout cannot be composed from this result: {exc}"
        where = (f"{mem.stage} stage: weights {_gib(mem.weights)}, FP8 copies {_gib(mem.fp8_weights)}, gradients "
                 f"{_gib(mem.gradients)}, optimizer state {_gib(mem.optimizer_state)}, activations "
                 f"{_gib(mem.activations)}, transient {_gib(mem.transient)}; capacity {_gib(capacity)}")
        fits = (f"yes, {_gib(mem.headroom)} free" if mem.fits else f"no, {_gib(-mem.headroom)} over")
        change = "" if mem.fits else (f"{remedy[0]}: {_gib(remedy[1].total)}" if remedy
                                      else "no single change of the layout")
        rows.append([Entry(PRECISIONS[precision].display, strong=precision == "bf16"),
                     Entry(_gib(mem.total), tooltip=where), Entry(fits), Entry(str(largest)), Entry(change)])
    return rows, None


class GemmLayoutMemoryDirective(SphinxDirective):
    """Each model's published layout and its memory per GPU per recipe, from the cached model steps."""

    reference_example = """\
.. gemm-layout-memory::
   :models: llama3-8b, llama3-70b/tp8
"""
    reference_options = {  # noqa: RUF012  (read from the class by the authoring reference)
        "models": "model ids with a layout (every preset, and the measured ids such as ``llama3-70b/tp8``)",
    }
    has_content = False
    option_spec = {"models": directives.unchanged_required}  # noqa: RUF012  (docutils reads it)

    def run(self) -> list[nodes.Node]:
        config = settings(self.env)
        if config.questions_only:
            return []
        out: list[nodes.Node] = []
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
        head = f"{model_id}: {preset.layout.describe()}."
        section += nodes.paragraph(head, head, classes=["gemm-question"])
        source = nodes.paragraph(classes=["gemm-summary-note"])
        source += nodes.Text("Layout: ")
        if preset.url:
            source += nodes.reference(preset.source, preset.source, refuri=preset.url)
        else:
            source += nodes.Text(preset.source)
        section += source
        question = build_question(model=model_id)
        lookup = Cache(cache_dir).lookup(question.hash)
        for error in lookup.errors:
            warn(Subtype.CACHE, str(error), location=(self.env.docname, self.lineno))
        for path in [*lookup.paths, *(e.path for e in lookup.errors)]:
            self.env.note_dependency(str(path))
        panels: list[tuple[str, list[nodes.Node]]] = []
        for doc in sorted(lookup.documents, key=lambda d: d["device"]["name"]):
            rows, why = memory_rows(doc, model_id)
            label = device_label(doc["device"]["name"])
            if why is not None:
                panels.append((label, [nodes.paragraph(why, f"{label}: {why}.", classes=["gemm-summary-note"])]))
                continue
            table = build_table([[Entry(h, strong=True) for h in HEADER]], rows, [14, 14, 16, 14, 30],
                                classes=["gemm-layout-memory-table"])
            note = nodes.paragraph(NOT_COUNTED, NOT_COUNTED, classes=["gemm-summary-note"])
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
