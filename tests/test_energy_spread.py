"""Energy per step with its spread: the power samples' quartiles, stored at the refresh, and every
comparison of two recipes' energy judged by the site's one significance rule.

Before, ``doc["energy"]`` held the median of about 15 NVML samples only, and the pages put "14.4 J
against BF16's 22.3 J" side by side with nothing saying whether the difference exceeds the samples'
scatter. The sampler here is a fake (the file of readings the NVML child writes, or its summary); the
committed results (no quartiles, measured before them) must still render, with numbers and no claim.
"""

from __future__ import annotations

import copy
import dataclasses
import json
import re
import statistics
from pathlib import Path
from typing import Any

import pytest

from gemm_bench.measure import telemetry
from gemm_bench.report import energy_compare, training_text
from gemm_bench.report.fastest import Point, overlaps
from gemm_bench.report.report import Report
from gemm_bench.results import energy
from gemm_bench.results.schema import ResultError, validate
from gemm_bench.results.step_error import StepError
from gemm_bench.results.typed import parse
from gemm_benchmark import values
from gemm_benchmark.breakdown_render import energy_nodes
from gemm_benchmark.records import value_key
from tests.test_telemetry import _doc_with_groups, _sampler_over

ROOT = Path(__file__).resolve().parent.parent
DOCS = ROOT / "docs"
#: TE's 5B layer on the H100: the landing page's result, four recipes' energy, no quartiles.
LANDING = DOCS / "_gemm_cache" / "2160d33ec54a347e--h100-80gb-hbm3.json"
TOKENS = 16384


SPREAD_FIELDS = ("power_w_q1", "power_w_q3", "energy_mj_low", "energy_mj_high", "tokens_per_j_low", "tokens_per_j_high")


def _committed() -> dict[str, Any]:
    """The landing result as measured before the quartiles were stored (session 12's last refresh
    stored them: their fields are taken out here), which must still render, with no claim."""
    doc = json.loads(LANDING.read_text(encoding="utf-8"))
    for step in doc["energy"]["steps"]:
        for key in SPREAD_FIELDS:
            step.pop(key, None)
    return doc


def test_every_committed_h100_result_stores_its_energy_spread() -> None:
    """The refresh at 571dbdb measured the quartiles on the H100: every measured step entry has them."""
    for path in sorted((DOCS / "_gemm_cache").glob("*--h100-80gb-hbm3.json")):
        doc = json.loads(path.read_text(encoding="utf-8"))
        for step in (doc.get("energy") or {}).get("steps", []):
            if step.get("status") == "measured":
                assert all(k in step for k in SPREAD_FIELDS), (path.name, step["precision"])


def _ramp(low: float, high: float, n: int = 15) -> list[float]:
    """``n`` power readings evenly from ``low`` to ``high`` W (a window's scatter)."""
    return [low + (high - low) * i / (n - 1) for i in range(n)]


def _entry(precision: str, power: list[float], wall_s: float, steps: int) -> dict[str, Any]:
    """A recipe's entry as the refresh makes it: the sampler's summary of the window, then alone_energy."""
    return energy.alone_energy(precision, telemetry.summarize([1755.0] * len(power), power), wall_s, steps, TOKENS)


def _with_spread() -> dict[str, Any]:
    """The landing result with energy entries measured with quartiles: FP8 Delayed clearly less than
    BF16, FP8 Current within BF16's spread (a larger bare value), FP8 Block clearly more."""
    doc = _committed()
    doc["energy"] = energy.energy_document([
        _entry("bf16", _ramp(690, 710), 0.32, 10),          # 32 ms x 700 W = 22.4 J, quartiles 22.24-22.56
        _entry("fp8-delayed", _ramp(690, 710), 0.32, 16),   # 20 ms: 14.0 J
        _entry("fp8-current", _ramp(690, 710), 0.321, 10),  # 32.1 ms: 22.47 J, inside BF16's spread
        _entry("fp8-block", _ramp(750, 770), 0.32, 10)])    # 24.3 J, above it
    return doc


def _flat(text: str) -> str:
    return " ".join(text.split())


# ------------------------------------------------------------------------------ 1. measured and stored
def _delayed_words() -> tuple[str, str]:
    """FP8 Delayed's energy on the committed landing result as the page writes it: ("15.7 J", the
    "J per step (N tokens/J, W W)" phrase), from its own stored numbers."""
    step = next(e for e in _committed()["energy"]["steps"] if e["precision"] == "fp8-delayed")
    joules = f"{step['energy_mj'] / 1000:.1f} J"
    return joules, f"{joules} per step ({step['tokens_per_j']:.0f} tokens/J, {step['power_w']:.0f} W)"


def test_the_sampler_summary_stores_inclusive_quartiles_and_the_same_median(tmp_path: Path) -> None:
    """The window's readings (the NVML child's file) give the quartiles by the model step's rule
    (inclusive, within the samples); the median is computed as before."""
    power = [701.0, 688.5, 745.2, 699.9, 712.3, 690.0, 730.8, 705.5, 698.1, 720.4, 694.2, 710.0, 703.3, 688.0, 760.1]
    lines = [f"{10 + 0.02 * i:.2f} 1755 {w:.1f}\n" for i, w in enumerate(power)] + ["11.00 1755 100.0\n"]
    block = _sampler_over(tmp_path / "s.txt", lines, (9.99, 10.5)).summary()
    q = statistics.quantiles(power, n=4, method="inclusive")
    assert block["samples"] == 15 and block["power_w_median"] == round(statistics.median(power), 1)
    assert (block["power_w_q1"], block["power_w_q3"]) == (round(q[0], 1), round(q[2], 1))
    assert telemetry.quartiles([650.0]) == (650.0, 650.0)  # one reading is its own spread


def test_an_entry_stores_the_quartiles_and_the_energy_and_tokens_per_joule_bounds() -> None:
    entry = _entry("bf16", _ramp(690, 710), 0.32, 10)
    step_ms = 0.32 * 1000 / 10
    assert (entry["power_w_q1"], entry["power_w_q3"]) == (695.0, 705.0) and entry["power_w"] == 700.0
    assert entry["energy_mj"] == pytest.approx(700.0 * step_ms)  # the median's energy, unchanged
    assert entry["energy_mj_low"] == pytest.approx(695.0 * step_ms)
    assert entry["energy_mj_high"] == pytest.approx(705.0 * step_ms)
    assert entry["tokens_per_j_low"] == pytest.approx(TOKENS / (705.0 * step_ms / 1000), abs=0.05)
    assert entry["tokens_per_j_high"] == pytest.approx(TOKENS / (695.0 * step_ms / 1000), abs=0.05)
    assert energy.energy_bounds(entry) == (entry["energy_mj_low"], entry["energy_mj_high"])
    energy.validate_energy_block(energy.energy_document([entry]))
    assert energy.energy_words(entry) == "22.4 J per step (quartiles 22.2–22.6 J; 731 tokens/J, 700 W)"
    assert "quartiles" in energy.ALONE_RULE


def test_an_older_sampler_without_quartiles_still_gives_a_valid_entry_without_a_spread() -> None:
    entry = energy.alone_energy("bf16", {"power_w_median": 700.0, "power_w_max": 720.0, "samples": 15}, 0.3, 10, 8)
    assert entry["status"] == "measured" and energy.energy_bounds(entry) is None
    assert not set(energy.SPREAD_FIELDS) & set(entry)
    energy.validate_energy_block(energy.energy_document([entry]))
    for stored in _committed()["energy"]["steps"]:  # every committed result: no spread, still valid
        assert energy.energy_bounds(stored) is None


@pytest.mark.parametrize(("spoil", "where"), [
    (lambda e: e.pop("energy_mj_high"), "has part of the spread"),
    (lambda e: e.update(power_w_q1=e["power_w"] + 1), "do not hold the median"),
    (lambda e: e.update(energy_mj_low=e["energy_mj_low"] * 0.9), "energy_mj_low"),
    (lambda e: e.update(tokens_per_j_high=e["tokens_per_j_high"] * 1.1), "tokens_per_j_high"),
    (lambda e: e.update(power_w_q3=float("nan")), "power_w_q3"),
])
def test_a_malformed_spread_is_rejected_naming_its_field(spoil: Any, where: str) -> None:
    block = energy.energy_document([_entry("bf16", _ramp(690, 710), 0.32, 10)])
    spoil(block["steps"][0])
    with pytest.raises(StepError, match=where):
        energy.validate_energy_block(block)


def test_a_group_clock_blocks_quartiles_are_validated() -> None:
    doc = _doc_with_groups()
    doc["groups"][0]["clock"].update(power_w_q1=580.0, power_w_q3=640.0)
    validate(doc)
    for change in ({"power_w_q1": 610.0}, {"power_w_q3": 695.0}):
        bad = copy.deepcopy(doc)
        bad["groups"][0]["clock"].update(change)
        with pytest.raises(ResultError, match=r"\$\.groups\[0\]\.clock\.power_w_q1"):
            validate(bad)
    half = copy.deepcopy(doc)
    half["groups"][0]["clock"].pop("power_w_q3")
    with pytest.raises(ResultError, match="without the other"):
        validate(half)


# ------------------------------------------------------------------------------ 2. compared by one rule
def test_comparisons_use_the_significance_rule_and_claim_nothing_without_a_spread() -> None:
    found = parse(_with_spread()).energies()
    said = energy_compare.against_bf16(found)
    assert {p: c.verdict for p, c in said.items()} == {"fp8-delayed": "less", "fp8-current": "within",
                                                      "fp8-block": "more"}
    # FP8 Current's bare value is above BF16's: the spreads, not the values, decide
    assert found["fp8-current"].energy_mj > found["bf16"].energy_mj
    assert overlaps(energy_compare.energy_point(found["fp8-current"]), energy_compare.energy_point(found["bf16"]))
    assert said["fp8-delayed"].words == "8.4 J less per step, beyond the sampling spread"
    assert said["fp8-current"].words == "within the sampling spread"
    assert said["fp8-block"].words.endswith("J more per step, beyond the sampling spread")
    # no spread on either side: no verdict, whatever the values
    old = parse(_committed()).energies()
    assert {c.verdict for c in energy_compare.against_bf16(old).values()} == {"unknown"}
    mixed = {**found, "fp8-block": old["fp8-block"]}
    assert energy_compare.against_bf16(mixed)["fp8-block"].words == energy_compare.NOT_STORED
    assert energy_compare.energy_point(old["bf16"]) == Point(old["bf16"].energy_mj, None, None)
    assert energy_compare.against_bf16({p: e for p, e in found.items() if p != "bf16"}) == {}


def test_the_pages_energy_line_says_what_the_spread_allows() -> None:
    text = _flat(" ".join(n.astext() for n in energy_nodes(parse(_with_spread()))))
    assert ("Against BF16's energy per step: FP8 Delayed uses 8.4 J less per step, beyond the sampling spread; "
            "FP8 Current is within the sampling spread; FP8 Block uses") in text
    assert "BF16 22.4 J per step (quartiles 22.2–22.6 J;" in text
    # the committed results: the numbers, and no claimed difference
    old = _flat(" ".join(n.astext() for n in energy_nodes(parse(_committed()))))
    assert f"FP8 Delayed {_delayed_words()[1]}" in old
    assert "did not store the power samples' spread" in old and "claims no difference" in old
    assert not re.search(r"\b(less|more) per step\b", old)


def test_the_roles_compare_with_bf16_by_the_same_rule() -> None:
    def quoted(doc: dict[str, Any], precision: str, item: str) -> Any:
        return values.device_values({"autocast": Report(doc)}, "H100", "x")[
            value_key("gemm-energy", "layer-graphed", precision, item)]

    doc = _with_spread()
    assert quoted(doc, "fp8-delayed", "vs-bf16").text == "8.4 J less per step, beyond the sampling spread"
    assert quoted(doc, "fp8-current", "vs-bf16").text == "within the sampling spread"
    assert "quartiles 22.2–22.6 J" in quoted(doc, "bf16", "joules").tooltip
    assert "quartiles" in quoted(doc, "bf16", "tokens-per-joule").tooltip
    assert not quoted(doc, "bf16", "vs-bf16").available  # BF16 against itself is no comparison
    old = _committed()
    assert quoted(old, "fp8-delayed", "vs-bf16").text == energy_compare.NOT_STORED
    assert quoted(old, "fp8-delayed", "joules").text == _delayed_words()[0]  # the numbers still show
    assert "spread was not stored" in quoted(old, "fp8-delayed", "joules").tooltip
    assert "vs-bf16" in values.ENERGY_ITEMS


def test_the_report_prints_and_stores_the_comparison() -> None:
    doc = _with_spread()
    text = _flat(training_text.text(Report(doc)))
    assert _flat(energy_compare.comparison_sentence(parse(doc).energies())) in text
    data = training_text.to_json(Report(doc))["energy"]["vs_bf16"]
    assert {p: v["verdict"] for p, v in data.items()} == {"fp8-delayed": "less", "fp8-current": "within",
                                                         "fp8-block": "more"}
    assert data["fp8-delayed"]["difference_mj"] < 0
    old = _flat(training_text.text(Report(_committed())))
    assert "claims no difference" in old and f"{_delayed_words()[0]} per step" in old
    assert {v["verdict"] for v in training_text.to_json(Report(_committed()))["energy"]["vs_bf16"].values()} == \
        {"unknown"}


# ------------------------------------------------------------------------------ the pages' words
def test_prose_that_sets_two_recipes_energies_side_by_side_quotes_the_comparison() -> None:
    """A paragraph quoting two recipes' joules or tokens per joule of one result also quotes
    ``vs-bf16``, whose words carry the significance rule (a bare "X against BF16's Y" claims a
    difference the committed results cannot support)."""
    role = re.compile(r":gemm-energy:`(\S+) layer-graphed (\S+) (joules|tokens-per-joule|vs-bf16)`")
    checked = 0
    for page in sorted([*DOCS.glob("*.rst"), *DOCS.glob("models/*.rst")]):  # a page per model since round 4
        for paragraph in page.read_text(encoding="utf-8").split("\n\n"):
            found = role.findall(paragraph)
            names = {name for name, _, item in found if item != "vs-bf16"}
            for name in names:
                recipes = {p for n, p, item in found if n == name and item != "vs-bf16"}
                if len(recipes) > 1:
                    checked += 1
                    assert any(n == name and item == "vs-bf16" for n, _, item in found), (page.name, name)
    assert checked >= 7  # the landing page's and the six models' sentences


def test_the_methodology_page_says_what_the_spread_is() -> None:
    page = _flat((DOCS / "methodology.rst").read_text(encoding="utf-8"))
    section = page[page.index("Energy per step ---"):page.index("The model's step ---")]
    for words in ("first and third quartiles of the same samples", "not run-to-run variation",
                  f"one every {energy.SAMPLE_INTERVAL_S * 1000:g} ms over the {energy.ENERGY_WINDOW_S:g} s window",
                  "within the sampling spread", "no difference is claimed", "``vs-bf16``"):
        assert words in section, words


def test_a_window_whose_readings_did_not_settle_claims_no_difference() -> None:
    """Reader pass, session 12: Mixtral 8x22B's FP8 Delayed window on the H100 held one reading over
    half its samples (median = first quartile, far below every other recipe's draw), and the page said
    "13 J less per step, beyond the sampling spread". A window whose quartiles spread over
    UNSETTLED_IQR of its median is shown and not compared."""
    doc = json.loads((DOCS / "_gemm_cache" / "bd92f789991e76d6--h100-80gb-hbm3.json").read_text(encoding="utf-8"))
    found = parse(doc).energies()
    # That window was re-measured (session 13) and settled; the same reading, one sample over half the
    # window, is put back on the re-measured entry: its first quartile at 60% of its median.
    found["fp8-delayed"] = dataclasses.replace(found["fp8-delayed"], power_w_q1=found["fp8-delayed"].power_w * 0.6)
    delayed = found["fp8-delayed"]
    assert delayed.power_w_q3 is not None and delayed.power_w_q1 is not None
    assert (delayed.power_w_q3 - delayed.power_w_q1) / delayed.power_w > energy_compare.UNSETTLED_IQR
    said = energy_compare.against_bf16(found)
    assert said["fp8-delayed"].verdict == energy_compare.UNSETTLED
    assert "did not settle" in said["fp8-delayed"].words and "less per step" not in said["fp8-delayed"].words
    # a settled window of the same result is still judged
    assert said["fp8-current"].verdict in (energy_compare.LESS, energy_compare.MORE, energy_compare.WITHIN)
    # the spread-ramp example: widen a settled window's quartiles past the bound and it is no longer judged
    wide = dataclasses.replace(found["fp8-current"], power_w_q1=found["fp8-current"].power_w * 0.6)
    assert energy_compare.compare(wide, found["bf16"]).verdict == energy_compare.UNSETTLED
