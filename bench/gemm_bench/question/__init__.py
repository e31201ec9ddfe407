"""The question a page or a command asks: what to measure, named independently of how it was spelled.

Owns model configs, GEMM shapes, precisions and modes, device identity and specs, the one option
parser for lists (``choices``), the :class:`~gemm_bench.question.question.Question` and its hash
(which names the cache files), and the measurement plan. The bottom floor: imports nothing else
of :mod:`gemm_bench`, and no torch, Sphinx or matplotlib.
"""
