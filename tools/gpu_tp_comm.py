"""Issue 42 on a box of several GPUs: the tensor-parallel layer step with its collectives, the same
rank's compute alone (the same sequence-parallel layer with its collectives stood in by local calls
that move no data; and, as a row beside, the old full-sequence layer of the shard's sizes), the
collectives alone, and their composition (rank compute plus measured collectives, no overlap)
against the real step.

    torchrun --standalone --nproc_per_node=N tools/gpu_tp_comm.py \\
        --models llama3-8b,llama3-70b --tp 2,4 --seq 8192 --out DIR

(with ``bench/`` on ``PYTHONPATH``, or the project installed). One process per GPU; rank 0 writes
``DIR/tp-comm.json`` after every cell (so a run cut short keeps what it finished) and prints a table.
What is measured and how: :mod:`gemm_bench.measure.tp_step`; what is composed:
:mod:`gemm_bench.question.comm`. A TP size that does not divide the box's GPUs is skipped (said so).
A cell that fails (``RuntimeError``, which torch's ``OutOfMemoryError`` and ``DistBackendError``
and the project's ``GraphCaptureError`` are; ``ValueError``, which ``ConfigError`` and
``CommError`` are; ``AssertionError`` from Transformer Engine's shape checks) is recorded as failed
with its message and the run goes on; rank 0 skips a cell that the time budget (``--budget-s``)
would not fit, and says so. NVLink multicast stays off: importing ``tp_step`` forces
NCCL_NVLS_ENABLE=0, TORCH_SYMM_MEM_DISABLE_MULTICAST=1 and NVSHMEM_DISABLE_NVLS=1 before torch loads.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

START = time.monotonic()
sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "bench"))

from gemm_bench.measure import tp_step  # noqa: E402  (forces the safe environment before torch loads)
from gemm_bench.question import comm  # noqa: E402
from gemm_bench.question.config import ConfigError, preset  # noqa: E402

RECIPES = ("bf16", "fp8-delayed", "fp8-current", "fp8-block")
#: Seconds rank 0 keeps in hand for a cell: a cell is skipped when less than this is left.
CELL_RESERVE_S = 30.0
FILE = "tp-comm.json"


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--models", default="llama3-8b,llama3-70b", help="dense presets, comma-separated")
    p.add_argument("--tp", default="2,4", help="TP sizes, comma-separated (those that divide the box's GPUs run)")
    p.add_argument("--precisions", default=",".join(RECIPES), help="recipes, comma-separated")
    p.add_argument("--seq", type=int, default=None, help="tokens per sequence (default: the preset's)")
    p.add_argument("--out", type=Path, required=True, help="folder of the JSON (rank 0 writes it)")
    p.add_argument("--warmup-s", type=float, default=0.3)
    p.add_argument("--repetitions", type=int, default=15, help="timed repetitions of each region")
    p.add_argument("--profile-replays", type=int, default=2, help="replays under the profiler (0: none)")
    p.add_argument("--no-sweep", action="store_true", help="skip the collective sweep (no composition then)")
    p.add_argument("--no-full-compute", action="store_true",
                   help="skip the old row 'compute alone, full sequence, no SP' (never composed from)")
    p.add_argument("--budget-s", type=float, default=330.0, help="rank 0 skips cells that would end later")
    p.add_argument("--nccl-timeout-s", type=float, default=180.0,
                   help="a collective waiting longer aborts the run (a rank whose cell failed mid-step)")
    args = p.parse_args(argv)
    args.models = [m.strip() for m in args.models.split(",") if m.strip()]
    args.precisions = [x.strip() for x in args.precisions.split(",") if x.strip()]
    try:
        args.tp = sorted({int(x) for x in args.tp.split(",") if x.strip()})
    except ValueError:
        p.error(f"--tp: whole numbers separated by commas, got {args.tp!r}")
    unknown = [x for x in args.precisions if x not in comm.MODELLED_PRECISIONS]
    if unknown:
        p.error(f"--precisions: {', '.join(unknown)} not modelled (choose from {', '.join(comm.MODELLED_PRECISIONS)})")
    if args.repetitions < 3:
        p.error("--repetitions: at least 3 (quartiles of fewer say nothing)")
    return args


def model_config(name: str, seq: int | None) -> Any:
    """One layer of a dense preset at micro-batch 1 and the preset's (or ``seq``) sequence length."""
    import dataclasses

    config = preset(name)
    if config.is_moe or config.is_mla:
        raise ConfigError("model", f"{name} is not a dense model: the tensor-parallel step here is "
                                   "te.TransformerLayer's")
    return dataclasses.replace(config, num_layers=1, micro_batch_size=1,
                               seq_length=seq if seq is not None else config.seq_length)


def write(out: Path, doc: dict[str, Any]) -> None:
    """Atomically: a temporary file renamed over the last."""
    out.mkdir(parents=True, exist_ok=True)
    tmp = out / (FILE + ".tmp")
    tmp.write_text(json.dumps(doc, indent=1), encoding="utf-8")
    tmp.replace(out / FILE)


def _num(value: float | None, spec: str) -> str:
    return "-" if value is None else format(value, spec)


def table(doc: dict[str, Any]) -> str:
    """The compact table: per cell and region, the real step, the rank's compute alone (``compute``:
    the same SP layer with its collectives stood in, composed from; ``full``: the old full-sequence
    layer, a row beside), the collectives, the composed step and its ratio to the real one (no
    overlap; ``full/r``: composed from ``full`` instead; ``hidden/r``: every overlappable
    collective hidden), the measured communication share and the profiler's; ``serial``: the real
    step with its collectives serialized and ``c/ser`` the composition's ratio to it (the held one:
    no overlap on either side)."""
    head = (f"{'model':<11} {'TP':>2} {'recipe':<11} {'region':<6} {'real ms':>8} {'method':<10} "
            f"{'compute':>8} {'full':>8} {'comm':>7} {'composed':>8} {'c/real':>7} {'full/r':>7} {'hidden/r':>8} "
            f"{'share':>6} {'prof':>6} {'serial':>8} {'c/ser':>6}")
    lines = [head, "-" * len(head)]
    for cell in doc["cells"]:
        label = f"{cell['model']:<11} {cell['tp']:>2} {cell['precision']:<11}"
        if cell["status"] != "measured":
            lines.append(f"{label} {cell['status']}: {cell.get('reason', '')[:90]}")
            continue
        for region, c in cell.get("composed", {}).items():
            prof = c.get("profiler_nccl_exposed_share")
            full = c.get("compute_full_ms")
            full_ratio = c.get("composed_full_over_real")
            lines.append(f"{label} {region:<6} {c['real_ms']:8.3f} {cell['real']['method']:<10} {c['compute_ms']:8.3f} "
                         f"{(f'{full:.3f}' if full is not None else '-'):>8} "
                         f"{c['comm_ms']:7.3f} {c['step_ms']:8.3f} {c['composed_over_real']:7.3f} "
                         f"{(f'{full_ratio:.3f}' if full_ratio is not None else '-'):>7} "
                         f"{c['hidden_over_real']:8.3f} {c['measured_comm_share']:6.1%} "
                         f"{(f'{prof:.1%}' if prof is not None else '-'):>6} "
                         f"{_num(c.get('real_serial_ms'), '.3f'):>8} {_num(c.get('composed_over_serial'), '.3f'):>6}")
        if "composed" not in cell:
            real = cell["real"]["regions"]["cached"]["max_rank"]["median_ms"]
            lines.append(f"{label} cached {real:8.3f} {cell['real']['method']:<10} (no composition: "
                         f"{cell.get('composition_error', 'no sweep')})")
    return "\n".join(lines)


def stand_in_lines(doc: dict[str, Any]) -> str:
    """Per cell, what the compute layer's stand-ins replaced in its cached region against what the
    composition costs (all-gathers and reduce-scatters: calls and MiB), and whether the NCCL
    sequence numbers were checked: the evidence that the compute alone ran no collective."""
    lines = []
    for cell in doc["cells"]:
        c = cell.get("composed", {}).get("cached", {})
        check = c.get("stand_in_check")
        log = ((cell.get("compute") or {}).get("stand_ins") or {}).get("cached")
        if not check or not log:
            continue
        ops = "; ".join(f"{op} {v['stood_in']['calls']} calls {v['stood_in']['bytes'] / 2**20:.1f} MiB "
                        f"(modelled {v['modelled']['calls']}, {v['modelled']['bytes'] / 2**20:.1f} MiB)"
                        for op, v in check["per_op"].items())
        lines.append(f"{cell['model']} TP {cell['tp']} {cell['precision']}: stood in: {ops}; bytes "
                     f"{'match' if check['bytes_match'] else 'DIFFER'}; amax reductions suppressed "
                     f"{log['amax_reduction_requests']}; NCCL sequence checked on "
                     f"{', '.join(log['nccl_sequence_checked']) or 'no group (this torch keeps none)'}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    phases: dict[str, float] = {}
    mark = time.monotonic()

    def phase(name: str) -> None:
        nonlocal mark
        now = time.monotonic()
        phases[name] = round(now - mark, 1)
        mark = now

    import torch
    import transformer_engine
    import transformer_engine.pytorch

    phase("imports")
    tp_step.assert_safe_env()
    rank = int(os.environ.get("RANK", "0"))
    world = int(os.environ.get("WORLD_SIZE", "1"))
    runnable = [tp for tp in args.tp if 2 <= tp <= world and world % tp == 0]
    skipped_tp = [tp for tp in args.tp if tp not in runnable]

    def say(text: str) -> None:
        if rank == 0:
            print(f"[{time.monotonic() - START:6.1f}s] {text}", flush=True)

    if not runnable:
        print(f"rank {rank}: no TP size of {args.tp} fits {world} GPU(s): run with torchrun --nproc_per_node=N, "
              "N >= 2", file=sys.stderr)
        return 2
    box = tp_step.init_box(runnable, timeout_s=args.nccl_timeout_s)
    phase("process groups")
    settings = tp_step.Settings(warmup_s=args.warmup_s, repetitions=args.repetitions,
                                profile_replays=args.profile_replays,
                                full_sequence_compute=not args.no_full_compute)
    from gemm_bench.measure.backends.te import support as te_support
    from gemm_bench.measure.provenance import collect

    device, provenance = collect({"tool": "tools/gpu_tp_comm.py", "settings": settings.to_dict()},
                                 transformer_engine.__version__)
    nccl = torch.cuda.nccl.version()
    provenance["nccl"] = ".".join(map(str, nccl)) if isinstance(nccl, tuple) else str(nccl)
    support = te_support()
    say(f"{world} x {device['name']}, torch {provenance['torch']}, TE {provenance['transformer_engine']}, "
        f"NCCL {provenance['nccl']}, driver {provenance['driver']}; TP {runnable}"
        + (f" (not on {world} GPUs: TP {skipped_tp})" if skipped_tp else ""))
    doc: dict[str, Any] = {
        "issue": 42, "device": device, "provenance": provenance, "gpus": world,
        "env": {k: os.environ.get(k) for k in tp_step.SAFE_ENV},
        "tp": runnable, "tp_not_run": skipped_tp, "seq": args.seq, "models": args.models,
        "what": {"real": "te.TransformerLayer with TE tensor + sequence parallelism, forward + backward, "
                         "[S/TP, B, H] input, no Userbuffers (no comm-GEMM overlap)",
                 "compute": "the same TP + SP layer on the same [S/TP, B, H] input with every collective replaced "
                            "by a local stand-in that moves no data (gemm_bench.measure.standins): the rank's "
                            "compute alone, composed from",
                 "compute_full": "compute alone, full sequence, no SP: the layer of the shard's sizes on [S, B, H] "
                                 "(its LayerNorms, residual adds and casts run on S tokens: overstates the rank's "
                                 "compute); a row beside, not composed from",
                 "composed": "compute + every collective of gemm_bench.question.comm.tp_layer_collectives at "
                             "its measured cost, no overlap (published); hidden: a lower bound with TE's "
                             "asynchronous backward collectives (wgrad re-gathers, dgrad reduce-scatters) taken "
                             "as fully hidden (the GEMMs each overlaps: CollectiveCall.overlaps_with)"},
        "phases_s": phases, "sweep": {}, "cells": [],
    }

    configs: dict[str, Any] = {}
    cells: list[tuple[str, int, str]] = []
    for name in args.models:
        try:
            configs[name] = model_config(name, args.seq)
        except ConfigError as exc:
            doc["cells"].append({"model": name, "status": "failed", "reason": str(exc), "tp": 0, "precision": "-"})
            continue
        cells += [(name, tp, p) for tp in runnable for p in args.precisions]

    # (c) the collectives alone, at the step's sizes and powers of two
    calls: dict[tuple[str, int, str], tuple[comm.CollectiveCall, ...]] = {}
    call_errors: dict[tuple[str, int, str], str] = {}
    for cell in cells:
        name, tp, p = cell
        try:
            calls[cell] = comm.tp_layer_collectives(tp_step.tp_config(configs[name], tp), tp, p)
        except (ConfigError, comm.CommError) as exc:
            call_errors[cell] = str(exc)
    needed = comm.sizes_needed(c for cs in calls.values() for c in cs)
    tables: dict[int, comm.CollectiveTable] = {}
    if not args.no_sweep:
        for tp in runnable:
            say(f"collectives over TP {tp} groups")
            records = tp_step.sweep_collectives(box, tp, tp_step.sweep_plan(needed, tp), settings, say)
            merged = tp_step.table_records(tp_step.gather_objects(records))
            doc["sweep"][str(tp)] = merged
            tables[tp] = comm.CollectiveTable.from_records(merged)
        phase("collective sweep")
        if rank == 0:
            write(args.out, doc)

    # (a, b, d) per cell
    cell_start = time.monotonic()
    for i, (name, tp, p) in enumerate(cells):
        t0 = time.monotonic()
        record: dict[str, Any] = {"model": name, "tp": tp, "precision": p, "seq": configs[name].seq_length,
                                  "micro_batch": 1}
        left = args.budget_s - (time.monotonic() - START)
        done = i
        per_cell = (time.monotonic() - cell_start) / done if done else CELL_RESERVE_S
        skip = tp_step.broadcast_decision(
            f"{left:.0f} s of the {args.budget_s:.0f} s budget left, a cell takes about {per_cell:.0f} s"
            if left < max(CELL_RESERVE_S, per_cell) else None)
        unsupported = support.get(p)
        if skip:
            record.update(status="skipped", reason=skip)
        elif unsupported is not None and not unsupported.available:
            record.update(status="unsupported", reason=unsupported.reason)
        else:
            say(f"{name} TP {tp} {p}")
            part: dict[str, Any] | None
            error = None
            try:
                part = tp_step.measure_cell(box, configs[name], tp, p, settings, say)
            except (RuntimeError, ValueError, AssertionError) as exc:
                # RuntimeError: torch.OutOfMemoryError, DistBackendError, CUDA errors; ValueError:
                # ConfigError, CommError; AssertionError: Transformer Engine's shape checks
                part, error = None, f"{type(exc).__name__}: {exc}"[:600]
            parts = tp_step.gather_objects(part if error is None else {"error": error})
            errors = [f"rank {r}: {x['error']}" for r, x in enumerate(parts) if "error" in x]
            if errors:
                record.update(status="failed", reason="; ".join(errors)[:1200])
            elif rank == 0:
                cell = (name, tp, p)
                why = call_errors.get(cell) or (None if tp in tables else "no collective sweep (--no-sweep)")
                try:
                    record.update(status="measured", **tp_step.assemble_cell(
                        parts, None if why else calls[cell], None if why else tables[tp]))
                except comm.CommError as exc:  # a cost the sweep lacks: the times stay, uncomposed
                    why = str(exc)
                    record.update(status="measured", **tp_step.assemble_cell(parts, None, None))
                if why:
                    record["composition_error"] = why
        record["elapsed_s"] = round(time.monotonic() - t0, 1)
        doc["cells"].append(record)
        if rank == 0:
            composed = record.get("composed", {}).get("cached")
            say(f"  {record['status']} in {record['elapsed_s']} s"
                + (f": real {composed['real_ms']:.3f} ms, composed {composed['step_ms']:.3f} ms, "
                   f"ratio {composed['composed_over_real']:.3f}, to the serialized step "
                   f"{composed.get('composed_over_serial', float('nan')):.3f}, with the lockstep wait "
                   f"{composed.get('composed_lockstep_over_serial', float('nan')):.3f}" if composed else
                   f": {record.get('reason') or record.get('composition_error', '')}"[:300]))
            write(args.out, doc)
    phase("cells")
    doc["elapsed_s"] = round(time.monotonic() - START, 1)
    if rank == 0:
        write(args.out, doc)
        print(table(doc), flush=True)
        print(stand_in_lines(doc), flush=True)
        say(f"phases (s): {json.dumps(phases)}; wrote {args.out / FILE}")
    import torch.distributed as dist

    dist.barrier()
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())
