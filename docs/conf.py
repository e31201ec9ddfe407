"""Sphinx configuration of the gemm-guide site."""

from __future__ import annotations

import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
# The two packages, importable also without an install: bench/gemm_bench and sphinxext/gemm_benchmark.
sys.path[:0] = [str(HERE.parent / "bench"), str(HERE.parent / "sphinxext")]
sys.path.insert(0, str(HERE / "_ext"))

project = "gemm-guide"
author = "The gemm-guide authors"
copyright = "2026, The gemm-guide authors"

extensions = [
    "myst_parser",
    "sphinx_tabs.tabs",
    "sphinx.ext.autodoc",
    "sphinx.ext.napoleon",
    "sphinx.ext.viewcode",
    "gemm_benchmark",
    "gemm_cli_reference",
]

source_suffix = {".rst": "restructuredtext", ".md": "markdown"}
exclude_patterns = ["_build", "Thumbs.db", ".DS_Store"]
myst_enable_extensions = ["colon_fence"]
# Quotes and ellipses only: docutils' dashes turned every Megatron-LM flag the pages quote (--overlap-grad-reduce,
# --softmax-type) into an en dash and one hyphen, a flag no launcher accepts (session 20).
smartquotes_action = "qe"

html_theme = "furo"
html_title = "gemm-guide"
html_static_path = ["_static"]
html_css_files = ["site.css"]

# The measured results this site renders: docs/_gemm_cache, one JSON file per question per GPU.
gemm_benchmark_cache_dir = "_gemm_cache"
# "auto": a build on a machine with a CUDA GPU and Transformer Engine measures whatever the cache
# lacks for that GPU; elsewhere the cache answers. GEMM_BENCH_EXECUTION_MODE overrides this.
gemm_benchmark_execution_mode = "auto"
# Where collectives run beyond the measuring box, ASSUMED (no box measures a network): the ring's bus
# bandwidth per GPU between nodes (GB/s each way; one 400 Gb/s InfiniBand NDR adapter per GPU), its
# latency per ring step, and the GPUs of one node. Every number they enter says "assumed".
gemm_benchmark_inter_node_gb_s = 50.0
gemm_benchmark_inter_node_latency_us = 10.0
gemm_benchmark_gpus_per_node = 8

# The GPU backends import torch / Transformer Engine; the API reference documents them anyway.
autodoc_mock_imports = ["torch", "transformer_engine", "transformer_engine_torch"]
autodoc_member_order = "bysource"
autodoc_typehints = "description"
nitpicky = False

# A result of an earlier measurement method (or another software stack) is stale: its page marks it
# "(stale: ...)" where it is shown, the freshness page lists it, and the build's last line counts
# it. A build without a GPU cannot re-measure it, so it does not fail this site's -W build; a GPU
# box re-measures it (GEMM_BENCH_EXECUTION_MODE=auto, or `gemm-bench refresh docs/ --gpus all`).
suppress_warnings = ["gemm_benchmark.stale"]
