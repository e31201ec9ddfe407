"""Sphinx extensions of gemm-guide; the one extension is :mod:`sphinxext.gemm_benchmark`."""
