"""The loss-parity study: does a small GPT trained with an FP8 recipe learn like the same GPT in BF16?

One document per GPU (:mod:`gemm_bench.results.studies`) holds one training run per recipe of the
same model, from the same initial weights, on the same batches in the same order, with the same
optimizer and schedule (:mod:`gemm_bench.measure.loss_parity` trains them). This module is the
study's schema: what a ``data`` block must hold for the site to render it, checked strictly
(:func:`validate_data` raises :class:`~gemm_bench.results.studies.StudyError` with the JSON path of
the first problem), and the one computation the page shows beside the stored numbers: each
recipe's gap to BF16 (:func:`gaps`), and whether that gap lies within BF16's own seed-to-seed
range (:func:`seed_band`, :meth:`SeedBand.holds`).

``data``::

    {"model":    {"layers", "hidden", "heads", "ffn_hidden", "vocab", "seq", "params", "description"},
     "corpus":   {"source", "python", "files", "bytes", "sha256", "train_bytes", "val_bytes", "split"},
     "training": {"steps", "batch", "seq", "tokens_per_step", "seed", "optimizer": {"name", ...},
                  "lr_schedule": {"kind", "peak_lr", "warmup_steps", "min_lr"}, "grad_clip", "weights",
                  "batch_order_sha256", "eval_every", "eval_sequences", "curve_every", "curve",
                  "final_window", "timing"},
     "recipes":  [{"precision", "status", ...}, ...],      # BF16 among them
     "seed_band": {"precision": "bf16", "runs": [...]}}    # from method v2; optional

A recipe's ``status``:

``measured``
    ``curve`` (``steps``, ``train_loss``, ``grad_norm``: equal lengths, the last step the run's
    last), ``validation`` (``steps``, ``loss``: from step 0 to the last step), ``final_train_loss``,
    ``final_val_loss`` (the last validation loss), ``tokens_per_s``, ``wall_s``,
    ``peak_memory_gib``, ``init_sha256`` (a hash of the initial weights: equal in every recipe).
``diverged``
    ``reason`` ("diverged at step N: ..."), ``diverged_at_step``, and the curve and validation
    losses up to it (possibly empty); never dropped from the document.
``unsupported``
    ``reason``: Transformer Engine's own text for this GPU.
``failed``
    ``reason``: the error that stopped the run.

``seed_band`` (method v2 on; absent in a v1 document, and in one measured with no extra seed)
    BF16 trained again from ``K >= 1`` other seeds, each changing both the initial weights and
    the batch order (the main runs keep ``training.seed``): how far another seed moves BF16 itself.
    Each run holds ``seed`` (a whole number, distinct from the others and from ``training.seed``),
    ``status`` (``measured`` or ``diverged``), ``init_sha256`` and ``batch_order_sha256`` (both
    differing from the main runs' and from each other run's: the seed did change them),
    ``validation`` (as a recipe's), ``wall_s``, and, when measured, ``final_train_loss`` and
    ``final_val_loss`` (the last validation loss); when diverged, ``reason`` and
    ``diverged_at_step``. No curve: the band is read at the final validation loss only.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Mapping, Sequence
from typing import Any

from gemm_bench.question.precisions import BASELINE, PRECISIONS
from gemm_bench.results.studies import (
    StudyError,
    choice,
    field,
    integer,
    json_list,
    json_object,
    keys,
    number,
    register_schema,
    text,
)

NAME = "loss-parity"
#: 2: BF16 is also trained from extra seeds (``seed_band``), so a gap can be set against how far
#: another seed moves BF16 itself.
METHOD_VERSION = "2"
#: The first method version whose documents may hold a ``seed_band``; older ones never do.
SEED_BAND_SINCE = "2"
#: Method versions measured before the seed band existed (their documents stay readable).
VERSIONS_WITHOUT_SEED_BAND: frozenset[str] = frozenset({"1"})
STATUSES: tuple[str, ...] = ("measured", "diverged", "unsupported", "failed")
#: Recipes the study trains, in the order it trains and shows them (BF16, the reference, first).
RECIPES: tuple[str, ...] = ("bf16", "fp8-delayed", "fp8-current", "fp8-block", "mxfp8", "nvfp4")
#: More points than any curve needs (the measurement stores 100 to 200); a bound on what is read.
MAX_POINTS = 2000
#: More extra seeds than any band needs; a bound on what is read.
MAX_SEEDS = 64
BAND_STATUSES: tuple[str, ...] = ("measured", "diverged")
_BAND_RUN_FIELDS = ("seed", "status", "init_sha256", "batch_order_sha256", "validation", "wall_s")
_BAND_RUN_BY_STATUS = {"measured": ("final_train_loss", "final_val_loss"), "diverged": ("reason", "diverged_at_step")}

_HEX64 = re.compile(r"^[0-9a-f]{64}$")


# ------------------------------------------------------------------------------ field checks
# The shared checks of :mod:`gemm_bench.results.studies`, keyed: ``block[key]`` at ``where.key``.
def _obj(block: Mapping[str, Any], key: str, where: str) -> dict[str, Any]:
    return json_object(field(block, key, where), f"{where}.{key}")


def _text(block: Mapping[str, Any], key: str, where: str) -> str:
    return text(field(block, key, where), f"{where}.{key}")


def _int(block: Mapping[str, Any], key: str, where: str, *, minimum: int = 1, maximum: int | None = None) -> int:
    return integer(field(block, key, where), f"{where}.{key}", minimum=minimum, maximum=maximum)


def _num(block: Mapping[str, Any], key: str, where: str, *, positive: bool = False) -> float:
    """A finite number, > 0 if ``positive``, else >= 0: no quantity of this study is negative."""
    return number(field(block, key, where), f"{where}.{key}", minimum=0, positive=positive)


def _hex(block: Mapping[str, Any], key: str, where: str) -> str:
    value = field(block, key, where)
    if not isinstance(value, str) or not _HEX64.match(value):
        raise StudyError(f"{where}.{key}", f"must be a sha256 (64 lower-case hex digits), got {value!r}"[:200])
    return value


def _steps(value: Any, where: str, *, first: int, last: int) -> list[int]:
    """Strictly increasing integer steps within ``first..last``."""
    json_list(value, where)
    if len(value) > MAX_POINTS:
        raise StudyError(where, f"holds {len(value)} points, more than {MAX_POINTS}")
    previous = first - 1
    for i, step in enumerate(value):
        if isinstance(step, bool) or not isinstance(step, int):
            raise StudyError(f"{where}[{i}]", f"must be an integer step, got {step!r}"[:200])
        if step <= previous or step > last:
            raise StudyError(f"{where}[{i}]", f"step {step} is out of order or outside {first}..{last}")
        previous = step
    return value


def _numbers(value: Any, where: str, length: int) -> list[float]:
    """``length`` finite numbers, each >= 0 (losses and gradient norms)."""
    if len(json_list(value, where)) != length:
        raise StudyError(where, f"holds {len(value)} values for {length} steps")
    return [number(v, f"{where}[{i}]", minimum=0) for i, v in enumerate(value)]


# ------------------------------------------------------------------------------ blocks
def _model(data: Mapping[str, Any]) -> dict[str, Any]:
    where = "$.data.model"
    model = _obj(data, "model", "$.data")
    for key in ("layers", "hidden", "heads", "ffn_hidden", "vocab", "seq", "params"):
        _int(model, key, where)
    if model["hidden"] % model["heads"]:
        raise StudyError(f"{where}.heads", f"{model['heads']} heads do not divide hidden size {model['hidden']}")
    _text(model, "description", where)
    return model


def _corpus(data: Mapping[str, Any]) -> dict[str, Any]:
    where = "$.data.corpus"
    corpus = _obj(data, "corpus", "$.data")
    for key in ("source", "python", "split"):
        _text(corpus, key, where)
    for key in ("files", "bytes", "train_bytes", "val_bytes"):
        _int(corpus, key, where)
    _hex(corpus, "sha256", where)
    if corpus["train_bytes"] + corpus["val_bytes"] != corpus["bytes"]:
        raise StudyError(f"{where}.val_bytes", f"train_bytes {corpus['train_bytes']} + val_bytes "
                         f"{corpus['val_bytes']} is not the corpus's {corpus['bytes']} bytes")
    return corpus


def _training(data: Mapping[str, Any], model: Mapping[str, Any]) -> dict[str, Any]:
    where = "$.data.training"
    training = _obj(data, "training", "$.data")
    steps = _int(training, "steps", where)
    batch = _int(training, "batch", where)
    seq = _int(training, "seq", where)
    if seq != model["seq"]:
        raise StudyError(f"{where}.seq", f"{seq} is not the model's sequence length {model['seq']}")
    if _int(training, "tokens_per_step", where) != batch * seq:
        raise StudyError(f"{where}.tokens_per_step", f"must be batch x seq = {batch * seq}")
    _int(training, "seed", where, minimum=0)
    _text(_obj(training, "optimizer", where), "name", f"{where}.optimizer")
    schedule = _obj(training, "lr_schedule", where)
    at = f"{where}.lr_schedule"
    _text(schedule, "kind", at)
    peak = _num(schedule, "peak_lr", at, positive=True)
    _int(schedule, "warmup_steps", at, minimum=0, maximum=steps - 1)
    if _num(schedule, "min_lr", at) > peak:
        raise StudyError(f"{at}.min_lr", f"{schedule['min_lr']} exceeds peak_lr {peak}")
    _num(training, "grad_clip", where, positive=True)
    for key in ("weights", "curve", "timing"):
        _text(training, key, where)
    _hex(training, "batch_order_sha256", where)
    _int(training, "eval_every", where, maximum=steps)
    _int(training, "eval_sequences", where)
    _int(training, "curve_every", where, maximum=steps)
    _int(training, "final_window", where, maximum=steps)
    return training


def _curve(recipe: Mapping[str, Any], where: str, steps: int, *, complete: bool) -> list[int]:
    curve = _obj(recipe, "curve", where)
    at = f"{where}.curve"
    xs = _steps(field(curve, "steps", at), f"{at}.steps", first=1, last=steps)
    for key in ("train_loss", "grad_norm"):
        _numbers(field(curve, key, at), f"{at}.{key}", len(xs))
    if complete and (not xs or xs[-1] != steps):
        raise StudyError(f"{at}.steps", f"must end at the run's last step {steps}")
    return xs


def _validation(recipe: Mapping[str, Any], where: str, steps: int, *, complete: bool) -> list[float]:
    validation = _obj(recipe, "validation", where)
    at = f"{where}.validation"
    xs = _steps(field(validation, "steps", at), f"{at}.steps", first=0, last=steps)
    losses = _numbers(field(validation, "loss", at), f"{at}.loss", len(xs))
    if complete and (not xs or xs[0] != 0 or xs[-1] != steps):
        raise StudyError(f"{at}.steps", f"must run from step 0 to the run's last step {steps}")
    return losses


def _recipe(value: Any, where: str, steps: int) -> dict[str, Any]:
    recipe = json_object(value, where)
    precision = _text(recipe, "precision", where)
    if precision not in PRECISIONS:
        raise StudyError(f"{where}.precision", f"{precision!r} is not a known precision"[:200])
    status = choice(field(recipe, "status", where), f"{where}.status", STATUSES)
    if status in ("unsupported", "failed", "diverged"):
        _text(recipe, "reason", where)
    if status in ("measured", "diverged"):
        complete = status == "measured"
        _curve(recipe, where, steps, complete=complete)
        val = _validation(recipe, where, steps, complete=complete)
        _num(recipe, "wall_s", where, positive=True)
        _hex(recipe, "init_sha256", where)
        if complete:
            for key in ("final_train_loss", "final_val_loss"):
                _num(recipe, key, where)
            for key in ("tokens_per_s", "peak_memory_gib"):
                _num(recipe, key, where, positive=True)
            if recipe["final_val_loss"] != val[-1]:
                raise StudyError(f"{where}.final_val_loss", f"{recipe['final_val_loss']} is not the last "
                                 f"validation loss {val[-1]}")
        else:
            _int(recipe, "diverged_at_step", where, maximum=steps)
    if "recipe" in recipe:
        _text(recipe, "recipe", where)
    return recipe


def _recipes(data: Mapping[str, Any], steps: int) -> list[dict[str, Any]]:
    where = "$.data.recipes"
    recipes = json_list(field(data, "recipes", "$.data"), where, non_empty=True)
    seen: dict[str, int] = {}
    for i, recipe in enumerate(recipes):
        _recipe(recipe, f"{where}[{i}]", steps)
        if recipe["precision"] in seen:
            raise StudyError(f"{where}[{i}].precision", f"{recipe['precision']} is already recipe "
                             f"[{seen[recipe['precision']]}]")
        seen[recipe["precision"]] = i
    if BASELINE not in seen:
        raise StudyError(where, f"has no {PRECISIONS[BASELINE].display} run, the reference of every other")
    # Every run that trained shares the initial weights, and every complete run the same curve
    # and validation steps: otherwise the curves do not compare one schedule.
    trained = [(i, r) for i, r in enumerate(recipes) if r["status"] in ("measured", "diverged")]
    for i, recipe in trained[1:]:
        if recipe["init_sha256"] != trained[0][1]["init_sha256"]:
            raise StudyError(f"{where}[{i}].init_sha256", f"differs from {trained[0][1]['precision']}'s: "
                             "the runs did not start from the same weights")
    complete = [(i, r) for i, r in trained if r["status"] == "measured"]
    for i, recipe in complete[1:]:
        for block in ("curve", "validation"):
            if recipe[block]["steps"] != complete[0][1][block]["steps"]:
                raise StudyError(f"{where}[{i}].{block}.steps", f"differ from {complete[0][1]['precision']}'s")
    return recipes


def _band_run(value: Any, where: str, steps: int) -> dict[str, Any]:
    run = json_object(value, where)
    status = choice(field(run, "status", where), f"{where}.status", BAND_STATUSES)
    keys(run, where, (*_BAND_RUN_FIELDS, *_BAND_RUN_BY_STATUS[status]))
    _int(run, "seed", where, minimum=0)
    _hex(run, "init_sha256", where)
    _hex(run, "batch_order_sha256", where)
    _num(run, "wall_s", where, positive=True)
    val = _validation(run, where, steps, complete=status == "measured")
    if status == "measured":
        for key in ("final_train_loss", "final_val_loss"):
            _num(run, key, where)
        if run["final_val_loss"] != val[-1]:
            raise StudyError(f"{where}.final_val_loss", f"{run['final_val_loss']} is not the last validation "
                             f"loss {val[-1]}")
    else:
        _text(run, "reason", where)
        _int(run, "diverged_at_step", where, maximum=steps)
    return run


def _seed_band(data: Mapping[str, Any], training: Mapping[str, Any], recipes: Sequence[Mapping[str, Any]]) -> None:
    """The optional ``seed_band``: BF16 from other seeds, each a different start and batch order."""
    if "seed_band" not in data:
        return
    where = "$.data.seed_band"
    band = _obj(data, "seed_band", "$.data")
    keys(band, where, ("precision", "runs"))
    choice(band["precision"], f"{where}.precision", (BASELINE,))
    runs = json_list(band["runs"], f"{where}.runs")
    if not runs:
        raise StudyError(f"{where}.runs", "holds no run: a seed band needs at least 1 extra seed (K >= 1); "
                         "a result without extra seeds has no seed_band")
    if len(runs) > MAX_SEEDS:
        raise StudyError(f"{where}.runs", f"holds {len(runs)} runs, more than {MAX_SEEDS}")
    base = recipes_by_id(data)[BASELINE]
    seeds = {training["seed"]: "training.seed (the main runs')"}
    # Every trained recipe started from the same weights (checked in _recipes): one hash, the main runs'.
    inits = {r["init_sha256"]: "the main runs'" for r in recipes if r["status"] in ("measured", "diverged")}
    orders = {training["batch_order_sha256"]: "the main runs'"}
    for i, value in enumerate(runs):
        at = f"{where}.runs[{i}]"
        run = _band_run(value, at, training["steps"])
        for key, seen, what in (("seed", seeds, "seed"), ("init_sha256", inits, "initial weights"),
                                ("batch_order_sha256", orders, "batch order")):
            if run[key] in seen:
                raise StudyError(f"{at}.{key}", f"the {what} {run[key]} is already {seen[run[key]]}: every "
                                 "run of the band must start from its own seed")
            seen[run[key]] = f"runs[{i}]'s"
        if (run["status"] == "measured" and base["status"] == "measured"
                and run["validation"]["steps"] != base["validation"]["steps"]):
            raise StudyError(f"{at}.validation.steps", f"differ from {BASELINE}'s: the band must be read at "
                             "the same step as the recipes")


def _check_data(data: dict[str, Any]) -> None:
    """Raise :class:`StudyError` (with the JSON path) unless ``data`` is a loss-parity data block (the door,
    :func:`validate_data`, has checked its keys)."""
    model = _model(data)
    _corpus(data)
    training = _training(data, model)
    recipes = _recipes(data, training["steps"])
    _seed_band(data, training, recipes)


# ------------------------------------------------------------------------------ what the page computes
@dataclasses.dataclass(frozen=True)
class Gap:
    """A recipe's final loss against BF16's: ``delta`` = recipe - BF16 (nats), ``percent`` of BF16's."""

    delta: float
    percent: float


def gap(loss: float, reference: float) -> Gap | None:
    """None when the reference is zero (no percentage of nothing)."""
    if reference == 0:
        return None
    delta = loss - reference
    return Gap(delta, 100.0 * delta / reference)


def recipes_by_id(data: Mapping[str, Any]) -> dict[str, dict[str, Any]]:
    """The recipes of a valid data block by precision id, in :data:`RECIPES` order (then any other)."""
    found = {r["precision"]: r for r in data["recipes"]}
    order = [p for p in RECIPES if p in found] + [p for p in found if p not in RECIPES]
    return {p: found[p] for p in order}


def gaps(data: Mapping[str, Any]) -> dict[str, dict[str, Gap | None]]:
    """Per measured recipe other than BF16: the gap of its final train and validation loss to BF16's.

    Empty when BF16 itself did not complete its run (there is no reference to compare with)."""
    recipes = recipes_by_id(data)
    base = recipes[BASELINE]
    if base["status"] != "measured":
        return {}
    return {p: {"train": gap(r["final_train_loss"], base["final_train_loss"]),
                "val": gap(r["final_val_loss"], base["final_val_loss"])}
            for p, r in recipes.items() if p != BASELINE and r["status"] == "measured"}


@dataclasses.dataclass(frozen=True)
class SeedBand:
    """BF16's final validation loss over its ``1 + K`` seeds (the main run first), and its range
    relative to the main run: ``low`` = min - main (<= 0), ``high`` = max - main (>= 0), how far
    another seed moves BF16 itself. It is BF16's spread only: no recipe was trained from more than
    one seed."""

    seeds: tuple[int, ...]
    val_losses: tuple[float, ...]
    low: float
    high: float

    @property
    def runs(self) -> int:
        return len(self.seeds)

    def holds(self, delta: float) -> bool:
        """Whether a recipe's validation gap to the main BF16 run lies within the band (edges included)."""
        return self.low <= delta <= self.high


def seed_band(data: Mapping[str, Any]) -> SeedBand | str | None:
    """BF16's seed band of a valid data block; None when the block has none; else the reason
    (text) why no band can be read: the main BF16 run, or a run of the band, did not complete."""
    band = data.get("seed_band")
    if band is None:
        return None
    base = recipes_by_id(data)[BASELINE]
    if base["status"] != "measured":
        return f"BF16 with the main seed {data['training']['seed']} did not complete its run"
    for run in band["runs"]:
        if run["status"] != "measured":
            return f"BF16 with seed {run['seed']} {' '.join(run['reason'].split())}"
    main = base["final_val_loss"]
    values = (main, *(run["final_val_loss"] for run in band["runs"]))
    seeds = (data["training"]["seed"], *(run["seed"] for run in band["runs"]))
    return SeedBand(seeds, values, min(values) - main, max(values) - main)


def curve_series(data: Mapping[str, Any]) -> list[tuple[str, Sequence[int], Sequence[float]]]:
    """(precision, steps, train losses) of every recipe with a curve, BF16 first."""
    return [(p, r["curve"]["steps"], r["curve"]["train_loss"]) for p, r in recipes_by_id(data).items()
            if r["status"] in ("measured", "diverged") and r["curve"]["steps"]]


STUDY = register_schema(NAME, title="Loss parity: a small GPT trained per recipe against BF16",
                        method_version=METHOD_VERSION, measure="gemm_bench.measure.loss_parity:measure",
                        fields=("model", "corpus", "training", "recipes"), optional=("seed_band",), check=_check_data)
validate_data = STUDY.validate_data
