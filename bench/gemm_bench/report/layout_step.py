"""The layout's step of one cached result, communication in (issue 42, items 4 and 5): per recipe, the
step of the model's preset layout (or any layout) composed by :mod:`gemm_bench.question.layout_step`
from the result's model step (the rank's compute) and the tp-comm study's collective sweep (measured on
a box of several GPUs), and the clause the answer sentence quotes (:func:`layout_clause`).

Pure: reads validated documents only. Which sweep answers a result: the study of the result's own GPU
kind when there is one; else another kind's, every cost then *borrowed* (an assumption, said in the
words: the two kinds' NVLink taken to be as fast). Speedups are taken between recipes of one result
and one sweep, never across runs.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from typing import Any

from gemm_bench.question.comm import CollectiveTable, CommError
from gemm_bench.question.config import ConfigError, ModelConfig
from gemm_bench.question.devices import device_label
from gemm_bench.question.hardware import peak_tflops
from gemm_bench.question.layout import PRESET_LAYOUTS, ParallelLayout
from gemm_bench.question.layout_step import LayoutStep, Network, RecipeParts, layout_steps, speedup
from gemm_bench.question.precisions import BASELINE, PRECISIONS
from gemm_bench.question.question import build_question
from gemm_bench.report.model_step import optimizer_line, part_times
from gemm_bench.results.tp_comm_schema import collective_table
from gemm_bench.results.typed import Result


@dataclasses.dataclass(frozen=True)
class Sweep:
    """The collective costs a composition reads, and where they were measured."""

    table: CollectiveTable
    device: str  # the GPU kind whose box measured them
    run: str  # the study's date and commit: its provenance in words

    def borrowed_for(self, device: str) -> str | None:
        """The measuring GPU kind where it is not ``device`` (every cost then assumed), else None."""
        return None if device == self.device else device_label(self.device)


def sweeps(study_docs: Sequence[Mapping[str, Any]]) -> list[Sweep]:
    """Every tp-comm study that holds a collective sweep, as a :class:`Sweep`."""
    out = []
    for doc in study_docs:
        table = collective_table(doc["data"])
        if table is not None:
            prov = doc.get("provenance", {})
            out.append(Sweep(table, str(doc["device"]["name"]), f"{prov.get('date', '?')[:10]}, commit "
                                                                  f"{prov.get('commit', '?')}"))
    return out


def sweep_for(device: str, available: Sequence[Sweep]) -> Sweep | None:
    """The sweep of ``device``'s own kind, else the first other (borrowed), else None."""
    own = [s for s in available if s.device == device]
    found = own or list(available)
    return found[0] if found else None


@dataclasses.dataclass(frozen=True)
class ResultLayoutSteps:
    """One result's layout steps: per recipe a step or the reason it has none."""

    device: str
    layout: ParallelLayout
    sweep: Sweep
    steps: Mapping[str, LayoutStep | CommError | ConfigError]
    network: Network

    @property
    def borrowed_from(self) -> str | None:
        return self.sweep.borrowed_for(self.device)

    def step(self, precision: str) -> LayoutStep | None:
        found = self.steps.get(precision)
        return found if isinstance(found, LayoutStep) else None

    def speedup(self, precision: str) -> tuple[float, float, float] | None:
        mine, base = self.step(precision), self.step(BASELINE)
        return None if mine is None or base is None else speedup(mine, base)


def result_layout_steps(result: Result, layout: ParallelLayout, available: Sequence[Sweep], *,
                        network: Network = Network(),
                        config: ModelConfig | None = None) -> ResultLayoutSteps | str:
    """The layout's step per recipe of a checked result (typed: a part the door refused is missing),
    or a sentence saying why there is none (no model step, no sweep on any GPU kind, a layout the
    measured layer cannot express)."""
    block = result.model_step
    if block is None:
        return "no model step in this result (a GPU refresh measures it)"
    if config is None:
        config = result.question.config if result.question is not None else None
    if config is None or not block.answers(config):
        return "this result's model step does not answer the model's question"
    line = optimizer_line(block)
    if line is None:
        return "the optimizer part was not measured at two sizes in this result"
    parts = {p: RecipeParts(*t) for p in PRECISIONS if (t := part_times(block, p)) is not None}
    if BASELINE not in parts:
        return "BF16's parts are missing from this result's model step"
    device = result.device.name
    sweep = sweep_for(device, available)
    if sweep is None:
        return "no collective sweep measured on a box of several GPUs in the cache (gemm-bench study tp-comm)"
    try:
        steps = layout_steps(config, layout, parts, line, block.layer_params, sweep.table,
                             network=network, peak_tflops=peak_tflops(device, "bf16"),
                             measured_on=sweep.borrowed_for(device))
    except ConfigError as exc:
        return f"the layout cannot be composed from this result: {exc}"
    base = steps.get(BASELINE)
    if not isinstance(base, LayoutStep):
        return f"BF16's step of this layout cannot be composed: {base}"
    return ResultLayoutSteps(device, layout, sweep, steps, network)


def preset_layout_steps(result: Result, model_id: str, available: Sequence[Sweep], *,
                        network: Network = Network()) -> ResultLayoutSteps | str:
    """:func:`result_layout_steps` for the preset layout of ``model_id`` (``PRESET_LAYOUTS``)."""
    if model_id not in PRESET_LAYOUTS:
        return f"{model_id!r} has no preset layout"
    # the model's question as a page asks it: its unkeyed fields (a sliding window) are not in an older
    # result's stored config
    return result_layout_steps(result, PRESET_LAYOUTS[model_id].layout, available, network=network,
                               config=build_question(model=model_id).config)


def layout_clause(steps: ResultLayoutSteps, precision: str) -> str | None:
    """The answer sentence's clause for the layout: "with communication: 1,234 tokens/s per GPU on 64 GPUs:
    TP 8 with sequence parallel, ..., 1.21× BF16" (BF16 itself: no speedup), "(collectives assumed in
    part)" where any cost holds an assumption; None where the recipe has no step."""
    step = steps.step(precision)
    if step is None:
        return None
    text = f"with communication: {step.tokens_per_s:,.0f} tokens/s per GPU on {steps.layout.describe()}"
    ratio = steps.speedup(precision)
    if precision != BASELINE and ratio is not None:
        text += f", {ratio[0]:.2f}× BF16"
    words = assumed_words(step)
    if words:
        text += f" ({words})"
    return text


def assumed_words(*steps: LayoutStep | None) -> str:
    """What of these steps holds an assumption, in words: "collectives assumed in part", "compute
    assumed in part" (scaled to the layout's tokens per rank, another EP, recomputation), both, or ""."""
    found = [s for s in steps if s is not None]
    # the compute's own assumptions only: which group a gradient reduces over is the collectives' (the
    # compute-alone cell reads the same split, LayoutStep.compute_assumptions)
    compute = any(s.compute_assumptions for s in found)
    collectives = any(s.collectives_assumed or s.collective_assumptions for s in found)
    if compute and collectives:
        return "compute and collectives assumed in part"
    if compute:
        return "compute assumed in part"
    return "collectives assumed in part" if collectives else ""


def comm_words(step: LayoutStep) -> str:
    """"communication 12% of the step, bubble 3%": the shares the page and the report say alike."""
    return f"communication {step.comm_share:.0%} of the step, bubble {step.bubble_share:.0%}"


def measured_and_assumed(step: LayoutStep) -> tuple[list[str], list[str]]:
    """The collectives of a step grouped by how their cost was had: (measured on the box, assumed)."""
    measured: dict[str, int] = {}
    assumed: dict[str, str] = {}
    for call, cost in (*step.microbatch.calls, *step.dp.calls):
        key = f"{call.op} {call.dtype} over {call.group}"
        if cost.assumed:
            assumed.setdefault(key, cost.note or cost.how)
        else:
            measured[key] = measured.get(key, 0) + 1
    return sorted(measured), [f"{k} ({v})" for k, v in sorted(assumed.items())]


def precision_name(precision: str) -> str:
    return PRECISIONS[precision].display
