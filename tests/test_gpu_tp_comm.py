"""GPU test of issue 42's proof on a box of two or more GPUs: the composed tensor-parallel layer step
(the rank's compute alone: the same sequence-parallel layer with its collectives stood in by local
calls that move no data, :mod:`gemm_bench.measure.standins`; plus every collective Transformer
Engine runs at its cost measured alone, no overlap) holds within 3% of the real step with its
collectives serialized (the same layer, every collective run synchronously: no overlap on either
side, :func:`gemm_bench.measure.standins.collectives_serialized`), for two models (Llama 3 8B and
70B), every recipe Hopper runs, TP 2 and, on a box of four, TP 4, per micro-batch (first: weights
quantized; cached). The real step with TE's asynchronous collectives is printed beside, with what
they hid; it is never slower than the serialized one (beyond noise). The stand-in region ran no NCCL
call (the tool fails the cell otherwise) and its NCCL sequence numbers were checked where torch keeps
them.

    python3 -m pytest --noconftest -m gpu -s tests/test_gpu_tp_comm.py

(``--noconftest``: the project's conftest imports Sphinx's testing fixtures, which a GPU box need not
have; this file needs none of them.)

It runs ``tools/gpu_tp_comm.py`` under torchrun (one process per GPU) and prints the tool's table: the
run's log is the evidence quoted in the project notes, whatever the verdict.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from tests.gpu_skip import gpu_module

torch, _, pytestmark = gpu_module(gpus=2)

ROOT = Path(__file__).resolve().parent.parent
#: The composition's bound against the real run (the issue's).
TOLERANCE = 0.03
RECIPES = ("bf16", "fp8-current", "fp8-delayed", "fp8-block")
MODELS = ("llama3-8b", "llama3-70b")


def test_composed_tp_step_within_3_percent_of_the_serialized_real_one(tmp_path: Path) -> None:
    gpus = min(torch.cuda.device_count(), 4)
    tps = [tp for tp in (2, 4) if tp <= gpus]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT / "bench"), os.environ.get("PYTHONPATH", "")]),
           "NCCL_NVLS_ENABLE": "0", "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1", "NVSHMEM_DISABLE_NVLS": "1",
           "PYTHONUNBUFFERED": "1"}
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc_per_node={max(tps)}",
           str(ROOT / "tools" / "gpu_tp_comm.py"), "--models", ",".join(MODELS), "--tp", ",".join(map(str, tps)),
           "--precisions", ",".join(RECIPES), "--out", str(tmp_path), "--budget-s", "480",
           "--no-full-compute"]
    run = subprocess.run(cmd, env=env, cwd=ROOT, capture_output=True, text=True, timeout=540)
    print(run.stdout[-16000:])
    if run.returncode:
        print(run.stderr[-6000:])
    assert run.returncode == 0, "tools/gpu_tp_comm.py failed (its output is above)"
    doc = json.loads((tmp_path / "tp-comm.json").read_text(encoding="utf-8"))
    assert doc["env"] == {"NCCL_NVLS_ENABLE": "0", "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1",
                          "NVSHMEM_DISABLE_NVLS": "1"}
    for tp in tps:
        assert any(r["op"] == "all-gather" and r["dtype"] == "uint8" and r["ms"] for r in doc["sweep"][str(tp)])
    cells = {(c["model"], c["tp"], c["precision"]): c for c in doc["cells"]}
    assert sorted(cells) == sorted((m, tp, p) for m in MODELS for tp in tps for p in RECIPES)
    misses = []
    for (model, tp, precision), cell in cells.items():
        precision = f"{model} TP {tp} {precision}"
        assert cell["status"] == "measured", cell.get("reason")
        assert "composed" in cell, cell.get("composition_error")
        for region, log in cell["compute"]["stand_ins"].items():
            assert log["regions"] > 0, f"{precision} {region}: the compute layer never ran with its stand-ins"
            totals = log["totals"]
            gathers = totals.get("all-gather", {}).get("calls", 0)
            scatters = totals.get("reduce-scatter", {}).get("calls", 0)
            assert gathers >= 6 and scatters == 4, (
                f"{precision} {region}: the stand-ins saw {totals}, not a sequence-parallel layer's collectives")
        for region, log in cell["real_serial"]["serialized"].items():
            assert log["regions"] > 0 and log["made_sync"] > 0, (
                f"{precision} {region}: the serialized step made no asynchronous collective synchronous: {log}")
        for region, c in cell["composed"].items():
            ratio = c["composed_over_serial"]
            print(f"{precision} {region}: serialized {c['real_serial_ms']:.3f} ms, composed x{ratio:.3f}; with TE's "
                  f"overlap {c['real_ms']:.3f} ms (x{c['composed_over_real']:.3f}, hid "
                  f"{c['overlap_hidden_ms']:.3f} ms)")
            print(f"{precision} {region}: real {c['real_ms']:.3f} ms ({cell['real']['method']}), compute "
                  f"{c['compute_ms']:.3f} ms, collectives {c['comm_ms']:.3f} ms (overlappable "
                  f"{c['overlappable_ms']:.3f}), composed {c['step_ms']:.3f} ms: x{ratio:.3f}; "
                  f"hidden bound x{c['hidden_over_real']:.3f}; full-sequence compute {c.get('compute_full_ms')} "
                  f"ms (x{c.get('composed_full_over_real')}); profiler NCCL exposed "
                  f"{c['profiler_nccl_exposed_share']}, compute busy real {c['profiler_real_compute_busy_ms']} vs "
                  f"stood-in {c['profiler_compute_busy_ms']} ms; stand-ins vs modelled "
                  f"{c['stand_in_check']['per_op']}")
            # the composition with the ranks' lockstep wait (compute_sync: each collective a sync point)
            locked = c.get("composed_lockstep_over_serial")
            print(f"{precision} {region}: lockstep compute {c.get('compute_sync_ms')} ms over "
                  f"{c.get('sync_points')} sync points at {c.get('sync_point_ms')} ms, wait "
                  f"{c.get('lockstep_wait_ms')} ms; composed with the wait x{locked}")
            if locked is None or abs(locked - 1) > TOLERANCE:
                misses.append(f"{precision} {region}: composed with the lockstep wait / serialized {locked} "
                              f"(without it {ratio:.3f})")
            if c["real_ms"] > c["real_serial_ms"] * (1 + TOLERANCE):
                misses.append(f"{precision} {region}: TE's overlap made the step slower "
                              f"({c['real_ms']:.3f} against {c['real_serial_ms']:.3f} ms serialized)")
    assert not misses, "; ".join(misses)
