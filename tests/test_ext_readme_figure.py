"""The README figure is drawn from the cache, deterministically, with every cached device."""

from __future__ import annotations

import subprocess
import sys

from gemm_benchmark.readme_figure import main

H200 = {"name": "NVIDIA H200", "compute_capability": "9.0"}


def test_readme_figure_is_deterministic_and_shows_every_device(tmp_path, real_result, make_result, store_result,
                                                               question, capsys):
    cache = tmp_path / "cache"
    real_result(cache, "h100-te-guide-5b.json")
    store_result(cache, make_result(question(model="te-guide-5b"), device=H200))
    out = tmp_path / "static" / "readme.svg"
    assert main(["--cache", str(cache), "--out", str(out)]) == 0
    first = out.read_bytes()
    assert first.startswith(b"<?xml") and b"<!-- H100 80GB HBM3 -->" in first and b"<!-- H200 -->" in first
    assert b"<!-- Pre-quantized: te-guide-5b" in first
    assert main(["--cache", str(cache), "--out", str(out)]) == 0
    assert "is up to date" in capsys.readouterr().out
    # A fresh process draws the same bytes (no dates, fixed hash salt).
    again = tmp_path / "again.svg"
    subprocess.run([sys.executable, "-m", "gemm_benchmark.readme_figure", "--cache", str(cache),
                    "--out", str(again)], check=True, capture_output=True)
    assert again.read_bytes() == first


def test_readme_figure_without_results_fails_clearly(tmp_path, capsys):
    assert main(["--cache", str(tmp_path), "--out", str(tmp_path / "x.svg")]) == 1
    assert "no result for te-guide-5b" in capsys.readouterr().err
    assert not (tmp_path / "x.svg").exists()
