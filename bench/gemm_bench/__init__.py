"""gemm-guide's benchmark package: transformer-layer GEMM shapes, measurement and reports.

Sub-packages by concern, each importing only those below it (``nox -s lint`` checks this with
import-linter): :mod:`~gemm_bench.cli` (the ``gemm-bench`` command) over
:mod:`~gemm_bench.report` (reports, comparisons, roofline, figures) over
:mod:`~gemm_bench.measure` (runner, timing, telemetry, backends, layer step, accuracy, peers) over
:mod:`~gemm_bench.results` (schema, cache, staleness, merge) over :mod:`~gemm_bench.question`
(configs, shapes, precisions, devices, hardware, the question and its hash).

``question``, ``results`` and ``report`` import no torch, so the documentation builds on machines
without a GPU stack; GPU code is imported by ``measure`` when it runs. Nothing here imports Sphinx
or the extension.
"""

__version__ = "0.1.0"
