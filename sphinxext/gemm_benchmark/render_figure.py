"""Moved to :mod:`gemm_bench.figures`: pure drawing belongs in the bench core (issue 10).

A re-export, so that ``render_block`` keeps working until it calls ``gemm_bench.figures``
(``spec_for`` + ``figure_file``) itself; delete this module then.
"""

from gemm_bench.figures import (
    PRECISION_COLORS,
    THEMES,
    figure_for,
    image_bytes,
    measured_precisions,
    summary_figure,
    svg_bytes,
    write_content_addressed,
)

__all__ = ["PRECISION_COLORS", "THEMES", "figure_for", "image_bytes", "measured_precisions", "summary_figure",
           "svg_bytes", "write_content_addressed"]
