"""A fake GPU for refresh tests: worker processes on CPU that "measure" by copying a real result.

Every number comes from a committed measurement (``docs/_gemm_cache/<question>--h100-80gb-hbm3.json``, or
the question's H200 file where the H100 has not measured it):
the fake selects the cells asked for and says in its provenance that it is a fake and which file
it copied. Module-level functions only: refresh workers are spawned processes that import this.

Environment (set by the test before the pool starts; spawned workers inherit it):
``FAKE_GPU_CALLS``  a directory where every call leaves a file ``<hash>.<pid>.<n>`` holding the
                    worker's CUDA_VISIBLE_DEVICES;
``FAKE_GPU_HANG``   a question hash whose measurement blocks (the worker writes ``hang.<pid>``
                    into FAKE_GPU_CALLS first), so a test can kill that worker mid-measurement;
``FAKE_GPU_SWALLOW`` with FAKE_GPU_HANG: the hanging measurement swallows a KeyboardInterrupt and
                    returns its result 0.5 s later, as a library's callback that catches it does
                    (JAX's garbage-collection callback did, on the GPU machine).
"""

from __future__ import annotations

import copy
import os
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from gemm_bench.question.question import Question
from gemm_bench.results.cache import read_document
from gemm_bench.results.invariants import check
from gemm_bench.results.schema import new_run_id
from gemm_bench.results.stack import PEER_KIND_OF_MODE, PEERS_NOT_MEASURED

REPO = Path(__file__).resolve().parent.parent
TEMPLATE_DEVICE = "h100-80gb-hbm3"
DEVICE_NAME = "NVIDIA H100 80GB HBM3"


#: A question measured on the H200 only (the EP 8 layers of session 19) is replayed from its H200 file.
FALLBACK_DEVICE = "h200"


def template_path(question_hash: str) -> Path:
    cache = REPO / "docs" / "_gemm_cache"
    found = cache / f"{question_hash}--{TEMPLATE_DEVICE}.json"
    return found if found.exists() else cache / f"{question_hash}--{FALLBACK_DEVICE}.json"


def fake_measure(question: Question, precisions: Sequence[str], modes: Sequence[str], *, peers: bool = True,
                 peers_only: bool = False) -> dict[str, Any]:
    calls = os.environ.get("FAKE_GPU_CALLS")
    if calls:
        n = len(list(Path(calls).glob(f"{question.hash}.*")))
        pinned = os.environ.get("CUDA_VISIBLE_DEVICES", "")
        what = "peers-only" if peers_only else "peers" if peers else "no-peers"
        (Path(calls) / f"{question.hash}.{os.getpid()}.{n}").write_text(f"{pinned}\n{what}", encoding="utf-8")
        if os.environ.get("FAKE_GPU_LEAK") == question.hash:
            from gemm_bench.measure import timing  # a failed capture's graphs, kept for the process's life

            timing._FAILED_CAPTURES.append(object())
        if os.environ.get("FAKE_GPU_ABORT") in (question.hash, "*"):
            os.abort()  # as torch's ~CUDAGraph did on the H100 (DeepSeek-V3): the process dies
        if os.environ.get("FAKE_GPU_HANG") == question.hash:
            (Path(calls) / f"hang.{os.getpid()}").write_text(question.hash, encoding="utf-8")
            deadline = time.monotonic() + 60
            while time.monotonic() < deadline:
                try:
                    time.sleep(0.05)
                except KeyboardInterrupt:
                    if not os.environ.get("FAKE_GPU_SWALLOW"):
                        raise
                    deadline = min(deadline, time.monotonic() + 0.5)  # "Exception ignored in ...": goes on
            if not os.environ.get("FAKE_GPU_SWALLOW"):
                raise TimeoutError("the test never killed the hanging fake worker")
    source = template_path(question.hash)
    doc = copy.deepcopy(read_document(source, raw=True))
    doc["cells"] = [c for c in doc["cells"] if c["precision"] in precisions and c["mode"] in modes]
    doc["provenance"]["fake"] = f"fake GPU for tests: cells copied from {source.name}"
    if not source.name.endswith(f"--{TEMPLATE_DEVICE}.json"):  # an H200 file stands in: the fake is an H100
        any_h100 = next((REPO / "docs" / "_gemm_cache").glob(f"*--{TEMPLATE_DEVICE}.json"))
        doc["device"] = read_document(any_h100, raw=True)["device"]
    # A reading the door refuses (the committed H100 Llama 3 70B BF16 energy, a stuck 855 W) is not
    # replayed: a fake re-measurement that reproduced it would be refused again, and planned forever.
    refused = {v.where for v in check(doc).violations if v.block == "energy"}
    if refused:
        doc["energy"]["steps"] = [e for i, e in enumerate(doc["energy"]["steps"])
                                  if f"$.energy.steps[{i}]" not in refused]
    # The runner times Linear peers beside autocast and GEMM peers beside the pre-quantized GEMMs.
    kinds = {kind for mode, kind in PEER_KIND_OF_MODE.items() if mode in modes}
    doc["peers"] = [p for p in doc["peers"] if peers and p.get("kind", "gemm") in kinds]
    doc["provenance"]["method"]["peers"] = "fake peers" if peers else PEERS_NOT_MEASURED
    if peers_only:  # a run of its own: the peers alone
        doc.update(run_id=new_run_id(), cells=[], groups=[])
        doc["peers"] = [{k: v for k, v in p.items() if k != "run_id"} for p in doc["peers"]]
        for block in ("layer", "accuracy", "accuracy_method"):
            doc.pop(block, None)
    return doc
