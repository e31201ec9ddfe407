"""Builders of test-only result documents (never written into the docs cache)."""

from __future__ import annotations

import copy
import hashlib
import signal
import subprocess
from typing import Any

from gemm_bench.question.question import Question, build_question
from gemm_bench.results.schema import new_document
from gemm_bench.results.typed import PlanBlock, parse


def synthetic_document(
    question: Question | None = None,
    *,
    device: str = "Test GPU 80GB",
    capability: str = "9.0",
    ms: dict[tuple[str, str], float] | None = None,
    unsupported: dict[str, str] | None = None,
    failed: dict[tuple[str, str, str, str], str] | None = None,
    date: str = "2026-11-01T00:00:00+00:00",
) -> dict[str, Any]:
    """A valid document whose every cell time is ``ms[(mode, precision)]`` x (GEMM GFLOP).

    Deterministic numbers so tests can check the arithmetic of reports and renderers exactly.
    """
    question = question or build_question(model="te-guide-5b")
    ms = ms or {("autocast", "bf16"): 2.0, ("autocast", "fp8-current"): 1.0,
                ("prequant", "bf16"): 1.5, ("prequant", "fp8-current"): 0.75}
    doc = new_document(
        kind=question.kind, gemms=list(question.gemms), num_layers=question.num_layers,
        config=question.config.to_dict() if question.config else None,
        device={"name": device, "compute_capability": capability},
        provenance={"torch": "2.11.0", "transformer_engine": "2.20.2", "cuda": "13.0", "driver": "580.1",
                    "date": date, "method": {"timer": "synthetic", "statistic": "median"}, "cublas": "13.1.0",
                    "commit": "0123456"},
        notes=question.notes,
        run_id="test-" + hashlib.sha256(
            repr((question.hash, device, sorted(ms.items()), date)).encode()).hexdigest()[:12],
    )
    for (mode, precision), per_gflop in ms.items():
        for g in question.gemms:
            key = (mode, precision, g.op, g.pass_)
            base = {"mode": mode, "precision": precision, "op": g.op, "pass": g.pass_,
                    "m": g.m, "k": g.k, "n": g.n, "groups": g.groups}
            if failed and key in failed:
                doc["cells"].append({**base, "status": "failed", "reason": failed[key]})
                continue
            value = round(per_gflop * g.flops / 1e12, 6)
            doc["cells"].append({**base, "status": "measured", "ms": value,
                                 "stats": {"median_ms": value, "iqr_ms": 0.0, "n": 1, "samples_ms": [value]}})
    for precision, reason in (unsupported or {}).items():
        for mode in ("autocast", "prequant"):
            for g in question.gemms:
                doc["cells"].append({"mode": mode, "precision": precision, "op": g.op, "pass": g.pass_,
                                     "m": g.m, "k": g.k, "n": g.n, "groups": g.groups,
                                     "status": "unsupported", "reason": reason})
    return copy.deepcopy(doc)


def typed_plan(doc: dict[str, Any]) -> PlanBlock:
    """A result's precision plan as the report reads it: typed, after the door's invariants."""
    plan = parse(doc).plan
    assert plan is not None, "the result has no plan"
    return plan


def refresh_document(i: int) -> dict[str, Any]:
    """The i-th store of test_reliability_interrupt.py's writer processes: alternately BF16 and FP8 cells,
    so merging matters; large, so slow. Here, not in that test module, so that each of the ~30 writers
    it starts imports no pytest (a tenth of a second each)."""
    if i % 2:
        ms = {("autocast", "fp8-current"): 1.0 + (i % 89) / 10}
    else:
        ms = {("autocast", "bf16"): 2.0 + (i % 97) / 10, ("prequant", "bf16"): 1.5 + (i % 13) / 10}
    doc = synthetic_document(ms=ms)
    doc["notes"] = [f"refresh {i} " + "x" * 200_000]
    return doc


def warnings_by_line(text: str, page: str = "index.rst") -> dict[int, list[str]]:
    """Sphinx warning messages of one page, keyed by line number (colour codes stripped)."""
    import re

    text = re.sub(r"\x1b\[[0-9;]*m", "", text)
    out: dict[int, list[str]] = {}
    for match in re.finditer(rf"{re.escape(page)}:(\d+): WARNING: (.*)", text):
        out.setdefault(int(match.group(1)), []).append(match.group(2))
    return out


def tooltip_number(title: str) -> float:
    """The number a role's tooltip starts with (``1.616× BF16: ...`` -> 1.616)."""
    return float(title.split()[0].rstrip("×"))


def near(expected: float) -> object:
    """What a tooltip rounds to (the shown precision plus one digit) compares equal to."""
    import pytest

    return pytest.approx(expected, rel=5e-3)


def default_ctrl_c() -> None:
    """``preexec_fn`` for a child process that a test interrupts with SIGINT: Ctrl-C's default action.

    A shell starts a background job (``pytest ... &`` without job control, ``nohup``, some CI
    runners) with SIGINT ignored, and an ignored signal stays ignored through ``fork`` and ``exec``:
    Python then installs no KeyboardInterrupt handler, so the child never notices the test's SIGINT
    and the test hangs. Reset here, in the child before ``exec``, it starts as it would from a
    terminal. (Also unblocked: a blocked SIGINT is inherited the same way.) Call Popen from the main
    thread: ``signal.signal`` works only there.
    """
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})


#: What CPython prints when it drops an exception raised inside a finalizer (``__del__``, a weakref callback).
LOST_IN_A_FINALIZER = "Exception ignored in"


def stop(proc: Any, sig: int, *, grace_s: float = 5.0, presses: int = 4) -> tuple[str, str, int]:
    """Send ``sig`` to ``proc`` and wait for it to exit: ``(stdout, stderr, presses)``.

    SIGKILL is sent once. SIGINT is pressed again after ``grace_s`` while the process still runs, as
    a user whose Ctrl-C went unnoticed would, up to ``presses`` times. CPython drops a
    KeyboardInterrupt raised inside a finalizer (it prints ``Exception ignored in ...`` and goes on):
    a writer that stores in a loop runs filelock's ``BaseFileLock.__del__`` on every store, and a
    Ctrl-C landing in it (about 1 in 300 random instants) used to leave the writer looping while the
    test waited 10 s and failed. A second press is accepted only when the child's stderr shows that
    loss (so ``stderr`` must be a pipe); a child that ignores Ctrl-C, or one still running after
    every press, is killed (nothing is left behind) and the test fails, saying which.
    """
    proc.send_signal(sig)
    pressed = 1
    while True:
        try:  # a retried communicate() keeps what the first read: the whole output comes back at the end
            out, stderr = proc.communicate(timeout=grace_s if sig == signal.SIGINT else 4 * grace_s)
            break
        except subprocess.TimeoutExpired:
            if sig != signal.SIGINT or pressed >= presses:
                proc.kill()
                proc.communicate()
                raise AssertionError(f"the child did not exit within {grace_s:g} s of signal "
                                     f"{signal.Signals(sig).name} (pressed {pressed} time(s))") from None
            proc.send_signal(sig)
            pressed += 1
    stderr = stderr or ""
    if pressed > 1:
        assert LOST_IN_A_FINALIZER in stderr, (
            f"the child needed {pressed} Ctrl-C presses but dropped none in a finalizer:\n{stderr[-2000:]}")
    return out or "", stderr, pressed
