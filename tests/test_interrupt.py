"""A refresh killed at any instant leaves each cache file old-and-valid or new-and-valid.

The writer is a real process storing real-sized documents through ``Cache.store`` in a loop; it is
killed with SIGKILL or SIGINT at random moments (25 trials). The GPU variant, which kills a real
``gemm-bench run``, is in test_gpu.py.
"""

from __future__ import annotations

import random
import signal
import subprocess
import sys
import time
from pathlib import Path

from gemm_bench.results.cache import Cache, read_document
from tests.helpers import default_ctrl_c, synthetic_document

ROOT = Path(__file__).resolve().parent.parent

WRITER = """
import sys, itertools
sys.path.insert(0, {root!r})
from gemm_bench.results.cache import Cache
from tests.helpers import synthetic_document
cache = Cache({cache!r})
print("ready", flush=True)
for i in itertools.count():
    doc = synthetic_document(ms={{("autocast", "bf16"): 1.0 + (i % 97) / 10, ("prequant", "bf16"): 2.0}})
    doc["notes"] = ["x" * 200_000]  # a large file: the write takes a while
    cache.store(doc)
"""


def test_killed_writers_never_leave_a_half_file(tmp_path: Path) -> None:
    cache = Cache(tmp_path)
    first = synthetic_document()
    path = cache.store(first)
    rng = random.Random(1234)
    seen = {"old": 0, "new": 0}
    # 25 kills at random moments; then, on a loaded machine where no write finished in 0.3 s, up to
    # 10 more with longer waits, so that both outcomes (the old file, a new whole one) are seen.
    for trial in range(35):
        if trial >= 25 and seen["new"]:
            break
        sig = signal.SIGKILL if trial % 2 else signal.SIGINT
        proc = subprocess.Popen([sys.executable, "-c", WRITER.format(root=str(ROOT), cache=str(tmp_path))],
                                stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
                                preexec_fn=default_ctrl_c)
        assert proc.stdout.readline().strip() == "ready"
        time.sleep(rng.uniform(0.0, 0.3) if trial < 25 else 2.0)
        proc.send_signal(sig)
        proc.wait(10)
        doc = read_document(path)  # raises CacheError if the file is not a whole valid document
        seen["old" if doc == first else "new"] += 1
        assert cache.files() == [path]  # stray temporary files are never mistaken for results
    assert seen["new"] > 0
    print("outcomes:", seen)
