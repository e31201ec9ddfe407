"""Where torch.compile's caches go: a folder that outlives the process, chosen before any compile."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from gemm_bench.measure import compile_cache
from gemm_bench.measure.compile_cache import (
    ENV,
    INDUCTOR_ENV,
    default_dir,
    inductor_default,
    use_persistent_compile_cache,
)
from tests.test_phases import fake_runner  # noqa: F401  (a fixture: the runner against fakes)


def test_the_maintainers_folder_wins_over_the_user_cache(tmp_path: Path) -> None:
    env = {ENV: str(tmp_path / "fleet"), "XDG_CACHE_HOME": str(tmp_path / "xdg")}
    assert use_persistent_compile_cache(env) == str(tmp_path / "fleet")
    assert env[INDUCTOR_ENV] == str(tmp_path / "fleet") and (tmp_path / "fleet").is_dir()


def test_the_user_cache_folder_is_the_default(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    assert default_dir({"XDG_CACHE_HOME": str(tmp_path)}) == tmp_path / "gemm-bench" / "torch-compile"
    monkeypatch.setattr(Path, "home", lambda: tmp_path / "home")
    env: dict[str, str] = {}
    assert use_persistent_compile_cache(env) == str(tmp_path / "home" / ".cache" / "gemm-bench" / "torch-compile")
    assert not str(env[INDUCTOR_ENV]).startswith("/tmp/torchinductor")


def test_a_folder_the_caller_chose_is_left_alone(tmp_path: Path) -> None:
    env = {INDUCTOR_ENV: "/somewhere/else", ENV: str(tmp_path / "ours")}
    assert use_persistent_compile_cache(env) == "/somewhere/else"
    assert env[INDUCTOR_ENV] == "/somewhere/else" and not (tmp_path / "ours").exists()


def test_inductors_own_default_counts_as_not_chosen(tmp_path: Path) -> None:
    """Importing torch._dynamo (TE and torchao do) writes /tmp/torchinductor_<user> into the
    environment: on the H100 the refresh's caches went there, and a new box starts cold."""
    env = {INDUCTOR_ENV: inductor_default(), ENV: str(tmp_path / "ours")}
    assert inductor_default().endswith("torchinductor_" + __import__("getpass").getuser())
    assert use_persistent_compile_cache(env) == str(tmp_path / "ours") == env[INDUCTOR_ENV]


def test_a_folder_that_cannot_be_made_keeps_inductors_default(tmp_path: Path) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("not a folder")
    env = {ENV: str(blocker / "cache")}
    assert use_persistent_compile_cache(env) == "" and INDUCTOR_ENV not in env
    env = {ENV: str(blocker / "cache"), INDUCTOR_ENV: inductor_default()}
    assert use_persistent_compile_cache(env) == inductor_default() == env[INDUCTOR_ENV]


def test_the_measuring_path_chooses_the_folder_before_it_measures(fake_runner: Any,  # noqa: F811
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    """``measure_question`` (a refresh worker's and a docs build's one path) sets the folder first."""
    runner, _, _ = fake_runner
    calls: list[str] = []

    class Stop(Exception):
        pass

    def runner_class(*args: object, **kwargs: object) -> None:
        calls.append("runner")
        raise Stop

    monkeypatch.setattr(compile_cache, "use_persistent_compile_cache", lambda: calls.append("cache") or "")
    monkeypatch.setattr(runner, "Runner", runner_class)
    with pytest.raises(Stop):
        runner.measure_question(object(), ["bf16"], ["autocast"])  # type: ignore[arg-type]
    assert calls == ["cache", "runner"]


def test_inductor_reads_the_folder_after_torch_wrote_its_default(tmp_path: Path,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    """With the real torch (the CPU build in the test environment): after ``import torch._dynamo``
    has written Inductor's default, the folder chosen here is the one Inductor's caches use."""
    pytest.importorskip("torch._dynamo")
    from torch._inductor.runtime.cache_dir_utils import cache_dir

    monkeypatch.setenv(INDUCTOR_ENV, inductor_default())
    monkeypatch.setenv(ENV, str(tmp_path / "kept"))
    assert use_persistent_compile_cache() == str(tmp_path / "kept")
    assert cache_dir() == str(tmp_path / "kept")


def test_a_relative_xdg_cache_home_is_ignored_as_the_spec_says(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Before: XDG_CACHE_HOME=cache put the compile cache under whatever directory the run started in."""
    monkeypatch.chdir(tmp_path)
    env = {"XDG_CACHE_HOME": "relative-cache", "HOME": str(tmp_path / "home")}
    assert default_dir(env) == tmp_path / "home" / ".cache" / "gemm-bench" / "torch-compile"
    assert use_persistent_compile_cache(env) == str(tmp_path / "home" / ".cache" / "gemm-bench" / "torch-compile")
    assert not (tmp_path / "relative-cache").exists()


def test_relative_folders_are_exported_absolute(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Before: TORCHINDUCTOR_CACHE_DIR=rel was exported as 'rel', another folder in each worker's directory."""
    monkeypatch.chdir(tmp_path)
    env = {INDUCTOR_ENV: "rel"}
    assert use_persistent_compile_cache(env) == str(tmp_path / "rel") == env[INDUCTOR_ENV]
    env = {ENV: "ours"}
    assert use_persistent_compile_cache(env) == str(tmp_path / "ours") == env[INDUCTOR_ENV]
    env = {ENV: "~/fleet", "HOME": str(tmp_path / "home")}
    assert default_dir(env) == tmp_path / "home" / "fleet"


def test_no_home_directory_is_a_clear_message_not_a_traceback(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                             capsys: pytest.CaptureFixture[str]) -> None:
    """Before: no HOME and no passwd entry raised RuntimeError from Path.home() out of the CLI."""
    def no_home() -> Path:
        raise RuntimeError("Could not determine home directory.")

    monkeypatch.setattr(Path, "home", no_home)
    with pytest.raises(compile_cache.CompileCacheError, match=f"HOME is not set .* set {ENV}"):
        default_dir({})
    env: dict[str, str] = {}
    assert use_persistent_compile_cache(env) == "" and INDUCTOR_ENV not in env
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "no home directory" in err and "keeps Inductor's default folder" in err
    # An absolute XDG_CACHE_HOME or the project's variable needs no home.
    assert default_dir({"XDG_CACHE_HOME": str(tmp_path)}) == tmp_path / "gemm-bench" / "torch-compile"
    assert default_dir({ENV: str(tmp_path / "x")}) == tmp_path / "x"
