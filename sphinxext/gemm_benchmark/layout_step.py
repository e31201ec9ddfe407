"""``.. gemm-layout-step::`` and ``.. gemm-published-runs::``: the run a reader launches, communication in
(issue 42, item 5).

``gemm-layout-step`` shows, per model id of ``:models:`` and per GPU with a cached model step: the preset
layout in words (:data:`gemm_bench.question.layout.PRESET_LAYOUTS`, with its source), and per recipe the
tokens per second per GPU of that layout with communication and the pipeline bubble in
(:mod:`gemm_bench.question.layout_step`, composed from the model step's measured parts and the tp-comm
study's collective sweep), the rank's compute alone beside it (labelled), the speedup over BF16 of both,
the communication's and the bubble's shares and MFU; under the table what is measured and what is
assumed (the network of ``conf.py``'s ``gemm_benchmark_inter_node_*`` values, the overlap formulas).

``gemm-published-runs`` reads a data file of public whole-run results (its argument, relative to the
page; :mod:`gemm_bench.report.published_runs`) and shows each beside the site's prediction for that
exact layout, the difference, and where it is more than 10% the computed reasons.

Every number is read from the cache (and the data file) through the library; none is typed.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from docutils import nodes
from sphinx.util.docutils import SphinxDirective

from gemm_bench.question.devices import device_label
from gemm_bench.question.layout import ParallelLayout
from gemm_bench.question.layout_step import LayoutStep, compute_speedup, overlap_formulas
from gemm_bench.question.precisions import BASELINE, PRECISIONS
from gemm_bench.question.question import Question, build_question
from gemm_bench.report.layout_step import (
    ResultLayoutSteps,
    Sweep,
    measured_and_assumed,
    result_layout_steps,
    sweeps,
)
from gemm_bench.report.published_runs import (
    PublishedRun,
    PublishedRunsError,
    at_run_ep,
    compare,
    expert_parallel_reason,
    load,
    reasons,
    stack_age_reason,
)
from gemm_bench.results import studies
from gemm_bench.results.cache import Cache
from gemm_bench.results.typed import Result
from gemm_benchmark.config import Settings, settings
from gemm_benchmark.diagnostics import Subtype, warn
from gemm_benchmark.execution import read_results
from gemm_benchmark.layout_tables import LayoutTableDirective, note
from gemm_benchmark.render_block import scrolling
from gemm_benchmark.render_table import Entry, build_table

HEADER = ("Recipe", "Tokens/s per GPU, communication in", "Speedup over BF16", "Rank compute alone (no "
          "communication, no bubble)", "Its speedup", "Communication share", "Bubble", "MFU")
PUBLISHED_HEADER = ("Model", "Run (source, date)", "Recipe", "Published tokens/s per GPU", "Predicted",
                    "Difference", "Why, where more than 10%")


def _sweeps(env: Any, cache_dir: Path, location: tuple[str, int]) -> list[Sweep]:
    docs, errors = studies.read_studies(cache_dir, "tp-comm")
    for error in errors:
        warn(Subtype.CACHE, str(error), location=location)
    for doc in docs:
        env.note_dependency(str(studies.study_dir(cache_dir) / studies.file_name("tp-comm", doc["device"]["name"])))
    return sweeps(docs)


def share_text(share: float) -> str:
    """A share of the step in whole percent, "<1%" where it is above zero but rounds to 0% (Llama 3 70B's
    bubble of 0.47% read "0%", as if there were none: red team, session 19)."""
    text = f"{abs(share):.0%}" if share == 0 else f"{share:.0%}"  # -0.0 reads "0%", not "-0%"
    return "<1%" if share > 0 and text == "0%" else text


def step_rows(found: ResultLayoutSteps) -> list[list[Entry]]:
    """One row per recipe of one result's layout steps (a recipe without a step says why)."""
    base = found.step(BASELINE)
    rows: list[list[Entry]] = []
    for precision, step in found.steps.items():
        name = Entry(PRECISIONS[precision].display, strong=precision == BASELINE)
        if not isinstance(step, LayoutStep):
            rows.append([name, Entry(f"not composed: {step}", morecols=len(HEADER) - 2)])
            continue
        ratio = found.speedup(precision)
        speed = "1 (the baseline)" if precision == BASELINE or ratio is None else (
            f"{ratio[0]:.2f}× ({ratio[1]:.2f}–{ratio[2]:.2f})")
        alone = "1 (the baseline)" if precision == BASELINE or base is None else (
            f"{compute_speedup(step, base):.2f}×")
        tip = (f"per optimizer step: {step.step_ms:,.0f} ms = {step.microbatches} micro-batches × "
               f"({step.compute_ms:,.1f} ms compute + {step.microbatch.comm_ms:,.1f} ms collectives) + "
               f"{step.bubble_ms:,.0f} ms bubble + {step.dp.comm_ms - step.dp_hidden_ms:,.0f} ms data-parallel "
               f"(of {step.dp.comm_ms:,.0f}) + {step.optimizer_ms:,.1f} ms optimizer; stage of {step.layers} layers")
        rows.append([name,
                     Entry(f"{step.tokens_per_s:,.0f} ({step.tokens_per_s_low:,.0f}–{step.tokens_per_s_high:,.0f})"
                           + (" (assumed in part)" if step.assumed else ""), tooltip=tip),
                     Entry(speed), Entry(f"{step.compute_tokens_per_s:,.0f}"
                                         + (" (assumed in part)" if step.compute_assumptions else "")),
                     Entry(alone),
                     Entry(share_text(step.comm_share)), Entry(share_text(step.bubble_share)),
                     Entry(f"{step.mfu:.0%}" if step.mfu is not None else "—")])
    return rows


def notes(found: ResultLayoutSteps) -> list[nodes.Node]:
    """What is measured and what is assumed under one table, in words computed from the steps."""
    out: list[nodes.Node] = []
    step = found.step(BASELINE)
    if step is None:
        return out
    measured, assumed = measured_and_assumed(step)
    where = (f"measured on a box of {device_label(found.sweep.device)} GPUs ({found.sweep.run})"
             + (f" and borrowed for {device_label(found.device)}: assumed" if found.borrowed_from else ""))
    out.append(note(f"Collectives {where}. Measured on the box (BF16's): {', '.join(measured) or 'none'}. "
                     f"Assumed: {'; '.join(assumed) or 'none'}. Network: {found.network.describe()}."))
    # What each other recipe's step runs besides BF16's (FP8 payloads, amax reductions): the notes listed
    # BF16's alone, and an FP8 row's uint8 gathers were never named (red team, session 19).
    others: dict[str, list[str]] = {}  # the calls' words -> the recipes that run them (said once)
    for precision in found.steps:
        other = found.step(precision)
        if precision == BASELINE or other is None:
            continue
        mine, theirs = measured_and_assumed(other)
        extra_measured = [c for c in mine if c not in measured]
        extra_assumed = [c for c in theirs if c not in assumed]
        if extra_measured or extra_assumed:
            parts = ([f"measured: {', '.join(extra_measured)}"] if extra_measured else []) + (
                [f"assumed: {'; '.join(extra_assumed)}"] if extra_assumed else [])
            others.setdefault("; ".join(parts), []).append(PRECISIONS[precision].display)
    if others:
        out.append(note("Collectives other recipes run instead of or beside BF16's: " + "; ".join(
            f"{', '.join(names)} ({words})" for words, names in others.items()) + "."))
    out.append(note("Rank compute: the model step's parts measured on one GPU (GPU time), per micro-batch of the "
                     "most loaded pipeline stage. Data-parallel overlap: " + "; ".join(overlap_formulas(found.layout))
                     + ". Pipeline bubble: (PP − 1) / VPP micro-batch times (Megatron's interleaved 1F1B). "
                     "Comm-GEMM overlap is not modelled (Transformer Engine's Userbuffers are never initialised "
                     "here): the tensor-parallel collectives are counted exposed."))
    if step.assumptions:
        out.append(note("Assumed: " + "; ".join(step.assumptions) + "."))
    return out


class GemmLayoutStepDirective(LayoutTableDirective):
    """Each model's preset layout: tokens/s per GPU with communication, per recipe and GPU."""

    NAME = "gemm-layout-step"
    CSS = "gemm-layout-step"
    reference_example = """\
.. gemm-layout-step::
   :models: llama3-8b, llama3.1-405b/tp8
"""

    def prepare(self, config: Settings) -> None:
        self.available = _sweeps(self.env, config.cache_dir, (self.env.docname, self.lineno))

    def panel(self, result: Result, model_id: str, question: Question, layout: ParallelLayout,
              label: str, config: Settings) -> list[nodes.Node]:
        found = result_layout_steps(result, layout, self.available, network=config.network,
                                    config=question.config)
        if isinstance(found, str):
            return [note(f"{label}: {found}.")]
        table = build_table([[Entry(h, strong=True) for h in HEADER]], step_rows(found),
                            [10, 18, 13, 16, 9, 12, 8, 7], classes=["gemm-layout-step-table"])
        return [scrolling(table), *notes(found)]


#: The published-runs file a page names when it names none (relative to the source folder).
PUBLISHED_RUNS_DEFAULT = "/_data/published_runs.json"


class GemmPublishedRunsDirective(SphinxDirective):
    """Public whole-run results beside the site's prediction for the same layout. The argument, a
    JSON file of runs (relative to the page, or to the source folder with a leading ``/``), defaults
    to ``/_data/published_runs.json``."""

    reference_example = """\
.. gemm-published-runs::
"""
    reference_options: dict[str, str] = {}  # noqa: RUF012
    optional_arguments = 1
    has_content = False

    def run(self) -> list[nodes.Node]:
        config = settings(self.env)
        if config.questions_only:
            return []
        location = (self.env.docname, self.lineno)
        rel, path = self.env.relfn2path(self.arguments[0] if self.arguments else PUBLISHED_RUNS_DEFAULT,
                                        self.env.docname)
        self.env.note_dependency(rel)
        try:
            runs = load(Path(path))
        except PublishedRunsError as exc:
            warn(Subtype.OPTION, f"gemm-published-runs: {exc}", location=location)
            return []
        available = _sweeps(self.env, config.cache_dir, location)
        cache = Cache(config.cache_dir)
        rows: list[list[Entry]] = []
        sources: list[str] = []
        refs = nodes.enumerated_list(classes=["gemm-published-sources"])
        for run in runs:
            key = f"{run.source}; {run.version}, {run.date}"
            if key not in sources:
                sources.append(key)
                item = nodes.list_item()
                para = nodes.paragraph()
                para += nodes.reference(run.source, run.source, refuri=run.url)
                para += nodes.Text(f" ({run.version}, {run.date})")
                item += para
                refs += item
            number = sources.index(key) + 1
            asked = build_question(model=run.model)
            results, _ = read_results(cache, asked.hash)
            for read, _ in results:
                self.env.note_dependency(str(read))
            # the run's GPU by the typed result's device name
            result = next((r for _, r in results if r.device.name == run.device), None)
            comparison = compare(run, result, available, network=config.network, config=asked.config)
            moe = bool(asked.config and asked.config.is_moe)
            ep_reason = self._expert_parallel_reason(run, results, cache, available, config) if moe else None
            for prediction in comparison.predictions:
                diff = prediction.difference
                # the measured expert-parallel size's effect first: where it applies it is the largest term
                age = stack_age_reason(prediction, run, result) if result is not None else None
                why = "; ".join(([ep_reason] if ep_reason else []) + ([age] if age else [])
                                + reasons(prediction, moe=moe, compute_known_off=ep_reason is not None)) \
                    if prediction.off else (prediction.why_none or "within 10%")
                rows.append([
                    Entry(run.model, strong=True),
                    Entry(f"source {number}, {run.system}: {run.layout.describe()}; assumed where the table is "
                          f"silent: {run.layout_assumed}"),
                    Entry(run.precision_words[prediction.precision]),
                    Entry(f"{prediction.published:,.0f}"),
                    Entry(f"{prediction.predicted:,.0f}" + (" (assumed in part)" if prediction.step
                                                            and prediction.step.assumed else "")
                          if prediction.predicted is not None else "—"),
                    Entry(f"{diff:+.0%}" if diff is not None else "—"),
                    Entry(why)])
        table = build_table([[Entry(h, strong=True) for h in PUBLISHED_HEADER]], rows, [10, 30, 10, 9, 9, 7, 35],
                            classes=["gemm-published-runs-table"])
        return [scrolling(table), note("Sources, as read (the address holds the commit read):"), refs, note(
            "Predicted: the site's tokens per second per GPU for the published layout, composed from the rank's "
            "compute measured on the published GPU kind and the collectives measured on a box of several GPUs "
            "(communication in, comm-GEMM overlap not modelled); difference = predicted / published − 1.")]

    def _expert_parallel_reason(self, run: PublishedRun, results: Sequence[tuple[Path, Result]], cache: Cache,
                                available: Sequence[Sweep], config: Settings) -> str | None:
        """Where the row's layer is measured at another expert-parallel size than the run's, what that does to
        the prediction on a GPU kind that has measured both (:func:`~gemm_bench.report.published_runs.
        expert_parallel_reason`); None where no GPU kind has."""
        other = at_run_ep(run)
        if other is None:
            return None  # (load() refuses a row whose model at the run's EP is not a question)
        at_ep, _ = read_results(cache, build_question(model=other).hash)
        for read, _ in at_ep:
            self.env.note_dependency(str(read))
        for _, high in sorted(at_ep, key=lambda pair: pair[1].device.name):
            low = next((r for _, r in results if r.device.name == high.device.name), None)
            if low is not None:
                found = expert_parallel_reason(run, low, high, available, network=config.network)
                if found:
                    return found
        return None


def setup_layout_step(app: Any) -> None:
    app.add_directive("gemm-layout-step", GemmLayoutStepDirective)
    app.add_directive("gemm-published-runs", GemmPublishedRunsDirective)
