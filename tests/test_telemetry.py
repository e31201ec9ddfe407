"""Clock/power telemetry and the events-vs-profiler cross-check (gemm_bench.measure.telemetry), on CPU.

The sampler child runs for real here, against a fake ``pynvml`` put on its path; the runner's
order of work (every group timed before any profiler session) is checked with the fake GPU of
test_phases.
"""

from __future__ import annotations

import contextlib
import copy
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from gemm_bench.measure import telemetry
from gemm_bench.measure.timing import Samples
from gemm_bench.results.schema import ResultError, merge_documents, validate
from tests.test_phases import fake_runner  # noqa: F401  (a fixture)

FAKE_PYNVML = '''
class NVMLError(Exception):
    pass
NVML_CLOCK_SM = 1
def nvmlInit():
    pass
def nvmlDeviceGetHandleByIndex(i):
    if i != 0:
        raise NVMLError("Not Found")
    return "gpu0"
def nvmlDeviceGetHandleByUUID(u):
    raise NVMLError("Not Found")
def nvmlDeviceGetClockInfo(handle, kind):
    return 1755
def nvmlDeviceGetPowerUsage(handle):
    return 612345  # milliwatts
'''


def test_summary_of_samples_and_of_none() -> None:
    block = telemetry.summarize([1980.0, 1500.0, 1600.0], [400.0, 700.5, 650.0])
    assert block == {"samples": 3, "sm_clock_mhz_median": 1600.0, "sm_clock_mhz_min": 1500.0,
                     "power_w_median": 650.0, "power_w_q1": 525.0, "power_w_q3": 675.2, "power_w_max": 700.5}
    assert telemetry.summarize([], [], "NVML unavailable: x") == {"samples": 0, "reason": "NVML unavailable: x"}
    assert telemetry.summarize([], [])["reason"].startswith("no sample was taken")


def test_clock_drops_are_flagged_against_the_run_median() -> None:
    groups: list[dict[str, Any]] = [
        {"clock": {"samples": 5, "sm_clock_mhz_median": 1980.0}},
        {"clock": {"samples": 5, "sm_clock_mhz_median": 1900.0}},  # 4% below 1980: not flagged
        {"clock": {"samples": 5, "sm_clock_mhz_median": 1700.0}},  # 10.5% below the median 1900
        {"clock": {"samples": 0, "reason": "no NVML"}},
    ]
    assert telemetry.flag_clock_drops(groups) == 1900.0
    assert [g.get("clock_low") for g in groups] == [False, False, True, None]
    assert telemetry.flag_clock_drops([{"clock": {"samples": 0, "reason": "x"}}]) is None


def test_cross_check_ratios_and_stored_ratios() -> None:
    events = {"bf16": {"fprop": Samples([1.01, 1.02, 1.03])}, "fp8": {"fprop": Samples([0.6, 0.6, 0.6])}}
    kernels = {"bf16": {"fprop": Samples([1.0, 1.0, 1.0])}, "fp8": {"fprop": Samples([0.0, 0.0, 0.0])}}
    block = telemetry.cross_check_block(events, kernels)
    # a region whose kernels took no time has no ratio (nothing to divide by)
    assert block == {"rounds": 3, "ratios": {"bf16/fprop": 1.02}, "kernel_ms": {"bf16/fprop": 1.0},
                     "max_deviation": 0.02}
    full = telemetry.with_stored_ratios(block, {"bf16/fprop": 2.5, "fp8/fprop": 0.5})
    assert full["stored_ratios"] == {"bf16/fprop": 2.5}


def test_samples_in_window_keeps_only_the_window_and_skips_torn_lines() -> None:
    text = "1.0 1980 300.0\n2.0 1500 700.0\ngarbage\n2.5 1600 x\n3.0 1400 690.0\n4.0 1980 100.0\n"
    assert telemetry.samples_in_window(text, 2.0, 3.0) == ([1500.0, 1400.0], [700.0, 690.0])


def _fake_env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, source: str = FAKE_PYNVML,
              ident: str = "index:0") -> None:
    """The sampler child finds ``source`` as its ``pynvml``, and this process names the GPU ``ident``."""
    fake = tmp_path / "fake_nvml"
    fake.mkdir()
    (fake / "pynvml.py").write_text(source, encoding="utf-8")
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(fake), os.environ.get("PYTHONPATH", "")]))
    monkeypatch.setattr(telemetry, "gpu_identity", lambda index: ident)


def test_sampler_process_samples_a_window_and_stops(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _fake_env(tmp_path, monkeypatch)
    sampler = telemetry.ClockSampler()
    with sampler.sampling():
        time.sleep(0.3)
    block = sampler.summary()
    assert not sampler.unavailable
    assert block["samples"] >= 3 and block["sm_clock_mhz_median"] == 1755.0 and block["power_w_max"] == 612.3
    with sampler.sampling():
        pass  # a window shorter than one sample interval: said so, never a number from another window
    assert sampler.summary()["samples"] in (0, 1)
    proc, path = sampler._proc, sampler._path
    sampler.close()
    assert proc is not None and proc.returncode == 0 and not Path(path).exists()


def test_sampler_without_nvml_says_why(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    _fake_env(tmp_path, monkeypatch, ident="index:3")  # no such GPU
    sampler = telemetry.ClockSampler()
    with sampler.sampling():
        pass
    assert sampler.summary() == {"samples": 0, "reason": sampler.unavailable}
    assert "NVML cannot open index:3" in sampler.unavailable


def test_sampler_child_usage_errors() -> None:
    out = subprocess.run([sys.executable, "-m", "gemm_bench.measure.telemetry"], capture_output=True, text=True,
                         env={**os.environ, "PYTHONPATH": str(Path(telemetry.__file__).parents[1])})
    assert out.returncode == 2 and "usage" in out.stderr


def _doc_with_groups() -> dict[str, Any]:
    doc = json.loads(Path("tests/data/cache-v1/2160d33ec54a347e--h100-80gb-hbm3.json").read_text(encoding="utf-8"))
    from gemm_bench.results.schema import stamp_run_ids

    doc = stamp_run_ids(doc) if doc["schema_version"] == 1 else doc
    doc["schema_version"] = 2
    doc["run_id"] = "20261123T000000Z-aaaaaaaa"
    for block in ("cells", "peers"):
        for cell in doc[block]:
            cell["run_id"] = doc["run_id"]
    doc["groups"] = [{"label": "prequant qkv/fprop", "mode": "prequant", "members": ["bf16", "fp8-current"],
                      "rounds": 40,
                      "run_id": doc["run_id"], "clock_low": False,
                      "clock": {"samples": 12, "sm_clock_mhz_median": 1755.0, "sm_clock_mhz_min": 1700.0,
                                "power_w_median": 600.0, "power_w_max": 690.0},
                      "cross_check": {"rounds": 3, "ratios": {"bf16/fprop": 1.002},
                                      "kernel_ms": {"bf16/fprop": 2.3}, "stored_ratios": {"bf16/fprop": 1.01},
                                      "max_deviation": 0.002}},
                     {"label": "layer step (layer)", "mode": "layer", "members": ["bf16"], "rounds": 10,
                      "run_id": doc["run_id"],
                      "clock": {"samples": 0, "reason": "NVML unavailable"},
                      "cross_check": {"rounds": 0, "reason": "found 3 L2 flushes for 2 timed regions"}}]
    return doc


def test_groups_validate_and_each_bad_value_names_its_path() -> None:
    doc = _doc_with_groups()
    validate(doc)
    cases = [
        (lambda d: d["groups"][0]["clock"].update(sm_clock_mhz_median=float("nan")), "$.groups[0].clock"),
        (lambda d: d["groups"][0]["clock"].update(samples=-1), "$.groups[0].clock.samples"),
        (lambda d: d["groups"][0]["cross_check"]["ratios"].update({"bf16/fprop": 0}),
         "$.groups[0].cross_check.ratios.bf16/fprop"),
        (lambda d: d["groups"][0].update(members="bf16"), "$.groups[0].members"),
        (lambda d: d["groups"][1]["clock"].pop("reason"), "$.groups[1].clock.reason"),
        (lambda d: d["groups"][1].pop("run_id"), "$.groups[1].run_id"),
        (lambda d: d.update(groups={"a": 1}), "$.groups"),
        (lambda d: d["groups"][0]["clock"].update(sm_clock_mhz_min=1800.0), "$.groups[0].clock.sm_clock_mhz_min"),
        (lambda d: d["groups"][0]["clock"].update(power_w_median=700.0), "$.groups[0].clock.power_w_median"),
        (lambda d: d["groups"][0]["clock"].pop("power_w_max"), "$.groups[0].clock"),
        (lambda d: d["groups"][0]["cross_check"].update(max_deviation=0.0), "$.groups[0].cross_check.max_deviation"),
        (lambda d: d["groups"][0]["cross_check"].pop("max_deviation"), "$.groups[0].cross_check.max_deviation"),
        (lambda d: d["groups"][0]["cross_check"]["stored_ratios"].update({"fp8/wgrad": 1.0}),
         "$.groups[0].cross_check.stored_ratios"),
        (lambda d: d["groups"][0]["cross_check"].update(reason="x"), "$.groups[0].cross_check"),
        (lambda d: d["groups"][0].update(run_id="20991231T000000Z-cccccccc"), "$.groups[0].run_id"),
        (lambda d: d["groups"][0].update(mode="training"), "$.groups[0].mode"),
        (lambda d: d["groups"].append(copy.deepcopy(d["groups"][0])), "$.groups[2]"),
    ]
    for spoil, where in cases:
        bad = copy.deepcopy(doc)
        spoil(bad)
        with pytest.raises(ResultError) as caught:
            validate(bad)
        assert str(caught.value).startswith(where), (where, str(caught.value))


def test_merge_keeps_the_telemetry_of_kept_runs_only() -> None:
    old = _doc_with_groups()
    new = copy.deepcopy(old)
    new["run_id"] = "20261124T000000Z-bbbbbbbb"
    new["cells"] = [dict(c, run_id=new["run_id"]) for c in new["cells"] if c["mode"] == "prequant"]
    new["peers"] = []
    new["groups"] = [dict(new["groups"][0], run_id=new["run_id"])]
    merged = merge_documents(old, new)
    validate(merged)
    # the new run re-measured prequant: the old prequant group (describing numbers no longer
    # shown) goes; the old layer group stays, its run still owning kept (autocast) cells
    assert [(g["mode"], g["run_id"]) for g in merged["groups"]] == [("layer", old["run_id"]),
                                                                     ("prequant", new["run_id"])]
    replaced = copy.deepcopy(new)
    replaced["cells"] = [dict(c, run_id=new["run_id"]) for c in old["cells"]]
    merged = merge_documents(old, replaced)
    assert {g["run_id"] for g in merged["groups"]} == {new["run_id"]}


def test_runner_cross_checks_the_timed_graph_replays_themselves(fake_runner: Any,  # noqa: F811
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    """Method v4: the cross-check profiles the very graph replays that are timed (one session over
    the timed rounds, nothing rebuilt), and each cell stores its kernel time beside its published time."""
    runner, _, _ = fake_runner
    from gemm_bench.measure import timing
    from gemm_bench.measure.timing import GraphedCompetitor, Interleaver, TimerSettings
    from gemm_bench.question.question import build_question

    calls: list[str] = []
    real_adaptive = Interleaver._adaptive

    def adaptive(self: Interleaver, competitors: dict[str, Any], cap: int, *, profile: bool) -> Any:
        calls.append("time")
        assert all(isinstance(c, GraphedCompetitor) for c in competitors.values())
        return real_adaptive(self, competitors, cap, profile=profile)

    monkeypatch.setattr(Interleaver, "_adaptive", adaptive)
    monkeypatch.setattr(timing, "_split_kernels", lambda prof, order: {
        name: {region: timing.Samples([0.5]) for n, region in order if n == name} for name, _ in order})
    monkeypatch.setattr(timing, "_profiler", lambda: contextlib.nullcontext("a profiler"))
    monkeypatch.setattr(telemetry, "gpu_identity", lambda index: "index:0")
    monkeypatch.delenv("TEARDOWN_CUPTI", raising=False)
    settings = TimerSettings(warmup_s=0.0, spinup_s=0.0, repetitions=3, min_repetitions=3, l2_flush=False)
    doc = runner.Runner(settings, peers=False).measure(build_question(shapes=["128x256x512", "64x64x64"]),
                                                      ["bf16", "fp8-current"], ["prequant"])
    assert calls == ["time", "time"]
    assert os.environ["TEARDOWN_CUPTI"] == "1"
    assert [g["label"] for g in doc["groups"]] == ["prequant 128x256x512/fprop", "prequant 64x64x64/fprop"]
    assert all(g["cross_check"]["kernel_ms"] and g["timed"] == "graph replays" for g in doc["groups"])
    # each group's wall time is kept (where a refresh's time goes, group by group), and the schema
    # holds it to a duration
    assert all(isinstance(g["wall_s"], float) and g["wall_s"] >= 0 for g in doc["groups"])
    from gemm_bench.results.schema import ResultError, _groups_block

    _groups_block(doc, doc["groups"])
    with pytest.raises(ResultError, match="wall_s"):
        _groups_block(doc, [{**doc["groups"][0], "wall_s": -1.0}])
    measured = [c for c in doc["cells"] if c["status"] == "measured"]
    assert measured and all(c["kernel_ms"] == 0.5 and c["eager"]["n"] == settings.eager_repetitions
                            for c in measured)
    # the same launches' event median over that kernel time, as the group's cross-check has it
    for c in measured:
        group = next(g for g in doc["groups"] if g["label"].endswith(f"{c['m']}x{c['k']}x{c['n']}/fprop"))
        assert c["kernel_ratio"] == group["cross_check"]["ratios"][f"{c['precision']}/fprop"]
    assert "cross_check" in doc["provenance"]["method"] and "telemetry" in doc["provenance"]["method"]


def test_report_prints_telemetry_and_flags() -> None:
    from gemm_bench.report.report import Report

    doc = _doc_with_groups()
    doc["provenance"]["method"]["telemetry"] = telemetry.method()["telemetry"]
    doc["groups"][0]["clock_low"] = True
    doc["groups"][0]["cross_check"]["stored_ratios"] = {"bf16/fprop": 1.5}
    out = Report(doc).to_text()
    assert max(len(line) for line in out.splitlines()) <= 100
    text = " ".join(out.split())  # the report wraps at 100 columns
    assert "telemetry: 2 timed groups; SM clock medians 1755-1755 MHz, board power up to 690 W" in text
    assert "below the run's median in 1 group(s) (power- or heat-limited while timed):\n    prequant qkv/fprop" in out
    assert "stored time / profiled kernel time per group: median 1.500, 1.500-1.500 over 1 region(s) in 1 group(s)" \
        in text
    assert "above kernel time (the GPU was idle for part of the region: gaps between its kernels, the host's " \
        "work in an eager group, or a lower clock than when profiled) in 1 region(s): prequant qkv/fprop bf16/fprop" \
        in text
    assert "\n    prequant qkv/fprop bf16/fprop\n" in out  # one region per line
    assert "profiled rounds: events up to 1.00x their own kernel time (the same launches" in text
    doc["groups"][0]["cross_check"]["stored_ratios"] = {"bf16/fprop": 0.6}
    text = " ".join(Report(doc).to_text().split())
    assert "below kernel time (the summed kernel time exceeds the elapsed time: kernels overlapped" in text
    assert "idle for part" not in text
    assert "cross-check not possible in 1 group(s), e.g. found 3 L2 flushes" in text
    v1 = json.loads(Path("tests/data/cache-v1/2160d33ec54a347e--h200.json").read_text(encoding="utf-8"))
    assert "telemetry: not measured in this result (method v1)" in Report(v1).to_text()


FAKE_PYNVML_DIES = FAKE_PYNVML.replace(
    "def nvmlDeviceGetClockInfo(handle, kind):\n    return 1755",
    "_calls = [0]\ndef nvmlDeviceGetClockInfo(handle, kind):\n    _calls[0] += 1\n"
    "    if _calls[0] > 5:\n        raise NVMLError('GPU is lost')\n    return 1755")
FAKE_PYNVML_INSTANT = FAKE_PYNVML + """
NVML_FI_DEV_POWER_INSTANT = 186
class _V:
    class value:
        uiVal = 500000
    nvmlReturn = 0
def nvmlDeviceGetFieldValues(handle, fields):
    return [_V()]
"""


def test_a_sampler_that_dies_gives_no_partial_numbers_and_is_reaped(tmp_path: Path,
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    _fake_env(tmp_path, monkeypatch, FAKE_PYNVML_DIES)
    sampler = telemetry.ClockSampler()
    with sampler.sampling():
        time.sleep(0.4)  # the child dies after 5 samples (~0.1 s) inside this window
    first = sampler.summary()
    assert first["samples"] == 0 and "exited during the group" in first["reason"] and "GPU is lost" in first["reason"]
    with sampler.sampling():
        pass
    assert sampler.summary()["reason"] == first["reason"]  # later groups say the same, not "ran shorter"
    assert sampler._proc is None and not sampler._path  # reaped, file removed


def test_sampler_failures_never_raise(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _fake_env(tmp_path, monkeypatch, FAKE_PYNVML)
    sampler = telemetry.ClockSampler()
    sampler.start()
    os.unlink(sampler._path)  # a /tmp cleaner between groups
    with sampler.sampling():
        time.sleep(0.05)
    block = sampler.summary()
    assert block["samples"] == 0 and "unreadable" in block["reason"]
    sampler.close()

    def full(*args: Any, **kwargs: Any) -> Any:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(telemetry.tempfile, "mkstemp", full)
    broken = telemetry.ClockSampler()
    with broken.sampling():
        pass
    assert broken.summary() == {"samples": 0, "reason": broken.unavailable}
    assert "could not start" in broken.unavailable and "No space left" in broken.unavailable


def test_instantaneous_power_is_used_where_the_driver_has_it(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _fake_env(tmp_path, monkeypatch, FAKE_PYNVML_INSTANT)
    sampler = telemetry.ClockSampler()
    with sampler.sampling():
        time.sleep(0.2)
    block = sampler.summary()
    sampler.close()
    assert block["power_source"] == "instantaneous" and block["power_w_max"] == 500.0


def test_the_sampler_process_ends_when_a_run_raises(fake_runner: Any,  # noqa: F811
                                                    monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    runner, _, _ = fake_runner
    from gemm_bench.measure.timing import Interleaver, TimerSettings
    from gemm_bench.question.question import build_question

    _fake_env(tmp_path, monkeypatch, FAKE_PYNVML)

    def broken(self: Interleaver, competitors: dict[str, Any], *, graphs: bool | None = None) -> Any:
        raise KeyboardInterrupt  # not a GPU failure: it ends the run

    monkeypatch.setattr(Interleaver, "run", broken)
    settings = TimerSettings(warmup_s=0.0, spinup_s=0.0, repetitions=3, min_repetitions=3, l2_flush=False)
    r = runner.Runner(settings, peers=False)
    with pytest.raises(KeyboardInterrupt):
        r.measure(build_question(shapes=["128x256x512"]), ["bf16"], ["prequant"])
    assert r.sampler is not None and r.sampler._proc is None and not r.sampler._path


# ------------------------------------------------------------------------------------------------
# The end of a group's window: no fixed wait, the same samples; one sampler per worker process.
# ------------------------------------------------------------------------------------------------
class _LiveChild:
    """A sampler child that never exits (``Popen.poll``), for summaries over a hand-written file."""

    returncode = None

    def poll(self) -> None:
        return None


def _sampler_over(path: Path, lines: list[str], window: tuple[float, float]) -> telemetry.ClockSampler:
    path.write_text("# power: 1 s average\n" + "".join(lines), encoding="ascii")
    sampler = telemetry.ClockSampler()
    sampler._proc, sampler._path, sampler._window = _LiveChild(), str(path), window  # type: ignore[assignment]
    return sampler


def test_summary_reads_at_once_when_a_sample_past_the_window_is_there(tmp_path: Path,
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    # The child writes in time order: a sample after t1 means every sample of [t0, t1] is in the
    # file. The fixed 2 x interval sleep this replaced waited 40 ms after every group regardless.
    sleeps: list[float] = []
    monkeypatch.setattr(telemetry.time, "sleep", sleeps.append)
    sampler = _sampler_over(tmp_path / "s.txt", ["9.99 1500 300.0\n", "10.00 1700 400.0\n", "10.02 1800 500.0\n",
                                                 "10.04 1900 600.0\n", "10.06 1400 100.0\n"], (10.0, 10.05))
    block = sampler.summary()
    assert sleeps == []
    assert block == {"samples": 3, "sm_clock_mhz_median": 1800.0, "sm_clock_mhz_min": 1700.0,
                     "power_w_median": 500.0, "power_w_q1": 450.0, "power_w_q3": 550.0, "power_w_max": 600.0}
    assert sampler._offset == len((tmp_path / "s.txt").read_text())  # the next group reads on from here


def test_summary_waits_for_a_late_child_and_keeps_the_samples_it_was_late_with(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "s.txt"
    sampler = _sampler_over(path, ["10.00 1700 400.0\n", "10.02 18"], (10.0, 10.05))  # a line being written
    late = ["00 500.0\n10.04 1900 600.0\n", "10.06 1400 100.0\n"]
    sleeps: list[float] = []

    def child_writes(seconds: float) -> None:  # the child goes on writing while the summary waits
        sleeps.append(seconds)
        if late:
            with open(path, "a", encoding="ascii") as handle:
                handle.write(late.pop(0))

    monkeypatch.setattr(telemetry.time, "sleep", child_writes)
    block = sampler.summary()
    assert block["samples"] == 3 and block["sm_clock_mhz_median"] == 1800.0
    assert len(sleeps) == 2 and all(s == telemetry.SUMMARY_POLL_S for s in sleeps)  # stopped at 10.06


def test_summary_gives_up_waiting_after_the_bound_and_reads_what_is_there(tmp_path: Path) -> None:
    sampler = _sampler_over(tmp_path / "s.txt", ["10.00 1700 400.0\n", "10.02 1800 500.0\n"], (10.0, 10.05))
    started = time.monotonic()
    block = sampler.summary()
    waited = time.monotonic() - started
    assert block["samples"] == 2
    assert telemetry.SUMMARY_WAIT_S <= waited < telemetry.SUMMARY_WAIT_S + 1.0
    assert 2 * telemetry.SAMPLE_INTERVAL_S <= telemetry.SUMMARY_WAIT_S  # never shorter than the old wait


def test_a_group_summary_is_quick_with_a_real_child(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _fake_env(tmp_path, monkeypatch)
    sampler = telemetry.ClockSampler()
    try:
        waits = []
        for _ in range(10):
            with sampler.sampling():
                time.sleep(0.05)
            started = time.monotonic()
            block = sampler.summary()
            waits.append(time.monotonic() - started)
            assert block["samples"] >= 1
        # Half an interval on average (10 ms) where the fixed sleep took 40 ms; generous for a busy CI box.
        assert sorted(waits)[len(waits) // 2] < 2 * telemetry.SAMPLE_INTERVAL_S
    finally:
        sampler.close()


def test_one_shared_sampler_per_process_and_gpu(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _fake_env(tmp_path, monkeypatch)
    monkeypatch.setattr(telemetry, "_SHARED", {})
    first = telemetry.shared_sampler(0)
    first.start()
    assert first._proc is not None
    child, path = first._proc.pid, first._path
    for _ in range(2):  # two questions: the same child samples both
        sampler = telemetry.shared_sampler(0)
        assert sampler is first
        sampler.start()
        with sampler.sampling():
            time.sleep(0.1)
        assert sampler.summary()["samples"] >= 2
        assert sampler._proc is not None and sampler._proc.pid == child
    assert telemetry.shared_sampler(1) is not first  # another GPU, another sampler
    first.unavailable = "NVML sampler exited: GPU is lost"  # a dead one is replaced for the next question
    fresh = telemetry.shared_sampler(0)
    assert fresh is not first and first._proc is None and not Path(path).exists()
    fresh.start()
    telemetry._close_shared()  # what the process's exit runs
    assert fresh._proc is None and telemetry._SHARED == {}


def test_measure_question_keeps_its_sampler_for_the_next_question(fake_runner: Any,  # noqa: F811
                                                                  monkeypatch: pytest.MonkeyPatch,
                                                                  tmp_path: Path) -> None:
    runner, _, _ = fake_runner
    from gemm_bench.measure.timing import TimerSettings
    from gemm_bench.question.question import build_question

    _fake_env(tmp_path, monkeypatch)
    monkeypatch.setattr(telemetry, "_SHARED", {})
    settings = TimerSettings(warmup_s=0.0, spinup_s=0.0, repetitions=3, min_repetitions=3, l2_flush=False)
    children = []
    for shape in ("128x256x512", "64x64x64"):
        r = runner.Runner(settings, peers=False, shared_sampler=True)
        doc = r.measure(build_question(shapes=[shape]), ["bf16"], ["prequant"])
        assert r.sampler is telemetry._SHARED[(os.getpid(), None)]
        assert r.sampler._proc is not None  # still sampling after the run
        children.append(r.sampler._proc.pid)
        assert doc["provenance"]["measure_s"] >= 0
    assert children[0] == children[1]
    own = runner.Runner(settings, peers=False)  # a runner's own sampler still ends with its run
    own.measure(build_question(shapes=["64x64x64"]), ["bf16"], ["prequant"])
    assert own.sampler is not None and own.sampler._proc is None
    telemetry._close_shared()
