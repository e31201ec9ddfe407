"""The "layout-search" study: the largest micro-batch of a preset layout's rank, found on the GPU (issue 41
item 3).

Why: the memory table's largest micro-batch is *predicted* by composing the parts one GPU measured
(:mod:`gemm_bench.question.memory_per_gpu`). The study holds the same number *found*: the rank built for
real (every layer on its ``S / CP`` tokens, FP32 main gradients whole, the distributed optimizer's
``1 / (DP x CP)`` slice of FP32 masters and moments), its whole step run at growing micro-batch sizes,
doubling then bisecting, until it runs out of memory (``tools/gpu_layout_search.py``,
:func:`gemm_bench.measure.backends.model_parts.largest_microbatch`). An out-of-memory is the answer. A
search may start from the answer a stored study found for the same rank (the recipe's ``seed``: the
tool's ``--seed-from``, :func:`seed`): the same answer in fewer tries
(:mod:`gemm_bench.measure.microbatch_search` says why it is the same).

A run may cap PyTorch's allocator at another GPU's capacity (an H200 answering for an 80 GB H100): the
file then answers for that GPU (``answers_for``, the document's device name, so it is the file of that
GPU) and says ``emulated``; the CUDA context and libraries' workspaces outside the allocator stay the
measuring GPU's (``measured_on``), which the page says beside the number.

Pure: the validator of the ``data`` block, the conversion of the tool's JSON into it
(:func:`stored_data`), and the registration. The ``data`` block::

    {"measured_on": "NVIDIA H200", "total_bytes": 150109880320,
     "answers_for": "NVIDIA H100 80GB HBM3", "emulated": true,
     "models": {"llama3-8b": {"layout": "8 GPUs: CP 2, DP 4, distributed optimizer, G = 32", "layers": 32,
                              "tokens": 4096, "optimizer_shards": 8, "capacity_bytes": 84100186112,
                              "recipes": {"bf16": {"largest": 1, "tried": [1, 2], "seconds": 5.3},
                                          "fp8-current": {"largest": 1, "tried": [1, 2], "seconds": 4.1,
                                                          "seed": 1},
                                          "fp8-block": {"failed": "RuntimeError: ..."}}},
                "llama3-70b": {"error": "pipeline parallel 8: the rank is one stage (not built here)"}}}

Invariants checked at the door: ``capacity_bytes <= total_bytes``; a capped run (capacity below the
total) is ``emulated`` and answers for another GPU, an uncapped one answers for its own; ``largest >=
0``; ``tried`` non-empty, without repeats, starting at 1 (at the ``seed`` in a seeded search) and holding
``largest`` when it is above 0, and ``largest + 1`` when ``largest`` is below the largest size tried.
A recipe's timed ``steps`` (:data:`STEP_FIELDS`), where its whole rank of CP 1 fits more than one
micro-batch on the GPU's own capacity, hold micro-batch 1 and ``largest``, each at one G (the layout's at
that size)::

    "steps": {"1": {"16": [3811.2, 3809.7, 3812.0, 3810.4, 3811.9]},
              "4": {"4": [3604.8, 3606.1, 3605.0, 3603.9, 3605.5]}}

refused on an emulated capacity, at CP above 1, with two G or none for a size, or with a size other than
1 and ``largest``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from gemm_bench.question.devices import device_slug
from gemm_bench.question.layout import described_context_parallel
from gemm_bench.question.precisions import PRECISIONS
from gemm_bench.results.cache import CacheError
from gemm_bench.results.studies import (
    StudyError,
    choice,
    integer,
    json_list,
    json_object,
    keys,
    number,
    read_study,
    register_schema,
    study_path,
    text,
)

NAME = "layout-search"
METHOD_VERSION = "3"
#: Version 2 (session 17, commit d0c91c8): each size runs two steps (the optimizer's moments are allocated at
#: the end of the first, so one step read a micro-batch as fitting that the second runs out of memory at).
#: A file of version 1 reads stale.
#: Version 3 (session 18): the step at each micro-batch size is timed at the layout's own G for that size
#: (``steps`` maps size -> {G: samples}, one G each), where version 2 timed G = 1 and 2 and the report
#: extrapolated to the layout's G (16 for Qwen2.5 7B at micro-batch 1): that multiplied the noise, so the
#: same rank's ratio at 4 against 1 read 1.07x, 1.00x and 1.15x on one H200. A layout with context
#: parallelism is no longer timed (its step is never quoted). A file of version 2 reads stale.
#: Far above any GPU's memory (bytes), far below where arithmetic on it loses whole bytes.
MAX_BYTES = 1 << 50
#: Far above any micro-batch a rank holds.
MAX_MICRO_BATCH = 1 << 16
MODEL_FIELDS: tuple[str, ...] = ("layout", "layers", "tokens", "optimizer_shards", "capacity_bytes", "recipes")
#: A pipeline stage's search (PP > 1): the stage built (``first``) and the micro-batches in flight at its
#: peak (1F1B's count); absent for the whole rank of PP 1.
STAGE_FIELDS: tuple[str, ...] = ("stage", "in_flight")
RECIPE_FIELDS: tuple[str, ...] = ("largest", "tried", "seconds")
#: A whole rank's step timed at the largest micro-batch found and at 1 (issue 41 item 3: "a recipe that
#: fits a larger micro-batch says so, with the tokens per second per GPU it then reaches, measured at that
#: micro-batch"): ``steps`` maps the micro-batch to the one G it was timed at (the layout's G at that
#: micro-batch, :func:`gemm_bench.question.layout.microbatches_at`) to the step's times in ms (CUDA events,
#: eager), which the report quotes directly; or ``steps_failed``, why the timing did not run. Only in a run
#: on the GPU's own capacity (an emulated capacity times another GPU), only where the largest is above 1
#: and only at CP 1 (:func:`times_step`). The words the study keeps do not say the global batch or the
#: layout's own micro-batch, so G cannot be recomputed here: the report checks it against the page's
#: layout and refuses a step timed at another G.
STEP_FIELDS: tuple[str, ...] = ("steps", "steps_failed")
#: The size a seeded search tried first: the answer a stored study found for the same rank (the tool's
#: ``--seed-from``), absent from a search that started at 1 unseeded. Says how the answer was found; it
#: is the same answer (:mod:`gemm_bench.measure.microbatch_search`).
SEED_FIELD = "seed"
#: What must equal between a stored model's entry and this run's for the stored answer to seed the run:
#: the rank itself (its layout's words, layers, tokens, optimizer shards and stage) and the capacity it
#: was searched under. A seed from another rank would still give the same answer, in more tries.
SEED_MATCH: tuple[str, ...] = ("layout", "layers", "tokens", "optimizer_shards", "capacity_bytes", "stage",
                               "in_flight")
#: Far above any step's time (ms): a day.
MAX_STEP_MS = 86_400_000.0


def bounded(found: Mapping[str, Any]) -> bool:
    """Whether the search found where the rank stops fitting (``largest + 1`` was tried and ran out of
    memory), rather than stopping at its limit: a search that reached its limit only says "at least"."""
    return int(found["largest"]) + 1 in found["tried"]


def times_step(found: Mapping[str, Any], *, emulated: bool, stage: str | None, cp: int) -> bool:
    """Whether the study times a recipe's whole step at its largest micro-batch and at 1: a whole rank
    (``stage`` None or ``only``: a pipeline's first stage is not the step) on the GPU's own capacity, at
    CP 1 (the searched rank's ``S / CP`` tokens attend only to one another: its step lacks part of the
    attention the run pays, so it would never be quoted), where the search found a bounded largest above
    1. The one rule the tool times by and the report explains an untimed layout by."""
    return (not emulated and stage in (None, "only") and cp == 1 and int(found.get("largest", 0)) >= 2
            and bounded(found))


def _recipe(value: Any, at: str) -> None:
    block = json_object(value, at)
    if "failed" in block:
        keys(block, at, ("failed",))
        text(block["failed"], f"{at}.failed")
        return
    keys(block, at, RECIPE_FIELDS, (*STEP_FIELDS, SEED_FIELD))
    largest = integer(block["largest"], f"{at}.largest", minimum=0, maximum=MAX_MICRO_BATCH)
    tried = [integer(size, f"{at}.tried[{i}]", minimum=1, maximum=MAX_MICRO_BATCH)
             for i, size in enumerate(json_list(block["tried"], f"{at}.tried", non_empty=True))]
    if SEED_FIELD in block:
        seeded = integer(block[SEED_FIELD], f"{at}.{SEED_FIELD}", minimum=1, maximum=MAX_MICRO_BATCH)
        if tried[0] != seeded:
            raise StudyError(f"{at}.tried[0]", f"must be the seed {seeded} (a seeded search starts at it), "
                                               f"got {tried[0]}")
    elif tried[0] != 1:
        raise StudyError(f"{at}.tried[0]", f"must be 1 (the search starts at one sequence), got {tried[0]}")
    if len(set(tried)) != len(tried):
        raise StudyError(f"{at}.tried", f"repeats a size: {tried}")
    if largest > 0 and largest not in tried:
        raise StudyError(f"{at}.largest", f"{largest} was never tried (tried {tried})")
    if largest < max(tried) and largest + 1 not in tried:
        raise StudyError(f"{at}.largest", f"{largest} is not bounded: {largest + 1} was not tried (tried {tried})")
    number(block["seconds"], f"{at}.seconds", minimum=0.0)
    if "steps" in block and "steps_failed" in block:
        raise StudyError(at, "holds both steps and steps_failed")
    if "steps_failed" in block:
        text(block["steps_failed"], f"{at}.steps_failed")
    if "steps" in block:
        _steps(block["steps"], f"{at}.steps", largest)


def _steps(value: Any, at: str, largest: int) -> None:
    """The timed steps: at micro-batch 1 and at ``largest`` (above 1), each at exactly one G (a whole number,
    the layout's G at that size, which the report checks), a non-empty list of positive times in ms."""
    steps = json_object(value, at)
    if largest < 2:
        raise StudyError(at, f"times a larger micro-batch, but the largest found is {largest}")
    keys(steps, at, ("1", str(largest)))
    for size, by_g in steps.items():
        by_g = json_object(by_g, f"{at}.{size}")
        if len(by_g) != 1:
            raise StudyError(f"{at}.{size}", f"must hold the step at one G (the layout's at micro-batch {size}), "
                                             f"got G = {', '.join(by_g) or 'none'}"[:200])
        (g, times), = by_g.items()
        if not g.isdigit() or g != str(int(g)) or not 1 <= int(g) <= MAX_MICRO_BATCH:
            raise StudyError(f"{at}.{size}", f"G must be a whole number from 1 to {MAX_MICRO_BATCH}, got {g!r}"[:200])
        where = f"{at}.{size}.{g}"
        for i, ms in enumerate(json_list(times, where, non_empty=True)):
            number(ms, f"{where}[{i}]", positive=True, limit=MAX_STEP_MS)


def _check_data(data: dict[str, Any]) -> None:
    measured_on = text(data["measured_on"], "$.data.measured_on")
    answers_for = text(data["answers_for"], "$.data.answers_for")
    total = integer(data["total_bytes"], "$.data.total_bytes", minimum=1, maximum=MAX_BYTES)
    emulated = data["emulated"]
    if not isinstance(emulated, bool):
        raise StudyError("$.data.emulated", f"must be true or false, got {emulated!r}"[:200])
    own = device_slug(answers_for) == device_slug(measured_on)
    if emulated == own:
        raise StudyError("$.data.answers_for", (f"is the measuring GPU {measured_on!r}, but the run says emulated"
                                                if emulated else f"is {answers_for!r}, another GPU than the "
                                                f"measuring {measured_on!r}, but the run is not emulated"))
    models = json_object(data["models"], "$.data.models")
    if not models:
        raise StudyError("$.data.models", "must hold at least one model")
    for model, entry in models.items():
        at = f"$.data.models.{model}"
        entry = json_object(entry, at)
        if "error" in entry:
            keys(entry, at, ("error",))
            text(entry["error"], f"{at}.error")
            continue
        keys(entry, at, MODEL_FIELDS, STAGE_FIELDS)
        text(entry["layout"], f"{at}.layout")
        if ("stage" in entry) != ("in_flight" in entry):
            raise StudyError(at, "holds one of stage and in_flight without the other")
        if "stage" in entry:
            choice(entry["stage"], f"{at}.stage", ("first",))
            integer(entry["in_flight"], f"{at}.in_flight", minimum=1, maximum=1 << 16)
        for field in ("layers", "tokens", "optimizer_shards"):
            integer(entry[field], f"{at}.{field}", minimum=1, maximum=1 << 24)
        capacity = integer(entry["capacity_bytes"], f"{at}.capacity_bytes", minimum=1, maximum=MAX_BYTES)
        if capacity > total:
            raise StudyError(f"{at}.capacity_bytes", f"{capacity} is more than the GPU's total {total}")
        if (capacity < total) != emulated:
            raise StudyError(f"{at}.capacity_bytes", (f"{capacity} caps the GPU's {total} bytes: the run must say "
                                                      "emulated" if capacity < total else
                                                      f"is the GPU's whole {total} bytes: an emulated run caps it"))
        recipes = json_object(entry["recipes"], f"{at}.recipes")
        if not recipes:
            raise StudyError(f"{at}.recipes", "must hold at least one recipe")
        for precision, found in recipes.items():
            choice(precision, f"{at}.recipes.{precision}", tuple(PRECISIONS))
            _recipe(found, f"{at}.recipes.{precision}")
            if emulated and "steps" in found:
                raise StudyError(f"{at}.recipes.{precision}.steps", "times a step on an emulated capacity: the "
                                                                    "times are the measuring GPU's, not the one it "
                                                                    "answers for")
            cp = described_context_parallel(entry["layout"])
            if cp > 1 and "steps" in found:
                raise StudyError(f"{at}.recipes.{precision}.steps", f"times a step of a layout with CP {cp}: the "
                                                                    "searched rank's tokens attend only to one "
                                                                    "another, so the step is never quoted")


# ------------------------------------------------------------------------------ from the tool's JSON
def _add_run(where: str, run: Mapping[str, Any], device: str, total: int, models: dict[str, Any]) -> bool:
    """Copy one run's models into ``models`` (a model already there is an error); whether the run was capped.
    ``device`` and ``total``: the first run's GPU, which every run of one file must share."""
    if str(run["device"]) != device or int(run["total_bytes"]) != total:
        raise StudyError(where, f"ran on {run['device']!r} of {run['total_bytes']} bytes, the first run on "
                                f"{device!r} of {total}: one study file holds one GPU's runs")
    capacity = int(run["capacity_bytes"])
    for model, entry in run["models"].items():
        if model in models:
            raise StudyError(f"{where}.models.{model}", "is in two runs")
        if "error" in entry:
            models[model] = {"error": str(entry["error"])}
            continue
        recipes: dict[str, Any] = {}
        for precision, found in entry["found"].items():
            if isinstance(found, str):  # the tool's record of a failure that was not an out-of-memory
                recipes[precision] = {"failed": found}
                continue
            if int(found["peak_bytes_limit"]) != capacity:
                raise StudyError(f"{where}.models.{model}.found.{precision}.peak_bytes_limit",
                                 f"{found['peak_bytes_limit']} is not the run's capacity {capacity}")
            recipes[precision] = {"largest": found["largest"], "tried": list(found["tried"]),
                                  "seconds": found["seconds"],
                                  **{k: found[k] for k in (*STEP_FIELDS, SEED_FIELD) if k in found}}
        models[model] = {"layout": entry["layout"], "layers": entry["layers"], "tokens": entry["tokens"],
                         "optimizer_shards": entry["optimizer_shards"], "capacity_bytes": capacity,
                         "recipes": recipes,
                         **{k: entry[k] for k in STAGE_FIELDS if k in entry}}
    return capacity < total


def stored_data(runs: Sequence[tuple[str, Mapping[str, Any]]], answers_for: str | None = None) -> dict[str, Any]:
    """The study's ``data`` block from one GPU's runs of ``tools/gpu_layout_search.py`` (``(where, JSON)``
    each; ``where`` names the run in errors). Numbers are copied, never recomputed. ``answers_for``: the
    GPU whose capacity capped runs emulate (required for them; an uncapped run answers for its own GPU).
    Raises :class:`StudyError` (its ``where`` the run's) for runs that disagree or a model in two runs."""
    if not runs:
        raise StudyError("runs", "no run given")
    first_where, first = runs[0]
    try:
        device, total = str(first["device"]), int(first["total_bytes"])
    except (KeyError, TypeError, ValueError) as exc:
        raise StudyError(first_where, f"is not a tools/gpu_layout_search.py run: {type(exc).__name__} {exc}") from None
    models: dict[str, Any] = {}
    capped = []
    for where, run in runs:
        try:
            capped.append(_add_run(where, run, device, total, models))
        except (KeyError, TypeError, ValueError, AttributeError) as exc:  # a hand-made or truncated run
            raise StudyError(where, f"is not a tools/gpu_layout_search.py run: {type(exc).__name__} {exc}") from None
    if len(set(capped)) > 1:
        raise StudyError("runs", "mixes capped and uncapped runs: store each in the file of the GPU it answers for")
    emulated = capped[0]
    if emulated and answers_for is None:
        raise StudyError(first_where, f"caps the allocator below the GPU's {total} bytes: say which GPU's capacity "
                                      "it emulates (answers_for)")
    data = {"measured_on": device, "total_bytes": total, "answers_for": answers_for or device, "emulated": emulated,
            "models": dict(sorted(models.items()))}
    validate_data(data)
    return data


# ------------------------------------------------------------------------------ seeding a new search
def stored_seeds(path: Path, device_name: str) -> dict[str, Any] | None:
    """The ``data`` block of the stored study a new search is seeded from (``--seed-from PATH``): the
    file ``path``, or, where ``path`` is a cache folder, this GPU's file in it
    (:func:`~gemm_bench.results.studies.study_path` of ``device_name``; None where the folder holds
    none: the GPU's first search). Read by the studies' reader, so a file that is not a valid
    layout-search study raises :class:`CacheError` naming it."""
    path = Path(path)
    if path.is_dir():
        path = study_path(path, NAME, device_name)
        if not path.exists():
            return None
    doc = read_study(path)
    if doc["study"] != NAME:
        raise CacheError(path, f"holds study {doc['study']!r}, not {NAME!r}")
    return dict(doc["data"])


def seed(stored: Mapping[str, Any] | None, model: str, rank: Mapping[str, Any], precision: str) -> int | None:
    """The micro-batch the stored study (:func:`stored_seeds`) found for ``model`` under ``precision``,
    to seed this run's search with, or None: no stored study, no such model or recipe, a failed or empty
    (0) answer, or a stored rank that is not this run's (``rank`` holds this run's :data:`SEED_MATCH`
    fields; ``stage`` and ``in_flight`` are absent at PP 1 on both sides)."""
    if stored is None:
        return None
    entry = stored["models"].get(model)
    if entry is None or "error" in entry or any(entry.get(k) != rank.get(k) for k in SEED_MATCH):
        return None
    found = entry["recipes"].get(precision)
    if found is None or "failed" in found or found["largest"] < 1:
        return None
    return int(found["largest"])


STUDY = register_schema(NAME, title="The largest micro-batch of a layout's rank, found on the GPU",
                        method_version=METHOD_VERSION, measure="gemm_bench.measure.layout_search_study:measure",
                        reads_cache=True,
                        fields=("measured_on", "total_bytes", "answers_for", "emulated", "models"), check=_check_data)
validate_data = STUDY.validate_data
