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
from collections.abc import Mapping, Sequence
from typing import Any

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
