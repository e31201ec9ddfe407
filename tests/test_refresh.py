"""gemm-bench refresh: reading the site through Sphinx (the gemm-questions builder), planning, and the worker pool.

The pool runs real worker processes (spawned, as on a GPU box) with a fake GPU
(:mod:`tests.fake_gpu`) that copies committed measurements; every test writes into a tmp cache.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from gemm_bench.cli.refresh import (
    MAX_WORKER_DEATHS,
    GpuSlot,
    Job,
    RefreshError,
    Rules,
    collect_jobs,
    make_plan,
    needs_measuring,
    read_site,
    refresh,
    select_gpus,
)
from gemm_bench.question.question import build_question
from gemm_bench.results.cache import Cache, read_document
from gemm_bench.results.schema import METHOD_VERSION
from gemm_bench.results.stack import document_stack
from tests.fake_gpu import DEVICE_NAME, REPO, fake_measure
from tests.helpers import default_ctrl_c

DOCS = REPO / "docs"
#: Each distinct site is read once per test run (conftest.py): these tests refresh copies of the same pages.
pytestmark = pytest.mark.usefixtures("shared_site_reads")
H100 = [GpuSlot(0, DEVICE_NAME, "GPU-fake-0")]
TWO_H100 = [GpuSlot(0, DEVICE_NAME, "GPU-fake-0"), GpuSlot(1, DEVICE_NAME, "GPU-fake-1")]


#: The "Speedup by model" page asks for models no GPU has measured yet; the fake GPU replays
#: committed measurements only, so the pages it refreshes are the others.
NOT_YET_MEASURED_PAGES = ("models.rst",)


def measured_jobs() -> list[Job]:
    """The real site's questions that the committed cache answers on the H100 with the current method
    (a result of an earlier method is stale everywhere: planned, never an answer)."""
    jobs, _ = collect_jobs(DOCS)
    return [job for job in jobs if _current(DOCS / "_gemm_cache" / f"{job.hash}--h100-80gb-hbm3.json")]


def _current(path: Path) -> bool:
    return path.exists() and read_document(path)["method_version"] == METHOD_VERSION


def site(tmp_path: Path) -> Path:
    """A copy of the real site's pages (no cache): the questions refresh must find."""
    src = tmp_path / "docs"
    shutil.copytree(DOCS, src, ignore=shutil.ignore_patterns("_build", "_gemm_cache", "_static",
                                                             *(Path(p).name for p in NOT_YET_MEASURED_PAGES)))
    return src


def run(src: Path, cache: Path, gpus: list[GpuSlot], tmp_path: Path, **kwargs: object) -> object:
    lines: list[str] = []
    kwargs.setdefault("with_studies", False)
    outcome = refresh(src, cache_dir=cache, gpus=gpus, measure=fake_measure, lock_dir=tmp_path / "locks",
                      out=lines.append, **kwargs)  # type: ignore[arg-type]
    outcome.plan = "\n".join(lines)  # type: ignore[attr-defined]
    return outcome


@pytest.fixture
def calls(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    directory = tmp_path / "calls"
    directory.mkdir()
    monkeypatch.setenv("FAKE_GPU_CALLS", str(directory))
    monkeypatch.delenv("FAKE_GPU_HANG", raising=False)
    return directory


def measured(calls: Path) -> list[str]:
    return sorted(p.name.split(".")[0] for p in calls.iterdir() if not p.name.startswith("hang."))


# ------------------------------------------------------------------------------- reading the site
#: A site's conf.py as the guide's: the extension and MyST with colon fences.
CONF = 'extensions = ["myst_parser", "gemm_benchmark"]\nmyst_enable_extensions = ["colon_fence"]\n'


def project(tmp_path: Path, pages: dict[str, str], conf: str = CONF) -> Path:
    """A documentation source directory with ``conf.py`` and ``pages`` (dedented)."""
    src = tmp_path / "docs"
    src.mkdir()
    (src / "conf.py").write_text(conf, encoding="utf-8")
    for name, text in pages.items():
        (src / name).parent.mkdir(parents=True, exist_ok=True)
        (src / name).write_text(textwrap.dedent(text), encoding="utf-8")
    return src


def asked(src: Path) -> list[tuple[str, str]]:
    """(location, question description) of every ask refresh finds, in page order."""
    jobs, problems = collect_jobs(src)
    assert problems == []
    return sorted((a.location, job.question.describe()) for job in jobs for a in job.asks)


def test_rst_literal_examples_are_not_questions_and_continued_options_are_read(tmp_path: Path) -> None:
    src = project(tmp_path, {"index.rst": """\
        Title
        =====

        .. code-block:: rst

           .. gemm-benchmark::
              :model: llama3-8b

        An example::

           .. gemm-benchmark::
              :model: mixtral-8x7b

        .. gemm-benchmark::
           :model: te-guide-5b
           :precisions: bf16,
              fp8-current
           :devices: h100

        .. note::

           .. gemm-benchmark::
              :sweep: 256, 512
        """})
    jobs, problems = collect_jobs(src)
    assert problems == []
    found = sorted((a.location, a.precisions, a.devices, job.question.kind) for job in jobs for a in job.asks)
    assert found == [
        (f"{src / 'index.rst'}:14", ("bf16", "fp8-current"), ("h100-80gb-hbm3",), "model"),
        (f"{src / 'index.rst'}:22", ("bf16", "fp8-delayed", "fp8-current", "fp8-block", "mxfp8", "nvfp4"), (),
         "sweep"),
    ]


def test_myst_fences_colon_fences_and_yaml_options_but_not_code_examples(tmp_path: Path) -> None:
    src = project(tmp_path, {"index.md": """\
        # Page

        ````md
        ```{gemm-benchmark}
        :model: llama3-8b
        ```
        ````

        ```{gemm-benchmark}
        :model: te-guide-5b
        :devices: h100
        ```

        :::{gemm-benchmark}
        ---
        sweep: 256, 512
        ---
        :::

        ````{note}
        ```{gemm-benchmark}
        :model: mixtral-8x7b
        ```
        ````
        """})
    page = src / "index.md"
    found = asked(src)
    assert [location for location, _ in found] == [f"{page}:14", f"{page}:21", f"{page}:9"]
    assert sorted(describe for _, describe in found) == sorted([
        build_question(model="te-guide-5b").describe(), "2 square sizes",
        build_question(model="mixtral-8x7b").describe()])


# The scanner of page text that refresh used before it read the site through Sphinx missed the
# three cases below: a maintainer's plan said "nothing to do" for pages that showed "not measured".
def test_a_directive_in_an_included_file_is_found_at_its_own_file_and_line(tmp_path: Path) -> None:
    src = project(tmp_path, {
        "index.rst": "Title\n=====\n\n.. include:: _parts/models.rst\n",
        "_parts/models.rst": "Models\n------\n\n.. gemm-benchmark::\n   :model: llama3-8b\n",
    }, conf=CONF + 'exclude_patterns = ["_parts"]\n')  # a part, not a page of its own
    assert asked(src) == [(f"{src / '_parts' / 'models.rst'}:4", build_question(model="llama3-8b").describe())]


def test_a_directive_in_a_myst_eval_rst_block_is_found(tmp_path: Path) -> None:
    src = project(tmp_path, {"index.md": """\
        # Page

        ```{eval-rst}
        .. gemm-benchmark::
           :model: llama3-8b
           :precisions: fp8-block
        ```
        """})
    jobs, problems = collect_jobs(src)
    assert problems == [] and [j.question.hash for j in jobs] == [build_question(model="llama3-8b").hash]
    (ask,) = jobs[0].asks
    assert ask.precisions == ("bf16", "fp8-block") and ask.location.startswith(f"{src / 'index.md'}:")


def test_directive_names_in_any_letter_case_are_found_as_docutils_builds_them(tmp_path: Path) -> None:
    """docutils looks directive names up case-insensitively, so these render on the HTML page too."""
    src = project(tmp_path, {"index.rst": """\
        .. GEMM-Benchmark::
           :model: llama3-8b

        .. Gemm-Benchmark-Summary::
           :models: te-guide-5b
        """})
    assert asked(src) == [(f"{src / 'index.rst'}:1", build_question(model="llama3-8b").describe()),
                          (f"{src / 'index.rst'}:4", build_question(model="te-guide-5b").describe())]


def test_reading_the_site_measures_nothing_and_writes_nothing_into_it(tmp_path: Path) -> None:
    src = project(tmp_path, {"index.rst": ".. gemm-benchmark::\n   :model: llama3-8b\n"})
    before = sorted(p.relative_to(src) for p in src.rglob("*"))
    data = read_site(src)
    assert [q["hash"] for q in data["questions"]] == [build_question(model="llama3-8b").hash]
    assert sorted(p.relative_to(src) for p in src.rglob("*")) == before  # no cache, no _build


def test_a_site_without_the_extension_or_conf_py_is_a_refresh_error(tmp_path: Path) -> None:
    src = project(tmp_path, {"index.rst": "Text\n"}, conf="extensions = []\n")
    with pytest.raises(RefreshError, match="gemm_benchmark extension"):
        collect_jobs(src)
    (src / "conf.py").unlink()
    with pytest.raises(RefreshError, match=r"no conf\.py"):
        collect_jobs(src)


def test_site_questions_are_the_directives_questions(tmp_path: Path) -> None:
    """Every question the real site asks is found once, with every page location that asks it."""
    from gemm_benchmark.options import parse_options

    jobs, problems = collect_jobs(DOCS)
    assert problems == []
    by_hash = {job.hash: job for job in jobs}
    # The authoring page's examples are code blocks: not questions of the site.
    assert all("authoring" not in a.location for job in jobs for a in job.asks)
    te = parse_options({"model": "te-guide-5b"}, srcdir=DOCS, docdir=DOCS).question.hash
    assert len(by_hash[te].asks) >= 2  # index.rst and tutorial.md ask the same question: measured once
    for job in jobs:  # the committed cache answers every question the site asks on the H100 ...
        if not (DOCS / "_gemm_cache" / f"{job.hash}--h100-80gb-hbm3.json").exists():
            # ... except models only the model page asks for, which says they are not measured yet, and the
            # EP 8 layers (session 19), measured on the H200 only: their pages say so on the H100.
            assert (DOCS / "_gemm_cache" / f"{job.hash}--h200.json").exists() or all(
                a.location.startswith(tuple(str(DOCS / p) for p in NOT_YET_MEASURED_PAGES)) for a in job.asks), job.asks


def test_dedupe_unions_cells_only_of_directives_showing_the_device(tmp_path: Path) -> None:
    src = project(tmp_path, {
        "index.rst": "Site\n====\n",
        "a.rst": ".. gemm-benchmark::\n   :model: te-guide-5b\n   :precisions: fp8-current\n"
                 "   :modes: autocast\n   :devices: h100\n",
        "b.md": "```{gemm-benchmark}\n:model: te-guide-5b\n:precisions: fp8-block\n:devices: h200\n```\n",
    })
    jobs, problems = collect_jobs(src)
    assert problems == [] and len(jobs) == 1
    assert jobs[0].wanted_on(DEVICE_NAME) == (["bf16", "fp8-current"], ["autocast"])
    assert jobs[0].wanted_on("NVIDIA H200") == (["bf16", "fp8-block"], ["autocast", "prequant"])
    assert jobs[0].wanted_on("NVIDIA B200") is None


def test_invalid_directive_is_reported_with_its_location_and_skipped(tmp_path: Path) -> None:
    src = project(tmp_path, {"index.rst": "Site\n====\n",
                             "x.rst": "Text\n\n.. gemm-benchmark::\n   :model: no-such-model\n"})
    jobs, problems = collect_jobs(src)
    assert jobs == []
    assert len(problems) == 1 and problems[0].startswith(f"{src / 'x.rst'}:3: :model:")


# ------------------------------------------------------------------------------- planning
def test_plan_from_committed_cache_is_empty_and_a_missing_precision_is_planned(tmp_path: Path) -> None:
    jobs = measured_jobs()
    cache = Cache(DOCS / "_gemm_cache")
    stack = read_document(DOCS / "_gemm_cache" / f"{jobs[0].hash}--h100-80gb-hbm3.json")["provenance"]
    local = {"method": document_stack(read_document(DOCS / "_gemm_cache" / f"{jobs[0].hash}--h100-80gb-hbm3.json"))[
        "method"], "transformer_engine": stack["transformer_engine"], "torch": stack["torch"],
             "cuda": stack["cuda"], "driver": stack["driver"]}
    tasks, fresh = make_plan(jobs, cache, DEVICE_NAME, local, Rules())
    # Fresh but for a result with a reading refused when read (failed: measured again, issue 43); a timed
    # group's refused board power fails no measurement (it is telemetry beside the times), so it plans nothing.
    refused = sorted(j.hash for j in jobs if any(v.block != "groups" for v in read_document(
        DOCS / "_gemm_cache" / f"{j.hash}--h100-80gb-hbm3.json").violations))  # type: ignore[attr-defined]
    assert sorted(t.question.hash for t in tasks) == refused and len(fresh) == len(jobs) - len(refused)
    upgraded = dict(local, transformer_engine="99.0")
    tasks, _ = make_plan(jobs, cache, DEVICE_NAME, upgraded, Rules())
    assert len(tasks) == len(jobs) and all("Transformer Engine" in t.reason for t in tasks)
    doc = read_document(DOCS / "_gemm_cache" / f"{jobs[0].hash}--h100-80gb-hbm3.json")
    doc["cells"] = [c for c in doc["cells"] if c["precision"] != "fp8-block"]
    todo = needs_measuring(doc, jobs[0].question, ["bf16", "fp8-block"], ["autocast"], local, Rules())
    # The mode is measured whole: what was asked, and every precision the file holds in that mode.
    assert todo is not None and todo[1] == ["autocast"]
    assert todo[0][:2] == ["bf16", "fp8-block"] and set(todo[0]) == {
        "bf16", "fp8-block", *(c["precision"] for c in doc["cells"] if c["mode"] == "autocast")}


def test_select_gpus_rejects_unknown_indices_and_mixed_kinds() -> None:
    gpus = [GpuSlot(0, "NVIDIA H100 80GB HBM3"), GpuSlot(1, "NVIDIA H200")]
    with pytest.raises(RefreshError, match="--gpus: '7' is not a GPU index"):
        select_gpus(gpus, "0,7")
    with pytest.raises(RefreshError, match="different kinds"):
        select_gpus(gpus, "all")
    assert select_gpus(gpus, "1") == [gpus[1]]
    with pytest.raises(RefreshError, match="no NVIDIA GPU"):
        select_gpus([], "all")


def test_dry_run_prints_the_plan_and_measures_nothing(tmp_path: Path, calls: Path) -> None:
    src = site(tmp_path)
    outcome = run(src, tmp_path / "cache", H100, tmp_path, dry_run=True)
    assert measured(calls) == [] and not (tmp_path / "cache").exists()
    assert "question(s) to measure on 1 GPU(s)" in outcome.plan  # type: ignore[attr-defined]
    assert "not measured on this device yet" in outcome.plan  # type: ignore[attr-defined]


# ------------------------------------------------------------------------------- the pool
def test_two_workers_write_the_same_files_as_a_serial_run(tmp_path: Path, calls: Path) -> None:
    src = site(tmp_path)
    serial = run(src, tmp_path / "serial", H100, tmp_path)
    serial_calls = measured(calls)
    for p in calls.iterdir():
        p.unlink()
    sharded = run(src, tmp_path / "sharded", TWO_H100, tmp_path)
    assert serial.ok and sharded.ok  # type: ignore[attr-defined]
    names = sorted(p.name for p in (tmp_path / "serial").glob("*.json"))
    assert names == sorted(p.name for p in (tmp_path / "sharded").glob("*.json"))
    assert len(names) == len(collect_jobs(src)[0])
    for name in names:
        assert (tmp_path / "serial" / name).read_bytes() == (tmp_path / "sharded" / name).read_bytes()
        assert "fake GPU" in read_document(tmp_path / "sharded" / name)["provenance"]["fake"]
    assert measured(calls) == serial_calls  # each question measured once
    # Both workers took questions from the queue, each pinned to its own GPU.
    pins = {p.name.split(".")[1]: p.read_text().splitlines()[0] for p in calls.iterdir()}
    assert sorted(set(pins.values())) == ["0", "1"] and len(pins) == 2
    # Nothing left to do: a re-run plans nothing.
    again = run(src, tmp_path / "sharded", TWO_H100, tmp_path)
    assert "0 question(s) to measure" in again.plan  # type: ignore[attr-defined]


@pytest.mark.parametrize("sig", [signal.SIGKILL, signal.SIGINT], ids=["SIGKILL", "SIGINT"])
def test_killed_worker_leaves_a_valid_cache_and_a_rerun_measures_only_what_is_missing(
        tmp_path: Path, calls: Path, monkeypatch: pytest.MonkeyPatch, sig: signal.Signals) -> None:
    src = site(tmp_path)
    cache = tmp_path / "cache"
    jobs, _ = collect_jobs(src)
    victim = jobs[1].hash
    monkeypatch.setenv("FAKE_GPU_HANG", victim)

    def kill_the_hanging_worker() -> None:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            hung = list(calls.glob("hang.*"))
            if hung:
                time.sleep(0.2)  # let the other worker get on with its questions
                os.kill(int(hung[0].name.split(".")[1]), sig)
                return
            time.sleep(0.02)

    killer = threading.Thread(target=kill_the_hanging_worker)
    killer.start()
    outcome = run(src, cache, TWO_H100, tmp_path)
    killer.join()
    assert not outcome.ok  # type: ignore[attr-defined]
    assert any(victim in line for line in outcome.failed)  # type: ignore[attr-defined]
    assert outcome.interrupted is (sig == signal.SIGINT)  # type: ignore[attr-defined]
    stored = sorted(cache.glob("*.json"))
    for path in stored:
        read_document(path)  # every file is valid
    assert not any(victim in p.name for p in stored)
    assert not [p for p in cache.iterdir() if p.suffix == ".tmp"]
    kept = {p.name: p.read_bytes() for p in stored}

    monkeypatch.delenv("FAKE_GPU_HANG")
    for p in calls.iterdir():
        p.unlink()
    rerun = run(src, cache, TWO_H100, tmp_path)
    assert rerun.ok  # type: ignore[attr-defined]
    done_before = {name.split("--")[0] for name in kept}
    assert measured(calls) == sorted(j.hash for j in jobs if j.hash not in done_before)
    assert victim in measured(calls)
    for name, data in kept.items():
        assert (cache / name).read_bytes() == data  # what was stored before is untouched


def test_a_question_that_kills_its_worker_fails_alone_and_the_gpu_goes_on(
        tmp_path: Path, calls: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A library abort (torch's ~CUDAGraph on DeepSeek-V3, on the H100) kills the worker: that
    question fails with the exit code, a new worker measures the GPU's remaining questions."""
    src = site(tmp_path)
    cache = tmp_path / "cache"
    jobs, _ = collect_jobs(src)
    victim = jobs[0].hash
    monkeypatch.setenv("FAKE_GPU_ABORT", victim)
    monkeypatch.setenv("FAKE_GPU_CALLS", str(calls))
    outcome = run(src, cache, H100, tmp_path)
    assert outcome.failed == [f"{victim}--h100-80gb-hbm3: the worker for GPU 0 exited with code "  # type: ignore[attr-defined]
                              f"{-signal.SIGABRT} while measuring it; nothing of it was stored"]
    assert outcome.not_started == [] and not outcome.interrupted  # type: ignore[attr-defined]
    stored = sorted(p.name.split("--")[0] for p in cache.glob("*.json"))
    assert stored == sorted(j.hash for j in jobs if j.hash != victim)
    assert len({p.name.split(".")[1] for p in calls.iterdir()}) == 2  # two worker processes


def test_a_worker_that_holds_a_failed_capture_is_replaced_after_storing(
        tmp_path: Path, calls: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A failed CUDA graph capture's graphs (and memory pool) live as long as the process: after
    storing that question the worker hands its GPU to a fresh one (an out-of-memory capture on
    DeepSeek-V3 ran gpt-oss-120b, next in the same process, out of memory too)."""
    src = site(tmp_path)
    cache = tmp_path / "cache"
    jobs, _ = collect_jobs(src)
    monkeypatch.setenv("FAKE_GPU_LEAK", jobs[0].hash)
    outcome = run(src, cache, H100, tmp_path)
    assert outcome.ok  # type: ignore[attr-defined]
    assert sorted(p.name.split("--")[0] for p in cache.glob("*.json")) == sorted(j.hash for j in jobs)
    pids = {p.name.split(".")[1] for p in calls.iterdir()}
    first = {p.name.split(".")[1] for p in calls.glob(f"{jobs[0].hash}.*")}
    assert len(pids) == 2 and len(first) == 1  # the leaking question's worker measured only it


def test_a_gpu_whose_workers_keep_dying_is_given_up(tmp_path: Path, calls: Path,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    src = site(tmp_path)
    jobs, _ = collect_jobs(src)
    assert len(jobs) > MAX_WORKER_DEATHS
    monkeypatch.setenv("FAKE_GPU_ABORT", "*")
    outcome = run(src, tmp_path / "cache", H100, tmp_path)
    assert len(outcome.failed) == MAX_WORKER_DEATHS  # type: ignore[attr-defined]
    assert len(outcome.not_started) == len(jobs) - MAX_WORKER_DEATHS  # type: ignore[attr-defined]


@pytest.mark.parametrize("swallowed", [False, True], ids=["plain", "swallowed-twice"])
def test_ctrl_c_stops_every_worker_and_keeps_what_was_stored(tmp_path: Path, calls: Path, swallowed: bool,
                                                             shared_site_reads: Any) -> None:
    """Ctrl-C in a terminal: SIGINT to the whole process group (parent and workers).

    ``swallowed-twice``: as on the GPU machine under ``timeout -s INT`` (which signals the command
    and then its group), the parent gets SIGINT twice, and the hanging worker's measurement swallows
    its KeyboardInterrupt and returns a result anyway: that result must not be stored, and the
    parent must still finish its clean-up and say it was interrupted."""
    src = site(tmp_path)
    cache = tmp_path / "cache"
    jobs, _ = collect_jobs(src)
    # The refresh in the child reads the pages as this run already did (tests.site_build.SiteReads):
    # what is tested here is the pool's Ctrl-C, not a Sphinx read of the same pages once more.
    read = tmp_path / "site-read.json"
    read.write_text(json.dumps(shared_site_reads(src)), encoding="utf-8")
    code = textwrap.dedent(f"""\
        import json, sys
        from pathlib import Path
        from gemm_bench.cli import refresh as module
        from gemm_bench.cli.refresh import GpuSlot, refresh
        from tests.fake_gpu import fake_measure
        module.read_site = lambda srcdir: json.loads(Path({str(read)!r}).read_text(encoding="utf-8"))
        gpus = [GpuSlot(0, {DEVICE_NAME!r}, "a"), GpuSlot(1, {DEVICE_NAME!r}, "b")]
        outcome = refresh(Path({str(src)!r}), cache_dir=Path({str(cache)!r}), gpus=gpus, measure=fake_measure,
                          lock_dir=Path({str(tmp_path / 'locks')!r}), with_studies=False)
        print("interrupted" if outcome.interrupted else "finished", flush=True)
        sys.exit(130 if outcome.interrupted else 0)
        """)
    env = dict(os.environ, FAKE_GPU_HANG=jobs[2].hash, PYTHONPATH=os.pathsep.join(
        [str(REPO), str(REPO / "bench"), str(REPO / "sphinxext"), os.environ.get("PYTHONPATH", "")]))
    if swallowed:
        env["FAKE_GPU_SWALLOW"] = "1"
    proc = subprocess.Popen([sys.executable, "-c", code], env=env, cwd=REPO, start_new_session=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, preexec_fn=default_ctrl_c)
    deadline = time.monotonic() + 60
    while not list(calls.glob("hang.*")) and time.monotonic() < deadline:
        time.sleep(0.05)
    time.sleep(0.3)
    os.killpg(proc.pid, signal.SIGINT)
    if swallowed:
        time.sleep(0.01)
        os.kill(proc.pid, signal.SIGINT)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 130, err
    assert "interrupted" in out
    assert "Traceback" not in err, err
    for path in cache.glob("*.json"):
        read_document(path)
    assert not any(jobs[2].hash in p.name for p in cache.glob("*.json"))
    # No worker outlives the refresh.
    pids = {int(p.name.split(".")[1]) for p in calls.iterdir()}
    for pid in pids:
        with pytest.raises(ProcessLookupError):
            os.kill(pid, 0)


def test_force_re_measures_the_questions_and_force_studies_the_studies(tmp_path: Path) -> None:
    """``--force`` re-measures every question, not the studies (they do not depend on the questions
    and cost minutes); ``--force-studies`` does. A fresh study is planned only when forced."""
    import shutil

    from gemm_bench.cli.refresh import Rules as RefreshRules
    from gemm_bench.cli.refresh import plan_studies
    from gemm_bench.results import studies

    shutil.copytree(Path(__file__).parent.parent / "docs" / "_gemm_cache" / "studies", tmp_path / "studies")
    docs, errors = studies.read_studies(tmp_path, "dynamic-range")
    assert docs and not errors
    doc = docs[0]
    local = {key: str(doc["provenance"].get(key)) for key in ("transformer_engine", "torch")}
    device = doc["device"]["name"]
    forced = RefreshRules(force=True)
    assert "dynamic-range" not in [t.name for t in plan_studies(tmp_path, device, local, forced)]
    planned = {t.name: t.reason for t in plan_studies(tmp_path, device, local, RefreshRules(), force=True)}
    assert planned["dynamic-range"] == "forced"


def test_a_study_of_several_gpus_is_planned_on_a_box_of_as_many_and_never_narrowed(tmp_path: Path) -> None:
    """Issue 42 item 6: the refresh measures the multi-GPU parts (the tp-comm study) with the box's
    GPUs. On one GPU it is not planned and the plan says why; on a box of two with none stored it is
    planned on both; where the stored study was measured on four GPUs (TP 4 in it), a box of two
    keeps it, even forced, and says so (measuring it there would lose TP 4)."""
    import shutil

    from gemm_bench.cli.refresh import Rules as RefreshRules
    from gemm_bench.cli.refresh import StudySkip, describe_studies, plan_studies
    from gemm_bench.results import studies

    shutil.copytree(Path(__file__).parent.parent / "docs" / "_gemm_cache" / "studies", tmp_path / "studies")
    docs, _ = studies.read_studies(tmp_path, "tp-comm")
    stored = next(d for d in docs if d["device"]["name"] == "NVIDIA H200")
    assert stored["provenance"]["method"]["gpus"] == 4
    local = {key: str(stored["provenance"].get(key)) for key in ("transformer_engine", "torch")}

    skipped: list[StudySkip] = []
    one = plan_studies(tmp_path, "NVIDIA H200", local, RefreshRules(), force=True, gpus=1, skipped=skipped)
    assert "tp-comm" not in [t.name for t in one]
    assert [s.name for s in skipped] == ["tp-comm"] and "needs 2 GPUs, this refresh has 1" in skipped[0].why
    assert "tp-comm: not measured here: needs 2 GPUs" in describe_studies(one, skipped)

    skipped = []
    two = plan_studies(tmp_path, "NVIDIA H200", local, RefreshRules(), force=True, gpus=2, skipped=skipped)
    assert "tp-comm" not in [t.name for t in two]
    assert "kept: its stored run used 4 GPUs and this refresh has 2" in skipped[0].why
    four = plan_studies(tmp_path, "NVIDIA H200", local, RefreshRules(), force=True, gpus=4)
    assert next(t for t in four if t.name == "tp-comm").gpus == 4
    # every study of one GPU still runs on one
    assert {t.gpus for t in four if t.name != "tp-comm"} == {1}

    (tmp_path / "studies" / "tp-comm--h200.json").unlink()
    fresh = plan_studies(tmp_path, "NVIDIA H200", local, RefreshRules(), gpus=2)
    task = next(t for t in fresh if t.name == "tp-comm")
    assert (task.gpus, task.reason) == (2, "not measured on this device yet")
    assert "tp-comm: " in describe_studies(fresh) and "on 2 GPUs" in describe_studies(fresh)


def test_run_studies_gives_a_study_of_several_gpus_all_of_them(tmp_path: Path) -> None:
    """A study of two GPUs runs with both visible (and both locked); a study of one on the first."""
    from gemm_bench.cli.refresh import GpuSlot, StudyTask, run_studies

    seen: dict[str, str] = {}

    def command(name: str, cache_dir: Path) -> list[str]:
        seen[name] = os.environ.get("CUDA_VISIBLE_DEVICES", "")
        return [sys.executable, "-c", "pass"]

    gpus = [GpuSlot(0, "NVIDIA H200", "u0"), GpuSlot(1, "NVIDIA H200", "u1")]
    outcome = run_studies([StudyTask("tp-comm", "missing", None, 2), StudyTask("loss-parity", "missing", None)],
                          gpus, cache_dir=tmp_path, lock_dir=tmp_path / "locks", out=lambda line: None,
                          command=command)
    assert outcome.stored == ["tp-comm", "loss-parity"]
    assert seen == {"tp-comm": "0,1", "loss-parity": "0"}


def test_an_emulated_study_is_stale_on_a_real_gpu_of_its_kind(tmp_path: Path) -> None:
    """The H100's layout-search study was measured on an H200 with the H100's capacity emulated: a
    refresh on a real H100 measures it for real, whatever the stack and age rules say; the H200's own
    study (not emulated) stays fresh there."""
    import shutil

    from gemm_bench.cli.refresh import Rules as RefreshRules
    from gemm_bench.cli.refresh import plan_studies
    from gemm_bench.results import studies

    shutil.copytree(Path(__file__).parent.parent / "docs" / "_gemm_cache" / "studies", tmp_path / "studies")
    docs, _ = studies.read_studies(tmp_path, "layout-search")
    h100 = next(d for d in docs if d["device"]["name"] == "NVIDIA H100 80GB HBM3")
    local = {key: str(h100["provenance"].get(key)) for key in ("transformer_engine", "torch")}
    planned = {t.name: t.reason for t in plan_studies(tmp_path, "NVIDIA H100 80GB HBM3", local, RefreshRules())}
    assert planned.get("layout-search") == "emulated on an NVIDIA H200: this box measures it for real"
    h200 = {t.name for t in plan_studies(tmp_path, "NVIDIA H200", local, RefreshRules())}
    assert "layout-search" not in h200
