"""The `gemm-bench` command-line contract, checked as the issues write it."""

from __future__ import annotations

import contextlib
import io
import json
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gemm_bench.cache import Cache
from gemm_bench.cli import main

ROOT = Path(__file__).resolve().parent.parent
TE_GUIDE = ["--hidden-size", "4096", "--ffn-hidden-size", "16384", "--num-attention-heads", "32", "--num-layers",
            "24", "--micro-batch-size", "31", "--seq-length", "512"]


def run_cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "gemm_bench.cli", *args], capture_output=True, text=True, cwd=ROOT)


def test_shapes_json_as_written_in_the_issue() -> None:
    out = run_cli("shapes", *TE_GUIDE, "--json")
    assert out.returncode == 0, out.stderr
    rows = json.loads(out.stdout)
    assert len(rows) == 12
    assert all(set(r) == {"op", "pass", "m", "k", "n", "groups", "flops"} for r in rows)
    fprop = {r["op"]: f"{r['m']}x{r['k']}x{r['n']}" for r in rows if r["pass"] == "fprop"}
    assert fprop == {"qkv": "15872x4096x12288", "attn_out": "15872x4096x4096",
                     "mlp_up": "15872x4096x16384", "mlp_down": "15872x16384x4096"}
    assert all(r["flops"] == 2 * r["m"] * r["k"] * r["n"] * r["groups"] for r in rows)


def test_shapes_table_and_manual_mode(capsys) -> None:
    assert main(["shapes", "--model", "mixtral-8x7b"]) == 0
    text = capsys.readouterr().out
    assert "balanced routing" in text and "1024x4096x28672" in text
    assert main(["shapes", "--shape", "1x2x3", "--shape", "4x5x6", "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert [(r["m"], r["k"], r["n"]) for r in rows] == [(1, 2, 3), (4, 5, 6)]


@pytest.mark.parametrize(
    ("args", "flag"),
    [
        (["--hidden-size", "x"], "--hidden-size"),
        (["--hidden-size", "4096", "--ffn-hidden-size", "1", "--num-attention-heads", "30"], "--hidden-size"),
        (["--model", "te-guide-5b", "--num-query-groups", "5"], "--num-attention-heads"),
        (["--model", "nope"], "--model"),
        (["--shape", "1x2"], "--shape"),
        (["--model", "llama3-8b", "--shape", "1x2x3"], "--shape"),
        (["--hf-config", "/does/not/exist.json"], "--hf-config"),
        (["--model", "te-guide-5b", "--tensor-model-parallel-size", "0"], "--tensor-model-parallel-size"),
        (["--sweep", ","], "--sweep"),
    ],
)
def test_bad_input_exits_2_with_one_line_naming_the_flag(args: list[str], flag: str) -> None:
    out = run_cli("shapes", *args)
    assert out.returncode == 2
    assert out.stdout == ""
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1, out.stderr
    assert flag in lines[0] and "Traceback" not in out.stderr


def test_run_rejects_bad_precisions_before_touching_a_gpu() -> None:
    out = run_cli("run", "--model", "te-guide-5b", "--precisions", "fp8,bf16")
    assert out.returncode == 2 and "--precisions" in out.stderr and len(out.stderr.strip().splitlines()) == 1
    out = run_cli("run", "--model", "te-guide-5b", "--modes", "training")
    assert out.returncode == 2 and "--modes" in out.stderr


def test_report_prints_text_and_json_from_the_real_cache() -> None:
    path = next(p for p in Cache(ROOT / "docs" / "_gemm_cache").files() if "h100" in p.name)
    text = run_cli("report", str(path))
    assert text.returncode == 0, text.stderr
    assert "== Autocast ==" in text.stdout and "vs BF16" in text.stdout
    out = run_cli("report", str(path), "--json")
    data = json.loads(out.stdout)
    assert set(data["device"]) == {"name", "compute_capability"}
    assert data["device"]["compute_capability"] == "9.0"
    assert {c["status"] for c in data["cells"]} <= {"measured", "unsupported", "failed"}
    assert {"mode", "precision", "per_layer_ms", "model_ms", "speedup_vs_bf16"} <= set(data["totals"][0])
    bad = run_cli("report", str(ROOT / "README.md"))
    assert bad.returncode == 2 and "README.md" in bad.stderr


flag_names = st.sampled_from(["--hidden-size", "--ffn-hidden-size", "--num-attention-heads", "--num-query-groups",
                              "--kv-channels", "--num-layers", "--micro-batch-size", "--seq-length",
                              "--tensor-model-parallel-size", "--num-experts", "--moe-router-topk",
                              "--moe-ffn-hidden-size", "--expert-model-parallel-size", "--model", "--shape",
                              "--sweep", "--hf-config", "--swiglu", "--bogus", "--json"])
values = st.one_of(st.integers(-5, 1 << 22).map(str), st.sampled_from(["", "x", "1e3", "4096", "te-guide-5b",
                                                                       "8x8x8", "0x1x1", "../../etc/passwd"]),
                   st.text(max_size=8))


@settings(max_examples=500, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.tuples(flag_names, values), max_size=6))
def test_fuzzed_cli_never_raises(pairs) -> None:
    argv = ["shapes"]
    for flag, value in pairs:
        argv += [flag] if flag in ("--swiglu", "--json") else [flag, value]
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            code = main(argv)
        except SystemExit as exc:  # argparse's own errors
            code = exc.code
    assert code in (0, 2)
    if code == 2:
        lines = err.getvalue().strip().splitlines()
        assert len(lines) == 1 and "error:" in lines[0]
        assert "--" in lines[0] or "arguments" in lines[0] or "argument" in lines[0]
