"""The build's check of what prose says about the speedups it quotes: one significance rule.

Two speedups of one quantity whose measured spreads overlap are not told apart by the
measurements (:func:`.values.overlaps`, the rule of the summary's ★ and ≈ and of ``:gains-less:``).
A passage of prose that quotes such a pair must say so ("within the measured spread"); a passage
that says so must quote such a pair. The passage is the text a reader sees as one: a paragraph
with any inline markup in it (bold, emphasis, links), a line block, a list item's paragraph. The
quantity is what the role resolves to, not how it is spelled: two directive names of one
question, or ``te-5b`` and ``te-5b@h100``, are the same numbers. A phrase that denies a tie
("not within the measured spread") does not say there is one.

Pure: the role transform (:mod:`.roles`) finds the passages and the values; this module judges.
"""

from __future__ import annotations

import dataclasses
import re

from docutils import nodes

from gemm_benchmark.records import Value
from gemm_benchmark.values import Point, overlaps

#: How prose says two numbers are not told apart by the measurements.
WITHIN_SPREAD = re.compile(r"within (?:the |its |their |each other['’]s |one another['’]s )?(?:measured )?spread|"
                           r"not (?:clearly|significantly) (?:faster|slower|different)|not told apart|"
                           r"do(?:es)? not tell (?:them|the two|\w+) apart", re.IGNORECASE)
#: A negation just before a tie phrase turns it into its opposite ("is not within the measured spread").
_DENIED = re.compile(r"(?:\bnot|n['’]t|\bnever|\bno longer)\s+(?:\w+\s+){0,2}$", re.IGNORECASE)


@dataclasses.dataclass(frozen=True)
class Quoted:
    """One speedup a role put in a passage: the quantity it is (``key``: role kind, question, device
    slug, mode, GEMM id), its precision, the role's text and the recorded value."""

    key: tuple[str, ...]
    precision: str
    role_text: str
    value: Value

    @property
    def point(self) -> Point | None:
        if self.value.low is None or self.value.high is None:
            return None
        return Point(0.0, self.value.low, self.value.high)


def passage(node: nodes.Node) -> nodes.Element | None:
    """The passage a reader reads a role in: the nearest enclosing element that is neither inline
    markup nor one line of a line block (a paragraph, a line block, a title, a table entry's paragraph)."""
    parent: nodes.Element | None = node.parent
    while parent is not None and isinstance(parent, (nodes.Inline, nodes.line)):
        parent = parent.parent
    return parent


def says_tied(text: str) -> bool:
    """Whether ``text`` says two numbers are within each other's spread (a denial does not count)."""
    text = " ".join(text.split())
    return any(not _DENIED.search(text[:match.start()]) for match in WITHIN_SPREAD.finditer(text))


def significance_problem(text: str, quoted: list[Quoted]) -> str:
    """Whether a passage's words respect the significance of the speedups it quotes ("" when they do).

    Pairs are two different precisions of one quantity, both with a spread (``fastest`` has none of
    its own and is not compared; one number quoted twice is no comparison). One tie phrase covers
    every pair of the passage.
    """
    groups: dict[tuple[str, ...], dict[str, Quoted]] = {}
    for item in quoted:
        groups.setdefault(item.key, {}).setdefault(item.precision, item)
    tied: list[str] = []
    apart: list[str] = []
    for group in groups.values():
        items = [q for q in group.values() if q.point is not None]
        for i, a in enumerate(items):
            for b in items[i + 1:]:
                pa, pb = a.point, b.point
                assert pa is not None and pb is not None
                pair = (f"{a.value.text} ({a.role_text}, spread {pa.low:.2f}–{pa.high:.2f}) and {b.value.text} "
                        f"({b.role_text}, spread {pb.low:.2f}–{pb.high:.2f})")
                (tied if overlaps(pa, pb) else apart).append(pair)
    said = says_tied(text)
    if tied and not said:
        return (f"the paragraph quotes {tied[0]}, which lie within each other's measured spread, but does not "
                "say so (write e.g. \"within the measured spread\")")
    if said and apart and not tied:
        return (f"the paragraph says two speedups are within the measured spread, but the ones it quotes are "
                f"not: {apart[0]}")
    return ""
