"""The core must build the docs on machines with no GPU stack: it may not import torch.

Nor Sphinx: ``gemm-bench`` (refresh included) runs without the extension in the process.
"""

from __future__ import annotations

import subprocess
import sys

CORE = [f"gemm_bench.{name}" for name in (
    "question.config", "question.shapes", "question.precisions", "question.question", "question.plan",
    "results.schema", "results.cache", "report.report", "cli", "question.devices", "question.choices",
    "report.figures", "measure.phases", "question.hardware", "report.roofline", "measure.accuracy", "measure.step",
    "measure.peers", "report.compare", "results.merge", "results.stack", "cli.refresh", "cli.fleet",
    "results.accuracy_schema", "results.step_schema", "report.figure_spec", "cli.errors")]


def test_core_imports_no_torch() -> None:
    code = (
        "import sys\n"
        f"for m in {CORE!r}: __import__(m)\n"
        "from gemm_bench.cli import main\n"
        "main(['shapes', '--model', 'llama3-8b', '--json'])\n"
        "bad = sorted(m for m in sys.modules if m.split('.')[0] in ('torch', 'transformer_engine', 'numpy',\n"
        "                                                           'sphinx', 'docutils', 'gemm_benchmark'))\n"
        "assert not bad, bad\n"
        "print('pure')\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip().endswith("pure")
