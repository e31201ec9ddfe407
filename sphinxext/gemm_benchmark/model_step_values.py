"""Values of the model's training step that roles quote (issue 32): tokens/s per GPU, model TFLOP/s,
MFU, the model step's speedup over BF16 (with its spread), peak memory and its difference from
BF16, and the largest micro-batch; computed once from the directive's
:class:`~gemm_bench.report.report.Report` (:meth:`~gemm_bench.report.report.Report.model_step` for
the page's question: its G and layers), like every other value (:mod:`.values`).

Keys are :func:`~gemm_benchmark.records.value_key` ``(kind, "layer-graphed", precision, "G=<g>")``:
the model step is composed of GPU times (graph replays), so its roles name the ``layer-graphed``
mode, and the optional last word picks G (``G=1`` or the question's G; default the question's).

Registering the roles (``roles.py`` is another helper's; three small additions there):

1. ``ROLES.update({spec["name"]: RoleSpec(**spec) for spec in MODEL_STEP_ROLES})`` after ``ROLES``;
2. in ``_lookup``, for ``node["kind"] in MODEL_STEP_KINDS``: skip ``resolve_gemm`` and use
   ``gemm = model_step_g_key(node["gemm"], record_default_g)`` (``"G=8"``) as the value key's last
   word (the record's question G is the default: :func:`default_g_key` reads it from the values);
3. in ``values.device_values``: ``out.update(model_step_values(report, where))`` for each report.
"""

from __future__ import annotations

from gemm_bench.question.precisions import BASELINE, PRECISIONS
from gemm_bench.report.model_step import GIB, ModelStep
from gemm_bench.report.report import Report
from gemm_benchmark.records import Value, value_key

MODE = "layer-graphed"
#: The roles' specifications, as keyword arguments of ``roles.RoleSpec`` (this module sits below
#: ``roles`` and ``values`` in the extension's layers, so it imports neither).
MODEL_STEP_ROLES: tuple[dict[str, str], ...] = (
    {"name": "gemm-tokens", "syntax": "NAME[@DEVICE] layer-graphed PRECISION [G=N]", "gemm": "optional",
     "description": "Tokens per second per GPU of the model's training step (one rank's embedding, layers, output "
                    "layer, loss and optimizer over G micro-batches, composed of measured parts; collectives "
                    "excluded).",
     "example": "llama layer-graphed fp8-delayed"},
    {"name": "gemm-mfu", "syntax": "NAME[@DEVICE] layer-graphed PRECISION [G=N]", "gemm": "optional",
     "description": "Model FLOPs utilization: Megatron-LM's FLOP count of the step over its time, against the GPU's "
                    "dense BF16 peak (whatever the recipe).",
     "example": "llama layer-graphed fp8-current G=1"},
    {"name": "gemm-model-tflops", "syntax": "NAME[@DEVICE] layer-graphed PRECISION [G=N]", "gemm": "optional",
     "description": "Model TFLOP/s per GPU of the training step (Megatron-LM's count).",
     "example": "llama layer-graphed bf16"},
    {"name": "gemm-model-speedup", "syntax": "NAME[@DEVICE] layer-graphed PRECISION [G=N]", "gemm": "optional",
     "description": "Speedup vs BF16 of the model's training step per micro-batch, with its spread (every part's "
                    "quartiles composed).",
     "example": "llama layer-graphed fp8-delayed"},
    {"name": "gemm-memory", "syntax": "NAME[@DEVICE] layer-graphed PRECISION", "gemm": "none",
     "description": "Peak GPU memory of the model's training step on one rank, composed of the allocator's measured "
                    "parts (weights, FP8 weight copies, activations, gradients, optimizer state).",
     "example": "llama layer-graphed fp8-delayed"},
    {"name": "gemm-memory-delta", "syntax": "NAME[@DEVICE] layer-graphed PRECISION", "gemm": "none",
     "description": "Peak memory of the model step minus BF16's: \"0.4 GiB more\" or \"1.2 GiB less\".",
     "example": "llama layer-graphed fp8-delayed"},
    {"name": "gemm-largest-microbatch", "syntax": "NAME[@DEVICE] layer-graphed PRECISION", "gemm": "none",
     "description": "The largest micro-batch whose step fitted this GPU (found on the GPU with a real model of the "
                    "stated layers; an out-of-memory is the answer).",
     "example": "llama layer-graphed fp8-current"},
)
MODEL_STEP_KINDS: tuple[str, ...] = tuple(spec["name"] for spec in MODEL_STEP_ROLES)
#: The value key's last word of the question's own G when a role names none.
DEFAULT_G = "G"


def g_key(microbatches: int) -> str:
    return f"G={microbatches}"


def model_step_g_key(text: str) -> str:
    """The key word of a role's optional G (``G=8``, ``g8`` or ``8``; empty: the question's G)."""
    word = text.strip().upper().removeprefix("G").removeprefix("=")
    return g_key(int(word)) if word.isdigit() and int(word) > 0 else DEFAULT_G


def _absent(out: dict[str, Value], kinds: tuple[str, ...], precision: str, keys: tuple[str, ...], why: str) -> None:
    for kind in kinds:
        for key in keys:
            out[value_key(kind, MODE, precision, key)] = Value("", why)


def model_step_values(report: Report, where: str, precisions: tuple[str, ...] | None = None) -> dict[str, Value]:
    """Every model-step value of one device's report (for the page's question: ``report.config``)."""
    summary: ModelStep | None = report.model_step()
    out: dict[str, Value] = {}
    shown = precisions or tuple(PRECISIONS)
    if summary is None:
        why = f"{where}: no model step in this result for this question (its vocabulary, or not measured)"
        for p in shown:
            _absent(out, MODEL_STEP_KINDS, p, (DEFAULT_G, g_key(1)), why)
        return out
    g_default = summary.microbatches
    for g, rows in summary.rows.items():
        keys = (g_key(g), DEFAULT_G) if g == g_default else (g_key(g),)
        for row in rows:
            at = f"{where}, {PRECISIONS[row.precision].display}, G = {g}"
            for key in keys:
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
    base = summary.memory.get(BASELINE)
    for p, m in summary.memory.items():
        at = f"{where}, {PRECISIONS[p].display}"
        out[value_key("gemm-memory", MODE, p, DEFAULT_G)] = Value(
            f"{m.peak / GIB:.1f} GiB", f"{m.peak / GIB:.2f} GiB peak of the model step on one rank: {at}")
        if base is not None:
            delta = (m.peak - base.peak) / GIB
            out[value_key("gemm-memory-delta", MODE, p, DEFAULT_G)] = Value(
                f"{abs(delta):.1f} GiB {'more' if delta >= 0 else 'less'}", f"{delta:+.2f} GiB against BF16: {at}")
    for p, largest in summary.largest_microbatch.items():
        out[value_key("gemm-largest-microbatch", MODE, p, DEFAULT_G)] = Value(
            str(largest), f"largest micro-batch that fitted with {summary.search_layers} layers: {where}")
    return out
