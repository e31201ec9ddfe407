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

import pytest

from gemm_bench.results.cache import Cache, read_document
from tests.helpers import LOST_IN_A_FINALIZER, default_ctrl_c, stop, synthetic_document

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


@pytest.mark.slow  # started first in a parallel run (conftest.py)
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
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                preexec_fn=default_ctrl_c)
        assert proc.stdout.readline().strip() == "ready"
        time.sleep(rng.uniform(0.0, 0.3) if trial < 25 else 2.0)
        stop(proc, sig)  # Ctrl-C pressed again if the first was lost in a finalizer (tests.helpers.stop)
        doc = read_document(path)  # raises CacheError if the file is not a whole valid document
        seen["old" if doc == first else "new"] += 1
        assert cache.files() == [path]  # stray temporary files are never mistaken for results
    assert seen["new"] > 0
    print("outcomes:", seen)


#: A child whose first Ctrl-C lands in a finalizer, deterministically: the loss that made the test above hang.
LOSES_ITS_FIRST_CTRL_C = """
import time
class Finalized:
    def __del__(self):
        print("finalizing", flush=True)
        time.sleep(30)  # Ctrl-C arrives here: CPython prints "Exception ignored in ..." and goes on
Finalized()
print("went on", flush=True)
while True:
    time.sleep(0.02)
"""

IGNORES_CTRL_C = """
import signal, time
signal.signal(signal.SIGINT, signal.SIG_IGN)
print("ready", flush=True)
while True:
    time.sleep(0.02)
"""


def test_a_ctrl_c_lost_in_a_finalizer_is_pressed_again_and_one_ignored_fails() -> None:
    """tests.helpers.stop: one Ctrl-C pressed (and waited 10 s for) left this child running for ever."""
    proc = subprocess.Popen([sys.executable, "-c", LOSES_ITS_FIRST_CTRL_C], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, preexec_fn=default_ctrl_c)
    assert proc.stdout.readline().strip() == "finalizing"
    out, err, presses = stop(proc, signal.SIGINT, grace_s=1.0)
    assert presses == 2 and "went on" in out and LOST_IN_A_FINALIZER in err and proc.returncode != 0
    # A child that ignores Ctrl-C is not pressed for ever: it is killed, and the test fails.
    proc = subprocess.Popen([sys.executable, "-c", IGNORES_CTRL_C], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, preexec_fn=default_ctrl_c)
    assert proc.stdout.readline().strip() == "ready"
    with pytest.raises(AssertionError, match="did not exit"):
        stop(proc, signal.SIGINT, grace_s=0.3, presses=2)
    assert proc.returncode == -signal.SIGKILL
