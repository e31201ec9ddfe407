"""What the gemm-benchmark extension costs the docs build: the site against its stripped twin.

The *stripped twin* is a copy of ``docs/`` in which every ``gemm-benchmark`` directive block
(rST and MyST, options and content included) is removed and every ``gemm-*`` role is replaced
by its own text, so that sentences stay sentences. ``conf.py`` is copied untouched: the
extension is still loaded, so the difference between the two builds is what the directives and
roles cost, not a different configuration.

Each build runs in a fresh ``python -m sphinx`` subprocess (the build's import and start-up
costs are part of what a reader of ``nox -s docs`` waits for). Per repetition, the site and the
twin alternate (their order flips every repetition, so drift on a shared machine hits both):

* **clean**: output and doctree folders removed first;
* **no-change**: the same build again, nothing edited;
* **prose edit**: one word of one prose sentence of ``tutorial.md`` toggled, then rebuilt.

Reported: medians with min-max spread, and the issue's three ratios, each computed per
repetition (paired, so that both sides of a ratio saw the same machine load) and summarised by
median and min-max. Peak memory is each build process's ``ru_maxrss`` from ``os.wait4`` (the
largest resident set of the build process or any descendant it waited for, not their sum).

Run through ``nox -s perf`` (``-- --runs 3 --json perf.json``). A benchmark, not a test.

``--profile DIR`` instead profiles one clean build and one prose-edit rebuild of the site with
cProfile (``DIR/clean.prof``, ``DIR/edit.prof``) and prints where the extension's time goes: its
own functions (``gemm_bench``, ``gemm_benchmark``), the matplotlib calls and imports they make,
and the build phases they sit in. Times under cProfile are inflated, Python-heavy code most:
compare entries with each other, not with the benchmark's wall times.

The report ends with the GPU side, read from files, never measured here: each committed result's
refresh time (``provenance.measure_s``), and "Last GPU runs": per device, the newest
``measurements/<session>/<gpu>-<call>/timings.json`` (written by ``tools/gpu_session.sh``) with
issue 34's targets: the whole-site refresh (<= 300 s on an H100), ``refresh --dry-run``'s estimate
(within 30% of it), the author's one-page build (<= 30 s), and the README's ``nox -s docs``.
``--last-gpu-runs`` prints that section alone, without building.
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime
import json
import math
import os
import platform
import pstats
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import textwrap
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
DOCS = REPO / "docs"

#: Directives of the extension (``gemm-benchmark`` and its ``gemm-benchmark-*`` family).
DIRECTIVE_NAME = re.compile(r"gemm-benchmark(?:-[a-z]+)*")
#: Roles of the extension: every role whose name starts with ``gemm-``.
ROLE_NAME = r"gemm-[a-z][a-z0-9-]*"

#: The prose sentence the incremental rebuild edits (in tutorial.md; one word toggled).
EDIT_FILE = "tutorial.md"
EDIT_FROM = "has a row per GEMM"
EDIT_TO = "has one row per GEMM"

#: rST directives whose content is not rST: a ``.. gemm-benchmark::`` inside them is an example.
RST_LITERAL_DIRECTIVES = frozenset({
    "code-block", "code", "sourcecode", "parsed-literal", "raw", "math", "csv-table", "literalinclude",
    "doctest", "testcode", "testoutput", "testsetup", "testcleanup", "productionlist", "graphviz",
    "highlight", "only-literal",
})
#: MyST fences whose content is parsed as Markdown (anything else with a ``{name}`` is treated as
#: literal unless it is ``eval-rst``, whose content is stripped as rST).
MYST_MARKDOWN_DIRECTIVES = frozenset({
    "note", "warning", "tip", "important", "hint", "caution", "danger", "error", "attention",
    "admonition", "seealso", "topic", "sidebar", "container", "div", "card", "tab-item", "tab-set",
    "dropdown", "grid", "grid-item", "grid-item-card", "figure", "table", "list-table", "glossary",
    "only", "rubric", "epigraph", "pull-quote", "highlights", "margin", "versionadded",
    "versionchanged", "deprecated",
})


class PerfError(RuntimeError):
    """A build that failed, or a docs tree the tool cannot work on; the message says which."""


# ------------------------------------------------------------------------------------------------
# Stripping
# ------------------------------------------------------------------------------------------------

_RST_DIRECTIVE = re.compile(r"^(?P<indent>[ \t]*)\.\.[ \t]+(?P<name>[A-Za-z0-9_:+.-]+)[ \t]*::(?:[ \t]|$)")
_RST_EXPLICIT = re.compile(r"^(?P<indent>[ \t]*)\.\.(?:[ \t]|$)")
_RST_ROLE_OR_LITERAL = re.compile(
    rf"``[^`].*?``(?!`)|:(?P<role>{ROLE_NAME}):`(?P<text>(?:[^`\\]|\\.)+)`(?!`)", re.DOTALL
)
_MYST_FENCE = re.compile(r"^(?P<indent>[ \t]*)(?P<fence>`{3,}|~{3,}|:{3,})[ \t]*(?P<info>.*?)[ \t]*$")
_MYST_ROLE_OR_CODE = re.compile(
    rf"\{{(?P<role>{ROLE_NAME})\}}(?P<ticks>`+)(?P<text>.+?)(?P=ticks)(?!`)|(?P<code>`+).+?(?P=code)(?!`)",
    re.DOTALL,
)


def _indent(line: str) -> int:
    return len(line) - len(line.lstrip(" \t"))


def _block_end(lines: Sequence[str], start: int, base: int) -> int:
    """Index after the indented block that begins below ``lines[start]`` (indent > ``base``).

    Trailing blank lines are not part of the block: they separate it from what follows, and
    removing a block must leave that separation as it was.
    """
    end = start + 1
    last = start
    while end < len(lines):
        line = lines[end]
        if line.strip():
            if _indent(line) <= base:
                break
            last = end
        end += 1
    return last + 1


def _strip_rst_roles(text: str) -> str:
    def replace(match: re.Match[str]) -> str:
        if match.group("role") is None:
            return match.group(0)  # an inline literal: shown as typed
        return re.sub(r"\\(.)", r"\1", match.group("text"))

    return _RST_ROLE_OR_LITERAL.sub(replace, text)


class _Paragraph:
    """Prose lines held back until the paragraph ends, so a role split over lines is seen whole."""

    def __init__(self, out: list[str], strip_roles: Callable[[str], str]) -> None:
        self.out = out
        self.strip_roles = strip_roles
        self.lines: list[str] = []

    def add(self, line: str) -> None:
        self.lines.append(line)
        if not line.strip():
            self.flush()

    def flush(self) -> None:
        if self.lines:
            self.out.append(self.strip_roles("".join(self.lines)))
            self.lines = []


def strip_rst(text: str) -> str:
    """``text`` (reStructuredText) without gemm-benchmark directives, gemm-* roles as their text.

    Literal contexts are left alone: the content of ``code-block`` and similar directives, of
    comments, and of ``::`` literal blocks may show the directive as an example.
    """
    lines = text.splitlines(keepends=True)
    out: list[str] = []
    prose = _Paragraph(out, _strip_rst_roles)
    i = 0
    while i < len(lines):
        line = lines[i]
        directive = _RST_DIRECTIVE.match(line)
        if directive and DIRECTIVE_NAME.fullmatch(directive.group("name")):
            prose.flush()
            i = _block_end(lines, i, _indent(line))
            continue
        if (directive and directive.group("name") in RST_LITERAL_DIRECTIVES) or (
            not directive and _RST_EXPLICIT.match(line)
        ):
            # Literal content, or a comment / target / footnote: copied verbatim.
            prose.flush()
            end = _block_end(lines, i, _indent(line))
            out.extend(lines[i:end])
            i = end
            continue
        if directive:
            prose.flush()  # another directive: its options and content are stripped like prose
        prose.add(line)
        if line.rstrip().endswith("::") and not directive:
            # A paragraph ending in '::' introduces a literal block: the indented block after it
            # (indented past the paragraph's last line).
            prose.flush()
            end = _block_end(lines, i, _indent(line))
            out.extend(lines[i + 1:end])
            i = end
            continue
        i += 1
    prose.flush()
    return "".join(out)


def _strip_myst_roles(text: str) -> str:
    def replace(match: re.Match[str]) -> str:
        if match.group("role") is None:
            return match.group(0)  # inline code: shown as typed
        return match.group("text").strip() if match.group("ticks") != "`" else match.group("text")

    return _MYST_ROLE_OR_CODE.sub(replace, text)


def _fence_close(lines: Sequence[str], start: int, fence: str) -> int:
    """Index of the line closing the fence opened at ``start`` (``len(lines)`` if unclosed)."""
    for j in range(start + 1, len(lines)):
        match = _MYST_FENCE.match(lines[j])
        if (match and match.group("fence")[0] == fence[0] and len(match.group("fence")) >= len(fence)
                and not match.group("info")):
            return j
    return len(lines)


def strip_myst(text: str) -> str:
    """``text`` (MyST Markdown) without gemm-benchmark directives, gemm-* roles as their text.

    Fences are ```` ``` ````, ``~~~`` and ``:::`` (colon_fence). Code fences are copied as they
    are; directive fences that hold Markdown (``{note}``, ...) are stripped inside; the content
    of ``{eval-rst}`` is stripped as reStructuredText.
    """
    lines = text.splitlines(keepends=True)
    out: list[str] = []
    prose = _Paragraph(out, _strip_myst_roles)
    i = 0
    while i < len(lines):
        line = lines[i]
        match = _MYST_FENCE.match(line)
        if match and match.group("info") and not (match.group("fence")[0] == "`" and "`" in match.group("info")):
            prose.flush()
            fence = match.group("fence")
            close = _fence_close(lines, i, fence)
            name_match = re.match(r"\{([^}]+)\}", match.group("info"))
            name = name_match.group(1) if name_match else None
            if name is not None and DIRECTIVE_NAME.fullmatch(name):
                i = close + 1
                continue
            out.append(line)
            body = "".join(lines[i + 1:close])
            if name == "eval-rst":
                out.append(strip_rst(body))
            elif name in MYST_MARKDOWN_DIRECTIVES:
                out.append(strip_myst(body))
            else:
                out.append(body)  # code (or a directive of unknown content): literal
            out.extend(lines[close:close + 1])
            i = close + 1
            continue
        if match:
            prose.flush()
            # A bare fence (no info string) opens a code block, or is a stray closing fence.
            close = _fence_close(lines, i, match.group("fence"))
            out.extend(lines[i:close + 1])
            i = close + 1
            continue
        prose.add(line)
        i += 1
    prose.flush()
    return "".join(out)


def strip_source(path: Path, text: str) -> str:
    """Stripped text of one source file, by its suffix; other files are returned unchanged."""
    if path.suffix == ".rst":
        return strip_rst(text)
    if path.suffix == ".md":
        return strip_myst(text)
    return text


def export_tree(rev: str, dst: Path) -> Path:
    """``docs``, ``bench`` and ``sphinxext`` as committed at ``rev``, extracted under ``dst``.

    Measuring a commit rather than the working tree keeps the numbers apart from edits in
    progress, and lets a "before" and an "after" be measured on one machine in one sitting.
    """
    dst.mkdir(parents=True)
    try:
        archive = subprocess.run(["git", "-C", str(REPO), "archive", "--format=tar", rev, "docs", "bench", "sphinxext"],
                                 capture_output=True, check=True).stdout
        subprocess.run(["tar", "-x", "-C", str(dst)], input=archive, capture_output=True, check=True)
    except (OSError, subprocess.CalledProcessError) as exc:
        detail = getattr(exc, "stderr", b"") or b""
        message = f"--rev {rev}: cannot export docs/bench/sphinxext: {exc} {detail.decode(errors='replace')}"
        raise PerfError(message) from exc
    return dst


def copy_docs(src: Path, dst: Path, *, stripped: bool) -> None:
    """Copy the docs tree ``src`` (no build output) to ``dst``, stripping its sources if asked.

    ``dst`` sits next to links to the ``bench`` and ``sphinxext`` folders beside ``src``, so that
    ``conf.py``'s own ``sys.path`` lines (which come first on ``sys.path``) find the packages
    exactly as they do in the repository.
    """
    shutil.copytree(src, dst, ignore=shutil.ignore_patterns("_build", "*.lock", "__pycache__"))
    for name in ("bench", "sphinxext"):
        link = dst.parent / name
        if not link.exists():
            link.symlink_to(src.parent.resolve() / name, target_is_directory=True)
    if stripped:
        for path in sorted(dst.rglob("*")):
            if path.suffix in (".rst", ".md") and path.is_file() and "_gemm_cache" not in path.parts:
                text = path.read_text(encoding="utf-8")
                path.write_text(strip_source(path, text), encoding="utf-8")


def toggle_edit(docs: Path) -> None:
    """Toggle one word of one prose sentence of the tutorial (a real edit every time)."""
    path = docs / EDIT_FILE
    text = path.read_text(encoding="utf-8")
    if EDIT_FROM in text:
        path.write_text(text.replace(EDIT_FROM, EDIT_TO, 1), encoding="utf-8")
    elif EDIT_TO in text:
        path.write_text(text.replace(EDIT_TO, EDIT_FROM, 1), encoding="utf-8")
    else:
        raise PerfError(f"{path}: neither {EDIT_FROM!r} nor {EDIT_TO!r} found; update EDIT_FROM in {__file__}")


# ------------------------------------------------------------------------------------------------
# Building and timing
# ------------------------------------------------------------------------------------------------

@dataclasses.dataclass(frozen=True)
class Build:
    """One sphinx-build subprocess: wall time, peak RSS of its process tree, warning count."""

    seconds: float
    maxrss_mib: float
    warnings: int


def run_build(docs: Path, out: Path, *, jobs: str = "1", clean: bool = False, profile: Path | None = None) -> Build:
    """Build ``docs`` into ``out`` in a fresh interpreter; raise PerfError if the build fails.

    ``profile``: run the build under cProfile, writing its statistics to that file.
    """
    html, doctrees = out / "html", out / "doctrees"
    if clean:
        shutil.rmtree(out, ignore_errors=True)
    out.mkdir(parents=True, exist_ok=True)
    env = dict(os.environ, GEMM_BENCH_EXECUTION_MODE="cache", PYTHONDONTWRITEBYTECODE="1")
    profiler = ["-m", "cProfile", "-o", str(profile)] if profile is not None else []
    cmd = [sys.executable, *profiler, "-m", "sphinx", "-b", "html", "-q", "-j", jobs, "-d", str(doctrees), str(docs),
           str(html)]
    log = out / "build.log"
    with open(log, "wb") as handle:
        start = time.perf_counter()
        proc = subprocess.Popen(cmd, stdout=handle, stderr=subprocess.STDOUT, env=env)
        _, status, usage = os.wait4(proc.pid, 0)
        seconds = time.perf_counter() - start
    proc.returncode = os.waitstatus_to_exitcode(status)
    text = log.read_text(encoding="utf-8", errors="replace")
    if proc.returncode != 0:
        raise PerfError(f"sphinx build of {docs} failed ({proc.returncode}):\n{text[-4000:]}")
    # ru_maxrss is in KiB on Linux, in bytes on macOS.
    scale = 1 / (1024 * 1024) if platform.system() == "Darwin" else 1 / 1024
    return Build(seconds, usage.ru_maxrss * scale, text.count("WARNING"))


@dataclasses.dataclass
class Series:
    """Repeated measurements of one quantity (seconds or MiB), in repetition order."""

    values: list[float] = dataclasses.field(default_factory=list)

    def summary(self) -> dict[str, float]:
        v = self.values
        return {"median": statistics.median(v), "min": min(v), "max": max(v), "n": len(v)}


def _ratio(a: Series, b: Series) -> Series:
    return Series([x / y for x, y in zip(a.values, b.values, strict=True)])


VARIANTS = ("site", "stripped")
KINDS = ("clean", "nochange", "edit")


def measure(runs: int, *, parallel: bool, progress: Callable[[str], None], rev: str | None = None) -> dict[str, Any]:
    """Alternating builds of the site and its twin; every series and the three ratios.

    ``rev``: measure that commit's docs and packages instead of the working tree.
    """
    if runs < 1:
        raise PerfError(f"--runs must be at least 1, not {runs}")
    times: dict[str, Series] = {f"{v}.{k}": Series() for v in VARIANTS for k in KINDS}
    rss: dict[str, Series] = {v: Series() for v in VARIANTS}
    warnings: dict[str, int] = {}
    if parallel:
        times["site.clean.jauto"] = Series()
    with tempfile.TemporaryDirectory(prefix="gemm-perf-") as tmp:
        docs = DOCS if rev is None else export_tree(rev, Path(tmp) / "source") / "docs"
        if not (docs / EDIT_FILE).is_file():
            raise PerfError(f"{docs / EDIT_FILE} not found")
        roots = {v: Path(tmp) / v / "docs" for v in VARIANTS}
        for variant, root in roots.items():
            root.parent.mkdir(parents=True)
            copy_docs(docs, root, stripped=variant == "stripped")
        for rep in range(runs):
            order = VARIANTS if rep % 2 == 0 else VARIANTS[::-1]
            for variant in order:
                root, out = roots[variant], roots[variant].parent / "build"
                progress(f"run {rep + 1}/{runs}: {variant}")
                clean = run_build(root, out, clean=True)
                nochange = run_build(root, out)
                toggle_edit(root)
                edit = run_build(root, out)
                times[f"{variant}.clean"].values.append(clean.seconds)
                times[f"{variant}.nochange"].values.append(nochange.seconds)
                times[f"{variant}.edit"].values.append(edit.seconds)
                rss[variant].values.append(clean.maxrss_mib)
                warnings[variant] = clean.warnings
            if parallel:
                progress(f"run {rep + 1}/{runs}: site -j auto")
                out = roots["site"].parent / "build-jauto"
                times["site.clean.jauto"].values.append(run_build(roots["site"], out, jobs="auto", clean=True).seconds)
    ratios = {
        "clean site / clean stripped": _ratio(times["site.clean"], times["stripped.clean"]),
        "prose-edit rebuild / no-change rebuild (site)": _ratio(times["site.edit"], times["site.nochange"]),
        "prose-edit rebuild / no-change rebuild (stripped)": _ratio(times["stripped.edit"], times["stripped.nochange"]),
        "peak RSS site / stripped (clean builds)": _ratio(rss["site"], rss["stripped"]),
    }
    goals = {
        "clean site / clean stripped": 2.0,
        "prose-edit rebuild / no-change rebuild (site)": 1.5,
        "peak RSS site / stripped (clean builds)": 1.5,
    }
    if parallel:
        ratios["clean site -j auto / -j 1"] = _ratio(times["site.clean.jauto"], times["site.clean"])
    return {
        "runs": runs,
        "machine": {"cpus": os.cpu_count(), "platform": platform.platform(), "python": platform.python_version(),
                    "loadavg_at_end": list(os.getloadavg()) if hasattr(os, "getloadavg") else None},
        "commit": _git_commit() if rev is None else _resolve(rev),
        "execution_mode": "cache",
        "seconds": {k: {**s.summary(), "values": s.values} for k, s in times.items()},
        "peak_rss_mib": {k: {**s.summary(), "values": s.values} for k, s in rss.items()},
        "warnings_in_clean_build": warnings,
        "ratios": {k: {**s.summary(), "values": s.values, "goal": goals.get(k)} for k, s in ratios.items()},
    }


def _git_commit() -> str | None:
    try:
        out = subprocess.run(["git", "-C", str(REPO), "rev-parse", "HEAD"], capture_output=True, text=True, check=True)
        dirty = subprocess.run(["git", "-C", str(REPO), "status", "--porcelain", "--", "docs", "bench", "sphinxext"],
                               capture_output=True, text=True, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return None
    return out.stdout.strip() + ("+dirty" if dirty else "")


def _resolve(rev: str) -> str:
    out = subprocess.run(["git", "-C", str(REPO), "rev-parse", rev], capture_output=True, text=True)
    return out.stdout.strip() or rev


def _rows(result: dict[str, Any]) -> Iterator[str]:
    labels = {
        "clean": "clean build", "nochange": "no-change rebuild", "edit": "prose-edit rebuild",
    }
    yield f"{'':28} {'site':>22} {'stripped':>22}"
    for kind in KINDS:
        cells = []
        for variant in VARIANTS:
            s = result["seconds"][f"{variant}.{kind}"]
            cells.append(f"{s['median']:6.2f} s [{s['min']:.2f}-{s['max']:.2f}]")
        yield f"{labels[kind]:28} {cells[0]:>22} {cells[1]:>22}"
    cells = []
    for variant in VARIANTS:
        s = result["peak_rss_mib"][variant]
        cells.append(f"{s['median']:6.0f} MiB [{s['min']:.0f}-{s['max']:.0f}]")
    yield f"{'peak RSS (clean build)':28} {cells[0]:>22} {cells[1]:>22}"
    if "site.clean.jauto" in result["seconds"]:
        s = result["seconds"]["site.clean.jauto"]
        yield f"{'clean build -j auto':28} {s['median']:6.2f} s [{s['min']:.2f}-{s['max']:.2f}]"
    yield ""
    yield "ratio (per run, paired)                             median  [min-max]     goal"
    for name, s in result["ratios"].items():
        goal = f"<= {s['goal']:.1f}" if s["goal"] is not None else ""
        yield f"{name:50} {s['median']:6.2f}x [{s['min']:.2f}-{s['max']:.2f}]  {goal}"
    m = result["machine"]
    yield ""
    yield (f"{result['runs']} runs, alternating; {m['cpus']} CPUs; commit {result['commit']}; "
           f"warnings in clean builds: {result['warnings_in_clean_build']}")


def to_text(result: dict[str, Any]) -> str:
    """The compact table the nox session prints."""
    lines = [*_rows(result), *refresh_rows(result.get("refresh", []))]
    if "gpu_runs" in result:
        lines.extend(gpu_run_rows(result["gpu_runs"]))
    return "\n".join(lines)


def refresh_walltimes(cache_dir: Path) -> list[dict[str, Any]]:
    """The GPU side of the site's cost: per committed result of method v4, the wall seconds its
    measurement took on its GPU (``provenance.measure_s``, written by the runner; the refresh
    worker's start is not in it). Read from the cache, never typed: the last GPU run's numbers."""
    from gemm_bench.results.cache import CacheError, read_document

    rows = []
    for path in sorted(cache_dir.glob("*.json")):
        try:
            doc = read_document(path)
        except CacheError:
            continue
        seconds = doc["provenance"].get("measure_s")
        if isinstance(seconds, (int, float)):
            rows.append({"file": path.name, "device": doc["device"]["name"], "measure_s": float(seconds),
                         "date": doc["provenance"].get("date", ""),
                         "phases_s": dict(doc["provenance"].get("phases_s") or {})})
    return rows


def refresh_rows(rows: list[dict[str, Any]]) -> list[str]:
    """Per GPU: each question's refresh wall time and their sum (from :func:`refresh_walltimes`)."""
    if not rows:
        return []
    out = ["", "GPU refresh wall time per question (last GPU run, from each result's provenance.measure_s):"]
    for device in sorted({r["device"] for r in rows}):
        mine = [r for r in rows if r["device"] == device]
        for r in mine:
            out.append(f"  {device:<24} {r['file']:<44} {r['measure_s']:7.1f} s  ({r['date']})")
        out.append(f"  {device:<24} {len(mine)} question(s): {sum(r['measure_s'] for r in mine) / 60:.1f} min "
                   "plus one worker start")
        phases: dict[str, float] = {}
        for r in mine:
            for name, seconds in r.get("phases_s", {}).items():
                if name != "total":
                    phases[name] = phases.get(name, 0.0) + float(seconds)
        if phases:
            top = sorted(phases.items(), key=lambda item: -item[1])[:6]
            out.append(f"  {device:<24} where it went: " + ", ".join(f"{n} {v:.0f} s" for n, v in top))
    return out


# ------------------------------------------------------------------------------------------------
# The last GPU runs (measurements/<session>/<gpu>-<call>/timings.json, written by tools/gpu_session.sh)
# ------------------------------------------------------------------------------------------------

#: Where the GPU session script leaves one ``timings.json`` per GPU run.
MEASUREMENTS = REPO / "measurements"
TIMINGS_FILE = "timings.json"
#: Issue 34's targets on an H100: the whole site refreshed, an author's one-page build, and how far
#: ``refresh --dry-run``'s estimate may stray from the real refresh (a fraction of the real time).
REFRESH_TARGET_S = 300.0
AUTHOR_BUILD_TARGET_S = 30.0
ESTIMATE_TOLERANCE = 0.30
#: ``timings.json``'s fields: (JSON types accepted, may be null). Every field is required.
TIMINGS_FIELDS: dict[str, tuple[str, bool]] = {
    "device": ("string", False),
    "date": ("string", False),
    "commit": ("string", False),
    "refresh_s": ("seconds", True),
    "questions": ("count", True),
    "dry_run_estimate_s": ("seconds", True),
    "phases_s": ("phases", True),
    "readme_docs_s": ("seconds", True),
    "author_build_s": ("seconds", True),
}
#: What a GPU call measures; a call may measure any of them (a docs-only call has no refresh).
MEASURED = ("refresh_s", "readme_docs_s", "author_build_s")
_COMMIT = re.compile(r"[0-9a-f]{7,40}(?:[+-]dirty)?")


class TimingsError(PerfError):
    """A ``timings.json`` that does not have the shape the GPU session script writes."""


def _seconds(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value) and value >= 0


def check_timings(doc: Any, where: str) -> dict[str, Any]:
    """``doc`` if it is a valid ``timings.json``; else TimingsError naming ``where`` and every bad field.

    Strict on purpose: a misspelt key or a time written as a string would otherwise drop a number
    from the report without a word. ``date`` is ISO 8601 with its time zone (the newest run per
    device is chosen by it); ``phases_s`` maps each phase's name to its seconds summed over the
    questions.
    """
    if not isinstance(doc, dict):
        raise TimingsError(f"{where}: $: must be a JSON object, not {type(doc).__name__}")
    problems = [f"$.{key}: unknown field (fields: {', '.join(TIMINGS_FIELDS)})"
                for key in doc if key not in TIMINGS_FIELDS]
    for key, (kind, nullable) in TIMINGS_FIELDS.items():
        if key not in doc:
            problems.append(f"$.{key}: is missing")
            continue
        value = doc[key]
        if value is None:
            if not nullable:
                problems.append(f"$.{key}: may not be null")
            continue
        if kind == "string" and not (isinstance(value, str) and value.strip()):
            problems.append(f"$.{key}: must be a non-empty string, not {value!r}")
        elif kind == "seconds" and not _seconds(value):
            problems.append(f"$.{key}: must be a number of seconds >= 0, not {value!r}")
        elif kind == "count" and not (isinstance(value, int) and not isinstance(value, bool) and value >= 1):
            problems.append(f"$.{key}: must be a whole number >= 1, not {value!r}")
        elif kind == "phases":
            if not isinstance(value, dict):
                problems.append(f"$.{key}: must be an object of phase name -> seconds, not {value!r}")
            else:
                problems.extend(f"$.{key}[{name!r}]: must be a number of seconds >= 0, not {seconds!r}"
                                for name, seconds in value.items() if not _seconds(seconds))
    if isinstance(doc.get("date"), str) and doc["date"].strip():
        try:
            stamp = datetime.datetime.fromisoformat(doc["date"])
        except ValueError:
            stamp = None
        if stamp is None or stamp.tzinfo is None:
            problems.append("$.date: must be an ISO 8601 time with its zone (2026-11-25T17:10:00Z), "
                            f"not {doc['date']!r}")
    if isinstance(doc.get("commit"), str) and doc["commit"].strip() and not _COMMIT.fullmatch(doc["commit"]):
        problems.append(f"$.commit: must be a git commit id (7-40 hex digits), not {doc['commit']!r}")
    if not problems and all(doc[key] is None for key in MEASURED):
        problems.append(f"$: measures nothing (one of {', '.join(MEASURED)} must be a number)")
    if not problems and (doc["refresh_s"] is None) != (doc["questions"] is None):
        problems.append("$.refresh_s, $.questions: both or neither (a refresh measures some questions)")
    if problems:
        raise TimingsError(f"{where}: " + "; ".join(problems))
    return doc


def read_timings(path: Path) -> dict[str, Any]:
    """One ``timings.json``, checked (:func:`check_timings`); TimingsError names the file."""
    try:
        doc = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError) as exc:
        raise TimingsError(f"{path}: cannot read: {exc}") from exc
    except json.JSONDecodeError as exc:
        raise TimingsError(f"{path}: line {exc.lineno}: not JSON: {exc.msg}") from exc
    return check_timings(doc, str(path))


def _when(doc: dict[str, Any]) -> datetime.datetime:
    return datetime.datetime.fromisoformat(doc["date"])


def last_gpu_runs(root: Path = MEASUREMENTS) -> dict[str, Any]:
    """Per device, the newest measurement of each quantity under ``root`` (newest by the file's
    ``date``): the whole-site refresh (with its estimate and phases, from one file), the author's
    one-page build and the README's docs command, each from the newest file that measured it (a GPU
    call may measure only some of them), with the issue's targets judged. Files that fail the check
    are listed under ``ignored``, never skipped silently (a newer run with a bad file would otherwise
    leave an older one standing as "last")."""
    docs: dict[str, list[tuple[dict[str, Any], Path]]] = {}
    ignored: list[str] = []
    for path in sorted(root.rglob(TIMINGS_FILE)) if root.is_dir() else []:
        try:
            doc = read_timings(path)
        except TimingsError as exc:
            ignored.append(str(exc))
            continue
        docs.setdefault(doc["device"], []).append((doc, path))
    runs = []
    for device in sorted(docs):
        ordered = sorted(docs[device], key=lambda item: _when(item[0]), reverse=True)

        def newest(key: str, ordered: list[tuple[dict[str, Any], Path]] = ordered
                   ) -> tuple[dict[str, Any], Path] | None:
            return next((item for item in ordered if item[0][key] is not None), None)

        refresh, author, readme = newest("refresh_s"), newest("author_build_s"), newest("readme_docs_s")
        doc, path = refresh or ordered[0]
        real, estimate = doc["refresh_s"], doc["dry_run_estimate_s"]
        error = (estimate - real) / real if estimate is not None and real else None
        author_s = author[0]["author_build_s"] if author else None
        runs.append({
            **doc,
            "file": _shown(path),
            "author_build_s": author_s,
            "author_build_file": _shown(author[1]) if author else None,
            "author_build_in_root": str(author[1].relative_to(root)) if author else None,
            "readme_docs_s": readme[0]["readme_docs_s"] if readme else None,
            "readme_docs_file": _shown(readme[1]) if readme else None,
            "readme_docs_in_root": str(readme[1].relative_to(root)) if readme else None,
            "refresh_target_s": REFRESH_TARGET_S,
            "refresh_within_target": None if real is None else real <= REFRESH_TARGET_S,
            "dry_run_error": error,
            "dry_run_tolerance": ESTIMATE_TOLERANCE,
            "dry_run_within_tolerance": None if error is None else abs(error) <= ESTIMATE_TOLERANCE,
            "author_build_target_s": AUTHOR_BUILD_TARGET_S,
            "author_build_within_target": None if author_s is None else author_s <= AUTHOR_BUILD_TARGET_S,
        })
    return {"root": _shown(root), "runs": runs, "ignored": ignored}


def _shown(path: Path) -> str:
    """``path`` relative to the repository where it lies inside it (as the report prints it)."""
    return str(path.relative_to(REPO)) if path.is_absolute() and path.is_relative_to(REPO) else str(path)


def _verdict(ok: bool | None) -> str:
    return "" if ok is None else (" (met)" if ok else " (MISSED)")


def gpu_run_rows(section: dict[str, Any], *, top_phases: int = 6) -> list[str]:
    """The report's "Last GPU runs" section (from :func:`last_gpu_runs`): a line per quantity, each
    against its target."""
    out = ["", f"Last GPU runs (the newest timings.json per device under {section['root']}):"]
    if not section["runs"]:
        out.append("  no GPU run recorded")

    def row(label: str, value: str) -> str:
        return f"    {label:<28}{value}"

    for run in section["runs"]:
        out.append(f"  {run['device']}: {run['date']}, commit {run['commit']}")
        out.append(row("from", run["file"]))
        if run["refresh_s"] is None:
            out.append(row("whole-site refresh", "not measured"))
        else:
            out.append(row("whole-site refresh", f"{run['refresh_s']:7.1f} s for {run['questions']} question(s); "
                           f"target <= {run['refresh_target_s']:.0f} s{_verdict(run['refresh_within_target'])}"))
        if run["dry_run_estimate_s"] is None:
            out.append(row("refresh --dry-run estimate", "not recorded"))
        elif run["dry_run_error"] is not None:
            out.append(row("refresh --dry-run estimate",
                           f"{run['dry_run_estimate_s']:7.1f} s, {run['dry_run_error']:+.0%} of the real run; "
                           f"target within {run['dry_run_tolerance']:.0%}{_verdict(run['dry_run_within_tolerance'])}"))
        author = run["author_build_s"]
        out.append(row("author's one-page build", "not measured" if author is None else
                       f"{author:7.1f} s; target <= {run['author_build_target_s']:.0f} s"
                       f"{_verdict(run['author_build_within_target'])}"))
        if author is not None and run["author_build_file"] != run["file"]:
            out.append(row("", f"  from {run['author_build_in_root']}"))
        readme = run["readme_docs_s"]
        out.append(row("README's nox -s docs", "not measured" if readme is None else f"{readme:7.1f} s"))
        if readme is not None and run["readme_docs_file"] != run["file"]:
            out.append(row("", f"  from {run['readme_docs_in_root']}"))
        phases = sorted((run["phases_s"] or {}).items(), key=lambda item: -item[1])[:top_phases]
        if phases:
            text = ", ".join(f"{name} {seconds:.0f} s" for name, seconds in phases)
            out.extend(textwrap.wrap(text, 100, initial_indent=row("where the refresh went", ""),
                                     subsequent_indent=" " * 32, break_on_hyphens=False))
    out.extend(f"  ignored {problem}" for problem in section["ignored"])
    return out


# ------------------------------------------------------------------------------------------------
# Profiling
# ------------------------------------------------------------------------------------------------

#: Where the extension's cost shows in a profile: its two packages, and the library calls that
#: only it makes in a docs build (matplotlib drawing and saving, importing matplotlib).
EXTENSION_CODE = ("/gemm_bench/", "/gemm_benchmark/")
#: Sphinx build phases, shown beside the extension's entries so that each cost has its context.
PHASES = {
    "sphinx/builders/__init__.py:read": "phase: read (parse, transforms, directives)",
    "sphinx/builders/__init__.py:write": "phase: write (post-transforms, HTML)",
    "sphinx/builders/__init__.py:write_doctree": "phase: pickle doctrees",
    "sphinx/builders/html/__init__.py:finish": "phase: finish (search index, assets, viewcode)",
    "sphinx/environment/__init__.py:get_and_resolve_doctree": "phase: load + resolve doctrees",
    "matplotlib/figure.py:savefig": "matplotlib: savefig",
    "matplotlib/__init__.py:<module>": "matplotlib: import",
}


@dataclasses.dataclass(frozen=True)
class Cost:
    """One profiled function: cumulative and own seconds, calls, and where it is."""

    cumulative: float
    own: float
    calls: int
    where: str


def _short(filename: str) -> str:
    """A path from its package on (``gemm_bench/report/figures.py``, ``matplotlib/figure.py``)."""
    for marker in EXTENSION_CODE:
        if marker in filename:
            return marker.lstrip("/") + filename.rsplit(marker, 1)[1]
    return filename.split("site-packages/", 1)[-1]


def extension_costs(profile: Path, *, top: int = 25) -> tuple[list[Cost], list[Cost]]:
    """(phases, extension functions) of a cProfile file, each sorted by cumulative time.

    A recursive function counts once (its outermost calls' cumulative time, as pstats keeps it).
    Raises PerfError naming the file when it is not a profile.
    """
    try:
        stats = pstats.Stats(str(profile))
    except (OSError, TypeError, ValueError, EOFError) as exc:
        raise PerfError(f"{profile}: not a cProfile statistics file ({exc})") from exc
    phases: list[Cost] = []
    mine: list[Cost] = []
    table: dict[tuple[str, int, str], tuple[int, int, float, float, Any]] = stats.stats  # type: ignore[attr-defined]
    for (filename, line, name), (_, calls, own, cumulative, _) in table.items():
        path = filename.replace(os.sep, "/")
        phase = next((label for key, label in PHASES.items()
                      if path.endswith(key.rsplit(":", 1)[0]) and name == key.rsplit(":", 1)[1]), None)
        if phase is not None:
            phases.append(Cost(cumulative, own, calls, phase))
        elif any(part in path for part in EXTENSION_CODE):
            mine.append(Cost(cumulative, own, calls, f"{_short(path)}:{line}({name})"))
    phases.sort(key=lambda c: -c.cumulative)
    mine.sort(key=lambda c: -c.cumulative)
    return phases, mine[:top]


def costs_text(title: str, phases: Sequence[Cost], mine: Sequence[Cost]) -> str:
    lines = [f"{title}", f"{'cumulative':>10} {'own':>7} {'calls':>6}  where"]
    for cost in [*phases, *mine]:
        lines.append(f"{cost.cumulative:9.2f}s {cost.own:6.2f}s {cost.calls:6d}  {cost.where}")
    return "\n".join(lines)


def profile_site(out_dir: Path, progress: Callable[[str], None], *, rev: str | None = None) -> str:
    """Profile a clean build and a prose-edit rebuild of the site; the extension's costs as text."""
    out_dir.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="gemm-perf-") as tmp:
        docs = DOCS if rev is None else export_tree(rev, Path(tmp) / "source") / "docs"
        root = Path(tmp) / "site" / "docs"
        root.parent.mkdir(parents=True)
        copy_docs(docs, root, stripped=False)
        build = root.parent / "build"
        progress("profiling a clean build")
        clean = run_build(root, build, clean=True, profile=out_dir / "clean.prof")
        toggle_edit(root)
        progress("profiling a prose-edit rebuild")
        edit = run_build(root, build, profile=out_dir / "edit.prof")
    parts = []
    for kind, build_result in (("clean", clean), ("edit", edit)):
        phases, mine = extension_costs(out_dir / f"{kind}.prof")
        title = (f"{kind} build under cProfile: {build_result.seconds:.2f} s wall "
                 f"({out_dir / (kind + '.prof')})")
        parts.append(costs_text(title, phases, mine))
    return "\n\n".join(parts)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="nox -s perf --", description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5, help="repetitions of every build (default 5)")
    parser.add_argument("--json", type=Path, metavar="OUT", help="also write every measurement to OUT (JSON)")
    parser.add_argument("--rev", metavar="COMMIT",
                        help="measure docs/, bench/ and sphinxext/ as committed at COMMIT (default: the working tree)")
    parser.add_argument("--no-parallel", action="store_true", help="skip the extra clean site build with -j auto")
    parser.add_argument("--profile", type=Path, metavar="DIR",
                        help="instead of benchmarking, profile a clean and a prose-edit build of the site "
                             "(cProfile files written to DIR) and print the extension's costs")
    parser.add_argument("--last-gpu-runs", action="store_true",
                        help="instead of benchmarking, print only the last GPU runs' section (no builds)")
    parser.add_argument("--measurements", type=Path, metavar="DIR", default=MEASUREMENTS,
                        help="where the GPU runs' timings.json files are (default: measurements/)")
    args = parser.parse_args(argv)
    if args.last_gpu_runs:
        section = last_gpu_runs(args.measurements)
        print("\n".join(gpu_run_rows(section)[1:]))
        if args.json:
            args.json.write_text(json.dumps({"gpu_runs": section}, indent=2) + "\n", encoding="utf-8")
        return 0
    if args.profile is not None:
        try:
            print(profile_site(args.profile, rev=args.rev,
                               progress=lambda text: print(f"perf: {text}", file=sys.stderr, flush=True)))
        except PerfError as exc:
            print(f"perf: error: {exc}", file=sys.stderr)
            return 1
        return 0
    try:
        result = measure(args.runs, parallel=not args.no_parallel, rev=args.rev,
                         progress=lambda text: print(f"perf: {text}", file=sys.stderr, flush=True))
    except PerfError as exc:
        print(f"perf: error: {exc}", file=sys.stderr)
        return 1
    result["refresh"] = refresh_walltimes(REPO / "docs" / "_gemm_cache")
    result["gpu_runs"] = last_gpu_runs(args.measurements)
    print(to_text(result))
    if args.json:
        args.json.write_text(json.dumps(result, indent=2) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
