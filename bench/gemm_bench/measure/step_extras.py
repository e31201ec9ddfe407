"""After a question's run: the precision plan's measured step and each recipe's step energy (issue 33).

Why here, apart from the runner's groups: both build on the run's own results. The plan is decided
from the run's autocast GEMMs (``gemm_bench.report.precision_plan``, a layer above this one, hands
its decision in as ``planner``), and only a ``mixed`` plan costs a group: all-BF16, all-FP8 and the
plan, built from the same parts and timed as CUDA graphs only (no eager rounds: the plan is shown
for the graphed step), 1-8 s on an H100. One recipe's plan per result (the planner's choice), not
every recipe's: the refresh's budget (issue 34) holds the whole site to five minutes.

Energy: each recipe's graphed step alone under the power sampler for
:data:`gemm_bench.results.energy.ENERGY_WINDOW_S`, not the timed group's power, which is every
recipe's at once and mostly the idle GPU's where flushes and read-back fill the window
(gpt-oss-120b on an H100: busy 32-60%). The runner measures it on the layer-step group's own CUDA
graphs right after that group's timed rounds (``layer_step.energy_after``, hooked in by
``runner.py``: no second build and capture, a warm-up batch and the window a recipe), and this
module only stores what it found (``runner.step_energy``). Where a runner has no such entries but a
sampler, :func:`measure_plan_and_energy` falls back to ``layer_step.measure_step_energy``, which
builds and captures each recipe's step itself (a script's path, ``tools/gpu_breakdown.py``).

:func:`measure_plan_and_energy` is called once, by ``gemm_bench.measure.runner.measure_question``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from gemm_bench.question.question import Question
from gemm_bench.results.energy import energy_document
from gemm_bench.results.step_schema import validate_plan_block

#: Decides the plan to measure from a run's document: its stored form (``recipe``, ``fp8``,
#: ``keep_in_bf16``, ``kind``...) or None (``gemm_bench.report.precision_plan.plan_to_measure``).
Planner = Callable[[dict[str, Any]], "dict[str, Any] | None"]
#: ``measure_plan_step(question, recipe, keep_bf16, time_group, modes=...)`` (the layer-step backend's).
PlanStep = Callable[..., list[dict[str, Any]]]
#: ``measure_step_energy(question, {precision: step ms}, sampler)`` (the layer-step backend's).
StepEnergy = Callable[[Question, Mapping[str, float], Any], list[dict[str, Any]]]

PLAN_GROUP_LABEL = "precision plan step"


def graphed_steps(doc: Mapping[str, Any]) -> dict[str, float]:
    """Each precision's measured CUDA-graphed layer step (balanced routing) of a run, in ms."""
    return {c["precision"]: float(c["ms"]) for c in doc.get("layer", [])
            if c.get("mode") == "layer-graphed" and c.get("status") == "measured"
            and c.get("routing", "balanced") == "balanced"}


def measure_plan_and_energy(runner: Any, question: Question, doc: dict[str, Any], *, planner: Planner | None,
                            plan_step: PlanStep | None = None, step_energy: StepEnergy | None = None) -> None:
    """Add ``doc["plan"]`` (with ``planner``) and ``doc["energy"]`` (with the runner's sampler) to a run's
    document whose graphed layer step was measured; nothing for a question without one."""
    steps = graphed_steps(doc)
    if question.config is None or not steps:
        return
    # Energy first: the planner picks the answer's recipe, whose tie-break weighs the step energy
    # (accuracy, then the other rows, then energy). Planned before it was stored, a tie that energy
    # breaks went the other way: session 16's H200 refresh planned FP8 Delayed for Gemma 2 27B, whose
    # answer, read with the energy, trains in FP8 Current.
    measured = getattr(runner, "step_energy", None)
    if measured:  # on the layer-step group's own graphs, right after its timed rounds (issue 34)
        doc["energy"] = energy_document(measured)
    elif runner.sampler is not None:
        if step_energy is None:
            from gemm_bench.measure.backends.layer_step import measure_step_energy

            step_energy = measure_step_energy
        doc["energy"] = energy_document(step_energy(question, steps, runner.sampler))
    if planner is not None:
        config = planner(doc)
        if config is not None:
            doc["plan"] = plan_block(runner, question, config, doc["run_id"], plan_step)


def plan_block(runner: Any, question: Question, config: Mapping[str, Any], run_id: str,
               plan_step: PlanStep | None = None) -> dict[str, Any]:
    """``doc["plan"]``: the plan, and its measured steps when it is mixed (an all-FP8 or all-BF16 plan
    is the recipe's own step or BF16's, already measured: it says so and measures nothing)."""
    block: dict[str, Any] = {**config, "steps": []}
    if config.get("kind") == "mixed":
        if plan_step is None:
            from gemm_bench.measure.backends.layer_step import measure_plan_step

            plan_step = measure_plan_step
        cells = plan_step(question, config["recipe"], list(config["keep_in_bf16"]), graph_only_group(runner),
                          modes=["layer-graphed"])
        block["steps"] = [{**c, "run_id": run_id} for c in cells]
    return validate_plan_block(block)


def graph_only_group(runner: Any) -> Callable[[dict[str, Callable[[], Any]], bool, str], Any]:
    """The runner's group timer for the plan's step: graph replays with their kernels, no eager rounds."""
    def group(builders: dict[str, Callable[[], Any]], graphs: bool, routing: str) -> Any:
        with runner.graph_only():
            return runner._time_group(builders, label=PLAN_GROUP_LABEL, mode="layer-graphed", graphs=True,
                                      kernels=True)

    return group


