"""The box's software stack for ``gemm-bench refresh``, read without importing torch or TE.

Why: the refresh parent needs the stack only to compare it with each cached result's
(``--stale-when``); :func:`gemm_bench.results.stack.local_stack` imported torch and Transformer
Engine for that (TE's own import loads its framework extensions, torch included), some 15-25 s in a
process that never touches the GPU, before the workers import them again to measure.

What it reads must equal what a worker records in a result's provenance, or a fresh result would
look stale (or a stale one fresh): ``torch.__version__`` and ``torch.version.cuda``, and
``transformer_engine.__version__``. So each is read from the very source those attributes come
from, and only where that source says plainly what they are:

* torch: ``torch/version.py``, the generated module that ``torch.__version__`` and
  ``torch.version.cuda`` are (a string literal each, ``cuda`` None without CUDA);
* TE: its ``__init__.py`` sets ``__version__ = str(metadata.version("transformer_engine"))``
  (TE 2.x), which is this distribution's metadata version, read here the same way (or a literal).

Anything else (a build whose ``version.py`` computes its values, a TE that sets ``__version__``
another way) falls back to :func:`~gemm_bench.results.stack.local_stack`, which imports them. The
driver needs ``nvidia-smi``: it is asked only when ``--stale-when`` names it (a field the rule does
not name is never compared, so it stays ``"unknown"``, which the comparison skips anyway).
"""

from __future__ import annotations

import ast
import importlib.metadata
import importlib.util
from collections.abc import Sequence
from pathlib import Path

from gemm_bench.results import stack as stack_module
from gemm_bench.results.schema import METHOD_VERSION

#: How TE's ``__init__.py`` sets ``__version__`` from its distribution's metadata (``ast.unparse``'s
#: spelling), with ``metadata`` imported from ``importlib``.
_TE_VERSION_FROM_METADATA = ("str(metadata.version('transformer_engine'))", "metadata.version('transformer_engine')")


def installed_stack(fields: Sequence[str]) -> dict[str, str] | None:
    """This box's stack in :func:`~gemm_bench.results.stack.local_stack`'s keys and values, or None
    where torch or TE is not installed (as that function says when it cannot import them).

    ``fields``: the staleness rule's (``--stale-when``); the driver is looked up only if named.
    """
    torch_dir, te_dir = _package_dir("torch"), _package_dir("transformer_engine")
    if torch_dir is None or te_dir is None:
        return None
    torch_values = _literals(torch_dir / "version.py", ("__version__", "cuda"))
    te_version = _te_version(te_dir / "__init__.py")
    if torch_values is None or not isinstance(torch_values.get("__version__"), str) or te_version is None:
        return stack_module.local_stack()  # an unusual build: ask the imported modules themselves
    return {
        "method": METHOD_VERSION,
        "transformer_engine": te_version,
        "torch": str(torch_values["__version__"]),
        "cuda": str(torch_values.get("cuda") or "unknown"),
        "driver": stack_module.driver_version() if "driver" in fields else "unknown",
    }


def _package_dir(name: str) -> Path | None:
    """Where ``import name`` would load the package from, without importing it."""
    try:
        spec = importlib.util.find_spec(name)
    except (ImportError, ValueError):
        return None
    locations = list(spec.submodule_search_locations or []) if spec is not None else []
    return Path(locations[0]) if locations else None


def _module(path: Path) -> ast.Module | None:
    """A source file's syntax tree (never executed), or None if it cannot be read or parsed."""
    try:
        return ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    except (OSError, SyntaxError, UnicodeDecodeError, ValueError):
        return None


def _assignments(tree: ast.Module) -> dict[str, ast.expr]:
    """The module-level ``NAME = value`` (and ``NAME: type = value``) of a module, by name."""
    out: dict[str, ast.expr] = {}
    for node in tree.body:
        if isinstance(node, ast.Assign):
            out.update({t.id: node.value for t in node.targets if isinstance(t, ast.Name)})
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name) and node.value is not None:
            out[node.target.id] = node.value
    return out


def _literals(path: Path, names: Sequence[str]) -> dict[str, str | None] | None:
    """``names``' values in ``path`` if each is a string literal or None; else None."""
    tree = _module(path)
    if tree is None:
        return None
    assigned = _assignments(tree)
    out: dict[str, str | None] = {}
    for name in names:
        node = assigned.get(name)
        if not (isinstance(node, ast.Constant) and (node.value is None or isinstance(node.value, str))):
            return None
        out[name] = node.value
    return out


def _te_version(init: Path) -> str | None:
    """``transformer_engine.__version__`` as its ``__init__.py`` sets it, or None if it does not say
    plainly (a literal, or its distribution's metadata version)."""
    tree = _module(init)
    node = _assignments(tree).get("__version__") if tree is not None else None
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    if tree is None or node is None or ast.unparse(node) not in _TE_VERSION_FROM_METADATA \
            or not _imports_metadata(tree):
        return None
    try:
        return str(importlib.metadata.version("transformer_engine"))
    except importlib.metadata.PackageNotFoundError:
        return None  # TE's own import would fail the same way: let the import path say so


def _imports_metadata(tree: ast.Module) -> bool:
    """Whether the module binds ``metadata`` to :mod:`importlib.metadata` at its top level."""
    for node in tree.body:
        if isinstance(node, ast.ImportFrom) and node.module == "importlib" and node.level == 0:
            if any(a.name == "metadata" and a.asname in (None, "metadata") for a in node.names):
                return True
        if isinstance(node, ast.Import) and any(a.name == "importlib.metadata" and a.asname == "metadata"
                                                for a in node.names):
            return True
    return False
