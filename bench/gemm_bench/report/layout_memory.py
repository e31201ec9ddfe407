"""Memory per GPU of a question's layout, per recipe, from one result's measured parts (issue 41).

The one composition that the ``gemm-layout-memory`` directive's table and the ``shapes`` / ``report``
commands both print: per recipe whose memory parts the result holds,
:func:`~gemm_bench.question.memory_per_gpu.memory_per_gpu` for the layout, the largest micro-batch
that composition predicts, and the first change of the layout that would make it fit where it does
not. Pure: no Sphinx, no torch; every number is read from the result through the door.
"""

from __future__ import annotations

import dataclasses

from gemm_bench.question.config import ConfigError, ModelConfig
from gemm_bench.question.layout import ParallelLayout
from gemm_bench.question.memory_per_gpu import MemoryPerGpu, largest_micro_batch, memory_per_gpu, what_would_fit
from gemm_bench.question.precisions import PRECISIONS
from gemm_bench.report.layout_search import NOT_SEARCHED, Search, found_text, larger_step_text
from gemm_bench.results.typed import Result

GIB = 1 << 30
NO_PARTS = "no model step with its memory parts in this result (a GPU refresh measures it)"


@dataclasses.dataclass(frozen=True)
class RecipeMemory:
    """One recipe's memory per GPU for the layout, the largest micro-batch predicted, and the first
    change that would make it fit (None where it fits, or where no single change does)."""

    precision: str
    memory: MemoryPerGpu
    largest_micro_batch: int
    remedy: tuple[str, MemoryPerGpu] | None


def recipe_memory(result: Result, config: ModelConfig,
                  layout: ParallelLayout) -> tuple[list[RecipeMemory], str | None]:
    """Per recipe (in the site's order), the layout's memory per GPU composed from ``result``'s model
    step (typed: memory resting on an optimizer state the door refused is absent); or ([], why there
    is none): no memory parts measured, or a layout the parts cannot compose."""
    block = result.model_step
    if block is None or not block.memory:
        return [], NO_PARTS
    capacity = block.capacity_bytes
    out = []
    for precision in (p for p in PRECISIONS if p in block.memory):
        args = (block.memory[precision], block.layer_params, config, layout)
        try:
            mem = memory_per_gpu(*args, capacity=capacity, precision=precision)
            largest = largest_micro_batch(*args, capacity=capacity, precision=precision)
            remedy = None if mem.fits else what_would_fit(*args, capacity=capacity, precision=precision)
        except ConfigError as exc:
            return [], f"the layout cannot be composed from this result: {exc}"
        out.append(RecipeMemory(precision, mem, largest, remedy))
    return out, None


def gib(value: float) -> str:
    return f"{value / GIB:.1f} GiB"


def fits_text(mem: MemoryPerGpu) -> str:
    """"yes, 12.3 GiB free" or "no, 4.5 GiB over"."""
    return f"yes, {gib(mem.headroom)} free" if mem.fits else f"no, {gib(-mem.headroom)} over"


def remedy_text(found: RecipeMemory) -> str:
    """What would make it fit: "" where it fits, else the change and the total it gives."""
    if found.memory.fits:
        return ""
    return f"{found.remedy[0]}: {gib(found.remedy[1].total)}" if found.remedy else "no single change of the layout"


#: The remedies of :data:`~gemm_bench.question.memory_per_gpu.REMEDIES` in running prose (the answer sentence).
REMEDY_WORDS = {"selective recompute": "selective recomputation", "full recompute": "full recomputation",
                "distributed optimizer": "the distributed optimizer",
                "optimizer+grads": "ZeRO-2 gradient sharding", "fsdp": "FSDP",
                "CP x2": "twice the context parallel", "PP x2": "twice the pipeline stages"}


def remedy_sentence(found: RecipeMemory) -> str:
    """"FSDP would make it fit: 65.1 GiB", or "no single change of the layout makes it fit": what the
    answer sentence says where a recipe does not fit ("" where it fits)."""
    if found.memory.fits:
        return ""
    if found.remedy is None:
        return "no single change of the layout makes it fit"
    name = REMEDY_WORDS.get(found.remedy[0], found.remedy[0])
    return f"{name} would make it fit: {gib(found.remedy[1].total)}"


def memory_lines(result: Result, config: ModelConfig, layout: ParallelLayout,
                 search: Search | str | None = None) -> list[str]:
    """Memory per GPU per recipe as the command line prints it: one line a recipe (wrapped by the
    caller at 100 columns), or one line saying why there is none. ``search``: the layout-search study's
    answer for this model and GPU (:func:`gemm_bench.report.layout_search.model_search`), whose found
    micro-batch and, where timed, tokens per second per GPU at it are printed beside the prediction."""
    found, why = recipe_memory(result, config, layout)
    if why is not None or result.model_step is None:
        return [f"memory per GPU: {why}"]
    capacity = gib(result.model_step.capacity_bytes)
    lines = [f"memory per GPU ({found[0].memory.stage} stage, of {capacity}; composed from the measured parts, "
             "collectives' buffers not counted):"]
    for item in found:
        mem = item.memory
        line = (f"  {PRECISIONS[item.precision].display:<12}{gib(mem.total):>10}  fits: {fits_text(mem)}; "
                f"largest micro-batch {item.largest_micro_batch} (predicted)")
        if isinstance(search, Search):
            answer = found_text(search, item.precision)
            line += f", {answer} ({search.where()})" if answer != NOT_SEARCHED else ", not searched on the GPU"
            timed = larger_step_text(search, item.precision)
            if timed != "–":
                line += f"; tokens/s per GPU (real rank, collectives not in it): {timed}"
        if not mem.fits:
            line += (f"; would fit with {item.remedy[0]} ({gib(item.remedy[1].total)})" if item.remedy
                     else "; no single change of the layout makes it fit")
        lines.append(line)
    return lines
