"""Software-stack staleness: a result is re-measured when the box that would re-measure it runs
another Transformer Engine, PyTorch, CUDA or driver than the result was measured with.

Why: a number measured with TE 2.20 says nothing certain about TE 2.21 (new kernels, new
heuristics in cuBLASLt). Upgrading TE on a GPU runner must therefore refresh the guide by itself,
without anyone remembering to force a run. Which differences count is configurable
(``gemm_benchmark_stale_when`` in ``conf.py``, ``--stale-when`` on ``gemm-bench refresh``): a
driver bump rarely changes GEMM times, a TE upgrade often does.

:func:`stack_staleness` is pure (it compares two dicts); only :func:`local_stack` touches the GPU
stack, and it imports torch and Transformer Engine when called, never at import time, so the
documentation still builds on machines without them.
"""

from __future__ import annotations

import dataclasses
import importlib.metadata
import shutil
import subprocess
from collections.abc import Mapping, Sequence
from typing import Any, NamedTuple

from gemm_bench.question.model_step import unsupported_reason as model_step_unsupported
from gemm_bench.question.precisions import BASELINE, LAYER_MODES, gemm_modes
from gemm_bench.question.question import Question
from gemm_bench.question.step_plan import routings, unsupported_reason
from gemm_bench.question.vocabulary import MODEL_STEP
from gemm_bench.results.cache import is_stale
from gemm_bench.results.failed import failed_cells, failed_modes
from gemm_bench.results.schema import METHOD_VERSION, missing_cells
from gemm_bench.results.typed import Result, parse

#: Every field a staleness rule may name, with the words the reason uses. ``method`` is the
#: measurement method's version (``results.METHOD_VERSION``); the others are provenance fields.
STACK_FIELDS: dict[str, str] = {
    "method": "measurement method version",
    "transformer_engine": "Transformer Engine",
    "torch": "PyTorch",
    "cuda": "CUDA",
    "driver": "driver",
}

#: What a refresh treats as stale unless told otherwise: the method and the two libraries whose
#: upgrades change GEMM kernels. CUDA and the driver are opt-in.
DEFAULT_STALE_WHEN: tuple[str, ...] = ("method", "transformer_engine", "torch")


class StackError(ValueError):
    """A staleness rule naming a field that does not exist (message names the bad value)."""


def validate_fields(fields: Sequence[str], *, source: str = "stale-when") -> tuple[str, ...]:
    """Check a rule's field list; ``source`` names the option or config value in the message."""
    if isinstance(fields, str):
        raise StackError(f"{source}: must be a list of field names, not the string {fields!r}")
    out = []
    for field in fields:
        if field not in STACK_FIELDS:
            raise StackError(f"{source}: unknown field {field!r}; choose from {', '.join(STACK_FIELDS)}")
        out.append(field)
    return tuple(dict.fromkeys(out))


def document_stack(doc: Mapping[str, Any]) -> dict[str, str]:
    """The stack a result was measured with, in the same keys as :func:`local_stack`."""
    provenance = doc.get("provenance", {})
    stack = {key: str(provenance.get(key, "unknown")) for key in STACK_FIELDS if key != "method"}
    stack["method"] = str(doc.get("method_version", "unknown"))
    return stack


def stack_staleness(doc: Mapping[str, Any], local: Mapping[str, str] | None, fields: Sequence[str]) -> str | None:
    """Why ``doc`` is stale on a box running ``local``, or None when every chosen field agrees.

    ``local`` None means the box's stack is unknown (no GPU stack here): nothing can be said, so
    nothing is stale for that reason. A field the box cannot report (``"unknown"``) is skipped
    rather than called a difference, since "unknown" differs from every real version.
    """
    if local is None:
        return None
    measured = document_stack(doc)
    reasons = []
    for field in validate_fields(fields):
        here = local.get(field, "unknown")
        then = measured[field]
        if here == "unknown" or here == then:
            continue
        reasons.append(f"{STACK_FIELDS[field]} {then} -> {here}")
    if not reasons:
        return None
    return "measured with another software stack: " + ", ".join(reasons)


def driver_version() -> str:
    """The NVIDIA driver's version from ``nvidia-smi`` (``"unknown"`` where it cannot be asked)."""
    exe = shutil.which("nvidia-smi")
    if not exe:
        return "unknown"
    try:
        out = subprocess.run([exe, "--query-gpu=driver_version", "--format=csv,noheader"],
                             capture_output=True, text=True, timeout=30, check=True).stdout
    except (OSError, subprocess.SubprocessError):
        return "unknown"
    first = out.strip().splitlines()[0].strip() if out.strip() else ""
    return first or "unknown"


def local_stack() -> dict[str, str] | None:
    """This box's stack in :func:`document_stack`'s keys, or None without torch and TE.

    The TE version is read as the runner records it (``transformer_engine.__version__``), so a
    fresh result is never stale against the box that just measured it.
    """
    try:
        import torch
        import transformer_engine
    except ImportError:
        return None
    te_version = getattr(transformer_engine, "__version__", None)
    if not te_version:
        try:
            te_version = importlib.metadata.version("transformer_engine")
        except importlib.metadata.PackageNotFoundError:
            te_version = "unknown"
    return {
        "method": METHOD_VERSION,
        "transformer_engine": str(te_version),
        "torch": str(torch.__version__),
        "cuda": str(torch.version.cuda or "unknown"),
        "driver": driver_version(),
    }


@dataclasses.dataclass(frozen=True)
class Rules:
    """The freshness rules of ``auto`` mode: one definition for the docs build and ``gemm-bench refresh``."""

    stale_when: tuple[str, ...] = DEFAULT_STALE_WHEN
    max_age_days: float | None = None
    force: bool = False
    #: Measure a mode with a failed cell again (:mod:`gemm_bench.results.failed`): a failure may be
    #: transient. False for a result this build already measured (once per build, as ``force``).
    retry_failed: bool = True


#: What a run records as its peers' method (``provenance.method.peers``) when it did not time them.
PEERS_NOT_MEASURED = "not measured: no page shows peers"

#: The kind of peers each per-GEMM mode's run times (:mod:`gemm_bench.measure.peers`): Linear peers
#: beside autocast, GEMM peers beside the pre-quantized GEMMs.
PEER_KIND_OF_MODE: dict[str, str] = {"autocast": "linear", "prequant": "gemm"}


class Todo(NamedTuple):
    """What this box should measure of one question now (:func:`remeasure`).

    ``peers``: the run times the registered peers too. ``peers_only``: the run times the peers of
    ``modes`` alone (no Transformer Engine cell, step or SQNR), to be merged into the cached
    result (:func:`gemm_bench.results.merge.merge_peers`): the rest of that result is fresh.
    """

    precisions: list[str]
    modes: list[str]
    why: str
    peers: bool = False
    peers_only: bool = False


def peers_measured(doc: Mapping[str, Any], mode: str) -> bool:
    """Whether ``doc`` holds its peers of ``mode`` (a per-GEMM mode): a peer row of the mode's kind.

    Every run that times peers writes a row per registered peer (the built-in ones always are), an
    unsupported or failed peer included, so a file with no row of the kind was measured without them.
    """
    kind = PEER_KIND_OF_MODE.get(mode)
    return kind is None or any(p.get("kind", "gemm") == kind for p in doc.get("peers", []))


def remeasure(doc: dict[str, Any] | None, question: Question, precisions: Sequence[str], modes: Sequence[str],
              *, local: Mapping[str, str] | None, rules: Rules, peers: bool = False) -> Todo | None:
    """What this box should measure now (a :class:`Todo`), or None when the cached result suffices.

    A mode is always measured whole: the requested precisions, BF16 (the baseline) and every
    precision the cached file already holds in that mode, so the new run replaces the mode's cells
    as one run (no speedup ever compares two runs) and no page loses what another page asked for.
    Cells are judged against the page's question (its GEMMs), as the page renders them.

    ``peers``: some page this plan serves shows the peers (a docs build: this directive; a refresh:
    any directive of the question). A run times them only then (issue 34: they were most of an
    author's wait). A result that is fresh but lacks the peers of a per-GEMM mode asked for gets a
    peers-only run (``peers_only``), merged into it, never re-measuring the rest.
    """
    everything = list(dict.fromkeys([BASELINE, *precisions]))
    if doc is None:
        return Todo(everything, list(modes), "not measured on this device yet", peers)
    if rules.force:
        return Todo(everything, list(modes), "forced", peers)
    stale = is_stale(doc, max_age_days=rules.max_age_days) or stack_staleness(doc, local, rules.stale_when)
    lacking = lacking_blocks(doc, question)
    if not stale and lacking:
        stale = (f"the result lacks {' and '.join(lacking)}, which this code measures in the same run "
                 "(measured whole again)")
    if stale:
        # A stale file is replaced whole (a new method or stack never merges with the old one), so
        # the new run also measures every mode and precision the file holds: no page loses them.
        want_modes = list(dict.fromkeys([*modes, *(c["mode"] for c in doc["cells"])]))
        why = f"stale: {stale}"
    else:
        never = [mode for mode in modes if missing_cells(doc, question.gemms, [mode], precisions)]
        outdated = outdated_layer_modes(doc, question, complete_modes(question, modes), precisions)
        failed = failed_modes(doc, complete_modes(question, modes), everything) if rules.retry_failed else []
        steps = [m for m in dict.fromkeys([*outdated, *failed]) if m in LAYER_MODES]
        # The step's GEMM share divides the autocast GEMMs by the step of the same run.
        want_modes = list(dict.fromkeys([*never, *failed, *(["autocast", *steps] if steps else [])]))
        if not want_modes:
            lacking = [m for m in gemm_modes(modes) if not peers_measured(doc, m)] if peers else []
            if not lacking:
                return None
            return Todo([BASELINE], lacking, f"the peers of {', '.join(lacking)} were never measured (a page now "
                        "shows them): the peers alone, merged into the cached result", True, True)
        parts = [f"cells never measured in {', '.join(never)}"] if never else []
        if outdated:
            parts.append(f"the layer step ({', '.join(outdated)}) has cells this code measures and the file "
                         "lacks (with autocast: the step's GEMM share needs one run)")
        if failed:
            cells = failed_cells(doc, failed, everything)
            parts.append("failed: " + ", ".join(f"{mode}/{precision} ({' '.join(reason.split())[:80]})"
                                                for mode, precision, reason in cells)
                         + " (measured again: a failure may be transient)")
        why = "; ".join(parts)
    cached = [c["precision"] for c in doc["cells"] if c["mode"] in want_modes]
    return Todo(list(dict.fromkeys([*everything, *cached])), want_modes, why, peers)


#: What :func:`lacking_blocks` says of a result without the question's model step (a page's answer
#: then rests on one layer's step, and says so).
MODEL_STEP_LACKING = MODEL_STEP


def lacking_blocks(doc: Mapping[str, Any] | Result, question: Question) -> list[str]:
    """What a result of a model question lacks that this code measures in the same run as its layer
    step (issues 32 and 33): the model's step (where
    :func:`gemm_bench.question.model_step.unsupported_reason` has none) and each recipe's step energy
    (where the run sampled power). A result measured before the code measured them is otherwise fresh;
    without this it would stay so, and the pages' "measured with the next refresh" would never come
    true. A model question's run always measures its layer step (:func:`complete_modes`); a result
    without a measured graphed step lacks nothing here.

    Read from the typed result (issue 43: the pages hand theirs, parsed once); a document (the refresh's,
    a test's) is typed first (:func:`gemm_bench.results.typed.parse`, through the invariants when it did
    not come through the door), so a step or a breakdown the door refused is judged as the pages show it:
    failed, or absent."""
    if question.kind != "model" or question.config is None:
        return []
    result = doc if isinstance(doc, Result) else parse(doc)
    graphed = [c for c in result.layer if c.mode == "layer-graphed" and c.measured]
    if not graphed:
        return []
    out = []
    block, config = result.model_step, question.config
    if block is None and model_step_unsupported(config) is None:
        out.append(MODEL_STEP_LACKING)
    elif block is not None and model_step_unsupported(config) is None and not block.answers(config):
        # another vocabulary (left out of the question's hash): its embedding, output layer and loss
        # cannot be recomposed, so the page's vocabulary is measured, never called "fresh" (issue 43)
        out.append(f"{MODEL_STEP_LACKING} at the question's padded vocabulary of {config.padded_vocab_size:,} "
                   f"tokens (the result's was measured at {block.padded_vocab_size})")
    elif block is not None and any(c.breakdown is not None for c in graphed) and any(
            p.measured and p.breakdown is None for p in block.parts):
        # a run that profiled its layer step (its cells carry breakdowns) profiles the model step's parts too
        out.append("the model step's time breakdown")
    sampled = any(g.clock is not None and g.clock.samples for g in result.groups)
    if result.energy is None and sampled:
        out.append("each recipe's step energy")
    return out


def outdated_layer_modes(doc: dict[str, Any], question: Question, modes: Sequence[str],
                         precisions: Sequence[str]) -> list[str]:
    """Layer modes among ``modes`` whose cells this code would measure but the file lacks, in a
    file that holds that mode's step: a precision or routing without a cell, or a cell recorded
    ``unsupported`` although this code can build the step (a tensor-parallel or mixture-of-experts
    step, unsupported before this code built it). A precision the device's recorded support rules
    out is not missing."""
    config = question.config
    if question.kind != "model" or config is None or unsupported_reason(config):
        return []
    support = doc.get("support") or {}
    asked = [p for p in dict.fromkeys([BASELINE, *precisions])
             if not (isinstance(support.get(p), dict) and support[p].get("available") is False)]
    out = []
    for mode in (m for m in modes if m in LAYER_MODES):
        held = {(c["precision"], c.get("routing", "balanced")): c for c in doc.get("layer", []) if c["mode"] == mode}
        if not held:
            continue  # a file measured without its step (``gemm-bench run --modes autocast``) is not re-measured for it
        for precision in asked:
            cells = [held.get((precision, routing)) for routing in routings(config)]
            if any(c is None or (c["status"] == "unsupported") for c in cells):
                out.append(mode)
                break
    return out


def complete_modes(question: Question, modes: Sequence[str]) -> list[str]:
    """The modes a measurement of ``question`` covers: those asked, plus for a model question its
    layer step eager and graphed (both come from one timed group), so step rows exist wherever a
    page may show them."""
    wanted = list(dict.fromkeys(modes))
    if question.kind == "model" and question.config is not None:
        wanted += [m for m in LAYER_MODES if m not in wanted]
    return wanted
