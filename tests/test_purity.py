"""The core must build the docs on machines with no GPU stack: it may not import torch.

Nor Sphinx: ``gemm-bench`` (refresh included) runs without the extension in the process.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

CORE = [f"gemm_bench.{name}" for name in (
    "question.config", "question.shapes", "question.precisions", "question.question", "question.plan",
    "results.schema", "results.cache", "report.report", "cli", "question.devices", "question.choices",
    "report.figures", "measure.phases", "question.hardware", "report.roofline", "measure.accuracy", "measure.step",
    "measure.peers", "report.compare", "report.study_compare", "report.compare_basis", "results.merge",
    "results.stack", "cli.refresh", "cli.fleet",
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



ROOT = Path(__file__).resolve().parent.parent


def _import_contracts() -> list[str]:
    """The text of each ``[[tool.importlinter.contracts]]`` table of pyproject.toml (no tomllib on 3.10)."""
    text = (ROOT / "pyproject.toml").read_text(encoding="utf-8")
    section = text[text.index("[tool.importlinter]"):]
    section = re.split(r"\n\[(?!\[)", section, maxsplit=1)[0]  # up to the next plain table
    return section.split("[[tool.importlinter.contracts]]")[1:]


def test_every_extension_module_has_a_layer() -> None:
    """Issue 31: the extension had no layers in lint (and an import circle). Every module of it is
    in the layers contract, so a new module must be placed; circles are a contract of their own."""
    contracts = _import_contracts()
    layers = [c for c in contracts if 'type = "layers"' in c and '"gemm_benchmark.' in c]
    assert len(layers) == 1
    layered = set(re.findall(r"gemm_benchmark\.\w+", layers[0].split("layers = [", 1)[1]))
    modules = {f"gemm_benchmark.{p.stem}" for p in (ROOT / "sphinxext" / "gemm_benchmark").glob("*.py")
               if p.stem != "__init__"}
    assert layered == modules, (sorted(modules - layered), sorted(layered - modules))
    acyclic = [c for c in contracts if 'type = "acyclic_siblings"' in c]
    assert len(acyclic) == 1 and 'ancestors = ["gemm_bench", "gemm_benchmark"]' in acyclic[0]


def test_no_import_goes_up_or_around() -> None:
    """``lint-imports`` (the ``test`` extra installs it, so ``nox -s tests`` runs this, as ``nox -s lint`` does)
    keeps both packages' layers and forbids circles
    (the extension's buildlog -> config -> execution -> buildlog broke both)."""
    pytest.importorskip("importlinter")
    lint = Path(sys.executable).parent / "lint-imports"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT / "bench"), str(ROOT / "sphinxext")])}
    done = subprocess.run([str(lint) if lint.exists() else "lint-imports"], cwd=ROOT, env=env, capture_output=True,
                          text=True, timeout=300, check=False)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-2000:]
