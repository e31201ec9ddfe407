"""The ``layer`` modes: one ``te.TransformerLayer`` forward + backward, timed as one region.

What is timed, and what is not, is :data:`gemm_bench.measure.step.WHAT_IS_TIMED`. The timing discipline is
the GEMMs': competitors of :class:`gemm_bench.measure.timing.Interleaver` (warm-up by time, L2 flushed
before each region, BF16 and every recipe interleaved round by round). The graphed variant captures
forward and backward with ``te.make_graphed_callables`` (the fix maintainers give for host
overhead at small shapes) and is its own mode, ``layer-graphed``.

Imports torch and Transformer Engine.
"""

from __future__ import annotations

import datetime as dt
import inspect
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import torch
import transformer_engine.pytorch as te

from gemm_bench.measure.backends.te import make_recipe
from gemm_bench.measure.backends.te import support as te_support
from gemm_bench.measure.step import LAYER_MODES, layer_cell, unsupported_reason
from gemm_bench.measure.timing import Competitor, Mark, Samples
from gemm_bench.question.config import ModelConfig
from gemm_bench.question.plan import Support
from gemm_bench.question.question import Question

#: The runner's ``_time_group``: build and probe each competitor, time the survivors interleaved;
#: returns (samples per competitor per region, failure message per competitor).
TimeGroup = Callable[[dict[str, Callable[[], Competitor]]], tuple[dict[str, dict[str, Samples]], dict[str, str]]]

REGION = "step"
GRAPH_WARMUP_ITERS = 3


def build_layer(config: ModelConfig) -> Any:
    """The measured layer: the config's shapes, BF16 parameters, no bias, no dropout."""
    return te.TransformerLayer(
        config.hidden_size, config.ffn_hidden_size, config.num_attention_heads,
        num_gqa_groups=config.query_groups, kv_channels=config.head_dim,
        hidden_dropout=0.0, attention_dropout=0.0, self_attn_mask_type="causal",
        params_dtype=torch.bfloat16, device="cuda", fuse_qkv_params=True, bias=False,
        activation="swiglu" if config.swiglu else "gelu",
        seq_length=config.seq_length, micro_batch_size=config.micro_batch_size,
    )


def _graph(layer: Any, sample: torch.Tensor, recipe: Any) -> Any:
    """``te.make_graphed_callables`` with the recipe, across TE's renamed keyword arguments."""
    params = inspect.signature(te.make_graphed_callables).parameters
    enabled = recipe is not None
    if "enabled" in params:  # TE >= 2.9 names: enabled / recipe
        kwargs: dict[str, Any] = {"enabled": enabled, "recipe": recipe}
    else:
        kwargs = {"fp8_enabled": enabled, "fp8_recipe": recipe}
    return te.make_graphed_callables(layer, (sample,), num_warmup_iters=GRAPH_WARMUP_ITERS, **kwargs)


def layer_step_competitor(config: ModelConfig, precision_id: str, *, graphed: bool = False) -> Competitor:
    """One training step of the layer under the precision's ``te.autocast`` (one timed region)."""
    reason = unsupported_reason(config)
    if reason:
        raise ValueError(reason)
    layer = build_layer(config)
    recipe = make_recipe(precision_id)
    enabled = recipe is not None
    shape = (config.seq_length, config.micro_batch_size, config.hidden_size)  # TE's default "sbhd"
    x = torch.randn(*shape, device="cuda", dtype=torch.bfloat16, requires_grad=True)
    dy = torch.randn(*shape, device="cuda", dtype=torch.bfloat16)
    forward: Callable[[torch.Tensor], torch.Tensor] = _graph(layer, x, recipe) if graphed else layer

    def iteration(mark: Mark) -> None:
        mark(REGION, "start")
        with te.autocast(enabled=enabled, recipe=recipe):
            y = forward(x)
        y.backward(dy)
        mark(REGION, "end")
        x.grad = None
        for p in layer.parameters():
            p.grad = None

    return iteration


def _now() -> str:
    return dt.datetime.now(dt.timezone.utc).replace(microsecond=0).isoformat()


def measure_layer_step(question: Question, precisions: Sequence[str], time_group: TimeGroup, *,
                       graphed: bool = False, support: Mapping[str, Support] | None = None,
                       modes: Sequence[str] | None = None) -> list[dict[str, Any]]:
    """Layer cells (``doc["layer"]``) for ``layer`` and, with ``graphed``, ``layer-graphed``.

    ``modes`` names the layer modes to time instead (the runner passes what was asked, so
    ``--modes layer-graphed`` alone does not also time the eager step). Every precision of one
    mode is timed in one interleaved group with BF16, so a step speedup is always between cells
    of one group. Unsupported configs and precisions become ``unsupported`` cells with the
    reason; a precision that raises becomes ``failed`` with the message.
    """
    if modes is None:
        modes = LAYER_MODES if graphed else LAYER_MODES[:1]
    unknown = [m for m in modes if m not in LAYER_MODES]
    if unknown:
        raise ValueError(f"not layer modes: {', '.join(map(repr, unknown))}; choose from {', '.join(LAYER_MODES)}")
    reason = unsupported_reason(question.config)
    if reason:
        return [layer_cell(m, p, "unsupported", reason=reason) for m in modes for p in precisions]
    config = question.config
    assert config is not None  # unsupported_reason(None) is a reason
    support = support if support is not None else te_support()
    cells: list[dict[str, Any]] = []
    for mode in modes:
        runnable = []
        for p in precisions:
            s = support.get(p)
            if s is not None and not s.available:
                cells.append(layer_cell(mode, p, "unsupported", reason=s.reason))
            else:
                runnable.append(p)
        graph = mode == "layer-graphed"

        def builder(p: str, graph: bool = graph) -> Callable[[], Competitor]:
            return lambda: layer_step_competitor(config, p, graphed=graph)

        builders = {p: builder(p) for p in runnable}
        samples, failures = time_group(builders)
        for p in runnable:
            if p in failures:
                cells.append(layer_cell(mode, p, "failed", reason=failures[p]))
            else:
                timed = samples[p][REGION]
                cells.append(layer_cell(mode, p, "measured", ms=round(timed.median, 6), stats=timed.to_stats(),
                                        measured_at=_now()))
    return cells
