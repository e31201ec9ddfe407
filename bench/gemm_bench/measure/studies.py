"""Measuring a study on this box's GPU: the study's own function, then the provenance every result
carries (:mod:`gemm_bench.measure.provenance`). Imports torch and Transformer Engine when called.

The studies themselves register in :mod:`gemm_bench.results.studies` (pure, so a CPU build can
read and render them); :data:`gemm_bench.results.studies.STUDY_MODULES` names the modules that
register them.
"""

from __future__ import annotations

import importlib
import time
from pathlib import Path
from typing import Any

from gemm_bench.results import studies


#: Modules whose import registers a study (pure modules: their validators and page text).
def load_registry() -> dict[str, studies.Study]:
    """Every study the project registers (the modules :data:`gemm_bench.results.studies.STUDY_MODULES`
    names, imported there: one list, which readers and the refresh share)."""
    studies.load_known()
    return dict(studies.REGISTRY)


def measure_study(name: str, cache_dir: str | Path | None = None) -> dict[str, Any]:
    """Run study ``name`` on the current CUDA device; the valid document to store. ``cache_dir``: the
    cache it will be stored in, given to a study that reads it (:attr:`~gemm_bench.results.studies.Study.
    reads_cache`: the layout search seeds its searches from its stored run there); None leaves such a
    study its own default."""
    from gemm_bench.measure import provenance
    from gemm_bench.measure.backends import te as te_backend

    load_registry()
    study = studies.get(name)
    module_name, _, function = study.measure.partition(":")
    measure = getattr(importlib.import_module(module_name), function)
    start = time.perf_counter()
    data, method = measure(cache_dir=Path(cache_dir)) if study.reads_cache and cache_dir is not None else measure()
    method = {**method, "measure_s": round(time.perf_counter() - start, 1)}
    device, prov = provenance.collect(method, te_backend.VERSION)
    return studies.build_document(study, data, method, device, prov)
