"""Issue 41 item 3: "a recipe that fits a larger micro-batch says so, with the tokens per second per GPU it
then reaches (measured at that micro-batch)". The layout-search study times the whole rank's step at the
largest micro-batch found and at 1 (G = 1 and 2 each); the schema holds the times, refuses them where the
capacity was emulated, and the report composes each size's step at the layout's G, by hand below."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from gemm_bench.question.layout import ParallelLayout
from gemm_bench.report.layout_search import Search, larger_step, larger_step_text, microbatches_at
from gemm_bench.results import layout_search_schema as schema
from gemm_bench.results import studies

#: Micro-batch 1: G = 1 takes 300 ms, G = 2 590: 290 ms a micro-batch, 10 ms the rest. Micro-batch 4:
#: 1150 and 2290: 1140 a micro-batch, 10 the rest.
STEPS = {"1": {"1": [301.0, 300.0, 299.0], "2": [590.0, 589.0, 591.0]},
         "4": {"1": [1150.0, 1149.0, 1151.0], "2": [2290.0, 2291.0, 2289.0]}}
RECIPE = {"largest": 4, "tried": [1, 2, 4, 8, 6, 5], "seconds": 8.0, "steps": STEPS}
#: Llama 3 8B's Bridge layout without its CP 2 (a timed step is quoted only at CP 1): GBS 128 over DP 4:
#: G = 32 at micro-batch 1, 8 at 4.
LAYOUT = ParallelLayout(gpus=4, sharding="optimizer", global_batch_size=128)


def _data(recipe: dict[str, Any], *, emulated: bool = False) -> dict[str, Any]:
    total = 150109880320
    return {"measured_on": "NVIDIA H200", "total_bytes": total,
            "answers_for": "NVIDIA H100 80GB HBM3" if emulated else "NVIDIA H200", "emulated": emulated,
            "models": {"llama3-8b": {"layout": LAYOUT.describe(overlap=False), "layers": 32, "tokens": 4096,
                                     "optimizer_shards": 8,
                                     "capacity_bytes": 84100186112 if emulated else total,
                                     "recipes": {"bf16": recipe}}}}


def test_the_schema_holds_the_timed_steps() -> None:
    schema.validate_data(_data(copy.deepcopy(RECIPE)))
    schema.validate_data(_data({k: v for k, v in RECIPE.items() if k != "steps"} | {"steps_failed": "x"}))


@pytest.mark.parametrize(("recipe", "where"), [
    ({**RECIPE, "steps_failed": "x"}, "llama3-8b.recipes.bf16"),                        # both
    ({**RECIPE, "largest": 1, "tried": [1, 2]}, "steps"),                                # nothing larger to time
    ({**RECIPE, "steps": {"1": STEPS["1"]}}, "steps"),                                   # the largest missing
    ({**RECIPE, "steps": {**STEPS, "8": STEPS["4"]}}, "steps.8"),                        # a size not searched
    ({**RECIPE, "steps": {**STEPS, "4": {"1": [1150.0]}}}, "steps.4"),                   # G = 2 missing
    ({**RECIPE, "steps": {**STEPS, "4": {"1": [], "2": [1.0]}}}, "steps.4.1"),           # no time
    ({**RECIPE, "steps": {**STEPS, "4": {"1": [-1.0], "2": [1.0]}}}, "steps.4.1[0]"),    # not positive
    ({**RECIPE, "steps": {**STEPS, "4": {"1": [float("nan")], "2": [1.0]}}}, "steps.4.1[0]"),
    ({**RECIPE, "steps": {**STEPS, "4": {"1": [True], "2": [1.0]}}}, "steps.4.1[0]"),
])
def test_impossible_steps_are_refused_with_their_path(recipe: dict[str, Any], where: str) -> None:
    with pytest.raises(studies.StudyError) as caught:
        schema.validate_data(_data(recipe))
    assert where in caught.value.where


def test_an_emulated_capacity_times_no_step() -> None:
    """An H200 capped at an H100's capacity answers the H100's memory, but its times are the H200's."""
    with pytest.raises(studies.StudyError, match="emulated capacity"):
        schema.validate_data(_data(copy.deepcopy(RECIPE), emulated=True))
    schema.validate_data(_data({k: v for k, v in RECIPE.items() if k != "steps"}, emulated=True))


def _search(recipe: dict[str, Any], layout: ParallelLayout | None = LAYOUT) -> Search:
    return Search("NVIDIA H200", "NVIDIA H200", False, 150109880320, 4096, 32, 8, {"bf16": recipe}, layout=layout)


def test_each_size_is_composed_at_the_layouts_g_by_hand() -> None:
    assert (microbatches_at(LAYOUT, 1), microbatches_at(LAYOUT, 4), microbatches_at(LAYOUT, 3)) == (32, 8, None)
    step = larger_step(_search(RECIPE), "bf16")
    assert not isinstance(step, str) and step is not None
    base, large = step
    assert (base.per_microbatch_ms, base.fixed_ms, base.microbatches) == (290.0, 10.0, 32)
    assert (large.per_microbatch_ms, large.fixed_ms, large.microbatches) == (1140.0, 10.0, 8)
    # 1 x 4096 x 32 tokens in 32 x 290 + 10 = 9290 ms; 4 x 4096 x 8 in 8 x 1140 + 10 = 9130 ms
    assert base.tokens_per_s == pytest.approx(4096 * 32 / 9.290)
    assert large.tokens_per_s == pytest.approx(4 * 4096 * 8 / 9.130)
    # the samples' extremes: micro-batch 1 from 32 x (589 - 301) + (301 - 288) = 9229 to 32 x (591 - 299)
    # + (299 - 292) = 9351 ms, micro-batch 4 from 8 x (2289 - 1151) + 13 = 9117 to 8 x (2291 - 1149) + 7 = 9143 ms
    assert base.step_ms_range == (9229.0, 9351.0) and large.step_ms_range == (9117.0, 9143.0)
    low, high = (4 * 4096 * 8 / 9.143) / (4096 * 32 / 9.229), (4 * 4096 * 8 / 9.117) / (4096 * 32 / 9.351)
    assert (round(low, 2), round(high, 2)) == (1.01, 1.03)
    assert larger_step_text(_search(RECIPE), "bf16") == ("14,356 at 4 (1.02× micro-batch 1's 14,109; 1.01–1.03× over "
                                                         "the timed samples)")


def test_a_ratio_whose_samples_hold_1_is_not_called_faster() -> None:
    """Qwen2.5 7B FP8 Current on the H200 (session 18): 18,666 at 4 against 18,632 at 1, but session 17's
    timing of the same rank read 1.07x: G = 1 and 2 extrapolated to G = 16 multiply the samples' noise."""
    noisy = {"1": {"1": [290.0, 300.0, 310.0], "2": [580.0, 590.0, 600.0]}, "4": STEPS["4"]}
    text = larger_step_text(_search({**RECIPE, "steps": noisy}), "bf16")
    assert text.startswith("14,356 at 4 (1.02× micro-batch 1's 14,109; 0.") and text.endswith(
        "× over the timed samples: not told apart from micro-batch 1)"), text
    crossed = {"1": {"1": [290.0, 300.0, 700.0], "2": [580.0, 590.0, 600.0]}, "4": STEPS["4"]}
    assert "no spread to judge by" in larger_step_text(_search({**RECIPE, "steps": crossed}), "bf16")


def test_what_the_timing_cannot_say_is_said() -> None:
    assert larger_step_text(_search({k: v for k, v in RECIPE.items() if k != "steps"}), "bf16") == "–"
    assert larger_step_text(None, "bf16") == "–" and larger_step_text("not searched", "bf16") == "–"
    failed = {k: v for k, v in RECIPE.items() if k != "steps"} | {"steps_failed": "OutOfMemoryError: x"}
    assert larger_step_text(_search(failed), "bf16") == "the timing failed: OutOfMemoryError: x"
    flat = {**RECIPE, "steps": {**STEPS, "4": {"1": [1150.0], "2": [1100.0]}}}
    assert "G = 2 did not take longer than G = 1" in larger_step_text(_search(flat), "bf16")
    odd = ParallelLayout(gpus=4, sharding="optimizer", global_batch_size=48)  # 48 / (4 x 4) = 3, / 4 = 12
    assert larger_step_text(_search(RECIPE, odd), "bf16").startswith("14,")  # divides: composed at G = 3
    odd = ParallelLayout(gpus=4, sharding="optimizer", global_batch_size=8)  # 8 / (4 x 4): no
    assert "does not divide into micro-batches of 4" in larger_step_text(_search(RECIPE, odd), "bf16")


def test_a_context_parallel_layouts_timed_step_is_not_quoted_and_says_why() -> None:
    """The search's rank holds S / CP tokens as sequences of their own: its attention runs over S / CP keys,
    where context parallelism attends to all S. On an H200 the timed Llama 3 8B rank (CP 2) read FP8 1.57x
    BF16, against the composed step's 1.39x at the whole sequence: not a number for the reader."""
    from gemm_bench.report.layout_search import context_parallel_untimed

    cp2 = ParallelLayout(gpus=8, cp=2, sharding="optimizer", global_batch_size=128)
    search = _search(RECIPE, cp2)
    assert larger_step(search, "bf16") is None and larger_step_text(search, "bf16") == "–"
    why = context_parallel_untimed(search)
    assert why is not None and "at CP 2 the timed rank's 4,096 tokens attend only to one another" in why
    assert "whole sequence of 8,192" in why
    assert context_parallel_untimed(_search(RECIPE)) is None  # CP 1: quoted


def test_the_measuring_side_times_both_sizes_at_g_1_and_2(monkeypatch: pytest.MonkeyPatch) -> None:
    from tests import fake_te

    parts = fake_te.install(monkeypatch, oom_above=2)
    from tests.test_model_step_measure_cpu import TINY

    out = parts.step_samples(TINY, 2, "fp8-current", (1, 2), steps=2)
    assert set(out) == {"1", "2"} and all(set(v) == {"1", "2"} for v in out.values())
    assert all(len(ms) == 2 and all(m >= 0 for m in ms) for v in out.values() for ms in v.values())


def test_a_size_fits_only_if_its_second_step_runs(monkeypatch: pytest.MonkeyPatch) -> None:
    """The first step allocates the optimizer's moments after its activations are freed; the second holds
    them through its forward and backward. On an H200, Qwen2.5 7B BF16 at micro-batch 4 ran one step and
    ran out of memory in the next: the search now runs two before it calls a size fitting."""
    import torch

    from tests import fake_te

    parts = fake_te.install(monkeypatch, oom_above=8)
    from tests.test_model_step_measure_cpu import TINY

    steps: dict[int, int] = {}
    real_step = parts.RealModel.step

    def step(self: Any, microbatches: int) -> float:
        steps[id(self)] = steps.get(id(self), 0) + 1
        if self.config.micro_batch_size == 4 and steps[id(self)] == 2:
            raise torch.OutOfMemoryError("fake: the moments held through the second step")
        return real_step(self, microbatches)

    monkeypatch.setattr(parts.RealModel, "step", step)
    found = parts.largest_microbatch(TINY, 2, "bf16", limit=8)
    assert found["largest"] == 3 and found["tried"] == [1, 2, 4, 3]


def test_shapes_prints_the_found_micro_batch_and_its_tokens_per_second(capsys: pytest.CaptureFixture[str]) -> None:
    """Issue 41 item 5: the command line says what the page says: the committed H200 study found 4 for
    Qwen2.5 7B (CP 1, so its timed step is quoted), within 100 columns."""
    from pathlib import Path

    from gemm_bench.cli.commands import main

    cache = Path(__file__).resolve().parents[1] / "docs" / "_gemm_cache"
    assert main(["shapes", "--model", "qwen2.5-7b", "--cache-dir", str(cache)]) == 0
    out = capsys.readouterr().out
    assert max(len(line) for line in out.splitlines()) <= 100
    flat = " ".join(out.split())
    assert "largest micro-batch 4 (predicted), 4 (found on the GPU); tokens/s per GPU (real rank, " in flat
    assert "1 (H100 80GB HBM3 capacity emulated on an H200)" in flat
    assert "FP8 Block 63.2 GiB fits: yes, 75.8 GiB free; largest micro-batch 4 (predicted), not searched" in flat


def test_the_searched_rank_gives_the_real_models_keywords(monkeypatch: pytest.MonkeyPatch) -> None:
    """One mapping from the searched rank to the built model serves the search, its timing and the GPU
    memory test: BF16 main gradients where the layout reduces in BF16, FP8 primary weights only under
    an FP8 recipe where the layout gathers FP8 parameters."""
    import torch

    from gemm_bench.question.stage_shape import SearchedRank
    from tests import fake_te

    parts = fake_te.install(monkeypatch)
    rank = SearchedRank("first", 8, False, 4, 4096, 16, "bf16", True)
    assert parts.rank_keywords(rank, "fp8-current") == {"optimizer_shards": 16, "head": False, "in_flight": 4,
                                                        "grad_dtype": torch.bfloat16, "fp8_primary": True}
    assert parts.rank_keywords(rank, "bf16")["fp8_primary"] is False
    plain = SearchedRank("only", 32, True, 1, 4096, 8)
    assert parts.rank_keywords(plain, "fp8-delayed")["grad_dtype"] == torch.float32
    assert parts.rank_keywords(plain, "fp8-delayed")["fp8_primary"] is False
