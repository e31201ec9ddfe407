"""Issue 11 end to end on CPU: layer step, SQNR, % of peak, roofline and peers through the results
schema, the cache, Report and the CLI, with a fake runner (tests/fake_beyond.py) and, for the
runner's own wiring, fake torch/TE/peers. No GPU number here is measured: see fake_beyond."""

from __future__ import annotations

import contextlib
import copy
import dataclasses
import io
import json
import sys
import types
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from gemm_bench.cli import commands as cli
from gemm_bench.question.plan import Support, make_plan
from gemm_bench.question.precisions import ALL_MODES, PRECISIONS, normalize_mode
from gemm_bench.question.question import build_question
from gemm_bench.question.shapes import GemmShape
from gemm_bench.report.report import Report
from gemm_bench.results.cache import Cache, read_document
from gemm_bench.results.schema import ResultError, cell_run_id, merge_documents, new_document, validate
from tests import fake_beyond, fake_cuda
from tests.fake_beyond import FakeBeyondRunner, autocast_gemm_ms, beyond_document, source_document

H100 = {"name": "NVIDIA H100 80GB HBM3", "compute_capability": "9.0"}
PROV = {"torch": "2.11.0", "transformer_engine": "2.20.2", "cuda": "13.0", "driver": "580.0",
        "date": "2026-11-20T10:00:00+00:00", "method": {"timer": "synthetic", "repetitions": 1}}


def one_gemm_doc(ms: float, *, device: dict[str, Any] = H100, precision: str = "bf16") -> dict[str, Any]:
    """One 8192^3 prequant cell at ``ms``: hand-checkable % of peak and roofline."""
    g = GemmShape("sq", "fprop", 8192, 8192, 8192)
    doc = new_document(kind="sweep", gemms=[g], num_layers=1, config=None, device=dict(device),
                       provenance=copy.deepcopy(PROV), run_id="hand-run")
    doc["cells"] = [{"mode": "prequant", "precision": precision, "op": "sq", "pass": "fprop", "m": 8192, "k": 8192,
                     "n": 8192, "groups": 1, "status": "measured", "ms": ms,
                     "stats": {"median_ms": ms, "iqr_ms": 0.0}}]
    return doc


# ----------------------------------------------------------------------------- modes and plan
def test_layer_modes_are_modes_but_never_gemm_cells() -> None:
    assert normalize_mode("Layer-Graphed") == "layer-graphed" and normalize_mode("layer") == "layer"
    assert ALL_MODES == ("autocast", "prequant", "layer", "layer-graphed")
    plan = make_plan([GemmShape("sq", "fprop", 64, 64, 64)], ["bf16"], ["layer", "layer-graphed"],
                     {p: Support(True) for p in PRECISIONS})
    assert plan.to_measure == [] and plan.unsupported == []


# ----------------------------------------------------------------------------- % of peak, roofline
def test_report_pct_of_peak_and_roofline_match_hand_computation() -> None:
    report = Report(validate(one_gemm_doc(1.5)))
    g = report.gemms[0]
    flops = 2 * 8192**3  # 1,099,511,627,776
    assert report.pct_of_peak("prequant", "bf16", g) == pytest.approx(flops / 1.5e-3 / 1e12 / 989.5 * 100)
    assert report.pct_of_peak("prequant", "bf16", g) == pytest.approx(74.0786, abs=1e-3)
    # compute-bound: FLOPs / (989.5 TFLOP/s x 0.78), in ms
    assert report.roofline_ms("prequant", "bf16", g) == pytest.approx(flops / (989.5e12 * 0.78) * 1e3)
    cell = report.to_json()["cells"][0]
    assert cell["pct_of_peak"] == pytest.approx(74.0786, abs=1e-3)
    assert cell["roofline_ms"] == pytest.approx(1.42459, abs=1e-4)
    _header, row = [line for line in report.to_text().splitlines() if "%peak" in line or "sq " in line][:2]
    assert row.split()[-1] == "74"  # the %peak column, rounded


def test_report_pct_of_peak_is_none_with_a_reason_where_no_peak_is_known() -> None:
    report = Report(validate(one_gemm_doc(1.5, device={"name": "Some Future GPU", "compute_capability": "12.0"})))
    g = report.gemms[0]
    assert report.pct_of_peak("prequant", "bf16", g) is None
    assert "no published peak for Some Future GPU" in report.pct_of_peak_reason("prequant", "bf16", g)
    assert report.roofline_ms("prequant", "bf16", g) is None
    missing = report.pct_of_peak_reason("autocast", "bf16", g)
    assert "missing" in missing
    out = report.to_json()
    assert out["peaks"]["device"] is None and out["cells"][0]["pct_of_peak"] is None


def test_a_cell_above_its_devices_peak_is_refused_with_its_path() -> None:
    # 8192^3 in 1.0 ms is 1099.5 TFLOP/s: 111% of H100's dense BF16 peak.
    with pytest.raises(ResultError) as err:
        validate(one_gemm_doc(1.0))
    assert err.value.where == "$.cells[0].ms" and "111% of the dense BF16 peak" in str(err.value)
    validate(one_gemm_doc(1.0, precision="fp8-current"))  # 56% of the FP8 peak
    validate(one_gemm_doc(1.0, device={"name": "Some Future GPU", "compute_capability": "12.0"}))  # unknown


# ----------------------------------------------------------------------------- schema of the new blocks
def test_the_fake_runners_document_is_valid_and_says_it_is_synthetic() -> None:
    doc = validate(beyond_document())
    assert any("SYNTHETIC" in note for note in doc["notes"])
    assert doc["accuracy_method"]["synthetic"] and doc["provenance"]["commit"] == "synthetic"


@pytest.mark.parametrize(("edit", "where"), [
    (lambda d: d["layer"][0].update(ms=-1.0), "$.layer[0].ms"),
    (lambda d: d["layer"][0].update(ms=1e9, stats={"median_ms": 1e9, "iqr_ms": 0}), "$.layer[0].ms"),
    (lambda d: d["layer"][0]["stats"].update(median_ms=1.0), "$.layer[0].stats.median_ms"),
    (lambda d: d["layer"][0].update(mode="prequant"), "$.layer[0].mode"),
    (lambda d: d["layer"].append(dict(d["layer"][0])), "$.layer[10]"),
    (lambda d: d["layer"][0].update(run_id="bad run id"), "$.layer[0].run_id"),
    (lambda d: d["accuracy"][0].update(sqnr_db=1e6), "$.accuracy[0].sqnr_db"),
    (lambda d: d["accuracy"][0].update(distribution="uniform"), "$.accuracy[0].distribution"),
    (lambda d: d["accuracy"][0].update(op="nope"), "$.accuracy[0]"),
    (lambda d: d.pop("accuracy_method"), "$.accuracy_method"),
])
def test_bad_layer_and_accuracy_blocks_are_refused_with_their_path(edit: Callable[[dict[str, Any]], Any],
                                                                   where: str) -> None:
    doc = beyond_document()
    edit(doc)
    with pytest.raises(ResultError) as err:
        validate(doc)
    assert err.value.where == where


def test_v1_documents_may_not_carry_run_ids_in_the_new_blocks() -> None:
    doc = source_document()
    doc["layer"] = [{"mode": "layer", "precision": "bf16", "status": "failed", "reason": "x", "run_id": "r1"}]
    with pytest.raises(ResultError, match="version 2 field"):
        validate(doc)
    del doc["layer"][0]["run_id"]
    validate(doc)


def test_linear_peer_rows_validate_on_the_ops_fprop_shape() -> None:
    doc = beyond_document()
    fprop = next(g for g in doc["question"]["gemms"] if g["pass"] == "fprop")
    row = {"backend": "torchao Float8Linear (rowwise, torch.compile)", "precision": "FP8 rowwise", "kind": "linear",
           "op": fprop["op"], "m": fprop["m"], "k": fprop["k"], "n": fprop["n"], "groups": 1}
    timed = {"status": "measured", "ms": 2.0, "stats": {"median_ms": 2.0, "iqr_ms": 0}}
    doc["peers"] += [{**row, "pass": "fprop", **timed},
                     {**row, "pass": "backward", "status": "failed", "reason": "compile failed"}]
    validate(doc)
    peers = [p for p in Report(doc).peers() if p.kind == "linear"]
    assert [(p.pass_, p.status) for p in peers] == [("fprop", "measured"), ("backward", "failed")]
    assert peers[0].tflops == pytest.approx(2 * fprop["m"] * fprop["k"] * fprop["n"] / 2e-3 / 1e12)
    doc["peers"][-1]["pass"] = "dgrad"
    with pytest.raises(ResultError, match="linear peer"):
        validate(doc)


def test_merge_replaces_layer_and_accuracy_cells_per_mode() -> None:
    old = beyond_document(run_id="old-run")
    new = beyond_document(modes=("layer",), accuracy=False, run_id="new-run")
    merged = validate(merge_documents(old, new))
    runs = {(c["mode"], cell_run_id(merged, c)) for c in merged["layer"]}
    assert runs == {("layer", "new-run"), ("layer-graphed", "old-run")}
    assert {cell_run_id(merged, c) for c in merged["accuracy"]} == {"old-run"}
    assert merged["accuracy_method"] == old["accuracy_method"]
    assert {c["mode"] for c in merged["cells"]} == {"autocast", "prequant"}
    # The step's GEMM share needs the autocast GEMMs of the layer's own run: not across runs.
    step = Report(merged).step("fp8-current")
    assert step.speedup_vs_bf16 is not None and step.gemm_share is None
    assert "different measurement runs" in step.gemm_share_reason


# ----------------------------------------------------------------------------- report: step, SQNR, v1
def test_report_step_is_amdahl_with_the_runs_own_numbers() -> None:
    report = Report(validate(beyond_document()))
    src = source_document()
    bf16_gemm, fp8_gemm = autocast_gemm_ms(src, "bf16"), autocast_gemm_ms(src, "fp8-current")
    bf16_step = bf16_gemm / fake_beyond.GEMM_SHARE
    step = report.step("fp8-current")
    assert step.status == "measured" and step.run_id == fake_beyond.RUN_ID
    assert step.step_ms == pytest.approx(bf16_step - bf16_gemm + fp8_gemm, abs=1e-5)
    assert step.speedup_vs_bf16 == pytest.approx(bf16_step / (bf16_step - bf16_gemm + fp8_gemm), rel=1e-6)
    assert step.gemm_share == pytest.approx(0.72, rel=1e-6)
    assert step.gemm_speedup == pytest.approx(bf16_gemm / fp8_gemm)
    assert step.amdahl_speedup == pytest.approx(step.speedup_vs_bf16, rel=1e-6)
    assert step.sentence is not None and "72% of the BF16 step" in step.sentence
    graphed = report.step("fp8-current", graphed=True)
    assert step.step_ms is not None and graphed.mode == "layer-graphed"
    assert graphed.step_ms == pytest.approx(step.step_ms - fake_beyond.GRAPH_SAVING_MS, abs=1e-5)
    mx = report.step("mxfp8")
    assert mx.step_ms is None and mx.status == "unsupported" and mx.speedup_vs_bf16 is None
    assert report.step("bf16").speedup_vs_bf16 == 1.0


def test_report_sqnr_per_gemm_and_minimum_over_gemms() -> None:
    report = Report(validate(beyond_document()))
    first, last = report.gemms[0], report.gemms[-1]
    assert report.sqnr("autocast", "fp8-block", first) == pytest.approx(30.0)
    assert report.sqnr("autocast", "fp8-block", first, distribution="outliers") == pytest.approx(29.0)
    assert report.sqnr("autocast", "fp8-block") == pytest.approx(30.0 - 0.1 * 11) == report.sqnr(
        "autocast", "fp8-block", last)
    assert report.sqnr("prequant", "fp8-delayed") is None
    assert "unsupported" in report.sqnr_reason("prequant", "fp8-delayed")
    assert report.sqnr("autocast", "mxfp8") is None
    with pytest.raises(ValueError, match="distribution"):
        report.sqnr("autocast", "bf16", distribution="uniform")


def test_a_v1_result_says_what_it_lacks_never_a_number() -> None:
    report = Report(validate(source_document()))
    step = report.step("fp8-current")
    assert step.step_ms is None and step.status == "missing"
    assert step.reason == "not measured in this result (method v1)"
    assert report.sqnr("autocast", "bf16") is None
    assert report.sqnr_reason("autocast", "bf16").endswith("not measured in this result (method v1)")
    text = report.to_text()
    assert "accuracy (SQNR): not measured in this result (method v1)" in text
    assert "== One layer's step ==\nmissing: not measured in this result (method v1)" in text
    out = report.to_json()
    assert all(s["step_ms"] is None and s["reason"] for s in out["steps"])
    assert all(r["sqnr_db"] is None for r in out["accuracy"]["rows"])
    assert all("method v1" in r["reason"] or "unsupported" in r["reason"] for r in out["accuracy"]["rows"])


def test_moe_question_without_step_cells_says_they_are_missing() -> None:
    question = build_question(model="mixtral-8x7b")
    doc = new_document(kind=question.kind, gemms=list(question.gemms), num_layers=question.num_layers,
                       config=question.config.to_dict() if question.config else None, device=dict(H100),
                       provenance=copy.deepcopy(PROV), run_id="moe-run")
    step = Report(validate(doc), precisions=["bf16"]).step("bf16")
    assert step.status == "missing" and "not measured" in step.reason


def test_peers_are_their_own_rows_never_in_te_totals() -> None:
    report = Report(validate(beyond_document()))
    before = [t.per_layer_ms for t in report.totals()]
    peers = report.peers()
    assert peers and all(p.kind == "gemm" and p.pct_of_peak is not None for p in peers if p.ms is not None)
    matmul = next(p for p in peers if p.backend.startswith("torch.matmul"))
    assert matmul.precision == "BF16"
    assert matmul.tflops is not None and matmul.pct_of_peak == pytest.approx(matmul.tflops / 989.5 * 100)
    assert [t.per_layer_ms for t in report.totals()] == before
    assert "== Peers (context; not in TE totals) ==" in report.to_text()


# ----------------------------------------------------------------------------- cache and CLI end to end
def _cli(*argv: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = cli.main(list(argv))
    return code, out.getvalue(), err.getvalue()


def test_cache_store_and_read_keep_the_new_blocks(tmp_path: Path) -> None:
    path = Cache(tmp_path).store(beyond_document())
    loaded = read_document(path)
    assert len(loaded["layer"]) == 10 and loaded["accuracy"] and loaded["accuracy_method"]
    assert Report(loaded).step("fp8-delayed").speedup_vs_bf16 is not None


def test_cli_run_with_layer_modes_and_accuracy_then_report(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    FakeBeyondRunner.instances = []
    monkeypatch.setattr(cli, "load_runner", lambda: (FakeBeyondRunner, RuntimeError))
    code, out, err = _cli("run", "--model", "te-guide-5b", "--modes", "autocast,prequant,layer,layer-graphed",
                          "--precisions", "bf16,fp8-current,fp8-block", "--accuracy", "--cache-dir", str(tmp_path))
    assert code == 0, err
    (runner,) = FakeBeyondRunner.instances
    assert runner.options["accuracy"] is True
    assert runner.asked == [(["bf16", "fp8-current", "fp8-block"], ["autocast", "prequant", "layer", "layer-graphed"])]
    assert "== One layer's step ==" in out and "== One layer's step, eager ==" in out
    assert "GEMMs are 72% of the BF16 step" in " ".join(out.split())  # report wraps at 100 columns
    (path,) = tmp_path.glob("*.json")

    code, out, _ = _cli("report", str(path))
    assert code == 0
    for expected in ("%peak", "roofline-predicted vs measured", "accuracy: SQNR", "== One layer's step ==",
                     "Amdahl", "x vs BF16"):
        assert expected in out

    code, out, _ = _cli("report", "--json", str(path))
    assert code == 0
    data = json.loads(out)
    measured = [c for c in data["cells"] if c["status"] == "measured"]
    assert all(c["pct_of_peak"] is not None and 0 < c["pct_of_peak"] < 100 for c in measured)
    assert all(c["roofline_ms"] is not None and c["roofline_ms"] > 0 for c in measured)
    step = next(s for s in data["steps"] if s["mode"] == "layer" and s["precision"] == "fp8-current")
    assert step["gemm_share"] == pytest.approx(0.72, rel=1e-6) and step["speedup_vs_bf16"] > 1
    rows = {(r["mode"], r["precision"], r["distribution"]): r for r in data["accuracy"]["rows"]}
    assert rows[("autocast", "bf16", "gaussian")]["sqnr_db"] > rows[("autocast", "fp8-current", "gaussian")]["sqnr_db"]
    assert data["accuracy"]["method"]["synthetic"]
    assert data["peers"] and all("pct_of_peak" in p for p in data["peers"])


def test_cli_run_refuses_an_unknown_mode_before_the_gpu(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(cli, "load_runner", lambda: pytest.fail("bad input must fail first"))
    code, _, err = _cli("run", "--model", "te-guide-5b", "--modes", "layer,training")
    assert code == 2 and "--modes: unknown value 'training'" in err and "layer-graphed" in err


def test_shapes_reads_megatron_args_and_prints_the_ignored_flags() -> None:
    code, out, _ = _cli("shapes", "--megatron-args", "--num-layers 2 --hidden-size 1024 --ffn-hidden-size 4096 "
                        "--num-attention-heads 8 --seq-length 1024 --micro-batch-size 2 --lr 1e-4")
    assert code == 0
    assert "ignored (changes no GEMM and no memory the layout models): --lr" in out and "2048x1024x3072" in out
    code, _, err = _cli("shapes", "--megatron-args=--hidden-size 'x")
    assert code == 2 and "--megatron-args" in err


# ----------------------------------------------------------------------------- the runner's wiring (fakes)
class _Event:
    def __init__(self, enable_timing: bool = False) -> None:
        pass

    def record(self) -> None:
        pass

    def elapsed_time(self, other: _Event) -> float:
        return 1.0


@dataclasses.dataclass(frozen=True)
class _FakePeer:
    name: str
    precision: str
    kind: str = "gemm"
    ok: bool = True

    def available(self) -> tuple[bool, str]:
        return (True, "") if self.ok else (False, "not installed (fake)")

    def competitor(self, gemm: GemmShape) -> Callable[[Callable[[str, str], None]], None]:
        regions = ("fprop", "backward") if self.kind == "linear" else (gemm.pass_,)

        def run(mark: Callable[[str, str], None]) -> None:
            for region in regions:
                mark(region, "start")
                mark(region, "end")

        return run


@pytest.fixture
def fake_runner_module(monkeypatch: pytest.MonkeyPatch) -> Any:
    """``gemm_bench.measure.runner`` against fake torch, TE, provenance, peers, layer step and SQNRs."""
    from gemm_bench.measure import accuracy, peers

    def competitor(*regions: str) -> Callable[[Callable[[str, str], None]], None]:
        def run(mark: Callable[[str, str], None]) -> None:
            for region in regions:
                mark(region, "start")
                mark(region, "end")

        return run

    torch = fake_cuda.fake_torch(fake_cuda.FakeCuda())
    te = types.ModuleType("gemm_bench.measure.backends.te")
    te.VERSION = "0.0-fake"  # type: ignore[attr-defined]
    te.support = lambda: {p: Support(p != "mxfp8", "needs sm_100 (fake)") for p in PRECISIONS}  # type: ignore[attr-defined]
    te.prequant_competitor = lambda p, g: competitor(g.pass_)  # type: ignore[attr-defined]
    te.Operands = object  # type: ignore[attr-defined]
    te.autocast_competitor = lambda p, g, backward, shared: competitor("fprop", "dgrad", "wgrad")  # type: ignore[attr-defined]
    prov = types.ModuleType("gemm_bench.measure.provenance")
    prov.collect = lambda method, version: (dict(H100), {**PROV, "method": method})  # type: ignore[attr-defined]
    layer = types.ModuleType("gemm_bench.measure.backends.layer_step")
    asked: dict[str, Any] = {}

    def measure_layer_step(question: Any, precisions: Any, time_group: Any, *, support: Any, modes: Any) -> Any:
        from gemm_bench.measure.step import layer_cell

        asked["layer"] = (list(precisions), list(modes))
        timed = time_group({p: lambda: competitor("step") for p in precisions}, "layer-graphed" in modes, "balanced")
        return [layer_cell(m, p, "measured", ms=timed.samples[p]["step"].median,
                           stats=timed.samples[p]["step"].to_stats()) for m in modes for p in precisions]

    layer.measure_layer_step = measure_layer_step  # type: ignore[attr-defined]

    def measure_step_energy(question: Any, steps: Any, sampler: Any) -> Any:
        from gemm_bench.results.energy import alone_energy

        asked["energy rebuilt"] = dict(steps)
        return [alone_energy(p, {"power_w_median": 500.0, "samples": 15}, 0.3, 100, 128) for p in steps]

    layer.measure_step_energy = measure_step_energy  # type: ignore[attr-defined]

    def energy_after(config: Any, sampler: Any, out: list) -> Any:
        from gemm_bench.results.energy import alone_energy

        def after(graphed: Any, ms: Any) -> None:  # on the layer-step group's own graphs, once timed
            asked["energy"] = dict(ms)
            out.extend(alone_energy(p, {"power_w_median": 500.0, "samples": 15}, 0.3, 100, 128) for p in graphed)

        return after

    layer.energy_after = energy_after  # type: ignore[attr-defined]

    def measure_accuracy(question: Any, precisions: Any, modes: Any, *, support: Any, run_id: str) -> Any:
        asked["accuracy"] = (list(precisions), list(modes), run_id)
        g = question.gemms[0]
        return [accuracy.accuracy_cell(m, p, g, "gaussian", "measured", sqnr=30.0, run_id=run_id)
                for m in modes for p in precisions]

    import gemm_bench
    import gemm_bench.measure.backends

    monkeypatch.setitem(sys.modules, "torch", torch)
    monkeypatch.setitem(sys.modules, "torch.profiler", torch.profiler)
    monkeypatch.setitem(sys.modules, "gemm_bench.measure.backends.te", te)
    monkeypatch.setitem(sys.modules, "gemm_bench.measure.backends.layer_step", layer)
    monkeypatch.setitem(sys.modules, "gemm_bench.measure.provenance", prov)
    monkeypatch.setattr(gemm_bench.measure, "provenance", prov, raising=False)
    monkeypatch.setattr(gemm_bench.measure.backends, "te", te, raising=False)
    monkeypatch.setattr(accuracy, "measure_accuracy", measure_accuracy)
    monkeypatch.setattr(peers, "registered_peers", lambda: [
        _FakePeer("gemm peer", "BF16"), _FakePeer("bf16", "FP8 rowwise"),  # a name equal to a precision id
        _FakePeer("linear peer", "FP8 tensorwise", kind="linear"), _FakePeer("absent peer", "BF16", ok=False)])
    monkeypatch.delitem(sys.modules, "gemm_bench.measure.runner", raising=False)
    import gemm_bench.measure.runner as runner

    monkeypatch.delitem(sys.modules, "gemm_bench.measure.runner")
    return runner, asked


def test_runner_measures_peers_layer_step_and_accuracy_in_one_run(fake_runner_module: Any) -> None:
    runner, asked = fake_runner_module
    from gemm_bench.measure.timing import TimerSettings

    settings = TimerSettings(warmup_s=0.0, spinup_s=0.0, repetitions=3, min_repetitions=3, l2_flush=False)
    question = build_question(fields=dict(hidden_size=256, ffn_hidden_size=512, num_attention_heads=4,
                                          micro_batch_size=1, seq_length=128))
    doc = runner.Runner(settings, accuracy=True, telemetry=False).measure(question, ["fp8-current", "mxfp8"],
                                                         ["autocast", "prequant", "layer-graphed"])
    validate(doc)
    assert not any(c["mode"].startswith("layer") for c in doc["cells"])
    assert asked["layer"] == (["bf16", "fp8-current", "mxfp8"], ["layer-graphed"])
    assert {c["run_id"] for c in doc["layer"]} == {doc["run_id"]}
    assert asked["accuracy"] == (["bf16", "fp8-current", "mxfp8"], ["autocast", "prequant"], doc["run_id"])
    assert doc["accuracy_method"]["distributions"]
    method = doc["provenance"]["method"]
    assert "te.TransformerLayer" in method["layer_step"] and "SQNR" in method["accuracy"]
    rows = {(p["backend"], p["op"], p["pass"]): p for p in doc["peers"]}
    assert rows[("gemm peer", "qkv", "dgrad")]["status"] == "measured"
    assert rows[("bf16", "qkv", "dgrad")]["status"] == "measured"  # never confused with TE's bf16 cells
    assert rows[("absent peer", "qkv", "fprop")] == {**rows[("absent peer", "qkv", "fprop")], "status": "unsupported",
                                                     "reason": "not installed (fake)"}
    assert {p for (b, _, p) in rows if b == "linear peer"} == {"fprop", "backward"}
    statuses = {(c["mode"], c["precision"], c["status"]) for c in doc["cells"]}
    assert statuses == {(m, p, s) for m in ("autocast", "prequant")
                        for p, s in (("bf16", "measured"), ("fp8-current", "measured"), ("mxfp8", "unsupported"))}
    report = Report(doc)
    assert report.layer_modes == ["layer-graphed"] and report.step("fp8-current", graphed=True).step_ms is not None
    assert report.sqnr("autocast", "fp8-current", question.gemms[0]) == 30.0


def test_runner_without_peers_or_extras_measures_only_gemms(fake_runner_module: Any) -> None:
    runner, asked = fake_runner_module
    from gemm_bench.measure.timing import TimerSettings

    settings = TimerSettings(warmup_s=0.0, spinup_s=0.0, repetitions=3, min_repetitions=3, l2_flush=False)
    doc = runner.Runner(settings, peers=False, telemetry=False).measure(
        build_question(shapes=["128x256x512"]), ["bf16"], ["prequant"])
    assert doc["peers"] == [] and "layer" not in doc and "accuracy" not in doc and asked == {}
    with pytest.raises(ValueError, match="unknown modes"):
        runner.Runner(settings).measure(build_question(shapes=["128x256x512"]), ["bf16"], ["training"])


def test_one_measuring_path_measures_everything_a_page_may_show(fake_runner_module: Any) -> None:
    """Class (issue 24, lost data): a GPU docs build re-measuring a stale result asked only for the
    page's GEMM modes and replaced the whole file, dropping its step and SQNRs. The docs build and
    ``gemm-bench refresh`` now measure through one function, which always adds the layer step in
    both forms (for a model) and the SQNRs."""
    runner, asked = fake_runner_module
    from gemm_bench.question.question import build_question

    question = build_question(fields=dict(hidden_size=256, ffn_hidden_size=512, num_attention_heads=4,
                                          micro_batch_size=1, seq_length=128))
    from gemm_bench.measure.timing import TimerSettings

    settings = TimerSettings(warmup_s=0.0, spinup_s=0.0, repetitions=3, min_repetitions=3, l2_flush=False)
    doc = runner.measure_question(question, ["fp8-current"], ["autocast"], settings=settings)
    assert asked["layer"][1] == ["layer", "layer-graphed"]
    assert "accuracy" in asked and doc.get("accuracy") and doc.get("layer")
    assert {c["mode"] for c in doc["layer"]} == {"layer", "layer-graphed"}
    # and each recipe's graphed step energy (issue 33), when the runner samples power
    assert set(asked["energy"]) == {"bf16", "fp8-current"} and len(doc["energy"]["steps"]) == 2
    # ... on the layer-step group's own graphs, right after its timed rounds: no second build and capture
    assert "energy rebuilt" not in asked
    import inspect

    from gemm_benchmark import execution

    assert "measure_question(" in inspect.getsource(execution.detect_gpu)  # the docs build's path is the same
