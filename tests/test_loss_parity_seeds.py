"""The loss-parity study's BF16 seed band (method v2): the extra seeds the trainer runs and stores,
the schema of the ``seed_band`` block, the band the page computes from it, the directive's verdict
("within" / "beyond" BF16's seed-to-seed range), and the committed method-v1 results, which have no
band and must still render, saying so.

The trainer itself needs a GPU with Transformer Engine (its real seed band is checked in
``test_loss_parity.py``'s GPU test); here the seed band's loop runs on CPU with a stand-in for one
BF16 training run, so what is asserted is which seeds, weights and batch orders it asks for and what
it stores. Every document is synthetic (:func:`tests.test_loss_parity.synthetic_data`) unless it is
one of the committed files, which are copied into a temporary cache, never written.
"""

from __future__ import annotations

import copy
import hashlib
import json
from pathlib import Path
from typing import Any

import pytest
from bs4 import BeautifulSoup

from gemm_bench.measure import loss_parity as lp
from gemm_bench.results import loss_parity_schema as schema
from gemm_bench.results import studies
from tests.test_loss_parity import (
    _build,
    synthetic_band_run,
    synthetic_data,
    synthetic_document,
    table_rows,
)

#: The H100 and H200 loss-parity results of method v1 (no seed band), as committed before their
#: re-measurement with v2 (git show 6fc4aa1:docs/_gemm_cache/studies/...): real files, kept as test data.
COMMITTED = Path(__file__).resolve().parent / "data" / "loss-parity-v1"
#: The results the site shows now.
SITE = Path(__file__).resolve().parent.parent / "docs" / "_gemm_cache" / "studies"
COMMITTED_FILES = ("loss-parity--h100-80gb-hbm3.json", "loss-parity--h200.json")


# ------------------------------------------------------------------------------ the trainer's loop
def _fake_bf16_run(calls: list[tuple[int, list[list[int]]]]) -> Any:
    """One BF16 "training run" on CPU: a record shaped as :func:`lp.train_recipe`'s whose initial
    weights and final losses follow the seed, as a real run's do."""
    def train(config: lp.TrainingConfig, order: list[list[int]]) -> dict[str, Any]:
        calls.append((config.seed, order))
        final = 1.5 + 0.001 * (config.seed % 7)
        val = [5.6, round(final + 0.05, 6)]
        return {"precision": "bf16", "recipe": "none (te.autocast disabled)", "status": "measured",
                "curve": {"steps": [config.steps], "train_loss": [final], "grad_norm": [0.5]},
                "validation": {"steps": [0, config.steps], "loss": val}, "final_train_loss": final,
                "final_val_loss": val[-1], "tokens_per_s": 1000.0, "wall_s": 1.5, "peak_memory_gib": 1.0,
                "init_sha256": hashlib.sha256(f"weights of seed {config.seed}".encode()).hexdigest()}
    return train


def test_band_seeds_follow_the_main_seed_and_are_distinct() -> None:
    assert lp.BF16_EXTRA_SEEDS == 2
    assert lp.band_seeds(1234, 2) == [1235, 1236]
    assert lp.band_seeds(1234, 0) == []
    with pytest.raises(ValueError, match="extra_seeds: must be 0 or more"):
        lp.band_seeds(1234, -1)


def test_the_seed_band_trains_bf16_from_each_extra_seed_and_stores_its_final_losses() -> None:
    training = lp.TrainingConfig(steps=8, batch=2, warmup_steps=1, eval_every=8, curve_every=2, final_window=2,
                                 check_every=2, timing_skip_steps=1, seed=1234)
    seq, train_bytes = 16, 16 * 20 + 1
    calls: list[tuple[int, list[list[int]]]] = []
    band = lp.train_seed_band(training, 2, train_bytes=train_bytes, seq=seq, train=_fake_bf16_run(calls))
    assert band is not None and band["precision"] == "bf16"
    main_order = lp.batch_offsets(train_bytes, seq, training.batch, training.steps, training.seed)
    # Each extra run is trained with its own seed (its initial weights) on batches drawn from it.
    assert [seed for seed, _ in calls] == [1235, 1236]
    for seed, order in calls:
        assert order == lp.batch_offsets(train_bytes, seq, training.batch, training.steps, seed) != main_order
    runs = band["runs"]
    assert [r["seed"] for r in runs] == [1235, 1236]
    assert [r["batch_order_sha256"] for r in runs] == [lp.order_sha256(order) for _, order in calls]
    assert len({r["init_sha256"] for r in runs}) == 2
    # Only what the band needs: the final losses and the validation points, never the curve.
    assert set(runs[0]) == {"seed", "status", "init_sha256", "batch_order_sha256", "validation", "wall_s",
                            "final_train_loss", "final_val_loss"}
    assert runs[1]["final_val_loss"] == runs[1]["validation"]["loss"][-1] == round(1.5 + 0.001 * (1236 % 7) + 0.05, 6)


def test_no_extra_seed_trains_nothing_and_stores_no_band() -> None:
    calls: list[tuple[int, list[list[int]]]] = []
    assert lp.train_seed_band(lp.TrainingConfig(), 0, train_bytes=10**6, seq=64, train=_fake_bf16_run(calls)) is None
    assert calls == []


def test_a_diverged_extra_seed_is_stored_as_diverged() -> None:
    def diverging(config: lp.TrainingConfig, order: list[list[int]]) -> dict[str, Any]:
        return {"precision": "bf16", "status": "diverged", "reason": "diverged at step 3: training loss nan",
                "diverged_at_step": 3, "curve": {"steps": [], "train_loss": [], "grad_norm": []},
                "validation": {"steps": [0], "loss": [5.6]}, "wall_s": 0.5, "init_sha256": "a" * 64}

    band = lp.train_seed_band(lp.TrainingConfig(seed=5), 1, train_bytes=10**5, seq=64, train=diverging)
    assert band is not None
    assert band["runs"] == [{"seed": 6, "status": "diverged", "reason": "diverged at step 3: training loss nan",
                             "diverged_at_step": 3, "validation": {"steps": [0], "loss": [5.6]}, "wall_s": 0.5,
                             "init_sha256": "a" * 64,
                             "batch_order_sha256": lp.order_sha256(lp.batch_offsets(10**5, 64, 32, 400, 6))}]


def test_what_the_loop_stores_is_what_the_schema_accepts() -> None:
    data = synthetic_data(band=False)
    training = lp.TrainingConfig(steps=40, batch=8, warmup_steps=4, eval_every=40, seed=1)
    calls: list[tuple[int, list[list[int]]]] = []
    band = lp.train_seed_band(training, 3, train_bytes=950, seq=16, train=_fake_bf16_run(calls))
    assert band is not None
    data["seed_band"] = band
    for run in band["runs"]:  # the synthetic BF16 validates every 20 steps; the stand-in at the end only
        run["validation"]["steps"] = data["recipes"][0]["validation"]["steps"]
        run["validation"]["loss"] = [5.6, 3.0, run["final_val_loss"]]
    schema.validate_data(data)
    found = schema.seed_band(data)
    assert isinstance(found, schema.SeedBand) and found.seeds == (1, 2, 3, 4) and found.runs == 4


# ------------------------------------------------------------------------------ the schema
def test_the_site_shows_v2_results_with_a_band_and_v1_results_stay_valid_but_stale() -> None:
    assert schema.METHOD_VERSION == schema.SEED_BAND_SINCE == "2"
    assert schema.STUDY.method_version == "2"
    for name in COMMITTED_FILES:
        doc = studies.read_study(SITE / name)
        assert doc["method_version"] == "2" and isinstance(schema.seed_band(doc["data"]), schema.SeedBand)
        assert studies.staleness(doc, None, ("method",)) is None
    for name in COMMITTED_FILES:
        doc = studies.read_study(COMMITTED / name)  # still valid: a result without a band
        assert doc["method_version"] in schema.VERSIONS_WITHOUT_SEED_BAND and "seed_band" not in doc["data"]
        stale = studies.staleness(doc, None, ("method",))
        assert stale is not None and "current is 2" in stale  # so `gemm-bench refresh` measures it again


def test_a_result_without_a_band_is_valid_and_has_none() -> None:
    data = synthetic_data(band=False)
    schema.validate_data(data)
    assert schema.seed_band(data) is None


def test_the_band_is_bf16s_range_over_its_seeds_relative_to_the_main_run() -> None:
    data = synthetic_data()
    schema.validate_data(data)
    band = schema.seed_band(data)
    assert isinstance(band, schema.SeedBand)
    assert band.seeds == (1, 2, 3) and band.val_losses == (1.55, 1.54, 1.57)
    assert band.low == pytest.approx(-0.01) and band.high == pytest.approx(0.02)
    assert band.holds(0.015) and band.holds(-0.01) and band.holds(0.0)
    assert not band.holds(0.03) and not band.holds(-0.02)
    gaps = schema.gaps(data)
    delayed, current = gaps["fp8-delayed"]["val"], gaps["fp8-current"]["val"]
    assert delayed is not None and current is not None
    assert not band.holds(delayed.delta) and band.holds(current.delta)


def test_a_band_with_a_diverged_run_has_no_range_but_says_why() -> None:
    data = synthetic_data()
    data["seed_band"]["runs"][1] = {**{k: v for k, v in data["seed_band"]["runs"][1].items()
                                       if k not in ("final_train_loss", "final_val_loss")},
                                    "status": "diverged", "reason": "diverged at step 31: gradient norm inf",
                                    "diverged_at_step": 31, "validation": {"steps": [0, 20], "loss": [5.6, 2.0]}}
    schema.validate_data(data)
    assert schema.seed_band(data) == "BF16 with seed 3 diverged at step 31: gradient norm inf"


def _band_set(index: int | None, key: str, value: Any) -> Any:
    def mutate(data: dict[str, Any]) -> None:
        node = data["seed_band"] if index is None else data["seed_band"]["runs"][index]
        if value is _DELETE:
            del node[key]
        else:
            node[key] = value
    return mutate


_DELETE = object()
RUNS = "$.data.seed_band.runs"
BAD_BANDS = [
    (_band_set(None, "runs", []), RUNS, "at least 1 extra seed"),
    (_band_set(None, "runs", {}), RUNS, "must be a list"),
    (_band_set(None, "runs", [synthetic_band_run(10 + i, 1.5) for i in range(schema.MAX_SEEDS + 1)]), RUNS,
     f"more than {schema.MAX_SEEDS}"),
    (_band_set(None, "precision", "fp8-current"), "$.data.seed_band.precision", "must be one of bf16"),
    (_band_set(None, "precision", _DELETE), "$.data.seed_band.precision", "missing"),
    (_band_set(None, "mean", 1.5), "$.data.seed_band.mean", "not a field here"),
    (lambda d: d.update(seed_band=[]), "$.data.seed_band", "must be an object"),
    (_band_set(0, "final_val_loss", -1.0), f"{RUNS}[0].final_val_loss", "at least 0"),
    (_band_set(0, "final_train_loss", float("nan")), f"{RUNS}[0].final_train_loss", "finite"),
    (_band_set(1, "final_train_loss", float("inf")), f"{RUNS}[1].final_train_loss", "finite"),
    (_band_set(1, "final_train_loss", "1.5"), f"{RUNS}[1].final_train_loss", "finite"),
    (_band_set(1, "final_val_loss", 1.6), f"{RUNS}[1].final_val_loss", "last validation loss"),
    (_band_set(1, "final_val_loss", _DELETE), f"{RUNS}[1].final_val_loss", "missing"),
    (_band_set(0, "validation", {"steps": [0, 20, 40], "loss": [5.6, -2.0, 1.54]}),
     f"{RUNS}[0].validation.loss[1]", "at least 0"),
    (_band_set(0, "validation", {"steps": [0, 40], "loss": [5.6, 1.54]}), f"{RUNS}[0].validation.steps",
     "differ from bf16's"),
    (_band_set(1, "seed", 2), f"{RUNS}[1].seed", "already runs[0]'s"),
    (_band_set(0, "seed", 1), f"{RUNS}[0].seed", "already training.seed"),
    (_band_set(0, "seed", 2.0), f"{RUNS}[0].seed", "whole number"),
    (_band_set(0, "seed", True), f"{RUNS}[0].seed", "whole number"),
    (_band_set(0, "seed", -3), f"{RUNS}[0].seed", "at least 0"),
    (_band_set(0, "seed", _DELETE), f"{RUNS}[0].seed", "missing"),
    (_band_set(0, "init_sha256", hashlib.sha256(b"synthetic initial weights").hexdigest()),
     f"{RUNS}[0].init_sha256", "already the main runs'"),
    (_band_set(0, "batch_order_sha256", hashlib.sha256(b"synthetic order").hexdigest()),
     f"{RUNS}[0].batch_order_sha256", "already the main runs'"),
    (_band_set(0, "init_sha256", "xyz"), f"{RUNS}[0].init_sha256", "sha256"),
    (_band_set(0, "status", "failed"), f"{RUNS}[0].status", "must be one of measured, diverged"),
    (_band_set(0, "status", "diverged"), f"{RUNS}[0].reason", "missing"),
    (_band_set(0, "curve", {"steps": [], "train_loss": [], "grad_norm": []}), f"{RUNS}[0].curve", "not a field"),
    (_band_set(0, "wall_s", 0), f"{RUNS}[0].wall_s", "positive"),
]


@pytest.mark.parametrize(("mutate", "where", "problem"), BAD_BANDS, ids=[b[1] + ":" + b[2] for b in BAD_BANDS])
def test_the_schema_refuses_a_bad_band_with_its_path(mutate: Any, where: str, problem: str) -> None:
    data = synthetic_data()
    schema.validate_data(copy.deepcopy(data))  # valid before the change: the change is what is refused
    mutate(data)
    with pytest.raises(studies.StudyError) as caught:
        schema.validate_data(data)
    assert caught.value.where == where, str(caught.value)
    assert problem in caught.value.problem, caught.value.problem


# ------------------------------------------------------------------------------ the directive
def _rows(html: str) -> dict[str, list[str]]:
    table = BeautifulSoup(html, "html.parser").select_one("table.gemm-loss-parity-table")
    assert table is not None
    return table_rows(table)


def _text(html: str) -> str:
    return BeautifulSoup(html, "html.parser").get_text(" ", strip=True).replace("\u2019", "'")


def test_the_table_says_within_or_beyond_bf16s_seed_range(tmp_path: Path, make_app: Any) -> None:
    html, warnings = _build(tmp_path, make_app, [synthetic_document()])
    assert "WARNING" not in warnings, warnings
    rows = _rows(html)
    # Band -0.01..+0.02 around BF16's 1.55: FP8 Delayed's +0.03 lies beyond it, FP8 Current's +0.015 within.
    assert rows["BF16"][4] == "seed range -0.0100 to +0.0200 (3 seeds)"
    assert rows["FP8 Delayed"][3:5] == ["+0.0300 (+1.94%)", "beyond BF16's seed-to-seed range (3 seeds)"]
    assert rows["FP8 Current"][3:5] == ["+0.0150 (+0.97%)", "within BF16's seed-to-seed range (3 seeds)"]
    assert rows["FP8 Block"] == ["diverged at step 23: training loss nan"]
    text = _text(html)
    assert ("seed 1 (main run): validation 1.5500, train 1.5000; seed 2: validation 1.5400, train 1.4900; "
            "seed 3: validation 1.5700, train 1.5200.") in text
    assert "BF16 trained again from 2 seeds besides the main seed 1: 2, 3, each drawing its own" in text
    tip = BeautifulSoup(html, "html.parser").select_one("table.gemm-loss-parity-table abbr")
    assert tip is not None and tip["title"].startswith(
        "validation gap +0.030000 against BF16's range -0.010000 to +0.020000 over seeds 1, 2, 3")


def test_a_wider_band_turns_beyond_into_within(tmp_path: Path, make_app: Any) -> None:
    data = synthetic_data()
    data["seed_band"]["runs"][1] = synthetic_band_run(3, 1.54)  # validation 1.59: the band reaches +0.04
    html, warnings = _build(tmp_path, make_app, [synthetic_document(data=data)])
    assert "WARNING" not in warnings, warnings
    rows = _rows(html)
    assert rows["BF16"][4] == "seed range -0.0100 to +0.0400 (3 seeds)"
    assert rows["FP8 Delayed"][4] == rows["FP8 Current"][4] == "within BF16's seed-to-seed range (3 seeds)"


def test_a_narrower_band_turns_within_into_beyond(tmp_path: Path, make_app: Any) -> None:
    data = synthetic_data()
    data["seed_band"]["runs"] = [synthetic_band_run(7, 1.505)]  # validation 1.555: 0 to +0.005, 2 seeds
    html, warnings = _build(tmp_path, make_app, [synthetic_document(data=data)])
    assert "WARNING" not in warnings, warnings
    rows = _rows(html)
    assert rows["BF16"][4] == "seed range +0.0000 to +0.0050 (2 seeds)"
    assert rows["FP8 Delayed"][4] == rows["FP8 Current"][4] == "beyond BF16's seed-to-seed range (2 seeds)"


def test_a_result_measured_before_the_band_says_so_instead_of_a_verdict(tmp_path: Path, make_app: Any) -> None:
    doc = synthetic_document(data=synthetic_data(band=False))
    doc["method_version"] = "1"
    html, warnings = _build(tmp_path, make_app, [doc])
    assert "study on Test GPU 80GB is stale" in warnings
    rows = _rows(html)
    assert rows["BF16"][4] == "no seed band in this result: measured before method v2"
    assert rows["FP8 Delayed"][4] == rows["FP8 Current"][4] == "–"
    assert "seed-to-seed range" not in _text(html) and "gemm-loss-parity-seeds" not in html


def test_a_current_result_without_extra_seeds_or_with_a_diverged_one_says_why(tmp_path: Path, make_app: Any) -> None:
    (tmp_path / "none").mkdir()
    (tmp_path / "diverged").mkdir()
    html, warnings = _build(tmp_path / "none", make_app, [synthetic_document(data=synthetic_data(band=False))])
    assert "WARNING" not in warnings, warnings
    assert _rows(html)["BF16"][4] == "no seed band in this result: measured without extra BF16 seeds"
    data = synthetic_data()
    run = data["seed_band"]["runs"][0]
    for key in ("final_train_loss", "final_val_loss"):
        del run[key]
    run.update(status="diverged", reason="diverged at step 12: training loss nan", diverged_at_step=12,
               validation={"steps": [0], "loss": [5.6]})
    html, warnings = _build(tmp_path / "diverged", make_app, [synthetic_document(data=data)])
    assert "WARNING" not in warnings, warnings
    rows = _rows(html)
    assert rows["BF16"][4] == "no seed band in this result: BF16 with seed 2 diverged at step 12: training loss nan"
    assert rows["FP8 Delayed"][4] == "–"
    assert "seed 2: diverged at step 12: training loss nan" in _text(html)


def test_the_committed_results_render_with_no_seed_band(tmp_path: Path, make_app: Any) -> None:
    """The files measured on the H100 and H200 before method v2, as committed (copied, not touched)."""
    before = {name: (COMMITTED / name).read_bytes() for name in COMMITTED_FILES}
    html, warnings = _build(tmp_path, make_app, raw={name: data.decode("utf-8") for name, data in before.items()})
    stale = [line for line in warnings.splitlines() if "WARNING" in line]
    assert len(stale) == 2 and all("is stale: measured with study method version '1'" in w for w in stale), warnings
    soup = BeautifulSoup(html, "html.parser")
    tables = soup.select("table.gemm-loss-parity-table")
    assert len(tables) == 2
    for table, name in zip(tables, COMMITTED_FILES, strict=True):
        rows = table_rows(table)
        doc = json.loads(before[name])
        bf16 = next(r for r in doc["data"]["recipes"] if r["precision"] == "bf16")
        assert rows["BF16"][:4] == [f"{bf16['final_train_loss']:.4f}", "reference", f"{bf16['final_val_loss']:.4f}",
                                    "reference"]
        assert rows["BF16"][4] == "no seed band in this result: measured before method v2"
        assert {rows[p][4] for p in ("FP8 Delayed", "FP8 Current", "FP8 Block")} == {"–"}
    assert "seed-to-seed range" not in _text(html)
    assert {name: (COMMITTED / name).read_bytes() for name in COMMITTED_FILES} == before
