"""Issue 44 item 5: an author's messages say what to do in the author's own project.

One cache-mode Sphinx build of a small project (an index whose toctree puts ``zfirst`` before
``apage``, so the site's order and the pages' alphabetical order disagree) serves the located
checks; the parser's and the reference's checks need no build.
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

import pytest

from gemm_bench.question.precisions import ALL_MODES, MODE_ALIASES, MODES
from gemm_benchmark.options import OPTIONS, OptionError, parse_options

from .conftest import copy_real_document
from .test_correctness import Project

INDEX = """\
Index
=====

.. toctree::

   zfirst
   apage
   studies

.. gemm-benchmark::
   :model: te-guide-5b
   :devices: b200

.. gemm-benchmark-summary::
   :models: llama3-8bb
   :show: table
"""

ZFIRST = """\
Z
=

.. gemm-benchmark::
   :name: dup
   :model: te-guide-5b
   :precisions: bf16, fp8-current
   :devices: h100

Z quotes :gemm-speedup:`dup autocast fp8-current` and :gemm-speedup:`dupp autocast fp8-current`.

See :ref:`dup`.
"""

APAGE = """\
A
=

.. gemm-benchmark::
   :name: dup
   :model: te-guide-5b
   :precisions: bf16, fp8-block
   :devices: h100

A quotes :gemm-speedup:`dup autocast fp8-block`.
"""

STUDIES = """\
Studies
=======

.. gemm-loss-parity::

.. gemm-dynamic-range::
"""


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> tuple[dict[str, dict[int, list[str]]], str, Project]:
    """(warnings per page and line, the whole warning text, the project) of one build."""
    project = Project(tmp_path_factory.mktemp("author4"))
    (project.src / "conf.py").write_text('extensions = ["gemm_benchmark"]\nproject = "m"\n'
                                         'gemm_benchmark_execution_mode = "cache"\n', encoding="utf-8")
    copy_real_document(project.cache, "h100-te-guide-5b.json")
    studies = project.cache / "studies"
    studies.mkdir()
    for name in ("loss-parity", "dynamic-range"):  # JSON, but not the schema's
        (studies / f"{name}--h100-80gb-hbm3.json").write_text(json.dumps({"study": name}), encoding="utf-8")
    for name, text in (("index", INDEX), ("zfirst", ZFIRST), ("apage", APAGE), ("studies", STUDIES)):
        project.page(name, text)
    warnings, _ = project.build()
    out: dict[str, dict[int, list[str]]] = {}
    for match in re.finditer(r"(\w+)\.rst:(\d+): WARNING: (.*)", warnings):
        out.setdefault(match.group(1), {}).setdefault(int(match.group(2)), []).append(match.group(3))
    return out, warnings, project


# ---------------------------------------------------------------- what to do, in the author's project
def test_the_missing_warning_and_panel_say_what_to_do_in_the_authors_project(built):
    """Before: "run nox -s docs on such a GPU" (this repository's session) and, in the warning,
    no remedy at all."""
    located, _, project = built
    missing = [w for w in located["index"][10] if w.endswith("[gemm_benchmark.missing]")]
    assert missing, located["index"]
    assert "nox" not in missing[0]
    assert "execution mode auto" in missing[0] and "gemm-bench refresh DOCS_DIR" in missing[0]
    assert ":missing: note" in missing[0]
    panel = project.html("index").select_one(".gemm-not-measured").get_text(" ")
    assert "nox" not in panel
    assert "gemm-bench refresh DOCS_DIR" in panel and ":missing: note" in panel


def test_a_summary_models_typo_names_models(built):
    """Before: ":model: unknown preset 'llama3-8bb'", an option the summary does not have."""
    located = built[0]["index"]
    assert any(w.startswith("gemm-benchmark-summary: :models: unknown preset 'llama3-8bb'") for w in located[15]), \
        located
    assert not any(":model: " in w for lines in located.values() for w in lines)


def test_a_role_naming_no_directive_suggests_the_closest_name(built):
    """Before: "no gemm-benchmark directive is named 'dupp'" and nothing else."""
    assert any("no gemm-benchmark directive is named 'dupp'; did you mean 'dup'?" in w
               for w in built[0]["zfirst"][10]), built[0]["zfirst"]


# ---------------------------------------------------------------- a :name: given twice
def test_a_duplicate_name_is_an_error_at_the_later_definition_in_toctree_order(built):
    """Before: both directives warned, roles quoted ``apage``'s (first by name, last in the
    toctree), Sphinx added an untyped "duplicate label" and ``zfirst``'s own role warned that the
    directive "does not show precision 'fp8-current'"."""
    located, warnings, project = built
    later = [w for w in located["apage"][4] if "'dup' is already the name of the directive at zfirst.rst:4" in w]
    assert later and later[0].endswith("[gemm_benchmark.option]"), located["apage"]
    # the first definition: no name warning (this module's deliberately refused loss-parity study is
    # warned about wherever the tie-break reads it, that directive included)
    assert not [w for w in located["zfirst"].get(4, []) if "unusable study file" not in w], located["zfirst"]
    assert not any("`dup autocast" in w for w in located["zfirst"].get(10, []))  # its role quotes it
    assert "duplicate label" not in warnings
    assert 10 not in located["apage"]  # the rejected page's role: no warning repeating the error
    zfirst = project.html("zfirst")
    assert zfirst.select_one("abbr.gemm-value") is not None  # quotes its own directive's number
    link = zfirst.select_one("a.reference.internal[href*='#']")
    assert link is not None and link["href"].startswith("#"), zfirst  # :ref:`dup` links to zfirst's block


# ---------------------------------------------------------------- a refused study file
def test_a_refused_study_file_is_said_to_exist_and_be_refused(built):
    """Before: "... holds no loss-parity file" / "... does not exist" while the file was there."""
    project = built[2]
    panels = [p.get_text(" ") for p in project.html("studies").select(".gemm-not-measured")]
    assert len(panels) == 2, panels
    for panel, name in zip(panels, ("loss-parity", "dynamic-range"), strict=True):
        assert f"_gemm_cache/studies/{name}--h100-80gb-hbm3.json exists but was refused" in " ".join(panel.split())
        assert "does not exist" not in panel and "holds no" not in panel


# ---------------------------------------------------------------- no build
def test_an_unknown_option_suggests_the_closest_and_the_reference(tmp_path: Path) -> None:
    """Before: "known options: name, caption, model, ..." (36 names, one 900-character line)."""
    with pytest.raises(OptionError) as info:
        parse_options({"model": "te-guide-5b", "hiden-size": "8", "zzqx": "1"}, srcdir=tmp_path, docdir=tmp_path)
    typo, nonsense = (str(e) for e in info.value.errors)
    assert "did you mean :hidden-size:?" in typo and "authoring reference" in typo
    assert "nor close to one" in nonsense
    assert max(len(typo), len(nonsense)) < 200
    assert "caption" not in typo  # no list of every option


def test_closest_gives_every_equally_close_name() -> None:
    from gemm_bench.question.choices import closest

    assert set(closest("modle", ["model", "modes", "name"])) == {"model", "modes"}
    assert closest("Hiden-Size", ["hidden-size", "num-layers"]) == ("hidden-size",)
    assert closest("zzqx", ["model"]) == ()


def test_every_accepted_mode_spelling_is_in_the_authoring_reference() -> None:
    """Before: ``:modes: prequantized`` was accepted and documented nowhere."""
    from gemm_benchmark.summary import GemmBenchmarkSummaryDirective

    directive_modes = OPTIONS["modes"].description
    summary_modes = GemmBenchmarkSummaryDirective.reference_options["modes"]
    for alias, mode in MODE_ALIASES.items():
        assert f"``{alias}``" in summary_modes, alias
        if mode in MODES:
            assert f"``{alias}``" in directive_modes, alias
    assert all(f"``{mode}``" in summary_modes for mode in ALL_MODES)


# ================================================================ item 6: maintainer facts
ROOT = Path(__file__).resolve().parent.parent


def test_the_maintainers_page_says_the_docs_session_sees_a_venvs_torch() -> None:
    """Before: "a venv that nox makes cannot see them: ... nox --no-venv --no-install -s docs", which
    the docs session's .pth (noxfile.py _see_gpu_stack) made unnecessary."""
    page = (ROOT / "docs" / "maintainers.rst").read_text(encoding="utf-8")
    noxfile = (ROOT / "noxfile.py").read_text(encoding="utf-8")
    assert "--no-venv" not in page and "cannot see them" not in page
    variable = re.search(r'^GPU_PYTHON = "(\w+)"', noxfile, re.M)
    assert variable and f"``{variable.group(1)}``" in page and "_see_gpu_stack" in page and ".pth" in page


def test_the_tests_session_installs_import_linter() -> None:
    """Before: ``nox -s tests`` skipped tests/test_purity.py's layer test (no import-linter)."""
    pyproject = (ROOT / "pyproject.toml").read_text(encoding="utf-8")
    extra = pyproject[pyproject.index("\ntest = ["):]
    extra = extra[:extra.index("]")]
    assert '"import-linter' in extra
    assert re.search(r'session\.install\("-e", "\.\[[^]]*\btest\b', (ROOT / "noxfile.py").read_text(encoding="utf-8"))


def test_every_long_install_is_announced_and_the_readme_says_how_long() -> None:
    """Before: a fresh environment's install printed nothing for about two minutes, and the README
    gave no duration for the tests."""
    import ast

    tree = ast.parse((ROOT / "noxfile.py").read_text(encoding="utf-8"))
    sessions = {f.name: f for f in tree.body if isinstance(f, ast.FunctionDef) and f.name in ("docs", "tests")}
    assert set(sessions) == {"docs", "tests"}
    for name, function in sessions.items():
        calls = [ast.unparse(c.func) for c in ast.walk(function) if isinstance(c, ast.Call)]
        install = calls.index("session.install")
        assert "_announce_install" in calls[:install], name
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    assert re.search(r"`nox -s tests` runs in about [\w -]+ minutes", readme)
    assert re.search(r"about two minutes\s+on a fresh clone", readme)


def test_lock_files_anywhere_in_the_cache_are_ignored(tmp_path: Path) -> None:
    """Before: ``docs/_gemm_cache/*.lock`` only; merging a study wrote ``studies/<file>.json.lock``."""
    import shutil
    import subprocess

    if shutil.which("git") is None or not (ROOT / ".git").exists():
        pytest.skip("needs git and a checkout")
    for path in ("docs/_gemm_cache/studies/loss-parity--h100-80gb-hbm3.json.lock",
                 "docs/_gemm_cache/2160d33ec54a347e--h100-80gb-hbm3.json.lock",
                 "docs/_gemm_cache/gemm-benchmark-gpu.lock"):
        done = subprocess.run(["git", "check-ignore", "-q", "--no-index", path], cwd=ROOT, check=False)
        assert done.returncode == 0, path


def test_ci_fuzzes_the_same_examples_on_every_run_with_no_database() -> None:
    """Before: profile ``ci`` read and wrote Hypothesis's example database, so one draw that failed
    (a file name too long for the file system) was replayed by every later run."""
    from hypothesis import settings

    ci = settings.get_profile("ci")
    assert ci.derandomize and ci.database is None
    assert settings.get_profile("thorough").database is None


@pytest.mark.slow  # a virtual environment and a whole collection: seconds
def test_the_suite_collects_without_torch(tmp_path: Path) -> None:
    """Before: without torch, ``pytest`` stopped with four collection errors (the model step's tests
    import torch through tests/fake_te.py) where the other torch tests skip.

    A real environment without torch, not a simulated import failure: a virtual environment of this
    interpreter's base Python that sees every package of this one except torch's (a .pth naming a
    folder of links to them), the project on PYTHONPATH."""
    import subprocess
    import sys
    import sysconfig

    site = Path(sysconfig.get_paths()["purelib"])
    base = getattr(sys, "_base_executable", sys.executable)
    env_dir, borrowed = tmp_path / "venv", tmp_path / "site"
    subprocess.run([base, "-m", "venv", "--without-pip", str(env_dir)], check=True, timeout=120)
    borrowed.mkdir()
    for entry in site.iterdir():
        if entry.name.split("-")[0] in ("torch", "functorch", "torchgen") or entry.suffix == ".pth" \
                or entry.name == "__pycache__":
            continue
        (borrowed / entry.name).symlink_to(entry)
    python = env_dir / "bin" / "python3"
    own_site = subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                              capture_output=True, text=True, check=True).stdout.strip()
    Path(own_site, "borrowed.pth").write_text(f"{borrowed}\n", encoding="utf-8")
    env = {**{k: v for k, v in os.environ.items() if not k.startswith("PYTEST_")},
           "PYTHONPATH": os.pathsep.join([str(ROOT / "bench"), str(ROOT / "sphinxext")])}
    assert subprocess.run([str(python), "-c", "import torch"], env=env, capture_output=True).returncode != 0
    done = subprocess.run([str(python), "-m", "pytest", "--collect-only", "-q", "-p", "no:randomly", "tests"],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=300, check=False)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-2000:]
    assert "error" not in done.stdout.splitlines()[-1], done.stdout[-500:]
