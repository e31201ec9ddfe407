"""The breakdown figure and sentence: bars from stored breakdowns, labels whole, the largest change named."""

from __future__ import annotations

from typing import Any

import pytest

from gemm_bench.measure.step import layer_cell
from gemm_bench.report import breakdown_figure as bf
from gemm_bench.report.figure_layout import Rect, Text, text_width
from gemm_bench.results import breakdown as bd
from gemm_bench.results.kernel_kinds import DISPLAY
from tests.typed_layer import layer_result, typed_cells


def _cell(precision: str, kernels: list[tuple[str, int, int]], ms: float) -> dict[str, Any]:
    block = bd.breakdown_block(ms, [bd.round_parts(kernels)], source="test")
    return layer_cell("layer-graphed", precision, "measured", ms=ms, stats={"median_ms": ms, "iqr_ms": 0.0},
                      breakdown=block)


RAW = [
    _cell("fp8-current", [("nvjet_q", 0, 2_000_000), ("cast_transpose_kernel", 2_000_000, 2_100_000)], 4.5),
    _cell("bf16", [("nvjet_h", 0, 3_000_000), ("rmsnorm_fwd_tuned_kernel", 3_000_000, 200_000)], 3.4),
]
#: The cells as a reader gets them: typed, through the door (``Result.layer``).
CELLS = typed_cells(RAW)


def test_bars_put_bf16_first_and_keep_every_part() -> None:
    bars = bf.bars(CELLS)
    assert [b.precision for b in bars] == ["bf16", "fp8-current"]
    assert set(bars[1].parts) == set(bf.PART_COLORS)


def test_the_sentence_names_the_largest_change() -> None:
    said = bf.sentence(bf.bars(CELLS), "fp8-current")
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

    out = breakdown_nodes(layer_result(RAW), "NVIDIA H100", "bd0", recipe="fp8-current")
    raw = next(n for n in out[0].findall(nodes.raw))
    label = "One layer&#x27;s step (CUDA-graphed) on the NVIDIA H100, not the model&#x27;s step"
    assert f'aria-label="{label}' in raw.astext() and out[-1].astext().startswith("FP8 Current spends")
    assert breakdown_nodes(layer_result([]), "NVIDIA H100", "bd0") == []


def _legend(scene: Any) -> list[tuple[str, str]]:
    """(name, swatch colour) of each legend entry: a swatch is the FONT_PT square just left of its name."""
    rects = [i for i in scene.items if isinstance(i, Rect) and i.width == bf.FONT_PT and i.height == bf.FONT_PT]
    names = {t.text: t for t in scene.items if isinstance(t, Text) and t.text in bf.DISPLAY.values()}
    out = []
    for rect in rects:
        name = next((n for n, t in names.items() if abs(t.x - (rect.x + bf.FONT_PT + 3)) < 0.01
                     and abs(t.y - (rect.y + bf.FONT_PT * 0.85)) < 0.01), None)
        if name is not None:
            out.append((name, rect.fill))
    return out


def test_the_legend_lists_only_the_parts_some_bar_has_each_in_its_own_colour() -> None:
    """Issue 35 reader pass: a layer step's legend listed "Optimizer" (and "Other kernels"), which no
    bar of a layer step holds. Only the parts drawn are listed, each in the colour it always has."""
    bars = bf.bars(CELLS)
    legend = _legend(bf.scene(bars))
    drawn = [p for p in bf.PARTS if any(b.parts[p] > 0 for b in bars)]
    assert [name for name, _ in legend] == [DISPLAY[p] for p in drawn]
    assert {"optimizer", "other", "attention"}.isdisjoint(drawn)
    assert all(color == bf.PART_COLORS[p] for (_, color), p in zip(legend, drawn, strict=True))


def test_the_heading_says_whose_step_it_is_and_is_drawn_whole() -> None:
    heading = "One layer's step (CUDA-graphed) on the H100 80GB HBM3, not the model's step: GPU time"
    scene = bf.scene(bf.bars(CELLS), bf.WIDTH_PT, heading=heading)
    bold = [t for t in scene.items if isinstance(t, Text) and t.bold]
    assert " ".join(t.text for t in bold) == heading
    legend_top = min(t.y for t in scene.items if isinstance(t, Text) and t.text in bf.DISPLAY.values())
    assert max(t.y for t in bold) < legend_top  # above the legend, which is above the bars


def test_no_committed_layer_step_lists_a_part_it_does_not_have() -> None:
    """Over the committed cache: every breakdown figure's legend names only parts with time in some bar
    (no layer step has an optimizer)."""
    from pathlib import Path

    from gemm_bench.results.cache import read_document
    from gemm_bench.results.typed import parse

    cache = Path(__file__).parent.parent / "docs" / "_gemm_cache"
    seen = 0
    for path in sorted(cache.glob("*--*.json")):
        bars = bf.bars(parse(read_document(path)).layer)
        if not bars:
            continue
        seen += 1
        names = [name for name, _ in _legend(bf.scene(bars))]
        assert "Optimizer" not in names, path.name
        for name in names:
            part = next(p for p, n in DISPLAY.items() if n == name)
            assert any(b.parts[part] > 0 for b in bars), (path.name, name)
    assert seen


def test_the_sentence_speaks_of_the_plans_recipe_not_the_one_that_moved_most() -> None:
    """Issue 35 reader pass: gpt-oss-120b's sentence spoke of FP8 Current (the step that moved most)
    under an answer, a plan and prose about FP8 Delayed. The sentence names the plan's recipe."""
    from docutils import nodes

    from gemm_benchmark.breakdown_render import breakdown_nodes

    result = layer_result([*RAW, _cell("fp8-delayed", [("nvjet_q", 0, 2_400_000),
                                                        ("cast_transpose_kernel", 2_400_000, 300_000)], 3.0)])
    cells = result.layer
    # the recipe the page speaks of (precision_plan.step_recipe over a whole result: the plan's and the
    # answer's, held on the committed cache by tests/test_step_sentence_recipe.py), not the biggest mover
    out = breakdown_nodes(result, "NVIDIA H100", "bd0", recipe="fp8-delayed")
    said = [n.astext() for n in out if isinstance(n, nodes.paragraph) and "gemm-breakdown-sentence" in n["classes"]]
    assert len(said) == 1 and said[0].startswith("FP8 Delayed "), said
    assert bf.sentence(bf.bars(cells), "bf16") is None and bf.sentence(bf.bars(cells), "mxfp8") is None
