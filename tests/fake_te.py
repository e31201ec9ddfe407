"""A fake Transformer Engine on CPU: just enough of ``transformer_engine.pytorch`` for the model
step's measuring path (:mod:`gemm_bench.measure.backends.model_parts`) to run end to end in a CPU
test, so that its plumbing (regions, main gradients, the optimizer, the real model, the search for
the largest micro-batch, the JSON it returns) is exercised before the one GPU call that times it.

Modules compute in BF16 on CPU; ``fuse_wgrad_accumulation`` adds the weight gradient into
``weight.main_grad`` and gives autograd no gradient for the weight, as TE does without Megatron's
``grad_added_to_main_grad`` marker. ``is_first_microbatch=True`` under an FP8 recipe "quantizes"
(a copy kept on the module), ``False`` requires that copy: a cached call before a first one fails,
as a wrong call order would on the GPU. The modules of a mixture of experts' or multi-latent
attention's layer (``GroupedLinear``, ``MultiheadAttention``, ``DotProductAttention``,
``LayerNormLinear``, ``LayerNormMLP``) hold the parameters TE's do, under TE's names, so a count of
the built layer's parameters is the count of TE's. The allocator's counters and CUDA events are faked by
:func:`install`, which also counts OOM: a micro-batch above ``oom_above`` raises
``torch.OutOfMemoryError`` from the real model's step.
"""

from __future__ import annotations

import contextlib
import sys
import time
import types
from collections.abc import Iterator
from typing import Any

import pytest

# Every module that imports this one needs PyTorch: without it (a checkout's own venv, pip install
# -e .[test]) such a module is skipped, as the suite's other torch tests are, instead of stopping
# the whole collection with an ImportError.
pytest.importorskip("torch", reason="the fake Transformer Engine runs on PyTorch's CPU build (the test-torch extra)")

import torch
import torch.nn.functional as F


class _FusedLinear(torch.autograd.Function):
    @staticmethod
    def forward(ctx: Any, x: torch.Tensor, weight: torch.Tensor, fuse: bool) -> torch.Tensor:
        ctx.save_for_backward(x, weight)
        ctx.fuse = fuse
        return x @ weight.to(x.dtype).t()  # an FP8 primary weight computes from its BF16 value

    @staticmethod
    def backward(ctx: Any, dy: torch.Tensor) -> tuple[Any, ...]:
        x, weight = ctx.saved_tensors
        dw = dy.reshape(-1, dy.shape[-1]).t().float() @ x.reshape(-1, x.shape[-1]).float()
        if ctx.fuse:
            weight.main_grad.add_(dw)
            return dy @ weight.to(dy.dtype), None, None
        return dy @ weight.to(dy.dtype), dw.to(weight.dtype), None


class QuantizedParam(torch.nn.Parameter):
    """An FP8 primary weight as ``quantized_model_init`` builds one: its storage FP8 (E4M3), with
    ``dequantize`` and ``quantize_`` as Transformer Engine's quantized tensors have them."""

    def dequantize(self, *, dtype: Any = torch.float32) -> torch.Tensor:
        return self.to(dtype)  # differentiable, as TE's: a non-leaf tensor while the weight requires grad

    def quantize_(self, tensor: torch.Tensor) -> None:
        with torch.no_grad():
            self.copy_(tensor.to(self.dtype))


def _weight(n: int, k: int, dtype: Any = torch.bfloat16) -> torch.nn.Parameter:
    value = torch.randn(n, k, dtype=dtype) * k ** -0.5
    if _STATE["primary"] is not None:  # built under quantized_model_init: the FP8 copy is the weight
        return QuantizedParam(value.to(torch.float8_e4m3fn))
    return torch.nn.Parameter(value)


def _quantize(module: torch.nn.Module, names: tuple[str, ...], first: bool | None) -> None:
    """Under an FP8 recipe: ``first`` True or None quantizes (a copy per weight, kept on the module
    as TE keeps its ``_fp8_workspaces``), False needs the copies a first call left."""
    if _STATE["recipe"] is None:
        return
    cache: dict[str, torch.Tensor] = module.__dict__.setdefault("cached_weights", {})
    if first is False:
        if any(name not in cache for name in names):
            raise RuntimeError("cached FP8 weight used before a first micro-batch quantized it")
        return
    cache.update({name: getattr(module, name).detach().clone() for name in names})


class Linear(torch.nn.Module):
    def __init__(self, k: int, n: int, bias: bool = False, params_dtype: Any = torch.bfloat16, device: Any = None,
                 fuse_wgrad_accumulation: bool = False) -> None:
        super().__init__()
        self.weight = _weight(n, k, params_dtype)
        self.fuse = fuse_wgrad_accumulation

    @property
    def cached(self) -> torch.Tensor | None:
        return self.__dict__.get("cached_weights", {}).get("weight")

    def forward(self, x: torch.Tensor, is_first_microbatch: bool | None = None) -> torch.Tensor:
        _quantize(self, ("weight",), is_first_microbatch)
        return _FusedLinear.apply(x, self.weight, self.fuse)


class GroupedLinear(torch.nn.Module):
    """``num_gemms`` weights ``weight0`` ... as TE names them; rows of the input split by ``m_splits``."""

    def __init__(self, num_gemms: int, k: int, n: int, bias: bool = False, params_dtype: Any = torch.bfloat16,
                 device: Any = None, fuse_wgrad_accumulation: bool = False, **_: Any) -> None:
        super().__init__()
        self.num_gemms = num_gemms
        for i in range(num_gemms):
            setattr(self, f"weight{i}", _weight(n, k, params_dtype))
        self.fuse = fuse_wgrad_accumulation

    def forward(self, x: torch.Tensor, m_splits: list[int], is_first_microbatch: bool | None = None) -> torch.Tensor:
        if len(m_splits) != self.num_gemms or sum(m_splits) != x.shape[0]:
            raise ValueError(f"splits {m_splits} do not cover {x.shape[0]} rows in {self.num_gemms} groups")
        names = tuple(f"weight{i}" for i in range(self.num_gemms))
        _quantize(self, names, is_first_microbatch)
        return torch.cat([_FusedLinear.apply(part, getattr(self, name), self.fuse)
                          for part, name in zip(x.split(list(m_splits)), names, strict=True)])


class LayerNorm(torch.nn.Module):
    def __init__(self, width: int, params_dtype: Any = torch.bfloat16, device: Any = None) -> None:
        super().__init__()
        self.weight = torch.nn.Parameter(torch.ones(width, dtype=params_dtype))
        self.bias = torch.nn.Parameter(torch.zeros(width, dtype=params_dtype))  # TE's LayerNorm has one

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.layer_norm(x, x.shape[-1:], self.weight, self.bias)


class LayerNormLinear(torch.nn.Module):
    def __init__(self, k: int, n: int, bias: bool = False, params_dtype: Any = torch.bfloat16, device: Any = None,
                 fuse_wgrad_accumulation: bool = False, **_: Any) -> None:
        super().__init__()
        self.layer_norm_weight = torch.nn.Parameter(torch.ones(k, dtype=params_dtype))
        self.layer_norm_bias = torch.nn.Parameter(torch.zeros(k, dtype=params_dtype))
        self.weight = _weight(n, k, params_dtype)
        self.fuse = fuse_wgrad_accumulation

    def forward(self, x: torch.Tensor, is_first_microbatch: bool | None = None) -> torch.Tensor:
        _quantize(self, ("weight",), is_first_microbatch)
        xn = F.layer_norm(x, x.shape[-1:], self.layer_norm_weight, self.layer_norm_bias)
        return _FusedLinear.apply(xn, self.weight, self.fuse)


class LayerNormMLP(torch.nn.Module):
    def __init__(self, hidden: int, ffn: int, bias: bool = False, activation: str = "gelu",
                 params_dtype: Any = torch.bfloat16, device: Any = None, fuse_wgrad_accumulation: bool = False,
                 **_: Any) -> None:
        super().__init__()
        self.swiglu = activation == "swiglu"
        self.layer_norm_weight = torch.nn.Parameter(torch.ones(hidden, dtype=params_dtype))
        self.layer_norm_bias = torch.nn.Parameter(torch.zeros(hidden, dtype=params_dtype))
        self.fc1_weight = _weight((2 if self.swiglu else 1) * ffn, hidden, params_dtype)
        self.fc2_weight = _weight(hidden, ffn, params_dtype)
        self.fuse = fuse_wgrad_accumulation

    def forward(self, x: torch.Tensor, is_first_microbatch: bool | None = None) -> torch.Tensor:
        _quantize(self, ("fc1_weight", "fc2_weight"), is_first_microbatch)
        h = _FusedLinear.apply(F.layer_norm(x, x.shape[-1:], self.layer_norm_weight, self.layer_norm_bias),
                               self.fc1_weight, self.fuse)
        if self.swiglu:
            gate, up = h.chunk(2, dim=-1)
            h = F.silu(gate) * up
        else:
            h = F.gelu(h)
        return _FusedLinear.apply(h, self.fc2_weight, self.fuse)


class DotProductAttention(torch.nn.Module):
    """Causal attention over ``[s, b, heads, d]`` (GQA by repeating K and V); no parameters, as TE's."""

    def __init__(self, heads: int, kv_channels: int | tuple[int, int], num_gqa_groups: int | None = None,
                 **_: Any) -> None:
        super().__init__()
        self.heads = heads

    def forward(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        s, b = q.shape[:2]
        repeat = q.shape[2] // k.shape[2]
        k, v = k.repeat_interleave(repeat, dim=2), v.repeat_interleave(repeat, dim=2)
        out = F.scaled_dot_product_attention(*(t.permute(1, 2, 0, 3).float() for t in (q, k, v)), is_causal=True)
        return out.permute(2, 0, 1, 3).reshape(s, b, -1).to(q.dtype)


class MultiheadAttention(torch.nn.Module):
    """TE's parameters with ``input_layernorm=True, fuse_qkv_params=True, bias=False``: the LayerNorm's
    weight and bias, one fused QKV weight, the output projection's weight."""

    def __init__(self, hidden: int, heads: int, kv_channels: int, num_gqa_groups: int,
                 params_dtype: Any = torch.bfloat16, fuse_wgrad_accumulation: bool = False, **_: Any) -> None:
        super().__init__()
        self.qkv = LayerNormLinear(hidden, (heads + 2 * num_gqa_groups) * kv_channels, params_dtype=params_dtype,
                                   fuse_wgrad_accumulation=fuse_wgrad_accumulation)
        self.proj = Linear(heads * kv_channels, hidden, params_dtype=params_dtype,
                           fuse_wgrad_accumulation=fuse_wgrad_accumulation)
        self.core = DotProductAttention(heads, kv_channels, num_gqa_groups)
        self.shape = (heads, num_gqa_groups, kv_channels)

    def forward(self, x: torch.Tensor, is_first_microbatch: bool | None = None) -> torch.Tensor:
        s, b, _ = x.shape
        heads, groups, d = self.shape
        q, k, v = self.qkv(x, is_first_microbatch).split([heads * d, groups * d, groups * d], dim=-1)
        context = self.core(q.reshape(s, b, heads, d), k.reshape(s, b, groups, d), v.reshape(s, b, groups, d))
        return self.proj(context, is_first_microbatch)


class TransformerLayer(torch.nn.Module):
    def __init__(self, hidden: int, ffn: int, heads: int, *, num_gqa_groups: int, kv_channels: int,
                 fuse_wgrad_accumulation: bool = False, activation: str = "gelu", **_: Any) -> None:
        super().__init__()
        fuse = fuse_wgrad_accumulation
        self.norm1, self.norm2 = LayerNorm(hidden), LayerNorm(hidden)
        self.qkv = Linear(hidden, (heads + 2 * num_gqa_groups) * kv_channels, fuse_wgrad_accumulation=fuse)
        self.proj = Linear(heads * kv_channels, hidden, fuse_wgrad_accumulation=fuse)
        self.up = Linear(hidden, (2 if activation == "swiglu" else 1) * ffn, fuse_wgrad_accumulation=fuse)
        self.down = Linear(ffn, hidden, fuse_wgrad_accumulation=fuse)
        self.q = heads * kv_channels
        self.swiglu = activation == "swiglu"

    def forward(self, x: torch.Tensor, is_first_microbatch: bool | None = None) -> torch.Tensor:
        q = self.qkv(self.norm1(x), is_first_microbatch)[..., : self.q]
        x = x + self.proj(torch.tanh(q), is_first_microbatch)
        h = self.up(self.norm2(x), is_first_microbatch)
        if self.swiglu:
            gate, up = h.chunk(2, dim=-1)
            h = F.silu(gate) * up
        return x + self.down(h, is_first_microbatch)


_STATE: dict[str, Any] = {"recipe": None, "primary": None}


@contextlib.contextmanager
def _recipe_in(key: str, recipe: Any) -> Iterator[None]:
    """``_STATE[key]`` set to ``recipe`` inside, restored after (nested regions restore theirs)."""
    before = _STATE[key]
    _STATE[key] = recipe
    try:
        yield
    finally:
        _STATE[key] = before


def quantized_model_init(enabled: bool = True, recipe: Any = None) -> contextlib.AbstractContextManager[None]:
    """GEMM weights built inside are FP8 primary weights (:class:`QuantizedParam`)."""
    return _recipe_in("primary", recipe if enabled else None)


def autocast(enabled: bool = True, recipe: Any = None) -> contextlib.AbstractContextManager[None]:
    return _recipe_in("recipe", recipe if enabled else None)


class _Recipe:
    def __init__(self, name: str) -> None:
        self.name = name


class _Event:
    def __init__(self, enable_timing: bool = False) -> None:
        self.t = 0.0

    def record(self) -> None:
        self.t = time.perf_counter()

    def synchronize(self) -> None:
        pass

    def elapsed_time(self, end: _Event) -> float:
        return (end.t - self.t) * 1e3


class _Allocator:
    """Counters that only grow between resets: every delta the measuring path takes is positive."""

    def __init__(self) -> None:
        self.now = 1 << 30

    def allocated(self) -> int:
        self.now += 1 << 20
        return self.now

    def peak(self) -> int:
        return self.now + (1 << 22)


def install(monkeypatch: pytest.MonkeyPatch, *, oom_above: int = 2) -> Any:
    """The measuring module, importable and running on CPU with this fake; returns it."""
    te = types.ModuleType("transformer_engine.pytorch")
    for name, value in (("Linear", Linear), ("LayerNorm", LayerNorm), ("TransformerLayer", TransformerLayer),
                        ("autocast", autocast), ("quantized_model_init", quantized_model_init),
                        ("GroupedLinear", GroupedLinear),
                        ("LayerNormLinear", LayerNormLinear), ("LayerNormMLP", LayerNormMLP),
                        ("DotProductAttention", DotProductAttention), ("MultiheadAttention", MultiheadAttention)):
        setattr(te, name, value)
    package = types.ModuleType("transformer_engine")
    package.__version__ = "0.0-fake"  # type: ignore[attr-defined]
    package.pytorch = te  # type: ignore[attr-defined]
    common = types.ModuleType("transformer_engine.common")
    recipe = types.ModuleType("transformer_engine.common.recipe")
    cpp = types.ModuleType("transformer_engine.pytorch.cpp_extensions")
    cpp.general_gemm = cpp.general_grouped_gemm = None  # type: ignore[attr-defined]
    for name in ("transformer_engine", "transformer_engine.pytorch", "transformer_engine_torch",
                 "transformer_engine.common", "transformer_engine.common.recipe",
                 "transformer_engine.pytorch.cpp_extensions"):
        monkeypatch.setitem(sys.modules, name, {"transformer_engine": package, "transformer_engine.pytorch": te,
                                                "transformer_engine.common": common,
                                                "transformer_engine.common.recipe": recipe,
                                                "transformer_engine.pytorch.cpp_extensions": cpp}.get(
                                                    name, types.ModuleType(name)))
    for name in ("gemm_bench.measure.backends.te", "gemm_bench.measure.backends.model_parts",
                 "gemm_bench.measure.backends.rank_layer"):
        monkeypatch.delitem(sys.modules, name, raising=False)
    import gemm_bench.measure.backends.model_parts as parts
    import gemm_bench.measure.backends.rank_layer as rank_layer

    monkeypatch.setattr(parts, "DEVICE", "cpu")
    monkeypatch.setattr(rank_layer, "DEVICE", "cpu")
    # A full collection of a test process's heap takes most of a second; the GPU tool freezes it instead.
    monkeypatch.setattr(parts, "gc", types.SimpleNamespace(collect=lambda: 0))
    monkeypatch.setattr(parts, "make_recipe", lambda p: None if p == "bf16" else _Recipe(p))
    allocator = _Allocator()
    cuda = torch.cuda
    for name, fake in (("synchronize", lambda: None), ("empty_cache", lambda: None),
                       ("memory_allocated", allocator.allocated), ("max_memory_allocated", allocator.peak),
                       ("reset_peak_memory_stats", lambda: None), ("mem_get_info", lambda: (60 << 30, 80 << 30)),
                       ("memory_reserved", lambda: 0), ("get_device_name", lambda: "NVIDIA H100 80GB HBM3"),
                       ("Event", _Event)):
        monkeypatch.setattr(cuda, name, fake)
    real_step = parts.RealModel.step

    def step(self: Any, microbatches: int) -> float:
        if self.config.micro_batch_size > oom_above:
            raise torch.OutOfMemoryError("fake: CUDA out of memory")
        return real_step(self, microbatches)

    monkeypatch.setattr(parts.RealModel, "step", step)
    # The real run's GPU time reads the profiler's kernels: two overlapping kernels, 0-3 ms and 1-4 ms,
    # over the 3 profiled steps (a union of 4 ms, so 4/3 ms a step; their sum would be 2 ms a step).
    from gemm_bench.measure import timing

    monkeypatch.setattr(timing, "_profiler", contextlib.nullcontext)
    monkeypatch.setattr(timing, "_activities", lambda prof: [
        timing.GpuActivity("kernel", "a", 0, 3_000_000), timing.GpuActivity("kernel", "b", 1_000_000, 3_000_000),
        timing.GpuActivity("gpu_memcpy", "Memcpy DtoD", 0, 9_000_000)])
    monkeypatch.setattr(parts, "OPTIMIZER_SIZES", (1 << 12, 1 << 14))
    monkeypatch.setattr(parts, "OPTIMIZER_PIECE", 1 << 11)
    return parts


def group_timer(rounds: int = 3) -> Any:
    """A group timer calling each competitor ``rounds`` times with wall-clock marks (no graphs)."""
    from gemm_bench.measure.timing import GroupTiming, Samples

    def group(builders: dict[str, Any], graphs: bool, label: str) -> Any:
        samples: dict[str, dict[str, list[float]]] = {}
        for name, build in builders.items():
            fn = build()
            fn(lambda region, edge: None)
            opened: dict[str, float] = {}

            def mark(region: str, edge: str, name: str = name, opened: dict[str, float] = opened) -> None:
                if edge == "start":
                    opened[region] = time.perf_counter()
                else:
                    samples.setdefault(name, {}).setdefault(region, []).append(
                        (time.perf_counter() - opened.pop(region)) * 1e3)

            for _ in range(rounds):
                fn(mark)
        timed = {n: {r: Samples(ms) for r, ms in regions.items()} for n, regions in samples.items()}
        # One profiled round per region, as the cross-check keeps it: a GEMM for half of the region's
        # median and a norm for a fifth, back to back (the rest is idle), so each part's breakdown is known.
        kernels = {n: {r: [[("nvjet_sm90_tst_128x256_64x4_bf16", 0, int(s.median * 5e5)),
                            ("rmsnorm_fwd_tuned_kernel", int(s.median * 5e5), int(s.median * 2e5))]]
                       for r, s in regions.items()} for n, regions in timed.items()}
        return GroupTiming(timed, {}, {}, {"timed": label}, {"fake": True}, kernels), {}

    return group
