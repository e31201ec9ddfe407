"""Issue 43, item 1: a result is parsed once, into typed objects (:mod:`gemm_bench.results.typed`), after
its invariants are checked at the door; the converted readers read only those objects."""

from __future__ import annotations

import ast
import copy
import json
from collections.abc import Collection
from pathlib import Path
from typing import Any

import pytest

from gemm_bench.question.question import build_question
from gemm_bench.results.cache import file_name, read_document
from gemm_bench.results.energy import tokens_per_gpu
from gemm_bench.results.invariants import REFUSED
from gemm_bench.results.schema import CheckedDocument, validate
from gemm_bench.results.typed import (
    Cell,
    EnergyEntry,
    LargestMicrobatch,
    ModelStepPart,
    Result,
    Stats,
    parse,
)
from tests.fake_model_step import model_step_block
from tests.helpers import synthetic_document

ROOT = Path(__file__).resolve().parents[1]
CACHE = ROOT / "docs" / "_gemm_cache"
LLAMA_70B_TP8_H100 = CACHE / "c1b9aa6aaebc8435--h100-80gb-hbm3.json"

#: The top-level keys of a result document (:func:`gemm_bench.results.schema.validate`).
RESULT_KEYS = frozenset({"schema_version", "method_version", "run_id", "question_hash", "question", "device",
                         "provenance", "notes", "support", "cells", "peers", "layer", "accuracy", "accuracy_method",
                         "model_step", "plan", "energy", "groups"})
#: The blocks' own keys a converted reader once indexed (model step, plan, energy entries).
BLOCK_KEYS = frozenset({"parts", "steps", "memory", "largest_microbatch", "padded_vocab_size", "layer_params",
                        "capacity_bytes", "state_per_param", "recipe", "keep_in_bf16", "projections", "chosen",
                        "energy_mj", "energy_mj_low", "energy_mj_high", "power_w", "power_w_q1", "power_w_q3",
                        "step_ms", "parts_ms", "busy_ms", "span_ms", "other_kernels", "scaled_by"})

#: The readers converted to :class:`Result`: none of them indexes a result document or its blocks.
#: ``fastest`` and ``tie_break`` read no field themselves: they ask ``Report`` (not converted yet) and,
#: for energy, :meth:`Result.energies`.
CONVERTED: tuple[str, ...] = (
    "bench/gemm_bench/report/model_step.py",
    "bench/gemm_bench/report/energy_compare.py",
    "bench/gemm_bench/report/fastest.py",
    "bench/gemm_bench/report/tie_break.py",
    "bench/gemm_bench/report/precision_plan.py",
    "bench/gemm_bench/report/run_answer.py",
    "bench/gemm_bench/report/layout_memory.py",
    "bench/gemm_bench/report/compare.py",
    "sphinxext/gemm_benchmark/answer_text.py",
    "sphinxext/gemm_benchmark/summary_answer.py",
    "sphinxext/gemm_benchmark/answers_table.py",
    "sphinxext/gemm_benchmark/execution.py",
    "sphinxext/gemm_benchmark/summary.py",
    "sphinxext/gemm_benchmark/freshness.py",
    "sphinxext/gemm_benchmark/directive.py",
    "sphinxext/gemm_benchmark/records.py",
    "sphinxext/gemm_benchmark/render_block.py",
    "sphinxext/gemm_benchmark/layout_tables.py",
    "sphinxext/gemm_benchmark/layout_step.py",
    "sphinxext/gemm_benchmark/layout_memory.py",
    "sphinxext/gemm_benchmark/roles.py",
    "bench/gemm_bench/report/report.py",
    "bench/gemm_bench/report/rounds.py",
    "bench/gemm_bench/report/cached_layer.py",
    "bench/gemm_bench/report/figures.py",
    "bench/gemm_bench/report/layout_step.py",
    "bench/gemm_bench/report/published_runs.py",
    "bench/gemm_bench/report/breakdown_figure.py",
    "bench/gemm_bench/report/model_step_breakdown.py",
    "bench/gemm_bench/report/training_text.py",
    "sphinxext/gemm_benchmark/breakdown_render.py",
    "sphinxext/gemm_benchmark/values.py",
    "sphinxext/gemm_benchmark/model_step_values.py",
)


def _energy_entry(precision: str, power: float, step_ms: float, samples: int = 16) -> dict[str, Any]:
    energy = round(power * step_ms, 3)
    tokens = 8192.0
    return {"precision": precision, "status": "measured", "power_w": power, "samples": samples, "steps": 20,
            "wall_s": 0.3, "step_ms": step_ms, "energy_mj": energy, "tokens_per_j": round(tokens / (energy / 1000), 1),
            "power_source": "instantaneous", "power_w_max": power + 20}


def _hand_made() -> dict[str, Any]:
    """A schema-valid model result with a model step, energy and a plan (chosen numbers)."""
    question = build_question(model="llama3-8b")
    assert question.config is not None
    doc = synthetic_document(question, device="NVIDIA H100 80GB HBM3")
    doc["device"]["power_limit_w"] = "700.00"
    doc["model_step"] = model_step_block(question.config, doc["run_id"], ["bf16", "fp8-current"],
                                         largest={"bf16": 2, "fp8-current": "CUDA out of memory"})
    doc["energy"] = {"method": "test", "mode": "layer-graphed", "window_s": 0.3, "sample_interval_s": 0.02,
                     "steps": [_energy_entry("bf16", 600.0, 10.0), _energy_entry("fp8-current", 620.0, 8.0)]}
    doc["plan"] = {"recipe": "fp8-current", "fp8": ["mlp_up"], "keep_in_bf16": ["qkv"], "kind": "mixed",
                   "rule": "test", "projections": [{"op": "qkv", "speedup": 0.9, "low": 0.85, "high": 0.95,
                                                    "fp8": False}],
                   "steps": [{"step": "plan", "mode": "layer-graphed", "status": "failed", "reason": "test  reason"}]}
    validate(copy.deepcopy(doc))
    return doc


def _through_the_door(tmp_path: Path, doc: dict[str, Any]) -> CheckedDocument:
    path = tmp_path / file_name(doc["question_hash"], doc["device"]["name"])
    path.write_text(json.dumps(doc), encoding="utf-8")
    got = read_document(path)
    assert isinstance(got, CheckedDocument)
    return got


def test_a_hand_made_document_parses_to_the_expected_objects() -> None:
    doc = _hand_made()
    result = parse(doc)
    assert isinstance(result, Result)
    assert (result.device.name, result.device.power_limit_w) == ("NVIDIA H100 80GB HBM3", 700.0)
    assert result.provenance.transformer_engine == "2.20.2" and result.provenance.method["timer"] == "synthetic"
    assert result.question_hash == doc["question_hash"] and result.kind == "model"
    assert result.config is not None and result.question is not None
    assert result.config.padded_vocab_size == doc["model_step"]["padded_vocab_size"]
    first = doc["cells"][0]
    assert result.cells[0] == Cell(status="measured", ms=first["ms"], stats=Stats(first["ms"], 0.0, n=1,
                                                                                      samples_ms=(first["ms"],)),
                                   reason="", mode=first["mode"], precision=first["precision"], op=first["op"],
                                   pass_=first["pass"], run_id=doc["run_id"])
    step = result.model_step
    assert step is not None and step.run_id == doc["run_id"]
    assert step.part("head") == ModelStepPart(status="measured", ms=45.0, stats=Stats(45.0, 0.9), reason="",
                                              part="head", precision="bf16")
    assert step.part("optimizer", params=1 << 28) is not None and step.part("layer-first", "fp8-delayed") is None
    assert step.largest_microbatch == LargestMicrobatch(2, {"bf16": 2}, {"fp8-current": "CUDA out of memory"})
    assert set(step.memory) == {"bf16", "fp8-current"} and step.memory["bf16"].state_per_param == 16.0
    assert step.answers(result.config)
    assert set(result.energies()) == {"bf16", "fp8-current"}
    bf16 = result.energies()["bf16"]
    assert isinstance(bf16, EnergyEntry) and (bf16.energy_mj, bf16.samples, bf16.bounds()) == (6000.0, 16, None)
    # tokens per joule per GPU, recomputed at the door from the question's tokens (issue 43, item 3)
    tokens = tokens_per_gpu(doc["question"]["config"])
    assert tokens is not None and bf16.tokens_per_j == round(tokens / 6.0, 1)
    plan = result.plan
    assert plan is not None and (plan.recipe, plan.fp8, plan.keep_in_bf16, plan.kind) == (
        "fp8-current", ("mlp_up",), ("qkv",), "mixed")
    assert plan.projections[0].speedup == 0.9 and plan.measured_steps("layer-graphed") == {}
    failed = plan.step("plan", "layer-graphed")
    assert failed is not None and (failed.status, failed.ms, failed.reason) == ("failed", None, "test reason")
    assert result.violations == ()


def test_a_demoted_energy_parses_as_failed_with_the_door_s_reason(tmp_path: Path) -> None:
    doc = _hand_made()
    doc["energy"]["steps"][1]["samples"] = 2  # schema-valid; the door refuses fewer than 5 samples
    validate(copy.deepcopy(doc))
    for result in (parse(_through_the_door(tmp_path, doc)), parse(doc)):
        entry = result.energy.entry("fp8-current") if result.energy else None
        assert entry is not None and entry.status == "failed" and entry.reason.startswith(REFUSED)
        assert "fp8-current" not in result.energies()
        assert [v.where for v in result.violations] == ["$.energy.steps[1]"]


def test_a_too_fast_model_step_part_parses_as_failed() -> None:
    doc = _hand_made()
    part = next(p for p in doc["model_step"]["parts"] if (p["part"], p["precision"]) == ("layer-first", "bf16"))
    part["ms"] = part["stats"]["median_ms"] = 1e-3  # faster than the GPU's peak: schema-valid, impossible
    part["stats"]["iqr_ms"] = 0.0
    result = parse(doc)
    assert result.model_step is not None and result.model_step.part("layer-first") is None
    got = next(p for p in result.model_step.parts if (p.part, p.precision) == ("layer-first", "bf16"))
    assert got.status == "failed" and got.ms is None and got.reason.startswith(REFUSED)


def test_the_committed_cache_parses_and_its_stuck_reading_is_failed() -> None:
    for path in sorted(CACHE.glob("*--*.json")):
        result = parse(read_document(path))
        assert result.device.name and result.cells
    result = parse(read_document(LLAMA_70B_TP8_H100))
    assert result.energy is not None and "bf16" not in result.energies()
    entry = result.energy.entry("bf16")
    assert entry is not None and entry.status == "failed" and "855 W" in entry.reason


def test_parse_checks_a_document_that_did_not_come_through_the_door() -> None:
    """A run's fresh document (or a test's) goes through the invariants too: no Result skips the door."""
    doc = _hand_made()
    doc["energy"]["steps"][0]["samples"] = 3
    assert parse(doc).energy.entry("bf16").status == "failed"  # type: ignore[union-attr]
    assert doc["energy"]["steps"][0]["status"] == "measured"  # the input itself is not changed


# ------------------------------------------------------------------------- the converted readers
#: Functions of a converted module the scan does not read, each with why: their subscripts are not a
#: result document's (a study file's provenance), or the one bridge to the checked document that
#: :class:`Result` does not type yet.
SCAN_EXCEPTIONS: dict[str, dict[str, str]] = {
    "bench/gemm_bench/report/layout_step.py": {"sweeps": "reads the tp-comm study files, not results"},
    "bench/gemm_bench/report/published_runs.py": {"load": "reads the site's own rows of published runs, not results"},
    "sphinxext/gemm_benchmark/freshness.py": {"_studies": "reads the study files (studies/*.json), not results"},
    "sphinxext/gemm_benchmark/layout_step.py": {"_sweeps": "reads the tp-comm study files, not results"},
}


def _self_attribute(node: ast.expr, name: str) -> bool:
    return (isinstance(node, ast.Attribute) and node.attr == name and isinstance(node.value, ast.Name)
            and node.value.id == "self")


def raw_reads(source: str, keys: frozenset[str] = RESULT_KEYS | BLOCK_KEYS,
              skip: Collection[str] = ()) -> list[tuple[int, str]]:
    """(line, key) of every ``x["key"]``, ``x.get("key")`` and ``.document`` in ``source`` whose key is a
    result document's (or its blocks'): what a converted reader must no longer do.

    Not result reads, so not counted: a Sphinx transform's ``self.document`` and a directive's
    ``self.state.document`` (the page's doctree), a directive's own options (``self.options.get("accuracy")``),
    a docutils node's attributes (``node["device"]``), and the bodies of the functions named in ``skip``
    (:data:`SCAN_EXCEPTIONS`)."""
    tree = ast.parse(source)
    skipped = {id(inner) for fn in ast.walk(tree) if isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef))
               and fn.name in skip for inner in ast.walk(fn)}
    found = []
    for node in ast.walk(tree):
        if id(node) in skipped:
            continue
        key = None
        if isinstance(node, ast.Subscript) and isinstance(node.slice, ast.Constant):
            if not (isinstance(node.value, ast.Name) and node.value.id == "node"):
                key = node.slice.value
        elif (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
              and node.func.attr in ("get", "pop", "setdefault") and node.args
              and isinstance(node.args[0], ast.Constant) and not _self_attribute(node.func.value, "options")):
            key = node.args[0].value
        elif (isinstance(node, ast.Attribute) and node.attr == "document"
              and not (isinstance(node.value, ast.Name) and node.value.id == "self")
              and not _self_attribute(node.value, "state")):
            key = ".document"
        if isinstance(key, str) and (key in keys or key == ".document"):
            found.append((node.lineno, key))
    return sorted(found)


def test_the_scan_sees_a_raw_read() -> None:
    assert raw_reads('doc["model_step"]["parts"]\nx = d.get("energy")\nr.document') == [
        (1, "model_step"), (1, "parts"), (2, "energy"), (3, ".document")]
    assert raw_reads("result.model_step.parts\nentry.energy_mj\nself.document.findall(x)") == []


def test_the_scan_leaves_out_only_what_is_not_a_result_read() -> None:
    """The doctree, a directive's options and a node's attributes are not counted; the same keys read
    from anything else are, and a skipped function hides only its own body."""
    assert raw_reads('self.state.document.set_id(b)\nself.options.get("accuracy", "row")\nnode["device"]') == []
    assert raw_reads('state.document\nopts.get("accuracy")\nself.doc.get("layer")\nnodes["device"]') == [
        (1, ".document"), (2, "accuracy"), (3, "layer"), (4, "device")]
    two = 'def _studies(doc):\n    return doc["device"]\n\n\ndef other(doc):\n    return doc["device"]\n'
    assert raw_reads(two, skip=("_studies",)) == [(6, "device")]
    assert raw_reads(two) == [(2, "device"), (6, "device")]


@pytest.mark.parametrize("module", sorted(SCAN_EXCEPTIONS))
def test_each_scan_exception_names_a_function_of_its_module(module: str) -> None:
    tree = ast.parse((ROOT / module).read_text(encoding="utf-8"))
    defined = {fn.name for fn in ast.walk(tree) if isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef))}
    assert set(SCAN_EXCEPTIONS[module]) <= defined


@pytest.mark.parametrize("module", CONVERTED)
def test_a_converted_reader_reads_no_raw_document(module: str) -> None:
    assert raw_reads((ROOT / module).read_text(encoding="utf-8"), skip=SCAN_EXCEPTIONS.get(module, {})) == []


#: The modules of the report and the extension that read *study* files (``studies/*.json``, each checked at
#: its own door, :func:`gemm_bench.results.studies.register_schema`), or the builder's own records, and no
#: result: the scan's keys (``device``, ``provenance``, ``steps``...) are a study's too, so it cannot judge them.
NOT_RESULT_READERS: dict[str, str] = {
    "bench/gemm_bench/report/study_compare.py": "compares two study files (gemm-bench compare of studies)",
    "bench/gemm_bench/report/loss_difference.py": "reads the loss-parity study's curves",
    "bench/gemm_bench/report/loss_parity_words.py": "words of the loss-parity study",
    "bench/gemm_bench/report/layout_search.py": "reads the layout-search study",
    "sphinxext/gemm_benchmark/study_loss_parity.py": "the loss-parity study's page",
    "sphinxext/gemm_benchmark/study_dynamic_range.py": "the dynamic-range study's page",
    "sphinxext/gemm_benchmark/study_tp_comm.py": "the tp-comm study's page",
    "sphinxext/gemm_benchmark/questions_builder.py": "the questions builder's records of the directives",
}


def test_every_reader_of_the_report_and_the_extension_reads_results_typed() -> None:
    """Issue 43's done-when: "the result types are the one way the report and the extension read a result".
    Not a list of converted modules, which a new module would escape: every module of both, except the
    study readers (each named with why), scans clean."""
    modules = sorted(str(p.relative_to(ROOT)) for folder in ("bench/gemm_bench/report", "sphinxext/gemm_benchmark")
                     for p in (ROOT / folder).glob("*.py"))
    assert set(NOT_RESULT_READERS) <= set(modules) and set(CONVERTED) <= set(modules)
    raw = {m: found for m in modules if m not in NOT_RESULT_READERS
           if (found := raw_reads((ROOT / m).read_text(encoding="utf-8"), skip=SCAN_EXCEPTIONS.get(m, {})))}
    assert raw == {}


# ------------------------------------- each converted reader, handed an invalid document it did not read
def _plan_step(step: str, ms: float) -> dict[str, Any]:
    return {"step": step, "mode": "layer-graphed", "status": "measured", "ms": ms,
            "stats": {"median_ms": ms, "iqr_ms": 0.0}}


def _with_impossible_plan_step() -> dict[str, Any]:
    """A schema-valid document whose mixed plan's step is 1e-9 ms (issue 43: quoted as a 4,968,336,000x
    speedup), never through the door: a reader gets it only as ``Report(doc)`` (a run's fresh result)."""
    doc = _hand_made()
    doc["plan"].update(kind="mixed", steps=[_plan_step("all-bf16", 30.0), _plan_step("all-fp8", 33.0),
                                            _plan_step("plan", 1e-9)])
    validate(copy.deepcopy(doc))
    return doc


def test_the_plan_cannot_quote_a_step_the_door_refused() -> None:
    """``precision_plan`` reads ``report.result.plan``: the 1e-9 ms step is a failed step there, so its
    speedups, its sentence and the page's ``gemm-plan`` roles say why instead of a number. (Read from
    ``report.doc["plan"]``, the raw block, the plan quoted 1e10x all-BF16.)"""
    from gemm_bench.report import precision_plan
    from gemm_bench.report.report import Report
    from gemm_benchmark.records import value_key
    from gemm_benchmark.values import step_detail_values

    doc = _with_impossible_plan_step()
    report = Report(doc)
    assert doc["plan"]["steps"][2]["status"] == "measured"  # the document itself still says measured
    plan = report.result.plan
    assert plan is not None
    vs_bf16, vs_fp8, why = precision_plan.plan_speedups(plan)
    assert (vs_bf16, vs_fp8) == (None, None) and why.startswith(f"the plan's step failed: {REFUSED}"), why
    said = precision_plan.plan_sentence(plan)
    assert "×" not in said and REFUSED in said, said
    assert precision_plan.plan_advice(plan) == ""
    assert precision_plan.plan_step_ms(plan) == {"all-bf16": 30.0, "all-fp8": 33.0}
    out: dict[str, Any] = {}
    step_detail_values(out, report, "fp8-current", "test")
    for item in ("vs-bf16", "vs-fp8"):
        value = out[value_key("gemm-plan", "layer-graphed", "fp8-current", item)]
        assert value.text == "" and REFUSED in value.tooltip, value


def test_the_run_cannot_compose_a_part_or_a_memory_the_door_refused() -> None:
    """``run_answer.run_of`` (and ``layout_memory.recipe_memory``, ``layout_step.result_layout_steps``
    under it) read the typed result: BF16's first layer at 1e-3 ms (faster than the GPU's peak) is a
    failed part, and memory resting on 0.001 bytes of optimizer state per parameter (issue 43: Llama 3
    8B's rank "fit" one H100) is dropped, so the run has neither a step nor a memory to quote. (Read
    from the raw document, the memory was composed and the layer part timed.)"""
    from gemm_bench.question.layout import PRESET_LAYOUTS
    from gemm_bench.report.layout_memory import NO_PARTS, recipe_memory
    from gemm_bench.report.run_answer import run_of

    doc = _hand_made()
    step = doc["model_step"]
    step["state_per_param"] = 0.001
    part = next(p for p in step["parts"] if (p["part"], p["precision"]) == ("layer-first", "bf16"))
    part["ms"] = part["stats"]["median_ms"] = 1e-3
    part["stats"]["iqr_ms"] = 0.0
    validate(copy.deepcopy(doc))
    result = parse(doc)  # a fresh document, checked on the way in
    assert result.config is not None and result.model_step is not None and result.model_step.memory == {}
    layout = PRESET_LAYOUTS["llama3-8b"].layout
    assert recipe_memory(result, result.config, layout) == ([], NO_PARTS)
    run = run_of(result, layout, [])
    assert run.steps is None and run.steps_why == "BF16's parts are missing from this result's model step"
    assert run.memory == {} and run.memory_why == NO_PARTS
    assert run.points(["bf16", "fp8-current"]) == {}


def test_compare_cannot_compare_an_energy_the_door_refused() -> None:
    """``compare`` reads each side's typed result: B's FP8 Current energy from 2 power samples (the door
    refuses fewer than 5) is a failed entry, so the text and the pull request's Markdown say why and flag
    an energy on one side only. (Read from the raw block, B's energy compared as measured, 4.96 J.)"""
    from gemm_bench.report.compare import compare

    doc = _hand_made()
    refused = copy.deepcopy(doc)
    refused["energy"]["steps"][1]["samples"] = 2
    validate(copy.deepcopy(refused))
    comparison = compare(doc, refused)
    change = next(e for e in comparison.energy if e.precision == "fp8-current")
    assert change.a.measured and change.a.energy_mj == 4960.0
    assert not change.b.measured and change.b.energy_mj is None and change.b.tokens_per_j is None
    assert change.b.status.startswith(f"failed: {REFUSED}") and change.flagged, change.b
    assert f"B, FP8 Current: failed: {REFUSED}" in comparison.to_text().replace("\n  ", " ")
    assert "| FP8 Current | 4.96 | - |" in comparison.to_markdown()


def test_the_summary_judges_no_step_the_door_refused() -> None:
    """``summary_answer`` holds each GPU's typed result (``Measured.result``) and checks its steps against
    their GEMMs through ``Report(result)``: FP8 Current's CUDA-graphed step at 1e-3 ms (faster than the
    GPU's peak) is a failed step there, so no contradiction is made of it. (Read from the raw document,
    the summary warned "the step gains 37790.36x but its GEMMs only 1.62x" about a number it never shows.)"""
    from gemm_benchmark.summary_answer import Measured, step_problems
    from tests.fake_beyond import beyond_document

    doc = beyond_document()
    cell = next(c for c in doc["layer"] if (c["precision"], c["mode"]) == ("fp8-current", "layer-graphed"))
    cell["ms"] = cell["stats"]["median_ms"] = 1e-3
    cell["stats"]["iqr_ms"] = 0.0
    validate(copy.deepcopy(doc))
    result = parse(doc)  # a fresh document, checked on the way in
    got = next(c for c in result.layer if (c.precision, c.mode) == ("fp8-current", "layer-graphed"))
    assert got.status == "failed" and got.reason.startswith(REFUSED)
    assert step_problems(Measured("NVIDIA H100 80GB HBM3", result, {})) == []


# ------------------------------------------------------------ the report's core reads the typed result
LLAMA_70B_TP8_H100_GROUP = "prequant attn_out/dgrad"


def _telemetry(text: str) -> str:
    """The telemetry paragraph of a report's text, on one line."""
    return " ".join(text[text.index("telemetry:"):].split())


def test_the_report_quotes_no_group_power_the_door_refused() -> None:
    """Llama 3 70B (TP 8) on the H100, committed: its pre-quantized attention-output Dgrad group holds 2
    power samples whose median, 854.4 W, is its maximum and 1.22x the 700 W limit. Read raw, ``gemm-bench
    report`` said "board power up to 854 W" from it; the door refuses that reading (too few samples, the
    energy's rule), so the report's maximum comes from the readings that stand, and it says how many groups'
    power it refused and why."""
    from gemm_bench.report.report import Report

    checked = read_document(LLAMA_70B_TP8_H100)
    group = next(g for g in parse(checked).groups if g.label == LLAMA_70B_TP8_H100_GROUP)
    assert group.clock is not None and not group.clock.has_power
    assert group.clock.power_refused.startswith(REFUSED + "2 power samples")
    raw = json.loads(LLAMA_70B_TP8_H100.read_text(encoding="utf-8"))
    assert next(g for g in raw["groups"] if g["label"] == LLAMA_70B_TP8_H100_GROUP)["clock"]["power_w_max"] == 854.4
    for doc in (checked, raw):  # a cached result and a document handed over as read: both through the door
        said = _telemetry(Report(doc).to_text())
        assert "board power up to 800 W" in said and "854 W" not in said, said
        assert "board power refused when read in 11 group(s)" in said


def test_a_stuck_group_power_reading_is_refused_at_the_door() -> None:
    """A timed group whose 8 power samples read one value (median = third quartile = maximum) is a stuck
    sensor, as the energy's rule says: the typed group has no power and says why; its clock stays."""
    doc = _hand_made()
    doc["groups"] = [{"label": "autocast qkv", "run_id": doc["run_id"], "mode": "autocast", "rounds": 40,
                      "members": ["bf16"], "converged": False,
                      "clock": {"samples": 8, "sm_clock_mhz_median": 1980.0, "sm_clock_mhz_min": 1965.0,
                                "power_w_median": 739.0, "power_w_q1": 700.0, "power_w_q3": 739.0,
                                "power_w_max": 739.0, "power_source": "instantaneous"}}]
    validate(copy.deepcopy(doc))
    result = parse(doc)
    (group,) = result.groups
    assert group.clock is not None and group.clock.sm_clock_mhz_median == 1980.0
    assert (group.clock.power_w_median, group.clock.power_w_max) == (None, None)
    assert group.clock.power_refused.startswith(REFUSED + "the median power 739.0 W equals the third quartile")
    assert [v.where for v in result.violations] == ["$.groups[0].clock"]
    assert doc["groups"][0]["clock"]["power_w_max"] == 739.0  # the input itself is not changed


def test_a_report_of_a_fresh_document_shows_no_step_the_door_refused() -> None:
    """``Report(doc)`` of a document that did not come through the cache (a run's fresh result) reads the
    typed result: FP8 Current's CUDA-graphed step at 1e-3 ms (faster than the GPU's peak) is a failed step
    with the door's reason. (Before, the report read its layer cells from the raw document: a measured step
    of 1e-3 ms, 37790x BF16's.)"""
    from gemm_bench.report.report import Report
    from tests.fake_beyond import beyond_document

    doc = beyond_document()
    cell = next(c for c in doc["layer"] if (c["precision"], c["mode"]) == ("fp8-current", "layer-graphed"))
    cell["ms"] = cell["stats"]["median_ms"] = 1e-3
    cell["stats"]["iqr_ms"] = 0.0
    validate(copy.deepcopy(doc))
    step = Report(doc).step("fp8-current", graphed=True)
    assert (step.status, step.step_ms, step.speedup_vs_bf16) == ("failed", None, None)
    assert step.reason.startswith(REFUSED)


def test_report_takes_the_result_without_parsing_again(monkeypatch: pytest.MonkeyPatch) -> None:
    """``Report(result)`` reads the typed result it is handed (one parse per read); ``Report(doc)`` parses."""
    from gemm_bench.report import report as report_module

    result = parse(_hand_made())
    calls: list[object] = []
    monkeypatch.setattr(report_module, "parse", lambda doc: calls.append(doc) or result)
    assert report_module.Report(result).result is result and calls == []
    assert report_module.Report(_hand_made()).result is result and len(calls) == 1


def test_the_report_shows_no_peer_time_the_door_refused() -> None:
    """A peer's row faster than the GPU's peak for the format its label names (torch._scaled_mm's FP8
    rowwise QKV Fprop at 0.05 ms: above the H100's dense FP8 peak) is failed with the door's reason, as
    TE's own cells have been since method v2. (Read raw, ``gemm-bench report`` printed it as measured, at
    more than 100% of peak.)"""
    from gemm_bench.report.report import Report
    from tests.fake_beyond import beyond_document

    doc = beyond_document()
    row = next(p for p in doc["peers"] if (p["backend"], p["op"], p["pass"]) == (
        "torch._scaled_mm (FP8 rowwise)", "qkv", "fprop"))
    row["ms"], row["stats"] = 0.05, {"median_ms": 0.05, "iqr_ms": 0.0}
    validate(copy.deepcopy(doc))
    peer = next(p for p in parse(doc).peers if (p.backend, p.op, p.pass_) == (row["backend"], "qkv", "fprop"))
    assert (peer.status, peer.ms, peer.label) == ("failed", None, "FP8 rowwise")
    shown = next(r for r in Report(doc).peers() if (r.backend, r.op, r.pass_) == (row["backend"], "qkv", "fprop"))
    assert (shown.status, shown.ms, shown.pct_of_peak) == ("failed", None, None)
    assert shown.reason.startswith(REFUSED) and "dense FP8 peak" in shown.reason, shown.reason


# ------------------------------- the page's step details, the roles and the report, handed a fresh document
def _with_refused_energy() -> dict[str, Any]:
    """A schema-valid document whose FP8 Current energy rests on 2 power samples (the methodology publishes
    none from fewer than 5; the door demotes it), never through the door: a run's fresh result."""
    doc = _hand_made()
    doc["energy"]["steps"][1]["samples"] = 2
    validate(copy.deepcopy(doc))
    return doc


def test_the_step_details_quote_no_energy_the_door_refused() -> None:
    """The page's energy line (``breakdown_render.energy_nodes``), ``:gemm-energy:`` (``values.energy_values``)
    and ``gemm-bench report`` (``training_text``, text and JSON) read the typed entries: FP8 Current's energy
    from 2 power samples is failed there, said with the door's reason, and no difference from BF16 is
    claimed. (Read from the raw block, each quoted it as measured: "FP8 Current 4.96 J per step (...)",
    the role 4.96 J and "0.73 J less", the report's line and JSON words.)"""
    from gemm_bench.report import training_text
    from gemm_bench.report.report import Report
    from gemm_benchmark.breakdown_render import energy_nodes
    from gemm_benchmark.records import value_key
    from gemm_benchmark.values import step_detail_values

    doc = _with_refused_energy()
    assert doc["energy"]["steps"][1]["status"] == "measured"  # the document itself still says measured
    said = " ".join(" ".join(n.astext() for n in energy_nodes(parse(doc))).split())
    assert "BF16 6 J per step" in said and "4.96" not in said, said
    assert f"FP8 Current energy failed: {REFUSED}" in said and "less" not in said, said
    out: dict[str, Any] = {}
    step_detail_values(out, Report(doc), "fp8-current", "test")
    for item in ("joules", "tokens-per-joule", "vs-bf16"):
        value = out[value_key("gemm-energy", "layer-graphed", "fp8-current", item)]
        assert value.text == "" and f"energy failed: {REFUSED}" in value.tooltip, (item, value)
    text = training_text.text(Report(doc))
    line = next(row for row in text.splitlines() if row.strip().startswith("FP8 Current") and "failed" in row)
    assert f"failed: {REFUSED}" in line and "4.96" not in text[text.index("== Energy per"):]
    data = training_text.to_json(Report(doc))["energy"]
    assert data["steps"][1] == {"precision": "fp8-current", "status": "failed", "reason": data["steps"][1]["reason"]}
    assert data["steps"][1]["reason"].startswith(REFUSED) and set(data["words"]) == {"bf16"}
    assert set(data["vs_bf16"]) == set()


def test_the_step_details_quote_tokens_per_joule_per_gpu() -> None:
    """Issue 43 item 3: Llama 3 70B's file (TP 8) stores each energy's tokens per joule as one rank's (the
    micro-batch's tokens over one GPU's energy). Read through the door, the typed entries hold it per GPU
    (over TP); the role and ``gemm-bench report`` of a result that did not come through the door (a run's
    fresh one, ``Report(doc)``) quote that too. (Read from the raw block: eight times too many tokens/J.)"""
    from gemm_bench.report import training_text
    from gemm_bench.report.report import Report
    from gemm_benchmark.records import value_key
    from gemm_benchmark.values import step_detail_values

    raw = read_document(LLAMA_70B_TP8_H100, raw=True)
    stored = {e["precision"]: e["tokens_per_j"] for e in raw["energy"]["steps"] if e["status"] == "measured"}
    typed = parse(raw).energies()
    precision = "fp8-delayed"
    assert typed[precision].tokens_per_j == pytest.approx(stored[precision] / 8, rel=1e-3)
    out: dict[str, Any] = {}
    step_detail_values(out, Report(raw), precision, "test")
    value = out[value_key("gemm-energy", "layer-graphed", precision, "tokens-per-joule")]
    assert value.text == f"{typed[precision].tokens_per_j:.0f} tokens/J", (value, stored[precision])
    data = training_text.to_json(Report(raw))["energy"]
    entry = next(e for e in data["steps"] if e["precision"] == precision)
    assert entry["tokens_per_j"] == typed[precision].tokens_per_j
    assert f"{typed[precision].tokens_per_j:.0f} tokens/J" in data["words"][precision]


def _with_breakdown_at(factor: float) -> dict[str, Any]:
    """A fresh result whose FP8 Current graphed step's stored parts add up to ``factor`` x its time."""
    from tests.fake_beyond import beyond_document

    doc = beyond_document()
    cell = next(c for c in doc["layer"] if (c["precision"], c["mode"]) == ("fp8-current", "layer-graphed"))
    parts = {"gemm": 0.0, "quantization": 0.0, "attention": 0.0, "elementwise": 0.0, "optimizer": 0.0,
             "other": 0.0, "idle": 0.0}
    parts["gemm"] = round(cell["ms"] * factor * 0.6, 6)
    parts["quantization"] = round(cell["ms"] * factor * 0.4, 6)
    base = next(c for c in doc["layer"] if (c["precision"], c["mode"]) == ("bf16", "layer-graphed"))
    for c, p in ((cell, parts), (base, {**parts, "gemm": base["ms"], "quantization": 0.0})):
        busy = round(sum(p.values()), 6)
        c["breakdown"] = {"step_ms": c["ms"], "parts_ms": p, "busy_ms": busy, "span_ms": busy,
                          "other_kernels": {}, "rounds": 1, "kernels": 2, "source": "test"}
    validate(copy.deepcopy(doc))
    return doc


def test_the_step_details_draw_no_breakdown_that_does_not_add_up() -> None:
    """Issue 43: a breakdown whose parts add up to 1.5x its step was drawn and quoted. The door drops it
    (``LayerCell.breakdown`` is None), so the page's bars, ``:gemm-breakdown:`` and ``gemm-bench report``
    have BF16's bar alone and no FP8 Current sentence. (Read from the raw cells, FP8 Current was drawn
    and its largest change quoted.)"""
    from gemm_bench.report import breakdown_figure, training_text
    from gemm_bench.report.report import Report
    from gemm_benchmark.records import value_key
    from gemm_benchmark.values import step_detail_values

    fine = _with_breakdown_at(1.0)
    assert [b.precision for b in breakdown_figure.bars(parse(fine).layer)] == ["bf16", "fp8-current"]
    doc = _with_breakdown_at(1.5)
    result = parse(doc)
    assert [b.precision for b in breakdown_figure.bars(result.layer)] == ["bf16"]
    assert any(v.where.endswith(".breakdown") for v in result.violations)
    modes = training_text.to_json(Report(doc))["breakdown"]["modes"]
    assert [s["precision"] for s in modes["layer-graphed"]["steps"]] == ["bf16"]
    out: dict[str, Any] = {}
    step_detail_values(out, Report(doc), "fp8-current", "test")
    assert not out[value_key("gemm-breakdown", "layer-graphed", "fp8-current", "more")].available


def test_the_json_report_prints_every_committed_plan_as_stored() -> None:
    """``gemm-bench report --format json`` builds the plan from the typed block (so a refused step is failed);
    on valid data it is the stored block, every field kept. (The typed step once lacked ``measured_at``, and
    the JSON report dropped it.)"""
    from gemm_bench.report.training_text import plan_json

    seen = 0
    for path in sorted(CACHE.glob("*.json")):
        doc = read_document(path)
        plan = parse(doc).plan
        if plan is None:
            continue
        assert plan_json(plan) == doc["plan"], path.name
        seen += 1
    assert seen >= 5


def test_every_committed_breakdown_is_typed_and_reads_back_as_stored() -> None:
    """A step's time breakdown is typed (:class:`Breakdown`, read by the figures and the model step's bars
    through its fields), and a kept one is the stored block, every field."""
    from gemm_bench.results.typed import Breakdown

    seen = 0
    for path in sorted(CACHE.glob("*.json")):
        doc = read_document(path)
        result = parse(doc)
        stored = {(c["mode"], c["precision"], c.get("routing", "balanced")): c.get("breakdown")
                  for c in doc.get("layer", [])}
        for cell in result.layer:
            if cell.breakdown is not None:
                assert isinstance(cell.breakdown, Breakdown)
                assert cell.breakdown.as_mapping() == stored[(cell.mode, cell.precision, cell.routing)], path.name
                seen += 1
        for part in result.model_step.parts if result.model_step is not None else ():
            assert part.breakdown is None or isinstance(part.breakdown, Breakdown)
    assert seen >= 20
