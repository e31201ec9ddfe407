"""A layer's cached micro-batch against its first, from a result's model-step parts, and what that does
to the model step's speedup (issue 43 item 5).

Why: the pages once said a mixture of experts' cached micro-batch is slower than its first "in every
recipe", and that this is why its model step gains more from FP8. The stored parts said otherwise:
FP8's cached layer is mostly *faster* than its first (its weights are quantized once per optimizer
step, on the first micro-batch), BF16's slower (it adds the weight gradients into the FP32 main
gradients, reading them back); and the same time added to both sides would lower a speedup, not raise
it. So the words are computed here, from the parts, and the pages quote them through roles whose
claims the build checks.

Pure: reads a typed result's model step (:class:`~gemm_bench.results.typed.ModelStepBlock`) and the
:class:`~gemm_bench.report.report.Report`.
"""

from __future__ import annotations

import dataclasses

from gemm_bench.question.precisions import BASELINE, MODE_NAMES, PRECISIONS
from gemm_bench.report.fastest import BF16_POINT, Point, clearly_less, model_step_points, overlaps
from gemm_bench.report.figures import quartiles
from gemm_bench.report.report import Report
from gemm_bench.report.tie_break import total_points
from gemm_bench.results.typed import ModelStepBlock, ModelStepPart

#: The verdicts of a cached layer against its first, by the site's one spread rule.
FASTER, SLOWER, WITHIN = "faster", "slower", "within"
VERDICTS = (FASTER, SLOWER, WITHIN)


@dataclasses.dataclass(frozen=True)
class CachedLayer:
    """One recipe's layer on a step's first micro-batch (weights quantized, gradients written) and on a
    cached one (quantized weights reused, gradients added into the FP32 main gradients), in ms with
    their quartiles."""

    precision: str
    first: Point
    cached: Point

    @property
    def verdict(self) -> str:
        """:data:`FASTER` where the cached layer is below the first beyond both quartile ranges,
        :data:`SLOWER` where above, :data:`WITHIN` where the ranges overlap."""
        if overlaps(self.cached, self.first):
            return WITHIN
        return FASTER if clearly_less(self.cached, self.first) else SLOWER

    @property
    def saved_ms(self) -> float:
        """First minus cached, in ms (negative: the cached layer is slower)."""
        return self.first.value - self.cached.value

    @property
    def words(self) -> str:
        """"FP8 Current's layer: 26.36 ms on the first micro-batch, 24.15 ms on a cached one (faster)"."""
        return (f"{PRECISIONS[self.precision].display}'s layer: {self.first.value:.2f} ms on the first micro-batch, "
                f"{self.cached.value:.2f} ms on a cached one ({_verdict_words(self.verdict)})")


def _verdict_words(verdict: str) -> str:
    return "within the quartile ranges" if verdict == WITHIN else f"{verdict}, beyond the quartile ranges"


def _point(part: ModelStepPart) -> Point:
    assert part.ms is not None, "a measured part has a time"
    q = quartiles(part.stats.as_mapping()) if part.stats is not None else None
    return Point(part.ms, *(q if q is not None else (None, None)))


def cached_layers(step: ModelStepBlock | None) -> dict[str, CachedLayer]:
    """Each recipe's first and cached layer of a result's model step (both measured), in the site's order
    ({} without a model step)."""
    if step is None:
        return {}
    out = {}
    for precision in PRECISIONS:
        first, cached = step.part("layer-first", precision), step.part("layer-cached", precision)
        if first is not None and cached is not None:
            out[precision] = CachedLayer(precision, _point(first), _point(cached))
    return out


def moe_cached_layers(report: Report) -> dict[str, CachedLayer]:
    """:func:`cached_layers` of a mixture of experts' result ({} for a dense model or one without them)."""
    config = report.config
    if config is None or not config.is_moe:
        return {}
    return cached_layers(report.result.model_step)


def quantize_once_note(report: Report, precision: str, *, gemm_mode: str = "autocast") -> str:
    """Why ``precision``'s model step gains more than its own GEMMs, where it does beyond both spreads
    ("" elsewhere, and where its GEMMs are not faster than BF16's unless the step itself gains beyond 1.0: a
    slower recipe's step is pulled towards 1.0 by the work both recipes share): weights quantized once per
    optimizer step, computed from the parts. The model step per micro-batch holds L x (first + (G - 1) x
    cached) / G of layer time, so against quantizing on every micro-batch (one layer's step, the GEMM rows,
    G = 1) a cached micro-batch saves L x (G - 1) / G x (first - cached), and BF16's, whose cached layer is
    slower, pays that much more."""
    summary = report.model_step()
    layers = cached_layers(report.result.model_step)
    if summary is None or precision == BASELINE or precision not in layers or BASELINE not in layers:
        return ""
    model = model_step_points(summary, [precision]).get(precision)
    gemms = total_points(report, gemm_mode, [precision]).get(precision)
    if model is None or gemms is None or not clearly_less(gemms, model):
        return ""
    if gemms.value <= 1.0 and not clearly_less(BF16_POINT, model):
        # below 1.0 the step's other work pulls a slower recipe's speedup up towards 1: no puzzle, unless the
        # step gains beyond 1.0 itself (gpt-oss-120b at EP 8 on the H200: 1.09x over GEMMs at 0.99x, session 19)
        return ""
    g, count = summary.microbatches, summary.config.measured_layers
    mine, base = layers[precision], layers[BASELINE]
    if g < 2 or (mine.saved_ms <= 0 and base.saved_ms >= 0):
        return ""  # no micro-batch is cached, or caching helps neither side: this is not what does it
    share = count * (g - 1) / g
    at_one = model_step_points(summary, [precision], 1).get(precision)
    name = PRECISIONS[precision].display
    text = (f"{name}'s model step at G = {g} gains {model.value:.2f}×, more than its "
            f"{MODE_NAMES[gemm_mode].lower()} GEMMs' "
            f"{gemms.value:.2f}× beyond both spreads: the model step quantizes the weights once per optimizer "
            f"step, on the first of its G = {g} micro-batches, and the {g - 1} others reuse them. {mine.words}; "
            f"{base.words}. Over {count} layers, with {g - 1} of {g} micro-batches cached, that is "
            f"{_ms(share * mine.saved_ms)} per micro-batch for {name} and {_ms(share * base.saved_ms)} for BF16 "
            f"(L × (G − 1) / G × (first − cached))")
    if at_one is not None:
        text += f"; at G = 1, where every micro-batch quantizes, its model step gains {at_one.value:.2f}×"
    return text + "."


def _ms(delta: float) -> str:
    """"108.1 ms less", "135.1 ms more" (a saving is less time)."""
    return f"{abs(delta):.1f} ms {'less' if delta >= 0 else 'more'}"
