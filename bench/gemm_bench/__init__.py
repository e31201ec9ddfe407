"""gemm-guide's benchmark package: transformer-layer GEMM shapes, measurement and reports.

The core (``config``, ``shapes``, ``precisions``, ``question``, ``plan``, ``results``, ``cache``,
``report``) imports no torch, so the documentation builds on machines without a GPU stack.
GPU code lives in ``timing``, ``provenance``, ``runner`` and ``backends``.
"""

__version__ = "0.1.0"
