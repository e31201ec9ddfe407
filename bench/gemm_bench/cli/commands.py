"""``gemm-bench``: list a model's GEMMs, measure them on the GPU, print a saved result.

Config flags are Megatron-LM's (``--hidden-size`` ...), so a launch script's arguments can be
pasted in. Whatever the input, the command never prints a traceback; it exits with

* 0 on success (``--version``, ``--help`` included; ``gemm-bench`` with no command prints the
  help, usage and the list of commands, on stdout: a newcomer's question, not an error, and every
  error is one message);
* 2 on bad input, with one error on stderr naming the command and the flag or file at fault (and
  the closest flag, value or preset where one is near), wrapped at 100 columns, the lines after
  the first indented (:func:`gemm_bench.cli.errors.error_text`);
* 3 when software the command needs is missing (for ``run``: PyTorch, Transformer Engine or a
  CUDA GPU), with one error saying what to install (``readme-figure`` writes its SVGs without
  matplotlib);
* 130 when interrupted (nothing half-written: the cache is written atomically).

This module imports no torch: the GPU stack is imported by :func:`load_runner` only once every
flag has been checked, so bad input is reported as such on any machine.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import os
import re
import shutil
import subprocess
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import IO, Any, NoReturn

from gemm_bench.cli import fleet as cli_fleet
from gemm_bench.cli.errors import (
    MissingSoftwareError,
    UsageError,
    closest,
    did_you_mean,
    echo,
    echo_wrapped,
    error_text,
    one_line,
    print_error,
    wrap_cells,
    writable_destination,
)
from gemm_bench.cli.extras import needs
from gemm_bench.measure import phases
from gemm_bench.measure.compile_cache import use_persistent_compile_cache
from gemm_bench.measure.timing import MAX_REPETITIONS, MAX_WARMUP_S, TIMERS, TimerSettings, TimerSettingsError
from gemm_bench.question.choices import ChoiceError, parse_choices, split_list
from gemm_bench.question.comm import INTER_NODE_DEFAULT
from gemm_bench.question.config import (
    FIELD_HELP,
    INT_FIELDS,
    MAX_DIMENSION,
    PRESET_DESCRIPTIONS,
    PRESETS,
    ConfigError,
    cli_flag,
    megatron_ignored_reason,
    parse_model_id,
    split_megatron_args,
)
from gemm_bench.question.layout import LAYOUT_OPTIONS, parse_layout_value
from gemm_bench.question.layout_step import GPUS_PER_NODE_DEFAULT
from gemm_bench.question.precisions import ALL_MODES, MODES, PRECISION_IDS, normalize_mode, normalize_precision
from gemm_bench.question.question import Question, build_question
from gemm_bench.question.shapes import OP_NAMES, PASS_NAMES
from gemm_bench.question.vocabulary import LAYER_STEP, MODEL_STEP
from gemm_bench.report.report import TEXT_WIDTH, Report
from gemm_bench.results.cache import Cache, CacheError, read_document
from gemm_bench.results.schema import MAX_LAYERS

DEFAULT_CACHE = Path("docs/_gemm_cache")

DEFAULT_README_FIGURE = Path("docs/_static/readme-speedups.svg")

#: Which flag sets which :class:`TimerSettings` field, to name the flag in an error.
TIMER_FLAGS = {"timer": "--timer", "warmup_s": "--warmup", "repetitions": "--repetitions", "graphs": "--eager"}
_DEFAULT_TIMER = TimerSettings()

#: What the Runner reports progress with: ``(groups done, groups in all, what runs now)``.
Progress = Callable[[int, int, str], None]


class HelpFormatter(argparse.HelpFormatter):
    """argparse's help at most :data:`~gemm_bench.report.report.TEXT_WIDTH` columns wide, however wide
    the terminal (argparse fills the terminal: the help of a 200-column one ran to 198)."""

    def __init__(self, prog: str, indent_increment: int = 2, max_help_position: int = 24,
                 width: int | None = None) -> None:
        columns = width if width is not None else shutil.get_terminal_size().columns - 2
        super().__init__(prog, indent_increment, max_help_position, width=min(columns, TEXT_WIDTH))


#: argparse's opening of an error about one argument ("argument --num-layers: ..."): the flag leads instead.
_ARGUMENT = re.compile(r"^argument ([^:]+): ")


class Parser(argparse.ArgumentParser):
    """argparse, with its errors named by their sub-command (``gemm-bench shapes: error: ...``; the
    parser of each sub-command prints its own), escaped to one logical line (a hostile value may hold
    newlines) wrapped at 100 columns (:func:`~gemm_bench.cli.errors.error_text`), and the closest
    choice suggested for a misspelt one."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("formatter_class", HelpFormatter)
        super().__init__(*args, **kwargs)
        #: The sub-commands' parsers by name (:func:`build_parser` fills it): an unrecognized flag is
        #: reported by the parser of the command it was given to, with that command's closest flag.
        self.commands: dict[str, Parser] = {}

    def error(self, message: str) -> NoReturn:
        # "argument --num-layers: needs a whole number ..." reads "--num-layers needs a whole number ..."
        message = _ARGUMENT.sub(lambda m: m[1] + (" " if message[m.end():].startswith("needs ") else ": "),
                                message, count=1)
        self.exit(2, error_text(self.prog, message) + "\n")

    def _check_value(self, action: argparse.Action, value: Any) -> None:
        """argparse's check of a choice (a command, ``--timer``), with the closest one suggested."""
        if action.choices is None or value in action.choices:
            return
        choices = [str(c) for c in action.choices]
        if isinstance(action, argparse._SubParsersAction):
            raise argparse.ArgumentError(None, f"unknown command {shown(str(value))}{did_you_mean(str(value), choices)}"
                                               f"; the commands are {', '.join(choices)} (gemm-bench --help says "
                                               "what each does)")
        raise argparse.ArgumentError(action, f"{shown(str(value))} is not one of {', '.join(choices)}"
                                             f"{did_you_mean(str(value), choices)}")

    def flags(self) -> list[str]:
        """Every flag this parser takes (``--model``, ``-h``, ...): what a misspelt one is matched to."""
        return list(self._option_string_actions)

    def unrecognized(self, extras: Sequence[str]) -> NoReturn:
        """The error for arguments no parser took, each misspelt flag with its closest
        (``shapes --modle``: "did you mean --model?"; before, the top parser said "gemm-bench: error:
        unrecognized arguments" with neither the command nor a suggestion)."""
        hints = []
        for extra in extras:
            if extra.startswith("-") and len(extra) > 1:
                flag = extra.split("=", 1)[0]
                found = closest(flag, [f for f in self.flags() if f.startswith("--") == flag.startswith("--")])
                if found is not None:
                    hints.append((flag, found))
        said = " ".join(extras)
        said = said if len(said) <= 60 else f"{said[:60]}... ({len(said)} characters)"
        text = f"unrecognized argument{'s' if len(extras) > 1 else ''}: {said}"
        if len(hints) == 1:
            text += f" (did you mean {hints[0][1]}?)"
        elif hints:
            text += " (did you mean " + ", ".join(f"{found} for {flag}" for flag, found in hints) + "?)"
        self.error(text + f"; {self.prog} --help lists its flags")


#: The largest whole number any flag takes (every dimension, layer count and size is far below):
#: a number is refused by its digit count before Python converts it (a 5000-digit string raises
#: ValueError, a 400-digit one makes a number no check downstream expects).
MAX_WHOLE_NUMBER = MAX_DIMENSION


def shown(text: str, limit: int = 24) -> str:
    """A value from the command line as an error message quotes it: never a screenful of digits."""
    text = one_line(text)
    return repr(text) if len(text) <= limit else f"'{text[:limit]}...' ({len(text)} characters)"


_WHOLE = re.compile(r"\+?\d(?:_?\d)*")
_PLAIN = re.compile(r"[-+.\w]{1,24}")


def _value(text: str) -> str:
    """A value as an error says "got ...": bare where it is a plain token (``got -3``), else quoted
    and shortened (:func:`shown`)."""
    return text if _PLAIN.fullmatch(text) and text.isascii() else shown(text)


def _whole_number(high: int = MAX_WHOLE_NUMBER) -> Callable[[str], int]:
    """An argparse type: a whole number from 1 to ``high``, with a message quoting the value."""

    def parse(text: str) -> int:
        # What int() reads, as the directive's option parser does (they must agree: the fuzz test
        # builds both): decimal digits of any script, single underscores between them, one '+'.
        # isdigit() alone admits '²', which int() refuses.
        if not _WHOLE.fullmatch(text.strip()):
            raise argparse.ArgumentTypeError(f"needs a whole number >= 1, got {_value(text)}")
        digits = text.strip().lstrip("+").replace("_", "")
        digits = digits.lstrip("0") or "0"
        if len(digits) > len(str(high)) or int(digits) > high:
            raise argparse.ArgumentTypeError(f"needs a whole number <= {high}, got {_value(text)}")
        if int(digits) < 1:
            raise argparse.ArgumentTypeError(f"needs a whole number >= 1, got {_value(text)}")
        return int(digits)

    return parse


_positive_int = _whole_number()

_DIGIT_RUN = re.compile(r"\d+")


def _dimensions(what: str) -> Callable[[str], str]:
    """An argparse type for ``--shape`` and ``--sweep``: every number in the text at most
    :data:`MAX_DIMENSION`, checked by its digits (the text itself is parsed by the question)."""

    def check(text: str) -> str:
        for run in _DIGIT_RUN.findall(text):
            digits = run.lstrip("0") or "0"
            if len(digits) > len(str(MAX_DIMENSION)) or (digits.isascii() and int(digits) > MAX_DIMENSION):
                raise argparse.ArgumentTypeError(f"{shown(text)}: the {what} {shown(run)} is more than the "
                                                 f"supported {MAX_DIMENSION}")
        return text

    return check


def _warmup_seconds(text: str) -> float:
    """``--warmup``: finite seconds from 0 to :data:`MAX_WARMUP_S` (NaN would warm up forever)."""
    needs = f"needs a number of seconds from 0 to {MAX_WARMUP_S:g}, got {_value(text)}"
    try:
        value = float(text.strip())
    except ValueError:
        raise argparse.ArgumentTypeError(needs) from None
    if not math.isfinite(value) or not 0 <= value <= MAX_WARMUP_S:
        raise argparse.ArgumentTypeError(needs)
    return value


def _add_config_flags(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("model (Megatron-LM flag names; override a --model preset)")
    g.add_argument("--model", metavar="PRESET", help="preset: " + ", ".join(PRESET_DESCRIPTIONS))
    g.add_argument("--hf-config", metavar="PATH", help="a Hugging Face config.json")
    for field in INT_FIELDS:
        g.add_argument(cli_flag(field), *_CONFIG_SHORT_FLAGS.get(field, ()), dest=field, type=_positive_int,
                       metavar="N", help=FIELD_HELP.get(field))
    g.add_argument("--swiglu", action="store_true", default=None, help=FIELD_HELP["swiglu"])
    g.add_argument("--sequence-parallel", action=argparse.BooleanOptionalAction, default=None,
                   help=FIELD_HELP["sequence_parallel"])
    g.add_argument("--attention-sinks", action="store_true", default=None, help=FIELD_HELP["attention_sinks"])
    g.add_argument("--megatron-args", metavar="ARGS",
                   help="a Megatron-LM argument list in one quoted string, as a launch script has it (flags "
                        "that change no GEMM are listed as ignored; write --megatron-args='--hidden-size ...' "
                        "when it starts with --); the config flags above override it")
    _add_layout_flags(p)
    m = p.add_argument_group("manual shapes")
    m.add_argument("--shape", action="append", type=_dimensions("dimension"), metavar="MxKxN",
                   help="a GEMM shape (repeatable)")
    m.add_argument("--sweep", type=_dimensions("size"), metavar="S1,S2,...",
                   help="square GEMMs SxSxS, comma or space separated sizes")


#: Short spellings of the config fields a layout is said with (``--tp 4``), beside Megatron-LM's.
_CONFIG_SHORT_FLAGS: dict[str, tuple[str, ...]] = {
    "tensor_model_parallel_size": ("--tp",), "expert_model_parallel_size": ("--ep",),
    "micro_batch_size": ("--mbs",),
}


def _layout_value(field: str) -> Callable[[str], Any]:
    """argparse's type for one layout flag: the parser every surface shares (parse_layout_value)."""
    def parse(text: str) -> Any:
        try:
            return parse_layout_value(field, text)
        except ConfigError as exc:
            raise argparse.ArgumentTypeError(exc.rule) from None
    return parse


def _add_layout_flags(p: argparse.ArgumentParser) -> None:
    """The run's layout (issue 41), one flag per :data:`~gemm_bench.question.layout.LAYOUT_OPTIONS`
    entry: the same table the directives' options and the authoring reference are built from."""
    g = p.add_argument_group("the run's layout", "over a preset's published layout or a launch line's; TP, "
                             "sequence parallel, EP, micro-batch and G are the model flags above (also --tp, "
                             "--ep, --mbs)")
    for option in LAYOUT_OPTIONS:
        flags = (cli_flag(option.field), *option.aliases)
        if option.kind == "bool":
            g.add_argument(*flags, dest=f"layout_{option.field}", action=argparse.BooleanOptionalAction,
                           default=None, help=option.help)
        else:
            g.add_argument(*flags, dest=f"layout_{option.field}", type=_layout_value(option.field),
                           metavar="|".join(option.choices) if option.choices else "N", help=option.help)


def question_from_args(args: argparse.Namespace) -> Question:
    fields: dict[str, Any] = {f: getattr(args, f) for f in INT_FIELDS}
    fields["swiglu"] = args.swiglu
    fields["sequence_parallel"] = args.sequence_parallel
    fields["attention_sinks"] = args.attention_sinks
    layout = {o.field: getattr(args, f"layout_{o.field}", None) for o in LAYOUT_OPTIONS}
    sweep = split_list(args.sweep) if args.sweep is not None else None
    try:
        megatron = split_megatron_args(args.megatron_args) if args.megatron_args is not None else None
        return build_question(model=args.model, hf_config=args.hf_config, shapes=args.shape,
                              sweep=sweep, fields=fields, megatron_args=megatron, layout=layout)
    except ConfigError as exc:
        message = exc.describe(cli_flag)
        if exc.field == "model" and args.model is not None and "did you mean" not in message:
            message = _with_closest_preset(message, args.model)
        raise UsageError(message) from None


def _with_closest_preset(message: str, model: str) -> str:
    """``--model``'s "unknown preset" error with the closest preset suggested (``llama3-8`` ->
    ``llama3-8b``); the message as it was where the preset is known or nothing is near."""
    try:
        name = parse_model_id(model).preset
    except ConfigError:
        return message
    hint = did_you_mean(name, PRESETS) if name.strip().lower() not in PRESETS else ""
    if not hint:
        return message
    return message.replace("; known: ", f"{hint}; known: ", 1) if "; known: " in message else message + hint


def _choices(text: str, flag: str, normalize: Callable[[str], str], known: Sequence[str]) -> tuple[str, ...]:
    """A list flag through the one parser the directive uses too (:mod:`gemm_bench.question.choices`)."""
    try:
        return parse_choices(text, normalize, known)
    except ChoiceError as exc:
        if exc.value is None:
            raise UsageError(f"{flag}: {exc}") from None
        raise UsageError(f"{flag}: unknown value {shown(exc.value)}{did_you_mean(exc.value, known)}; choose from "
                         f"{', '.join(known)}") from None


# ------------------------------------------------------------------------------- shapes
def layout_lines(question: Question) -> list[str]:
    """The question's layout in words, with where it comes from (a preset's published layout, or
    the one a result stored before the layout existed assumed): what ``shapes`` and ``report`` print."""
    layout, assumed = question.layout_or_assumed()
    if layout is None:
        return []
    if assumed:
        return [f"layout (assumed): {assumed}"]
    lines = [f"layout: {layout.describe()}"]
    if question.layout_note:
        lines.append(f"layout from: {question.layout_note}")
    return lines


def ignored_lines(question: Question) -> list[str]:
    """The launch line's ignored flags, grouped by their reason (:func:`megatron_ignored_reason`)."""
    reasons: dict[str, list[str]] = {}
    for flag in question.ignored_flags:
        reasons.setdefault(megatron_ignored_reason(flag), []).append(flag)
    return [f"ignored ({reason}): {' '.join(flags)}" for reason, flags in reasons.items()]


def _cached_memory_lines(question: Question, cache_dir: Path, model_id: str | None = None) -> list[str]:
    """Memory per GPU of the question's layout per recipe, from each cached result of the question
    that holds the model step's memory parts; one line saying where to get them otherwise. With
    ``model_id`` (``--model``), the layout-search study of each GPU kind adds its found micro-batch."""
    if question.config is None or question.layout is None:
        return []
    from gemm_bench.report.layout_memory import memory_lines
    from gemm_bench.report.layout_search import model_search
    from gemm_bench.results import studies
    from gemm_bench.results.layout_search_schema import NAME as SEARCH
    from gemm_bench.results.typed import parse

    searches = studies.read_studies(cache_dir, SEARCH)[0] if model_id else []

    try:
        docs = Cache(cache_dir).lookup(question.hash).documents
    except CacheError:
        docs = []
    if not docs:
        return [f"memory per GPU: needs a measured model step of this question (none in {cache_dir}; "
                "gemm-bench run --modes layer measures one)"]
    out = []
    for doc in sorted(docs, key=lambda d: d["device"]["name"]):
        out.append(f"on the {doc['device']['name']}:")
        search = (model_search(searches, doc["device"]["name"], model_id, question.config, question.layout)
                  if model_id else None)
        out += memory_lines(parse(doc), question.config, question.layout, search)
    return out


def cmd_shapes(args: argparse.Namespace) -> int:
    q = question_from_args(args)
    if args.json:
        echo(json.dumps([g.to_dict() for g in q.gemms], indent=1))
        return 0
    echo_wrapped(q.describe())
    for note in q.notes:
        echo_wrapped(f"note: {note}")
    model_id = getattr(args, "model", None)
    for line in [*ignored_lines(q), *layout_lines(q), *_cached_memory_lines(q, Path(args.cache_dir), model_id)]:
        echo_wrapped(line)
    echo(f"{'op':<18}{'pass':<7}{'M x K x N':>24}{'groups':>8}{'GFLOP':>12}")
    for g in q.gemms:
        echo(f"{OP_NAMES.get(g.op, g.op):<18}{PASS_NAMES[g.pass_]:<7}{f'{g.m}x{g.k}x{g.n}':>24}"
              f"{g.groups:>8}{g.flops / 1e9:>12.1f}")
    total = sum(g.flops for g in q.gemms)
    echo(f"{'per layer':<25}{'':>24}{'':>8}{total / 1e9:>12.1f}")
    if q.config is not None:
        echo(f"{'model':<25}{'':>24}{'':>8}{total * q.num_layers / 1e9:>12.1f}  ({q.num_layers} layers)")
    return 0


# ------------------------------------------------------------------------------- run
class PlainProgress:
    """Progress as one plain line per group: for logs and pipes, where a live bar is noise."""

    def __init__(self, stream: IO[str]) -> None:
        self.stream = stream
        self.start = time.monotonic()

    def __call__(self, done: int, total: int, label: str) -> None:
        elapsed = time.monotonic() - self.start
        eta = f", about {elapsed / done * (total - done):.0f} s left" if 0 < done < total else ""
        self.stream.write(f"[{done}/{total} groups, {elapsed:.0f} s{eta}] {one_line(label)}\n")
        self.stream.flush()


def _is_terminal(stream: IO[str]) -> bool:
    try:
        return bool(stream.isatty())
    except (AttributeError, ValueError):  # no isatty, or a closed stream
        return False


@contextlib.contextmanager
def progress_display(stream: IO[str] | None = None) -> Iterator[Progress]:
    """A live ``rich`` progress bar on a terminal; plain lines otherwise or without rich.

    rich is imported here, not at module level, so that ``shapes`` and ``report`` work without
    it; the bar is closed (and the cursor restored) even when measuring fails.
    """
    out = stream if stream is not None else sys.stderr
    if not _is_terminal(out):
        yield PlainProgress(out)
        return
    try:
        from rich.console import Console
        from rich.progress import BarColumn, MofNCompleteColumn, TextColumn, TimeElapsedColumn, TimeRemainingColumn
        from rich.progress import Progress as RichProgress
    except ImportError:
        yield PlainProgress(out)
        return
    columns = (TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TextColumn("groups"),
               TimeElapsedColumn(), TimeRemainingColumn())
    with RichProgress(*columns, console=Console(file=out)) as bar:
        task = bar.add_task("starting", total=None)

        def update(done: int, total: int, label: str) -> None:
            bar.update(task, completed=done, total=total, description=label)

        yield update


#: What ``run`` and ``study`` add where no GPU is visible: the two ways on (before: the fault alone).
NO_GPU_NEXT = ("measure on a machine with an NVIDIA GPU (README: Refreshing the numbers on a GPU box), or build "
               "the site from the committed results without one: nox -s docs")


def load_runner() -> tuple[Any, type[BaseException]]:
    """Import the GPU stack: ``(Runner, NoGpuError)``, or :class:`MissingSoftwareError` saying why not.

    Only failures of the third-party imports themselves are caught (a missing package, a shared
    library that does not load, TE refusing the installed CUDA); the project's own modules are
    imported after these checks, so a bug in them still shows as the bug it is.
    """
    hint = ("install the 'gpu' extra (pip install -e '.[gpu]': torch, transformer_engine[pytorch]) on a machine "
            "with an NVIDIA GPU")
    try:
        import torch
    except (ImportError, OSError) as exc:
        raise MissingSoftwareError(f"PyTorch is not importable ({_short(exc)}); {hint}") from None
    if not torch.cuda.is_available():
        raise MissingSoftwareError(f"no CUDA GPU is visible to PyTorch; {NO_GPU_NEXT}")
    try:
        import transformer_engine.pytorch  # noqa: F401
    except (ImportError, OSError, RuntimeError) as exc:
        raise MissingSoftwareError(f"Transformer Engine is not importable ({_short(exc)}); {hint}") from None
    from gemm_bench.measure.runner import NoGpuError, Runner

    return Runner, NoGpuError


def _short(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0]}" if text else type(exc).__name__


def new_phase_profiler() -> phases.PhaseProfiler:
    """A profiler counting from the process's start (read from the kernel), so imports count too."""
    profiler = phases.PhaseProfiler()
    profiler.mark_process_start()
    return profiler


def cmd_run(args: argparse.Namespace) -> int:
    q = question_from_args(args)
    precisions = _choices(args.precisions, "--precisions", normalize_precision, PRECISION_IDS)
    modes = _choices(args.modes, "--modes", normalize_mode, ALL_MODES)
    try:
        settings = TimerSettings(timer=args.timer, repetitions=args.repetitions, warmup_s=args.warmup,
                                 graphs=not args.eager)
    except TimerSettingsError as exc:
        raise UsageError(f"{TIMER_FLAGS.get(exc.field, exc.field)}: {exc.message}") from None
    if args.out and args.cache_dir:
        raise UsageError("--out: cannot be combined with --cache-dir")
    if args.out:
        writable_destination(Path(args.out), "--out", directory=False)
    else:
        writable_destination(Path(args.cache_dir or DEFAULT_CACHE), "--cache-dir", directory=True)
    if args.nsys and not os.environ.get("GEMM_BENCH_NSYS_CHILD"):
        return _rerun_under_nsys(args)
    profiler = new_phase_profiler() if args.profile_phases else None

    use_persistent_compile_cache()  # as measure_question does: torchao's compilations kept across runs
    with phases.optional_phase(profiler, phases.IMPORTS):
        runner_class, no_gpu_error = load_runner()
    options: dict[str, Any] = {"peers": not args.no_peers, "nvtx": bool(args.nsys)}
    if args.accuracy:
        options["accuracy"] = True
    if profiler is not None:
        options["phases"] = profiler
    with progress_display() as progress:
        with phases.optional_phase(profiler, phases.CUDA_START):
            try:
                runner = runner_class(settings, progress=progress, **options)
            except no_gpu_error as exc:
                raise MissingSoftwareError(f"{exc}; {NO_GPU_NEXT}") from None
        doc = runner.measure(q, list(precisions), list(modes))
    with phases.optional_phase(profiler, phases.WRITING):
        path = _write_result(doc, args)
    from gemm_bench.report import training_text

    echo(training_text.text(Report(doc, modes=modes,
                                   precisions=[p for p in PRECISION_IDS if p in ("bf16", *precisions)])))
    echo(f"\nwrote {path}")
    if profiler is not None:
        profiler.finish()
        echo()
        echo(profiler.to_text())
    return 0


def _write_result(doc: dict[str, Any], args: argparse.Namespace) -> Path:
    """Store the measured document (``--out`` or the cache); a failure names the destination."""
    flag = "--out" if args.out else "--cache-dir"
    try:
        if args.out:
            from gemm_bench.results.cache import dumps, write_atomic
            from gemm_bench.results.schema import validate

            validate(doc)
            path = Path(args.out)
            write_atomic(path, dumps(doc))
            return path
        return Cache(args.cache_dir or DEFAULT_CACHE).store(doc)
    except CacheError as exc:
        raise UsageError(f"{flag}: {exc}") from None
    except OSError as exc:
        raise UsageError(f"{flag}: cannot write {exc.filename or ''} ({exc.strerror or exc})") from None


def _rerun_under_nsys(args: argparse.Namespace) -> int:
    nsys = shutil.which("nsys")
    if not nsys:
        raise UsageError("--nsys: Nsight Systems ('nsys') is not on PATH")
    cmd = [nsys, "profile", "--trace=cuda,nvtx", "--force-overwrite=true", "-o", args.nsys,
           sys.executable, "-m", "gemm_bench.cli", *args.argv]
    env = dict(os.environ, GEMM_BENCH_NSYS_CHILD="1")
    try:
        return subprocess.call(cmd, env=env)
    except OSError as exc:
        raise UsageError(f"--nsys: cannot start {nsys} ({exc.strerror or exc})") from None


# ------------------------------------------------------------------------------- report, presets
def cmd_report(args: argparse.Namespace) -> int:
    from gemm_bench.results.studies import study_in

    path = Path(args.file)
    study = study_in(path)
    if study is not None:  # its own report: what it is, where the site shows it, its values
        from gemm_bench.report.study_compare import StudyReport

        found = StudyReport(study)
        echo(json.dumps(found.to_json(), indent=1) if args.json else found.to_text())
        return 0
    try:
        doc = read_document(path)
    except CacheError as exc:
        raise UsageError(f"FILE: {exc}") from None
    from gemm_bench.report import training_text

    report = Report(doc, num_layers=args.num_layers)
    if args.json:
        echo(json.dumps(training_text.to_json(report), indent=1))
        return 0
    echo(training_text.text(report, _loss_parity_beside(path, doc)))
    question = Question.from_dict(doc["question"])
    lines = layout_lines(question)
    if lines and question.config is not None:
        from gemm_bench.report.layout_memory import memory_lines
        from gemm_bench.results.typed import parse

        layout, _ = question.layout_or_assumed()
        assert layout is not None  # a model's question always has one, stored or assumed
        echo("\n== The run's layout and memory per GPU ==")
        for line in [*lines, *memory_lines(parse(doc), question.config, layout)]:
            echo_wrapped(line)
    return 0


def _loss_parity_beside(path: Path, doc: dict[str, Any]) -> dict[str, Any] | None:
    """The loss-parity study of the result's GPU in the cache folder the result file lies in (where
    the site looks for it), None where there is none; an unusable one is said on stderr and skipped,
    as a page warns and goes on, so the report's pick breaks a tie as the page's answer does."""
    from gemm_bench.results import loss_parity_schema
    from gemm_bench.results.studies import read_study, study_path

    found = study_path(path.parent, loss_parity_schema.NAME, str(doc["device"]["name"]))
    if not found.is_file():
        return None
    try:
        return read_study(found)
    except CacheError as exc:
        print(f"gemm-bench report: ignoring unusable study file {exc}", file=sys.stderr)
        return None


def cmd_presets(args: argparse.Namespace) -> int:
    for name, text in PRESET_DESCRIPTIONS.items():
        # One cell per comma-separated part, kept whole on its line ("1 x 4096 tokens", "32 layers").
        echo("\n".join(wrap_cells(f"{name:<14} ", text.split(", "), hanging=15)))
    return 0


# ------------------------------------------------------------------------------- layout-step
def _positive_float(name: str, *, zero: bool = False) -> Callable[[str], float]:
    def parse(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{name} must be a number, got {text!r}") from None
        if not math.isfinite(value) or value < 0 or (value == 0 and not zero):
            raise argparse.ArgumentTypeError(f"{name} must be {'>= 0' if zero else 'positive'}, got {text!r}")
        return value
    return parse


def cmd_layout_step(args: argparse.Namespace) -> int:
    """The preset layout's step per recipe and GPU, communication in, from the cache (no GPU needed)."""
    from gemm_bench.question.comm import Link
    from gemm_bench.question.layout import PRESET_LAYOUTS
    from gemm_bench.question.layout_step import Network
    from gemm_bench.report.layout_step import comm_words, layout_clause, preset_layout_steps, sweeps
    from gemm_bench.results import studies
    from gemm_bench.results.typed import parse

    if args.model not in PRESET_LAYOUTS:
        raise UsageError(f"MODEL: {args.model!r} has no preset layout; choose from {', '.join(PRESET_LAYOUTS)}")
    network = Network(args.gpus_per_node, Link("--inter-node-gb-s", args.inter_node_gb_s, args.inter_node_latency_us))
    cache_dir = Path(args.cache_dir)
    docs, errors = studies.read_studies(cache_dir, "tp-comm")
    for error in errors:
        echo(f"skipped: {error}")
    available = sweeps(docs)
    lookup = Cache(cache_dir).lookup(build_question(model=args.model).hash)
    echo(f"{args.model}: {PRESET_LAYOUTS[args.model].layout.describe()}")
    echo(f"network: {network.describe()}")
    for doc in lookup.documents:
        found = preset_layout_steps(parse(doc), args.model, available, network=network)
        echo(f"{doc['device']['name']}:")
        if isinstance(found, str):
            echo(f"  {found}")
            continue
        for precision, step in found.steps.items():
            clause = layout_clause(found, precision)
            echo(f"  {precision}: {clause or step}")
            if clause is not None and not isinstance(step, Exception):
                echo(f"    rank compute alone: {step.compute_tokens_per_s:,.0f} tokens/s per GPU; {comm_words(step)}")
    return 0


# ------------------------------------------------------------------------------- readme-figure
def load_figures() -> Any:
    """The :mod:`gemm_bench.report.figures` module, imported only when the subcommand runs (it writes
    SVG as text: no matplotlib needed)."""
    from gemm_bench.report import figures

    return figures


def cmd_study(args: argparse.Namespace) -> int:
    """Measure one study on this GPU and store it (atomically) under the cache's studies/ folder."""
    from gemm_bench.measure.studies import load_registry
    from gemm_bench.results import studies

    known = load_registry()
    if args.name not in known:
        raise UsageError(f"STUDY: {args.name!r} is not a study; choose from {', '.join(sorted(known))}")
    load_runner()  # torch, a visible GPU and TE, or MissingSoftwareError saying which is missing
    from gemm_bench.measure.studies import measure_study

    if known[args.name].min_gpus > 1 and not args.replace_wider:
        import torch

        from gemm_bench.cli.refresh import measured_on_gpus

        here = torch.cuda.device_count()
        name = torch.cuda.get_device_name(0)
        wider = measured_on_gpus(studies.stored_study(Path(args.cache_dir), args.name, name).document)
        if wider > here:
            raise UsageError(f"STUDY: the stored {args.name} study of the {name} was measured on "
                             f"{wider} GPUs and this box has {here}: measuring it here would "
                             "lose what only the larger box measures; add --replace-wider to replace it anyway")
    doc = measure_study(args.name, Path(args.cache_dir))
    path = studies.write_study(args.cache_dir, doc)
    echo(f"stored {path} ({doc['provenance']['method'].get('measure_s', '?')} s)")
    return 0


def cmd_readme_figure(args: argparse.Namespace) -> int:
    cache_dir, out = Path(args.cache_dir), Path(args.out)
    if not cache_dir.is_dir():
        raise UsageError(f"--cache-dir: {cache_dir} is not a directory")
    writable_destination(out, "--out", directory=False)
    from gemm_bench.report.figures import readme_paths

    for path in readme_paths(out):
        if path.exists() and not path.is_file():  # /dev/full, a FIFO, a link to /dev/zero: never read or replaced
            raise UsageError(f"--out: {path} is not a regular file; give the path of an SVG file")
    figures = load_figures()

    def ignored(error: Exception) -> None:
        echo_wrapped(f"gemm-bench readme-figure: warning: ignoring {one_line(str(error))}", hanging=4,
                     file=sys.stderr)

    try:
        changed = figures.write_readme_figure(cache_dir, out, on_error=ignored)
    except figures.FigureError as exc:  # the cache holds no usable result for the README's question
        raise UsageError(f"--cache-dir: {exc}") from None
    except OSError as exc:
        raise UsageError(f"--out: cannot write {exc.filename or out} ({exc.strerror or exc})") from None
    for path in changed:
        echo(f"wrote {path}")
    if not changed:
        echo(f"{out} is up to date")
    if args.readme:
        _write_readme_caption(Path(args.readme), cache_dir, figures)
    return 0


def _write_readme_caption(path: Path, cache_dir: Path, figures: Any) -> None:
    """Rewrite the README's caption from the results the figure drew (``--readme``)."""
    from gemm_bench.cli import readme
    from gemm_bench.results.cache import write_atomic

    try:
        before = path.read_text(encoding="utf-8")
        documents, skipped = figures.readme_documents(cache_dir, on_error=lambda error: None)
        after = readme.with_caption(before, readme.caption(documents, skipped), path)
    except readme.ReadmeError as exc:
        raise UsageError(f"--readme: {exc}") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise UsageError(f"--readme: cannot read {path} ({getattr(exc, 'strerror', None) or exc})") from None
    if after == before:
        echo(f"{path}: caption is up to date")
        return
    try:
        write_atomic(path, after, durable=False)
    except OSError as exc:
        raise UsageError(f"--readme: cannot write {path} ({exc.strerror or exc})") from None
    echo(f"wrote the caption in {path}")


# ------------------------------------------------------------------------------- parser, main
#: The help's first line: plain text (the module docstring's first line is reStructuredText).
DESCRIPTION = "gemm-bench: list a model's GEMMs, measure them on the GPU, print a saved result."


def build_parser() -> Parser:
    import gemm_bench

    parser = Parser(prog="gemm-bench", description=DESCRIPTION)
    parser.add_argument("--version", action="version", version=f"gemm-bench {gemm_bench.__version__}")
    # Not required: with no command, main prints the usage and the commands (argparse would print
    # only "the following arguments are required").
    sub = parser.add_subparsers(dest="command", title="commands", metavar="COMMAND", parser_class=Parser)

    p = sub.add_parser("shapes", help="list the GEMMs of one transformer layer")
    _add_config_flags(p)
    p.add_argument("--json", action="store_true", help="print a JSON list, one object per GEMM")
    p.add_argument("--cache-dir", metavar="DIR", default=str(DEFAULT_CACHE),
                   help=f"where memory per GPU's measured parts are read (default: {DEFAULT_CACHE})")
    p.set_defaults(func=cmd_shapes)

    p = sub.add_parser("run", help="measure on this GPU and store the result" + needs("run"))
    _add_config_flags(p)
    p.add_argument("--precisions", default=",".join(PRECISION_IDS),
                   help="comma or space separated list (default: all)")
    p.add_argument("--modes", default=",".join(MODES),
                   help="comma or space separated list of " + ", ".join(ALL_MODES) + " (default: "
                        + ",".join(MODES) + f"; layer and layer-graphed time {LAYER_STEP}, its forward + backward "
                        "as one rank runs it, for a model config)")
    p.add_argument("--accuracy", action="store_true",
                   help="also measure each precision's SQNR against an FP32 reference (per GEMM pass, "
                        "Gaussian and outlier-channel inputs)")
    p.add_argument("--out", metavar="FILE", help="write the result here instead of the cache")
    p.add_argument("--cache-dir", metavar="DIR", help=f"cache directory (default: {DEFAULT_CACHE})")
    p.add_argument("--timer", choices=tuple(TIMERS), default="events",
                   help="what a published time is: " + "; ".join(f"{k}: {v}" for k, v in TIMERS.items())
                        + " (default: events; the profiler's kernel time cross-checks every region either way)")
    p.add_argument("--repetitions", type=_whole_number(MAX_REPETITIONS), default=_DEFAULT_TIMER.repetitions,
                   metavar="N", help="most timed rounds per group: rounds stop once every median is known "
                   f"to {_DEFAULT_TIMER.target_ci * 100:g}%% (at least {_DEFAULT_TIMER.min_repetitions} rounds); "
                   "each cell records how many ran")
    p.add_argument("--warmup", type=_warmup_seconds, default=_DEFAULT_TIMER.warmup_s, metavar="SECONDS",
                   help=f"warm-up per group, 0 to {MAX_WARMUP_S:g} s")
    p.add_argument("--eager", action="store_true",
                   help="publish eager times (host work included) instead of CUDA-graph replays; for "
                        "investigating host overhead, never for the site (the result's method says so)")
    p.add_argument("--no-peers", action="store_true",
                   help="skip the peers (torch.matmul, torch._scaled_mm, torchao, Triton and plugins "
                        "registered under the gemm_bench.peers entry point group)")
    p.add_argument("--nsys", metavar="OUT", help="capture the run with Nsight Systems into OUT.nsys-rep")
    p.add_argument("--profile-phases", action="store_true",
                   help="print where the run's wall time went (imports, spin-up, warm-up, timed rounds, writing)")
    p.set_defaults(func=cmd_run)

    p = sub.add_parser("report", help="print the summary of a saved result")
    p.add_argument("file", metavar="FILE",
                   help="a result file (docs/_gemm_cache/<hash>--<gpu>.json, or what run --out wrote); a study "
                        "file (docs/_gemm_cache/studies/) gives the study's values")
    p.add_argument("--json", action="store_true",
                   help=f"print JSON: every cell with its run id, GEMM totals, {LAYER_STEP}, accuracy, peers, "
                        f"{MODEL_STEP}, the breakdown, the precision plan and energy")
    p.add_argument("--num-layers", type=_whole_number(MAX_LAYERS), metavar="N",
                   help="layers the GEMMs are summed over for the model total")
    p.set_defaults(func=cmd_report)

    p = sub.add_parser("presets", help="list the model presets")
    p.set_defaults(func=cmd_presets)

    p = sub.add_parser("layout-step", help="a model's preset layout: tokens/s per GPU per recipe with "
                                           "communication in, from the cache")
    p.add_argument("model", metavar="MODEL", help="a model id with a preset layout (llama3-8b, llama3.1-405b/tp8, ...)")
    p.add_argument("--cache-dir", metavar="DIR", default=str(DEFAULT_CACHE),
                   help=f"result cache (default: {DEFAULT_CACHE})")
    p.add_argument("--inter-node-gb-s", type=_positive_float("--inter-node-gb-s"),
                   default=INTER_NODE_DEFAULT.bandwidth_gb_s, metavar="GB/S",
                   help="ASSUMED bus bandwidth per GPU between nodes, GB/s each way (default: "
                        f"{INTER_NODE_DEFAULT.bandwidth_gb_s:g}, {INTER_NODE_DEFAULT.name}; conf.py: "
                        "gemm_benchmark_inter_node_gb_s)")
    p.add_argument("--inter-node-latency-us", type=_positive_float("--inter-node-latency-us", zero=True),
                   default=INTER_NODE_DEFAULT.latency_us, metavar="US",
                   help=f"ASSUMED time per ring step between nodes (default: {INTER_NODE_DEFAULT.latency_us:g} us)")
    p.add_argument("--gpus-per-node", type=_whole_number(1 << 16), default=GPUS_PER_NODE_DEFAULT, metavar="N",
                   help=f"ASSUMED GPUs of one node (default: {GPUS_PER_NODE_DEFAULT}, as DGX H100/H200)")
    p.set_defaults(func=cmd_layout_step)

    p = sub.add_parser("readme-figure", help="draw the README's speedup figure from the cache")
    p.add_argument("--cache-dir", metavar="DIR", default=str(DEFAULT_CACHE),
                   help=f"result cache (default: {DEFAULT_CACHE})")
    p.add_argument("--out", metavar="PATH", default=str(DEFAULT_README_FIGURE),
                   help=f"figure to write; a dark variant goes beside it (default: {DEFAULT_README_FIGURE})")
    p.add_argument("--readme", metavar="PATH",
                   help="also rewrite the figure's caption in this README (between its gemm-bench readme-figure "
                        "markers) from the same results: which GPUs it shows")
    p.set_defaults(func=cmd_readme_figure)

    p = sub.add_parser("study", help="measure a study (loss-parity, dynamic-range, layout-search; tp-comm on "
                       "all of a box's GPUs) on this GPU and store it" + needs("study"))
    p.add_argument("name", metavar="STUDY", help="the study to measure")
    p.add_argument("--replace-wider", action="store_true",
                   help="replace a study of several GPUs measured on a larger box than this one")
    p.add_argument("--cache-dir", metavar="DIR", default=str(DEFAULT_CACHE),
                   help=f"result cache; the study goes into its studies/ folder (default: {DEFAULT_CACHE})")
    p.set_defaults(func=cmd_study)

    cli_fleet.add_commands(sub)  # compare, merge, refresh
    parser.commands = dict(sub.choices)
    return parser


def _escape_unencodable_output() -> None:
    """Print text from files (config names, device names) even where the terminal cannot encode it."""
    for stream in (sys.stdout, sys.stderr):
        reconfigure = getattr(stream, "reconfigure", None)
        if reconfigure is not None:
            with contextlib.suppress(ValueError):  # a closed or detached stream
                reconfigure(errors="backslashreplace")


def main(argv: Sequence[str] | None = None) -> int:
    _escape_unencodable_output()
    argv = list(sys.argv[1:] if argv is None else argv)
    parser = build_parser()
    if any("\x00" in arg for arg in argv):  # no shell can pass one; file APIs raise ValueError on it
        parser.error("an argument contains a NUL character")
    args, extras = parser.parse_known_args(argv)
    if extras:  # reported by the command's own parser, which knows its flags
        parser.commands.get(args.command or "", parser).unrecognized(extras)
    if args.command is None:
        echo(parser.format_help(), end="")
        return 0
    args.argv = argv
    prog = f"gemm-bench {args.command}"
    try:
        return int(args.func(args))
    except UsageError as exc:
        print_error(prog, str(exc))
        return 2
    except MissingSoftwareError as exc:
        print_error(prog, str(exc))
        return 3
    except BrokenPipeError:  # `gemm-bench shapes | head`: stop quietly, and keep Python's exit flush quiet too
        with contextlib.suppress(OSError):
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, sys.stdout.fileno())
        return 0
    except KeyboardInterrupt:
        # Every file is written whole or not at all; results stored before the interrupt stay.
        echo("gemm-bench: interrupted; no file is half-written, results stored before it are kept", file=sys.stderr)
        return 130
    except CacheError as exc:  # a cache directory or file the user named that cannot be used
        print_error(prog, str(exc))
        return 2
    except OSError as exc:  # a path the user gave that the system refuses (too long, no permission, ...)
        where = exc.filename if exc.filename is not None else "a path"
        print_error(prog, f"{where}: {exc.strerror or exc}")
        return 2

