"""A test double for issue 11's quantities: result documents WITH a layer step and SQNRs.

The GEMM cells and peers are the committed H100 te-guide-5b measurement (``tests/data``); the
layer-step and accuracy cells are SYNTHETIC, derived from those cells by stated rules, and the
document says so in its notes and provenance. Used on CPU through ``Cache.store``,
``read_document``, ``Report``, the CLI and the Sphinx extension. Never write one into
``docs/_gemm_cache``: its layer and accuracy numbers were not measured.

Rules (chosen so that tests can check the report's arithmetic exactly):

* BF16 eager step = (sum of the 12 BF16 autocast GEMM times) / :data:`GEMM_SHARE`;
* every other precision's eager step = the non-GEMM part of the BF16 step + its own 12 autocast
  GEMM times (Amdahl's law holds exactly, so ``amdahl_speedup == speedup_vs_bf16``);
* graphed step = eager step - :data:`GRAPH_SAVING_MS` (host overhead a CUDA graph removes);
* SQNR per (precision, distribution) from :data:`SQNR_DB`, minus 0.1 dB per GEMM index, so the
  minimum over GEMMs is the last GEMM's.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, ClassVar

from gemm_bench.measure.accuracy import accuracy_method
from gemm_bench.measure.step import WHAT_IS_TIMED
from gemm_bench.question.precisions import BASELINE, PRECISIONS
from gemm_bench.question.question import Question
from gemm_bench.results.accuracy_schema import ACCURACY_MODES
from gemm_bench.results.schema import METHOD_VERSION, stamp_run_ids

DATA = Path(__file__).parent / "data"
SOURCE = DATA / "h100-te-guide-5b.json"
RUN_ID = "synthetic-beyond-run"
GEMM_SHARE = 0.72
GRAPH_SAVING_MS = 0.25
#: Synthetic SQNRs (dB) per precision and distribution: plausible orderings, not measurements.
SQNR_DB: dict[str, dict[str, float]] = {
    "bf16": {"gaussian": 48.0, "outliers": 47.0},
    "fp8-delayed": {"gaussian": 27.0, "outliers": 21.0},
    "fp8-current": {"gaussian": 28.0, "outliers": 22.0},
    "fp8-block": {"gaussian": 30.0, "outliers": 29.0},
}
SYNTHETIC_NOTE = ("SYNTHETIC test document (tests/fake_beyond.py): GEMM cells and peers are the committed "
                  "H100 te-guide-5b measurement; layer-step and SQNR cells are derived by stated rules, not measured")


def source_document() -> dict[str, Any]:
    return json.loads(SOURCE.read_text(encoding="utf-8"))


def autocast_gemm_ms(doc: dict[str, Any], precision: str) -> float:
    """Sum of one precision's autocast GEMM times (every one measured in the source)."""
    return sum(c["ms"] for c in doc["cells"] if c["mode"] == "autocast" and c["precision"] == precision)


def beyond_document(*, modes: Sequence[str] = ("autocast", "prequant", "layer", "layer-graphed"),
                    accuracy: bool = True, run_id: str = RUN_ID) -> dict[str, Any]:
    """A valid schema-2 document of one (synthetic) run with the layer and accuracy blocks."""
    doc = stamp_run_ids(source_document())
    doc["run_id"] = run_id
    doc["method_version"] = METHOD_VERSION  # a synthetic document of this code's method (its source is method v1)
    for key in ("cells", "peers"):
        for item in doc[key]:
            item.pop("run_id", None)
    doc["cells"] = [c for c in doc["cells"] if c["mode"] in modes]
    if "prequant" not in modes:
        doc["peers"] = []
    doc["notes"] = [*doc["notes"], SYNTHETIC_NOTE]
    doc["provenance"]["commit"] = "synthetic"
    doc["provenance"]["method"] = {**doc["provenance"]["method"], "layer_step": WHAT_IS_TIMED,
                                   "accuracy": "synthetic SQNRs (tests/fake_beyond.py)", "peers": "as measured"}
    source = source_document()
    precisions = [p for p in PRECISIONS if any(c["precision"] == p and c["status"] == "measured"
                                                for c in source["cells"] if c["mode"] == "autocast")]
    base_gemm = autocast_gemm_ms(source, BASELINE)
    bf16_step = base_gemm / GEMM_SHARE
    layer = []
    for mode in ("layer", "layer-graphed"):
        if mode not in modes:
            continue
        for p in precisions:
            ms = round(bf16_step - base_gemm + autocast_gemm_ms(source, p)
                       - (GRAPH_SAVING_MS if mode == "layer-graphed" else 0.0), 6)
            layer.append({"mode": mode, "precision": p, "status": "measured", "ms": ms,
                          "stats": {"median_ms": ms, "iqr_ms": round(ms * 0.01, 6), "n": 10},
                          "measured_at": doc["provenance"]["date"]})
        layer.append({"mode": mode, "precision": "mxfp8", "status": "unsupported",
                      "reason": "MXFP8 needs compute capability 10.0 (synthetic)"})
    if layer:
        doc["layer"] = layer
    if accuracy:
        cells = []
        gemms = doc["question"]["gemms"]
        for mode in ACCURACY_MODES:
            if mode not in modes:
                continue
            for p, by_dist in SQNR_DB.items():
                for dist, value in by_dist.items():
                    for i, g in enumerate(gemms):
                        cell = {"mode": mode, "precision": p, "op": g["op"], "pass": g["pass"], "distribution": dist}
                        if not PRECISIONS[p].has_mode(mode):
                            cell.update(status="unsupported", reason=PRECISIONS[p].absent_modes[mode])
                        else:
                            cell.update(status="measured", sqnr_db=round(value - 0.1 * i, 4),
                                        measured_at=doc["provenance"]["date"])
                        cells.append(cell)
        doc["accuracy"] = cells
        doc["accuracy_method"] = {**accuracy_method(), "synthetic": SYNTHETIC_NOTE}
    return doc


class FakeBeyondRunner:
    """Stands in for :class:`gemm_bench.measure.runner.Runner` (``cli.load_runner``) on CPU.

    Answers only the te-guide-5b question (the source's); records how it was built and asked.
    """

    instances: ClassVar[list[FakeBeyondRunner]] = []

    def __init__(self, settings: Any, *, progress: Callable[[int, int, str], None], **options: Any) -> None:
        self.settings = settings
        self.progress = progress
        self.options = options
        self.asked: list[tuple[list[str], list[str]]] = []
        FakeBeyondRunner.instances.append(self)

    def measure(self, question: Question, precisions: list[str], modes: list[str]) -> dict[str, Any]:
        self.asked.append((list(precisions), list(modes)))
        doc = beyond_document(modes=modes, accuracy=bool(self.options.get("accuracy")))
        if question.hash != doc["question_hash"]:
            raise AssertionError(f"the fake runner answers te-guide-5b only, not {question.describe()}")
        self.progress(1, 1, "done")
        return copy.deepcopy(doc)
