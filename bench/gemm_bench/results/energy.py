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
    try:
        limit = float(str(device.get("power_limit_w")))  # "700.00" as nvidia-smi wrote it; "None" fails
    except ValueError:
        return ""
    if not watts > limit or "instantaneous" not in set(sources):
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


def step_energy(group: Mapping[str, Any], step_ms: float, tokens: int,
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


def _tokens(doc: Mapping[str, Any]) -> int | None:
    config = doc.get("question", {}).get("config") or {}
    seq, mbs = config.get("seq_length"), config.get("micro_batch_size")
    return seq * mbs if isinstance(seq, int) and isinstance(mbs, int) else None


# ---------------------------------------------------------------- each recipe's step alone
#: Seconds each recipe's graphed step is replayed back to back under the sampler (about 15 samples).
ENERGY_WINDOW_S = 0.3
#: Fewest power samples an energy rests on; fewer and the recipe's entry is ``failed`` with the reason.
MIN_ENERGY_SAMPLES = 5

ALONE_RULE = (f"energy per step = the median board power (NVML, sampled every {SAMPLE_INTERVAL_S * 1000:g} ms by a "
              f"separate process) while that recipe's CUDA-graphed layer step alone is replayed back to back for "
              f"{ENERGY_WINDOW_S:g} s (no L2 flush, one synchronize per batch of steps), x the wall time of those "
              "steps / their number; tokens per joule = the step's tokens / that energy. Each recipe is measured "
              "on its own, so its energy is its own draw, not a group's")


def alone_energy(precision: str, clock: Mapping[str, Any], wall_s: float, steps: int, tokens: int) -> dict[str, Any]:
    """One recipe's ``doc["energy"]["steps"]`` entry from the sampler's summary of its window
    (``clock``: ``power_w_median``, ``power_w_max``, ``samples``, ``power_source``), the window's
    wall seconds and the steps replayed in it; ``failed`` with the reason when it cannot be trusted."""
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
    return out


def energy_document(entries: Sequence[Mapping[str, Any]], *, window_s: float = ENERGY_WINDOW_S,
                    mode: str = "layer-graphed") -> dict[str, Any]:
    """``doc["energy"]``: the rule, its parameters and one entry per recipe."""
    return {"method": ALONE_RULE, "mode": mode, "window_s": window_s, "sample_interval_s": SAMPLE_INTERVAL_S,
            "steps": [dict(e) for e in entries]}


def step_energies(doc: Mapping[str, Any]) -> dict[str, dict[str, Any]]:
    """Each recipe's measured energy entry of a result (``precision -> entry``); {} without ``energy``."""
    block = doc.get("energy")
    if not isinstance(block, dict):
        return {}
    return {e["precision"]: e for e in block.get("steps", []) if e.get("status") == "measured"}


def energy_words(entry: Mapping[str, Any]) -> str:
    """``3.75 J per step (546 tokens/J, 721 W)``: one recipe's energy as a table cell or a sentence says it."""
    joules = entry["energy_mj"] / 1000
    shown = f"{joules:.3g}" if joules < 100 else f"{joules:.0f}"
    return f"{shown} J per step ({entry['tokens_per_j']:.0f} tokens/J, {entry['power_w']:.0f} W)"


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
    return block
