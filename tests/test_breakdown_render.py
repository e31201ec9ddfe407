"""The breakdown figure and sentence: bars from stored breakdowns, labels whole, the largest change named."""

from __future__ import annotations

from typing import Any

import pytest

from gemm_bench.measure.step import layer_cell
from gemm_bench.report import breakdown_figure as bf
from gemm_bench.report.figure_layout import Text, text_width
from gemm_bench.results import breakdown as bd


def _cell(precision: str, kernels: list[tuple[str, int, int]], ms: float) -> dict[str, Any]:
    block = bd.breakdown_block(ms, [bd.round_parts(kernels)], source="test")
    return layer_cell("layer-graphed", precision, "measured", ms=ms, stats={"median_ms": ms, "iqr_ms": 0.0},
                      breakdown=block)


CELLS = [
    _cell("fp8-current", [("nvjet_q", 0, 2_000_000), ("cast_transpose_kernel", 2_000_000, 2_100_000)], 4.5),
    _cell("bf16", [("nvjet_h", 0, 3_000_000), ("rmsnorm_fwd_tuned_kernel", 3_000_000, 200_000)], 3.4),
]


def test_bars_put_bf16_first_and_keep_every_part() -> None:
    bars = bf.bars(CELLS)
    assert [b.precision for b in bars] == ["bf16", "fp8-current"]
    assert set(bars[1].parts) == set(bf.PART_COLORS)


def test_the_sentence_names_the_largest_change() -> None:
    said = bf.sentence(bf.bars(CELLS))
    assert said == ("FP8 Current spends 2.10 ms more in quantization, casts, amax and transposes than BF16 and "
                    "1.00 ms less in GEMMs: its step is 1.10 ms longer.")


@pytest.mark.parametrize("width", [bf.WIDTH_PT, 300.0])
def test_labels_are_never_cut_and_stay_inside_the_figure(width: float) -> None:
    scene = bf.scene(bf.bars(CELLS), width)
    texts = [i for i in scene.items if isinstance(i, Text)]
    assert {"BF16", "FP8 Current"} <= {t.text for t in texts}
    for t in texts:
        x0, _, x1, _ = t.box()
        assert 0 <= x0 and x1 <= width + 0.01, t.text
    assert text_width("Normalization, activations and other elementwise work", bf.FONT_PT) < width
    assert 'class="gemm-figure-svg"' in bf.svg(bf.bars(CELLS), width)


def test_the_page_gets_the_inline_figure_and_the_sentence() -> None:
    from docutils import nodes

    from gemm_benchmark.breakdown_render import breakdown_nodes

    out = breakdown_nodes({"layer": CELLS}, "NVIDIA H100", "bd0")
    raw = next(n for n in out[0].findall(nodes.raw))
    assert 'aria-label="Where each recipe' in raw.astext() and out[-1].astext().startswith("FP8 Current spends")
    assert breakdown_nodes({"layer": []}, "NVIDIA H100", "bd0") == []
