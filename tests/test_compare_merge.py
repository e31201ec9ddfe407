"""gemm-bench compare (ratios, spread flags, text/JSON/Markdown) and merge (validation, conflicts)."""

from __future__ import annotations

import copy
import datetime as dt
import json
import shutil
from pathlib import Path

import pytest

from gemm_bench.report.compare import CompareError, compare, compare_dirs, load_result
from gemm_bench.results.cache import dumps, read_document
from gemm_bench.results.merge import MergeError, decide, merge

CACHE = Path(__file__).resolve().parent.parent / "docs" / "_gemm_cache"
TE_GUIDE = "2160d33ec54a347e"  # the question of the TE guide's layer (te-guide-5b)
H100 = CACHE / f"{TE_GUIDE}--h100-80gb-hbm3.json"
H200 = CACHE / f"{TE_GUIDE}--h200.json"


def _scaled(cell: dict, factor: float) -> dict:
    """A measured cell with every time (ms, median, quantiles, samples) scaled: a synthetic change."""
    if cell["status"] != "measured":
        return cell
    stats = {k: ([x * factor for x in v] if isinstance(v, list) else v * factor) if k.endswith("_ms") else v
             for k, v in cell["stats"].items()}
    return dict(cell, ms=cell["ms"] * factor, stats=stats)


def test_te_guide_hash_is_the_te_guide_question() -> None:
    from gemm_bench.question.question import build_question

    assert build_question(model="te-guide-5b").hash == TE_GUIDE


# ------------------------------------------------------------------------------- compare
def test_compare_h100_h200_ratios_are_the_files_times() -> None:
    a, b = read_document(H100), read_document(H200)
    c = compare(a, b)
    assert c.modes == ["autocast", "prequant"]
    # What both files hold (measured or not), in the precisions' order; only measured cells are compared.
    assert c.precisions[:4] == ["bf16", "fp8-delayed", "fp8-current", "fp8-block"]
    assert set(c.precisions) <= {"bf16", "fp8-delayed", "fp8-current", "fp8-block", "mxfp8", "nvfp4"}
    assert not [g for g in c.gemms if g.precision in ("mxfp8", "nvfp4")]  # unsupported on Hopper: nothing to compare
    by_key = {(x["mode"], x["precision"], x["op"], x["pass"]): x for x in b["cells"]}
    for change in c.gemms:
        op, pass_ = change.gemm.split("/")  # type: ignore[union-attr]
        cell_a = next(x for x in a["cells"] if (x["mode"], x["precision"], x["op"], x["pass"])
                      == (change.mode, change.precision, op, pass_))
        cell_b = by_key[(change.mode, change.precision, op, pass_)]
        assert change.a_ms == cell_a["ms"] and change.b_ms == cell_b["ms"]
        assert change.ratio == pytest.approx(cell_a["ms"] / cell_b["ms"])
        spread = cell_a["stats"]["iqr_ms"] + cell_b["stats"]["iqr_ms"]
        assert change.flagged is (abs(cell_a["ms"] - cell_b["ms"]) > spread)
    # FP8 delayed has no pre-quantized form: not compared in that mode.
    assert not [t for t in c.totals if t.mode == "prequant" and t.precision == "fp8-delayed"]
    total = next(t for t in c.totals if t.mode == "autocast" and t.precision == "fp8-current")
    assert total.a_ms == pytest.approx(sum(x["ms"] for x in a["cells"]
                                           if x["mode"] == "autocast" and x["precision"] == "fp8-current"))
    # every flag is the rule's (checked per GEMM above); whether any GEMM differs is the data's
    assert [g.gemm for g in c.flagged] == [g.gemm for g in c.gemms if g.flagged]


def test_compare_text_json_markdown_are_sensible() -> None:
    c = compare(read_document(H100), read_document(H200))
    text = c.to_text()
    assert text.splitlines()[0].startswith("A: NVIDIA H100 80GB HBM3 | TE 2.20.2")
    assert "== Autocast ==" in text and "== Pre-quantized ==" in text and "QKV projection Fprop" in text
    data = json.loads(json.dumps(c.to_json()))
    assert data["question_hash"] == TE_GUIDE and data["a"]["device"] == "NVIDIA H100 80GB HBM3"
    assert len(data["gemms"]) == len(c.gemms) and any(g["flagged"] for g in data["gemms"]) is bool(c.flagged)
    md = c.to_markdown()
    flagged_gemms = len(c.flagged) - len([t for t in c.totals if t.flagged])
    assert "| Autocast | FP8 Current |" in md
    assert ("GEMMs changed by more than the measured spread" in md) is bool(flagged_gemms)
    steps_table = len(c.steps) + 2 if c.steps else 0
    gemm_table = flagged_gemms + 2 if flagged_gemms else 0  # the session-13 H200 differs in none
    energy_table = len(c.energy) + 2 if c.energy else 0  # issue 43 item 6: compare reports energy too
    assert md.count("\n|") == len(c.totals) + 2 + gemm_table + steps_table + energy_table
    assert "One layer's step: no speedup changed" in md and "SQNR: no cell changed by more than 0.5 dB" in md


def test_same_result_compares_to_ratio_one_and_flags_nothing() -> None:
    doc = read_document(H100)
    c = compare(doc, copy.deepcopy(doc))
    assert all(x.ratio == 1.0 for x in (*c.gemms, *c.totals)) and not c.flagged
    assert "No GEMM changed by more than the runs' measured spread." in c.to_markdown()


def test_compare_refuses_different_questions() -> None:
    other = next(p for p in sorted(CACHE.glob("*--h200.json")) if not p.name.startswith(TE_GUIDE))
    with pytest.raises(CompareError, match="different questions"):
        compare(read_document(H100), read_document(other))


def test_compare_dirs_lists_changed_added_removed(tmp_path: Path) -> None:
    old, new = tmp_path / "old", tmp_path / "new"
    old.mkdir()
    new.mkdir()
    shutil.copy(H100, old / H100.name)
    shutil.copy(H200, old / H200.name)
    changed = read_document(H100)
    changed["provenance"]["transformer_engine"] = "2.21.0"
    changed["cells"] = [_scaled(c, 2.0) for c in changed["cells"]]
    (new / H100.name).write_text(dumps(changed), encoding="utf-8")
    other = next(p for p in sorted(CACHE.glob("*--h200.json")) if not p.name.startswith(TE_GUIDE))
    shutil.copy(other, new / other.name)
    result = compare_dirs(old, new)
    assert [n for n, _ in result.compared] == [H100.name]
    assert [n for n, _ in result.added] == [other.name] and result.removed == [H200.name]
    md = result.to_markdown()
    # Doubled times (halving would put cells above the GPU's peak, which validation refuses): old/new = 0.5.
    assert "TE 2.21.0" in md and "0.500" in md
    assert compare_dirs(old, old).to_markdown().strip().endswith("No result changed.")


def fleet_cli(argv: list[str]) -> int:
    """Run a fleet command through cli_fleet.add_commands on the CLI's own parser class."""
    from gemm_bench.cli.commands import Parser
    from gemm_bench.cli.fleet import add_commands

    parser = Parser(prog="gemm-bench")
    add_commands(parser.add_subparsers(dest="command", required=True, parser_class=Parser))
    args = parser.parse_args(argv)
    return int(args.func(args))


def test_cli_compare_merge_and_errors(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    from gemm_bench.cli.errors import UsageError

    assert fleet_cli(["compare", str(H100), str(H200), "--markdown"]) == 0
    assert "| Autocast | BF16 |" in capsys.readouterr().out
    assert fleet_cli(["compare", str(H100), str(H200), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["question_hash"] == TE_GUIDE
    bad = tmp_path / "bad.json"
    bad.write_text("{", encoding="utf-8")
    with pytest.raises(UsageError, match=r"^B: .*bad.json: is not valid JSON"):
        fleet_cli(["compare", str(H100), str(bad)])
    with pytest.raises(UsageError, match="not both directories"):
        fleet_cli(["compare", str(tmp_path), str(H100)])
    incoming = _runner_dir(tmp_path, "h200", read_document(H200))
    assert fleet_cli(["merge", str(incoming), "--cache-dir", str(tmp_path / "cache")]) == 0
    assert "merge: 1 added" in capsys.readouterr().out
    (incoming / "x--y.json").write_text("[]", encoding="utf-8")
    assert fleet_cli(["merge", str(incoming), "--cache-dir", str(tmp_path / "cache")]) == 1
    with pytest.raises(UsageError, match="--stale-when: unknown field 'te'"):
        fleet_cli(["refresh", str(tmp_path), "--stale-when", "te"])


def test_load_result_accepts_any_file_name(tmp_path: Path) -> None:
    path = tmp_path / "artifact.json"
    shutil.copy(H100, path)
    assert load_result(path)["question_hash"] == TE_GUIDE


# ------------------------------------------------------------------------------- merge
def _runner_dir(tmp_path: Path, name: str, *docs: dict) -> Path:
    directory = tmp_path / "incoming" / name
    directory.mkdir(parents=True)
    for doc in docs:
        from gemm_bench.results.cache import file_name

        (directory / file_name(doc["question_hash"], doc["device"]["name"])).write_text(dumps(doc), encoding="utf-8")
    return directory


def test_merge_adds_new_results_and_rejects_invalid_files(tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    h100 = _runner_dir(tmp_path, "h100", read_document(H100))
    h200 = _runner_dir(tmp_path, "h200", read_document(H200))
    (h200 / "broken--h200.json").write_text("{", encoding="utf-8")
    misnamed = read_document(H100)
    (h200 / f"{TE_GUIDE}--h200-copy.json").write_text(dumps(misnamed), encoding="utf-8")
    actions = merge([h100, h200], cache)
    kinds = sorted((a.source.name, a.action) for a in actions)
    assert kinds == sorted([(H100.name, "added"), (H200.name, "added"), ("broken--h200.json", "rejected"),
                            (f"{TE_GUIDE}--h200-copy.json", "rejected")])
    assert sorted(p.name for p in cache.glob("*.json")) == sorted([H100.name, H200.name])
    assert (cache / H100.name).read_bytes() == H100.read_bytes()
    assert "belongs in" in next(a.reason for a in actions if a.source.name.endswith("copy.json"))
    assert all(a.action == "identical" for a in merge([h100], cache))
    with pytest.raises(MergeError, match="is not a directory"):
        merge([tmp_path / "nope"], cache)


#: The merge refuses dates ahead of its clock: these tests' "later" runs (2027) are merged at this time.
NOW = dt.datetime(2027, 6, 1, tzinfo=dt.timezone.utc)


def _later(doc: dict, date: str, **stack: str) -> dict:
    doc = copy.deepcopy(doc)
    doc["provenance"]["date"] = date
    doc["provenance"].update(stack)
    return doc


def test_conflict_other_stack_keeps_the_newer_run_and_says_why(tmp_path: Path) -> None:
    old = read_document(H100)
    new = _later(old, "2027-01-01T00:00:00+00:00", transformer_engine="2.21.0")
    new["cells"] = [c for c in new["cells"] if c["precision"] == "bf16"]
    action, doc, reason = decide(old, new, now=NOW)
    assert action == "replaced" and doc is new
    assert "another software stack and newer" in reason and "TE 2.21.0" in reason
    action, doc, reason = decide(new, old, now=NOW)
    assert action == "kept-existing" and doc is None and "not newer" in reason

    cache = tmp_path / "cache"
    merge([_runner_dir(tmp_path, "a", old)], cache)
    actions = merge([_runner_dir(tmp_path, "b", new)], cache, now=NOW)
    assert [a.action for a in actions] == ["replaced"]
    stored = read_document(cache / H100.name)
    assert stored["provenance"]["transformer_engine"] == "2.21.0"
    assert {c["precision"] for c in stored["cells"]} == {"bf16"}  # nothing of the old stack kept


def test_conflict_same_stack_merges_cells_newer_wins(tmp_path: Path) -> None:
    """Same stack: results.merge_documents folds the runs; the newer run's modes win."""
    old = read_document(H100)
    new = _later(old, "2027-01-01T00:00:00+00:00")
    new["cells"] = [_scaled(c, 2.0) for c in new["cells"] if c["mode"] == "autocast"]

    def times(doc: dict, mode: str) -> dict:
        return {(c["precision"], c["op"], c["pass"]): c.get("ms") for c in doc["cells"] if c["mode"] == mode}

    action, doc, reason = decide(old, new, now=NOW)
    assert action == "merged" and doc is not None and "newer" in reason
    assert times(doc, "autocast") == times(new, "autocast")
    assert times(doc, "prequant") == times(old, "prequant")  # the mode the new run did not measure is kept
    action, doc, reason = decide(new, old, now=NOW)  # the cached run is the newer one: its cells win
    assert action == "merged" and doc is not None and "its cells win" in reason
    assert times(doc, "autocast") == times(new, "autocast") and times(doc, "prequant") == times(old, "prequant")
    cache = tmp_path / "cache"
    merge([_runner_dir(tmp_path, "a", old)], cache)
    assert [a.action for a in merge([_runner_dir(tmp_path, "b", new)], cache, now=NOW)] == ["merged"]
    assert times(read_document(cache / H100.name), "autocast") == times(new, "autocast")
