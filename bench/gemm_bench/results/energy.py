"""Energy per training step and tokens per joule, from the power sampled while the step was timed.

Why: a recipe that is faster but draws more power may cost as much energy per token; the sampler
already records each timed group's board power (``groups[].clock``: NVML's instantaneous power
every :data:`SAMPLE_INTERVAL_S`, a separate process, :mod:`gemm_bench.measure.telemetry`).

What is computed, per step cell: ``energy = power_w_median x step time`` (mJ, since W x ms = mJ)
and ``tokens / energy`` (tokens per joule). What limits it, stated with every number:

* the group interleaves every recipe round by round, and a step (milliseconds) is shorter than
  one sampling interval (20 ms), so the power is the *group's*: one median over all recipes'
  steps, not each recipe's own draw. ``energy_mj_max`` uses the group's highest sample instead:
  no recipe's step drew more than that, so it bounds each step's energy from above;
* the window also holds the L2 flushes between steps and the host's read-back after each round,
  when the GPU idles: ``busy_fraction`` is the GPU time of the group's steps over the window
  (rounds x the members' step times / (samples x interval)); below :data:`MIN_BUSY_FRACTION` the
  median samples idle time more than steps, and the energy is flagged ``unreliable``;
* the window's length is known to one sampling interval per end (``samples x interval``).

Pure: no torch.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from gemm_bench.question.precisions import PRECISIONS
from gemm_bench.results.step_error import StepError

#: Seconds between the sampler's readings (:data:`gemm_bench.measure.telemetry.SAMPLE_INTERVAL_S`;
#: repeated here because results never import the measuring side; a test keeps them equal).
SAMPLE_INTERVAL_S = 0.02
#: Below this share of the sampled window spent in the group's steps, the power median is mostly
#: idle power and the energy is flagged.
MIN_BUSY_FRACTION = 0.8

ENERGY_RULE = (f"energy per step = the timed group's median board power (NVML instantaneous power sampled every "
               f"{SAMPLE_INTERVAL_S * 1000:g} ms by a separate process) x the step's published time; the group "
               "interleaves every recipe, so the power is the group's, not each recipe's own; energy_mj_max uses the "
               "group's highest sample and bounds the step's energy from above")


def power_above_limit(device: Mapping[str, Any], watts: float, sources: Iterable[object]) -> str:
    """Why a power reading above the board's limit ("board power up to 880 W" in ``gemm-bench report``,
    "745 W" in a page's energy line, on a 700 W H100) is no error; "" when ``watts`` is within the
    limit (``device["power_limit_w"]``, as nvidia-smi reported it), the limit is unknown, or no reading
    was instantaneous (``sources``: the readings' ``power_source``).

    NVML's power on Hopper is the board's instantaneous draw, not an average: the power controller
    holds the enforced limit on average over its own window (by lowering the clock), so samples, and
    the median of a fraction of a second's samples, can sit above it. One sentence for every place a
    reading shows, so the report and the pages explain it alike."""
    return power_above(board_limit_w(device.get("power_limit_w")), watts, sources)


def board_limit_w(stored: object) -> float | None:
    """The board's power limit in W from ``device.power_limit_w`` as nvidia-smi wrote it ("700.00"), None
    where unknown ("None", "[N/A]", absent): the one reading of it (the door's power check, the typed
    :class:`~gemm_bench.results.typed.Device`, :func:`power_above_limit`)."""
    try:
        return float(str(stored))
    except ValueError:
        return None


def power_above(limit: float | None, watts: float, sources: Iterable[object]) -> str:
    """:func:`power_above_limit` of a board ``limit`` already read (None: unknown)."""
    if limit is None or not watts > limit or "instantaneous" not in set(sources):
        return ""
    return (f"power samples are instantaneous: the {limit:.0f} W limit holds on average over the power "
            "controller's window, not at every instant, so a short stretch of heavy work reads above it")


def step_group(groups: Sequence[Mapping[str, Any]], precision: str, *, run_id: str | None,
               mode: str = "layer-graphed", routing: str = "balanced") -> Mapping[str, Any] | None:
    """The timed group a step cell of ``precision`` came from: a layer-step group of ``mode`` (its
    routing in its label when not balanced) holding ``precision`` among its members, of the same run."""
    for group in groups:
        label = str(group.get("label", ""))
        if group.get("mode") != mode or not label.startswith("layer step"):
            continue
        if (routing != "balanced") != (f"{routing} routing" in label) or precision not in group.get("members", []):
            continue
        if run_id is not None and group.get("run_id") not in (None, run_id):
            continue
        return group
    return None


def step_energy(group: Mapping[str, Any], step_ms: float, tokens: float,
                member_ms: Sequence[float] = ()) -> dict[str, Any] | None:
    """Energy of one step of ``step_ms`` from its group's clock block, or None without power samples.

    ``member_ms``: every member's step time in the group (this one's included), for the busy fraction.
    """
    clock = group.get("clock") or {}
    power, top, samples = clock.get("power_w_median"), clock.get("power_w_max"), clock.get("samples") or 0
    if not isinstance(power, (int, float)) or not samples or not step_ms > 0 or not math.isfinite(step_ms):
        return None
    energy_mj = power * step_ms
    out: dict[str, Any] = {
        "power_w": power,
        "energy_mj": round(energy_mj, 3),
        "tokens_per_j": round(tokens / (energy_mj / 1000), 1) if energy_mj > 0 else None,
        "samples": samples,
        "sample_interval_s": SAMPLE_INTERVAL_S,
        "power_source": clock.get("power_source", ""),
    }
    if isinstance(top, (int, float)):
        out["power_w_max"] = top
        out["energy_mj_max"] = round(top * step_ms, 3)
    rounds = group.get("rounds")
    if member_ms and isinstance(rounds, int) and rounds > 0:
        window_ms = samples * SAMPLE_INTERVAL_S * 1000
        busy = rounds * sum(member_ms) / window_ms
        out["busy_fraction"] = round(busy, 3)
        if busy < MIN_BUSY_FRACTION:
            out["unreliable"] = (f"the group's steps filled {busy:.0%} of the sampled window; the power median "
                                 "is mostly the idle GPU's (flushes, read-back), so this energy is too low")
    return out


def energies(doc: Mapping[str, Any], mode: str = "layer-graphed") -> dict[tuple[str, str], dict[str, Any]]:
    """Energy of every measured step cell of ``mode`` in a result: ``(precision, routing) -> block``."""
    cells = [c for c in doc.get("layer", []) if c.get("mode") == mode and c.get("status") == "measured"]
    tokens = _tokens(doc)
    out: dict[tuple[str, str], dict[str, Any]] = {}
    if tokens is None:
        return out
    for cell in cells:
        routing = cell.get("routing", "balanced")
        group = step_group(doc.get("groups", []), cell["precision"], run_id=cell.get("run_id"), mode=mode,
                           routing=routing)
        if group is None:
            continue
        members = [c["ms"] for c in cells if c.get("routing", "balanced") == routing
                   and c["precision"] in group.get("members", [])]
        block = step_energy(group, cell["ms"], tokens, members)
        if block is not None:
            out[(cell["precision"], routing)] = block
    return out


def _tokens(doc: Mapping[str, Any]) -> float | None:
    return tokens_per_gpu(doc.get("question", {}).get("config") or {})


def tokens_per_gpu(config: Mapping[str, Any]) -> float | None:
    """The tokens one GPU's step stands for: the micro-batch's tokens over the tensor-parallel GPUs
    that compute them together (issue 43: each token of a TP 8 rank's step went through eight GPUs,
    each drawing its own power). Tokens per joule is these over one GPU's energy, so it reads as
    tokens per second per GPU does (divided by TP) and two models of different TP compare. None
    without a model's sequence and micro-batch."""
    seq, mbs = config.get("seq_length"), config.get("micro_batch_size")
    if not isinstance(seq, int) or not isinstance(mbs, int):
        return None
    tp = config.get("tensor_model_parallel_size")
    return seq * mbs / (tp if isinstance(tp, int) and tp > 0 else 1)


def per_gpu_rates(entry: dict[str, Any], tokens: float) -> None:
    """Set a measured entry's tokens per joule (and its bounds) from its energies and ``tokens``
    (:func:`tokens_per_gpu`), in place: the one rule, for entries measured before it too (a TP rank's
    entry once divided the whole micro-batch's tokens by one GPU's energy)."""
    entry["tokens_per_j"] = round(tokens / (entry["energy_mj"] / 1000), 1)
    if "energy_mj_low" in entry and "energy_mj_high" in entry:
        entry["tokens_per_j_low"] = round(tokens / (entry["energy_mj_high"] / 1000), 1)
        entry["tokens_per_j_high"] = round(tokens / (entry["energy_mj_low"] / 1000), 1)


# ---------------------------------------------------------------- each recipe's step alone
#: Seconds each recipe's graphed step is replayed back to back under the sampler (about 15 samples).
ENERGY_WINDOW_S = 0.3
#: Fewest power samples an energy rests on; fewer and the recipe's entry is ``failed`` with the reason.
MIN_ENERGY_SAMPLES = 5

ALONE_RULE = (f"energy per step = the median board power (NVML, sampled every {SAMPLE_INTERVAL_S * 1000:g} ms by a "
              f"separate process) while that recipe's CUDA-graphed layer step alone is replayed back to back for "
              f"{ENERGY_WINDOW_S:g} s (no L2 flush, one synchronize per batch of steps), x the wall time of those "
              "steps / their number; tokens per joule = the step's tokens per GPU (the micro-batch's tokens over its "
              "tensor-parallel GPUs) / that energy. Each recipe is measured "
              "on its own, so its energy is its own draw, not a group's. The spread is the power samples' first "
              "and third quartiles x the same time per step: the scatter of the instantaneous readings within "
              "the window, not run-to-run variation")


def alone_energy(precision: str, clock: Mapping[str, Any], wall_s: float, steps: int,
                 tokens: float) -> dict[str, Any]:
    """One recipe's ``doc["energy"]["steps"]`` entry from the sampler's summary of its window
    (``clock``: ``power_w_median``, ``power_w_q1``, ``power_w_q3``, ``power_w_max``, ``samples``,
    ``power_source``), the window's wall seconds and the steps replayed in it; ``failed`` with the
    reason when it cannot be trusted.

    With the samples' quartiles (a sampler before them gave none) the entry also holds the energy
    and tokens-per-joule bounds: the quartiles' power x the same time per step, so two recipes'
    energies can be told apart only beyond the scatter of their samples (:func:`energy_bounds`)."""
    power, samples = clock.get("power_w_median"), clock.get("samples") or 0
    if not isinstance(power, (int, float)) or not math.isfinite(power) or power <= 0:
        return {"precision": precision, "status": "failed",
                "reason": f"no power reading in the window ({clock.get('unavailable') or 'no samples'})"}
    if samples < MIN_ENERGY_SAMPLES or steps < 1 or not wall_s > 0:
        return {"precision": precision, "status": "failed",
                "reason": f"{samples} power samples over {steps} steps in {wall_s:.3f} s: too few to trust"}
    step_ms = wall_s * 1000 / steps
    energy_mj = power * step_ms
    out: dict[str, Any] = {"precision": precision, "status": "measured", "power_w": round(power, 2),
                           "samples": samples, "steps": steps, "wall_s": round(wall_s, 4),
                           "step_ms": round(step_ms, 5), "energy_mj": round(energy_mj, 3),
                           "tokens_per_j": round(tokens / (energy_mj / 1000), 1),
                           "power_source": str(clock.get("power_source", ""))}
    top = clock.get("power_w_max")
    if isinstance(top, (int, float)) and math.isfinite(top):
        out["power_w_max"] = round(top, 2)
    q1, q3 = clock.get("power_w_q1"), clock.get("power_w_q3")
    if isinstance(q1, (int, float)) and isinstance(q3, (int, float)) and math.isfinite(q1 + q3) and min(q1, q3) > 0:
        low_mj, high_mj = q1 * step_ms, q3 * step_ms
        out.update({"power_w_q1": round(q1, 2), "power_w_q3": round(q3, 2),
                    "energy_mj_low": round(low_mj, 3), "energy_mj_high": round(high_mj, 3),
                    "tokens_per_j_low": round(tokens / (high_mj / 1000), 1),
                    "tokens_per_j_high": round(tokens / (low_mj / 1000), 1)})
    return out


def energy_bounds(entry: Mapping[str, Any]) -> tuple[float, float] | None:
    """A measured entry's energy spread in mJ (the power samples' quartiles x its time per step), or
    None for an entry measured before the quartiles were stored: then no comparison can say whether
    two recipes' energies differ by more than the sampling scatter."""
    low, high = entry.get("energy_mj_low"), entry.get("energy_mj_high")
    if isinstance(low, (int, float)) and isinstance(high, (int, float)):
        return float(low), float(high)
    return None


def energy_document(entries: Sequence[Mapping[str, Any]], *, window_s: float = ENERGY_WINDOW_S,
                    mode: str = "layer-graphed") -> dict[str, Any]:
    """``doc["energy"]``: the rule, its parameters and one entry per recipe."""
    return {"method": ALONE_RULE, "mode": mode, "window_s": window_s, "sample_interval_s": SAMPLE_INTERVAL_S,
            "steps": [dict(e) for e in entries]}


def joules(energy_mj: float) -> str:
    """Millijoules as the pages show joules: three significant digits, whole joules from 100 J."""
    value = energy_mj / 1000
    return f"{value:.3g}" if value < 100 else f"{value:.0f}"


def energy_words(entry: Mapping[str, Any]) -> str:
    """``3.75 J per step (546 tokens/J, 721 W)``: one recipe's energy as a table cell or a sentence says
    it; with its spread ``3.75 J per step (quartiles 3.70-3.81 J; 546 tokens/J, 721 W)``."""
    bounds = energy_bounds(entry)
    spread = f"quartiles {joules(bounds[0])}–{joules(bounds[1])} J; " if bounds else ""
    return f"{joules(entry['energy_mj'])} J per step ({spread}{entry['tokens_per_j']:.0f} tokens/J, " \
           f"{entry['power_w']:.0f} W)"


def validate_energy_block(block: Any, *, where: str = "$.energy") -> dict[str, Any]:
    """Check ``doc["energy"]`` (:func:`energy_document`); raise :class:`StepError` naming the JSON path."""
    if not isinstance(block, dict) or not isinstance(block.get("method"), str):
        raise StepError(f"{where}", "must be an object with a method")
    for field in ("window_s", "sample_interval_s"):
        value = block.get(field)
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value <= 0:
            raise StepError(f"{where}.{field}", f"must be a positive number, got {value!r}")
    steps = block.get("steps")
    if not isinstance(steps, list):
        raise StepError(f"{where}.steps", "must be a list")
    seen: set[str] = set()
    for i, entry in enumerate(steps):
        at = f"{where}.steps[{i}]"
        if not isinstance(entry, dict) or entry.get("precision") not in PRECISIONS:
            raise StepError(f"{at}.precision", "must be a known precision")
        if entry["precision"] in seen:
            raise StepError(f"{at}", f"duplicate precision {entry['precision']!r}")
        seen.add(entry["precision"])
        if entry.get("status") == "failed":
            if not isinstance(entry.get("reason"), str):
                raise StepError(f"{at}.reason", "must be a string")
            continue
        if entry.get("status") != "measured":
            raise StepError(f"{at}.status", "must be measured or failed")
        for field in ("power_w", "step_ms", "energy_mj", "tokens_per_j", "wall_s"):
            value = entry.get(field)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) \
                    or value <= 0:
                raise StepError(f"{at}.{field}", f"must be a positive finite number, got {value!r}")
        for field in ("samples", "steps"):
            value = entry.get(field)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise StepError(f"{at}.{field}", f"must be a positive whole number, got {value!r}")
        if abs(entry["power_w"] * entry["step_ms"] - entry["energy_mj"]) > 1e-3 * entry["energy_mj"] + 0.01:
            raise StepError(f"{at}.energy_mj", "is not power_w x step_ms")
        _validate_spread(entry, at)
    return block


#: The spread's fields: all of them or none (an entry measured before the quartiles were stored).
SPREAD_FIELDS = ("power_w_q1", "power_w_q3", "energy_mj_low", "energy_mj_high", "tokens_per_j_low",
                 "tokens_per_j_high")


def _validate_spread(entry: Mapping[str, Any], at: str) -> None:
    """The quartiles hold the median, and the bounds are the quartiles' power x the entry's step."""
    present = [f for f in SPREAD_FIELDS if f in entry]
    if not present:
        return
    if len(present) != len(SPREAD_FIELDS):
        missing = ", ".join(f for f in SPREAD_FIELDS if f not in entry)
        raise StepError(f"{at}", f"has part of the spread ({', '.join(present)}) without {missing}")
    for field in SPREAD_FIELDS:
        value = entry[field]
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value <= 0:
            raise StepError(f"{at}.{field}", f"must be a positive finite number, got {value!r}")
    if not entry["power_w_q1"] <= entry["power_w"] <= entry["power_w_q3"]:
        raise StepError(f"{at}.power_w_q1", f"quartiles {entry['power_w_q1']:g}-{entry['power_w_q3']:g} W do not "
                                            f"hold the median {entry['power_w']:g} W")
    for power, bound in (("power_w_q1", "energy_mj_low"), ("power_w_q3", "energy_mj_high")):
        if abs(entry[power] * entry["step_ms"] - entry[bound]) > 1e-3 * entry[bound] + 0.01:
            raise StepError(f"{at}.{bound}", f"is not {power} x step_ms")
    for rate, bound in (("tokens_per_j_high", "energy_mj_low"), ("tokens_per_j_low", "energy_mj_high")):
        tokens_mj = entry["tokens_per_j"] * entry["energy_mj"]  # the step's tokens x 1000, for every pair
        # each rate is rounded to 0.1 tokens/J: allow that, times the energy it multiplies
        if abs(entry[rate] * entry[bound] - tokens_mj) > 0.05 * (entry[bound] + entry["energy_mj"]) + 1e-3 * tokens_mj:
            raise StepError(f"{at}.{rate}", f"is not the step's tokens / {bound}")
