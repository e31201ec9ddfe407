"""Accuracy of each precision: the SQNR of its GEMM outputs against an FP32 reference.

Why: a reader choosing a recipe trades speed for accuracy, and "what does block scaling cost in
accuracy?" deserves a measured answer beside the speedup. The measure is torchao's
``compute_error``: ``SQNR = 20 * log10(||ref|| / ||out - ref||)`` in dB, higher is better, about 6
dB per bit of effective precision.

Method (recorded in every result through :func:`accuracy_method`):

* The same BF16 inputs feed the precision under test and the reference; the reference is the
  exact product of those BF16 values in FP32, so the SQNR measures the precision's quantization
  and accumulation, never a difference of inputs.
* Autocast: one bias-free ``te.Linear`` under ``te.autocast(recipe=...)``, forward and backward;
  Fprop is ``Y``, Dgrad ``dX`` and Wgrad ``dW``, each against its FP32 product. Delayed scaling is
  read on its third step, after its amax history has seen the same tensors twice (its first step
  runs with the initial scale of 1, which no training run keeps).
* Pre-quantized: each pass's GEMM through TE's ``general_gemm`` on operands quantized with the same
  quantizers the timing uses (:mod:`gemm_bench.measure.backends.te`), built from the same X, W and dY.
* Two input distributions with fixed seeds (:data:`DISTRIBUTIONS`): Gaussian, and
  activation-like (the input X has a few outlier channels, as LLM activations do).

The pure parts (the SQNR over plain sequences, the result cells) import without torch; the GPU
functions import torch and TE when called. What a valid cell is, and the distributions a cell
names, belong to the schema (:mod:`gemm_bench.results.accuracy_schema`).
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import math
import zlib
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from gemm_bench.question.precisions import PRECISIONS
from gemm_bench.question.shapes import PASSES, GemmShape
from gemm_bench.results.accuracy_schema import ACCURACY_MODES, DISTRIBUTIONS, AccuracyError

if TYPE_CHECKING:  # pragma: no cover
    from gemm_bench.question.plan import Support
    from gemm_bench.question.question import Question

BASE_SEED = 20240611


# ----------------------------------------------------------------------------- SQNR
def sqnr_db(ref: Sequence[float], out: Sequence[float]) -> float:
    """``20 * log10(||ref|| / ||out - ref||)``; ``inf`` when ``out`` equals ``ref`` exactly."""
    if len(ref) != len(out):
        raise AccuracyError("sqnr_db", f"reference has {len(ref)} values, output {len(out)}")
    if not ref:
        raise AccuracyError("sqnr_db", "needs at least one value")
    signal = math.sqrt(math.fsum(r * r for r in ref))
    noise = math.sqrt(math.fsum((o - r) * (o - r) for r, o in zip(ref, out, strict=True)))
    if not (math.isfinite(signal) and math.isfinite(noise)):
        raise AccuracyError("sqnr_db", "reference or output holds inf or NaN")
    if signal == 0:
        raise AccuracyError("sqnr_db", "the reference is all zeros: SQNR is undefined")
    if noise == 0:
        return math.inf
    return 20.0 * math.log10(signal / noise)


def sqnr_db_tensor(ref: Any, out: Any) -> float:
    """The same SQNR for torch tensors, computed in float64 on their device."""
    if tuple(ref.shape) != tuple(out.shape):
        raise AccuracyError("sqnr_db", f"reference shape {tuple(ref.shape)} != output {tuple(out.shape)}")
    r = ref.double()
    signal = float(r.norm())
    noise = float((out.double() - r).norm())
    if not (math.isfinite(signal) and math.isfinite(noise)):
        raise AccuracyError("sqnr_db", "reference or output holds inf or NaN")
    if signal == 0:
        raise AccuracyError("sqnr_db", "the reference is all zeros: SQNR is undefined")
    return math.inf if noise == 0 else 20.0 * math.log10(signal / noise)


def seed_for(distribution: str, op: str, tensor: str) -> int:
    """A seed fixed by what is drawn (not by run order or Python's salted ``hash``)."""
    return (BASE_SEED + zlib.crc32(f"{distribution}/{op}/{tensor}".encode())) % (2**31)


def accuracy_method() -> dict[str, Any]:
    """What a result records about how its SQNRs were taken."""
    return {
        "metric": "SQNR in dB: 20*log10(||ref|| / ||out - ref||) (torchao compute_error)",
        "reference": "FP32 product of the same BF16 inputs (torch.matmul in float32, TF32 off)",
        "autocast": "bias-free te.Linear under te.autocast, forward + backward; Fprop=Y, Dgrad=dX, "
        "Wgrad=dW; delayed scaling read on its third step",
        "prequant": "general_gemm on operands quantized with the timing's TE quantizers",
        "grouped": "MoE expert GEMMs are measured on one expert's shape with a dense GEMM",
        "distributions": {d.id: d.to_dict() for d in DISTRIBUTIONS.values()},
        "seed": f"per tensor: ({BASE_SEED} + crc32('distribution/op/tensor')) mod 2^31",
    }


# ----------------------------------------------------------------------------- cells
def accuracy_cell(mode: str, precision: str, gemm: GemmShape, distribution: str, status: str, *,
                  sqnr: float | None = None, reason: str = "", run_id: str | None = None,
                  measured_at: str | None = None) -> dict[str, Any]:
    """One accuracy cell in the proposed result form (``doc["accuracy"]`` is a list of these)."""
    cell: dict[str, Any] = {"mode": mode, "precision": precision, "op": gemm.op, "pass": gemm.pass_,
                            "distribution": distribution, "status": status}
    if status == "measured":
        if sqnr is None or not math.isfinite(sqnr):
            raise AccuracyError("accuracy_cell", f"a measured cell needs a finite SQNR, got {sqnr!r}")
        cell["sqnr_db"] = round(sqnr, 4)
        cell["measured_at"] = measured_at or _now()
    else:
        cell["reason"] = reason
    if run_id is not None:
        cell["run_id"] = run_id
    return cell


def _now() -> str:
    return dt.datetime.now(dt.timezone.utc).replace(microsecond=0).isoformat()


# ----------------------------------------------------------------------------- GPU
#: What TE and torch raise for a precision that cannot run here (shape constraints, missing
#: kernels, out of memory): recorded as a failed cell with the message, the others go on.
GPU_FAILURES: tuple[type[BaseException], ...] = (RuntimeError, ValueError, AssertionError, NotImplementedError)


def _operands(fprop: GemmShape, distribution: str) -> tuple[Any, Any, Any]:
    """BF16 X (m x k), W (n x k) and dY (m x n) of the Linear whose Fprop is ``fprop``."""
    import torch

    dist = DISTRIBUTIONS[distribution]
    m, k, n = fprop.m, fprop.k, fprop.n

    def draw(tensor: str, *shape: int) -> torch.Tensor:
        gen = torch.Generator(device="cuda").manual_seed(seed_for(distribution, fprop.op, tensor))
        return torch.randn(*shape, device="cuda", dtype=torch.float32, generator=gen)

    x = draw("X", m, k)
    count = dist.outlier_channels(k)
    if count:
        gen = torch.Generator(device="cuda").manual_seed(seed_for(distribution, fprop.op, "outliers"))
        channels = torch.randperm(k, device="cuda", generator=gen)[:count]
        x[:, channels] *= dist.outlier_scale
    return x.bfloat16(), draw("W", n, k).bfloat16(), draw("dY", m, n).bfloat16()


def _references(x: Any, w: Any, dy: Any, passes: Sequence[str] = PASSES) -> dict[str, Any]:
    """FP32 products of the BF16 inputs for ``passes``, with TF32 off so FP32 means FP32.

    Each product is computed on its own from the FP32 copies of the inputs, so leaving out a pass
    changes none of the others (a sweep question, Fprop only, skips the Dgrad and Wgrad products).
    """
    import torch

    allow = torch.backends.cuda.matmul.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = False
    try:
        xf, wf = x.float(), w.float()
        out: dict[str, Any] = {}
        if "fprop" in passes:
            out["fprop"] = xf @ wf.t()
        if "dgrad" in passes or "wgrad" in passes:
            dyf = dy.float()
            if "dgrad" in passes:
                out["dgrad"] = dyf @ wf
            if "wgrad" in passes:
                out["wgrad"] = dyf.t() @ xf
        return out
    finally:
        torch.backends.cuda.matmul.allow_tf32 = allow


@dataclasses.dataclass(frozen=True)
class GemmInputs:
    """One op's BF16 X, W and dY for one distribution, and the FP32 reference of each pass asked.

    Built once per (op, distribution) by :func:`gemm_inputs` and read, never written, by every
    precision and mode of that op: the operands come from fixed seeds and the references are FP32
    products with TF32 off, so a copy rebuilt for each precision (as this code once did, about 14
    times per op) held the very same values; building them once changes the time, not a number.
    """

    x: Any
    w: Any
    dy: Any
    #: Pass -> FP32 reference, only the passes whose cells the question has (in PASSES order).
    refs: dict[str, Any]

    @property
    def passes(self) -> tuple[str, ...]:
        return tuple(self.refs)


def gemm_inputs(fprop: GemmShape, distribution: str, passes: Sequence[str] = PASSES) -> GemmInputs:
    """The operands of the Linear whose Fprop is ``fprop`` and the references of ``passes``."""
    x, w, dy = _operands(fprop, distribution)
    return GemmInputs(x, w, dy, _references(x, w, dy, passes))


def autocast_sqnr(precision: str, fprop: GemmShape, inputs: GemmInputs) -> dict[str, float]:
    """SQNR of each pass in ``inputs`` of one ``te.Linear`` step under the precision's recipe.

    The step is always forward and backward, whichever passes are asked, so that every recipe's
    state (delayed scaling's amax history above all) evolves exactly as in a full step.
    """
    import torch
    import transformer_engine.pytorch as te

    from gemm_bench.measure.backends.te import make_recipe

    layer = te.Linear(fprop.k, fprop.n, bias=False, params_dtype=torch.bfloat16, device="cuda")
    with torch.no_grad():
        layer.weight.copy_(inputs.w)
    recipe = make_recipe(precision)
    steps = 3 if precision == "fp8-delayed" else 1
    for _ in range(steps):
        xin = inputs.x.detach().clone().requires_grad_(True)
        layer.weight.grad = None
        with te.autocast(enabled=recipe is not None, recipe=recipe):
            y = layer(xin)
        y.backward(inputs.dy)
    torch.cuda.synchronize()
    assert xin.grad is not None and layer.weight.grad is not None
    outputs = {"fprop": y.detach(), "dgrad": xin.grad, "wgrad": layer.weight.grad}
    return {p: sqnr_db_tensor(inputs.refs[p], outputs[p]) for p in inputs.passes}


def prequant_sqnr(precision: str, fprop: GemmShape, inputs: GemmInputs) -> dict[str, float]:
    """SQNR of each pass's GEMM alone (the passes in ``inputs``), on operands quantized as the
    timed pre-quantized GEMM's. Each pass is its own GEMM on its own quantized operands, so a pass
    left out changes nothing of the others."""
    import torch
    from transformer_engine.pytorch.cpp_extensions import general_gemm

    from gemm_bench.measure.backends.te import _quantizers, make_recipe

    x, w, dy = inputs.x, inputs.w, inputs.dy
    # TE's TN GEMM computes B @ A^T: (A, B) per pass, as in backends.te's pre-quantized shapes.
    operands = {
        "fprop": lambda: (w, x),
        "dgrad": lambda: (w.t().contiguous(), dy),
        "wgrad": lambda: (x.t().contiguous(), dy.t().contiguous()),
    }
    recipe = make_recipe(precision)
    out: dict[str, float] = {}
    for pass_ in inputs.passes:
        a, b = operands[pass_]()
        if precision == "bf16":
            a_q, b_q = a, b
        else:
            qa, qb = _quantizers(precision, pass_)
            a_q, b_q = qa(a), qb(b)
        split = bool(recipe is not None and getattr(recipe, f"fp8_gemm_{pass_}").use_split_accumulator)
        result = general_gemm(a_q, b_q, out_dtype=torch.bfloat16, use_split_accumulator=split)
        product = result[0] if isinstance(result, (tuple, list)) else result
        torch.cuda.synchronize()
        out[pass_] = sqnr_db_tensor(inputs.refs[pass_], product)
    return out


def measure_accuracy(question: Question, precisions: Sequence[str], modes: Sequence[str], *,
                     support: Mapping[str, Support] | None = None,
                     distributions: Sequence[str] = tuple(DISTRIBUTIONS),
                     run_id: str | None = None) -> list[dict[str, Any]]:
    """Accuracy cells for every GEMM of ``question``: per mode, precision, pass and distribution.

    Unsupported precisions (TE's reason) and absent modes (the registry's reason) become
    ``unsupported`` cells; a precision that raises becomes ``failed`` with the message.

    Per op, each distribution's operands and references are built once (:func:`gemm_inputs`)
    and every precision and mode measures on them, holding the references of the question's
    passes only; the cells come out in the order they always had (mode, precision, distribution,
    pass).
    """
    for d in distributions:  # before any GPU work: a typo fails at once, with the name
        if d not in DISTRIBUTIONS:
            raise AccuracyError("distributions", f"{d!r} is not one of {', '.join(DISTRIBUTIONS)}")
    import torch

    if support is None:
        from gemm_bench.measure.backends.te import support as te_support

        support = te_support()
    fprops = [g for g in question.gemms if g.pass_ == "fprop"]
    cells: list[dict[str, Any]] = []
    for fprop in fprops:
        passes = [g for g in question.gemms if g.op == fprop.op]
        asked = tuple(p for p in PASSES if any(g.pass_ == p for g in passes))
        one = dataclasses.replace(fprop, groups=1)
        # (mode, precision) -> why it is not measured here ("" when it is), in the cells' order.
        plan = {(mode, precision): _unmeasured_reason(mode, precision, support)
                for mode in modes if mode in ACCURACY_MODES  # the layer modes have no per-GEMM accuracy
                for precision in precisions}
        runs = [key for key, reason in plan.items() if not reason]
        # (mode, precision, distribution) -> SQNR per pass, or the failure's message.
        outcome: dict[tuple[str, str, str], dict[str, float] | str] = {}
        for dist in distributions if runs else ():
            try:
                inputs = gemm_inputs(one, dist, asked)
            except GPU_FAILURES as exc:  # as a precision's own failure would have been, for each one
                outcome.update({(mode, precision, dist): _failure(exc) for mode, precision in runs})
                torch.cuda.empty_cache()
                continue
            for mode, precision in runs:
                measure = autocast_sqnr if mode == "autocast" else prequant_sqnr
                try:
                    outcome[(mode, precision, dist)] = measure(precision, one, inputs)
                except GPU_FAILURES as exc:
                    outcome[(mode, precision, dist)] = _failure(exc)
                    torch.cuda.empty_cache()
            del inputs  # this distribution's tensors, before the next one's are drawn
        for (mode, precision), reason in plan.items():
            for dist in distributions:
                if reason:
                    cells += [accuracy_cell(mode, precision, g, dist, "unsupported", reason=reason,
                                            run_id=run_id) for g in passes]
                    continue
                values = outcome[(mode, precision, dist)]
                if isinstance(values, str):
                    cells += [accuracy_cell(mode, precision, g, dist, "failed", reason=values,
                                            run_id=run_id) for g in passes]
                    continue
                for g in passes:
                    value = values[g.pass_]
                    if math.isfinite(value):
                        cells.append(accuracy_cell(mode, precision, g, dist, "measured", sqnr=value,
                                                   run_id=run_id))
                    else:
                        cells.append(accuracy_cell(
                            mode, precision, g, dist, "failed", run_id=run_id,
                            reason="output equals the FP32 reference exactly: SQNR is unbounded"))
    return cells


def _unmeasured_reason(mode: str, precision: str, support: Mapping[str, Support]) -> str:
    """Why ``precision`` has no accuracy in ``mode`` on this GPU (TE's reason, or the registry's
    for an absent mode); "" when it is measured."""
    s = support.get(precision)
    if s is not None and not s.available:
        return s.reason or f"{PRECISIONS[precision].display} is not supported on this GPU"
    if not PRECISIONS[precision].has_mode(mode):
        return PRECISIONS[precision].absent_modes.get(mode, f"no {mode} form")
    return ""


def _failure(exc: BaseException) -> str:
    """A failed cell's reason: the exception's first line."""
    return f"{type(exc).__name__}: {exc}".splitlines()[0][:400]
