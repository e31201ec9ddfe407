"""Issue 33 on the site: the breakdown, plan and energy under a model's step, and the roles quoting them.

The H100 run committed under ``measurements/`` gives real blocks; a fake plan and energy block (as the
refresh stores them: ``tests/test_step_extras.py``) are added where that run kept them apart.
"""

from __future__ import annotations

import gzip
import json
from pathlib import Path
from typing import Any

import pytest
from docutils import nodes

from gemm_bench.report import breakdown_figure
from gemm_bench.report.report import Report
from gemm_bench.results import energy
from gemm_bench.results.typed import parse
from gemm_benchmark import values
from gemm_benchmark.breakdown_render import step_detail_nodes
from gemm_benchmark.records import value_key
from gemm_benchmark.roles import ROLES

RUN = Path(__file__).parent.parent / "measurements" / "2026-11-25-session10" / "h100-breakdown"


def _doc() -> dict[str, Any]:
    doc = json.loads(gzip.decompress((RUN / "gpt-oss-120b.json.gz").read_bytes()))
    plan = json.loads((RUN / "gpt-oss-120b-plan-fp8-delayed.json").read_text(encoding="utf-8"))
    doc["plan"] = {**plan, "steps": [c for c in plan["steps"] if c["mode"] == "layer-graphed"]}
    doc["energy"] = energy.energy_document([
        energy.alone_energy("bf16", {"power_w_median": 715.8, "samples": 49}, 1.0, 75, 8192),
        energy.alone_energy("fp8-delayed", {"power_w_median": 563.5, "samples": 52}, 1.0, 53, 8192)])
    return doc


def test_the_step_detail_shows_bars_sentence_plan_code_and_energy() -> None:
    out = step_detail_nodes(parse(_doc()), "H100", "bd1")
    text = "\n".join(n.astext() for n in out)
    assert 'aria-label="One layer’s step (CUDA-graphed) on the H100, not the model’s step' in text.replace(
        "'", "’").replace("&#x27;", "’")
    assert "keeps MLP up and MLP down in BF16" in text and "te.autocast(enabled=False)" in text
    assert "1.00× all-BF16 and 1.45× all-FP8" in text
    assert "Energy per CUDA-graphed layer step" in text and "BF16 9.54 J per step" in text
    assert any(isinstance(n, nodes.literal_block) for n in out)


def test_a_result_without_the_blocks_shows_nothing_quietly() -> None:
    doc = _doc()
    for key in ("plan", "energy"):
        doc.pop(key)
    for cell in doc["layer"]:
        cell.pop("breakdown", None)
    assert step_detail_nodes(parse(doc), "H100", "bd1") == []


def test_the_roles_quote_what_the_page_shows() -> None:
    doc = _doc()
    out = values.device_values({"autocast": Report(doc)}, "H100", "oss")
    # This run's BF16 graphed breakdown adds up to 2.5% more than its step (the bound is 2%): the door drops
    # it, so the page draws no BF16 bar and says why, and no role quotes a change against it (read raw, the
    # page and the roles quoted "FP8 Current spends ..." against it). The other recipes' parts are quoted.
    assert [v.where for v in Report(doc).result.violations] == ["$.layer[4].breakdown"]
    bars = {b.precision: b for b in breakdown_figure.bars(parse(doc).layer)}
    assert "bf16" not in bars and "fp8-current" in bars
    change = out[value_key("gemm-breakdown", "layer-graphed", "fp8-current", "change")]
    assert not change.available and "breakdown of BF16 refused when read: the time breakdown parts add up to " \
        "13.5325 ms for a step of 13.1987 ms (+2.5%; bound 2%)" in change.tooltip, change
    assert not out[value_key("gemm-breakdown", "layer-graphed", "bf16", "idle")].available
    gemm = out[value_key("gemm-breakdown", "layer-graphed", "fp8-current", "gemm")]
    assert gemm.text == f"{bars['fp8-current'].parts['gemm']:.2f} ms"
    page = " ".join(n.astext() for n in step_detail_nodes(parse(doc), "H100", "bd1"))
    assert "BF16's breakdown is not drawn, refused when read: the time breakdown parts add up to" in page
    assert "spends" not in page
    assert out[value_key("gemm-plan", "layer-graphed", "fp8-delayed", "kept")].text == "MLP up and MLP down"
    assert out[value_key("gemm-plan", "layer-graphed", "fp8-delayed", "vs-fp8")].text == "1.45×"
    assert not out[value_key("gemm-plan", "layer-graphed", "fp8-current", "kept")].available
    assert out[value_key("gemm-energy", "layer-graphed", "bf16", "joules")].text == "9.54 J"
    # per GPU, as the door computes it: the question's 4,096 tokens (the fake entry was stored with 8,192)
    assert energy.tokens_per_gpu(doc["question"]["config"]) == 4096
    assert out[value_key("gemm-energy", "layer-graphed", "bf16", "tokens-per-joule")].text == "429 tokens/J"
    missing = out[value_key("gemm-energy", "layer-graphed", "fp8-block", "joules")]
    assert not missing.available and values.NOT_IN_RESULT in missing.tooltip


@pytest.mark.parametrize("role", ["gemm-breakdown", "gemm-plan", "gemm-energy"])
def test_the_new_roles_are_in_the_roles_table_with_their_words(role: str) -> None:
    spec = ROLES[role]
    assert spec.items and spec.example.split()[1] == "layer-graphed" and spec.example.split()[-1] in spec.items


@pytest.mark.sphinx("html", testroot="basic", srcdir="step-detail-roles")
def test_the_new_roles_warn_at_their_line_and_read_n_a_without_the_blocks(app: Any, real_result: Any,
                                                                          warning: Any) -> None:
    """A result measured before the breakdown, plan and energy (the committed cache until the next
    refresh): a role quoting them is a warning saying so; a wrong word or mode is caught at the role."""
    real_result(Path(app.srcdir) / "_gemm_cache", "h100-te-guide-5b.json")
    index = Path(app.srcdir) / "index.rst"
    index.write_text(index.read_text(encoding="utf-8") + (
        "\n\nQuantization takes :gemm-breakdown:`te-5b-h100 layer-graphed fp8-current quantization`.\n\n"
        "Bad word :gemm-plan:`te-5b-h100 layer-graphed fp8-current sideways`.\n\n"
        "Bad mode :gemm-energy:`te-5b-h100 layer bf16`.\n"), encoding="utf-8")
    app.build()
    said = warning.getvalue()
    assert "breakdown not measured in this result" in said
    assert "unknown 'sideways'; choose from kept, vs-bf16, vs-fp8" in said
    assert "CUDA-graphed step only: use layer-graphed, not 'layer'" in said


def test_the_methodology_page_states_every_rule_and_parameter() -> None:
    """The page explains the classification with the rules' own words, and the numbers of the method
    are the code's (a constant changed without the page fails here)."""
    from gemm_bench.results import breakdown
    from gemm_bench.results.kernel_kinds import RULES

    page = " ".join((Path(__file__).parent.parent / "docs" / "methodology.rst").read_text(encoding="utf-8").split())
    for rule in RULES:
        assert " ".join(rule.why.split()) in page, rule.why
    assert f"within {breakdown.ADDS_UP_WITHIN:.0%}" in page and f"below {breakdown.MIN_SCALE:g}" in page
    assert f"for {energy.ENERGY_WINDOW_S:g} s" in page and f"every {energy.SAMPLE_INTERVAL_S * 1000:g} ms" in page
    assert f"Fewer than {energy.MIN_ENERGY_SAMPLES} samples" in page


def test_power_above_the_boards_limit_is_explained_where_the_energy_shows() -> None:
    """Issue 35: the energy lines read "748 W", "771 W" on a 700 W H100 without a word. The line says
    why, with the sentence the report's telemetry line uses (one function), and only when it is so."""
    cache = Path(__file__).parent.parent / "docs" / "_gemm_cache"
    doc = json.loads(next(cache.glob("2160d33ec54a347e--h100*.json")).read_text(encoding="utf-8"))
    found = parse(doc).energies()
    assert max(e.power_w for e in found.values()) > float(doc["device"]["power_limit_w"])
    said = energy.power_above_limit(doc["device"], 771.4, ["instantaneous"])
    assert said.startswith("power samples are instantaneous: the 700 W limit holds on average")
    text = " ".join(n.astext() for n in step_detail_nodes(parse(doc), "H100", "bd1"))
    assert f"W). {said[0].upper()}{said[1:]}." in text
    # the report's telemetry note is the same sentence (the report wraps at 100 columns: compare words)
    assert said in " ".join(Report(doc).to_text().split())
    hot = next(p for p, e in found.items() if e.power_w > 700)
    tip = values.device_values({"autocast": Report(doc)}, "H100", "x")[
        value_key("gemm-energy", "layer-graphed", hot, "joules")].tooltip
    assert "limit holds on average" in tip
    # within the limit, or an averaged reading, or no limit stored: nothing to explain
    for entry in doc["energy"]["steps"]:
        entry["power_w"] = 650.0
    assert "instantaneous" not in " ".join(n.astext() for n in step_detail_nodes(parse(doc), "H100", "bd1"))
    assert energy.power_above_limit(doc["device"], 771.4, ["averaged"]) == ""
    assert energy.power_above_limit({"power_limit_w": "[N/A]"}, 771.4, ["instantaneous"]) == ""
    assert energy.power_above_limit({}, 771.4, ["instantaneous"]) == ""
