"""Values of the model's step that roles quote (issue 32): tokens/s per GPU, model TFLOP/s,
MFU, the model step's speedup over BF16 (with its spread), peak memory and its difference from
BF16, and the largest micro-batch; computed once from the directive's
:class:`~gemm_bench.report.report.Report` (:meth:`~gemm_bench.report.report.Report.model_step` for
the page's question: its G and layers), like every other value (:mod:`.values`).

Keys are :func:`~gemm_benchmark.records.value_key` ``(kind, "layer-graphed", precision, "G=<g>")``:
the model step is composed of GPU times (graph replays), so its roles name the ``layer-graphed``
mode, and the optional last word picks G: ``G=1`` or the question's own G (``G=8``); without it,
the question's (key word :data:`DEFAULT_G`). Memory and the largest micro-batch do not depend on G
and take no G word. Every value a role may ask for is recorded, a number or the reason there is
none (not measured on this GPU, the recipe's parts failed, not searched), so a role without a
number always warns with the reason, never a silent "n/a".

Everything is read from the typed result (``report.result``, :mod:`gemm_bench.results.typed`) and the
report's composed model step, never the JSON dict: a part the door refused is failed there, with its reason.

The roles are registered by :mod:`.roles` (``ROLES.update`` from :data:`MODEL_STEP_ROLES`, the G
word read with :func:`model_step_g_key`); :func:`.values.device_values` records these values.
"""

from __future__ import annotations

import re

from gemm_bench.question.model_step import unsupported_reason
from gemm_bench.question.precisions import BASELINE, PRECISIONS
from gemm_bench.report.model_step import (
    GIB,
    ModelStep,
    capacity_text,
    largest_microbatch_absence,
    memory_delta_text,
    other_vocabulary,
    other_vocabulary_text,
    part_absence,
)
from gemm_bench.report.model_step_breakdown import model_bars
from gemm_bench.report.report import Report
from gemm_bench.results.typed import Result
from gemm_benchmark.breakdown_values import BREAKDOWN_ITEMS, NOT_IN_RESULT, breakdown_values
from gemm_benchmark.records import Value, value_key

MODE = "layer-graphed"
#: Where the model's step goes (issue 33): the layer step's ``gemm-breakdown`` for the composed step at
#: the question's G; registered by :mod:`.roles` with the items of :data:`BREAKDOWN_ITEMS`.
MODEL_BREAKDOWN = "gemm-model-breakdown"
#: The roles' specifications, as keyword arguments of ``roles.RoleSpec`` (this module sits below
#: ``roles`` and ``values`` in the extension's layers, so it imports neither).
MODEL_STEP_ROLES: tuple[dict[str, str], ...] = (
    {"name": "gemm-tokens", "syntax": "NAME[@DEVICE] layer-graphed PRECISION [G=N]", "gemm": "optional",
     "description": "Tokens per second per GPU of the model's step (one rank's embedding, layers, output "
                    "layer, loss and optimizer over G micro-batches per optimizer step, composed of measured parts; "
                    "collectives excluded). ``G=1`` or the question's G (``:num-microbatches:``, default 8); "
                    "without it, the question's.",
     "example": "llama layer-graphed fp8-delayed G=1"},
    {"name": "gemm-mfu", "syntax": "NAME[@DEVICE] layer-graphed PRECISION [G=N]", "gemm": "optional",
     "description": "Model FLOPs utilization of the model's step: Megatron-LM's FLOP count over the step's "
                    "time, against the GPU's dense BF16 peak whatever the recipe (so FP8 may pass 100%).",
     "example": "llama layer-graphed fp8-current"},
    {"name": "gemm-model-tflops", "syntax": "NAME[@DEVICE] layer-graphed PRECISION [G=N]", "gemm": "optional",
     "description": "Model TFLOP/s per GPU of the model's step (Megatron-LM's count, attention included).",
     "example": "llama layer-graphed bf16"},
    {"name": "gemm-model-speedup", "syntax": "NAME[@DEVICE] layer-graphed PRECISION|fastest [G=N]",
     "gemm": "optional",
     "description": "Speedup vs BF16 of the model's step per micro-batch (its tokens per second over "
                    "BF16's), with its spread (every part's quartiles composed). ``fastest``: the answer of the "
                    "summary's sentence for the model step, by the rule of ``gemm-fastest``.",
     "example": "llama layer-graphed fp8-delayed G=1"},
    {"name": "gemm-memory", "syntax": "NAME[@DEVICE] layer-graphed PRECISION", "gemm": "none",
     "description": "Peak GPU memory of the model's step on one rank, composed of the allocator's measured "
                    "parts (weights, FP8 weight copies, activations, gradients, optimizer state); its title says "
                    "whether it fits the GPU and how many layers do.",
     "example": "llama layer-graphed fp8-delayed"},
    {"name": "gemm-memory-delta", "syntax": "NAME[@DEVICE] layer-graphed PRECISION", "gemm": "none",
     "description": "Peak memory of the model step minus BF16's: \"0.4 GiB more\", \"1.2 GiB less\" or \"the same\".",
     "example": "llama layer-graphed fp8-delayed"},
    {"name": "gemm-largest-microbatch", "syntax": "NAME[@DEVICE] layer-graphed PRECISION", "gemm": "none",
     "description": "The largest micro-batch whose step fitted this GPU (found on the GPU with a real model of the "
                    "stated layers; an out-of-memory is the answer).",
     "example": "llama layer-graphed fp8-current"},
)
MODEL_STEP_KINDS: tuple[str, ...] = tuple(spec["name"] for spec in MODEL_STEP_ROLES)
#: Kinds whose value depends on G (the others take no G word).
G_KINDS: tuple[str, ...] = ("gemm-tokens", "gemm-mfu", "gemm-model-tflops", "gemm-model-speedup")
#: The value key's last word of the question's own G when a role names none.
DEFAULT_G = "G"
#: Not a role: the key under which a result records the question's G (text: the number), so a
#: role asking for another G is told which ones there are.
QUESTION_G = "model-step-g"

_G_WORD = re.compile(r"(?:G\s*=?\s*)?(\d+)", re.IGNORECASE)


def g_key(microbatches: int) -> str:
    return f"G={microbatches}"


def model_step_g_key(text: str) -> str:
    """The key word of a role's optional G (``G=8``, ``g8`` or ``8``; empty: the question's G).

    A word that is no G of at least 1 raises :class:`ValueError`: the role warns, rather than quote
    the question's G for a G the author did not mean."""
    if not text.strip():
        return DEFAULT_G
    found = _G_WORD.fullmatch(text.strip())
    if found is None or int(found.group(1)) < 1:
        raise ValueError(f"{text.strip()!r} is not a G of at least 1 (write G=1 or G=8)")
    return g_key(int(found.group(1)))


def _absence_words(status: str, reason: str) -> str:
    """"the model step failed: CUDA out of memory", or why its parts give no number."""
    if status:
        return f"the model step {status}: {reason}" if reason else f"the model step {status}"
    return f"the model step's parts {reason or 'were not measured'}"


def _absent(out: dict[str, Value], kinds: tuple[str, ...], precision: str, keys: tuple[str, ...], why: str,
            status: str = "", reason: str = "") -> None:
    for kind in kinds:
        for key in keys if kind in G_KINDS else (DEFAULT_G,):
            out[value_key(kind, MODE, precision, key)] = Value("", why, status, reason)


def model_step_values(report: Report, where: str, precisions: tuple[str, ...] | None = None) -> dict[str, Value]:
    """Every model-step value of one device's report (for the page's question: ``report.config``)."""
    summary: ModelStep | None = report.model_step()
    out: dict[str, Value] = {}
    shown = tuple(precisions or PRECISIONS)
    if summary is None:
        # The page's question decides (``report.config``, issue 43): a page whose model carries a vocabulary
        # is told that the result predates the model step, whatever vocabulary the result stored.
        reason = unsupported_reason(report.config)
        other = other_vocabulary(report.result, report.config)
        why = (f"{where}: no model step for this question: {reason}" if reason
               else f"{where}: no model step for this question: {other_vocabulary_text(*other)}" if other
               else f"{where}: no model step in this result (the next refresh measures it)")
        for p in shown:
            _absent(out, MODEL_STEP_KINDS, p, (DEFAULT_G, g_key(1)), why)
            for item in BREAKDOWN_ITEMS:
                out[value_key(MODEL_BREAKDOWN, MODE, p, item)] = Value("", why)
        return out
    g_default = summary.microbatches
    out[value_key(QUESTION_G, MODE, "")] = Value(str(g_default), f"G = {g_default}: {where}")
    keys_of = {g: (g_key(g), DEFAULT_G) if g == g_default else (g_key(g),) for g in summary.rows}
    for p in shown:
        if all(summary.row(p, g) is None for g in summary.rows):
            status, reason = part_absence(report.result, p)
            why = f"{where}, {PRECISIONS[p].display}: {_absence_words(status, reason)}"
            _absent(out, G_KINDS, p, tuple(k for keys in keys_of.values() for k in keys), why, status, reason)
    for g, rows in summary.rows.items():
        for row in rows:
            at = f"{where}, {PRECISIONS[row.precision].display}, G = {g}"
            for key in keys_of[g]:
                out[value_key("gemm-tokens", MODE, row.precision, key)] = Value(
                    f"{row.tokens_per_s:,.0f}", f"{row.tokens_per_s:,.1f} tokens/s per GPU: {at}")
                out[value_key("gemm-model-tflops", MODE, row.precision, key)] = Value(
                    f"{row.tflops:.0f} TFLOP/s", f"{row.tflops:.1f} model TFLOP/s per GPU: {at}")
                out[value_key("gemm-mfu", MODE, row.precision, key)] = (
                    Value(f"{row.mfu:.0%}", f"{row.mfu:.1%} of the dense BF16 peak: {at}") if row.mfu
                    else Value("", f"{at}: no published BF16 peak for this GPU"))
                out[value_key("gemm-model-speedup", MODE, row.precision, key)] = (
                    Value(f"{row.speedup:.2f}×", f"{row.speedup:.3f}× BF16 (spread {row.speedup_low:.3f}–"
                          f"{row.speedup_high:.3f}): {at}", low=row.speedup_low, high=row.speedup_high)
                    if row.speedup else Value("", f"{at}: no BF16 model step of the same run"))
    _memory_values(out, summary, shown, where, report.result)
    bars = model_bars(report.result.model_step, summary)
    for p in shown:
        breakdown_values(out, MODEL_BREAKDOWN, MODE, bars, p,
                         f"{where}, {PRECISIONS[p].display}, the model's step per micro-batch at G = {g_default}",
                         NOT_IN_RESULT)
    return out


def _memory_values(out: dict[str, Value], summary: ModelStep, shown: tuple[str, ...], where: str,
                   result: Result) -> None:
    base = summary.memory.get(BASELINE)
    capacity = capacity_text(summary.capacity_bytes)
    for p in shown:
        at = f"{where}, {PRECISIONS[p].display}"
        m = summary.memory.get(p)
        if m is None:
            status, reason = part_absence(result, p)
            why = f"{at}: {_absence_words(status, reason)}"
            out[value_key("gemm-memory", MODE, p, DEFAULT_G)] = Value("", why, status, reason)
            out[value_key("gemm-memory-delta", MODE, p, DEFAULT_G)] = Value("", why, status, reason)
        else:
            fits = (f"fits {capacity}" if summary.fits(p) else
                    f"more than {capacity}: {summary.layers_that_fit[p]} of "
                    f"{summary.config.measured_layers} layers fit with the embedding and output layer")
            out[value_key("gemm-memory", MODE, p, DEFAULT_G)] = Value(
                f"{m.peak / GIB:.1f} GiB", f"{m.peak / GIB:.2f} GiB peak of the model step on one rank ({fits}): {at}")
            out[value_key("gemm-memory-delta", MODE, p, DEFAULT_G)] = (
                Value(memory_delta_text((m.peak - base.peak) / GIB),
                      f"{(m.peak - base.peak) / GIB:+.2f} GiB against BF16's peak: {at}") if base is not None
                else Value("", f"{at}: no BF16 memory in the same run"))
        largest = summary.largest_microbatch.get(p)
        out[value_key("gemm-largest-microbatch", MODE, p, DEFAULT_G)] = (
            Value(str(largest) if largest else "none", (
                f"the largest micro-batch that fitted with {summary.search_layers} layers: {at}" if largest else
                f"not even a micro-batch of 1 fitted with {summary.search_layers} layers: {at}"))
            if largest is not None else Value("", f"{at}: {largest_microbatch_absence(result, p)}"))
