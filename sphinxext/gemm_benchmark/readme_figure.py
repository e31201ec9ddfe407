"""Draw the README's speedup figure from the committed cache (``nox -s readme_figure``).

``python -m gemm_benchmark.readme_figure [--cache DIR] [--out PATH] [--theme light|dark]``

The picture is the Transformer Engine guide's example (``model te-guide-5b``): whole-model GEMM
speedup vs BF16 per precision, a panel per mode, a bar group per cached device. It is drawn by
:func:`~.render_figure.summary_figure`, with the directive's colours and the same deterministic
SVG settings, so regenerating it from an unchanged cache leaves the file byte-for-byte unchanged.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

from gemm_bench.cache import Cache
from gemm_bench.precisions import MODES
from gemm_bench.question import build_question
from gemm_bench.report import Report
from gemm_benchmark.render_block import device_label
from gemm_benchmark.render_figure import THEMES, summary_figure, svg_bytes

DEFAULT_CACHE = Path("docs/_gemm_cache")
DEFAULT_OUT = Path("docs/_static/readme-speedups.svg")
MODEL = "te-guide-5b"


def readme_svg(cache_dir: Path, *, theme: str = "light") -> bytes:
    """The figure's SVG; raises LookupError when the cache holds no result for the model."""
    question = build_question(model=MODEL)
    lookup = Cache(cache_dir).lookup(question.hash)
    for error in lookup.errors:
        print(f"readme_figure: ignoring {error}", file=sys.stderr)
    if not lookup.documents:
        raise LookupError(f"no result for {MODEL} (question {question.hash}) in {cache_dir}")
    documents = sorted(lookup.documents, key=lambda d: d["device"]["name"])
    reports = [(device_label(d["device"]["name"]), Report(d)) for d in documents]
    title = f"{MODEL}: {question.describe()}"
    return svg_bytes(summary_figure(reports, MODES, theme=theme, title=title))


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m gemm_benchmark.readme_figure", description=__doc__)
    parser.add_argument("--cache", type=Path, default=DEFAULT_CACHE, help=f"result cache (default {DEFAULT_CACHE})")
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT, help=f"SVG to write (default {DEFAULT_OUT})")
    parser.add_argument("--theme", choices=THEMES, default="light", help="text colours for a light or dark page")
    args = parser.parse_args(argv)
    try:
        data = readme_svg(args.cache, theme=args.theme)
    except LookupError as exc:
        print(f"readme_figure: {exc}", file=sys.stderr)
        return 1
    if args.out.exists() and args.out.read_bytes() == data:
        print(f"readme_figure: {args.out} is up to date")
        return 0
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_bytes(data)
    print(f"readme_figure: wrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
