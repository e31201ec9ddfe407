"""Issue 35 item 5 with issues 32/33, a hostile maintainer's pass of the CLI: ``report`` and ``compare``
give what the models page leads with (the model's training step, the breakdown, the plan, energy),
every command fits 100 columns, the refresh's estimate counts the studies, and the words match the site's."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest

from gemm_bench.report import breakdown_figure, precision_plan
from gemm_bench.report.report import Report
from gemm_bench.results import energy
from gemm_bench.results.cache import read_document
from gemm_bench.results.typed import parse
from tests.helpers import typed_plan
from tests.test_cli import call, one_error  # main in this process: (exit status, stdout, stderr)

ROOT = Path(__file__).resolve().parent.parent
CACHE = ROOT / "docs" / "_gemm_cache"
#: Llama 3 70B at TP 8 on the H100: a model step, breakdowns, a mixed plan and energy.
FULL = CACHE / "1b59f8aaa83a14db--h100-80gb-hbm3.json"
#: The same question on the H200, measured before the model step (method v4): session 9's file, kept as
#: test data when session 13 re-measured the H200.
OLDER = ROOT / "tests" / "data" / "older-h200" / "1b59f8aaa83a14db--h200.json"
SWEEP = CACHE / "4803128f66703ed6--h100-80gb-hbm3.json"


def flat(text: str) -> str:
    """The text's words on one line (the report wraps at 100 columns)."""
    return " ".join(text.split())


# ------------------------------------------------------------------------------ 1. the model's step and the rest
def test_report_leads_with_the_model_step_then_gives_breakdown_plan_and_energy() -> None:
    """Before: none of the four was in ``report``: the numbers the models page's answers lead with."""
    code, out, err = call(["report", str(FULL)])
    assert code == 0, err
    doc = read_document(FULL)
    summary = Report(doc).model_step()
    assert summary is not None and summary.microbatches == 8
    assert out.index("== The model's step") < out.index("== Autocast ==")
    words = flat(out)
    for g in (1, 8):  # both G, each recipe's tokens/s and MFU as the report layer composes them
        for p in ("bf16", "fp8-delayed"):
            row = summary.row(p, g)
            assert row is not None and row.mfu is not None
            assert f"{g} {'BF16' if p == 'bf16' else 'FP8 Delayed'} {row.ms_per_microbatch:.2f} " \
                   f"{row.tokens_per_s:,.0f} {row.tflops:.1f} {row.mfu:.0%}" in words
    delayed = summary.row("fp8-delayed")
    assert delayed is not None and f"{delayed.speedup:.2f}x ({delayed.speedup_low:.2f}-" in words
    assert flat(summary.sentence("fp8-delayed") or "missing") in words
    memory = summary.memory["fp8-delayed"]
    assert "memory of one rank's model step, GiB" in words and f"FP8 Delayed {memory.peak / 2**30:.1f} +" in words
    bars = breakdown_figure.bars(parse(doc).layer, "layer-graphed")
    assert "== Where each step's time goes (ms per step; the model's, per micro-batch) ==" in out
    assert flat(breakdown_figure.sentence(bars, precision_plan.step_recipe(Report(doc)) or "") or "missing") in words
    assert flat(precision_plan.plan_sentence(typed_plan(doc))) in words
    assert "with te.autocast(enabled=False):" in out
    for p, entry in parse(doc).energies().items():
        assert energy.energy_words(entry.as_mapping()) in words, p


def test_report_json_carries_the_model_step_breakdown_plan_and_energy() -> None:
    code, out, err = call(["report", str(FULL), "--json"])
    assert code == 0, err
    data = json.loads(out)
    doc = read_document(FULL)
    summary = Report(doc).model_step()
    assert summary is not None
    rows = {(r["microbatches"], r["precision"]): r for r in data["model_step"]["rows"]}
    assert set(rows) == {(g, p) for g in (1, 8) for p in ("bf16", "fp8-delayed", "fp8-current", "fp8-block")}
    assert rows[8, "fp8-current"]["tokens_per_s"] == summary.row("fp8-current").tokens_per_s  # type: ignore[union-attr]
    assert data["model_step"]["memory"]["bf16"]["peak"] == summary.memory["bf16"].peak
    assert data["model_step"]["microbatches"] == 8 and data["model_step_reason"] is None
    graphed = data["breakdown"]["modes"]["layer-graphed"]
    assert graphed["steps"][0]["precision"] == "bf16"
    assert graphed["sentence"] == breakdown_figure.sentence(breakdown_figure.bars(parse(doc).layer, "layer-graphed"),
                                                            precision_plan.step_recipe(Report(doc)) or "")
    assert data["plan"]["keep_in_bf16"] == ["attn_out"] and data["plan"]["sentence"]
    assert data["energy"]["words"]["bf16"] == energy.energy_words(parse(doc).energies()["bf16"].as_mapping())


def test_a_result_without_them_says_why_and_a_sweep_has_no_model_section() -> None:
    code, out, _ = call(["report", str(OLDER)])
    assert code == 0
    assert "== The model's step (one rank, per micro-batch) ==\nNot measured in this result (method v4)" in out
    assert "== Where each step's time goes" not in out and "== Precision plan ==" not in out
    data = json.loads(call(["report", str(OLDER), "--json"])[1])
    assert data["model_step"] is None and "method v4" in data["model_step_reason"]
    assert data["plan"] is None and data["energy"] is None and data["breakdown"] is None
    assert "model's step" not in call(["report", str(SWEEP)])[1]


def _slower_model_step(doc: dict[str, Any], precision: str, factor: float) -> dict[str, Any]:
    doc = copy.deepcopy(doc)
    for part in doc["model_step"]["parts"]:
        if part["precision"] == precision and part["part"].startswith("layer"):
            part["ms"] *= factor
            part["stats"] = {k: ([v * factor for v in x] if isinstance((x := part["stats"][k]), list) else
                                 x * factor if k.endswith("_ms") else x) for k in part["stats"]}
    return doc


def test_compare_gives_the_model_steps_speedups_in_a_and_b() -> None:
    """Before: compare had no model step at all."""
    from gemm_bench.report.compare import compare

    doc = read_document(FULL)
    same = compare(doc, copy.deepcopy(doc))
    assert [(m.microbatches, m.precision) for m in same.model_steps][:2] == [(8, "bf16"), (8, "fp8-delayed")]
    assert not same.flagged_model_steps
    text = same.to_text()
    row = Report(doc).model_step().row("fp8-delayed")  # type: ignore[union-attr]
    assert "== The model's step (tokens/s per GPU" in text
    assert f"{row.speedup:.2f}x ({row.speedup_low:.2f}-{row.speedup_high:.2f}x)" in text  # type: ignore[union-attr]
    slower = compare(doc, _slower_model_step(doc, "fp8-delayed", 1.5))
    assert {(m.microbatches, m.precision) for m in slower.flagged_model_steps} == {(1, "fp8-delayed"),
                                                                                 (8, "fp8-delayed")}
    assert "The model's step: 2 change(s) beyond the measured spread" in slower.to_markdown()
    assert slower.to_json()["model_steps"][1]["flagged"] is True
    gone = copy.deepcopy(doc)
    del gone["model_step"]
    assert all(m.flagged and m.b_status == "not measured" for m in compare(doc, gone).model_steps)


@pytest.mark.parametrize("precision", ["fp8-block"])
def test_a_recipe_without_model_step_parts_reads_its_reason(precision: str) -> None:
    doc = read_document(FULL)
    doc["model_step"]["parts"] = [p for p in doc["model_step"]["parts"] if p["precision"] != precision]
    from gemm_bench.report import training_text

    text = training_text.text(Report(doc))
    assert "FP8 Block   n/a: its parts are not in this result (not measured for this recipe)" in text


# ------------------------------------------------------------------------------ 2. every command fits 100 columns
WIDTH = 100
STUDIES = sorted((CACHE / "studies").glob("*--*.json"))


def _site_model_ids() -> list[str]:
    import re

    from gemm_bench.question.config import PRESET_DESCRIPTIONS

    page = (ROOT / "docs" / "models.rst").read_text(encoding="utf-8")
    shown = {i.strip() for line in re.findall(r":models: (.*)", page) for i in line.split(",")}
    return sorted({*PRESET_DESCRIPTIONS, *shown})


def _commands() -> list[list[str]]:
    results = sorted(CACHE.glob("*--*.json"))
    out = [["presets"], *(["shapes", "--model", m] for m in _site_model_ids())]
    out += [["report", str(p)] for p in [*results, *STUDIES]]
    by_question: dict[str, list[Path]] = {}
    for path in results:
        by_question.setdefault(path.name.split("--")[0], []).append(path)
    out += [["compare", str(a), str(b)] for a, b in (pair[:2] for pair in by_question.values() if len(pair) > 1)]
    by_study: dict[str, list[Path]] = {}
    for path in STUDIES:
        by_study.setdefault(path.name.split("--")[0], []).append(path)
    out += [["compare", str(a), str(b)] for a, b in (pair[:2] for pair in by_study.values() if len(pair) > 1)]
    return out


def _too_wide(text: str) -> list[str]:
    return [line for line in text.splitlines() if len(line) > WIDTH]


@pytest.mark.parametrize("argv", _commands(), ids=lambda argv: " ".join(Path(a).name if a.endswith(".json") else a
                                                                          for a in argv))
def test_every_command_on_the_committed_cache_fits_100_columns(argv: list[str]) -> None:
    """Before: shapes printed 101-295 columns (DeepSeek-V3, TP and Mixtral notes), presets 120, compare 117
    (studies 143, with columns run together: "...seed range)1.9821"), the study error 264, and the
    sweep's report split "FP8 Current" from its numbers."""
    code, out, err = call(argv)
    assert code == 0, err
    assert not _too_wide(out + err), _too_wide(out + err)[:3]


def test_the_sweeps_roofline_keeps_each_precision_with_its_numbers() -> None:
    import re

    out = call(["report", str(SWEEP)])[1]
    sections = [s.split("\n\n")[0] for s in out.split("roofline-predicted vs measured")[1:]]
    assert len(sections) == 2
    for line in (line for s in sections for line in s.splitlines()[1:]):
        for part in line[2:].split(" | "):  # the label column, then "FP8 Current 0.0100/0.0289" parts
            assert re.fullmatch(r"(\S+ +)?(BF16|FP8 \w+|MXFP8|NVFP4) (\d+\.\d{4}/\d+\.\d{4}|-)",
                                part.strip()), line


def test_compare_of_two_caches_and_of_study_runs_fits_100_columns(tmp_path: Path) -> None:
    import shutil

    other = tmp_path / "cache"
    shutil.copytree(CACHE, other)
    changed = json.loads((other / FULL.name).read_text(encoding="utf-8"))
    changed["provenance"]["date"] = "2026-11-26T00:00:00+00:00"
    (other / FULL.name).write_text(json.dumps(changed), encoding="utf-8")
    (other / OLDER.name).unlink()
    loss = other / "studies" / "loss-parity--h200.json"
    study = json.loads(loss.read_text(encoding="utf-8"))
    study["provenance"]["date"] = "2026-11-26T00:00:00+00:00"
    loss.write_text(json.dumps(study), encoding="utf-8")
    code, out, err = call(["compare", str(CACHE), str(other)])
    assert code == 0, err
    assert f"== {FULL.name} ==" in out and f"only in A: {OLDER.name}" in out and "studies/loss-parity" in out
    assert not _too_wide(out)


def test_report_on_a_study_gives_its_values_in_100_columns() -> None:
    """Before: a 264-character error line; now the study's own report (issue 35 item 5's first choice)."""
    code, out, err = call(["report", str(CACHE / "studies" / "loss-parity--h200.json")])
    assert code == 0 and err == ""
    assert out.startswith("loss-parity study: NVIDIA H200 |")
    assert "gemm-loss-parity directive" in out and "gemm-bench compare A B" in out
    assert "FP8 Current: final validation loss  2.0033 (beyond BF16's seed range)" in out
    data = json.loads(call(["report", str(CACHE / "studies" / "loss-parity--h200.json"), "--json"])[1])
    assert data["study"] == "loss-parity" and {"what": "FP8 Delayed: final validation loss",
                                               "value": "1.9821 (within BF16's seed range)"} in data["values"]


@pytest.mark.parametrize("device", ["b200", "h100", "h200"])
def test_refresh_dry_run_fits_100_columns(device: str, shared_site_reads: Any) -> None:
    code, out, err = call(["refresh", str(ROOT / "docs"), "--dry-run", "--device", device])
    assert code == 0, err
    assert not _too_wide(out + err), _too_wide(out + err)[:3]


# ------------------------------------------------------------------------------ 3. the estimate counts the studies
def test_the_dry_runs_estimate_counts_the_studies_listed_under_it(shared_site_reads: Any) -> None:
    """Before: "estimated time: 0.6 min" above two studies of ~186 s it left out."""
    import re

    code, out, err = call(["refresh", str(ROOT / "docs"), "--dry-run", "--device", "b200"])
    assert code == 0, err
    questions = float(re.search(r"estimated time for the questions: ([\d.]+) min", out).group(1))  # type: ignore[union-attr]
    studies = [int(s) for s in re.findall(r"~(\d+) s \(its last run\)", out)]
    assert len(studies) == 3 and sum(studies) > 100  # loss parity, dynamic range, layout search (session 15)
    found = re.search(r"estimated time for the studies: ([\d.]+) min", out)  # each ~N s is rounded: within 0.1
    assert found is not None and abs(float(found.group(1)) - sum(studies) / 60) <= 0.1, out
    total = re.search(r"estimated time in all: ([\d.]+) min \(questions ([\d.]+) min, then studies ([\d.]+) min\)",
                      out)
    assert total is not None and float(total.group(2)) == questions
    assert abs(float(total.group(1)) - (questions + sum(studies) / 60)) <= 0.1
    assert out.rstrip().endswith(total.group(0))  # the last line: what the whole refresh takes


def test_the_total_is_a_lower_bound_when_a_study_has_no_estimate() -> None:
    from gemm_bench.cli.refresh import WORKER_START_S, GpuSlot, StudyTask, Task, describe_studies, describe_total
    from gemm_bench.question.question import build_question

    q = build_question(shapes=["1024x1024x1024"])
    task = Task(q, "b200", ("bf16",), ("autocast",), "missing", ("index.rst:1",), 45.0,
                "cached run on H100, its measure_s")
    gpus = [GpuSlot(0, "b200")]
    studies = [StudyTask("loss-parity", "missing", 120.0), StudyTask("dynamic-range", "missing", None)]
    assert describe_total([task], studies, gpus) == (
        f"estimated time in all: at least {(45 + WORKER_START_S + 120) / 60:.1f} min (questions "
        f"{(45 + WORKER_START_S) / 60:.1f} min, then studies 2.0 min)")
    assert "estimated time for the studies: at least 2.0 min" in describe_studies(studies)
    assert describe_total([], studies, gpus) is None and describe_total([task], [], gpus) is None


# ------------------------------------------------------------------------------ 4. run without a GPU says what next
@pytest.mark.parametrize("command", [["run", "--shape", "1024x1024x1024", "--no-peers"], ["study", "loss-parity"]])
def test_no_gpu_says_where_to_measure_and_how_to_build_without_one(monkeypatch: pytest.MonkeyPatch, tmp_path: Path,
                                                                   command: list[str]) -> None:
    """Before: "no CUDA GPU is visible to PyTorch" and nothing else."""
    import sys
    import types

    no_cuda = types.SimpleNamespace(cuda=types.SimpleNamespace(is_available=lambda: False))
    monkeypatch.setitem(sys.modules, "torch", no_cuda)
    code, out, err = call([*command, "--cache-dir", str(tmp_path)])
    assert code == 3 and out == ""
    err = one_error(err)
    assert "no CUDA GPU is visible to PyTorch; measure on a machine with an NVIDIA GPU" in err
    assert "README: Refreshing the numbers on a GPU box" in err and "nox -s docs" in err


def test_the_runner_finding_no_gpu_says_the_same(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    from gemm_bench.cli import commands

    class NoGpu(RuntimeError):
        pass

    def runner(*args: Any, **kwargs: Any) -> None:
        raise NoGpu("no CUDA GPU is visible to PyTorch")

    monkeypatch.setattr(commands, "load_runner", lambda: (runner, NoGpu))
    code, _, err = call(["run", "--shape", "1024x1024x1024", "--no-peers", "--cache-dir", str(tmp_path)])
    assert code == 3 and "nox -s docs" in err and "NVIDIA GPU" in err


# ------------------------------------------------------------------------------ 5. FP8 Delayed pre-quantized
def test_fp8_delayeds_pre_quantized_rows_say_same_as_fp8_current() -> None:
    """Before: the accuracy row read "FP8 Delayed  FP8 Delayed qkv/fprop SQNR is unsupported: ... its
    pre-quantized time is FP8 Current's": the name twice, and time where the row is about accuracy."""
    out = call(["report", str(FULL)])[1]
    prequant = out.split("== Pre-quantized ==")[1].split("\n== ")[0]
    accuracy = flat(prequant.split("accuracy: SQNR")[1])
    assert "FP8 Delayed same as FP8 Current: its pre-quantized inputs are quantized as FP8 Current quantizes them" \
        in accuracy
    assert "FP8 Delayed FP8 Delayed" not in accuracy and "time" not in accuracy.split("FP8 Current Gaussian")[0]
    totals = flat(prequant.split("accuracy: SQNR")[0])
    assert "FP8 Delayed same as FP8 Current: FP8 delayed scaling differs" in totals
    assert "FP8 Delayed unsupported" not in flat(prequant)
    rows = json.loads(call(["report", str(FULL), "--json"])[1])["accuracy"]["rows"]
    delayed = [r for r in rows if r["mode"] == "prequant" and r["precision"] == "fp8-delayed"]
    assert delayed and all(r["same_as"] == "fp8-current" and r["sqnr_db"] is None for r in delayed)
    assert all(r["same_as"] is None for r in rows if r["precision"] != "fp8-delayed")


# ------------------------------------------------------------------------------ 6. help for every argument
def test_every_argument_of_every_command_has_help() -> None:
    """Before: `report FILE`, `report --json` and `run --timer` had none."""
    import argparse

    from gemm_bench.cli.commands import build_parser

    parser = build_parser()
    commands = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction)).choices
    bare = [f"{name} {action.option_strings or action.metavar or action.dest}" for name, sub in commands.items()
            for action in sub._actions if not action.help and not isinstance(action, argparse._HelpAction)]
    assert bare == []
    assert "a study file" in commands["report"].format_help()
    assert "torch.profiler CUDA kernel time" in " ".join(commands["run"].format_help().split())


# ------------------------------------------------------------------------------ 7. the site's words for the step
def test_report_and_compare_name_the_training_step_as_the_site_does() -> None:
    """Before: "Layer step" and "Layer step (CUDA graphs)"; then "Training step (one layer)", while the
    answer rested on the model's step (issue 44 item 2). Now the site's word for one layer's step
    (:mod:`gemm_bench.question.vocabulary`), CUDA-graphed first and "eager" beside it."""
    report = call(["report", str(FULL)])[1]
    compared = call(["compare", str(FULL), str(OLDER)])[1]
    markdown = call(["compare", str(FULL), str(OLDER), "--markdown"])[1]
    for text in (report, compared, markdown):
        assert "Layer step" not in text and "CUDA graphs)" not in text
    assert report.index("== One layer's step ==") < report.index("== One layer's step, eager ==")
    assert "(as One layer's step above)" in report
    assert compared.index("  One layer's step  ") < compared.index("  One layer's step, eager  ")
    assert "| One layer's step | FP8 Delayed |" in markdown
    assert "One layer's step:\n  precision" in report  # the breakdown's table, in the same words


def test_the_h200_plan_is_estimated_from_runs_that_measured_what_it_will(tmp_path: Path) -> None:
    """Reader pass 4: the H200 plan said 3.0 min from its own older runs, which lacked the model step
    and the energy this refresh adds (the H100's full refresh took 398 s). A run that has them comes
    first, even another GPU's; a run that lacks them is named a lower bound, with what it lacked.
    On a copy of the site whose H200 result for Llama 3 8B is session 9's (before the model step)."""
    import shutil

    docs = tmp_path / "docs"
    shutil.copytree(ROOT / "docs", docs, ignore=shutil.ignore_patterns("_build"))
    older = ROOT / "tests" / "data" / "older-h200" / "45a55c5d892e31af--h200.json"
    shutil.copy(older, docs / "_gemm_cache" / older.name)
    code, out, err = call(["refresh", str(docs), "--dry-run", "--device", "h200"])
    assert code == 0, err
    flat_out = " ".join(out.split())
    assert "lacks the model's step" in flat_out  # the older result is planned for it
    assert "from the cached run on NVIDIA H100 80GB HBM3, its measure_s" in flat_out
    assert "from the cached run on NVIDIA H200, its measure_s" not in flat_out
