"""Energy per step from the timed group's power: the numbers, their upper bound and the idle flag."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from gemm_bench.measure import telemetry
from gemm_bench.results import energy

CACHE = Path(__file__).parent.parent / "docs" / "_gemm_cache"


def _group(power: float = 500.0, top: float = 650.0, samples: int = 100, rounds: int = 40) -> dict:
    return {"label": "layer step (layer, layer-graphed)", "mode": "layer-graphed", "members": ["bf16", "fp8-current"],
            "rounds": rounds, "run_id": "r1",
            "clock": {"samples": samples, "power_w_median": power, "power_w_max": top, "power_source": "instantaneous"}}


def test_the_sampling_interval_is_the_samplers() -> None:
    assert energy.SAMPLE_INTERVAL_S == telemetry.SAMPLE_INTERVAL_S


def test_energy_is_power_times_step_time_with_an_upper_bound_from_the_highest_sample() -> None:
    # 40 rounds x (30 + 20 ms) = 2 s of steps in 100 x 20 ms = 2 s of window: busy throughout
    block = energy.step_energy(_group(), 20.0, 4096, member_ms=[30.0, 20.0])
    assert block is not None
    assert block["energy_mj"] == pytest.approx(10_000) and block["energy_mj_max"] == pytest.approx(13_000)
    assert block["tokens_per_j"] == pytest.approx(409.6) and block["busy_fraction"] == pytest.approx(1.0)
    assert "unreliable" not in block


def test_a_window_mostly_idle_flags_the_energy() -> None:
    block = energy.step_energy(_group(rounds=10), 20.0, 4096, member_ms=[30.0, 20.0])
    assert block is not None and block["busy_fraction"] == pytest.approx(0.25) and "too low" in block["unreliable"]


def test_no_power_samples_no_energy() -> None:
    assert energy.step_energy({"clock": {"samples": 0, "reason": "no NVML"}}, 20.0, 4096) is None


def test_each_committed_graphed_step_finds_its_group() -> None:
    path = next(p for p in sorted(CACHE.glob("*.json")) if json.loads(p.read_text())["question"]["kind"] == "model")
    doc = json.loads(path.read_text(encoding="utf-8"))
    measured = {(c["precision"], c.get("routing", "balanced")) for c in doc.get("layer", [])
                if c["mode"] == "layer-graphed" and c["status"] == "measured"}
    assert measured and set(energy.energies(doc)) == measured
