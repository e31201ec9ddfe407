"""The largest micro-batch found on the GPU, beside the one the composition predicts (issue 41 item 3).

The layout-search study (:mod:`gemm_bench.results.layout_search_schema`) holds, per GPU kind and model,
the largest micro-batch whose whole step the preset layout's rank, built for real, ran. This module
picks the search that answers a page's question (the same model, GPU kind, layout, tokens per rank,
layers and optimizer shards; anything else was not searched: a number found for another rank is never
shown for this one) and words it: the number, its difference from the prediction, and where it was
found (a GPU's capacity emulated on a larger one says so). Pure: no Sphinx, no torch; it reads valid
study documents only.
"""

from __future__ import annotations

import dataclasses
import statistics
from collections.abc import Mapping, Sequence
from typing import Any

from gemm_bench.question.config import ConfigError, ModelConfig
from gemm_bench.question.devices import device_label, device_slug
from gemm_bench.question.layout import ParallelLayout, microbatches_at
from gemm_bench.question.stage_shape import searched_rank
from gemm_bench.results.layout_search_schema import NAME, bounded, times_step
from gemm_bench.results.studies import file_name

GIB = 1 << 30
NOT_SEARCHED = "not searched"


@dataclasses.dataclass(frozen=True)
class Search:
    """One model's search on one GPU kind, as the page quotes it."""

    answers_for: str
    measured_on: str
    emulated: bool
    capacity_bytes: int
    tokens: int
    layers: int
    optimizer_shards: int
    recipes: Mapping[str, Mapping[str, Any]]
    #: ``only`` (the whole rank of PP 1) or ``first`` (a pipeline's first stage) and its micro-batches in flight.
    stage: str = "only"
    in_flight: int = 1
    #: The main gradients' dtype and FP8 primary weights, as the matched layout has them (the layout's words,
    #: which the search stored and the match compares, name both: "BF16 gradient reduce", "FP8 parameter gather").
    grad_dtype: str = "fp32"
    fp8_param_gather: bool = False
    #: The layout the search answers (its G and global batch compose the step at each micro-batch).
    layout: ParallelLayout | None = None
    #: The model's id in the study (where a refusal points).
    model: str = ""

    def where(self) -> str:
        """Where the number was found: "found on the GPU", or the emulation said in words."""
        if not self.emulated:
            return "found on the GPU"
        on = device_label(self.measured_on)
        return f"{device_label(self.answers_for)} capacity emulated on {_article(on)} {on}"


def _article(label: str) -> str:
    """"an" before a GPU name read with a vowel sound first ("an H200", "an A100"), else "a"."""
    return "an" if label[:1].upper() in "AEFHILMNORSX" else "a"


def model_search(docs: Sequence[Mapping[str, Any]], device_name: str, model_id: str, config: ModelConfig,
                 layout: ParallelLayout) -> Search | str | None:
    """The search that answers ``model_id`` with ``layout`` on ``device_name``: a :class:`Search`; None where
    no study file answers for that GPU or it holds no such model; or the reason the model's search does not
    answer this question (the tool did not build it, or it searched another rank)."""
    doc = next((d for d in docs if device_slug(str(d["data"]["answers_for"])) == device_slug(device_name)), None)
    if doc is None or model_id not in doc["data"]["models"]:
        return None
    data = doc["data"]
    if device_slug(str(doc["device"]["name"])) != device_slug(str(data["answers_for"])):
        return (f"the study file of {doc['device']['name']} says it answers for {data['answers_for']}: "
                "it is not used")
    entry = data["models"][model_id]
    if "error" in entry:
        return f"{NOT_SEARCHED} ({entry['error']})"
    try:
        rank = searched_rank(layout, config)
    except ConfigError as exc:
        return f"{NOT_SEARCHED} ({exc})"
    if isinstance(rank, str):
        return f"{NOT_SEARCHED} ({rank})"
    # overlap flags: no byte of memory
    asked = (layout.describe(overlap=False), rank.tokens, rank.layers, rank.optimizer_shards,
             None if rank.stage == "only" else rank.stage, None if rank.stage == "only" else rank.in_flight)
    searched = (entry["layout"], entry["tokens"], entry["layers"], entry["optimizer_shards"], entry.get("stage"),
                entry.get("in_flight"))
    if asked != searched:
        return (f"{NOT_SEARCHED} for this layout (searched: {entry['layout']}, {entry['layers']} layers on "
                f"{entry['tokens']} tokens, optimizer over {entry['optimizer_shards']} ranks)")
    return Search(str(data["answers_for"]), str(data["measured_on"]), bool(data["emulated"]),
                  int(entry["capacity_bytes"]), rank.tokens, rank.layers, rank.optimizer_shards, entry["recipes"],
                  rank.stage, rank.in_flight, rank.grad_dtype, rank.fp8_param_gather, layout, model_id)


def found_text(search: Search | str | None, precision: str) -> str:
    """The cell: the largest micro-batch found ("at least N" where the search stopped at its limit),
    "failed: ..." where the run failed other than by running out of memory, or "not searched"."""
    if not isinstance(search, Search) or precision not in search.recipes:
        return NOT_SEARCHED
    found = search.recipes[precision]
    if "failed" in found:
        return f"failed: {found['failed']}"
    return str(found["largest"]) if bounded(found) else f"at least {found['largest']}"


def difference_text(search: Search | str | None, precision: str, predicted: int) -> str:
    """Found minus predicted ("+1", "0", "-2"; "at least +1" where the search stopped at its limit), or
    "–" where nothing was found."""
    if not isinstance(search, Search) or "largest" not in search.recipes.get(precision, {}):
        return "–"
    found = search.recipes[precision]
    diff = int(found["largest"]) - predicted
    text = f"{diff:+d}" if diff else "0"
    return text if bounded(found) else f"at least {text}"


def _seeded(search: Search) -> bool:
    """Whether any recipe's search started at a stored answer above 1 (a seed of 1 is the search from 1)."""
    return any(isinstance(found, dict) and int(found.get("seed") or 1) > 1 for found in search.recipes.values())


def search_note(search: Search | str | None, predicted_capacity: int) -> str:
    """The sentence under the table: how the number was found, on which capacity (and the emulation's
    caveat), or why this layout has no number found on the GPU."""
    if search is None:
        return ("The largest micro-batch is predicted from the same parts; this layout's rank was not searched "
                "on this GPU.")
    if isinstance(search, str):
        return f"The largest micro-batch is predicted from the same parts; found on the GPU: {search}."
    built = ("the rank built for real" if search.stage == "only" else
             f"the first pipeline stage built for real, {search.in_flight} micro-batches in flight as 1F1B holds "
             "them there, no output layer")
    primary = ", FP8 primary weights in the layers under the FP8 recipes" if search.fp8_param_gather else ""
    how = (f"{built} ({search.layers} layers on {search.tokens:,} tokens, {search.grad_dtype.upper()} main gradients "
           f"whole{primary}, the distributed optimizer's 1 / {search.optimizer_shards} of the master weights and "
           "moments), "
           "its whole step run twice (the second holding the optimizer's moments) at "
           + ("the size a previous search of this GPU found and the next one up first (a larger size never fits "
              "where a smaller did not, so the answer is the same), doubling or bisecting from there where that "
              "answer no longer held, until it ran out of memory" if _seeded(search) else
              "micro-batch sizes doubling from 1, then bisecting, until it ran out of memory"))
    capacity = f"{search.capacity_bytes / GIB:.1f} GiB"
    if search.emulated:
        text = (f"Largest micro-batch found with the {search.where()}: {how}, the allocator capped at the "
                f"{device_label(search.answers_for)}'s {capacity}; the CUDA context and libraries' workspaces "
                f"outside the allocator are the {device_label(search.measured_on)}'s")
    else:
        text = (f"Largest micro-batch found on the GPU: {how}, on the GPU's whole {capacity} (the CUDA context's "
                "share included)")
    if search.capacity_bytes != predicted_capacity:
        text += (f"; the prediction's capacity (what the allocator could hold when the parts were measured) is "
                 f"{predicted_capacity / GIB:.1f} GiB")
    return text + "."


# ------------------------------------------------------------------- the step at the largest micro-batch
@dataclasses.dataclass(frozen=True)
class SizeStep:
    """The rank's step at one micro-batch size, timed at the layout's G for that size: ``step_ms`` the
    samples' median, ``step_ms_range`` their fastest and slowest."""

    micro_batch: int
    microbatches: int
    step_ms: float
    tokens: int
    step_ms_range: tuple[float, float] = (0.0, 0.0)

    @property
    def tokens_per_s(self) -> float:
        """Per GPU: the rank's tokens of a step (micro-batch x its tokens x G) over the step."""
        return self._per_s(self.step_ms)

    @property
    def tokens_per_s_range(self) -> tuple[float, float]:
        """(least, most) tokens per second per GPU over the samples' slowest and fastest."""
        low, high = self.step_ms_range
        return self._per_s(high), self._per_s(low)

    def _per_s(self, step_ms: float) -> float:
        return self.micro_batch * self.tokens * self.microbatches / (step_ms / 1e3)


def larger_step(search: Search | str | None, precision: str) -> tuple[SizeStep, SizeStep] | str | None:
    """(the step at micro-batch 1, the step at the largest found) for ``precision``, each as timed at the
    layout's G for its size; the reason where the timed steps cannot say it (the global batch does not
    divide, or a step was timed at another G than this layout's: the study's words match a layout with
    another global batch and micro-batch that says the same DP and G); None where nothing was timed (no
    search, a largest of 1 or less, an emulated capacity, context parallelism)."""
    if not isinstance(search, Search) or search.layout is None or search.layout.cp > 1:
        return None
    found = search.recipes.get(precision, {})
    if "steps_failed" in found:
        return f"the timing failed: {found['steps_failed']}"
    steps = found.get("steps")
    if not steps:
        return None
    sizes = [(size, microbatches_at(search.layout, size)) for size in (1, int(found["largest"]))]
    for size, g in sizes:
        if g is None:  # before comparing: this layout cannot run the size at all
            return (f"the global batch {search.layout.global_batch_size} does not divide into micro-batches of "
                    f"{size} over DP {search.layout.dp}")
    out = []
    for size, g in sizes:
        (timed_g, samples), = steps[str(size)].items()  # one G per size: the schema's rule
        if int(timed_g) != g:
            where = f"{file_name(NAME, search.answers_for)}: $.data.models.{search.model}.recipes.{precision}"
            return (f"not quoted: the step at micro-batch {size} was timed at G = {timed_g} ({where}.steps.{size}), "
                    f"this layout's G there is {g}")
        out.append(SizeStep(size, g, float(statistics.median(samples)), search.tokens,
                            (float(min(samples)), float(max(samples)))))
    return out[0], out[1]


def context_parallel_untimed(search: Search) -> str | None:
    """Why no timed step is quoted for a layout with context parallelism, else None (and None where the
    study would not have timed the rank anyway: :func:`~gemm_bench.results.layout_search_schema.times_step`
    at CP 1). The search builds the rank on its ``S / CP`` tokens as sequences of their own, so its
    attention runs over ``S / CP`` keys; context parallelism attends each rank's queries to the whole
    sequence's keys (ring attention): a timed step would lack part of the attention the run pays, so the
    study does not time it. The memory it found stands (flash attention's activations grow with the rank's
    tokens, not with the keys)."""
    if search.layout is None or search.layout.cp == 1:
        return None
    stage = search.stage
    if not any(times_step(found, emulated=search.emulated, stage=stage, cp=1)
               for found in search.recipes.values() if "largest" in found):
        return None
    return (f"The rank's step is not timed at its largest micro-batch: at CP {search.layout.cp} the searched "
            f"rank's {search.tokens:,} tokens attend only to one another, where context parallelism attends "
            f"them to the whole sequence of {search.tokens * search.layout.cp:,}, so a timing would lack part "
            "of the attention the run pays.")


def larger_step_text(search: Search | str | None, precision: str) -> str:
    """The cell: "14,210 at 4 (1.06x micro-batch 1's 13,400; 1.02–1.10x over the timed samples)" tokens per
    second per GPU, with ": not told apart from micro-batch 1" where that range holds 1; "–" where nothing
    was timed, or why the timing says nothing."""
    step = larger_step(search, precision)
    if step is None:
        return "–"
    if isinstance(step, str):
        return step
    base, large = step
    (base_low, base_high), (large_low, large_high) = base.tokens_per_s_range, large.tokens_per_s_range
    # judged on the printed digits, so the words never contradict them ("1.00–1.13x" is not called faster)
    low, high = round(large_low / base_high, 2), round(large_high / base_low, 2)
    said = (f"{large.tokens_per_s:,.0f} at {large.micro_batch} ({large.tokens_per_s / base.tokens_per_s:.2f}× "
            f"micro-batch 1's {base.tokens_per_s:,.0f}; {low:.2f}–{high:.2f}× over the timed samples")
    # a tie reads as a tie (issue 43): a ratio whose samples' range holds 1 does not say "faster"
    return said + (": not told apart from micro-batch 1)" if low <= 1.0 <= high else ")")


LARGER_STEP_NOTE = ("Tokens per second per GPU at the largest micro-batch found: the real rank's whole step timed "
                    "(CUDA events, eager, after one untimed step) at that micro-batch and at 1, each at the "
                    "layout's G for that size (the global batch over micro-batch x DP): micro-batch x tokens x G "
                    "over the median step. The range is the ratio over the samples' fastest and slowest; a range "
                    "that holds 1 is not told apart from micro-batch 1. One rank's compute: collectives not in "
                    "it.")
