"""A result's invariants, checked once, at the door: what the schema cannot see in one field alone.

Why: the schema (:func:`gemm_bench.results.schema.validate`) checks each field's type and range, so
a file that is *well formed* passes it even when its numbers cannot all be true together: a
breakdown whose parts add up to 1.5x its step, an energy resting on two power samples, a model
step faster than the GPU's peak, 0.001 bytes of optimizer state per parameter, a stuck power
reading of 855 W on a 700 W board. Each reader used to check what it happened to check; now
:func:`check` judges every such invariant once, when the file is read
(:func:`gemm_bench.results.cache.read_document`), and hands every reader a *checked* document:

* each violation is a :class:`Violation` naming the JSON path, the block and the recipe, and what
  is wrong, so the report and the pages can say it where the number would have been;
* the number at fault is **demoted**, never shown as valid: a measured entry becomes a failed one
  whose reason is the violation (every reader already shows a failed entry as failed, with its
  reason, and the refresh measures failed blocks again), a breakdown that does not add up is
  dropped from its part, memory resting on an impossible optimizer state is dropped.

The stored file is never changed: writers (``Cache.store``, ``merge``) read it raw.

The invariants, and why each bound is what it is:

* **GPU time at most the hardware's speed**: a layer step, a plan's step or a model step's layer
  part whose time would run the layer's GEMMs (:attr:`GemmShape.flops`, the question's rank GEMMs)
  above the device's dense peak for the recipe (:mod:`gemm_bench.question.hardware`; an FP8
  recipe against the FP8 peak, the most it could reach), and a model step's head whose logits
  GEMMs alone would; the per-GEMM cells have had this check in the schema since method v2.
* **Breakdowns add up**: parts within :data:`~gemm_bench.results.breakdown.ADDS_UP_WITHIN` of their
  step and a scale of at least :data:`~gemm_bench.results.breakdown.MIN_SCALE` (the rules the cache's
  test held the committed files to; now every file, at the door).
* **The cross-check for every timed region**: a model step's part or a plan's step timed above
  :data:`~gemm_bench.results.cross_check.REGION_MAX` its kernel time is not GPU time.
* **Energy**: at least :data:`~gemm_bench.results.energy.MIN_ENERGY_SAMPLES` power samples (the
  methodology publishes nothing on fewer); a median power within :data:`POWER_MARGIN` x the
  board's limit (NVML's instantaneous samples sit above the average-enforced limit for short
  stretches: the committed medians reach 1.10x on 700 W boards, so 1.15x separates that from a
  wrong reading); a median equal to both the third quartile and the maximum of its samples is a
  stuck or saturated sensor, not a draw.
* **Tokens per joule per GPU** (not an invariant but a rule the door applies to every file): the
  tokens one GPU's step stands for over its energy (:func:`~gemm_bench.results.energy.tokens_per_gpu`),
  recomputed from the stored energies, so a tensor-parallel result measured before the rule reads
  as one measured after it.
* **A peer's time at most the hardware's speed** for the format its label names (``FP8 rowwise``: the
  FP8 peak), as the schema holds Transformer Engine's cells to theirs.
* **A timed group's board power** (``groups[].clock``, which ``gemm-bench report`` quotes as "board power
  up to") held to the energy's rule: its power fields are dropped, ``power_refused`` says why.
* **A recipe measured only where it can run**: a GEMM cell, layer step, model step part or energy entry
  "measured" in a recipe that the same run's support check (``support``, TE's own ``is_*_available()``)
  says the GPU cannot run is failed with TE's reason: the pages show that verdict for the recipe.
* **A plan follows its own numbers**: each stored projection is in the plan's FP8 list exactly when its
  stored speedup is clearly faster (:func:`~gemm_bench.results.significance.clearly_faster`, the rule the
  report's plan decides by), and names a GEMM of the question; else the plan is not shown (the page said
  "every projection in FP8 is clearly faster" beside a stored 0.5x).
* **Optimizer state per parameter** within :data:`STATE_PER_PARAM` bytes: the FP32 master weight
  and Adam's two moments (12) are the least the recipe's optimizer holds, and those plus the FP32
  main gradient and one more FP32 buffer (20) the most it can need.
* **A cached layer part against its first** within :data:`CACHED_AGAINST_FIRST`: the cached micro-batch
  runs the same GEMMs on the same shapes, skips the weights' FP8 casts (FP8's cached parts are at most
  10% faster in the committed results) and adds the FP32 main gradients' read (a BF16 mixture of
  experts' cached part is up to 1.50x its first there); half or twice is beyond both. Outside it, the
  cached part is failed, and that recipe's model step is not composed.
* **A layer's weights per parameter** within :data:`WEIGHT_BYTES_PER_PARAM`: the layer is built in
  BF16, so its weights hold 2 bytes per parameter plus a few small buffers (every committed result
  reads 2.000-2.007). A first layer built in a fresh process once read 2.154 on the H200: a one-time
  allocation counted as weights. Outside the bound, that recipe's memory (and its micro-batch
  search) is dropped.

Pure: no torch.
"""

from __future__ import annotations

import copy
import dataclasses
from collections.abc import Mapping
from typing import Any

from gemm_bench.question.hardware import above_peak, achieved_tflops, peak_tflops, precision_format
from gemm_bench.question.shapes import GemmShape, total_flops
from gemm_bench.results.breakdown import check_adds_up, check_scale
from gemm_bench.results.cross_check import region_flag
from gemm_bench.results.energy import MIN_ENERGY_SAMPLES, board_limit_w, per_gpu_rates, tokens_per_gpu
from gemm_bench.results.schema import CheckedDocument, peer_format, peer_precision, peer_timed
from gemm_bench.results.significance import clearly_faster

#: A cached layer part's time over its first's: (least, most) (module docstring).
CACHED_AGAINST_FIRST = (0.5, 2.0)
#: Bytes one built layer's weights hold per parameter: (least, most) (module docstring).
WEIGHT_BYTES_PER_PARAM = (2.0, 2.1)
#: A median power above this multiple of the board's limit is not a reading (module docstring).
POWER_MARGIN = 1.15
#: Bytes of optimizer state per parameter a recipe can need: (least, most) (module docstring).
STATE_PER_PARAM = (12.0, 20.0)
#: The demoted entry's reason starts so: every reader shows it where the number would have been.
REFUSED = "refused when read: "


@dataclasses.dataclass(frozen=True)
class Violation:
    """One broken invariant: where in the file (a JSON path), which block and recipe, and what."""

    where: str
    block: str
    precision: str | None
    problem: str

    def __str__(self) -> str:
        return f"{self.where}: {self.problem}"

    def as_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


def check(doc: Mapping[str, Any]) -> CheckedDocument:
    """The checked copy of a schema-valid document (the input is not changed): numbers that broke an
    invariant demoted, the violations in its ``violations``."""
    out = CheckedDocument(copy.deepcopy(dict(doc)))
    found: list[Violation] = []
    gemms = [GemmShape.from_dict(row) for row in out["question"]["gemms"]]
    device = str(out["device"]["name"])
    layer_flops = total_flops(gemms) if out["question"].get("kind") == "model" else None
    _unsupported(out, device, found)
    _layer_cells(out, device, layer_flops, found)
    _peers(out, device, {(g.op, g.pass_): g for g in gemms}, found)
    _plan(out, device, layer_flops, found)
    _model_step(out, device, layer_flops, found)
    _energy(out, found)
    _groups(out, found)
    out.violations = tuple(found)
    return out


# ----------------------------------------------------------------------------------- helpers
def _demote(entry: dict[str, Any], problem: str, keep: tuple[str, ...]) -> None:
    """Turn a measured entry into a failed one in place, keeping its identity fields."""
    kept = {k: entry[k] for k in keep if k in entry}
    entry.clear()
    entry.update(kept)
    entry["status"] = "failed"
    entry["reason"] = REFUSED + problem


def _too_fast(device: str, precision: str, flops: int | float, ms: float, what: str) -> str | None:
    """Why ``ms`` for ``flops`` of ``precision`` cannot be a time on ``device``, or None."""
    # A mixed plan or an FP8 step: the FP8 peak is the most any of its GEMMs could reach.
    pct = above_peak(device, precision, flops, ms)
    if pct is None:
        return None
    return (f"{ms:.6g} ms for {what} is {achieved_tflops(flops, ms):.1f} TFLOP/s of its GEMMs alone, {pct:.0f}% of "
            f"the dense {precision_format(precision).upper()} peak of {device} "
            f"({peak_tflops(device, precision):g} TFLOP/s): the time or the FLOP count is wrong")


def _breakdown(entry: dict[str, Any], where: str, block: str, precision: str | None,
               found: list[Violation]) -> None:
    """Drop a stored breakdown whose parts are not its step's (they do not add up, or were scaled too far)."""
    breakdown = entry.get("breakdown")
    if not isinstance(breakdown, dict):
        return
    problem = check_adds_up(breakdown) or check_scale(breakdown)
    if problem is not None:
        found.append(Violation(f"{where}.breakdown", block, precision, f"the time breakdown {problem}"))
        del entry["breakdown"]


def _cross_check(entry: dict[str, Any], where: str, block: str, precision: str | None, keep: tuple[str, ...],
                 found: list[Violation]) -> bool:
    """Demote an entry timed beyond the cross-check's bound for one region; True when it was."""
    flag = region_flag(entry)
    if flag is None:
        return False
    found.append(Violation(where, block, precision, flag))
    _demote(entry, flag, keep)
    return True


# ------------------------------------------------------------------------------------ blocks
_LAYER_KEYS = ("mode", "precision", "routing", "run_id", "measured_at")
#: Each block of measured entries keyed by recipe, and what a demoted entry of it keeps.
_BY_RECIPE: tuple[tuple[str, str | None, tuple[str, ...]], ...] = (
    ("cells", None, ("mode", "precision", "op", "pass", "m", "k", "n", "groups", "run_id", "measured_at")),
    ("layer", None, _LAYER_KEYS),
    ("model_step", "parts", ("part", "precision", "params")),
    ("energy", "steps", ("precision",)),
)


def _unsupported(doc: dict[str, Any], device: str, found: list[Violation]) -> None:
    """A recipe measured on a GPU where the same run's support check (TE's ``is_*_available()``, stored
    in ``support``) says it cannot run: the entry and the verdict cannot both be true, and the verdict
    is what the pages show for that recipe, so the entry is failed with TE's reason."""
    unavailable = {p: str(v.get("reason") or "") for p, v in (doc.get("support") or {}).items()
                   if isinstance(v, dict) and v.get("available") is False}
    if not unavailable:
        return
    for name, inner, keep in _BY_RECIPE:
        block = doc.get(name)
        entries = block.get(inner) if inner is not None and isinstance(block, dict) else block
        for i, entry in enumerate(entries if isinstance(entries, list) else []):
            precision = entry.get("precision") if isinstance(entry, dict) else None
            if precision not in unavailable or entry.get("status") != "measured":
                continue
            problem = (f"measured in {precision}, which this result's support check says {device} cannot run "
                       f"({unavailable[precision] or 'unavailable'}): the time is not that recipe's")
            found.append(Violation(f"$.{name}{'.' + inner if inner else ''}[{i}]", name, precision, problem))
            _demote(entry, problem, keep)


def _layer_cells(doc: dict[str, Any], device: str, flops: int | None, found: list[Violation]) -> None:
    for i, cell in enumerate(doc.get("layer", []) or []):
        if cell.get("status") != "measured":
            continue
        where, precision = f"$.layer[{i}]", cell["precision"]
        problem = None if flops is None else _too_fast(device, precision, flops, float(cell["ms"]),
                                                       f"the {cell['mode']} layer step")
        if problem is not None:
            found.append(Violation(where, "layer", precision, problem))
            _demote(cell, problem, _LAYER_KEYS)
            continue
        _breakdown(cell, where, "layer", precision, found)


#: What a demoted peer row keeps: its identity (the schema holds a peer row to a GEMM of the question).
_PEER_KEYS = ("backend", "op", "pass", "kind", "precision", "m", "k", "n", "groups", "flops", "run_id", "measured_at")


def _peers(doc: dict[str, Any], device: str, gemms: Mapping[tuple[str, str], GemmShape],
           found: list[Violation]) -> None:
    """A peer's time at most the hardware's speed for the format its label names (the schema holds TE's
    cells to it; ``gemm-bench report`` prints a peer's % of peak too)."""
    for i, row in enumerate(doc.get("peers", []) or []):
        if row.get("status") != "measured":
            continue
        label = peer_precision(str(row["backend"]), str(row.get("precision") or ""))
        fmt, timed = peer_format(label), peer_timed(gemms, str(row.get("kind") or "gemm"), row["op"], row["pass"])
        if fmt is None or timed is None:
            continue
        problem = _too_fast(device, fmt, timed[1], float(row["ms"]),
                            f"peer {row['backend']} {row['op']}/{row['pass']} ({label})")
        if problem is not None:
            found.append(Violation(f"$.peers[{i}]", "peers", None, problem))
            _demote(row, problem, _PEER_KEYS)


def _plan(doc: dict[str, Any], device: str, flops: int | None, found: list[Violation]) -> None:
    plan = doc.get("plan")
    if not isinstance(plan, dict):
        return
    recipe = str(plan.get("recipe", "bf16"))
    asked = {g.get("op") for g in doc["question"].get("gemms", []) if isinstance(g, dict)}
    fp8 = set(plan.get("fp8") or [])
    for j, proj in enumerate(plan.get("projections", []) or []):
        if not isinstance(proj, dict):
            continue
        op, speedup, low, high = proj.get("op"), proj.get("speedup"), proj.get("low"), proj.get("high")
        contradiction: str
        if op not in asked:
            contradiction = f"the plan's projection {op!r} is not a GEMM of this question: the plan is not shown"
        elif speedup is not None and (op in fp8) != clearly_faster(speedup, low, high):
            contradiction = (f"the plan {'runs' if op in fp8 else 'keeps'} {op!r} in {'FP8' if op in fp8 else 'BF16'} "
                             f"although its stored speedup {speedup}x ({low}-{high}x) is "
                             f"{'not ' if op in fp8 else ''}clearly faster: the plan's choice contradicts its own "
                             "numbers and is not shown")
        else:
            continue
        found.append(Violation(f"$.plan.projections[{j}]", "plan", recipe, contradiction))
        del doc["plan"]
        return
    for i, step in enumerate(plan.get("steps", []) or []):
        if not isinstance(step, dict) or step.get("status") != "measured":
            continue
        where = f"$.plan.steps[{i}]"
        # all-BF16 runs at the BF16 peak at most; any step with FP8 GEMMs at the recipe's.
        precision = "bf16" if step.get("step") == "all-bf16" else recipe
        problem = None if flops is None else _too_fast(device, precision, flops, float(step["ms"]),
                                                       f"the plan's step {step.get('step')!r}")
        keep = ("step", "mode", "run_id")
        if problem is not None:
            found.append(Violation(where, "plan", recipe, problem))
            _demote(step, problem, keep)
            continue
        _cross_check(step, where, "plan", recipe, keep, found)


def _cached_against_first(block: dict[str, Any], found: list[Violation]) -> None:
    """A recipe's cached-layer part outside :data:`CACHED_AGAINST_FIRST` times its first-layer part is
    failed (the model step of that recipe is then not composed)."""
    parts = block.get("parts", [])
    measured = {(p["part"], p["precision"]): (i, p) for i, p in enumerate(parts) if isinstance(p, dict)
                and p.get("status") == "measured" and p.get("part") in ("layer-first", "layer-cached")}
    low, high = CACHED_AGAINST_FIRST
    for (name, precision), (i, part) in sorted(measured.items()):
        first = measured.get(("layer-first", precision))
        if name != "layer-cached" or first is None:
            continue
        ratio = float(part["ms"]) / float(first[1]["ms"])
        if low <= ratio <= high:
            continue
        problem = (f"the model step's cached layer part takes {ratio:.2f}x its first-layer part, outside what the "
                   f"same layer's next micro-batch can cost ({low:g}-{high:g}x: it skips the weights' casts and "
                   "adds the FP32 main gradients' read): not composed")
        found.append(Violation(f"$.model_step.parts[{i}]", "model_step", precision, problem))
        _demote(part, problem, ("part", "precision", "params"))


def _model_step(doc: dict[str, Any], device: str, flops: int | None, found: list[Violation]) -> None:
    block = doc.get("model_step")
    if not isinstance(block, dict):
        return
    config = doc["question"].get("config") or {}
    vocab, hidden = block.get("padded_vocab_size"), config.get("hidden_size")
    tokens = (config.get("seq_length") or 0) * (config.get("micro_batch_size") or 0)
    tp = config.get("tensor_model_parallel_size") or 1
    for i, part in enumerate(block.get("parts", [])):
        if part.get("status") != "measured":
            continue
        where, precision, name = f"$.model_step.parts[{i}]", part["precision"], part["part"]
        keep = ("part", "precision", "params")
        if name in ("layer-first", "layer-cached") and flops is not None:
            problem = _too_fast(device, precision, flops, float(part["ms"]), f"the model step's {name} part")
        elif name == "head" and isinstance(vocab, int) and isinstance(hidden, int) and tokens:
            # the logits' Fprop, Dgrad and Wgrad over the rank's vocabulary shard, BF16
            logits = 3 * 2 * tokens * hidden * (vocab // tp)
            problem = _too_fast(device, "bf16", logits, float(part["ms"]), "the model step's head part")
        else:
            problem = None
        if problem is not None:
            found.append(Violation(where, "model_step", precision, problem))
            _demote(part, problem, keep)
            continue
        if _cross_check(part, where, "model_step", precision, keep, found):
            continue
        _breakdown(part, where, "model_step", precision, found)
    _cached_against_first(block, found)
    state = block.get("state_per_param")
    low, high = STATE_PER_PARAM
    if isinstance(state, (int, float)) and not low <= state <= high:
        problem = (f"{state:g} bytes of optimizer state per parameter is outside what the recipe's optimizer can "
                   f"need ({low:g}-{high:g}: FP32 master weight and two moments, FP32 main gradient): the memory "
                   "composed from it is not shown")
        found.append(Violation("$.model_step.state_per_param", "model_step", None, problem))
        block["memory"] = {}
        block.pop("largest_microbatch", None)
        return
    params = block.get("layer_params")
    memory = block.get("memory")
    if not isinstance(params, int) or params <= 0 or not isinstance(memory, dict):
        return
    low, high = WEIGHT_BYTES_PER_PARAM
    for precision in sorted(memory):
        weights = memory[precision].get("layer_weights") if isinstance(memory[precision], dict) else None
        if not isinstance(weights, (int, float)) or low <= weights / params <= high:
            continue
        problem = (f"one layer's weights of {weights / params:.3f} bytes per parameter are outside what a layer "
                   f"built in BF16 holds ({low:g}-{high:g}): the allocator counted something else as weights (or "
                   "lost some), so the memory composed from them is not shown")
        found.append(Violation(f"$.model_step.memory.{precision}.layer_weights", "model_step", precision, problem))
        del memory[precision]
        search = block.get("largest_microbatch")
        if isinstance(search, dict):
            search.pop(precision, None)


def _energy(doc: dict[str, Any], found: list[Violation]) -> None:
    block = doc.get("energy")
    if not isinstance(block, dict):
        return
    limit = board_limit_w(doc["device"].get("power_limit_w"))
    tokens = tokens_per_gpu(doc["question"].get("config") or {})
    for i, entry in enumerate(block.get("steps", []) or []):
        if entry.get("status") != "measured":
            continue
        where, precision = f"$.energy.steps[{i}]", entry["precision"]
        problem = power_problem(float(entry["power_w"]), int(entry["samples"]), entry.get("power_w_q3"),
                                entry.get("power_w_max"), limit, "the step's draw")
        if problem is not None:
            found.append(Violation(where, "energy", precision, problem))
            _demote(entry, problem, ("precision",))
        elif tokens is not None:
            per_gpu_rates(entry, tokens)


def power_problem(power: float, samples: int, q3: object, top: object, limit: float | None, what: str) -> str | None:
    """Why a median board ``power`` over ``samples`` (third quartile ``q3`` and maximum ``top`` where stored)
    is not a reading of ``what``, or None: too few samples, beyond the board's ``limit`` with
    :data:`POWER_MARGIN`, or stuck (the median equal to the third quartile and the maximum). One rule for
    a step's energy and a timed group's power."""
    if samples < MIN_ENERGY_SAMPLES:
        return (f"{samples} power samples: a power reading rests on at least {MIN_ENERGY_SAMPLES}, so it is not "
                "published")
    if limit is not None and power > POWER_MARGIN * limit:
        return (f"a median board power of {power:.0f} W is above {POWER_MARGIN:g}x the board's "
                f"{limit:.0f} W limit: not a reading of {what}")
    if isinstance(top, (int, float)) and isinstance(q3, (int, float)) and power == q3 == top:
        return (f"the median power {power:.1f} W equals the third quartile and the maximum of its "
                f"{samples} samples: a stuck or saturated reading, not {what}")
    return None


#: A timed group's power fields (``groups[].clock``), dropped together when its reading is refused.
GROUP_POWER_FIELDS = ("power_w_median", "power_w_max", "power_w_q1", "power_w_q3")


def _groups(doc: dict[str, Any], found: list[Violation]) -> None:
    """A timed group's board power held to the energy's rule (:func:`power_problem`): ``gemm-bench report``
    prints "board power up to N W" from the groups, so a reading the energy would refuse is refused here
    too: its power fields are dropped from the clock and ``power_refused`` says why (the clock's own
    samples stay)."""
    limit = board_limit_w(doc["device"].get("power_limit_w"))
    for i, group in enumerate(doc.get("groups", []) or []):
        clock = group.get("clock") if isinstance(group, dict) else None
        if not isinstance(clock, dict) or not isinstance(clock.get("power_w_median"), (int, float)):
            continue
        problem = power_problem(float(clock["power_w_median"]), int(clock.get("samples") or 0),
                                clock.get("power_w_q3"), clock.get("power_w_max"), limit,
                                f"the board's draw while group {group.get('label')!r} was timed")
        if problem is not None:
            found.append(Violation(f"$.groups[{i}].clock", "groups", None, problem))
            for key in GROUP_POWER_FIELDS:
                clock.pop(key, None)
            clock["power_refused"] = REFUSED + problem
