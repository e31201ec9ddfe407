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
                        "energy_mj", "energy_mj_low", "energy_mj_high", "power_w", "power_w_q1", "power_w_q3"})

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
    "sphinxext/gemm_benchmark/freshness.py": {"_studies": "reads the study files (studies/*.json), not results"},
    "sphinxext/gemm_benchmark/layout_step.py": {"_sweeps": "reads the tp-comm study files, not results"},
    "sphinxext/gemm_benchmark/execution.py": {
        "doc": "DeviceAnswer.doc: the checked document its Result was parsed from, for the timed groups Result "
               "does not type yet (rounds_outcome)"},
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
