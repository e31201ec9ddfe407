"""Store runs of ``tools/gpu_layout_search.py`` as the "layout-search" study of the GPU they answer for
(issue 41 item 3), as ``gemm-bench study layout-search`` stores its own run: the data block of
:func:`gemm_bench.results.layout_search_schema.stored_data` (numbers copied), the raw files named in
``provenance.method.source`` (relative to the repository where they lie inside it).

The tool's JSON holds no provenance (no date, commit or software stack): they come from these arguments,
as the session's README records them, never by editing a number. A run whose allocator was capped at
another GPU's capacity is stored as that GPU's file, ``emulated``: give ``--answers-for``. Such a run is
made by hand, and may be seeded from the stored file it replaces (the tool's ``--seed-from``, e.g.
``docs/_gemm_cache/studies/layout-search--h100-80gb-hbm3.json`` with ``--capacity-bytes``): the seed of
each recipe is carried into the study, and the method says the searches were seeded.

    PYTHONPATH=bench python tools/layout_search_to_study.py --commit a9212f6 --date 2026-11-28 \\
        --versions torch=2.11.0+cu130,transformer_engine=2.20.2,cuda=13.0,driver=580.159.04 \\
        --answers-for "NVIDIA H100 80GB HBM3" RUN1/layout-search.json RUN2/layout-search.json
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import sys
from pathlib import Path
from typing import Any

from gemm_bench.results import studies
from gemm_bench.results.cache import CacheError, _read_bytes, parse_json
from gemm_bench.results.layout_search_schema import SEED_FIELD, STUDY, stored_data

REPO = Path(__file__).resolve().parents[1]
#: The provenance the arguments give (``--commit`` and ``--date`` the rest of :data:`studies.PROVENANCE_FIELDS`).
VERSION_FIELDS: tuple[str, ...] = tuple(f for f in studies.PROVENANCE_FIELDS if f not in ("commit", "date"))
WHAT = ("the preset layout's rank built for real (the whole rank at PP 1, the first stage with 1F1B's micro-batches "
        "in flight at PP > 1): every layer on S / CP tokens, main gradients whole in the layout's gradient-reduce "
        "dtype, FP8 primary weights where the layout gathers FP8 parameters, FP32 master weights and moments for "
        "1 / (DP x CP) of the parameters (the distributed optimizer); its whole step at micro-batch sizes doubling "
        "from 1 (two steps at each, the second holding the optimizer's moments), then bisecting, PyTorch's allocator "
        "with expandable segments; an out-of-memory is the answer")
#: Added to :data:`WHAT` where a run's search started from a stored study's answer (a recipe's ``seed``).
SEEDED = ("; a recipe with a seed started its search at the answer a stored study found for the same rank "
          "(that size, then the next, doubling on or bisecting below it as they ran or not): the same answer "
          "in fewer tries")


def source_name(path: Path) -> str:
    """The raw file as the provenance names it: relative to the repository where it lies inside it."""
    resolved = path.resolve()
    return resolved.relative_to(REPO).as_posix() if resolved.is_relative_to(REPO) else str(path)


def parse_versions(text: str, parser: argparse.ArgumentParser) -> dict[str, str]:
    """``torch=2.11.0+cu130,transformer_engine=...`` as a mapping holding every field of :data:`VERSION_FIELDS`."""
    out: dict[str, str] = {}
    for item in (part.strip() for part in text.split(",") if part.strip()):
        name, sep, value = item.partition("=")
        if not sep or not name.strip() or not value.strip():
            parser.error(f"--versions: {item!r} is not NAME=VERSION")
        out[name.strip()] = value.strip()
    missing = [f for f in VERSION_FIELDS if f not in out]
    if missing:
        parser.error(f"--versions: missing {', '.join(missing)} (give {', '.join(VERSION_FIELDS)})")
    return out


def build(paths: list[Path], *, commit: str, date: str, versions: dict[str, str],
          answers_for: str | None) -> dict[str, Any]:
    """The study document of ``paths`` (raises :class:`CacheError` naming the file that cannot be used)."""
    runs = []
    for path in paths:
        doc = parse_json(path, _read_bytes(path))
        if not isinstance(doc, dict) or not {"device", "total_bytes", "capacity_bytes", "models"} <= set(doc):
            raise CacheError(path, "is not a tools/gpu_layout_search.py run (device, total_bytes, capacity_bytes, "
                                   "models)")
        runs.append((str(path), doc))
    try:
        data = stored_data(runs, answers_for)
    except studies.StudyError as exc:  # its where starts with the run's path where one run is at fault
        path = next((p for p in paths if exc.where.startswith(str(p))), paths[0])
        raise CacheError(path, f"{exc.where}: {exc.problem}") from None
    seconds = sum(found.get("seconds", 0.0) for entry in data["models"].values()
                  for found in entry.get("recipes", {}).values())
    seeded = any(SEED_FIELD in found for entry in data["models"].values()
                 for found in entry.get("recipes", {}).values())
    method = {"tool": "tools/gpu_layout_search.py", "what": WHAT + SEEDED if seeded else WHAT,
              "measure_s": round(seconds, 1),
              "source": [source_name(p) for p in paths]}
    device: dict[str, Any] = {"name": data["answers_for"]}
    if data["emulated"]:
        device["emulated_on"] = data["measured_on"]
    provenance = {**versions, "commit": commit, "date": date}
    return studies.build_document(STUDY, data, method, device, provenance)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("runs", nargs="+", type=Path, help="layout-search.json files of one GPU")
    parser.add_argument("--cache-dir", type=Path, default=REPO / "docs" / "_gemm_cache")
    parser.add_argument("--commit", required=True, help="the commit the runs measured")
    parser.add_argument("--date", required=True, help="the day of the runs, ISO (2026-11-28)")
    parser.add_argument("--versions", required=True, help="torch=...,transformer_engine=...,cuda=...,driver=...")
    parser.add_argument("--answers-for", default=None, help="the GPU whose capacity a capped run emulates")
    args = parser.parse_args(argv)
    try:
        dt.date.fromisoformat(args.date[:10])
    except ValueError:
        parser.error(f"--date: {args.date!r} is not an ISO date (2026-11-28)")
    versions = parse_versions(args.versions, parser)
    try:
        doc = build(args.runs, commit=args.commit, date=args.date, versions=versions, answers_for=args.answers_for)
    except CacheError as exc:
        print(f"layout_search_to_study: {exc}", file=sys.stderr)
        return 1
    print(studies.write_study(args.cache_dir, doc))
    print(json.dumps({m: {p: f.get("largest", f.get("failed")) for p, f in e.get("recipes", {}).items()}
                      for m, e in doc["data"]["models"].items()}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
