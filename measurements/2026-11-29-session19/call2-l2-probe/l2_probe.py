"""Probe (session 19): do the autocast GEMM rows of gpt-oss-120b's EP 8 experts cost FP8 more than the
same work inside a step because each row is timed after an L2 flush?

gpt-oss-120b at EP 8 on an H200: the rank's 16 local experts as one te.GroupedLinear (1,024 tokens each,
2880 -> 5760 and 2880 -> 2880). The committed rows read FP8 Delayed's Fprop at 1.09 ms against BF16's
0.715 ms (mlp_up), while inside the layer step FP8's GEMM and quantization kernels beat BF16's. Here each
op's forward + backward (Fprop, Dgrad, Wgrad in one region) is timed per recipe two ways, interleaved
round by round: "cold", after writing a 512 MiB buffer (L2 flushed, as the rows are timed), and "warm",
right after the previous iteration of the same op (as a step's GEMMs follow each other). The GPU is kept
busy ahead of the host (torch.cuda._sleep before each region), so host launch gaps are not timed.
"""

from __future__ import annotations

import json
import os
import statistics
import sys

import torch
import transformer_engine
import transformer_engine.pytorch as te
from transformer_engine.common import recipe as te_recipe

assert os.environ.get("NCCL_NVLS_ENABLE") == "0"
RECIPES = {"bf16": None, "fp8-delayed": te_recipe.DelayedScaling(), "fp8-current": te_recipe.Float8CurrentScaling()}
OPS = {"mlp_up": (2880, 5760), "mlp_down": (2880, 2880)}
GROUPS, TOKENS = 16, 1024
ROUNDS = 30
flush = torch.empty(512 << 20, dtype=torch.uint8, device="cuda")


def region(layer, x, dy, splits, recipe):
    with te.autocast(enabled=recipe is not None, recipe=recipe):
        y = layer(x, splits)
    y.backward(dy)
    x.grad = None
    for p in layer.parameters():
        p.grad = None


def main() -> None:
    out = {"device": torch.cuda.get_device_name(), "te": transformer_engine.__version__, "rounds": ROUNDS, "ms": {}}
    for op, (k, n) in OPS.items():
        layers = {}
        for name, recipe in RECIPES.items():
            layer = te.GroupedLinear(GROUPS, k, n, bias=False, params_dtype=torch.bfloat16, device="cuda")
            x = torch.randn(GROUPS * TOKENS, k, device="cuda", dtype=torch.bfloat16, requires_grad=True)
            dy = torch.randn(GROUPS * TOKENS, n, device="cuda", dtype=torch.bfloat16)
            layers[name] = (layer, x, dy, recipe)
            for _ in range(5):
                region(layer, x, dy, [TOKENS] * GROUPS, recipe)
        torch.cuda.synchronize()
        samples = {(name, how): [] for name in RECIPES for how in ("cold", "warm")}
        for _ in range(ROUNDS):
            for name, (layer, x, dy, recipe) in layers.items():
                for how in ("cold", "warm"):
                    if how == "cold":
                        flush.fill_(1)
                    else:
                        region(layer, x, dy, [TOKENS] * GROUPS, recipe)  # the same op just ran: warm
                    torch.cuda._sleep(20_000_000)  # ~10 ms of GPU time: the host queues the region meanwhile
                    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                    start.record()
                    region(layer, x, dy, [TOKENS] * GROUPS, recipe)
                    end.record()
                    torch.cuda.synchronize()
                    samples[(name, how)].append(start.elapsed_time(end))
        for (name, how), values in samples.items():
            out["ms"][f"{op} {name} {how}"] = round(statistics.median(values), 4)
        print(op, {f"{n} {h}": round(statistics.median(v), 3) for (n, h), v in samples.items()}, flush=True)
    json.dump(out, sys.stdout if len(sys.argv) < 2 else open(sys.argv[1], "w"), indent=1)


if __name__ == "__main__":
    main()
