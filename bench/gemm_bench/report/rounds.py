"""How a result's timed groups ended: the rounds rule's outcome, in words, beside the rule.

The stored rule (``provenance.method.rounds_rule``) says what each group aimed for: rounds until
every region's median is known to ``target_ci``, capped at ``repetitions`` rounds or
``max_group_s`` seconds. Most groups of the committed results stopped at a cap (``converged:
false``), so the rule alone read as a promise the numbers did not keep. Every surface that prints
the rule (a page's provenance line, ``gemm-bench report``) says with this one function how many
groups reached the target and where the rest stopped. Pure: reads the typed result
(:class:`~gemm_bench.results.typed.Result`: its method and timed groups) only.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from gemm_bench.results.typed import Result, TimedGroup, parse


def rounds_outcome(result: Result | Mapping[str, Any]) -> str:
    """``"1 of 17 timed groups reached that 1.0%; the other 16 stopped at the 40-round cap"`` (``"none of
    the 17 ...; all stopped at ..."`` when none reached it), or ""
    when the result stores no adaptive rule's outcome (fixed rounds, an earlier method).

    A document (from a reader not yet holding the typed result) is parsed first."""
    typed = result if isinstance(result, Result) else parse(result)
    return groups_outcome(typed.provenance.method, typed.groups)


def groups_outcome(method: Mapping[str, Any], timed: Iterable[TimedGroup]) -> str:
    """:func:`rounds_outcome` of the rule's parameters (``provenance.method``) and the timed groups."""
    groups = [g for g in timed if g.converged is not None]
    target = method.get("target_ci")
    if not groups or not isinstance(target, (int, float)) or target <= 0:
        return ""
    reached = sum(1 for g in groups if g.converged is True)
    total = len(groups)
    if reached == total:
        return f"all {total} timed groups reached that {target:.1%}"
    cap = method.get("repetitions")
    at_cap = sum(1 for g in groups if g.converged is not True and g.rounds == cap)
    by_time = total - reached - at_cap
    ends = []
    if at_cap:
        ends.append(f"the {cap}-round cap" if not by_time else f"{at_cap} at the {cap}-round cap")
    if by_time:
        limit = method.get("max_group_s")
        when = f"the {limit:g} s cap" if isinstance(limit, (int, float)) else "a time cap"
        ends.append(when if not at_cap else f"{by_time} at {when}")
    # "0 of 17 ...; the other 17 stopped" read as a slip: with none reached, say "none" and "all".
    head = (f"none of the {total} timed groups reached that {target:.1%}; all" if not reached else
            f"{reached} of {total} timed groups reached that {target:.1%}; the other {total - reached}")
    where = f"at {ends[0]}" if len(ends) == 1 else f"{ends[0]} and {ends[1]}"  # "stopped, 3 at ... and 2 at ..."
    sep = " " if len(ends) == 1 else ", "
    return f"{head} stopped{sep}{where}, their medians known less closely (each cell's stats hold its spread)"
