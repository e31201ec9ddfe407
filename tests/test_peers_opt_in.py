"""Issue 34's peers decision: peers are measured only for questions some page shows them for, and a
page that starts showing them measures the peers alone, merged into the cached result.

Also the runner's memory release after a timed group, only when live memory is tight (the author
build's fixed costs), with the out-of-memory retry that keeps it safe.
"""

from __future__ import annotations

import copy
import json
import textwrap
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from gemm_bench.cli import refresh
from gemm_bench.question.question import Question, build_question
from gemm_bench.report.report import Report
from gemm_bench.results.cache import Cache, read_document
from gemm_bench.results.merge import PeersMergeError, merge_peers, store_peers
from gemm_bench.results.schema import new_run_id, validate
from gemm_bench.results.stack import PEERS_NOT_MEASURED, Rules, Todo, peers_measured, remeasure
from gemm_benchmark import execution
from gemm_benchmark.options import DEFAULT_SHOW, parse_options
from tests.conftest import H100, make_document
from tests.test_phases import FakeClock, fake_runner  # noqa: F401  (a fixture: the runner against fakes)

FAKE = {"name": "NVIDIA Fake GPU", "compute_capability": "9.0"}
TE = build_question(model="te-guide-5b")


def peer_rows(question: Question, modes: tuple[str, ...] = ("autocast", "prequant"), *, ms: float = 0.5,
              run_id: str | None = None) -> list[dict[str, Any]]:
    """Measured rows of one GEMM peer per pass (prequant) and one Linear peer per op (autocast)."""
    rows = []
    stamp = {"run_id": run_id} if run_id else {}
    for g in question.gemms:
        base = {"op": g.op, "m": g.m, "k": g.k, "n": g.n, "groups": g.groups, "status": "measured", "ms": ms,
                "stats": {"median_ms": ms, "iqr_ms": ms * 0.01}, **stamp}
        if "prequant" in modes:
            rows.append({"backend": "torch.matmul (BF16)", "precision": "BF16", "kind": "gemm", "pass": g.pass_,
                         **base})
        if "autocast" in modes and g.pass_ == "fprop":
            for region in ("fprop", "backward"):
                rows.append({"backend": "torchao Float8Linear (tensorwise, torch.compile)",
                             "precision": "FP8 tensorwise", "kind": "linear", "pass": region, **base})
    return rows


def peers_only_run(question: Question, modes: tuple[str, ...], *, device: dict[str, Any] = H100,
                   ms: float = 0.25) -> dict[str, Any]:
    """What a peers-only run returns: no cell, the peers of ``modes``, a run id of its own."""
    doc = make_document(question, device=device, precisions=("bf16",), modes=())
    doc.update(run_id=new_run_id(), cells=[], peers=peer_rows(question, modes, ms=ms))
    doc["provenance"]["method"]["peers"] = "registered peers, timed in a run of their own"
    doc["provenance"]["date"] = "2026-11-21T10:00:00+00:00"
    return validate(doc)


# ------------------------------------------------------------------------------- what shows peers
def test_peers_are_shown_only_where_show_names_them(tmp_path: Path) -> None:
    assert "peers" not in DEFAULT_SHOW
    plain = parse_options({"model": "te-guide-5b"}, srcdir=tmp_path, docdir=tmp_path)
    assert "peers" not in plain.show
    asked = parse_options({"model": "te-guide-5b", "show": "table, peers"}, srcdir=tmp_path, docdir=tmp_path)
    assert "peers" in asked.show


# ------------------------------------------------------------------------------- the planner
def test_a_new_question_is_measured_with_peers_only_when_a_page_shows_them() -> None:
    without = remeasure(None, TE, ["fp8-current"], ["autocast"], local=None, rules=Rules())
    assert without is not None and not without.peers and not without.peers_only
    with_peers = remeasure(None, TE, ["fp8-current"], ["autocast"], local=None, rules=Rules(), peers=True)
    assert with_peers is not None and with_peers.peers and not with_peers.peers_only


def test_a_fresh_result_without_peers_gets_the_peers_alone() -> None:
    doc = make_document(TE, precisions=("bf16", "fp8-current"))
    assert not peers_measured(doc, "autocast") and peers_measured(doc, "layer")  # a layer mode has no peers
    # No page shows peers: nothing to do.
    assert remeasure(doc, TE, ["fp8-current"], ["autocast", "prequant"], local=None, rules=Rules()) is None
    todo = remeasure(doc, TE, ["fp8-current"], ["autocast", "prequant"], local=None, rules=Rules(), peers=True)
    assert todo == Todo(["bf16"], ["autocast", "prequant"], todo.why, True, True)
    assert "peers" in todo.why
    # The Linear peers held, the GEMM peers missing: only the pre-quantized GEMMs' peers.
    doc["peers"] = peer_rows(TE, ("autocast",))
    todo = remeasure(doc, TE, ["fp8-current"], ["autocast", "prequant"], local=None, rules=Rules(), peers=True)
    assert todo is not None and todo.peers_only and todo.modes == ["prequant"]
    doc["peers"] = peer_rows(TE)
    assert remeasure(doc, TE, ["fp8-current"], ["autocast", "prequant"], local=None, rules=Rules(), peers=True) is None


def test_missing_cells_are_measured_with_the_peers_in_the_same_run() -> None:
    doc = make_document(TE, precisions=("bf16",), modes=("autocast",))
    todo = remeasure(doc, TE, ["fp8-current"], ["autocast"], local=None, rules=Rules(), peers=True)
    assert todo is not None and todo.peers and not todo.peers_only and todo.modes == ["autocast"]


# ------------------------------------------------------------------------------- merging peers alone
def test_merge_peers_adds_the_rows_and_touches_nothing_else() -> None:
    cached = make_document(TE, precisions=("bf16", "fp8-current"))
    cached["peers"] = peer_rows(TE, ("autocast",), ms=0.9)  # old Linear peers stay: the run times GEMM peers
    run = peers_only_run(TE, ("prequant",))
    merged = validate(merge_peers(cached, run))
    assert [c for c in merged["cells"]] == [{**c, "run_id": cached["run_id"]} for c in cached["cells"]]
    assert merged["run_id"] == cached["run_id"]
    assert merged["provenance"]["date"] == cached["provenance"]["date"]
    assert merged["provenance"]["peers_run"]["run_id"] == run["run_id"]
    assert merged["provenance"]["peers_run"]["date"] == run["provenance"]["date"]
    assert merged["provenance"]["method"]["peers"] == run["provenance"]["method"]["peers"]
    kinds = {(p["kind"], p["run_id"]) for p in merged["peers"]}
    assert kinds == {("linear", cached["run_id"]), ("gemm", run["run_id"])}
    # The report's peer rows name the peers' run, its TE cells the cached run: nothing divides one by the other.
    report = Report(merged, modes=["prequant"], precisions=["bf16", "fp8-current"])
    assert {r.run_id for r in report.peers() if r.kind == "gemm"} == {run["run_id"]}
    assert {report.cell("prequant", "bf16", g).run_id for g in report.gemms} == {cached["run_id"]}
    # A second peers-only run of GEMM peers replaces the first one's rows.
    again = peers_only_run(TE, ("prequant",), ms=0.3)
    twice = validate(merge_peers(merged, again))
    assert {p["ms"] for p in twice["peers"] if p["kind"] == "gemm"} == {0.3}
    assert len(twice["peers"]) == len(merged["peers"])


def test_merge_peers_refuses_another_question_or_device() -> None:
    cached = make_document(TE, precisions=("bf16",))
    other = peers_only_run(build_question(model="llama3-8b"), ("prequant",))
    with pytest.raises(PeersMergeError, match="question"):
        merge_peers(cached, other)
    with pytest.raises(PeersMergeError, match="NVIDIA Fake GPU"):
        merge_peers(cached, peers_only_run(TE, ("prequant",), device=FAKE))


def test_store_peers_merges_atomically_into_the_cached_file(tmp_path: Path) -> None:
    cache = Cache(tmp_path)
    cached = make_document(TE, precisions=("bf16", "fp8-current"))
    path = cache.store(cached)
    run = peers_only_run(TE, ("autocast", "prequant"))
    assert store_peers(cache, run) == path
    stored = read_document(path)
    assert {c["run_id"] for c in stored["cells"]} == {cached["run_id"]}
    assert {p["run_id"] for p in stored["peers"]} == {run["run_id"]}
    assert not list(tmp_path.glob("*.tmp*"))


# ------------------------------------------------------------------------------- the runner
class _Peer:
    def __init__(self, name: str, kind: str, clock: FakeClock) -> None:
        self.name, self.precision, self.kind, self.clock = name, "BF16", kind, clock

    def available(self) -> tuple[bool, str]:
        return True, ""

    def competitor(self, gemm: Any) -> Callable[[Callable[[str, str], None]], None]:
        regions = ("fprop", "backward") if self.kind == "linear" else (gemm.pass_,)

        def run(mark: Callable[[str, str], None]) -> None:
            for region in regions:
                mark(region, "start")
                self.clock.advance(0.01)
                mark(region, "end")

        return run


def _settings() -> Any:
    from gemm_bench.measure.timing import TimerSettings

    return TimerSettings(warmup_s=0.0, spinup_s=0.0, repetitions=3, min_repetitions=3, l2_flush=False,
                         eager_repetitions=2, target_ci=0.0)


def test_the_runner_records_that_it_measured_no_peers(fake_runner: Any) -> None:  # noqa: F811
    runner, _, _ = fake_runner
    doc = runner.Runner(_settings(), peers=False, telemetry=False).measure(
        build_question(shapes=["128x256x512"]), ["bf16"], ["prequant"])
    assert doc["peers"] == [] and doc["provenance"]["method"]["peers"] == PEERS_NOT_MEASURED


def test_a_peers_only_run_times_the_peers_alone(fake_runner: Any, monkeypatch: pytest.MonkeyPatch) -> None:  # noqa: F811
    runner, clock, _ = fake_runner
    fakes = [_Peer("gemm peer", "gemm", clock), _Peer("linear peer", "linear", clock)]
    monkeypatch.setattr(runner.peer_registry, "registered_peers", lambda: fakes)
    built: list[str] = []
    te = runner.te_backend
    monkeypatch.setattr(te, "prequant_competitor", lambda *a: built.append("prequant"), raising=False)
    monkeypatch.setattr(te, "autocast_competitor", lambda *a, **k: built.append("autocast"), raising=False)
    monkeypatch.setattr(te, "Operands", object, raising=False)
    q = build_question(shapes=["128x256x512"])
    doc = runner.Runner(_settings(), peers=True, telemetry=False).measure(
        q, ["bf16"], ["autocast", "prequant"], peers_only=True)
    assert built == []  # no Transformer Engine competitor was built
    assert doc["cells"] == [] and "accuracy" not in doc and "layer" not in doc
    rows = {(p["backend"], p["pass"]): p["status"] for p in doc["peers"]}
    assert rows == {("gemm peer", "fprop"): "measured", ("linear peer", "fprop"): "measured",
                    ("linear peer", "backward"): "measured"}
    assert doc["provenance"]["method"]["peers"] == runner.PEERS_ONLY_METHOD
    # A valid result of its own (the fake provenance lacks only the stack's versions).
    doc["provenance"].update(torch="2.11", cuda="13.0", driver="580", date="2026-11-21T10:00:00+00:00")
    validate(doc)
    with pytest.raises(ValueError, match="peers_only"):
        runner.Runner(_settings(), peers=False, telemetry=False).measure(q, ["bf16"], ["prequant"], peers_only=True)


def test_memory_is_released_after_a_group_only_when_it_is_tight(fake_runner: Any) -> None:  # noqa: F811
    runner, _, _ = fake_runner
    import torch  # the fake of the fixture

    q = build_question(shapes=["128x256x512", "64x64x64"])
    released: list[int] = []
    original = runner._release

    def counting() -> None:
        released.append(1)
        original()

    runner._release = counting
    try:
        runner.Runner(_settings(), peers=False, telemetry=False).measure(q, ["bf16", "fp8-current"], ["prequant"])
        assert released == []  # two groups, little live memory: the allocator keeps its blocks
        torch.cuda.allocated = int(0.5 * 80 * 10**9)
        runner.Runner(_settings(), peers=False, telemetry=False).measure(q, ["bf16", "fp8-current"], ["prequant"])
        assert len(released) == 2  # half the device live after each group: released after each
    finally:
        runner._release = original
        torch.cuda.allocated = 0


def test_an_out_of_memory_build_after_a_skipped_release_is_retried_once(fake_runner: Any,  # noqa: F811
                                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    runner, _, helpers = fake_runner
    attempts: list[str] = []
    released: list[int] = []
    monkeypatch.setattr(runner, "_release", lambda: released.append(1))

    def prequant_competitor(precision: str, gemm: Any) -> Any:
        attempts.append(f"{gemm.m}/{precision}")
        # The second GEMM's first build finds the memory the first group left to the collector.
        if gemm.m == 64 and attempts.count(f"{gemm.m}/{precision}") == 1 and not released:
            raise RuntimeError("CUDA out of memory. Tried to allocate 2.00 GiB")
        return helpers["competitor"](gemm.pass_)

    monkeypatch.setattr(runner.te_backend, "prequant_competitor", prequant_competitor, raising=False)
    doc = runner.Runner(_settings(), peers=False, telemetry=False).measure(
        build_question(shapes=["128x256x512", "64x64x64"]), ["bf16"], ["prequant"])
    assert {c["status"] for c in doc["cells"] if c["precision"] == "bf16"} == {"measured"}
    assert attempts == ["128/bf16", "64/bf16", "64/bf16"] and len(released) == 1


# ------------------------------------------------------------------------------- the docs build
@pytest.fixture
def peers_gpu(monkeypatch: pytest.MonkeyPatch) -> list[tuple[tuple[str, ...], tuple[str, ...], bool, bool]]:
    """A fake GPU recording (precisions, modes, peers, peers_only) of every measurement."""
    calls: list[tuple[tuple[str, ...], tuple[str, ...], bool, bool]] = []

    def measure(question: Question, precisions: Any, modes: Any, *, peers: bool, peers_only: bool) -> dict[str, Any]:
        calls.append((tuple(precisions), tuple(modes), peers, peers_only))
        if peers_only:
            return peers_only_run(question, tuple(modes), device=FAKE)
        doc = make_document(question, device=FAKE, precisions=precisions, modes=modes)
        doc["peers"] = peer_rows(question, tuple(modes)) if peers else []
        return doc

    monkeypatch.setattr(execution, "gpu_detector", lambda: (execution.LocalGpu(FAKE["name"], measure), ""))
    execution.reset_detection()
    return calls


def _page(srcdir: Path, show: str) -> None:
    (srcdir / "index.rst").write_text(textwrap.dedent(f"""\
        Peers
        =====

        .. gemm-benchmark::
           :model: te-guide-5b
           :precisions: bf16, fp8-current
           :modes: autocast
           {show}
        """), encoding="utf-8")


@pytest.mark.sphinx("html", testroot="execution", srcdir="peers-not-shown")
def test_a_page_without_peers_measures_none(app: Any, peers_gpu: list[Any]) -> None:
    _page(Path(app.srcdir), "")
    app.build()
    assert peers_gpu == [(("bf16", "fp8-current"), ("autocast",), False, False)]


@pytest.mark.sphinx("html", testroot="execution", srcdir="peers-shown-later")
def test_a_page_that_starts_showing_peers_measures_them_alone(app: Any, peers_gpu: list[Any]) -> None:
    cache = Path(app.srcdir) / "_gemm_cache"
    cached = make_document(TE, device=FAKE, precisions=("bf16", "fp8-current"), modes=("autocast",))
    path = Cache(cache).store(cached)
    _page(Path(app.srcdir), ":show: table, peers")
    app.build()
    assert peers_gpu == [(("bf16",), ("autocast",), True, True)]
    stored = read_document(path)
    assert [{k: v for k, v in c.items() if k != "run_id"} for c in stored["cells"]] == cached["cells"]
    assert {p["kind"] for p in stored["peers"]} == {"linear"}
    html = (Path(app.outdir) / "index.html").read_text(encoding="utf-8")
    assert "gemm-peers" in html


@pytest.mark.sphinx("html", testroot="execution", srcdir="peers-two-runs")
def test_a_run_of_some_modes_with_peers_is_followed_by_the_other_modes_peers(app: Any, peers_gpu: list[Any]) -> None:
    """The pre-quantized cells are missing (measured with their peers); the cached autocast cells
    lack their peers: those are measured alone after, in the same build, so the page has every peer."""
    cache = Path(app.srcdir) / "_gemm_cache"
    path = Cache(cache).store(make_document(TE, device=FAKE, precisions=("bf16", "fp8-current"), modes=("autocast",)))
    (Path(app.srcdir) / "index.rst").write_text(textwrap.dedent("""\
        Peers
        =====

        .. gemm-benchmark::
           :model: te-guide-5b
           :precisions: bf16, fp8-current
           :modes: autocast, prequant
           :show: table, peers
        """), encoding="utf-8")
    app.build()
    assert peers_gpu == [(("bf16", "fp8-current"), ("prequant",), True, False), (("bf16",), ("autocast",), True, True)]
    assert {p["kind"] for p in read_document(path)["peers"]} == {"gemm", "linear"}


# ------------------------------------------------------------------------------- gemm-bench refresh
def _job(*peers: bool) -> refresh.Job:
    asks = [refresh.Ask(("bf16", "fp8-current"), ("autocast", "prequant"), (), f"page{i}.rst:1", shows)
            for i, shows in enumerate(peers)]
    return refresh.Job(TE, asks)


def test_refresh_measures_peers_iff_some_page_shows_them(tmp_path: Path) -> None:
    cache = Cache(tmp_path)
    for shows in ((False,), (False, True)):
        [task], _ = refresh.make_plan([_job(*shows)], cache, H100["name"], None, Rules())
        assert task.peers is any(shows) and not task.peers_only


def test_the_questions_builder_records_which_directives_show_peers(tmp_path: Path) -> None:
    src = tmp_path / "src"
    src.mkdir()
    (src / "conf.py").write_text('extensions = ["gemm_benchmark"]\n', encoding="utf-8")
    (src / "index.rst").write_text(textwrap.dedent("""\
        Site
        ====

        .. gemm-benchmark::
           :model: te-guide-5b
           :precisions: fp8-current

        .. gemm-benchmark::
           :model: te-guide-5b
           :precisions: fp8-current
           :show: peers
        """), encoding="utf-8")
    data = refresh.read_site(src)
    [question] = data["questions"]
    assert [a["peers"] for a in question["asks"]] == [False, True]
    jobs, _ = refresh.collect_jobs(src)
    assert jobs[0].peers_on(H100["name"]) and [a.peers for a in jobs[0].asks] == [False, True]


def _timed_reference() -> dict[str, Any]:
    """A cached run that timed peers: 20 s of it, 10 s of which the groups' phases, half of the
    members peers, and 3 s of the peers' setup; 1 s of support and spin-up."""
    doc = make_document(TE, precisions=("bf16", "fp8-current"))
    doc["peers"] = peer_rows(TE)
    doc["provenance"]["measure_s"] = 20.0
    doc["provenance"]["phases_s"] = {"timed rounds": 6.0, "warm-up": 4.0, "support checks and provenance": 0.5,
                                     "spin-up": 0.5, "first call (probe)": 5.0}
    doc["groups"] = [{"label": "prequant qkv/fprop", "mode": "prequant", "members": ["bf16", "peer:x"],
                      "rounds": 10, "setup_s": {"bf16": 0.1, "peer:x": 3.0}, "run_id": doc["run_id"]}]
    return validate(doc)


def test_the_estimate_counts_the_peers_in_or_out(tmp_path: Path) -> None:
    reference = _timed_reference()
    assert refresh.peers_seconds(reference) == pytest.approx(3.0 + 0.5 * 10.0)
    assert refresh.peers_seconds(make_document(TE)) is None
    cache = Cache(tmp_path)
    stale = copy.deepcopy(reference)
    stale["provenance"]["date"] = "2020-01-01T00:00:00+00:00"
    cache.store(stale)
    rules = Rules(max_age_days=30)
    [without], _ = refresh.make_plan([_job(False)], cache, H100["name"], None, rules)
    [with_peers], _ = refresh.make_plan([_job(True)], cache, H100["name"], None, rules)
    assert with_peers.estimate_s == pytest.approx(20.0)
    assert without.estimate_s == pytest.approx(20.0 - 8.0) and "less its peers" in without.estimate_source
    # A fresh result without peers, now shown: the peers alone, estimated from the run that timed them.
    fresh = make_document(TE, precisions=("bf16", "fp8-current"), device=H100)
    fresh["provenance"]["measure_s"] = 12.0
    other = copy.deepcopy(reference)
    other["device"] = {**other["device"], "name": "NVIDIA H200"}
    Cache(tmp_path / "two").store(fresh)
    Cache(tmp_path / "two").store(validate(other))
    [alone], _ = refresh.make_plan([_job(True)], Cache(tmp_path / "two"), H100["name"], None, Rules())
    assert alone.peers_only and alone.estimate_s == pytest.approx(8.0)
    plan = refresh.describe_plan([alone], [], [refresh.GpuSlot(0, H100["name"])])
    assert "the peers alone" in plan


def test_a_refresh_worker_merges_a_peers_only_run(tmp_path: Path) -> None:
    cache = Cache(tmp_path / "cache")
    cached = make_document(TE, precisions=("bf16", "fp8-current"))
    path = cache.store(cached)
    calls: list[tuple[bool, bool]] = []

    def measure(question: Question, precisions: Any, modes: Any, *, peers: bool, peers_only: bool) -> dict[str, Any]:
        calls.append((peers, peers_only))
        return peers_only_run(question, tuple(modes))

    [task], _ = refresh.make_plan([_job(True)], cache, H100["name"], None, Rules())
    assert task.peers_only and task.modes == ("autocast", "prequant")
    setup = refresh.WorkerSetup(refresh.GpuSlot(0, H100["name"]), cache.directory, tmp_path / "lock", measure, None,
                                Rules())
    assert refresh._measure_and_store(cache, setup, task) == path
    assert calls == [(True, True)]
    stored = json.loads(path.read_text(encoding="utf-8"))
    assert {c["run_id"] for c in stored["cells"]} == {cached["run_id"]} and len(stored["peers"]) == len(peer_rows(TE))
