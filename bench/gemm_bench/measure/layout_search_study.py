"""``gemm-bench study layout-search``: the largest micro-batch of each preset layout's rank on this GPU.

Runs the measuring tool (``tools/gpu_layout_search.py`` of the repository) in its own process on this
GPU, uncapped, for the presets of :data:`SEARCHED` (two dense models' whole ranks at pipeline parallel 1
and one mixture of experts' first pipeline stage: :func:`gemm_bench.question.stage_shape.searched_rank`),
and returns the study's data block
(:func:`gemm_bench.results.layout_search_schema.stored_data`), answering for this GPU itself. A GPU's
capacity emulated on a larger one (an H100's on an H200) is stored by ``tools/layout_search_to_study.py``
from a capped run of the tool, never here.

Each search starts from the answer this GPU's stored study (in the cache the new one will replace) found
for the same rank (the tool's ``--seed-from``): the same answers in fewer tries, so a refresh that changes
nothing spends two tries per recipe instead of the whole doubling (:mod:`gemm_bench.measure.microbatch_search`).
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from gemm_bench.question.model_step import unsupported_reason as model_step_unsupported
from gemm_bench.question.question import build_question
from gemm_bench.question.stage_shape import searched_rank
from gemm_bench.results.layout_search_schema import stored_data

#: The cache the study is stored in when the caller names none: the repository's, as ``gemm-bench``'s default.
DEFAULT_CACHE = Path(__file__).resolve().parents[3] / "docs" / "_gemm_cache"

#: The recipes searched: BF16 and the per-tensor FP8 recipes the site's layout table shows on Hopper.
PRECISIONS: tuple[str, ...] = ("bf16", "fp8-delayed", "fp8-current")


class LayoutSearchError(RuntimeError):
    """The study cannot run here (no repository tool) or its run failed."""


def tool_path() -> Path:
    """The repository's tool: the package runs from a checkout when a box refreshes the site."""
    return Path(__file__).resolve().parents[3] / "tools" / "gpu_layout_search.py"


#: The models the refresh searches: the two dense presets whose whole rank is built (PP 1) and one
#: mixture of experts, whose first pipeline stage is (issue 41 item 3 asks at least one of each per GPU
#: kind). The other presets stay predicted: each model adds its searches to every refresh's time.
SEARCHED: tuple[str, ...] = ("llama3-8b", "qwen2.5-7b", "mixtral-8x7b")


def searched_models() -> list[str]:
    """:data:`SEARCHED`, each checked to be a preset the tool builds (a model step, a buildable rank)."""
    out = []
    for model in SEARCHED:
        question = build_question(model=model)
        layout, _ = question.layout_or_assumed()
        config = question.config
        if layout is None or config is None or model_step_unsupported(config) is not None:
            raise LayoutSearchError(f"{model}: no layout or no model step: the search cannot build its rank")
        rank = searched_rank(layout, config)
        if isinstance(rank, str):
            raise LayoutSearchError(f"{model}: {rank}")
        out.append(model)
    return out


def measure(cache_dir: Path = DEFAULT_CACHE) -> tuple[dict[str, Any], dict[str, Any]]:
    """The study's data block and method. ``cache_dir``: the cache the study is stored in; the tool looks
    there for this GPU's stored study to seed its searches with (``--seed-from``; none there, none used).
    The tool, not this process, names the GPU: this process starts no CUDA context on the GPU the
    search measures."""
    tool = tool_path()
    if not tool.is_file():
        raise LayoutSearchError(f"{tool} is missing: run the study from a checkout of the repository")
    models = searched_models()
    with tempfile.TemporaryDirectory(prefix="gemm-bench-layout-search-") as out:
        command = [sys.executable, str(tool), "--out", out, "--models", ",".join(models),
                   "--precisions", ",".join(PRECISIONS), "--time-steps", "--seed-from", str(cache_dir)]
        done = subprocess.run(command, check=False)
        found = Path(out) / "layout-search.json"
        if done.returncode != 0 or not found.is_file():
            raise LayoutSearchError(f"{' '.join(command)} exited with {done.returncode}")
        run = json.loads(found.read_text(encoding="utf-8"))
    method = {"tool": "tools/gpu_layout_search.py", "options": ["--time-steps", "--seed-from"], "models": models,
              "precisions": list(PRECISIONS), "allocator": str(run.get("allocator", "PyTorch's default"))}
    return stored_data([("layout-search.json", run)]), method
