"""``gemm-bench refresh`` reads the box's stack without importing torch or Transformer Engine.

Fake ``torch`` and ``transformer_engine`` packages are put on ``sys.path``: laid out as the real
ones are (``torch/version.py`` generated with literals, TE's ``__init__.py`` setting
``__version__`` from its distribution's metadata), but raising if imported. The stack read from
their sources must be exactly what importing them gives (:func:`gemm_bench.results.stack.local_stack`,
which reads the attributes a worker records in a result), and anything unusual falls back to
importing.
"""

from __future__ import annotations

import argparse
import importlib
import importlib.util
import sys
from pathlib import Path
from typing import Any

import pytest

from gemm_bench.cli import installed_stack as installed
from gemm_bench.results import stack as stack_module
from gemm_bench.results.schema import METHOD_VERSION

TORCH_VERSION_PY = '''from typing import Optional

__all__ = ['__version__', 'debug', 'cuda', 'git_version', 'hip', 'rocm', 'xpu']
__version__ = '2.11.0+cu130'
debug = False
cuda: Optional[str] = '13.0'
git_version = '0123456789abcdef0123456789abcdef01234567'
hip: Optional[str] = None
rocm: Optional[str] = None
xpu: Optional[str] = None
'''
TORCH_INIT = '''from torch.version import __version__ as __version__
from torch import version as version
'''
TE_INIT = '''import ctypes
from importlib import metadata
from pathlib import Path

import transformer_engine.common  # the real TE loads its libraries (and torch) here

__version__ = str(metadata.version("transformer_engine"))
'''
EXPLODE = 'raise ImportError("the refresh parent must not import this")\n'


def _site(root: Path, *, importable: bool = False, torch_version_py: str = TORCH_VERSION_PY,
          te_init: str = TE_INIT, te_dist: str | None = "2.20.2") -> Path:
    (root / "torch").mkdir(parents=True)
    (root / "torch" / "__init__.py").write_text(("" if importable else EXPLODE) + TORCH_INIT, encoding="utf-8")
    (root / "torch" / "version.py").write_text(torch_version_py, encoding="utf-8")
    (root / "transformer_engine" / "common").mkdir(parents=True)
    (root / "transformer_engine" / "__init__.py").write_text(("" if importable else EXPLODE) + te_init,
                                                             encoding="utf-8")
    (root / "transformer_engine" / "common" / "__init__.py").write_text("", encoding="utf-8")
    if te_dist is not None:
        info = root / f"transformer_engine-{te_dist}.dist-info"
        info.mkdir()
        (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: transformer_engine\nVersion: {te_dist}\n",
                                       encoding="utf-8")
    return root


@pytest.fixture
def on_path(monkeypatch: pytest.MonkeyPatch) -> Any:
    def put(root: Path) -> Path:
        monkeypatch.syspath_prepend(str(root))
        importlib.invalidate_caches()
        return root

    for name in [m for m in sys.modules if m.split(".")[0] in ("torch", "transformer_engine")]:
        monkeypatch.delitem(sys.modules, name)
    yield put
    for name in [m for m in sys.modules if m.split(".")[0] in ("torch", "transformer_engine")]:
        del sys.modules[name]  # the fakes imported by a test
    importlib.invalidate_caches()


def test_the_stack_is_read_without_importing_torch_or_te(tmp_path: Path, on_path: Any,
                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    on_path(_site(tmp_path))
    smi: list[int] = []
    monkeypatch.setattr(stack_module, "driver_version", lambda: smi.append(1) or "580.159.04")
    stack = installed.installed_stack(["method", "transformer_engine", "torch"])
    assert stack == {"method": METHOD_VERSION, "transformer_engine": "2.20.2", "torch": "2.11.0+cu130",
                     "cuda": "13.0", "driver": "unknown"}
    assert not [m for m in sys.modules if m.split(".")[0] in ("torch", "transformer_engine")]
    assert smi == []  # the driver is not compared: nvidia-smi is not asked
    assert installed.installed_stack(["driver"])["driver"] == "580.159.04" and smi == [1]  # type: ignore[index]


def test_the_stack_read_equals_what_importing_gives(tmp_path: Path, on_path: Any,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    on_path(_site(tmp_path, importable=True))
    monkeypatch.setattr(stack_module, "driver_version", lambda: "580.159.04")
    read = installed.installed_stack(list(stack_module.STACK_FIELDS))
    imported = stack_module.local_stack()  # imports the fakes: torch.__version__, TE's __version__
    assert read == imported and read is not None and read["transformer_engine"] == "2.20.2"


@pytest.mark.parametrize("change", ["computed torch version", "TE version set another way", "TE without metadata"])
def test_anything_unusual_falls_back_to_importing(tmp_path: Path, on_path: Any, monkeypatch: pytest.MonkeyPatch,
                                                  change: str) -> None:
    site = {"computed torch version": dict(torch_version_py=TORCH_VERSION_PY.replace(
                "__version__ = '2.11.0+cu130'", "__version__ = '2.11.0' + '+cu130'")),
            "TE version set another way": dict(te_init=TE_INIT.replace(
                'str(metadata.version("transformer_engine"))', "_read_version_file()")),
            "TE without metadata": dict(te_dist=None)}[change]
    on_path(_site(tmp_path, **site))  # type: ignore[arg-type]
    monkeypatch.setattr(stack_module, "local_stack", lambda: {"from": "import"})
    assert installed.installed_stack(["torch"]) == {"from": "import"}


def test_no_stack_without_te(tmp_path: Path, on_path: Any) -> None:
    (tmp_path / "torch").mkdir()
    (tmp_path / "torch" / "__init__.py").write_text(EXPLODE, encoding="utf-8")
    (tmp_path / "torch" / "version.py").write_text(TORCH_VERSION_PY, encoding="utf-8")
    on_path(tmp_path)
    if importlib.util.find_spec("transformer_engine") is not None:
        pytest.skip("Transformer Engine is installed here")
    assert installed.installed_stack(["torch"]) is None  # as local_stack: no TE, no stack to compare


def test_refresh_compares_against_the_stack_read_from_the_sources(tmp_path: Path, on_path: Any,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    from gemm_bench.cli import fleet
    from gemm_bench.cli import refresh as refresh_mod

    on_path(_site(tmp_path))
    seen: dict[str, Any] = {}

    def refresh(srcdir: Path, **kwargs: Any) -> Any:
        seen.update(kwargs)
        return refresh_mod.Outcome()

    monkeypatch.setattr(refresh_mod, "probe_gpus", lambda: [refresh_mod.GpuSlot(0, "NVIDIA H100 80GB HBM3")])
    monkeypatch.setattr(refresh_mod, "refresh", refresh)
    args = argparse.Namespace(stale_when="method,transformer_engine,torch", max_age_days=None, force=False,
                              srcdir=str(tmp_path), device=None, dry_run=True, gpus="all", cache_dir=None,
                              no_studies=False, force_studies=False)
    assert fleet.cmd_refresh(args) == 0
    assert seen["local"] == {"method": METHOD_VERSION, "transformer_engine": "2.20.2", "torch": "2.11.0+cu130",
                             "cuda": "13.0", "driver": "unknown"}
    assert not [m for m in sys.modules if m.split(".")[0] in ("torch", "transformer_engine")]
