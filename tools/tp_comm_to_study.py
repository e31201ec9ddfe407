"""Store a ``tools/gpu_tp_comm.py`` run as the "tp-comm" study of its GPU (issue 42), as
``gemm-bench study tp-comm`` stores its own run: the data block of
:func:`gemm_bench.results.tp_comm_schema.stored_data`, the run's device and provenance unchanged.

    PYTHONPATH=bench python tools/tp_comm_to_study.py RUN/tp-comm.json docs/_gemm_cache
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from gemm_bench.results import studies
from gemm_bench.results.tp_comm_schema import STUDY, stored_data


def main(argv: list[str]) -> int:
    tool = json.loads(Path(argv[0]).read_text(encoding="utf-8"))
    provenance = dict(tool["provenance"])
    method = {**provenance.pop("method"), "gpus": tool["gpus"], "tp": tool["tp"], "models": tool["models"],
              "seq": tool["seq"], "what": tool.get("what", {}), "measure_s": tool.get("elapsed_s")}
    doc = studies.build_document(STUDY, stored_data(tool), method, tool["device"], provenance)
    print(studies.write_study(argv[1], doc))
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
