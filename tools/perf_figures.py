"""Does the hand-written chart engine earn its place? Its cost per clean docs build against matplotlib's.

The site's figures are drawn by :mod:`gemm_bench.report.figure_layout` (layout, DejaVu Sans
metrics, a port of matplotlib's tick locator) and written as SVG text by
:mod:`gemm_bench.report.figure_svg`; matplotlib is imported only for PDF and PNG. The question
(issue 35) is whether, on build time, that beats drawing the same figures with matplotlib's SVG
backend. This script measures both on the site's own figures:

1. One clean cache-mode build of ``docs/`` in this process, with every call of
   :func:`gemm_bench.report.line_figure.line_svg` recorded (the studies' line figures) and every
   speedup figure's spec left in ``<doctrees>/gemm_benchmark/*.spec``: the build's wall time and
   the figures it draws (drawn only when their content-addressed key is new, so a clean build draws
   all of them and a rebuild with unchanged inputs none).
2. In fresh subprocesses (an import is paid once per build process), ``--rounds`` times each:

   * ``engine``: import :mod:`gemm_bench.report.figures` and :mod:`~gemm_bench.report.line_figure`,
     then draw every figure as the build does (SVG, page theme; speedup figures at both widths the
     page shows);
   * ``matplotlib``: import matplotlib (Agg-free SVG canvas), then draw every figure with
     ordinary Axes calls (``barh`` with error bars and value labels, ``plot``, ``axvspan``,
     ``legend``), saved as SVG with text as text: the least a replacement would do, without the
     engine's wrapping, label fitting and missing-value markers;
   * ``matplotlib-scene``: matplotlib painting the engine's own scenes (:mod:`figure_mpl`) to SVG:
     what keeping the layout but dropping the SVG writer would cost.

Prints the medians (and min-max) of each: import, drawing all figures, and their sum, i.e. what a
clean build pays for its figures. A benchmark, not a test; run it on an idle machine::

    PYTHONPATH=bench:sphinxext python tools/perf_figures.py --rounds 5 [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent

# ------------------------------------------------------------------------------ the build's figures


def collect(work: Path) -> dict[str, Any]:
    """Build docs/ once (clean, cache mode), recording the line figures' arguments."""
    os.environ["GEMM_BENCH_EXECUTION_MODE"] = "cache"
    from gemm_bench.report import line_figure

    recorded: list[dict[str, Any]] = []
    real = line_figure.line_svg

    def recording(series: Any, **kwargs: Any) -> str:
        recorded.append({"series": [dict(s.__dict__) for s in series],
                         "kwargs": {k: ([dict(b.__dict__) for b in v] if k == "bands" else v)
                                    for k, v in kwargs.items()}})
        return real(series, **kwargs)

    line_figure.line_svg = recording  # type: ignore[assignment]  # before the extension imports it
    from sphinx.cmd.build import build_main

    start = time.perf_counter()
    code = build_main(["-q", "-b", "html", "-d", str(work / "doctrees"), str(REPO / "docs"), str(work / "html")])
    build_s = time.perf_counter() - start
    if code != 0:
        raise SystemExit(f"the docs build failed (exit {code})")
    specs = sorted(str(p) for p in (work / "doctrees" / "gemm_benchmark").glob("*.spec"))
    return {"build_s": build_s, "specs": specs, "lines": recorded}


# ------------------------------------------------------------------------------ drawing, per back end

ENGINE = r"""
import json, sys, time
t0 = time.perf_counter()
from gemm_bench.report import figures, line_figure
t1 = time.perf_counter()
data = json.load(open(sys.argv[1]))
specs = [figures.spec_from_json(json.load(open(p))) for p in data["specs"]]
lines = [([line_figure.Series(**s) for s in f["series"]],
          {k: ([line_figure.Band(**b) for b in v] if k == "bands" else v) for k, v in f["kwargs"].items()})
         for f in data["lines"]]
t2 = time.perf_counter()
size = 0
for spec in specs:
    for width in figures.WIDTHS:
        size += len(figures.render(spec, "svg", width=width))
for series, kwargs in lines:
    size += len(line_figure.line_svg(series, **kwargs))
t3 = time.perf_counter()
print(json.dumps({"import_s": t1 - t0, "draw_s": t3 - t2, "bytes": size}))
"""

MATPLOTLIB = r"""
import io, json, sys, time
t0 = time.perf_counter()
import matplotlib
matplotlib.use("svg")
from matplotlib.figure import Figure
import matplotlib.backends.backend_svg
t1 = time.perf_counter()
from gemm_bench.report import figures
data = json.load(open(sys.argv[1]))
specs = [figures.spec_from_json(json.load(open(p))) for p in data["specs"]]
matplotlib.rcParams.update({"svg.fonttype": "none", "svg.hashsalt": "gemm", "font.size": 9,
                            "font.family": "DejaVu Sans", "text.parse_math": False})
mode = sys.argv[2]
layout = "constrained" if mode == "axes" else None
t2 = time.perf_counter()
size = 0

def save(fig):
    out = io.BytesIO()
    fig.savefig(out, format="svg", metadata={"Date": None, "Creator": None})
    return len(out.getvalue())

if mode == "scene":
    from gemm_bench.report import figure_mpl
    for spec in specs:
        for width in figures.WIDTHS:
            size += save(figure_mpl.figure(figures.scene(spec, "light", width=width)))
else:
    for spec in specs:
        for width in figures.WIDTHS:
            rows = sum(len(p.categories) * max(len(p.series), 1) for p in spec.panels)
            fig = Figure(figsize=(width, 1.2 + 0.17 * rows if spec.kind == "bars" else 3.2), layout=layout)
            axes = fig.subplots(len(spec.panels), 1, squeeze=False)[:, 0]
            for ax, panel in zip(axes, spec.panels):
                n = max(len(panel.series), 1)
                for j, s in enumerate(panel.series):
                    if spec.kind == "bars":
                        ys = [i + (j - (n - 1) / 2) * 0.8 / n for i in range(len(s.values))]
                        vals = [v or 0 for v in s.values]
                        err = [[max(v - (lo or v), 0) for v, lo in zip(vals, s.low)],
                               [max((hi or v) - v, 0) for v, hi in zip(vals, s.high)]]
                        ax.barh(ys, vals, 0.8 / n * 0.9, color=s.color, xerr=err, label=s.label)
                        for y, v in zip(ys, s.values):
                            ax.text((v or 0) * 1.02, y, spec.value_format.format(v) if v else "n/a",
                                    va="center", fontsize=8.4)
                    elif spec.kind == "sweep":
                        ax.plot(panel.x, [v if v is not None else float("nan") for v in s.values], "o-",
                                color=s.color, label=s.label)
                        ax.set_xscale("log", base=2)
                    else:
                        ax.plot(s.x, s.values, "o", color=s.color, label=s.label)
                if spec.kind == "bars":
                    ax.set_yticks(range(len(panel.categories)), panel.categories)
                    ax.invert_yaxis()
                if spec.reference is not None:
                    (ax.axvline if spec.kind == "bars" else ax.axhline)(spec.reference, ls="--", lw=0.8)
                ax.set_title(panel.title, loc="left")
            axes[0].legend(loc="lower center", bbox_to_anchor=(0.5, 1.0), ncols=3, frameon=False)
            axes[-1].set_xlabel(spec.value_label if spec.kind == "bars" else spec.category_label)
            size += save(fig)
    for f in data["lines"]:
        kw = f["kwargs"]
        fig = Figure(figsize=(3.8, 3.6), layout=layout)
        ax = fig.subplots()
        for b in kw.get("bands", []):
            ax.axvspan(b["low"], b["high"], alpha=0.14, label=b["label"])
        for s in f["series"]:
            ax.plot(s["xs"], [y if y is not None else float("nan") for y in s["ys"]], "o--" if s["dashed"] else "o-",
                    color=s["color"] or None, label=s["label"])
        if kw.get("log_x"):
            ax.set_xscale("log")
        ax.set_xlabel(kw.get("x_label", ""))
        ax.set_ylabel(kw.get("y_label", ""))
        ax.legend(loc="upper center", bbox_to_anchor=(0.5, -0.2), fontsize=8.4)
        size += save(fig)
t3 = time.perf_counter()
print(json.dumps({"import_s": t1 - t0, "draw_s": t3 - t2, "bytes": size}))
"""


def run(code: str, data: Path, *args: str) -> dict[str, float]:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO / "bench"), str(REPO / "sphinxext")])}
    proc = subprocess.run([sys.executable, "-c", code, str(data), *args], env=env, capture_output=True, text=True,
                          check=False)
    if proc.returncode != 0:
        raise SystemExit(f"a drawing subprocess failed:\n{proc.stderr[-3000:]}")
    result: dict[str, float] = json.loads(proc.stdout.strip().splitlines()[-1])
    return result


def summary(values: list[float]) -> str:
    return f"{statistics.median(values):7.3f} s  ({min(values):.3f}-{max(values):.3f})"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5, help="subprocess rounds per back end (default 5)")
    parser.add_argument("--json", type=Path, metavar="OUT", help="also write the measurements to OUT")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="perf-figures-") as tmp:
        work = Path(tmp)
        found = collect(work)
        data = work / "figures.json"
        data.write_text(json.dumps(found), encoding="utf-8")
        backends = {"engine": (ENGINE,), "matplotlib": (MATPLOTLIB, "axes"),
                    "matplotlib-plain": (MATPLOTLIB, "plain"), "matplotlib-scene": (MATPLOTLIB, "scene")}
        results: dict[str, list[dict[str, float]]] = {name: [] for name in backends}
        for _ in range(args.rounds):
            for name, (code, *extra) in backends.items():  # interleaved: drift hits every back end
                results[name].append(run(code, data, *extra))
    print(f"clean cache-mode docs build (in process): {found['build_s']:.1f} s; figures drawn: "
          f"{len(found['specs'])} speedup figures x 2 widths + {len(found['lines'])} line figures")
    for name, rounds in results.items():
        print(f"{name:17s} import {summary([r['import_s'] for r in rounds])}   "
              f"draw {summary([r['draw_s'] for r in rounds])}   "
              f"total {summary([r['import_s'] + r['draw_s'] for r in rounds])}   "
              f"{rounds[0]['bytes'] / 1024:.0f} KiB of SVG")
    if args.json:
        args.json.write_text(json.dumps({"build_s": found["build_s"], "speedup_figures": len(found["specs"]),
                                         "line_figures": len(found["lines"]), "rounds": results}, indent=1),
                             encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
