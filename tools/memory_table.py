"""Memory per GPU of every preset's published (or chosen) layout, per recipe, on every measured GPU (issue 41).

Reads the committed results (docs/_gemm_cache/*.json), finds each model id's layout in
:data:`gemm_bench.question.layout.PRESET_LAYOUTS` and prints, per model and GPU: the layout in words,
then per recipe the memory per GPU, whether it fits, the headroom, the largest micro-batch (predicted
from the measured parts) and, where it does not fit, the first change that would make it fit.

Run: PYTHONPATH=bench python tools/memory_table.py
"""

from __future__ import annotations

import sys
from pathlib import Path

from gemm_bench.question.layout import PRESET_LAYOUTS
from gemm_bench.question.memory_per_gpu import largest_micro_batch, memory_per_gpu, what_would_fit
from gemm_bench.question.question import Question, build_question
from gemm_bench.results.cache import read_document
from gemm_bench.results.model_step_schema import memory_parts

CACHE = Path(__file__).resolve().parent.parent / "docs" / "_gemm_cache"
GIB = 1 << 30
SHORT = {"bf16": "BF16", "fp8-delayed": "FP8 delayed", "fp8-current": "FP8 current", "fp8-block": "FP8 block"}


def main() -> int:
    ids = {build_question(model=model_id).hash: model_id for model_id in PRESET_LAYOUTS}
    for path in sorted(CACHE.glob("*.json"), key=lambda p: (ids.get(p.name.split("--")[0], "~"), p.name)):
        doc = read_document(path)
        block = doc.get("model_step")
        model_id = ids.get(path.name.split("--")[0])
        if block is None or model_id is None:
            continue
        question = Question.from_dict(doc["question"])
        config = question.config
        assert config is not None
        layout = PRESET_LAYOUTS[model_id].layout
        gpu = path.name.split("--")[1].removesuffix(".json")
        capacity = int(block["capacity_bytes"])
        print(f"{model_id} on {gpu} ({capacity / GIB:.1f} GiB): {layout.describe()}")
        for precision in block["memory"]:
            parts = memory_parts(block, precision)
            if parts is None:
                continue
            args = (parts, int(block["layer_params"]), config, layout)
            mem = memory_per_gpu(*args, capacity=capacity, precision=precision)
            mbs = largest_micro_batch(*args, capacity=capacity, precision=precision)
            line = (f"  {SHORT.get(precision, precision):11} {mem.total / GIB:7.1f} GiB ({mem.stage} stage) "
                    f"{'fits' if mem.fits else 'does not fit'}, headroom {mem.headroom / GIB:+.1f} GiB, "
                    f"largest MBS {mbs} (predicted)")
            if not mem.fits:
                remedy = what_would_fit(*args, capacity=capacity, precision=precision)
                line += (f"; fits with {remedy[0]} ({remedy[1].total / GIB:.1f} GiB)" if remedy
                         else "; no single change fits")
            print(line)
    return 0


if __name__ == "__main__":
    sys.exit(main())
