"""Why the composed model step drifts from a real multi-layer run on some GPUs (issue 43, item 7).

On an H200 the composition of the model step's parts read 3-5% above the real run's GPU time at G = 1
(Qwen2.5 7B, Mixtral 8x7B) while it held within 3% on an H100. The composed parts are CUDA-graph
replays timed in groups that replay back to back; the real run is eager whole steps, whose optimizer
(memory-bound, low power) breaks the heavy layers' power draw. This probe measures, for each model,
the parts and the real run as ``measure_model`` does, and beside each the GPU's SM clock and board
power sampled by the project's own sampler (:class:`gemm_bench.measure.telemetry.ClockSampler`) over
exactly that window, so a clock difference between the parts' windows and the real run's can be
read off, with the composed/real ratio per kind of kernel.

    python3 tools/gpu_composition_clocks.py --out DIR [--models qwen2.5-7b,mixtral-8x7b]
"""

from __future__ import annotations

import argparse
import gc
import json
import time
from pathlib import Path
from typing import Any


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--out", required=True, type=Path)
    parser.add_argument("--models", default="qwen2.5-7b,mixtral-8x7b")
    parser.add_argument("--precisions", default="bf16,fp8-current")
    parser.add_argument("--layers", type=int, default=2)
    parser.add_argument("--g", default="1,4")
    args = parser.parse_args(argv)

    import torch

    from gemm_bench.measure.backends import model_parts as mp
    from gemm_bench.measure.telemetry import ClockSampler
    from gemm_bench.measure.timing import TimerSettings
    from gemm_bench.question.model_step import step_ms
    from gemm_bench.question.question import build_question

    args.out.mkdir(parents=True, exist_ok=True)
    gc.collect()
    gc.freeze()
    settings = TimerSettings(warmup_s=0.2, spinup_s=1.0, repetitions=20, min_repetitions=8, max_group_s=1.5,
                             eager_repetitions=3, target_ci=0.01)
    sampler = ClockSampler()
    sampler.start()
    report: dict[str, Any] = {"device": torch.cuda.get_device_name(), "models": {}}
    for model in args.models.split(","):
        config = build_question(model=model).config
        assert config is not None
        precisions = args.precisions.split(",")
        started = time.monotonic()
        with sampler.sampling():
            timing = mp.time_parts(config, precisions, mp.interleaver_group(settings))
        parts_clock = sampler.summary()
        line = mp.optimizer_line(timing)
        entry: dict[str, Any] = {"parts_clock": parts_clock, "parts_s": round(time.monotonic() - started, 1),
                                 "parts_ms": {}, "runs": {}}
        for p in precisions:
            if p not in timing.layers:
                entry["runs"][p] = "not measured"
                continue
            medians = mp.part_times(timing, p, mp.median_ms)
            entry["parts_ms"][p] = medians.__dict__
            for g in (int(x) for x in args.g.split(",")):
                with mp._clean():
                    real = mp.RealModel(config, args.layers, p)
                    with sampler.sampling():
                        samples = mp.time_real_steps(real, g, steps=4)
                    run_clock = sampler.summary()
                    gpu_ms, kinds = mp.real_gpu_profile(real, g)
                    composed = step_ms(medians, layers=args.layers, microbatches=g,
                                       optimizer_ms=line.at(real.parameter_count))
                    event = mp.median_ms(samples)
                    entry["runs"][f"{p}/G{g}"] = {
                        "real_event_ms": event, "real_gpu_ms": gpu_ms, "composed_ms": composed,
                        "time_ratio": composed / gpu_ms, "event_ratio": composed / event,
                        "real_clock": run_clock, "real_kinds_ms": kinds}
                    del real
                print(model, p, f"G{g}", f"composed/gpu {composed / gpu_ms:.3f} composed/event {composed / event:.3f}",
                      f"clock parts {parts_clock.get('sm_clock_mhz_median')}",
                      f"real {run_clock.get('sm_clock_mhz_median')}",
                      f"power parts {parts_clock.get('power_w_median')} real {run_clock.get('power_w_median')}",
                      flush=True)
        report["models"][model] = entry
        (args.out / "composition-clocks.json").write_text(json.dumps(report, indent=1, default=str))
    sampler.close()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
