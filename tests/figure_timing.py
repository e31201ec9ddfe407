"""Timing script (not a test): draw+save time of the site's figures, before and after.

``python tests/figure_timing.py [--rounds N] [--specs DIR] [--old-figures REF] [--old REF]`` times,
in alternating rounds so that machine load hits both alike, one page-theme SVG per figure:

- the figures: by default every figure the directive draws for the committed te-guide-5b results
  (each device, each mode); with ``--specs DIR``, the specs a docs build stored beside its figures
  (``DIR`` is ``<doctrees>/gemm_benchmark``: every figure of that build);
- ``new``: :func:`gemm_bench.report.figures.render` of this tree (layout in Python, SVG written as text);
- ``unchanged``: what a rebuild pays when the figure's inputs did not change (spec and key only;
  the file named by the key already exists);
- ``old-figures`` (with ``--old-figures REF``, e.g. the commit before the SVG writer):
  ``bench/gemm_bench/report/figures.py`` as committed at REF, read from git, rendering the same specs
  (matplotlib drawing and saving);
- ``old`` (with ``--old REF``, a commit before figures moved to gemm_bench): the former
  ``sphinxext/gemm_benchmark/render_figure.py`` read from git, drawing a light and a dark SVG
  per figure as the extension did (te-guide-5b figures only).

It prints medians and the ratios; nothing is asserted (timings depend on the machine).
"""

from __future__ import annotations

import argparse
import dataclasses
import importlib.util
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import Any

ROOT = Path(__file__).resolve().parents[1]


def load_from_git(ref: str, path: str, name: str) -> ModuleType:
    """``path`` as committed at ``ref``, imported as module ``name`` (its own imports resolve to
    this tree's packages)."""
    source = subprocess.run(["git", "show", f"{ref}:{path}"], cwd=ROOT, check=True, capture_output=True,
                            text=True).stdout
    file = Path(tempfile.mkdtemp()) / f"{name}.py"
    file.write_text(source, encoding="utf-8")
    spec = importlib.util.spec_from_file_location(name, file)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # dataclasses look their module up while the class is made
    spec.loader.exec_module(module)
    return module


def convert(spec: Any, module: ModuleType) -> Any:
    """A FigureSpec rebuilt with ``module``'s classes (same fields: the spec format did not change)."""
    panels = tuple(module.Panel(p.title, p.categories, tuple(module.Series(**dataclasses.asdict(s)) for s in p.series),
                                p.x)
                   for p in spec.panels)
    fields = {f.name: getattr(spec, f.name) for f in dataclasses.fields(spec)}
    return module.FigureSpec(**{**fields, "panels": panels})


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--specs", type=Path, metavar="DIR", help="time the specs a docs build stored in DIR")
    parser.add_argument("--old-figures", metavar="REF", help="git revision holding the old report/figures.py")
    parser.add_argument("--old", metavar="REF", help="git revision holding the old render_figure.py")
    args = parser.parse_args()

    from gemm_bench.question.question import build_question
    from gemm_bench.report import figures
    from gemm_bench.report.report import Report
    from gemm_bench.results.cache import Cache

    question = build_question(model="te-guide-5b")
    reports = [Report(d) for d in Cache(ROOT / "docs" / "_gemm_cache").lookup(question.hash).documents]
    pairs = [(r, m) for r in reports for m in r.modes]
    if args.specs:
        # JSON specs, checked against their figure's name (never unpickled: see figures.load_spec)
        loaded = (figures.load_spec(p.with_suffix(".svg")) for p in sorted(args.specs.glob("*.spec")))
        specs = [s for s in loaded if s is not None]
        what = f"{len(specs)} figures stored in {args.specs}"
    else:
        specs = [s for s in (figures.spec_for(r, m) for r, m in pairs) if s is not None]
        what = f"te-guide-5b: {len(specs)} figures (devices x modes)"

    def new() -> None:
        for spec in specs:
            figures.render(spec, "svg")

    def unchanged() -> None:
        for spec in specs:
            spec.key()

    runs: dict[str, Callable[[], None]] = {"new": new, "unchanged": unchanged}
    if args.old_figures:
        old_figures = load_from_git(args.old_figures, "bench/gemm_bench/report/figures.py", "old_figures")
        old_specs = [convert(spec, old_figures) for spec in specs]

        def old_figures_run() -> None:
            for spec in old_specs:
                old_figures.render(spec, "svg")

        runs = {"old-figures": old_figures_run, **runs}
    if args.old:
        old = load_from_git(args.old, "sphinxext/gemm_benchmark/render_figure.py", "old_render_figure")

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
    print(f"{what}, {args.rounds} alternating rounds")
    for name, values in times.items():
        print(f"  {name:<12} median {statistics.median(values):.3f} s  (min {min(values):.3f}, max {max(values):.3f})")
    for name in ("old-figures", "old"):
        if name in times:
            print(f"  {name} / new: {statistics.median(times[name]) / statistics.median(times['new']):.2f}x")


if __name__ == "__main__":
    main()
