"""What was measured, as stored: the result document's schema, the cache, staleness and merging.

Owns the schema and its validators (:mod:`~gemm_bench.results.schema`, with the layer-step and
accuracy cells' in :mod:`~gemm_bench.results.step_schema` and
:mod:`~gemm_bench.results.accuracy_schema`), the cache directory, software-stack staleness and
the fleet merge. May import :mod:`gemm_bench.question` only; no torch (the one function that
asks the local GPU stack, :func:`~gemm_bench.results.stack.local_stack`, imports it when called).
"""
