"""Moved: the README figure is ``gemm-bench readme-figure`` (:func:`gemm_bench.figures.write_readme_figure`).

This shim keeps ``python -m gemm_benchmark.readme_figure [--cache DIR] [--out PATH]`` and
:func:`main` working for callers not yet switched; delete it once none remain.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

from gemm_bench.figures import DEFAULT_README_OUT, FigureError, write_readme_figure

DEFAULT_CACHE = Path("docs/_gemm_cache")


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m gemm_benchmark.readme_figure", description=__doc__)
    parser.add_argument("--cache", type=Path, default=DEFAULT_CACHE, help=f"result cache (default {DEFAULT_CACHE})")
    parser.add_argument("--out", type=Path, default=DEFAULT_README_OUT,
                        help=f"light SVG to write; the dark one goes beside it (default {DEFAULT_README_OUT})")
    args = parser.parse_args(argv)
    try:
        changed = write_readme_figure(args.cache, args.out)
    except FigureError as exc:
        print(f"readme_figure: {exc}", file=sys.stderr)
        return 1
    for path in changed:
        print(f"readme_figure: wrote {path}")
    if not changed:
        print(f"readme_figure: {args.out} is up to date")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
