"""Comparing two runs of one study on one device, and a study run's report.

``gemm-bench compare`` on two study files (or a cache's ``studies/`` folder) lists the values a reviewer
judges, each against the study's own spread: loss parity per recipe against BF16's seed band (a
verdict that flips, or a final loss that moves by more than the band's width), the dynamic-range study
per case against :data:`~gemm_bench.report.compare_basis.SQNR_TOLERANCE_DB`. ``gemm-bench report`` on a
study file prints its values (:class:`StudyReport`).

Why apart from :mod:`gemm_bench.report.compare`: a study file is not a question's result (its schema is
the study's own, :mod:`gemm_bench.results.studies`), so it is read here as its document, while results
are read only as typed objects (:mod:`gemm_bench.results.typed`) over there.

Pure: no torch.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

from gemm_bench.question.precisions import BASELINE, PRECISIONS
from gemm_bench.report.compare_basis import (
    SQNR_TOLERANCE_DB,
    STACK_FIELDS,
    CompareError,
    describe_stack,
    markdown_wrapped,
    sqnr_changed,
    value_rows,
    wrapped,
)
from gemm_bench.report.report import TEXT_WIDTH, wrap_line
from gemm_bench.results.untrusted_text import field, markdown


def study_stack(doc: dict[str, Any]) -> dict[str, Any]:
    """A study run's software stack (:data:`~gemm_bench.report.compare_basis.STACK_FIELDS`), for JSON."""
    return {k: doc["provenance"][k] for k in STACK_FIELDS}


def study_identity(doc: dict[str, Any]) -> dict[str, Any]:
    """What a study file is, for the JSON of a directory's comparison: the study and its device."""
    return {"study": doc["study"], "device": doc["device"]["name"]}


@dataclasses.dataclass(frozen=True)
class StudyRow:
    """One compared quantity of a study (a recipe's final loss, a case's SQNR), in A and in B."""

    what: str
    a: str
    b: str
    flagged: bool


@dataclasses.dataclass
class StudyComparison:
    """Two runs of one study on one device: the rows a reviewer judges, and how each was judged."""

    a: dict[str, Any]
    b: dict[str, Any]
    rows: list[StudyRow]
    #: How a row is judged (the study's own spread), one sentence.
    rule: str

    @property
    def flagged(self) -> list[StudyRow]:
        return [r for r in self.rows if r.flagged]

    def to_json(self) -> dict[str, Any]:
        return {"study": self.b["study"], "device": self.b["device"]["name"], "a_date": self.a["provenance"]["date"],
                "b_date": self.b["provenance"]["date"], "flagged_when": self.rule,
                "rows": [dataclasses.asdict(r) for r in self.rows]}

    def _shown(self) -> list[StudyRow]:
        """The flagged rows; every row when few (a loss-parity study has one per recipe)."""
        return self.rows if len(self.rows) <= 8 else self.flagged

    def to_text(self) -> str:
        lines = [f"A: {describe_study(self.a)}", f"B: {describe_study(self.b)}", f"! = {self.rule}"]
        lines += value_rows([(r.what, r.a, r.b, "!" if r.flagged else "") for r in self._shown()])
        if not self.flagged:
            lines.append(f"  nothing changed beyond the study's spread ({len(self.rows)} values compared)")
        return wrapped(lines)

    def to_markdown(self, title: str) -> str:
        flagged = self.flagged
        out = [f"### {markdown(title)}", "", f"- **A**: {describe_study(self.a, markdown)}",
               f"- **B**: {describe_study(self.b, markdown)}", "",
               (f"**{len(flagged)} change(s) beyond the study's spread** ({markdown(self.rule)}):" if flagged
                else f"Nothing changed beyond the study's spread ({markdown(self.rule)}; {len(self.rows)} values)."),
               ""]
        shown = self._shown()
        if shown:
            out += ["| what | A | B | changed |", "|---|---:|---:|---|"]
            out += [f"| {markdown(r.what)} | {markdown(r.a)} | {markdown(r.b)} | {'!' if r.flagged else ''} |"
                    for r in shown]
        return markdown_wrapped("\n".join(out)) + "\n"


def describe_study(doc: dict[str, Any], escape: Callable[[str], str] = field) -> str:
    """Device, stack, date and study method of a study run."""
    return (describe_stack(doc["device"]["name"], doc["provenance"], escape)
            + f" | study method v{escape(str(doc['method_version']))}")


def _loss_verdicts(doc: dict[str, Any]) -> tuple[dict[str, tuple[str, float | None, str]], float | None]:
    """Per recipe of a loss-parity run: (verdict against BF16's seed range, final validation loss,
    reason), and the seed range's width (None without one)."""
    from gemm_bench.results import loss_parity_schema as lp

    data = doc["data"]
    band = lp.seed_band(data)
    width = band.high - band.low if isinstance(band, lp.SeedBand) else None
    gaps = lp.gaps(data)
    out = {}
    for pid, recipe in lp.recipes_by_id(data).items():
        loss = recipe.get("final_val_loss") if recipe["status"] == "measured" else None
        verdict = recipe["status"]
        gap = gaps.get(pid, {}).get("val")
        if pid != BASELINE and gap is not None and isinstance(band, lp.SeedBand):
            verdict = "within BF16's seed range" if band.holds(gap.delta) else "beyond BF16's seed range"
        out[pid] = (verdict, loss, recipe.get("reason", ""))
    return out, width


def _loss_what(pid: str) -> str:
    return f"{PRECISIONS[pid].display if pid in PRECISIONS else pid}: final validation loss"


def _loss_rows(a: dict[str, Any], b: dict[str, Any]) -> tuple[list[StudyRow], str]:
    va, width_a = _loss_verdicts(a)
    vb, width_b = _loss_verdicts(b)
    width = max((w for w in (width_a, width_b) if w is not None), default=None)
    rows = []
    for pid in dict.fromkeys([*va, *vb]):
        verdict_a, loss_a, _ = va.get(pid, ("absent", None, ""))
        verdict_b, loss_b, _ = vb.get(pid, ("absent", None, ""))
        moved = (loss_a is not None and loss_b is not None and width is not None and abs(loss_b - loss_a) > width)
        rows.append(StudyRow(_loss_what(pid), _loss_text(loss_a, verdict_a),
                             _loss_text(loss_b, verdict_b), verdict_a != verdict_b or moved))
    rule = ("a recipe whose verdict against BF16's seed range changes, or whose final validation loss moves by more "
            "than the seed range's width"
            + (f" ({width:.4f})" if width is not None else " (no seed range: verdicts only)"))
    return rows, rule


def _loss_text(loss: float | None, verdict: str) -> str:
    return f"{loss:.4f} ({verdict})" if loss is not None else verdict


def _dynamic_range_cells(doc: dict[str, Any]) -> dict[str, tuple[float | None, float | None]]:
    """Each case and recipe of a dynamic-range run: its GEMM output's SQNR in dB over the whole tensor
    and of the median row (None: not measured); the median row is the study's finding, which the whole
    tensor hides (:func:`dynamic_range_finding`)."""
    out: dict[str, tuple[float | None, float | None]] = {}
    for case in doc["data"]["cases"]:
        for pid, result in case["results"].items():
            name = PRECISIONS[pid].display if pid in PRECISIONS else pid
            key = f"{name}: {case['tensor']}, {case['input']}, R={case['ratio']:g}"
            measured = result["status"] == "measured"
            out[key] = ((float(result["gemm"]["whole_db"]) if measured else None),
                        (float(result["gemm"]["row_median_db"]) if measured else None))
    return out


def _dynamic_range_rows(a: dict[str, Any], b: dict[str, Any]) -> tuple[list[StudyRow], str]:
    cells_a, cells_b = _dynamic_range_cells(a), _dynamic_range_cells(b)
    rows = []
    for key in dict.fromkeys([*cells_a, *cells_b]):
        (wa, ma), (wb, mb) = cells_a.get(key, (None, None)), cells_b.get(key, (None, None))
        if wa is None and wb is None:
            continue
        rows.append(StudyRow(f"{key} GEMM SQNR", _whole_and_median(wa, ma), _whole_and_median(wb, mb),
                             sqnr_changed(wa, wb) or sqnr_changed(ma, mb)))
    return rows, (f"a GEMM SQNR (whole tensor or median row) that moves by more than {SQNR_TOLERANCE_DB:g} dB, or is "
                  "measured on one side only")


def _whole_and_median(whole: float | None, median: float | None) -> str:
    """``28.6 dB, median row 0.0 dB``: a case's two SQNRs as a compared value."""
    if whole is None:
        return _db_text(None)
    return f"{_db_text(whole)}, median row {_db_text(median)}"


def _db_text(value: float | None) -> str:
    return f"{value:.1f} dB" if value is not None else "not measured"


#: Per study, the rows its comparison lists and the rule that judges them.
_STUDY_ROWS: dict[str, Callable[[dict[str, Any], dict[str, Any]], tuple[list[StudyRow], str]]] = {
    "loss-parity": _loss_rows,
    "dynamic-range": _dynamic_range_rows,
}


def compare_studies(a: dict[str, Any], b: dict[str, Any]) -> StudyComparison:
    """Two valid runs of one study on one device (raises :class:`CompareError` for two studies)."""
    if a["study"] != b["study"]:
        raise CompareError(f"the files hold different studies ({a['study']}, {b['study']})")
    rows_of = _STUDY_ROWS.get(b["study"])
    if rows_of is None or a["method_version"] != b["method_version"]:
        why = ("another study method version: its numbers are not compared one by one"
               if rows_of is not None else "no per-value comparison for this study")
        return StudyComparison(a, b, [StudyRow("the whole study", a["provenance"]["date"], b["provenance"]["date"],
                                               True)], why)
    rows, rule = rows_of(a, b)
    return StudyComparison(a, b, rows, rule)


def study_values(doc: dict[str, Any]) -> list[tuple[str, str]]:
    """(what, value) of one study run, as its comparison names and shows them: each recipe's final
    loss with its verdict, each dynamic-range case's GEMM SQNR; [] for a study without such values."""
    if doc["study"] == "loss-parity":
        verdicts = _loss_verdicts(doc)[0]
        return [(_loss_what(pid), _loss_text(loss, verdict)) for pid, (verdict, loss, _) in verdicts.items()]
    if doc["study"] == "dynamic-range":
        return [(f"{key} GEMM SQNR", _whole_and_median(whole, median))
                for key, (whole, median) in _dynamic_range_cells(doc).items()]
    if doc["study"] == "tp-comm":
        return [(f"{c['model']} TP {c['tp']} {PRECISIONS[c['precision']].display}", _tp_comm_text(c))
                for c in doc["data"]["cells"]]
    return []


def _tp_comm_text(cell: dict[str, Any]) -> str:
    """One tp-comm cell as its page's row says it: the real step, communication's share, composed / real."""
    if cell["status"] != "measured":
        return f"failed: {field(str(cell.get('reason', '')))}"
    first = cell["regions"]["first"]
    return (f"real {first['real_ms']:.2f} ms, compute {first['compute_ms']:.2f} ms, communication "
            f"{1 - first['compute_ms'] / first['real_ms']:.0%}, composed/real {first['composed_over_real']:.3f}")


@dataclasses.dataclass
class StudyReport:
    """``gemm-bench report`` on a study file: what it is, where the site shows it, and its values."""

    doc: dict[str, Any]

    def to_text(self) -> str:
        name = field(str(self.doc["study"]))
        lines = [f"{name} study: {describe_study(self.doc)}",
                 f"(a study, not a question's result: its page shows it with the gemm-{name} directive; two runs "
                 "compare with gemm-bench compare A B)"]
        if self.doc["study"] == "dynamic-range":  # 100 values: a recipe x R table, as its page draws them
            lines += dynamic_range_table(self.doc)
            return wrapped(lines)
        values = study_values(self.doc)
        lines += value_rows(values) if values else [
            "  no per-value summary for this study; its page shows it"]
        return wrapped(lines)

    def to_json(self) -> dict[str, Any]:
        out = {"study": self.doc["study"], "device": self.doc["device"]["name"], "provenance": study_stack(self.doc),
               "method_version": self.doc["method_version"],
               "values": [{"what": what, "value": value} for what, value in study_values(self.doc)]}
        if self.doc["study"] == "dynamic-range":
            out["finding"] = dynamic_range_finding(self.doc) or None
        return out


#: The two GEMM-output SQNRs of a dynamic-range case the report shows per recipe, as the page's figure
#: draws them: the median row (solid: what an ordinary token keeps) and the whole tensor (dashed).
DYNAMIC_RANGE_ROWS: tuple[tuple[str, str], ...] = (("row_median_db", "median row"), ("whole_db", "whole"))


def _gemm_db(case: dict[str, Any], pid: str, key: str) -> float | None:
    result = case["results"].get(pid)
    if result is None or result["status"] != "measured":
        return None
    return float(result["gemm"][key])


def dynamic_range_table(doc: dict[str, Any]) -> list[str]:
    """A dynamic-range run's GEMM SQNRs as one block per (tensor, input), a column per ratio R and, per
    recipe, a row for the median row and one for the whole tensor (BF16, the ceiling, its median row
    only), as the page's figure draws them; then :func:`dynamic_range_finding`, the sentence that says
    what the two rows show. Before, the report printed the whole tensor only (FP8 Current flat at
    28.5 dB to R = 1e6) and hid the study's finding, the median row's collapse. Ratio columns that do
    not fit :data:`~gemm_bench.report.report.TEXT_WIDTH` go to a second table; recipes the cases do not
    hold (same as another, unsupported) are named under it."""
    data = doc["data"]
    ratios = [float(r) for r in data["ratios"]]
    recipes = {pid: PRECISIONS[pid].display if pid in PRECISIONS else field(pid) for pid in data["recipes"]}
    cells: dict[tuple[str, str], dict[str, dict[str, dict[float, str]]]] = {}
    for case in data["cases"]:
        block = cells.setdefault((field(case["tensor"]), field(case["input"])), {})
        for pid, result in case["results"].items():
            rows = DYNAMIC_RANGE_ROWS[:1] if pid == BASELINE else DYNAMIC_RANGE_ROWS
            for key, _ in rows:
                text = f"{float(result['gemm'][key]):.1f}" if result["status"] == "measured" else "failed"
                block.setdefault(pid, {}).setdefault(key, {})[float(case["ratio"])] = text
    shown = [pid for pid in recipes if any(pid in block for block in cells.values())]
    name_w = max((len(recipes[pid]) for pid in shown), default=0) + 2
    label = 4 + name_w + max(len(words) for _, words in DYNAMIC_RANGE_ROWS)
    heads = [f"{r:g}" for r in ratios]
    width = max([7, *(len(h) + 1 for h in heads)])
    per_table = max(1, (TEXT_WIDTH - label) // width)
    lines = ["  SQNR of the GEMM output in dB per recipe and R, the outliers' magnitude over the rest's (columns):",
             "  median row: the median token's own SQNR; whole: over the whole tensor, which the outliers dominate"]
    for start in range(0, len(ratios), per_table):
        part = ratios[start:start + per_table]
        lines.append(f"{'  R':<{label}}" + "".join(f"{h:>{width}}" for h in heads[start:start + per_table]))
        for (tensor, kind), block in cells.items():
            lines.append(f"  {tensor}, {kind}")
            for pid in (p for p in shown if p in block):
                for n, (key, words) in enumerate(r for r in DYNAMIC_RANGE_ROWS if r[0] in block[pid]):
                    head = f"    {recipes[pid] if n == 0 else '':<{name_w}}{words}"
                    lines.append(f"{head:<{label}}" + "".join(f"{block[pid][key].get(r, '-'):>{width}}" for r in part))
    for pid, entry in data["recipes"].items():
        if entry["status"] == "same-as":
            lines.append(f"  {recipes[pid]}: same as {recipes.get(entry['same_as'], field(entry['same_as']))}")
        elif entry["status"] != "measured":
            lines.append(f"  {recipes[pid]}: {field(entry['status'])} ({field(entry.get('reason', ''))})")
    finding = dynamic_range_finding(doc)
    if finding:
        lines += wrap_line(f"  {finding}")
    return lines


def dynamic_range_finding(doc: dict[str, Any]) -> str:
    """One sentence, computed from a dynamic-range run, on what its whole-tensor SQNR hides: the case
    and low-precision recipe whose median row ends furthest below its whole tensor at the largest R
    ("... FP8 Current's median row falls from 28.5 dB at R = 1 to 0.0 dB at R = 1e+06 (from R = 1e+04
    on) while its whole-tensor SQNR stays at 28.6 dB"), and the recipes whose median row holds in that
    case; or that the two agree within :data:`SQNR_TOLERANCE_DB` in every case. "" without two ratios
    of a measured low-precision recipe. Every number comes from the file."""
    data = doc["data"]
    recipes = [pid for pid, entry in data["recipes"].items() if entry["status"] == "measured" and pid != BASELINE]
    blocks: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for case in data["cases"]:
        blocks.setdefault((case["tensor"], case["input"]), []).append(case)
    worst: tuple[float, tuple[str, str], str] | None = None
    for key, cases in blocks.items():
        cases.sort(key=lambda c: float(c["ratio"]))
        for pid in recipes:
            median, whole = _gemm_db(cases[-1], pid, "row_median_db"), _gemm_db(cases[-1], pid, "whole_db")
            if len(cases) < 2 or median is None or whole is None:
                continue
            if worst is None or whole - median > worst[0]:
                worst = (whole - median, key, pid)
    if worst is None:
        return ""
    gap, (tensor, kind), pid = worst
    name = PRECISIONS[pid].display if pid in PRECISIONS else field(pid)
    cases = blocks[(tensor, kind)]
    first, last = cases[0], cases[-1]
    where = f"with {field(tensor)}, {field(kind)}"
    if gap <= SQNR_TOLERANCE_DB:
        return (f"The median row and the whole tensor agree within {SQNR_TOLERANCE_DB:g} dB at the largest R in "
                f"every case: no recipe's ordinary tokens lose what the whole-tensor SQNR shows (largest gap: "
                f"{name} {where}, {gap:.1f} dB).")
    start = _gemm_db(first, pid, "row_median_db")
    end, whole_end, whole_start = (_gemm_db(last, pid, "row_median_db"), _gemm_db(last, pid, "whole_db"),
                                   _gemm_db(first, pid, "whole_db"))
    below = next((c for c in cases if start is not None and (_gemm_db(c, pid, "row_median_db") or 0.0)
                  < start - SQNR_TOLERANCE_DB), None)
    since = f" (more than {SQNR_TOLERANCE_DB:g} dB below it from R = {float(below['ratio']):g} on)" if below else ""
    steady = whole_start is not None and whole_end is not None and abs(whole_end - whole_start) <= SQNR_TOLERANCE_DB
    held = [PRECISIONS[p].display if p in PRECISIONS else field(p) for p in recipes if p != pid
            and all((_gemm_db(c, p, "row_median_db") or -1e9) >= (_gemm_db(first, p, "row_median_db") or 0.0)
                    - SQNR_TOLERANCE_DB for c in cases)]
    kept = (f"; {' and '.join(held)} keep{'s' if len(held) == 1 else ''} {'its' if len(held) == 1 else 'their'} "
            f"median row within {SQNR_TOLERANCE_DB:g} dB of R = {float(first['ratio']):g} throughout") if held else ""
    return (f"What the whole tensor hides: {where}, {name}'s median row falls from {start:.1f} dB at R = "
            f"{float(first['ratio']):g} to {end:.1f} dB at R = {float(last['ratio']):g}{since}, while its whole-tensor "
            f"SQNR {'stays at' if steady else 'reads'} {whole_end:.1f} dB{kept}.")
