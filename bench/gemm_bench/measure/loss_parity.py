"""Measuring the loss-parity study: one small GPT trained once per recipe, everything else equal.

What is equal across recipes, by construction:

* **the initial weights**: the model is built under ``torch.manual_seed(seed)`` and the first run's
  initial parameters are copied into every later run's model (their sha256 is stored per run, and
  the schema refuses a document whose runs started from different weights);
* **the data and its order**: the byte offsets of every batch are drawn once, from ``seed``, by
  :func:`batch_offsets` (pure Python), and every run reads the same offsets;
* **the optimizer and schedule**: AdamW on FP32 master weights, linear warm-up then cosine decay
  (:func:`lr_at`), gradient clipping, no dropout.

What differs is only the ``te.autocast`` recipe around the transformer layers
(:func:`gemm_bench.measure.backends.te.make_recipe`; BF16 is the baseline with autocast
disabled). The corpus is the Python standard library's own source (:func:`read_stdlib_corpus`),
byte-level, so every GPU box has it offline; its size and sha256 are stored, since another Python
has another standard library.

The seed band: BF16 is also trained from :data:`BF16_EXTRA_SEEDS` other seeds (:func:`band_seeds`,
:func:`train_seed_band`), each changing both the initial weights and the batch order, so the page can
tell a recipe's gap from the distance another seed moves BF16 itself. The main runs keep
``TrainingConfig.seed``: their comparisons stay one-to-one with earlier results. Only final losses
and validation points of these runs are stored (no curve).

What runs where: the layers, recipes and device come from a :class:`Kit`. The study's is
:func:`te_kit` (Transformer Engine's ``TransformerLayer``, ``LayerNorm`` and ``Linear`` on CUDA,
every recipe), the default of :func:`measure`, :func:`train_recipe` and :func:`build_model`, on a
GPU box. :func:`torch_kit` builds the same pre-LayerNorm GPT from plain PyTorch modules under
``torch.autocast``, BF16 only (every other recipe is unsupported, with the reason): the CPU
test-suite trains a tiny model with it for a few steps (``tests/test_loss_parity_cpu.py``), which
exercises this trainer's loop, checks, records and seed band without a GPU, not the FP8 recipes.
The pure helpers (corpus, split, batch order, schedule, curve downsampling) import without torch;
the kits, :func:`measure` and :func:`train_recipe` import torch (and Transformer Engine, for the TE
kit) when called.
"""

from __future__ import annotations

import dataclasses
import hashlib
import math
import os
import platform
import random
import sys
import sysconfig
import time
from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager
from pathlib import Path
from typing import Any

from gemm_bench.question.plan import Support
from gemm_bench.question.precisions import BASELINE, PRECISIONS
from gemm_bench.results.loss_parity_schema import RECIPES

#: K: how many more seeds BF16 is trained from for the seed band (each run costs one BF16 run, about
#: 40 s on an H100 at the default size). ``measure(extra_seeds=...)`` overrides it; 0 stores no band.
BF16_EXTRA_SEEDS = 2

#: Folders of the standard library's tree that hold third-party code or caches, never read.
EXCLUDED_DIRS = frozenset({"site-packages", "dist-packages", "__pycache__"})


class CorpusError(ValueError):
    """The corpus cannot serve the training run asked for (no files, too little validation text)."""


# ------------------------------------------------------------------------------ configuration
@dataclasses.dataclass(frozen=True)
class ModelConfig:
    """A GPT-2-small-sized decoder: about 85 M parameters at the defaults, byte-level."""

    layers: int = 12
    hidden: int = 768
    heads: int = 12
    ffn_hidden: int = 3072
    vocab: int = 256
    seq: int = 1024


@dataclasses.dataclass(frozen=True)
class TrainingConfig:
    """The run every recipe gets. Defaults: 400 steps of 32 x 1024 tokens (13.1 M tokens per run)."""

    steps: int = 400
    batch: int = 32
    peak_lr: float = 6e-4
    min_lr: float = 6e-5
    warmup_steps: int = 40
    weight_decay: float = 0.1
    betas: tuple[float, float] = (0.9, 0.95)
    eps: float = 1e-8
    grad_clip: float = 1.0
    seed: int = 1234
    #: The validation split: the last this much of the corpus, from the start of the file holding
    #: its first byte.
    val_fraction: float = 0.05
    eval_every: int = 100
    eval_sequences: int = 128
    #: Curve points: the mean of each ``curve_every`` consecutive steps' raw values.
    curve_every: int = 4
    #: The final training loss: the mean raw loss of the last ``final_window`` steps.
    final_window: int = 20
    #: Losses are copied to the host and checked for NaN/Inf every this many steps (a sync).
    check_every: int = 25
    #: Steps not timed for tokens/s (kernel selection, allocator warm-up); timing starts at the first
    #: check at or after this step.
    timing_skip_steps: int = 25

    def __post_init__(self) -> None:
        problems = [name for name, ok in (
            ("steps", self.steps >= 1), ("batch", self.batch >= 1),
            ("warmup_steps", 0 <= self.warmup_steps < self.steps),
            ("min_lr", 0 <= self.min_lr <= self.peak_lr), ("val_fraction", 0 < self.val_fraction < 0.5),
            ("eval_every", 1 <= self.eval_every <= self.steps), ("eval_sequences", self.eval_sequences >= 1),
            ("curve_every", 1 <= self.curve_every <= self.steps),
            ("final_window", 1 <= self.final_window <= self.steps), ("check_every", self.check_every >= 1),
            ("timing_skip_steps", 0 <= self.timing_skip_steps < self.steps)) if not ok]
        if problems:
            raise ValueError(f"TrainingConfig: invalid {', '.join(problems)} in {self}")


# ------------------------------------------------------------------------------ corpus (pure)
@dataclasses.dataclass(frozen=True)
class Corpus:
    """The concatenated bytes of a tree's ``*.py`` files, in sorted path order."""

    data: bytes
    #: The files' paths relative to ``root`` (POSIX), in the order they were concatenated.
    files: tuple[str, ...]
    #: The byte offset where each file starts in ``data``.
    starts: tuple[int, ...]
    root: str

    @property
    def sha256(self) -> str:
        return hashlib.sha256(self.data).hexdigest()


def stdlib_root() -> Path:
    return Path(sysconfig.get_paths()["stdlib"])


def read_corpus(root: Path) -> Corpus:
    """Every ``*.py`` under ``root`` (symlinked folders not followed; :data:`EXCLUDED_DIRS` skipped),
    sorted by relative POSIX path, concatenated as bytes."""
    found: list[str] = []
    for folder, dirs, names in os.walk(root):
        dirs[:] = [d for d in dirs if d not in EXCLUDED_DIRS]
        rel = Path(folder).relative_to(root)
        found += [(rel / name).as_posix() for name in names if name.endswith(".py")]
    if not found:
        raise CorpusError(f"no *.py files under {root}")
    files = tuple(sorted(found))
    chunks, starts, at = [], [], 0
    for name in files:
        chunk = (root / name).read_bytes()
        starts.append(at)
        chunks.append(chunk)
        at += len(chunk)
    return Corpus(b"".join(chunks), files, tuple(starts), str(root))


def read_stdlib_corpus() -> Corpus:
    """The running Python's standard library source (``sysconfig.get_paths()["stdlib"]``)."""
    return read_corpus(stdlib_root())


def split_offset(corpus: Corpus, val_fraction: float) -> int:
    """Where validation starts: the start of the file holding byte ``(1 - val_fraction) * len``.

    Whole files only, so no file is split between training and validation; validation is then at
    least ``val_fraction`` of the corpus."""
    target = int(len(corpus.data) * (1 - val_fraction))
    return max(s for s in corpus.starts if s <= target)


def window_count(n_bytes: int, seq: int) -> int:
    """How many ``seq + 1``-byte windows (inputs and the targets one byte on) start at multiples of
    ``seq`` in ``n_bytes`` bytes."""
    return max(0, (n_bytes - 1) // seq)


def batch_offsets(train_bytes: int, seq: int, batch: int, steps: int, seed: int) -> list[list[int]]:
    """The byte offset of every sequence of every step, the same for every recipe.

    The training bytes are cut into windows at multiples of ``seq``; each epoch visits every window
    once, in an order shuffled by ``random.Random(seed)`` (the same order on every Python), and a
    run longer than an epoch goes on with the next epoch's order."""
    windows = window_count(train_bytes, seq)
    if windows < batch:
        raise CorpusError(f"{train_bytes} training bytes hold {windows} windows of {seq + 1} bytes, "
                          f"fewer than one batch of {batch}")
    rng = random.Random(seed)
    order: list[int] = []
    while len(order) < steps * batch:
        epoch = list(range(windows))
        rng.shuffle(epoch)
        order += epoch
    return [[i * seq for i in order[s * batch:(s + 1) * batch]] for s in range(steps)]


def band_seeds(seed: int, extra: int) -> list[int]:
    """The seeds of the seed band: the ``extra`` integers after the main runs' ``seed``."""
    if extra < 0:
        raise ValueError(f"extra_seeds: must be 0 or more, got {extra}")
    return [seed + i for i in range(1, extra + 1)]


def order_sha256(offsets: Sequence[Sequence[int]]) -> str:
    """A hash of a batch order (its offsets as text, one step a line)."""
    text = "\n".join(",".join(str(o) for o in row) for row in offsets)
    return hashlib.sha256(text.encode("ascii")).hexdigest()


def eval_offsets(val_start: int, total: int, seq: int, count: int) -> list[int]:
    """``count`` validation windows spread evenly over ``[val_start, total)``; no randomness."""
    windows = window_count(total - val_start, seq)
    if windows < count:
        raise CorpusError(f"the validation split ({total - val_start} bytes) holds {windows} windows of "
                          f"{seq + 1} bytes, fewer than the {count} asked for")
    return [val_start + (i * windows // count) * seq for i in range(count)]


# ------------------------------------------------------------------------------ schedule and curves (pure)
def lr_at(step: int, cfg: TrainingConfig) -> float:
    """The learning rate of update ``step`` (0-based): linear warm-up to ``peak_lr`` over
    ``warmup_steps`` updates, then cosine decay reaching ``min_lr`` at the last update."""
    if step < cfg.warmup_steps:
        return cfg.peak_lr * (step + 1) / cfg.warmup_steps
    span = max(1, cfg.steps - 1 - cfg.warmup_steps)
    progress = min(1.0, (step - cfg.warmup_steps) / span)
    return cfg.min_lr + 0.5 * (cfg.peak_lr - cfg.min_lr) * (1 + math.cos(math.pi * progress))


def first_nonfinite(values: Sequence[float]) -> int | None:
    """The 0-based index of the first NaN or infinity, or None."""
    return next((i for i, v in enumerate(values) if not math.isfinite(v)), None)


def divergence(losses: Sequence[float], norms: Sequence[float]) -> tuple[int, str] | None:
    """(step, reason) of the first step (1-based) whose loss or gradient norm is NaN or infinite."""
    found = [(i, what, values[i]) for what, values in (("training loss", losses), ("gradient norm", norms))
             if (i := first_nonfinite(values)) is not None]
    if not found:
        return None
    index, what, value = min(found)
    return index + 1, f"diverged at step {index + 1}: {what} {value}"


def downsample(values: Sequence[float], every: int) -> tuple[list[int], list[float]]:
    """(steps, means): the mean of each ``every`` consecutive per-step values (step ``s`` is
    ``values[s - 1]``), at the window's last step; a last partial window ends at the last step."""
    steps, means = [], []
    for start in range(0, len(values), every):
        window = values[start:start + every]
        steps.append(start + len(window))
        means.append(math.fsum(window) / len(window))
    return steps, means


def curve(losses: Sequence[float], norms: Sequence[float], every: int) -> dict[str, list[Any]]:
    """The stored curve of finite per-step losses and gradient norms."""
    steps, train = downsample(losses, every)
    _, grad = downsample(norms, every)
    return {"steps": steps, "train_loss": [round(v, 6) for v in train], "grad_norm": [round(v, 6) for v in grad]}


def final_train_loss(losses: Sequence[float], window: int) -> float:
    return round(math.fsum(losses[-window:]) / len(losses[-window:]), 6)


class Stopwatch:
    """Wall time of the timed training steps, between synchronizations (evaluation left out)."""

    def __init__(self, clock: Callable[[], float] = time.perf_counter) -> None:
        self._clock = clock
        self._since: float | None = None
        self._since_step = 0
        self.seconds = 0.0
        self.steps = 0

    @property
    def running(self) -> bool:
        return self._since is not None

    def start(self, step: int) -> None:
        self._since, self._since_step = self._clock(), step

    def stop(self, step: int) -> None:
        if self._since is not None:
            self.seconds += self._clock() - self._since
            self.steps += step - self._since_step
            self._since = None


# ------------------------------------------------------------------------------ GPU
MODEL_DESCRIPTION = (
    "GPT, byte-level: learned token and position embeddings (torch.nn.Embedding), {layers} "
    "te.TransformerLayer blocks (pre-LayerNorm, causal self-attention, GELU MLP, biases, no dropout), "
    "a final te.LayerNorm and an untied te.Linear LM head. The recipe's te.autocast wraps the "
    "transformer layers only: embeddings, final LayerNorm and LM head run in BF16 in every recipe, "
    "and so does attention's softmax(QK^T)V (no FP8 attention)."
)
WEIGHTS = ("FP32 master weights: parameters, gradients and AdamW state in FP32; forward and backward "
           "compute in BF16 under torch.autocast, and in the recipe's format under te.autocast")
#: :func:`torch_kit`'s model and weights (BF16 only).
TORCH_MODEL_DESCRIPTION = (
    "GPT, byte-level, from plain PyTorch modules: learned token and position embeddings (torch.nn.Embedding), "
    "{layers} pre-LayerNorm blocks (torch.nn.LayerNorm; torch.nn.Linear with biases for QKV, output "
    "projection, FC1 and FC2; causal torch.nn.functional.scaled_dot_product_attention; tanh-approximated "
    "GELU; no dropout), a final torch.nn.LayerNorm and an untied torch.nn.Linear LM head; BF16 only."
)
TORCH_WEIGHTS = ("FP32 master weights: parameters, gradients and AdamW state in FP32; forward and backward "
                 "compute in BF16 under torch.autocast")


def _log(message: str) -> None:
    print(f"loss-parity: {message}", file=sys.stderr, flush=True)


# ------------------------------------------------------------------------------ kits
#: What an unsupported precision is told by :func:`torch_kit`.
TORCH_KIT_UNSUPPORTED = ("FP8 and FP4 recipes need Transformer Engine on a GPU; the plain-PyTorch kit "
                         "trains BF16 only")

InitFn = Callable[[Any], None]


@dataclasses.dataclass(frozen=True)
class Kit:
    """What the trainer builds its model from and runs it on: layers, recipes and device.

    :func:`te_kit` is the study's (Transformer Engine layers on CUDA); :func:`torch_kit` builds the
    same pre-LayerNorm GPT from plain PyTorch modules, BF16 only (the CPU test-suite trains with
    it). Each factory imports torch and its libraries when called; the fields hold what they
    imported. The texts are stored in the document, so a result says which layers made it."""

    #: The torch device of the model, corpus and losses, and ``torch.autocast``'s device type.
    device: str
    #: ``transformer_layer(config, layer_number, init, init_out)``: one block (``layer_number`` 1-based);
    #: ``init`` initializes its QKV and FC1 weights, ``init_out`` its output projection and FC2.
    transformer_layer: Callable[[ModelConfig, int, InitFn, InitFn], Any]
    #: ``layer_norm(config)``: the final LayerNorm, FP32 parameters.
    layer_norm: Callable[[ModelConfig], Any]
    #: ``linear(in_features, out_features, init)``: the bias-free LM head, FP32 parameters.
    linear: Callable[[int, int, InitFn], Any]
    #: ``make_recipe(precision_id)``: the recipe object, None for BF16 (no recipe).
    make_recipe: Callable[[str], Any]
    #: ``recipe_context(recipe)``: the context the transformer layers run in.
    recipe_context: Callable[[Any], AbstractContextManager[Any]]
    #: ``support()``: per precision id, whether this kit can train it, and why not.
    support: Callable[[], dict[str, Support]]
    #: Run before each run builds its model (Transformer Engine's FP8 global state).
    reset: Callable[[], None]
    synchronize: Callable[[], None]
    empty_cache: Callable[[], None]
    reset_peak_memory: Callable[[], None]
    #: The peak memory, in bytes, since ``reset_peak_memory``.
    max_memory_bytes: Callable[[], int]
    #: What a run without a recipe stores as its ``recipe``.
    no_recipe: str
    #: The document's ``model.description`` (``{layers}`` is filled in), ``training.weights`` and
    #: method ``timer``.
    model_description: str
    weights: str
    timer: str
    #: More entries of the document's method block.
    method_notes: tuple[tuple[str, str], ...] = ()


def _device_ops(device: str) -> dict[str, Any]:
    """synchronize, empty_cache, reset_peak_memory, max_memory_bytes for ``device``: torch.cuda's on
    CUDA; on CPU, where torch keeps no allocator statistics, the process's peak resident set size
    (``getrusage``: it cannot be reset, so it is the process's peak so far)."""
    import torch

    if device == "cuda":
        return {"synchronize": torch.cuda.synchronize, "empty_cache": torch.cuda.empty_cache,
                "reset_peak_memory": torch.cuda.reset_peak_memory_stats,
                "max_memory_bytes": torch.cuda.max_memory_allocated}
    if device != "cpu":
        raise ValueError(f"device: 'cuda' or 'cpu', got {device!r}")

    def peak_rss() -> int:
        import resource

        kib_or_bytes = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        return int(kib_or_bytes) * (1 if sys.platform == "darwin" else 1024)

    return {"synchronize": torch.cpu.synchronize, "empty_cache": lambda: None,
            "reset_peak_memory": lambda: None, "max_memory_bytes": peak_rss}


def te_kit() -> Kit:
    """The study's kit: ``te.TransformerLayer``, ``te.LayerNorm`` and ``te.Linear`` on CUDA, every
    recipe of :mod:`gemm_bench.measure.backends.te` under ``te.autocast``."""
    import torch
    import transformer_engine.pytorch as te
    from transformer_engine.pytorch.quantization import FP8GlobalStateManager

    from gemm_bench.measure.backends import te as te_backend

    def transformer_layer(config: ModelConfig, number: int, init: InitFn, init_out: InitFn) -> Any:
        return te.TransformerLayer(
            config.hidden, config.ffn_hidden, config.heads, layernorm_epsilon=1e-5,
            hidden_dropout=0.0, attention_dropout=0.0, init_method=init, output_layer_init_method=init_out,
            layer_number=number, self_attn_mask_type="causal", params_dtype=torch.float32, device="cuda",
            attn_input_format="bshd", bias=True, activation="gelu", normalization="LayerNorm")

    def layer_norm(config: ModelConfig) -> Any:
        return te.LayerNorm(config.hidden, eps=1e-5, device="cuda", dtype=torch.float32)

    def linear(in_features: int, out_features: int, init: InitFn) -> Any:
        return te.Linear(in_features, out_features, bias=False, params_dtype=torch.float32,
                         device="cuda", init_method=init)

    def recipe_context(recipe: Any) -> AbstractContextManager[Any]:
        return te.autocast(enabled=recipe is not None, recipe=recipe)

    return Kit(device="cuda", transformer_layer=transformer_layer,
               layer_norm=layer_norm, linear=linear, make_recipe=te_backend.make_recipe,
               recipe_context=recipe_context, support=te_backend.support, reset=FP8GlobalStateManager.reset,
               **_device_ops("cuda"), no_recipe="none (te.autocast disabled)",
               model_description=MODEL_DESCRIPTION, weights=WEIGHTS,
               timer="time.perf_counter between torch.cuda.synchronize calls, evaluation excluded")


def torch_kit(device: str = "cpu") -> Kit:
    """Plain PyTorch, BF16 only: :func:`te_kit`'s architecture from ``torch.nn`` modules (the CPU tests').

    Each block is pre-LayerNorm as ``te.TransformerLayer``: ``x + proj(attention(LayerNorm(x)))``,
    then ``x + fc2(gelu(fc1(LayerNorm(x))))``, with biases (zero at init) on QKV, the output
    projection, FC1 and FC2, causal ``scaled_dot_product_attention``, and GELU's tanh approximation
    (Transformer Engine's ``gelu``). Compute is BF16 under ``torch.autocast`` on ``device``; every
    precision but BF16 is unsupported (:data:`TORCH_KIT_UNSUPPORTED`). Its parameters are not
    named as TE's, and its results are not comparable with a GPU's."""
    import contextlib

    import torch
    import torch.nn.functional as F

    class Block(torch.nn.Module):
        def __init__(self, config: ModelConfig, init: InitFn, init_out: InitFn) -> None:
            super().__init__()
            hidden = config.hidden
            self.heads = config.heads
            self.norm1 = torch.nn.LayerNorm(hidden, eps=1e-5, device=device)
            self.qkv = torch.nn.Linear(hidden, 3 * hidden, device=device)
            self.proj = torch.nn.Linear(hidden, hidden, device=device)
            self.norm2 = torch.nn.LayerNorm(hidden, eps=1e-5, device=device)
            self.fc1 = torch.nn.Linear(hidden, config.ffn_hidden, device=device)
            self.fc2 = torch.nn.Linear(config.ffn_hidden, hidden, device=device)
            for layer, how in ((self.qkv, init), (self.proj, init_out), (self.fc1, init), (self.fc2, init_out)):
                how(layer.weight)
                torch.nn.init.zeros_(layer.bias)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            b, s, hidden = x.shape
            qkv = self.qkv(self.norm1(x)).view(b, s, 3, self.heads, hidden // self.heads)
            q, k, v = qkv.permute(2, 0, 3, 1, 4)  # each (b, heads, s, head_dim)
            attention = F.scaled_dot_product_attention(q, k, v, is_causal=True)
            x = x + self.proj(attention.transpose(1, 2).reshape(b, s, hidden))
            return x + self.fc2(F.gelu(self.fc1(self.norm2(x)), approximate="tanh"))

    def linear(in_features: int, out_features: int, init: InitFn) -> Any:
        layer = torch.nn.Linear(in_features, out_features, bias=False, device=device)
        init(layer.weight)
        return layer

    def make_recipe(precision_id: str) -> Any:
        if precision_id != BASELINE:
            raise ValueError(f"{precision_id}: {TORCH_KIT_UNSUPPORTED}")
        return None

    def recipe_context(recipe: Any) -> AbstractContextManager[Any]:
        if recipe is not None:
            raise ValueError(f"{recipe!r}: {TORCH_KIT_UNSUPPORTED}")
        return contextlib.nullcontext()

    def support() -> dict[str, Support]:
        return {p: Support(True) if p == BASELINE else Support(False, TORCH_KIT_UNSUPPORTED) for p in PRECISIONS}

    notes: tuple[tuple[str, str], ...] = ()
    if device == "cpu":
        notes = (("memory", "peak_memory_gib: the process's peak resident set size so far (getrusage), "
                            "not the run's own: torch keeps no CPU allocator statistics"),)
    return Kit(device=device,
               transformer_layer=lambda config, number, init, init_out: Block(config, init, init_out),
               layer_norm=lambda config: torch.nn.LayerNorm(config.hidden, eps=1e-5, device=device),
               linear=linear, make_recipe=make_recipe, recipe_context=recipe_context, support=support,
               reset=lambda: None, **_device_ops(device),
               no_recipe=f"none (BF16 under torch.autocast on {device})",
               model_description=TORCH_MODEL_DESCRIPTION, weights=TORCH_WEIGHTS,
               timer=f"time.perf_counter between torch.{device}.synchronize calls, evaluation excluded",
               method_notes=notes)


def build_model(config: ModelConfig, precision_id: str, kit: Kit | None = None) -> Any:
    """The GPT on the kit's device (default :func:`te_kit`: the current CUDA device), FP32
    parameters; ``precision_id``'s recipe in its forward."""
    import torch

    used = te_kit() if kit is None else kit
    recipe = used.make_recipe(precision_id)
    std = 0.02

    def init(weight: torch.Tensor) -> None:
        torch.nn.init.normal_(weight, 0.0, std)

    def init_out(weight: torch.Tensor) -> None:  # residual projections, scaled as GPT-2's
        torch.nn.init.normal_(weight, 0.0, std / math.sqrt(2 * config.layers))

    class GPT(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.embed = torch.nn.Embedding(config.vocab, config.hidden, device=used.device)
            self.position = torch.nn.Embedding(config.seq, config.hidden, device=used.device)
            init(self.embed.weight)
            init(self.position.weight)
            self.layers = torch.nn.ModuleList(
                used.transformer_layer(config, i + 1, init, init_out) for i in range(config.layers))
            self.norm = used.layer_norm(config)
            self.head = used.linear(config.hidden, config.vocab, init)

        def forward(self, tokens: torch.Tensor) -> torch.Tensor:
            positions = self.position.weight[: tokens.shape[1]]
            hidden = (self.embed(tokens) + positions).to(torch.bfloat16)
            with used.recipe_context(recipe):
                for layer in self.layers:
                    hidden = layer(hidden)
            return self.head(self.norm(hidden))

    return GPT()


def parameters_sha256(model: Any) -> str:
    """A hash of every parameter's name, shape and bytes (FP32), in ``named_parameters`` order."""
    import torch

    digest = hashlib.sha256()
    for name, param in model.named_parameters():
        digest.update(f"{name}:{tuple(param.shape)}:{param.dtype}\n".encode())
        digest.update(param.detach().to("cpu").contiguous().view(torch.uint8).numpy().tobytes())
    return digest.hexdigest()


@dataclasses.dataclass
class SharedRun:
    """What every recipe's run shares, on the kit's device: corpus, batch order, validation windows, weights."""

    corpus: Any          # uint8 tensor of the corpus bytes
    order: Any           # int64 tensor, steps x batch byte offsets
    evals: Any           # int64 tensor of validation offsets
    initial: dict[str, Any] | None = None   # the first run's initial parameters (CPU tensors)


def train_recipe(precision_id: str, model_config: ModelConfig, training: TrainingConfig,
                 shared: SharedRun, kit: Kit | None = None) -> dict[str, Any]:
    """Train one recipe with ``kit`` (default :func:`te_kit`), on its device, where ``shared`` lies;
    its stored record (status measured or diverged). Errors propagate."""
    import gc

    import torch
    import torch.nn.functional as F

    kit = te_kit() if kit is None else kit
    device = kit.device
    started = time.perf_counter()
    kit.reset()
    gc.collect()
    kit.empty_cache()
    kit.reset_peak_memory()
    torch.manual_seed(training.seed)
    model = build_model(model_config, precision_id, kit)
    with torch.no_grad():
        if shared.initial is None:
            shared.initial = {n: p.detach().to("cpu").clone() for n, p in model.named_parameters()}
        else:
            named = dict(model.named_parameters())
            if sorted(named) != sorted(shared.initial):
                raise RuntimeError(f"{precision_id}: the model's parameters differ from the first run's")
            for name, value in shared.initial.items():
                named[name].copy_(value)
    init_sha = parameters_sha256(model)
    recipe = kit.make_recipe(precision_id)
    decay = [p for p in model.parameters() if p.ndim >= 2]
    no_decay = [p for p in model.parameters() if p.ndim < 2]
    optimizer = torch.optim.AdamW(
        [{"params": decay, "weight_decay": training.weight_decay}, {"params": no_decay, "weight_decay": 0.0}],
        lr=lr_at(0, training), betas=training.betas, eps=training.eps, fused=True)
    params = list(model.parameters())

    seq, vocab, steps = model_config.seq, model_config.vocab, training.steps
    span = torch.arange(seq + 1, device=device)
    losses = torch.full((steps,), float("nan"), device=device)
    norms = torch.full((steps,), float("nan"), device=device)

    def batch_at(offsets: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        chunk = shared.corpus[offsets[:, None] + span[None, :]].long()
        return chunk[:, :-1], chunk[:, 1:]

    def loss_of(tokens: torch.Tensor, targets: torch.Tensor, reduction: str = "mean") -> torch.Tensor:
        with torch.autocast(device, dtype=torch.bfloat16):
            logits = model(tokens)
        return F.cross_entropy(logits.float().reshape(-1, vocab), targets.reshape(-1), reduction=reduction)

    def evaluate() -> float:
        model.eval()
        total = torch.zeros((), dtype=torch.float64, device=device)
        count = 0
        with torch.no_grad():
            for first in range(0, len(shared.evals), training.batch):
                tokens, targets = batch_at(shared.evals[first:first + training.batch])
                total += loss_of(tokens, targets, "sum").double()
                count += targets.numel()
        model.train()
        return float(total.item() / count)

    val_steps: list[int] = [0]
    val_losses: list[float] = [evaluate()]
    if not math.isfinite(val_losses[0]):  # before any update: the recipe cannot run this model at all
        raise RuntimeError(f"{precision_id}: the validation loss of the initial weights is {val_losses[0]}")
    watch = Stopwatch()
    diverged: tuple[int, str] | None = None
    host_losses: list[float] = []
    host_norms: list[float] = []
    model.train()
    for i in range(steps):
        for group in optimizer.param_groups:
            group["lr"] = lr_at(i, training)
        tokens, targets = batch_at(shared.order[i])
        loss = loss_of(tokens, targets)
        loss.backward()
        norm = torch.nn.utils.clip_grad_norm_(params, training.grad_clip)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        losses[i] = loss.detach()
        norms[i] = norm.detach()
        step = i + 1
        evaluating = step % training.eval_every == 0 or step == steps
        if not (evaluating or step % training.check_every == 0):
            continue
        kit.synchronize()
        watch.stop(step)
        host_losses, host_norms = losses[:step].tolist(), norms[:step].tolist()
        diverged = divergence(host_losses, host_norms)
        if diverged is not None:
            break
        if evaluating:
            val = evaluate()
            if not math.isfinite(val):
                diverged = (step, f"diverged at step {step}: validation loss {val} after the step")
                break
            val_steps.append(step)
            val_losses.append(val)
            _log(f"{precision_id}: step {step}/{steps}, train loss {host_losses[-1]:.4f}, "
                 f"validation loss {val:.4f}, {time.perf_counter() - started:.1f} s")
        if step >= training.timing_skip_steps and step < steps:
            watch.start(step)

    record: dict[str, Any] = {"precision": precision_id,
                              "recipe": repr(recipe) if recipe is not None else kit.no_recipe}
    peak_gib = kit.max_memory_bytes() / 2**30  # the model and optimizer go with this frame
    if diverged is not None:
        at, reason = diverged
        # The finite steps before divergence, in complete curve windows only (as every other curve).
        kept = (at - 1) // training.curve_every * training.curve_every
        record.update(status="diverged", reason=reason, diverged_at_step=at,
                      curve=curve(host_losses[:kept], host_norms[:kept], training.curve_every),
                      validation={"steps": val_steps, "loss": [round(v, 6) for v in val_losses]},
                      wall_s=round(time.perf_counter() - started, 2), init_sha256=init_sha)
        _log(f"{precision_id}: {reason}")
        return record
    if watch.steps == 0 or watch.seconds <= 0:
        raise RuntimeError(f"{precision_id}: no training step was timed (steps {steps}, timing from step "
                           f"{training.timing_skip_steps}, checks every {training.check_every})")
    tokens_per_step = training.batch * seq
    val_rounded = [round(v, 6) for v in val_losses]
    record.update(
        status="measured",
        curve=curve(host_losses, host_norms, training.curve_every),
        validation={"steps": val_steps, "loss": val_rounded},
        final_train_loss=final_train_loss(host_losses, training.final_window),
        final_val_loss=val_rounded[-1],
        tokens_per_s=round(watch.steps * tokens_per_step / watch.seconds, 1),
        wall_s=round(time.perf_counter() - started, 2),
        peak_memory_gib=round(peak_gib, 2),
        init_sha256=init_sha,
    )
    return record


#: The fields of a BF16 run the seed band keeps (no curve, throughput or memory: it answers how far
#: the final loss moves with the seed, nothing else).
BAND_RUN_FIELDS = ("status", "init_sha256", "validation", "wall_s", "final_train_loss", "final_val_loss",
                   "reason", "diverged_at_step")


def train_seed_band(training: TrainingConfig, extra: int, *, train_bytes: int, seq: int,
                    train: Callable[[TrainingConfig, list[list[int]]], dict[str, Any]]) -> dict[str, Any] | None:
    """BF16 from each of :func:`band_seeds`: ``train(config, order)`` trains BF16 with
    ``config.seed`` (its initial weights) on ``order`` (its batches, drawn from the same seed) and
    returns :func:`train_recipe`'s record; the ``seed_band`` block, or None when ``extra`` is 0."""
    seeds = band_seeds(training.seed, extra)
    if not seeds:
        return None
    runs: list[dict[str, Any]] = []
    for seed in seeds:
        config = dataclasses.replace(training, seed=seed)
        order = batch_offsets(train_bytes, seq, training.batch, training.steps, seed)
        record = train(config, order)
        run = {"seed": seed, "batch_order_sha256": order_sha256(order),
               **{key: record[key] for key in BAND_RUN_FIELDS if key in record}}
        runs.append(run)
        if run["status"] == "measured":
            _log(f"{BASELINE} seed {seed}: final train loss {run['final_train_loss']:.4f}, validation loss "
                 f"{run['final_val_loss']:.4f}, {run['wall_s']:.1f} s")
    return {"precision": BASELINE, "runs": runs}


#: Errors a recipe's run may end with that leave the others worth running (CUDA and TE errors are
#: RuntimeErrors, TE's unsupported-shape checks assertions or ValueErrors). The BF16 run re-raises.
RUN_ERRORS: tuple[type[BaseException], ...] = (RuntimeError, ValueError, AssertionError)


def measure(model_config: ModelConfig = ModelConfig(), training: TrainingConfig = TrainingConfig(),
            precisions: Sequence[str] = RECIPES, extra_seeds: int = BF16_EXTRA_SEEDS, *,
            kit: Kit | None = None, corpus: Corpus | None = None) -> tuple[dict[str, Any], dict[str, Any]]:
    """Train every recipe in ``precisions`` on this box's GPU: ``(data, method)`` for the study document.

    Recipes this GPU does not support are stored as unsupported with Transformer Engine's own reason;
    a run whose loss turns NaN or infinite as diverged (at its step); a run that raises one of
    :data:`RUN_ERRORS` as failed, with the error (but BF16's error propagates: without the
    reference there is no study). Then BF16 again from ``extra_seeds`` other seeds, the seed band
    (:func:`train_seed_band`; an error there propagates too, a divergence is stored).

    ``kit`` (default :func:`te_kit`) gives the layers, recipes and device (:func:`torch_kit`: plain
    PyTorch on CPU, BF16 only, every other recipe unsupported with its reason); ``corpus`` (default
    :func:`read_stdlib_corpus`) the text."""
    import torch

    kit = te_kit() if kit is None else kit
    if BASELINE not in precisions:
        raise ValueError(f"the study compares with {BASELINE}; it must be among {list(precisions)}")
    band_seeds(training.seed, extra_seeds)  # refuses a negative count before any training
    unknown = [p for p in precisions if p not in PRECISIONS]
    if unknown:
        raise ValueError(f"unknown precisions {unknown}")
    stdlib = corpus is None
    corpus = read_stdlib_corpus() if corpus is None else corpus
    split = split_offset(corpus, training.val_fraction)
    order = batch_offsets(split, model_config.seq, training.batch, training.steps, training.seed)
    evals = eval_offsets(split, len(corpus.data), model_config.seq, training.eval_sequences)
    shared = SharedRun(
        corpus=torch.frombuffer(bytearray(corpus.data), dtype=torch.uint8).to(kit.device),
        order=torch.tensor(order, dtype=torch.int64, device=kit.device),
        evals=torch.tensor(evals, dtype=torch.int64, device=kit.device),
    )
    support = kit.support()
    ordered = [p for p in RECIPES if p in precisions] + [p for p in precisions if p not in RECIPES]
    ordered.remove(BASELINE)
    ordered.insert(0, BASELINE)
    recipes: list[dict[str, Any]] = []
    for precision in ordered:
        verdict = support[precision]
        if not verdict.available:
            check = PRECISIONS[precision].support_check
            reason = verdict.reason or f"transformer_engine.pytorch.{check}() returned False without a reason"
            recipes.append({"precision": precision, "status": "unsupported", "reason": reason})
            _log(f"{precision}: unsupported: {reason}")
            continue
        _log(f"{precision}: training {training.steps} steps of {training.batch} x {model_config.seq} tokens")
        try:
            record = train_recipe(precision, model_config, training, shared, kit)
        except RUN_ERRORS as exc:
            if precision == BASELINE:
                raise
            reason = f"{type(exc).__name__}: {exc}"[:800]
            recipes.append({"precision": precision, "status": "failed", "reason": reason})
            _log(f"{precision}: FAILED: {reason}")
            continue
        recipes.append(record)
        if record["status"] == "measured":
            _log(f"{precision}: final train loss {record['final_train_loss']:.4f}, validation loss "
                 f"{record['final_val_loss']:.4f}, {record['tokens_per_s']:.0f} tokens/s, {record['wall_s']:.1f} s")
    assert shared.initial is not None  # BF16 trained (or raised)
    params = sum(t.numel() for t in shared.initial.values())

    def train_other_seed(config: TrainingConfig, other_order: list[list[int]]) -> dict[str, Any]:
        _log(f"{BASELINE} seed {config.seed} (seed band): training {config.steps} steps")
        # A SharedRun of its own: no initial weights to copy (the seed draws them), its own batch order.
        own = SharedRun(corpus=shared.corpus, order=torch.tensor(other_order, dtype=torch.int64, device=kit.device),
                        evals=shared.evals)
        return train_recipe(BASELINE, model_config, config, own, kit)

    band = train_seed_band(training, extra_seeds, train_bytes=split, seq=model_config.seq, train=train_other_seed)
    data = {
        "model": {**dataclasses.asdict(model_config), "params": params,
                  "description": kit.model_description.format(layers=model_config.layers)},
        "corpus": corpus_block(corpus, split, training.val_fraction, stdlib=stdlib),
        "training": training_block(model_config, training, order, weights=kit.weights),
        "recipes": recipes,
    }
    if band is not None:
        data["seed_band"] = band
    method = {
        "study": "loss parity: one training run per recipe from the same weights on the same batches",
        "seed_band": (f"{BASELINE} also trained from {extra_seeds} other seed(s) "
                      f"({', '.join(map(str, band_seeds(training.seed, extra_seeds)))}), each changing the "
                      "initial weights and the batch order; final losses and validation points stored"
                      if extra_seeds else "none (no extra seed)"),
        "loss": "cross-entropy in nats per byte, in FP32 from BF16 logits",
        "timer": kit.timer,
        "steps": training.steps, "tokens_per_step": training.batch * model_config.seq,
        **dict(kit.method_notes),
    }
    return data, method


def corpus_block(corpus: Corpus, split: int, val_fraction: float, *, stdlib: bool = True) -> dict[str, Any]:
    """The document's ``corpus`` block; ``stdlib``: whether ``corpus`` is the standard library's."""
    total = len(corpus.data)
    first_val = corpus.files[corpus.starts.index(split)]
    where = (f"of the Python {platform.python_version()} standard library ({corpus.root}; " if stdlib
             else f"under {corpus.root} (")
    return {
        "source": f"the *.py files {where}{', '.join(sorted(EXCLUDED_DIRS))} excluded), in sorted path order, "
                  "concatenated as bytes (vocabulary 256)",
        "python": platform.python_version(),
        "files": len(corpus.files),
        "bytes": total,
        "sha256": corpus.sha256,
        "train_bytes": split,
        "val_bytes": total - split,
        "split": f"validation: the last {100 * (total - split) / total:.1f}% of the bytes, whole files from "
                 f"{first_val} on (the file holding the byte at {100 * (1 - val_fraction):.0f}% of the corpus)",
    }


def training_block(model_config: ModelConfig, training: TrainingConfig, order: Sequence[Sequence[int]], *,
                   weights: str = WEIGHTS) -> dict[str, Any]:
    return {
        "steps": training.steps, "batch": training.batch, "seq": model_config.seq,
        "tokens_per_step": training.batch * model_config.seq, "seed": training.seed,
        "optimizer": {"name": "AdamW", "betas": list(training.betas), "eps": training.eps,
                      "weight_decay": training.weight_decay,
                      "weight_decay_on": "matrices and embeddings (parameters of 2 or more dimensions); "
                                         "not biases or norm weights",
                      "implementation": "torch.optim.AdamW(fused=True)"},
        "lr_schedule": {"kind": "linear warm-up, then cosine decay reaching min_lr at the last step",
                        "peak_lr": training.peak_lr, "warmup_steps": training.warmup_steps,
                        "min_lr": training.min_lr},
        "grad_clip": training.grad_clip,
        "weights": weights,
        "batch_order_sha256": order_sha256(order),
        "eval_every": training.eval_every,
        "eval_sequences": training.eval_sequences,
        "curve_every": training.curve_every,
        "curve": f"raw per-step values averaged over each {training.curve_every} consecutive steps, shown at "
                 "the last of them: train_loss is the loss of each step's batch before its update, grad_norm "
                 "the gradient's global L2 norm before clipping",
        "final_window": training.final_window,
        "timing": f"tokens/s: training tokens over the wall time of the steps after the first "
                  f"{training.timing_skip_steps} (eager PyTorch, host time included, no CUDA graphs; "
                  f"a synchronization every {training.check_every} steps; evaluation excluded)",
    }
