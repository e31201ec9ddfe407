"""GPU backends. Importing anything here imports torch (and, for ``te``, Transformer Engine).

May import :mod:`gemm_bench.measure` (timing's ``Competitor``), :mod:`gemm_bench.results` and
:mod:`gemm_bench.question`.
"""
