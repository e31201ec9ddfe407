"""``gemm-bench study tp-comm``: the tensor-parallel layer's step with its collectives on this box.

Runs the measuring tool (``tools/gpu_tp_comm.py`` of the repository: one process per GPU under
``torchrun``, :mod:`gemm_bench.measure.tp_step`) over every GPU of the box, for the models and TP
sizes of :data:`MODELS` and :data:`TP_SIZES` that the box holds, and returns the study's data block
(:func:`gemm_bench.results.tp_comm_schema.stored_data`). A box of one GPU has nothing to measure: an
error that says so. NVLink multicast stays off in every process (:func:`tp_step.force_safe_env`, run
by the tool at import, and the environment given to ``torchrun`` here).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from gemm_bench.results.tp_comm_schema import stored_data

MODELS: tuple[str, ...] = ("llama3-8b", "llama3-70b")
TP_SIZES: tuple[int, ...] = (2, 4, 8)
SEQ = 8192
SAFE_ENV = {"NCCL_NVLS_ENABLE": "0", "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1", "NVSHMEM_DISABLE_NVLS": "1"}


class TpCommError(RuntimeError):
    """The study cannot run here (one GPU, no repository tool) or its run failed."""


def tool_path() -> Path:
    """The repository's tool: the package runs from a checkout when a box refreshes the site."""
    return Path(__file__).resolve().parents[3] / "tools" / "gpu_tp_comm.py"


def measure() -> tuple[dict[str, Any], dict[str, Any]]:
    import torch

    gpus = torch.cuda.device_count()
    sizes = [tp for tp in TP_SIZES if tp <= gpus and gpus % tp == 0]
    if not sizes:
        raise TpCommError(f"this box has {gpus} GPU(s): tensor parallelism needs at least 2")
    tool = tool_path()
    if not tool.is_file():
        raise TpCommError(f"{tool} is missing: run the study from a checkout of the repository")
    with tempfile.TemporaryDirectory(prefix="gemm-bench-tp-comm-") as out:
        command = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc_per_node={gpus}",
                   str(tool), "--models", ",".join(MODELS), "--tp", ",".join(map(str, sizes)),
                   "--seq", str(SEQ), "--out", out]
        done = subprocess.run(command, env={**os.environ, **SAFE_ENV}, check=False)
        found = Path(out) / "tp-comm.json"
        if done.returncode != 0 or not found.is_file():
            raise TpCommError(f"{' '.join(command)} exited with {done.returncode}")
        tool_doc = json.loads(found.read_text(encoding="utf-8"))
    method = {"tool": "tools/gpu_tp_comm.py", "gpus": gpus, "tp": sizes, "models": list(MODELS), "seq": SEQ,
              "settings": tool_doc["provenance"]["method"].get("settings", {}), "what": tool_doc.get("what", {})}
    return stored_data(tool_doc), method
