"""``gemm-bench``: list a model's GEMMs, measure them on the GPU, print a saved result.

Config flags are Megatron-LM's (``--hidden-size`` ...), so a launch script's arguments can be
pasted in. Bad input exits with status 2 and one line naming the flag; never a traceback.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any, NoReturn

from gemm_bench.cache import Cache, CacheError, read_document
from gemm_bench.config import FIELD_HELP, INT_FIELDS, PRESET_DESCRIPTIONS, ConfigError, cli_flag
from gemm_bench.precisions import MODES, PRECISION_IDS, normalize_mode, normalize_precision
from gemm_bench.question import Question, build_question
from gemm_bench.report import Report
from gemm_bench.shapes import OP_NAMES, PASS_NAMES

DEFAULT_CACHE = Path("docs/_gemm_cache")

class UsageError(Exception):
    """Bad input: printed as one line, exit status 2."""


def one_line(text: str) -> str:
    """Escape anything that is not printable (newlines, separators) so a message stays one line."""
    return "".join(ch if ch.isprintable() else repr(ch)[1:-1] for ch in text)


class Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: error: {one_line(message)}\n")


def _positive_int(text: str) -> int:
    try:
        value = int(text.strip())
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"{value} must be at least 1")
    return value


def _add_config_flags(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("model (Megatron-LM flag names; override a --model preset)")
    g.add_argument("--model", metavar="PRESET", help="preset: " + ", ".join(PRESET_DESCRIPTIONS))
    g.add_argument("--hf-config", metavar="PATH", help="a Hugging Face config.json")
    for field in INT_FIELDS:
        g.add_argument(cli_flag(field), dest=field, type=_positive_int, metavar="N", help=FIELD_HELP.get(field))
    g.add_argument("--swiglu", action="store_true", default=None, help=FIELD_HELP["swiglu"])
    g.add_argument("--sequence-parallel", action="store_true", default=None,
                   help=FIELD_HELP["sequence_parallel"])
    m = p.add_argument_group("manual shapes")
    m.add_argument("--shape", action="append", metavar="MxKxN", help="a GEMM shape (repeatable)")
    m.add_argument("--sweep", metavar="S1,S2,...", help="square GEMMs SxSxS, comma-separated sizes")


def question_from_args(args: argparse.Namespace) -> Question:
    fields: dict[str, Any] = {f: getattr(args, f) for f in INT_FIELDS}
    fields["swiglu"] = args.swiglu
    fields["sequence_parallel"] = args.sequence_parallel
    sweep = [s for s in args.sweep.split(",")] if args.sweep is not None else None
    try:
        return build_question(model=args.model, hf_config=args.hf_config, shapes=args.shape,
                              sweep=sweep, fields=fields)
    except ConfigError as exc:
        raise UsageError(exc.describe(cli_flag)) from None


def _parse_list(text: str, flag: str, normalize: Any, known: Sequence[str]) -> list[str]:
    items = [t for t in (s.strip() for s in text.split(",")) if t]
    if not items:
        raise UsageError(f"{flag}: needs at least one of {', '.join(known)}")
    out = []
    for item in items:
        try:
            out.append(normalize(item))
        except KeyError:
            raise UsageError(f"{flag}: unknown value {item!r}; choose from {', '.join(known)}") from None
    return list(dict.fromkeys(out))


# ------------------------------------------------------------------------------- commands
def cmd_shapes(args: argparse.Namespace) -> int:
    q = question_from_args(args)
    if args.json:
        print(json.dumps([g.to_dict() for g in q.gemms], indent=1))
        return 0
    print(q.describe())
    for note in q.notes:
        print(f"note: {note}")
    print(f"{'op':<18}{'pass':<7}{'M x K x N':>24}{'groups':>8}{'GFLOP':>12}")
    for g in q.gemms:
        print(f"{OP_NAMES.get(g.op, g.op):<18}{PASS_NAMES[g.pass_]:<7}{f'{g.m}x{g.k}x{g.n}':>24}"
              f"{g.groups:>8}{g.flops / 1e9:>12.1f}")
    total = sum(g.flops for g in q.gemms)
    print(f"{'per layer':<25}{'':>24}{'':>8}{total / 1e9:>12.1f}")
    if q.config is not None:
        print(f"{'model':<25}{'':>24}{'':>8}{total * q.num_layers / 1e9:>12.1f}  ({q.num_layers} layers)")
    return 0


class ProgressBar:
    """A one-line progress bar with ETA on stderr (plain lines when stderr is not a terminal)."""

    def __init__(self) -> None:
        self.start = time.monotonic()
        self.tty = sys.stderr.isatty()

    def __call__(self, done: int, total: int, label: str) -> None:
        elapsed = time.monotonic() - self.start
        eta = elapsed / done * (total - done) if done else float("nan")
        width = 24
        filled = int(width * done / total) if total else width
        bar = "#" * filled + "-" * (width - filled)
        eta_text = "--:--" if eta != eta else f"{int(eta) // 60:02d}:{int(eta) % 60:02d}"
        line = f"[{bar}] {done}/{total} groups  elapsed {int(elapsed)}s  ETA {eta_text}  {label}"
        if self.tty:
            sys.stderr.write("\r" + line.ljust(100) + ("\n" if done == total else ""))
        else:
            sys.stderr.write(line + "\n")
        sys.stderr.flush()


def cmd_run(args: argparse.Namespace) -> int:
    q = question_from_args(args)
    precisions = _parse_list(args.precisions, "--precisions", normalize_precision, PRECISION_IDS)
    modes = _parse_list(args.modes, "--modes", normalize_mode, MODES)
    if args.out and args.cache_dir:
        raise UsageError("--out: cannot be combined with --cache-dir")
    if args.nsys and not os.environ.get("GEMM_BENCH_NSYS_CHILD"):
        return _rerun_under_nsys(args)
    from gemm_bench.timing import TimerSettings

    settings = TimerSettings(timer=args.timer, repetitions=args.repetitions, warmup_s=args.warmup)
    try:
        from gemm_bench.runner import NoGpuError, Runner
    except ImportError as exc:
        print(f"gemm-bench run: error: the GPU stack is not importable ({exc}); "
              "install the 'gpu' extra (torch, transformer_engine[pytorch])", file=sys.stderr)
        return 3
    try:
        runner = Runner(settings, peers=not args.no_peers, progress=ProgressBar(), nvtx=bool(args.nsys))
    except NoGpuError as exc:
        print(f"gemm-bench run: error: {exc}", file=sys.stderr)
        return 3
    doc = runner.measure(q, precisions, modes)
    if args.out:
        from gemm_bench.cache import dumps, write_atomic
        from gemm_bench.results import validate

        validate(doc)
        path = Path(args.out)
        write_atomic(path, dumps(doc))
    else:
        path = Cache(args.cache_dir or DEFAULT_CACHE).store(doc)
    print(Report(doc, modes=modes, precisions=[p for p in PRECISION_IDS if p in ("bf16", *precisions)]).to_text())
    print(f"\nwrote {path}")
    return 0


def _rerun_under_nsys(args: argparse.Namespace) -> int:
    nsys = shutil.which("nsys")
    if not nsys:
        raise UsageError("--nsys: Nsight Systems ('nsys') is not on PATH")
    argv = [a for a in sys.argv[1:]]
    cmd = [nsys, "profile", "--trace=cuda,nvtx", "--force-overwrite=true", "-o", args.nsys,
           sys.executable, "-m", "gemm_bench.cli", *argv]
    env = dict(os.environ, GEMM_BENCH_NSYS_CHILD="1")
    return subprocess.call(cmd, env=env)


def cmd_report(args: argparse.Namespace) -> int:
    try:
        doc = read_document(Path(args.file))
    except CacheError as exc:
        raise UsageError(f"FILE: {exc}") from None
    report = Report(doc, num_layers=args.num_layers)
    if args.json:
        print(json.dumps(report.to_json(), indent=1))
    else:
        print(report.to_text())
    return 0


def cmd_presets(args: argparse.Namespace) -> int:
    for name, text in PRESET_DESCRIPTIONS.items():
        print(f"{name:<14} {text}")
    return 0


def build_parser() -> Parser:
    parser = Parser(prog="gemm-bench", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True, parser_class=Parser)

    p = sub.add_parser("shapes", help="list the GEMMs of one transformer layer")
    _add_config_flags(p)
    p.add_argument("--json", action="store_true", help="print a JSON list, one object per GEMM")
    p.set_defaults(func=cmd_shapes)

    p = sub.add_parser("run", help="measure on this GPU and store the result")
    _add_config_flags(p)
    p.add_argument("--precisions", default=",".join(PRECISION_IDS), help="comma list (default: all)")
    p.add_argument("--modes", default=",".join(MODES), help="comma list of autocast, prequant")
    p.add_argument("--out", metavar="FILE", help="write the result here instead of the cache")
    p.add_argument("--cache-dir", metavar="DIR", help=f"cache directory (default: {DEFAULT_CACHE})")
    p.add_argument("--timer", choices=("events", "profiler"), default="events")
    p.add_argument("--repetitions", type=_positive_int, default=40, metavar="N")
    p.add_argument("--warmup", type=float, default=0.25, metavar="SECONDS", help="warm-up per GEMM group")
    p.add_argument("--no-peers", action="store_true", help="skip torch.matmul / torch._scaled_mm peers")
    p.add_argument("--nsys", metavar="OUT", help="capture the run with Nsight Systems into OUT.nsys-rep")
    p.set_defaults(func=cmd_run)

    p = sub.add_parser("report", help="print the summary of a saved result")
    p.add_argument("file", metavar="FILE")
    p.add_argument("--json", action="store_true")
    p.add_argument("--num-layers", type=_positive_int, metavar="N", help="layers for the model total")
    p.set_defaults(func=cmd_report)

    p = sub.add_parser("presets", help="list the model presets")
    p.set_defaults(func=cmd_presets)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return int(args.func(args))
    except UsageError as exc:
        print(f"gemm-bench {args.command}: error: {one_line(str(exc))}", file=sys.stderr)
        return 2
    except BrokenPipeError:  # `gemm-bench shapes | head`
        sys.stderr.close()
        return 0
    except KeyboardInterrupt:
        print("gemm-bench: interrupted; the cache is unchanged", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
