"""Published whole runs beside the site's prediction for the same layout (issue 42, item 5).

The data file (``docs/_data/published_runs.json``) holds public results as read in their sources: the
model id the site measures, the system and its GPU kind, the layout the table states (plus the flags
it does not state, said in ``layout_assumed``), the published tokens per second per GPU per recipe,
the source with its URL (at the commit read), version and date. Nothing in it is computed.

:func:`compare` predicts each run with :func:`gemm_bench.report.layout_step.result_layout_steps` from the
cached result of that model on that GPU kind, and where the two differ by more than
:data:`THRESHOLD` says why with computed reasons: how much of the exposed communication a run would
have to hide to reach the published figure, whether the published figure beats even the rank's
measured compute alone, and the composition's own assumptions.
"""

from __future__ import annotations

import dataclasses
import json
import math
from collections.abc import Mapping, Sequence
from pathlib import Path

from gemm_bench.question.config import ConfigError, ModelConfig, parse_model_id
from gemm_bench.question.devices import device_label
from gemm_bench.question.layout import ParallelLayout
from gemm_bench.question.layout_step import LayoutStep, Network
from gemm_bench.question.precisions import PRECISIONS
from gemm_bench.question.question import build_question
from gemm_bench.report.layout_step import ResultLayoutSteps, Sweep, result_layout_steps
from gemm_bench.results.typed import Result

#: A prediction this far from the published figure (either way) is explained on the page.
THRESHOLD = 0.10
_RUN_FIELDS = ("model", "system", "device", "seq_length", "layout", "layout_assumed", "published",
               "precision_words", "source", "url", "version", "date")


class PublishedRunsError(ValueError):
    """The data file is unreadable or a row is malformed; the message names the file and the row."""


@dataclasses.dataclass(frozen=True)
class PublishedRun:
    model: str
    system: str
    device: str
    seq_length: int
    layout: ParallelLayout
    layout_assumed: str
    published: Mapping[str, float]
    precision_words: Mapping[str, str]
    source: str
    url: str
    version: str
    date: str


def load(path: Path) -> list[PublishedRun]:
    """Every run of the file, validated (a :class:`PublishedRunsError` naming the file and row)."""
    try:
        doc = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise PublishedRunsError(f"{path}: cannot be read as JSON ({exc})") from None
    runs = doc.get("runs") if isinstance(doc, dict) else None
    if not isinstance(runs, list) or not runs:
        raise PublishedRunsError(f"{path}: needs a non-empty list 'runs'")
    out = []
    for i, row in enumerate(runs):
        where = f"{path}: runs[{i}]"
        if not isinstance(row, dict) or set(row) != set(_RUN_FIELDS):
            have = sorted(row) if isinstance(row, dict) else type(row).__name__
            raise PublishedRunsError(f"{where}: needs exactly the fields {', '.join(_RUN_FIELDS)}; has {have}")
        published = row["published"]
        if not isinstance(published, dict) or not published or any(
                p not in PRECISIONS or isinstance(v, bool) or not isinstance(v, (int, float))
                or not math.isfinite(v) or v <= 0 for p, v in published.items()):
            raise PublishedRunsError(f"{where}.published: precision id -> a positive tokens/s per GPU, "
                                     f"got {published!r}")
        if set(row["precision_words"]) != set(published):
            raise PublishedRunsError(f"{where}.precision_words: one entry per published precision")
        if not str(row["url"]).startswith("https://"):
            raise PublishedRunsError(f"{where}.url: must be an https:// address, got {row['url']!r}")
        try:
            layout = ParallelLayout(**row["layout"])
        except (TypeError, ConfigError) as exc:
            raise PublishedRunsError(f"{where}.layout: {exc}") from None
        seq = row["seq_length"]
        if isinstance(seq, bool) or not isinstance(seq, int) or seq < 1:
            raise PublishedRunsError(f"{where}.seq_length: a whole number of tokens, got {seq!r}")
        try:
            build_question(model=str(row["model"]))
        except ConfigError as exc:
            raise PublishedRunsError(f"{where}.model: {exc}") from None
        if _year_month(row["date"]) is None:
            raise PublishedRunsError(f"{where}.date: YYYY-MM (month 01-12), as the source dates it; got "
                                     f"{str(row['date'])[:40]!r}")
        run = PublishedRun(str(row["model"]), str(row["system"]), str(row["device"]), int(row["seq_length"]),
                           layout, str(row["layout_assumed"]), {k: float(v) for k, v in published.items()},
                           {k: str(v) for k, v in row["precision_words"].items()}, str(row["source"]),
                           str(row["url"]), str(row["version"]), str(row["date"]))
        other = at_run_ep(run)
        if other is not None:  # the model at the run's EP must be a question (red team: EP 16 of 8 experts crashed)
            try:
                build_question(model=other)
            except ConfigError as exc:
                raise PublishedRunsError(f"{where}.layout.ep: {other}: {exc}") from None
        out.append(run)
    return out


def _year_month(text: object) -> tuple[int, int] | None:
    """``"2024-07"`` (or a longer ISO date) -> (2024, 7); None for anything else, a month outside 1-12 included."""
    value = str(text)
    if len(value) < 7 or value[4] != "-" or not value[:4].isdecimal() or not value[5:7].isdecimal() or (
            len(value) > 7 and value[7] != "-"):
        return None
    year, month = int(value[:4]), int(value[5:7])
    return (year, month) if 1 <= month <= 12 else None


@dataclasses.dataclass(frozen=True)
class Prediction:
    """One published recipe against the site's step for the same layout (or why there is none)."""

    precision: str
    published: float
    step: LayoutStep | None
    why_none: str = ""

    @property
    def predicted(self) -> float | None:
        return self.step.tokens_per_s if self.step else None

    @property
    def difference(self) -> float | None:
        """Predicted over published, minus one (+0.12: the site predicts 12% more)."""
        return None if self.step is None else self.step.tokens_per_s / self.published - 1

    @property
    def off(self) -> bool:
        return self.difference is not None and abs(self.difference) > THRESHOLD


@dataclasses.dataclass(frozen=True)
class Comparison:
    run: PublishedRun
    steps: ResultLayoutSteps | None
    predictions: tuple[Prediction, ...]
    why_none: str = ""


def compare(run: PublishedRun, result: Result | None, available: Sequence[Sweep], *,
            network: Network = Network(), config: ModelConfig | None = None) -> Comparison:
    """The site's prediction of ``run`` from ``result`` (the typed cached result of ``run.model`` on
    ``run.device``); ``config``: the model's question as the page asks it (default: the stored one), whose
    unkeyed fields (a sliding window) the stored config of an older result lacks."""
    def none(why: str) -> Comparison:
        return Comparison(run, None, tuple(Prediction(p, v, None, why) for p, v in run.published.items()), why)

    if result is None:
        return none(f"no cached result of {run.model}'s question on {run.device}: the run's layout needs its layer "
                    f"measured at TP {run.layout.tp}, which the cache does not hold")
    question_seq = result.config.seq_length if result.config is not None else None
    if question_seq != run.seq_length:
        return none(f"the site measures {run.model} at {question_seq} tokens, the run trains at {run.seq_length}")
    found = result_layout_steps(result, run.layout, available, network=network, config=config)
    if isinstance(found, str):
        return none(found)
    preds = []
    for precision, value in run.published.items():
        step = found.step(precision)
        reason = "" if step is not None else str(found.steps.get(precision, "not measured in this result"))
        preds.append(Prediction(precision, value, step, reason))
    return Comparison(run, found, tuple(preds))


def reasons(prediction: Prediction, *, moe: bool = False, compute_known_off: bool = False) -> list[str]:
    """Why a prediction is more than :data:`THRESHOLD` off, computed from its own step (``moe``: the
    model routes to experts, so routing imbalance is one of the costs not counted). ``compute_known_off``:
    the rank's compute itself is known to be off (its layer measured at another expert-parallel size than
    the run's, :func:`expert_parallel_reason`), so nothing is read from the published figure against it: the
    gpt-oss row said "the published stack computes faster" where its EP 8 layer, 1.73x faster on the H200 than
    the EP 1 one the prediction rests on, explained the gap (red team, session 19)."""
    step, published = prediction.step, prediction.published
    if step is None or not prediction.off:
        return []
    out = []
    compute = step.compute_tokens_per_s
    if published > step.tokens_per_s:
        if compute_known_off:
            pass  # the expert-parallel reason, given first, says how far off the compute is
        elif published <= compute:
            # tokens / (step - x) = published  ->  x = step - tokens / published
            needed = step.step_ms - step.tokens_per_step_per_gpu / published * 1e3
            share = needed / step.comm_ms if step.comm_ms > 0 else float("inf")
            out.append(f"the published figure lies between the prediction and the rank's compute alone "
                       f"({compute:,.0f} tokens/s): the run hides about {share:.0%} of the {step.comm_ms / 1e3:.2f} s "
                       f"of communication per step the composition counts as exposed")
            tp = sum(cost.ms for call, cost in step.microbatch.calls if call.kind == "tp") * step.microbatches
            if tp > 0:
                out.append(f"tensor-parallel collectives take {tp / step.step_ms:.0%} of the predicted step: "
                           "comm-GEMM overlap (Transformer Engine's Userbuffers, never initialised here) hides "
                           "them in the published runs and is not modelled")
            if step.layout.pp > 1:
                out.append("pipeline sends and receives are counted exposed; Megatron overlaps them with "
                           "compute in the interleaved schedule")
        else:
            out.append(f"the published figure is above even the rank's measured compute alone ({compute:,.0f} "
                       "tokens/s): the published stack computes faster than the measured one (its container's "
                       "Transformer Engine and cuDNN attention, fused kernels, CUDA graphs of the whole step)")
    else:
        imbalance = " the routing imbalance of a mixture of experts," if moe else ""
        out.append(f"the run pays costs the composition does not count (data loading, stragglers,{imbalance} "
                   "logging and checkpoints)")
    if step.bubble_ms > 0:
        out.append(f"the pipeline bubble is {step.bubble_share:.0%} of the predicted step "
                   "((PP - 1) / VPP micro-batches)")
    out.extend(step.assumptions)
    if step.collectives_assumed:
        out.append("some collectives' costs are assumed (scaled beyond the measuring box, over the assumed "
                   "inter-node link, or measured on another GPU kind)")
    return out


#: A published run this many months older than the measured stack is said to be so where the site predicts more.
OLDER_MONTHS = 12


def stack_age_reason(prediction: Prediction, run: PublishedRun, result: Result) -> str | None:
    """Where the site predicts more than ``run`` published (beyond :data:`THRESHOLD`) and the run is at least
    :data:`OLDER_MONTHS` older than the measured result, that age in words: the published container's kernels
    and libraries are not the measured ones (red team, session 19: NeMo 24.07's Llama 3 8B row, +23%, gave only
    "data loading, stragglers, logging" as reasons, against a stack measured 28 months later). None otherwise
    (a date either side that does not read as YYYY-MM is no reason)."""
    if not prediction.off or prediction.difference is None or prediction.difference <= 0:
        return None
    ran, measured = _year_month(run.date), _year_month(result.provenance.date)
    if ran is None or measured is None:
        return None
    months = (measured[0] - ran[0]) * 12 + measured[1] - ran[1]
    if months < OLDER_MONTHS:
        return None
    return (f"the published run ({run.version}, {run.date}) is {months} months older than the measured stack "
            f"(Transformer Engine {result.provenance.transformer_engine}, torch {result.provenance.torch}, "
            f"{result.provenance.date[:10]}): its kernels and libraries are not the ones measured")


def at_run_ep(run: PublishedRun) -> str | None:
    """The model id of ``run``'s model with its layer at the run's own expert-parallel size, where the row's
    model is measured at another (``gpt-oss-120b`` in an EP 8 run: ``gpt-oss-120b/ep8``); None where they agree."""
    found = parse_model_id(run.model)
    if run.layout.ep == (found.ep or 1):
        return None
    return dataclasses.replace(found, ep=run.layout.ep).text()


def expert_parallel_reason(run: PublishedRun, measured: Result, at_ep: Result, available: Sequence[Sweep], *,
                           network: Network = Network()) -> str | None:
    """What the expert-parallel size the row's layer is measured at does to its prediction, computed on a GPU
    kind that has measured the layer at both sizes (``measured``: the row's model there; ``at_ep``: the model at
    the run's EP, :func:`at_run_ep`, on the same GPU kind): the run's layout predicted from each, per published
    recipe. The prediction itself stays on the run's own GPU kind; this says, from a measurement on another,
    how far the composition's assumption (a rank computes at EP N in the time measured at EP 1) is off. None
    where either result cannot predict the layout (the reason is then its own row's)."""
    if measured.device.name != at_ep.device.name:
        raise ValueError(f"the two results are of different GPUs: {measured.device.name}, {at_ep.device.name}")
    if any(r.config is None or r.config.seq_length != run.seq_length for r in (measured, at_ep)):
        return None  # a result at another sequence length predicts another run (compare() says so for the row)
    steps = [result_layout_steps(r, run.layout, available, network=network) for r in (measured, at_ep)]
    if any(isinstance(found, str) for found in steps):
        return None
    low, high = steps
    assert not isinstance(low, str) and not isinstance(high, str)
    measured_ep = measured.config.expert_model_parallel_size if measured.config else 1
    parts, ratios = [], []
    for precision in run.published:
        mine, theirs = low.step(precision), high.step(precision)
        if mine is None or theirs is None:
            continue
        ratios.append(theirs.tokens_per_s / mine.tokens_per_s)
        parts.append(f"{precision_display(precision)} {theirs.tokens_per_s:,.0f} tokens/s per GPU from the layer "
                     f"measured at EP {run.layout.ep} against {mine.tokens_per_s:,.0f} from the layer at EP "
                     f"{measured_ep} ({ratios[-1]:.2f}x)")
    if not parts:
        return None
    verb = ("understates" if min(ratios) > 1 else "overstates" if max(ratios) < 1 else "misstates")
    return (f"on the {device_label(measured.device.name)}, which has measured the layer at both expert-parallel "
            f"sizes, this layout predicts {'; '.join(parts)}: there the layer at EP {measured_ep}, which this "
            f"prediction rests on, {verb} an EP {run.layout.ep} rank's speed")


def precision_display(precision: str) -> str:
    return PRECISIONS[precision].display
