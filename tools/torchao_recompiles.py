"""Why does torchao's compiled Float8Linear recompile? (A diagnostic for the GPU box.)

Runs the torchao peer (gemm_bench.measure.backends.torchao_float8) over the site's Fprop shapes
in one process with dynamo's recompile log on, and prints each build's wall time and dynamo's
reason for every recompilation. Usage: python3 tools/torchao_recompiles.py [tensorwise|rowwise]
"""

from __future__ import annotations

import logging
import sys
import time

import torch

from gemm_bench.measure.backends.torchao_float8 import linear_competitor
from gemm_bench.question.shapes import GemmShape

SHAPES = [  # (M, K, N) Fprop shapes of the site's questions: TE guide, Llama 3 8B, 70B TP 8, sweep
    (15872, 4096, 12288), (15872, 4096, 4096), (15872, 4096, 16384), (15872, 16384, 4096),
    (8192, 4096, 6144), (8192, 4096, 28672), (8192, 14336, 4096), (8192, 8192, 1280), (256, 256, 256),
]


def main() -> None:
    recipe = sys.argv[1] if len(sys.argv) > 1 else "rowwise"
    torch._logging.set_logs(recompiles=True)
    logging.getLogger("torch._dynamo").setLevel(logging.INFO)
    for m, k, n in SHAPES:
        started = time.monotonic()
        fn = linear_competitor(recipe, GemmShape(op="probe", pass_="fprop", m=m, k=k, n=n))
        fn(lambda region, edge: None)
        torch.cuda.synchronize()
        print(f"{recipe} {m}x{k}x{n}: first call {time.monotonic() - started:.1f} s", flush=True)


if __name__ == "__main__":
    main()
