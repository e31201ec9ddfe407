"""Session 20 probe: what gpt-oss-120b's learned attention sinks cost in Transformer Engine's attention,
which the layer step leaves out (it times ordinary softmax attention).

Times te.DotProductAttention forward + backward at gpt-oss-120b's shapes (4096 tokens, 64 heads, 8 KV
groups, head dim 64): vanilla softmax against softmax_type="learnable" (Megatron-Bridge's setting for
gpt-oss), each causal and with the 128-token window, with the project's timer (time_many: CUDA-graph
replays, L2 flushed, interleaved) after one eager step of each. A variant Transformer Engine refuses is
recorded with its error. Writes sinks_probe.json under $OUT.
"""
import json
import os
import sys

import torch
import transformer_engine
import transformer_engine.pytorch as te

S, HEADS, GROUPS, D, WINDOW = 4096, 64, 8, 64, 128


def step_fn(softmax: str, window: int | None):
    kw = {} if window is None else {"window_size": (window, 0)}
    if softmax != "vanilla":
        kw["softmax_type"] = softmax
    core = te.DotProductAttention(HEADS, D, num_gqa_groups=GROUPS, attention_dropout=0.0, qkv_format="sbhd",
                                  attn_mask_type="causal", **kw).cuda()
    q = torch.randn(S, 1, HEADS, D, device="cuda", dtype=torch.bfloat16, requires_grad=True)
    k = torch.randn(S, 1, GROUPS, D, device="cuda", dtype=torch.bfloat16, requires_grad=True)
    v = torch.randn(S, 1, GROUPS, D, device="cuda", dtype=torch.bfloat16, requires_grad=True)
    g = torch.randn(S, 1, HEADS * D, device="cuda", dtype=torch.bfloat16)

    def step():
        q.grad = k.grad = v.grad = None
        out = core(q, k, v)
        out.backward(g)
    return step


def main():
    from gemm_bench.measure.timing import TimerSettings, time_many
    out_dir = os.environ.get("OUT", ".")
    fns, refused = {}, {}
    for softmax in ("vanilla", "learnable"):
        for window in (None, WINDOW):
            name = f"{softmax}/{'causal' if window is None else f'window {window}'}"
            try:
                fn = step_fn(softmax, window)
                fn()
                torch.cuda.synchronize()
            except (TypeError, ValueError, RuntimeError, AssertionError) as exc:
                refused[name] = f"{type(exc).__name__}: {exc}"[:500]
                print(f"{name}: refused: {refused[name]}", flush=True)
                continue
            fns[name] = fn
            print(f"{name}: eager step ran", flush=True)
    samples = time_many(TimerSettings(), list(fns.items()))
    result = {"device": torch.cuda.get_device_name(), "te": transformer_engine.__version__, "torch": torch.__version__,
              "shape": {"s": S, "heads": HEADS, "groups": GROUPS, "d": D, "window": WINDOW},
              "median_ms": {k: v.median for k, v in samples.items()},
              "samples_ms": {k: list(v.ms) for k, v in samples.items()}, "refused": refused}
    for k, v in result["median_ms"].items():
        print(f"{k}: {v:.3f} ms", flush=True)
    with open(os.path.join(out_dir, "sinks_probe.json"), "w") as f:
        json.dump(result, f, indent=1)


if __name__ == "__main__":
    sys.exit(main())
