"""Incremental builds: a changed cache file re-builds exactly the pages that use it; no change, nothing."""

from __future__ import annotations

import io
import os
import re
import shutil
import time
from pathlib import Path

import pytest

from gemm_bench.question.question import build_question
from gemm_bench.results.cache import Cache

H200 = {"name": "NVIDIA H200", "compute_capability": "9.0", "sm_count": 132}

ROOTS = Path(__file__).parent / "roots"


class Project:
    """The incremental test root in a temporary directory, built again and again with one env."""

    def __init__(self, tmp_path: Path, make_app, real_result, make_result, store_result) -> None:
        self.src = tmp_path / "src"
        shutil.copytree(ROOTS / "test-incremental", self.src)
        self.cache = self.src / "_gemm_cache"
        self.make_app = make_app
        self.make_result, self.store_result = make_result, store_result
        self.path_a = real_result(self.cache, "h100-te-guide-5b.json")
        self.path_b = store_result(self.cache, make_result(build_question(model="llama3-8b")))

    def build(self) -> tuple[set[str], set[str]]:
        """(pages read, pages written) by one build."""
        status = io.StringIO()
        app = self.make_app("html", srcdir=self.src, status=status, warning=io.StringIO())
        read: set[str] = set()
        app.connect("env-before-read-docs", lambda app, env, docnames: read.update(docnames))
        app.build()
        app.cleanup()
        self.log = status.getvalue()
        output = re.sub(r"\x1b\[[0-9;]*m", "", status.getvalue())
        written = set(re.findall(r"writing output\.\.\. \[\s*\d+%\] (\S+)", output))
        return read, written


def _touch(path: Path) -> None:
    """Give ``path`` a new modification time: now (later than the last build read it)."""
    time.sleep(0.01)
    os.utime(path)


@pytest.fixture
def project(tmp_path, make_app, real_result, make_result, store_result) -> Project:
    return Project(tmp_path, make_app, real_result, make_result, store_result)


def test_unchanged_tree_rebuilds_nothing(project):
    read, written = project.build()
    assert read == {"index", "a", "b", "c"}
    read, written = project.build()
    assert read == set() and written == set()


def test_touched_cache_file_rebuilds_its_page(project):
    project.build()
    _touch(project.path_a)
    read, written = project.build()
    assert read == {"a"} and written == {"a"}
    # B's result is quoted by a role on page C. Touching B's file (same content) re-reads B only:
    # C's quoted values did not change, so C is neither re-read nor re-written.
    _touch(project.path_b)
    read, written = project.build()
    assert read == {"b"} and written == {"b"}
    read, _ = project.build()
    assert read == set()


def test_new_device_file_rebuilds_the_page_that_can_show_it(project):
    project.build()
    project.store_result(project.cache, project.make_result(build_question(model="llama3-8b"), device=H200))
    read, written = project.build()
    # B is re-read (its file set changed); C, whose role quotes B, is re-written from B's new record.
    assert read == {"b"} and {"b", "c"} <= written, project.log
    html = (project.src / "_build" / "html" / "b.html").read_text(encoding="utf-8")
    assert ">H200<" in html  # its device tab
    # Lock files and unrelated results do not disturb anything.
    (project.cache / "gemm-benchmark-gpu.lock").write_text("")
    assert Cache(project.cache).files(build_question(model="llama3-8b").hash)
    read, _ = project.build()
    assert read == set()
