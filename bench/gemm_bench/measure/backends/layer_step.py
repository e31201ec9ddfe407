"""The ``layer`` modes: one ``te.TransformerLayer`` forward + backward, timed as one region.

What is timed, and what is not, is :data:`gemm_bench.measure.step.WHAT_IS_TIMED`. The timing
discipline is the GEMMs' (:class:`gemm_bench.measure.timing.Interleaver`: warm-up by time, L2 flushed
before each region, BF16 and every recipe interleaved round by round), and one group gives both
modes: its eager rounds are ``layer`` (the step as an eager training loop runs it, host work
included where the GPU waits for it) and its CUDA-graph replays are ``layer-graphed`` (the GPU's
time for the step, as a step captured in CUDA graphs runs it).

Imports torch and Transformer Engine.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable, Collection, Mapping, Sequence
from typing import Any

import torch
import transformer_engine.pytorch as te

from gemm_bench.measure.backends.te import Operands, make_recipe
from gemm_bench.measure.backends.te import support as te_support
from gemm_bench.measure.step import LAYER_MODES, layer_cell, routings, step_breakdown, unsupported_reason
from gemm_bench.measure.timing import Competitor, Mark
from gemm_bench.question.config import ModelConfig
from gemm_bench.question.plan import Support
from gemm_bench.question.question import Question
from gemm_bench.results.energy import tokens_per_gpu

#: The runner's group timer: build and probe each competitor, time the survivors interleaved (as
#: graph replays, with eager rounds beside them, when the second argument is true); the third
#: names the group among the step's groups (its routing); returns the runner's ``Timed``
#: (``samples``, ``eager``, ``failures``, ``kernel_ms``).
TimeGroup = Callable[[dict[str, Callable[[], Competitor]], bool, str], Any]

REGION = "step"


def build_layer(config: ModelConfig, routing: str = "balanced", keep_bf16: Collection[str] | None = None) -> Any:
    """The measured layer of one rank: BF16 parameters, no bias, no dropout.

    A dense model is a ``te.TransformerLayer`` with the rank's shard (heads, KV groups and FFN
    divided by TP: the column-parallel QKV and MLP up, the row-parallel output and MLP down of
    :func:`gemm_bench.question.shapes.layer_gemms`); a mixture of experts or multi-latent
    attention is :class:`~gemm_bench.measure.backends.rank_layer.RankLayer`. ``keep_bf16``: a precision
    plan's projections that run outside the recipe; with it (even empty) every model is a ``RankLayer``
    built from parts, so the plan's steps (all-BF16, all-FP8, mixed) are one and the same layer."""
    if keep_bf16 is not None:
        from gemm_bench.measure.backends.rank_layer import RankLayer

        return RankLayer(config, routing, keep_bf16=keep_bf16, parts=True)
    if config.is_moe or config.is_mla:
        from gemm_bench.measure.backends.rank_layer import RankLayer

        return RankLayer(config, routing)
    tp = config.tensor_model_parallel_size
    return te.TransformerLayer(
        config.hidden_size, config.ffn_hidden_size // tp, config.num_attention_heads // tp,
        num_gqa_groups=config.query_groups // tp, kv_channels=config.head_dim,
        hidden_dropout=0.0, attention_dropout=0.0, self_attn_mask_type="causal",
        params_dtype=torch.bfloat16, device="cuda", fuse_qkv_params=True, bias=False,
        activation="swiglu" if config.swiglu else "gelu",
        # No seq_length / micro_batch_size: with them TE warms its fused bias-dropout-add (and
        # bias-GELU) kernels at construction, for three dtypes at full size, about 10 s per new
        # shape; this layer has no bias, so the step never calls them. Its first (untimed) call
        # compiles whatever the step does use.
    )


def layer_step_competitor(config: ModelConfig, precision_id: str, routing: str = "balanced",
                          shared: Operands | None = None, keep_bf16: Collection[str] | None = None) -> Competitor:
    """One training step of the layer under the precision's ``te.autocast`` (one timed region).

    ``shared``: the BF16 parameters, input and output gradient every precision and routing of the
    group uses (:class:`~gemm_bench.measure.backends.te.Operands`): one copy of a 128-expert layer's
    weights, not one per competitor. ``keep_bf16``: a precision plan's BF16 projections
    (:func:`build_layer`)."""
    reason = unsupported_reason(config)
    if reason:
        raise ValueError(reason)
    layer = build_layer(config, routing, keep_bf16)
    recipe = make_recipe(precision_id)
    enabled = recipe is not None
    shape = (config.seq_length, config.micro_batch_size, config.hidden_size)  # TE's default "sbhd"

    def make_x() -> torch.Tensor:
        return torch.randn(*shape, device="cuda", dtype=torch.bfloat16, requires_grad=True)

    def make_dy() -> torch.Tensor:
        return torch.randn(*shape, device="cuda", dtype=torch.bfloat16)

    x, dy = (shared or Operands()).adopt(layer, make_x, make_dy)
    forward: Callable[[torch.Tensor], torch.Tensor] = layer

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
                       support: Mapping[str, Support] | None = None,
                       modes: Sequence[str] = LAYER_MODES) -> list[dict[str, Any]]:
    """Layer cells (``doc["layer"]``) of ``modes`` (``layer``, ``layer-graphed`` or both).

    Every precision is timed in one interleaved group with BF16, so a step speedup is always
    between cells of one group; with ``layer-graphed`` the group's graph replays give that mode and
    its eager rounds give ``layer``. Unsupported configs and precisions become ``unsupported`` cells
    with the reason; a precision that raises (or cannot be captured, for ``layer-graphed``) becomes
    ``failed`` with the message.
    """
    unknown = [m for m in modes if m not in LAYER_MODES]
    if unknown:
        raise ValueError(f"not layer modes: {', '.join(map(repr, unknown))}; choose from {', '.join(LAYER_MODES)}")
    modes = [m for m in LAYER_MODES if m in modes]
    reason = unsupported_reason(question.config)
    if reason:
        return [layer_cell(m, p, "unsupported", reason=reason) for m in modes for p in precisions]
    config = question.config
    assert config is not None  # unsupported_reason(None) is a reason
    support = support if support is not None else te_support()
    cells: list[dict[str, Any]] = []
    runnable = []
    for p in precisions:
        s = support.get(p)
        if s is not None and not s.available:
            cells += [layer_cell(m, p, "unsupported", reason=s.reason) for m in modes]
        else:
            runnable.append(p)
    if not runnable:
        return cells
    graphed = "layer-graphed" in modes
    shared = Operands()  # one set of BF16 parameters and inputs for every group

    def builder(p: str, routing: str) -> Callable[[], Competitor]:
        return lambda: layer_step_competitor(config, p, routing, shared)

    # One interleaved group per routing (a speedup is always within one group); a second routing's
    # graphs are captured only after the first group's are released (a 128-expert layer's eight
    # graphs and FP8 weight copies do not fit in 80 GB at once).
    for routing in routings(config):
        timed = time_group({p: builder(p, routing) for p in runnable}, graphed, routing)
        cells += _group_cells(timed, runnable, modes, graphed, routing)
    return cells


def _group_cells(timed: Any, runnable: Sequence[str], modes: Sequence[str], graphed: bool,
                 routing: str) -> list[dict[str, Any]]:
    cells = []
    profiled = getattr(timed, "kernels", {})  # the profiled rounds' kernels (always the published rounds')
    for mode in modes:
        source = timed.samples if mode == "layer-graphed" or not graphed else timed.eager
        origin = ("graph replays" if mode == "layer-graphed" else "graph replays for eager") if graphed \
            else "eager rounds"
        for p in runnable:
            if p in timed.failures and (mode == "layer-graphed" or p not in timed.eager):
                cells.append(layer_cell(mode, p, "failed", reason=timed.failures[p], routing=routing))
            elif p in source:
                samples = source[p][REGION]
                key = f"{p}/{REGION}"
                extra = {"kernel_ms": timed.kernel_ms[key], "kernel_ratio": timed.kernel_ratio.get(key)} if (
                    source is timed.samples and key in timed.kernel_ms) else {}
                ms = round(samples.median, 6)
                breakdown = step_breakdown(ms, profiled.get(p, {}).get(REGION), origin)
                cells.append(layer_cell(mode, p, "measured", ms=ms, stats=samples.to_stats(),
                                        measured_at=_now(), routing=routing, breakdown=breakdown, **extra))
            else:
                cells.append(layer_cell(mode, p, "failed", reason="no samples were taken of this step",
                                        routing=routing))
    return cells


#: The three steps a precision plan is measured as, in one interleaved group (competitor keys).
PLAN_STEPS = ("all-bf16", "all-fp8", "plan")


def measure_plan_step(question: Question, precision: str, keep_bf16: Collection[str], time_group: TimeGroup, *,
                      modes: Sequence[str] = LAYER_MODES) -> list[dict[str, Any]]:
    """The layer step under a precision plan beside all-BF16 and all-``precision``: one interleaved
    group of three competitors built from the same parts (:func:`build_layer` with ``keep_bf16``),
    all-BF16 without the recipe, all-FP8 with it on every projection, the plan with ``keep_bf16``
    outside it; so the mixed step is compared with the two pure steps of the very same layer.
    Returns the plan's step cells (a layer cell with ``step`` in place of ``precision``), each
    measured one with its breakdown."""
    from gemm_bench.measure.step import plan_step_cell

    config = question.config
    reason = unsupported_reason(config)
    if reason:
        return [plan_step_cell(m, s, "unsupported", reason=reason) for m in modes for s in PLAN_STEPS]
    assert config is not None
    shared = Operands()
    keep = frozenset(keep_bf16)
    builders: dict[str, Callable[[], Competitor]] = {
        "all-bf16": lambda: layer_step_competitor(config, "bf16", "balanced", shared, keep_bf16=frozenset()),
        "all-fp8": lambda: layer_step_competitor(config, precision, "balanced", shared, keep_bf16=frozenset()),
        "plan": lambda: layer_step_competitor(config, precision, "balanced", shared, keep_bf16=keep),
    }
    graphed = "layer-graphed" in modes
    timed = time_group(builders, graphed, "balanced")
    cells = []
    for cell in _group_cells(timed, list(PLAN_STEPS), [m for m in LAYER_MODES if m in modes], graphed, "balanced"):
        step = cell.pop("precision")
        cell.pop("routing", None)
        cells.append({"step": step, **cell})
    return cells


def _untimed(region: str, edge: str) -> None:
    """A mark that records nothing: the energy window times the replays as a whole."""


def measure_step_energy(question: Question, step_ms: Mapping[str, float], sampler: Any, *,
                        window_s: float | None = None) -> list[dict[str, Any]]:
    """Each recipe's graphed layer step alone under the power sampler (:data:`gemm_bench.results.energy.ALONE_RULE`),
    built and captured here, one recipe at a time (:func:`replay_energy`). The measuring path does not
    call this: it measures energy on the layer-step group's own graphs (``Interleaver.run``'s ``after``,
    :func:`energy_after`), which costs no second build and capture; this is for a script that has
    no such group (``tools/gpu_breakdown.py``). A recipe that fails is a ``failed`` entry with the
    message; the others go on."""
    import gc

    from gemm_bench.measure.timing import capture

    config = question.config
    assert config is not None and not unsupported_reason(config)
    tokens = config.seq_length * config.micro_batch_size
    shared = Operands()
    out: list[dict[str, Any]] = []
    for precision, ms in step_ms.items():
        try:
            fn = layer_step_competitor(config, precision, "balanced", shared)
            fn(_untimed)
            torch.cuda.synchronize()
            graphed = capture(fn)
            out.append(replay_energy(precision, graphed, ms, sampler, tokens, window_s))
        except Exception as exc:  # GPU boundary: this recipe's entry says why, the others go on
            out.append(_energy_failed(precision, exc))
        finally:
            fn = graphed = None  # type: ignore[assignment]
            gc.collect()
            torch.cuda.empty_cache()
    return out


def _energy_failed(precision: str, exc: BaseException) -> dict[str, Any]:
    return {"precision": precision, "status": "failed", "reason": f"{type(exc).__name__}: {exc}"[:400]}


def replay_energy(precision: str, graphed: Any, ms: float, sampler: Any, tokens: float,
                  window_s: float | None = None) -> dict[str, Any]:
    """One recipe's energy entry: its captured step ``graphed`` replayed back to back for ``window_s``
    (default :data:`~gemm_bench.results.energy.ENERGY_WINDOW_S`) under ``sampler``, in batches of
    about 50 ms (sized by ``ms``, its step's time), after one batch that brings the clocks up."""
    import time

    from gemm_bench.results.energy import ENERGY_WINDOW_S, alone_energy

    window = ENERGY_WINDOW_S if window_s is None else window_s
    batch = max(1, round(50.0 / ms)) if ms > 0 else 1
    for _ in range(batch):  # the replays' own warm-up: clocks up before the window opens
        graphed(_untimed)
    torch.cuda.synchronize()
    steps, start = 0, time.monotonic()
    with sampler.sampling():
        while time.monotonic() - start < window:
            for _ in range(batch):
                graphed(_untimed)
            torch.cuda.synchronize()
            steps += batch
        wall_s = time.monotonic() - start
    return alone_energy(precision, sampler.summary(), wall_s, steps, tokens)


def energy_after(config: ModelConfig, sampler: Any, out: list[dict[str, Any]]) -> Callable[..., None]:
    """An ``Interleaver.run`` ``after`` hook that appends each recipe's energy entry to ``out``,
    replaying the group's own graphs (the layer step's, just timed) one recipe at a time."""
    tokens = tokens_per_gpu(config.to_dict())
    assert tokens is not None  # a model's config has both

    def after(graphed: Mapping[str, Any], ms: Mapping[str, float]) -> None:
        for precision, fn in graphed.items():
            try:
                out.append(replay_energy(precision, fn, ms.get(precision, 0.0), sampler, tokens))
            except Exception as exc:  # GPU boundary: this recipe's entry says why, the others go on
                out.append(_energy_failed(precision, exc))

    return after
