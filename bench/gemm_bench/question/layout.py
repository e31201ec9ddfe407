"""The parallel layout of the run a reader launches (issue 41): how many GPUs, how the model is split
over them, how the optimizer is sharded, what is recomputed and how large the batches are.

The layout is part of the question (:attr:`gemm_bench.question.question.Question.layout`), but
only what one GPU measures enters its hash: the layer is measured at the question's tensor- and
expert-parallel shard, micro-batch and sequence (fields of
:class:`~gemm_bench.question.config.ModelConfig`, keyed as before), and the rest of the layout
(:data:`LAYOUT_ONLY_FIELDS`) only decides how the measured parts add up on one GPU
(:mod:`gemm_bench.question.memory_per_gpu`) and how many micro-batches make a step. So no field of
this module enters the question's hash, and every committed result keeps its name. TP, sequence
parallel, EP, the micro-batch and G have one source, the model config: :func:`question_layout`
reads them from it.

Field names follow Megatron-LM's arguments; a validation error names the Megatron flag
(:class:`~gemm_bench.question.config.ConfigError` with the field, which every surface spells its own
way: ``--pipeline-model-parallel-size`` on the command line).
"""

from __future__ import annotations

import dataclasses
import math
import re
from collections.abc import Mapping
from typing import Any

from gemm_bench.question.config import ConfigError, ModelConfig

#: Optimizer sharding over the data-parallel ranks: ZeRO-0 (none), 1 (Megatron's
#: ``--use-distributed-optimizer``), 2 (gradients too) and 3 (FSDP: parameters too). Megatron-FSDP's
#: ``--data-parallel-sharding-strategy`` names them no_shard, optim, optim_grads, optim_grads_params.
SHARDINGS: tuple[str, ...] = ("none", "optimizer", "optimizer+grads", "fsdp")
RECOMPUTES: tuple[str, ...] = ("none", "selective", "full")
GRAD_REDUCE_DTYPES: tuple[str, ...] = ("fp32", "bf16")

#: Layout field -> the Megatron-LM flag a reader writes for it (errors name the flag).
LAYOUT_FLAGS: dict[str, str] = {
    "tp": "--tensor-model-parallel-size",
    "sp": "--sequence-parallel",
    "pp": "--pipeline-model-parallel-size",
    "vpp": "--virtual-pipeline-model-parallel-size",
    "cp": "--context-parallel-size",
    "ep": "--expert-model-parallel-size",
    "etp": "--expert-tensor-parallel-size",
    "gpus": "--num-gpus",
    "sharding": "--data-parallel-sharding-strategy",
    "recompute": "--recompute-granularity",
    "recompute_method": "--recompute-method",
    "recompute_num_layers": "--recompute-num-layers",
    "micro_batch_size": "--micro-batch-size",
    "global_batch_size": "--global-batch-size",
    "num_microbatches": "--num-microbatches",
    "fp8_param_gather": "--fp8-param-gather",
    "grad_reduce_dtype": "--grad-reduce-in-bf16",
    "overlap_grad_reduce": "--overlap-grad-reduce",
    "overlap_param_gather": "--overlap-param-gather",
}


def _fail(field: str, rule: str) -> ConfigError:
    """A :class:`ConfigError` whose message names the Megatron flag of ``field``."""
    error = ConfigError(field, rule)
    error.args = (error.describe(layout_flag),)
    return error


def layout_flag(field: str) -> str:
    """The Megatron-LM flag of a layout field (``pp`` -> ``--pipeline-model-parallel-size``)."""
    return LAYOUT_FLAGS.get(field, field)


@dataclasses.dataclass(frozen=True)
class ParallelLayout:
    """One training run's layout. ``dp`` and ``num_microbatches`` (G) follow from the rest.

    ``sp`` is None until resolved: it then defaults to True when TP > 1, as Megatron's recipes run
    tensor parallelism. ``vpp`` is the number of virtual stages per pipeline rank (None: plain
    1F1B). ``num_microbatches`` given with ``global_batch_size`` must agree with GBS / (MBS x DP);
    given alone it stands as the reader's G; neither given: G = 1.
    """

    gpus: int
    tp: int = 1
    sp: bool | None = None
    pp: int = 1
    vpp: int | None = None
    cp: int = 1
    ep: int = 1
    etp: int | None = None
    sharding: str = "none"
    recompute: str = "none"
    #: With full recomputation: "uniform" (every layer, in groups) or "block" (only the first
    #: ``recompute_num_layers`` layers of each virtual stage); None is uniform.
    recompute_method: str | None = None
    recompute_num_layers: int | None = None
    micro_batch_size: int = 1
    global_batch_size: int | None = None
    num_microbatches: int | None = None
    fp8_param_gather: bool = False
    grad_reduce_dtype: str = "fp32"
    overlap_grad_reduce: bool = False
    overlap_param_gather: bool = False

    def __post_init__(self) -> None:
        for field in ("gpus", "tp", "pp", "cp", "ep", "micro_batch_size"):
            _positive(field, getattr(self, field))
        for field in ("vpp", "etp", "global_batch_size", "num_microbatches", "recompute_num_layers"):
            if getattr(self, field) is not None:
                _positive(field, getattr(self, field))
        for field in ("fp8_param_gather", "overlap_grad_reduce", "overlap_param_gather"):
            if not isinstance(getattr(self, field), bool):
                raise _fail(field, f"must be true or false, got {getattr(self, field)!r}")
        if self.sp is not None and not isinstance(self.sp, bool):
            raise _fail("sp", f"must be true or false, got {self.sp!r}")
        if self.sp is None:
            object.__setattr__(self, "sp", self.tp > 1)
        if self.sp and self.tp == 1:
            raise _fail("sp", "needs --tensor-model-parallel-size above 1 (it splits the TP group's activations)")
        if self.etp is None:
            object.__setattr__(self, "etp", self.tp)
        if self.sharding not in SHARDINGS:
            raise _fail("sharding", f"{self.sharding!r} is not one of {', '.join(SHARDINGS)}")
        if self.recompute not in RECOMPUTES:
            raise _fail("recompute", f"{self.recompute!r} is not one of {', '.join(RECOMPUTES)}")
        if self.recompute_method not in (None, "uniform", "block"):
            raise _fail("recompute_method", f"{self.recompute_method!r} is not one of uniform, block")
        for field in ("recompute_method", "recompute_num_layers"):
            if getattr(self, field) is not None and self.recompute != "full":
                raise _fail(field, "applies to --recompute-granularity full only")
        if self.grad_reduce_dtype not in GRAD_REDUCE_DTYPES:
            raise _fail("grad_reduce_dtype", f"{self.grad_reduce_dtype!r} is not one of fp32, bf16")
        if self.vpp is not None and self.vpp > 1 and self.pp == 1:
            raise _fail("vpp", f"{self.vpp} virtual stages need a pipeline (--pipeline-model-parallel-size above 1)")
        model_parallel = self.tp * self.pp * self.cp
        if self.gpus % model_parallel:
            raise _fail("gpus", f"{self.gpus} GPUs are not divisible by TP x PP x CP = "
                                f"{self.tp} x {self.pp} x {self.cp} = {model_parallel}")
        # Megatron's expert layers re-split the same ranks: ETP x EP x expert-DP = TP x CP x DP.
        if (self.gpus // self.pp) % ((self.etp or 1) * self.ep):
            raise _fail("ep", f"EP {self.ep} x expert TP {self.etp} does not divide the "
                              f"{self.gpus // self.pp} GPUs of a pipeline stage")
        per_step = self.micro_batch_size * self.dp
        if self.global_batch_size is not None:
            if self.global_batch_size % per_step:
                raise _fail("global_batch_size", f"{self.global_batch_size} is not divisible by "
                                                 f"micro-batch x DP = {self.micro_batch_size} x {self.dp} = {per_step}")
            derived = self.global_batch_size // per_step
            if self.num_microbatches is not None and self.num_microbatches != derived:
                raise _fail("num_microbatches", f"{self.num_microbatches} disagrees with --global-batch-size "
                                                f"{self.global_batch_size} / (micro-batch {self.micro_batch_size} "
                                                f"x DP {self.dp}) = {derived}")
            object.__setattr__(self, "num_microbatches", derived)
        elif self.num_microbatches is None:
            object.__setattr__(self, "num_microbatches", 1)

    # ---------------------------------------------------------------------------- derived
    @property
    def grad_bytes(self) -> int:
        """Bytes of one main gradient: Megatron keeps them in the dtype it reduces them in."""
        return 2 if self.grad_reduce_dtype == "bf16" else 4

    def fp8_primary(self, precision: str) -> bool:
        """Whether ``precision``'s layers hold FP8 primary weights on this layout (:func:`fp8_primary_weights`)."""
        return fp8_primary_weights(self.fp8_param_gather, precision)

    @property
    def dp(self) -> int:
        """Data-parallel size: the GPUs over TP x PP x CP."""
        return self.gpus // (self.tp * self.pp * self.cp)

    @property
    def microbatches(self) -> int:
        """G, micro-batches per optimizer step (always set once constructed)."""
        return self.num_microbatches or 1

    def to_dict(self) -> dict[str, Any]:
        return {**dataclasses.asdict(self), "dp": self.dp}

    def describe(self, *, overlap: bool = True) -> str:
        """The layout in words: '64 GPUs: TP 4 with sequence parallel, PP 8 with 5 virtual stages, ...'.
        ``overlap=False`` leaves out the overlap flags, which change the step's time but not one byte of
        a rank's memory: the words a memory measurement (the layout-search study) is keyed by."""
        parts = []
        if self.tp > 1:
            parts.append(f"TP {self.tp}" + (" with sequence parallel" if self.sp else ""))
        if self.pp > 1:
            parts.append(f"PP {self.pp}" + (f" with {self.vpp} virtual stages" if self.vpp and self.vpp > 1 else ""))
        if self.cp > 1:
            parts.append(f"CP {self.cp}")
        if self.ep > 1:
            parts.append(f"EP {self.ep}" + (f" (expert TP {self.etp})" if self.etp != self.tp else ""))
        parts.append(f"DP {self.dp}")
        parts.append({"none": "no optimizer sharding", "optimizer": "distributed optimizer",
                      "optimizer+grads": "optimizer and gradients sharded (ZeRO-2)", "fsdp": "FSDP"}[self.sharding])
        if self.recompute != "none":
            block = self.recompute == "full" and self.recompute_method == "block" and self.recompute_num_layers
            parts.append(f"full recomputation of {self.recompute_num_layers} layer(s) per stage (block)" if block
                         else f"{self.recompute} recomputation")
        if self.fp8_param_gather:
            parts.append("FP8 parameter gather")
        if self.grad_reduce_dtype == "bf16":
            parts.append("BF16 gradient reduce")
        overlapped = [w for w, on in (("gradient reduce", self.overlap_grad_reduce),
                                      ("parameter gather", self.overlap_param_gather)) if on]
        if overlapped and overlap:  # they change the step's time: two layouts that differ here must read differently
            parts.append("overlapped " + " and ".join(overlapped))
        parts.append(f"G = {self.microbatches}")
        return f"{self.gpus} GPU{'s' if self.gpus > 1 else ''}: " + ", ".join(parts)


def microbatches_at(layout: ParallelLayout, micro_batch: int) -> int | None:
    """G at ``micro_batch``: the global batch over micro-batch x DP (None where it does not divide); a layout
    with G set and no global batch keeps its G. The one rule by which the layout-search tool times a rank's
    step at each micro-batch size and the report checks and quotes that step (issue 41 item 3)."""
    if layout.global_batch_size is None:
        return layout.microbatches
    per_step = micro_batch * layout.dp
    return layout.global_batch_size // per_step if layout.global_batch_size % per_step == 0 else None


def described_context_parallel(words: str) -> int:
    """CP as :meth:`ParallelLayout.describe` wrote it in ``words`` ("..., CP 2, ..."; 1 where the words name
    none, as describe leaves CP 1 out): what a stored layout-search study, which keeps the layout's words
    only, says about context parallelism."""
    found = re.search(r"(?:: |, )CP (\d+)(?:, |$)", words)
    return int(found.group(1)) if found else 1


def fp8_primary_weights(fp8_param_gather: bool, precision: str) -> bool:
    """FP8 parameter gather keeps FP8 primary weights under the FP8 recipes only: BF16 has nothing to
    gather in FP8. The one rule the memory, the step's collectives and the micro-batch search follow."""
    return fp8_param_gather and precision.startswith("fp8")


def _positive(field: str, value: Any) -> None:
    if isinstance(value, bool) or not isinstance(value, int):
        raise _fail(field, f"must be a whole number, got {value!r}")
    if value < 1:
        raise _fail(field, f"must be at least 1, got {value}")


@dataclasses.dataclass(frozen=True)
class PresetLayout:
    """A model's layout as a published recipe runs it, with the recipe named (or why it was chosen)."""

    layout: ParallelLayout
    source: str
    url: str | None = None


_BRIDGE_H100 = "https://docs.nvidia.com/nemo/megatron-bridge/nightly/apidocs/bridge/bridge.perf_recipes.llama.h100.llama3.html"
_BRIDGE_TABLE = "https://docs.nvidia.com/nemo/megatron-bridge/nightly/performance-summary.html"
_DEEPSEEK_V3 = "https://arxiv.org/abs/2412.19437"
_MEGATRON_MIXTRAL = ("https://github.com/NVIDIA/Megatron-LM/blob/d98e8a64ddf34856e74b24714e3bedb2f5a39553/"
                     "examples/mixtral/train_mixtral_8x7b_distributed.sh")

#: Megatron-Bridge turns both data-parallel overlap flags on in the recipes the Llama presets cite (read
#: at NVIDIA-NeMo/Megatron-Bridge 067f987df03b8355b03192d88d70f1709fedf51a):
#: ``src/megatron/bridge/perf_recipes/llama/h100/llama3.py`` builds llama3_8b_pretrain_8gpu_h100_bf16_config
#: on ``llama3_8b_pretrain_config()`` (line 36) and llama3_70b_pretrain_64gpu_h100_bf16_config on
#: ``llama3_70b_pretrain_config()`` (line 120), overriding neither flag; those are
#: ``src/megatron/bridge/recipes/llama/h100/llama3.py`` llama3_8b_pretrain_2gpu_h100_bf16_config (lines 304-305)
#: and llama3_70b_pretrain_32gpu_h100_bf16_config (lines 786-787), and llama31_405b_pretrain_config is
#: llama31_405b_pretrain_256gpu_h100_bf16_config (lines 1273-1274), each with
#: ``cfg.ddp.overlap_grad_reduce = True`` / ``cfg.ddp.overlap_param_gather = True``; and
#: ``src/megatron/bridge/training/comm_overlap.py`` ``CommOverlapConfig._get_optimizer_overlap_cfgs``
#: (lines 576-579) sets both True whenever ``data_parallel_size > 1`` with the distributed optimizer.
#: The 70B and 405B perf recipes also gather parameters during the optimizer step
#: (``perf_recipes/_common.py`` ``_enable_overlap_param_gather_with_optimizer_step``, lines 92-96); the
#: step here hides the gather behind the next forward (``layout_step.OVERLAP_FORMULAS``) either way.
_BRIDGE_OVERLAP_WORDS = ("; data-parallel gradient reduce and parameter gather overlapped (overlap_grad_reduce, "
                         "overlap_param_gather), as Megatron-Bridge's recipes set them")

#: Megatron-Bridge's performance recipes (the same commit) keep and reduce gradients in BF16 and, under the
#: per-tensor FP8 recipes, gather FP8 primary weights: ``perf_recipes/_common.py`` ``_benchmark_common`` sets
#: ``cfg.ddp.grad_reduce_in_fp32 = False`` (line 74) and ``_perf_precision`` sets it on the precision config
#: (line 122); ``training/mixed_precision.py`` ``bf16_with_fp8_delayed_scaling_mixed`` (line 231) and
#: ``bf16_with_fp8_current_scaling_mixed`` (line 302) set ``fp8_param_gather = True``. The blockwise config
#: (line 384) leaves it off; the layout's flag applies to every FP8 recipe, so FP8 Block is counted with FP8
#: primary weights too (said in the words). Without these two, the preset of Llama 3 8B's published recipe
#: did not fit the H100 it was published on (79.0 GiB BF16, 90.3 GiB FP8 against 78.3 GiB).
_BRIDGE_PERF: dict[str, Any] = {"grad_reduce_dtype": "bf16", "fp8_param_gather": True}
_BRIDGE_PERF_WORDS = ("; gradients kept and reduced in BF16 (grad_reduce_in_fp32 = False) and FP8 parameters "
                      "gathered (fp8_param_gather: FP8 primary weights; Bridge sets it for delayed and current "
                      "scaling, applied to block scaling here too), as Megatron-Bridge's performance recipes set them")

#: For every preset and every model id the site measures at a TP or EP of its own: the layout of a
#: realistic run. The layout's TP and EP are the question's (the measured shard): where the published
#: recipe uses another TP, the recipe's other sizes are kept and the difference is said.
PRESET_LAYOUTS: dict[str, PresetLayout] = {
    "te-guide-5b": PresetLayout(
        ParallelLayout(gpus=8, sharding="optimizer", micro_batch_size=31, global_batch_size=31 * 8 * 4),
        "chosen, not from a published recipe: the Transformer Engine guide's layer has no training recipe; "
        "one 8-GPU node, data parallel with the distributed optimizer, G = 4"),
    "llama3-8b": PresetLayout(
        ParallelLayout(gpus=8, cp=2, sharding="optimizer", global_batch_size=128,
                       overlap_grad_reduce=True, overlap_param_gather=True, **_BRIDGE_PERF),
        "Megatron-Bridge perf recipe llama3_8b_pretrain_8gpu_h100_bf16_config (8 H100, CP 2); GBS 128 "
        "as the performance summary's Llama 3 8B rows; distributed optimizer as Megatron-Bridge's "
        "pretraining recipes run" + _BRIDGE_OVERLAP_WORDS
        + _BRIDGE_PERF_WORDS, _BRIDGE_H100),
    "llama3-70b": PresetLayout(
        ParallelLayout(gpus=64, tp=4, pp=4, vpp=5, cp=2, sharding="optimizer", global_batch_size=256,
                       overlap_grad_reduce=True, overlap_param_gather=True, **_BRIDGE_PERF),
        "Megatron-Bridge perf recipe llama3_70b_pretrain_64gpu_h100_bf16_config (64 H100, TP 4, PP 4, CP 2, "
        "GBS 256); VP 5 as the performance summary's Llama 3 70B rows" + _BRIDGE_OVERLAP_WORDS
        + _BRIDGE_PERF_WORDS, _BRIDGE_H100),
    "llama3-70b/tp8": PresetLayout(
        ParallelLayout(gpus=128, tp=8, pp=4, vpp=5, cp=2, sharding="optimizer", global_batch_size=256,
                       overlap_grad_reduce=True, overlap_param_gather=True, **_BRIDGE_PERF),
        "adapted from Megatron-Bridge's llama3_70b_pretrain_64gpu_h100_bf16_config (TP 4, PP 4, CP 2, GBS 256) "
        "at the measured TP 8, on 128 GPUs so that DP stays 2" + _BRIDGE_OVERLAP_WORDS
        + _BRIDGE_PERF_WORDS, _BRIDGE_H100),
    "llama3.1-405b": PresetLayout(
        ParallelLayout(gpus=1024, tp=8, pp=8, vpp=8, cp=2, sharding="optimizer", global_batch_size=512,
                       overlap_grad_reduce=True, overlap_param_gather=True, **_BRIDGE_PERF),
        "NeMo's Llama 3.1 405B pretraining layout (TP 8, PP 8, CP 2, VP 8) on 1024 H100s; GBS 512 chosen "
        "(not verified against a table in this session)" + _BRIDGE_OVERLAP_WORDS
        + _BRIDGE_PERF_WORDS, _BRIDGE_TABLE),
    "llama3.1-405b/tp8": PresetLayout(
        ParallelLayout(gpus=1024, tp=8, pp=8, vpp=8, cp=2, sharding="optimizer", global_batch_size=512,
                       overlap_grad_reduce=True, overlap_param_gather=True, **_BRIDGE_PERF),
        "NeMo's Llama 3.1 405B pretraining layout (TP 8, PP 8, CP 2, VP 8) on 1024 H100s; GBS 512 chosen "
        "(not verified against a table in this session)" + _BRIDGE_OVERLAP_WORDS
        + _BRIDGE_PERF_WORDS, _BRIDGE_TABLE),
    "mixtral-8x7b": PresetLayout(
        ParallelLayout(gpus=64, pp=4, sharding="optimizer", global_batch_size=256),
        "chosen, not from a published recipe: NeMo's Mixtral 8x7B layout is 64 GPUs, TP 1, PP 4, EP 8, but "
        "the layer is measured at EP 1, so EP stays 1 here; GBS 256 chosen"),
    "mixtral-8x7b/ep8": PresetLayout(
        ParallelLayout(gpus=64, pp=4, ep=8, sharding="optimizer", global_batch_size=256, overlap_grad_reduce=True,
                       overlap_param_gather=True),
        "Megatron-LM's Mixtral 8x7B training example (TP 1, PP 4, EP 8, distributed optimizer with "
        "--overlap-grad-reduce and --overlap-param-gather, GBS 256, MBS 1, 4096 tokens; its README recommends "
        "TP1EP8PP4 for training) with the layer measured at EP 8; 64 GPUs chosen", _MEGATRON_MIXTRAL),
    "mixtral-8x22b": PresetLayout(
        ParallelLayout(gpus=256, pp=8, sharding="optimizer", global_batch_size=256),
        "chosen, not from a published recipe: NeMo's Mixtral 8x22B layout is 256 GPUs with PP 8 and EP 8 "
        "(TP 2 in one summary, TP 4 and PP 4 in another: not verified), kept at the measured TP 1 and EP 1"),
    "qwen2.5-7b": PresetLayout(
        ParallelLayout(gpus=8, sharding="optimizer", global_batch_size=128, overlap_grad_reduce=True,
                       overlap_param_gather=True, **_BRIDGE_PERF),
        "chosen, not from a published recipe: a 7B dense model on one 8-GPU node, data parallel with the "
        "distributed optimizer, as Llama 3 8B's recipe without CP (4096-token sequences)" + _BRIDGE_OVERLAP_WORDS
        + _BRIDGE_PERF_WORDS, _BRIDGE_H100),
    "qwen2.5-72b": PresetLayout(
        ParallelLayout(gpus=64, tp=4, pp=4, vpp=5, sharding="optimizer", global_batch_size=256,
                       overlap_grad_reduce=True, overlap_param_gather=True, **_BRIDGE_PERF),
        "chosen, not from a published recipe: Llama 3 70B's Megatron-Bridge layout (same width and depth) "
        "without CP (4096-token sequences)" + _BRIDGE_OVERLAP_WORDS
        + _BRIDGE_PERF_WORDS, _BRIDGE_H100),
    "qwen2.5-72b/tp8": PresetLayout(
        ParallelLayout(gpus=64, tp=8, pp=4, vpp=5, sharding="optimizer", global_batch_size=256,
                       overlap_grad_reduce=True, overlap_param_gather=True, **_BRIDGE_PERF),
        "chosen, not from a published recipe: Llama 3 70B's Megatron-Bridge layout at the measured TP 8, "
        "without CP (4096-token sequences)" + _BRIDGE_OVERLAP_WORDS
        + _BRIDGE_PERF_WORDS, _BRIDGE_H100),
    "deepseek-v3": PresetLayout(
        ParallelLayout(gpus=2048, pp=16, sharding="optimizer", global_batch_size=15360 // 4),
        "chosen: the DeepSeek-V3 report's PP 16 on 2048 GPUs with ZeRO-1, kept at the measured EP 1; "
        "GBS chosen", _DEEPSEEK_V3),
    "deepseek-v3/ep64": PresetLayout(
        ParallelLayout(gpus=2048, pp=16, ep=64, sharding="optimizer", global_batch_size=15360 // 4),
        "DeepSeek-V3 technical report: 2048 H800 GPUs, PP 16, EP 64, ZeRO-1 data parallel, no TP; "
        "GBS chosen (the report's batch ramps up to 15360 sequences of 4096 tokens); composed as Megatron's 1F1B "
        "with every all-to-all exposed: the report's DualPipe schedule, which overlaps them with computation and "
        "shrinks the bubble, is not modelled, nor its multi-token-prediction module (one more MoE layer and the "
        "output layer again, on the last stage)", _DEEPSEEK_V3),
    "gpt-oss-120b": PresetLayout(
        ParallelLayout(gpus=64, pp=4, sharding="optimizer", global_batch_size=256),
        "chosen, not from a published recipe: no pretraining layout is published; PP 4 over 64 GPUs at the "
        "measured EP 1"),
    "gpt-oss-120b/ep8": PresetLayout(
        ParallelLayout(gpus=64, pp=4, ep=8, sharding="optimizer", global_batch_size=1280,
                       overlap_grad_reduce=True, overlap_param_gather=True, **_BRIDGE_PERF),
        "Megatron-Bridge performance summary's DGX-H100 GPT OSS 120B layout (64 GPUs, TP 1, PP 4, EP 8, GBS "
        "1280, MBS 1, 4096 tokens) with the layer measured at EP 8" + _BRIDGE_OVERLAP_WORDS
        + _BRIDGE_PERF_WORDS + "; Bridge's H100 GPT-OSS config also recomputes the LayerNorms and the MoE "
        "activation (recompute_modules=[\"layernorm\", \"moe_act\"] in GPT_OSS_120B_PRETRAIN_CONFIG_H100_BF16_V2 "
        "at commit 383b610, 2026-02-28), not modelled here",
        _BRIDGE_TABLE),
    "gemma2-27b": PresetLayout(
        ParallelLayout(gpus=64, pp=2, sharding="optimizer", global_batch_size=256),
        "chosen, not from a published recipe: a 27B dense model at 8192 tokens, PP 2 over 64 GPUs with the "
        "distributed optimizer"),
}


def recomputed_layers(layout: ParallelLayout, layers: int) -> int:
    """How many of a stage's ``layers`` full recomputation recomputes under ``layout``: every one (Megatron's
    uniform method, and no full recomputation: none), or, with the block method, ``recompute_num_layers`` per
    virtual stage. The one rule of the memory per GPU and the layout's step: the step once recomputed every
    layer of a block-method layout while its memory recomputed five (red team, session 19)."""
    if layout.recompute != "full":
        return 0
    if layout.recompute_method == "block" and layout.recompute_num_layers is not None:
        return min(layers, layout.recompute_num_layers * (layout.vpp or 1))
    return layers


# ------------------------------------------------------------------ the layout in the question
#: The layout's fields that the model config does not hold (it holds TP, sequence parallel, EP, the
#: micro-batch and G): what a page, the CLI or a launch line adds to a question to say its layout.
LAYOUT_ONLY_FIELDS: tuple[str, ...] = (
    "gpus", "pp", "vpp", "cp", "etp", "global_batch_size", "sharding", "recompute", "recompute_method",
    "recompute_num_layers", "fp8_param_gather", "grad_reduce_dtype", "overlap_grad_reduce", "overlap_param_gather",
)
#: Layout field -> the model config field that is its one source (errors are re-spelled to it).
CONFIG_SOURCED: dict[str, str] = {"tp": "tensor_model_parallel_size", "sp": "sequence_parallel",
                                  "ep": "expert_model_parallel_size", "micro_batch_size": "micro_batch_size",
                                  "num_microbatches": "num_microbatches"}


@dataclasses.dataclass(frozen=True)
class LayoutOption:
    """One layout option, spelled ``:name:`` in every directive and ``--name`` on the command line
    (``aliases`` are further command-line spellings: the short ones and Megatron-LM's own)."""

    field: str
    kind: str  # "int", "bool" or "choice"
    help: str
    default: str
    example: str
    choices: tuple[str, ...] = ()
    aliases: tuple[str, ...] = ()

    @property
    def name(self) -> str:
        return self.field.replace("_", "-")


#: The one table of layout options: the directives' option tables, the CLI's flags and the
#: authoring reference are built from it.
LAYOUT_OPTIONS: tuple[LayoutOption, ...] = (
    LayoutOption("gpus", "int", "GPUs of the run; data parallel follows as GPUs / (TP x PP x CP)",
                 "the preset's, else TP x PP x CP (DP 1)", "64", aliases=("--num-gpus",)),
    LayoutOption("pp", "int", "pipeline-parallel stages; each holds layers / PP of the layers", "1 (or the preset's)",
                 "8", aliases=("--pipeline-model-parallel-size",)),
    LayoutOption("vpp", "int", "virtual stages per pipeline rank (interleaved 1F1B)", "none (or the preset's)",
                 "5", aliases=("--virtual-pipeline-model-parallel-size",)),
    LayoutOption("cp", "int", "context-parallel size: each rank holds 1/CP of every sequence",
                 "1 (or the preset's)", "2", aliases=("--context-parallel-size",)),
    LayoutOption("etp", "int", "expert tensor-parallel size (only the tensor-parallel size is modelled)",
                 "the tensor-parallel size", "4", aliases=("--expert-tensor-parallel-size",)),
    LayoutOption("global_batch_size", "int", "sequences per optimizer step over all data-parallel ranks; G "
                 "(num-microbatches) follows as GBS / (micro-batch x DP) unless G is given",
                 "the preset's, else micro-batch x DP x G", "128", aliases=("--gbs",)),
    LayoutOption("sharding", "choice", "what the data-parallel ranks shard: none; optimizer (Megatron's distributed "
                 "optimizer, ZeRO-1); optimizer+grads (ZeRO-2); fsdp (ZeRO-3)", "none (or the preset's)",
                 "optimizer", SHARDINGS),
    LayoutOption("recompute", "choice", "activation recomputation: none, selective (core attention) or full "
                 "(whole layers)", "none (or the preset's)", "selective", RECOMPUTES,
                 aliases=("--recompute-granularity",)),
    LayoutOption("recompute_method", "choice", "full recomputation's method: uniform or block", "uniform", "block",
                 ("uniform", "block")),
    LayoutOption("recompute_num_layers", "int", "full recomputation: layers per recomputed group (uniform) or "
                 "recomputed layers per stage (block)", "all", "2"),
    LayoutOption("fp8_param_gather", "bool", "FP8 primary weights: the compute weights kept and all-gathered in "
                 "FP8, with no BF16 copy (FP8 recipes only)", "false", ""),
    LayoutOption("grad_reduce_dtype", "choice", "the main gradients' dtype, kept and reduced: fp32 or bf16",
                 "fp32", "bf16", GRAD_REDUCE_DTYPES),
    LayoutOption("overlap_grad_reduce", "bool", "overlap the data-parallel gradient reduction with the backward "
                 "(changes no memory the layout models)", "false", ""),
    LayoutOption("overlap_param_gather", "bool", "overlap the parameter all-gather with the forward (changes no "
                 "memory the layout models)", "false", ""),
)
LAYOUT_OPTION_BY_FIELD: dict[str, LayoutOption] = {o.field: o for o in LAYOUT_OPTIONS}


def parse_layout_value(field: str, text: str) -> Any:
    """One layout option's text (a directive's, a CLI flag's) as its value; :class:`ConfigError` on
    ``field`` otherwise. The one parser of layout values, so every surface accepts the same words."""
    option = LAYOUT_OPTION_BY_FIELD[field]
    value = str(text).strip()
    if option.kind == "bool":
        word = value.lower()
        if word in ("", "true", "yes", "on", "1"):
            return True
        if word in ("false", "no", "off", "0"):
            return False
        raise ConfigError(field, f"is a flag; give no value, or true/false (got {value[:40]!r})")
    if option.kind == "choice":
        word = value.lower()
        if word not in option.choices:
            raise ConfigError(field, f"{value[:40]!r} is not one of {', '.join(option.choices)}")
        return word
    if not value.isdecimal() or len(value) > 9:
        raise ConfigError(field, f"{value[:40]!r} is not a whole number")
    if int(value) < 1:
        raise ConfigError(field, f"must be at least 1, got {int(value)}")
    return int(value)


def preset_layout(preset: str, config: ModelConfig) -> tuple[str, PresetLayout] | None:
    """The published layout of preset ``preset`` at the question's measured shard (its TP and EP):
    ``llama3-70b`` at TP 8 is ``llama3-70b/tp8``'s; None when no layout of that preset has them."""
    name = preset.strip().lower()
    for key, found in PRESET_LAYOUTS.items():
        if (key == name or key.startswith(name + "/")) and found.layout.tp == config.tensor_model_parallel_size \
                and found.layout.ep == config.expert_model_parallel_size:
            return key, found
    return None


def question_layout(config: ModelConfig, given: Mapping[str, Any], *, base: ParallelLayout | None = None,
                    g_given: bool = False) -> ParallelLayout:
    """The question's layout: ``base`` (a preset's published layout) under ``given`` (the page's
    layout fields, :data:`LAYOUT_ONLY_FIELDS`), with TP, sequence parallel, EP and the micro-batch
    read from ``config`` (resolved). G follows the global batch unless ``g_given`` (the page gave
    ``num_microbatches``: it overrides a preset's global batch, and must agree with a given one);
    without a global batch G is the config's. Without a GPU count the run is the fewest GPUs that
    hold the layout (data parallel 1). A rule broken is a :class:`ConfigError` naming the field as
    the question spells it (a config field for TP, SP, EP, micro-batch and G)."""
    unknown = sorted(set(given) - set(LAYOUT_ONLY_FIELDS))
    if unknown:
        raise ConfigError(unknown[0], "is not a layout option")
    values: dict[str, Any] = {}
    if base is not None:
        values = {f: getattr(base, f) for f in LAYOUT_ONLY_FIELDS}
    values.update({k: v for k, v in given.items() if v is not None})
    if g_given and "global_batch_size" not in given:
        values["global_batch_size"] = None  # the page's G overrides the preset's batch
    if values.get("recompute") != "full" and "recompute" in given:
        for field in ("recompute_method", "recompute_num_layers"):  # the preset's, for full recomputation
            if field not in given:
                values[field] = None
    tp, ep = config.tensor_model_parallel_size, config.expert_model_parallel_size
    pp, cp = values.get("pp") or 1, values.get("cp") or 1
    # What the model itself rules out (review, session 15: PP 64 on 32 layers composed a stage of -31 layers
    # and "fits"; CP 3 on 8192 tokens was drawn as fitting): every stage holds a layer, every CP rank the
    # same whole number of tokens. Uneven stages (Llama 3.1 405B's 126 layers on PP 8) stay allowed.
    if pp > config.num_layers:
        raise ConfigError("pp", f"PP {pp} is more pipeline stages than the model's {config.num_layers} layers")
    if config.seq_length % cp:
        raise ConfigError("cp", f"CP {cp} does not divide the sequence of {config.seq_length} tokens")
    if values.get("gpus") is None:
        etp = values.get("etp") or tp
        values["gpus"] = math.lcm(tp * pp * cp, etp * ep * pp)
    sp = config.sequence_parallel_on and tp > 1
    use_g = g_given or values.get("global_batch_size") is None
    try:
        return ParallelLayout(**values, tp=tp, sp=sp, ep=ep, micro_batch_size=config.micro_batch_size,
                              num_microbatches=config.num_microbatches if use_g else None)
    except ConfigError as exc:
        raise ConfigError(CONFIG_SOURCED.get(exc.field, exc.field), exc.rule) from None
