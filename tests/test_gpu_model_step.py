"""GPU test of the model's step (issue 32): the composition of measured parts holds against a real
multi-layer model run, within 3%, for two dense models and two with experts (Mixtral 8x7B; DeepSeek-V3's
EP 64 rank, multi-latent attention with routed and shared experts), at G = 1 and G > 1.

    python3 -m pytest -m gpu -s tests/test_gpu_model_step.py                  # every model
    python3 -m pytest -m gpu -s tests/test_gpu_model_step.py -k "mixtral or deepseek"

The real model is embedding, N layers (``te.TransformerLayer``, or the layer step's ``RankLayer`` of TE
modules for a mixture of experts or multi-latent attention, balanced routing) with fused FP32
weight-gradient accumulation, final norm, BF16 output layer, FP32 cross-entropy and fused AdamW on
FP32 master weights, over G micro-batches with weights quantized on the first
(``is_first_microbatch``). The composition is held to the real run's GPU time (the union of its
profiled kernels per step: ``real_gpu_ms``); the eager event time is printed beside it. It prints what
it measured: the run's log is the evidence quoted in the project notes.
"""

from __future__ import annotations

import json
import os

import pytest

from gemm_bench.question.question import build_question
from tests.gpu_skip import gpu_module

torch, _, pytestmark = gpu_module()

from gemm_bench.measure.backends.model_parts import measure_model  # noqa: E402
from gemm_bench.measure.backends.te import support  # noqa: E402
from gemm_bench.measure.timing import TimerSettings  # noqa: E402

FAST = TimerSettings(warmup_s=0.2, spinup_s=1.0, repetitions=20, min_repetitions=8, max_group_s=1.5,
                     eager_repetitions=10, target_ci=0.01)
#: The composition's bound against the real run (the issue's).
TOLERANCE = 0.03
#: Layers of each real model: two fit an 80 GB GPU for every model here (tools/gpu_model_step.py's
#: PROOF_LAYERS says why a Mixtral 8x7B or DeepSeek-V3 rank fits no more).
MODELS = ["llama3-8b", "qwen2.5-7b", "mixtral-8x7b", "deepseek-v3/ep64"]


@pytest.fixture(autouse=True, scope="module")
def _frozen_heap() -> None:
    """Each part's clean-up collects garbage; with the imports frozen that takes milliseconds."""
    import gc

    gc.collect()
    gc.freeze()


@pytest.mark.parametrize("model", MODELS)
def test_composed_step_matches_a_real_multi_layer_run(model: str) -> None:
    config = build_question(model=model).config
    assert config is not None
    precisions = [p for p in ("bf16", "fp8-current") if support()[p].available]
    # GEMM_BENCH_PROOF_CLOCKS=1: sample the SM clock and power of every parts group and real run (printed)
    sampler = None
    if os.environ.get("GEMM_BENCH_PROOF_CLOCKS") == "1":
        from gemm_bench.measure.telemetry import ClockSampler

        sampler = ClockSampler()
    try:
        result = measure_model(config, precisions, FAST, proof_layers=2, microbatches=(1, 4), real_steps=4,
                               sampler=sampler)
    finally:
        if sampler is not None:
            sampler.close()
    if "clocks" in result:
        print(model, "parts clocks", json.dumps(result["clocks"]))
        print(model, "real clocks", json.dumps({k: v.get("real_clock") for k, v in result["proof"].items()
                                                 if isinstance(v, dict)}))
    assert "unsupported" not in result and "error" not in result, result
    proof = result["proof"]
    failed = {k: v for k, v in proof.items() if isinstance(v, str)}
    assert not failed, failed
    print(model, json.dumps({k: {f: v[f] for f in ("real_ms", "real_gpu_ms", "host_wait_ms", "composed_ms",
                                                   "busy_ratio", "parts_idle_ms", "time_ratio", "event_ratio",
                                                   "memory_ratio",
                                                   "real_parts_ms", "composed_parts_ms")}
                             for k, v in proof.items() if isinstance(v, dict)}, indent=1))
    # busy to busy: the composition's kernel time against the real run's (measure_model says why)
    off = {k: v["busy_ratio"] for k, v in proof.items() if isinstance(v, dict)
           and (v["busy_ratio"] is None or abs(v["busy_ratio"] - 1) > TOLERANCE)}
    assert not off, off
    # Quantizing once per step is what G > 1 buys: a dense layer's cached micro-batch is not slower than
    # its first under a low-precision recipe. Not asserted for BF16 (nothing to cache: equal but for
    # noise) nor for a mixture of experts: on the H100 its cached micro-batch ran 3-50% slower than its
    # first in BF16 and, for gpt-oss-120b, under FP8 too. Why (session 13, from the parts' stored
    # breakdowns and TE's source): TE's backward accumulates into the FP32 main gradients only when
    # not is_first_microbatch (accumulate_wgrad_into_param_main_grad), so a cached call's Wgrad GEMMs
    # read the main gradients back; the extra time is all GEMM time, with the same kernels (gpt-oss BF16
    # 11.2 -> 18.8 ms of GEMMs, 848 kernels each), and a mixture of experts' weights are large beside
    # the tokens that reach them. Measured (tools/gpu_cached_first.py, session 13): with the fused
    # accumulation off, BF16 cached / first is 1.00-1.01 in either order; on, 1.10 (Mixtral 8x7B) and
    # 1.25-1.27 (gpt-oss-120b). The real model's run agrees with the composition, so the composed step
    # carries it; printed here for the notes.
    for p in precisions:
        parts = result["parts_ms"][p]
        print(model, p, "layer cached / first", round(parts["layer_cached"] / parts["layer_first"], 3))
        if p != "bf16" and not (config.is_moe or config.is_mla):
            assert parts["layer_cached"] <= parts["layer_first"] * 1.03, (p, parts)
    # The built layer's parameters are the pure count's (local experts by EP, shared experts, MLA).
    from gemm_bench.question.model_step import layer_parameters

    assert result["layer_params"] == layer_parameters(config)
