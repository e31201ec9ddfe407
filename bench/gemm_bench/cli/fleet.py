"""``gemm-bench compare | merge | refresh``: the fleet commands, added to the CLI's parser.

Kept apart from :mod:`gemm_bench.cli.commands` so the fleet flow (many runners, one pull request)
reads as one piece. ``commands.build_parser`` calls :func:`add_commands` once. Bad input raises
:class:`gemm_bench.cli.errors.UsageError` (one error, exit status 2).
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path
from typing import Any

from gemm_bench.cli.errors import UsageError, echo, echo_wrapped, one_line, writable_destination
from gemm_bench.cli.extras import needs

DEFAULT_CACHE = Path("docs/_gemm_cache")


def cmd_compare(args: argparse.Namespace) -> int:
    from gemm_bench.report.compare import CompareError, compare, compare_dirs, load_result
    from gemm_bench.results.cache import CacheError

    if not (isinstance(args.a, str) and isinstance(args.b, str)):
        # Python 3.11's argparse can hand a positional over as a list (`compare - -- --`)
        raise UsageError("A, B: give two result files or two cache directories")
    a, b = Path(args.a), Path(args.b)
    output: Any
    if a.is_dir() or b.is_dir():
        if not (a.is_dir() and b.is_dir()):
            raise UsageError(f"A, B: give two result files or two cache directories ({a} and {b} are not both "
                         "directories)")
        output = compare_dirs(a, b)
    else:
        from gemm_bench.report.compare import compare_studies
        from gemm_bench.results.studies import study_in

        try:
            study_a, study_b = study_in(a), study_in(b)
        except CacheError as exc:
            raise UsageError(f"{'A' if exc.path == a else 'B'}: {exc}") from None
        if (study_a is None) != (study_b is None):
            raise UsageError(f"A, B: {a if study_a is not None else b} holds a study and the other file a question's "
                             "result; compare two runs of one study, or two results of one question")
        try:
            if study_a is not None and study_b is not None:
                if args.markdown:
                    echo(compare_studies(study_a, study_b).to_markdown(f"{a.name} vs {b.name}"), end="")
                    return 0
                output = compare_studies(study_a, study_b)
            else:
                output = compare(load_result(a), load_result(b))
        except CacheError as exc:
            raise UsageError(f"{'A' if exc.path == a else 'B'}: {exc}") from None
        except CompareError as exc:
            raise UsageError(f"A, B: {exc}") from None
    if args.json:
        echo(json.dumps(output.to_json(), indent=1))
    elif args.markdown:
        echo(output.to_markdown(), end="")
    else:
        echo(output.to_text())
    unreadable = getattr(output, "unreadable", [])
    if unreadable:  # listed above with the rest; the status says that not every file was compared
        echo_wrapped(f"gemm-bench compare: {len(unreadable)} file(s) could not be read (listed as unreadable); "
                     "the others were compared", hanging=4, file=sys.stderr)
        return 1
    return 0


def cmd_merge(args: argparse.Namespace) -> int:
    """Merge every usable file; exit 1 when a file was rejected (after merging all the others), so
    a script sees that something was lost while nothing usable is held back."""
    from gemm_bench.results.cache import write_atomic
    from gemm_bench.results.merge import MergeError, merge, summary_markdown

    # Both destinations checked before anything is merged (before: --summary /tmp merged, then failed
    # on a temporary file inside /tmp, naming that file).
    writable_destination(Path(args.cache_dir), "--cache-dir", directory=True)
    if args.summary:
        writable_destination(Path(args.summary), "--summary", directory=False)
    try:
        actions = merge([Path(d) for d in args.dirs], Path(args.cache_dir))
    except MergeError as exc:
        raise UsageError(str(exc)) from None
    if args.summary:
        try:
            write_atomic(Path(args.summary), summary_markdown(actions), durable=False)
        except OSError as exc:
            raise UsageError(f"--summary: cannot write {args.summary} ({exc.strerror or exc})") from None
    for action in actions:
        echo(action.describe())
    rejected = [a for a in actions if a.action == "rejected"]
    counts: dict[str, int] = {}
    for action in actions:
        counts[action.action] = counts.get(action.action, 0) + 1
    summary = ", ".join(f"{n} {kind}" for kind, n in sorted(counts.items())) or "no result files found"
    echo(f"merge: {summary}")
    return 1 if rejected else 0


def cmd_refresh(args: argparse.Namespace) -> int:
    from gemm_bench.cli import refresh as refresh_mod
    from gemm_bench.cli.installed_stack import installed_stack
    from gemm_bench.results.stack import StackError, validate_fields

    try:
        stale_when = validate_fields([f.strip() for f in args.stale_when.split(",") if f.strip()],
                                     source="--stale-when")
    except StackError as exc:
        raise UsageError(str(exc)) from None
    rules = refresh_mod.Rules(stale_when=stale_when, max_age_days=args.max_age_days, force=args.force)
    srcdir = Path(args.srcdir)
    if not srcdir.is_dir():
        raise UsageError(f"SRCDIR: {srcdir} is not a directory")
    # Before the site is read or a GPU probed: a cache that is not a folder (--cache-dir /dev/null went
    # ahead) is refused, and one this user cannot write unless the plan is all that is asked.
    writable_destination(Path(args.cache_dir) if args.cache_dir else srcdir / "_gemm_cache", "--cache-dir",
                         directory=True, writable=not args.dry_run)
    try:
        if args.device:
            if not args.dry_run:
                raise refresh_mod.RefreshError("--device: plans for another GPU only with --dry-run")
            from gemm_bench.question.devices import ALIASES, normalize_selector

            slug = normalize_selector(args.device)
            if slug not in ALIASES.values():
                raise refresh_mod.RefreshError(f"--device {one_line(args.device)}: not a device the site knows; "
                                               f"choose from {', '.join(ALIASES)}")
            gpus = [refresh_mod.GpuSlot(0, slug)]
            local = None
        else:
            gpus = refresh_mod.select_gpus(refresh_mod.probe_gpus(), args.gpus, dry_run=args.dry_run)
            # The versions the workers will record, read without importing torch or TE here (the
            # workers import them to measure); the driver only if the rule compares it.
            local = installed_stack(stale_when)
        outcome = refresh_mod.refresh(
            srcdir, cache_dir=Path(args.cache_dir) if args.cache_dir else None, gpus=gpus, local=local,
            rules=rules, dry_run=args.dry_run, progress=refresh_mod.default_progress(),
            with_studies=not args.no_studies, force_studies=args.force_studies,
        )
    except refresh_mod.RefreshError as exc:
        raise UsageError(str(exc)) from None
    for path in outcome.stored:
        echo(f"wrote {path}")
    for line in outcome.failed:
        echo_wrapped(f"not measured: {line}", hanging=4, file=sys.stderr)
    if outcome.not_started:
        echo_wrapped(f"not started: {', '.join(outcome.not_started)} (re-run to measure them)", hanging=4,
                     file=sys.stderr)
    if outcome.interrupted:
        echo("gemm-bench refresh: interrupted; every result stored so far is kept", file=sys.stderr)
        return 130
    return 0 if outcome.ok else 1


#: ``--max-age-days`` at most this (about 2700 years): finite, and a date minus it still a date.
MAX_AGE_DAYS = 1_000_000.0
#: ``--gpus`` indices: far more than one host holds, few enough digits to convert safely.
MAX_GPU_INDEX = 1023


def _shown(text: str) -> str:
    text = one_line(text)
    return repr(text) if len(text) <= 24 else f"'{text[:24]}...' ({len(text)} characters)"


def _positive_float(text: str) -> float:
    needs = f"needs a number of days above 0 and at most {MAX_AGE_DAYS:g}, got {_shown(text)}"
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(needs) from None
    if not (math.isfinite(value) and 0 < value <= MAX_AGE_DAYS):
        raise argparse.ArgumentTypeError(needs)
    return value


def _gpu_selection(text: str) -> str:
    """``--gpus``: ``all`` or a comma list of small indices (the refresh matches them to the GPUs)."""
    if text.strip().lower() == "all":
        return text
    for item in (part.strip() for part in text.split(",")):
        if not (item.isascii() and item.isdigit()) or len(item.lstrip("0")) > len(str(MAX_GPU_INDEX)) \
                or int(item) > MAX_GPU_INDEX:
            raise argparse.ArgumentTypeError(f"{_shown(item)} is not a GPU index (0 to {MAX_GPU_INDEX}) or 'all'")
    return text


def add_commands(subparsers: Any) -> None:
    """Add ``compare``, ``merge`` and ``refresh`` to ``gemm-bench``'s sub-command parsers."""
    from gemm_bench.results.stack import DEFAULT_STALE_WHEN, STACK_FIELDS

    p = subparsers.add_parser("compare", help="compare two results of one question (devices or software stacks)")
    p.add_argument("a", metavar="A", help="a result file, or a cache directory (then B is one too)")
    p.add_argument("b", metavar="B", help="a result file of the same question, or a cache directory")
    fmt = p.add_mutually_exclusive_group()
    fmt.add_argument("--json", action="store_true", help="print JSON")
    fmt.add_argument("--markdown", action="store_true", help="print Markdown (a pull request body)")
    p.set_defaults(func=cmd_compare)

    p = subparsers.add_parser("merge", help="validate result and study files from several runners and merge them "
                                            "into the cache (exit 1 when a file could not be merged)")
    p.add_argument("dirs", metavar="DIR", nargs="+", help="directories of result files (searched recursively)")
    p.add_argument("--cache-dir", default=str(DEFAULT_CACHE), metavar="DIR",
                   help=f"the cache to merge into (default: {DEFAULT_CACHE})")
    p.add_argument("--summary", metavar="FILE",
                   help="write the files that could not be merged, and why, as Markdown for a pull request "
                        "body (an empty file when every file was merged)")
    p.set_defaults(func=cmd_merge)

    p = subparsers.add_parser("refresh", help="measure every question the site's pages ask, on every local GPU"
                              + needs("refresh") + "; --dry-run needs 'docs' only")
    p.add_argument("srcdir", metavar="SRCDIR", help="the documentation source directory (docs/)")
    p.add_argument("--gpus", type=_gpu_selection, metavar="all|0,1", help="which local GPUs measure (default: all)")
    p.add_argument("--dry-run", action="store_true", help="print the plan, measure nothing")
    p.add_argument("--device", metavar="NAME", help="with --dry-run: plan for this device (h100, b200, ...)")
    p.add_argument("--cache-dir", metavar="DIR", help="the result cache (default: SRCDIR/_gemm_cache)")
    p.add_argument("--stale-when", default=",".join(DEFAULT_STALE_WHEN), metavar="FIELDS",
                   help=f"stack differences that make a result stale, of {', '.join(STACK_FIELDS)} "
                        f"(default: {','.join(DEFAULT_STALE_WHEN)})")
    p.add_argument("--max-age-days", type=_positive_float, metavar="DAYS", help="results older than this are stale")
    p.add_argument("--force", action="store_true", help="re-measure every question (studies: --force-studies)")
    p.add_argument("--force-studies", action="store_true",
                   help="re-measure every study too (they are otherwise measured when missing or stale)")
    p.add_argument("--no-studies", action="store_true", help="measure the questions only, no study")
    p.set_defaults(func=cmd_refresh)
