"""The GPU test files' shared gate (tests/gpu_skip.py) on CPU, against stand-ins for PyTorch and
Transformer Engine in ``sys.modules``: which GPU counts skip, with which reason, and which missing
package skips the whole module. On a CPU box the GPU files themselves show only one of these paths
(whichever package is missing there); a wrong count here would run a two-GPU test on one GPU."""

from __future__ import annotations

import sys
import types

import pytest

from tests.gpu_skip import gpu_module


def fake_torch(monkeypatch: pytest.MonkeyPatch, gpus: int) -> types.SimpleNamespace:
    """A ``torch`` whose ``torch.cuda`` reports ``gpus`` devices (none: CUDA unavailable)."""
    torch = types.SimpleNamespace(cuda=types.SimpleNamespace(is_available=lambda: gpus > 0,
                                                             device_count=lambda: gpus))
    monkeypatch.setitem(sys.modules, "torch", torch)
    return torch


def fake_te(monkeypatch: pytest.MonkeyPatch, installed: bool = True) -> types.ModuleType | None:
    te = types.ModuleType("transformer_engine.pytorch") if installed else None
    monkeypatch.setitem(sys.modules, "transformer_engine", types.ModuleType("transformer_engine"))
    monkeypatch.setitem(sys.modules, "transformer_engine.pytorch", te)  # None: importing it fails
    return te


def skip_of(marks: list[pytest.MarkDecorator]) -> tuple[bool, str]:
    """The module's ``gpu`` mark is there; the condition and reason of its one ``skipif``."""
    assert [m.name for m in marks] == ["gpu", "skipif"]
    return marks[1].args[0], marks[1].kwargs["reason"]


@pytest.mark.parametrize(("gpus", "found", "skips"), [(1, 0, True), (1, 1, False), (2, 0, True), (2, 1, True),
                                                      (2, 2, False), (2, 4, False), (4, 2, True)])
def test_the_tests_skip_on_a_box_of_too_few_gpus(monkeypatch: pytest.MonkeyPatch, gpus: int, found: int,
                                                  skips: bool) -> None:
    torch = fake_torch(monkeypatch, found)
    te = fake_te(monkeypatch)
    module = gpu_module(gpus=gpus)
    assert module.torch is torch and module.te is te
    skip, reason = skip_of(module.marks)
    assert skip is skips
    if gpus == 1:
        assert reason == "no CUDA GPU"
    else:
        words = {2: "two", 4: "four"}[gpus]
        assert reason == f"needs a box of at least {words} CUDA GPUs (this one has {found})"


def test_a_missing_package_skips_the_module_with_its_name(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "torch", None)
    with pytest.raises(pytest.skip.Exception, match=r"^torch is not installed$"):
        gpu_module()
    fake_torch(monkeypatch, 1)
    fake_te(monkeypatch, installed=False)
    with pytest.raises(pytest.skip.Exception, match=r"^Transformer Engine is not installed$"):
        gpu_module()
    # A file that needs PyTorch's CUDA alone runs without Transformer Engine.
    module = gpu_module(transformer_engine=False)
    assert module.te is None and skip_of(module.marks) == (False, "no CUDA GPU")


def test_a_file_needs_at_least_one_gpu() -> None:
    with pytest.raises(ValueError, match=r"gpu_module\(gpus=0\)"):
        gpu_module(gpus=0)
