"""Issue 33 on the GPU: where each recipe's step time goes, the precision plan's mixed step, energy.

Run by ``tools/gpu_breakdown.sh`` (one process: torch and Transformer Engine are imported once).
For each question (Qwen2.5-7B at 2048 tokens, gpt-oss-120b; both presets) and all four recipes:

1. one run of the autocast GEMMs and the layer step (``layer``, ``layer-graphed``), with the
   runner's clock telemetry and cross-check, so every step cell carries its breakdown; the result
   is validated and written to ``$OUT/<name>.json``;
2. every recipe's kernel names with their milliseconds per step, from the graphed step's profiled
   rounds, to ``$OUT/kernel-names/<name>-<precision>.json`` (commit them as
   ``tests/data/kernel-names/recorded/``: ``tests/test_breakdown.py`` checks the rules on them);
3. the precision plan of each FP8 recipe from the run's autocast GEMMs, and where it is mixed, the
   plan's step beside all-BF16 and all-FP8 of the same layer built from parts, in one interleaved
   group (``$OUT/<name>-plan-<precision>.json``, validated);
4. energy per graphed step (the group's median power) with its upper bound and busy fraction;
5. each recipe's power alone: its graphed step replayed back to back (no L2 flush) for a second
   under the sampler, energy per step = median power x wall time / steps
   (``$OUT/<name>-power-alone.json``), beside the group-median estimate.

It prints a compact summary; every number comes from the files it writes. A stage that fails
prints its error and the script goes on to the next; a deadline (``BUDGET_S``, default 270 s)
skips what would not finish.
"""

from __future__ import annotations

import json
import os
import sys
import time
import traceback
from pathlib import Path
from typing import Any

START = time.monotonic()
BUDGET_S = float(os.environ.get("BUDGET_S", "270"))
OUT = Path(os.environ.get("OUT", "/tmp/gpu-breakdown"))
PRECISIONS = ["bf16", "fp8-delayed", "fp8-current", "fp8-block"]
QUESTIONS = {"qwen2.5-7b-2048": ("qwen2.5-7b", {"seq_length": 2048}), "gpt-oss-120b": ("gpt-oss-120b", {})}


def left() -> float:
    return BUDGET_S - (time.monotonic() - START)


def say(text: str) -> None:
    print(f"[{time.monotonic() - START:6.1f}s] {text}", flush=True)


def main() -> int:
    from gemm_bench.measure.backends.layer_step import measure_plan_step
    from gemm_bench.measure.runner import Runner
    from gemm_bench.measure.timing import TimerSettings
    from gemm_bench.question.question import build_question
    from gemm_bench.report.precision_plan import plans
    from gemm_bench.report.report import Report
    from gemm_bench.results import breakdown as bd
    from gemm_bench.results import kernel_kinds as kk
    from gemm_bench.results.energy import energies
    from gemm_bench.results.schema import validate
    from gemm_bench.results.step_schema import validate_plan_block

    OUT.mkdir(parents=True, exist_ok=True)
    (OUT / "kernel-names").mkdir(exist_ok=True)
    settings = TimerSettings(max_group_s=5.0)
    # the process's sampler: it outlives each measure(), so the plan's groups are sampled too
    runner = Runner(settings, peers=False, accuracy=False, shared_sampler=True)
    say("imports done")
    failed = 0
    for name, (model, fields) in QUESTIONS.items():
        if left() < 60:
            say(f"{name}: skipped, {left():.0f} s left")
            continue
        try:
            question = build_question(model=model, fields=fields)
            doc = runner.measure(question, PRECISIONS, ["autocast", "layer", "layer-graphed"])
            # kept whatever validation says: a result the schema refuses is still what was measured
            (OUT / f"{name}.unvalidated.json").write_text(json.dumps(doc, indent=1), encoding="utf-8")
            validate(doc)
            (OUT / f"{name}.json").write_text(json.dumps(doc, indent=1), encoding="utf-8")
            say(f"{name}: measured in {doc['provenance'].get('measure_s')} s on {doc['device'].get('name')}")
            # 2. kernel names per recipe (graphed step, balanced routing)
            for routing, kernels in runner.step_kernels:
                if routing != "balanced":
                    continue
                for precision, regions in kernels.items():
                    rounds = regions.get("step") or []
                    per_step = bd.kernel_ms_per_step(rounds)
                    record = {"model": model, "question": name, "precision": precision, "step": "layer-graphed",
                              "device": doc["device"].get("name"), "rounds": len(rounds), "kernels_ms": per_step}
                    (OUT / "kernel-names" / f"{name}-{precision}.json").write_text(
                        json.dumps(record, indent=1), encoding="utf-8")
                    totals = kk.category_totals(per_step)
                    other = {n[:70]: ms for n, ms in per_step.items() if kk.classify(n) == kk.OTHER}
                    say(f"  names {precision:12s} {len(per_step):4d} kernels; "
                        + " ".join(f"{c}={ms:.3f}" for c, ms in totals.items())
                        + (f"; other: {dict(list(other.items())[:4])}" if other else ""))
            # breakdowns, as stored
            for cell in doc.get("layer", []):
                block = cell.get("breakdown")
                if cell["status"] != "measured" or block is None:
                    if cell["status"] == "measured":
                        say(f"  {cell['mode']:13s} {cell['precision']:12s} NO BREAKDOWN")
                    continue
                parts = block["parts_ms"]
                why = bd.check_adds_up(block)
                say(f"  {cell['mode']:13s} {cell['precision']:11s} {cell.get('routing', 'balanced')[:4]} "
                    f"{block['step_ms']:8.3f} ms = " + " ".join(f"{p[:5]} {parts[p]:.3f}" for p in kk.PARTS)
                    + f"  {'adds up' if why is None else why}")
            # 4. energy
            for (precision, routing), e in energies(doc).items():
                say(f"  energy {precision:12s} {routing:8s} {e['energy_mj']:9.1f} mJ/step "
                    f"(max {e.get('energy_mj_max')}) {e['tokens_per_j']} tok/J, {e['power_w']} W median, "
                    f"busy {e.get('busy_fraction')}"
                    + (" UNRELIABLE" if "unreliable" in e else ""))
            # 3. the plans
            report = Report(doc)
            for plan in plans(report):
                say(f"  plan {plan.precision}: {plan.kind}; fp8 {list(plan.fp8_ops)}; bf16 {list(plan.bf16_ops)}; "
                    + ", ".join(f"{v.op} {v.speedup and round(v.speedup, 3)} [{v.low and round(v.low, 3)}, "
                                f"{v.high and round(v.high, 3)}]" for v in plan.verdicts))
                if plan.kind != "mixed":
                    continue
                if left() < 40:
                    say(f"  plan {plan.precision}: step not measured, {left():.0f} s left")
                    continue

                def group(builders: Any, graphs: bool, routing: str) -> Any:
                    return runner._time_group(builders, label="plan step", mode="layer-graphed", graphs=graphs,
                                              kernels=True)

                steps = measure_plan_step(question, plan.precision, plan.bf16_ops, group,
                                          modes=["layer", "layer-graphed"])
                block = validate_plan_block({**plan.config(), "steps": steps})
                (OUT / f"{name}-plan-{plan.precision}.json").write_text(json.dumps(block, indent=1), encoding="utf-8")
                graphed = {c["step"]: c for c in steps if c["mode"] == "layer-graphed"}
                ms: dict[str, float] = {s: float(c["ms"]) for s, c in graphed.items() if c.get("ms")}
                say(f"  plan {plan.precision} step (graphed, parts layer): "
                    + ", ".join(f"{s} {ms[s]:.3f} ms" if s in ms else f"{s} {c.get('reason', '')[:80]}"
                                for s, c in graphed.items())
                    + (f"; plan vs all-bf16 {ms['all-bf16'] / ms['plan']:.3f}x, "
                       f"vs all-fp8 {ms['all-fp8'] / ms['plan']:.3f}x"
                       if all(s in ms for s in ("all-bf16", "all-fp8", "plan")) else ""))
                for c in graphed.values():
                    if c.get("breakdown"):
                        p = c["breakdown"]["parts_ms"]
                        say(f"    {c['step']:9s} " + " ".join(f"{k}={v:.3f}" for k, v in p.items()))
            # 5. each recipe's power alone, its graphed step replayed back to back: what the group's
            # median (all recipes interleaved, flushes and read-back between) stands in for
            if left() > 30:
                power_alone(runner, question, doc, name)
        except Exception:  # a GPU script: report and go on to the next question
            failed += 1
            say(f"{name}: FAILED\n{traceback.format_exc()[-3000:]}")
    say(f"done, {failed} question(s) failed")
    return 1 if failed else 0


def power_alone(runner: Any, question: Any, doc: dict[str, Any], name: str, seconds: float = 1.0) -> None:
    """Each recipe's graphed layer step replayed back to back for ``seconds`` under the sampler: energy
    per step = median power x wall time / steps, beside the group-median estimate of the result."""
    import gc

    import torch

    from gemm_bench.measure.backends.layer_step import layer_step_competitor
    from gemm_bench.measure.backends.te import Operands
    from gemm_bench.measure.timing import capture
    from gemm_bench.results.energy import energies

    sampler = runner.sampler
    if sampler is None:
        say(f"  {name}: no sampler, no power alone")
        return
    grouped = energies(doc)
    shared = Operands()
    out = {}
    for precision in PRECISIONS:
        fn = layer_step_competitor(question.config, precision, "balanced", shared)
        for _ in range(3):
            fn(lambda region, edge: None)
        torch.cuda.synchronize()
        graphed = capture(fn)
        for _ in range(3):
            graphed(lambda region, edge: None)
        torch.cuda.synchronize()
        steps, start = 0, time.monotonic()
        with sampler.sampling():
            while time.monotonic() - start < seconds:
                for _ in range(5):
                    graphed(lambda region, edge: None)
                torch.cuda.synchronize()
                steps += 5
        wall_ms = (time.monotonic() - start) * 1000
        clock = sampler.summary()
        power = clock.get("power_w_median")
        step_ms = wall_ms / steps
        energy = power * step_ms if isinstance(power, (int, float)) else None
        group = grouped.get((precision, "balanced"), {})
        out[precision] = {"power_w": power, "power_w_max": clock.get("power_w_max"), "samples": clock.get("samples"),
                          "step_ms_back_to_back": round(step_ms, 4), "energy_mj": energy and round(energy, 2),
                          "group_power_w": group.get("power_w"), "group_energy_mj": group.get("energy_mj")}
        say(f"  power alone {precision:12s} {power} W over {clock.get('samples')} samples, {step_ms:.3f} ms/step "
            f"back to back -> {energy and round(energy, 1)} mJ/step; group estimate {group.get('energy_mj')} mJ "
            f"at {group.get('power_w')} W")
        del fn, graphed
        gc.collect()
        torch.cuda.empty_cache()
    (OUT / f"{name}-power-alone.json").write_text(json.dumps(out, indent=1), encoding="utf-8")


if __name__ == "__main__":
    sys.exit(main())
