"""What every comparison of the report shares: its error, the SQNR tolerance, how a side is described
and how the text and Markdown are wrapped.

Why a module of its own: ``gemm-bench compare`` compares results (:mod:`gemm_bench.report.compare`, which
reads them typed) and studies (:mod:`gemm_bench.report.study_compare`, which read their own documents);
both say the same things the same way, and neither may import the other's documents.

Pure: no torch.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence

from gemm_bench.report.report import TEXT_WIDTH, wrap_line
from gemm_bench.results.untrusted_text import field

#: An SQNR change (dB) larger than this is flagged. SQNR is computed from seeded inputs, so a
#: re-measurement on the same stack reproduces it exactly; this leaves room for a new library's
#: rounding while a real change in a recipe's accuracy (several dB) always shows.
SQNR_TOLERANCE_DB = 0.5


class CompareError(ValueError):
    """Two results that cannot be compared (different questions); the message says why."""


#: The software stack a side is described by, in the order it is shown.
STACK_FIELDS: tuple[str, ...] = ("transformer_engine", "torch", "cuda", "driver", "date")


def describe_stack(device: str, stack: Mapping[str, str], escape: Callable[[str], str] = field) -> str:
    """``NVIDIA H100 80GB HBM3 | TE 2.20.2 | torch 2.11 | CUDA 12.9 | driver 580 | 2025-...``: which side
    is which. Each string from a file goes through ``escape`` (one line, no controls; ``markdown`` for a
    pull request body)."""
    parts = [device, f"TE {stack['transformer_engine']}", f"torch {stack['torch']}", f"CUDA {stack['cuda']}",
             f"driver {stack['driver']}", stack["date"]]
    return " | ".join(escape(str(part)) for part in parts)


def sqnr_changed(a_db: float | None, b_db: float | None) -> bool:
    """Two SQNRs (dB) more than :data:`SQNR_TOLERANCE_DB` apart, or one measured and not the other:
    the one rule for a GEMM's SQNR and for a study's."""
    if a_db is None or b_db is None:
        return (a_db is None) != (b_db is None)
    return abs(b_db - a_db) > SQNR_TOLERANCE_DB


def value_rows(rows: Sequence[tuple[str, ...]]) -> list[str]:
    """Rows of a name and its values (A, B and a flag; or one value), in columns as wide as their widest
    entry; where they cannot fit :data:`~gemm_bench.report.report.TEXT_WIDTH` the values go on a line
    of their own under the name. Every string from a file is escaped (:func:`field`)."""
    rows = [tuple(field(str(c)) for c in row) for row in rows]
    if not rows:
        return []
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    if 2 + sum(widths) + 2 * (len(widths) - 1) <= TEXT_WIDTH:
        return [("  " + "  ".join(f"{c:<{w}}" for c, w in zip(row, widths, strict=True))).rstrip() for row in rows]
    out = []
    for row in rows:
        name, values = row[0], list(row[1:])
        flag = values.pop() if len(values) == 3 else ""
        out.append(f"  {name}" + (f"  {flag}" if flag else ""))
        labels = ("A", "B") if len(values) == 2 else ("",)
        out.append("    " + "   ".join(f"{label} {v}".strip() for label, v in zip(labels, values, strict=True)))
    return out


#: What a Markdown line may not start with where a wrapped paragraph continues (it would open a list,
#: a heading, a quote or a table row).
_MARKDOWN_OPENERS = ("-", "+", "*", "#", ">", "|", "=")


def markdown_wrapped(text: str) -> str:
    """Markdown with its prose lines wrapped at :data:`~gemm_bench.report.report.TEXT_WIDTH` (a list item's
    continuation indented under it, a paragraph's flush), so the body reads in a terminal as well as on a
    pull request, where it renders the same. Table rows (``|``) are left whole: a row cannot be wrapped,
    and GitHub renders it as a table. A paragraph whose wrapping would start a line with a Markdown
    marker is left whole too."""
    out = []
    for line in text.split("\n"):
        if len(line) <= TEXT_WIDTH or line.startswith("|"):
            out.append(line)
            continue
        parts = wrap_line(line, 2 if line.startswith("- ") else 0)
        if any(part.lstrip().startswith(_MARKDOWN_OPENERS) or re.match(r"\s*\d+[.)]\s", part) for part in parts[1:]):
            out.append(line)
        else:
            out += parts
    return "\n".join(out)


def wrapped(lines: Sequence[str]) -> str:
    """Lines joined, each wrapped to :data:`~gemm_bench.report.report.TEXT_WIDTH` columns."""
    return "\n".join(part for line in lines for part in wrap_line(line))
