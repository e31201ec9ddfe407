"""Per model and GPU, from the committed cache (run from the repository root with bench/ on the path):
compute-alone speedup / the layout's speedup per FP8 recipe, the communication share per recipe, the bubble.
The closing note's table for issue 42 (session 19)."""

from __future__ import annotations

from pathlib import Path

from gemm_bench.question.precisions import PRECISIONS
from gemm_bench.question.question import build_question
from gemm_bench.report.layout_step import ResultLayoutSteps, preset_layout_steps, sweeps
from gemm_bench.results import studies
from gemm_bench.results.cache import Cache
from gemm_bench.results.typed import parse

CACHE = Path("docs/_gemm_cache")
MODELS = ("llama3-8b", "llama3-70b/tp8", "llama3.1-405b/tp8", "qwen2.5-7b", "qwen2.5-72b/tp8", "mixtral-8x7b/ep8",
          "mixtral-8x7b", "mixtral-8x22b", "gemma2-27b", "deepseek-v3/ep64", "gpt-oss-120b/ep8", "gpt-oss-120b")
FP8 = ("fp8-delayed", "fp8-current", "fp8-block")


def main() -> None:
    docs, _ = studies.read_studies(CACHE, "tp-comm")
    available = sweeps(docs)
    print("| Model | GPU | " + " | ".join(PRECISIONS[p].display for p in FP8)
          + " | Comm share (BF16, Delayed, Current, Block) | Bubble |")
    print("|---|---|---|---|---|---|---|")
    for model in MODELS:
        found = Cache(CACHE).lookup(build_question(model=model).hash).documents
        for doc in sorted(found, key=lambda d: d["device"]["name"]):
            steps = preset_layout_steps(parse(dict(doc)), model, available)
            gpu = doc["device"]["name"].removeprefix("NVIDIA ").split(" ")[0]
            if not isinstance(steps, ResultLayoutSteps):
                print(f"| {model} | {gpu} | {steps} |")
                continue
            base = steps.step("bf16")
            cells = []
            for p in FP8:
                step = steps.step(p)
                if step is None or base is None:
                    cells.append("—")
                    continue
                alone = step.compute_tokens_per_s / base.compute_tokens_per_s
                cells.append(f"{alone:.2f} / {base.step_ms / step.step_ms:.2f}")
            shares = ", ".join(f"{s.comm_share:.0%}" if (s := steps.step(p)) else "—" for p in ("bf16", *FP8))
            bubble = f"{base.bubble_share:.1%}" if base else "—"
            print(f"| {model} | {gpu} | " + " | ".join(cells) + f" | {shares} | {bubble} |")


if __name__ == "__main__":
    main()
