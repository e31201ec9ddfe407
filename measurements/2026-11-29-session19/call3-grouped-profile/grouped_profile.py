"""Probe (session 19): where gpt-oss-120b EP 8's FP8 grouped experts differ between the autocast rows
(each te.GroupedLinear alone) and the layer step (the same modules inside the rank's layer).

Per recipe (BF16, FP8 Delayed): the layer step (gemm_bench's own build_layer, forward + backward) and
the two expert GroupedLinears alone (forward + backward, as l2_probe.py), each run 5 times after warm-up
under torch.profiler. Printed per run kind: every kernel's name (shortened), calls, total GPU ms; the
kernels' summed time, the union of their intervals (busy) and so how much they overlapped; and per
category of gemm_bench's classify(). GPU time only; events would add nothing here.
"""

from __future__ import annotations

import collections
import json
import os
import sys

import torch
import transformer_engine.pytorch as te
from torch.profiler import ProfilerActivity, profile

from gemm_bench.measure.backends.layer_step import build_layer
from gemm_bench.measure.backends.te import make_recipe
from gemm_bench.question.question import build_question
from gemm_bench.results.kernel_kinds import classify

assert os.environ.get("NCCL_NVLS_ENABLE") == "0"
REPS = 5


def union_ms(intervals):
    total, end = 0.0, -1.0
    for s, e in sorted(intervals):
        if s > end:
            total += e - s
            end = e
        elif e > end:
            total += e - end
            end = e
    return total / 1000.0


def run(fn, label, out):
    for _ in range(3):
        fn()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(REPS):
            fn()
        torch.cuda.synchronize()
    kernels = [e for e in prof.events() if e.device_type.name == "CUDA" and e.device_time > 0
               and "Memcpy" not in e.name and "Memset" not in e.name]
    by_name = collections.defaultdict(lambda: [0, 0.0])
    by_cat = collections.defaultdict(float)
    intervals = []
    for e in kernels:
        by_name[e.name[:90]][0] += 1
        by_name[e.name[:90]][1] += e.device_time / 1000.0
        by_cat[classify(e.name)] += e.device_time / 1000.0
        intervals.append((e.time_range.start, e.time_range.end))
    summed = sum(v[1] for v in by_name.values()) / REPS
    busy = union_ms(intervals) / REPS
    out[label] = {"kernel_sum_ms": round(summed, 4), "busy_ms": round(busy, 4),
                  "by_category_ms": {k: round(v / REPS, 4) for k, v in sorted(by_cat.items())},
                  "top": sorted(([n, c // REPS, round(t / REPS, 4)] for n, (c, t) in by_name.items()),
                                key=lambda r: -r[2])[:30]}
    print(f"== {label}: kernels summed {summed:.3f} ms, busy {busy:.3f} ms (overlap {summed - busy:.3f})")
    print("   by category:", {k: round(v / REPS, 3) for k, v in sorted(by_cat.items())})
    for n, c, t in out[label]["top"][:14]:
        print(f"   {t:8.3f} ms  x{c:3d}  {n}")
    sys.stdout.flush()


def main() -> None:
    config = build_question(model="gpt-oss-120b/ep8").config
    out = {"device": torch.cuda.get_device_name(), "reps": REPS}
    shape = (config.seq_length, config.micro_batch_size, config.hidden_size)
    splits = [config.tokens * config.moe_router_topk * config.expert_model_parallel_size // config.num_experts] \
        * config.local_experts
    for precision in ("bf16", "fp8-delayed"):
        recipe = make_recipe(precision)
        layer = build_layer(config)
        x = torch.randn(*shape, device="cuda", dtype=torch.bfloat16, requires_grad=True)
        dy = torch.randn(*shape, device="cuda", dtype=torch.bfloat16)

        def step(layer=layer, x=x, dy=dy, recipe=recipe):
            with te.autocast(enabled=recipe is not None, recipe=recipe):
                y = layer(x)
            y.backward(dy)
            x.grad = None
            for p in layer.parameters():
                p.grad = None

        run(step, f"layer step {precision}", out)
        experts = next(m for m in layer.modules() if m.__class__.__name__ == "Experts")
        for name in ("fc1", "fc2"):
            mod = getattr(experts, name)
            xi = torch.randn(sum(splits), mod.in_features, device="cuda", dtype=torch.bfloat16, requires_grad=True)
            dyi = torch.randn(sum(splits), mod.out_features, device="cuda", dtype=torch.bfloat16)

            def alone(mod=mod, xi=xi, dyi=dyi, recipe=recipe):
                with te.autocast(enabled=recipe is not None, recipe=recipe):
                    y = mod(xi, splits)
                y.backward(dyi)
                xi.grad = None
                for p in mod.parameters():
                    p.grad = None

            run(alone, f"{name} alone {precision}", out)
        del layer
        torch.cuda.empty_cache()
    json.dump(out, open(sys.argv[1], "w") if len(sys.argv) > 1 else sys.stdout, indent=1)


if __name__ == "__main__":
    main()
