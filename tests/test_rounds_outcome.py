"""The rounds rule's outcome is stated beside the rule (issue 35 item 1).

Every page's provenance said each group timed "until every region's median was known to 1.0%"
while 358 of the 450 committed groups stopped at the 40-round cap (``converged: false``).
"""

from __future__ import annotations

import json
from pathlib import Path

from gemm_bench.report.report import Report
from gemm_bench.report.rounds import groups_outcome, rounds_outcome
from gemm_bench.results.typed import TimedGroup

CACHE = Path(__file__).parent.parent / "docs" / "_gemm_cache"
METHOD = {"target_ci": 0.01, "repetitions": 40, "max_group_s": 10.0}


def _groups(groups: list[dict]) -> list[TimedGroup]:
    """Typed timed groups of the given outcomes (``converged``, ``rounds``)."""
    return [TimedGroup(label=f"group {i}", run_id="r", members=(), **g) for i, g in enumerate(groups)]


def test_the_outcome_counts_groups_and_names_each_cap():
    assert groups_outcome(METHOD, _groups([{"converged": True, "rounds": 12}] * 3)) == \
        "all 3 timed groups reached that 1.0%"
    capped = groups_outcome(METHOD, _groups([{"converged": True, "rounds": 12}, {"converged": False, "rounds": 40}]))
    assert capped.startswith("1 of 2 timed groups reached that 1.0%; the other 1 stopped at the 40-round cap")
    both = groups_outcome(METHOD, _groups([{"converged": False, "rounds": 40}, {"converged": False, "rounds": 23}]))
    assert both.startswith("none of the 2 timed groups reached that 1.0%; all stopped, 1 at the 40-round cap and "
                           "1 at the 10 s cap,"), both


def test_no_outcome_without_an_adaptive_rule():
    assert groups_outcome({"repetitions": 40}, _groups([{"rounds": 40}])) == ""
    assert groups_outcome(METHOD, []) == ""


def test_every_committed_result_states_its_outcome():
    """Before: no surface said that most groups stopped at the cap."""
    reached = total = 0
    for path in sorted(CACHE.glob("*.json")):
        doc = json.loads(path.read_text(encoding="utf-8"))
        text = rounds_outcome(doc)
        # groups timed eagerly (a fixed 10 rounds, issue 34) have no target and record no outcome
        groups = [g for g in doc["groups"] if "converged" in g]
        n = sum(1 for g in groups if g["converged"])
        reached, total = reached + n, total + len(groups)
        assert text.startswith(f"{n} of {len(groups)} timed groups" if 0 < n < len(groups) else
                               f"none of the {len(groups)} timed groups" if not n else "all"), path.name
        # the report wraps at 100 columns: compare the words, not the lines
        assert " ".join(f"rounds: {text}".split()) in " ".join(Report(doc).to_text().split()), path.name
    assert reached < total  # the committed cache holds capped groups: the sentence is needed


def test_report_explains_power_above_the_limit():
    doc = json.loads(next(CACHE.glob("2160d33ec54a347e--h100*.json")).read_text(encoding="utf-8"))
    lines = Report(doc).to_text().splitlines()
    at = next(i for i, line in enumerate(lines) if line.startswith("telemetry:"))
    assert "board power up to" in lines[at]
    assert lines[at + 1].strip().startswith("power samples are instantaneous: the 700 W limit holds on average")
