"""Issue 34's trade-off, from two refreshes of one GPU: how far the published speedups of the two
runs differ (run-to-run reproducibility), under the measured rule and under shorter ones.

    python tools/rounds_tradeoff/simulate.py RUN_A RUN_B [--rule ROUNDS,GROUP_S ...]

RUN_A and RUN_B are cache folders or ``.tgz`` archives of one (``measurements/.../cache.tgz``) of
two whole-site refreshes with the same rule (40 rounds, 10 s cap). A shorter rule is simulated on
the stored samples: its group stops where the stored rounds, in their order, would have stopped it
(the same adaptive batches, the same convergence test), so a run under it would have published the
median of that prefix. What it cannot simulate is the GPU's state at a shorter run's end (less
heat); the real 25-round runs (``h100c-tradeoff-*``) agree with the simulation (totals 2.27%
measured, 2.33% simulated). Prints, per rule, the GPU seconds the groups' timed rounds take and the
median, 95th percentile and largest run-to-run difference of the per-GEMM speedups, the per-mode
total speedups and the graphed layer steps' speedups.
"""

from __future__ import annotations

import argparse
import io
import json
import statistics
import tarfile
from pathlib import Path
from typing import Any

from gemm_bench.measure.timing import Samples  # torch is imported only where it is used


def rounds_under(cells: list[list[float]], per_round_s: float, rounds: int, group_s: float,
                 target: float = 0.01, floor: int = 10) -> int:
    """The rounds gemm_bench.measure.timing.Interleaver._adaptive would have run on these samples (its
    batches; its convergence test, Samples.converged, itself)."""
    done, batch = 0, min(floor, rounds)
    while True:
        done += batch
        if (all(Samples(c[:done]).converged(target) for c in cells)
                or done >= rounds or done * per_round_s >= group_s):
            return done
        batch = min(rounds - done, max(5, done // 2))


def load(run: Path) -> dict[str, dict[str, Any]]:
    """file name -> result, from a cache folder or a .tgz of one."""
    if run.is_dir():
        return {p.name: json.loads(p.read_text()) for p in sorted(run.glob("*.json"))}
    out = {}
    with tarfile.open(run) as tar:
        for member in tar.getmembers():
            if member.isfile() and member.name.endswith(".json") and "/studies/" not in member.name:
                data = tar.extractfile(member)
                if data is not None:
                    out[Path(member.name).name] = json.load(io.TextIOWrapper(data, encoding="utf-8"))
    return out


def medians(doc: dict[str, Any], rounds: int, group_s: float) -> tuple[dict[tuple[str, ...], float], float]:
    """Each cell's median under the rule, and the GPU seconds of the groups' timed rounds."""
    groups: dict[tuple[str, ...], dict[tuple[str, ...], list[float]]] = {}
    for c in doc.get("cells", []):
        if c.get("status") == "measured" and c["mode"] in ("autocast", "prequant"):
            key = (c["mode"], c["op"]) if c["mode"] == "autocast" else (c["mode"], c["op"], c["pass"])
            groups.setdefault(key, {})[(c["mode"], c["op"], c["pass"], c["precision"])] = c["stats"]["samples_ms"]
    for c in doc.get("layer", []):
        if c.get("status") == "measured" and c["mode"] == "layer-graphed":
            routing = c.get("routing", "balanced")
            groups.setdefault(("step", routing), {})[("step", routing, "", c["precision"])] = c["stats"]["samples_ms"]
    out, seconds = {}, 0.0
    for cells in groups.values():
        stored = min(len(v) for v in cells.values())
        per_round = sum(statistics.median(v) for v in cells.values()) / 1000
        n = rounds_under(list(cells.values()), per_round, min(rounds, stored), group_s)
        seconds += n * per_round
        out.update({k: statistics.median(v[:n]) for k, v in cells.items()})
    return out, seconds


def speedups(med: dict[tuple[str, ...], float]) -> dict[tuple[str, ...], float]:
    out: dict[tuple[str, ...], float] = {}
    totals: dict[tuple[str, str], float] = {}
    for (mode, op, pass_, precision), ms in med.items():
        base = med.get((mode, op, pass_, "bf16"))
        if precision != "bf16" and base:
            out[("step" if mode == "step" else "gemm", mode, op, pass_, precision)] = base / ms
        if mode != "step":
            totals[(mode, precision)] = totals.get((mode, precision), 0.0) + ms
    for (mode, precision), ms in totals.items():
        if precision != "bf16" and (mode, "bf16") in totals:
            out[("total", mode, precision)] = totals[(mode, "bf16")] / ms
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("run_a", type=Path)
    parser.add_argument("run_b", type=Path)
    parser.add_argument("--rule", action="append", default=[], help="ROUNDS,GROUP_S (repeatable)")
    args = parser.parse_args(argv)
    rules = [tuple(map(float, r.split(","))) for r in args.rule] or [(40, 10), (35, 10), (30, 10), (25, 3)]
    a, b = load(args.run_a), load(args.run_b)
    for rounds, group_s in rules:
        diffs: dict[str, list[float]] = {"gemm": [], "total": [], "step": []}
        seconds = 0.0
        for name in sorted(set(a) & set(b)):
            ma, _ = medians(a[name], int(rounds), group_s)
            mb, sb = medians(b[name], int(rounds), group_s)
            seconds += sb
            sa_, sb_ = speedups(ma), speedups(mb)
            for key in sa_.keys() & sb_.keys():
                diffs[key[0]].append(abs(sa_[key] / sb_[key] - 1))
        line = f"{int(rounds):2d} rounds, {group_s:g} s cap: timed GPU {seconds:5.1f} s |"
        for kind, values in diffs.items():
            values.sort()
            if values:
                line += (f" {kind} p50 {values[len(values) // 2]:.2%} p95 {values[int(0.95 * len(values))]:.2%}"
                         f" max {values[-1]:.2%} |")
        print(line)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
