"""Interrupted refreshes and concurrent writers never lose a measurement or leave half a file.

* A writer process refreshing one cache file in a loop (``Cache.store``: merge with the file,
  atomic replace) is killed by SIGKILL or Ctrl-C (SIGINT) at a random instant, 24 times. The file
  must then be byte for byte the previous valid content, or exactly the content of the last store
  the writer completed (or the one it was completing): replayed here from the same documents.
* Two processes storing into one file serialize on the file's lock: a store waits while another
  process holds ``Cache.locked()``, then merges what that process wrote (no lost update).
* Two builds that need the same measurement at once measure it once (the GPU lock, then the cache
  is consulted again); two that need different ones never measure at the same time.

test_interrupt.py kills writers too (outcome: some valid file); these pin the outcome exactly.
"""

from __future__ import annotations

import json
import random
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from gemm_bench.question.question import build_question
from gemm_bench.results.cache import Cache, dumps, read_document
from gemm_bench.results.schema import merge_documents
from tests.helpers import default_ctrl_c, refresh_document, stop, synthetic_document

ROOT = Path(__file__).resolve().parent.parent
PRELUDE = f"import sys, time\nsys.path.insert(0, {str(ROOT)!r})\n"


WRITER = PRELUDE + """
import itertools
from gemm_bench.results.cache import Cache
from tests.helpers import refresh_document
cache = Cache({cache!r})
print("ready", flush=True)
sys.stdin.readline()  # go: nothing more is printed before the test has read "ready" (see _start_writer)
for i in itertools.count():
    cache.store(refresh_document(i))
    print(i, flush=True)
"""


def _python(code: str, **kwargs: Any) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            stdin=subprocess.PIPE, text=True, cwd=ROOT, preexec_fn=default_ctrl_c, **kwargs)


def _start_writer(cache: Path, *, late_s: float = 0.0) -> subprocess.Popen:
    """A WRITER that has printed "ready" and been told to go.

    The stores it reports must all reach ``communicate()``, which reads the pipe's descriptor, not
    ``proc.stdout``'s buffer: a ``readline()`` of "ready" that came late (a loaded machine) read the
    first reports into that buffer too, where ``communicate()`` never saw them, and a trial failed
    with the file two stores ahead of the count ("neither state 11 nor 12"). So the writer waits for
    a go on stdin, sent after "ready" was read: nothing else is in the pipe when ``readline()`` reads.
    """
    proc = _python(WRITER.format(cache=str(cache)))
    time.sleep(late_s)
    assert proc.stdout.readline().strip() == "ready", proc.stderr.read()
    proc.stdin.write("\n")
    proc.stdin.flush()
    return proc


@pytest.mark.slow  # started first in a parallel run (conftest.py)
def test_killed_refresh_leaves_exactly_the_old_or_the_new_file(tmp_path: Path) -> None:
    cache = Cache(tmp_path)
    path = cache.store(synthetic_document())
    rng = random.Random(20261120)
    seen = {"last reported store": 0, "one store more": 0, "killed mid-write": 0}
    for trial in range(24):
        old_bytes = path.read_bytes()
        sig = signal.SIGKILL if trial % 2 else signal.SIGINT
        # Trial 0 reads "ready" late, as a test process the machine descheduled does.
        proc = _start_writer(tmp_path, late_s=0.3 if trial == 0 else 0.0)
        time.sleep(rng.uniform(0.0, 0.25))
        out, _, _ = stop(proc, sig)  # Ctrl-C pressed again if the first was lost in a finalizer
        completed = len(out.split())  # the stores the writer reported done
        # Replay: state 0 is the old file, state j+1 = merge(state j as read back, document j).
        state = read_document_bytes(old_bytes)
        expected = [old_bytes]
        for j in range(completed + 1):
            state = merge_documents(state, refresh_document(j))
            expected.append(dumps(state).encode("utf-8"))
            state = read_document_bytes(expected[-1])
        now = path.read_bytes()
        assert now in expected[completed:completed + 2], (
            f"trial {trial} ({sig.name}): the file is neither state {completed} nor {completed + 1} "
            f"of the writer's refreshes ({len(now)} bytes)")
        read_document(path)  # and it validates, under its own name
        seen["last reported store" if now == expected[completed] else "one store more"] += 1
        assert cache.files() == [path]  # a killed writer's temporary file is never taken for a result
        leftovers = list(tmp_path.glob(".*.tmp"))  # SIGKILL between mkstemp and replace
        seen["killed mid-write"] += bool(leftovers)
        for leftover in leftovers:
            leftover.unlink()
    print("outcomes:", seen)


PAUSED_WRITER = PRELUDE + """
import os
from gemm_bench.results.cache import Cache
from tests.helpers import refresh_document
real_replace = os.replace
def replace(src, dst):  # the worst instant: the new file is complete and fsynced, not yet renamed
    print("replacing", flush=True)
    time.sleep(30)
    real_replace(src, dst)
os.replace = replace
Cache({cache!r}).store(refresh_document(1))
"""


def test_killed_just_before_the_rename_leaves_the_old_file(tmp_path: Path) -> None:
    """Deterministic worst case: killed with the new file complete but not renamed into place."""
    cache = Cache(tmp_path)
    path = cache.store(synthetic_document())
    old_bytes = path.read_bytes()
    for sig in (signal.SIGKILL, signal.SIGINT, signal.SIGKILL, signal.SIGINT):
        proc = _python(PAUSED_WRITER.format(cache=str(tmp_path)))
        assert proc.stdout.readline().strip() == "replacing", proc.stderr.read()
        proc.send_signal(sig)
        _, err = proc.communicate(timeout=20)
        assert path.read_bytes() == old_bytes
        leftovers = list(tmp_path.glob(".*.tmp"))
        if sig == signal.SIGINT:
            # Ctrl-C runs the writer's cleanup: no temporary file is left behind.
            assert "KeyboardInterrupt" in err and leftovers == []
        else:
            assert len(leftovers) == 1  # nothing runs after SIGKILL; the stray file is harmless:
            assert cache.files() == [path] and cache.lookup(read_document(path)["question_hash"]).errors == []
            leftovers[0].unlink()


def read_document_bytes(data: bytes) -> dict[str, Any]:
    """The document as ``Cache.store`` reads it back before merging."""
    return json.loads(data.decode("utf-8"))


HOLDER = PRELUDE + """
from gemm_bench.results.cache import Cache, dumps, write_atomic
from tests.helpers import synthetic_document
cache = Cache({cache!r})
doc = synthetic_document(ms={{("autocast", "fp8-current"): 1.25}})
with cache.locked(doc["question_hash"], doc["device"]["name"]) as path:
    print("locked", flush=True)
    sys.stdin.readline()
    write_atomic(path, dumps(doc))  # a measurement landing while the lock is held
print("released", flush=True)
"""

STORER = PRELUDE + """
from gemm_bench.results.cache import Cache
from tests.helpers import synthetic_document
cache = Cache({cache!r})
doc = synthetic_document(ms={{("autocast", "bf16"): 2.5}})
print("ready", flush=True)
cache.store(doc)
print("stored", flush=True)
"""


def test_a_store_waits_for_another_process_holding_the_lock(tmp_path: Path) -> None:
    cache = Cache(tmp_path)
    initial = synthetic_document(ms={("prequant", "bf16"): 3.0})
    path = cache.store(initial)
    before = path.read_bytes()
    holder = _python(HOLDER.format(cache=str(tmp_path)))
    assert holder.stdout.readline().strip() == "locked", holder.stderr.read()
    storer = _python(STORER.format(cache=str(tmp_path)))
    assert storer.stdout.readline().strip() == "ready", storer.stderr.read()
    time.sleep(0.8)
    assert storer.poll() is None, "store() did not wait for the lock"
    assert path.read_bytes() == before
    holder.stdin.write("\n")
    holder.stdin.flush()
    assert holder.communicate(timeout=20)[0].strip() == "released"
    assert storer.communicate(timeout=20)[0].strip() == "stored"
    # The store merged with what the holder wrote (not the file it would have read without the
    # lock). One mode is one run: the storer's autocast run replaces the holder's autocast cells
    # whole, so no speedup can compare the holder's FP8 with the storer's BF16.
    holder_doc = synthetic_document(ms={("autocast", "fp8-current"): 1.25})
    stored_doc = synthetic_document(ms={("autocast", "bf16"): 2.5})
    assert read_document(path) == merge_documents(holder_doc, stored_doc)
    assert {(c["mode"], c["precision"]) for c in read_document(path)["cells"]} == {("autocast", "bf16")}


BUILD = PRELUDE + """
import os
from gemm_bench.question.question import build_question
from gemm_benchmark import execution
from tests.helpers import synthetic_document

def measure(question, precisions, modes, *, peers=False, peers_only=False):
    with open({log!r}, "a") as log:
        log.write(f"start {{os.getpid()}} {{time.time()!r}}\\n")
    time.sleep(0.4)
    doc = synthetic_document(question, device="Test GPU 80GB")
    with open({log!r}, "a") as log:
        log.write(f"end {{os.getpid()}} {{time.time()!r}}\\n")
    return doc

execution.gpu_detector = lambda: (execution.LocalGpu("Test GPU 80GB", measure), "")
# The box's software stack as a CPU machine's (no Transformer Engine: local_stack() says None), so
# that neither child imports torch (a second each) to find it out, whatever the machine.
execution._stack["stack"] = None
question = build_question(model="te-guide-5b", fields={{"seq_length": {seq}}})
print("ready", flush=True)
sys.stdin.readline()
answer = execution.answer(question, precisions=("bf16", "fp8-current"), modes=("autocast", "prequant"),
                          devices=(), cache_dir=__import__("pathlib").Path({cache!r}), mode="auto",
                          max_age_days=None, build_started=time.time())
print(answer.status, len(answer.devices), answer.problems, flush=True)
"""


def _two_builds(tmp_path: Path, seqs: tuple[int, int]) -> list[tuple[str, int, float]]:
    log = tmp_path / "measure.log"
    procs = [_python(BUILD.format(log=str(log), seq=seq, cache=str(tmp_path / "cache"))) for seq in seqs]
    for proc in procs:
        assert proc.stdout.readline().strip() == "ready", proc.stderr.read()
    for proc in procs:  # a barrier: both ask at the same moment
        proc.stdin.write("\n")
        proc.stdin.flush()
    for proc in procs:
        out, err = proc.communicate(timeout=30)
        assert out.strip() == "fresh 1 []", err
    events = []
    for line in log.read_text().splitlines():
        kind, pid, when = line.split()
        events.append((kind, int(pid), float(when)))
    return sorted(events, key=lambda e: e[2])


def test_two_builds_needing_one_result_measure_it_once(tmp_path: Path) -> None:
    events = _two_builds(tmp_path, (512, 512))
    assert [e[0] for e in events] == ["start", "end"]
    (path,) = Cache(tmp_path / "cache").files(build_question(model="te-guide-5b").hash)
    read_document(path)


def test_two_builds_never_measure_at_the_same_time(tmp_path: Path) -> None:
    events = _two_builds(tmp_path, (512, 1024))
    # Two measurements, one after the other: start, end, start, end (never two starts in a row).
    assert [e[0] for e in events] == ["start", "end", "start", "end"]
    assert events[0][1] == events[1][1] and events[2][1] == events[3][1] != events[0][1]
    assert len(Cache(tmp_path / "cache").files()) == 2
