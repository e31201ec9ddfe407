"""Issue 31's fleet and bad-input classes: study files in merge and compare, steps and SQNR in the
pull request body, studies that age, bounded study values, a linked studies folder."""

from __future__ import annotations

import copy
import datetime as dt
import json
import math
import re
import shutil
from pathlib import Path
from typing import Any

import pytest

from gemm_bench.report.compare import SQNR_TOLERANCE_DB, compare, compare_dirs, compare_studies
from gemm_bench.report.line_figure import Series, line_svg
from gemm_bench.results import dynamic_range_schema, studies
from gemm_bench.results.cache import dumps, read_document
from gemm_bench.results.merge import decide_study, merge, summary_markdown
from gemm_bench.results.studies import StudyError
from tests.test_cli import one_error

CACHE = Path(__file__).resolve().parent.parent / "docs" / "_gemm_cache"
TE_GUIDE = "2160d33ec54a347e"
H200 = CACHE / f"{TE_GUIDE}--h200.json"
LOSS = CACHE / "studies" / "loss-parity--h200.json"
RANGE = CACHE / "studies" / "dynamic-range--h200.json"


def _load(path: Path) -> dict[str, Any]:
    return json.loads(path.read_text(encoding="utf-8"))


def _later(doc: dict[str, Any], minutes: int = 5) -> dict[str, Any]:
    doc = copy.deepcopy(doc)
    doc["provenance"]["date"] = (dt.datetime.now(dt.timezone.utc) - dt.timedelta(minutes=minutes)).isoformat(
        timespec="seconds")
    return doc


def _slow_step(doc: dict[str, Any], mode: str, precision: str, factor: float) -> dict[str, Any]:
    doc = copy.deepcopy(doc)
    for cell in doc["layer"]:
        if (cell["mode"], cell["precision"]) == (mode, precision) and cell["status"] == "measured":
            cell["ms"] *= factor
            cell["stats"] = {k: ([x * factor for x in v] if isinstance(v, list) else v * factor)
                             if k.endswith("_ms") else v for k, v in cell["stats"].items()}
    return doc


# ------------------------------------------------------------------------------- compare: steps, SQNR
def test_a_step_that_flips_and_an_sqnr_drop_show_in_the_pull_request_body() -> None:
    """Before: 'No GEMM changed by more than the runs' measured spread' and nothing else."""
    old = read_document(H200)
    new = _slow_step(old, "layer-graphed", "fp8-delayed", 2.0)
    cell = next(c for c in new["accuracy"] if c["status"] == "measured" and c["precision"] == "fp8-current")
    cell["sqnr_db"] -= 15
    c = compare(old, new)
    flipped = [s for s in c.flagged_steps if (s.mode, s.precision) == ("layer-graphed", "fp8-delayed")]
    assert len(c.flagged_steps) == 1 and flipped
    step = flipped[0]
    assert step.a_speedup is not None and step.b_speedup is not None
    assert step.a_speedup > 1.4 and step.b_speedup < 0.9
    assert [(q.a_db, q.b_db) for q in c.flagged_sqnr] == [(cell["sqnr_db"] + 15, cell["sqnr_db"])]
    md = c.to_markdown()
    assert "No GEMM changed by more than the runs' measured spread." in md  # the GEMMs did not change
    assert "**One layer's step: 1 change(s) beyond the measured spread**" in md
    assert re.search(r"\| One layer's step \| FP8 Delayed \|.*\| 1\.\d\dx ±\d+% \| 0\.\d\dx ±\d+% \| ! \|",
                     md)
    assert "**SQNR: 1 cell(s) changed by more than 0.5 dB" in md and "| -15.0 |" in md
    text = c.to_text()
    assert "One layer's step" + " " * 18 + "FP8 Delayed" in text and "  !" in text
    data = c.to_json()
    assert [s["flagged"] for s in data["steps"]].count(True) == 1
    assert [q["delta_db"] for q in data["sqnr"] if q["flagged"]] == [pytest.approx(-15)]


def test_noise_within_the_spread_is_not_flagged_and_a_small_sqnr_change_is_not() -> None:
    old = read_document(H200)
    new = _slow_step(old, "layer", "fp8-current", 1.01)
    cell = next(c for c in new["accuracy"] if c["status"] == "measured")
    cell["sqnr_db"] += SQNR_TOLERANCE_DB / 2
    c = compare(old, new)
    assert not c.flagged_steps and not c.flagged_sqnr


def test_a_step_that_failed_on_one_side_is_flagged() -> None:
    old = read_document(H200)
    new = copy.deepcopy(old)
    for cell in new["layer"]:
        if (cell["mode"], cell["precision"]) == ("layer", "fp8-block"):
            for key in ("ms", "stats"):
                cell.pop(key, None)
            cell.update(status="failed", reason="CUDA error: out of memory")
    c = compare(old, new)
    failed = [s for s in c.flagged_steps if s.precision == "fp8-block" and s.mode == "layer"]
    assert failed and failed[0].b_status == "failed" and failed[0].b_speedup is None
    assert "| failed | ! |" in c.to_markdown()


# ------------------------------------------------------------------------------- compare: studies
def test_a_loss_parity_verdict_that_flips_is_flagged_beside_the_unchanged_ones() -> None:
    old = _load(LOSS)
    new = copy.deepcopy(old)
    recipe = next(r for r in new["data"]["recipes"] if r["precision"] == "fp8-current")
    recipe["validation"]["loss"][-1] = recipe["final_val_loss"] = round(recipe["final_val_loss"] + 0.5, 6)
    studies.validate(new)
    c = compare_studies(old, new)
    assert [r.what for r in c.flagged] == ["FP8 Current: final validation loss"]
    assert "beyond BF16's seed range" in c.flagged[0].b
    assert "**1 change(s) beyond the study's spread**" in c.to_markdown("studies/loss-parity--h200.json")
    assert not compare_studies(old, copy.deepcopy(old)).flagged


def test_a_dynamic_range_sqnr_drop_is_flagged() -> None:
    old = _load(RANGE)
    new = copy.deepcopy(old)
    result = new["data"]["cases"][0]["results"]["fp8-current"]["gemm"]
    for key in ("whole_db", "row_median_db", "row_min_db"):
        result[key] -= 10
    studies.validate(new)
    c = compare_studies(old, new)
    assert len(c.flagged) == 1 and "FP8 Current" in c.flagged[0].what


def test_compare_dirs_lists_studies_added_changed_and_removed(tmp_path: Path) -> None:
    old, new = tmp_path / "old", tmp_path / "new"
    for root in (old, new):
        (root / "studies").mkdir(parents=True)
    shutil.copy(LOSS, old / "studies" / LOSS.name)
    shutil.copy(RANGE, old / "studies" / RANGE.name)
    (new / "studies" / LOSS.name).write_text(dumps(_later(_load(LOSS))))
    shutil.copy(CACHE / "studies" / "loss-parity--h100-80gb-hbm3.json", new / "studies")
    d = compare_dirs(old, new)
    # Names are paths relative to the compared directories (issue 44: a studies folder compares too).
    assert [n for n, _ in d.studies_compared] == [f"studies/{LOSS.name}"]
    assert [n for n, _ in d.studies_added] == ["studies/loss-parity--h100-80gb-hbm3.json"]
    assert d.studies_removed == [f"studies/{RANGE.name}"]
    md = d.to_markdown()
    assert "### studies/loss-parity--h200.json" in md and "New studies:" in md and "studies/dynamic-range" in md
    assert "study values changed beyond their spread: 0" in md


# ------------------------------------------------------------------------------- merge: studies
def test_merge_places_a_newer_study_and_keeps_a_cached_one_that_is_not_older(tmp_path: Path) -> None:
    """Before: '$.question: is missing', exit 1, and the whole pull request lost."""
    incoming, cache = tmp_path / "in", tmp_path / "cache"
    (incoming / "studies").mkdir(parents=True)
    (cache / "studies").mkdir(parents=True)
    shutil.copy(LOSS, cache / "studies" / LOSS.name)
    shutil.copy(H200, incoming / H200.name)
    newer = _later(_load(LOSS))
    (incoming / "studies" / LOSS.name).write_text(dumps(newer))
    (incoming / "studies" / RANGE.name).write_text(RANGE.read_text())
    actions = {a.source.name: a for a in merge([incoming], cache)}
    assert actions[LOSS.name].action == "replaced" and actions[RANGE.name].action == "added"
    assert actions[H200.name].action == "added"
    assert _load(cache / "studies" / LOSS.name) == newer
    assert _load(cache / "studies" / RANGE.name) == _load(RANGE)
    assert summary_markdown(list(actions.values())) == ""
    # The same files again: nothing older wins.
    again = {a.source.name: a.action for a in merge([incoming], cache)}
    assert again == {H200.name: "identical", LOSS.name: "identical", RANGE.name: "identical"}
    action, written, why = decide_study(newer, _load(LOSS))
    assert (action, written) == ("kept-existing", None) and "not older" in why


def test_merge_rejects_a_bad_study_by_name_and_merges_the_rest(tmp_path: Path) -> None:
    incoming, cache = tmp_path / "in", tmp_path / "cache"
    (incoming / "a").mkdir(parents=True)
    bad = _load(LOSS)
    bad["data"]["recipes"][0]["final_val_loss"] = -1e308
    (incoming / "a" / LOSS.name).write_text(json.dumps(bad))
    future = _load(RANGE)
    future["provenance"]["date"] = "2999-01-01T00:00:00+00:00"
    (incoming / "a" / RANGE.name).write_text(json.dumps(future))
    shutil.copy(H200, incoming / "a" / H200.name)
    actions = {a.source.name: a for a in merge([incoming], cache)}
    assert actions[LOSS.name].action == "rejected" and "study schema" in actions[LOSS.name].reason
    assert actions[RANGE.name].action == "rejected" and "future" in actions[RANGE.name].reason
    assert actions[H200.name].action == "added"
    note = summary_markdown(list(actions.values()))
    assert "**2 of 3 result file(s)" in note and "loss-parity--h200.json" in note


def test_the_merge_command_writes_its_summary_and_exits_1_only_after_merging_the_rest(tmp_path: Path) -> None:
    from gemm_bench.cli.commands import main

    incoming, cache = tmp_path / "in", tmp_path / "cache"
    incoming.mkdir()
    (incoming / "x--h200.json").write_text("[")
    shutil.copy(H200, incoming / H200.name)
    summary = tmp_path / "summary.md"
    assert main(["merge", str(incoming), "--cache-dir", str(cache), "--summary", str(summary)]) == 1
    assert (cache / H200.name).is_file() and "x--h200.json" in summary.read_text()
    (incoming / "x--h200.json").unlink()
    assert main(["merge", str(incoming), "--cache-dir", str(cache), "--summary", str(summary)]) == 0
    assert summary.read_text() == ""


# ------------------------------------------------------------------------------- studies age
def test_a_study_older_than_the_configured_age_is_stale() -> None:
    """Before: studies never aged (the page and the planner ignored their date)."""
    doc = _load(LOSS)
    when = dt.datetime.fromisoformat(doc["provenance"]["date"])
    assert studies.staleness(doc, None, ("method",), max_age_days=30, now=when + dt.timedelta(days=10)) is None
    stale = studies.staleness(doc, None, ("method",), max_age_days=30, now=when + dt.timedelta(days=40))
    assert stale == "40 days old, older than the configured 30"
    bad = copy.deepcopy(doc)
    bad["provenance"]["date"] = "yesterday"
    assert "unreadable date" in (studies.staleness(bad, None, ("method",), max_age_days=30) or "")


def test_refresh_plans_a_study_that_aged(tmp_path: Path) -> None:
    from gemm_bench.cli.refresh import Rules, plan_studies

    (tmp_path / "studies").mkdir()
    for path in (LOSS, RANGE, LOSS.parent / "layout-search--h200.json"):
        shutil.copy(path, tmp_path / "studies" / path.name)
    local = {"method": "x", "transformer_engine": "2.20.2", "torch": "2.11.0+cu130"}
    assert plan_studies(tmp_path, "NVIDIA H200", local, Rules(stale_when=("transformer_engine",))) == []
    aged = plan_studies(tmp_path, "NVIDIA H200", local, Rules(stale_when=("transformer_engine",), max_age_days=1e-6))
    assert sorted(t.name for t in aged) == ["dynamic-range", "layout-search", "loss-parity"]
    assert all("days old" in t.reason for t in aged)


# ------------------------------------------------------------------------------- bounded values
@pytest.mark.parametrize("value", [1e308, -1e308, 1001.0])
def test_a_decibel_value_out_of_range_is_refused_with_its_path(value: float) -> None:
    """Before: +-1e308 dB validated, and the page drew a figure of nan coordinates."""
    data = copy.deepcopy(_load(RANGE)["data"])
    gemm = data["cases"][3]["results"]["fp8-block"]["gemm"]
    gemm["whole_db"] = value
    with pytest.raises(StudyError) as caught:
        dynamic_range_schema.validate_data(data)
    assert caught.value.where == "$.data.cases[3].results.fp8-block.gemm.whole_db"
    assert "between -1000 and 1000" in caught.value.problem


def test_a_loss_beyond_the_magnitude_bound_is_refused() -> None:
    doc = _load(LOSS)
    recipe = doc["data"]["recipes"][1]
    recipe["curve"]["train_loss"][3] = 1e300
    with pytest.raises(StudyError, match=r"train_loss\[3\]: must be between"):
        studies.validate(doc)


def test_the_extreme_values_the_schema_accepts_draw_finite_figures() -> None:
    """What the bounds are for: the line figure of the largest accepted values has no nan."""
    for ys in ([studies.MAX_DECIBELS, -studies.MAX_DECIBELS], [studies.MAX_MAGNITUDE, 0.0]):
        svg = line_svg([Series("a", [1.0, studies.MAX_MAGNITUDE], ys)], x_label="x", y_label="y", log_x=True,
                       include_y=(0,))
        assert not re.search(r"\b(nan|inf)\b", svg)
    assert math.isfinite(studies.MAX_DECIBELS)


# ------------------------------------------------------------------------------- linked folder
def test_a_linked_studies_folder_is_not_followed(tmp_path: Path) -> None:
    """Before: a studies/ link to a folder outside the source tree was read and published."""
    outside = tmp_path / "outside"
    outside.mkdir()
    shutil.copy(LOSS, outside / LOSS.name)
    cache = tmp_path / "site" / "_gemm_cache"
    cache.mkdir(parents=True)
    (cache / "studies").symlink_to(outside, target_is_directory=True)
    docs, errors = studies.read_studies(cache, "loss-parity")
    assert docs == [] and len(errors) == 1
    assert errors[0].path == cache / "studies" and "is a symbolic link" in str(errors[0])
    assert str(outside) in str(errors[0]) and "replace the link with the folder" in str(errors[0])


# ------------------------------------------------------------------------------- the study pages age too
@pytest.mark.parametrize(("directive", "study"), [("gemm-dynamic-range", RANGE), ("gemm-loss-parity", LOSS)])
def test_a_study_page_marks_a_study_older_than_gemm_benchmark_max_age_days(tmp_path: Path, directive: str,
                                                                          study: Path) -> None:
    """Before: a study a year old read as current under ``gemm_benchmark_max_age_days = 30``."""
    import io

    from sphinx.testing.util import SphinxTestApp

    src = tmp_path / "src"
    (src / "_gemm_cache" / "studies").mkdir(parents=True)
    shutil.copy(study, src / "_gemm_cache" / "studies" / study.name)
    (src / "conf.py").write_text('extensions = ["gemm_benchmark"]\ngemm_benchmark_cache_dir = "_gemm_cache"\n'
                                 'gemm_benchmark_execution_mode = "cache"\ngemm_benchmark_max_age_days = 0.001\n')
    (src / "index.rst").write_text(f"Study\n=====\n\n.. {directive}::\n")
    warnings = io.StringIO()
    app = SphinxTestApp("html", srcdir=src, status=io.StringIO(), warning=warnings, freshenv=True)
    try:
        app.build()
    finally:
        app.cleanup()
    html = (Path(app.outdir) / "index.html").read_text(encoding="utf-8")
    assert re.search(r"index.rst:4: WARNING: .*is stale: \d+ days old, older than the configured 0.001",
                     warnings.getvalue()), warnings.getvalue()
    assert "(stale: " in html and "days old" in html


# ------------------------------------------------------------------------------- failed is planned again
def test_a_failed_result_is_planned_again_by_refresh_and_by_an_auto_build(tmp_path: Path) -> None:
    """Before: the build said "1 of 1 results need a GPU run (1 failed)" and refresh planned nothing."""
    from gemm_bench.cli.refresh import Ask, Job, Rules, make_plan
    from gemm_bench.question.question import build_question
    from gemm_bench.results.cache import Cache
    from gemm_bench.results.stack import remeasure
    from tests.conftest import make_document, write_document

    q = build_question(shapes=["4096x4096x4096"])
    doc = make_document(q, precisions=("bf16", "fp8-current"), modes=("autocast",),
                        failed={("autocast", "fp8-current"): "CUDA error: out of memory"})
    write_document(tmp_path, doc)
    job = Job(q, [Ask(("bf16", "fp8-current"), ("autocast",), (), "index.rst:3")])
    tasks, fresh = make_plan([job], Cache(tmp_path), "NVIDIA H100 80GB HBM3", None, Rules())
    assert fresh == [] and len(tasks) == 1
    assert tasks[0].modes == ("autocast",) and set(tasks[0].precisions) == {"bf16", "fp8-current"}
    assert "failed: autocast/fp8-current (CUDA error: out of memory)" in tasks[0].reason
    # The docs build's auto mode uses the same rule; a page that does not ask for the failed cell plans nothing.
    assert remeasure(doc, q, ["fp8-current"], ["autocast"], local=None, rules=Rules()) is not None
    assert remeasure(doc, q, ["bf16"], ["autocast"], local=None, rules=Rules()) is None
    assert remeasure(doc, q, ["fp8-current"], ["prequant"], local=None, rules=Rules()) is not None  # never measured


def test_a_failed_layer_step_is_planned_with_its_autocast_gemms() -> None:
    from gemm_bench.results.stack import Rules, remeasure

    doc = read_document(H200)
    from gemm_bench.question.question import build_question

    q = build_question(model="te-guide-5b")
    # as this code's run stores it (the committed H200 file predates it); schema-valid, as remeasure's
    # lacking_blocks reads the typed result
    doc["energy"] = {"method": "test", "mode": "layer-graphed", "window_s": 0.3, "sample_interval_s": 0.02,
                     "steps": []}
    assert remeasure(doc, q, ["fp8-block"], ["autocast"], local=None, rules=Rules()) is None
    for cell in doc["layer"]:
        if (cell["mode"], cell["precision"]) == ("layer-graphed", "fp8-block"):
            for key in ("ms", "stats"):
                cell.pop(key, None)
            cell.update(status="failed", reason="capture failed")
    todo = remeasure(doc, q, ["fp8-block"], ["autocast"], local=None, rules=Rules())
    assert todo is not None and todo[1] == ["layer-graphed", "autocast"] and "capture failed" in todo[2]


# ------------------------------------------------------------------------------- the dry run's estimate
def test_the_estimate_is_at_least_the_longest_question_per_gpu() -> None:
    """Before: 85 s and 1 s on two GPUs read as (86 / 2 + 15) s = 1.0 min, less than the 85 s question."""
    from gemm_bench.cli.refresh import WORKER_START_S, GpuSlot, Task, describe_plan, makespan
    from gemm_bench.question.question import build_question

    assert makespan([85.0, 1.0], 2) == 85.0
    assert makespan([10.0, 10.0, 10.0, 10.0], 2) == 20.0
    assert makespan([30.0, 20.0, 20.0], 2) == 40.0  # dispatched in plan order: 30 | 20 + 20
    q = build_question(shapes=["1024x1024x1024"])
    tasks = [Task(q, "NVIDIA H100 80GB HBM3", ("bf16",), ("autocast",), "missing", (), seconds, "x, its measure_s")
             for seconds in (85.0, 1.0)]
    gpus = [GpuSlot(0, "NVIDIA H100 80GB HBM3"), GpuSlot(1, "NVIDIA H100 80GB HBM3")]
    text = describe_plan(tasks, [], gpus)
    assert f"estimated time for the questions: {(85 + WORKER_START_S) / 60:.1f} min across 2 GPU(s)" in text


# ------------------------------------------------------------------------------- refresh's command line
def test_refresh_without_a_gpu_names_what_was_given_and_suggests_device(monkeypatch: pytest.MonkeyPatch,
                                                                      capsys: pytest.CaptureFixture[str]) -> None:
    """Before: `refresh docs/ --dry-run` said "--gpus: no NVIDIA GPU found", an option not given."""
    from gemm_bench.cli import refresh as refresh_mod
    from gemm_bench.cli.commands import main

    monkeypatch.setattr(refresh_mod, "probe_gpus", lambda: [])
    assert main(["refresh", "docs", "--dry-run"]) == 2
    err = capsys.readouterr().err
    assert "--gpus" not in err and "--dry-run: no NVIDIA GPU found" in err and "add --device NAME" in err
    assert main(["refresh", "docs"]) == 2
    err = capsys.readouterr().err
    assert "--gpus" not in err and "--dry-run --device NAME" in err
    assert main(["refresh", "docs", "--gpus", "0"]) == 2
    assert "--gpus 0: no NVIDIA GPU found" in capsys.readouterr().err
    assert main(["refresh", "docs", "--dry-run", "--device", "b20"]) == 2
    err = capsys.readouterr().err
    assert "--device b20: not a device the site knows" in err and "b200" in err


def test_a_plan_for_one_device_lists_only_the_pages_that_show_it(tmp_path: Path) -> None:
    """Before: `--dry-run --device b200` said "asked at" four pages, three of them restricted to H100 and H200."""
    from gemm_bench.cli.refresh import Ask, Job, Rules, make_plan
    from gemm_bench.question.question import build_question
    from gemm_bench.results.cache import Cache

    q = build_question(shapes=["1024x1024x1024"])
    asks = [Ask(("bf16",), ("autocast",), ("h100", "h200"), "index.rst:4"), Ask(("bf16",), ("autocast",), (),
            "tutorial.md:63"), Ask(("bf16", "nvfp4"), ("autocast",), ("b200",), "maintainers.rst:116")]
    tasks, _ = make_plan([Job(q, asks)], Cache(tmp_path), "b200", None, Rules())
    assert tasks[0].locations == ("tutorial.md:63", "maintainers.rst:116")
    tasks, _ = make_plan([Job(q, asks)], Cache(tmp_path), "NVIDIA H200", None, Rules())
    assert tasks[0].locations == ("index.rst:4", "tutorial.md:63") and "nvfp4" not in tasks[0].precisions


# ------------------------------------------------------------------------------- the README from the cache
README = Path(__file__).resolve().parent.parent / "README.md"


def test_the_readme_caption_is_the_one_written_from_the_committed_cache() -> None:
    """Before: the caption said the H200's result "awaits re-measurement" while it was current."""
    from gemm_bench.cli import readme
    from gemm_bench.report.figures import readme_documents

    documents, skipped = readme_documents(CACHE, on_error=lambda error: None)
    text = README.read_text(encoding="utf-8")
    assert readme.with_caption(text, readme.caption(documents, skipped), README) == text, \
        "run `nox -s readme_figure` (gemm-bench readme-figure --readme README.md)"
    assert "awaits re-measurement" not in text or skipped


def test_the_caption_names_the_gpus_drawn_and_those_awaiting_re_measurement(tmp_path: Path) -> None:
    from gemm_bench.cli import readme
    from gemm_bench.cli.commands import main

    h100 = _load(CACHE / f"{TE_GUIDE}--h100-80gb-hbm3.json")
    old = _load(H200)
    old["method_version"] = "1"
    from gemm_bench.results.typed import parse

    text = readme.caption([parse(h100)], [(old["device"]["name"], "measured with method version '1'")])
    assert "measured on the H100: every GPU" in text and "(the H200: awaiting re-measurement" in text
    # The command rewrites only its block, and says when it is up to date.
    cache = tmp_path / "cache"
    cache.mkdir()
    shutil.copy(CACHE / f"{TE_GUIDE}--h100-80gb-hbm3.json", cache)
    page = tmp_path / "README.md"
    page.write_text(f"# x\n\n{readme.BEGIN}\nold words\n{readme.END}\n\nrest\n")
    args = ["readme-figure", "--cache-dir", str(cache), "--out", str(tmp_path / "f.svg"), "--readme", str(page)]
    assert main(args) == 0
    assert page.read_text() == f"# x\n\n{readme.BEGIN}\n{readme.caption([parse(h100)], [])}\n{readme.END}\n\nrest\n"
    assert main(args) == 0
    (tmp_path / "bare.md").write_text("no markers\n")
    assert main([*args[:-1], str(tmp_path / "bare.md")]) == 2


def test_the_readme_and_the_help_agree_on_the_extras_each_command_needs() -> None:
    """Before: the README said refresh needs the gpu extra, the CLI said it needs Sphinx."""
    from gemm_bench.cli.commands import build_parser
    from gemm_bench.cli.extras import COMMAND_EXTRAS, needs, readme_sentence

    text = " ".join(README.read_text(encoding="utf-8").split())
    assert readme_sentence() in text
    helps = {a.dest: a.help for a in build_parser()._subparsers._group_actions[0]._choices_actions}  # type: ignore[union-attr]
    assert set(helps) == set(COMMAND_EXTRAS)
    for command, extras in COMMAND_EXTRAS.items():
        assert needs(command) in (helps[command] or "")
        for extra in ("docs", "gpu"):
            assert (f"'{extra}'" in (helps[command] or "")) is (extra in extras), command


# ------------------------------------------------------------------------------- model ids
@pytest.mark.parametrize("entry", ["llama3-8b/tp0", "deepseek-v3/ep0", "mixtral-8x22b/tp0/ep4"])
def test_a_parallel_size_of_0_is_refused_by_the_one_model_id_parser(entry: str) -> None:
    """Before: `:models: llama3-8b/tp0` silently meant TP 1 while `:tensor-model-parallel-size: 0` was refused."""
    from gemm_bench.question.config import ConfigError, parse_model_id
    from gemm_bench.question.question import build_question
    from gemm_benchmark.options import OptionError
    from gemm_benchmark.summary_answer import summary_asks

    with pytest.raises(ConfigError, match=r"/(tp|ep)0 is not a (tensor|expert)-parallel size; sizes start at 1"):
        parse_model_id(entry)
    with pytest.raises(OptionError, match=r"sizes start at 1"):
        summary_asks({"models": entry}, srcdir=Path("."), docdir=Path("."))
    with pytest.raises(ConfigError, match=r"^--model: .*sizes start at 1"):
        build_question(model=entry)


def test_every_model_id_the_site_shows_is_accepted_by_shapes_and_run(capsys: pytest.CaptureFixture[str]) -> None:
    """Before: `gemm-bench shapes --model llama3-70b/tp8` was "unknown preset" although the models page uses it."""
    from gemm_bench.cli.commands import main
    from gemm_bench.question.question import build_question

    models_page = (Path(__file__).resolve().parent.parent / "docs" / "models.rst").read_text(encoding="utf-8")
    ids = {i.strip() for line in re.findall(r":models: (.*)", models_page) for i in line.split(",")}
    assert "llama3-70b/tp8" in ids and "deepseek-v3/ep64" in ids
    for model_id in sorted(ids):
        assert main(["shapes", "--model", model_id, "--json"]) == 0, model_id
    capsys.readouterr()
    spelled = build_question(model="llama3-70b", fields={"tensor_model_parallel_size": 8})
    assert build_question(model="llama3-70b/tp8").hash == spelled.hash
    assert build_question(model="llama3-70b/tp8", fields={"tensor_model_parallel_size": 8}).hash == spelled.hash
    assert main(["shapes", "--model", "llama3-70b/tp8", "--tensor-model-parallel-size", "4"]) == 2
    assert "--tensor-model-parallel-size: is 4, but the model id 'llama3-70b/tp8' says 8" in one_error(
        capsys.readouterr().err)


# ------------------------------------------------------------------------------- report and compare on studies
def test_report_on_a_study_says_what_it_is_and_what_to_use(capsys: pytest.CaptureFixture[str]) -> None:
    """Before: `gemm-bench report studies/loss-parity--h200.json` said "$.question: is missing". Since
    issue 35's CLI pass it gives the study's own report (tests/test_cli_round36.py), not a 264-column error."""
    from gemm_bench.cli.commands import main

    assert main(["report", str(LOSS)]) == 0
    out, err = capsys.readouterr()
    assert "$.question" not in out + err and err == ""
    assert "loss-parity study: NVIDIA H200" in out and "a study, not a question's result" in out
    assert "gemm-loss-parity directive" in out and "gemm-bench compare A B" in out


def test_compare_takes_two_runs_of_a_study(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from gemm_bench.cli.commands import main

    newer = tmp_path / "new.json"
    newer.write_text(dumps(_later(_load(LOSS))))
    assert main(["compare", str(LOSS), str(newer), "--markdown"]) == 0
    assert "Nothing changed beyond the study's spread" in capsys.readouterr().out
    assert main(["compare", str(LOSS), str(H200)]) == 2
    assert "holds a study and the other file a question's result" in one_error(capsys.readouterr().err)


# ------------------------------------------------------------------------------- report fits 100 columns
@pytest.mark.parametrize("path", sorted(CACHE.glob("*--*.json")), ids=lambda p: p.name)
def test_report_fits_100_columns_prints_no_paragraph_twice_and_aligns_peers(path: Path) -> None:
    """Before: 197-column rows, a 1,386-character paragraph twice, one ~5,000-character line for the
    sweep's regions, and peer rows whose columns moved with the op's name."""
    from gemm_bench.report.report import TEXT_WIDTH, Report

    text = Report(read_document(path)).to_text()
    lines = text.splitlines()
    assert max(len(line) for line in lines) <= TEXT_WIDTH == 100
    from gemm_bench.measure.step import WHAT_IS_TIMED

    flat = " ".join(text.split())
    assert flat.count(" ".join(WHAT_IS_TIMED.split())) <= 1  # the step's long paragraph, once for both forms
    peers = text.split("== Peers (context; not in TE totals) ==")[1].split("\n\n")[0].splitlines()[1:] \
        if "== Peers" in text else []
    timed = [line for line in peers if " ms " in line]
    assert len({line.index(" ms ") for line in timed}) <= 1, timed[:3]


def test_the_estimate_counts_the_whole_measuring_call_not_only_the_run() -> None:
    """Issue 34: measure_s is the Runner's run; the plan's step and the energy come after it, inside
    phases_s' total. On an H100 the estimate from measure_s read 378 s for a 429 s refresh."""
    from gemm_bench.cli.refresh import estimate_seconds

    doc = {"provenance": {"measure_s": 30.0, "phases_s": {"total": 41.5}, "method": {}}}
    assert estimate_seconds(doc, ["bf16"], ["autocast"]) == 41.5
    doc["provenance"]["phases_s"] = {}
    assert estimate_seconds(doc, ["bf16"], ["autocast"]) == 30.0
