"""The gate every ``tests/test_gpu*.py`` file opens with: skip without PyTorch, a CUDA GPU (or enough of
them) or Transformer Engine, each with its own reason, and mark the module ``gpu``.

A plain module, not a conftest fixture: the GPU files run on a GPU box with ``pytest --noconftest``
(the conftest imports Sphinx's testing fixtures, which a GPU box need not have). They import it as
``tests.gpu_skip``, as other tests import ``tests.helpers``: ``tests`` is a package, so pytest's default
``prepend`` import mode puts the repository root on ``sys.path`` before it imports a test module, with
or without the conftest. Each file calls :func:`gpu_module` where its three header lines were:

    torch, te, pytestmark = gpu_module()                      # one GPU and Transformer Engine
    torch, _, pytestmark = gpu_module(gpus=2)                 # a box of two or more
    torch, _, pytestmark = gpu_module(transformer_engine=False)  # PyTorch's CUDA alone

A missing package skips the whole module at collection (its imports below the call would fail); a
missing GPU skips each test (a ``skipif`` mark), so ``-rs`` lists what a GPU box would run. Without
the conftest nothing else skips a ``gpu`` test; with it, its own gate (``cuda_available``) comes after
these marks, whose reasons pytest reports first.
"""

from __future__ import annotations

from typing import Any, NamedTuple

import pytest

#: Counts of GPUs spelled as the reasons have always read ("a box of at least two CUDA GPUs").
_COUNTS = {2: "two", 3: "three", 4: "four", 8: "eight"}


class GpuModule(NamedTuple):
    """What a GPU test file's header binds: ``torch, te, pytestmark = gpu_module(...)``."""

    torch: Any
    #: ``transformer_engine.pytorch``, or None where the file asked for no Transformer Engine.
    te: Any
    #: The module's ``pytestmark``: ``gpu`` and the skip without enough CUDA GPUs.
    marks: list[pytest.MarkDecorator]


def gpu_module(*, gpus: int = 1, transformer_engine: bool = True) -> GpuModule:
    """Import PyTorch (the module skips without it), mark the module ``gpu`` and skip its tests on a box
    of fewer than ``gpus`` CUDA GPUs, then import ``transformer_engine.pytorch`` where asked (the module
    skips without it). Call it at module level, before the imports that need those packages.

    The order is the one the files always had: PyTorch first (the GPU check needs it), the GPU marks
    before Transformer Engine, so a box with both packages but no GPU lists each test as skipped."""
    __tracebackhide__ = True  # a skip's reported line is the calling file's, not this one's
    if gpus < 1:
        raise ValueError(f"gpu_module(gpus={gpus}): a GPU test file needs at least one GPU")
    torch = pytest.importorskip("torch", reason="torch is not installed")
    if gpus == 1:
        missing, reason = not torch.cuda.is_available(), "no CUDA GPU"
    else:
        found = torch.cuda.device_count() if torch.cuda.is_available() else 0
        missing = found < gpus
        reason = f"needs a box of at least {_COUNTS.get(gpus, str(gpus))} CUDA GPUs (this one has {found})"
    marks = [pytest.mark.gpu, pytest.mark.skipif(missing, reason=reason)]
    te = (pytest.importorskip("transformer_engine.pytorch", reason="Transformer Engine is not installed")
          if transformer_engine else None)
    return GpuModule(torch, te, marks)
