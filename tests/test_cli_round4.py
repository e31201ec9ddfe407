"""Issue 44 item 4 (the CLI fits a terminal and helps), the dynamic-range finding in ``report`` (issue 44)
and issue 43 item 6's compare part (compare reports energy like steps). Each test failed before.

Every line the CLI prints is held to 100 columns by running ``main`` in this process over bad
invocations and good outputs; ``compare --markdown`` is exempt for its table rows (``|`` lines): a
pull request renders them as tables, never as terminal text.
"""

from __future__ import annotations

import copy
import json
import re
import shutil
from pathlib import Path
from typing import Any

import pytest

from gemm_bench.cli import refresh as refresh_mod
from gemm_bench.question.config import PRESET_DESCRIPTIONS, PRESETS
from gemm_bench.question.question import build_question
from gemm_bench.report import study_compare
from gemm_bench.report.compare import SQNR_TOLERANCE_DB, compare, compare_dirs, load_result
from gemm_bench.report.energy_compare import against_bf16
from gemm_bench.results import energy
from gemm_bench.results.cache import dumps, read_document
from gemm_bench.results.typed import parse
from tests.test_cli import call, one_error

ROOT = Path(__file__).resolve().parent.parent
CACHE = ROOT / "docs" / "_gemm_cache"
STUDIES = CACHE / "studies"
#: Llama 3 70B at TP 8: a model step, energy per recipe and a plan, on both GPUs.
H100 = CACHE / "1b59f8aaa83a14db--h100-80gb-hbm3.json"
H200 = CACHE / "1b59f8aaa83a14db--h200.json"
RANGE = STUDIES / "dynamic-range--h100-80gb-hbm3.json"
#: gpt-oss-120b on the H100, whose FP8 recipes each use more energy per step than BF16, beyond the spread.
MORE = CACHE / "19210ed9493a1e7a--h100-80gb-hbm3.json"
WIDTH = 100


def _too_wide(text: str, *, markdown: bool = False) -> list[str]:
    return [line for line in text.splitlines() if len(line) > WIDTH and not (markdown and line.startswith("|"))]


def _unwrapped(text: str) -> str:
    """The text with wrapped words joined again: a path longer than a line is broken at the edge
    (:func:`gemm_bench.report.report.wrap_line`), and this machine's temporary paths are long."""
    return re.sub(r"\n +", "", text)


@pytest.fixture
def no_gpu(monkeypatch: pytest.MonkeyPatch) -> None:
    """A PyTorch that sees no CUDA GPU, whatever this machine has."""
    import sys
    import types

    cuda = types.SimpleNamespace(is_available=lambda: False)
    monkeypatch.setitem(sys.modules, "torch", types.SimpleNamespace(cuda=cuda))


# ------------------------------------------------------------------------------ 1. 100 columns, everywhere
BAD = [
    ["shapes", "--model", "nope"],  # 209 columns before
    ["run", "--model", "llama3-8b"],  # no GPU: 214 before
    ["frobnicate"],  # 172 before
    ["shapes", "--modle", "llama3-8b"],
    ["shapes", "--num-layers", "-3"],
    ["run", "--model", "llama3-8b", "--precisions", "fp8-delay"],
    ["run", "--model", "llama3-8b", "--timer", "evnts"],
    ["report", str(ROOT / "README.md")],
    ["compare", str(H100), str(RANGE)],
    ["merge", str(CACHE), "--cache-dir", "/dev/null"],
    ["refresh", str(ROOT / "docs"), "--dry-run", "--cache-dir", "/dev/null"],
    ["shapes", "--model", "te-guide-5b", "--hidden-size", "4096", "--num-attention-heads", "30"],
]


@pytest.mark.usefixtures("no_gpu")
@pytest.mark.parametrize("argv", BAD, ids=lambda a: " ".join(a)[:40])
def test_every_error_fits_100_columns_and_names_its_command(argv: list[str], monkeypatch: pytest.MonkeyPatch,
                                                            tmp_path: Path) -> None:
    monkeypatch.chdir(tmp_path)
    code, _out, err = call(argv)
    assert code in (2, 3), err
    assert not _too_wide(err), err
    line = one_error(err)  # one error, its continuation lines indented
    if argv[0] != "frobnicate":
        assert line.startswith(f"gemm-bench {argv[0]}: error: "), line


def _good_invocations() -> list[list[str]]:
    out = [[], ["--help"], ["presets"], *([command, "--help"] for command in
                                         ("shapes", "run", "report", "presets", "readme-figure", "study", "compare",
                                          "merge", "refresh"))]
    out += [["shapes", "--model", name] for name in PRESETS]
    out += [["report", str(path)] for path in sorted(CACHE.glob("*--*.json"))]
    out += [["report", str(path)] for path in sorted(STUDIES.glob("*--*.json"))]
    out += [["compare", str(H100), str(H200)], ["compare", str(RANGE), str(STUDIES / "dynamic-range--h200.json")],
            ["compare", str(STUDIES / "loss-parity--h100-80gb-hbm3.json"), str(STUDIES / "loss-parity--h200.json")]]
    return out


def test_every_line_of_output_fits_100_columns_on_a_wide_terminal(monkeypatch: pytest.MonkeyPatch) -> None:
    """Before: the help filled a 250-column terminal (argparse's width), ``compare``'s model-step header ran
    to 116 columns; every good output is now within 100 whatever ``COLUMNS`` says."""
    monkeypatch.setenv("COLUMNS", "250")
    wide = {}
    for argv in _good_invocations():
        code, out, err = call(argv)
        assert code == 0, (argv, err)
        if _too_wide(out + err):
            wide[" ".join(argv)] = _too_wide(out + err)[:2]
    code, out, err = call(["compare", "--markdown", str(H100), str(H200)])
    assert code == 0 and not _too_wide(out, markdown=True), _too_wide(out, markdown=True)
    assert not wide, wide


def test_the_model_step_header_of_compare_is_one_line_above_its_rows() -> None:
    """Before: the header carried the "!" legend and wrapped at 100, "beyond both spreads" on a line of
    its own between the header and the first row."""
    code, out, _ = call(["compare", str(H100), str(H200)])
    assert code == 0
    lines = out.splitlines()
    at = next(i for i, line in enumerate(lines) if line.startswith("== The model's step"))
    assert lines[at + 1].split()[:3] == ["G", "precision", "A"]
    assert re.match(r"^\s+\d+\s+BF16\s", lines[at + 2]), lines[at + 2]


def test_presets_never_split_a_cell_across_lines() -> None:
    """Before: "1 x 4096 tokens" was split into "1" and "x 4096 tokens" (gpt-oss-120b)."""
    code, out, _ = call(["presets"])
    assert code == 0 and not _too_wide(out)
    lines = out.splitlines()
    for name, text in PRESET_DESCRIPTIONS.items():
        start = next(i for i, line in enumerate(lines) if line.startswith(f"{name} "))
        end = next((i for i in range(start + 1, len(lines)) if not lines[i].startswith(" ")), len(lines))
        entry = lines[start:end]
        for cell in text.split(", "):
            assert any(cell in line for line in entry), (name, cell, entry)


# ------------------------------------------------------------------------------ 2. errors that help
@pytest.mark.parametrize(("argv", "needles"), [
    (["shapes", "--modle", "llama3-8b"], ["gemm-bench shapes: error:", "--modle", "did you mean --model?"]),
    (["run", "--model", "llama3-8b", "--jsn"], ["gemm-bench run: error:", "unrecognized"]),
    (["shapes", "--model", "lama3-8b"], ["gemm-bench shapes: error: --model:", "did you mean 'llama3-8b'?"]),
    (["shapes", "--model", "qwen2.5-7"], ["did you mean 'qwen2.5-7b'?"]),
    (["shaps"], ["gemm-bench: error: unknown command 'shaps'", "did you mean 'shapes'?"]),
    (["run", "--model", "llama3-8b", "--timer", "evnts"],
     ["gemm-bench run: error: --timer:", "did you mean 'events'?"]),
    (["run", "--model", "llama3-8b", "--precisions", "bf16,fp8-delay"],
     ["--precisions: unknown value 'fp8-delay'", "did you mean 'fp8-delayed'?"]),
    (["run", "--model", "llama3-8b", "--modes", "autocst"], ["--modes:", "did you mean 'autocast'?"]),
    (["shapes", "--num-layers", "-3"], ["gemm-bench shapes: error: --num-layers needs a whole number >= 1, got -3"]),
    (["shapes", "--num-layers", "three"], ["--num-layers needs a whole number >= 1, got three"]),
    (["report", str(RANGE), "--num-layers", "0"], ["--num-layers needs a whole number >= 1, got 0"]),
])
def test_errors_name_their_command_and_suggest_the_closest(argv: list[str], needles: list[str]) -> None:
    """Before: "gemm-bench: error: unrecognized arguments: --modle" (no command, no suggestion), the
    unknown preset listed all eleven with no closest, "'-3' is not a whole number"."""
    code, out, err = call(argv)
    assert code == 2 and out == "", err
    line = one_error(err)
    for needle in needles:
        assert needle in line, line


def test_a_misspelt_flag_far_from_any_suggests_nothing() -> None:
    code, _, err = call(["shapes", "--zzzzzz"])
    line = one_error(err)
    assert code == 2 and "did you mean" not in line and "--zzzzzz" in line and "shapes --help" in line


# ------------------------------------------------------------------------------ 3. compare DIR DIR
def test_compare_of_directories_says_only_in_a_and_b_and_reads_study_folders(tmp_path: Path) -> None:
    """Before: "removed" for a file only in A; a studies folder's files "unreadable" ($.question: is
    missing); exit 0 whatever could not be read."""
    a, b = tmp_path / "a", tmp_path / "b"
    (a / "studies").mkdir(parents=True)
    b.mkdir()
    shutil.copy(H100, a)
    shutil.copy(H200, b)
    shutil.copy(RANGE, a / "studies")
    code, out, err = call(["compare", str(a), str(b)])
    assert code == 0, err
    assert f"only in A: {H100.name}" in out and f"only in A: studies/{RANGE.name}" in out
    assert f"only in B: {H200.name}" in out and "removed" not in out and "added" not in out
    # two studies folders given as the directories: their files compare as studies
    newer = json.loads(RANGE.read_text(encoding="utf-8"))
    newer["provenance"]["date"] = "2027-01-01T00:00:00+00:00"
    (b / "studies").mkdir()
    (b / "studies" / RANGE.name).write_text(json.dumps(newer), encoding="utf-8")
    code, out, err = call(["compare", str(a / "studies"), str(b / "studies")])
    assert code == 0 and "unreadable" not in out, out
    assert f"== {RANGE.name} ==" in out and "nothing changed beyond the study's spread" in out
    # a file that truly cannot be read: listed, the rest compared, exit 1
    (b / "studies" / "loss-parity--h200.json").write_text("{", encoding="utf-8")
    shutil.copy(STUDIES / "loss-parity--h200.json", a / "studies")
    code, out, err = call(["compare", str(a / "studies"), str(b / "studies")])
    assert code == 1 and "unreadable:" in out and "loss-parity--h200.json" in _unwrapped(out), (code, out)
    assert f"== {RANGE.name} ==" in out and "could not be read" in err and not _too_wide(out + err)


# ------------------------------------------------------------------------------ 4. refresh and merge paths
def _task(question: Any, modes: tuple[str, ...] = ("autocast", "prequant"), **kwargs: Any) -> refresh_mod.Task:
    return refresh_mod.Task(question, "NVIDIA H100 80GB HBM3", ("bf16", "fp8-current"), modes, "missing",
                            ("index.rst:1",), 60.0, "x, its measure_s", **kwargs)


def test_the_dry_run_lists_every_block_a_refresh_measures() -> None:
    """Before: "autocast, prequant" for a model question whose refresh also measures the layer step, the
    model step, each recipe's energy, the plan and the SQNRs."""
    gpus = [refresh_mod.GpuSlot(0, "NVIDIA H100 80GB HBM3")]
    text = " ".join(refresh_mod.describe_plan([_task(build_question(model="llama3-8b"))], [], gpus).split())
    for block in ("autocast GEMMs", "pre-quantized GEMMs", "one layer's step (eager and CUDA-graphed",
                  "the model's step", "each recipe's step energy", "the precision plan", "SQNR per GEMM pass"):
        assert block in text, block
    assert "not measured:" not in text and "the peers;" not in text
    # a question without a vocabulary: no model step, and the plan says why
    te = " ".join(refresh_mod.describe_plan([_task(build_question(model="te-guide-5b"), peers=True)], [],
                                            gpus).split())
    assert "one layer's step" in te and "the peers" in te
    assert "not measured: the model's step (the model's step needs the vocabulary size" in te
    # manual shapes: the GEMMs alone; a peers-only task: the peers alone
    sweep = refresh_mod.measured_blocks(_task(build_question(shapes=["1024x1024x1024"])))
    assert sweep == (["autocast GEMMs", "pre-quantized GEMMs", "SQNR per GEMM pass",
                      "clock and power telemetry, the profiler's cross-check"], [])
    alone = refresh_mod.measured_blocks(_task(build_question(model="llama3-8b"), ("autocast",), peers=True,
                                              peers_only=True))
    assert alone == (["the peers of the autocast GEMMs alone, merged into the cached result"], [])


def test_refresh_refuses_a_cache_that_is_not_a_directory_before_reading_the_site(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """Before: ``refresh --dry-run --cache-dir /dev/null`` read the site and printed a plan."""
    def no_site(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("the site must not be read with a bad --cache-dir")

    monkeypatch.setattr(refresh_mod, "read_site", no_site)
    a_file = tmp_path / "file"
    a_file.write_text("x")
    for cache, problem in (("/dev/null", "/dev/null is not a directory"),
                           (str(a_file / "cache"), f"{a_file} is not a directory")):
        for extra in (["--dry-run", "--device", "h100"], []):
            code, out, err = call(["refresh", str(ROOT / "docs"), "--cache-dir", cache, *extra])
            assert code == 2 and out == "", err
            assert one_error(err).startswith(f"gemm-bench refresh: error: --cache-dir: {problem}"), err
    code, _, err = call(["refresh", str(tmp_path / "nope"), "--dry-run", "--device", "h100"])
    assert code == 2 and "SRCDIR:" in one_error(err)


def test_merge_names_the_summary_path_it_was_given_and_merges_nothing_first(tmp_path: Path) -> None:
    """Before: ``merge --summary /tmp`` merged, then failed on "/.tmp.3vqc6ekq.tmp (Is a directory)"."""
    incoming, cache = tmp_path / "in", tmp_path / "cache"
    incoming.mkdir()
    shutil.copy(H100, incoming)
    code, out, err = call(["merge", str(incoming), "--cache-dir", str(cache), "--summary", str(tmp_path)])
    assert code == 2 and out == ""
    assert one_error(err) == f"gemm-bench merge: error: --summary: {tmp_path} is a directory; give a file name"
    assert not cache.exists()  # checked before anything was merged
    code, _, err = call(["merge", str(incoming), "--cache-dir", "/dev/null"])
    assert code == 2 and "--cache-dir: /dev/null is not a directory" in one_error(err)


# ------------------------------------------------------------------------------ 5. the dynamic-range finding
def test_report_on_the_dynamic_range_study_shows_the_median_row_and_says_what_it_finds() -> None:
    """Before: the whole-tensor SQNR only (FP8 Current flat at 28.5 dB to R = 1e6), the median row's
    collapse to about 0 dB, which the methodology's figure shows, nowhere."""
    code, out, err = call(["report", str(RANGE)])
    assert code == 0 and not _too_wide(out), err
    doc = json.loads(RANGE.read_text(encoding="utf-8"))
    cases = sorted((c for c in doc["data"]["cases"] if (c["tensor"], c["input"]) == ("activation", "massive-tokens")),
                   key=lambda c: c["ratio"])
    medians = [c["results"]["fp8-current"]["gemm"]["row_median_db"] for c in cases]
    lines = out.splitlines()
    at = lines.index("  activation, massive-tokens")
    row = next(line for line in lines[at:] if line.strip().startswith("FP8 Current"))
    assert row.split()[2:4] == ["median", "row"] and row.split()[4:] == [f"{m:.1f}" for m in medians]
    words = " ".join(out.split())
    finding = study_compare.dynamic_range_finding(doc)
    assert " ".join(finding.split()) in words
    whole = cases[-1]["results"]["fp8-current"]["gemm"]["whole_db"]
    assert (f"FP8 Current's median row falls from {medians[0]:.1f} dB at R = {cases[0]['ratio']:g} to "
            f"{medians[-1]:.1f} dB at R = {cases[-1]['ratio']:g}") in finding
    assert f"whole-tensor SQNR stays at {whole:.1f} dB" in finding and "FP8 Block keeps its median row" in finding
    code, out, _ = call(["report", "--json", str(RANGE)])
    assert json.loads(out)["finding"] == finding


def test_the_finding_follows_the_data_when_no_median_row_collapses() -> None:
    doc = json.loads(RANGE.read_text(encoding="utf-8"))
    for case in doc["data"]["cases"]:
        for result in case["results"].values():
            if result["status"] == "measured":
                result["gemm"]["row_median_db"] = result["gemm"]["whole_db"]
    said = study_compare.dynamic_range_finding(doc)
    assert said.startswith(f"The median row and the whole tensor agree within {SQNR_TOLERANCE_DB:g} dB")
    assert "falls" not in said


def test_compare_of_two_dynamic_range_runs_flags_a_median_row_that_moves() -> None:
    old = json.loads(RANGE.read_text(encoding="utf-8"))
    new = copy.deepcopy(old)
    new["data"]["cases"][-1]["results"]["fp8-current"]["gemm"]["row_median_db"] += 5
    from gemm_bench.report.compare import compare_studies

    flagged = compare_studies(old, new).flagged
    assert len(flagged) == 1 and "median row" in flagged[0].b


# ------------------------------------------------------------------------------ 6. compare reports energy
def _energy_scaled(doc: dict[str, Any], precision: str, factor: float) -> dict[str, Any]:
    """``doc`` with one recipe's board power (and so its energy, with its spread) scaled by ``factor`` and
    its tokens per joule divided by it: an entry as consistent as a measured one, drawing less or more."""
    out = copy.deepcopy(doc)
    entry = next(e for e in out["energy"]["steps"] if e["precision"] == precision)
    for key in ("power_w", "power_w_q1", "power_w_q3", "energy_mj", "energy_mj_low", "energy_mj_high"):
        entry[key] *= factor
    for key in ("tokens_per_j", "tokens_per_j_low", "tokens_per_j_high"):
        entry[key] /= factor
    return out


def test_compare_reports_energy_and_counts_a_reversed_verdict_as_a_change(tmp_path: Path) -> None:
    """Before: compare (text and Markdown) never mentioned energy: FP8 Delayed's "uses more" turning into
    "uses less" reported zero changes."""
    raw = read_document(MORE, raw=True)
    found = {p: e.as_mapping() for p, e in parse(read_document(MORE)).energies().items()}
    before = against_bf16(parse(read_document(MORE)).energies())["fp8-delayed"]
    assert before.verdict == "more", before  # gpt-oss-120b on the H100: FP8 Delayed uses more than BF16
    # FP8 Delayed drawing less power, its whole spread below BF16's: "uses less" now
    factor = 0.9 * found["bf16"]["energy_mj_low"] / found["fp8-delayed"]["energy_mj_high"]
    swapped = _energy_scaled(raw, "fp8-delayed", factor)
    later = tmp_path / "b" / MORE.name
    later.parent.mkdir()
    later.write_text(dumps(swapped), encoding="utf-8")
    c = compare(load_result(MORE), load_result(later))
    assert [e.precision for e in c.flagged_energy] == ["fp8-delayed"]
    row = c.flagged_energy[0]
    assert row.a.vs_bf16 is not None and row.b.vs_bf16 is not None
    assert {row.a.vs_bf16.verdict, row.b.vs_bf16.verdict} == {"less", "more"}
    assert row.a.tokens_per_j == found["fp8-delayed"]["tokens_per_j"]
    unchanged = [e for e in c.energy if e.precision != "fp8-delayed"]
    assert len(unchanged) >= 2 and not any(e.flagged for e in unchanged)
    # text: every recipe's J per step with its spread, tokens per joule and both verdicts
    code, out, err = call(["compare", str(MORE), str(later)])
    assert code == 0 and not _too_wide(out), err
    text = out[out.index("== Energy per one layer's step"):]
    delayed = found["fp8-delayed"]
    assert (f"{energy.joules(delayed['energy_mj'])} ({energy.joules(delayed['energy_mj_low'])}-"
            f"{energy.joules(delayed['energy_mj_high'])})") in text
    assert f"{delayed['tokens_per_j']:.0f}" in text and "1 verdict(s) against BF16 changed" in text
    line = next(row for row in text.splitlines() if row.strip().startswith("FP8 Delayed"))
    assert line.endswith("!") and "J less" in line and "J more" in line
    # Markdown, one file and a directory: the section, and the headline's count
    md = c.to_markdown()
    assert "**Energy per step: 1 verdict(s) against BF16 changed** (marked !):" in md
    assert "beyond the sampling spread" in md
    old_dir = tmp_path / "a"
    old_dir.mkdir()
    shutil.copy(MORE, old_dir)
    headline = compare_dirs(old_dir, later.parent).to_markdown()
    assert "- energy per step: verdicts against BF16 that changed: 1" in headline
    data = json.loads(json.dumps(c.to_json()))
    assert [e["precision"] for e in data["energy"] if e["flagged"]] == ["fp8-delayed"]


def test_an_energy_on_one_side_only_is_a_change_and_none_is_no_section() -> None:
    doc = read_document(MORE)
    without = copy.deepcopy(dict(doc))
    del without["energy"]
    c = compare(doc, without)
    assert c.energy and all(e.flagged for e in c.energy)
    assert all(not e.b.measured and e.b.status == "not measured" for e in c.energy)
    assert compare(without, without).energy == []
    assert "Energy per" not in compare(without, without).to_text()
