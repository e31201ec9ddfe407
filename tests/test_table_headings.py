"""Table headings may wrap inside a long name (issue 35), and read, copy and search as before."""

from __future__ import annotations

from docutils import nodes

from gemm_benchmark.render_table import Entry, breakable, build_table, gemm_wbr


def _pieces(text: str) -> list[str]:
    return ["|" if isinstance(n, gemm_wbr) else n.astext() for n in breakable(text)]


def test_a_name_breaks_after_its_dots_and_underscores_never_inside_a_number() -> None:
    assert _pieces("torch._scaled_mm (FP8 tensorwise)") == ["torch.", "|", "_scaled_", "|", "mm (FP8 tensorwise)"]
    assert _pieces("torchao Float8Linear (rowwise, torch.compile)") == [
        "torchao Float8Linear (rowwise, torch.", "|", "compile)"]
    assert _pieces("1.5 ms · TFLOP/s") == ["1.5 ms · TFLOP/s"]


def test_only_headings_break_and_their_text_is_unchanged() -> None:
    table = build_table([[Entry("torch._scaled_mm: ms")]], [[Entry("torch._scaled_mm")]], [10])
    head, body = table.findall(nodes.thead), table.findall(nodes.tbody)
    assert len(list(next(head).findall(gemm_wbr))) == 2 and not list(next(body).findall(gemm_wbr))
    assert table.astext().split() == ["torch._scaled_mm:", "ms", "torch._scaled_mm"]
