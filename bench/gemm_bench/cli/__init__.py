"""The command line, ``gemm-bench``: parsing flags, running the other rooms, printing each error as one message.

Owns the sub-commands (:mod:`~gemm_bench.cli.commands`: shapes, run, report, ...;
:mod:`~gemm_bench.cli.fleet`: compare, merge, refresh), the refresh driver
(:mod:`~gemm_bench.cli.refresh`) and the errors they print (:mod:`~gemm_bench.cli.errors`).
May import every other room of :mod:`gemm_bench`; nothing in the library imports it. It never
imports Sphinx or the extension: ``refresh`` learns the site's questions from a Sphinx run in
another process.

``main`` is the console script ``gemm-bench`` (``gemm_bench.cli:main``); ``python -m
gemm_bench.cli`` runs the same.
"""

from gemm_bench.cli.commands import main as main
