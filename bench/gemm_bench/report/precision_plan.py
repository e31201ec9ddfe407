"""A precision plan: which projections to run in FP8 and which to keep in BF16, from measured GEMMs.

Why: a reader who learns that some GEMMs lose in FP8 wants to know what a mixed plan gains.
Transformer Engine runs a module in or out of the recipe (``te.autocast(enabled=False)`` around
it), never one of its GEMMs alone: a ``te.Linear``'s Fprop, Dgrad and Wgrad share its precision. So
the plan decides per projection (``qkv``, ``attn_out``, ``mlp_up``, ``mlp_down`` and the MoE / MLA
equivalents of :data:`gemm_bench.question.shapes.OPS`), on the *sum* of its three autocast GEMMs:

* the sum is what the step pays for that module in either precision, so a projection whose Fprop
  loses (0.8x) and whose Wgrad wins (1.7x) is judged by what the three cost together, not by a vote;
* its spread is :func:`gemm_bench.report.figures.ratio_spread` over the three cells' quartiles, as
  the whole model's total is (a sum of quartiles: it widens the interval, never narrows it);
* FP8 is kept only when **clearly** faster: :func:`clearly_faster`, the site's significance rule
  (``gemm_benchmark.values.decide_fastest`` calls a precision faster than BF16 only when its spread
  does not reach BF16's 1.0). Within the spread, BF16 stays: it is the simpler, more accurate choice.

Autocast cells are the right input: each includes the quantization its GEMM's inputs need, as
the step's modules pay it. Pure: no torch.

A stored plan is read as the typed :class:`gemm_bench.results.typed.PlanBlock` (``report.result.plan``),
never as the JSON block: a step the door refused (faster than the GPU's peak, over the cross-check's
bound) is a failed step there, so no sentence or role quotes it (``tests/test_typed_result.py``).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from typing import Any

from gemm_bench.question.precisions import BASELINE, PRECISIONS
from gemm_bench.question.shapes import OP_NAMES, OPS, PASSES
from gemm_bench.question.vocabulary import LAYER_STEP, model_step_at
from gemm_bench.report.fastest import Fastest, Point, model_step_points, step_points
from gemm_bench.report.figures import quartiles, ratio_spread
from gemm_bench.report.report import Report
from gemm_bench.report.tie_break import MODEL, STEP, pick
from gemm_bench.results.significance import clearly_faster
from gemm_bench.results.step_schema import PLAN_STEPS
from gemm_bench.results.typed import PlanBlock, PlanProjection, PlanStep

MODE = "autocast"
#: A stored plan's measured steps, by name (all-BF16, all-FP8 and the plan itself, one group).
ALL_BF16, ALL_FP8, PLAN = PLAN_STEPS

PLAN_RULE = ("per projection (a te.Linear's Fprop, Dgrad and Wgrad run in one precision): the FP8 recipe is kept "
             "when BF16's summed autocast time of the three GEMMs over the recipe's is clearly above 1 — the "
             "lower end of its spread (sum of BF16's first quartiles over the sum of the recipe's third "
             "quartiles) above 1, the site's rule for 'faster than BF16'; otherwise the projection stays in BF16")


#: One projection's three GEMMs under a recipe against BF16: made here from the autocast cells, and
#: read back from a stored plan as the same type.
ProjectionVerdict = PlanProjection


@dataclasses.dataclass(frozen=True)
class PrecisionPlan:
    """Which projections of a layer run in ``precision`` (an FP8 recipe) and which stay in BF16."""

    precision: str
    verdicts: tuple[ProjectionVerdict, ...]

    @classmethod
    def from_block(cls, block: PlanBlock) -> PrecisionPlan:
        """The plan a result stores (:meth:`config`, typed at the door), read back for the page's words
        and snippet: its projections in layer order, in FP8 exactly when the stored ``fp8`` list says so."""
        stored = {p.op: p for p in block.projections}
        ops = [op for op in OPS if op in block.fp8 or op in block.keep_in_bf16]
        verdicts = tuple(dataclasses.replace(stored[op], fp8=op in block.fp8) if op in stored
                         else ProjectionVerdict(op, None, None, None, op in block.fp8) for op in ops)
        return cls(block.recipe, verdicts)

    @property
    def fp8_ops(self) -> tuple[str, ...]:
        return tuple(v.op for v in self.verdicts if v.fp8)

    @property
    def bf16_ops(self) -> tuple[str, ...]:
        return tuple(v.op for v in self.verdicts if not v.fp8)

    @property
    def complete(self) -> bool:
        """Every projection decided from measured GEMMs (none kept in BF16 for want of a number)."""
        return all(v.speedup is not None for v in self.verdicts)

    @property
    def kind(self) -> str:
        """``all-fp8``, ``all-bf16`` (nothing extra to measure) or ``mixed``."""
        if not self.bf16_ops:
            return "all-fp8"
        return "all-bf16" if not self.fp8_ops else "mixed"

    def config(self) -> dict[str, Any]:
        """The plan as a reader's configuration (stored in a result and shown on the site)."""
        return {"recipe": self.precision, "fp8": list(self.fp8_ops), "keep_in_bf16": list(self.bf16_ops),
                "kind": self.kind, "rule": PLAN_RULE,
                "projections": [{"op": v.op, "speedup": _round(v.speedup), "low": _round(v.low),
                                 "high": _round(v.high), "fp8": v.fp8, **({"reason": v.reason} if v.reason else {})}
                                for v in self.verdicts]}

    def sentence(self) -> str:
        name = PRECISIONS[self.precision].display
        if self.kind == "all-fp8":
            return f"With {name}, every projection is clearly faster in FP8: the plan is the whole recipe."
        if self.kind == "all-bf16":
            return f"With {name}, no projection is clearly faster than in BF16: the plan is BF16 throughout."
        return f"With {name}, the plan keeps {kept_words(self.bf16_ops)} in BF16 and runs the rest in FP8."

    def snippet(self) -> str:
        """Python a reader puts in a model: the modules of the kept projections run outside the recipe."""
        if self.kind == "all-bf16":
            return "# no te.autocast: no projection is clearly\n# faster in this recipe than in BF16\n"
        # Lines of at most 44 characters, what a phone's column holds (gemm_benchmark.css); the
        # recipe is ``r``, not ``recipe``, which would shadow TE's module of that name.
        lines = [f"r = {_recipe_expr(self.precision)}",
                 "with te.autocast(enabled=True, recipe=r):"]
        if self.kind == "all-fp8":
            return "\n".join([*lines, "    y = layer(x)", ""])
        lines.append("    ...")
        for op in self.bf16_ops:
            lines += [f"    # {OP_NAMES.get(op, op)} stays in BF16",
                      "    with te.autocast(enabled=False):",
                      f"        h = {op}(h)"]
        return "\n".join([*lines, "    ...", ""])


def kept_words(ops: Sequence[str]) -> str:
    """The projections a plan keeps in BF16 as a sentence names them ("MLP up and MLP down", "no
    projection"): the plan's own sentence and ``:gemm-plan:`... kept``` say it alike."""
    # "Attention output" starts a table row; inside a sentence it is "attention output" ("MLP up" stays).
    names = [name[:1].lower() + name[1:] if name[1:2].islower() else name
             for name in (OP_NAMES.get(op, op) for op in ops)]
    if not names:
        return "no projection"
    return names[0] if len(names) == 1 else f"{', '.join(names[:-1])} and {names[-1]}"


def _recipe_expr(precision: str) -> str:
    return {"fp8-delayed": "recipe.DelayedScaling()", "fp8-current": "recipe.Float8CurrentScaling()",
            "fp8-block": "recipe.Float8BlockScaling()", "mxfp8": "recipe.MXFP8BlockScaling()",
            "nvfp4": "recipe.NVFP4BlockScaling()"}.get(precision, precision)


def _round(value: float | None) -> float | None:
    return None if value is None else round(value, 4)


def projection_ops(report: Report) -> list[str]:
    """The question's projections, in layer order."""
    held = {g.op for g in report.gemms}
    return [op for op in OPS if op in held]


def verdict(report: Report, precision: str, op: str) -> ProjectionVerdict:
    """One projection's verdict from the report's autocast cells (one run: :meth:`Report._speedup`)."""
    gemms = [g for g in report.gemms if g.op == op and g.pass_ in PASSES]
    value, reason = report._speedup(MODE, precision, gemms, f"{OP_NAMES.get(op, op)} (Fprop, Dgrad, Wgrad)")
    if value is None:
        return ProjectionVerdict(op, None, None, None, False, reason or "not measured")
    base = [quartiles(report.cell(MODE, BASELINE, g).stats) for g in gemms]
    mine = [quartiles(report.cell(MODE, precision, g).stats) for g in gemms]
    low, high = ratio_spread(base, mine, value)
    return ProjectionVerdict(op, value, low, high, clearly_faster(value, low, high))


def make_plan(report: Report, precision: str) -> PrecisionPlan:
    """The plan for one FP8 recipe from a result's autocast GEMMs (a projection not fully measured
    stays in BF16, with the reason, and the plan is not :attr:`~PrecisionPlan.complete`)."""
    if precision == BASELINE or precision not in PRECISIONS:
        raise ValueError(f"a plan is made for a low-precision recipe, not {precision!r}")
    if not projection_ops(report):
        raise ValueError("a plan is made for a model's layer; this question has no projections (manual shapes)")
    return PrecisionPlan(precision, tuple(verdict(report, precision, op) for op in projection_ops(report)))


def plans(report: Report, precisions: Sequence[str] | None = None) -> list[PrecisionPlan]:
    """A plan for each low-precision recipe of the report measured in autocast mode."""
    wanted = report.precisions if precisions is None else precisions
    if not projection_ops(report):
        return []
    return [make_plan(report, p) for p in wanted if p != BASELINE and report.status(MODE, p)[0] == "measured"]


#: Which recipe's plan a refresh measures (one per result: the plan's step group costs 1-8 s on an H100).
CHOICE_RULE = ("the plan of the recipe the answer names: the fastest of the low-precision recipes by the model's "
               "training step at the question's G where the result has one, else by the CUDA-graphed layer step, "
               "decided by the site's one rule (gemm_bench.report.fastest.decide_fastest: the fastest of those "
               "clearly faster than BF16, else the fastest), a tie within the measured spread broken by "
               "gemm_bench.report.fastest.break_tie (the refresh has no loss-parity verdict at hand: the other "
               "rows, then energy)")


def plan_to_measure(doc: dict[str, Any]) -> dict[str, Any] | None:
    """The plan a refresh measures for one result (:data:`CHOICE_RULE`), as :meth:`PrecisionPlan.config`
    with ``chosen``; None for a question without a layer's projections or a measured low-precision step.

    The measuring side (``gemm_bench.measure``, below this layer) is handed this function, measures the
    plan's step when the plan is ``mixed`` and stores the block as ``doc["plan"]``."""
    report = Report(doc)
    chosen = chosen_recipe(report)
    if chosen is None:
        return None
    return {**make_plan(report, chosen).config(), "chosen": CHOICE_RULE}


@dataclasses.dataclass(frozen=True)
class AnswerPick:
    """The answer's pick on one result: the verdict (:func:`gemm_bench.report.tie_break.pick`, its tie
    broken), the points it was decided on and what they measure, in the site's words ("the model's step
    at G = 8", "one layer's step")."""

    verdict: Fastest
    points: Mapping[str, Point]
    measure: str


def answer_pick(report: Report, *, loss_parity: Mapping[str, Any] | None = None) -> AnswerPick | None:
    """:data:`CHOICE_RULE`'s decision over one result: among the low-precision recipes with autocast
    GEMMs, by the model's step at the question's G where the result has one, else by the CUDA-graphed
    layer step (balanced routing), a tie broken by :func:`gemm_bench.report.tie_break.pick` with
    ``loss_parity`` (this GPU's loss-parity study) where the caller has it. None for a question without
    a layer's projections or a measured low-precision step."""
    if not projection_ops(report):
        return None
    candidates = [p for p in report.precisions if p != BASELINE and report.status(MODE, p)[0] == "measured"]
    summary = report.model_step()
    model = model_step_points(summary, candidates)
    points = model or step_points(report, candidates, graphed=True)
    verdict = pick(points, report, candidates, basis=MODEL if model else STEP, loss_parity=loss_parity)
    if verdict is None:
        return None
    measure = model_step_at(summary.microbatches) if model and summary is not None else LAYER_STEP
    return AnswerPick(verdict, points, measure)


def chosen_recipe(report: Report, *, loss_parity: Mapping[str, Any] | None = None) -> str | None:
    """:data:`CHOICE_RULE` over one result's cells (:func:`answer_pick`): the recipe the answer sentence
    names (the one it recommends, or the best of those that lost to BF16). None where it has none.

    Why the answer's rule: the plan, the sentence under the step's bars and the answer once named
    different recipes for Mixtral 8x7B and DeepSeek-V3 (the fastest layer step was FP8 Delayed, the
    fastest model step FP8 Current, within each other's spread)."""
    found = answer_pick(report, loss_parity=loss_parity)
    if found is None:
        return None
    points = found.points
    return found.verdict.answer if found.verdict.answer != BASELINE else max(points, key=lambda p: points[p].value)


def step_recipe(report: Report) -> str | None:
    """The recipe a result's step detail speaks of: :data:`CHOICE_RULE`'s, the answer's (the stored plan's
    when the rule has none). Why one rule: the sentence under the step breakdown once named the recipe
    whose step differed most from BF16's (gpt-oss-120b's slowest, FP8 Current) right above a plan, an
    answer and prose about its fastest, FP8 Delayed; now the bars' sentence, the plan and the prose's
    roles speak of the answer's recipe. A plan stored by an older rule for another recipe names its
    own recipe in its sentence ("With FP8 Delayed, the plan keeps ..."). A page's panel passes its
    answer's recipe instead (``gemm_benchmark.breakdown_render``): its tie-break also weighs this GPU's
    loss-parity study, which a result alone lacks."""
    plan = report.result.plan
    chosen = chosen_recipe(report)
    if plan is not None and plan.chosen == CHOICE_RULE:
        # Made by this rule from these very cells, unless from fewer of the result's rows than it now
        # holds (session 16's H200 refresh planned before the step energy was stored, so a tie the
        # energy breaks went the other way): such a plan names its own recipe in its sentence, as a
        # plan of an older rule does.
        return plan.recipe if chosen in (None, plan.recipe) else chosen
    return chosen or (None if plan is None else plan.recipe)


def plan_step_ms(block: PlanBlock, mode: str = "layer-graphed") -> dict[str, float]:
    """The measured steps of a stored plan (``all-bf16``, ``all-fp8``, ``plan``) in ms, of one mode (a step
    the door refused is failed, so absent)."""
    return {name: step.ms for name, step in block.measured_steps(mode).items() if step.ms is not None}


def plan_speedups(block: PlanBlock, mode: str = "layer-graphed") -> tuple[float | None, float | None, str]:
    """The plan's step against all-BF16 and against all-FP8 (each the other's time over the plan's, one
    group), or None with the reason ("" when both are numbers)."""
    if block.kind == "all-fp8":
        return None, None, "the plan is the whole recipe: its step is the recipe's own step"
    if block.kind == "all-bf16":
        return None, None, "the plan is BF16 throughout: its step is BF16's step"
    ms = plan_step_ms(block, mode)
    if PLAN not in ms:
        failed = block.step(PLAN, mode)
        return None, None, (f"the plan's step {failed.status}: {failed.reason}" if failed
                            else "the plan's step was not measured in this result")
    vs_bf16 = ms[ALL_BF16] / ms[PLAN] if ALL_BF16 in ms else None
    vs_fp8 = ms[ALL_FP8] / ms[PLAN] if ALL_FP8 in ms else None
    return vs_bf16, vs_fp8, ""


def plan_advice(block: PlanBlock, mode: str = "layer-graphed") -> str:
    """Which to follow where the answer (the recipe throughout) and a mixed plan differ, computed from the
    plan's own measured group: the plan where its step is faster than all-FP8 beyond the measured
    spread (:func:`gemm_bench.report.figures.ratio_spread` over the two cells' quartiles, the site's
    one rule), else the answer; "" for a plan that is the recipe itself or BF16, or without both steps.

    Why: Qwen2.5 72B's page said "train in FP8 Delayed", then showed a plan at 0.99x all-FP8 with its
    code and left the reader to guess which to follow."""
    plan = PrecisionPlan.from_block(block)
    ms = plan_step_ms(block, mode)
    steps = block.measured_steps(mode)
    if plan.kind != "mixed" or PLAN not in ms or ALL_FP8 not in ms:
        return ""
    name = PRECISIONS[plan.precision].display
    value = ms[ALL_FP8] / ms[PLAN]
    low, high = ratio_spread([_quartiles(steps[ALL_FP8])], [_quartiles(steps[PLAN])], value)
    kept = kept_words(plan.bf16_ops)
    if low is not None and low > 1.0:
        return (f"Follow the plan rather than {name} throughout: keeping {kept} in BF16 makes one layer's step "
                f"{value:.2f}× as fast as all {name}, beyond the measured spread ({low:.3f}–{high:.3f}×).")
    if low is None or high is None:
        spread = "with no measured spread to tell them apart"
    elif high < 1.0:
        spread = f"slower beyond the measured spread ({low:.3f}–{high:.3f}×)"
    else:
        spread = f"within the measured spread ({low:.3f}–{high:.3f}×)"
    return (f"Rather than this plan, train in {name} throughout: the plan's step runs at {value:.2f}× all "
            f"{name}, {spread}, so keeping {kept} in BF16 gains no speed here.")


def _quartiles(step: PlanStep) -> tuple[float, float] | None:
    """A measured step's quartiles as every speedup's spread reads them (:func:`~.figures.quartiles`)."""
    return quartiles(step.stats.as_mapping() if step.stats is not None else {})


def plan_sentence(block: PlanBlock, mode: str = "layer-graphed") -> str:
    """What the page says of a stored plan: what it keeps in BF16 and its measured step against both."""
    plan = PrecisionPlan.from_block(block)
    said = plan.sentence()
    vs_bf16, vs_fp8, why = plan_speedups(block, mode)
    if plan.kind != "mixed":
        return said + " Nothing beyond the recipe's own step is measured."
    if why:
        return f"{said} Its step: {why}."
    parts = [f"{v:.2f}× all-BF16" if w == "bf16" else f"{v:.2f}× all-FP8"
             for w, v in (("bf16", vs_bf16), ("fp8", vs_fp8)) if v is not None]
    advice = plan_advice(block, mode)
    return (f"{said} Measured in one group beside both, its CUDA-graphed step runs at {' and '.join(parts)}."
            + (f" {advice}" if advice else ""))
