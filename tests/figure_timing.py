"""Timing script (not a test): draw+save time of the te-guide-5b figures, before and after.

``python tests/figure_timing.py [--rounds N] [--old REF]`` times, in alternating rounds so that
machine load hits both alike, every figure the directive draws for the committed te-guide-5b
results (each device, each mode):

- ``new``: :func:`gemm_bench.figures.render` of one page-theme SVG per figure;
- ``unchanged``: what a rebuild pays when the figure's inputs did not change (spec and key only;
  the file named by the key already exists);
- ``old`` (with ``--old REF``, e.g. the commit before figures moved): the former
  ``sphinxext/gemm_benchmark/render_figure.py`` read from git, drawing a light and a dark SVG
  per figure as the extension did.

It prints medians and the ratio; nothing is asserted (timings depend on the machine).
"""

from __future__ import annotations

import argparse
import importlib.util
import statistics
import subprocess
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from types import ModuleType

ROOT = Path(__file__).resolve().parents[1]


def load_old(ref: str) -> ModuleType:
    source = subprocess.run(["git", "show", f"{ref}:sphinxext/gemm_benchmark/render_figure.py"], cwd=ROOT,
                            check=True, capture_output=True, text=True).stdout
    path = Path(tempfile.mkdtemp()) / "old_render_figure.py"
    path.write_text(source, encoding="utf-8")
    spec = importlib.util.spec_from_file_location("old_render_figure", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--old", metavar="REF", help="git revision holding the old render_figure.py")
    args = parser.parse_args()

    from gemm_bench import figures
    from gemm_bench.cache import Cache
    from gemm_bench.question import build_question
    from gemm_bench.report import Report

    question = build_question(model="te-guide-5b")
    reports = [Report(d) for d in Cache(ROOT / "docs" / "_gemm_cache").lookup(question.hash).documents]
    pairs = [(r, m) for r in reports for m in r.modes]

    def new() -> None:
        for report, mode in pairs:
            spec = figures.spec_for(report, mode)
            if spec is not None:
                figures.render(spec, "svg")

    def unchanged() -> None:
        for report, mode in pairs:
            spec = figures.spec_for(report, mode)
            if spec is not None:
                spec.key()

    runs: dict[str, Callable[[], None]] = {"new": new, "unchanged": unchanged}
    if args.old:
        old = load_old(args.old)

        def old_run() -> None:
            for report, mode in pairs:
                for theme in old.THEMES:
                    old.image_bytes(old.figure_for(report, mode, theme=theme), "svg")

        runs = {"old": old_run, **runs}
    for run in runs.values():
        run()  # warm: imports, font cache
    times: dict[str, list[float]] = {name: [] for name in runs}
    for _ in range(args.rounds):
        for name, run in runs.items():
            start = time.perf_counter()
            run()
            times[name].append(time.perf_counter() - start)
    print(f"te-guide-5b: {len(pairs)} figures (devices x modes), {args.rounds} alternating rounds")
    for name, values in times.items():
        print(f"  {name:<10} median {statistics.median(values):.3f} s  (min {min(values):.3f}, max {max(values):.3f})")
    if args.old:
        ratio = statistics.median(times["old"]) / statistics.median(times["new"])
        print(f"  old / new: {ratio:.2f}x")


if __name__ == "__main__":
    main()
