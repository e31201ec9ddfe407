"""Per preset and GPU: the layout, memory per GPU per recipe (GiB), fits, the largest micro-batch predicted
and, where the layout-search study has it, found. Printed from the committed cache, from the repository root:
PYTHONPATH=bench python measurements/2026-11-29-session18/memory_table.py"""

from pathlib import Path

from gemm_bench.question.config import PRESETS
from gemm_bench.question.layout import PRESET_LAYOUTS
from gemm_bench.question.question import build_question
from gemm_bench.report.layout_memory import recipe_memory
from gemm_bench.report.layout_search import found_text, model_search
from gemm_bench.results import studies
from gemm_bench.results.cache import read_document
from gemm_bench.results.typed import parse

CACHE = Path("docs/_gemm_cache")


def main() -> None:
    searches, _ = studies.read_studies(CACHE, "layout-search")
    for model in sorted(set(PRESETS) | set(PRESET_LAYOUTS)):
        question = build_question(model=model)
        layout, _ = question.layout_or_assumed()
        if question.config is None or layout is None:
            continue
        first = True
        for path in sorted(CACHE.glob(f"{question.hash}--*.json")):
            result = parse(read_document(path))
            memories, _ = recipe_memory(result, question.config, layout)
            if not memories:
                continue
            search = model_search(searches, result.device.name, model, question.config, layout)
            cells = []
            for m in memories:
                found = found_text(search, m.precision)
                cells.append(f"{m.memory.total / 2**30:.1f} {'fits' if m.memory.fits else 'no'}, "
                             f"{m.largest_micro_batch}" + (f" (found {found})" if found != "not searched" else ""))
            label = f"{model} ({layout.describe(overlap=False)})" if first else ""
            first = False
            print(f"| {label} | {result.device.name.replace('NVIDIA ', '')} | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()
