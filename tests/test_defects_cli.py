"""Issue 24's defect classes in the command line, the figure specs and the refresh workflow, and
issue 23's newcomer stumbles in ``gemm-bench``: each test names the class it guards."""

from __future__ import annotations

import copy
import datetime as dt
import json
import os
import pickle
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from gemm_bench.cli.commands import build_parser, main
from gemm_bench.question.question import build_question
from gemm_bench.report.compare import compare, compare_dirs
from gemm_bench.results.cache import dumps, file_name
from gemm_bench.results.merge import decide, merge
from tests.helpers import synthetic_document
from tests.test_cli import one_error

ROOT = Path(__file__).resolve().parent.parent
CACHE = ROOT / "docs" / "_gemm_cache"

#: What a hostile result file puts in its strings: OSC (set the title, write the clipboard), CSI
#: (clear the screen), a C1 CSI, BEL, a carriage return, and Markdown that would make headings,
#: mentions, HTML, code and table cells of a pull request body.
HOSTILE = ("GPU \x1b]0;owned\x07 \x1b]52;c;cm0gLXJmIH4=\x07 \x1b[2J \x9b31m \r\n# Heading @octocat "
           "<img src=x onerror=alert(1)> `code` | cell ![x](y) [l](javascript:x) &amp;")
CONTROL = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f]")


def _write(directory: Path, doc: dict[str, Any]) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / file_name(doc["question_hash"], doc["device"]["name"])
    path.write_text(dumps(doc), encoding="utf-8")
    return path


def _hostile_doc(date: str = "2026-11-01T00:00:00+00:00") -> dict[str, Any]:
    doc = synthetic_document(device=HOSTILE, date=date)
    doc["provenance"]["transformer_engine"] = "2.20\x1b[2J\n## Injected @here"
    doc["provenance"]["driver"] = "580.1\n\n### Fake section\n@maintainers approve"
    for cell in doc["cells"]:
        if cell["status"] == "measured":
            break
    return doc


# ---------------------------------------------------------------------------- 1. compare pairing
def test_compare_pairs_gemms_by_identity_not_list_position() -> None:
    """Defect class: compare paired GEMMs by list position, so a reordered sweep of identical
    data showed 512x changes. One function (gemm_identity) decides the pairing key."""
    a = synthetic_document(build_question(sweep=["1024", "8192"]), ms={("autocast", "bf16"): 2.0})
    b = synthetic_document(build_question(sweep=["8192", "1024"]), ms={("autocast", "bf16"): 2.0})
    assert a["question_hash"] == b["question_hash"]  # one question, the GEMMs stored in another order
    c = compare(a, b)
    assert len(c.gemms) == 2 and all(g.ratio == 1.0 for g in c.gemms) and not c.flagged
    assert {g.shape for g in c.gemms} == {"1024x1024x1024", "8192x8192x8192"}
    # A GEMM only one side holds is listed as unmatched, never paired with a neighbour.
    b_only = copy.deepcopy(b)
    b_only["cells"] = [x for x in b_only["cells"] if x["m"] != 1024]
    c = compare(a, b_only)
    unmatched = [g for g in c.gemms if g.unmatched]
    assert [(g.shape, g.unmatched) for g in unmatched] == [("1024x1024x1024", "only in A (B: missing)")]
    assert "only in A" in c.to_text() and "only in A" in c.to_markdown(all_gemms=True)
    from gemm_bench.report.compare import gemm_identity

    assert gemm_identity("autocast", "bf16", build_question(sweep=["8"]).gemms[0]) == (
        "8x8x8", "fprop", 8, 8, 8, 1, "autocast", "bf16")


# ---------------------------------------------------------------------------- 2. escaping
def test_compare_markdown_escapes_every_string_from_a_result_file(tmp_path: Path) -> None:
    """Defect class (security): compare --markdown, the refresh pull request's body, let a newline
    or Markdown in a result string inject headings, @-mentions, HTML and table cells."""
    hostile = _hostile_doc()
    plain = synthetic_document(date="2026-12-01T00:00:00+00:00")
    old, new = tmp_path / "old", tmp_path / "new"
    _write(old, plain)
    _write(new, hostile)
    _write(new, synthetic_document(build_question(sweep=["1024"]), device=HOSTILE))  # an added file
    for md in (compare(hostile, plain).to_markdown(all_gemms=True), compare_dirs(old, new).to_markdown()):
        assert not CONTROL.search(md)
        ours = ("## Results changed by this refresh", "### ")
        headings = [line for line in md.splitlines() if line.lstrip().startswith("#")]
        assert all(line.startswith(ours) for line in headings), headings
        assert "### Fake section" not in md and "\n#" not in md.replace("\n## GEMM", "").replace("\n### ", "")
        assert not re.search(r"(?<![\w&])@(octocat|here|maintainers)", md)  # no live mention
        assert "<img" not in md and "<" not in md.replace("&lt;", "")
        assert not re.search(r"(?<!\\)`code(?<!\\)`", md) and not re.search(r"(?<!\\)\]\(javascript", md)
        for line in md.splitlines():  # every table row keeps its own column count
            if line.startswith("|"):
                assert len(re.findall(r"(?<!\\)\|", line)) in (8, 9, 5, 6), line


def test_cli_never_prints_control_characters_from_result_files(tmp_path: Path,
                                                               capsys: pytest.CaptureFixture[str]) -> None:
    """Defect class (security): report, compare and merge printed ESC/OSC/C1 control sequences
    from result files raw; one helper (results.untrusted_text) escapes them wherever printed."""
    hostile = _hostile_doc()
    path = _write(tmp_path / "a", hostile)
    other = _write(tmp_path / "b", synthetic_document(date="2026-12-01T00:00:00+00:00"))
    runs = [["report", str(path)], ["compare", str(path), str(other)], ["compare", str(other), str(path)],
            ["compare", str(tmp_path / "b"), str(tmp_path / "a")],
            ["merge", str(tmp_path / "a"), "--cache-dir", str(tmp_path / "cache")],
            ["merge", str(tmp_path / "a"), "--cache-dir", str(tmp_path / "cache")]]
    for argv in runs:
        main(argv)
        out, err = capsys.readouterr()
        assert not CONTROL.search(out + err), (argv, out + err)
    main(["compare", str(path), str(other)])
    out = capsys.readouterr().out
    # A newline in a result string is data, not layout: it never starts a line of its own.
    assert not any(line.startswith(("# Heading", "## Injected", "### Fake")) for line in out.splitlines())


# ---------------------------------------------------------------------------- 3. figure specs
class _Exploit:
    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self) -> tuple[Any, ...]:
        return (open, (str(self.marker), "w"))


def test_a_figure_spec_is_never_unpickled(tmp_path: Path) -> None:
    """Defect class (security): the LaTeX/PNG figure converter unpickled a .spec file found next to
    an image in the source tree, so a committed file ran code at build time. Specs are JSON now."""
    from gemm_bench.report import figures
    from gemm_bench.report.report import Report

    marker = tmp_path / "code-ran"
    source = tmp_path / "src"
    source.mkdir()
    image = source / "gemm-0123456789abcdef0123.svg"
    image.write_text("<svg/>", encoding="utf-8")
    image.with_suffix(".spec").write_bytes(pickle.dumps(_Exploit(marker)))
    assert figures.load_spec(image) is None
    assert not marker.exists()
    # What the build writes is plain JSON, read back equal; a spec whose content is not the key in
    # the file's name (edited, or copied beside another figure) is refused.
    spec = figures.spec_for(Report(synthetic_document()), "autocast")
    assert spec is not None
    drawn = figures.figure_file(spec, "svg", tmp_path / "out")
    assert json.loads(drawn.with_suffix(".spec").read_text(encoding="utf-8"))["kind"] == spec.kind
    assert figures.load_spec(drawn) == spec
    renamed = drawn.with_name("gemm-ffffffffffffffffffff.svg")
    drawn.rename(renamed)
    drawn.with_suffix(".spec").rename(renamed.with_suffix(".spec"))
    assert figures.load_spec(renamed) is None
    hostile = json.loads(renamed.with_suffix(".spec").read_text(encoding="utf-8"))
    hostile["value_format"] = "{:>999999999}"
    bad = figures.spec_from_json(hostile)
    assert bad is None


def test_figure_converter_reads_specs_only_from_the_builds_figure_dir(tmp_path: Path) -> None:
    """Defect class (security), the converter's side: an image with the figure class taken from the
    source tree is never converted from the files beside it; the build's own figures are."""
    from types import SimpleNamespace

    from gemm_bench.report import figures
    from gemm_bench.report.report import Report
    from gemm_benchmark.render_block import FIGURE_DIR, FigureConverter

    doctreedir = tmp_path / "_build" / "doctrees"
    spec = figures.spec_for(Report(synthetic_document()), "autocast")
    assert spec is not None
    own = figures.figure_file(spec, "svg", doctreedir / FIGURE_DIR)
    planted = figures.figure_file(spec, "svg", tmp_path / "src" / "images")  # a valid spec, committed
    converter = FigureConverter.__new__(FigureConverter)
    converter.document = SimpleNamespace(settings=SimpleNamespace(env=SimpleNamespace(doctreedir=str(doctreedir))))
    assert converter.convert(planted, tmp_path / "planted.png") is False
    assert not (tmp_path / "planted.png").exists()
    assert converter.convert(own, tmp_path / "own.png") is True
    assert (tmp_path / "own.png").read_bytes().startswith(b"\x89PNG")
    for source in ((ROOT / "sphinxext" / "gemm_benchmark" / "render_block.py").read_text(encoding="utf-8"),
                   (ROOT / "bench" / "gemm_bench" / "report" / "figures.py").read_text(encoding="utf-8")):
        assert not re.search(r"^\s*(import pickle|from pickle)|pickle\.loads?\(", source, re.M)


# ---------------------------------------------------------------------------- 4. merge
def _cells(doc: dict[str, Any]) -> set[tuple[str, str, str, str]]:
    return {(c["mode"], c["precision"], c["op"], c["pass"]) for c in doc["cells"]}


def test_merge_says_exactly_which_cached_cells_it_dropped(tmp_path: Path) -> None:
    """Defect class (lost data): merge dropped cached cells while printing that they were kept.
    The message is computed from the document written, so it cannot disagree with it."""
    cached = synthetic_document(date="2026-11-01T00:00:00+00:00")
    incoming = synthetic_document(ms={("autocast", "bf16"): 2.5}, date="2026-11-02T00:00:00+00:00")
    action, written, reason = decide(cached, incoming)
    assert action == "merged" and written is not None
    dropped = _cells(cached) - _cells(written)
    assert dropped  # the rule: one mode is one run, so the cached FP8 autocast cells go
    assert "are kept" not in reason
    assert f"dropped {len(dropped)} cached cells" in reason and "autocast FP8 Current" in reason
    assert f"kept {len(_cells(cached) & _cells(written)) - len(_cells(incoming))} cached cells" in reason
    # And through the command: the printed line is the one computed.
    _write(tmp_path / "cache", cached)
    _write(tmp_path / "in", incoming)
    actions = merge([tmp_path / "in"], tmp_path / "cache")
    assert f"dropped {len(dropped)} cached cells" in actions[0].describe()


def test_merge_rejects_dates_in_the_future_naming_the_file(tmp_path: Path) -> None:
    """Defect class (lost data): merge trusted unvalidated dates, so a file dated 2099 won every
    merge. A date beyond a small clock skew, or one that does not parse, is rejected by name."""
    now = dt.datetime.now(dt.timezone.utc)
    cached = synthetic_document(date="2026-11-01T00:00:00+00:00")
    _write(tmp_path / "cache", cached)
    future = synthetic_document(ms={("autocast", "bf16"): 9.0}, date="2099-01-01T00:00:00+00:00")
    source = _write(tmp_path / "in", future)
    actions = merge([tmp_path / "in"], tmp_path / "cache")
    assert [a.action for a in actions] == ["rejected"]
    assert "2099-01-01" in actions[0].reason and "future" in actions[0].reason
    assert str(source) in actions[0].describe()
    assert json.loads((tmp_path / "cache" / source.name).read_text(encoding="utf-8")) == cached
    # A cached file dated in the future blocks nothing silently either: the merge says which file.
    (tmp_path / "cache" / source.name).write_text(dumps(future), encoding="utf-8")
    source.write_text(dumps(cached), encoding="utf-8")
    actions = merge([tmp_path / "in"], tmp_path / "cache")
    assert [a.action for a in actions] == ["rejected"] and str(tmp_path / "cache") in actions[0].reason
    bad = synthetic_document(date="next tuesday")
    source.write_text(dumps(bad), encoding="utf-8")
    (tmp_path / "cache" / source.name).unlink()
    actions = merge([tmp_path / "in"], tmp_path / "cache")
    assert [a.action for a in actions] == ["rejected"] and "next tuesday" in actions[0].reason
    # A clock a few minutes ahead is not a future date.
    soon = synthetic_document(date=(now + dt.timedelta(minutes=5)).isoformat())
    source.write_text(dumps(soon), encoding="utf-8")
    assert [a.action for a in merge([tmp_path / "in"], tmp_path / "cache")] == ["added"]


# ---------------------------------------------------------------------------- 5. crashes
@pytest.mark.parametrize("argv", [
    ["shapes", "--sweep", "9" * 5000],
    ["shapes", "--sweep", "64," + "9" * 400],
    ["shapes", "--shape", "9" * 5000 + "x2x2"],
    ["shapes", "--shape", "2x2x" + "1" * 400],
    ["shapes", "--model", "te-guide-5b", "--hidden-size", "9" * 5000],
    ["shapes", "--model", "te-guide-5b", "--num-layers", "9" * 400],
    ["report", str(CACHE / "x.json"), "--num-layers", "9" * 400],
    ["run", "--model", "te-guide-5b", "--repetitions", "9" * 5000],
    ["refresh", "docs", "--gpus", "9" * 5000, "--dry-run"],
    ["refresh", "docs", "--max-age-days", "1e999", "--dry-run"],
])
def test_huge_integer_arguments_are_usage_errors(argv: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    """Defect class (crash): a 5000-digit --sweep/--shape or a 400-digit --num-layers printed a
    traceback. Every integer argument is bounded: one line, exit 2."""
    if argv[0] == "report":
        argv = ["report", str(next(CACHE.glob("*.json"))), *argv[2:]]
    try:
        code = main(argv)
    except SystemExit as exc:
        code = int(exc.code or 0)
    err = capsys.readouterr().err
    assert code == 2, err
    assert len(one_error(err)) < 400, err


def _run_cli(args: list[str], tmp_path: Path) -> subprocess.CompletedProcess[str]:
    """The CLI in a child with 1 GiB of address space and a minute: a runaway read cannot hurt."""
    code = ("import resource, sys\nresource.setrlimit(resource.RLIMIT_AS, (1 << 30, 1 << 30))\n"
            "from gemm_bench.cli import main\nsys.exit(main(sys.argv[1:]))\n")
    return subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True, timeout=120,
                          cwd=tmp_path, env={**os.environ, "PYTHONPATH": str(ROOT / "bench")})


def test_readme_figure_never_reads_a_file_that_is_not_regular(tmp_path: Path) -> None:
    """Defect class (crash): readme-figure --out /dev/full read the output "to compare" until
    memory ran out (and compare read a device it was given). A non-regular file is never read:
    refused by name; a write error is one clear line."""
    out = tmp_path / "readme.svg"
    out.symlink_to("/dev/zero")
    result = _run_cli(["readme-figure", "--cache-dir", str(CACHE), "--out", str(out)], tmp_path)
    assert result.returncode == 2, result.stderr[-2000:]
    assert "Traceback" not in result.stderr and "not a regular file" in " ".join(result.stderr.split())
    assert out.is_symlink() and os.readlink(out) == "/dev/zero"
    result = _run_cli(["compare", str(out), str(next(CACHE.glob("*.json")))], tmp_path)  # the same class
    assert result.returncode == 2 and "not a regular file" in " ".join(result.stderr.split()), result.stderr[-2000:]
    if os.path.exists("/dev/full"):
        result = _run_cli(["readme-figure", "--cache-dir", str(CACHE), "--out", "/dev/full"], tmp_path)
        assert result.returncode == 2 and "Traceback" not in result.stderr
        one_error(result.stderr)
        assert not Path("/dev/full-dark").exists()


# ---------------------------------------------------------------------------- 6. refresh.yml
def test_refresh_workflow_uploads_what_was_stored_when_the_refresh_fails() -> None:
    """Defect class (lost data): refresh.yml uploaded nothing when a refresh stored results but
    exited non-zero. Collecting and uploading run after a failure; the job still fails."""
    import yaml

    workflow = yaml.safe_load((ROOT / ".github" / "workflows" / "refresh.yml").read_text(encoding="utf-8"))
    steps = workflow["jobs"]["measure"]["steps"]
    refresh = next(i for i, s in enumerate(steps) if "gemm-bench\" refresh" in s.get("run", ""))
    assert "continue-on-error" not in steps[refresh]  # the failure stays visible
    after = steps[refresh + 1:]
    assert any("upload-artifact" in s.get("uses", "") for s in after)
    for step in after:
        condition = str(step.get("if", ""))
        assert "always()" in condition or "!cancelled()" in condition or "failure()" in condition, step


# ---------------------------------------------------------------------------- 7. newcomer (issue 23)
def test_version_bare_command_and_plain_help(capsys: pytest.CaptureFixture[str]) -> None:
    """Issue 23's newcomer stumbles: --version printed "arguments are required", bare gemm-bench
    printed no subcommands, and the help's first line showed raw reStructuredText quotes."""
    import gemm_bench

    with pytest.raises(SystemExit) as exc:
        main(["--version"])
    assert exc.value.code == 0
    assert capsys.readouterr().out.strip() == f"gemm-bench {gemm_bench.__version__}"
    assert main([]) == 0  # a question, not an error: the help on stdout (every error is one line)
    out = capsys.readouterr().out
    assert out.startswith("usage: gemm-bench")
    for command in ("shapes", "run", "report", "presets", "readme-figure", "compare", "merge", "refresh"):
        assert re.search(rf"^\s+{command}(\s+\S|$)", out, re.M), command
    parser = build_parser()
    texts = [parser.format_help()]
    texts += [p.format_help() for p in parser._subparsers._group_actions[0].choices.values()]  # type: ignore[union-attr]
    for text in texts:
        assert "``" not in text and ":func:" not in text and ":mod:" not in text
    assert parser.description == "gemm-bench: list a model's GEMMs, measure them on the GPU, print a saved result."


def test_report_keeps_every_line_one_line_whatever_a_result_string_holds() -> None:
    """Class (issue 24, security): ``Report.to_text`` printed a result file's strings as they are, so
    a newline or an escape sequence in a device name began a line of its own or drove the terminal."""
    import json
    from pathlib import Path

    from gemm_bench.report.report import Report

    path = Path(__file__).resolve().parent.parent / "docs" / "_gemm_cache" / "2160d33ec54a347e--h100-80gb-hbm3.json"
    doc = json.loads(path.read_text(encoding="utf-8"))
    doc["device"]["name"] = "Evil ## heading ]0;pwned"
    clean = Report(doc).to_text().splitlines()
    doc["device"]["name"] = "Evil\n## heading \x1b]0;pwned\x07"
    text = Report(doc).to_text()
    assert len(text.splitlines()) == len(clean)
    assert "\x1b" not in text and "\x07" not in text and "\\x1b]0;pwned\\x07" in text


def test_the_build_log_never_prints_control_characters_from_result_files(tmp_path) -> None:
    """Class (issue 24, security): the build log (warnings, the freshness table) printed a result
    file's strings raw, so an OSC sequence in a device name reached the terminal."""
    from gemm_bench.question.question import build_question
    from gemm_bench.results.schema import METHOD_VERSION
    from tests.conftest import H100, make_document
    from tests.test_correctness import Project

    project = Project(tmp_path)
    doc = make_document(build_question(model="te-guide-5b"),
                        device={**H100, "name": "NVIDIA H100 80GB HBM3\x1b]0;pwned\x07"})
    doc["method_version"] = "0"  # stale: its warning quotes the device name
    project.store(doc)
    project.page("index", "T\n=\n\n.. gemm-benchmark::\n   :model: te-guide-5b\n   :precisions: bf16, fp8-current\n")
    warnings, _ = project.build()
    assert METHOD_VERSION and "stale" in warnings, warnings
    assert "\x1b]0;pwned" not in warnings and "\x07" not in warnings
    assert "\\x1b]0;pwned\\x07" in warnings
