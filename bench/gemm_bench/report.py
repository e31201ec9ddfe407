"""The report model: per-GEMM times, TFLOP/s, per-pass sums, totals and speedups vs BF16.

Pure arithmetic over a validated result document; the CLI prints it as text or JSON and the
Sphinx extension renders it as tables, figures and role values. Every number a reader sees is
computed here, once.

Two rules keep those numbers right whatever the file holds:

* The page's question decides what is shown: its GEMMs (order included), its layer count and
  its kind. The file only supplies per-GEMM measurements, so two pages asking for 24 and 48
  layers of one model share a file and still show their own totals.
* A speedup divides two cells of one run only (see :func:`gemm_bench.results.cell_run_id`);
  otherwise it is None, with a reason saying why, never a ratio of two runs' clocks.

Nothing here raises on a document :func:`gemm_bench.results.validate` accepts.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Sequence
from typing import Any

from gemm_bench.precisions import BASELINE, MODE_NAMES, MODES, PRECISION_IDS, PRECISIONS
from gemm_bench.results import KINDS, MAX_LAYERS, cell_run_id, document_gemms, peer_run_id
from gemm_bench.shapes import OP_NAMES, PASS_NAMES, PASSES, GemmShape

Key = tuple[str, str]  # (mode, precision)


@dataclasses.dataclass(frozen=True)
class Cell:
    mode: str
    precision: str
    gemm: GemmShape
    status: str
    ms: float | None
    reason: str
    stats: dict[str, Any]
    #: The run that measured it ("" for a cell the document does not hold).
    run_id: str = ""

    @property
    def tflops(self) -> float | None:
        if self.status != "measured" or not self.ms:
            return None
        return self.gemm.flops / (self.ms * 1e-3) / 1e12


@dataclasses.dataclass(frozen=True)
class Total:
    mode: str
    precision: str
    #: Sum over the layer's GEMMs per pass (None when a GEMM of that pass is not measured).
    pass_ms: dict[str, float | None]
    per_layer_ms: float | None
    model_ms: float | None
    speedup_vs_bf16: float | None
    status: str
    reason: str
    #: Why ``speedup_vs_bf16`` is None ("" when it is a number).
    speedup_reason: str = ""
    #: The one run all of this precision's cells come from, or None (none measured, or several).
    run_id: str | None = None


class Report:
    """A view of one result document for the question a page asked.

    ``gemms``, ``num_layers`` and ``kind`` are the page's (defaults: the document's); ``gemms``
    must be the document's question, in any order, else :class:`ValueError`. ``modes`` and
    ``precisions`` are what was asked, as asked; by default whatever the document holds.
    """

    def __init__(
        self,
        doc: dict[str, Any],
        *,
        gemms: Sequence[GemmShape] | None = None,
        num_layers: int | None = None,
        kind: str | None = None,
        modes: Sequence[str] | None = None,
        precisions: Sequence[str] | None = None,
    ) -> None:
        self.doc = doc
        stored = document_gemms(doc)
        if gemms is None:
            self.gemms = stored
        else:
            self.gemms = list(dict.fromkeys(gemms))
            if set(self.gemms) != set(stored):
                raise ValueError(f"the page asks for {len(self.gemms)} GEMMs that are not the question of "
                                 f"result {doc['question_hash']} ({len(stored)} GEMMs)")
        if num_layers is None:
            num_layers = doc["question"]["num_layers"]
        if isinstance(num_layers, bool) or not isinstance(num_layers, int) or not 1 <= num_layers <= MAX_LAYERS:
            raise ValueError(f"num_layers must be a whole number from 1 to {MAX_LAYERS}, got {num_layers!r}")
        self.num_layers: int = num_layers
        self.kind: str = kind if kind is not None else doc["question"]["kind"]
        if self.kind not in KINDS:
            raise ValueError(f"kind must be one of {', '.join(KINDS)}, got {self.kind!r}")
        held = doc["cells"]
        self.modes = list(dict.fromkeys(modes)) if modes else [m for m in MODES if any(c["mode"] == m for c in held)]
        self.precisions = (list(dict.fromkeys(precisions)) if precisions else
                           [p for p in PRECISION_IDS if any(c["precision"] == p for c in held)])
        unknown = [m for m in self.modes if m not in MODES] + [p for p in self.precisions if p not in PRECISIONS]
        if unknown:
            raise ValueError(f"unknown mode or precision: {', '.join(map(repr, unknown))}")
        by_gemm = {(g.op, g.pass_): g for g in self.gemms}
        self._cells: dict[tuple[str, str, str, str], Cell] = {}
        for raw in held:
            gemm = by_gemm[(raw["op"], raw["pass"])]
            self._cells[(raw["mode"], raw["precision"], raw["op"], raw["pass"])] = Cell(
                raw["mode"], raw["precision"], gemm, raw["status"], raw.get("ms"),
                raw.get("reason", ""), raw.get("stats", {}), cell_run_id(doc, raw),
            )
        self._support: dict[str, Any] = doc.get("support") or {}

    # ------------------------------------------------------------------ lookups
    def cell(self, mode: str, precision: str, gemm: GemmShape) -> Cell:
        """The stored cell; else ``unsupported`` where the registry or the device's recorded
        support says so (with that reason), else ``missing``."""
        found = self._cells.get((mode, precision, gemm.op, gemm.pass_))
        if found is not None:
            return found
        info = PRECISIONS.get(precision)
        if info is not None and not info.has_mode(mode) and mode in info.absent_modes:
            return Cell(mode, precision, gemm, "unsupported", None, info.absent_modes[mode], {})
        verdict = self._support.get(precision)
        if verdict is not None and not verdict["available"]:
            name = info.display if info else precision
            reason = verdict["reason"] or f"{name} is not supported on {self.doc['device']['name']}"
            return Cell(mode, precision, gemm, "unsupported", None, reason, {})
        return Cell(mode, precision, gemm, "missing", None, "not measured in this result", {})

    def cells(self, mode: str, precision: str) -> list[Cell]:
        return [self.cell(mode, precision, g) for g in self.gemms]

    def status(self, mode: str, precision: str) -> tuple[str, str]:
        """Overall status of one (mode, precision): measured only if every GEMM is."""
        cells = self.cells(mode, precision)
        for status in ("unsupported", "failed", "missing"):
            bad = [c for c in cells if c.status == status]
            if bad:
                return status, bad[0].reason
        return "measured", ""

    def missing_cells(self) -> list[tuple[str, str, GemmShape]]:
        return [
            (m, p, g)
            for m in self.modes
            for p in self.precisions
            for g in self.gemms
            if self.cell(m, p, g).status == "missing"
        ]

    def run_ids(self) -> list[str]:
        """The runs the shown cells come from, sorted."""
        return sorted({c.run_id for m in self.modes for p in self.precisions for c in self.cells(m, p) if c.run_id})

    # ------------------------------------------------------------------ speedups
    def _speedup(self, mode: str, precision: str, gemms: list[GemmShape], what: str) -> tuple[float | None, str]:
        """BF16's summed time over ``precision``'s for ``gemms``, only within one run."""
        if not gemms:
            return None, f"the question has no {what}"
        name = PRECISIONS[precision].display
        mine = [self.cell(mode, precision, g) for g in gemms]
        base = [self.cell(mode, BASELINE, g) for g in gemms]
        for label, group in ((name, mine), (PRECISIONS[BASELINE].display, base)):
            bad = next((c for c in group if c.status != "measured" or not c.ms), None)
            if bad is not None:
                return None, f"{label} {what} is {bad.status}: {bad.reason}"
        runs = sorted({c.run_id for c in mine + base})
        if len(runs) != 1:
            return None, (f"BF16 and {name} {what} come from different measurement runs ({', '.join(runs)}); "
                          "a speedup across runs would compare two runs' clocks")
        return sum(c.ms or 0.0 for c in base) / sum(c.ms or 0.0 for c in mine), ""

    def gemm_speedup(self, mode: str, precision: str, gemm: GemmShape) -> float | None:
        """BF16's time for one GEMM over this precision's (same run only)."""
        return self._speedup(mode, precision, [gemm], f"{gemm.op}/{gemm.pass_}")[0]

    def gemm_speedup_reason(self, mode: str, precision: str, gemm: GemmShape) -> str:
        """Why :meth:`gemm_speedup` is None ("" when it is a number)."""
        return self._speedup(mode, precision, [gemm], f"{gemm.op}/{gemm.pass_}")[1]

    def pass_speedup(self, mode: str, precision: str, pass_: str) -> float | None:
        """BF16's time for one pass (Fprop, Dgrad or Wgrad) over this precision's (same run only)."""
        return self._speedup(mode, precision, self._pass_gemms(pass_), PASS_NAMES.get(pass_, pass_))[0]

    def pass_speedup_reason(self, mode: str, precision: str, pass_: str) -> str:
        """Why :meth:`pass_speedup` is None ("" when it is a number)."""
        return self._speedup(mode, precision, self._pass_gemms(pass_), PASS_NAMES.get(pass_, pass_))[1]

    def _pass_gemms(self, pass_: str) -> list[GemmShape]:
        return [g for g in self.gemms if g.pass_ == pass_]

    def find_gemm(self, text: str) -> GemmShape:
        """A GEMM named ``op/pass`` (``mlp_up/fprop``) or by its ``MxKxN`` label."""
        text = text.strip()
        for g in self.gemms:
            if text in (f"{g.op}/{g.pass_}", f"{g.op}.{g.pass_}", g.label, g.op):
                return g
        raise KeyError(text)

    # ------------------------------------------------------------------ totals
    def total(self, mode: str, precision: str) -> Total:
        cells = self.cells(mode, precision)
        status, reason = self.status(mode, precision)
        pass_ms: dict[str, float | None] = {}
        for pass_ in PASSES:
            chosen = [c for c in cells if c.gemm.pass_ == pass_]
            if chosen:
                pass_ms[pass_] = (sum(c.ms or 0.0 for c in chosen)
                                  if all(c.status == "measured" for c in chosen) else None)
        per_layer = sum(c.ms or 0.0 for c in cells) if status == "measured" else None
        model = per_layer * self.num_layers if per_layer is not None else None
        if precision == BASELINE:
            speedup, why = (1.0, "") if per_layer is not None else (None, f"BF16 is {status}: {reason}")
        else:
            speedup, why = self._speedup(mode, precision, self.gemms, "GEMMs")
        runs = {c.run_id for c in cells if c.run_id}
        return Total(mode, precision, pass_ms, per_layer, model, speedup, status, reason, why,
                     runs.pop() if len(runs) == 1 else None)

    def totals(self) -> list[Total]:
        return [self.total(m, p) for m in self.modes for p in self.precisions]

    # ------------------------------------------------------------------ output
    def to_json(self) -> dict[str, Any]:
        """The ``gemm-bench report --json`` object: the page's question, each value's run id."""
        doc = self.doc
        prov = doc["provenance"]
        return {
            "question_hash": doc["question_hash"],
            "kind": self.kind,
            "device": {
                "name": doc["device"]["name"],
                "compute_capability": doc["device"]["compute_capability"],
            },
            "provenance": {
                "torch": prov["torch"],
                "transformer_engine": prov["transformer_engine"],
                "cuda": prov["cuda"],
                "driver": prov["driver"],
                "date": prov["date"],
                "method": prov["method"],
            },
            "num_layers": self.num_layers,
            "run_ids": self.run_ids(),
            "notes": doc.get("notes", []),
            "cells": [
                {
                    "mode": c.mode,
                    "precision": c.precision,
                    "op": c.gemm.op,
                    "pass": c.gemm.pass_,
                    "m": c.gemm.m,
                    "k": c.gemm.k,
                    "n": c.gemm.n,
                    "groups": c.gemm.groups,
                    "status": c.status,
                    "ms": c.ms,
                    "tflops": c.tflops,
                    "reason": c.reason or None,
                    "run_id": c.run_id or None,
                }
                for m in self.modes
                for p in self.precisions
                for c in self.cells(m, p)
            ],
            "totals": [
                {
                    "mode": t.mode,
                    "precision": t.precision,
                    "status": t.status,
                    "pass_ms": t.pass_ms,
                    "per_layer_ms": t.per_layer_ms,
                    "model_ms": t.model_ms,
                    "speedup_vs_bf16": t.speedup_vs_bf16,
                    "speedup_reason": t.speedup_reason or None,
                    "run_id": t.run_id,
                }
                for t in self.totals()
            ],
            "peers": [{**peer, "run_id": peer_run_id(doc, peer)} for peer in doc.get("peers", [])],
        }

    def to_text(self) -> str:
        return "\n".join(self._text_lines())

    def _text_lines(self) -> Iterable[str]:
        doc = self.doc
        dev, prov = doc["device"], doc["provenance"]
        yield (
            f"{dev['name']} (sm_{dev['compute_capability'].replace('.', '')}) | driver {prov['driver']}"
            f" | CUDA {prov['cuda']} | torch {prov['torch']} | TE {prov['transformer_engine']}"
            f" | {prov['date']}"
        )
        yield f"method: {describe_method(prov['method'])}"
        for note in doc.get("notes", []):
            yield f"note: {note}"
        for mode in self.modes:
            yield ""
            yield f"== {MODE_NAMES[mode]} =="
            runs = sorted({c.run_id for p in self.precisions for c in self.cells(mode, p) if c.run_id})
            if runs:
                yield f"run: {', '.join(runs)}"
            measured = [p for p in self.precisions if self.status(mode, p)[0] == "measured"]
            for pass_ in PASSES:
                gemms = [g for g in self.gemms if g.pass_ == pass_]
                if not gemms:
                    continue
                yield ""
                header = f"{PASS_NAMES[pass_]:<18}{'shape (MxKxN)':>26}"
                for p in measured:
                    header += f" | {PRECISIONS[p].display + ' ms':>15}{'TFLOP/s':>9}"
                    if p != BASELINE:
                        header += f"{'x':>7}"
                yield header
                for g in gemms:
                    line = f"  {OP_NAMES.get(g.op, g.op):<16}{g.label:>26}"
                    for p in measured:
                        c = self.cell(mode, p, g)
                        line += f" | {c.ms or 0.0:>15.4f}{c.tflops or 0.0:>9.1f}"
                        if p != BASELINE:
                            s = self.gemm_speedup(mode, p, g)
                            line += f"{s:>6.2f}x" if s else f"{'-':>7}"
                    yield line
                line = f"  {'sum':<16}{'':>26}"
                for p in measured:
                    line += f" | {self.total(mode, p).pass_ms.get(pass_) or 0.0:>15.4f}{'':>9}"
                    if p != BASELINE:
                        line += f"{'':>7}"
                yield line
            yield ""
            layers = self.num_layers
            whole = f"model ({layers} layers)" if self.kind == "model" else "all shapes"
            for p in self.precisions:
                t = self.total(mode, p)
                name = PRECISIONS[p].display
                if t.status != "measured" or t.per_layer_ms is None or t.model_ms is None:
                    yield f"  {name:<12} {t.status}: {t.reason}"
                    continue
                if p == BASELINE:
                    vs = ""
                elif t.speedup_vs_bf16 is not None:
                    vs = f"  {t.speedup_vs_bf16:.2f}x vs BF16"
                else:
                    vs = f"  (no speedup vs BF16: {t.speedup_reason})"
                passes = ", ".join(f"{PASS_NAMES[k]} {v:.3f}" for k, v in t.pass_ms.items() if v is not None)
                yield (f"  {name:<12} per layer {t.per_layer_ms:9.3f} ms ({passes})"
                       f" | {whole} {t.model_ms:9.2f} ms{vs}")
        peers = doc.get("peers", [])
        if peers:
            yield ""
            yield "== PyTorch-native peers (context; not in TE totals) =="
            for peer in peers:
                if peer["status"] == "measured":
                    yield f"  {peer['backend']:<32} {peer['op']}/{peer['pass']:<6} {peer['ms']:.4f} ms"
                else:
                    yield f"  {peer['backend']:<32} {peer['op']}/{peer['pass']:<6} {peer['status']}: {peer['reason']}"


def describe_method(method: dict[str, Any]) -> str:
    """One line saying how the numbers were taken (shown in the CLI and on every page)."""
    name = method.get("timer", "?")
    parts = [f"{name}"]
    if "warmup_s" in method:
        parts.append(f"warm-up {method['warmup_s']} s")
    if "repetitions" in method:
        parts.append(f"{method['repetitions']} timed repetitions x {method.get('launches_per_repetition', 1)} launches")
    if method.get("l2_flush"):
        parts.append("L2 flushed between launches")
    if method.get("interleaved"):
        parts.append("precisions interleaved round by round")
    parts.append(f"statistic: {method.get('statistic', 'median')}")
    return ", ".join(parts)
