"""The core must build the docs on machines with no GPU stack: it may not import torch."""

from __future__ import annotations

import subprocess
import sys

CORE = [f"gemm_bench.{name}" for name in (
    "config", "shapes", "precisions", "question", "plan", "results", "cache", "report", "cli", "devices", "choices",
    "figures", "phases", "hardware", "roofline", "accuracy", "step", "peers", "compare", "fleet", "stack", "refresh",
    "cli_fleet")]


def test_core_imports_no_torch() -> None:
    code = (
        "import sys\n"
        f"for m in {CORE!r}: __import__(m)\n"
        "from gemm_bench.cli import main\n"
        "main(['shapes', '--model', 'llama3-8b', '--json'])\n"
        "bad = sorted(m for m in sys.modules if m.split('.')[0] in ('torch', 'transformer_engine', 'numpy'))\n"
        "assert not bad, bad\n"
        "print('pure')\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip().endswith("pure")
