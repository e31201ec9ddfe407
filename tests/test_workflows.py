"""The GitHub workflows, parsed: what the fleet flow depends on, checked before any runner runs it.

actionlint and zizmor run in ``nox -s lint``; these tests pin the project's own contract: the
matrix covers every device family the site shows, the GPU jobs hand their files to the merge job
through artifacts, the merge job builds with -W and opens one pull request whose body is
``gemm-bench compare --markdown``, every action is pinned to a commit, and permissions are least.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from gemm_bench.question.devices import ALIASES

REPO = Path(__file__).resolve().parent.parent
WORKFLOWS = REPO / ".github" / "workflows"
#: The refresh matrix test reads the site as refresh does: once per test run (conftest.py).
pytestmark = pytest.mark.usefixtures("shared_site_reads")


def load(name: str) -> dict[str, Any]:
    data = yaml.safe_load((WORKFLOWS / name).read_text(encoding="utf-8"))
    # YAML 1.1 reads the key `on` as True.
    data["on"] = data.pop(True, data.get("on"))
    return data


def steps(job: dict[str, Any]) -> list[dict[str, Any]]:
    return list(job["steps"])


def runs(job: dict[str, Any]) -> str:
    return "\n".join(s.get("run", "") for s in steps(job))


def uses(job: dict[str, Any], action: str) -> list[dict[str, Any]]:
    return [s for s in steps(job) if s.get("uses", "").startswith(action + "@")]


@pytest.fixture(scope="module")
def docs() -> dict[str, Any]:
    return load("docs.yml")


@pytest.fixture(scope="module")
def refresh() -> dict[str, Any]:
    return load("refresh.yml")


def test_docs_runs_the_readme_commands_from_the_cache_and_deploys_main(docs: dict[str, Any]) -> None:
    assert set(docs["on"]) == {"push", "pull_request"}
    build = docs["jobs"]["build"]
    assert build["runs-on"] == "ubuntu-latest"
    assert build["env"]["GEMM_BENCH_EXECUTION_MODE"] == "cache"
    script = runs(build)
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    first = "python3 -m venv .venv && .venv/bin/pip install -q nox && .venv/bin/nox -s docs"
    assert first in readme and first in script
    assert ".venv/bin/nox -s tests" in script and ".venv/bin/nox -s lint" in script
    upload = uses(build, "actions/upload-pages-artifact")
    assert upload and upload[0]["with"]["path"] == "docs/_build/html"
    main_only = "github.event_name == 'push' && github.ref == 'refs/heads/main'"
    assert upload[0]["if"] == main_only
    deploy = docs["jobs"]["deploy"]
    assert deploy["if"] == main_only and deploy["needs"] == "build"
    assert uses(deploy, "actions/deploy-pages") and deploy["environment"]["name"] == "github-pages"


def site_device_selectors() -> set[str]:
    from gemm_bench.cli.refresh import collect_jobs

    jobs, problems = collect_jobs(REPO / "docs")
    assert not problems
    return {d for job in jobs for ask in job.asks for d in ask.devices}


@pytest.mark.usefixtures("shared_site_reads")  # the site is read once per test run (conftest.py)
def test_refresh_matrix_has_one_gpu_runner_per_device_family_the_site_shows(refresh: dict[str, Any]) -> None:
    assert "schedule" in refresh["on"] and "workflow_dispatch" in refresh["on"]
    measure = refresh["jobs"]["measure"]
    families = measure["strategy"]["matrix"]["gpu"]
    assert len(families) == len(set(families))
    assert measure["strategy"]["fail-fast"] is False
    assert measure["runs-on"][0] == "self-hosted" and "${{ matrix.gpu }}" in measure["runs-on"]
    # Every device a page selects is measured by one family label (labels are the device aliases).
    shown = site_device_selectors()
    assert shown and {ALIASES[f] for f in families} == shown
    labels = yaml.safe_load((REPO / ".github" / "actionlint.yaml").read_text())["self-hosted-runner"]["labels"]
    assert set(families) <= set(labels)
    assert re.search(r"gemm-bench\" refresh docs/ --gpus all", runs(measure))
    assert "--force" not in runs(measure)  # auto rules: only what is missing or stale


def test_artifacts_hand_the_gpu_results_to_the_merge_job(refresh: dict[str, Any]) -> None:
    measure, merge = refresh["jobs"]["measure"], refresh["jobs"]["merge"]
    upload = uses(measure, "actions/upload-artifact")[0]["with"]
    assert upload["name"] == "gemm-cache-${{ matrix.gpu }}"
    assert "cd docs/_gemm_cache" in runs(measure) and "'*.json'" in runs(measure) and "changed" in upload["path"]
    download = uses(merge, "actions/download-artifact")[0]["with"]
    assert download["pattern"] == "gemm-cache-*" and not download.get("merge-multiple")
    assert merge["needs"] == "measure" and "cancelled()" in merge["if"]
    script = runs(merge)
    assert f'gemm-bench merge "{download["path"].replace("${{ runner.temp }}", "$RUNNER_TEMP")}"' in script
    assert merge["runs-on"] == "ubuntu-latest" and merge["env"]["GEMM_BENCH_EXECUTION_MODE"] == "cache"


def test_merge_job_builds_with_W_and_opens_one_pull_request_with_the_comparison(refresh: dict[str, Any]) -> None:
    merge = refresh["jobs"]["merge"]
    order = [s.get("run", s.get("uses", "")) for s in steps(merge)]
    i_merge = next(i for i, s in enumerate(order) if "gemm-bench merge" in s)
    i_docs = next(i for i, s in enumerate(order) if "nox -s docs" in s)
    i_compare = next(i for i, s in enumerate(order) if "gemm-bench compare --markdown" in s)
    i_pr = next(i for i, s in enumerate(order) if s.startswith("peter-evans/create-pull-request@"))
    assert i_merge < i_docs < i_compare < i_pr
    noxfile = (REPO / "noxfile.py").read_text(encoding="utf-8")
    assert re.search(r'def docs\(.*?"-W"', noxfile, re.S), "nox -s docs must build with -W"
    compare = order[i_compare]
    assert '"$RUNNER_TEMP/before" docs/_gemm_cache > "$RUNNER_TEMP/pr-body.md"' in compare
    pr = steps(merge)[i_pr]["with"]
    assert pr["body-path"] == "${{ runner.temp }}/pr-body.md"
    assert pr["add-paths"] == "docs/_gemm_cache/*.json" and pr["branch"]  # one fixed branch: one PR


ALL = ["docs.yml", "refresh.yml"]


@pytest.mark.parametrize("name", ALL)
def test_every_action_is_pinned_to_a_commit_with_its_tag(name: str) -> None:
    text = (WORKFLOWS / name).read_text(encoding="utf-8")
    lines = [line for line in text.splitlines() if re.match(r"\s*(- )?uses:", line)]
    assert lines
    for line in lines:
        assert re.search(r"uses: [\w.-]+/[\w./-]+@[0-9a-f]{40} # v\d+\.\d+\.\d+$", line), line


@pytest.mark.parametrize("name", ALL)
def test_least_privilege_no_persisted_credentials_no_expression_in_scripts(name: str) -> None:
    workflow = load(name)
    assert workflow["permissions"] == {}  # nothing by default; each job asks for what it needs
    allowed = {"contents": {"read", "write"}, "pages": {"write"}, "id-token": {"write"},
               "pull-requests": {"write"}}
    for job_name, job in workflow["jobs"].items():
        perms = job["permissions"]
        assert perms and all(v in allowed[k] for k, v in perms.items()), job_name
        if "pull-requests" not in perms:
            assert perms.get("contents") != "write", job_name  # only the PR job pushes
        for step in uses(job, "actions/checkout"):
            assert step["with"]["persist-credentials"] is False
        for step in steps(job):
            assert "${{" not in step.get("run", ""), f"{job_name}: expression inside a run script"
        assert job.get("timeout-minutes")


# ------------------------------------------------------------------------------- the fleet round trip, replayed
# The collect, merge and compare steps run here as the runner runs them: their `run:` text, read from
# refresh.yml, in `bash --noprofile --norc -eo pipefail` (GitHub's shell for `run:` on Linux), with
# RUNNER_TEMP and the workspace in temporary folders. Only what the runner installs is stood in
# for: `pip install` does nothing, `gemm-bench` is this checkout's CLI.
TE_GUIDE = "2160d33ec54a347e"


def step_script(job: dict[str, Any], name_part: str) -> str:
    """The `run:` text of the one step of ``job`` whose name holds ``name_part``."""
    found = [s for s in steps(job) if name_part in s.get("name", "")]
    assert len(found) == 1, f"one step named like {name_part!r}, found {len(found)}"
    return str(found[0]["run"])


def run_as_runner(script: str, cwd: Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    path = Path(env["RUNNER_TEMP"]) / f"step-{abs(hash(script))}.sh"
    path.write_text(script, encoding="utf-8")
    return subprocess.run(["bash", "--noprofile", "--norc", "-eo", "pipefail", str(path)], cwd=cwd, env=env,
                          capture_output=True, text=True, check=False, timeout=300)


def _git(cwd: Path, *args: str) -> str:
    return subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True, text=True).stdout


def _tools(tmp: Path) -> dict[str, str]:
    """An environment whose `pip` does nothing and whose `gemm-bench` is this checkout's."""
    bin_dir = tmp / "bin"
    bin_dir.mkdir()
    (bin_dir / "pip").write_text("#!/bin/sh\nexit 0\n")
    (bin_dir / "gemm-bench").write_text(f'#!/bin/sh\nexec "{sys.executable}" -m gemm_bench.cli "$@"\n')
    for tool in bin_dir.iterdir():
        tool.chmod(0o755)
    pythonpath = os.pathsep.join([str(REPO / "bench"), str(REPO / "sphinxext"), os.environ.get("PYTHONPATH", "")])
    return {"PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}", "PYTHONPATH": pythonpath, "HOME": str(tmp),
            "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t", "GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@t",
            "GIT_CONFIG_NOSYSTEM": "1", "LC_ALL": "C.UTF-8"}


def _remeasured_h200(now: dt.datetime) -> dict[str, Any]:
    """The TE guide's H200 result re-measured: the graphed FP8 Delayed step from ~1.6x to ~0.8x
    (twice its time), the FP8 Current QKV Fprop SQNR 15 dB lower, a newer date."""
    doc = json.loads((REPO / "docs" / "_gemm_cache" / f"{TE_GUIDE}--h200.json").read_text())
    for cell in doc["layer"]:
        if (cell["mode"], cell["precision"]) == ("layer-graphed", "fp8-delayed") and cell["status"] == "measured":
            cell["ms"] *= 2
            cell.pop("breakdown", None)  # its step_ms must be the cell's: a doctored time keeps none
            cell["stats"] = {k: ([x * 2 for x in v] if isinstance(v, list) else v * 2) if k.endswith("_ms") else v
                             for k, v in cell["stats"].items()}
    sqnr = next(c for c in doc["accuracy"] if (c["mode"], c["precision"], c["op"], c["pass"], c["distribution"])
                == ("autocast", "fp8-current", "qkv", "fprop", "gaussian"))
    sqnr["sqnr_db"] -= 15
    doc["provenance"]["date"] = now.isoformat(timespec="seconds")
    return doc


def _remeasured_loss_parity(now: dt.datetime) -> dict[str, Any]:
    doc = json.loads((REPO / "docs" / "_gemm_cache" / "studies" / "loss-parity--h200.json").read_text())
    doc["provenance"]["date"] = now.isoformat(timespec="seconds")
    return doc


def test_the_fleet_round_trip_replayed_from_the_workflow_text_loses_no_result(
        refresh: dict[str, Any], tmp_path: Path) -> None:
    env = _tools(tmp_path)
    now = dt.datetime.now(dt.timezone.utc) - dt.timedelta(seconds=5)  # after any committed result
    # The repository as the runners check it out: the TE guide's results and the studies.
    base = tmp_path / "origin"
    cache = base / "docs" / "_gemm_cache"
    (cache / "studies").mkdir(parents=True)
    for name in (f"{TE_GUIDE}--h100-80gb-hbm3.json", f"{TE_GUIDE}--h200.json"):
        shutil.copy(REPO / "docs" / "_gemm_cache" / name, cache / name)
    for study in (REPO / "docs" / "_gemm_cache" / "studies").glob("*.json"):
        shutil.copy(study, cache / "studies" / study.name)
    _git(base, "init", "-q")
    _git(base, "add", ".")
    _git(base, "commit", "-q", "-m", "base")

    # The H200 runner's refresh re-measured a question and a study (and left a lock file).
    runner = tmp_path / "h200-runner"
    _git(tmp_path, "clone", "-q", str(base), str(runner))
    (runner / ".gitignore").write_text("*.lock\n")
    run_cache = runner / "docs" / "_gemm_cache"
    (run_cache / f"{TE_GUIDE}--h200.json").write_text(json.dumps(_remeasured_h200(now), indent=1))
    (run_cache / "studies" / "loss-parity--h200.json").write_text(json.dumps(_remeasured_loss_parity(now), indent=1))
    (run_cache / "studies" / "loss-parity--h200.json.lock").write_text("")
    temp = tmp_path / "h200-temp"
    temp.mkdir()
    collect = run_as_runner(step_script(refresh["jobs"]["measure"], "Collect"), runner,
                            {**env, "RUNNER_TEMP": str(temp)})
    assert collect.returncode == 0, collect.stderr
    changed = temp / "changed"
    assert sorted(p.relative_to(changed).as_posix() for p in changed.rglob("*") if p.is_file()) == [
        f"{TE_GUIDE}--h200.json", "studies/loss-parity--h200.json"]

    # download-artifact (one folder per artifact), with a file from another family that no one can read.
    merge_job = refresh["jobs"]["merge"]
    merge_temp = tmp_path / "merge-temp"
    shutil.copytree(changed, merge_temp / "incoming" / "gemm-cache-h200")
    (merge_temp / "incoming" / "gemm-cache-b200").mkdir(parents=True)
    (merge_temp / "incoming" / "gemm-cache-b200" / "0123456789abcdef--b200.json").write_text("{not json")
    checkout = tmp_path / "merge-checkout"
    _git(tmp_path, "clone", "-q", str(base), str(checkout))
    merge_env = {**env, "RUNNER_TEMP": str(merge_temp), "GITHUB_STEP_SUMMARY": str(merge_temp / "summary.md"),
                 "MEASURE_RESULT": "success"}
    merged = run_as_runner(step_script(merge_job, "Validate and merge"), checkout, merge_env)
    assert merged.returncode == 0, merged.stdout + merged.stderr  # the bad file does not stop the job here
    assert (merge_temp / "merge-status").read_text().strip() == "1"
    assert "0123456789abcdef--b200.json" in (merge_temp / "merge-summary.md").read_text()
    new_cache = checkout / "docs" / "_gemm_cache"
    assert json.loads((new_cache / f"{TE_GUIDE}--h200.json").read_text())["provenance"]["date"] == \
        now.isoformat(timespec="seconds")
    assert json.loads((new_cache / "studies" / "loss-parity--h200.json").read_text()) == \
        json.loads((changed / "studies" / "loss-parity--h200.json").read_text())

    compared = run_as_runner(step_script(merge_job, "Compare old and new"), checkout, merge_env)
    assert compared.returncode == 0, compared.stderr
    body = (merge_temp / "pr-body.md").read_text()
    assert "could not be merged" in body and "0123456789abcdef--b200.json" in body
    assert "layer steps changed beyond the measured spread: 1" in body
    assert re.search(r"\| One layer's step \| FP8 Delayed \| [\d.]+ \| [\d.]+ \| 1\.\d\dx ±\d+% \| "
                     r"0\.\d\dx ±\d+% \| ! \|", body), body
    assert re.search(r"\| Autocast \| FP8 Current \| QKV projection Fprop \| Gaussian \| [\d.]+ \| [\d.]+ \| -15\.0 \|",
                     body)
    assert "studies/loss-parity--h200.json" in body

    # create-pull-request adds its add-paths as a git pathspec: the study is in the commit too.
    pr = uses(merge_job, "peter-evans/create-pull-request")[0]["with"]
    _git(checkout, "add", "--", *str(pr["add-paths"]).split())
    staged = _git(checkout, "diff", "--cached", "--name-only").split()
    assert staged == [f"docs/_gemm_cache/{TE_GUIDE}--h200.json", "docs/_gemm_cache/studies/loss-parity--h200.json"]

    # After the pull request, the run fails and says why.
    failed = run_as_runner(step_script(merge_job, "Fail the run"), checkout, merge_env)
    assert failed.returncode == 1 and "0123456789abcdef--b200.json" in failed.stdout
    order = [s.get("name", s.get("uses", "")) for s in steps(merge_job)]
    assert order.index("Fail the run when a runner's file could not be merged (named in the pull request)") == \
        len(order) - 1 and any(o.startswith("peter-evans/create-pull-request@") for o in order[:-1])


def test_a_clean_merge_passes_every_step(refresh: dict[str, Any], tmp_path: Path) -> None:
    """No file rejected: merge status 0, the last step passes, the body has no merge note."""
    env = _tools(tmp_path)
    checkout = tmp_path / "checkout"
    (checkout / "docs" / "_gemm_cache").mkdir(parents=True)
    merge_temp = tmp_path / "temp"
    (merge_temp / "incoming").mkdir(parents=True)
    merge_env = {**env, "RUNNER_TEMP": str(merge_temp), "GITHUB_STEP_SUMMARY": str(merge_temp / "summary.md"),
                 "MEASURE_RESULT": "success"}
    merge_job = refresh["jobs"]["merge"]
    for part in ("Validate and merge", "Compare old and new", "Fail the run"):
        done = run_as_runner(step_script(merge_job, part), checkout, merge_env)
        assert done.returncode == 0, (part, done.stdout, done.stderr)
    assert "could not be merged" not in (merge_temp / "pr-body.md").read_text()
