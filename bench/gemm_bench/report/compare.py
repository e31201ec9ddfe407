"""Comparing two results of one question: two devices, or two software stacks of one device.

``gemm-bench compare A B`` answers "what changed?" for a reviewer: per GEMM and per total, for
every mode and precision both results measured, the ratio of A's time to B's (above 1: B is
faster). A change is *flagged* only when the two medians differ by more than the spreads the
two runs measured (the sum of their interquartile ranges), so run-to-run noise is not reported
as a regression. Speedups vs BF16 are shown per result and are always computed inside one run
(:class:`gemm_bench.report.report.Report`): a speedup never divides one run's time by another's.

GEMMs are paired by what they are, never by where they sit in a file's list: :func:`gemm_identity`
is the one key (op, pass, M, K, N, groups, mode, precision), so two runs that stored one sweep in
another order compare equal, and a GEMM only one side holds is listed as ``only in A`` or ``only
in B``.

Directories compare file by file (the refresh pull request compares the cache before and after
a merge); a file only one side has is listed as added or removed.

Every string that comes from a result file is escaped where it is shown
(:mod:`gemm_bench.results.untrusted_text`): the text output is one line per row with no
terminal controls, the Markdown (a pull request body) has no markup, HTML or mention of its own.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from gemm_bench.question.precisions import MODE_NAMES, PRECISION_IDS, PRECISIONS
from gemm_bench.question.shapes import OP_NAMES, PASS_NAMES, GemmShape
from gemm_bench.report.report import Cell, Report
from gemm_bench.results.cache import MAX_FILE_BYTES, CacheError, read_document
from gemm_bench.results.schema import ResultError, validate
from gemm_bench.results.untrusted_text import field, markdown

#: Pull-request bodies are limited to 65,536 characters; leave room for the workflow's text.
MARKDOWN_LIMIT = 60_000


class CompareError(ValueError):
    """Two results that cannot be compared (different questions); the message says why."""


@dataclasses.dataclass(frozen=True)
class Change:
    """One GEMM (or a total, ``gemm`` None) in one mode and precision, in A and in B."""

    mode: str
    precision: str
    gemm: str | None  # "op/pass" or None for the per-layer total
    shape: str
    a_ms: float | None
    b_ms: float | None
    #: Combined spread (sum of the two interquartile ranges), ms; None where a side has none.
    spread_ms: float | None
    a_speedup: float | None = None  # vs BF16 inside run A (totals only)
    b_speedup: float | None = None
    #: ``only in A`` / ``only in B``: a GEMM one result holds and the other does not.
    unmatched: str | None = None

    @property
    def ratio(self) -> float | None:
        """A's time over B's: above 1, B is faster."""
        if self.a_ms and self.b_ms:
            return self.a_ms / self.b_ms
        return None

    @property
    def flagged(self) -> bool:
        """The medians differ by more than the runs' measured spread."""
        if self.a_ms is None or self.b_ms is None or self.spread_ms is None:
            return False
        return abs(self.a_ms - self.b_ms) > self.spread_ms

    def to_json(self) -> dict[str, Any]:
        return {"mode": self.mode, "precision": self.precision, "gemm": self.gemm, "shape": self.shape,
                "a_ms": self.a_ms, "b_ms": self.b_ms, "ratio": self.ratio, "spread_ms": self.spread_ms,
                "flagged": self.flagged, "a_speedup_vs_bf16": self.a_speedup, "b_speedup_vs_bf16": self.b_speedup,
                "unmatched": self.unmatched}


def describe_side(doc: dict[str, Any], escape: Callable[[str], str] = field) -> str:
    """Device, stack and date of a result: what a reader needs to know which side is which.

    Each string from the file goes through ``escape`` (one line, no controls; :func:`markdown`
    for a pull request body)."""
    prov = doc["provenance"]
    parts = [doc["device"]["name"], f"TE {prov['transformer_engine']}", f"torch {prov['torch']}",
             f"CUDA {prov['cuda']}", f"driver {prov['driver']}", prov["date"]]
    return " | ".join(escape(str(part)) for part in parts)


def _iqr(stats: dict[str, Any]) -> float | None:
    value = stats.get("iqr_ms")
    return float(value) if isinstance(value, (int, float)) else None


@dataclasses.dataclass
class Comparison:
    a: dict[str, Any]
    b: dict[str, Any]
    modes: list[str]
    precisions: list[str]
    gemms: list[Change]
    totals: list[Change]
    title: str = ""

    @property
    def flagged(self) -> list[Change]:
        return [c for c in (*self.totals, *self.gemms) if c.flagged]

    def to_json(self) -> dict[str, Any]:
        return {
            "question_hash": self.a["question_hash"],
            "a": {"device": self.a["device"]["name"], "provenance": _stack(self.a)},
            "b": {"device": self.b["device"]["name"], "provenance": _stack(self.b)},
            "ratio": "a_ms / b_ms (above 1: B is faster)",
            "flagged_when": "|a_ms - b_ms| > iqr_a + iqr_b",
            "totals": [t.to_json() for t in self.totals],
            "gemms": [g.to_json() for g in self.gemms],
        }

    def to_text(self) -> str:
        lines = [f"A: {describe_side(self.a)}", f"B: {describe_side(self.b)}",
                 "ratio = A ms / B ms (above 1: B faster); ! = change larger than the runs' spread (IQR A + IQR B)"]
        for mode in self.modes:
            lines += ["", f"== {MODE_NAMES[mode]} =="]
            lines.append(f"  {'precision':<14}{'A ms/layer':>12}{'B ms/layer':>12}{'ratio':>8}  "
                         f"{'A vs BF16':>9}{'B vs BF16':>10}")
            for t in (t for t in self.totals if t.mode == mode):
                lines.append(f"  {PRECISIONS[t.precision].display:<14}{_num(t.a_ms, 12, 3)}{_num(t.b_ms, 12, 3)}"
                             f"{_ratio(t, 8)} {_x(t.a_speedup, 9)}{_x(t.b_speedup, 10)}")
            lines.append("")
            lines.append(f"  {'GEMM':<26}{'shape':>22}  {'precision':<13}{'A ms':>10}{'B ms':>10} {'ratio':>8}")
            for g in (g for g in self.gemms if g.mode == mode):
                lines.append(f"  {field(_gemm_name(g.gemm)):<26}{field(g.shape):>22}  "
                             f"{PRECISIONS[g.precision].display:<13}{_num(g.a_ms, 10, 4)}{_num(g.b_ms, 10, 4)}"
                             f" {_ratio(g, 8)}" + (f"  {field(g.unmatched)}" if g.unmatched else ""))
        return "\n".join(lines)

    def to_markdown(self, *, all_gemms: bool = False) -> str:
        """Totals of every mode and precision, then the GEMMs whose change exceeds the spread."""
        out = []
        if self.title:
            out += [f"### {markdown(self.title)}", ""]
        out += [f"- **A**: {describe_side(self.a, markdown)}", f"- **B**: {describe_side(self.b, markdown)}", ""]
        out += ["| mode | precision | A ms/layer | B ms/layer | A/B | A vs BF16 | B vs BF16 |",
                "|---|---|---:|---:|---:|---:|---:|"]
        for t in self.totals:
            out.append(f"| {MODE_NAMES[t.mode]} | {PRECISIONS[t.precision].display} | {_num(t.a_ms, 0, 3)} | "
                       f"{_num(t.b_ms, 0, 3)} | {_ratio(t, 0).strip()} | {_x(t.a_speedup, 0)} | {_x(t.b_speedup, 0)} |")
        shown = self.gemms if all_gemms else [g for g in self.gemms if g.flagged or g.unmatched]
        out.append("")
        if not shown:
            out.append("No GEMM changed by more than the runs' measured spread.")
        else:
            out += [f"GEMMs changed by more than the measured spread, or held by one side only ({len(shown)}):"
                    if not all_gemms else "Every GEMM:", "",
                    "| mode | precision | GEMM | shape | A ms | B ms | A/B |", "|---|---|---|---|---:|---:|---:|"]
            for g in shown:
                ratio = markdown(g.unmatched) if g.unmatched else _ratio(g, 0).strip()
                out.append(f"| {MODE_NAMES[g.mode]} | {PRECISIONS[g.precision].display} | "
                           f"{markdown(_gemm_name(g.gemm))} | {markdown(g.shape)} | {_num(g.a_ms, 0, 4)} | "
                           f"{_num(g.b_ms, 0, 4)} | {ratio} |")
        return "\n".join(out) + "\n"


def _stack(doc: dict[str, Any]) -> dict[str, Any]:
    prov = doc["provenance"]
    return {k: prov[k] for k in ("transformer_engine", "torch", "cuda", "driver", "date")}


def _gemm_name(gemm: str | None) -> str:
    if gemm is None:
        return "per layer"
    op, pass_ = gemm.split("/")
    return f"{OP_NAMES.get(op, op)} {PASS_NAMES.get(pass_, pass_)}"


def _num(value: float | None, width: int, digits: int) -> str:
    return f"{value:>{width}.{digits}f}" if value is not None else f"{'-':>{width}}"


def _x(value: float | None, width: int) -> str:
    return f"{value:>{width - 1}.2f}x" if value is not None else f"{'-':>{width}}"


def _ratio(change: Change, width: int) -> str:
    r = change.ratio
    if r is None:
        return f"{'-':>{width}}"
    return f"{r:>{max(width - 1, 0)}.3f}" + ("!" if change.flagged else " ")


def gemm_identity(mode: str, precision: str, gemm: GemmShape) -> tuple[str, str, int, int, int, int, str, str]:
    """What makes two cells of two results the same measurement: the one pairing key of compare.

    Everything the GEMM is (op, pass, M, K, N, groups) and how it ran (mode, precision); never its
    position in a file's list, which a sweep written in another order changes.
    """
    return (gemm.op, gemm.pass_, gemm.m, gemm.k, gemm.n, gemm.groups, mode, precision)


def _unmatched(ca: Cell | None, cb: Cell | None, a_ms: float | None, b_ms: float | None) -> str | None:
    """``only in A`` / ``only in B`` where one side has no measurement of the GEMM (with the other
    side's status where it holds the cell unmeasured); None where both measured it."""
    if a_ms is not None and b_ms is not None:
        return None
    side, other, other_cell = ("A", "B", cb) if a_ms is not None else ("B", "A", ca)
    return f"only in {side}" + (f" ({other}: {other_cell.status})" if other_cell is not None else "")


def _paired(cells_a: Sequence[Cell], cells_b: Sequence[Cell]) -> list[tuple[Cell | None, Cell | None]]:
    """The cells of A and B paired by :func:`gemm_identity`, in A's order then B's extra ones."""
    by_a = {gemm_identity(c.mode, c.precision, c.gemm): c for c in cells_a}
    by_b = {gemm_identity(c.mode, c.precision, c.gemm): c for c in cells_b}
    return [(by_a.get(key), by_b.get(key)) for key in dict.fromkeys([*by_a, *by_b])]


def compare(a: dict[str, Any], b: dict[str, Any], *, modes: Sequence[str] | None = None,
            precisions: Sequence[str] | None = None, title: str = "") -> Comparison:
    """Compare two validated results of the same question (raises :class:`CompareError`)."""
    if a["question_hash"] != b["question_hash"]:
        raise CompareError(f"the results answer different questions ({a['question_hash']} on "
                           f"{a['device']['name']}, {b['question_hash']} on {b['device']['name']}); "
                           "compare only results of the same question")
    ra, rb = Report(a), Report(b)
    chosen_modes = list(modes) if modes else [m for m in ra.modes if m in rb.modes]
    chosen_precisions = (list(precisions) if precisions else
                         [p for p in PRECISION_IDS if p in ra.precisions and p in rb.precisions])
    gemms: list[Change] = []
    totals: list[Change] = []
    for mode in chosen_modes:
        for precision in chosen_precisions:
            ta, tb = ra.total(mode, precision), rb.total(mode, precision)
            if ta.status != "measured" and tb.status != "measured":
                continue  # e.g. MXFP8 on two Hopper runs: nothing to compare
            cells_a, cells_b = ra.cells(mode, precision), rb.cells(mode, precision)
            spreads = [_iqr(c.stats) for c in (*cells_a, *cells_b)]
            total_spread = sum(s for s in spreads if s is not None) if all(s is not None for s in spreads) else None
            totals.append(Change(mode, precision, None, "", ta.per_layer_ms, tb.per_layer_ms, total_spread,
                                 ta.speedup_vs_bf16, tb.speedup_vs_bf16))
            for ca, cb in _paired(cells_a, cells_b):
                a_ms = ca.ms if ca is not None and ca.status == "measured" else None
                b_ms = cb.ms if cb is not None and cb.status == "measured" else None
                if a_ms is None and b_ms is None:
                    continue
                ia = _iqr(ca.stats) if ca is not None else None
                ib = _iqr(cb.stats) if cb is not None else None
                spread = ia + ib if ia is not None and ib is not None else None
                gemm = (ca or cb).gemm  # type: ignore[union-attr]  # one side at least holds it
                unmatched = _unmatched(ca, cb, a_ms, b_ms)
                gemms.append(Change(mode, precision, f"{gemm.op}/{gemm.pass_}", gemm.label, a_ms, b_ms, spread,
                                    unmatched=unmatched))
    return Comparison(a, b, chosen_modes, chosen_precisions, gemms, totals, title)


@dataclasses.dataclass
class DirectoryComparison:
    """Two caches, file by file: what a refresh pull request changes."""

    compared: list[tuple[str, Comparison]]
    added: list[tuple[str, dict[str, Any]]]
    removed: list[str]
    unreadable: list[CacheError]

    def to_json(self) -> dict[str, Any]:
        return {"changed": [{"file": name, **c.to_json()} for name, c in self.compared],
                "added": [{"file": name, "device": d["device"]["name"], "provenance": _stack(d)}
                          for name, d in self.added],
                "removed": self.removed, "unreadable": [str(e) for e in self.unreadable]}

    def to_text(self) -> str:
        parts = [f"== {field(name)} ==\n{c.to_text()}" for name, c in self.compared]
        parts += [f"added {field(name)}: {describe_side(d)}" for name, d in self.added]
        parts += [f"removed {field(name)}" for name in self.removed]
        parts += [f"unreadable: {field(str(e))}" for e in self.unreadable]
        return "\n\n".join(parts) if parts else "no result changed"

    def to_markdown(self) -> str:
        out = ["## GEMM results changed by this refresh", ""]
        if not (self.compared or self.added or self.removed or self.unreadable):
            return "\n".join([*out, "No result changed.", ""])
        out += ["Ratios are old time / new time (above 1: the new run is faster); a change is listed per GEMM "
                "only when it exceeds the two runs' interquartile ranges combined.", ""]
        if self.added:
            out += ["New results:", ""] + [f"- {markdown(name)}: {describe_side(d, markdown)}"
                                           for name, d in self.added] + [""]
        if self.removed:
            out += ["Removed:", ""] + [f"- {markdown(name)}" for name in self.removed] + [""]
        if self.unreadable:
            out += ["Unreadable (ignored):", ""] + [f"- {markdown(str(e))}" for e in self.unreadable] + [""]
        text = "\n".join(out)
        for index, (_name, comparison) in enumerate(self.compared):
            section = "\n" + comparison.to_markdown()
            if len(text) + len(section) > MARKDOWN_LIMIT:
                rest = [n for n, _ in self.compared[index:]]
                text += (f"\n_{len(rest)} more changed files are not shown (the pull request body has a size limit): "
                         + ", ".join(markdown(n) for n in rest) + "._\n")
                break
            text += section
        return text


def compare_dirs(old: Path, new: Path) -> DirectoryComparison:
    """Every result file whose content differs between ``old`` and ``new``, compared."""
    old_files = {p.name: p for p in sorted(old.glob("*--*.json"))}
    new_files = {p.name: p for p in sorted(new.glob("*--*.json"))}
    compared: list[tuple[str, Comparison]] = []
    added: list[tuple[str, dict[str, Any]]] = []
    unreadable: list[CacheError] = []
    for name, path in new_files.items():
        before = old_files.get(name)
        if before is not None and before.read_bytes() == path.read_bytes():
            continue
        try:
            doc_new = read_document(path)
        except CacheError as exc:
            unreadable.append(exc)
            continue
        if before is None:
            added.append((name, doc_new))
            continue
        try:
            doc_old = read_document(before)
        except CacheError as exc:
            unreadable.append(exc)
            added.append((name, doc_new))
            continue
        compared.append((name, compare(doc_old, doc_new, title=f"{name}")))
    removed = [name for name in old_files if name not in new_files]
    return DirectoryComparison(compared, added, removed, unreadable)


def load_result(path: Path) -> dict[str, Any]:
    """One result file, validated; unlike a cache read it may have any name (a downloaded artifact).

    Raises :class:`CacheError` naming the file.
    """
    try:
        if not path.is_file():  # a device or a FIFO can be endless: never read
            raise CacheError(path, "is not a regular file")
        with path.open("rb") as file:
            data = file.read(MAX_FILE_BYTES + 1)
        if len(data) > MAX_FILE_BYTES:
            raise CacheError(path, f"is more than the {MAX_FILE_BYTES} bytes a result may have")
        doc = json.loads(data.decode("utf-8"))
        return validate(doc)
    except OSError as exc:
        raise CacheError(path, f"cannot be read ({exc.strerror or exc})") from None
    except UnicodeDecodeError:
        raise CacheError(path, "is not UTF-8 text") from None
    except json.JSONDecodeError as exc:
        raise CacheError(path, f"is not valid JSON (line {exc.lineno} column {exc.colno}: {exc.msg})") from None
    except ResultError as exc:
        raise CacheError(path, f"does not match the result schema: {exc}") from None


def dumps_json(value: Any) -> str:
    return json.dumps(value, indent=1)
