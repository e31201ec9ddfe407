"""``gemm-bench study layout-search``: the largest micro-batch of each preset layout's rank on this GPU.

Runs the measuring tool (``tools/gpu_layout_search.py`` of the repository) in its own process on this
GPU, uncapped, for every preset layout whose rank the tool builds whole (pipeline parallel 1: the rank
then holds every layer), and returns the study's data block
(:func:`gemm_bench.results.layout_search_schema.stored_data`), answering for this GPU itself. A GPU's
capacity emulated on a larger one (an H100's on an H200) is stored by ``tools/layout_search_to_study.py``
from a capped run of the tool, never here.
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from gemm_bench.question.layout import PRESET_LAYOUTS
from gemm_bench.question.model_step import unsupported_reason as model_step_unsupported
from gemm_bench.question.question import build_question
from gemm_bench.results.layout_search_schema import stored_data

#: The recipes searched: BF16 and the per-tensor FP8 recipes the site's layout table shows on Hopper.
PRECISIONS: tuple[str, ...] = ("bf16", "fp8-delayed", "fp8-current")


class LayoutSearchError(RuntimeError):
    """The study cannot run here (no repository tool) or its run failed."""


def tool_path() -> Path:
    """The repository's tool: the package runs from a checkout when a box refreshes the site."""
    return Path(__file__).resolve().parents[3] / "tools" / "gpu_layout_search.py"


def whole_rank_models() -> list[str]:
    """The preset models whose layout's rank is the whole model (PP 1) and which have a model step (a
    vocabulary: the rank's embedding and output layer are built too): the ones the tool builds. The
    Transformer Engine guide's layer (no vocabulary) is not one: asked of the tool, it failed the
    whole study on its first model (session 16's first run of this study on a GPU)."""
    return [model for model, preset in PRESET_LAYOUTS.items() if preset.layout.pp == 1
            and model_step_unsupported(build_question(model=model).config) is None]


def measure() -> tuple[dict[str, Any], dict[str, Any]]:
    tool = tool_path()
    if not tool.is_file():
        raise LayoutSearchError(f"{tool} is missing: run the study from a checkout of the repository")
    models = whole_rank_models()
    with tempfile.TemporaryDirectory(prefix="gemm-bench-layout-search-") as out:
        command = [sys.executable, str(tool), "--out", out, "--models", ",".join(models),
                   "--precisions", ",".join(PRECISIONS)]
        done = subprocess.run(command, check=False)
        found = Path(out) / "layout-search.json"
        if done.returncode != 0 or not found.is_file():
            raise LayoutSearchError(f"{' '.join(command)} exited with {done.returncode}")
        run = json.loads(found.read_text(encoding="utf-8"))
    method = {"tool": "tools/gpu_layout_search.py", "models": models, "precisions": list(PRECISIONS)}
    return stored_data([("layout-search.json", run)]), method
