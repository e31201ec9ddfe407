"""Why a mixture of experts' cached micro-batch is slower than its first (issue 32), on the GPU.

The committed breakdowns put all of a mixture of experts' extra cached-micro-batch time in its GEMMs,
with the same kernels; Transformer Engine's backward adds the weight gradients into the FP32 main
gradients only when ``is_first_microbatch`` is False (``accumulate_wgrad_into_param_main_grad``), and
writes them on a first micro-batch. This times one rank's layer, forward + backward, as the model step
does (``is_first_microbatch`` True, then False), in both orders, with the fused FP32 accumulation on
(as measured) and off (the control: the weight gradients land in ``.grad``, nothing read back).
If the cause is the accumulation, the cached call is slower with it on, in either order, and not
with it off (BF16; under FP8 the cached call also skips the weight quantization).

  device run: bash .devkit/install.sh && export PYTHONPATH=/tmp/site:$PYTHONPATH;
              python3 tools/gpu_cached_first.py [--models mixtral-8x7b,gpt-oss-120b]
"""

from __future__ import annotations

import argparse
import functools
import statistics
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT / "bench")]


def _call(torch: Any, te: Any, layer: Any, x: Any, dy: Any, recipe: Any, first: bool) -> float:
    """One forward + backward of ``layer`` with ``is_first_microbatch=first``, timed with CUDA events (ms)."""
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    with te.autocast(enabled=recipe is not None, recipe=recipe):
        y = layer(x, is_first_microbatch=first)
    y.backward(dy)
    end.record()
    end.synchronize()
    x.grad = None
    for p in layer.parameters():
        p.grad = None
    return float(start.elapsed_time(end))


def main() -> int:
    import torch
    import transformer_engine.pytorch as te

    from gemm_bench.measure.backends import model_parts as mp
    from gemm_bench.measure.backends.rank_layer import RankLayer
    from gemm_bench.measure.backends.te import make_recipe
    from gemm_bench.question.question import build_question

    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--models", default="mixtral-8x7b,gpt-oss-120b")
    parser.add_argument("--precisions", default="bf16,fp8-current")
    parser.add_argument("--reps", type=int, default=10)
    args = parser.parse_args()
    print(torch.cuda.get_device_name())
    for model in args.models.split(","):
        config = build_question(model=model).config
        assert config is not None
        for fused in (True, False):
            layer = RankLayer(config, mp.ROUTING, fuse_wgrad=fused)
            if fused:
                mp.add_main_grads(layer)
            x, dy = mp._hidden(config, grad=True), mp._hidden(config)
            for precision in args.precisions.split(","):
                recipe = make_recipe(precision)
                call = functools.partial(_call, torch, te, layer, x, dy, recipe)
                for _ in range(3):
                    call(True)
                    call(False)
                times: dict[str, list[float]] = {"first then cached: first": [], "first then cached: cached": [],
                                                 "cached then first: cached": [], "cached then first: first": []}
                for _ in range(args.reps):
                    times["first then cached: first"].append(call(True))
                    times["first then cached: cached"].append(call(False))
                for _ in range(args.reps):
                    times["cached then first: cached"].append(call(False))
                    times["cached then first: first"].append(call(True))
                med = {k: statistics.median(v) for k, v in times.items()}
                ratio_a = med["first then cached: cached"] / med["first then cached: first"]
                ratio_b = med["cached then first: cached"] / med["cached then first: first"]
                print(f"{model:14s} {precision:12s} fused wgrad {'on ' if fused else 'off'}  "
                      + "  ".join(f"{k.split(': ')[1]} {v:7.2f}" for k, v in med.items())
                      + f"  cached/first {ratio_a:.3f} (first->cached order) {ratio_b:.3f} (cached->first order)")
            del layer, x, dy, call
            torch.cuda.empty_cache()
    return 0


if __name__ == "__main__":
    sys.exit(main())
