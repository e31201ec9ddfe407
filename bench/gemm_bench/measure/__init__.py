"""Measuring on the GPU: the runner, timing, telemetry, the layer step, accuracy, peers and backends.

Owns everything that produces result cells (the cells' validators belong to
:mod:`gemm_bench.results`). May import :mod:`gemm_bench.results` and :mod:`gemm_bench.question`.
Importing a module here imports no torch (the pure parts, such as the layer step's summary and the
SQNR formula, are used by reports); torch and Transformer Engine are imported by the functions
that run on the GPU and by :mod:`gemm_bench.measure.backends`.
"""
