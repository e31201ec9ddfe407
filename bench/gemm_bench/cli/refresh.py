"""``gemm-bench refresh docs/``: measure every question the site asks, on every local GPU.

Why not just ``nox -s docs``? A docs build measures one question at a time on one GPU; a box
with eight GPUs, or a CI job that should only measure, wants the work shared out and no HTML.

1. **Read.** Sphinx reads the site with the extension's ``gemm-questions`` builder, in another
   process (:func:`read_site`): every ``gemm-benchmark`` and ``gemm-benchmark-summary`` directive
   the HTML build runs is found (in included files, MyST ``{eval-rst}`` blocks, any letter case),
   its options parsed by the directive itself, so refresh and build can never disagree about a
   question. This library never imports Sphinx or the extension.
2. **Plan.** Directives asking the same question are merged (one file per question per device);
   for this box's GPU, each question is measured when the cache lacks it, lacks cells a page
   asks for, or holds a stale result: another method version, too old, or (the fleet rule) another
   software stack (:mod:`gemm_bench.results.stack`). The plan is printed with an estimate of the time
   taken from a cached run of the same question, where there is one.
3. **Measure.** One worker process per GPU, pinned with ``CUDA_VISIBLE_DEVICES`` (set before the
   process starts, so the GPU stack only ever sees its one device). The parent keeps the queue of
   questions and hands the next one to whichever worker finishes; workers talk to the parent over
   their own pipes only, so a worker killed at any instant cannot leave a shared lock held. Each
   worker holds its GPU's lock (:func:`gpu_lock_path`, shared with concurrent refreshes and
   builds on the box) while it times, re-reads the cache inside the lock, and stores through
   :meth:`gemm_bench.results.cache.Cache.store` (atomic, merged). Ctrl-C (or a worker's death) stops
   the dispatch, interrupts the workers, and keeps every result already stored.

The measure function is injectable (``measure=``), so the whole pool runs on CPU with fake GPUs
in the tests. Nothing here imports torch: the default measure function does, inside the worker.
"""

from __future__ import annotations

import collections
import contextlib
import dataclasses
import importlib.util
import json
import multiprocessing
import multiprocessing.connection
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any, Protocol

from gemm_bench.measure.phases import CAPTURE, EAGER, PROFILER_START, SPIN_UP, SUPPORT, TIMED, TRACE, WARM_UP
from gemm_bench.question.devices import device_slug, selects
from gemm_bench.question.model_step import unsupported_reason as model_step_unsupported
from gemm_bench.question.precisions import BASELINE, LAYER_MODES, MODES, PRECISION_IDS
from gemm_bench.question.question import Question
from gemm_bench.question.step_plan import unsupported_reason as layer_step_unsupported
from gemm_bench.question.vocabulary import LAYER_STEP, MODEL_STEP
from gemm_bench.report.compare import wrapped
from gemm_bench.report.report import Report
from gemm_bench.results.cache import Cache, CacheError
from gemm_bench.results.merge import PeersMergeError, store_peers
from gemm_bench.results.schema import ResultError
from gemm_bench.results.stack import Rules, Todo, complete_modes, lacking_blocks, remeasure


class Measure(Protocol):
    """``(question, precisions, modes, peers=..., peers_only=...) -> result document``; runs inside
    a worker process (:func:`gemm_bench.measure.runner.measure_question`'s arguments)."""

    def __call__(self, question: Question, precisions: Sequence[str], modes: Sequence[str], *, peers: bool,
                 peers_only: bool) -> dict[str, Any]: ...


class RefreshError(ValueError):
    """Bad input to a refresh (a missing directory, an unknown GPU index); the message says which."""


# ------------------------------------------------------------------------------- reading the site
#: The Sphinx builder of the extension that writes the questions a site asks
#: (``sphinxext/gemm_benchmark/questions_builder.py``), its output file and format.
QUESTIONS_BUILDER = "gemm-questions"
QUESTIONS_FILE = "questions.json"
QUESTIONS_FORMAT = 1


def read_site(srcdir: Path) -> dict[str, Any]:
    """What the site's directives ask: the ``gemm-questions`` builder's JSON.

    Sphinx reads the project in another process (so this library never imports Sphinx or the
    extension): every directive a build runs is found, in included files and MyST ``{eval-rst}``
    blocks too, and its options go through the directive's own parser. Nothing is measured:
    while that builder reads, the directives only record what they ask.
    """
    if importlib.util.find_spec("sphinx") is None:
        raise RefreshError("SRCDIR: refresh reads the pages with Sphinx, which is not installed; install the "
                           "'docs' extra (pip install -e '.[docs]', enough for --dry-run; measuring also needs the "
                           "'gpu' extra: pip install -e '.[docs,gpu]')")
    if not (srcdir / "conf.py").is_file():
        raise RefreshError(f"SRCDIR: {srcdir} has no conf.py; refresh reads the site with its Sphinx configuration")
    with tempfile.TemporaryDirectory(prefix="gemm-questions-") as tmp:
        out = Path(tmp) / "out"
        cmd = [sys.executable, "-m", "sphinx", "-b", QUESTIONS_BUILDER, "-E", "-q", "-d", str(Path(tmp) / "doctrees"),
               str(srcdir), str(out)]
        env = {**os.environ, "GEMM_BENCH_EXECUTION_MODE": "cache"}
        proc = subprocess.run(cmd, capture_output=True, text=True, env=env, stdin=subprocess.DEVNULL)
        if proc.returncode != 0:
            tail = _sphinx_error(proc.stderr)
            hint = (f" (does conf.py enable the gemm_benchmark extension, which provides the {QUESTIONS_BUILDER!r} "
                    "builder?)" if QUESTIONS_BUILDER in proc.stderr else "")
            raise RefreshError(f"SRCDIR: Sphinx could not read {srcdir} (exit status {proc.returncode}): "
                               f"{tail}{hint}")
        try:
            data = json.loads((out / QUESTIONS_FILE).read_text(encoding="utf-8"))
        except (OSError, ValueError) as exc:
            raise RefreshError(f"SRCDIR: the {QUESTIONS_BUILDER} builder wrote no readable {QUESTIONS_FILE} ({exc})") \
                from None
    if not isinstance(data, dict) or data.get("format") != QUESTIONS_FORMAT:
        raise RefreshError(f"SRCDIR: {QUESTIONS_FILE} is not format {QUESTIONS_FORMAT} (is the gemm_benchmark "
                           "extension of another version than gemm-bench?)")
    return data


def _sphinx_error(stderr: str) -> str:
    """The line of Sphinx's output that says what went wrong (its error, else its last lines)."""
    lines = [line.strip() for line in stderr.splitlines() if line.strip()]
    headings = ("sphinx error:", "configuration error:", "extension error:")
    for i, line in enumerate(lines):
        if line.lower().startswith(headings) and i + 1 < len(lines):
            return f"{line} {lines[i + 1]}"
    errors = [line for line in lines if re.match(r"^[\w.]*(Error|Exception): ", line)]
    return errors[-1] if errors else " | ".join(lines[-3:]) or "no message"


def _location(srcdir: Path, entry: Mapping[str, Any]) -> str:
    """``path:line`` of a directive, the path as the pages' (under ``srcdir`` as given)."""
    return f"{srcdir / str(entry['source'])}:{entry['line']}"


# ------------------------------------------------------------------------------- questions
@dataclasses.dataclass(frozen=True)
class Ask:
    """What one directive asks of one question: cells, and on which devices."""

    precisions: tuple[str, ...]
    modes: tuple[str, ...]
    devices: tuple[str, ...]  # selectors; empty: every device
    location: str
    #: The directive shows the peers (its ``:show:`` names them; a summary never does).
    peers: bool = False


@dataclasses.dataclass
class Job:
    """One question, deduplicated across every directive that asks it."""

    question: Question
    asks: list[Ask]

    @property
    def hash(self) -> str:
        return self.question.hash

    def asks_on(self, device_name: str) -> list[Ask]:
        """The directives that show this device (every device, or one selected by name)."""
        return [a for a in self.asks if not a.devices or any(selects(s, device_name) for s in a.devices)]

    def wanted_on(self, device_name: str) -> tuple[list[str], list[str]] | None:
        """(precisions, modes) the pages ask of this device, or None when no page shows it."""
        chosen = self.asks_on(device_name)
        if not chosen:
            return None
        precisions = [p for p in PRECISION_IDS if any(p in a.precisions for a in chosen)]
        modes = [m for m in MODES if any(m in a.modes for a in chosen)]
        return list(dict.fromkeys([BASELINE, *precisions])), modes

    def peers_on(self, device_name: str) -> bool:
        """Whether some page that shows this device shows the question's peers: only then are they
        measured (issue 34), for every mode measured, so each page reads them from one file."""
        return any(a.peers for a in self.asks_on(device_name))


def collect_jobs(srcdir: Path) -> tuple[list[Job], list[str]]:
    """Questions of every directive, deduplicated; and one problem line per invalid directive."""
    data = read_site(srcdir)
    jobs: list[Job] = []
    try:
        for entry in data["questions"]:
            question = Question.from_dict(entry["question"])
            if question.hash != entry["hash"]:
                raise ValueError(f"question {entry['hash']} reads back as {question.hash}")
            asks = [Ask(tuple(a["precisions"]), tuple(a["modes"]), tuple(a["devices"]), _location(srcdir, a),
                        bool(a.get("peers", False))) for a in entry["asks"]]
            jobs.append(Job(question, asks))
        problems = [f"{_location(srcdir, p)}: {p['message']} (skipped; the docs build warns about it too)"
                    for p in data["problems"]]
    except (KeyError, TypeError, ValueError) as exc:
        raise RefreshError(f"SRCDIR: {QUESTIONS_FILE} does not hold what the {QUESTIONS_BUILDER} builder writes "
                           f"({type(exc).__name__}: {exc})") from None
    return jobs, problems


# ------------------------------------------------------------------------------- freshness
def needs_measuring(doc: dict[str, Any] | None, question: Question, precisions: Sequence[str],
                    modes: Sequence[str], local: Mapping[str, str] | None,
                    rules: Rules, *, peers: bool = False) -> Todo | None:
    """What to measure now on this box (:class:`~gemm_bench.results.stack.Todo`): the docs build's
    own rule (stack.remeasure); ``peers``: some page shows the question's peers."""
    return remeasure(doc, question, precisions, modes, local=local, rules=rules, peers=peers)


@dataclasses.dataclass(frozen=True)
class Task:
    """One question to measure on this box's GPU kind."""

    question: Question
    device_name: str
    precisions: tuple[str, ...]
    modes: tuple[str, ...]
    reason: str
    locations: tuple[str, ...]
    #: Seconds, from a cached run of the same question; None where there is none to go by.
    estimate_s: float | None = None
    estimate_source: str = ""
    #: Time the peers too (some page shows them); ``peers_only``: them alone, merged into the cached result.
    peers: bool = False
    peers_only: bool = False
    #: The modes the pages ask (``modes`` may be fewer: those to re-measure): whose peers they show.
    asked_modes: tuple[str, ...] = ()

    @property
    def key(self) -> str:
        return f"{self.question.hash}--{device_slug(self.device_name)}"


#: Seconds a refresh worker takes to start and import torch and Transformer Engine (an H100 box's
#: phase profile of method v4: 13-18 s), added once per GPU to the plan's estimate.
WORKER_START_S = 15.0


def estimate_seconds(reference: dict[str, Any], precisions: Sequence[str], modes: Sequence[str]) -> float | None:
    """Wall seconds a measurement of ``reference``'s question will take.

    A result of method v4 stores the wall time its measurement took (``provenance.measure_s``,
    everything but the process's start): that is the estimate. An older one gives only a lower
    bound: per measured cell, repetitions x launches x its median time; per group the warm-up;
    per run the spin-up (building, compiling and probing are not counted).
    """
    measured = reference["provenance"].get("measure_s")
    if isinstance(measured, (int, float)):
        # measure_s is the Runner's run; phases_s' total is the whole measuring call, which also
        # times the precision plan's step and each recipe's energy after the run (issue 33): on an
        # H100 the plan estimated from measure_s alone read 378 s for a refresh of 429 s.
        total = (reference["provenance"].get("phases_s") or {}).get("total")
        return float(max(measured, total)) if isinstance(total, (int, float)) else float(measured)
    method = reference["provenance"]["method"]
    reps = method.get("repetitions")
    if not isinstance(reps, int):
        return None
    launches = method.get("launches_per_repetition", 1)
    warmup = float(method.get("warmup_s", 0.0))
    report = Report(reference, modes=modes, precisions=precisions)
    seconds = float(method.get("spinup_s", 0.0))
    groups = 0
    for mode in modes:
        for gemm in report.gemms:
            cells = [report.cell(mode, p, gemm) for p in precisions]
            timed = [c.ms for c in cells if c.status == "measured" and c.ms]
            if timed:
                groups += 1
                seconds += sum(timed) * 1e-3 * reps * launches
    return seconds + groups * warmup


#: The key prefix of a peer among a timed group's ``members`` and ``setup_s`` (the runner's).
_PEER_MEMBER = "peer:"

#: The phases of a run that its timed groups' members share (a peer's part of them is its share of
#: the groups' members): warm-up, eager and timed rounds, capture and the cross-check's trace.
_GROUP_PHASES = (WARM_UP, EAGER, CAPTURE, TIMED, PROFILER_START, TRACE)
#: ... and the fixed cost of any run, a peers-only one too: support checks and provenance, spin-up.
_RUN_PHASES = (SUPPORT, SPIN_UP)


def peers_seconds(doc: Mapping[str, Any]) -> float | None:
    """Wall seconds the peers took of ``doc``'s run, or None where it timed none (or recorded no groups).

    Their building and first calls (``setup_s`` of each group: torchao's compilation, the bulk of an
    author's first build) plus their share of the members of the timed groups times the groups'
    phases (``provenance.phases_s``).
    """
    groups = [g for g in doc.get("groups", []) if isinstance(g, Mapping)]
    setups = [(k, float(v)) for g in groups for k, v in (g.get("setup_s") or {}).items()
              if isinstance(v, (int, float))]
    if not any(k.startswith(_PEER_MEMBER) for k, _ in setups):
        return None
    setup = sum(v for k, v in setups if k.startswith(_PEER_MEMBER))
    members = [m for g in groups for m in g.get("members", [])]
    share = sum(m.startswith(_PEER_MEMBER) for m in members) / len(members) if members else 0.0
    phases = doc["provenance"].get("phases_s") or {}
    return setup + share * sum(float(phases.get(name, 0.0)) for name in _GROUP_PHASES)


def _fixed_seconds(doc: Mapping[str, Any]) -> float:
    phases = doc["provenance"].get("phases_s") or {}
    return sum(float(phases.get(name, 0.0)) for name in _RUN_PHASES)


def _peers_adjusted(estimate: float | None, reference: Mapping[str, Any], documents: Sequence[Mapping[str, Any]],
                    *, peers: bool, peers_only: bool) -> tuple[float | None, str]:
    """``estimate`` (from ``reference``'s whole run) for a run with or without the peers, or of the
    peers alone; and what the estimate says of it. The peers' seconds come from ``reference`` or,
    where it timed none, from another cached run of the question that did."""
    here = peers_seconds(reference)
    timed = here if here is not None else next(
        (t for t in (peers_seconds(d) for d in documents) if t is not None), None)
    if peers_only:
        if timed is None:
            return None, ""
        return timed + _fixed_seconds(reference), ", the peers' part of it"
    if estimate is None:
        return None, ""
    if here is not None and not peers:
        return max(estimate - here, 0.0), ", less its peers"
    if here is None and peers and timed is not None:
        return estimate + timed, ", plus the peers of another run"
    return estimate, ""


def make_plan(jobs: Sequence[Job], cache: Cache, device_name: str, local: Mapping[str, str] | None,
              rules: Rules) -> tuple[list[Task], list[str]]:
    """The tasks for this box's GPU, and one line per question that needs nothing (for the plan).

    A question's peers are measured when some page that shows this device shows them
    (:meth:`Job.peers_on`); the estimate counts them in or out (:func:`peers_seconds`)."""
    tasks: list[Task] = []
    fresh: list[str] = []
    for job in jobs:
        wanted = job.wanted_on(device_name)
        if wanted is None:
            continue
        precisions, modes = wanted
        peers = job.peers_on(device_name)
        lookup = cache.lookup(job.hash)
        current = next((d for d in lookup.documents if device_slug(d["device"]["name"]) == device_slug(device_name)),
                       None)
        todo = needs_measuring(current, job.question, precisions, modes, local, rules, peers=peers)
        # Only the pages that show this device: a directive restricted to other devices asks nothing of it.
        locations = tuple(a.location for a in job.asks_on(device_name))
        if todo is None:
            fresh.append(f"{job.hash} ({job.question.describe()}): fresh")
            continue
        # A run that recorded its wall time first (this device's, then any other's): it is the estimate.
        # A run that lacks what this code measures in the same run (the model step, the energy: an older
        # run) times less than this refresh will: a run that has them comes first, even another GPU's
        # (reader pass 4: the H200 plan said 3.0 min from runs without the model step; the H100's took 398 s).
        lacks = {id(d): lacking_blocks(d, job.question) for d in lookup.documents}
        timed = [d for d in lookup.documents if "measure_s" in d["provenance"]]
        candidates = sorted(timed, key=lambda d: (bool(lacks[id(d)]), d is not current, d["device"]["name"])) or (
            [current] if current is not None else sorted(lookup.documents, key=lambda d: d["device"]["name"]))
        reference = next(iter(candidates), None)
        lacked = lacks[id(reference)] if reference is not None else []
        estimate = estimate_seconds(reference, todo.precisions, todo.modes) if reference is not None else None
        source = ""
        if reference is not None:
            estimate, peers_part = _peers_adjusted(estimate, reference, lookup.documents, peers=todo.peers,
                                                   peers_only=todo.peers_only)
            source = (f"cached run on {reference['device']['name']}"
                      + (f", a lower bound: that run lacked {' and '.join(lacked)}" if lacked
                         else ", its measure_s" if "measure_s" in reference["provenance"] else ", a lower bound")
                      + peers_part)
        tasks.append(Task(job.question, device_name, tuple(todo.precisions), tuple(todo.modes), todo.why, locations,
                          estimate, source, todo.peers, todo.peers_only, tuple(modes)))
    return tasks, fresh


def makespan(estimates: Sequence[float], gpus: int) -> float:
    """Seconds until the last of ``estimates`` is done on ``gpus`` GPUs, dispatched as :func:`run_pool`
    does: in plan order, each to the GPU that is free first. Never less than the longest question
    (a question runs on one GPU) nor than the total shared evenly."""
    loads = [0.0] * max(gpus, 1)
    for seconds in estimates:
        loads[loads.index(min(loads))] += seconds
    return max(loads)


def questions_seconds(tasks: Sequence[Task], gpus: Sequence[GpuSlot]) -> tuple[float, bool]:
    """(seconds until the questions are measured, worker start included; whether that is a lower
    bound: a question without an estimate, or one estimated from a run without its wall time)."""
    if not tasks:
        return 0.0, False
    known = [t.estimate_s for t in tasks if t.estimate_s is not None]
    lower = any(t.estimate_s is not None and "measure_s" not in t.estimate_source for t in tasks)
    return makespan(known, len(gpus)) + WORKER_START_S, len(known) < len(tasks) or lower


def describe_total(tasks: Sequence[Task], studies_: Sequence[StudyTask], gpus: Sequence[GpuSlot]) -> str | None:
    """The whole refresh's estimate: the questions (on every GPU) and then the studies (one after the
    other on the first GPU, :func:`run_studies`); None when only one of the two has work (its own line
    says it). Before, the plan said "0.6 min" above ~186 s of studies it left out."""
    if not tasks or not studies_:
        return None
    questions, at_least = questions_seconds(tasks, gpus)
    studied = sum(t.estimate_s or 0.0 for t in studies_)
    at_least = at_least or any(t.estimate_s is None for t in studies_)
    return (f"estimated time in all: {'at least ' if at_least else ''}{(questions + studied) / 60:.1f} min "
            f"(questions {questions / 60:.1f} min, then studies {studied / 60:.1f} min)")


def measured_blocks(task: Task) -> tuple[list[str], list[str]]:
    """What a refresh of ``task`` measures, block by block, as the plan prints it; and what it does not,
    with why. The blocks are those of :func:`gemm_bench.measure.runner.measure_question` (the one
    measuring path of a refresh), decided by the same rules: the per-GEMM modes asked; for a model
    question its layer step, eager and CUDA-graphed (:func:`~gemm_bench.results.stack.complete_modes`),
    with its breakdown; the model's step where
    :func:`gemm_bench.question.model_step.unsupported_reason` has none; after the run each recipe's step
    energy and the precision plan (:func:`gemm_bench.measure.step_extras.measure_plan_and_energy`); the
    SQNRs; the peers where a page shows them. A peers-only task measures the peers alone.

    Before, the plan listed the modes asked only ("autocast, prequant") while the refresh also measured
    the steps, the model step, the energy and the plan: a reader could not tell what minutes it would take."""
    gemm_modes = [MODE_WORDS[m] for m in task.modes if m in MODES]
    if task.peers_only:
        return [f"the peers of the {' and '.join(gemm_modes) or 'asked modes'} alone, merged into the cached "
                "result"], []
    blocks = list(gemm_modes)
    skipped: list[str] = []
    config = task.question.config
    layer = [m for m in complete_modes(task.question, task.modes) if m in LAYER_MODES]
    if layer:
        why_not = layer_step_unsupported(config) if config is not None else None
        if why_not is None:
            blocks.append(f"{LAYER_STEP} (eager and CUDA-graphed, with its time breakdown)")
            model_why_not = model_step_unsupported(config)
            if model_why_not is None:
                blocks.append(f"{MODEL_STEP} (its parts at G = 1 and the question's G, with their breakdown)")
            else:
                skipped.append(f"{MODEL_STEP} ({_clause(model_why_not)})")
            blocks += ["each recipe's step energy (where the GPU's power can be sampled)",
                       "the precision plan (its own step when it mixes recipes)"]
        else:
            skipped.append(f"{LAYER_STEP} and what rests on it ({_clause(why_not)})")
    blocks.append("SQNR per GEMM pass")
    if task.peers:
        blocks.append("the peers")
    blocks.append("clock and power telemetry, the profiler's cross-check")
    return blocks, skipped


def _clause(sentence: str) -> str:
    """A sentence ("The model's step needs ...") as a clause inside parentheses."""
    return (sentence[:1].lower() + sentence[1:]).rstrip(".")


#: The per-GEMM modes as the plan names them.
MODE_WORDS = {"autocast": "autocast GEMMs", "prequant": "pre-quantized GEMMs"}


def describe_plan(tasks: Sequence[Task], fresh: Sequence[str], gpus: Sequence[GpuSlot]) -> str:
    gpu_text = ", ".join(f"{g.index} ({g.name})" for g in gpus)
    lines = [f"gemm-bench refresh: {len(tasks)} question(s) to measure on {len(gpus)} GPU(s): {gpu_text}"]
    for task in tasks:
        estimate = (f"~{task.estimate_s:.0f} s (from the {task.estimate_source})"
                    if task.estimate_s is not None else "no estimate (no cached run of this question)")
        lines.append(f"  {task.question.hash}  {task.question.describe()}")
        what = "the peers alone" if task.peers_only else ", ".join(task.precisions)
        peers = "" if task.peers_only else (" | with peers" if task.peers else " | no peers")
        lines.append(f"      {what} | {', '.join(task.modes)}{peers} | {task.reason} | {estimate}")
        blocks, skipped = measured_blocks(task)
        lines.append(f"      measures: {'; '.join(blocks)}")
        if skipped:
            lines.append(f"      not measured: {'; '.join(skipped)}")
        lines.append(f"      asked at {', '.join(task.locations)}")
    if tasks:
        total, at_least = questions_seconds(tasks, gpus)
        unknown = len([t for t in tasks if t.estimate_s is None])
        lines.append(f"estimated time for the questions: {'at least ' if at_least else ''}{total / 60:.1f} min "
                     f"across {len(gpus)} GPU(s), worker start included"
                     + (f", plus {unknown} question(s) without an estimate" if unknown else ""))
    if fresh:
        lines.append(f"{len(fresh)} question(s) already fresh for this GPU")
    return wrapped(lines)


# ------------------------------------------------------------------------------- GPUs and locks
@dataclasses.dataclass(frozen=True)
class GpuSlot:
    """One local GPU: its index (for ``CUDA_VISIBLE_DEVICES``), name, and a stable id for its lock."""

    index: int
    name: str
    uuid: str = ""

    @property
    def lock_key(self) -> str:
        return re.sub(r"[^A-Za-z0-9_.-]", "_", self.uuid or f"index{self.index}")


def probe_gpus() -> list[GpuSlot]:
    """This box's GPUs through ``nvidia-smi`` (no torch in the parent: workers own the GPU stack)."""
    exe = shutil.which("nvidia-smi")
    if not exe:
        return []
    try:
        out = subprocess.run([exe, "--query-gpu=index,name,uuid", "--format=csv,noheader"], capture_output=True,
                             text=True, timeout=30, check=True).stdout
    except (OSError, subprocess.SubprocessError):
        return []
    slots = []
    for line in out.strip().splitlines():
        parts = [p.strip() for p in line.split(",")]
        if len(parts) >= 3 and parts[0].isdigit():
            slots.append(GpuSlot(int(parts[0]), parts[1], parts[2]))
    return slots


def select_gpus(available: Sequence[GpuSlot], selection: str | None, *, dry_run: bool = False) -> list[GpuSlot]:
    """``all`` (``None``: the flag not given) or a comma list of indices (``--gpus 0,1``); one kind of
    GPU per refresh. With no GPU here, the message names the flag the user gave (``--gpus`` only if
    given) and what to do instead: plan for a GPU kind from here with ``--dry-run --device``."""
    if not available:
        instead = ("to see the plan for a GPU kind from this machine, add --device NAME (h100, h200, b200, ...)"
                   if dry_run else "run it on a GPU box, or see the plan from here with --dry-run --device NAME "
                   "(h100, h200, b200, ...)")
        where = f"--gpus {selection}: " if selection is not None else ("--dry-run: " if dry_run else "")
        raise RefreshError(f"{where}no NVIDIA GPU found on this machine (nvidia-smi lists none); {instead}")
    text = (selection or "all").strip().lower()
    if text == "all":
        chosen = list(available)
    else:
        by_index = {g.index: g for g in available}
        chosen = []
        for item in (s.strip() for s in text.split(",")):
            if not item.isdigit() or int(item) not in by_index:
                raise RefreshError(f"--gpus: {item!r} is not a GPU index here; choose from "
                                   f"{', '.join(str(i) for i in by_index)} or 'all'")
            chosen.append(by_index[int(item)])
        chosen = list(dict.fromkeys(chosen))
    names = sorted({g.name for g in chosen})
    if len(names) > 1:
        raise RefreshError(f"--gpus: the selected GPUs are of different kinds ({', '.join(names)}); "
                           "refresh one kind at a time with --gpus INDEX,...")
    return chosen


def default_lock_dir() -> Path:
    """Box-wide, so two checkouts (or a build and a refresh) never time on one GPU at once."""
    return Path(tempfile.gettempdir()) / "gemm-bench-gpu-locks"


def gpu_lock_path(gpu: GpuSlot, lock_dir: Path | None = None) -> Path:
    return (lock_dir or default_lock_dir()) / f"gpu-{gpu.lock_key}.lock"


@contextlib.contextmanager
def pinned(index: int | str) -> Iterator[None]:
    """``CUDA_VISIBLE_DEVICES=index`` (or a comma list of indices) for a child started inside the
    block (spawn copies the env)."""
    old = os.environ.get("CUDA_VISIBLE_DEVICES")
    os.environ["CUDA_VISIBLE_DEVICES"] = str(index)
    try:
        yield
    finally:
        if old is None:
            os.environ.pop("CUDA_VISIBLE_DEVICES", None)
        else:
            os.environ["CUDA_VISIBLE_DEVICES"] = old


def measure_on_gpu(question: Question, precisions: Sequence[str], modes: Sequence[str], *, peers: bool,
                   peers_only: bool) -> dict[str, Any]:
    """The real measure function: :func:`gemm_bench.measure.runner.measure_question`, imported in
    the worker that owns the GPU (the docs build on a GPU box calls the same function)."""
    from gemm_bench.measure.runner import measure_question
    from gemm_bench.report.precision_plan import plan_to_measure

    return measure_question(question, precisions, modes, peers=peers, peers_only=peers_only,
                            planner=plan_to_measure)


# ------------------------------------------------------------------------------- the pool
@dataclasses.dataclass(frozen=True)
class WorkerSetup:
    gpu: GpuSlot
    cache_dir: Path
    lock_path: Path
    measure: Measure
    local: dict[str, str] | None
    rules: Rules


class _Interrupt:
    """A worker's Ctrl-C, remembered: a KeyboardInterrupt can be swallowed by a library callback
    (JAX's garbage-collection callback catches it and prints "Exception ignored"; on the GPU machine
    a measurement then went on and was stored), so the worker stores nothing once SIGINT arrived,
    whatever became of the exception. One KeyboardInterrupt per worker: Ctrl-C reaches it from the
    terminal's process group and again from the pool's clean-up, and a second one raised inside the
    first one's handling would escape as a traceback (the parent kills a worker that does not stop)."""

    received = False

    @classmethod
    def handler(cls, signum: int, frame: object) -> None:
        cls.received = True
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        raise KeyboardInterrupt


#: A worker's exit code for "done with this question, start a fresh worker for the next one".
RESTART_EXIT = 75


def _holds_failed_captures() -> bool:
    """Whether this process keeps the graphs of a failed CUDA graph capture alive (only if the
    timer was imported: a fake measure never imports torch)."""
    timing = sys.modules.get("gemm_bench.measure.timing")
    return timing is not None and timing.holds_failed_captures()


def _measure_and_store(cache: Cache, setup: WorkerSetup, task: Task) -> Path:
    """Measure ``task`` and store it: merged as a whole run, or (``peers_only``) its peers merged
    into the cached result. A run with peers that left another mode's peers missing (it measured
    some modes only) is followed by those peers alone, so every page that shows peers has them."""
    planned: Todo | None = Todo(list(task.precisions), list(task.modes), task.reason, task.peers, task.peers_only)
    path = cache.path_for(task.question.hash, task.device_name)
    ran_peers_only = False
    while planned is not None and not ran_peers_only:
        ran_peers_only = planned.peers_only
        doc = setup.measure(task.question, planned.precisions, planned.modes, peers=planned.peers,
                            peers_only=planned.peers_only)
        if _Interrupt.received:
            raise KeyboardInterrupt
        path = store_peers(cache, doc) if planned.peers_only else cache.store(doc)
        if not task.peers:
            break
        current = next((d for d in cache.lookup(task.question.hash).documents
                        if device_slug(d["device"]["name"]) == device_slug(task.device_name)), None)
        unforced = dataclasses.replace(setup.rules, force=False, retry_failed=False)
        planned = needs_measuring(current, task.question, task.precisions, task.asked_modes or task.modes,
                                  setup.local, unforced, peers=True)
        if planned is not None and not planned.peers_only:
            planned = None  # anything else waits for the next refresh (a repeated failure, say)
    return path


def _worker(conn: multiprocessing.connection.Connection, setup: WorkerSetup) -> None:
    """A worker's life: take a task, lock the GPU, re-check the cache, measure, store, report."""
    from filelock import FileLock

    signal.signal(signal.SIGINT, _Interrupt.handler)
    cache = Cache(setup.cache_dir)
    setup.lock_path.parent.mkdir(parents=True, exist_ok=True)
    try:
        while True:
            task: Task | None = conn.recv()
            if task is None:
                return
            conn.send(("start", task.key, os.getpid()))
            started = time.monotonic()
            with FileLock(str(setup.lock_path)):
                current = next((d for d in cache.lookup(task.question.hash).documents
                                if device_slug(d["device"]["name"]) == device_slug(task.device_name)), None)
                unforced = dataclasses.replace(setup.rules, force=False)
                if current is not None and not setup.rules.force and needs_measuring(
                        current, task.question, task.precisions, task.modes, setup.local, unforced,
                        peers=task.peers) is None:
                    conn.send(("skipped", task.key, "another process measured it meanwhile"))
                    continue
                try:
                    path = _measure_and_store(cache, setup, task)
                except (ResultError, PeersMergeError) as exc:
                    conn.send(("failed", task.key, f"the measured result is invalid: {exc}"))
                    continue
            if _holds_failed_captures():
                # The graphs of a failed capture (and so their memory pool) live until the process
                # ends (timing._FAILED_CAPTURES): a fresh worker measures the rest, so one question's
                # out-of-memory capture cannot run the next questions out of memory too.
                conn.send(("stored", task.key, str(path), time.monotonic() - started, "restart"))
                sys.exit(RESTART_EXIT)
            conn.send(("stored", task.key, str(path), time.monotonic() - started))
    except KeyboardInterrupt:
        sys.exit(130)
    except (EOFError, BrokenPipeError):
        sys.exit(1)  # the parent is gone: stop measuring
    finally:
        # Leaving: a late Ctrl-C has nothing left to stop (it would only print "Exception ignored"
        # from the interpreter's shutdown).
        signal.signal(signal.SIGINT, signal.SIG_IGN)


class Progress(Protocol):
    def start(self, total: int) -> None: ...
    def event(self, text: str, done: int) -> None: ...
    def stop(self) -> None: ...


class PlainProgress:
    """One line per event: logs of CI jobs and pipes."""

    def __init__(self, stream: Any = None) -> None:
        self.stream = stream or sys.stderr
        self.total = 0

    def start(self, total: int) -> None:
        self.total = total

    def event(self, text: str, done: int) -> None:
        print(f"[{done}/{self.total}] {text}", file=self.stream, flush=True)

    def stop(self) -> None:
        pass


class RichProgress:
    """A live bar on a terminal (rich, imported only when there is a terminal to draw on)."""

    def __init__(self) -> None:
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

        self._progress = Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                                  TimeElapsedColumn(), transient=False)
        self._task: Any = None

    def start(self, total: int) -> None:
        self._progress.start()
        self._task = self._progress.add_task("measuring", total=total)

    def event(self, text: str, done: int) -> None:
        self._progress.console.print(text)
        self._progress.update(self._task, completed=done)

    def stop(self) -> None:
        self._progress.stop()


def default_progress() -> Progress:
    if sys.stderr.isatty():
        try:
            return RichProgress()
        except ImportError:
            pass
    return PlainProgress()


@dataclasses.dataclass
class Outcome:
    stored: list[str] = dataclasses.field(default_factory=list)
    skipped: list[str] = dataclasses.field(default_factory=list)
    failed: list[str] = dataclasses.field(default_factory=list)
    not_started: list[str] = dataclasses.field(default_factory=list)
    interrupted: bool = False

    @property
    def ok(self) -> bool:
        return not self.failed and not self.not_started and not self.interrupted


#: Workers of one GPU that may die mid-question before the refresh stops giving that GPU work
#: (a GPU that kills every process is broken; one question that does is that question's failure).
MAX_WORKER_DEATHS = 3


def run_pool(tasks: Sequence[Task], gpus: Sequence[GpuSlot], *, cache_dir: Path, measure: Measure = measure_on_gpu,
             local: dict[str, str] | None = None, rules: Rules = Rules(), lock_dir: Path | None = None,
             progress: Progress | None = None) -> Outcome:
    """Share ``tasks`` out over one worker process per GPU; stop cleanly on Ctrl-C. A worker that dies
    mid-question fails that question and is replaced (up to :data:`MAX_WORKER_DEATHS` per GPU)."""
    progress = progress or PlainProgress()
    outcome = Outcome()
    if not tasks:
        return outcome
    ctx = multiprocessing.get_context("spawn")  # never fork a process that may hold a CUDA context
    pending = collections.deque(tasks)
    workers: dict[int, tuple[Any, multiprocessing.connection.Connection]] = {}
    inflight: dict[int, Task | None] = {}
    slots = {gpu.index: gpu for gpu in gpus[: len(tasks)]}
    deaths: collections.Counter[int] = collections.Counter()

    def start_worker(gpu: GpuSlot) -> None:
        parent_end, child_end = ctx.Pipe()
        setup = WorkerSetup(gpu, cache_dir, gpu_lock_path(gpu, lock_dir), measure, local, rules)
        with pinned(gpu.index):
            proc = ctx.Process(target=_worker, args=(child_end, setup), name=f"gemm-bench-gpu{gpu.index}")
            proc.start()
        child_end.close()
        workers[gpu.index] = (proc, parent_end)

    def replace_worker(index: int) -> None:
        """A fresh worker for a GPU whose worker exited, handed the GPU's next task."""
        workers[index][1].close()
        start_worker(slots[index])
        dispatch(index)

    for gpu in slots.values():
        start_worker(gpu)
    stopping = False
    restore: Any = None  # the SIGINT handler to put back after an interrupted clean-up
    progress.start(len(tasks))
    done = 0

    def dispatch(index: int) -> None:
        _, conn = workers[index]
        task = pending.popleft() if pending and not stopping else None
        inflight[index] = task
        with contextlib.suppress(BrokenPipeError, OSError):
            conn.send(task)

    def receive(index: int) -> None:
        """Handle every message waiting from one worker; hand it its next task after each result."""
        nonlocal done
        _, conn = workers[index]
        while not conn.closed and conn.poll():
            try:
                message = conn.recv()
            except (EOFError, OSError):
                conn.close()
                return
            kind, key = message[0], message[1]
            if kind == "start":
                continue
            done += 1
            if kind == "stored":
                outcome.stored.append(message[2])
                progress.event(f"GPU {index}: stored {Path(message[2]).name} ({message[3]:.0f} s)", done)
                if message[4:] == ("restart",):
                    inflight[index] = None  # the worker exits; its successor gets the next task
                    continue
            elif kind == "skipped":
                outcome.skipped.append(key)
                progress.event(f"GPU {index}: {key} skipped: {message[2]}", done)
            else:
                outcome.failed.append(f"{key}: {message[2]}")
                progress.event(f"GPU {index}: {key} FAILED: {message[2]}", done)
            dispatch(index)

    try:
        for index in workers:
            dispatch(index)
        # A worker that died holding a task is waited on too: the loop once ended when the last
        # worker's death came between two looks (not alive, nothing to read), and its question was
        # then neither failed nor left unstarted (seen in CI: 2 of 3 deaths reported).
        def holding(i: int) -> bool:
            return inflight.get(i) is not None

        while any(proc.is_alive() or holding(i) for i, (proc, _) in workers.items()) or any(
                conn.poll() for _, conn in workers.values() if not conn.closed):
            live = {conn: i for i, (_, conn) in workers.items() if not conn.closed}
            sentinels = {proc.sentinel: i for i, (proc, _) in workers.items() if proc.is_alive() or holding(i)}
            ready = multiprocessing.connection.wait([*live, *sentinels], timeout=1.0)
            for item in ready:
                if item in live:
                    receive(live[item])
            for item in ready:
                if item in sentinels:
                    index = sentinels[item]
                    proc, conn = workers[index]
                    proc.join()
                    receive(index)  # what it sent just before it exited
                    lost = inflight.get(index)
                    if lost is None and proc.exitcode == RESTART_EXIT and pending and not stopping:
                        replace_worker(index)
                        continue
                    if lost is not None and proc.exitcode == 0:  # gone without a word about its task
                        outcome.failed.append(f"{lost.key}: the worker for GPU {index} exited without a result")
                        inflight[index] = None
                        done += 1
                        continue
                    if lost is not None and proc.exitcode != 0:
                        outcome.failed.append(f"{lost.key}: the worker for GPU {index} exited with code "
                                              f"{proc.exitcode} while measuring it; nothing of it was stored")
                        inflight[index] = None
                        done += 1
                        deaths[index] += 1
                        interrupted = proc.exitcode in (130, -signal.SIGINT)
                        if not interrupted and not stopping and pending and deaths[index] < MAX_WORKER_DEATHS:
                            # One question that kills its process (a CUDA abort in a library) costs
                            # that question only: a fresh worker takes the GPU's next question.
                            progress.event(f"GPU {index}: worker exited ({proc.exitcode}) measuring {lost.key}; "
                                           "starting a new worker for the rest", done)
                            replace_worker(index)
                            continue
                        progress.event(f"GPU {index}: worker exited ({proc.exitcode}); stopping", done)
                        stopping = True
                        if interrupted:
                            outcome.interrupted = True
                        for other, (_, other_conn) in workers.items():
                            if other != index and inflight.get(other) is None:
                                with contextlib.suppress(BrokenPipeError, OSError):
                                    other_conn.send(None)
    except KeyboardInterrupt:
        # Ctrl-C reaches the whole process group, and `timeout -s INT` signals the command and then
        # its group: a second SIGINT must not cut this clean-up short (it did on the GPU machine:
        # the CLI said the cache was unchanged while a worker went on and stored a result).
        if threading.current_thread() is threading.main_thread():
            restore = signal.signal(signal.SIGINT, signal.SIG_IGN)
        outcome.interrupted = True
        stopping = True
        for proc, _ in workers.values():
            if proc.is_alive() and proc.pid is not None:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(proc.pid, signal.SIGINT)  # raises KeyboardInterrupt in the worker: no store
        for index, (proc, _) in workers.items():
            proc.join(timeout=30)
            if proc.is_alive():
                proc.kill()
                proc.join()
            task = inflight.get(index)
            if task is not None:
                outcome.failed.append(f"{task.key}: interrupted")
    finally:
        progress.stop()
        for proc, conn in workers.values():
            conn.close()
            if proc.is_alive():
                proc.join(timeout=5)
        if restore is not None:
            signal.signal(signal.SIGINT, restore)
    outcome.not_started = [t.key for t in pending]
    return outcome


# ------------------------------------------------------------------------------- the command
# ------------------------------------------------------------------------------- studies
@dataclasses.dataclass(frozen=True)
class StudyTask:
    """One study (loss parity, dynamic range, layout search, tp-comm) to measure on this box's GPU kind;
    ``gpus``: how many of the refresh's GPUs it runs on (a study of several GPUs takes them all)."""

    name: str
    reason: str
    estimate_s: float | None
    gpus: int = 1


@dataclasses.dataclass(frozen=True)
class StudySkip:
    """A study the refresh cannot or will not measure on this box, and why (said in the plan)."""

    name: str
    why: str


def measured_on_gpus(doc: Mapping[str, Any] | None) -> int:
    """How many GPUs a stored study's run used (its method's ``gpus``; 1 where it does not say)."""
    if doc is None:
        return 0
    gpus = doc.get("provenance", {}).get("method", {}).get("gpus", 1)
    return gpus if isinstance(gpus, int) and not isinstance(gpus, bool) and gpus > 0 else 1


def _emulated(doc: Mapping[str, Any] | None) -> str | None:
    """Why a stored study of this GPU kind is stale on a box of that very kind: it was measured on
    another GPU with this one's capacity emulated (the H100's layout search, run on an H200 with the
    allocator capped); a real GPU of the kind measures it for real. None otherwise."""
    data = doc.get("data") if doc is not None else None
    if isinstance(data, Mapping) and data.get("emulated") is True:
        return f"emulated on an {data.get('measured_on', 'other GPU')}: this box measures it for real"
    return None


def plan_studies(cache_dir: Path, device_name: str, local: Mapping[str, str] | None,
                 rules: Rules, *, force: bool = False, gpus: int = 1,
                 skipped: list[StudySkip] | None = None) -> list[StudyTask]:
    """Every registered study that is missing or stale on this device (the stack and age rules of
    the questions), or every one with ``force`` (``--force-studies``: ``--force`` re-measures the
    questions only, since a study does not depend on them and costs minutes). A corrupt study file
    is measured again.

    A study of several GPUs (:attr:`Study.min_gpus`: tp-comm) is planned on a refresh of at least
    that many GPUs (``gpus``), and runs on all of them (issue 42 item 6: the refresh measures the
    multi-GPU parts with the box's GPUs). It is never planned where it would lose data: a stored
    study of this GPU kind measured on more GPUs than this refresh has (tp-comm of a 4-GPU box holds
    TP 4, which a 2-GPU box cannot measure) is kept, even with ``force``. Each study not planned for
    either reason is appended to ``skipped`` with why, for the plan to say."""
    from gemm_bench.measure.studies import load_registry
    from gemm_bench.results import studies

    tasks = []
    for name, study in sorted(load_registry().items()):
        if study.min_gpus > gpus:
            if skipped is not None:
                skipped.append(StudySkip(name, f"needs {study.min_gpus} GPUs, this refresh has {gpus}: "
                                               f"refresh on a box of {study.min_gpus} or more (--gpus all)"))
            continue
        stored = studies.stored_study(cache_dir, name, device_name)
        current = stored.document
        wider = measured_on_gpus(current)
        if study.min_gpus > 1 and wider > gpus:
            if skipped is not None:
                skipped.append(StudySkip(name, f"kept: its stored run used {wider} GPUs and this refresh has "
                                               f"{gpus}, so measuring it here would lose what only {wider} "
                                               "GPUs measure"))
            continue
        why = ("forced" if force else f"unreadable: {stored.unreadable.problem}" if stored.unreadable
               else _emulated(current)
               or studies.staleness(current, local, rules.stale_when, max_age_days=rules.max_age_days))
        if why is None:
            continue
        timed = [d["provenance"]["method"].get("measure_s")
                 for d in sorted(stored.documents, key=lambda d: d is not current)]
        estimate = next((float(t) for t in timed if isinstance(t, (int, float))), None)
        tasks.append(StudyTask(name, why, estimate, gpus if study.min_gpus > 1 else 1))
    return tasks


def describe_studies(tasks: Sequence[StudyTask], skipped: Sequence[StudySkip] = ()) -> str:
    lines = ([f"studies: {len(tasks)} to measure after the questions"] if tasks
             else ["studies: all fresh for this GPU"])
    lines += [f"  {t.name}: {t.reason} | on {'the first GPU' if t.gpus == 1 else f'{t.gpus} GPUs'} | "
              + (f"~{t.estimate_s:.0f} s (its last run)" if t.estimate_s is not None
                 else "no estimate (never measured)") for t in tasks]
    lines += [f"  {s.name}: not measured here: {s.why}" for s in skipped]
    if tasks:
        unknown = [t for t in tasks if t.estimate_s is None]
        lines.append(f"estimated time for the studies: {'at least ' if unknown else ''}"
                     f"{sum(t.estimate_s or 0.0 for t in tasks) / 60:.1f} min, one after the other")
    return wrapped(lines)


def study_command(name: str, cache_dir: Path) -> list[str]:
    """The process that measures one study: ``gemm-bench study NAME --cache-dir DIR``."""
    return [sys.executable, "-m", "gemm_bench.cli", "study", name, "--cache-dir", str(cache_dir)]


@contextlib.contextmanager
def holding(gpus: Sequence[GpuSlot], lock_dir: Path | None) -> Iterator[None]:
    """Every one of ``gpus``' locks, in index order (so two refreshes never deadlock), and
    ``CUDA_VISIBLE_DEVICES`` set to them for a child started inside the block."""
    from filelock import FileLock

    with contextlib.ExitStack() as stack:
        for gpu in sorted(gpus, key=lambda g: g.index):
            lock = gpu_lock_path(gpu, lock_dir)
            lock.parent.mkdir(parents=True, exist_ok=True)
            stack.enter_context(FileLock(str(lock)))
        stack.enter_context(pinned(",".join(str(g.index) for g in gpus)))
        yield


def run_studies(tasks: Sequence[StudyTask], gpus: Sequence[GpuSlot], *, cache_dir: Path, lock_dir: Path | None = None,
                out: Callable[[str], None] = print,
                command: Callable[[str, Path], list[str]] = study_command) -> Outcome:
    """Each study in its own process (``command``: :func:`study_command`), a study of one GPU on the
    first of ``gpus`` and a study of several on the first ``task.gpus`` of them, holding their locks;
    a study that fails is reported and the cache keeps what it had (the store is atomic)."""
    outcome = Outcome()
    for task in tasks:
        started = time.monotonic()
        with holding(list(gpus)[:max(1, task.gpus)], lock_dir):
            try:
                done = subprocess.run(command(task.name, cache_dir), capture_output=True, text=True, check=False)
            except KeyboardInterrupt:
                outcome.interrupted = True
                outcome.not_started += [t.name for t in tasks[tasks.index(task):]]
                return outcome
        took = time.monotonic() - started
        if done.returncode == 0:
            outcome.stored.append(task.name)
            out(f"study {task.name}: stored ({took:.0f} s)")
        else:
            tail = " | ".join((done.stderr or done.stdout).strip().splitlines()[-3:])
            outcome.failed.append(f"study {task.name}: exit {done.returncode}: {tail}")
            out(f"study {task.name}: FAILED (exit {done.returncode}): {tail}")
    return outcome


def refresh(srcdir: Path, *, cache_dir: Path | None = None, gpus: Sequence[GpuSlot], measure: Measure = measure_on_gpu,
            local: dict[str, str] | None = None, rules: Rules = Rules(), dry_run: bool = False,
            lock_dir: Path | None = None, progress: Progress | None = None,
            out: Callable[[str], None] = print, with_studies: bool = True, force_studies: bool = False) -> Outcome:
    """Read the site, plan (printed through ``out``), and unless ``dry_run`` measure on ``gpus``: the
    questions first, then the studies that are stale on this GPU kind (``with_studies``; every
    study with ``force_studies``)."""
    if not srcdir.is_dir():
        raise RefreshError(f"SRCDIR: {srcdir} is not a directory")
    cache = Cache(cache_dir or srcdir / "_gemm_cache")
    jobs, problems = collect_jobs(srcdir)
    for problem in problems:
        out(wrapped([f"warning: {problem}"]))
    if not gpus:
        raise RefreshError("--gpus: no GPU selected")
    tasks, fresh = make_plan(jobs, cache, gpus[0].name, local, rules)
    out(describe_plan(tasks, fresh, gpus))
    skipped: list[StudySkip] = []
    study_tasks = (plan_studies(cache.directory, gpus[0].name, local, rules, force=force_studies, gpus=len(gpus),
                                skipped=skipped) if with_studies else [])
    if with_studies:
        out(describe_studies(study_tasks, skipped))
        total = describe_total(tasks, study_tasks, gpus)
        if total is not None:
            out(total)
    if dry_run:
        return Outcome()
    outcome = (run_pool(tasks, gpus, cache_dir=cache.directory, measure=measure, local=local, rules=rules,
                        lock_dir=lock_dir, progress=progress) if tasks else Outcome())
    if study_tasks and not outcome.interrupted:
        studied = run_studies(study_tasks, gpus, cache_dir=cache.directory, lock_dir=lock_dir, out=out)
        outcome.stored += studied.stored
        outcome.failed += studied.failed
        outcome.not_started += studied.not_started
        outcome.interrupted = studied.interrupted
    return outcome


__all__ = ["CacheError", "GpuSlot", "Job", "Outcome", "RefreshError", "Rules", "Task", "collect_jobs",
           "gpu_lock_path", "make_plan", "needs_measuring", "probe_gpus", "read_site", "refresh", "run_pool",
           "select_gpus"]
