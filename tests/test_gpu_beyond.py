"""GPU tests of the quantities beyond the GEMM: orderings that must hold on any supported GPU.

    python3 -m pytest -m gpu -s tests/test_gpu_beyond.py

* accuracy: BF16's SQNR is above every FP8 recipe's, per pass, mode and distribution;
* layer step: each FP8 recipe's step is faster than BF16's on the TE guide's layer (te-guide-5b);
* CUDA graphs: the graphed autocast step is not slower than the eager one at 1024 (hidden and
  tokens), where host overhead matters;
* peers: the example Triton kernels agree with an FP32 reference, every registered peer's
  availability comes with a reason, and available peers run.

They print what they measured, so a run's log is the evidence quoted in the project notes.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

import pytest

from gemm_bench.question.config import ModelConfig, preset
from gemm_bench.question.question import build_question
from gemm_bench.question.shapes import GemmShape
from tests.gpu_skip import gpu_module

torch, te, pytestmark = gpu_module()

from gemm_bench.measure import accuracy, peers  # noqa: E402
from gemm_bench.measure.backends import layer_step  # noqa: E402
from gemm_bench.measure.backends.te import support  # noqa: E402
from gemm_bench.measure.runner import Timed  # noqa: E402
from gemm_bench.measure.timing import Competitor, Interleaver, TimerSettings  # noqa: E402
from gemm_bench.results import accuracy_schema  # noqa: E402

FAST = TimerSettings(repetitions=20, warmup_s=0.5, spinup_s=1.0)
FP8_RECIPES = ("fp8-delayed", "fp8-current", "fp8-block", "mxfp8")


def _supported(ids: tuple[str, ...]) -> list[str]:
    s = support()
    return [p for p in ids if s[p].available]


def _time_group(builders: dict[str, Callable[[], Competitor]], graphs: bool = True, routing: str = "") -> Timed:
    """The runner's discipline without its failure handling: a build failure here fails the test."""
    competitors = {name: build() for name, build in builders.items()}
    result = Interleaver(FAST, cross_check=True).run(competitors, graphs=graphs)
    return Timed(result.samples, result.eager, result.failures, result.cross_check.get("kernel_ms", {}))


# ----------------------------------------------------------------------------- accuracy
@pytest.mark.parametrize("distribution", list(accuracy_schema.DISTRIBUTIONS))
def test_bf16_sqnr_above_every_fp8_recipe(distribution: str) -> None:
    question = build_question(model="llama3-8b", fields={"seq_length": 1024, "num_layers": 1})
    mlp_up = next(g for g in question.gemms if g.op == "mlp_up" and g.pass_ == "fprop")
    sub = dataclasses.replace(question, gemms=tuple(g for g in question.gemms if g.op == "mlp_up"))
    fp8 = _supported(FP8_RECIPES)
    assert fp8, "no FP8 recipe is supported on this GPU"
    cells = accuracy.measure_accuracy(sub, ["bf16", *fp8], ["autocast", "prequant"], distributions=[distribution])
    accuracy_schema.validate_accuracy_cells(cells, {(g.op, g.pass_) for g in sub.gemms})
    measured = {(c["mode"], c["precision"], c["pass"]): c["sqnr_db"] for c in cells if c["status"] == "measured"}
    for c in cells:
        print(f"sqnr {distribution:<8} {c['mode']:<8} {c['precision']:<12} {c['pass']:<5} "
              f"{c.get('sqnr_db', c.get('reason'))}")
    assert not [c for c in cells if c["status"] == "failed"], "a supported precision failed"
    print(f"shape {mlp_up.label}")
    for (mode, precision, pass_), value in measured.items():
        if precision != "bf16":
            assert measured[(mode, "bf16", pass_)] > value, (mode, precision, pass_)


# ----------------------------------------------------------------------------- layer step
def test_fp8_step_faster_than_bf16_on_te_guide_layer() -> None:
    question = build_question(model="te-guide-5b")
    fp8 = _supported(("fp8-delayed", "fp8-current", "fp8-block"))
    cells = layer_step.measure_layer_step(question, ["bf16", *fp8], _time_group, modes=["layer-graphed"])
    ms = {c["precision"]: c["ms"] for c in cells if c["status"] == "measured"}
    print("layer step te-guide-5b:", {p: round(v, 3) for p, v in ms.items()})
    assert set(ms) == {"bf16", *fp8}
    for p in fp8:
        assert ms[p] < ms["bf16"], p


def test_graphed_autocast_not_slower_than_eager_at_1024() -> None:
    config = ModelConfig(hidden_size=1024, ffn_hidden_size=1024, num_attention_heads=8, num_layers=1,
                         micro_batch_size=1, seq_length=1024).resolved()
    question = dataclasses.replace(build_question(model="te-guide-5b"), config=config)
    precision = (_supported(("fp8-current",)) or ["bf16"])[0]
    cells = layer_step.measure_layer_step(question, [precision], _time_group)
    ms = {c["mode"]: c["ms"] for c in cells if c["status"] == "measured"}
    print(f"layer step 1024 {precision}:", ms)
    # 5% allowance for run-to-run noise: graphs remove host work, they cannot add GPU work.
    assert ms["layer-graphed"] <= ms["layer"] * 1.05


def _small(name: str, **fields: object) -> ModelConfig:
    """A preset shrunk to a few seconds of GPU time, keeping its structure (MoE, MLA, TP)."""
    return dataclasses.replace(preset(name), seq_length=1024, **fields).resolved()  # type: ignore[arg-type]


RANK_CONFIGS = {
    "llama3-70b/tp8": _small("llama3-70b", tensor_model_parallel_size=8),
    "mixtral-8x7b": _small("mixtral-8x7b", hidden_size=1024, ffn_hidden_size=2048, moe_ffn_hidden_size=2048,
                           num_attention_heads=8, kv_channels=128),
    "deepseek-v3/ep64": _small("deepseek-v3", expert_model_parallel_size=64, num_attention_heads=16),
    "gpt-oss-120b": _small("gpt-oss-120b", num_experts=32),
}


@pytest.mark.parametrize("name", list(RANK_CONFIGS))
def test_rank_layer_runs_exactly_the_questions_gemms(name: str) -> None:
    """The step's modules have the weights of the rank's GEMMs (layer_gemms), and a step of every
    routing runs forward and backward in BF16 and FP8 with finite gradients."""
    from gemm_bench.measure.step import routings
    from gemm_bench.question.shapes import layer_gemms

    config = RANK_CONFIGS[name]
    layer = layer_step.build_layer(config)
    weights = sorted(tuple(p.shape) for n, p in layer.named_parameters() if p.dim() == 2 and "router" not in n)
    fprops = [g for g in layer_gemms(config) if g.pass_ == "fprop"]
    if config.is_moe or config.is_mla:  # te.TransformerLayer fuses QKV the same way: checked by the step below
        expected = sorted((g.n, g.k) for g in fprops for _ in range(g.groups))
        assert weights == expected, f"{name}: step weights {weights} != GEMMs {expected}"
    timed = layer_step.measure_layer_step(
        dataclasses.replace(build_question(model="llama3-8b"), config=config), ["bf16", "fp8-current"],
        _time_group)
    assert {c["status"] for c in timed} == {"measured"}, [c.get("reason") for c in timed]
    assert {c.get("routing", "balanced") for c in timed} == set(routings(config))
    graphed = {(c["precision"], c.get("routing", "balanced")): c for c in timed if c["mode"] == "layer-graphed"}
    for (precision, routing), cell in graphed.items():
        print(f"{name} {precision} {routing}: {cell['ms']:.3f} ms (kernels {cell.get('kernel_ms', 0):.3f} ms)")
        assert cell["ms"] > 0


# ----------------------------------------------------------------------------- peers
@pytest.mark.parametrize("fp8", [False, True])
def test_triton_example_matches_the_reference(fp8: bool) -> None:
    triton_peer = pytest.importorskip("gemm_bench.measure.backends.triton_peer", reason="Triton is not installed")
    m, k, n = 1000, 1024, 768  # M not a multiple of the tile: masks are exercised
    a = torch.randn(n, k, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
    ref = b.float() @ a.float().t()
    out = torch.empty(m, n, device="cuda", dtype=torch.bfloat16)
    if fp8:
        (a8, sa), (b8, sb) = triton_peer.quantize_tensorwise(a), triton_peer.quantize_tensorwise(b)
        triton_peer.matmul_tn(b8, a8, out, (sa * sb).reshape(1))
    else:
        triton_peer.matmul_tn(b, a, out)
    sqnr = accuracy.sqnr_db_tensor(ref, out)
    print(f"triton {'fp8' if fp8 else 'bf16'} sqnr {sqnr:.1f} dB")
    assert sqnr > (20.0 if fp8 else 40.0)


def test_every_registered_peer_runs_or_says_why() -> None:
    found, problems = peers.discover()
    assert not problems, problems
    available = peers.availability(found)
    gemm = GemmShape("square", "fprop", 2048, 2048, 2048)
    for kind in peers.KINDS:
        timed = _time_group(peers.builders(found, gemm, kind, available))
        for row in peers.rows(found, gemm, kind, available, timed.fields, timed.failures):
            print(f"peer {row['backend']:<50} {row['pass']:<8} {row['status']:<11} "
                  f"{row.get('ms', row.get('reason'))}")
            assert row["status"] in ("measured", "unsupported")
            if row["status"] == "unsupported":
                assert row["reason"]
