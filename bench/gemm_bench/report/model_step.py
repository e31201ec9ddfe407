"""The model's step of one result, composed for the page's question (issue 32): per recipe and G,
the time per micro-batch, tokens/s per GPU, model TFLOP/s, MFU, the speedup over BF16 with its
spread, the layer step beside it, and memory (peak, what it is made of, layers that fit, the
largest micro-batch).

Pure: it reads a checked result's typed model step (:class:`gemm_bench.results.typed.ModelStepBlock`,
parsed once at the door; never the JSON dict) and composes with
:mod:`gemm_bench.question.model_step`. G and the layer count are the page's (not in the question's
hash), so two pages asking G = 1 and G = 8 read one file. Every number comes from one block, one
run: speedups are never taken across runs.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

from gemm_bench.question.config import ModelConfig
from gemm_bench.question.hardware import peak_tflops
from gemm_bench.question.model_step import (
    SINKS_NOT_TIMED,
    MemoryBreakdown,
    ModelStepRow,
    OptimizerLine,
    PartTimes,
    composed_rows,
    largest_microbatch_predicted,
    layers_that_fit,
    memory,
    rank_parameters,
    step_ms,
    vocab_parameters,
    without_windowed_attention,
)
from gemm_bench.question.precisions import BASELINE, PRECISIONS
from gemm_bench.results.kernel_kinds import ATTENTION
from gemm_bench.results.typed import ModelStepBlock, ModelStepPart, Result, parse_model_step

GIB = 1 << 30
#: A memory difference smaller than this (GiB) reads "the same": the shown digit cannot tell it.
SAME_GIB = 0.05


def memory_delta_text(delta_gib: float) -> str:
    """"0.4 GiB more", "1.2 GiB less", "the same": the sentence, the table and the role say it alike."""
    if abs(delta_gib) < SAME_GIB:
        return "the same"
    return f"{abs(delta_gib):.1f} GiB {'more' if delta_gib > 0 else 'less'}"


def capacity_text(capacity_bytes: int) -> str:
    """"the 78.3 GiB this run could allocate": the GPU memory a result's memory is held against is what
    that run's allocator could use (free plus reserved when it measured), which moves by a few hundred
    MB between runs, not the GPU's size; the table, the hover and the summary's note say it alike."""
    return f"the {capacity_bytes / GIB:.1f} GiB this run could allocate"


@dataclasses.dataclass(frozen=True)
class ModelStep:
    """One result's model step for one question (its G and layers)."""

    config: ModelConfig
    device: str
    run_id: str
    #: Rows per G: 1 and the question's G (one row per precision whose parts were measured).
    rows: Mapping[int, tuple[ModelStepRow, ...]]
    memory: Mapping[str, MemoryBreakdown]
    layers_that_fit: Mapping[str, int]
    largest_microbatch: Mapping[str, int]
    largest_microbatch_predicted: Mapping[str, int]
    #: Layers of the real model the largest micro-batch was searched with (0: not searched).
    search_layers: int
    capacity_bytes: int
    rank_params: int
    #: Per G of :attr:`rows` and per recipe, the most a sliding window could shorten the step (a fraction of
    #: it: the windowed layers' profiled attention taken out), None where the layer steps were not profiled;
    #: empty without a window that shortens attention (:func:`window_note`).
    window_saving: Mapping[int, Mapping[str, float | None]] = dataclasses.field(default_factory=dict)

    @property
    def microbatches(self) -> int:
        return self.config.num_microbatches

    def row(self, precision: str, microbatches: int | None = None) -> ModelStepRow | None:
        g = self.microbatches if microbatches is None else microbatches
        return next((r for r in self.rows.get(g, ()) if r.precision == precision), None)

    def fits(self, precision: str) -> bool | None:
        m = self.memory.get(precision)
        return None if m is None else m.peak <= self.capacity_bytes

    def sentence(self, precision: str) -> str | None:
        """"FP8 Delayed: 1.31x the tokens per second of BF16 (G = 8), 0.4 GiB more memory"."""
        row, base = self.row(precision), self.row(BASELINE)
        if row is None or base is None or row.speedup is None:
            return None
        text = (f"{PRECISIONS[precision].display}: {row.speedup:.2f}x the tokens per second of BF16 with "
                f"G = {self.microbatches} micro-batches per optimizer step")
        said = self.memory_words(precision)
        return text + (f", {said}" if said else "") + "."

    def memory_words(self, precision: str) -> str | None:
        """"9.5 GiB more memory", "the same memory"; "... for the whole 56-layer rank" where the rank does not
        fit one GPU (its delta is then the whole rank's: Mixtral 8x22B's 251.6 GiB read as one GPU's);
        None without both memories. The answer, the summary's sentence and the report say it alike."""
        mine, theirs = self.memory.get(precision), self.memory.get(BASELINE)
        if mine is None or theirs is None:
            return None
        delta = memory_delta_text((mine.peak - theirs.peak) / GIB)
        text = "the same memory" if delta == "the same" else f"{delta} memory"
        if self.fits(precision) is False:
            text += f" for the whole {self.config.measured_layers}-layer rank"
        return text


def optimizer_state_note(summary: ModelStep) -> str | None:
    """What the memory assumes about the optimizer state, with this result's bytes; None without memory.

    Why: the composed peak keeps each rank's whole optimizer state (the GPU measures it, about 16
    bytes per parameter: an FP32 main gradient, master weight and two Adam moments), as Megatron-LM
    does without ``--use-distributed-optimizer``. Most large runs shard it over the data-parallel
    ranks (ZeRO): Megatron Core's distributed optimizer counts 6 + 12/d bytes per parameter for BF16
    weights with FP32 main gradients where this counts 18, so a reader must know which one the
    number is before comparing it with a run's memory."""
    memory = summary.memory.get(BASELINE) or next(iter(summary.memory.values()), None)
    if memory is None or summary.rank_params <= 0:
        return None
    per_param = (memory.gradients + memory.optimizer_state) / summary.rank_params
    return (f"Memory assumes each rank holds its whole optimizer state (no distributed optimizer, no ZeRO): "
            f"{per_param:.1f} bytes per parameter, measured, of which {memory.gradients / GIB:.1f} GiB are FP32 "
            f"main gradients and {memory.optimizer_state / GIB:.1f} GiB FP32 master weights and Adam moments. "
            "With Megatron-LM's distributed optimizer the master weights and moments divide by the "
            "data-parallel size d (6 + 12/d bytes per parameter instead of 18, BF16 weights included); "
            f"sharding the FP32 main gradients too (ZeRO-2, FSDP) divides their {memory.gradients / GIB:.1f} GiB "
            "as well.")


def _block(block: ModelStepBlock | Mapping[str, Any]) -> ModelStepBlock:
    """The typed block; a checked document's raw block (from a reader not yet converted to
    :class:`~gemm_bench.results.typed.Result`: ``report.layout_step``) goes through the one parser."""
    return block if isinstance(block, ModelStepBlock) else parse_model_step(block)


def part_times(block: ModelStepBlock | Mapping[str, Any], precision: str
               ) -> tuple[PartTimes, PartTimes, PartTimes] | None:
    """(medians, first quartiles, third quartiles) of one precision's parts, or None if one is missing."""
    typed = _block(block)
    items = [typed.part("embedding"), typed.part("head"), typed.part("layer-first", precision),
             typed.part("layer-cached", precision)]
    found = [i for i in items if i is not None]
    if len(found) < len(items):
        return None
    # the layer steps' attention kernels (their profiles), the same for the quartiles: a window's bound
    first, cached = _attention_ms(found[2]), _attention_ms(found[3])

    def times(ms: list[float]) -> PartTimes:
        embedding, head, layer_first, layer_cached = ms
        return PartTimes(embedding, head, layer_first, layer_cached, attention_first=first, attention_cached=cached)

    medians = times([_ms(i) for i in found])
    low = times([i.quartiles()[0] for i in found])
    high = times([i.quartiles()[1] for i in found])
    return medians, low, high


def _attention_ms(item: ModelStepPart) -> float | None:
    """The attention kernels' ms in a layer step's profiled breakdown (None where it was not profiled)."""
    return None if item.breakdown is None else item.breakdown.parts_ms.get(ATTENTION)


def _ms(item: ModelStepPart) -> float:
    assert item.ms is not None, "a measured part has its time"
    return item.ms


def optimizer_line(block: ModelStepBlock | Mapping[str, Any]) -> OptimizerLine | None:
    """The optimizer's line through its smallest and largest measured sizes, or None with fewer than two."""
    points = sorted((i.params, i.ms) for i in _block(block).parts
                    if i.part == "optimizer" and i.measured and i.params is not None and i.ms is not None)
    if len(points) < 2:
        return None
    (n0, t0), (n1, t1) = points[0], points[-1]
    return OptimizerLine((n0, n1), (t0, t1))


def model_step_summary(result: Result, config: ModelConfig | None = None) -> ModelStep | None:
    """The model step of a checked result for ``config`` (the page's question; default: the stored
    config), or None when the result has none that answers it (none measured, another vocabulary,
    a part missing)."""
    block = result.model_step
    config = config if config is not None else result.config
    if block is None or config is None or not block.answers(config):
        return None
    line = optimizer_line(block)
    if line is None:
        return None
    params = rank_parameters(config, block.layer_params)
    parts = {p: t for p in PRECISIONS if (t := part_times(block, p)) is not None}
    if BASELINE not in parts:
        return None
    device = result.device.name
    peak = peak_tflops(device, "bf16")
    medians = {p: t[0] for p, t in parts.items()}
    quartiles = {p: (t[1], t[2]) for p, t in parts.items()}
    rows = {g: tuple(composed_rows(config, medians, quartiles, line, params, microbatches=g, peak_bf16_tflops=peak))
            for g in sorted({1, config.num_microbatches})}
    capacity = block.capacity_bytes
    mem, fit, predicted = {}, {}, {}
    for p in parts:
        m = block.memory.get(p)
        if m is None:
            continue
        mem[p] = memory(m, params, layers=config.measured_layers)
        fit[p] = layers_that_fit(m, capacity, layer_params=block.layer_params, vocab_params=vocab_parameters(config),
                                 hidden_size=config.hidden_size)
        predicted[p] = largest_microbatch_predicted(m, params, layers=config.measured_layers, capacity=capacity)
    search = block.largest_microbatch
    found = dict(search.found) if search is not None else {}
    return ModelStep(config, device, block.run_id, rows, mem, fit, found, predicted,
                     search.layers if search is not None else 0, capacity, params,
                     {g: _window_saving(config, medians, line.at(params), g) for g in rows}
                     if config.windowed_share else {})


def _window_saving(config: ModelConfig, medians: Mapping[str, PartTimes], optimizer_ms: float, g: int
                   ) -> dict[str, float | None]:
    """Per recipe, the share of the step at ``g`` micro-batches that taking the windowed layers' attention out
    entirely would save (:func:`~gemm_bench.question.model_step.without_windowed_attention`)."""
    out: dict[str, float | None] = {}
    for precision, parts in medians.items():
        bound = without_windowed_attention(parts, config.windowed_share)
        layers = config.measured_layers
        out[precision] = None if bound is None else 1 - (
            step_ms(bound, layers=layers, microbatches=g, optimizer_ms=optimizer_ms)
            / step_ms(parts, layers=layers, microbatches=g, optimizer_ms=optimizer_ms))
    return out


def attention_note(summary: ModelStep) -> str | None:
    """The note a model whose attention the layer step does not time as it runs needs under its step: a
    sliding window is timed as full causal attention, with the most it could save per recipe (a bound from
    the profiled attention kernels, the most over every G the table shows: the G = 1 row's speedups can move
    more than the question's G's); attention sinks are not timed at all, and add time back. None for a model
    with neither."""
    if not summary.window_saving:
        return _sinks_words(summary.config, window=False) or None
    sinks = _sinks_words(summary.config, window=True)
    sinks = f" {sinks}" if sinks else ""
    words = summary.config.window_words()
    known: dict[str, float] = {}
    moved: list[float] = []
    for saving in summary.window_saving.values():
        found = {p: v for p, v in saving.items() if v is not None}
        known.update({p: max(v, known.get(p, v)) for p, v in found.items()})
        base = found.get(BASELINE)
        moved += [abs((1 - base) / (1 - v) - 1) for p, v in found.items() if p != BASELINE and base is not None]
    if not known:
        return (f"{words[0].upper()}{words[1:]}; the layer step times full causal attention, and this result's "
                "layer steps were not profiled, so what the window saves is not bounded." + sinks)
    each = ", ".join(f"{v:.1%} ({PRECISIONS[p].display})" for p, v in known.items())
    text = (f"{words[0].upper()}{words[1:]}; the layer step times full causal attention, which overstates their "
            "attention. Taking it out of those layers entirely (its kernels in the profiled layer steps) would "
            f"shorten the step by at most {each}: a bound, not an estimate.")
    if moved:
        # whatever share f of those kernels a window saves, a speedup (T_b - f A_b) / (T_p - f A_p) is monotonic
        # in f, so it lies between the measured one (f = 0) and the bound's (f = 1)
        text += (f" Every recipe runs the same BF16 attention, so no speedup over BF16 moves by more than "
                 f"{max(moved):.1%}.")
    return text + sinks


def _sinks_words(config: ModelConfig, *, window: bool) -> str:
    """"Its attention sinks ... are not timed: ...", where the model has them ("" otherwise); with a window,
    that they take back what it saves."""
    if not config.attention_sinks:
        return ""
    text = f"Its {SINKS_NOT_TIMED}"
    return text + (", windowed or not, so they take back some or all of what a window saves." if window else ".")


def other_vocabulary(result: Result, config: ModelConfig | None) -> tuple[int, int] | None:
    """(the padded vocabulary the result's model step was measured at, the question's) where they
    differ, else None. The embedding, output layer and loss are measured at one vocabulary and
    cannot be recomposed for another (issue 43): the page's other ``vocab_size`` (left out of the
    question's hash) needs a GPU run, and no model-step number of this result answers it."""
    block = result.model_step
    if block is None or config is None or config.padded_vocab_size is None:
        return None
    if block.padded_vocab_size == config.padded_vocab_size:
        return None
    return block.padded_vocab_size, config.padded_vocab_size


def other_vocabulary_text(measured: int, asked: int) -> str:
    """The one wording of a model step measured at another vocabulary: the role, the directive's
    warning and the refresh plan say it alike."""
    return (f"the model step was measured at a padded vocabulary of {measured:,} tokens, not the question's "
            f"{asked:,}: its embedding, output layer and loss cannot be recomposed for another vocabulary; a GPU "
            f"run measures them at {asked:,} (gemm-bench refresh)")


def part_absence(result: Result, precision: str) -> tuple[str, str]:
    """(status, reason) of a precision's model step without a number: its layer parts' stored failure
    or unsupported verdict (``failed``, "CUDA out of memory ..."; a part refused at the door reads
    failed with the door's reason), ("", "is not in this result") when no part of it was stored, or
    ("", "") when the block answers nothing at all."""
    block = result.model_step
    if block is None:
        return "", ""
    for item in block.parts:
        if item.precision == precision and item.part.startswith("layer") and not item.measured:
            return item.status, item.reason
    if precision not in {i.precision for i in block.parts}:
        return "", "are not in this result (not measured for this recipe)"
    return "", "are incomplete in this result"


def largest_microbatch_absence(result: Result, precision: str) -> str:
    """Why a precision has no largest micro-batch: the search's stored failure, or not searched."""
    search = result.model_step.largest_microbatch if result.model_step is not None else None
    failed = search.failed.get(precision) if search is not None else None
    if failed is not None:
        return f"the search on the GPU failed: {failed}"
    return "the largest micro-batch was not searched on the GPU in this result"
