"""The plan's step on CPU: which layers the three competitors get, and the cells they become.

Transformer Engine is stubbed (module-level names only): the test checks the glue of
:func:`gemm_bench.measure.backends.layer_step.measure_plan_step` (one group of all-BF16, all-FP8
and the plan, each layer built from parts with its own BF16 projections; cells named by step,
with their breakdowns, and a valid plan block). What the GPU runs is ``tools/gpu_breakdown.sh``.
"""

from __future__ import annotations

import sys
import types
from collections.abc import Iterator
from typing import Any

import pytest

from gemm_bench.measure.timing import Samples
from gemm_bench.question.question import build_question
from gemm_bench.report.precision_plan import PrecisionPlan, ProjectionVerdict
from gemm_bench.results import kernel_kinds as kk
from gemm_bench.results.step_schema import validate_plan_block


@pytest.fixture
def layer_step(monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    te = types.ModuleType("transformer_engine")
    te.__version__ = "stub"  # type: ignore[attr-defined]
    pytorch = types.ModuleType("transformer_engine.pytorch")
    common = types.ModuleType("transformer_engine.common")
    recipe = types.ModuleType("transformer_engine.common.recipe")
    extensions = types.ModuleType("transformer_engine.pytorch.cpp_extensions")
    extensions.general_gemm = extensions.general_grouped_gemm = None  # type: ignore[attr-defined]
    te.pytorch, te.common, common.recipe = pytorch, common, recipe  # type: ignore[attr-defined]
    for name, module in {"transformer_engine": te, "transformer_engine.pytorch": pytorch,
                         "transformer_engine.common": common, "transformer_engine.common.recipe": recipe,
                         "transformer_engine.pytorch.cpp_extensions": extensions,
                         "transformer_engine_torch": types.ModuleType("transformer_engine_torch")}.items():
        monkeypatch.setitem(sys.modules, name, module)
    for name in ("gemm_bench.measure.backends.te", "gemm_bench.measure.backends.layer_step"):
        monkeypatch.delitem(sys.modules, name, raising=False)
    import gemm_bench.measure.backends as package

    for attribute in ("te", "layer_step"):  # the package's attributes, which the stubbed import sets
        monkeypatch.setattr(package, attribute, getattr(package, attribute, None), raising=False)
    import gemm_bench.measure.backends.layer_step as module

    yield module
    for name in ("gemm_bench.measure.backends.te", "gemm_bench.measure.backends.layer_step"):
        sys.modules.pop(name, None)


def test_the_plan_step_times_three_layers_of_one_kind_in_one_group(layer_step: Any,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    built: dict[str, tuple[str, frozenset[str] | None]] = {}

    def competitor(config: Any, precision: str, routing: str = "balanced", shared: Any = None,
                   keep_bf16: Any = None) -> Any:
        return precision, keep_bf16

    monkeypatch.setattr(layer_step, "layer_step_competitor", competitor)
    kernels = [[("nvjet_hsh_1", 0, 2_000_000), ("cast_transpose_kernel", 2_000_000, 500_000)]] * 3
    groups = []

    def time_group(builders: dict[str, Any], graphs: bool, routing: str) -> Any:
        groups.append((sorted(builders), graphs))
        for name, build in builders.items():
            built[name] = build()
        ms = {"all-bf16": 3.0, "all-fp8": 3.5, "plan": 2.8}
        return types.SimpleNamespace(
            samples={n: {"step": Samples([v] * 10)} for n, v in ms.items()},
            eager={n: {"step": Samples([v + 1] * 10)} for n, v in ms.items()},
            failures={}, kernel_ms={}, kernel_ratio={}, kernels={n: {"step": kernels} for n in ms})

    question = build_question(model="qwen2.5-7b", fields={"seq_length": 2048})
    steps = layer_step.measure_plan_step(question, "fp8-current", ("attn_out", "mlp_down"), time_group)
    assert groups == [(["all-bf16", "all-fp8", "plan"], True)]
    assert built == {"all-bf16": ("bf16", frozenset()), "all-fp8": ("fp8-current", frozenset()),
                     "plan": ("fp8-current", frozenset({"attn_out", "mlp_down"}))}
    assert sorted((c["mode"], c["step"]) for c in steps) == sorted(
        (m, s) for m in ("layer", "layer-graphed") for s in ("all-bf16", "all-fp8", "plan"))
    graphed = {c["step"]: c for c in steps if c["mode"] == "layer-graphed"}
    assert graphed["plan"]["ms"] == 2.8 and graphed["plan"]["breakdown"]["parts_ms"][kk.IDLE] == pytest.approx(0.3)
    plan = PrecisionPlan("fp8-current", (ProjectionVerdict("qkv", 1.2, 1.1, 1.3, True),
                                         ProjectionVerdict("attn_out", 0.9, 0.85, 0.95, False),
                                         ProjectionVerdict("mlp_up", 1.3, 1.2, 1.4, True),
                                         ProjectionVerdict("mlp_down", 0.95, 0.9, 1.0, False)))
    validate_plan_block({**plan.config(), "steps": steps})
