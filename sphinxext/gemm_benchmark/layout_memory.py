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
the door (:func:`gemm_bench.results.cache.read_document`, :func:`gemm_benchmark.records.page_studies`)
and from the typed result (:class:`gemm_bench.results.typed.Result`: the model step's memory parts and the
GPU's capacity), never from the document; none is typed by hand.

What it does not hold, said under each table in the sentence itself: collectives' buffers and the
allocator's fragmentation, and (until communication is composed into the step) any time.

A model whose result has no model step (measured before it, or another question, or a question this code
no longer rebuilds) is a visible note, never a number; a model id without a layout is a located warning.
"""

from __future__ import annotations

from typing import Any

from docutils import nodes

from gemm_bench.question.config import ModelConfig
from gemm_bench.question.layout import PRESET_LAYOUTS, ParallelLayout, PresetLayout
from gemm_bench.question.precisions import PRECISIONS
from gemm_bench.question.question import Question
from gemm_bench.report.layout_memory import NO_PARTS, fits_text, gib, recipe_memory, remedy_text
from gemm_bench.report.layout_search import (
    LARGER_STEP_NOTE,
    Search,
    context_parallel_untimed,
    difference_text,
    found_text,
    larger_step,
    larger_step_text,
    model_search,
    search_note,
)
from gemm_bench.results.typed import Result
from gemm_benchmark.config import Settings
from gemm_benchmark.layout_tables import LayoutTableDirective, note
from gemm_benchmark.records import page_studies
from gemm_benchmark.render_block import scrolling
from gemm_benchmark.render_table import Entry, build_table

HEADER = ("Recipe", "Memory per GPU", "Fits?", "Largest micro-batch (predicted)",
          "Largest micro-batch (found on the GPU)", "Found − predicted", "Where it does not fit",
          "Tokens/s per GPU at the largest found (real rank)")
NOT_COUNTED = ("Composed from the parts measured on one GPU (weights, FP8 copies, gradients, optimizer state and "
               "activations as the layout shards them; the most loaded pipeline stage); not counted: the "
               "collectives' buffers and the allocator's fragmentation.")
STUDY = "layout-search"
#: Why a model's result composes nothing when its stored question is not one this code reads back (a
#: config field an older version wrote): never a crash of the build, never a composition of a guess.
UNREAD_QUESTION = ("its question was written by another version of this code and cannot be read back, so no "
                   "memory is composed from it")


def header(search: Search | str | None) -> tuple[str, ...]:
    """The table's header: the found column says where it was found (an emulated capacity in words)."""
    if not isinstance(search, Search):
        return HEADER
    return (*HEADER[:4], f"Largest micro-batch ({search.where()})", *HEADER[5:])


def measured_config(result: Result) -> ModelConfig | None:
    """The model config ``result`` was measured for, as its question stores it; None for a question that is
    not a model's or one this code no longer rebuilds (:attr:`Result.question` is None: the panel says
    why instead of composing from a config it cannot read)."""
    return result.question.config if result.question is not None else None


def memory_rows(result: Result, model_id: str, layout: ParallelLayout | None = None,
                search: Search | str | None = None) -> tuple[list[list[Entry]], str | None]:
    """The table rows of one model on one GPU (per recipe), or ([], why there are none). ``layout``:
    the page's (default: the published layout of ``model_id``); ``search``: the layout-search study's
    answer for this model and GPU (:func:`gemm_bench.report.layout_search.model_search`)."""
    config = measured_config(result)
    block = result.model_step
    if config is None and result.kind == "model":
        return [], UNREAD_QUESTION
    if config is None:
        measured = block is not None and bool(block.memory)
        return [], "this result is not a model's question" if measured else NO_PARTS
    found, why = recipe_memory(result, config, layout or PRESET_LAYOUTS[model_id].layout)
    if why is not None or block is None:
        return [], why or NO_PARTS
    rows: list[list[Entry]] = []
    capacity = block.capacity_bytes
    for item in found:
        mem = item.memory
        where = (f"{mem.stage} stage: weights {gib(mem.weights)}, FP8 copies {gib(mem.fp8_weights)}, gradients "
                 f"{gib(mem.gradients)}, optimizer state {gib(mem.optimizer_state)}, activations "
                 f"{gib(mem.activations)}, transient {gib(mem.transient)}; capacity {gib(capacity)}")
        rows.append([Entry(PRECISIONS[item.precision].display, strong=item.precision == "bf16"),
                     Entry(gib(mem.total), tooltip=where), Entry(fits_text(mem)), Entry(str(item.largest_micro_batch)),
                     Entry(found_text(search, item.precision)),
                     Entry(difference_text(search, item.precision, item.largest_micro_batch)),
                     Entry(remedy_text(item)), Entry(larger_step_text(search, item.precision))])
    return rows, None


class GemmLayoutMemoryDirective(LayoutTableDirective):
    """Each model's published layout and its memory per GPU per recipe, from the cached model steps."""

    NAME = "gemm-layout-memory"
    CSS = "gemm-layout-memory"
    reference_example = """\
.. gemm-layout-memory::
   :models: llama3-8b, llama3-70b/tp8
"""

    def prepare(self, config: Settings) -> None:
        self.searches, _ = page_studies(self.env, STUDY, location=(self.env.docname, self.lineno))

    def preamble(self, preset: PresetLayout) -> list[nodes.Node]:
        source = nodes.paragraph(classes=["gemm-summary-note"])
        source += nodes.Text("Layout: " + ("this page's options over " if self.layout else ""))
        if preset.url:
            source += nodes.reference(preset.source, preset.source, refuri=preset.url)
        else:
            source += nodes.Text(preset.source)
        return [source]

    def panel(self, result: Result, model_id: str, question: Question, layout: ParallelLayout,
              label: str, config: Settings) -> list[nodes.Node]:
        measured = measured_config(result)
        search = (model_search(self.searches, result.device.name, model_id, measured, layout)
                  if measured is not None else None)
        rows, why = memory_rows(result, model_id, layout, search)
        if why is not None or result.model_step is None:
            return [note(f"{label}: {why or NO_PARTS}.")]
        timed = any(larger_step(search, p) is not None for p in PRECISIONS)
        head = header(search) if timed else header(search)[:-1]
        rows = rows if timed else [row[:-1] for row in rows]
        table = build_table([[Entry(h, strong=True) for h in head]], rows,
                            [12, 12, 14, 11, 14, 9, 28, 18][:len(head)], classes=["gemm-layout-memory-table"])
        capacity = result.model_step.capacity_bytes
        untimed = context_parallel_untimed(search) if isinstance(search, Search) else None
        words = (f"{NOT_COUNTED} {search_note(search, capacity)}" + (f" {LARGER_STEP_NOTE}" if timed else "")
                 + (f" {untimed}" if untimed else ""))
        return [scrolling(table), note(words)]


def setup_layout_memory(app: Any) -> None:
    app.add_directive("gemm-layout-memory", GemmLayoutMemoryDirective)
