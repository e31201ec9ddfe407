"""Where the model's training step goes (issue 33): each measured part keeps its time breakdown, the
report composes the model step's from them as it composes the step, the page draws it and roles quote
it, and the committed results that carry it add up."""

from __future__ import annotations

import copy
import dataclasses
import json
from pathlib import Path
from typing import Any

import pytest

from gemm_bench.question.precisions import BASELINE
from gemm_bench.report import breakdown_figure
from gemm_bench.report.model_step_breakdown import adds_up, model_bars
from gemm_bench.report.report import Report
from gemm_bench.results.breakdown import check_adds_up
from gemm_bench.results.kernel_kinds import PARTS
from gemm_bench.results.schema import ResultError, validate
from gemm_bench.results.typed import parse
from tests import fake_model_step

REPO = Path(__file__).resolve().parent.parent


def test_every_measured_part_stores_its_breakdown_from_its_profiled_rounds(monkeypatch: pytest.MonkeyPatch,
                                                                           cpu_step: Any) -> None:
    """The fake timer profiles one round per region: a GEMM for half the region's median, a norm for a
    fifth; each part's stored breakdown is those kernels, classified, with the rest idle."""
    fake_te = cpu_step.fake_te
    parts = fake_te.install(monkeypatch)
    block = parts.model_step_block(cpu_step.TINY, ["bf16", "fp8-current"], fake_te.group_timer(rounds=2), "r")
    assert block is not None
    measured = [p for p in block["parts"] if p["status"] == "measured"]
    assert {(p["part"], p["precision"]) for p in measured} >= {
        ("layer-first", "bf16"), ("layer-cached", "fp8-current"), ("embedding", "bf16"), ("head", "bf16"),
        ("optimizer", "bf16")}
    for item in measured:
        bd = item["breakdown"]
        assert bd["step_ms"] == item["ms"] and check_adds_up(bd) is None
        assert bd["parts_ms"]["gemm"] == pytest.approx(item["ms"] * 0.5, rel=1e-3, abs=3e-6)
        assert bd["parts_ms"]["elementwise"] == pytest.approx(item["ms"] * 0.2, rel=1e-3, abs=3e-6)
        assert bd["parts_ms"]["idle"] == pytest.approx(item["ms"] * 0.3, rel=1e-3, abs=3e-6)
    sources = {item["part"]: item["breakdown"]["source"] for item in measured}
    assert "graph replays" in sources["layer-first"] and "eager rounds" in sources["head"]
    assert "eager rounds" in sources["optimizer"]


def test_a_timer_without_kernels_stores_parts_without_breakdowns(monkeypatch: pytest.MonkeyPatch,
                                                                 cpu_step: Any) -> None:
    from gemm_bench.measure.timing import GroupTiming

    fake_te = cpu_step.fake_te
    parts = fake_te.install(monkeypatch)
    timer = fake_te.group_timer(rounds=2)

    def bare(builders: dict[str, Any], graphs: bool, label: str) -> Any:
        result, failures = timer(builders, graphs, label)
        return GroupTiming(result.samples, {}, {}, result.record, result.cross_check), failures

    block = parts.model_step_block(cpu_step.TINY, ["bf16"], bare, "r")
    assert block is not None and not any("breakdown" in p for p in block["parts"])
    doc, _ = cpu_step._document_with_block(monkeypatch)
    doc["model_step"]["parts"] = [{k: v for k, v in p.items() if k != "breakdown"} for p in doc["model_step"]["parts"]]
    validate(doc)
    summary = Report(doc).model_step()
    # measured before: no bars, no guess
    assert summary is not None and model_bars(parse(doc).model_step, summary) == []


def _synthetic(g: int = 8) -> tuple[dict[str, Any], Any]:
    from gemm_bench.question.question import build_question
    from tests.conftest import H100, make_document

    q = build_question(model="llama3-8b")
    q = dataclasses.replace(q, config=dataclasses.replace(q.config, num_microbatches=g))
    doc = make_document(q, device=H100, precisions=("bf16", "fp8-delayed"), modes=("autocast",))
    doc["model_step"] = fake_model_step.model_step_block(q.config, doc["run_id"], ("bf16", "fp8-delayed"),
                                                         breakdowns=True)
    validate(doc)
    return doc, q


@pytest.mark.parametrize("g", [1, 8])
def test_the_model_steps_parts_are_composed_as_its_time_is(g: int) -> None:
    """Per kind of work: G (embedding + head) + L (first + (G - 1) cached) + the optimizer's time at the
    rank's parameters in its larger size's proportions, over G; the parts add up to the table's
    ms per micro-batch exactly."""
    doc, q = _synthetic(g)
    summary = Report(doc).model_step(q.config)
    assert summary is not None
    bars = {b.precision: b for b in model_bars(parse(doc).model_step, summary)}
    assert set(bars) == {"bf16", "fp8-delayed"}
    block, layers = doc["model_step"], q.config.measured_layers
    line = (sorted((p["params"], p["ms"]) for p in block["parts"] if p["part"] == "optimizer"))
    opt_ms = line[0][1] + (line[1][1] - line[0][1]) / (line[1][0] - line[0][0]) * (summary.rank_params - line[0][0])
    ms = {(p["part"], p["precision"]): p["ms"] for p in block["parts"] if p["part"] != "optimizer"}
    for precision, bar in bars.items():
        row = summary.row(precision, g)
        assert row is not None and bar.step_ms == row.ms_per_microbatch
        assert sum(bar.parts.values()) == pytest.approx(row.ms_per_microbatch, rel=1e-6)  # stored to 1 ns
        assert adds_up(bar) is None
        # by hand, from fake_model_step.KERNELS: the layer's GEMM share, the head's, the optimizer's
        layer_gemm = 0.6 if precision == BASELINE else 0.5
        gemm = (g * ms[("head", "bf16")] * 0.7 + layers * layer_gemm * (
            ms[("layer-first", precision)] + (g - 1) * ms[("layer-cached", precision)])) / g
        assert bar.parts["gemm"] == pytest.approx(gemm, rel=1e-4)
        assert bar.parts["optimizer"] == pytest.approx(opt_ms * 0.9 / g, rel=1e-4)
        assert bar.parts["quantization"] == (0.0 if precision == BASELINE else pytest.approx(
            layers * 0.15 * (ms[("layer-first", precision)] + (g - 1) * ms[("layer-cached", precision)]) / g,
            rel=1e-4))


def test_a_part_without_its_breakdown_leaves_its_recipe_without_a_bar() -> None:
    doc, q = _synthetic()
    for item in doc["model_step"]["parts"]:
        if (item["part"], item["precision"]) == ("layer-cached", "fp8-delayed"):
            del item["breakdown"]
    summary = Report(doc).model_step(q.config)
    assert summary is not None
    assert [b.precision for b in model_bars(parse(doc).model_step, summary)] == ["bf16"]
    for item in doc["model_step"]["parts"]:
        if item["part"] == "head":
            del item["breakdown"]
    assert model_bars(parse(doc).model_step, summary) == []


def test_a_parts_breakdown_that_is_not_its_time_is_refused_with_its_path() -> None:
    doc, _ = _synthetic()
    bad = copy.deepcopy(doc)
    bad["model_step"]["parts"][1]["breakdown"]["step_ms"] += 1.0
    with pytest.raises(ResultError) as caught:
        validate(bad)
    assert caught.value.where == "$.model_step.parts[1].breakdown.step_ms"
    bad = copy.deepcopy(doc)
    del bad["model_step"]["parts"][0]["breakdown"]["parts_ms"]["idle"]
    with pytest.raises(ResultError) as caught:
        validate(bad)
    assert caught.value.where == "$.model_step.parts[0].breakdown.parts_ms"


def test_a_bar_whose_parts_do_not_add_up_is_named() -> None:
    bar = breakdown_figure.Bar("fp8-delayed", 10.0, {p: (1.0 if p == "gemm" else 0.0) for p in PARTS})
    assert "add up to 1.000 ms, not its 10.000 ms" in (adds_up(bar) or "")


def test_the_roles_quote_what_the_figures_sentence_says() -> None:
    from gemm_benchmark.model_step_values import MODEL_BREAKDOWN, model_step_values
    from gemm_benchmark.records import value_key

    doc, q = _synthetic()
    report = Report(doc)
    report.config = q.config
    summary = report.model_step()
    assert summary is not None
    bars = model_bars(parse(doc).model_step, summary)
    values = model_step_values(report, "Llama 3 8B on H100")
    said = breakdown_figure.sentence(bars, "fp8-delayed")
    assert said and values[value_key(MODEL_BREAKDOWN, "layer-graphed", "fp8-delayed", "change")].text == said
    _, down = breakdown_figure.changes(*bars)
    assert down is not None
    assert values[value_key(MODEL_BREAKDOWN, "layer-graphed", "fp8-delayed", "less")].text == down.words()
    gemm = values[value_key(MODEL_BREAKDOWN, "layer-graphed", "bf16", "gemm")]
    assert gemm.text == f"{bars[0].parts['gemm']:.2f} ms" and "micro-batch at G = 8" in gemm.tooltip
    assert not values[value_key(MODEL_BREAKDOWN, "layer-graphed", "bf16", "change")].available  # the reference


def test_the_page_draws_the_model_steps_bars_before_the_layers() -> None:
    from docutils import nodes

    from gemm_benchmark.breakdown_render import step_detail_nodes

    doc, q = _synthetic()
    from tests.test_breakdown_render import _cell

    # one layer's bars too, drawn after the model step's: steps a Llama 3 8B layer can take on an H100 (the
    # door refuses a step faster than the GPU's peak: it would not be drawn)
    doc["layer"] = [
        _cell("fp8-current", [("nvjet_q", 0, 20_000_000), ("cast_transpose_kernel", 20_000_000, 21_000_000)], 45.0),
        _cell("bf16", [("nvjet_h", 0, 30_000_000), ("rmsnorm_fwd_tuned_kernel", 30_000_000, 2_000_000)], 34.0)]
    summary = Report(doc).model_step(q.config)
    out = step_detail_nodes(parse(doc), "H100", "bd1", summary)
    raw = [n.astext() for node in out for n in node.findall(nodes.raw)]
    assert len(raw) == 4  # the model step's figure (phone and desktop drawings), then the layer's
    assert "The model&#x27;s step on the H100 per micro-batch (" in raw[0].replace("'", "&#x27;")
    assert "tokens, " in raw[0] and "layers, G = 8, optimizer / G)" in raw[0]
    assert "One layer" not in raw[0] and "One layer" in raw[2]
    sentences = [n.astext() for n in out if "gemm-breakdown-sentence" in n.get("classes", [])]
    assert sentences and sentences[0].startswith("Per micro-batch at G = 8, FP8 Delayed spends ")
    without = step_detail_nodes(parse(doc), "H100", "bd1")  # no model step for the page: the layer's bars alone
    assert len([n for node in without for n in node.findall(nodes.raw)]) == 2


def _committed() -> list[tuple[str, dict[str, Any]]]:
    out = []
    for path in sorted((REPO / "docs" / "_gemm_cache").glob("*.json")):
        doc = json.loads(path.read_text())
        if isinstance(doc.get("model_step"), dict):
            out.append((path.name, doc))
    return out


def test_every_committed_model_step_breakdown_adds_up_to_its_step() -> None:
    """The issue's bound (2%) for the model step, composed at each stored question's G and at G = 1."""
    checked = 0
    for name, doc in _committed():
        report = Report(doc)
        for g in (1, None):
            config = report.config if g is None else dataclasses.replace(report.config, num_microbatches=g)
            summary = report.model_step(config)
            if summary is None:
                continue
            for bar in model_bars(parse(doc).model_step, summary):
                assert adds_up(bar) is None, f"{name}: {adds_up(bar)}"
                checked += 1
        for item in doc["model_step"]["parts"]:
            if "breakdown" in item:
                assert check_adds_up(item["breakdown"]) is None, (name, item["part"], item["precision"])
    assert checked >= 0  # committed results measured before the breakdown carry none (next refresh)


def test_the_gpu_proof_holds_the_composed_kinds_beside_the_real_models(monkeypatch: pytest.MonkeyPatch,
                                                                        capsys: pytest.CaptureFixture[str],
                                                                        cpu_step: Any) -> None:
    """The second method of the model step's breakdown: a real model's profiled kernels per kind, beside
    the same kinds composed from the parts (GPU time only: the composed idle is no real step's)."""
    from gemm_bench.measure.timing import TimerSettings

    fake_te = cpu_step.fake_te
    parts = fake_te.install(monkeypatch)
    out = parts.measure_model(cpu_step.TINY, ["bf16"], TimerSettings(spinup_s=0.0), proof_layers=2,
                              microbatches=(1, 4),
                              real_steps=2, group=fake_te.group_timer())
    proof = out["proof"]["bf16/G4"]
    # fake_te's real step: two overlapping unnamed kernels (4/3 ms of busy time a step, "other")
    assert proof["real_parts_ms"]["other"] == pytest.approx(4 / 3)
    composed = proof["composed_parts_ms"]
    assert composed is not None and set(composed) == set(PARTS) and composed["idle"] == 0.0
    # the fake timer's parts: half GEMM, a fifth norm; composed with the step's weights
    assert composed["gemm"] == pytest.approx(composed["elementwise"] * 2.5, rel=1e-3)  # whole ns per kernel
    assert composed["gemm"] + composed["elementwise"] == pytest.approx(proof["composed_ms"] * 0.7, rel=0.05)
    cpu_step._tool().print_table("tiny", out)
    assert "kinds bf16/G4" in capsys.readouterr().out


def test_the_report_prints_the_model_steps_parts_first_and_its_json_holds_them() -> None:
    from gemm_bench.report.report import TEXT_WIDTH, wrap_line
    from gemm_bench.report.training_text import MODEL_BREAKDOWN, breakdown_lines, breakdowns

    doc, q = _synthetic()
    report = Report(doc)
    report.config = q.config
    lines = [part for line in breakdown_lines(report) for part in wrap_line(line)]
    text = "\n".join(lines)
    assert "the model's step, per micro-batch at G = 8" in text
    assert all(len(line) <= TEXT_WIDTH for line in lines)
    summary = report.model_step()
    assert summary is not None
    bars = model_bars(parse(doc).model_step, summary)
    assert f"{bars[1].step_ms:>8.3f}" in text
    assert (breakdown_figure.sentence(bars, "fp8-delayed") or "?") in " ".join(text.split())
    held = breakdowns(report)[MODEL_BREAKDOWN]
    assert [s["precision"] for s in held["steps"]] == ["bf16", "fp8-delayed"]
    assert held["steps"][0]["parts_ms"] == bars[0].parts
