"""The loss-parity trainer itself, on CPU: :func:`lp.train_recipe` and :func:`lp.measure` train a
tiny GPT for a few steps with the plain-PyTorch kit (:func:`lp.torch_kit`, BF16 only) on a real
corpus, a few standard-library modules read by :func:`lp.read_corpus`.

What runs here is the study's own loop (batches, schedule, clipping, AdamW, evaluation, the
NaN/Inf checks, timing, records, the seed band, the unsupported recipes) and its document; what
does not is Transformer Engine and its FP8 recipes (``test_loss_parity.py``'s ``gpu`` test). The
pure helpers are tested in ``test_loss_parity.py``. Needs PyTorch (the ``tests`` session installs
its CPU build); skipped without it. A few seconds in all.
"""

from __future__ import annotations

import dataclasses
import math
from pathlib import Path
from typing import Any

import pytest

from gemm_bench.measure import loss_parity as lp
from gemm_bench.results import loss_parity_schema as schema
from gemm_bench.results import studies

torch = pytest.importorskip("torch")

MODEL = lp.ModelConfig(layers=2, hidden=64, heads=4, ffn_hidden=128, seq=64)
#: 10 steps of 4 x 64 bytes: curve points at 2, 4, ..., 10; validation at 0, 5 and 10.
TRAINING = lp.TrainingConfig(steps=10, batch=4, warmup_steps=2, peak_lr=3e-3, min_lr=3e-4, eval_every=5,
                             eval_sequences=8, curve_every=2, final_window=2, check_every=2, timing_skip_steps=1,
                             val_fraction=0.1)
UNIFORM = math.log(256)  # the loss of a model that knows nothing about bytes
CPU = {"name": "CPU loss-parity test"}
#: The provenance fields a study document needs besides ``torch`` (the version this test runs).
PROVENANCE = {"transformer_engine": "none (plain-PyTorch kit)", "cuda": "none", "driver": "none",
              "commit": "0123456", "date": "2026-11-01T00:00:00+00:00"}


@pytest.fixture(scope="module")
def corpus() -> lp.Corpus:
    """The standard library's ``json`` package (about 50 KB): real Python source, read as the study reads it."""
    return lp.read_corpus(lp.stdlib_root() / "json")


@pytest.fixture(scope="module")
def kit() -> lp.Kit:
    return lp.torch_kit()


def shared_run(corpus: lp.Corpus, training: lp.TrainingConfig = TRAINING) -> lp.SharedRun:
    """What :func:`lp.measure` gives every run: the corpus, the batch order of ``training.seed``, the
    validation windows (on CPU; no initial weights yet)."""
    split = lp.split_offset(corpus, training.val_fraction)
    order = lp.batch_offsets(split, MODEL.seq, training.batch, training.steps, training.seed)
    evals = lp.eval_offsets(split, len(corpus.data), MODEL.seq, training.eval_sequences)
    return lp.SharedRun(corpus=torch.frombuffer(bytearray(corpus.data), dtype=torch.uint8),
                        order=torch.tensor(order, dtype=torch.int64), evals=torch.tensor(evals, dtype=torch.int64))


@pytest.fixture(scope="module")
def first_run(corpus: lp.Corpus, kit: lp.Kit) -> tuple[lp.SharedRun, dict[str, Any]]:
    """One BF16 run of ``TRAINING`` and the shared run it used (which then holds its initial weights),
    trained once for the tests that each trained this same run before."""
    shared = shared_run(corpus)
    return shared, lp.train_recipe("bf16", MODEL, TRAINING, shared, kit)


def losses(record: dict[str, Any]) -> tuple[Any, ...]:
    """Everything a run's numbers are: its curve, validation and final losses (not its timing)."""
    return (record["curve"], record["validation"], record["final_train_loss"], record["final_val_loss"])


# ------------------------------------------------------------------------------ one run
def test_a_few_steps_on_cpu_learn_and_make_a_measured_record(first_run: tuple[lp.SharedRun, dict[str, Any]]) -> None:
    _, record = first_run
    assert record["status"] == "measured", record
    assert record["precision"] == "bf16" and record["recipe"] == "none (BF16 under torch.autocast on cpu)"
    curve, validation = record["curve"], record["validation"]
    assert curve["steps"] == [2, 4, 6, 8, 10]
    assert len(curve["train_loss"]) == len(curve["grad_norm"]) == 5
    assert validation["steps"] == [0, 5, 10] and len(validation["loss"]) == 3
    assert all(math.isfinite(v) and v > 0 for v in [*curve["train_loss"], *curve["grad_norm"], *validation["loss"]])
    # The initial weights (std 0.02) predict nearly uniform bytes; ten steps learn the bytes' frequencies.
    first_val, last_val = validation["loss"][0], validation["loss"][-1]
    assert abs(first_val - UNIFORM) < 0.1, first_val
    assert last_val < first_val - 0.5 and last_val < UNIFORM - 0.5, validation
    assert curve["train_loss"][-1] < curve["train_loss"][0] - 0.3, curve
    assert record["final_train_loss"] < UNIFORM - 0.5 and record["final_val_loss"] == last_val
    assert record["tokens_per_s"] > 0 and record["wall_s"] > 0 and record["peak_memory_gib"] > 0
    assert len(record["init_sha256"]) == 64


def test_the_same_seed_is_bit_identical_and_another_seed_is_not(corpus: lp.Corpus, kit: lp.Kit,
                                                                first_run: tuple[lp.SharedRun, dict[str, Any]]) -> None:
    first_shared, first = first_run
    again = lp.train_recipe("bf16", MODEL, TRAINING, shared_run(corpus), kit)  # built afresh from the seed
    assert again["init_sha256"] == first["init_sha256"]
    assert losses(again) == losses(first)

    other_seed = dataclasses.replace(TRAINING, seed=TRAINING.seed + 1)
    other = lp.train_recipe("bf16", MODEL, other_seed, shared_run(corpus, other_seed), kit)
    assert other["init_sha256"] != first["init_sha256"]
    assert other["curve"]["train_loss"] != first["curve"]["train_loss"]
    assert other["validation"]["loss"] != first["validation"]["loss"]

    # A later recipe's run: its model is built from another seed, then given the first run's initial
    # weights, and reads the same batches: it starts, and so trains, exactly as the first.
    later = lp.train_recipe("bf16", MODEL, other_seed, first_shared, kit)
    assert later["init_sha256"] == first["init_sha256"]
    assert losses(later) == losses(first)


def test_an_fp8_recipe_is_refused_by_the_torch_kit(corpus: lp.Corpus, kit: lp.Kit) -> None:
    with pytest.raises(ValueError, match="need Transformer Engine on a GPU"):
        lp.train_recipe("fp8-current", MODEL, TRAINING, shared_run(corpus), kit)
    support = kit.support()
    assert set(support) == set(schema.RECIPES) and support["bf16"].available
    assert all(not v.available and v.reason == lp.TORCH_KIT_UNSUPPORTED for p, v in support.items() if p != "bf16")


# ------------------------------------------------------------------------------ divergence
def _poisoned(kit: lp.Kit, at_step: int) -> lp.Kit:
    """``kit`` whose LM head returns NaN logits on its ``at_step``-th training forward (evaluation,
    in eval mode, is left alone): the loss of step ``at_step`` is NaN."""
    def linear(in_features: int, out_features: int, init: Any) -> Any:
        head = kit.linear(in_features, out_features, init)
        calls = [0]

        def poison(module: Any, inputs: Any, output: Any) -> Any:
            if not module.training:
                return None
            calls[0] += 1
            return output * float("nan") if calls[0] == at_step else None

        head.register_forward_hook(poison)
        return head

    return dataclasses.replace(kit, linear=linear)


def test_a_nan_loss_stops_the_run_as_diverged_at_its_step(corpus: lp.Corpus, kit: lp.Kit) -> None:
    record = lp.train_recipe("bf16", MODEL, TRAINING, shared_run(corpus), _poisoned(kit, at_step=5))
    assert record["status"] == "diverged", record
    assert record["diverged_at_step"] == 5
    assert record["reason"].startswith("diverged at step 5: ") and "nan" in record["reason"], record["reason"]
    # The finite steps before it, in complete curve windows only; validation before it (step 5's
    # evaluation never ran: the check at step 5 stopped the run first).
    assert record["curve"]["steps"] == [2, 4] and all(math.isfinite(v) for v in record["curve"]["train_loss"])
    assert record["validation"]["steps"] == [0]
    assert "final_train_loss" not in record and "tokens_per_s" not in record


def test_a_learning_rate_far_too_high_diverges(corpus: lp.Corpus, kit: lp.Kit) -> None:
    wild = dataclasses.replace(TRAINING, peak_lr=1e6, min_lr=1e5)
    record = lp.train_recipe("bf16", MODEL, wild, shared_run(corpus, wild), kit)
    assert record["status"] == "diverged", record
    step = record["diverged_at_step"]
    assert 1 < step <= wild.steps and record["reason"].startswith(f"diverged at step {step}: ")
    kept = (step - 1) // wild.curve_every * wild.curve_every
    assert record["curve"]["steps"] == list(range(wild.curve_every, kept + 1, wild.curve_every))


# ------------------------------------------------------------------------------ the study, end to end
def test_measure_on_cpu_makes_a_document_the_study_schema_accepts(corpus: lp.Corpus, kit: lp.Kit,
                                                                   tmp_path: Path) -> None:
    data, method = lp.measure(MODEL, TRAINING, precisions=("fp8-current", "bf16"), extra_seeds=1, kit=kit,
                              corpus=corpus)
    doc = studies.build_document(schema.STUDY, data, method, CPU, {**PROVENANCE, "torch": torch.__version__})
    path = studies.write_study(tmp_path, doc)
    found, errors = studies.read_studies(tmp_path, "loss-parity")
    assert errors == [] and found == [doc] and path.name == "loss-parity--cpu-loss-parity-test.json"

    bf16, fp8 = data["recipes"]  # BF16, the reference, first whatever the order asked for
    assert bf16["precision"] == "bf16" and bf16["status"] == "measured", bf16
    assert fp8 == {"precision": "fp8-current", "status": "unsupported", "reason": lp.TORCH_KIT_UNSUPPORTED}
    assert bf16["validation"]["loss"][-1] < bf16["validation"]["loss"][0] - 0.5
    assert schema.gaps(data) == {}  # nothing else measured to compare

    [band_run] = data["seed_band"]["runs"]
    assert band_run["seed"] == TRAINING.seed + 1 and band_run["status"] == "measured", band_run
    assert band_run["init_sha256"] != bf16["init_sha256"]
    assert band_run["batch_order_sha256"] != data["training"]["batch_order_sha256"]
    assert band_run["validation"]["steps"] == bf16["validation"]["steps"] and "curve" not in band_run
    band = schema.seed_band(data)
    assert isinstance(band, schema.SeedBand) and band.seeds == (TRAINING.seed, TRAINING.seed + 1)

    split = lp.split_offset(corpus, TRAINING.val_fraction)
    order = lp.batch_offsets(split, MODEL.seq, TRAINING.batch, TRAINING.steps, TRAINING.seed)
    assert data["training"]["batch_order_sha256"] == lp.order_sha256(order)
    assert data["corpus"]["sha256"] == corpus.sha256 and data["corpus"]["train_bytes"] == split
    assert corpus.root in data["corpus"]["source"] and "standard library" not in data["corpus"]["source"]
    hidden, ffn, layers = MODEL.hidden, MODEL.ffn_hidden, MODEL.layers
    per_layer = 4 * hidden + (3 * hidden * hidden + 3 * hidden) + (hidden * hidden + hidden) \
        + (hidden * ffn + ffn) + (ffn * hidden + hidden)
    assert data["model"]["params"] == (MODEL.vocab * hidden + MODEL.seq * hidden + layers * per_layer
                                       + 2 * hidden + hidden * MODEL.vocab)
    assert "plain PyTorch" in data["model"]["description"] and "te.TransformerLayer" not in data["model"]["description"]
    assert "torch.cpu.synchronize" in method["timer"] and "memory" in method


def test_measure_with_the_torch_kit_still_needs_bf16(corpus: lp.Corpus, kit: lp.Kit) -> None:
    with pytest.raises(ValueError, match="must be among"):
        lp.measure(MODEL, TRAINING, precisions=("fp8-current",), kit=kit, corpus=corpus)
