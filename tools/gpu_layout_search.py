"""The largest micro-batch of a preset layout's rank, found on the GPU (issue 41 item 3).

For each model named, the rank of its preset layout (``question.layout``) is built for real
(:func:`gemm_bench.question.stage_shape.searched_rank`): at pipeline parallel 1 the whole rank (every
layer, the embedding and the output layer); at PP > 1 without virtual stages the first stage (its
layers and the embedding, ``min(PP, G)`` micro-batches in flight as 1F1B keeps them, a random gradient
for its output). All on the rank's ``S / CP`` tokens, main gradients whole (FP32, or BF16 where the
layout reduces gradients in BF16), FP8 primary weights in the layers where the layout gathers FP8
parameters and the recipe is FP8, and FP32 master
weights and moments for ``1 / (DP x CP)`` of the parameters (Megatron's distributed optimizer). Its
step (two of them: the second holds the optimizer's moments through its forward and backward) is run
at growing micro-batch sizes, doubling then bisecting, until it runs out of memory
(:func:`gemm_bench.measure.backends.model_parts.largest_microbatch`): an out-of-memory is the answer.

``--seed-from PATH`` (a stored layout-search study file, or a cache folder: this GPU's file in it) starts
each recipe's search at the answer the stored study found for the same rank (its layout's words, layers,
tokens, optimizer shards, stage and capacity all this run's; else the search starts at 1): the seed, then
its neighbour, so an unchanged answer costs two tries (Llama 3 8B's 4 on an H200 took six from 1). The
answer is the same (:mod:`gemm_bench.measure.microbatch_search` says why); the JSON says the seed per
recipe (``"seed"``). A file that cannot be read is a warning and the search runs unseeded: the seed only
orders the tries, and the refresh must be able to replace a corrupt study by measuring it again.

``--capacity-bytes`` caps PyTorch's allocator at that many bytes of this GPU
(``torch.cuda.set_per_process_memory_fraction``), so an H200 answers for an 80 GB H100: the cap is the
H100's usable capacity as its cached results store it. Said wherever the number is quoted ("an H100's
capacity, emulated on an H200"): the CUDA context and libraries' workspaces outside the allocator are
the H200's.

    python3 tools/gpu_layout_search.py --out DIR --models llama3-8b --precisions bf16,fp8-delayed \\
        --capacity-bytes 84100186112 --seed-from docs/_gemm_cache/studies/layout-search--h100-80gb-hbm3.json

``--time-steps`` (the study passes it) then times the whole rank's step at the largest micro-batch found
and at 1, each at the layout's G for that size (:func:`gemm_bench.question.layout.microbatches_at`), one
untimed step then three timed (:func:`gemm_bench.measure.backends.model_parts.step_samples`): a whole rank
of PP 1 on this GPU's own capacity at CP 1 only
(:func:`gemm_bench.results.layout_search_schema.times_step`).

JSON to ``DIR/layout-search.json`` after each model; a compact line per recipe on stdout. The
composition's prediction for the same layout is computed from the committed cache, not here.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

#: PyTorch's allocator setting the search runs under (Megatron-Bridge's recipes set it).
ALLOCATOR = "expandable_segments:True"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", required=True, type=Path)
    parser.add_argument("--models", default="llama3-8b")
    parser.add_argument("--precisions", default="bf16,fp8-delayed")
    parser.add_argument("--capacity-bytes", type=int, default=0, help="cap the allocator at this many bytes")
    parser.add_argument("--limit", type=int, default=16, help="largest micro-batch tried")
    parser.add_argument("--seed-from", type=Path, default=None, metavar="PATH",
                        help="a stored layout-search study (or a cache folder: this GPU's study in it) whose "
                             "answers for the same rank start each search")
    parser.add_argument("--time-steps", action="store_true",
                        help="time the whole rank's step at the largest micro-batch found and at 1, each at the "
                             "layout's G for that size (CP 1 only)")
    args = parser.parse_args(argv)

    # The allocator as Megatron-Bridge's performance recipes run it (their env_vars set
    # PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True): without it, fragmentation that a run launched
    # from those recipes does not have ends the search early. Set before CUDA starts; a caller's own wins.
    os.environ.setdefault("PYTORCH_CUDA_ALLOC_CONF", ALLOCATOR)
    import torch

    from gemm_bench.measure.backends.model_parts import largest_microbatch, rank_keywords, step_samples
    from gemm_bench.question.config import ConfigError
    from gemm_bench.question.layout import microbatches_at
    from gemm_bench.question.model_step import unsupported_reason as model_step_unsupported
    from gemm_bench.question.question import build_question
    from gemm_bench.question.stage_shape import searched_rank
    from gemm_bench.results.cache import CacheError
    from gemm_bench.results.layout_search_schema import seed, stored_seeds, times_step

    total = torch.cuda.get_device_properties(0).total_memory
    doc: dict[str, Any] = {"device": torch.cuda.get_device_name(), "total_bytes": total,
                           "allocator": os.environ["PYTORCH_CUDA_ALLOC_CONF"],
                           "capacity_bytes": args.capacity_bytes or total, "models": {}}
    if args.capacity_bytes:
        if args.capacity_bytes > total:
            parser.error(f"--capacity-bytes {args.capacity_bytes} is more than this GPU's {total}")
        torch.cuda.set_per_process_memory_fraction(args.capacity_bytes / total)
    stored = None
    if args.seed_from is not None:
        try:
            stored = stored_seeds(args.seed_from, doc["device"])
            if stored is None:
                print(f"--seed-from {args.seed_from}: no stored study of the {doc['device']} there: every search "
                      "starts at 1", flush=True)
        except CacheError as exc:
            print(f"gpu_layout_search: warning: --seed-from: {exc}; every search starts at 1", file=sys.stderr,
                  flush=True)
    args.out.mkdir(parents=True, exist_ok=True)
    for model in [m.strip() for m in args.models.split(",") if m.strip()]:
        question = build_question(model=model)
        config = question.config
        layout, _ = question.layout_or_assumed()
        if config is None or layout is None:
            doc["models"][model] = {"error": "no model config or layout"}
            continue
        no_step = model_step_unsupported(config)
        if no_step is not None:  # the rank is built whole, embedding and output layer included
            doc["models"][model] = {"error": no_step}
            continue
        try:
            built = searched_rank(layout, config)
        except ConfigError as exc:
            built = str(exc)
        if isinstance(built, str):
            doc["models"][model] = {"error": built}
            continue
        rank = dataclasses.replace(config, seq_length=built.tokens)
        shards = built.optimizer_shards
        # The words the report matches a page's layout by: without the overlap flags (no byte of memory).
        entry: dict[str, Any] = {"layout": layout.describe(overlap=False), "layers": built.layers,
                                 "tokens": built.tokens, "optimizer_shards": shards, "found": {}}
        if built.stage != "only":
            entry.update(stage=built.stage, in_flight=built.in_flight)
        for precision in [p.strip() for p in args.precisions.split(",") if p.strip()]:
            started = time.monotonic()
            model_keywords = rank_keywords(built, precision)
            start = seed(stored, model, {**entry, "capacity_bytes": doc["capacity_bytes"]}, precision)
            try:
                found = largest_microbatch(rank, built.layers, precision, limit=args.limit, seed=start,
                                           **model_keywords)
            except RuntimeError as exc:  # GPU boundary: not an out-of-memory (that is an answer), a failure
                entry["found"][precision] = f"{type(exc).__name__}: {exc}"[:400]
                print(f"{model} {precision}: FAILED {exc}"[:300], flush=True)
                continue
            found["peak_bytes_limit"] = doc["capacity_bytes"]
            entry["found"][precision] = found
            print(f"{model} {precision}: largest micro-batch {found['largest']} (tried {found['tried']}"
                  f"{'' if start is None else f', seeded at {start}'}, {time.monotonic() - started:.0f} s)",
                  flush=True)
            # The step at the largest micro-batch and at 1, each at the layout's G for that size (a whole
            # rank on this GPU's own capacity at CP 1 only: an emulated capacity would time this GPU, not the
            # one it answers for; a CP rank's tokens attend only to one another, a step never quoted).
            if args.time_steps and times_step(found, emulated=bool(args.capacity_bytes), stage=built.stage,
                                              cp=layout.cp):
                sizes = [(size, microbatches_at(layout, size)) for size in (1, found["largest"])]
                undivided = [size for size, g in sizes if g is None]
                if undivided:  # the report says why from the layout: nothing to time at a G the run cannot take
                    print(f"{model} {precision}: not timed: the global batch {layout.global_batch_size} does not "
                          f"divide into micro-batches of {undivided[0]} over DP {layout.dp}", flush=True)
                    continue
                started = time.monotonic()
                try:
                    found["steps"] = step_samples(rank, built.layers, precision,
                                                  [(size, g) for size, g in sizes if g is not None],
                                                  **model_keywords)
                except RuntimeError as exc:  # GPU boundary: the search's answer stands, the timing is lost
                    found["steps_failed"] = f"{type(exc).__name__}: {exc}"[:400]
                print(f"{model} {precision}: steps at {', '.join(f'micro-batch {s} x G = {g}' for s, g in sizes)} "
                      f"{found.get('steps') or found.get('steps_failed')} ({time.monotonic() - started:.0f} s)",
                      flush=True)
        doc["models"][model] = entry
        (args.out / "layout-search.json").write_text(json.dumps(doc, indent=1), encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
