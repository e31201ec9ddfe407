"""Session 20 probe: what a sliding window saves in Transformer Engine's attention, against the bound the
report reads (the windowed layers' attention kernels, all of it).

Times te.DotProductAttention forward + backward in one region, causal against causal with a left window,
at the shapes of the two models whose configs have windows: gpt-oss-120b (4096 tokens, 64 heads, 8 KV
groups, head dim 64, window 128) and Gemma 2 27B (8192 tokens, 32 heads, 16 KV groups, head dim 128, window
4096). Timed by the project's own timer (time_many: CUDA-graph replays, L2 flushed, interleaved), after
one eager step of each (a failing kernel is named before any graph). Writes window_probe.json next to $OUT.
"""
import json
import os
import sys

import torch
import transformer_engine
import transformer_engine.pytorch as te

SHAPES = {
    "gpt-oss-120b": dict(s=4096, heads=64, groups=8, d=64, window=128),
    "gemma2-27b": dict(s=8192, heads=32, groups=16, d=128, window=4096),
}


def step_fn(s, heads, groups, d, window):
    kw = {} if window is None else {"window_size": (window, 0)}
    core = te.DotProductAttention(heads, d, num_gqa_groups=groups, attention_dropout=0.0, qkv_format="sbhd",
                                  attn_mask_type="causal", **kw)
    q = torch.randn(s, 1, heads, d, device="cuda", dtype=torch.bfloat16, requires_grad=True)
    k = torch.randn(s, 1, groups, d, device="cuda", dtype=torch.bfloat16, requires_grad=True)
    v = torch.randn(s, 1, groups, d, device="cuda", dtype=torch.bfloat16, requires_grad=True)
    g = torch.randn(s, 1, heads * d, device="cuda", dtype=torch.bfloat16)

    def step():
        q.grad = k.grad = v.grad = None
        out = core(q, k, v)
        out.backward(g)
    return step


def main():
    from gemm_bench.measure.timing import TimerSettings, time_many
    out_dir = os.environ.get("OUT", ".")
    result = {"device": torch.cuda.get_device_name(), "te": transformer_engine.__version__,
              "torch": torch.__version__, "timer": "gemm_bench.measure.timing.time_many (CUDA-graph replays, "
              "L2 flushed, interleaved, default TimerSettings)", "models": {}}
    for name, shp in SHAPES.items():
        fns = {"causal": step_fn(**{**shp, "window": None}), "window": step_fn(**shp)}
        for key, fn in fns.items():  # eager first: a failing kernel is named before any graph
            fn()
            torch.cuda.synchronize()
            print(f"{name} {key}: eager step ran", flush=True)
        samples = time_many(TimerSettings(), list(fns.items()))
        med = {k: v.median for k, v in samples.items()}
        result["models"][name] = {**shp, "causal_ms": med["causal"], "window_ms": med["window"],
                                  "saved_share_of_causal": 1 - med["window"] / med["causal"],
                                  "samples_ms": {k: list(v.ms) for k, v in samples.items()}}
        print(f"{name}: causal {med['causal']:.3f} ms, window {shp['window']} {med['window']:.3f} ms, saved "
              f"{1 - med['window'] / med['causal']:.1%} of the causal attention", flush=True)
    with open(os.path.join(out_dir, "window_probe.json"), "w") as f:
        json.dump(result, f, indent=1)


if __name__ == "__main__":
    sys.exit(main())
