"""What a build says (gemm_benchmark.buildlog) and what a newcomer runs (README, .ci/run, pyproject).

A rebuild repeats the warnings of pages it did not re-read (``-W`` fails again); the brief log
(``nox -s docs``) has no configuration dump, no "configuration has changed", no Sphinx progress,
and ends with where the site is and how many results need a GPU run; the README's two commands
are what CI runs and need no system ``pip install``.
"""

from __future__ import annotations

import io
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from gemm_benchmark import buildlog, execution

REPO = Path(__file__).resolve().parent.parent
ANSI = re.compile(r"\x1b\[[0-9;]*m")

PAGES = {
    "conf.py": 'extensions = ["gemm_benchmark"]\nproject = "buildlog"\n',
    "index.rst": "Index\n=====\n\n.. toctree::\n\n   results\n   quiet\n   freshness\n",
    "results.rst": "Results\n=======\n\n.. gemm-benchmark::\n   :name: nowhere\n   :model: llama3-70b\n",
    "quiet.rst": "Quiet\n=====\n\nNo benchmark here.\n",
    "freshness.rst": "Freshness\n=========\n\n.. gemm-benchmark-freshness::\n",
}


class Site:
    """A small site in a temporary directory, built again and again with one environment."""

    def __init__(self, tmp_path: Path, make_app) -> None:
        self.src = tmp_path / "src"
        self.src.mkdir()
        for name, text in PAGES.items():
            (self.src / name).write_text(text, encoding="utf-8")
        self.make_app = make_app

    def build(self, **confoverrides) -> tuple[str, str, int]:
        """(status, warnings, warning count) of one build."""
        status, warning = io.StringIO(), io.StringIO()
        app = self.make_app("html", srcdir=self.src, status=status, warning=warning,
                            confoverrides=confoverrides)
        app.build()
        count = app._warncount
        app.cleanup()
        return ANSI.sub("", status.getvalue()), ANSI.sub("", warning.getvalue()), count


@pytest.fixture
def site(tmp_path, make_app) -> Site:
    return Site(tmp_path, make_app)


def _missing(warnings: str) -> list[str]:
    return [line for line in warnings.splitlines() if "results.rst" in line and "WARNING" in line]


def test_rebuild_repeats_the_warnings_of_unchanged_pages(site, monkeypatch):
    monkeypatch.delenv(buildlog.LOG_ENV_VAR, raising=False)
    _, first, count = site.build()
    assert _missing(first) and count == len(_missing(first))
    assert buildlog.REPEATED_SUFFIX not in first

    status, again, count = site.build()  # nothing changed: nothing is re-read
    assert "results" not in re.findall(r"reading sources\.\.\. \[\s*\d+%\] (\S+)", status)
    repeated = _missing(again)
    assert count == len(repeated) == len(_missing(first)), "-W would pass although the warning still holds"
    for before, after in zip(_missing(first), repeated, strict=True):
        assert after.startswith(before.split(" [gemm_benchmark")[0]) and buildlog.REPEATED_SUFFIX in after
    assert "still hold" in status

    # The page fixed: re-read, and nothing is repeated any more.
    (site.src / "results.rst").write_text("Results\n=======\n\nNone yet.\n", encoding="utf-8")
    _, fixed, count = site.build()
    assert not _missing(fixed) and count == 0
    _, later, count = site.build()
    assert not _missing(later) and count == 0


def test_repeated_warnings_respect_suppress_warnings(site, monkeypatch):
    monkeypatch.delenv(buildlog.LOG_ENV_VAR, raising=False)
    site.build()
    _, again, count = site.build(suppress_warnings=["gemm_benchmark.missing"])
    assert not _missing(again) and count == 0


def test_brief_log_is_one_line_per_phase_and_ends_with_the_site_and_what_is_stale(site, monkeypatch):
    monkeypatch.setenv(buildlog.LOG_ENV_VAR, "brief")
    status, warnings, _ = site.build()
    lines = [line for line in status.splitlines() if line.strip()]
    assert not any(re.match(r"(reading sources|writing output|copying|dumping|myst v|The HTML pages)", line)
                   for line in lines), lines
    assert any(line.startswith("gemm-benchmark: reading 4 of 4 pages") for line in lines)
    last = lines[-1]
    assert last.startswith("build ") and "The site is in " in last and "index.html" in last
    assert "1 of 1 results need a GPU run (1 missing): see " in last and last.endswith("freshness.html.")
    assert _missing(warnings), "warnings are never hidden"

    status, _, _ = site.build()
    lines = [line for line in status.splitlines() if line.strip()]
    assert "gemm-benchmark: no page changed since the last build" in lines[-3]
    assert "still hold" in lines[-2] and "The site is in " in lines[-1]


def test_verbose_build_keeps_the_full_log(monkeypatch):
    monkeypatch.setenv(buildlog.LOG_ENV_VAR, "brief")
    assert buildlog.log_style(verbosity=1) == "full" and buildlog.log_style() == "brief"
    monkeypatch.setenv(buildlog.LOG_ENV_VAR, "loud")
    with pytest.raises(buildlog.BuildLogError, match="GEMM_BENCH_BUILD_LOG='loud'"):
        buildlog.log_style()


def test_progress_lines_estimate_the_time_left():
    now = [100.0]
    lines: list[str] = []
    progress = execution.MeasureProgress("te-5b on H100", estimate_s=90, every_s=30, clock=lambda: now[0],
                                         emit=lines.append)
    progress(0, 40, "autocast qkv")
    assert lines[-1].endswith("0/40 groups, 0s elapsed, ~1m30s left (autocast qkv)")
    now[0] += 10
    progress(1, 40, "autocast proj")  # under a tenth more, under 30 s: no line
    assert len(lines) == 1
    now[0] += 10
    progress(4, 40, "autocast fc1")  # a tenth done: 20 s for 4 groups, 36 to go
    assert lines[-1] == "gemm-benchmark: measuring te-5b on H100: 4/40 groups, 20s elapsed, ~3m00s left (autocast fc1)"
    now[0] += 31
    progress(5, 40, "autocast fc2")  # over 30 s since the last line
    assert len(lines) == 3
    now[0] += 5
    progress(40, 40, "done")
    assert lines[-1].endswith("40/40 groups, 56s elapsed, done")


# --------------------------------------------------------------------------- the real site
def _sphinx(out: Path, *args: str, style: str) -> tuple[str, str]:
    """(status output, warnings) of one build of docs/ from the committed cache."""
    env = {**os.environ, "GEMM_BENCH_EXECUTION_MODE": "cache", buildlog.LOG_ENV_VAR: style}
    done = subprocess.run([sys.executable, "-m", "sphinx", "-W", "--keep-going", "-b", "html", *args,
                           str(REPO / "docs"), str(out)], env=env, capture_output=True, text=True,
                          timeout=600, check=False)
    return ANSI.sub("", done.stdout), ANSI.sub("", done.stderr)


@pytest.mark.slow  # started first in a parallel run (conftest.py)
def test_docs_rebuild_sees_no_configuration_change_and_the_brief_log_has_no_noise(tmp_path, docs_site):
    out = tmp_path / "html"
    # The first build is the run's shared one (the same docs/, cache mode), copied here: its output
    # and doctrees are where `sphinx-build docs out` keeps them, so the next builds are rebuilds.
    docs_site.copy_to(out, out / ".doctrees")
    full, _ = _sphinx(out, style="full")
    # sphinx_tabs' static path used to be added after the comparison: every rebuild "changed" it.
    # (Furo's pygments_dark_style still is: Furo registers it when the theme loads, after the
    # comparison, and refuses to be listed as an extension.)
    changed = [line for line in full.splitlines() if "configuration has changed" in line]
    assert not any("html_static_path" in line for line in changed), changed
    assert "0 added, 0 changed, 0 removed" in full

    brief, warnings = _sphinx(out, style="brief")
    noise = [line for line in (brief + warnings).splitlines() if re.search(
        r"MdParserConfig|configuration has changed|reading sources|Warning:|DeprecationWarning|SyntaxWarning", line)]
    assert not noise
    lines = [line for line in brief.splitlines() if line.strip()]
    assert lines[-1].startswith("build ") and "The site is in " in lines[-1]
    assert "freshness.html" in lines[-1] or lines[-1].endswith("results are fresh.")


# --------------------------------------------------------------------------- a newcomer's commands
def _readme_commands() -> list[str]:
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    section = readme.split("## Two commands", 1)[1]
    block = re.search(r"```console\n(.*?)```", section, re.S)
    assert block
    return [line.split("#", 1)[0].strip() for line in block.group(1).splitlines() if line.strip()]


def test_readme_has_two_commands_that_need_no_system_pip_and_ci_runs_exactly_them():
    commands = _readme_commands()
    assert len(commands) == 2
    first, second = commands
    # PEP 668: a system Python refuses `pip install`; the first command makes a venv before pip.
    assert first.startswith("python3 -m venv .venv && .venv/bin/pip install")
    assert re.search(r"(^|&& )pip install", first) is None
    assert first.endswith(".venv/bin/nox -s docs") and second == ".venv/bin/nox -s tests"
    ci = [line.strip() for line in (REPO / ".ci" / "run").read_text(encoding="utf-8").splitlines()
          if line.strip() and not line.lstrip().startswith("#")]
    assert first in ci and second in ci and ci.index(first) < ci.index(second)


def test_cpu_only_install_has_no_gpu_stack():
    tomllib = pytest.importorskip("tomllib")  # Python 3.11+
    project = tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    names = {re.split(r"[\[<>=!~ ]", d, maxsplit=1)[0].lower() for d in project["dependencies"]}
    gpu = {re.split(r"[\[<>=!~ ]", d, maxsplit=1)[0].lower() for d in project["optional-dependencies"]["gpu"]}
    assert {"torch", "transformer_engine"} <= gpu and not names & (gpu | {"transformer-engine"})
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    assert "`pip install -e .`" in readme and "pip install -e '.[gpu]'" in readme


def test_the_last_line_counts_a_result_whose_step_failed_as_failed(tmp_path, make_app, monkeypatch):
    """Issue 31: a result whose FP8 step failed was "fresh" in the build's last line (only per-GEMM
    cells were judged): "All 1 results are fresh" over a page showing a failed step."""
    from gemm_bench.results.cache import dumps, file_name
    from tests.fake_beyond import beyond_document

    monkeypatch.setenv(buildlog.LOG_ENV_VAR, "brief")
    doc = beyond_document()
    for cell in doc["layer"]:
        if cell["precision"] == "fp8-current" and cell["mode"] == "layer-graphed":
            cell.clear()
            cell.update(mode="layer-graphed", precision="fp8-current", status="failed",
                        reason="CUDA error: an illegal memory access (synthetic)")
    src = tmp_path / "src"
    (src / "_gemm_cache").mkdir(parents=True)
    (src / "_gemm_cache" / file_name(doc["question_hash"], doc["device"]["name"])).write_text(dumps(doc))
    (src / "conf.py").write_text('extensions = ["gemm_benchmark"]\nproject = "failed"\n'
                                 'gemm_benchmark_execution_mode = "cache"\n')
    (src / "index.rst").write_text("T\n=\n\n.. gemm-benchmark-summary::\n   :models: te-guide-5b\n"
                                   "   :precisions: bf16, fp8-current\n   :modes: autocast, layer-graphed\n")
    status = io.StringIO()
    app = make_app("html", srcdir=src, status=status, warning=io.StringIO())
    app.build()
    app.cleanup()
    last = [line for line in ANSI.sub("", status.getvalue()).splitlines() if line.strip()][-1]
    assert "1 of 1 results need a GPU run (1 failed)" in last, last


@pytest.mark.parametrize(("pages", "expected"), [
    ({}, "1 of 2 results need a GPU run (1 missing, all for a GPU no result was ever measured on: b200, asked on "
         "the page index)"),
    ({"other.rst": "O\n=\n\n.. gemm-benchmark::\n   :name: gap\n   :model: llama3-70b\n   :missing: note\n"},
     "2 of 3 results need a GPU run (2 missing: 1 to measure, 1 for a GPU no result was ever measured on: b200, "
     "asked on the page index)"),
])
def test_the_last_line_says_which_missing_results_are_for_gpus_never_measured(tmp_path, make_app, monkeypatch,
                                                                             pages, expected):
    """Issue 35: every correct build ended "4 of 29 results need a GPU run (4 missing)": the maintainers
    page's Blackwell example, read by a newcomer as a fault. A result missing where nothing else is
    measured either (a real gap) is still counted apart."""
    from gemm_bench.results.cache import dumps, file_name
    from tests.fake_beyond import beyond_document

    monkeypatch.setenv(buildlog.LOG_ENV_VAR, "brief")
    doc = beyond_document()
    src = tmp_path / "src"
    (src / "_gemm_cache").mkdir(parents=True)
    (src / "_gemm_cache" / file_name(doc["question_hash"], doc["device"]["name"])).write_text(dumps(doc))
    (src / "conf.py").write_text('extensions = ["gemm_benchmark"]\nproject = "never"\n'
                                 'gemm_benchmark_execution_mode = "cache"\n')
    device = doc["device"]["name"].removeprefix("NVIDIA ").split()[0].lower()
    (src / "index.rst").write_text("T\n=\n\n" + "".join(f".. toctree::\n\n   {name[:-4]}\n\n" for name in pages)
                                   + f".. gemm-benchmark::\n   :name: example\n   :model: te-guide-5b\n"
                                   f"   :precisions: bf16, fp8-current\n   :devices: {device}, b200\n"
                                   "   :missing: note\n")
    for name, text in pages.items():
        (src / name).write_text(text)
    status = io.StringIO()
    app = make_app("html", srcdir=src, status=status, warning=io.StringIO())
    app.build()
    app.cleanup()
    last = [line for line in ANSI.sub("", status.getvalue()).splitlines() if line.strip()][-1]
    assert expected in last, last
