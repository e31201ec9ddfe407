"""Store a ``tools/gpu_tp_comm.py`` run as the "tp-comm" study of its GPU (issue 42), as
``gemm-bench study tp-comm`` stores its own run: the data block of
:func:`gemm_bench.results.tp_comm_schema.stored_data` (the cells and the collective sweep the run
measured), the run's device and provenance unchanged, and the raw file it came from named in
``provenance.method.source`` (its path relative to the repository, or as given when outside it).

    PYTHONPATH=bench python tools/tp_comm_to_study.py RUN/tp-comm.json[.gz] docs/_gemm_cache [--commit HASH]

``--commit``: the tree that ran, where the run recorded another (a GPU box whose copy of the repository's
git metadata is older than its working tree: the box's ``git rev-parse`` named an earlier commit in
session 15). The recorded one is kept as ``provenance.commit_recorded``.
"""

from __future__ import annotations

import gzip
import json
import sys
from pathlib import Path
from typing import Any

from gemm_bench.results import studies
from gemm_bench.results.tp_comm_schema import STUDY, stored_data

REPO = Path(__file__).resolve().parents[1]


def source_name(path: Path) -> str:
    """The raw file as the provenance names it: relative to the repository where it lies inside it."""
    resolved = path.resolve()
    return resolved.relative_to(REPO).as_posix() if resolved.is_relative_to(REPO) else str(path)


def read_raw(path: Path) -> Any:
    """The tool's JSON, gzipped (``.gz``) or not."""
    if path.suffix == ".gz":
        with gzip.open(path, "rt", encoding="utf-8") as handle:
            return json.load(handle)
    return json.loads(path.read_text(encoding="utf-8"))


def main(argv: list[str]) -> int:
    commit = None
    if len(argv) == 4 and argv[2] == "--commit":
        commit, argv = argv[3], argv[:2]
    if len(argv) != 2:
        print(__doc__, file=sys.stderr)
        return 2
    tool = read_raw(Path(argv[0]))
    provenance = dict(tool["provenance"])
    if commit is not None and commit != provenance.get("commit"):
        provenance["commit_recorded"] = provenance.get("commit")
        provenance["commit"] = commit
    method = {**provenance.pop("method"), "gpus": tool["gpus"], "tp": tool["tp"], "models": tool["models"],
              "seq": tool["seq"], "what": tool.get("what", {}), "measure_s": tool.get("elapsed_s"),
              "source": source_name(Path(argv[0]))}
    doc = studies.build_document(STUDY, stored_data(tool), method, tool["device"], provenance)
    print(studies.write_study(argv[1], doc))
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
