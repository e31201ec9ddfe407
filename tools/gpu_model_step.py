"""The model's step on the GPU (issue 32): parts, memory, composition at G = 1 and the default G,
the real multi-layer proof and the largest micro-batch, for the models named; JSON to --out and a
compact table on stdout. Run by tools/gpu_model_step.sh. Nothing here types a number into the site.

    python3 tools/gpu_model_step.py --out DIR [--models llama3-8b,qwen2.5-7b] [--precisions ...]
    python3 tools/gpu_model_step.py --out DIR --models mixtral-8x7b,deepseek-v3/ep64 --search ""

A mixture of experts (Mixtral 8x7B) or multi-latent attention with experts (DeepSeek-V3, one EP 64
rank) is measured and proven the same way: its layer is the layer step's ``RankLayer`` (balanced
routing), with fused FP32 main gradients and ``is_first_microbatch`` through every TE module.
"""

from __future__ import annotations

import argparse
import gc
import json
import sys
import time
import traceback
from pathlib import Path
from typing import Any

#: Layers of the real model each proof builds: as many as fit an 80 GB H100 beside the parts' memory
#: with FP32 master weights and moments of the embedding and output layer (DESIGN.md: a 6-layer
#: Llama 3 8B trained in ~40-42 GiB; Gemma 2 27B ran out of memory at 4 layers). A mixture of experts
#: holds 18 bytes per parameter of its whole layer (BF16 weight, FP32 main gradient, master and two
#: moments): Mixtral 8x7B's 1.45 billion a layer are 26 GB, so 2 layers (about 52 GB, FP8 weight copies
#: and activations beside); DeepSeek-V3's EP 64 rank holds 0.41 billion a layer (7.4 GB) but a 1.85
#: billion-parameter vocabulary (33 GB), so 2 layers too. gpt-oss-120b (3.2 billion a layer, 58 GB) and
#: Mixtral 8x22B (2.5 billion, 45 GB) fit one layer only: no multi-layer proof on one GPU.
PROOF_LAYERS = {"llama3-8b": 4, "qwen2.5-7b": 4, "gemma2-27b": 2, "mixtral-8x7b": 2, "deepseek-v3/ep64": 2,
                "gpt-oss-120b": 1, "mixtral-8x22b": 1}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--out", required=True, type=Path)
    parser.add_argument("--models", default="llama3-8b,qwen2.5-7b")
    parser.add_argument("--precisions", default="bf16,fp8-delayed,fp8-current,fp8-block")
    parser.add_argument("--max-group-s", type=float, default=2.0)
    parser.add_argument("--proof-steps", type=int, default=4)
    parser.add_argument("--search", default="llama3-8b", help="models whose largest micro-batch is searched")
    parser.add_argument("--search-limit", type=int, default=8)
    args = parser.parse_args(argv)

    from gemm_bench.measure.backends.model_parts import measure_model
    from gemm_bench.measure.backends.te import support
    from gemm_bench.measure.timing import TimerSettings
    from gemm_bench.question.question import build_question

    args.out.mkdir(parents=True, exist_ok=True)
    # Everything imported so far stays: each part's clean-up collects only what it made (milliseconds,
    # not the half second a full collection of torch's and TE's objects takes).
    gc.collect()
    gc.freeze()
    settings = TimerSettings(warmup_s=0.2, spinup_s=1.0, repetitions=30, min_repetitions=8,
                             max_group_s=args.max_group_s, eager_repetitions=3, target_ci=0.01)
    available = support()
    precisions = [p for p in args.precisions.split(",") if available.get(p) is None or available[p].available]
    print(f"precisions: {precisions} (unsupported here: "
          f"{[p for p in args.precisions.split(',') if p not in precisions]})", flush=True)
    status = 0
    for name in args.models.split(","):
        config = build_question(model=name).config
        assert config is not None
        started = time.monotonic()
        layers = PROOF_LAYERS.get(name, 2)
        try:
            result = measure_model(config, precisions, settings, proof_layers=layers,
                                   microbatches=(1, config.num_microbatches), real_steps=args.proof_steps,
                                   search_layers=layers if name in args.search.split(",") else 0,
                                   search_limit=args.search_limit)
        except (RuntimeError, ValueError, KeyError, AssertionError, ZeroDivisionError) as exc:
            # one model's failure is reported and the next one still measured
            traceback.print_exc()
            result = {"error": f"{type(exc).__name__}: {exc}"}
        result["wall_s"] = round(time.monotonic() - started, 1)
        (args.out / f"model-step-{name.replace('/', '-')}.json").write_text(json.dumps(result, indent=1))
        status |= print_table(name, result)
    return status


def print_table(name: str, r: dict[str, Any]) -> int:
    routing = f", {r['routing']} routing" if r.get("routing") else ""
    print(f"\n=== {name} ({r.get('device')}, {r.get('wall_s')} s{routing}) ===")
    if "unsupported" in r or "error" in r:
        print(r.get("unsupported") or r.get("error"), r.get("failures"))
        return 1
    if r.get("failures"):
        print("failures:", json.dumps(r["failures"])[:800])
    print("parts ms:", json.dumps({p: {k: round(v, 3) for k, v in d.items()} for p, d in r["parts_ms"].items()}))
    print("optimizer ms:", {k: round(v, 3) for k, v in r["optimizer_ms"].items()},
          "state B/param:", round(r["state_per_param"], 2), "rank params:", r["rank_params"])
    for g, rows in r["rows"].items():
        print(f"G={g}: precision  ms/mb [low-high]  tok/s/GPU  TFLOP/s  MFU  speedup [low-high]  layer-step x")
        for row in rows:
            sp = row["speedup"]
            print(f"  {row['precision']:12s} {row['ms_per_microbatch']:9.2f} [{row['ms_low']:.2f}-{row['ms_high']:.2f}]"
                  f" {row['tokens_per_s']:9.0f} {row['tflops']:7.1f} {(row['mfu'] or 0):5.1%}"
                  f" {sp or 0:5.3f} [{row['speedup_low'] or 0:.3f}-{row['speedup_high'] or 0:.3f}]"
                  f" {row['layer_step_speedup'] or 0:5.3f}")
    gib = 2 ** 30
    for p, m in r["memory"].items():
        print(f"memory {p:12s} peak {m['peak'] / gib:7.1f} GiB = " + ", ".join(
            f"{k} {v / gib:.1f}" for k, v in m.items() if k != "peak") + f"; layers that fit {r['layers_that_fit'][p]}")
    bad = 0
    for key, v in r.get("proof", {}).items():
        if isinstance(v, str):
            print(f"proof {key:20s} FAILED: {v}")
            bad = 1
        if not isinstance(v, dict):
            continue
        held = v.get("busy_ratio") or v["time_ratio"]  # busy to busy where the parts were profiled
        ok = abs(held - 1) <= 0.03
        bad |= not ok
        print(f"proof {key:20s} real GPU {v['real_gpu_ms']:9.2f} ms (events {v['real_ms']:9.2f}, host wait "
              f"{v['host_wait_ms']:.2f}) composed {v['composed_ms']:9.2f} ms "
              f"ratio {v['time_ratio']:.4f}, busy {held:.4f} {'OK' if ok else 'OFF'} (to events "
              f"{v['event_ratio']:.4f}); memory real "
              f"{v['real_peak_bytes'] / gib:.2f} GiB composed {v['composed_peak_bytes'] / gib:.2f} GiB "
              f"ratio {v['memory_ratio']:.3f}")
        real, composed = v.get("real_parts_ms") or {}, v.get("composed_parts_ms") or {}
        if real and composed:  # the breakdown's second method: each kind's kernel time, real vs composed
            print(f"  kinds {key:18s} " + "  ".join(
                f"{k} {composed[k]:.1f}/{real[k]:.1f}" + (f"={composed[k] / real[k]:.3f}" if real[k] > 0 else "")
                for k in real if max(real[k], composed.get(k, 0.0)) >= 0.05 and k in composed) + " ms (composed/real)")
    for p, v in r.get("largest_microbatch", {}).items():
        if isinstance(v, str):
            print(f"largest micro-batch {p}: FAILED: {v}")
        elif isinstance(v, dict):
            print(f"largest micro-batch ({r['largest_microbatch']['layers']} layers) {p:12s} found {v['largest']} "
                  f"predicted {v['predicted']} tried {v['tried']} ({v['seconds']} s)")
    return bad


if __name__ == "__main__":
    sys.exit(main())
