"""What a reader sees of a result: the report, comparisons, the roofline model and the figures.

Owns :class:`~gemm_bench.report.report.Report` (one result viewed for one question), comparing two
results, the roofline, and figures: a spec (:mod:`~gemm_bench.report.figure_spec`, with the style
constants), a pure-Python layout, an SVG writer and a matplotlib painter. May import
:mod:`gemm_bench.measure` (for its pure parts only), :mod:`gemm_bench.results` and
:mod:`gemm_bench.question`. Imports without torch; matplotlib only to write PDF or PNG.
"""
