"""The GitHub workflows, parsed: what the fleet flow depends on, checked before any runner runs it.

actionlint and zizmor run in ``nox -s lint``; these tests pin the project's own contract: the
matrix covers every device family the site shows, the GPU jobs hand their files to the merge job
through artifacts, the merge job builds with -W and opens one pull request whose body is
``gemm-bench compare --markdown``, every action is pinned to a commit, and permissions are least.
"""

from __future__ import annotations

import re
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
    assert "docs/_gemm_cache/*.json" in runs(measure) and "changed" in upload["path"]
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
