"""Issue 43, item 6: merge and store lose nothing: the whole blocks (model step, plan, energy) of the
cached run stay when a newer run of the same stack did not measure them, and the message says so."""

from __future__ import annotations

import copy
import datetime as dt
import json
from pathlib import Path
from typing import Any

from gemm_bench.results.cache import Cache, read_document
from gemm_bench.results.merge import decide
from gemm_bench.results.schema import WHOLE_BLOCKS, merge_documents, validate

CACHE = Path(__file__).resolve().parents[1] / "docs" / "_gemm_cache"
SOURCE = CACHE / "45a55c5d892e31af--h100-80gb-hbm3.json"


def _runs() -> tuple[dict[str, Any], dict[str, Any]]:
    old = json.loads(SOURCE.read_text(encoding="utf-8"))
    new = copy.deepcopy(old)
    new["run_id"] = "newer-prequant-only"
    new["provenance"]["date"] = "2026-11-27T00:00:00+00:00"
    new["cells"] = [dict(c, run_id="newer-prequant-only") for c in new["cells"] if c["mode"] == "prequant"]
    for block in ("layer", "groups", "accuracy", "accuracy_method", *WHOLE_BLOCKS):
        new.pop(block, None)
    new["peers"] = []
    validate(copy.deepcopy(new))
    return old, new


def test_a_prequant_only_run_keeps_the_cached_energy_plan_and_model_step() -> None:
    old, new = _runs()
    merged = merge_documents(old, new)
    for block in WHOLE_BLOCKS:
        assert merged[block] == old[block], block
    assert {c["run_id"] for c in merged["cells"] if c["mode"] == "prequant"} == {"newer-prequant-only"}


def test_the_merge_message_names_the_blocks_it_kept() -> None:
    old, new = _runs()
    action, written, why = decide(old, new, now=dt.datetime(2026, 11, 28, tzinfo=dt.timezone.utc))
    assert action == "merged" and written is not None
    for noun in ("model step", "precision plan", "energy per step"):
        assert f"kept the cached {noun} (the incoming run did not measure it)" in why


def test_store_follows_the_same_rule(tmp_path: Path) -> None:
    old, new = _runs()
    cache = Cache(tmp_path)
    cache.store(old)
    path = cache.store(new)
    stored = read_document(path, raw=True)
    for block in WHOLE_BLOCKS:
        assert stored[block] == old[block], block
