"""The report model: per-GEMM times, TFLOP/s, per-pass sums, totals and speedups vs BF16.

Pure arithmetic over a validated result document; the CLI prints it as text or JSON and the
Sphinx extension renders it as tables, figures and role values. Every number a reader sees is
computed here, once.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Sequence
from typing import Any

from gemm_bench.precisions import BASELINE, MODE_NAMES, MODES, PRECISION_IDS, PRECISIONS
from gemm_bench.results import document_gemms
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


class Report:
    """A view of one result document for chosen modes and precisions."""

    def __init__(
        self,
        doc: dict[str, Any],
        *,
        modes: Sequence[str] | None = None,
        precisions: Sequence[str] | None = None,
        num_layers: int | None = None,
    ) -> None:
        self.doc = doc
        self.gemms = document_gemms(doc)
        self.num_layers = num_layers or doc["question"]["num_layers"]
        self.kind = doc["question"]["kind"]
        # What was asked for, as asked; by default whatever the document holds, in registry order.
        self.modes = list(modes) if modes else [m for m in MODES if any(c["mode"] == m for c in doc["cells"])]
        self.precisions = (list(precisions) if precisions else
                           [p for p in PRECISION_IDS if any(c["precision"] == p for c in doc["cells"])])
        by_gemm = {(g.op, g.pass_): g for g in self.gemms}
        self._cells: dict[tuple[str, str, str, str], Cell] = {}
        for raw in doc["cells"]:
            gemm = by_gemm[(raw["op"], raw["pass"])]
            self._cells[(raw["mode"], raw["precision"], raw["op"], raw["pass"])] = Cell(
                raw["mode"], raw["precision"], gemm, raw["status"], raw.get("ms"),
                raw.get("reason", ""), raw.get("stats", {}),
            )

    # ------------------------------------------------------------------ lookups
    def cell(self, mode: str, precision: str, gemm: GemmShape) -> Cell:
        found = self._cells.get((mode, precision, gemm.op, gemm.pass_))
        if found is None:
            return Cell(mode, precision, gemm, "missing", None, "not measured in this result", {})
        return found

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

    # ------------------------------------------------------------------ totals
    def total(self, mode: str, precision: str) -> Total:
        cells = self.cells(mode, precision)
        status, reason = self.status(mode, precision)
        pass_ms: dict[str, float | None] = {}
        for pass_ in PASSES:
            chosen = [c for c in cells if c.gemm.pass_ == pass_]
            if not chosen:
                continue
            pass_ms[pass_] = (
                sum(c.ms for c in chosen if c.ms) if all(c.status == "measured" for c in chosen) else None
            )
        per_layer = sum(c.ms for c in cells if c.ms) if status == "measured" else None
        model = per_layer * self.num_layers if per_layer is not None else None
        speedup = None
        if per_layer is not None and precision != BASELINE:
            base = self.total(mode, BASELINE) if self.status(mode, BASELINE)[0] == "measured" else None
            if base is not None and base.per_layer_ms:
                speedup = base.per_layer_ms / per_layer
        elif per_layer is not None:
            speedup = 1.0
        return Total(mode, precision, pass_ms, per_layer, model, speedup, status, reason)

    def totals(self) -> list[Total]:
        return [self.total(m, p) for m in self.modes for p in self.precisions]

    def pass_speedup(self, mode: str, precision: str, pass_: str) -> float | None:
        """BF16's time for one pass (Fprop, Dgrad or Wgrad) over this precision's."""
        base = self.total(mode, BASELINE).pass_ms.get(pass_)
        mine = self.total(mode, precision).pass_ms.get(pass_)
        return base / mine if base and mine else None

    def gemm_speedup(self, mode: str, precision: str, gemm: GemmShape) -> float | None:
        cell, base = self.cell(mode, precision, gemm), self.cell(mode, BASELINE, gemm)
        if cell.status != "measured" or base.status != "measured" or not cell.ms or not base.ms:
            return None
        return base.ms / cell.ms

    def find_gemm(self, text: str) -> GemmShape:
        """A GEMM named ``op/pass`` (``mlp_up/fprop``) or by its ``MxKxN`` label."""
        text = text.strip()
        for g in self.gemms:
            if text in (f"{g.op}/{g.pass_}", f"{g.op}.{g.pass_}", g.label, g.op):
                return g
        raise KeyError(text)

    # ------------------------------------------------------------------ output
    def to_json(self) -> dict[str, Any]:
        """The ``gemm-bench report --json`` object."""
        doc = self.doc
        prov = doc["provenance"]
        return {
            "question_hash": doc["question_hash"],
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
                }
                for t in self.totals()
            ],
            "peers": doc.get("peers", []),
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
        method = prov["method"]
        yield f"method: {describe_method(method)}"
        for note in doc.get("notes", []):
            yield f"note: {note}"
        for mode in self.modes:
            yield ""
            yield f"== {MODE_NAMES[mode]} =="
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
                        line += f" | {c.ms:>15.4f}{c.tflops:>9.1f}"
                        if p != BASELINE:
                            s = self.gemm_speedup(mode, p, g)
                            line += f"{s:>6.2f}x" if s else f"{'-':>7}"
                    yield line
                line = f"  {'sum':<16}{'':>26}"
                for p in measured:
                    line += f" | {self.total(mode, p).pass_ms[pass_]:>15.4f}{'':>9}"
                    if p != BASELINE:
                        line += f"{'':>7}"
                yield line
            yield ""
            layers = self.num_layers
            for p in self.precisions:
                t = self.total(mode, p)
                name = PRECISIONS[p].display
                if t.status != "measured":
                    yield f"  {name:<12} {t.status}: {t.reason}"
                    continue
                vs = f"  {t.speedup_vs_bf16:.2f}x vs BF16" if p != BASELINE and t.speedup_vs_bf16 else ""
                passes = ", ".join(f"{PASS_NAMES[k]} {v:.3f}" for k, v in t.pass_ms.items() if v is not None)
                yield (f"  {name:<12} per layer {t.per_layer_ms:9.3f} ms ({passes})"
                       f" | model ({layers} layers) {t.model_ms:9.2f} ms{vs}")
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
